//! What a sweep prints before its table (the banner: tool, backend and why, libraries, sizes,
//! sampling, notes), left out under `-q`.

use super::select::Selection;
use crate::plan::Plan;
use std::collections::BTreeMap;

/// The lines above the table: tool, backend and why, libraries, sizes, sampling, notes.
pub(super) fn lines(
    plan: &Plan,
    selection: &Selection,
    ranks_text: &str,
    libraries: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut lines = vec![
        format!("# ncclprobe {}", crate::buildinfo::version_line()),
        format!(
            "# backend {}: {ranks_text} ({})",
            selection.backend.name(),
            selection.reason
        ),
    ];
    lines.extend(
        libraries
            .iter()
            .map(|(lib, version)| format!("# library {lib}: {version}")),
    );
    let s = &plan.settings;
    let step = match (s.step_factor, s.step_bytes) {
        (_, Some(b)) => format!("{b}(bytes)"),
        (Some(f), _) => format!("{f}(factor)"),
        _ => "1(factor)".into(),
    };
    lines.push(format!(
        "# minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} validation: {}",
        s.min_bytes,
        s.max_bytes,
        s.warmup_iters,
        s.iters_per_sample
            .map(|n| n.to_string())
            .unwrap_or_else(|| "auto".into()),
        s.check_iters
    ));
    let sampling = match s.target_rel_ci {
        Some(t) => format!(
            "adaptive: {}..{} samples per point until the 95% CI of the median is within ±{:.1}% or {}",
            s.min_samples,
            s.max_samples,
            t * 100.0,
            match s.time_budget_s {
                Some(b) => format!("the point's share of a {b} s sweep is spent"),
                None => format!("{} s of measurement", s.point_budget_s),
            }
        ),
        None => format!("fixed: {} samples per point", s.max_samples),
    };
    lines.push(format!(
        "# sampling {sampling}; time = median over samples of the slowest rank"
    ));
    lines.extend(plan.notes.iter().map(|note| format!("# {note}")));
    lines
}

//! `ncclprobe qualify MATRIX.json`: the pairwise gate. Always: the matrix completed, every
//! received byte was right, and no pair (or node) stands out; with flags: every pair's one-way
//! bandwidth at the largest size and latency at the smallest.

use super::options::PairRules;
use crate::documents::matrix::{analysis, Direction, MatrixDocument};
use crate::documents::{Kind, Qualification, RuleResult};
use crate::model::RunStatus;

fn rule(name: &str, unit: &str, passed: bool, message: String) -> RuleResult {
    RuleResult {
        rule: name.into(),
        collective: None,
        size_bytes: None,
        measured: None,
        required: None,
        unit: unit.into(),
        passed,
        message,
        subject: None,
    }
}

/// The worst cell of `direction` at its judged size against a bound.
fn bound_rule(doc: &MatrixDocument, direction: Direction, required: f64) -> Option<RuleResult> {
    let sizes = doc.sizes();
    let size = match direction {
        Direction::Latency => doc
            .measurements
            .iter()
            .filter(|m| m.direction == direction)
            .map(|m| m.size_bytes)
            .min()?,
        _ => *sizes.last()?,
    };
    let cells = doc
        .measurements
        .iter()
        .filter(|m| m.direction == direction && m.size_bytes == size);
    let worst = match direction {
        Direction::Latency => cells.max_by(|a, b| a.time_s.total_cmp(&b.time_s))?,
        _ => cells.min_by(|a, b| a.bw_bytes_per_s.total_cmp(&b.bw_bytes_per_s))?,
    };
    let pair = doc.pair_label(worst.from, worst.to, direction);
    let (name, unit, measured, passed) = match direction {
        Direction::Latency => {
            let us = worst.time_s * 1e6;
            ("max-pair-latency", "us", us, us <= required)
        }
        _ => {
            let gbps = worst.bw_bytes_per_s / 1e9;
            ("min-pair-bw", "GB/s", gbps, gbps >= required)
        }
    };
    let mut r = rule(
        name,
        unit,
        passed,
        format!(
            "worst pair {pair}: {measured:.2} {unit} at {} (required {} {required} {unit})",
            crate::units::format_size(size),
            if direction == Direction::Latency {
                "<="
            } else {
                ">="
            }
        ),
    );
    r.size_bytes = Some(size);
    r.measured = Some(measured);
    r.required = Some(required);
    Some(r)
}

pub fn judge(name: &str, doc: &MatrixDocument, rules: &PairRules) -> Qualification {
    let mut results = vec![
        rule(
            "completed",
            "",
            doc.status == RunStatus::Complete || doc.status == RunStatus::CheckFailed,
            format!("status {:?}", doc.status).to_lowercase(),
        ),
        rule(
            "correct",
            "bytes",
            doc.total_wrong() == 0,
            format!(
                "{} received bytes differ from what was sent",
                doc.total_wrong()
            ),
        ),
    ];
    let outliers = analysis::outliers(doc);
    let slow = analysis::slow_endpoints(doc);
    // One result per slow node (or rank) and per outlier pair, so a CI system lists each as
    // its own test case; one passing result when there is none.
    let by_node = doc.by == crate::documents::matrix::By::Node;
    let endpoint_rule = if by_node {
        "no-slow-node"
    } else {
        "no-slow-rank"
    };
    for (e, r) in &slow {
        let label = &doc.endpoints[*e].label;
        let mut result = rule(
            endpoint_rule,
            "x",
            false,
            format!("{label}: its pairs reach {r:.2}x the median pair"),
        );
        result.measured = Some(*r);
        result.subject = Some(label.clone());
        results.push(result);
    }
    // A pair is one test case whatever the sizes it is slow at: its worst cell speaks for it.
    let mut worst: std::collections::BTreeMap<String, &crate::documents::matrix::Outlier> =
        std::collections::BTreeMap::new();
    for o in &outliers {
        let label = doc.pair_label(o.from, o.to, o.direction);
        let entry = worst.entry(label).or_insert(o);
        let further = match o.direction {
            Direction::Latency => o.ratio_to_median > entry.ratio_to_median,
            _ => o.ratio_to_median < entry.ratio_to_median,
        };
        if further {
            *entry = o;
        }
    }
    for (label, o) in worst {
        let mut result = rule("no-slow-pair", "", false, analysis::describe(doc, o));
        result.subject = Some(label);
        results.push(result);
    }
    if slow.is_empty() && outliers.is_empty() {
        results.push(rule(
            "no-slow-pair",
            "",
            true,
            format!("no pair below {:.2}x the median pair", doc.outlier_fraction),
        ));
    }
    if let Some(gbps) = rules.min_pair_bw {
        results.extend(bound_rule(doc, Direction::OneWay, gbps));
    }
    if let Some(us) = rules.max_pair_latency_us {
        results.extend(bound_rule(doc, Direction::Latency, us));
    }
    let failed: Vec<&RuleResult> = results.iter().filter(|r| !r.passed).collect();
    let summary = if failed.is_empty() {
        format!(
            "PASS: {} rules on {} pairs",
            results.len(),
            doc.endpoints.len()
        )
    } else {
        format!(
            "FAIL: {}",
            failed
                .iter()
                .map(|r| format!("{} ({})", r.rule, r.message))
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    Qualification {
        schema_version: crate::model::SCHEMA_VERSION,
        kind: Kind::Qualification,
        tool: crate::buildinfo::tool_info(),
        run: name.into(),
        run_id: None,
        profile: None,
        passed: failed.is_empty(),
        results,
        attempts: 1,
        avg_busbw_bytes_per_s: Default::default(),
        summary,
    }
}

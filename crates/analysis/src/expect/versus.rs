//! A run against an earlier run, noise-aware: a point changed only when the change is
//! significant from the raw samples (two-sided Mann-Whitney U, normal approximation with tie
//! correction, α = 0.05) AND larger than a noise band. Points only in one run, other rank counts
//! or dtypes are listed as not compared, never matched.

use crate::coll::Collective;
use crate::documents::{BaselineRef, ComparedPoint, Comparison, Kind, SCHEMA_VERSION};
use crate::dtype::Dtype;
use crate::model::{Point, RunRecord};
use crate::units::format_size;
use std::collections::{BTreeMap, BTreeSet};

pub const REGRESSION: &str = "regression";
pub const IMPROVEMENT: &str = "improvement";
pub const WITHIN_NOISE: &str = "within-noise";

/// Significance level of the rank test.
pub const ALPHA: f64 = crate::stats::SIGNIFICANCE;

/// The fewest samples per side for the rank test to be able to reach ALPHA (with 3 and 3 the
/// smallest two-sided p is 0.1).
const MIN_SAMPLES: usize = 4;

use crate::model::PointKey as Key;

fn key(p: &Point) -> Key {
    p.key()
}

/// Two-sided p-value of the Mann-Whitney U test of `a` against `b`.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    if all.iter().any(|(x, _)| !x.is_finite()) {
        return None;
    }
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let (mut rank_a, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let avg = (i + j) as f64 / 2.0 + 1.0;
        rank_a += all[i..=j].iter().filter(|x| x.1).count() as f64 * avg;
        ties += t * t * t - t;
        i = j + 1;
    }
    let (f1, f2, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = rank_a - f1 * (f1 + 1.0) / 2.0;
    let mean = f1 * f2 / 2.0;
    let var = f1 * f2 / 12.0 * ((nf + 1.0) - ties / (nf * (nf - 1.0)));
    if var <= 0.0 {
        return Some(1.0);
    }
    // Continuity correction.
    let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
    Some((2.0 * normal_upper_tail(z)).min(1.0))
}

/// P(Z > z) for a standard normal (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7).
fn normal_upper_tail(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    0.5 * poly * (-x * x).exp()
}

fn describe(keys: &BTreeSet<(Collective, usize, Dtype)>) -> String {
    keys.iter()
        .map(|(c, n, d)| format!("{c} {d} on {n} ranks"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The points of two runs matched by key, and what only one of them has.
struct Matched<'a> {
    old: BTreeMap<Key, &'a Point>,
    new: BTreeMap<Key, &'a Point>,
    not_compared: Vec<String>,
}

/// Match points of the (collective, ranks, type) groups both runs have; Err when none.
fn match_points<'a>(
    before_name: &str,
    before: &'a RunRecord,
    after_name: &str,
    after: &'a RunRecord,
) -> Result<Matched<'a>, String> {
    let groups = |r: &RunRecord| -> BTreeSet<(Collective, usize, Dtype)> {
        r.points
            .iter()
            .map(|p| (p.collective, p.nranks, p.dtype))
            .collect()
    };
    let (gb, ga) = (groups(before), groups(after));
    let common: BTreeSet<_> = gb.intersection(&ga).cloned().collect();
    if common.is_empty() {
        return Err(format!(
            "{before_name} and {after_name} have nothing in common to compare: {before_name} has {}; {after_name} has {}",
            describe(&gb),
            describe(&ga)
        ));
    }
    let mut not_compared = Vec::new();
    let only_b: BTreeSet<_> = gb.difference(&ga).cloned().collect();
    let only_a: BTreeSet<_> = ga.difference(&gb).cloned().collect();
    if !only_b.is_empty() {
        not_compared.push(format!("only in {before_name}: {}", describe(&only_b)));
    }
    if !only_a.is_empty() {
        not_compared.push(format!("only in {after_name}: {}", describe(&only_a)));
    }
    let in_common = |p: &&Point| common.contains(&(p.collective, p.nranks, p.dtype));
    let old: BTreeMap<Key, &Point> = before
        .points
        .iter()
        .filter(in_common)
        .map(|p| (key(p), p))
        .collect();
    let new: BTreeMap<Key, &Point> = after
        .points
        .iter()
        .filter(in_common)
        .map(|p| (key(p), p))
        .collect();
    let mut sizes_only =
        |from: &BTreeMap<Key, &Point>, other: &BTreeMap<Key, &Point>, name: &str| {
            let missing: Vec<String> = from
                .keys()
                .filter(|k| !other.contains_key(*k))
                .map(|k| format!("{} {} {}", k.0, crate::units::format_size(k.5), k.4.name()))
                .collect();
            if !missing.is_empty() {
                not_compared.push(format!("only in {name}: {}", missing.join(", ")));
            }
        };
    sizes_only(&old, &new, before_name);
    sizes_only(&new, &old, after_name);

    Ok(Matched {
        old,
        new,
        not_compared,
    })
}

/// One point of the later run against the same point of the earlier one.
fn judge(k: &Key, b: &Point, a: &Point, before_name: &str, noise: f64) -> ComparedPoint {
    let ratio = a.busbw_bytes_per_s / b.busbw_bytes_per_s;
    let change = ratio - 1.0;
    let p_value = (b.samples_s.len() >= MIN_SAMPLES && a.samples_s.len() >= MIN_SAMPLES)
        .then(|| mann_whitney_p(&b.samples_s, &a.samples_s))
        .flatten();
    // Without samples only the band can decide.
    let significant = p_value.is_none_or(|p| p < ALPHA);
    let verdict = if significant && change < -noise {
        REGRESSION
    } else if significant && change > noise {
        IMPROVEMENT
    } else {
        WITHIN_NOISE
    };
    ComparedPoint {
        collective: k.0,
        dtype: k.1,
        size_bytes: k.5,
        placement: k.4,
        measured_busbw_bytes_per_s: a.busbw_bytes_per_s,
        expected_busbw_bytes_per_s: b.busbw_bytes_per_s,
        expected_low_bytes_per_s: b.busbw_bytes_per_s * (1.0 - noise),
        expected_high_bytes_per_s: b.busbw_bytes_per_s * (1.0 + noise),
        ratio,
        verdict: verdict.into(),
        layer: format!("run {before_name}"),
        nccl_model_busbw_bytes_per_s: None,
        p_value,
    }
}

/// "N of M points changed …", and the largest regression.
fn summary(points: &[ComparedPoint], noise: f64) -> String {
    let count = |v: &str| points.iter().filter(|p| p.verdict == v).count();
    let (reg, imp) = (count(REGRESSION), count(IMPROVEMENT));
    let worst = points
        .iter()
        .filter(|p| p.verdict == REGRESSION)
        .min_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let mut summary = format!(
        "{} of {} points changed: {reg} regression(s), {imp} improvement(s); the rest within noise ({:.0}% band, Mann-Whitney U at alpha {ALPHA}).",
        reg + imp,
        points.len(),
        noise * 100.0
    );
    if let Some(w) = worst {
        summary.push_str(&format!(
            " Largest regression: {} {} {} busbw {} -> {} GB/s ({}x).",
            w.collective,
            crate::units::format_size(w.size_bytes),
            w.placement.name(),
            crate::units::fixed(w.expected_busbw_bytes_per_s / 1e9, 2),
            crate::units::fixed(w.measured_busbw_bytes_per_s / 1e9, 2),
            crate::units::fixed(w.ratio, 2)
        ));
    }
    summary
}

/// Where the change sits, per collective: consecutive sizes with the same verdict as one
/// range, each changed range with its median ratio ("256 KiB-2 MiB: 0.50x regression; 4 MiB
/// and up within 5%"). Out-of-place points, in-place where a collective has none.
fn localised(points: &[ComparedPoint], noise: f64) -> Vec<String> {
    let mut colls: Vec<Collective> = points.iter().map(|p| p.collective).collect();
    colls.sort();
    colls.dedup();
    let mut out = Vec::new();
    for coll in colls {
        let of = |placement| -> Vec<&ComparedPoint> {
            let mut v: Vec<&ComparedPoint> = points
                .iter()
                .filter(|p| p.collective == coll && p.placement == placement)
                .collect();
            v.sort_by_key(|p| p.size_bytes);
            v
        };
        let mut rows = of(crate::coll::Placement::OutOfPlace);
        if rows.is_empty() {
            rows = of(crate::coll::Placement::InPlace);
        }
        if !rows.iter().any(|p| p.verdict != WITHIN_NOISE) {
            continue;
        }
        let mut ranges: Vec<Vec<&ComparedPoint>> = Vec::new();
        for p in rows {
            match ranges.last_mut() {
                Some(r) if r[0].verdict == p.verdict => r.push(p),
                _ => ranges.push(vec![p]),
            }
        }
        let last = ranges.len() - 1;
        let parts: Vec<String> = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (lo, hi) = (r[0].size_bytes, r[r.len() - 1].size_bytes);
                let span = match (lo == hi, i == last && i > 0) {
                    (true, _) => format_size(lo),
                    (false, true) => format!("{} and up", format_size(lo)),
                    (false, false) => format!("{}-{}", format_size(lo), format_size(hi)),
                };
                let mut ratios: Vec<f64> = r.iter().map(|p| p.ratio).collect();
                ratios.sort_by(f64::total_cmp);
                let median = ratios[ratios.len() / 2];
                match r[0].verdict.as_str() {
                    WITHIN_NOISE => format!("{span} within {:.0}%", noise * 100.0),
                    v => format!("{span}: {} {v}", crate::units::ratio(median)),
                }
            })
            .collect();
        out.push(format!("{coll}: {}.", parts.join("; ")));
    }
    out
}

/// Compare `after` with `before`. Err when they have nothing in common.
pub fn against_run(
    before_name: &str,
    before: &RunRecord,
    after_name: &str,
    after: &RunRecord,
    noise: f64,
) -> Result<Comparison, String> {
    let Matched {
        old,
        new,
        not_compared,
    } = match_points(before_name, before, after_name, after)?;
    let points: Vec<ComparedPoint> = old
        .iter()
        .filter(|(k, _)| k.5 > 0)
        .filter_map(|(k, b)| new.get(k).map(|a| judge(k, b, a, before_name, noise)))
        .collect();
    let without_samples = points.iter().filter(|p| p.p_value.is_none()).count();
    if points.is_empty() {
        return Err(format!(
            "{before_name} and {after_name} share no message size: {}",
            not_compared.join("; ")
        ));
    }
    let mut warnings: Vec<String> = crate::expect::compare::record_warnings(before)
        .into_iter()
        .map(|w| format!("{before_name}: {w}"))
        .chain(
            crate::expect::compare::record_warnings(after)
                .into_iter()
                .map(|w| format!("{after_name}: {w}")),
        )
        .collect();
    if without_samples > 0 {
        warnings.push(format!(
            "{without_samples} point(s) have fewer than {MIN_SAMPLES} raw samples on a side (imported runs have one): judged by the {:.0}% noise band alone",
            noise * 100.0
        ));
    }
    let mut summary = summary(&points, noise);
    for line in localised(&points, noise) {
        summary.push(' ');
        summary.push_str(&line);
    }
    Ok(Comparison {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Comparison,
        tool: crate::buildinfo::tool_info(),
        run: after_name.into(),
        run_id: Some(crate::model::check::identity(after)),
        baseline: BaselineRef {
            kind: "run".into(),
            id: before_name.into(),
            title: format!("earlier run {before_name} ({}, {})", before.backend.name, before.started_words()),
            provenance: "measured".into(),
            citation: before_name.into(),
            why: "given as the first file".into(),
        },
        without_overrides: None,
        points,
        not_compared,
        method: format!(
            "a point changed when the two-sided Mann-Whitney U test on the raw samples gives p < {ALPHA} and busbw moved more than {:.0}%; without samples, the band alone",
            noise * 100.0
        ),
        warnings,
        summary,
        stated: Vec::new(),
        nic_readings: Vec::new(),
        assumed: None,
        shape: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mann_whitney_matches_known_values() {
        // Identical samples: no evidence of a shift.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!(mann_whitney_p(&a, &a).unwrap() > 0.9);
        // Completely separated groups of 8: exact p = 2/C(16,8) = 1.55e-4; the normal
        // approximation with continuity correction gives about 9e-4.
        let lo: Vec<f64> = (0..8).map(|i| i as f64).collect();
        let hi: Vec<f64> = (0..8).map(|i| 100.0 + i as f64).collect();
        let p = mann_whitney_p(&lo, &hi).unwrap();
        assert!(p < 0.002 && p > 1e-5, "{p}");
        // Interleaved: not significant.
        let x = [1.0, 3.0, 5.0, 7.0, 9.0, 11.0];
        let y = [2.0, 4.0, 6.0, 8.0, 10.0, 12.0];
        assert!(mann_whitney_p(&x, &y).unwrap() > 0.5);
        assert!(mann_whitney_p(&[], &y).is_none());
    }

    #[test]
    fn the_normal_tail_is_accurate() {
        for (z, p) in [(0.0, 0.5), (1.96, 0.024_998), (3.0, 0.001_350)] {
            assert!((normal_upper_tail(z) - p).abs() < 1e-5, "{z}");
        }
    }
}

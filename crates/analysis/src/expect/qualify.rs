//! The CI gate: rules on a run (from a profile, flags, or a cluster's TOML rules file), each
//! judged to pass or fail with the measured and the required value. The run must have completed
//! and returned correct data whatever else is asked.

use super::choose::Choice;
use crate::coll::{Collective, Placement};
use crate::documents::{BaselineRef, Kind, Qualification, RuleResult, SCHEMA_VERSION};
use crate::model::{Point, RunRecord, RunStatus};
use crate::units::{fixed, format_size, parse_size};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Where a bandwidth rule looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum At {
    /// This size exactly.
    Size(u64),
    /// The median over every size from this one up (a plateau).
    From(u64),
    /// The largest size measured.
    Largest,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    MinBusbw {
        coll: Option<Collective>,
        gbps: f64,
        at: At,
    },
    MaxLatency {
        coll: Option<Collective>,
        us: f64,
        at: Option<u64>,
    },
    MaxSkew {
        coll: Option<Collective>,
        ratio: f64,
    },
    MinRatio {
        coll: Option<Collective>,
        ratio: f64,
    },
}

/// A size in a rules file: bytes, or text with K/M/G suffixes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeSpec {
    Bytes(u64),
    Text(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    collective: Option<String>,
    min_busbw_gbps: Option<f64>,
    max_latency_us: Option<f64>,
    max_skew: Option<f64>,
    min_ratio: Option<f64>,
    at_size: Option<SizeSpec>,
}

/// A cluster's rules file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    profile: Option<String>,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleSpec>,
}

/// Rules read from a file, and the profile it names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSet {
    pub profile: Option<String>,
    pub rules: Vec<Rule>,
}

fn size_of(spec: &SizeSpec) -> Result<u64, String> {
    let size = match spec {
        SizeSpec::Bytes(b) => *b,
        SizeSpec::Text(t) => parse_size(t).map_err(|e| e.to_string())?,
    };
    if size == 0 {
        return Err("at_size must be at least 1 byte: no collective is measured at 0 bytes".into());
    }
    Ok(size)
}

fn collective_of(name: &Option<String>) -> Result<Option<Collective>, String> {
    name.as_deref()
        .map(|n| Collective::parse(n).ok_or_else(|| format!("`{n}` is not a collective")))
        .transpose()
}

fn positive(what: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{what} must be a positive number, not {v}"))
    }
}

impl RuleSet {
    /// Parse a rules file's text; errors name the rule (1-based) and what is wrong.
    pub fn parse(text: &str) -> Result<RuleSet, String> {
        let file: RulesFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut rules = Vec::new();
        for (i, r) in file.rules.iter().enumerate() {
            let at = |e: String| format!("rule {}: {e}", i + 1);
            let coll = collective_of(&r.collective).map_err(at)?;
            let size = r.at_size.as_ref().map(size_of).transpose().map_err(at)?;
            let given = [r.min_busbw_gbps, r.max_latency_us, r.max_skew, r.min_ratio]
                .iter()
                .filter(|v| v.is_some())
                .count();
            if given != 1 {
                return Err(at(
                    "give exactly one of min_busbw_gbps, max_latency_us, max_skew, min_ratio"
                        .into(),
                ));
            }
            let rule = if let Some(v) = r.min_busbw_gbps {
                Rule::MinBusbw {
                    coll,
                    gbps: positive("min_busbw_gbps", v).map_err(at)?,
                    at: size.map(At::Size).unwrap_or(At::Largest),
                }
            } else if let Some(v) = r.max_latency_us {
                Rule::MaxLatency {
                    coll,
                    us: positive("max_latency_us", v).map_err(at)?,
                    at: size,
                }
            } else if let Some(v) = r.max_skew {
                // As --max-skew: an infinite (or NaN) bound is a rule that cannot fail.
                if !(v.is_finite() && v >= 1.0) {
                    return Err(at(format!(
                        "max_skew is slowest/fastest rank, a finite number of at least 1, not {v}"
                    )));
                }
                Rule::MaxSkew { coll, ratio: v }
            } else {
                let v = r.min_ratio.unwrap_or(0.0);
                Rule::MinRatio {
                    coll,
                    ratio: positive("min_ratio", v).map_err(at)?,
                }
            };
            rules.push(rule);
        }
        Ok(RuleSet {
            profile: file.profile,
            rules,
        })
    }
}

/// The rules a profile expands to: each collective's plateau figure times the entry's low band
/// edge, judged over the entry's plateau sizes.
pub fn profile_rules(choice: &Choice, run: &RunRecord) -> Vec<Rule> {
    collectives(run)
        .into_iter()
        .filter_map(|c| {
            let (v, _) = choice.plateau_bytes_per_s(c)?;
            Some(Rule::MinBusbw {
                coll: Some(c),
                gbps: v / 1e9 * choice.entry.band[0],
                at: At::From(choice.entry.plateau_from_bytes),
            })
        })
        .collect()
}

fn collectives(run: &RunRecord) -> Vec<Collective> {
    let mut out: Vec<Collective> = Vec::new();
    for p in &run.points {
        if !out.contains(&p.collective) {
            out.push(p.collective);
        }
    }
    out
}

fn oop(run: &RunRecord, c: Collective) -> Vec<&Point> {
    let mut v: Vec<&Point> = run
        .points
        .iter()
        .filter(|p| p.collective == c && p.placement == Placement::OutOfPlace && p.size_bytes > 0)
        .collect();
    v.sort_by_key(|p| p.size_bytes);
    v
}

fn result(rule: &str, coll: Option<Collective>, size: Option<u64>, unit: &str) -> RuleResult {
    RuleResult {
        rule: rule.into(),
        collective: coll,
        size_bytes: size,
        measured: None,
        required: None,
        unit: unit.into(),
        passed: false,
        message: String::new(),
        subject: None,
    }
}

fn always(run: &RunRecord) -> Vec<RuleResult> {
    let mut out = Vec::new();
    let mut done = result("completed", None, None, "");
    let status = run.status.name();
    done.passed = matches!(run.status, RunStatus::Complete | RunStatus::CheckFailed)
        && !run.points.is_empty();
    done.message = if run.points.is_empty() {
        format!("the run has no measured points (status {status})")
    } else if done.passed {
        format!("the run completed ({} points)", run.points.len())
    } else {
        format!(
            "the run did not complete: status {status}{}",
            run.error
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        )
    };
    out.push(done);
    let oob = run
        .import
        .as_ref()
        .and_then(|i| i.reported_out_of_bounds)
        .unwrap_or(0);
    for c in collectives(run) {
        let pts: Vec<&Point> = run.points.iter().filter(|p| p.collective == c).collect();
        let checked = pts.iter().filter(|p| p.wrong.is_some()).count();
        let wrong: u64 = pts.iter().filter_map(|p| p.wrong).sum::<u64>() + oob;
        let mut r = result("correct", Some(c), None, "elements");
        r.measured = Some(wrong as f64);
        r.required = Some(0.0);
        r.passed = wrong == 0;
        r.message = if wrong > 0 {
            let first = pts.iter().find(|p| p.wrong.unwrap_or(0) > 0);
            format!(
                "#wrong {wrong}, required 0{}",
                first
                    .map(|p| format!(
                        " (first at {} {})",
                        format_size(p.size_bytes),
                        p.placement.name()
                    ))
                    .unwrap_or_else(|| " (the log's out-of-bounds count)".into())
            )
        } else if checked == 0 {
            "#wrong 0: the run did not check results (-c 0 or N/A); correctness not shown".into()
        } else {
            format!("#wrong 0 over {checked} checked points")
        };
        out.push(r);
    }
    out
}

fn targets(run: &RunRecord, coll: Option<Collective>) -> Vec<Collective> {
    match coll {
        Some(c) => vec![c],
        None => collectives(run),
    }
}

fn min_busbw(run: &RunRecord, c: Collective, gbps: f64, at: At) -> RuleResult {
    let pts = oop(run, c);
    let mut r = result("min-busbw", Some(c), None, "GB/s");
    r.required = Some(gbps);
    let largest = pts.last().map(|p| p.size_bytes).unwrap_or(0);
    let measured = match at {
        At::Size(s) => {
            r.size_bytes = Some(s);
            pts.iter()
                .find(|p| p.size_bytes == s)
                .map(|p| super::compare::measured_busbw(p))
        }
        At::Largest => {
            r.size_bytes = pts.last().map(|p| p.size_bytes);
            pts.last().map(|p| super::compare::measured_busbw(p))
        }
        At::From(s) => {
            r.size_bytes = Some(s);
            let mut v: Vec<f64> = pts
                .iter()
                .filter(|p| p.size_bytes >= s)
                .map(|p| super::compare::measured_busbw(p))
                .collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| crate::stats::quantile_sorted(&v, 0.5))
        }
    };
    let Some(m) = measured else {
        r.message = if pts.is_empty() {
            format!("{c} was not measured")
        } else {
            not_measured_at(c, r.size_bytes.unwrap_or(largest), &pts, "--at-size")
        };
        return r;
    };
    let m = m / 1e9;
    r.measured = Some(m);
    r.passed = m >= gbps;
    let at_text = match at {
        At::From(s) => format!("median busbw at {} and above", format_size(s)),
        _ => format!("busbw at {}", format_size(r.size_bytes.unwrap_or(0))),
    };
    r.message = format!(
        "{c} {at_text}: measured {} GB/s, required >= {} GB/s",
        fixed(m, 2),
        fixed(gbps, 2)
    );
    r
}

/// Why a rule found no point at `size`, and what would give it one: a size beyond the
/// measured range is measured by widening the sweep (`-b`/`-e`); one between two measured
/// sizes is not measured by any rerun of the same steps, so the nearest sizes are named.
fn not_measured_at(c: Collective, size: u64, pts: &[&Point], flag: &str) -> String {
    let below = pts.iter().rev().find(|p| p.size_bytes < size);
    let above = pts.iter().find(|p| p.size_bytes > size);
    let wanted = format_size(size);
    // As a flag's value: one shell word (`-e 100KiB`).
    let arg = wanted.replace(' ', "");
    match (below, above) {
        (Some(b), None) => format!(
            "{c} was not measured at {wanted} (largest size {}): rerun with -e {arg}",
            format_size(b.size_bytes)
        ),
        (None, Some(a)) => format!(
            "{c} was not measured at {wanted} (smallest size {}): rerun with -b {arg}",
            format_size(a.size_bytes)
        ),
        (Some(b), Some(a)) => format!(
            "{c} was not measured at {wanted}, which lies between the sizes measured ({} and {}): give {flag} one of them, or sweep with steps that land on {wanted}",
            format_size(b.size_bytes),
            format_size(a.size_bytes)
        ),
        (None, None) => format!("{c} was not measured at {wanted}"),
    }
}

fn max_latency(run: &RunRecord, c: Collective, us: f64, at: Option<u64>) -> RuleResult {
    let pts = oop(run, c);
    let mut r = result("max-latency", Some(c), None, "us");
    r.required = Some(us);
    let p = match at {
        Some(s) => pts.iter().find(|p| p.size_bytes == s).copied(),
        None => pts.first().copied(),
    };
    r.size_bytes = at.or(p.map(|p| p.size_bytes));
    let Some(p) = p else {
        r.message = match r.size_bytes {
            Some(size) if !pts.is_empty() => not_measured_at(c, size, &pts, "--at-size-small"),
            _ => format!("{c} was not measured"),
        };
        return r;
    };
    let m = p.time_s * 1e6;
    r.measured = Some(m);
    r.passed = m <= us;
    r.message = format!(
        "{c} time at {}: measured {} us, required <= {} us",
        format_size(p.size_bytes),
        fixed(m, 1),
        fixed(us, 1)
    );
    r
}

fn max_skew(run: &RunRecord, c: Collective, ratio: f64) -> RuleResult {
    let mut r = result("max-skew", Some(c), None, "x");
    r.required = Some(ratio);
    let worst = oop(run, c)
        .into_iter()
        .filter(|p| p.per_rank_time_s.len() >= 2)
        .filter_map(|p| {
            let lo = p
                .per_rank_time_s
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let hi = p.per_rank_time_s.iter().copied().fold(0.0, f64::max);
            (lo > 0.0).then(|| (hi / lo, p))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let Some((skew, p)) = worst else {
        r.message = format!("{c}: the record has no per-rank times (imported runs do not), so skew cannot be judged");
        return r;
    };
    r.size_bytes = Some(p.size_bytes);
    r.measured = Some(skew);
    r.passed = skew <= ratio;
    r.message = format!(
        "{c} slowest/fastest rank median: worst {}x at {}, required <= {}x",
        fixed(skew, 2),
        format_size(p.size_bytes),
        fixed(ratio, 2)
    );
    r
}

fn min_ratio(run: &RunRecord, c: Collective, ratio: f64, choice: Option<&Choice>) -> RuleResult {
    let mut r = result("min-ratio", Some(c), None, "x");
    r.required = Some(ratio);
    let Some(choice) = choice else {
        r.message = "no expectation to hold the run against: give --profile or --topo".into();
        return r;
    };
    let pts = oop(run, c);
    let largest = pts.last().map(|p| p.size_bytes).unwrap_or(0);
    let floor = super::compare::plateau_floor(largest, choice.entry.plateau_from_bytes);
    let mut ratios: Vec<f64> = pts
        .iter()
        .filter(|p| p.size_bytes >= floor)
        .filter_map(|p| {
            super::compare::expected_at(choice, c, p.size_bytes)
                .map(|e| p.busbw_bytes_per_s / e.busbw_bytes_per_s)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    r.size_bytes = Some(floor);
    if ratios.is_empty() {
        r.message = format!("{c}: {} has no figure for it", choice.entry.id);
        return r;
    }
    let m = crate::stats::quantile_sorted(&ratios, 0.5);
    r.measured = Some(m);
    r.passed = m >= ratio;
    r.message = format!(
        "{c} measured/expected ({}) at {} and above: {}x, required >= {}x",
        choice.entry.id,
        format_size(floor),
        fixed(m, 2),
        fixed(ratio, 2)
    );
    r
}

/// Judge a run. `choice` is the expectation (a profile, or chosen from the facts) that
/// `min-ratio` rules and the profile's rules use.
pub fn qualify(
    run_name: &str,
    run: &RunRecord,
    rules: &[Rule],
    choice: Option<&Choice>,
    profile: Option<BaselineRef>,
    attempts: usize,
) -> Qualification {
    let mut results = always(run);
    for rule in rules {
        match *rule {
            Rule::MinBusbw { coll, gbps, at } => results.extend(
                targets(run, coll)
                    .into_iter()
                    .map(|c| min_busbw(run, c, gbps, at)),
            ),
            Rule::MaxLatency { coll, us, at } => results.extend(
                targets(run, coll)
                    .into_iter()
                    .map(|c| max_latency(run, c, us, at)),
            ),
            Rule::MaxSkew { coll, ratio } => results.extend(
                targets(run, coll)
                    .into_iter()
                    .map(|c| max_skew(run, c, ratio)),
            ),
            Rule::MinRatio { coll, ratio } => results.extend(
                targets(run, coll)
                    .into_iter()
                    .map(|c| min_ratio(run, c, ratio, choice)),
            ),
        }
    }
    let (passed, summary) = conclude(&results, attempts);
    let mut avg = BTreeMap::new();
    for h in &run.headlines {
        avg.entry(h.collective.name().to_string())
            .or_insert(h.avg_busbw_bytes_per_s);
    }
    Qualification {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Qualification,
        tool: crate::buildinfo::tool_info(),
        run: run_name.into(),
        run_id: Some(crate::model::check::identity(run)),
        profile,
        passed,
        results,
        attempts: attempts.max(1),
        avg_busbw_bytes_per_s: avg,
        summary,
    }
}

/// Whether every result passed, and the one-line summary saying so.
pub fn conclude(results: &[RuleResult], attempts: usize) -> (bool, String) {
    let failed: Vec<&RuleResult> = results.iter().filter(|r| !r.passed).collect();
    let passed = failed.is_empty();
    let retries = match attempts {
        0 | 1 => String::new(),
        n => format!(" after {} retr{}", n - 1, if n == 2 { "y" } else { "ies" }),
    };
    if results.is_empty() {
        // A gate never passes on nothing.
        return (
            false,
            "NOT JUDGED: no rule applied to the run (give --profile, --min-busbw or --rules)"
                .into(),
        );
    }
    let summary = if passed {
        format!("PASS{retries}: all {} rules hold", results.len())
    } else {
        format!(
            "FAIL{retries}: {} of {} rules failed: {}",
            failed.len(),
            results.len(),
            failed
                .iter()
                .map(|r| r.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    (passed, summary)
}

/// The sizes a failed rule points at, per collective: what `sweep --retries` measures again.
pub fn failed_sizes(q: &Qualification) -> Vec<(Collective, u64)> {
    let mut out: Vec<(Collective, u64)> = q
        .results
        .iter()
        .filter(|r| {
            !r.passed
                && matches!(
                    r.rule.as_str(),
                    "min-busbw" | "max-latency" | "min-ratio" | "max-skew"
                )
        })
        .filter_map(|r| Some((r.collective?, r.size_bytes?)))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_file_reads_and_bad_rules_are_named() {
        let ok = RuleSet::parse(
            "profile = \"a100-sxm4-nvswitch-8\"\n[[rule]]\ncollective = \"all_reduce\"\nmin_busbw_gbps = 220\nat_size = \"1G\"\n[[rule]]\nmax_latency_us = 30\nat_size = 8\n[[rule]]\nmax_skew = 1.2\n",
        )
        .unwrap();
        assert_eq!(ok.profile.as_deref(), Some("a100-sxm4-nvswitch-8"));
        assert_eq!(
            ok.rules[0],
            Rule::MinBusbw {
                coll: Some(Collective::AllReduce),
                gbps: 220.0,
                at: At::Size(1 << 30)
            }
        );
        assert_eq!(
            ok.rules[1],
            Rule::MaxLatency {
                coll: None,
                us: 30.0,
                at: Some(8)
            }
        );
        let two = RuleSet::parse("[[rule]]\nmin_busbw_gbps = 1\nmax_skew = 2\n").unwrap_err();
        assert!(
            two.contains("rule 1") && two.contains("exactly one"),
            "{two}"
        );
        let coll = RuleSet::parse("[[rule]]\ncollective = \"allreduce_x\"\nmin_busbw_gbps = 1\n")
            .unwrap_err();
        assert!(coll.contains("not a collective"), "{coll}");
        let neg = RuleSet::parse("[[rule]]\nmin_busbw_gbps = -3\n").unwrap_err();
        assert!(neg.contains("positive"), "{neg}");
        assert!(RuleSet::parse("[[rule]]\nmin_busbw = 3\n").is_err());
    }
}

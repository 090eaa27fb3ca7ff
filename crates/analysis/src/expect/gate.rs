//! A gate as commands set it up: the rules flags, a rules file and a profile give, judged on a
//! run (`qualify`, and `sweep --qualify` after measuring and between retries).

use super::options::{Expectation as ExpectationArgs, Rules as RuleArgs};
use super::setup::choice;
use crate::documents::Qualification;
use crate::exit::Failure;
use crate::expect::compare::baseline_ref;
use crate::expect::qualify::{self, At, Rule, RuleSet};
use crate::expect::Choice;
use crate::model::RunRecord;
use crate::units::parse_size;

/// The rules the flags and the rules file give, and the profile either names.
pub fn rules_from(
    args: &RuleArgs,
    profile: &Option<String>,
) -> Result<(Vec<Rule>, Option<String>), Failure> {
    let mut rules = Vec::new();
    let mut profile = profile.clone();
    let size = |flag: &str, v: &Option<String>| -> Result<Option<u64>, Failure> {
        v.as_deref()
            .map(|t| match parse_size(t) {
                Ok(0) => Err(Failure::usage(format!(
                    "{flag}: 0 bytes is no size a collective is measured at; give a measured size, e.g. {flag} 1M"
                ))),
                Ok(size) => Ok(size),
                Err(e) => Err(Failure::usage(format!("{flag}: {e}"))),
            })
            .transpose()
    };
    if let Some(gbps) = args.min_busbw {
        crate::flags::positive("--min-busbw", gbps, "GB/s")?;
        let at = size("--at-size", &args.at_size)?
            .map(At::Size)
            .unwrap_or(At::Largest);
        rules.push(Rule::MinBusbw {
            coll: None,
            gbps,
            at,
        });
    }
    if let Some(us) = args.max_latency_us {
        crate::flags::positive("--max-latency-us", us, "us")?;
        rules.push(Rule::MaxLatency {
            coll: None,
            us,
            at: size("--at-size-small", &args.at_size_small)?,
        });
    }
    if let Some(ratio) = args.max_skew {
        if !(ratio.is_finite() && ratio >= 1.0) {
            return Err(Failure::usage(format!(
                "--max-skew: slowest/fastest is at least 1, not {ratio}"
            )));
        }
        rules.push(Rule::MaxSkew { coll: None, ratio });
    }
    if let Some(ratio) = args.min_ratio {
        crate::flags::positive("--min-ratio", ratio, "x")?;
        rules.push(Rule::MinRatio { coll: None, ratio });
    }
    if let Some(path) = &args.rules {
        let input =
            crate::import::text::Input::open(path).map_err(crate::import::input::input_failure)?;
        let name = input.name.clone();
        let bytes = input
            .bytes("a TOML rules file")
            .map_err(crate::import::input::input_failure)?;
        let set = RuleSet::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|e| Failure::usage(format!("{name}: {e}")))?;
        if profile.is_none() {
            profile = set.profile;
        }
        rules.extend(set.rules);
    }
    Ok((rules, profile))
}

/// Judge a run against flags, a rules file and a profile (or, with none of them, the
/// expectation its facts point to).
pub fn judge(
    name: &str,
    run: &RunRecord,
    log: Option<&crate::import::nccl_log::LogFacts>,
    args: &RuleArgs,
    expectation: &ExpectationArgs,
    attempts: usize,
    choose_when_empty: bool,
) -> Result<Qualification, Failure> {
    let (mut rules, profile) = rules_from(args, &expectation.profile)?;
    let gates = gates_from(args)?;
    let health = health_gates_from(args)?;
    let mut exp = expectation.clone();
    exp.profile = profile.clone();
    let wants_ratio = rules.iter().any(|r| matches!(r, Rule::MinRatio { .. }));
    let only_always =
        rules.is_empty() && gates.is_empty() && health.is_empty() && choose_when_empty;
    // An expectation is needed for a profile, for min-ratio, and when nothing else is asked.
    let chosen: Option<Choice> = if profile.is_some() || wants_ratio || only_always {
        Some(choice(run, log, &exp)?)
    } else {
        None
    };
    if let Some(c) = &chosen {
        if profile.is_some() || only_always {
            rules.extend(qualify::profile_rules(c, run));
        }
    }
    let mut q = qualify::qualify(
        name,
        run,
        &rules,
        chosen.as_ref(),
        chosen.as_ref().map(baseline_ref),
        attempts,
    );
    if !gates.is_empty() || !health.is_empty() {
        q.results
            .extend(super::fallback_gate::judge(&gates, run, log));
        q.results.extend(super::health_gate::judge(&health, run));
        (q.passed, q.summary) = qualify::conclude(&q.results, attempts);
    }
    Ok(q)
}

/// `--require` and `--forbid`, read.
fn gates_from(args: &RuleArgs) -> Result<Vec<super::fallback_gate::Gate>, Failure> {
    use super::fallback_gate::Gate;
    let required = args.require.iter().map(|t| Gate::require(t));
    let forbidden = args.forbid.iter().map(|t| Gate::forbid(t));
    required
        .chain(forbidden)
        .collect::<Result<Vec<_>, String>>()
        .map_err(Failure::usage)
}

/// `--max-ecc-uncorrected` and `--require-link-width`, read.
fn health_gates_from(args: &RuleArgs) -> Result<Vec<super::health_gate::HealthGate>, Failure> {
    use super::health_gate::HealthGate;
    let ecc = args.max_ecc_uncorrected.map(HealthGate::MaxEccUncorrected);
    let width = args
        .require_link_width
        .as_deref()
        .map(HealthGate::link_width)
        .transpose()
        .map_err(Failure::usage)?;
    Ok(ecc.into_iter().chain(width).collect())
}

/// With one rank no link is measured: busbw is 0 by definition and there is no skew between
/// ranks, so a gate on either (or on a profile's busbw) cannot be met or judged: refused
/// (exit 2) naming the rules, by `qualify` and by a sweep's first rank to know (before it
/// measures).
pub fn one_rank(rules: &RuleArgs, profile: &Option<String>) -> Result<(), Failure> {
    let (rules, profile) = rules_from(rules, profile)?;
    let mut cannot: Vec<String> = rules
        .iter()
        .filter_map(|r| match r {
            Rule::MinBusbw { .. } => Some("a minimum busbw".to_string()),
            Rule::MaxSkew { .. } => Some("a maximum skew".to_string()),
            Rule::MinRatio { .. } => Some("a minimum ratio to the expectation".to_string()),
            Rule::MaxLatency { .. } => None,
        })
        .collect();
    if let Some(p) = profile {
        cannot.push(format!("the profile {p}"));
    }
    cannot.dedup();
    match cannot.is_empty() {
        true => Ok(()),
        false => Err(Failure::usage(format!(
            "one rank: no interconnect measured (busbw is 0 by definition, and one rank has no skew): {} cannot apply; run with 2 or more ranks",
            cannot.join(", ")
        ))),
    }
}

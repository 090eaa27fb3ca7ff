//! Gates a sweep cannot judge, refused before it measures: a shipped profile on a backend
//! that moves host memory, and rules on a link when there is one rank.

use super::select::Backend;
use crate::exit::Failure;

/// A shipped profile describes NCCL on GPUs (`ncclprobe baselines`); the host and MPI backends
/// move host memory, which none of them describes: refused before measuring.
pub fn profile_needs_nccl(id: &str, backend: Backend) -> Failure {
    let what = crate::expect::shipped()
        .get(id)
        .map(|e| e.title.clone())
        .unwrap_or_default();
    Failure::usage(format!(
        "--qualify {id} ({what}) describes NCCL on GPUs; the {} backend moves host memory, which no shipped profile describes: run with --backend nccl on that machine, or gate with rules (--min-busbw, --max-latency-us, --rules)",
        backend.name()
    ))
}

/// With one rank no link is measured: busbw is 0 by definition and there is no skew between
/// ranks, so a gate on either (or on a profile's busbw) cannot be met or judged. Refused by
/// the rank that knows it first (before measuring), naming the rules.
pub fn one_rank_gate(gate: &crate::expect::options::GateRules) -> Result<(), Failure> {
    if !gate.requested() {
        return Ok(());
    }
    let (rules, profile) = crate::expect::gate::rules_from(&gate.rules, &gate.qualify)?;
    use crate::expect::qualify::Rule;
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

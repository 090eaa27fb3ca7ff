//! `qualify --against-fleet`: one run held against the latest runs of its SKU's other nodes in
//! the store. It fails where it is significantly below them at the sizes that matter (the same
//! ratio, robust z and rank test as `fleet`, false discoveries controlled over the run's cells),
//! and fails too when the store has too few peers to say: a gate never passes a rule it did not
//! check.

use super::entry::{self, Stated};
use super::fleet_checks::nodes_of;
use super::fleet_stats::{bh_threshold, mad, median, robust_z, slower_than_peers_p};
use super::{HistoryError, Store};
use crate::documents::fleet::FleetRules;
use crate::documents::RuleResult;
use crate::model::{Point, RunRecord};
use crate::units::format_size;
use std::collections::HashMap;
use std::sync::Arc;

/// (collective, dtype, nranks, size).
type PointKey = (Arc<str>, Arc<str>, i64, i64);

/// Peer runs whose samples are pooled.
const POOL_RUNS: usize = 64;

/// What holding a run against its fleet gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Against {
    /// One result per failing size, or one passing summary.
    Judged(Vec<RuleResult>),
    /// Nothing could be judged (too few peers, no size they measured too): the rule as a
    /// failed result, for a gate that has other rules, and why in its message.
    NotJudged(RuleResult),
}

/// `run` against its SKU's other nodes in `store`; see the module comment.
pub fn against_fleet(
    store: &mut Store,
    run: &RunRecord,
    stated: &Stated,
    rules: &FleetRules,
) -> Result<Against, HistoryError> {
    let me = entry::from_run(run, "qualify", None, stated).map_err(HistoryError::Document)?;
    let all = store.runs_since(f64::NEG_INFINITY, Some(&me.identity.sku))?;
    let nodes = nodes_of(&all);
    let peer_runs: Vec<i64> = nodes
        .iter()
        .filter(|n| n.name != me.identity.node)
        .filter_map(|n| n.latest.map(|r| r.id))
        .collect();
    let fail = |message: String| RuleResult {
        rule: "fleet-peers".into(),
        collective: None,
        size_bytes: None,
        measured: Some(peer_runs.len() as f64),
        required: Some(rules.min_peers as f64),
        unit: "nodes".into(),
        passed: false,
        message,
        subject: None,
    };
    if peer_runs.len() < rules.min_peers {
        return Ok(Against::NotJudged(fail(format!(
            "{} holds {} other node(s) of {} with a measured run; --against-fleet needs {} to judge against",
            store.location.display(),
            peer_runs.len(),
            me.identity.sku,
            rules.min_peers
        ))));
    }
    let mut values: HashMap<PointKey, Vec<f64>> = HashMap::new();
    for p in store.points_of(&peer_runs)? {
        if p.busbw.is_finite() && p.busbw > 0.0 {
            values
                .entry((p.collective, p.dtype, p.nranks, p.size_bytes))
                .or_default()
                .push(p.busbw);
        }
    }
    let stride = peer_runs.len().div_ceil(POOL_RUNS).max(1);
    let pool_runs: Vec<i64> = peer_runs.iter().step_by(stride).copied().collect();
    let samples = store.samples_of(&pool_runs)?;
    let mut judged = Vec::new();
    for p in run.points.iter().filter(|p| judged_point(p, rules)) {
        let k: PointKey = (
            Arc::from(p.collective.name()),
            Arc::from(p.dtype.name()),
            p.nranks as i64,
            p.size_bytes as i64,
        );
        let Some(v) = values.get(&k).filter(|v| v.len() >= rules.min_peers) else {
            continue;
        };
        let m = median(v);
        let (ratio, z) = (
            p.busbw_bytes_per_s / m,
            robust_z(p.busbw_bytes_per_s, m, mad(v, m)),
        );
        let pv = (ratio < rules.min_ratio && z <= rules.max_z)
            .then(|| {
                let mut pool: Vec<f64> = pool_runs
                    .iter()
                    .filter_map(|r| samples.get(&(*r, k.0.clone(), k.1.clone(), k.2, k.3)))
                    .flatten()
                    .copied()
                    .collect();
                pool.sort_by(f64::total_cmp);
                slower_than_peers_p(&p.samples_s, &pool)
            })
            .flatten();
        judged.push((p, m, v.len(), ratio, z, pv));
    }
    if judged.is_empty() {
        let why = nothing_judged(run, rules, &me.identity.sku);
        return Ok(Against::NotJudged(RuleResult {
            measured: Some(0.0),
            required: Some(1.0),
            unit: "sizes judged".into(),
            ..fail(why)
        }));
    }
    let ps: Vec<f64> = judged.iter().filter_map(|j| j.5).collect();
    let cut = bh_threshold(&ps, judged.len(), rules.fdr);
    let mut out: Vec<RuleResult> = judged
        .iter()
        .filter(|j| j.5.zip(cut).is_some_and(|(p, c)| p <= c))
        .map(|(p, m, n, ratio, z, pv)| RuleResult {
            rule: "fleet-peers".into(),
            collective: Some(p.collective),
            size_bytes: Some(p.size_bytes),
            measured: Some(p.busbw_bytes_per_s / 1e9),
            required: Some(rules.min_ratio * m / 1e9),
            unit: "GB/s".into(),
            passed: false,
            message: format!(
                "{} {}: {:.1} GB/s is {:.0}% of the median of {n} peers ({:.1} GB/s), z {z:.1}, rank test p {:.1e}",
                p.collective,
                format_size(p.size_bytes),
                p.busbw_bytes_per_s / 1e9,
                ratio * 100.0,
                m / 1e9,
                pv.unwrap_or(1.0)
            ),
subject: None,
})
        .collect();
    if out.is_empty() {
        let worst = judged
            .iter()
            .min_by(|a, b| a.3.total_cmp(&b.3))
            .map(|j| (j.0, j.3, j.4));
        if let Some((p, ratio, z)) = worst {
            out.push(RuleResult {
                rule: "fleet-peers".into(),
                collective: Some(p.collective),
                size_bytes: Some(p.size_bytes),
                measured: Some(ratio),
                required: Some(rules.min_ratio),
                unit: "x".into(),
                passed: true,
                message: format!(
                    "not significantly below its {} peers at any of {} sizes judged (worst: {} {} at {:.0}% of their median, z {z:.1})",
                    me.identity.sku,
                    judged.len(),
                    p.collective,
                    format_size(p.size_bytes),
                    ratio * 100.0
                ),
subject: None,
});
        }
    }
    Ok(Against::Judged(out))
}

/// Why no size of `run` could be held against its peers.
fn nothing_judged(run: &RunRecord, rules: &FleetRules, sku: &str) -> String {
    let largest = run.points.iter().map(|p| p.size_bytes).max().unwrap_or(0);
    if largest < rules.min_size_bytes {
        format!(
            "the run's largest size is {}, below --fleet-min-size {} (latency-bound sizes are not judged against peers)",
            format_size(largest),
            format_size(rules.min_size_bytes)
        )
    } else {
        format!(
            "no size of this run from {} up was measured by {} peers of {sku} (with the same collective, type and rank count)",
            format_size(rules.min_size_bytes),
            rules.min_peers,
        )
    }
}

fn judged_point(p: &Point, rules: &FleetRules) -> bool {
    p.placement == crate::coll::Placement::OutOfPlace
        && p.size_bytes >= rules.min_size_bytes
        && p.busbw_bytes_per_s.is_finite()
        && p.busbw_bytes_per_s > 0.0
}

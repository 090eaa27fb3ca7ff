//! `fleet`: each node of a SKU against its peers (ratio to the peers' median, robust z-score,
//! a rank test of its raw samples against theirs) and against its own past (its latest run
//! against its last passing run, and the trend of its plateau), its links against the fleet's
//! links and its health counters, ending in a drain list.
//!
//! A cell fails only when the effect is large (ratio, z) *and* the test is a discovery under
//! Benjamini-Hochberg over every cell judged: a fleet of 10,000 nodes at 30 sizes is 300,000
//! tests, and a plain p < 0.05 would drain 15,000 healthy cells.

use super::fleet_checks::{
    bad_links, drifts, health_reasons, nodes_of, trends_for, Node, TREND_ALL_UP_TO,
};
use super::fleet_stats::{bh_threshold, mad, median, robust_z, slower_than_peers_p};
use super::read::PointLite;
use super::{HistoryError, Store};
use crate::documents::fleet::*;
use crate::documents::Kind;
use std::collections::{BTreeMap, HashMap};

/// Peer runs whose samples make the pool a node's samples are ranked against (per SKU).
const POOL_RUNS: usize = 64;

/// What `fleet` reads and judges by.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOptions {
    pub filters: FleetFilters,
    pub since_unix: f64,
    pub rules: FleetRules,
}

/// (sku, collective, dtype, nranks, size), borrowed from the points read.
pub(super) type Key<'a> = (&'a str, &'a str, &'a str, i64, i64);

fn key<'a>(sku: &'a str, p: &'a PointLite) -> Key<'a> {
    (sku, &p.collective, &p.dtype, p.nranks, p.size_bytes)
}

/// Judges the fleet in `store`.
pub fn analyse(store: &mut Store, opts: &FleetOptions) -> Result<FleetDocument, HistoryError> {
    let all = store.runs_since(opts.since_unix, opts.filters.sku.as_deref())?;
    let nodes = nodes_of(&all);
    let latest_ids: Vec<i64> = nodes
        .iter()
        .filter_map(|n| n.latest.map(|r| r.id))
        .collect();
    let points = store.points_of(&latest_ids)?;
    let mut by_run: HashMap<i64, Vec<PointLite>> = HashMap::new();
    for p in points {
        by_run.entry(p.run_id).or_default().push(p);
    }
    let run_sku: HashMap<i64, &str> = nodes
        .iter()
        .filter_map(|n| n.latest.map(|r| (r.id, n.sku.as_str())))
        .collect();
    let peers = peer_stats(&by_run, &run_sku);
    let rules = &opts.rules;
    let mut doc = FleetDocument {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Fleet,
        tool: crate::buildinfo::tool_info(),
        store: store.location.display(),
        generated_at: crate::model::now_rfc3339(),
        filters: opts.filters.clone(),
        rules: rules.clone(),
        skus: sku_groups(&nodes),
        drain: Vec::new(),
        peers: peers
            .iter()
            .map(|(k, (n, m, d))| PeerStat {
                sku: k.0.to_string(),
                collective: k.1.to_string(),
                dtype: k.2.to_string(),
                nranks: k.3 as usize,
                size_bytes: k.4 as u64,
                n: *n,
                median_busbw_bytes_per_s: *m,
                mad_busbw_bytes_per_s: *d,
            })
            .collect(),
        nodes: Vec::new(),
        notes: Vec::new(),
    };
    let below = below_peers(store, &nodes, &by_run, &peers, rules)?;
    let window = (opts.since_unix, opts.filters.sku.as_deref());
    let drift = drifts(store, &nodes, &by_run, rules, window)?;
    let links = bad_links(store, &nodes, rules)?;
    let mut reasons: BTreeMap<String, Vec<Reason>> = BTreeMap::new();
    for (node, r) in below.reasons.into_iter().chain(drift.reasons).chain(links) {
        reasons.entry(node).or_default().push(r);
    }
    for n in &nodes {
        for r in health_reasons(n) {
            reasons.entry(n.name.clone()).or_default().push(r);
        }
        if let Some(l) = n.latest.filter(|l| l.passed == Some(false)) {
            let failed = store.failed_gates(l.id)?;
            reasons.entry(n.name.clone()).or_default().push(Reason {
                check: "gate".into(),
                what: "its latest run failed its gate".into(),
                evidence: if failed.is_empty() {
                    "the run's verdict is fail".into()
                } else {
                    failed.join("; ")
                },
                since: Some(l.started_at()),
            });
        }
    }
    let trends = trends_for(store, &nodes, &reasons)?;
    below_since(&mut reasons, &trends, &nodes, &peers, rules);
    for n in &nodes {
        if opts.filters.node.as_deref().is_some_and(|f| f != n.name) {
            continue;
        }
        let Some(latest) = n.latest else { continue };
        let drain = reasons.contains_key(&n.name);
        doc.nodes.push(NodeStanding {
            node: n.name.clone(),
            sku: n.sku.clone(),
            runs: n.runs.len(),
            latest_at: latest.started_at(),
            standings: below.standings.get(&n.name).cloned().unwrap_or_default(),
            drift: drift.by_node.get(&n.name).cloned(),
            trend: if drain || nodes.len() <= TREND_ALL_UP_TO {
                trends.get(&n.name).cloned().unwrap_or_default()
            } else {
                Vec::new()
            },
            drain,
        });
    }
    for (node, rs) in reasons {
        if opts.filters.node.as_deref().is_some_and(|f| f != node) {
            continue;
        }
        let sku = nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.sku.clone())
            .unwrap_or_default();
        let since = rs.iter().filter_map(|r| r.since.clone()).min();
        doc.drain.push(DrainEntry {
            node,
            sku,
            since,
            reasons: rs,
        });
    }
    doc.drain.sort_by(|a, b| {
        b.reasons
            .len()
            .cmp(&a.reasons.len())
            .then(a.node.cmp(&b.node))
    });
    doc.notes.push(format!(
        "{} cells judged against peers, {} below them after false-discovery control (rate {}); {} cells of nodes' latest runs against their baselines",
        below.judged, below.failed, rules.fdr, drift.judged
    ));
    if nodes.len() > TREND_ALL_UP_TO {
        doc.notes.push(format!(
            "trend lines kept for drained nodes only ({} nodes in the fleet)",
            nodes.len()
        ));
    }
    Ok(doc)
}

/// When a node fell below its peers: the first run of the streak, up to its latest, whose
/// plateau is under the rule's fraction of the peers' bus bandwidth at their largest size.
fn below_since(
    reasons: &mut BTreeMap<String, Vec<Reason>>,
    trends: &HashMap<String, Vec<TrendPoint>>,
    nodes: &[Node<'_>],
    peers: &BTreeMap<Key<'_>, (usize, f64, f64)>,
    rules: &FleetRules,
) {
    for n in nodes {
        let (Some(rs), Some(trend)) = (reasons.get_mut(&n.name), trends.get(&n.name)) else {
            continue;
        };
        let Some(r) = rs.iter_mut().find(|r| r.check == "below-peers") else {
            continue;
        };
        // The peers' median at the largest size of each collective.
        let mut top: HashMap<&str, (i64, f64)> = HashMap::new();
        for (k, (_, m, _)) in peers.iter().filter(|(k, _)| k.0 == n.sku) {
            if top.get(k.1).is_none_or(|t| t.0 < k.4) {
                top.insert(k.1, (k.4, *m));
            }
        }
        let low = |t: &TrendPoint| {
            top.get(t.collective.as_str())
                .is_some_and(|(_, m)| t.plateau_busbw_bytes_per_s < rules.min_ratio * m)
        };
        let mut since = None;
        for t in trend.iter().rev() {
            if !low(t) {
                break;
            }
            since = Some(t.at.clone());
        }
        if since.is_some() {
            r.since = since;
        }
    }
}

fn sku_groups(nodes: &[Node<'_>]) -> Vec<SkuGroup> {
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.latest.is_some()) {
        let e = by.entry(n.sku.as_str()).or_default();
        e.0 += 1;
        e.1 += n.runs.len();
    }
    by.into_iter()
        .map(|(sku, (nodes, runs))| SkuGroup {
            sku: sku.to_string(),
            nodes,
            runs,
        })
        .collect()
}

/// Per key: (n, median, MAD) of the nodes' bus bandwidth in their latest runs.
fn peer_stats<'a>(
    by_run: &'a HashMap<i64, Vec<PointLite>>,
    run_sku: &HashMap<i64, &'a str>,
) -> BTreeMap<Key<'a>, (usize, f64, f64)> {
    let mut values: BTreeMap<Key<'a>, Vec<f64>> = BTreeMap::new();
    for (run, points) in by_run {
        let sku = run_sku.get(run).copied().unwrap_or("");
        for p in points
            .iter()
            .filter(|p| p.busbw.is_finite() && p.busbw > 0.0)
        {
            values.entry(key(sku, p)).or_default().push(p.busbw);
        }
    }
    values
        .into_iter()
        .map(|(k, v)| {
            let m = median(&v);
            (k, (v.len(), m, mad(&v, m)))
        })
        .collect()
}

struct Below {
    reasons: Vec<(String, Reason)>,
    standings: HashMap<String, Vec<Standing>>,
    judged: usize,
    failed: usize,
}

/// Cells where a node is far below its peers, tested on raw samples.
fn below_peers(
    store: &mut Store,
    nodes: &[Node<'_>],
    by_run: &HashMap<i64, Vec<PointLite>>,
    peers: &BTreeMap<Key<'_>, (usize, f64, f64)>,
    rules: &FleetRules,
) -> Result<Below, HistoryError> {
    let mut judged = 0;
    let mut worst: HashMap<String, BTreeMap<String, Standing>> = HashMap::new();
    let mut candidates: Vec<(usize, &PointLite, f64, f64)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let Some(latest) = n.latest else { continue };
        for p in by_run.get(&latest.id).into_iter().flatten() {
            let Some(&(count, m, d)) = peers.get(&key(&n.sku, p)) else {
                continue;
            };
            if (p.size_bytes as u64) < rules.min_size_bytes || count < rules.min_peers || m <= 0.0 {
                continue;
            }
            judged += 1;
            let (ratio, z) = (p.busbw / m, robust_z(p.busbw, m, d));
            let s = Standing {
                collective: p.collective.to_string(),
                size_bytes: p.size_bytes as u64,
                busbw_bytes_per_s: p.busbw,
                ratio,
                z,
                p: None,
            };
            let slot = worst.entry(n.name.clone()).or_default();
            if slot.get(&*p.collective).is_none_or(|w| w.ratio > ratio) {
                slot.insert(p.collective.to_string(), s);
            }
            if ratio < rules.min_ratio && z <= rules.max_z {
                candidates.push((i, p, ratio, z));
            }
        }
    }
    // Samples: the candidates' runs, and a pool of peer runs per SKU.
    let mut pool_runs: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for n in nodes {
        if let Some(l) = n.latest {
            pool_runs.entry(n.sku.as_str()).or_default().push(l.id);
        }
    }
    for runs in pool_runs.values_mut() {
        let stride = runs.len().div_ceil(POOL_RUNS).max(1);
        *runs = runs.iter().step_by(stride).copied().collect();
    }
    let mut wanted: Vec<i64> = pool_runs.values().flatten().copied().collect();
    wanted.extend(
        candidates
            .iter()
            .filter_map(|(i, ..)| nodes[*i].latest.map(|l| l.id)),
    );
    wanted.sort_unstable();
    wanted.dedup();
    let samples = if candidates.is_empty() {
        HashMap::new()
    } else {
        store.samples_of(&wanted)?
    };
    let mut tested = Vec::new();
    for (i, p, ratio, z) in &candidates {
        let n = &nodes[*i];
        let own_run = n.latest.map_or(0, |l| l.id);
        let sk = |run: i64| super::read::sample_key(run, p);
        let mut pool: Vec<f64> = pool_runs
            .get(n.sku.as_str())
            .into_iter()
            .flatten()
            .filter(|r| **r != own_run)
            .filter_map(|r| samples.get(&sk(*r)))
            .flatten()
            .copied()
            .collect();
        pool.sort_by(f64::total_cmp);
        let pv = samples
            .get(&sk(own_run))
            .and_then(|own| slower_than_peers_p(own, &pool));
        tested.push((*i, *p, *ratio, *z, pv, pool.len()));
    }
    let ps: Vec<f64> = tested.iter().filter_map(|t| t.4).collect();
    let cut = bh_threshold(&ps, judged, rules.fdr);
    let mut reasons: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut failed = 0;
    for (i, p, ratio, z, pv, pool) in &tested {
        let n = &nodes[*i];
        if let Some(w) = worst
            .get_mut(&n.name)
            .and_then(|m| m.get_mut(&*p.collective))
            .filter(|w| w.size_bytes == p.size_bytes as u64)
        {
            w.p = *pv;
        }
        if pv.zip(cut).is_some_and(|(pv, cut)| pv <= cut) {
            failed += 1;
            reasons.entry(*i).or_default().push(format!(
                "{} {}: {:.1} GB/s, {:.0}% of peers' median, z {:.1}, p {:.1e} (rank test on {} samples against {pool} of peers)",
                p.collective,
                crate::units::format_size(p.size_bytes as u64),
                p.busbw / 1e9,
                ratio * 100.0,
                z,
                pv.unwrap_or(1.0),
                sample_count(&samples, n, p),
            ));
        }
    }
    let out = reasons
        .into_iter()
        .map(|(i, cells)| {
            let n = &nodes[i];
            let count = cells.len();
            (
                n.name.clone(),
                Reason {
                    check: "below-peers".into(),
                    what: format!("below its {} peers at {count} size(s)", n.sku),
                    evidence: cells.join("; "),
                    since: n.latest.map(|l| l.started_at()),
                },
            )
        })
        .collect();
    Ok(Below {
        reasons: out,
        standings: worst
            .into_iter()
            .map(|(k, v)| (k, v.into_values().collect()))
            .collect(),
        judged,
        failed,
    })
}

fn sample_count(samples: &super::read::Samples, n: &Node<'_>, p: &PointLite) -> usize {
    let run = n.latest.map_or(0, |l| l.id);
    samples
        .get(&super::read::sample_key(run, p))
        .map_or(0, Vec::len)
}

//! A node against its own past (drift from its baseline run, the trend of its plateau), its
//! pair links against the fleet's, and its GPUs' health counters.

use super::fleet_stats::{bh_threshold, decline, mad, median, robust_z, slower_than_p};
use super::read::{PointLite, RunMeta};
use super::{HistoryError, Store};
use crate::documents::fleet::{Drift, FleetRules, Reason, TrendPoint};
use crate::units::format_size;
use std::collections::{BTreeMap, HashMap};

pub(super) struct Drifts {
    pub reasons: Vec<(String, Reason)>,
    pub by_node: HashMap<String, Drift>,
    pub judged: usize,
}

const DAY_S: f64 = 86_400.0;

/// Nodes up to which every node's trend is kept in the document.
pub(super) const TREND_ALL_UP_TO: usize = 200;

/// One node's history in the window.
pub(super) struct Node<'a> {
    pub name: String,
    pub sku: String,
    pub runs: Vec<&'a RunMeta>,
    pub latest: Option<&'a RunMeta>,
    pub baseline: Option<(&'a RunMeta, &'static str)>,
    pub matrix: Option<&'a RunMeta>,
}

pub(super) fn nodes_of(runs: &[RunMeta]) -> Vec<Node<'_>> {
    let mut by: BTreeMap<&str, Vec<&RunMeta>> = BTreeMap::new();
    for r in runs {
        by.entry(&r.node).or_default().push(r);
    }
    by.into_iter()
        .map(|(name, runs)| {
            let measured: Vec<&RunMeta> = runs.iter().copied().filter(|r| r.usable).collect();
            let latest = measured.last().copied();
            let earlier = &measured[..measured.len().saturating_sub(1)];
            let baseline = earlier
                .iter()
                .rev()
                .find(|r| r.passed == Some(true))
                .map(|r| (*r, "last-passing"))
                .or_else(|| {
                    (!measured.iter().any(|r| r.passed.is_some()))
                        .then(|| earlier.first().map(|r| (*r, "first-seen")))
                        .flatten()
                });
            Node {
                name: name.to_string(),
                sku: latest.map_or_else(|| runs[0].sku.to_string(), |r| r.sku.to_string()),
                matrix: runs.iter().rev().find(|r| r.matrix).copied(),
                runs: measured,
                latest,
                baseline,
            }
        })
        .collect()
}

/// Each node's latest run against its baseline (a rank test where the loss exceeds the
/// threshold), and a Mann-Kendall decline of its plateau over every run in the window.
pub(super) fn drifts(
    store: &mut Store,
    nodes: &[Node<'_>],
    latest_points: &HashMap<i64, Vec<PointLite>>,
    rules: &FleetRules,
    window: (f64, Option<&str>),
) -> Result<Drifts, HistoryError> {
    let base_ids: Vec<i64> = nodes
        .iter()
        .filter_map(|n| n.baseline.map(|b| b.0.id))
        .collect();
    let mut base_points: HashMap<i64, Vec<PointLite>> = HashMap::new();
    for p in store.points_of(&base_ids)? {
        base_points.entry(p.run_id).or_default().push(p);
    }
    // Worst judged size per node, and the candidates whose loss is past the threshold.
    let mut judged = 0;
    let mut cells: HashMap<usize, usize> = HashMap::new();
    let mut worst: HashMap<usize, (f64, PointLite)> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let (Some(latest), Some((base, _))) = (n.latest, n.baseline) else {
            continue;
        };
        let before: HashMap<(&str, &str, i64, i64), f64> = base_points
            .get(&base.id)
            .into_iter()
            .flatten()
            .map(|p| ((&*p.collective, &*p.dtype, p.nranks, p.size_bytes), p.busbw))
            .collect();
        for p in latest_points.get(&latest.id).into_iter().flatten() {
            if (p.size_bytes as u64) < rules.min_size_bytes {
                continue;
            }
            let Some(&b) = before.get(&(&*p.collective, &*p.dtype, p.nranks, p.size_bytes)) else {
                continue;
            };
            if b <= 0.0 {
                continue;
            }
            judged += 1;
            *cells.entry(i).or_default() += 1;
            let ratio = p.busbw / b;
            if worst.get(&i).is_none_or(|w| w.0 > ratio) {
                worst.insert(i, (ratio, p.clone()));
            }
        }
    }
    let candidates: Vec<usize> = worst
        .iter()
        .filter(|(_, (ratio, _))| *ratio < 1.0 - rules.max_drift)
        .map(|(i, _)| *i)
        .collect();
    let mut ids: Vec<i64> = Vec::new();
    for &i in &candidates {
        ids.extend(nodes[i].latest.map(|r| r.id));
        ids.extend(nodes[i].baseline.map(|b| b.0.id));
    }
    let samples = if ids.is_empty() {
        HashMap::new()
    } else {
        store.samples_of(&ids)?
    };
    let mut pvals: HashMap<usize, f64> = HashMap::new();
    for &i in &candidates {
        let (n, p) = (&nodes[i], &worst[&i].1);
        let sk = |run: i64| super::read::sample_key(run, p);
        let (Some(l), Some((b, _))) = (n.latest, n.baseline) else {
            continue;
        };
        if let (Some(a), Some(bs)) = (samples.get(&sk(l.id)), samples.get(&sk(b.id))) {
            // Only the node's worst size is tested: its p-value is multiplied by the sizes it
            // was chosen from (Bonferroni within the node), and false discoveries are then
            // controlled across nodes.
            if let Some(pv) = slower_than_p(a, bs) {
                pvals.insert(i, (pv * cells[&i] as f64).min(1.0));
            }
        }
    }
    let ps: Vec<f64> = pvals.values().copied().collect();
    let cut = bh_threshold(&ps, worst.len().max(1), rules.fdr);
    let trends = plateau_declines(store, nodes, rules, window)?;
    let mut out = Drifts {
        reasons: Vec::new(),
        by_node: HashMap::new(),
        judged,
    };
    for (i, n) in nodes.iter().enumerate() {
        let trend = trends.get(&i);
        let Some((ratio, p)) = worst.get(&i) else {
            continue;
        };
        let Some((base, kind)) = n.baseline else {
            continue;
        };
        let pv = pvals.get(&i).copied();
        let drift = Drift {
            baseline: kind.into(),
            baseline_at: base.started_at(),
            collective: p.collective.to_string(),
            size_bytes: p.size_bytes as u64,
            ratio: *ratio,
            p: pv,
            trend_p: trend.map(|t| t.p),
            slope_per_day: trend.map(|t| t.slope_per_day),
        };
        let lost = pv.zip(cut).is_some_and(|(pv, cut)| pv <= cut);
        let declining = trend.is_some_and(|t| t.significant);
        if lost || declining {
            out.reasons.push((
                n.name.clone(),
                drift_reason(n, &drift, lost.then_some(p), trend),
            ));
        }
        out.by_node.insert(n.name.clone(), drift);
    }
    Ok(out)
}

fn drift_reason(
    n: &Node<'_>,
    drift: &Drift,
    lost: Option<&PointLite>,
    trend: Option<&Decline>,
) -> Reason {
    let mut evidence = Vec::new();
    if let Some(p) = lost {
        evidence.push(format!(
            "{} {}: {:.0}% of its {} run of {} (p {:.1e})",
            p.collective,
            format_size(p.size_bytes as u64),
            drift.ratio * 100.0,
            drift.baseline,
            drift.baseline_at,
            drift.p.unwrap_or(1.0)
        ));
    }
    if let Some(t) = trend.filter(|t| t.significant) {
        evidence.push(format!(
            "{} plateau falling {:.2}% a day over {} runs (Mann-Kendall p {:.1e}), {:.0}% of its first",
            t.collective,
            -t.slope_per_day * 100.0,
            t.runs,
            t.p,
            t.last_over_first * 100.0
        ));
    }
    Reason {
        check: "drift".into(),
        what: "slower than it was".into(),
        evidence: evidence.join("; "),
        since: trend
            .and_then(|t| t.since.clone())
            .or_else(|| n.latest.map(|l| l.started_at())),
    }
}

/// A node's plateau over its runs: (days, bus bandwidth, when).
type Series = (Vec<f64>, Vec<f64>, Vec<f64>);

struct Decline {
    collective: String,
    p: f64,
    slope_per_day: f64,
    runs: usize,
    last_over_first: f64,
    significant: bool,
    since: Option<String>,
}

/// Mann-Kendall on each node's plateau (per collective, worst kept), BH over the nodes.
fn plateau_declines(
    store: &mut Store,
    nodes: &[Node<'_>],
    rules: &FleetRules,
    window: (f64, Option<&str>),
) -> Result<HashMap<usize, Decline>, HistoryError> {
    let mut by_run: HashMap<i64, Vec<(std::sync::Arc<str>, f64)>> = HashMap::new();
    for h in store.headlines_since(window.0, window.1)? {
        by_run
            .entry(h.run_id)
            .or_default()
            .push((h.collective, h.plateau_busbw));
    }
    let mut found: HashMap<usize, Decline> = HashMap::new();
    let mut tests = 0;
    for (i, n) in nodes.iter().enumerate() {
        let mut series: BTreeMap<&str, Series> = BTreeMap::new();
        for r in &n.runs {
            for (c, v) in by_run.get(&r.id).into_iter().flatten() {
                if v.is_finite() && *v > 0.0 {
                    let e = series.entry(&**c).or_default();
                    e.0.push(r.started_unix / DAY_S);
                    e.1.push(*v);
                    e.2.push(r.started_unix);
                }
            }
        }
        for (c, (x, y, at)) in series {
            let Some((_, p, slope)) = decline(&x, &y) else {
                continue;
            };
            tests += 1;
            let first = median(&y[..y.len().min(3)]);
            let last = median(&y[y.len().saturating_sub(3)..]);
            let d = Decline {
                collective: c.to_string(),
                p,
                slope_per_day: slope / first,
                runs: y.len(),
                last_over_first: last / first,
                significant: false,
                since: at
                    .iter()
                    .zip(&y)
                    .find(|(_, v)| **v < first * (1.0 - rules.max_drift / 2.0))
                    .map(|(a, _)| super::read::rfc3339(*a)),
            };
            if found.get(&i).is_none_or(|w| w.p > d.p) {
                found.insert(i, d);
            }
        }
    }
    let ps: Vec<f64> = found.values().map(|d| d.p).collect();
    let cut = bh_threshold(&ps, tests.max(1), rules.fdr);
    for d in found.values_mut() {
        d.significant = cut.is_some_and(|c| d.p <= c) && d.last_over_first < 1.0 - rules.max_drift;
    }
    Ok(found)
}

/// Pair links (from each node's latest matrix) far below the same links across the SKU.
pub(super) fn bad_links(
    store: &mut Store,
    nodes: &[Node<'_>],
    rules: &FleetRules,
) -> Result<Vec<(String, Reason)>, HistoryError> {
    let ids: Vec<i64> = nodes
        .iter()
        .filter_map(|n| n.matrix.map(|m| m.id))
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let owner: HashMap<i64, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.matrix.map(|m| (m.id, i)))
        .collect();
    let links = store.links_of(&ids)?;
    let mut dist: BTreeMap<(&str, &str, i64), Vec<f64>> = BTreeMap::new();
    for l in &links {
        let sku = nodes[owner[&l.run_id]].sku.as_str();
        dist.entry((sku, &*l.direction, l.size_bytes))
            .or_default()
            .push(l.bandwidth);
    }
    let stats: BTreeMap<_, (usize, f64, f64)> = dist
        .iter()
        .map(|(k, v)| {
            let m = median(v);
            (*k, (v.len(), m, mad(v, m)))
        })
        .collect();
    let mut bad: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for l in &links {
        if (l.size_bytes as u64) < rules.min_size_bytes {
            continue;
        }
        let i = owner[&l.run_id];
        let (n, m, d) = stats[&(nodes[i].sku.as_str(), &*l.direction, l.size_bytes)];
        if n < rules.min_peers || m <= 0.0 {
            continue;
        }
        let (ratio, z) = (l.bandwidth / m, robust_z(l.bandwidth, m, d));
        if ratio < rules.min_ratio && z <= rules.max_z {
            bad.entry(i).or_default().push(format!(
                "{} {} {} {}: {:.1} GB/s, {:.0}% of the same links across the SKU (z {:.1})",
                l.src,
                if &*l.direction == "one-way" {
                    "->"
                } else {
                    "<->"
                },
                l.dst,
                format_size(l.size_bytes as u64),
                l.bandwidth / 1e9,
                ratio * 100.0,
                z
            ));
        }
    }
    Ok(bad
        .into_iter()
        .map(|(i, pairs)| {
            let n = &nodes[i];
            (
                n.name.clone(),
                Reason {
                    check: "link".into(),
                    what: format!(
                        "{} slow link measurement(s) in its pair matrix",
                        pairs.len()
                    ),
                    evidence: pairs.join("; "),
                    since: n.matrix.map(|m| m.started_at()),
                },
            )
        })
        .collect())
}

/// Uncorrectable ECC errors, pending or failed row remaps, a PCIe link below its width or
/// generation, NVLink error counters that grew since the node's previous run.
pub(super) fn health_reasons(n: &Node<'_>) -> Vec<Reason> {
    let Some(latest) = n.latest else {
        return Vec::new();
    };
    let h = &latest.health;
    let mut found = Vec::new();
    let streak = |bad: &dyn Fn(&super::entry::HealthSummary) -> bool| {
        n.runs
            .iter()
            .rev()
            .take_while(|r| bad(&r.health))
            .last()
            .map(|r| r.started_at())
    };
    if h.ecc_uncorrected > 0 || h.remap_pending > 0 {
        found.push(Reason {
            check: "health".into(),
            what: "uncorrectable memory errors".into(),
            evidence: format!(
                "{} uncorrectable ECC errors since the driver loaded, {} row remaps pending or failed",
                h.ecc_uncorrected, h.remap_pending
            ),
            since: streak(&|x| x.ecc_uncorrected > 0 || x.remap_pending > 0),
        });
    }
    if !h.pcie_degraded.is_empty() {
        found.push(Reason {
            check: "health".into(),
            what: "PCIe link below its capability".into(),
            evidence: h.pcie_degraded.join("; "),
            since: streak(&|x| !x.pcie_degraded.is_empty()),
        });
    }
    let previous = n.runs.iter().rev().nth(1).map(|r| &r.health);
    let grew: Vec<String> = h
        .nvlink_errors
        .iter()
        .filter_map(|(link, now)| {
            let before = previous
                .and_then(|p| p.nvlink_errors.get(link))
                .copied()
                .unwrap_or(0);
            (previous.is_some() && *now > before).then(|| format!("{link}: {before} -> {now}"))
        })
        .collect();
    if !grew.is_empty() {
        found.push(Reason {
            check: "health".into(),
            what: "NVLink errors growing".into(),
            evidence: format!(
                "replay/recovery/CRC counts since its previous run: {}",
                grew.join("; ")
            ),
            since: Some(latest.started_at()),
        });
    }
    found
}

/// The plateau of every run of the nodes that will be shown with a trend.
pub(super) fn trends_for(
    store: &mut Store,
    nodes: &[Node<'_>],
    drained: &BTreeMap<String, Vec<Reason>>,
) -> Result<HashMap<String, Vec<TrendPoint>>, HistoryError> {
    let small = nodes.len() <= TREND_ALL_UP_TO;
    let chosen: Vec<&Node<'_>> = nodes
        .iter()
        .filter(|n| small || drained.contains_key(&n.name))
        .collect();
    let ids: Vec<i64> = chosen
        .iter()
        .flat_map(|n| n.runs.iter().map(|r| r.id))
        .collect();
    let mut by_run: HashMap<i64, Vec<(std::sync::Arc<str>, f64)>> = HashMap::new();
    for h in store.headlines_of(&ids)? {
        by_run
            .entry(h.run_id)
            .or_default()
            .push((h.collective, h.plateau_busbw));
    }
    Ok(chosen
        .iter()
        .map(|n| {
            let points = n
                .runs
                .iter()
                .flat_map(|r| {
                    by_run
                        .get(&r.id)
                        .into_iter()
                        .flatten()
                        .map(|(c, v)| TrendPoint {
                            at: r.started_at(),
                            collective: c.to_string(),
                            plateau_busbw_bytes_per_s: *v,
                        })
                })
                .collect();
            (n.name.clone(), points)
        })
        .collect())
}

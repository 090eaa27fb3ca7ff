//! A run held against an expectation: per (collective, size, placement) the expected busbw from
//! the cost model anchored on the chosen entry, a band, the ratio and a verdict; then one
//! sentence per collective.

use super::choose::Choice;
use crate::coll::Collective;
use crate::documents::{Alternative, BaselineRef, ComparedPoint, Comparison, Kind, SCHEMA_VERSION};
use crate::model::{Point, RunRecord, RunStatus};
use crate::units::format_size;
use std::collections::BTreeMap;

/// The band in latency-bound sizes: the cost model is good to about 2x there (anchors.md §5.5:
/// 24 µs measured against 20.6 modelled on 8 PCIe Gen5 GPUs; older NCCL releases slower).
const LATENCY_BAND: [f64; 2] = [0.5, 2.0];

/// The lowest the band's low edge eases to below the plateau size, as a fraction of the low
/// edge: (size / plateau size)^0.25, never under this.
const RAMP_FLOOR: f64 = 0.35;

/// Verdict words against an expectation.
pub const OK: &str = "ok";
pub const BELOW: &str = "below";
pub const FAR_BELOW: &str = "far-below";
pub const ABOVE: &str = "above-expectation";

pub fn baseline_ref(choice: &Choice) -> BaselineRef {
    BaselineRef {
        kind: "expectation".into(),
        id: choice.entry.id.clone(),
        title: choice.entry.title.clone(),
        provenance: choice.entry.provenance.name().into(),
        citation: choice.entry.citation.clone(),
        why: choice.why.clone(),
    }
}

/// Said of every run on exactly two nodes across a network.
pub const TWO_NODES: &str = "2 nodes are not a fabric test: NCCL's model keeps the inter-node bandwidth unhalved at 2 nodes (tuning.cc), so tree all_reduce can exceed one NIC's rate; measure 3 or more nodes, or NCCL_ALGO=RING, to characterise the network";

/// The expectation for one point, or why there is none.
pub struct Expected {
    pub busbw_bytes_per_s: f64,
    pub low_bytes_per_s: f64,
    pub high_bytes_per_s: f64,
    pub time_s: f64,
    pub latency_share: f64,
    pub layer: String,
}

pub fn expected_at(choice: &Choice, coll: Collective, size_bytes: u64) -> Option<Expected> {
    let link = choice.link(coll)?;
    let (_, carried) = choice.plateau_bytes_per_s(coll)?;
    let est = link.estimate(coll, size_bytes);
    let f = est.latency_share.clamp(0.0, 1.0);
    let [lo, mut hi] = choice.entry.band;
    // Two nodes: tree and NVLS-tree all_reduce may exceed the NIC rate up to 2x (tuning.cc).
    if choice.nnodes == 2 && coll == Collective::AllReduce {
        hi = hi.max(2.0);
    }
    // Below the entry's plateau size NCCL runs fewer channels and shorter pipelines than the
    // model's one bandwidth assumes; the low edge eases off with the distance to the plateau.
    let ramp = (size_bytes as f64 / choice.entry.plateau_from_bytes as f64)
        .powf(0.25)
        .clamp(RAMP_FLOOR, 1.0);
    let low = est.busbw_bytes_per_s * (lo * ramp * (1.0 - f) + LATENCY_BAND[0] * f);
    let high = est.busbw_bytes_per_s * (hi * (1.0 - f) + LATENCY_BAND[1] * f);
    let layer = if f <= 0.1 {
        format!(
            "{} plateau ({}){}",
            choice.entry.provenance.name(),
            choice.entry.id,
            if carried {
                ", all_reduce figure carried over"
            } else {
                ""
            }
        )
    } else {
        format!(
            "cost-model ({}/{}) on the {} plateau",
            est.algorithm,
            est.protocol,
            choice.entry.provenance.name()
        )
    };
    Some(Expected {
        busbw_bytes_per_s: est.busbw_bytes_per_s,
        low_bytes_per_s: low,
        high_bytes_per_s: high,
        time_s: est.time_s,
        latency_share: f,
        layer,
    })
}

pub fn verdict(measured: f64, e: &Expected) -> &'static str {
    if measured > e.high_bytes_per_s {
        ABOVE
    } else if measured >= e.low_bytes_per_s {
        OK
    } else if measured >= 0.5 * e.low_bytes_per_s {
        BELOW
    } else {
        FAR_BELOW
    }
}

/// busbw from the point's time: nccl-tests prints busbw with two decimals, so an imported
/// 8-byte point reads 0.00 GB/s while its time is exact enough.
pub fn measured_busbw(p: &Point) -> f64 {
    p.busbw_from_time()
}

fn nccl_busbw(p: &Point) -> Option<f64> {
    let t = p.nccl_model_time_s.filter(|t| *t > 0.0)?;
    Some(p.size_bytes as f64 * p.collective.busbw_factor(p.nranks) / t)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(crate::stats::quantile_sorted(&v, 0.5))
}

/// Warnings every comparison of this record carries.
pub fn record_warnings(r: &RunRecord) -> Vec<String> {
    let mut w = Vec::new();
    match r.status {
        RunStatus::Complete => {}
        RunStatus::Running => w.push(
            "the record is still `running` (the sweep is in progress or was killed): the points so far are compared".into(),
        ),
        s => w.push(format!(
            "the run ended `{}`{}: the points it has are compared",
            s.name(),
            r.error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
        )),
    }
    w
}

/// Compare a run with the chosen expectation.
pub fn against_expectation(run_name: &str, r: &RunRecord, choice: &Choice) -> Comparison {
    let mut points = Vec::new();
    let mut not_compared: Vec<String> = Vec::new();
    let mut by_coll: BTreeMap<Collective, Vec<(&Point, Expected, f64)>> = BTreeMap::new();
    for p in r.points.iter().filter(|p| p.size_bytes > 0) {
        let Some(e) = expected_at(choice, p.collective, p.size_bytes) else {
            let why = if p.collective == Collective::Unknown {
                "unknown: the log does not name the collective (give --collective NAME)".to_string()
            } else {
                format!("{}: {} has no figure for it", p.collective, choice.entry.id)
            };
            if !not_compared.contains(&why) {
                not_compared.push(why);
            }
            continue;
        };
        let measured = measured_busbw(p);
        let ratio = measured / e.busbw_bytes_per_s;
        points.push(ComparedPoint {
            collective: p.collective,
            dtype: p.dtype,
            size_bytes: p.size_bytes,
            placement: p.placement,
            measured_busbw_bytes_per_s: measured,
            expected_busbw_bytes_per_s: e.busbw_bytes_per_s,
            expected_low_bytes_per_s: e.low_bytes_per_s,
            expected_high_bytes_per_s: e.high_bytes_per_s,
            ratio,
            verdict: verdict(measured, &e).into(),
            layer: e.layer.clone(),
            nccl_model_busbw_bytes_per_s: nccl_busbw(p),
            p_value: None,
        });
        by_coll.entry(p.collective).or_default().push((p, e, ratio));
    }
    let mut sentences = Vec::new();
    for (coll, rows) in &by_coll {
        sentences.push(sentence(*coll, rows, &points, choice));
    }
    if let Some(s) = two_node_tree(choice, &points) {
        sentences.push(s);
    }
    let summary = if sentences.is_empty() && not_compared.is_empty() {
        "nothing to compare: the run has no measured points".to_string()
    } else if sentences.is_empty() {
        format!("nothing to compare: {}", not_compared.join("; "))
    } else {
        sentences.join(" ")
    };
    let points_for_shape = points.clone();
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Comparison,
        tool: crate::buildinfo::tool_info(),
        run: run_name.into(),
        run_id: Some(crate::model::check::identity(r)),
        baseline: baseline_ref(choice),
        without_overrides: choice.without_overrides.as_deref().map(|alt| alternative(choice, alt)),
        points,
        not_compared,
        method: format!(
            "expected busbw from NCCL's latency/bandwidth model (NCCL 2.30's tuning.cc constants) anchored on the entry's plateau; band {:.2}-{:.2}x at the plateau ({} and up), its low edge easing by (size/plateau)^0.25 (at most to {:.2}x of it) below, and widening to {:.1}-{:.1}x where latency dominates; below = under the band, far-below = under half its low edge",
            choice.entry.band[0], choice.entry.band[1], format_size(choice.entry.plateau_from_bytes), RAMP_FLOOR, LATENCY_BAND[0], LATENCY_BAND[1]
        ),
        warnings: {
            let mut w = record_warnings(r);
            if choice.nnodes == 2 && choice.entry.path == crate::expect::table::PathKind::Net {
                w.push(TWO_NODES.into());
            }
            w.extend(model_version(r));
            w
        },
        summary,
        stated: choice.stated.clone(),
        nic_readings: Vec::new(),
        assumed: None,
        shape: super::shape::findings(r, &points_for_shape),
    }
}

/// The NCCL a run names, when its cost model is not the one the expected curve follows: from
/// 2.32.6 NCCL models Ring, Tree, NVLS and NVLSTree as a pipeline ("a pipeline-based cost
/// model", 2.32.6 release notes), where the curve here uses 2.30's latency constants.
fn model_version(r: &RunRecord) -> Option<String> {
    let v = r.backend.library_versions.get("nccl")?;
    let nums: Vec<u32> = v
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    let [major, minor, patch] = nums[..] else {
        return None;
    };
    ((major, minor, patch) >= (2, 32, 6)).then(|| {
        format!(
            "the run used NCCL {v}, whose cost model is pipeline-based (2.32.6 release notes); the expected curve here follows NCCL 2.30's latency constants, so below the plateau it is not what this NCCL assumes. A live sweep records NCCL's own estimate per size (ncclGroupSimulateEnd) beside each point"
        )
    })
}

/// Two nodes across a network are no fabric test: all_reduce points above the NICs'
/// aggregate (the entry's band) are NCCL's tree at 2 nodes, and the summary says so rather
/// than let `ok` read as a fabric baseline.
fn two_node_tree(choice: &Choice, points: &[ComparedPoint]) -> Option<String> {
    if choice.nnodes != 2 || choice.entry.path != crate::expect::table::PathKind::Net {
        return None;
    }
    let above: Vec<&ComparedPoint> = points
        .iter()
        .filter(|p| p.collective == Collective::AllReduce)
        .filter(|p| p.ratio > choice.entry.band[1] && p.verdict == OK)
        .collect();
    let top = above.iter().map(|p| p.ratio).fold(0.0, f64::max);
    (!above.is_empty()).then(|| {
        format!(
            "{} all_reduce point(s) run above the NICs' aggregate (up to {top:.2}x): expected of NCCL's tree at 2 nodes, not a fabric baseline; measure 3 or more nodes, or NCCL_ALGO=RING, to judge the network.",
            above.len()
        )
    })
}

/// Where a run's plateau starts: the entry's plateau size when the run reaches it, else the
/// run's top sizes (from a quarter of its largest).
pub fn plateau_floor(largest_bytes: u64, entry_from_bytes: u64) -> u64 {
    if largest_bytes >= entry_from_bytes {
        entry_from_bytes
    } else {
        (largest_bytes / 4).max(1)
    }
}

/// A collective's ratio to its expectation, as every page states it: the median of its compared
/// points' ratios from the plateau floor up ([`plateau_floor`] of `entry_from_bytes`), with that
/// floor. The summary's "reaches 0.97x" and the report's headline are this one figure.
pub fn plateau_ratio(
    points: &[ComparedPoint],
    coll: Collective,
    entry_from_bytes: u64,
) -> Option<(f64, u64)> {
    let of_coll = || points.iter().filter(move |p| p.collective == coll);
    let largest = of_coll().map(|p| p.size_bytes).max()?;
    let floor = plateau_floor(largest, entry_from_bytes);
    let ratios = of_coll()
        .filter(|p| p.size_bytes >= floor)
        .map(|p| p.ratio)
        .collect();
    median(ratios).map(|x| (x, floor))
}

/// [`plateau_ratio`] of a comparison document: its entry's plateau when it is a shipped one,
/// else the run's top sizes (from a quarter of its largest).
pub fn plateau_ratio_of(c: &Comparison, coll: Collective) -> Option<(f64, u64)> {
    let from = super::table::shipped()
        .entries
        .iter()
        .find(|e| e.id == c.baseline.id)
        .map(|e| e.plateau_from_bytes)
        .unwrap_or(u64::MAX);
    plateau_ratio(&c.points, coll, from)
}

fn sentence(
    coll: Collective,
    rows: &[(&Point, Expected, f64)],
    points: &[ComparedPoint],
    choice: &Choice,
) -> String {
    let from = choice.entry.plateau_from_bytes;
    let (plateau, floor) = match plateau_ratio(points, coll, from) {
        Some((x, floor)) => (Some(x), floor),
        None => (None, from),
    };
    let at = if floor == from {
        format!("at {} and above", format_size(from))
    } else {
        format!(
            "at {} and above (the run stops below the entry's plateau, {})",
            format_size(floor),
            format_size(from)
        )
    };
    let mut s = match plateau {
        Some(x) => format!("{coll} reaches {x:.2}x of {} {at}", choice.entry.title),
        None => format!("{coll}: no plateau point"),
    };
    let latency: Vec<f64> = rows
        .iter()
        .filter(|(_, e, _)| e.latency_share > 0.5)
        .map(|(p, e, _)| p.time_s / e.time_s)
        .collect();
    if let Some(x) = median(latency) {
        if x >= 1.0 {
            s.push_str(&format!(
                "; latency-bound sizes {x:.1}x slower than modelled"
            ));
        } else {
            s.push_str(&format!(
                "; latency-bound sizes {:.1}x faster than modelled",
                1.0 / x
            ));
        }
    }
    let count = |v: &str| {
        rows.iter()
            .filter(|(p, e, _)| verdict(measured_busbw(p), e) == v)
            .count()
    };
    let (below, far) = (count(BELOW), count(FAR_BELOW));
    let below_at_plateau = rows
        .iter()
        .filter(|(p, _, _)| p.size_bytes >= floor)
        .filter(|(p, e, _)| matches!(verdict(measured_busbw(p), e), BELOW | FAR_BELOW))
        .count();
    if below + far > 0 && below_at_plateau == 0 {
        // Below the band only where the plateau does not reach: said, so that a healthy
        // plateau beside "32 points below" needs no second reading.
        s.push_str(&format!(
            " ({} of {} points below the band, all of them under {} where the plateau is judged; {} far below).",
            below + far,
            rows.len(),
            format_size(floor),
            far
        ));
    } else if below + far > 0 {
        s.push_str(&format!(
            " ({} of {} points below the band, {below_at_plateau} of them from {} up; {} far below).",
            below + far,
            rows.len(),
            format_size(floor),
            far
        ));
    } else {
        s.push('.');
    }
    s
}

fn alternative(choice: &Choice, alt: &Choice) -> Alternative {
    let mut plateau = BTreeMap::new();
    for c in Collective::ALL {
        if let Some((v, _)) = alt.plateau_bytes_per_s(c) {
            plateau.insert(c.name().to_string(), v);
        }
    }
    let now = choice
        .plateau_bytes_per_s(Collective::AllReduce)
        .map(|(v, _)| v / 1e9)
        .unwrap_or(f64::NAN);
    let then = alt
        .plateau_bytes_per_s(Collective::AllReduce)
        .map(|(v, _)| v / 1e9)
        .unwrap_or(f64::NAN);
    let overrides = if choice.overrides.is_empty() {
        vec!["the transports the log shows".to_string()]
    } else {
        choice.overrides.clone()
    };
    Alternative {
        sentence: format!(
            "Without {}, this machine should give {} ({}): all_reduce busbw ~{then:.1} GB/s at the plateau instead of ~{now:.2} GB/s ({:.1}x).",
            overrides.join(", "),
            alt.entry.title,
            alt.entry.id,
            then / now
        ),
        overrides,
        baseline: baseline_ref(alt),
        plateau_busbw_bytes_per_s: plateau,
    }
}

/// Per collective, the median measured/expected ratio over the out-of-place plateau points
/// (the entry's plateau sizes when the run reaches them, else its top sizes) and the points.
pub fn plateau_ratios(
    doc: &Comparison,
    choice: &Choice,
) -> Vec<(Collective, f64, Vec<ComparedPoint>)> {
    let mut by: BTreeMap<Collective, Vec<&ComparedPoint>> = BTreeMap::new();
    for p in doc
        .points
        .iter()
        .filter(|p| p.placement == crate::coll::Placement::OutOfPlace)
    {
        by.entry(p.collective).or_default().push(p);
    }
    by.into_iter()
        .filter_map(|(c, pts)| {
            let largest = pts.iter().map(|p| p.size_bytes).max()?;
            let floor = plateau_floor(largest, choice.entry.plateau_from_bytes);
            let top: Vec<ComparedPoint> = pts
                .into_iter()
                .filter(|p| p.size_bytes >= floor)
                .cloned()
                .collect();
            let m = median(top.iter().map(|p| p.ratio).collect())?;
            Some((c, m, top))
        })
        .collect()
}

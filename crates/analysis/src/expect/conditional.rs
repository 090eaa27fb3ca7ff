//! A run across nodes whose NICs nobody knows: the answer a maintainer gives instead of a
//! refusal. The ring all_reduce busbw of a node cannot beat its NICs' aggregate, so the run's
//! plateau divided by each plausible NIC count is a per-NIC figure, and each per-NIC figure
//! matches a line rate or none (the per-NIC rule: about 96% of line rate over 8 bits, 12, 24,
//! 48 GB/s for 100, 200 and 400 Gb/s NICs). The verdict is conditional and names the one fact
//! that settles it.

use super::compare::measured_busbw;
use super::situation::Situation;
use crate::coll::{Collective, Placement};
use crate::documents::{AssumedDesign, BaselineRef, Comparison, Kind, NicReading, SCHEMA_VERSION};
use crate::model::RunRecord;
use crate::units::format_size;

/// A NIC line rate and the busbw one such NIC carries at the plateau, with where it is from.
pub struct NicClass {
    pub gbps: f64,
    pub name: &'static str,
    pub busbw_gbps: f64,
    pub citation: &'static str,
}

/// The per-NIC rule by line rate.
pub const CLASSES: [NicClass; 4] = [
    NicClass {
        gbps: 100.0,
        name: "100G (EDR, HDR100, 100GbE)",
        busbw_gbps: 12.0,
        citation: "sjeaugey: '24GB/s is the peak performance per 200G NIC (12 GB/s for 100G NICs)', https://github.com/NVIDIA/nccl-tests/issues/119",
    },
    NicClass {
        gbps: 200.0,
        name: "HDR 200G",
        busbw_gbps: 24.0,
        citation: "https://github.com/NVIDIA/nccl-tests/issues/119",
    },
    NicClass {
        gbps: 400.0,
        name: "NDR 400G",
        busbw_gbps: 48.0,
        citation: "CX-7 NDR 48-49 GB/s, https://github.com/NVIDIA/nccl-tests/issues/267",
    },
    NicClass {
        gbps: 800.0,
        name: "XDR 800G",
        busbw_gbps: 96.0,
        citation: "derived: the 400G figure doubled",
    },
];

/// A per-NIC figure within this fraction of a class's is "near line rate" (the band of the
/// shipped per-NIC entries).
const NEAR: [f64; 2] = [0.9, 1.06];

/// The NIC counts a node plausibly has.
const COUNTS: [usize; 4] = [1, 2, 4, 8];

/// Which line rate `per_nic` GB/s matches, in words.
pub fn describe(per_nic: f64, two_nodes: bool) -> String {
    if let Some(c) = CLASSES.iter().find(|c| {
        let r = per_nic / c.busbw_gbps;
        (NEAR[0]..=NEAR[1]).contains(&r)
    }) {
        return format!("{} near line rate", c.name);
    }
    let above = CLASSES
        .iter()
        .rev()
        .find(|c| per_nic > c.busbw_gbps * NEAR[1]);
    let below = CLASSES.iter().find(|c| per_nic < c.busbw_gbps * NEAR[0]);
    match (above, below) {
        (Some(a), Some(b)) if two_nodes => format!(
            "{:.0}% of {}, or {:.2}x {} (possible only on 2 nodes, where NCCL's tree runs up to twice the NIC rate, or with SHARP)",
            100.0 * per_nic / b.busbw_gbps,
            b.name,
            per_nic / a.busbw_gbps,
            a.name
        ),
        (_, Some(b)) => format!("{:.0}% of {}", 100.0 * per_nic / b.busbw_gbps, b.name),
        (Some(a), None) => format!(
            "{:.2}x {}: above any single NIC's line rate (only SHARP/CollNet, NVLS across nodes, or 2 nodes' tree reach that)",
            per_nic / a.busbw_gbps,
            a.name
        ),
        (None, None) => "no line rate".into(),
    }
}

/// The largest sizes' median busbw per collective (out of place, from a quarter of the
/// largest size up): (collective, busbw GB/s, smallest size counted).
fn plateaus(r: &RunRecord) -> Vec<(Collective, f64, u64)> {
    let mut out = Vec::new();
    let mut colls: Vec<Collective> = r.points.iter().map(|p| p.collective).collect();
    colls.sort();
    colls.dedup();
    for coll in colls {
        let pts: Vec<_> = r
            .points
            .iter()
            .filter(|p| p.collective == coll && p.placement == Placement::OutOfPlace)
            .filter(|p| p.size_bytes > 0)
            .collect();
        let Some(largest) = pts.iter().map(|p| p.size_bytes).max() else {
            continue;
        };
        let from = largest / 4;
        let mut v: Vec<f64> = pts
            .iter()
            .filter(|p| p.size_bytes >= from)
            .map(|p| measured_busbw(p) / 1e9)
            .collect();
        v.sort_by(f64::total_cmp);
        if let Some(&m) = v.get(v.len() / 2) {
            out.push((
                coll,
                m,
                from.max(pts.iter().map(|p| p.size_bytes).min().unwrap_or(0)),
            ));
        }
    }
    out
}

/// Whether the run needs the conditional answer: it spans nodes and neither a statement, a
/// topology nor a log gives its NICs and their speed. Trays of an NVLink domain (NVL72) do not:
/// NVLink carries the run, not the NICs.
pub fn needed(s: &Situation) -> bool {
    s.nnodes > 1
        && (s.known_nic_count().is_none() || s.stated.nic_gbps.is_none())
        && super::path::nvlink_domains(s).is_none()
}

/// The conditional answer as a comparison document: no point verdicts (there is nothing
/// certain to hold them against), a reading per plausible NIC count, and what settles it.
pub fn comparison(run_name: &str, r: &RunRecord, s: &Situation) -> Comparison {
    let (nic_readings, summary, notes) = readings(r, s);
    let assumed = assumed(r, s).or_else(|| below_any_rdma(r, s));
    let summary = match &assumed {
        Some(a) => format!("{} {summary}", a.sentence),
        None => summary,
    };
    let mut warnings = super::compare::record_warnings(r);
    warnings.extend(notes);
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Comparison,
        tool: crate::buildinfo::tool_info(),
        run: run_name.into(),
        run_id: Some(crate::model::check::identity(r)),
        baseline: BaselineRef {
            kind: "conditional".into(),
            id: "per-nic-rule".into(),
            title: "the node's NIC aggregate bounds its ring busbw; per-NIC busbw by line rate".into(),
            provenance: "vendor-statement".into(),
            citation: CLASSES
                .iter()
                .map(|c| format!("{} {} GB/s: {}", c.name, c.busbw_gbps, c.citation))
                .collect::<Vec<_>>()
                .join("; "),
            why: unknown_nics(s),
        },
        without_overrides: None,
        points: Vec::new(),
        not_compared: Vec::new(),
        method: format!(
            "the plateau (median busbw from a quarter of the largest size up, out of place) divided by 1, 2, 4 and 8 NICs per node, each per-NIC figure matched to a line rate within {:.2}-{:.2}x of the per-NIC rule; alltoall and sendrecv against one NIC (they cannot spread a peer's bytes over several)",
            NEAR[0], NEAR[1]
        ),
        warnings,
        summary,
        stated: s.stated.facts(),
        nic_readings,
        assumed,
        shape: super::shape::findings(r, &[]),
    }
}

/// Busbw one NIC of a kind carries per Gb/s of line rate at the plateau: the per-NIC rule
/// (24 GB/s per 200G NIC) for InfiniBand and RoCE; the measured figures of EFA (47.1 per 400G)
/// and Slingshot (17.5 per 200G), data/expectations.toml efa-400 and slingshot-200; GPUDirect-TCPX
/// and -TCPXO as measured on A3 High and A3 Mega (gcp-tcpx, gcp-tcpxo). Sockets have no such
/// rule (their plateau is the host's, not the line's).
fn per_gbps(kind: super::hardware::NicKind) -> Option<f64> {
    use super::hardware::NicKind;
    match kind {
        NicKind::Infiniband | NicKind::Roce => Some(24.0 / 200.0),
        NicKind::Slingshot => Some(17.5 / 200.0),
        NicKind::Efa => Some(47.1 / 400.0),
        NicKind::Tcpx => Some(12.6 / 200.0),
        NicKind::Tcpxo => Some(23.6 / 200.0),
        NicKind::Tcp => None,
    }
}

/// The run under the design a maintainer assumes of its nodes, when nothing gives the NICs:
/// the GPU model and ranks per node pick the design, its NICs give the figure, and the NIC
/// count the run is consistent with is the question to ask.
fn assumed(r: &RunRecord, s: &Situation) -> Option<AssumedDesign> {
    let (coll, plateau) = assumable(r, s)?;
    let per_node = s.nranks.div_ceil(s.nnodes);
    let d = super::designs::usual_for(s.gpu_name.as_deref()?, per_node)?;
    let per_nic = d.nic_gbps * per_gbps(super::hardware::design_nic_kind(d))?;
    let expected = per_nic * d.nics as f64;
    let ratio = plateau / expected;
    let two = s.nnodes == 2;
    let consistent = COUNTS
        .iter()
        .copied()
        .filter(|&n| n != d.nics)
        .find(|&n| (NEAR[0]..=NEAR[1]).contains(&(plateau / n as f64 / per_nic)));
    let short = format!("{} x {:.0}G", d.nics, d.nic_gbps);
    let (verdict, head) = match ratio {
        x if x > NEAR[1] && two => ("above-two-nodes", format!("above the {short} NICs of standard {} nodes: expected of NCCL's tree at 2 nodes, not a fabric baseline", d.title)),
        x if x > NEAR[1] => ("above", format!("above the {short} NICs of standard {} nodes: only SHARP/CollNet or NVLS across nodes go past the NICs' aggregate", d.title)),
        x if x >= NEAR[0] => ("consistent", format!("consistent with standard {} nodes ({short})", d.title)),
        x if x >= 0.5 => ("below", format!("below what standard {} nodes give ({short})", d.title)),
        _ => ("far-below", format!("far below if these are standard {} nodes ({short})", d.title)),
    };
    let ask = match (verdict, consistent) {
        ("consistent" | "above" | "above-two-nodes", _) => String::new(),
        (_, Some(n)) => format!(
            "; consistent only with {n} NICs per node at {:.0}G — which do you have?",
            d.nic_gbps
        ),
        _ => " — how many NICs per node do you have, and at what speed?".into(),
    };
    let sentence = format!(
        "{coll} {plateau:.1} GB/s busbw against {expected:.0} GB/s: {head}{ask} (assumed from {} x {} per node; {}.)",
        per_node,
        s.gpu_name.as_deref().unwrap_or("?"),
        match d.variants.is_empty() {
            true => "state the NICs with --hardware to judge for certain".to_string(),
            false => format!("{}; state the NICs with --hardware to judge for certain", d.variants),
        }
    );
    Some(AssumedDesign {
        design: d.id.clone(),
        title: d.title.clone(),
        facts: d.facts(),
        citation: d.citation.clone(),
        collective: coll,
        measured_gbps: plateau,
        expected_gbps: expected,
        verdict: verdict.into(),
        consistent_with_nics: consistent,
        sentence,
    })
}

/// The smallest largest size an assumed verdict needs: a sweep that stops short of it (`-e
/// 256K`, a latency run) measured latency, not what the fabric carries.
const BANDWIDTH_SIZE: u64 = 64 << 20;

/// Whether an assumed verdict may be given, and on what: a run across nodes whose NICs nothing
/// gives, whose sweep reaches bandwidth sizes, judged on its first ring collective's plateau
/// (alltoall and sendrecv do not spread over a node's NICs).
fn assumable(r: &RunRecord, s: &Situation) -> Option<(Collective, f64)> {
    if s.known_nic_count().is_some()
        || s.stated.nic_gbps.is_some()
        || s.nnodes < 2
        || !r.points.iter().any(|p| p.size_bytes >= BANDWIDTH_SIZE)
    {
        return None;
    }
    plateaus(r)
        .into_iter()
        .find(|(c, ..)| {
            !matches!(
                c,
                Collective::Alltoall | Collective::Alltoallv | Collective::Sendrecv
            )
        })
        .map(|(c, plateau, _)| (c, plateau))
}

/// The least a GPU cluster's nodes have between them: one RDMA NIC of 100 Gb/s, 12 GB/s busbw
/// by the per-NIC rule (sjeaugey, nccl-tests#119). A run across nodes well under it is below
/// for every NIC count and RDMA fabric: NCCL on TCP sockets is the usual reason.
const LEAST_RDMA_GBPS: f64 = 12.0;

/// The run under the weakest RDMA fabric a GPU cluster has, when no design is assumed of its
/// nodes and even one 100G NIC per node would carry more than the run did.
fn below_any_rdma(r: &RunRecord, s: &Situation) -> Option<AssumedDesign> {
    let (coll, plateau) = assumable(r, s)?;
    let ratio = plateau / LEAST_RDMA_GBPS;
    // Three quarters of the near band's low edge: 100G RoCE measured 9.4 per NIC (roce-100),
    // a little under the rule and no fault, stays clear of it.
    if ratio >= NEAR[0] * 0.75 {
        return None;
    }
    // Below only if the nodes have an RDMA fabric, which the run does not show: a verdict of
    // its own, never a plain `below` that automation would take as certain.
    let verdict = "below-if-rdma";
    let sentence = format!(
        "{coll} {plateau:.1} GB/s busbw across {} nodes is {} what one 100G RDMA NIC per node gives ({LEAST_RDMA_GBPS:.0} GB/s), whatever the GPUs: this is the speed of NCCL over TCP sockets (the InfiniBand/RoCE, EFA or libfabric plugin not loaded, NCCL_IB_DISABLE=1, or no RDMA device in the container; `NCCL_DEBUG=INFO` prints `Using network Socket` when so) — unless the nodes have only Ethernet of 50G or less between them (TCP or RoCE), which gives about this; state the NICs with --hardware to judge for certain.",
        s.nnodes,
        if ratio < 0.5 { "far below" } else { "below" }
    );
    Some(AssumedDesign {
        design: "any-rdma".into(),
        title: "one RDMA NIC of 100 Gb/s per node, the least any GPU cluster has".into(),
        facts: "1 x 100G RDMA per node".into(),
        citation: "sjeaugey: '24GB/s is the peak performance per 200G NIC (12 GB/s for 100G NICs)', https://github.com/NVIDIA/nccl-tests/issues/119".into(),
        collective: coll,
        measured_gbps: plateau,
        expected_gbps: LEAST_RDMA_GBPS,
        verdict: verdict.into(),
        consistent_with_nics: None,
        sentence,
    })
}

/// What is not known of the nodes' NICs, said as the table below it will use it: a count read
/// from the log or topology is named, not denied.
fn unknown_nics(s: &Situation) -> String {
    let nodes = s.nnodes;
    let hints = s.hints.iter().map(|h| format!("{h}; ")).collect::<String>();
    let what = match (s.known_nic_count(), s.stated.nic_gbps) {
        (Some(n), None) => format!(
            "ranks on {nodes} nodes with {n} NICs per node (from {}) and their speed not known (no --hardware or topology that gives it)",
            s.nic_count_source()
        ),
        (None, Some(g)) => format!(
            "ranks on {nodes} nodes with {g} Gb/s NICs and their count per node not known (no --hardware, topology or log that gives it)"
        ),
        _ => format!(
            "ranks on {nodes} nodes and no NIC count and speed known (no --hardware, topology or log that gives them)"
        ),
    };
    format!("{hints}{what}")
}

/// The readings for each plausible NIC count (the one known count, when only the speed is
/// missing), and the sentence that says them.
pub fn readings(r: &RunRecord, s: &Situation) -> (Vec<NicReading>, String, Vec<String>) {
    let counts: Vec<usize> = match s.known_nic_count() {
        Some(n) => vec![n],
        None => COUNTS.to_vec(),
    };
    let two = s.nnodes == 2;
    let mut rows = Vec::new();
    let mut sentences = Vec::new();
    let mut notes = Vec::new();
    for (coll, plateau, from) in plateaus(r) {
        // alltoall cannot spread one peer's bytes over several NICs: the single-NIC rate.
        let counts: &[usize] = match coll {
            Collective::Alltoall | Collective::Alltoallv | Collective::Sendrecv => &[1],
            _ => &counts,
        };
        let mut parts = Vec::new();
        for &nics in counts {
            let per = plateau / nics as f64;
            let matches = describe(per, two);
            parts.push(format!("{per:.1} GB/s per NIC with {nics}: {matches}"));
            rows.push(NicReading {
                collective: coll,
                nics_per_node: nics,
                per_nic_gbps: per,
                matches,
            });
        }
        sentences.push(format!(
            "{coll} {plateau:.1} GB/s busbw ({} and up) over {} nodes = {}.",
            format_size(from),
            s.nnodes,
            parts.join("; ")
        ));
    }
    if two {
        notes.push(super::compare::TWO_NODES.into());
    }
    let settle = match s.known_nic_count() {
        Some(n) => format!("the NICs' speed settles it: --hardware \"{n}x400G IB per node\" (your count, speed and kind)"),
        None => "one fact settles it: the NICs per node and their speed, e.g. --hardware \"8x400G IB per node\"".to_string(),
    };
    let sentence = if sentences.is_empty() {
        "nothing to judge: the run has no measured points".to_string()
    } else {
        format!("{} Conditional: {settle}.", sentences.join(" "))
    };
    (rows, sentence, notes)
}

#[cfg(test)]
#[path = "conditional_tests.rs"]
mod tests;

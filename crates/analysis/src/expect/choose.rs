//! Which expectation applies to a run: the path NCCL takes (`path`, told from the facts a run
//! carries), then the entry of the table that fits that path best.

use super::cost::{Hw, Link};
use super::path::path_of;
pub use super::path::{ChooseError, PathFacts};
pub use super::situation::{Situation, OVERRIDES};
use super::table::{Entry, PathKind, Table};
use crate::coll::Collective;
use serde::Serialize;

/// The chosen expectation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub entry: Entry,
    /// One line: which entry and why.
    pub why: String,
    pub path: PathFacts,
    /// Multiplies the entry's figures (NICs per node × line-rate scaling for per-NIC entries).
    pub scale: f64,
    pub nranks: usize,
    pub nnodes: usize,
    /// Overrides in force (`NCCL_SHM_DISABLE=1`, `WSL2`…) that moved the path.
    pub overrides: Vec<String>,
    /// What the machine would give without those overrides, when that differs.
    pub without_overrides: Option<Box<Choice>>,
    /// Hardware the user stated, each fact marked as stated.
    pub stated: Vec<String>,
}

impl Choice {
    /// The plateau figure for `coll` in bytes/s, and whether it was carried from all_reduce.
    pub fn plateau_bytes_per_s(&self, coll: Collective) -> Option<(f64, bool)> {
        self.entry
            .busbw_for(coll)
            .map(|(gbps, carried)| (gbps * 1e9 * self.scale, carried))
    }

    /// The cost model for `coll`, anchored on this entry's figures.
    pub fn link(&self, coll: Collective) -> Option<Link> {
        let (plateau, _) = self.plateau_bytes_per_s(coll)?;
        let nvls = self.entry.nvls == Some(true) && coll == Collective::AllReduce;
        let ring = if nvls {
            self.entry
                .busbw_gbps
                .get("all_gather")
                .map(|g| g * 1e9 * self.scale)
                .unwrap_or(plateau * 0.77)
        } else {
            plateau
        };
        let intra = match self.path.kind {
            PathKind::Nvlink => Hw::Nvlink,
            PathKind::PcieP2p | PathKind::PcieShm => Hw::Pci,
            PathKind::Net if self.nnodes > 1 && self.path.intra_nvlink => Hw::Nvlink,
            PathKind::Net if self.nnodes > 1 => Hw::Pci,
            PathKind::Net => Hw::Net,
        };
        Some(Link {
            intra,
            nranks: self.nranks.max(2),
            nnodes: self.nnodes.max(1),
            ring_busbw_bytes_per_s: ring,
            nvls_busbw_bytes_per_s: nvls.then_some(plateau),
            hop_latency_us: self.entry.hop_latency_us,
        })
    }
}

/// How well an entry fits; `None` when it does not apply at all.
fn fit(e: &Entry, s: &Situation, p: &PathFacts) -> Option<u32> {
    let name = s.gpu_name.as_deref().unwrap_or("");
    let applies = e.path == p.kind
        && e.links.contains(&p.link)
        && (e.gpus.is_empty() || e.matches_gpu(name))
        && e.covers_ranks(s.nranks.max(2))
        && e.covers_nodes(s.nnodes.max(1))
        && e.pcie_gen.is_none_or(|g| p.pcie_gen == Some(g))
        && e.nvls.is_none_or(|v| v == p.nvls)
        && (e.wsl2 != Some(true) || !s.wsl2.is_empty())
        && e.nv_links
            .is_none_or(|[lo, hi]| p.nv_links.is_some_and(|n| (lo..=hi).contains(&n)))
        && (!e.per_nvlink || (p.nv_links.is_some() && p.nvlink_gbps.is_some()))
        && (e.scales_with_line_rate || !e.per_nic || e.nic_gbps == p.nic_gbps);
    applies.then(|| {
        let mut score = 0;
        if !e.gpus.is_empty() {
            score += 4;
        }
        if e.wsl2 == Some(true) {
            score += 2;
        }
        if e.nvls.is_some() || e.nv_links.is_some() {
            score += 1;
        }
        // An entry measured at the run's line rate beats one scaled to it.
        if e.per_nic && e.nic_gbps.is_some() && e.nic_gbps == p.nic_gbps {
            score += 1;
        }
        score
    })
}

fn choose_once(table: &Table, s: &Situation) -> Result<Choice, ChooseError> {
    let gpu = s.gpu_name.as_deref().and_then(|n| table.gpu_model(n));
    let mut path = path_of(s, gpu)?;
    path.reasons.splice(0..0, s.hints.iter().cloned());
    let mut best: Option<(u32, &Entry)> = None;
    for e in &table.entries {
        // A fleet's floor is chosen only where nothing else fits (or by name): it says what a
        // node must reach, not what a healthy one does.
        let floor = e.provenance == crate::documents::expectations::Provenance::ProductionThreshold;
        if let Some(score) = fit(e, s, &path).map(|f| f * 2 + u32::from(!floor)) {
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, e));
            }
        }
    }
    let Some((_, entry)) = best else {
        return Err(ChooseError::NoEntry(format!(
            "no shipped expectation covers {} ranks on {} node(s) over {} ({}){}: give --profile NAME (ncclprobe baselines lists them)",
            s.nranks,
            s.nnodes,
            path.link,
            path.kind.name(),
            s.gpu_name.as_deref().map(|g| format!(", {g}")).unwrap_or_default()
        )));
    };
    let mut capped = None;
    let scale = match (entry.per_nic, path.nics_per_node) {
        (true, nics) => {
            let nics = nics.unwrap_or(1) as f64;
            let rate = match (entry.scales_with_line_rate, path.nic_gbps, entry.nic_gbps) {
                (true, Some(have), Some(base)) => have / base,
                _ => 1.0,
            };
            let by_nics = nics * rate;
            match (entry.node_cap_gbps, entry.busbw_gbps.get("all_reduce")) {
                (Some(cap), Some(&per_nic)) if by_nics * per_nic > cap => {
                    capped = Some(format!(
                        "a node over sockets carries about {cap:.0} GB/s at most, whatever the line rate ({:.1} by the NICs alone)",
                        by_nics * per_nic
                    ));
                    cap / per_nic
                }
                _ => by_nics,
            }
        }
        (false, _) if entry.per_nvlink => {
            path.nv_links.unwrap_or(1) as f64 * path.nvlink_gbps.unwrap_or(20.0)
        }
        (false, _) => 1.0,
    };
    path.reasons.extend(capped);
    if entry.per_nvlink {
        path.reasons.push(format!(
            "{} NVLinks x {} GB/s (NCCL's constant for this GPU)",
            path.nv_links.unwrap_or(1),
            path.nvlink_gbps.unwrap_or(20.0)
        ));
    }
    let why = format!(
        "{} ({}): {}",
        entry.id,
        entry.provenance.name(),
        path.reasons.join("; ")
    );
    Ok(Choice {
        entry: entry.clone(),
        why,
        path,
        scale,
        nranks: s.nranks,
        nnodes: s.nnodes,
        overrides: Vec::new(),
        without_overrides: None,
        stated: s.stated.facts(),
    })
}

/// The expectation for a situation, and, when overrides moved the path, the one without them.
pub fn choose(table: &Table, s: &Situation) -> Result<Choice, ChooseError> {
    if s.nranks < 2 {
        return Err(ChooseError::NoFacts(one_rank()));
    }
    let mut choice = choose_once(table, s)?;
    // WSL2 is not an override a user can drop; it stays in both situations.
    // A `*_DISABLE=0` is NCCL's default, not an override.
    let overrides: Vec<String> = OVERRIDES
        .iter()
        .filter_map(|k| s.env.get(*k).map(|v| (k, v)))
        .filter(|(k, v)| !(k.ends_with("_DISABLE") && v.trim() == "0"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !overrides.is_empty() || !s.log_transports.is_empty() {
        let free = s.without_overrides();
        if let Ok(alt) = choose_once(table, &free) {
            if alt.entry.id != choice.entry.id {
                choice.without_overrides = Some(Box::new(alt));
            }
        }
    }
    if !overrides.is_empty() {
        choice
            .why
            .push_str(&format!("; in force: {}", overrides.join(" ")));
    }
    choice.overrides = overrides;
    Ok(choice)
}

fn one_rank() -> String {
    "the run has one rank: no data crossed a link between GPUs, so no interconnect expectation applies (its busbw is 0 by nccl-tests' definition)".into()
}

/// How the run is not what `entry` describes: its ranks, its nodes, its GPU.
fn differences(entry: &crate::documents::expectations::Entry, s: &Situation) -> Vec<String> {
    let mut out = Vec::new();
    let within = |n: usize, [lo, hi]: [usize; 2]| n >= lo && n <= hi;
    let range = |[lo, hi]: [usize; 2]| match lo == hi {
        true => lo.to_string(),
        false => format!("{lo}-{hi}"),
    };
    if !within(s.nranks, entry.ranks) {
        out.push(format!(
            "{} ranks (it is for {})",
            s.nranks,
            range(entry.ranks)
        ));
    }
    if !within(s.nnodes, entry.nodes) {
        out.push(format!(
            "{} node{} (it is for {})",
            s.nnodes,
            if s.nnodes == 1 { "" } else { "s" },
            range(entry.nodes)
        ));
    }
    if let Some(name) = s.gpu_name.as_deref() {
        let upper = name.to_uppercase();
        if !entry.gpus.is_empty() && !entry.gpus.iter().any(|g| upper.contains(&g.to_uppercase())) {
            out.push(format!("{name} (it is for {})", entry.gpus.join(", ")));
        }
    }
    out
}

/// An entry named by the user (`--profile`), applied to the run's rank and node counts.
pub fn named(table: &Table, id: &str, s: &Situation) -> Result<Choice, String> {
    let entry = table.get(id).ok_or_else(|| {
        let ids = table.ids();
        format!(
            "unknown profile `{id}`{}; valid names: {}",
            crate::flags::did_you_mean(id, &ids),
            ids.join(", ")
        )
    })?;
    if s.nranks < 2 {
        return Err(one_rank());
    }
    let gpu = s.gpu_name.as_deref().and_then(|n| table.gpu_model(n));
    let nics = if entry.per_nic {
        Some(if s.nnodes > 1 {
            (s.nranks / s.nnodes).max(1)
        } else {
            1
        })
    } else {
        None
    };
    let path = PathFacts {
        kind: entry.path,
        link: entry.links[0].clone(),
        pcie_gen: entry.pcie_gen.or(gpu.map(|g| g.pcie_gen)),
        nvls: entry.nvls == Some(true),
        nics_per_node: nics,
        nic_gbps: entry.nic_gbps,
        intra_nvlink: entry.path == PathKind::Nvlink || gpu.is_some_and(|g| g.sxm_nvswitch),
        nv_links: None,
        nvlink_gbps: gpu.and_then(|g| g.nvlink_gbps),
        reasons: vec!["given with --profile".into()],
    };
    let mismatch = differences(entry, s);
    Ok(Choice {
        entry: entry.clone(),
        why: format!(
            "{} ({}): given with --profile{}",
            entry.id,
            entry.provenance.name(),
            match mismatch.is_empty() {
                true => String::new(),
                false => format!(
                    "; {}: {}",
                    crate::documents::qualification::PROFILE_MISMATCH,
                    mismatch.join(", ")
                ),
            }
        ),
        path,
        scale: nics.unwrap_or(1) as f64,
        nranks: s.nranks,
        nnodes: s.nnodes,
        overrides: Vec::new(),
        without_overrides: None,
        stated: s.stated.facts(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::shipped;
    use crate::import::topo::Topology;

    fn topo(text: &str) -> Option<(String, Topology)> {
        Some(("t".into(), crate::import::topo::parse_str(text).unwrap()))
    }

    fn situation(gpu: &str, nranks: usize, t: Option<(String, Topology)>) -> Situation {
        Situation {
            nranks,
            nnodes: 1,
            gpu_name: (!gpu.is_empty()).then(|| gpu.to_string()),
            topology: t,
            ..Default::default()
        }
    }

    const NV_PAIRS_SYS: &str = "        GPU0    GPU1    GPU2    GPU3\nGPU0     X      NV12    SYS     SYS\nGPU1    NV12     X      SYS     SYS\nGPU2    SYS     SYS      X      NV12\nGPU3    SYS     SYS     NV12     X\n";

    #[test]
    fn the_slowest_pair_decides() {
        // A100 PCIe cards bridged in pairs, the pairs on different sockets: the ring crosses SYS.
        let s = situation("NVIDIA A100 80GB PCIe", 4, topo(NV_PAIRS_SYS));
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(c.entry.id, "sys-cross-socket-shm", "{}", c.why);
        assert!(c.why.contains("GPU0-GPU2 is SYS"), "{}", c.why);
        // Two ranks use the first pair only: NVLink.
        let two = choose(
            shipped(),
            &situation("NVIDIA A100 80GB PCIe", 2, topo(NV_PAIRS_SYS)),
        )
        .unwrap();
        assert_eq!(two.entry.id, "a100-nvlink-pair", "{}", two.why);
    }

    #[test]
    fn ranks_are_placed_on_gpus_by_pci_address_not_by_their_cuda_number() {
        use crate::documents::topology::PciAddress;
        // The same board, its rows tied to PCI addresses as a live topology has them.
        let (src, mut t) = topo(NV_PAIRS_SYS).unwrap();
        for (i, bus) in ["18", "38", "98", "b8"].iter().enumerate() {
            t.info.entry(format!("GPU{i}")).or_default().pci_bus_id =
                Some(format!("0000:{bus}:00.0"));
        }
        let on = |buses: &[&str]| -> Situation {
            let mut s = situation("NVIDIA A100 80GB PCIe", 2, Some((src.clone(), t.clone())));
            s.rank_gpus = buses
                .iter()
                .map(|b| PciAddress::in_device_text(b))
                .collect();
            s
        };
        // CUDA_VISIBLE_DEVICES=1,2: CUDA's devices 0 and 1 are the second and third rows, which
        // meet across the sockets; the first two rows would have said NVLink.
        let c = choose(
            shipped(),
            &on(&[" 0 [0000:38:00] A100", " 1 [0000:98:00] A100"]),
        )
        .unwrap();
        assert_eq!(c.entry.id, "sys-cross-socket-shm", "{}", c.why);
        assert!(c.why.contains("GPU1-GPU2 is SYS"), "{}", c.why);
        assert!(c.why.contains("GPU1, GPU2 (by PCI address)"), "{}", c.why);
        // Old nccl-tests print the bus alone ([0x98]); reordered ranks name the same pair.
        let c = choose(shipped(), &on(&[" 0 [0xb8] A100", " 1 [0x98] A100"])).unwrap();
        assert_eq!(c.entry.id, "a100-nvlink-pair", "{}", c.why);
        assert!(c.why.contains("GPU3, GPU2 (by PCI address)"), "{}", c.why);
        // A rank without an address: the first rows stand in, and the reason says so.
        let c = choose(shipped(), &on(&[" 0 [0000:38:00] A100", " 1 A100"])).unwrap();
        assert_eq!(c.entry.id, "a100-nvlink-pair", "{}", c.why);
        assert!(c.why.contains("is not known"), "{}", c.why);
        // An address the topology does not hold (another machine's topology): likewise.
        let c = choose(
            shipped(),
            &on(&[" 0 [0000:38:00] A100", " 1 [0000:c1:00] A100"]),
        )
        .unwrap();
        assert!(c.why.contains("GPU0, GPU1 stand for them"), "{}", c.why);
    }

    #[test]
    fn overrides_move_the_path_and_the_free_path_is_reported() {
        let nv8 = {
            let mut t = String::from("\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\n");
            for i in 0..8 {
                t.push_str(&format!("GPU{i}"));
                for j in 0..8 {
                    t.push_str(if i == j { "\t X " } else { "\tNV18" });
                }
                t.push('\n');
            }
            t
        };
        let mut s = situation("NVIDIA H100 80GB HBM3", 8, topo(&nv8));
        assert_eq!(
            choose(shipped(), &s).unwrap().entry.id,
            "h100-sxm-nvswitch-8"
        );
        s.env.insert("NCCL_NVLS_ENABLE".into(), "0".into());
        let ring = choose(shipped(), &s).unwrap();
        assert_eq!(ring.entry.id, "h100-sxm-nvswitch-ring");
        assert_eq!(
            ring.without_overrides.as_ref().unwrap().entry.id,
            "h100-sxm-nvswitch-8"
        );
        s.env.clear();
        s.env.insert("NCCL_P2P_DISABLE".into(), "1".into());
        let shm = choose(shipped(), &s).unwrap();
        assert_eq!(shm.path.kind, PathKind::PcieShm, "{}", shm.why);
        assert!(shm.why.contains("NCCL_P2P_DISABLE=1"));
    }

    #[test]
    fn p2p_level_raises_nccl_s_reach_through_the_host_bridge() {
        let phb = "        GPU0    GPU1\nGPU0     X      PHB\nGPU1    PHB      X\n";
        let mut s = situation("NVIDIA RTX A6000", 2, topo(phb));
        assert_eq!(choose(shipped(), &s).unwrap().entry.id, "pcie-gen4-x16-shm");
        s.env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
        assert_eq!(
            choose(shipped(), &s).unwrap().entry.id,
            "pcie-gen4-x16-p2p-hostbridge"
        );
    }

    #[test]
    fn a_log_s_socket_transport_and_nodes_choose_the_network() {
        let mut s = situation("NVIDIA GeForce RTX 3090", 2, None);
        s.log_transports = vec!["NET/Socket".into()];
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(c.entry.id, "socket-tcp", "{}", c.why);
        assert!(c.why.contains("socket transport"));
        let mut multi = situation("NVIDIA A100-SXM4-80GB", 16, None);
        multi.nnodes = 2;
        let ib = choose(shipped(), &multi).unwrap();
        assert_eq!((ib.entry.id.as_str(), ib.scale), ("ib-hdr-200", 8.0));
        multi.env.insert("NCCL_IB_DISABLE".into(), "1".into());
        let tcp = choose(shipped(), &multi).unwrap();
        assert_eq!(tcp.entry.id, "socket-tcp");
        assert_eq!(tcp.without_overrides.unwrap().entry.id, "ib-hdr-200");
    }

    #[test]
    fn direct_nvlinks_are_counted_and_switch_boards_are_told_apart() {
        // Leonardo's 4-GPU HGX A100: NV4 between every pair, no NVSwitch.
        let nv4 = "        GPU0    GPU1    GPU2    GPU3\nGPU0     X      NV4     NV4     NV4\nGPU1    NV4      X      NV4     NV4\nGPU2    NV4     NV4      X      NV4\nGPU3    NV4     NV4     NV4      X\n";
        let c = choose(shipped(), &situation("NVIDIA A100-SXM-64GB", 4, topo(nv4))).unwrap();
        assert_eq!(c.entry.id, "nvlink-direct", "{}", c.why);
        let (plateau, _) = c.plateau_bytes_per_s(Collective::AllReduce).unwrap();
        assert!((plateau / 1e9 - 74.4).abs() < 0.01, "{plateau}");
        // The same GPUs on an NVSwitch board show NV12 between every pair.
        let nv12 = nv4.replace("NV4", "NV12");
        let c = choose(
            shipped(),
            &situation("NVIDIA A100-SXM4-80GB", 4, topo(&nv12)),
        )
        .unwrap();
        assert_eq!(c.entry.id, "a100-sxm4-nvswitch-8", "{}", c.why);
    }

    #[test]
    fn the_log_s_nics_tell_roce_and_how_many() {
        let mut s = situation("NVIDIA A100-SXM4-40GB", 16, None);
        s.nnodes = 2;
        s.log_nics = vec!["mlx5_0:1/RoCE".into(), "mlx5_1:1/RoCE".into()];
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(
            (c.entry.id.as_str(), c.scale),
            ("roce-100", 2.0),
            "{}",
            c.why
        );
        assert!(c.why.contains("2 NICs per node in the log"), "{}", c.why);
        let mut log = crate::import::nccl_log::LogFacts::default();
        let line = "lrdn2296:4063850:4063871 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.0.0.1<0>";
        let input = crate::import::text::Input::from_reader(
            "log",
            Box::new(std::io::Cursor::new(line.as_bytes().to_vec())),
        )
        .unwrap();
        input.lines("a log", |l| log.feed("log", &l)).unwrap();
        assert_eq!(log.net_devices.len(), 4);
        assert_eq!(log.net_devices[0], "mlx5_0:1/IB");
    }

    #[test]
    fn nothing_known_is_an_error_that_says_what_to_give() {
        let e = choose(shipped(), &situation("", 2, None)).unwrap_err();
        assert!(e.to_string().contains("--topo") && e.to_string().contains("--profile"));
        let e = named(shipped(), "no-such", &situation("", 2, None)).unwrap_err();
        assert!(e.contains("valid names") && e.contains("pcie-gen4-x16-p2p"));
    }
}

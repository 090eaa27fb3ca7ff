//! An expected time at every message size, in the manner of NCCL's own tuning model
//! (`src/graph/tuning.cc`, reference/anchors.md §5): per algorithm and protocol a base latency,
//! a per-step hardware latency and a bandwidth, NCCL taking the fastest. The bandwidth is
//! anchored on the chosen entry's plateau figure, so at large sizes the model returns that figure
//! and at small sizes NCCL's latency constants.

use crate::coll::Collective;
use serde::Serialize;

/// The hardware a step crosses, NCCL's `NCCL_HW_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hw {
    Nvlink,
    Pci,
    Net,
}

/// Protocols in NCCL's order: LL, LL128, Simple.
const PROTOCOLS: [&str; 3] = ["LL", "LL128", "Simple"];

/// `baseLatencies` (µs) for Tree and Ring, NCCL 2.30.
const BASE_TREE: [f64; 3] = [6.8, 14.0, 8.4];
const BASE_RING: [f64; 3] = [6.6, 14.0, 8.4];

/// `hwLatencies` (µs) per hardware, Tree and Ring.
fn hw_latency(hw: Hw, tree: bool) -> [f64; 3] {
    match (hw, tree) {
        (Hw::Nvlink, true) => [0.6, 1.25, 4.0],
        (Hw::Nvlink, false) => [0.6, 1.9, 3.4],
        (Hw::Pci, true) => [1.0, 1.9, 4.0],
        (Hw::Pci, false) => [1.0, 2.5, 5.7],
        (Hw::Net, true) => [5.0, 8.5, 14.0],
        (Hw::Net, false) => [2.7, 4.0, 14.0],
    }
}

/// NVLS all-reduce latency on NVLink (Simple), µs.
const NVLS_LATENCY_US: f64 = 25.0;

/// The path a collective takes, as far as the model needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// What one step inside a node crosses (NET when NCCL is forced onto sockets or IB).
    pub intra: Hw,
    pub nranks: usize,
    pub nnodes: usize,
    /// The ring's plateau busbw, bytes/s.
    pub ring_busbw_bytes_per_s: f64,
    /// NVLS all_reduce's plateau busbw when NVLink SHARP is on.
    pub nvls_busbw_bytes_per_s: Option<f64>,
    /// Replaces NCCL's per-step hardware latency (sockets are far slower than IB).
    pub hop_latency_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub time_s: f64,
    pub busbw_bytes_per_s: f64,
    pub algorithm: &'static str,
    pub protocol: &'static str,
    /// The share of the time that is latency, 0..1: near 0 the plateau figure decides, near 1
    /// NCCL's latency constants do.
    pub latency_share: f64,
}

fn log2i(n: usize) -> f64 {
    (usize::BITS - 1 - n.max(1).leading_zeros()) as f64
}

impl Link {
    fn ppn(&self) -> usize {
        (self.nranks / self.nnodes.max(1)).max(1)
    }

    fn hop(&self, hw: Hw, tree: bool, p: usize) -> f64 {
        match (hw, self.hop_latency_us) {
            (Hw::Net, Some(us)) => us,
            _ => hw_latency(hw, tree)[p],
        }
    }

    /// LL128 runs only where every intra-node step is NVLink (tuning.cc enables it for
    /// `typeIntra <= PATH_NVB`).
    fn ll128(&self) -> bool {
        self.intra == Hw::Nvlink
    }

    /// Ring latency (µs) for protocol `p`.
    fn ring_latency_us(&self, coll: Collective, p: usize) -> f64 {
        let n = self.nranks;
        let nodes = self.nnodes.max(1);
        let nsteps = match coll {
            Collective::AllReduce => 2 * (n - 1),
            Collective::Sendrecv => 1,
            _ => n - 1,
        };
        let inter_steps = if nodes == 1 {
            0
        } else if coll == Collective::AllReduce {
            2 * (nodes - 1)
        } else {
            nodes - 1
        };
        let inter = self.hop(Hw::Net, self.ppn() == 1, p);
        let intra = self.hop(self.intra, false, p);
        let steps = nsteps.saturating_sub(inter_steps) as f64;
        BASE_RING[p] + steps * intra + inter_steps as f64 * inter
    }

    fn tree_latency_us(&self, p: usize) -> f64 {
        let nodes = self.nnodes.max(1);
        let intra = self.hop(self.intra, true, p);
        let inter = self.hop(Hw::Net, true, p);
        BASE_TREE[p] + 2.0 * ((self.ppn() - 1) as f64 * intra + log2i(nodes) * inter)
    }

    /// Every (algorithm, protocol) NCCL would consider: (name, protocol, latency µs, busbw).
    fn candidates(&self, coll: Collective) -> Vec<(&'static str, usize, f64, f64)> {
        let b = self.ring_busbw_bytes_per_s;
        // tuning.cc: LL is half the bandwidth (capped), LL128 120/128 of it.
        let ll_cap = if self.nnodes <= 1 { 87.7e9 } else { 22.5e9 };
        let mut out = vec![
            (
                "Ring",
                0,
                self.ring_latency_us(coll, 0),
                (0.5 * b).min(ll_cap),
            ),
            ("Ring", 2, self.ring_latency_us(coll, 2), b),
        ];
        if self.ll128() {
            out.push(("Ring", 1, self.ring_latency_us(coll, 1), 0.92 * b));
        }
        if coll == Collective::AllReduce && self.nranks > 2 {
            // Tree's busbw in nccl-tests terms: NCCL's tree algbw is 0.5 of its bus figure.
            let n = self.nranks as f64;
            let tree = b * 0.92 * (n - 1.0) / n;
            out.push(("Tree", 0, self.tree_latency_us(0), (tree / 3.8).min(ll_cap)));
            out.push(("Tree", 2, self.tree_latency_us(2), tree));
            if self.ll128() {
                out.push(("Tree", 1, self.tree_latency_us(1), tree * 7.0 / 9.0));
            }
        }
        if let (Collective::AllReduce, Some(nvls)) = (coll, self.nvls_busbw_bytes_per_s) {
            let net = if self.nnodes > 1 {
                self.hop(Hw::Net, false, 2)
            } else {
                0.0
            };
            out.push(("NVLS", 2, NVLS_LATENCY_US + net, nvls));
        }
        out
    }

    /// The fastest (algorithm, protocol) for `coll` of `size_bytes` (nccl-tests' size).
    pub fn estimate(&self, coll: Collective, size_bytes: u64) -> Estimate {
        let factor = coll.busbw_factor(self.nranks);
        let bus_bytes = size_bytes as f64 * factor;
        let mut best: Option<Estimate> = None;
        for (algorithm, p, lat_us, busbw) in self.candidates(coll) {
            if busbw <= 0.0 {
                continue;
            }
            let lat_s = lat_us * 1e-6;
            let time_s = lat_s + bus_bytes / busbw;
            if best.as_ref().is_none_or(|b| time_s < b.time_s) {
                best = Some(Estimate {
                    time_s,
                    busbw_bytes_per_s: if time_s > 0.0 {
                        bus_bytes / time_s
                    } else {
                        0.0
                    },
                    algorithm,
                    protocol: PROTOCOLS[p],
                    latency_share: lat_s / time_s,
                });
            }
        }
        best.unwrap_or(Estimate {
            time_s: f64::NAN,
            busbw_bytes_per_s: f64::NAN,
            algorithm: "none",
            protocol: "none",
            latency_share: 1.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(intra: Hw, nranks: usize, busbw_gbps: f64) -> Link {
        Link {
            intra,
            nranks,
            nnodes: 1,
            ring_busbw_bytes_per_s: busbw_gbps * 1e9,
            nvls_busbw_bytes_per_s: None,
            hop_latency_us: None,
        }
    }

    #[test]
    fn small_messages_cost_nccl_s_ring_ll_latency() {
        // reference/anchors.md §5.5 worked table: Ring/LL all-reduce 15.0 µs on 8 NVLink
        // GPUs, 20.6 on 8 PCIe GPUs, 8.6 on 2 PCIe GPUs.
        for (hw, n, us) in [(Hw::Nvlink, 8, 15.0), (Hw::Pci, 8, 20.6), (Hw::Pci, 2, 8.6)] {
            let e = link(hw, n, 20.0).estimate(Collective::AllReduce, 8);
            assert!(
                (e.time_s * 1e6 - us).abs() < 0.3,
                "{hw:?} {n}: {}",
                e.time_s * 1e6
            );
            assert_eq!(e.protocol, "LL");
            assert!(e.latency_share > 0.99);
        }
    }

    #[test]
    fn large_messages_reach_the_plateau_and_time_grows_with_size() {
        let l = link(Hw::Nvlink, 8, 230.0);
        let big = l.estimate(Collective::AllReduce, 8 << 30);
        assert!(
            (big.busbw_bytes_per_s / 230e9 - 1.0).abs() < 0.01,
            "{big:?}"
        );
        assert_eq!((big.algorithm, big.protocol), ("Ring", "Simple"));
        let mut last = 0.0;
        for k in 3..34 {
            let e = l.estimate(Collective::AllReduce, 1u64 << k);
            assert!(e.time_s > last, "time must grow with size at 2^{k}");
            assert!(e.busbw_bytes_per_s <= 230e9 * 1.0001);
            last = e.time_s;
        }
    }

    #[test]
    fn nvls_wins_at_large_sizes_and_sockets_are_slow_to_start() {
        let mut l = link(Hw::Nvlink, 8, 370.0);
        l.nvls_busbw_bytes_per_s = Some(480e9);
        assert_eq!(l.estimate(Collective::AllReduce, 8 << 30).algorithm, "NVLS");
        assert_eq!(l.estimate(Collective::AllGather, 8 << 30).algorithm, "Ring");
        let mut s = link(Hw::Net, 2, 0.69);
        s.hop_latency_us = Some(25.0);
        let e = s.estimate(Collective::AllReduce, 8);
        assert!(e.time_s > 50e-6, "{e:?}");
    }

    #[test]
    fn multi_node_rings_pay_network_steps() {
        let mut l = link(Hw::Nvlink, 16, 192.0);
        let one = l.estimate(Collective::AllReduce, 8).time_s;
        l.nnodes = 2;
        let two = l.estimate(Collective::AllReduce, 8).time_s;
        assert!(two > one, "{two} vs {one}");
    }
}

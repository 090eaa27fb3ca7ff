//! The collectives: names, buffer layouts and bandwidth formulas, exactly as nccl-tests has them
//! (`getCollByteCount` and `*GetBw` in nccl-tests' src/<coll>.cu).

use crate::dtype::Dtype;
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod traffic;
pub use traffic::Traffic;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    Alltoall,
    Sendrecv,
    /// nccl-tests' other binaries: gather_perf, scatter_perf, hypercube_perf and alltoallv_perf
    /// (measured as those binaries run them, from sends and receives: `Collective::EXTRA`).
    /// Each has its own bandwidth formula.
    Gather,
    Scatter,
    Hypercube,
    Alltoallv,
    /// An imported result whose collective the log does not say (never measured).
    Unknown,
}

impl Collective {
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Alltoall,
        Collective::Sendrecv,
    ];

    /// What nccl-tests' gather_perf, scatter_perf, hypercube_perf and alltoallv_perf measure,
    /// measured as they do it (sends and receives in groups): run by their `*_perf` names or
    /// by `--collective`, never part of `all`.
    pub const EXTRA: [Collective; 4] = [
        Collective::Gather,
        Collective::Scatter,
        Collective::Hypercube,
        Collective::Alltoallv,
    ];

    /// Whether ncclprobe's backends run it (all but `unknown`, which only imports name).
    pub fn is_measured(self) -> bool {
        Collective::ALL.contains(&self) || Collective::EXTRA.contains(&self)
    }

    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Alltoall => "alltoall",
            Collective::Sendrecv => "sendrecv",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Hypercube => "hypercube",
            Collective::Alltoallv => "alltoallv",
            Collective::Unknown => "unknown",
        }
    }

    /// Accepts our names, nccl-tests binary names (`all_reduce_perf`) and hyphen/camel variants.
    pub fn parse(text: &str) -> Option<Collective> {
        let norm: String = text
            .trim()
            .trim_end_matches("_perf")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        Collective::ALL
            .into_iter()
            .chain(Collective::EXTRA)
            .find(|c| c.name().replace('_', "") == norm)
    }

    pub fn has_op(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// Whether nccl-tests runs this collective once per `-o` op and prints the op in its
    /// redop column: the reductions, and sendrecv, which moves data unreduced but takes its
    /// op from the command line (src/sendrecv.cu, SendRecvRunTest: `TimeTest(..., run_ops[j],
    /// run_opnames[j], -1)`; every other non-reduction passes `"none"`).
    pub fn labels_op(self) -> bool {
        self.has_op() || self == Collective::Sendrecv
    }

    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
    }

    /// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md and src/<coll>.cu).
    pub fn busbw_factor(self, nranks: usize) -> f64 {
        let n = nranks as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::Alltoall
            | Collective::Alltoallv
            | Collective::Gather
            | Collective::Scatter => (n - 1.0) / n,
            Collective::Broadcast
            | Collective::Reduce
            | Collective::Sendrecv
            | Collective::Hypercube => 1.0,
            // No formula is known; imported values are used as printed.
            Collective::Unknown => 1.0,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    OutOfPlace,
    InPlace,
}

impl Placement {
    pub const BOTH: [Placement; 2] = [Placement::OutOfPlace, Placement::InPlace];
    pub fn name(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out-of-place",
            Placement::InPlace => "in-place",
        }
    }
}

/// Element counts and in-place offsets of one collective call on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Elements each rank sends.
    pub send_count: usize,
    /// Elements each rank receives.
    pub recv_count: usize,
    /// The `count` argument of the NCCL call (per-rank count for gather/scatter style calls).
    pub param_count: usize,
    /// In-place: where the send data starts inside the single buffer, in elements.
    pub send_inplace_offset: usize,
    /// In-place: where the result starts inside the single buffer, in elements.
    pub recv_inplace_offset: usize,
}

impl Layout {
    /// nccl-tests' `getCollByteCount`: `count` is the requested size divided by the type size
    /// (`elem_bytes`). Per-rank counts are rounded down to 16-byte multiples as nccl-tests does
    /// (src/all_gather.cu, reduce_scatter.cu, alltoall.cu: `(count/nranks) & -(16/eltSize)`),
    /// so rows compare with its rows size for size, and in-place chunks stay aligned.
    /// alltoallv's buffers hold the busiest rank's traffic (`traffic`; the others ignore it).
    pub fn new(
        coll: Collective,
        count: usize,
        elem_bytes: usize,
        nranks: usize,
        rank: usize,
        traffic: &Traffic,
    ) -> Layout {
        let n = nranks.max(1);
        let per_rank = || {
            let unit = (16 / elem_bytes.clamp(1, 16)).max(1);
            (count / n) & !(unit - 1)
        };
        let (send_count, recv_count, param_count, send_off, recv_off) = match coll {
            Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::Sendrecv
            | Collective::Unknown => (count, count, count, 0, 0),
            Collective::AllGather | Collective::Gather | Collective::Hypercube => {
                let per = per_rank();
                (per, per * n, per, rank * per, 0)
            }
            Collective::ReduceScatter | Collective::Scatter => {
                let per = per_rank();
                (per * n, per, per, 0, rank * per)
            }
            Collective::Alltoall => {
                let per = per_rank();
                (per * n, per * n, per, 0, 0)
            }
            Collective::Alltoallv => {
                // AlltoAllvGetCollByteCount: both placements start at the buffer's start.
                let param = traffic.param_count(count, elem_bytes, n);
                let total = (param * n * elem_bytes) as u64;
                let (send, recv) = traffic.max_counts(elem_bytes, n, total);
                (send, recv, param, 0, 0)
            }
        };
        Layout {
            send_count,
            recv_count,
            param_count,
            send_inplace_offset: send_off,
            recv_inplace_offset: recv_off,
        }
    }

    /// Elements in the larger of the two buffers: the single in-place buffer's length.
    pub fn buffer_count(&self) -> usize {
        self.send_count.max(self.recv_count)
    }
}

/// The message size a point is reported under: nccl-tests prints `max(sendBytes, recvBytes)`.
pub fn reported_size_bytes(
    coll: Collective,
    count: usize,
    dtype: Dtype,
    nranks: usize,
    traffic: &Traffic,
) -> u64 {
    (Layout::new(coll, count, dtype.size_bytes(), nranks, 0, traffic).buffer_count()
        * dtype.size_bytes()) as u64
}

/// The count column nccl-tests prints: each rank's count argument (`paramCount` of the
/// collective's `GetCollByteCount`), so each rank's share for all_gather, reduce_scatter and
/// alltoall.
pub fn reported_count(
    coll: Collective,
    count: usize,
    dtype: Dtype,
    nranks: usize,
    traffic: &Traffic,
) -> u64 {
    Layout::new(coll, count, dtype.size_bytes(), nranks, 0, traffic).param_count as u64
}

/// Bytes nccl-tests divides by the time to get algbw (`baseBw` in each `*GetBw`); for
/// alltoallv the busiest rank's, sent or received (AlltoAllvGetBw).
pub fn algbw_bytes(
    coll: Collective,
    count: usize,
    dtype: Dtype,
    nranks: usize,
    traffic: &Traffic,
) -> f64 {
    let layout = Layout::new(coll, count, dtype.size_bytes(), nranks, 0, traffic);
    let ts = dtype.size_bytes() as f64;
    let param = layout.param_count as f64;
    match coll {
        Collective::AllGather
        | Collective::ReduceScatter
        | Collective::Alltoall
        | Collective::Gather
        | Collective::Scatter => param * ts * nranks as f64,
        Collective::Alltoallv => (layout.buffer_count() * dtype.size_bytes()) as f64,
        Collective::Hypercube => param * ts * (nranks as f64 - 1.0),
        _ => param * ts,
    }
}

/// (algbw, busbw) in bytes per second for one call taking `time_s`.
pub fn bandwidths(
    coll: Collective,
    count: usize,
    dtype: Dtype,
    nranks: usize,
    traffic: &Traffic,
    time_s: f64,
) -> (f64, f64) {
    if time_s <= 0.0 || !time_s.is_finite() {
        return (0.0, 0.0);
    }
    let algbw = algbw_bytes(coll, count, dtype, nranks, traffic) / time_s;
    (algbw, algbw * coll.busbw_factor(nranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Collective::ALL {
            assert_eq!(Collective::parse(c.name()), Some(c));
        }
        assert_eq!(
            Collective::parse("all_reduce_perf"),
            Some(Collective::AllReduce)
        );
        assert_eq!(Collective::parse("AllReduce"), Some(Collective::AllReduce));
        assert_eq!(Collective::parse("all-to-all"), Some(Collective::Alltoall));
        assert_eq!(Collective::parse("allreduce2"), None);
        assert_eq!(Collective::parse("alltoall"), Some(Collective::Alltoall));
    }

    #[test]
    fn busbw_matches_nccl_tests_rows() {
        // 07-2080ti-x2-pcie-no-p2p-allreduce.txt: 1073741824 B in 268588 us, algbw 4.00, busbw 4.00 (n=2).
        let (alg, bus) = bandwidths(
            Collective::AllReduce,
            268435456,
            Dtype::Float,
            2,
            &Traffic::default(),
            268588e-6,
        );
        assert!((alg / 1e9 - 3.9977).abs() < 1e-3);
        assert!((bus - alg).abs() < 1e-6);
        // 8 ranks: factor 2*7/8 = 1.75.
        assert!((Collective::AllReduce.busbw_factor(8) - 1.75).abs() < 1e-12);
        assert!((Collective::AllGather.busbw_factor(8) - 0.875).abs() < 1e-12);
        assert_eq!(Collective::Sendrecv.busbw_factor(8), 1.0);
    }

    #[test]
    fn layouts_follow_nccl_tests() {
        // 40 floats on 4 ranks: 10 per rank, rounded down to 16 bytes (4 floats) = 8.
        let ag = Layout::new(Collective::AllGather, 40, 4, 4, 3, &Traffic::default());
        assert_eq!((ag.send_count, ag.recv_count, ag.param_count), (8, 32, 8));
        assert_eq!(ag.send_inplace_offset, 24);
        let rs = Layout::new(Collective::ReduceScatter, 40, 4, 4, 1, &Traffic::default());
        assert_eq!(
            (rs.send_count, rs.recv_count, rs.recv_inplace_offset),
            (32, 8, 8)
        );
        // nccl-tests' rows: all_gather of 4000 B floats on 3 ranks is printed as 3984 B
        // (333 per rank rounded to 332), alltoall of 100 B int8 on 3 ranks as 96 B.
        assert_eq!(
            reported_size_bytes(
                Collective::AllGather,
                1000,
                Dtype::Float,
                3,
                &Traffic::default()
            ),
            3984
        );
        assert_eq!(
            reported_size_bytes(
                Collective::Alltoall,
                100,
                Dtype::Int8,
                3,
                &Traffic::default()
            ),
            96
        );
        assert_eq!(
            reported_size_bytes(
                Collective::ReduceScatter,
                1000,
                Dtype::Double,
                3,
                &Traffic::default()
            ),
            7968
        );
        // all_reduce is not split per rank: no rounding.
        assert_eq!(
            reported_size_bytes(
                Collective::AllReduce,
                1001,
                Dtype::Float,
                3,
                &Traffic::default()
            ),
            4004
        );
        // Too few elements for the ranks: zero-size rows, as in nccl-tests' output.
        assert_eq!(
            reported_size_bytes(
                Collective::AllGather,
                2,
                Dtype::Float,
                4,
                &Traffic::default()
            ),
            0
        );
        assert_eq!(
            algbw_bytes(
                Collective::Alltoall,
                1024,
                Dtype::Float,
                4,
                &Traffic::default()
            ),
            4096.0
        );
    }
}

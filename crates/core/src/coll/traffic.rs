//! alltoallv_perf's traffic: how many bytes each rank sends each peer (nccl-tests 2.19.6,
//! src/alltoallv.cu). Either generated, a blend of an even split and a split weighted by the
//! distance in rank numbers (`NCCL_TESTS_ALLTOALLV_SPREAD`), or read from a square matrix of
//! bytes (`NCCL_TESTS_ALLTOALLV_MATRIX_FILE`, scaled by `NCCL_TESTS_ALLTOALLV_MATRIX_SCALE`).
//! Every per-peer amount is rounded down to 16 bytes, as nccl-tests rounds it.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Who sends how much to whom in one alltoallv call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Traffic {
    /// Each rank sends the message size in all, split between peers: `spread` 0 evenly, 1 in
    /// proportion to the distance `(to - from) mod n` (nothing to itself), between the two
    /// a blend.
    Generated { spread: f64 },
    /// Row `from`, column `to`: the bytes `from` sends `to`, already scaled and rounded.
    Matrix {
        /// The file it was read from.
        source: String,
        scale: f64,
        dim: usize,
        bytes: Arc<Vec<u64>>,
    },
}

impl Default for Traffic {
    /// nccl-tests' default: generated, fully distance-weighted.
    fn default() -> Self {
        Traffic::Generated { spread: 1.0 }
    }
}

/// Where one peer's part sits in a buffer, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub offset: usize,
    pub count: usize,
}

/// One rank's side of an alltoallv call, in elements, peers in rank order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exchange {
    /// What this rank sends each peer, from its send buffer (packed in peer order).
    pub send: Vec<Span>,
    /// What this rank receives from each peer, into its receive buffer (packed in peer order).
    pub recv: Vec<Span>,
    /// Where, in each peer's send buffer, the part for this rank begins.
    pub at_peer: Vec<usize>,
}

/// nccl-tests' `& ~(size_t)15`.
fn round16(bytes: u64) -> u64 {
    bytes & !15
}

impl Traffic {
    /// `NCCL_TESTS_ALLTOALLV_SPREAD` as AlltoAllvParseEnv reads it: a whole number (strtod to
    /// the end) or else the default 1, then clamped to 0..=1. A NaN, which strtod would take
    /// and the clamp would keep, is refused too.
    pub fn generated(spread: Option<&str>) -> Traffic {
        let spread = spread
            .and_then(|s| s.trim_start().parse::<f64>().ok())
            .filter(|v| !v.is_nan())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        Traffic::Generated { spread }
    }

    /// `NCCL_TESTS_ALLTOALLV_MATRIX_SCALE` as AlltoAllvParseEnv reads it: default 1, negative
    /// values become 0.
    pub fn matrix_scale(text: Option<&str>) -> f64 {
        text.and_then(|s| s.trim_start().parse::<f64>().ok())
            .filter(|v| !v.is_nan())
            .unwrap_or(1.0)
            .max(0.0)
    }

    /// Bytes rank `from` sends rank `to` in a call of `total_bytes` per rank (generated) or as
    /// the matrix says.
    pub fn peer_bytes(&self, from: usize, to: usize, nranks: usize, total_bytes: u64) -> u64 {
        match self {
            Traffic::Matrix { dim, bytes, .. } => bytes[from * dim + to],
            Traffic::Generated { .. } if nranks <= 1 => round16(total_bytes),
            Traffic::Generated { spread } => {
                // AlltoAllvGetPeerBytesDistanceWeighted, in the same double arithmetic.
                let n = nranks as u64;
                let distance = ((to + nranks - from) % nranks) as f64;
                let sum_distances = (n * (n - 1) / 2) as f64;
                let uniform = total_bytes as f64 / nranks as f64;
                let weighted = distance * total_bytes as f64 / sum_distances;
                let bytes = (1.0 - spread) * uniform + spread * weighted;
                round16(bytes as u64)
            }
        }
    }

    /// The count argument nccl-tests passes and prints (`paramcount`): each peer's even share
    /// of `count` elements, rounded to 16 bytes, when generated; 0 with a matrix.
    pub fn param_count(&self, count: usize, elem_bytes: usize, nranks: usize) -> usize {
        match self {
            Traffic::Generated { .. } => {
                let unit = (16 / elem_bytes.clamp(1, 16)).max(1);
                (count / nranks.max(1)) & !(unit - 1)
            }
            Traffic::Matrix { .. } => 0,
        }
    }

    /// Elements rank `from` sends rank `to` (a partial element at the end is not sent).
    fn peer_count(&self, from: usize, to: usize, nranks: usize, total: u64, elem: usize) -> usize {
        (self.peer_bytes(from, to, nranks, total) / elem.max(1) as u64) as usize
    }

    /// The most elements any rank sends and the most any rank receives
    /// (AlltoAllvComputeMaxCounts): every rank's buffers are this large.
    pub fn max_counts(&self, elem: usize, nranks: usize, total_bytes: u64) -> (usize, usize) {
        let row = |from: usize| -> usize {
            (0..nranks)
                .map(|to| self.peer_count(from, to, nranks, total_bytes, elem))
                .sum()
        };
        let column = |to: usize| -> usize {
            (0..nranks)
                .map(|from| self.peer_count(from, to, nranks, total_bytes, elem))
                .sum()
        };
        match self {
            // Every rank sends and receives the same amount.
            Traffic::Generated { .. } => {
                let one = row(0);
                (one, one)
            }
            Traffic::Matrix { .. } => (
                (0..nranks).map(row).max().unwrap_or(0),
                (0..nranks).map(column).max().unwrap_or(0),
            ),
        }
    }

    /// What rank `rank` sends each peer and receives from each, packed in peer order, in a
    /// call whose count argument is `param_count`: O(n), as nccl-tests works it out per call.
    pub fn spans(
        &self,
        rank: usize,
        nranks: usize,
        param_count: usize,
        elem: usize,
    ) -> (Vec<Span>, Vec<Span>) {
        let total = (param_count * nranks * elem) as u64;
        let count = |from, to| self.peer_count(from, to, nranks, total, elem);
        let packed = |counts: &mut dyn Iterator<Item = usize>| -> Vec<Span> {
            let mut offset = 0;
            counts
                .map(|count| {
                    let span = Span { offset, count };
                    offset += count;
                    span
                })
                .collect()
        };
        (
            packed(&mut (0..nranks).map(|to| count(rank, to))),
            packed(&mut (0..nranks).map(|from| count(from, rank))),
        )
    }

    /// Rank `rank`'s side of a call whose count argument is `param_count`, with where its
    /// part sits in each peer's input: O(n * rank).
    pub fn exchange(
        &self,
        rank: usize,
        nranks: usize,
        param_count: usize,
        elem: usize,
    ) -> Exchange {
        let total = (param_count * nranks * elem) as u64;
        let (send, recv) = self.spans(rank, nranks, param_count, elem);
        Exchange {
            send,
            recv,
            at_peer: (0..nranks)
                .map(|from| {
                    (0..rank)
                        .map(|k| self.peer_count(from, k, nranks, total, elem))
                        .sum()
                })
                .collect(),
        }
    }

    /// What nccl-tests refuses before it runs a matrix (AlltoAllvInit, AlltoAllvGetBuffSize,
    /// AlltoAllvRunTest), in its words: more ranks than the matrix has, a sweep, or buffers
    /// (`-e`) smaller than the busiest rank's traffic.
    pub fn check(&self, nranks: usize, min_bytes: u64, max_bytes: u64) -> Result<(), String> {
        let Traffic::Matrix { source, dim, .. } = self else {
            return Ok(());
        };
        if nranks > *dim {
            return Err(format!("Invalid alltoallv traffic matrix, requested nranks ({nranks}) is larger than matrix size ({dim}) in file {source}."));
        }
        let (send, recv) = self.max_counts(1, nranks, 0);
        let needed = send.max(recv) as u64;
        if max_bytes < needed {
            return Err(format!("maxBytes (-e) must be at least {needed} bytes as required by traffic matrix file {source} (got {max_bytes}). Increase -e."));
        }
        if min_bytes != max_bytes {
            return Err("-b and -e options must be set to the same value (e.g., -b 32M -e 32M) when using alltoallv traffic matrix mode.".into());
        }
        Ok(())
    }

    /// NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY's lines for one timed call of `sec` seconds whose
    /// count argument was `param_count` (AlltoAllvPrintRankBandwidths).
    pub fn summary(&self, nranks: usize, param_count: usize, elem: usize, sec: f64) -> String {
        let total = (param_count * nranks * elem) as u64;
        let mut out = match self {
            Traffic::Generated { spread } => format!(
                "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks={nranks} total_bytes={total} spread={spread:.3} time_usec={:.2}\n",
                sec * 1e6
            ),
            Traffic::Matrix { dim, scale, .. } => format!(
                "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks={nranks} matrix_dim={dim} scale={scale:.3} time_usec={:.2}\n",
                sec * 1e6
            ),
        };
        let factor = (nranks as f64 - 1.0) / nranks as f64;
        for rank in 0..nranks {
            let sent: u64 = (0..nranks)
                .map(|p| self.peer_bytes(rank, p, nranks, total))
                .sum();
            let received: u64 = (0..nranks)
                .map(|p| self.peer_bytes(p, rank, nranks, total))
                .sum();
            let alg = sent.max(received) as f64 / 1e9 / sec;
            out += &format!(
                "#   rank={rank} send_bytes={sent} recv_bytes={received} alg_bw={alg:.2} bus_bw={:.2}\n",
                alg * factor
            );
        }
        out
    }
}

/// Reads a traffic matrix as AlltoAllvReadTrafficMatrix does (src/alltoallv.cu:174-327):
/// numbers separated by white space, one row per line (blank lines skipped), square, none
/// negative; each is scaled and rounded down to 16 bytes. The errors are nccl-tests' own
/// sentences.
///
/// Its size is taken as nccl-tests takes it, from `fseek(f, 0, SEEK_END)` and `ftell`: a
/// device such as `/dev/zero` tells 0 and is "empty", a pipe cannot seek. A size beyond
/// [`crate::bounded::MAX_DOCUMENT_BYTES`], which nccl-tests would try to hold, is refused
/// unread: the sweep and the drop-in read the matrix here alike.
pub fn read_matrix(path: &std::path::Path, scale: f64) -> Result<Traffic, String> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let source = path.display().to_string();
    let fail = |what: &str| format!("Unable to {what} alltoallv traffic matrix file {source}.");
    // fopen(…, "rb"), but a FIFO without a writer must not hang the open: its seek then
    // fails, as nccl-tests' does once a writer comes.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| fail("open"))?;
    // A directory opens, and its size means nothing: fread fails on it in nccl-tests.
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(fail("read"));
    }
    let len = file.seek(SeekFrom::End(0)).map_err(|_| fail("seek"))?;
    let cap = crate::bounded::MAX_DOCUMENT_BYTES;
    if len > cap {
        return Err(format!(
            "Unable to read alltoallv traffic matrix file {source}: {len} bytes, larger than {} MiB, the most ncclprobe holds of one document.",
            cap >> 20
        ));
    }
    file.seek(SeekFrom::Start(0)).map_err(|_| fail("rewind"))?;
    let mut text = Vec::new();
    match crate::bounded::read_to_cap(file, len, &mut text) {
        Ok(_) if text.len() as u64 >= len => text.truncate(len as usize),
        _ => return Err(fail("read")),
    }
    parse_matrix(&String::from_utf8_lossy(&text), scale, &source)
}

/// C's `isspace` in the "C" locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// [`read_matrix`] on text already read; `source` names it in errors. The first pass of
/// alltoallv.cu:218-269 character by character: the buffer is a C string, so it ends at the
/// first NUL; each value is glibc's strtod (hex floats, `inf`, `nan` too), refused when it
/// reads nothing, sets ERANGE (`1e400`, `1e-400`) or stops short of white space; `nan` passes
/// every test there and is kept, as `(size_t)` of it (2^63 with gcc on x86-64).
pub fn parse_matrix(text: &str, scale: f64, source: &str) -> Result<Traffic, String> {
    let text = text.split('\0').next().unwrap_or("");
    let b = text.as_bytes();
    let mut bytes = Vec::new();
    let (mut rows, mut cols, mut here) = (0usize, 0usize, 0usize);
    let row_end = |rows: usize, cols: &mut usize, here: usize| {
        if rows == 0 {
            *cols = here;
        } else if here != *cols {
            return Err(format!("Invalid alltoallv traffic matrix column count in file {source} row {rows}. Expected {cols} columns, got {here}."));
        }
        Ok(())
    };
    let mut i = 0;
    while i < b.len() {
        if c_space(b[i]) {
            if b[i] == b'\n' && here > 0 {
                row_end(rows, &mut cols, here)?;
                here = 0;
                rows += 1;
            }
            i += 1;
            continue;
        }
        let bad = |why: &str| {
            format!("Invalid alltoallv traffic matrix value at row {rows} col {here} in file {source}.{why}")
        };
        let read = crate::units::cnum::strtod(&text[i..]);
        let end = i + read.used;
        if read.used == 0 || read.erange || b.get(end).is_some_and(|c| !c_space(*c)) {
            return Err(bad(""));
        }
        let v = read.value;
        if v < 0.0 {
            return Err(bad(" Value must be non-negative."));
        }
        // `scaled > (long double)SIZE_MAX`: a double above 2^64 - 1 is 2^64 or more.
        let scaled = v * scale;
        if scaled >= 18_446_744_073_709_551_616.0 {
            return Err(bad(&format!(
                " Value overflow (value={} scale={}).",
                crate::units::cnum::format_g(v),
                crate::units::cnum::format_g(scale)
            )));
        }
        bytes.push(round16(crate::units::cnum::size_t_of(scaled)));
        here += 1;
        i = end;
    }
    if here > 0 {
        row_end(rows, &mut cols, here)?;
        rows += 1;
    }
    if rows == 0 {
        return Err(format!(
            "Invalid alltoallv traffic matrix, file {source} is empty."
        ));
    }
    if rows != cols {
        return Err(format!(
            "Invalid alltoallv traffic matrix, file {source} must be square (got {rows}x{cols})."
        ));
    }
    Ok(Traffic::Matrix {
        source: source.to_string(),
        scale,
        dim: rows,
        bytes: Arc::new(bytes),
    })
}

#[cfg(test)]
#[path = "traffic_tests.rs"]
mod tests;

//! Check data: inputs chosen so every collective's exact result is known in advance.
//!
//! Values are small integers, so sums, products, minima and maxima are exact in every type
//! (bfloat16 included) and the check is bit-exact, like nccl-tests' `verifiable` generator.

use crate::coll::{Collective, Layout, Placement, Traffic};
use crate::dtype::{Dtype, Element, RedOp};
use crate::with_dtype;

/// Generates the value rank `rank` contributes at logical index `index`.
#[derive(Debug, Clone)]
pub struct Generator {
    pub coll: Collective,
    pub op: RedOp,
    pub dtype: Dtype,
    pub nranks: usize,
    pub root: usize,
    /// alltoallv: who sends how much to whom.
    pub traffic: Traffic,
}

impl Generator {
    /// A floating `avg`: NCCL pre-multiplies (see `dtype::premultiplies_avg`), so as
    /// nccl-tests does (verifiable.cu, ReduceAvg on floats) only two ranks contribute
    /// non-zero values, leaving no summation order to disagree on, and results are compared
    /// within 2 ulps (NCCL multiplies in a type that depends on the GPU architecture).
    fn float_avg(&self) -> bool {
        self.coll.has_op() && crate::dtype::premultiplies_avg(self.dtype, self.op)
    }

    /// The two ranks whose inputs are non-zero at `index` under a floating `avg`.
    fn avg_contributors(&self, index: usize) -> (usize, usize) {
        let n = self.nranks.max(1);
        (index % n, (index + 1) % n)
    }

    fn modulus(&self) -> u64 {
        let n = self.nranks.max(1) as f64;
        let limit = self.dtype.exact_limit();
        if self.float_avg() {
            // Two contributions (each 1..=m) must add exactly; a multiple of n keeps the
            // contributors' rotation inside one period.
            let m = ((limit / 2.0).floor() as u64 - 1).clamp(1, 1 << 16);
            let n = n as u64;
            return (m / n).max(1) * n;
        }
        let m = if !self.coll.has_op() {
            limit
        } else {
            match self.op {
                RedOp::Sum => limit / n,
                // Each input is scaled by at most 2 before the sum.
                RedOp::MulSum => limit / (2.0 * n),
                // avg sums n multiples of n, so each sum stays divisible by n.
                RedOp::Avg => limit / (n * n),
                RedOp::Min | RedOp::Max | RedOp::Prod => limit,
            }
        };
        (m.floor() as u64).clamp(1, 1 << 16)
    }

    /// The input value of `rank` at `index`.
    pub fn value(&self, rank: usize, index: usize) -> f64 {
        let (r, i) = (rank as u64, index as u64);
        if self.coll.has_op() && self.op == RedOp::Prod {
            // Exactly one rank contributes a 2 at each index (most indices), the rest 1:
            // the product is 2 or 1, and which rank holds the 2 rotates with the index.
            let n = self.nranks.max(1) as u64;
            return if (i + r) % n == 0 && i % 5 != 4 {
                2.0
            } else {
                1.0
            };
        }
        let m = self.modulus();
        if self.float_avg() {
            let (a, b) = self.avg_contributors(index);
            return if rank == a || rank == b {
                ((i.wrapping_mul(7) + r.wrapping_mul(13)) % m + 1) as f64
            } else {
                0.0
            };
        }
        let w = (i.wrapping_mul(7) + r.wrapping_mul(13) + 1) % m;
        if self.coll.has_op() && self.op == RedOp::Avg {
            (w * self.nranks as u64) as f64
        } else {
            w as f64
        }
    }

    /// The reduction over all ranks at `index`.
    pub fn reduced(&self, index: usize) -> f64 {
        if self.float_avg() {
            // NCCL's pre-multiplied sum in the element type, as nccl-tests' genOutput does.
            let n = self.nranks.max(1);
            let (a, b) = self.avg_contributors(index);
            let (xa, xb) = (
                self.value(a, index),
                if b == a { 0.0 } else { self.value(b, index) },
            );
            return with_dtype!(self.dtype, T => {
                let p = |v: f64| T::from_f64(v).premul(n);
                p(xa).combine(p(xb), RedOp::Sum).to_f64()
            });
        }
        let values = (0..self.nranks).map(|r| self.value(r, index));
        match self.op {
            RedOp::Sum => values.sum(),
            RedOp::MulSum => values
                .enumerate()
                .map(|(r, v)| v * crate::dtype::mulsum_scalar(r) as f64)
                .sum(),
            RedOp::Avg => values.sum::<f64>() / self.nranks as f64,
            RedOp::Prod => values.product(),
            RedOp::Min => values.fold(f64::INFINITY, f64::min),
            RedOp::Max => values.fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// Inputs and results repeat with this period in the index, so they are built once per
    /// period and copied (memcpy speed, not arithmetic per element).
    pub fn period(&self) -> usize {
        if self.coll.has_op() && self.op == RedOp::Prod {
            let n = self.nranks.max(1);
            n * 5 / gcd(n, 5)
        } else {
            self.modulus() as usize
        }
    }

    fn table<T: Element>(&self, f: impl Fn(usize) -> f64) -> Vec<T> {
        (0..self.period()).map(|i| T::from_f64(f(i))).collect()
    }

    /// Which part of the output holds what: the expected result of `rank` as segments.
    pub fn expected_segments(&self, rank: usize, layout: &Layout) -> Vec<Segment> {
        let n = self.nranks;
        let per = layout.param_count;
        let whole = |what| {
            vec![Segment {
                out_start: 0,
                len: layout.recv_count,
                what,
                index_start: 0,
            }]
        };
        // Rank s's input (from `index_start`) at share s of the output, for every rank.
        let shares = |index_start: usize| -> Vec<Segment> {
            (0..n)
                .map(|s| Segment {
                    out_start: s * per,
                    len: per,
                    what: Expect::Input(s),
                    index_start,
                })
                .collect()
        };
        match self.coll {
            Collective::AllReduce => whole(Expect::Reduced),
            Collective::Reduce if rank == self.root => whole(Expect::Reduced),
            Collective::Reduce => Vec::new(),
            // Never generated: no backend runs it.
            Collective::Unknown => Vec::new(),
            // Each peer's part, packed in peer order, is the stretch of the peer's input that
            // follows what the peer sent lower ranks (AlltoAllvInitData).
            Collective::Alltoallv => {
                let x = self.traffic.exchange(rank, n, per, self.dtype.size_bytes());
                (0..n)
                    .filter(|&s| x.recv[s].count > 0)
                    .map(|s| Segment {
                        out_start: x.recv[s].offset,
                        len: x.recv[s].count,
                        what: Expect::Input(s),
                        index_start: x.at_peer[s],
                    })
                    .collect()
            }
            // Only the root receives; every rank's share lands at its place.
            Collective::Gather if rank == self.root => shares(0),
            Collective::Gather => Vec::new(),
            Collective::Scatter => vec![Segment {
                out_start: 0,
                len: per,
                what: Expect::Input(self.root),
                index_start: rank * per,
            }],
            Collective::Broadcast => whole(Expect::Input(self.root)),
            Collective::Sendrecv => whole(Expect::Input((rank + n - 1) % n)),
            Collective::ReduceScatter => {
                vec![Segment {
                    out_start: 0,
                    len: per,
                    what: Expect::Reduced,
                    index_start: rank * per,
                }]
            }
            Collective::AllGather | Collective::Hypercube => shares(0),
            Collective::Alltoall => shares(rank * per),
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// What a stretch of output must equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Rank `r`'s input.
    Input(usize),
    /// The reduction over all ranks.
    Reduced,
}

/// `out[out_start .. out_start+len]` must equal the `what` sequence from `index_start` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub out_start: usize,
    pub len: usize,
    pub what: Expect,
    pub index_start: usize,
}

/// `dst[j] = table[(start + j) % table.len()]`, a period at a time.
fn write_periodic<T: Copy>(dst: &mut [T], table: &[T], start: usize) {
    let p = table.len();
    let mut pos = start % p;
    let mut j = 0;
    while j < dst.len() {
        let take = (p - pos).min(dst.len() - j);
        dst[j..j + take].copy_from_slice(&table[pos..pos + take]);
        j += take;
        pos = 0;
    }
}

/// How many `out[j]` differ from `table[(start + j) % table.len()]`.
fn count_periodic_mismatches<T: PartialEq>(out: &[T], table: &[T], start: usize) -> u64 {
    count_periodic_by(out, table, start, |a, b| a == b)
}

/// `got` is within `ulps` units in the last place of `want` (for a type with `mantissa_bits`).
fn within_ulps(got: f64, want: f64, mantissa_bits: u32, ulps: u32) -> bool {
    if got == want {
        return true;
    }
    if !got.is_finite() || !want.is_finite() || want == 0.0 {
        return false;
    }
    let ulp = 2f64.powi(want.abs().log2().floor() as i32 - mantissa_bits as i32);
    (got - want).abs() <= ulps as f64 * ulp
}

fn count_periodic_by<T>(
    out: &[T],
    table: &[T],
    start: usize,
    same: impl Fn(&T, &T) -> bool,
) -> u64 {
    let p = table.len();
    let mut pos = start % p;
    let mut j = 0;
    let mut wrong = 0u64;
    while j < out.len() {
        let take = (p - pos).min(out.len() - j);
        wrong += out[j..j + take]
            .iter()
            .zip(&table[pos..pos + take])
            .filter(|(a, b)| !same(a, b))
            .count() as u64;
        j += take;
        pos = 0;
    }
    wrong
}

/// A rank's buffers as the collective sees them: separate send/recv out of place, one buffer
/// with offsets in place.
pub struct RankBuffers<'a> {
    pub send: &'a mut [u8],
    pub recv: &'a mut [u8],
}

/// Write `rank`'s inputs where the collective reads them, and poison the output so a collective
/// that writes nothing is caught.
pub fn fill_inputs(
    gen: &Generator,
    rank: usize,
    layout: &Layout,
    placement: Placement,
    bufs: RankBuffers,
) {
    with_dtype!(gen.dtype, T => fill_typed::<T>(gen, rank, layout, placement, bufs))
}

fn fill_typed<T: Element>(
    gen: &Generator,
    rank: usize,
    layout: &Layout,
    placement: Placement,
    bufs: RankBuffers,
) {
    let send: &mut [T] = bytemuck::cast_slice_mut(bufs.send);
    let recv: &mut [T] = bytemuck::cast_slice_mut(bufs.recv);
    let poison = T::from_f64(poison_value(gen.dtype));
    let input: Vec<T> = gen.table(|i| gen.value(rank, i));
    match placement {
        Placement::OutOfPlace => {
            recv[..layout.recv_count].fill(poison);
            write_periodic(&mut send[..layout.send_count], &input, 0);
        }
        Placement::InPlace => {
            recv[..layout.buffer_count()].fill(poison);
            let off = layout.send_inplace_offset;
            write_periodic(&mut recv[off..off + layout.send_count], &input, 0);
        }
    }
}

/// A value no check input or result ever takes.
fn poison_value(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Int8 => -128.0,
        Dtype::Uint8 => 255.0,
        Dtype::Half
        | Dtype::Bfloat16
        | Dtype::Float
        | Dtype::Double
        | Dtype::F8e4m3
        | Dtype::F8e5m2 => f64::NAN,
        Dtype::Int32 | Dtype::Int64 => -1.0,
        // Saturating casts turn these into the type's maximum.
        Dtype::Uint32 | Dtype::Uint64 => f64::MAX,
    }
}

/// Count output elements that differ from the expected result (bit-exact).
pub fn count_wrong(
    gen: &Generator,
    rank: usize,
    layout: &Layout,
    placement: Placement,
    recv: &[u8],
) -> u64 {
    with_dtype!(gen.dtype, T => count_wrong_typed::<T>(gen, rank, layout, placement, recv))
}

fn count_wrong_typed<T: Element>(
    gen: &Generator,
    rank: usize,
    layout: &Layout,
    placement: Placement,
    recv: &[u8],
) -> u64 {
    let recv: &[T] = bytemuck::cast_slice(recv);
    let off = match placement {
        Placement::OutOfPlace => 0,
        Placement::InPlace => layout.recv_inplace_offset,
    };
    let out = &recv[off..off + layout.recv_count];
    let mut reduced: Option<Vec<T>> = None;
    let mut wrong = 0u64;
    for seg in gen.expected_segments(rank, layout) {
        let got = &out[seg.out_start..seg.out_start + seg.len];
        wrong += match seg.what {
            Expect::Input(src) => {
                count_periodic_mismatches(got, &gen.table(|i| gen.value(src, i)), seg.index_start)
            }
            Expect::Reduced if gen.float_avg() => {
                let table = reduced.get_or_insert_with(|| gen.table(|i| gen.reduced(i)));
                let bits = gen.dtype.mantissa_bits();
                count_periodic_by(got, table, seg.index_start, |a: &T, b: &T| {
                    within_ulps(a.to_f64(), b.to_f64(), bits, 2)
                })
            }
            Expect::Reduced => {
                let table = reduced.get_or_insert_with(|| gen.table(|i| gen.reduced(i)));
                count_periodic_mismatches(got, table, seg.index_start)
            }
        };
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floating_avg_is_expected_as_nccl_computes_it() {
        // 21 x fl32(1/7) = 3.0000002 in float: the bit-exact quotient 3.0 is not what NCCL gives.
        assert_eq!(21f32.premul(7), 3.000_000_2_f32);
        assert_ne!(21f32.premul(7), 3.0);
        for dtype in [Dtype::Float, Dtype::Double, Dtype::Half, Dtype::Bfloat16] {
            for n in [1usize, 2, 3, 7, 13, 14, 15, 49, 64] {
                let gen = Generator {
                    coll: Collective::AllReduce,
                    op: RedOp::Avg,
                    dtype,
                    nranks: n,
                    root: 0,
                    traffic: Default::default(),
                };
                for i in 0..500 {
                    // Exactly two ranks (one when n = 1) contribute, the rest send 0.
                    let nonzero = (0..n).filter(|&r| gen.value(r, i) != 0.0).count();
                    assert_eq!(nonzero, n.min(2), "{dtype} n={n} i={i}");
                    let sum: f64 = (0..n).map(|r| gen.value(r, i)).sum();
                    let r = gen.reduced(i);
                    let ulp = 2f64.powi(r.log2().floor() as i32 - dtype.mantissa_bits() as i32);
                    assert!(
                        (r - sum / n as f64).abs() <= 2.0 * ulp,
                        "{dtype} n={n} i={i}: {r} vs {}",
                        sum / n as f64
                    );
                }
            }
        }
    }

    #[test]
    fn two_ulps_of_tolerance_and_not_more() {
        assert!(within_ulps(3.000_000_2, 3.0, 23, 2));
        assert!(!within_ulps(3.000_001, 3.0, 23, 2));
        assert!(!within_ulps(f64::NAN, 3.0, 23, 2));
        assert!(!within_ulps(1e-30, 0.0, 23, 2));
    }

    #[test]
    fn values_stay_exact_for_every_type_op_and_rank_count() {
        for dtype in Dtype::ALL {
            for op in RedOp::ALL {
                for n in [2usize, 3, 8, 64] {
                    let gen = Generator {
                        coll: Collective::AllReduce,
                        op,
                        dtype,
                        nranks: n,
                        root: 0,
                        traffic: Default::default(),
                    };
                    if gen.float_avg() {
                        continue; // NCCL's pre-multiplied average: see the next test
                    }
                    for i in 0..200 {
                        let r = gen.reduced(i);
                        assert!(r.fract() == 0.0, "{dtype} {op} n={n}: {r} not an integer");
                        assert!(
                            r.abs() <= dtype.exact_limit(),
                            "{dtype} {op} n={n}: {r} overflows"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn periodic_helpers_wrap_and_count() {
        let table = [1, 2, 3];
        let mut dst = [0; 7];
        write_periodic(&mut dst, &table, 2);
        assert_eq!(dst, [3, 1, 2, 3, 1, 2, 3]);
        assert_eq!(count_periodic_mismatches(&dst, &table, 2), 0);
        dst[4] = 9;
        assert_eq!(count_periodic_mismatches(&dst, &table, 2), 1);
    }

    #[test]
    fn inputs_repeat_with_the_period() {
        for op in RedOp::ALL {
            let gen = Generator {
                coll: Collective::AllReduce,
                op,
                dtype: Dtype::Float,
                nranks: 3,
                root: 0,
                traffic: Default::default(),
            };
            let p = gen.period();
            for i in 0..50 {
                assert_eq!(gen.value(1, i), gen.value(1, i + p), "{op}");
            }
        }
    }

    #[test]
    fn inputs_differ_between_ranks() {
        let gen = Generator {
            coll: Collective::AllGather,
            op: RedOp::Sum,
            dtype: Dtype::Float,
            nranks: 4,
            root: 0,
            traffic: Default::default(),
        };
        assert_ne!(gen.value(0, 5), gen.value(1, 5));
    }
}

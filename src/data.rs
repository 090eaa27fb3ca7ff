//! Check data: inputs chosen so every collective's exact result is known in advance.
//!
//! Values are small integers, so sums, products, minima and maxima are exact in every type
//! (bfloat16 included) and the check is bit-exact, like nccl-tests' `verifiable` generator.

use crate::coll::{Collective, Layout, Placement};
use crate::dtype::{Dtype, Element, RedOp};
use crate::with_dtype;

/// Generates the value rank `rank` contributes at logical index `index`.
#[derive(Debug, Clone, Copy)]
pub struct Generator {
    pub coll: Collective,
    pub op: RedOp,
    pub dtype: Dtype,
    pub nranks: usize,
    pub root: usize,
}

impl Generator {
    fn modulus(&self) -> u64 {
        let n = self.nranks.max(1) as f64;
        let limit = self.dtype.exact_limit();
        let m = if !self.coll.has_op() {
            limit
        } else {
            match self.op {
                RedOp::Sum => limit / n,
                // avg sums n multiples of n, so each sum stays divisible by n.
                RedOp::Avg => limit / (n * n),
                RedOp::Min | RedOp::Max | RedOp::Prod => limit,
            }
        };
        (m.floor() as u64).clamp(1, 1 << 20)
    }

    /// The input value of `rank` at `index`.
    pub fn value(&self, rank: usize, index: usize) -> f64 {
        let (r, i) = (rank as u64, index as u64);
        if self.coll.has_op() && self.op == RedOp::Prod {
            // Exactly one rank contributes a 2 at each index (most indices), the rest 1:
            // the product is 2 or 1, and which rank holds the 2 rotates with the index.
            let n = self.nranks.max(1) as u64;
            return if (i + r) % n == 0 && i % 5 != 4 { 2.0 } else { 1.0 };
        }
        let m = self.modulus();
        let w = (i.wrapping_mul(7) + r.wrapping_mul(13) + 1) % m;
        if self.coll.has_op() && self.op == RedOp::Avg {
            (w * self.nranks as u64) as f64
        } else {
            w as f64
        }
    }

    /// The reduction over all ranks at `index`.
    pub fn reduced(&self, index: usize) -> f64 {
        let values = (0..self.nranks).map(|r| self.value(r, index));
        match self.op {
            RedOp::Sum => values.sum(),
            RedOp::Avg => values.sum::<f64>() / self.nranks as f64,
            RedOp::Prod => values.product(),
            RedOp::Min => values.fold(f64::INFINITY, f64::min),
            RedOp::Max => values.fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// What rank `rank` must hold at output element `i`, or `None` where the output is undefined
    /// (a `reduce` on a non-root rank).
    pub fn expected(&self, rank: usize, layout: &Layout, i: usize) -> Option<f64> {
        let n = self.nranks;
        Some(match self.coll {
            Collective::AllReduce => self.reduced(i),
            Collective::Reduce => {
                if rank != self.root {
                    return None;
                }
                self.reduced(i)
            }
            Collective::Broadcast => self.value(self.root, i),
            Collective::AllGather => {
                let per = layout.param_count;
                self.value(i / per, i % per)
            }
            Collective::ReduceScatter => self.reduced(rank * layout.param_count + i),
            Collective::Alltoall => {
                let per = layout.param_count;
                let (src, j) = (i / per, i % per);
                self.value(src, rank * per + j)
            }
            Collective::Sendrecv => self.value((rank + n - 1) % n, i),
        })
    }
}

/// A rank's buffers as the collective sees them: separate send/recv out of place, one buffer
/// with offsets in place.
pub struct RankBuffers<'a> {
    pub send: &'a mut [u8],
    pub recv: &'a mut [u8],
}

/// Write `rank`'s inputs where the collective reads them, and poison the output so a collective
/// that writes nothing is caught.
pub fn fill_inputs(gen: &Generator, rank: usize, layout: &Layout, placement: Placement, bufs: RankBuffers) {
    with_dtype!(gen.dtype, T => fill_typed::<T>(gen, rank, layout, placement, bufs))
}

fn fill_typed<T: Element>(gen: &Generator, rank: usize, layout: &Layout, placement: Placement, bufs: RankBuffers) {
    let send: &mut [T] = bytemuck::cast_slice_mut(bufs.send);
    let recv: &mut [T] = bytemuck::cast_slice_mut(bufs.recv);
    let poison = T::from_f64(poison_value(gen.dtype));
    match placement {
        Placement::OutOfPlace => {
            recv[..layout.recv_count].fill(poison);
            for (i, v) in send[..layout.send_count].iter_mut().enumerate() {
                *v = T::from_f64(gen.value(rank, i));
            }
        }
        Placement::InPlace => {
            recv[..layout.buffer_count()].fill(poison);
            let off = layout.send_inplace_offset;
            for (i, v) in recv[off..off + layout.send_count].iter_mut().enumerate() {
                *v = T::from_f64(gen.value(rank, i));
            }
        }
    }
}

/// A value no check input or result ever takes.
fn poison_value(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Int8 => -128.0,
        Dtype::Uint8 => 255.0,
        Dtype::Half | Dtype::Bfloat16 | Dtype::Float | Dtype::Double => f64::NAN,
        Dtype::Int32 | Dtype::Int64 => -1.0,
        // Saturating casts turn these into the type's maximum.
        Dtype::Uint32 | Dtype::Uint64 => f64::MAX,
    }
}

/// Count output elements that differ from the expected result (bit-exact).
pub fn count_wrong(gen: &Generator, rank: usize, layout: &Layout, placement: Placement, recv: &[u8]) -> u64 {
    with_dtype!(gen.dtype, T => count_wrong_typed::<T>(gen, rank, layout, placement, recv))
}

fn count_wrong_typed<T: Element>(gen: &Generator, rank: usize, layout: &Layout, placement: Placement, recv: &[u8]) -> u64 {
    let recv: &[T] = bytemuck::cast_slice(recv);
    let off = match placement {
        Placement::OutOfPlace => 0,
        Placement::InPlace => layout.recv_inplace_offset,
    };
    let out = &recv[off..off + layout.recv_count];
    let mut wrong = 0u64;
    for (i, got) in out.iter().enumerate() {
        if let Some(expected) = gen.expected(rank, layout, i) {
            if *got != T::from_f64(expected) {
                wrong += 1;
            }
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_exact_for_every_type_op_and_rank_count() {
        for dtype in Dtype::ALL {
            for op in RedOp::ALL {
                for n in [2usize, 3, 8, 64] {
                    let gen = Generator { coll: Collective::AllReduce, op, dtype, nranks: n, root: 0 };
                    for i in 0..200 {
                        let r = gen.reduced(i);
                        assert!(r.fract() == 0.0, "{dtype} {op} n={n}: {r} not an integer");
                        assert!(r.abs() <= dtype.exact_limit(), "{dtype} {op} n={n}: {r} overflows");
                    }
                }
            }
        }
    }

    #[test]
    fn inputs_differ_between_ranks() {
        let gen = Generator { coll: Collective::AllGather, op: RedOp::Sum, dtype: Dtype::Float, nranks: 4, root: 0 };
        assert_ne!(gen.value(0, 5), gen.value(1, 5));
    }
}

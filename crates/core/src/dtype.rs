//! Element types and reduction operators, with the kernels the host and MPI backends reduce with.

use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;

mod fp8;
pub use fp8::{F8e4m3, F8e5m2};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Half,
    Bfloat16,
    Float,
    Double,
    /// NCCL 2.24+ (`ncclFloat8e4m3`, nccl-tests' `f8e4m3`).
    F8e4m3,
    /// NCCL 2.24+ (`ncclFloat8e5m2`, nccl-tests' `f8e5m2`).
    F8e5m2,
}

impl Dtype {
    /// nccl-tests' fp8 types: named by `-d`, in `-d all` only on Hopper or newer with NCCL
    /// 2.24+ (src/common.cu filters them out below compute capability 9.0).
    pub const FP8: [Dtype; 2] = [Dtype::F8e4m3, Dtype::F8e5m2];

    /// Stored mantissa bits of floating types (0 for integers).
    pub fn mantissa_bits(self) -> u32 {
        match self {
            Dtype::Half => 10,
            Dtype::Bfloat16 => 7,
            Dtype::Float => 23,
            Dtype::Double => 52,
            Dtype::F8e4m3 => 3,
            Dtype::F8e5m2 => 2,
            _ => 0,
        }
    }

    /// Floating-point types (their `avg` pre-multiplies, see `premultiplies_avg`).
    pub fn is_floating(self) -> bool {
        matches!(
            self,
            Dtype::Half
                | Dtype::Bfloat16
                | Dtype::Float
                | Dtype::Double
                | Dtype::F8e4m3
                | Dtype::F8e5m2
        )
    }

    pub const ALL: [Dtype; 10] = [
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Half,
        Dtype::Bfloat16,
        Dtype::Float,
        Dtype::Double,
    ];

    /// The name nccl-tests prints in its `type` column.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Half => "half",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float => "float",
            Dtype::Double => "double",
            Dtype::F8e4m3 => "f8e4m3",
            Dtype::F8e5m2 => "f8e5m2",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::Int8 | Dtype::Uint8 | Dtype::F8e4m3 | Dtype::F8e5m2 => 1,
            Dtype::Half | Dtype::Bfloat16 => 2,
            Dtype::Int32 | Dtype::Uint32 | Dtype::Float => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Double => 8,
        }
    }

    /// Accepts nccl-tests' names and their common aliases (`fp16`, `bf16`, `float32`, ...).
    pub fn parse(text: &str) -> Option<Dtype> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "int8" | "char" => Dtype::Int8,
            "uint8" => Dtype::Uint8,
            "int32" | "int" => Dtype::Int32,
            "uint32" => Dtype::Uint32,
            "int64" => Dtype::Int64,
            "uint64" => Dtype::Uint64,
            "half" | "fp16" | "float16" => Dtype::Half,
            "bfloat16" | "bf16" => Dtype::Bfloat16,
            "float" | "fp32" | "float32" => Dtype::Float,
            "double" | "fp64" | "float64" => Dtype::Double,
            "f8e4m3" | "fp8_e4m3" | "float8e4m3" => Dtype::F8e4m3,
            "f8e5m2" | "fp8_e5m2" | "float8e5m2" => Dtype::F8e5m2,
            _ => return None,
        })
    }

    /// Largest magnitude up to which every integer is exactly representable and cannot overflow:
    /// the range the correctness check draws its values from.
    pub fn exact_limit(self) -> f64 {
        match self {
            Dtype::Int8 => 127.0,
            Dtype::Uint8 => 255.0,
            Dtype::Bfloat16 => 256.0,
            Dtype::F8e4m3 => 16.0,
            Dtype::F8e5m2 => 8.0,
            Dtype::Half => 2048.0,
            Dtype::Float => 16_777_216.0,
            Dtype::Int32 | Dtype::Uint32 => 2_147_483_647.0,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Double => 9_007_199_254_740_992.0,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum RedOp {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
    /// nccl-tests' `mulsum`: a sum of every rank's input times that rank's scalar
    /// (ncclRedOpCreatePreMulSum, NCCL 2.11+; the scalar is [`mulsum_scalar`]).
    MulSum,
}

impl RedOp {
    pub const ALL: [RedOp; 6] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Min,
        RedOp::Max,
        RedOp::Avg,
        RedOp::MulSum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
            RedOp::MulSum => "mulsum",
        }
    }

    pub fn parse(text: &str) -> Option<RedOp> {
        RedOp::ALL
            .into_iter()
            .find(|op| op.name() == text.trim().to_ascii_lowercase())
    }

    /// The element-wise combine step; `Avg` combines like `Sum` and is scaled once at the end,
    /// `MulSum` sums inputs scaled first.
    pub fn combine_op(self) -> RedOp {
        match self {
            RedOp::Avg | RedOp::MulSum => RedOp::Sum,
            op => op,
        }
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a buffer element must do for the kernels and the correctness check.
pub trait Element: bytemuck::Pod + PartialEq + Send + Sync + 'static {
    fn from_f64(v: f64) -> Self;
    fn combine(self, other: Self, op: RedOp) -> Self;
    /// Divide by the rank count, as `avg` does after summing.
    fn div_ranks(self, nranks: usize) -> Self;
    /// `avg`'s prologue on floating types: times 1/n rounded to the multiply type.
    fn premul(self, nranks: usize) -> Self;
    fn to_f64(self) -> f64;
}

macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)]
            fn combine(self, other: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg | RedOp::MulSum => self.wrapping_add(other),
                    RedOp::Prod => self.wrapping_mul(other),
                    RedOp::Min => self.min(other),
                    RedOp::Max => self.max(other),
                }
            }
            fn div_ranks(self, nranks: usize) -> Self { self / (nranks as $t) }
            fn premul(self, _nranks: usize) -> Self { self }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
int_element!(i8, u8, i32, u32, i64, u64);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)]
            fn combine(self, other: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg | RedOp::MulSum => self + other,
                    RedOp::Prod => self * other,
                    RedOp::Min => self.min(other),
                    RedOp::Max => self.max(other),
                }
            }
            fn div_ranks(self, nranks: usize) -> Self { self / (nranks as $t) }
            // f32 and f64 multiply in their own type (nccl-tests' TMul).
            fn premul(self, nranks: usize) -> Self { self * (1.0 / nranks as $t) }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
float_element!(f32, f64);

macro_rules! half_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            #[inline(always)]
            fn combine(self, other: Self, op: RedOp) -> Self {
                let (a, b) = (self.to_f32(), other.to_f32());
                <$t>::from_f32(match op {
                    RedOp::Sum | RedOp::Avg | RedOp::MulSum => a + b,
                    RedOp::Prod => a * b,
                    RedOp::Min => a.min(b),
                    RedOp::Max => a.max(b),
                })
            }
            fn div_ranks(self, nranks: usize) -> Self { <$t>::from_f32(self.to_f32() / nranks as f32) }
            // 16-bit types multiply in f32, then round back (nccl-tests' TMul is f32 below double).
            fn premul(self, nranks: usize) -> Self {
                <$t>::from_f32(self.to_f32() * (1.0f32 / nranks as f32))
            }
            fn to_f64(self) -> f64 { self.to_f64() }
        }
    )*};
}
half_element!(f16, bf16);

/// Run `$body` with `$T` bound to the Rust type of `$dtype`.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::dtype::Dtype::Int8 => {
                type $T = i8;
                $body
            }
            $crate::dtype::Dtype::Uint8 => {
                type $T = u8;
                $body
            }
            $crate::dtype::Dtype::Int32 => {
                type $T = i32;
                $body
            }
            $crate::dtype::Dtype::Uint32 => {
                type $T = u32;
                $body
            }
            $crate::dtype::Dtype::Int64 => {
                type $T = i64;
                $body
            }
            $crate::dtype::Dtype::Uint64 => {
                type $T = u64;
                $body
            }
            $crate::dtype::Dtype::Half => {
                type $T = half::f16;
                $body
            }
            $crate::dtype::Dtype::Bfloat16 => {
                type $T = half::bf16;
                $body
            }
            $crate::dtype::Dtype::Float => {
                type $T = f32;
                $body
            }
            $crate::dtype::Dtype::Double => {
                type $T = f64;
                $body
            }
            $crate::dtype::Dtype::F8e4m3 => {
                type $T = $crate::dtype::F8e4m3;
                $body
            }
            $crate::dtype::Dtype::F8e5m2 => {
                type $T = $crate::dtype::F8e5m2;
                $body
            }
        }
    };
}

/// `dst[i] = dst[i] (op) src[i]`. The op is matched once, outside the loop, so each loop
/// is a plain element-wise kernel the compiler vectorises.
pub fn accumulate<T: Element>(dst: &mut [T], src: &[T], op: RedOp) {
    macro_rules! kernel {
        ($op:expr) => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.combine(*s, $op);
            }
        };
    }
    match op.combine_op() {
        RedOp::Sum => kernel!(RedOp::Sum),
        RedOp::Prod => kernel!(RedOp::Prod),
        RedOp::Min => kernel!(RedOp::Min),
        RedOp::Max => kernel!(RedOp::Max),
        RedOp::Avg | RedOp::MulSum => unreachable!("combine_op returns neither"),
    }
}

/// `dst[i] = a[i] (op) b[i]`: one pass instead of copy-then-accumulate.
pub fn combine_into<T: Element>(dst: &mut [T], a: &[T], b: &[T], op: RedOp) {
    macro_rules! kernel {
        ($op:expr) => {
            for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
                *d = x.combine(*y, $op);
            }
        };
    }
    match op.combine_op() {
        RedOp::Sum => kernel!(RedOp::Sum),
        RedOp::Prod => kernel!(RedOp::Prod),
        RedOp::Min => kernel!(RedOp::Min),
        RedOp::Max => kernel!(RedOp::Max),
        RedOp::Avg | RedOp::MulSum => unreachable!("combine_op returns neither"),
    }
}

/// NCCL's `avg` on floating types is a pre-multiplied sum (enqueue.cc turns ncclAvg into
/// ncclDevPreMulSum with the scalar 1/nRanks for floats; reduce_kernel.h FuncPreMulSum):
/// every input times 1/n (rounded to the multiply type), then summed; integers are summed,
/// then divided. The two differ in the last bits: 21 x fl32(1/7) is 3.0000002.
pub fn premultiplies_avg(dtype: Dtype, op: RedOp) -> bool {
    op == RedOp::Avg && dtype.is_floating()
}

/// The scalar rank `rank` multiplies its input by under `mulsum`: nccl-tests'
/// `ncclVerifiablePremulScalar` (verifiable/verifiable.h), 1 on even ranks, 2 on odd ones.
pub fn mulsum_scalar(rank: usize) -> u8 {
    if rank.is_multiple_of(2) {
        1
    } else {
        2
    }
}

/// `x` times the small whole scalar `k` in the element's own arithmetic (the pre-multiply
/// of `mulsum`: for 1 and 2, exact in every type, wrapping for integers).
fn times<T: Element>(x: T, k: u8) -> T {
    (1..k.max(1)).fold(x, |acc, _| acc.combine(x, RedOp::Sum))
}

/// `mulsum`'s prologue in place: `dst[i] = dst[i] x k`.
pub fn scale_bytes(dtype: Dtype, dst: &mut [u8], k: u8) {
    if dst.is_empty() || k == 1 {
        return;
    }
    with_dtype!(dtype, T => {
        for d in bytemuck::cast_slice_mut::<u8, T>(dst) {
            *d = times(*d, k);
        }
    })
}

/// `dst[i] += src[i] x k`, `mulsum`'s step for a rank whose scalar is `k`.
pub fn accumulate_scaled_bytes(dtype: Dtype, dst: &mut [u8], src: &[u8], k: u8) {
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => {
        let src: &[T] = bytemuck::cast_slice(src);
        for (d, s) in bytemuck::cast_slice_mut::<u8, T>(dst).iter_mut().zip(src) {
            *d = d.combine(times(*s, k), RedOp::Sum);
        }
    })
}

/// `avg`'s prologue in place: `dst[i] = dst[i] x 1/n`.
pub fn premul_bytes(dtype: Dtype, dst: &mut [u8], nranks: usize) {
    // Zero-size calls exist (small sizes split per rank round down to 0); an empty Vec's
    // dangling pointer is not aligned for wider types, so never cast one.
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => {
        for d in bytemuck::cast_slice_mut::<u8, T>(dst) {
            *d = d.premul(nranks);
        }
    })
}

/// `dst[i] += src[i] x 1/n`, the pre-multiplied sum of floating `avg`.
pub fn accumulate_premul_bytes(dtype: Dtype, dst: &mut [u8], src: &[u8], nranks: usize) {
    // Zero-size calls exist (small sizes split per rank round down to 0); an empty Vec's
    // dangling pointer is not aligned for wider types, so never cast one.
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => {
        let src: &[T] = bytemuck::cast_slice(src);
        for (d, s) in bytemuck::cast_slice_mut::<u8, T>(dst).iter_mut().zip(src) {
            *d = d.combine(s.premul(nranks), RedOp::Sum);
        }
    })
}

/// The `avg` epilogue: divide the summed values by the number of ranks.
pub fn scale_avg<T: Element>(dst: &mut [T], nranks: usize) {
    for d in dst.iter_mut() {
        *d = d.div_ranks(nranks);
    }
}

/// Byte-level entry points, for backends that hold untyped buffers.
pub fn accumulate_bytes(dtype: Dtype, dst: &mut [u8], src: &[u8], op: RedOp) {
    // Zero-size calls exist (small sizes split per rank round down to 0); an empty Vec's
    // dangling pointer is not aligned for wider types, so never cast one.
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => accumulate::<T>(bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src), op))
}

pub fn combine_bytes(dtype: Dtype, dst: &mut [u8], a: &[u8], b: &[u8], op: RedOp) {
    // Zero-size calls exist (small sizes split per rank round down to 0); an empty Vec's
    // dangling pointer is not aligned for wider types, so never cast one.
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => combine_into::<T>(
        bytemuck::cast_slice_mut(dst),
        bytemuck::cast_slice(a),
        bytemuck::cast_slice(b),
        op,
    ))
}

pub fn scale_avg_bytes(dtype: Dtype, dst: &mut [u8], nranks: usize) {
    // Zero-size calls exist (small sizes split per rank round down to 0); an empty Vec's
    // dangling pointer is not aligned for wider types, so never cast one.
    if dst.is_empty() {
        return;
    }
    with_dtype!(dtype, T => scale_avg::<T>(bytemuck::cast_slice_mut(dst), nranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_aliases() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::parse(d.name()), Some(d));
        }
        assert_eq!(Dtype::parse("bf16"), Some(Dtype::Bfloat16));
        assert_eq!(Dtype::parse("fp16"), Some(Dtype::Half));
        assert_eq!(Dtype::parse("complex"), None);
        assert_eq!(RedOp::parse("AVG"), Some(RedOp::Avg));
        assert_eq!(RedOp::parse("mulsum"), Some(RedOp::MulSum));
        assert_eq!(RedOp::parse("premulsum"), None);
    }

    #[test]
    fn kernels_reduce_each_type() {
        let mut a = vec![1.0f32, 5.0, -2.0];
        accumulate(&mut a, &[2.0, 1.0, 3.0], RedOp::Max);
        assert_eq!(a, vec![2.0, 5.0, 3.0]);
        let mut d = vec![0i8; 2];
        combine_into(&mut d, &[100, 3], &[100, 4], RedOp::Sum);
        assert_eq!(d, vec![-56, 7], "int8 sums wrap like C");
        let mut h = vec![f16::from_f32(3.0), f16::from_f32(8.0)];
        accumulate(
            &mut h,
            &[f16::from_f32(3.0), f16::from_f32(4.0)],
            RedOp::Avg,
        );
        scale_avg(&mut h, 2);
        assert_eq!(h, vec![f16::from_f32(3.0), f16::from_f32(6.0)]);
        let mut b = vec![bf16::from_f32(2.0)];
        accumulate(&mut b, &[bf16::from_f32(3.0)], RedOp::Prod);
        assert_eq!(b[0], bf16::from_f32(6.0));
    }

    #[test]
    fn empty_buffers_of_any_alignment_are_left_alone() {
        let mut empty: Vec<u8> = Vec::new();
        for dtype in Dtype::ALL {
            accumulate_bytes(dtype, &mut empty, &[], RedOp::Sum);
            combine_bytes(dtype, &mut empty, &[], &[], RedOp::Max);
            scale_avg_bytes(dtype, &mut empty, 3);
            premul_bytes(dtype, &mut empty, 3);
            accumulate_premul_bytes(dtype, &mut empty, &[], 3);
        }
    }
}

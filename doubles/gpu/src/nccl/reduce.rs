//! The collectives' arithmetic, written here rather than taken from the product: a test that
//! compares the product's expected values with what the double computed then checks two
//! implementations against each other, not one against itself.
//!
//! As NCCL reduces (src/device/reduce_kernel.h): element by element, in the element's own
//! type, each operation rounded to it (integers wrap); floating `avg` multiplies every input by
//! the scalar 1/n rounded to the type, then sums (src/enqueue.cc turns ncclAvg into
//! ncclDevPreMulSum for floating types); integer `avg` sums, then divides (ncclDevSumPostDiv).

/// nccl.h's `ncclDataType_t` values this double takes.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Type {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
    /// NCCL 2.24+: `ncclFloat8e4m3` (10) and `ncclFloat8e5m2` (11).
    F8e4m3,
    F8e5m2,
}

/// nccl.h's `ncclRedOp_t` values.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl Type {
    pub(crate) fn from_nccl(t: i32) -> Option<Type> {
        Some(match t {
            0 => Type::I8,
            1 => Type::U8,
            2 => Type::I32,
            3 => Type::U32,
            4 => Type::I64,
            5 => Type::U64,
            6 => Type::F16,
            7 => Type::F32,
            8 => Type::F64,
            9 => Type::Bf16,
            // Unknown to NCCL before 2.24 (ncclInvalidArgument, "invalid type").
            10 | 11 if super::playing() < 22400 => return None,
            10 => Type::F8e4m3,
            11 => Type::F8e5m2,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Type::I8 | Type::U8 | Type::F8e4m3 | Type::F8e5m2 => 1,
            Type::F16 | Type::Bf16 => 2,
            Type::I32 | Type::U32 | Type::F32 => 4,
            Type::I64 | Type::U64 | Type::F64 => 8,
        }
    }

    fn floating(self) -> bool {
        matches!(
            self,
            Type::F16 | Type::F32 | Type::F64 | Type::Bf16 | Type::F8e4m3 | Type::F8e5m2
        )
    }
}

impl Op {
    pub(crate) fn from_nccl(o: i32) -> Option<Op> {
        Some(match o {
            0 => Op::Sum,
            1 => Op::Prod,
            2 => Op::Max,
            3 => Op::Min,
            4 => Op::Avg,
            _ => return None,
        })
    }
}

/// One element, widened exactly: floats to f64, integers to i128.
#[derive(Clone, Copy)]
enum Value {
    F(f64),
    I(i128),
}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

fn decode(t: Type, b: &[u8]) -> Value {
    match t {
        Type::I8 => Value::I(b[0] as i8 as i128),
        Type::U8 => Value::I(b[0] as i128),
        Type::I32 => Value::I(i32::from_le_bytes(le(b)) as i128),
        Type::U32 => Value::I(u32::from_le_bytes(le(b)) as i128),
        Type::I64 => Value::I(i64::from_le_bytes(le(b)) as i128),
        Type::U64 => Value::I(u64::from_le_bytes(le(b)) as i128),
        Type::F16 => Value::F(f16_to_f64(u16::from_le_bytes(le(b)))),
        Type::Bf16 => Value::F(f32::from_bits((u16::from_le_bytes(le(b)) as u32) << 16) as f64),
        Type::F32 => Value::F(f32::from_le_bytes(le(b)) as f64),
        Type::F64 => Value::F(f64::from_le_bytes(le(b))),
        Type::F8e4m3 => Value::F(fp8_to_f64(b[0], 3, 7, false)),
        Type::F8e5m2 => Value::F(fp8_to_f64(b[0], 2, 15, true)),
    }
}

/// An fp8 code as a number: `man` mantissa bits, exponent `bias`, and whether the top exponent
/// holds infinities (e5m2) or finite values and one NaN code per sign (e4m3).
fn fp8_to_f64(bits: u8, man: u32, bias: i32, has_inf: bool) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let top = (1u8 << (7 - man)) - 1;
    let e = (bits >> man) & top;
    let m = bits & ((1u8 << man) - 1);
    if has_inf && e == top {
        return if m == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if !has_inf && e == top && m == (1u8 << man) - 1 {
        return f64::NAN;
    }
    let frac = m as f64 / (1u32 << man) as f64;
    sign * match e {
        0 => frac * 2f64.powi(1 - bias),
        _ => (1.0 + frac) * 2f64.powi(e as i32 - bias),
    }
}

/// `x`, already rounded to the fp8 format, as its code.
fn f64_to_fp8(x: f64, man: u32, bias: i32, has_inf: bool) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return if has_inf { 0x7e } else { 0x7f };
    }
    let a = x.abs();
    if a.is_infinite() {
        return sign | 0x7c;
    }
    let min_normal = 2f64.powi(1 - bias);
    if a < min_normal {
        return sign | (a / 2f64.powi(1 - bias - man as i32)) as u8;
    }
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let m = (a / 2f64.powi(e - man as i32)) as u32 - (1 << man);
    sign | (((e + bias) as u8) << man) | m as u8
}

/// Write `v` (already rounded to `t` for floats; integers wrap to the type's width).
fn encode(t: Type, v: Value, out: &mut [u8]) {
    match (t, v) {
        (Type::I8 | Type::U8, Value::I(i)) => out[0] = i as u8,
        (Type::I32 | Type::U32, Value::I(i)) => out[..4].copy_from_slice(&(i as u32).to_le_bytes()),
        (Type::I64 | Type::U64, Value::I(i)) => out[..8].copy_from_slice(&(i as u64).to_le_bytes()),
        (Type::F16, Value::F(f)) => out[..2].copy_from_slice(&f64_to_f16(f).to_le_bytes()),
        (Type::Bf16, Value::F(f)) => {
            out[..2].copy_from_slice(&(((f as f32).to_bits() >> 16) as u16).to_le_bytes())
        }
        (Type::F32, Value::F(f)) => out[..4].copy_from_slice(&(f as f32).to_le_bytes()),
        (Type::F64, Value::F(f)) => out[..8].copy_from_slice(&f.to_le_bytes()),
        (Type::F8e4m3, Value::F(f)) => out[0] = f64_to_fp8(f, 3, 7, false),
        (Type::F8e5m2, Value::F(f)) => out[0] = f64_to_fp8(f, 2, 15, true),
        _ => unreachable!("a value of the wrong kind for its type"),
    }
}

/// The integer `i` wrapped to the type's width, read back as the type reads it.
fn wrap(t: Type, i: i128) -> i128 {
    match t {
        Type::I8 => i as i8 as i128,
        Type::U8 => i as u8 as i128,
        Type::I32 => i as i32 as i128,
        Type::U32 => i as u32 as i128,
        Type::I64 => i as i64 as i128,
        Type::U64 => i as u64 as i128,
        _ => i,
    }
}

/// `x` rounded to nearest-even in the floating type `t`.
fn round(t: Type, x: f64) -> f64 {
    match t {
        Type::F64 => x,
        Type::F32 => x as f32 as f64,
        // Saturating to the largest finite value, as the fp8 types' constructors
        // (__NV_SATFINITE): 448 for e4m3 (no infinity), 57344 for e5m2.
        Type::F8e4m3 => round_to(x, 3, -6, 8).clamp(-448.0, 448.0),
        Type::F8e5m2 => round_to(x, 2, -14, 15).clamp(-57344.0, 57344.0),
        // 7 explicit mantissa bits, f32's exponent range.
        Type::Bf16 => round_to(x, 7, -126, 127),
        // 10 explicit mantissa bits, exponents -14..=15 (IEEE binary16).
        _ => round_to(x, 10, -14, 15),
    }
}

/// Round to a binary format with `man` explicit mantissa bits and normal exponents
/// `emin..=emax` (subnormals below, infinity above), ties to even.
fn round_to(x: f64, man: i32, emin: i32, emax: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
    let quantum = 2f64.powi(e - man);
    let r = (x / quantum).round_ties_even() * quantum;
    if r.abs() >= 2f64.powi(emax + 1) {
        f64::INFINITY.copysign(x)
    } else {
        r
    }
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let mant = (h & 0x3ff) as f64;
    sign * match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + mant / 1024.0) * 2f64.powi(e - 15),
    }
}

/// `x` must already be rounded to binary16 (`round`), so the bits are exact.
fn f64_to_f16(x: f64) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a.is_nan() {
        return 0x7e00;
    }
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a < 2f64.powi(-14) {
        return sign | (a / 2f64.powi(-24)) as u16;
    }
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let mant = (a / 2f64.powi(e - 10)) as u16 - 1024;
    sign | (((e + 15) as u16) << 10) | mant
}

fn combine(t: Type, op: Op, a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::F(x), Value::F(y)) => Value::F(match op {
            Op::Sum | Op::Avg => round(t, x + y),
            Op::Prod => round(t, x * y),
            Op::Max => x.max(y),
            Op::Min => x.min(y),
        }),
        (Value::I(x), Value::I(y)) => Value::I(match op {
            Op::Sum | Op::Avg => wrap(t, x.wrapping_add(y)),
            Op::Prod => wrap(t, x.wrapping_mul(y)),
            Op::Max => x.max(y),
            Op::Min => x.min(y),
        }),
        _ => unreachable!("mixed kinds"),
    }
}

/// Reduce the ranks' inputs (each `len` bytes of type `t`) with `op` over `nranks` ranks.
pub(crate) fn reduce<'a>(
    t: Type,
    op: Op,
    nranks: usize,
    inputs: impl Iterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let inputs: Vec<&[u8]> = inputs.collect();
    let Some(first) = inputs.first() else {
        return Vec::new();
    };
    let size = t.size();
    let mut out = vec![0u8; first.len()];
    let premul = op == Op::Avg && t.floating();
    let scalar = round(t, 1.0 / nranks as f64);
    let scaled = |v: Value| match v {
        Value::F(x) if premul => Value::F(round(t, x * scalar)),
        v => v,
    };
    for (i, chunk) in out.chunks_exact_mut(size).enumerate() {
        let at = |input: &[u8]| decode(t, &input[i * size..(i + 1) * size]);
        let mut acc = scaled(at(first));
        for input in &inputs[1..] {
            acc = combine(t, op, acc, scaled(at(input)));
        }
        if let (Op::Avg, Value::I(sum)) = (op, acc) {
            // C's integer division truncates toward zero, as Rust's does.
            acc = Value::I(wrap(t, sum / nranks as i128));
        }
        encode(t, acc, chunk);
    }
    out
}

/// FuncPreMulSum's prologue (src/device/reduce_kernel.h): every element of this rank's input
/// times the op's scalar, rounded to the type (integers wrap), before the sum.
pub(crate) fn premultiply(t: Type, input: &[u8], scalar: &[u8]) -> Vec<u8> {
    let size = t.size();
    let s = decode(t, scalar);
    let mut out = vec![0u8; input.len()];
    for (src, dst) in input.chunks_exact(size).zip(out.chunks_exact_mut(size)) {
        let v = match (decode(t, src), s) {
            (Value::F(x), Value::F(k)) => Value::F(round(t, x * k)),
            (Value::I(x), Value::I(k)) => Value::I(wrap(t, x.wrapping_mul(k))),
            _ => unreachable!("mixed kinds"),
        };
        encode(t, v, dst);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16s(v: &[u16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn binary16_rounds_to_nearest_even_with_subnormals_and_overflow() {
        // 1/3 in binary16 is 0x3555; 65504 is the largest finite; 2^-24 the smallest subnormal.
        assert_eq!(f64_to_f16(round(Type::F16, 1.0 / 3.0)), 0x3555);
        assert_eq!(f64_to_f16(round(Type::F16, 65504.0)), 0x7bff);
        assert_eq!(f64_to_f16(round(Type::F16, 65520.0)), 0x7c00);
        assert_eq!(f64_to_f16(round(Type::F16, 2f64.powi(-24))), 0x0001);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even wins.
        assert_eq!(f64_to_f16(round(Type::F16, 1.0 + 2f64.powi(-11))), 0x3c00);
        for h in [0x0001u16, 0x03ff, 0x0400, 0x3c00, 0x3555, 0x7bff, 0xbc00] {
            assert_eq!(f64_to_f16(f16_to_f64(h)), h, "{h:#x}");
        }
    }

    #[test]
    fn floating_avg_premultiplies_in_the_type_integer_avg_divides_the_sum() {
        // float: 7 ranks of 3.0, avg = sum of fl32(3 x fl32(1/7)), which is not 3 exactly.
        let three: Vec<u8> = 3f32.to_le_bytes().to_vec();
        let out = reduce(Type::F32, Op::Avg, 7, std::iter::repeat_n(&three[..], 7));
        let got = f32::from_le_bytes(out[..4].try_into().unwrap());
        let term = 3f32 * (1f32 / 7f32);
        let mut want = term;
        for _ in 1..7 {
            want += term;
        }
        assert_eq!(got, want);
        // int32: (5 + 6) / 2 truncates to 5; a wrapped sum stays wrapped.
        let a = 5i32.to_le_bytes();
        let b = 6i32.to_le_bytes();
        let out = reduce(Type::I32, Op::Avg, 2, [&a[..], &b[..]].into_iter());
        assert_eq!(i32::from_le_bytes(out[..4].try_into().unwrap()), 5);
        let m = i32::MAX.to_le_bytes();
        let out = reduce(Type::I32, Op::Sum, 2, [&m[..], &m[..]].into_iter());
        assert_eq!(i32::from_le_bytes(out[..4].try_into().unwrap()), -2);
        // half: 3 ranks of 1.0 with avg: each 1 x fl16(1/3) = 0x3555, summed in half.
        let one = f16s(&[0x3c00]);
        let out = reduce(Type::F16, Op::Avg, 3, std::iter::repeat_n(&one[..], 3));
        let third = f16_to_f64(0x3555);
        let want = round(Type::F16, round(Type::F16, third + third) + third);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), f64_to_f16(want));
    }
}

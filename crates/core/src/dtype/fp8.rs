//! NCCL 2.24's two 8-bit floating types (`ncclFloat8e4m3`, `ncclFloat8e5m2`; CUDA's
//! `__nv_fp8_e4m3` and `__nv_fp8_e5m2`): their bit layouts, conversion from wider floats that
//! rounds to nearest even and saturates to the largest finite value (`__NV_SATFINITE`, what
//! the types' constructors do), and arithmetic through f32, as NCCL's kernels reduce them.

// mutual import with crate::dtype: these types implement dtype's Element trait, and dtype
// names them in its with_dtype! dispatch.
use std::sync::OnceLock;

/// One fp8 layout: mantissa bits, exponent bias, and whether the top exponent holds
/// infinities (e5m2, IEEE-like) or finite values with one NaN code (e4m3, "fn").
struct Format {
    man: u32,
    bias: i32,
    has_inf: bool,
}

const E4M3: Format = Format {
    man: 3,
    bias: 7,
    has_inf: false,
};
const E5M2: Format = Format {
    man: 2,
    bias: 15,
    has_inf: true,
};

impl Format {
    /// The value of the positive code `bits` (0..=0x7f); NaN where the code is one.
    fn decode(&self, bits: u8) -> f32 {
        let exp_bits = 7 - self.man;
        let top = (1u8 << exp_bits) - 1;
        let e = (bits >> self.man) & top;
        let m = bits & ((1u8 << self.man) - 1);
        let ones = (1u8 << self.man) - 1;
        if e == top && (self.has_inf || m == ones) {
            return if self.has_inf && m == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            };
        }
        let frac = m as f32 / (1u32 << self.man) as f32;
        match e {
            0 => frac * 2f32.powi(1 - self.bias),
            _ => (1.0 + frac) * 2f32.powi(e as i32 - self.bias),
        }
    }

    /// Every finite non-negative value, by code (codes ascend with value).
    fn finite(&self, cache: &'static OnceLock<Vec<(f32, u8)>>) -> &'static [(f32, u8)] {
        cache.get_or_init(|| {
            (0..=0x7fu8)
                .map(|b| (self.decode(b), b))
                .filter(|(v, _)| v.is_finite())
                .collect()
        })
    }

    /// `x` rounded to nearest (ties to the even code) and saturated to the largest finite
    /// value; NaN stays NaN.
    fn encode(&self, x: f32, cache: &'static OnceLock<Vec<(f32, u8)>>) -> u8 {
        let nan = if self.has_inf { 0x7e } else { 0x7f };
        if x.is_nan() {
            return nan;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let table = self.finite(cache);
        let a = x.abs();
        let i = table.partition_point(|(v, _)| *v < a);
        let code = match (table.get(i.wrapping_sub(1)), table.get(i)) {
            (_, Some(&(v, b))) if v == a => b,
            (Some(&(lo, lb)), Some(&(hi, hb))) => {
                let (dl, dh) = (a - lo, hi - a);
                if dl < dh || (dl == dh && lb % 2 == 0) {
                    lb
                } else {
                    hb
                }
            }
            (Some(&(_, lb)), None) => lb,
            (None, Some(&(_, hb))) => hb,
            (None, None) => 0,
        };
        sign | code
    }
}

static E4M3_VALUES: OnceLock<Vec<(f32, u8)>> = OnceLock::new();
static E5M2_VALUES: OnceLock<Vec<(f32, u8)>> = OnceLock::new();

macro_rules! fp8_type {
    ($name:ident, $format:expr, $cache:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Default)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        // SAFETY: a transparent wrapper of u8: every bit pattern is valid, zero included.
        unsafe impl bytemuck::Zeroable for $name {}
        // SAFETY: as above; Copy, no padding, 'static.
        unsafe impl bytemuck::Pod for $name {}

        impl $name {
            pub fn to_f32(self) -> f32 {
                let v = $format.decode(self.0 & 0x7f);
                if self.0 & 0x80 != 0 {
                    -v
                } else {
                    v
                }
            }
            pub fn from_f32(x: f32) -> Self {
                $name($format.encode(x, &$cache))
            }
        }

        impl super::Element for $name {
            fn from_f64(v: f64) -> Self {
                $name::from_f32(v as f32)
            }
            #[inline(always)]
            fn combine(self, other: Self, op: super::RedOp) -> Self {
                use super::RedOp;
                let (a, b) = (self.to_f32(), other.to_f32());
                $name::from_f32(match op {
                    RedOp::Sum | RedOp::Avg | RedOp::MulSum => a + b,
                    RedOp::Prod => a * b,
                    RedOp::Min => a.min(b),
                    RedOp::Max => a.max(b),
                })
            }
            fn div_ranks(self, nranks: usize) -> Self {
                $name::from_f32(self.to_f32() / nranks as f32)
            }
            fn premul(self, nranks: usize) -> Self {
                $name::from_f32(self.to_f32() * (1.0f32 / nranks as f32))
            }
            fn to_f64(self) -> f64 {
                self.to_f32() as f64
            }
        }
    };
}

fp8_type!(
    F8e4m3,
    E4M3,
    E4M3_VALUES,
    "`__nv_fp8_e4m3`: 4 exponent bits, 3 mantissa bits, no infinity, largest 448."
);
fp8_type!(
    F8e5m2,
    E5M2,
    E5M2_VALUES,
    "`__nv_fp8_e5m2`: 5 exponent bits, 2 mantissa bits, IEEE-like, largest 57344."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decode_and_round_as_cuda_defines_them() {
        // OCP 8-bit floating point: e4m3 0x7e = 448, 0x08 = 2^-6, 0x01 = 2^-9; e5m2 0x7b =
        // 57344, 0x7c = inf, 0x04 = 2^-14, 0x01 = 2^-16.
        assert_eq!(F8e4m3(0x7e).to_f32(), 448.0);
        assert_eq!(F8e4m3(0x08).to_f32(), 2f32.powi(-6));
        assert_eq!(F8e4m3(0x01).to_f32(), 2f32.powi(-9));
        assert!(F8e4m3(0x7f).to_f32().is_nan());
        assert_eq!(F8e5m2(0x7b).to_f32(), 57344.0);
        assert_eq!(F8e5m2(0x7c).to_f32(), f32::INFINITY);
        assert_eq!(F8e5m2(0x04).to_f32(), 2f32.powi(-14));
        assert_eq!(F8e5m2(0x01).to_f32(), 2f32.powi(-16));
        // Integers up to 16 (e4m3) and 8 (e5m2) are exact; beyond, round to nearest even.
        for i in 0..=16 {
            assert_eq!(F8e4m3::from_f32(i as f32).to_f32(), i as f32);
        }
        for i in 0..=8 {
            assert_eq!(F8e5m2::from_f32(i as f32).to_f32(), i as f32);
        }
        assert_eq!(
            F8e4m3::from_f32(17.0).to_f32(),
            16.0,
            "halfway: to the even code"
        );
        assert_eq!(F8e4m3::from_f32(19.0).to_f32(), 20.0);
        assert_eq!(F8e5m2::from_f32(9.0).to_f32(), 8.0);
        // Saturating, as __NV_SATFINITE.
        assert_eq!(F8e4m3::from_f32(1e6).to_f32(), 448.0);
        assert_eq!(F8e5m2::from_f32(-1e9).to_f32(), -57344.0);
        assert!(F8e4m3::from_f32(f32::NAN).to_f32().is_nan());
    }
}

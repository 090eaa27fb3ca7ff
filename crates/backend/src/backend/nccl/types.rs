//! NCCL's enums as the ints they are in C (`ncclDataType_t`, `ncclRedOp_t`), with the values
//! newer than the Rust bindings (NCCL 2.24's fp8 types, ops made by
//! `ncclRedOpCreatePreMulSum`), and the scalar nccl-tests' `mulsum` passes.

use crate::dtype::{Dtype, RedOp};
use cudarc::nccl::sys::{ncclDataType_t as NcclType, ncclRedOp_t as NcclOp};
use std::ffi::c_int;

/// `ncclRedOp_t` as the int it is in C: the built-in ops and the ones
/// `ncclRedOpCreatePreMulSum` makes, which no Rust enum of NCCL's names holds.
pub(crate) type NcclOpValue = c_int;

/// `ncclDataType_t` as the int it is in C (NCCL 2.24's fp8 codes included, which older
/// bindings lack).
pub(crate) type NcclTypeValue = c_int;

pub(crate) fn nccl_dtype(d: Dtype) -> NcclTypeValue {
    match d {
        Dtype::Int8 => NcclType::ncclInt8 as NcclTypeValue,
        Dtype::Uint8 => NcclType::ncclUint8 as NcclTypeValue,
        Dtype::Int32 => NcclType::ncclInt32 as NcclTypeValue,
        Dtype::Uint32 => NcclType::ncclUint32 as NcclTypeValue,
        Dtype::Int64 => NcclType::ncclInt64 as NcclTypeValue,
        Dtype::Uint64 => NcclType::ncclUint64 as NcclTypeValue,
        Dtype::Half => NcclType::ncclFloat16 as NcclTypeValue,
        Dtype::Float => NcclType::ncclFloat32 as NcclTypeValue,
        Dtype::Double => NcclType::ncclFloat64 as NcclTypeValue,
        // NCCL 2.10 and newer; the oldest NCCL we load is 2.18.
        Dtype::Bfloat16 => NcclType::ncclBfloat16 as NcclTypeValue,
        // nccl.h 2.24: ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11.
        Dtype::F8e4m3 => 10,
        Dtype::F8e5m2 => 11,
    }
}

/// The built-in op; `mulsum` has none (its op is made per call, see `enqueue`).
pub(crate) fn nccl_op(o: RedOp) -> NcclOpValue {
    (match o {
        RedOp::Sum | RedOp::MulSum => NcclOp::ncclSum,
        RedOp::Prod => NcclOp::ncclProd,
        RedOp::Max => NcclOp::ncclMax,
        RedOp::Min => NcclOp::ncclMin,
        RedOp::Avg => NcclOp::ncclAvg,
    }) as NcclOpValue
}

/// nccl-tests' `mulsum` scalar of `rank` in the element type, as the bytes
/// `ncclRedOpCreatePreMulSum` reads from host memory (src/common.cu, startColl).
pub(crate) fn mulsum_scalar_bytes(d: Dtype, rank: usize) -> [u8; 8] {
    use crate::dtype::Element;
    let k = crate::dtype::mulsum_scalar(rank) as f64;
    let mut out = [0u8; 8];
    crate::with_dtype!(d, T => {
        let scalar = T::from_f64(k);
        let bytes = bytemuck::bytes_of(&scalar);
        out[..bytes.len()].copy_from_slice(bytes);
    });
    out
}

//! MPI has no 16-bit floating types: half and bfloat16 travel as a 2-byte contiguous type
//! reduced by user-defined ops.

use crate::dtype::{accumulate_bytes, Dtype, RedOp};
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// MPI has no 16-bit floating types: a 2-byte contiguous type and user-defined ops for them.
pub(super) struct HalfTypes {
    pub(super) two_bytes: ffi::MPI_Datatype,
    pub(super) ops: [[ffi::MPI_Op; 4]; 2],
}

macro_rules! half_op {
    ($name:ident, $dtype:expr, $op:expr) => {
        unsafe extern "C" fn $name(
            invec: *mut c_void,
            inoutvec: *mut c_void,
            len: *mut c_int,
            _dt: *mut ffi::MPI_Datatype,
        ) {
            let n = (*len).max(0) as usize * 2;
            let src = std::slice::from_raw_parts(invec as *const u8, n);
            let dst = std::slice::from_raw_parts_mut(inoutvec as *mut u8, n);
            accumulate_bytes($dtype, dst, src, $op);
        }
    };
}
half_op!(f16_sum, Dtype::Half, RedOp::Sum);
half_op!(f16_prod, Dtype::Half, RedOp::Prod);
half_op!(f16_min, Dtype::Half, RedOp::Min);
half_op!(f16_max, Dtype::Half, RedOp::Max);
half_op!(bf16_sum, Dtype::Bfloat16, RedOp::Sum);
half_op!(bf16_prod, Dtype::Bfloat16, RedOp::Prod);
half_op!(bf16_min, Dtype::Bfloat16, RedOp::Min);
half_op!(bf16_max, Dtype::Bfloat16, RedOp::Max);

type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut ffi::MPI_Datatype);

impl HalfTypes {
    pub(super) fn create() -> HalfTypes {
        let fns: [[UserFn; 4]; 2] = [
            [f16_sum, f16_prod, f16_min, f16_max],
            [bf16_sum, bf16_prod, bf16_min, bf16_max],
        ];
        // SAFETY: plain MPI calls on freshly initialised MPI with valid out-pointers.
        unsafe {
            let mut two_bytes: ffi::MPI_Datatype = std::mem::zeroed();
            ffi::MPI_Type_contiguous(2, ffi::RSMPI_UINT8_T, &mut two_bytes);
            ffi::MPI_Type_commit(&mut two_bytes);
            let mut ops: [[ffi::MPI_Op; 4]; 2] = std::mem::zeroed();
            for (t, row) in fns.iter().enumerate() {
                for (o, f) in row.iter().enumerate() {
                    ffi::MPI_Op_create(Some(*f), 1, &mut ops[t][o]);
                }
            }
            HalfTypes { two_bytes, ops }
        }
    }
}

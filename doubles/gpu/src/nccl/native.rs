//! NCCL 2.28's alltoall, gather and scatter entry points, made as NCCL makes them: the sends
//! and receives of one group (src/collectives.cc). Before 2.28 NCCL has no such symbols; the
//! double answers them only when it plays 2.28 or newer (`NCCLPROBE_TEST_DOUBLE_NCCL_VERSION`),
//! and ncclInvalidUsage otherwise, so a caller that skips the version check is caught.

use super::collectives::{ncclRecv, ncclSend};
use super::comms::live_comm;
use super::group::{ncclGroupEnd, ncclGroupStart};
use super::reduce::Type;
use super::{ncclGetVersion, NcclResult, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_SUCCESS};
use crate::trace::trace_line;
use std::ffi::{c_int, c_void};

/// The element size of `dt` and the communicator's size, when the call is possible.
unsafe fn prologue(call: &str, dt: c_int, c: *mut c_void) -> Result<(usize, usize), NcclResult> {
    let mut version = 0;
    ncclGetVersion(&mut version);
    if version < 22800 {
        eprintln!("TEST DOUBLE: {call} does not exist before NCCL 2.28 (this is {version})");
        return Err(NCCL_INVALID_USAGE);
    }
    let Some(t) = Type::from_nccl(dt) else {
        return Err(NCCL_INVALID_ARGUMENT);
    };
    let comm = live_comm(c, call);
    trace_line(&format!("rank={} call={call}", comm.rank));
    Ok((t.size(), comm.nranks))
}

/// The first failure of a group's calls, or its end's result.
unsafe fn grouped(calls: impl FnOnce() -> NcclResult) -> NcclResult {
    ncclGroupStart();
    let rc = calls();
    let end = ncclGroupEnd();
    if rc != NCCL_SUCCESS {
        rc
    } else {
        end
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAlltoAll(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    let (ts, n) = match prologue("ncclAlltoAll", dt, c) {
        Ok(v) => v,
        Err(rc) => return rc,
    };
    grouped(|| {
        for peer in 0..n {
            let off = peer * count * ts;
            let p = peer as c_int;
            let sent = ncclSend(
                (s as *const u8).add(off) as *const c_void,
                count,
                dt,
                p,
                c,
                st,
            );
            let got = ncclRecv((r as *mut u8).add(off) as *mut c_void, count, dt, p, c, st);
            if sent != NCCL_SUCCESS || got != NCCL_SUCCESS {
                return if sent != NCCL_SUCCESS { sent } else { got };
            }
        }
        NCCL_SUCCESS
    })
}

/// Gather (`gather`) or scatter: the root receives every rank's share into its place, or
/// sends each rank its share.
unsafe fn rooted(
    gather: bool,
    (s, r): (*const c_void, *mut c_void),
    (count, dt, root): (usize, c_int, c_int),
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    let call = if gather { "ncclGather" } else { "ncclScatter" };
    let (ts, n) = match prologue(call, dt, c) {
        Ok(v) => v,
        Err(rc) => return rc,
    };
    if root < 0 || root as usize >= n {
        return NCCL_INVALID_ARGUMENT;
    }
    let me = live_comm(c, call).rank;
    grouped(|| {
        let mut rc = NCCL_SUCCESS;
        let mut keep = |v: NcclResult| {
            if rc == NCCL_SUCCESS {
                rc = v;
            }
        };
        if gather {
            keep(ncclSend(s, count, dt, root, c, st));
        } else {
            keep(ncclRecv(r, count, dt, root, c, st));
        }
        if me == root as usize {
            for peer in 0..n {
                let off = peer * count * ts;
                let p = peer as c_int;
                if gather {
                    keep(ncclRecv(
                        (r as *mut u8).add(off) as *mut c_void,
                        count,
                        dt,
                        p,
                        c,
                        st,
                    ));
                } else {
                    let from = (s as *const u8).add(off) as *const c_void;
                    keep(ncclSend(from, count, dt, p, c, st));
                }
            }
        }
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGather(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    rooted(true, (s, r), (count, dt, root), c, st)
}

#[no_mangle]
pub unsafe extern "C" fn ncclScatter(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    rooted(false, (s, r), (count, dt, root), c, st)
}

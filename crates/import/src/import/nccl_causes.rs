//! Lines that name a known cause, in the words NCCL prints them (and PyTorch repeats after
//! "Last error:", without NCCL's prefix): each maps to a cause the diagnose rules explain.
//!
//! - `ib.memlock`: ibvwrap.cc `Call to ibv_reg_mr failed with error Cannot allocate memory`
//!   (also `ibv_reg_mr_iova2`, `ibv_reg_dmabuf_mr`): registering buffers with the NIC needs
//!   locked memory (nccl-tests#206, NCCL troubleshooting "InfiniBand").
//! - `gpu.duplicate`: init.cc `Duplicate GPU detected : rank %d and rank %d both on CUDA
//!   device %lx`.
//! - `bootstrap.no-interface`: bootstrap.cc `Bootstrap : no socket interface found`, and the
//!   socket transport's `NET/Socket : no interface found`.
//! - `ib.completion-error`: net_ib.cc `NET/IB : Got completion from peer %s with error %d, ...`
//!   and, from 2.19, `... with status=%d opcode=%d ...`.
//! - `cuda.out-of-memory`: CUDACHECK's `Cuda failure 'out of memory'` (from 2.19
//!   `Cuda failure 2 'out of memory'`).
//! - `nccl.remote-error`: `ncclRemoteError` and its `ncclGetErrorString` text, "remote process
//!   exited or there was a network error", and NCCL's socket warnings that a peer closed or
//!   reset the connection.

/// The cause a line names, if any. `t` is the trimmed line.
pub fn cause_of(t: &str) -> Option<&'static str> {
    if t.contains("ibv_reg_") && t.contains("Cannot allocate memory") {
        Some("ib.memlock")
    } else if t.contains("Duplicate GPU detected") {
        Some("gpu.duplicate")
    } else if t.contains("no socket interface found")
        || t.contains("NET/Socket : no interface found")
    {
        Some("bootstrap.no-interface")
    } else if t.contains("Got completion from peer") {
        Some("ib.completion-error")
    } else if t.contains("Cuda failure") && t.contains("out of memory") {
        Some("cuda.out-of-memory")
    } else if t.contains("remote process exited or there was a network error")
        || t.contains("ncclRemoteError")
        || (t.contains("NCCL WARN")
            && (t.contains("Connection closed by remote peer")
                || t.contains("Connection reset by peer")))
    {
        Some("nccl.remote-error")
    } else {
        None
    }
}

/// From a `Duplicate GPU detected` line: the two ranks and the device's bus id.
pub fn duplicate_gpu(t: &str) -> Option<(usize, usize, String)> {
    let rest = &t[t.find("Duplicate GPU detected : rank ")? + 30..];
    let mut words = rest.split_whitespace();
    let a = words.next()?.parse().ok()?;
    let b = words.nth(2)?.parse().ok()?;
    let device = rest.rsplit(' ').next()?.to_string();
    Some((a, b, device))
}

/// From a `Got completion from peer` line: the peer's address (without its port) and the
/// work-completion status.
pub fn ib_completion(t: &str) -> Option<(String, u32)> {
    let rest = &t[t.find("Got completion from peer ")? + 25..];
    let peer = rest.split_whitespace().next()?;
    let peer = peer.split('<').next().unwrap_or(peer).to_string();
    let status = ["with error ", "with status="]
        .iter()
        .find_map(|k| rest.find(k).map(|i| &rest[i + k.len()..]))?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((peer, status))
}

/// What an `ibv_wc_status` means (libibverbs' `ibv_wc_status_str`), for the ones seen in the
/// field.
pub fn wc_status(status: u32) -> &'static str {
    match status {
        4 => "local protection error",
        5 => "work request flushed (the queue pair had already failed)",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        _ => "completion error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_s_own_wordings_name_their_causes() {
        let cases = [
            ("node-1:77:80 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory", "ib.memlock"),
            ("NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory", "ib.memlock"),
            ("host:1:1 [1] NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", "gpu.duplicate"),
            ("host:5:5 [0] NCCL WARN Bootstrap : no socket interface found", "bootstrap.no-interface"),
            ("NCCL WARN NET/Socket : no interface found", "bootstrap.no-interface"),
            ("NET/IB : Got completion from peer 10.5.0.34<33956> with error 5, opcode 0, len 1, vendor err 244 (Recv)", "ib.completion-error"),
            ("n:1:2 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with status=12 opcode=0 len=0 vendor err 129 (Recv)", "ib.completion-error"),
            ("h:1:1 [3] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'", "cuda.out-of-memory"),
            ("h:1:1 [3] NCCL WARN Cuda failure 2 'out of memory'", "cuda.out-of-memory"),
            ("RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5", "nccl.remote-error"),
            ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.", "nccl.remote-error"),
            ("w-3:91:140 [2] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer w-0<44012>", "nccl.remote-error"),
        ];
        for (line, cause) in cases {
            assert_eq!(cause_of(line), Some(cause), "{line}");
        }
        for quiet in [
            "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
            "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "NCCL WARN Cuda failure 'invalid argument'",
            "ssh: Connection reset by peer",
        ] {
            assert_eq!(cause_of(quiet), None, "{quiet}");
        }
    }

    #[test]
    fn the_lines_give_up_their_ranks_devices_peers_and_statuses() {
        assert_eq!(
            duplicate_gpu("x [1] NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"),
            Some((1, 0, "1a000".to_string()))
        );
        assert_eq!(
            ib_completion(
                "NET/IB : Got completion from peer 10.5.0.34<33956> with error 5, opcode 0"
            ),
            Some(("10.5.0.34".to_string(), 5))
        );
        assert_eq!(
            ib_completion("NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with status=12 opcode=0"),
            Some(("10.2.0.5".to_string(), 12))
        );
        assert_eq!(wc_status(12), "transport retry counter exceeded");
    }
}

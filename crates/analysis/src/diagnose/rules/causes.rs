//! Errors whose cause NCCL's own words already name (`import::nccl_causes`): the rule says
//! which, and what to change, where the generic `nccl.error` finding can only point at the line.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{Evidence, Severity};
use crate::import::nccl_causes::{duplicate_gpu, ib_completion, wc_status};
use std::collections::BTreeSet;

const SHOWN: usize = 8;

/// Every log line that names `cause`, in input order.
fn lines(inp: &Inputs, cause: &str) -> Vec<Evidence> {
    inp.logs
        .iter()
        .filter_map(|l| l.causes.get(cause))
        .flatten()
        .cloned()
        .collect()
}

fn shown(lines: &[Evidence]) -> Vec<Evidence> {
    lines.iter().take(SHOWN).cloned().collect()
}

pub fn ib_memlock(inp: &Inputs) -> Vec<Hit> {
    let found = lines(inp, "ib.memlock");
    if found.is_empty() {
        return Vec::new();
    }
    vec![Hit::new(
        format!(
            "The RDMA NIC refused to register NCCL's buffers ({} line{}): the locked-memory limit (ulimit -l) is too low",
            found.len(),
            if found.len() == 1 { "" } else { "s" }
        ),
        shown(&found),
    )]
}

pub fn duplicate_gpus(inp: &Inputs) -> Vec<Hit> {
    let found = lines(inp, "gpu.duplicate");
    if found.is_empty() {
        return Vec::new();
    }
    let pairs: BTreeSet<(String, usize, usize)> = found
        .iter()
        .filter_map(|e| duplicate_gpu(&e.text))
        .map(|(a, b, device)| (device, a.min(b), a.max(b)))
        .collect();
    let what = if pairs.is_empty() {
        "two ranks".to_string()
    } else {
        pairs
            .iter()
            .map(|(device, a, b)| format!("ranks {a} and {b} (device {device})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![Hit::new(
        format!("Two ranks on one GPU: {what}; NCCL refuses to build the communicator"),
        shown(&found),
    )]
}

pub fn no_interface(inp: &Inputs) -> Vec<Hit> {
    let mut found = lines(inp, "bootstrap.no-interface");
    if found.is_empty() {
        return Vec::new();
    }
    let env = inp.env();
    let title = match env.get("NCCL_SOCKET_IFNAME") {
        Some((value, e)) => {
            found.insert(0, e.clone());
            format!("NCCL found no network interface to start on: NCCL_SOCKET_IFNAME={value} matches none that is up with an address")
        }
        None => "NCCL found no network interface to start on (no interface up with an address, bar the ones NCCL skips: lo, docker*)".to_string(),
    };
    vec![Hit::new(title, shown(&found))]
}

pub fn ib_completion_error(inp: &Inputs) -> Vec<Hit> {
    let found = lines(inp, "ib.completion-error");
    if found.is_empty() {
        return Vec::new();
    }
    let parsed: Vec<(String, u32)> = found
        .iter()
        .filter_map(|e| ib_completion(&e.text))
        .collect();
    // A flushed work request (5) follows another failure on the same queue pair: name the
    // first failure when there is one.
    let primary: Vec<&(String, u32)> = parsed.iter().filter(|(_, s)| *s != 5).collect();
    let (named, severity) = if primary.is_empty() {
        (parsed.iter().collect::<Vec<_>>(), Severity::Warning)
    } else {
        (primary, Severity::Error)
    };
    let peers: BTreeSet<&str> = named.iter().map(|(p, _)| p.as_str()).collect();
    let statuses: BTreeSet<u32> = named.iter().map(|(_, s)| *s).collect();
    let status_text = statuses
        .iter()
        .map(|&s| format!("{} (status {s})", wc_status(s)))
        .collect::<Vec<_>>()
        .join(", ");
    let title = if peers.is_empty() {
        "RDMA transfers failed on the network (NET/IB completion errors)".to_string()
    } else {
        format!(
            "RDMA transfers with {} failed: {status_text}",
            peers.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    let title = if severity == Severity::Warning {
        format!("{title}; a flush follows an earlier failure, so look for the first error on those peers")
    } else {
        title
    };
    vec![Hit::new(title, shown(&found)).with_severity(severity)]
}

pub fn out_of_memory(inp: &Inputs) -> Vec<Hit> {
    let found = lines(inp, "cuda.out-of-memory");
    if found.is_empty() {
        return Vec::new();
    }
    vec![Hit::new(
        "NCCL could not allocate GPU memory for its buffers ('out of memory')",
        shown(&found),
    )]
}

pub fn remote_error(inp: &Inputs) -> Vec<Hit> {
    let found = lines(inp, "nccl.remote-error");
    if found.is_empty() {
        return Vec::new();
    }
    let network = !lines(inp, "ib.completion-error").is_empty();
    let title = if network {
        "A peer or the network went away (ncclRemoteError); the RDMA completion errors here point at the network"
    } else {
        "A peer went away (ncclRemoteError): this rank failed because another process exited or its connection dropped"
    };
    vec![Hit::new(title, shown(&found))]
}

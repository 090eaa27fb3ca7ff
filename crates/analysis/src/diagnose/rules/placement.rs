//! Where processes sit and what the environment switches off: GPU pinning (seeds/000), NCCL's
//! transport switches, WSL2.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{ev, value_ev, Evidence};
use std::collections::BTreeMap;

/// Processes holding memory on more than one GPU: from nvidia-smi process lists and NVML.
fn multi_gpu_evidence(inp: &Inputs) -> Vec<Evidence> {
    let mut multi: Vec<Evidence> = Vec::new();
    for (file, smi) in &inp.smis {
        for (pid, gpus) in smi.multi_gpu_processes() {
            for p in smi.processes.iter().filter(|p| p.pid == pid) {
                multi.push(ev(
                    file,
                    p.line,
                    format!(
                        "GPU {} PID {} {} {} MiB (PID {pid} is on GPUs {gpus:?})",
                        p.gpu,
                        p.pid,
                        p.name,
                        p.memory_mib.map(|m| m.to_string()).unwrap_or("?".into())
                    ),
                ));
            }
        }
    }
    if let Some(Ok(gpus)) = inp.live.as_ref().map(|l| &l.nvml) {
        let mut by_pid: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for g in gpus {
            for (pid, _) in &g.processes {
                by_pid.entry(*pid).or_default().push(g.index);
            }
        }
        for (pid, g) in by_pid.into_iter().filter(|(_, g)| g.len() > 1) {
            multi.push(value_ev(format!("PID {pid} holds memory on GPUs {g:?}")));
        }
    }
    multi
}

pub fn process_on_multiple_gpus(inp: &Inputs) -> Vec<Hit> {
    let multi = multi_gpu_evidence(inp);
    if multi.is_empty() {
        return Vec::new();
    }
    vec![Hit::new("One process holds memory on several GPUs", multi)]
}

pub fn cuda_visible_devices_unset(inp: &Inputs) -> Vec<Hit> {
    let unset_live = inp.live.as_ref().is_some_and(|l| {
        let gpus = l
            .nvml
            .as_ref()
            .map(|g| g.len())
            .unwrap_or(l.sysfs_gpus.len());
        !l.env.contains_key("CUDA_VISIBLE_DEVICES") && gpus > 1 && !l.job_rank_vars.is_empty()
    });
    let mut evidence = multi_gpu_evidence(inp);
    if evidence.is_empty() && !unset_live {
        return Vec::new();
    }
    if unset_live {
        evidence.push(value_ev("CUDA_VISIBLE_DEVICES is not set, several GPUs are visible and RANK/LOCAL_RANK say this is one rank of a job"));
    }
    vec![Hit::new(
        "CUDA_VISIBLE_DEVICES is not restricting processes to their GPU",
        evidence,
    )]
}

/// A value as NCCL reads an integer variable (`strtol(str, NULL, 0)`: leading sign, decimal,
/// `0x` hex or leading-0 octal digits, the rest ignored); None where no digits come first.
fn nccl_int(v: &str) -> Option<i64> {
    let v = v.trim();
    let (negative, v) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let (radix, digits) = if let Some(hex) = v.strip_prefix("0x").or(v.strip_prefix("0X")) {
        (16, hex)
    } else if v.len() > 1 && v.starts_with('0') {
        (8, &v[1..])
    } else {
        (10, v)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let n = if end == 0 && radix == 8 {
        0
    } else {
        i64::from_str_radix(&digits[..end], radix).ok()?
    };
    Some(if negative { -n } else { n })
}

/// `var` set (in this environment or a log's) to a value with which NCCL turns the transport
/// off: `off(value)`.
fn switched_off(inp: &Inputs, var: &str, what: &str, off: fn(&str) -> bool) -> Vec<Hit> {
    let env = inp.env();
    let Some((v, e)) = env.get(var).filter(|(v, _)| off(v)) else {
        return Vec::new();
    };
    vec![Hit::new(
        format!("{var}={v}: the {what} is disabled"),
        vec![e.clone()],
    )]
}

pub fn shm_disabled(inp: &Inputs) -> Vec<Hit> {
    // shm.cc: `if (ncclParamShmDisable() == 1)`.
    switched_off(inp, "NCCL_SHM_DISABLE", "shared-memory transport", |v| {
        nccl_int(v) == Some(1)
    })
}

/// NCCL_P2P_DISABLE=1, or NCCL_P2P_LEVEL=LOC (or the old integer 0): paths.cc's ncclGetLevel
/// takes either as the P2P level PATH_LOC, below every GPU-to-GPU path, NVLink included. The
/// level is compared with `strcmp` (upper case only); a value that starts with a digit is an
/// old level, 0 = LOC.
pub fn p2p_disabled(inp: &Inputs) -> Vec<Hit> {
    let what = "GPU peer-to-peer transport";
    let disabled = switched_off(inp, "NCCL_P2P_DISABLE", what, |v| nccl_int(v) == Some(1));
    if !disabled.is_empty() {
        return disabled;
    }
    switched_off(inp, "NCCL_P2P_LEVEL", what, |v| {
        let v = v.trim();
        v == "LOC" || (v.starts_with(|c: char| c.is_ascii_digit()) && nccl_int(v) == Some(0))
    })
}

pub fn ib_disabled(inp: &Inputs) -> Vec<Hit> {
    // net_ib.cc: `if (ncclParamIbDisable()) return ncclInternalError;`.
    switched_off(inp, "NCCL_IB_DISABLE", "InfiniBand/RoCE transport", |v| {
        nccl_int(v).is_some_and(|n| n != 0)
    })
}

pub fn wsl2(inp: &Inputs) -> Vec<Hit> {
    let mut wsl: Vec<Evidence> = inp
        .live
        .iter()
        .flat_map(|l| l.wsl2_evidence.iter().map(|e| value_ev(e.clone())))
        .collect();
    wsl.extend(inp.logs.iter().flat_map(|l| l.wsl_hints.iter().cloned()));
    for log in &inp.logs {
        let windows_hosts = log
            .hosts
            .iter()
            .filter(|h| h.starts_with("DESKTOP-") || h.starts_with("LAPTOP-"));
        for h in windows_hosts {
            if let Some(b) = log.bootstrap.first() {
                wsl.push(Evidence {
                    text: format!("Windows-style host name {h}; {}", b.text),
                    ..b.clone()
                });
            }
        }
    }
    if wsl.is_empty() {
        return Vec::new();
    }
    wsl.truncate(6);
    vec![Hit::new("Running under WSL2", wsl)]
}

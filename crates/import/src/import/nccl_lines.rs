//! What one line of an `NCCL_DEBUG=INFO` log or the error output around it says, told by
//! regexes and plain string tests: channel, communicator, node and environment lines, the
//! `host:pid:tid` prefix, transport names, /dev/shm failures and NCCL errors.

use super::text::static_regex;
use regex::Regex;
use std::sync::OnceLock;

pub(super) fn channel_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        // transport/p2p.cc, shm.cc, net.cc: "Channel 00/0 : 0[1000] -> 1[2000] [send] via NET/IB/0";
        // coll_net.cc: "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0" (older: "Coll 00 : 0 ...").
        r"(?P<kind>Channel|Ring|CollNet|Coll) \d+(?:/\d+)? : (?P<from>\d+)(?:\[(?P<fdev>[0-9a-fA-Fx]+)\])?(?: -> (?P<to>\d+)(?:\[(?P<tdev>[0-9a-fA-Fx]+)\])?)?(?: \[(?:send|receive)\])? via (?P<via>.+?)\s*$",
    )
}

pub(super) fn comm_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<dev>\d+)(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)",
    )
}

pub(super) fn nnodes_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"rank (?P<rank>\d+) nRanks (?P<n>\d+) nNodes (?P<nodes>\d+) localRanks (?P<local>\d+)",
    )
}

pub(super) fn env_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        // The sentence ends with a period ("set by environment to 1."): not part of the value.
        r"\b(?P<k>NCCL_[A-Z0-9_]+) set by environment to (?P<v>\S*?)\.?(?:\s|$)",
    )
}

/// Host and pid of a `host:pid:tid [dev]` prefix (after an optional `[timestamp] ` and
/// launcher `name: `), without a regex: this runs on every line of logs that can be 100 MB.
pub(super) fn prefix_of(t: &str) -> Option<(&str, u32)> {
    let t = if t.starts_with('[') {
        t.split_once("] ").map(|(_, r)| r).unwrap_or(t)
    } else {
        t
    };
    let mut candidate = t;
    // "launcher-name: host:pid:tid [n]" — skip one "name: " in front.
    if let Some((first, rest)) = t.split_once(": ") {
        if !first.contains(' ')
            && rest
                .split_once(':')
                .is_some_and(|(_, r)| r.starts_with(|c: char| c.is_ascii_digit()))
        {
            candidate = rest;
        }
    }
    let (host, rest) = candidate.split_once(':')?;
    let (pid, rest) = rest.split_once(':')?;
    let tid = rest.split(' ').next()?;
    let valid_host = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    let pid_num = pid.parse::<u32>().ok()?;
    (valid_host && tid.chars().all(|c| c.is_ascii_digit()) && !tid.is_empty())
        .then_some((host, pid_num))
}

pub(super) fn host_of(t: &str) -> Option<&str> {
    prefix_of(t).map(|(host, _)| host)
}

/// The transport name a channel line uses, as NCCL's families.
pub fn normalise_transport(via: &str) -> String {
    let v = via.trim();
    if v.starts_with("P2P/IPC") {
        "P2P/IPC".into()
    } else if v.starts_with("P2P/direct pointer") || v.starts_with("direct pointer") {
        "P2P/direct pointer".into()
    } else if v.starts_with("P2P/CUMEM") {
        "P2P/CUMEM".into()
    } else if v.starts_with("P2P") {
        "P2P".into()
    } else if v.starts_with("SHM") || v.contains("shared memory") {
        "SHM".into()
    } else if let Some(rest) = v.strip_prefix("NET/") {
        let name = rest.split('/').next().unwrap_or(rest);
        format!("NET/{name}")
    } else if let Some(rest) = v.strip_prefix("COLLNET/") {
        // COLLNET/<plugin, e.g. SHARP>/<dev>[/GDRDMA]
        format!("COLLNET/{}", rest.split('/').next().unwrap_or(rest))
    } else if v.starts_with("CollNet") {
        "CollNet".into()
    } else {
        v.split_whitespace().next().unwrap_or(v).to_string()
    }
}

/// "32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, ..." (init.cc):
/// the NVLS channel count.
pub(super) fn nvls_channels(t: &str) -> Option<usize> {
    let i = t.find(" nvls channels")?;
    t[..i]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A line NCCL prints when it cannot set up shared memory in /dev/shm, in the wordings NCCL has
/// used (shmutils.cc, net.cc, shm.cc: "failed to extend", "failed to create shared memory
/// file", "could not create shared memory", "Could not map", "Error while creating shared
/// memory segment", SYSCHECK's "Call to posix_fallocate failed : No space left on device").
/// `l` is the lower-cased line.
pub(super) fn is_shm_failure(l: &str) -> bool {
    let failed = l.contains("error")
        || l.contains("warn")
        || l.contains("fail")
        || l.contains("no space")
        || l.contains("could not")
        || l.contains("unable");
    let about_shm = l.contains("/dev/shm")
        || l.contains("nccl-shm")
        || l.contains("shared memory")
        || l.contains("posix_fallocate")
        || l.contains("fallocate:")
        || l.contains("shm_open");
    about_shm && failed
}

/// `l` is the lower-cased line.
pub(super) fn is_error(l: &str) -> bool {
    l.contains("unhandled system error")
        || l.contains("unhandled cuda error")
        || l.contains("internal error")
        || l.contains("invalid usage")
        || l.contains("remote process exited")
        || l.contains("cuda failure")
        || l.contains("test nccl failure")
        || l.contains("ncclsystemerror")
        || l.contains("ncclunhandledcudaerror")
        || l.contains("ncclinternalerror")
        || l.contains("ncclremoteerror")
        || (l.contains("nccl error") && !l.contains("nccl_"))
}

/// A tuner line (`src/enqueue.cc`, rank 0; none through 2.19): NCCL 2.20-2.22 `%ld Bytes ->
/// Algo %d proto %d time %f` (numbers, v2.20.3 :1498); 2.23 `%s: %ld Bytes -> Algo %d proto %d
/// time %f` (the collective named, v2.23.4 :1855); 2.24+ `%s: %ld Bytes -> Algo %s proto %s
/// channel{Lo..Hi}={%d..%d}` (names, and the channels used), maybe followed by more fields.
pub(crate) fn algo_choice(t: &str) -> Option<crate::documents::nccl_dump::AlgoChoice> {
    use crate::documents::nccl_dump::{algo_name, proto_name, AlgoChoice};
    static R: OnceLock<Regex> = OnceLock::new();
    let re = static_regex(
        &R,
        r"(?:\b(?P<coll>[A-Z][A-Za-z]+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)(?: time [\d.eE+-]+)?(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?",
    );
    let c = re.captures(t)?;
    let channels = match (c.name("lo"), c.name("hi")) {
        (Some(lo), Some(hi)) => {
            let (lo, hi): (u32, u32) = (lo.as_str().parse().ok()?, hi.as_str().parse().ok()?);
            Some(hi.checked_sub(lo)? + 1)
        }
        _ => None,
    };
    Some(AlgoChoice {
        collective: c.name("coll").map(|m| m.as_str().to_string()),
        bytes: c["bytes"].parse().ok()?,
        algo: algo_name(&c["algo"])?.to_string(),
        proto: proto_name(&c["proto"])?.to_string(),
        channels,
    })
}

/// `32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, ...`.
pub(crate) fn channel_counts(t: &str) -> Option<crate::documents::nccl_dump::ChannelCounts> {
    if !t.contains(" coll channels") {
        return None;
    }
    let count = |what: &str| -> Option<u32> {
        let i = t.find(&format!(" {what} channels"))?;
        t[..i]
            .rsplit(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some(crate::documents::nccl_dump::ChannelCounts {
        coll: count("coll"),
        collnet: count("collnet"),
        nvls: count("nvls"),
        p2p: count("p2p"),
    })
}

/// `NET/IB : Made virtual device [%d] name=%s speed=%d ndevs=%d` (src/transport/net_ib.cc,
/// v2.28.9 649; 2.30 adds ` rail=%d plane=%d`): the virtual device and the names of the ports
/// it fuses, which NCCL joins with `+`.
pub(crate) fn virtual_nic(t: &str) -> Option<(u32, Vec<String>)> {
    let rest = &t[t.find("Made virtual device [")? + 21..];
    let (dev, rest) = rest.split_once(']')?;
    let name = rest
        .trim_start()
        .strip_prefix("name=")?
        .split_whitespace()
        .next()?;
    let ports: Vec<String> = name.split('+').take(8).map(str::to_string).collect();
    Some((dev.trim().parse().ok()?, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_prefixes() {
        assert_eq!(host_of("h-1.x:12:34 [0] NCCL INFO a"), Some("h-1.x"));
        assert_eq!(
            host_of("[2025-05-12 17:31:38] AIS:2374:2645 [0] graph"),
            Some("AIS")
        );
        assert_eq!(
            host_of("pod-0: pod-0:19491:21059 [7] proxy.cc"),
            Some("pod-0")
        );
        assert_eq!(host_of("NCCL INFO Bootstrap : Using lo:127.0.0.1<0>"), None);
    }
}

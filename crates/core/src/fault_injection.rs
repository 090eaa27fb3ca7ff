//! TEST-ONLY fault injection: the hidden `--inject-fault KIND:RANK[:SIZE]` makes one rank
//! stall, die or corrupt its output so the tests can prove that hangs, dead ranks and wrong
//! data are caught. Nothing sets it in a normal run; product code reaches it through the one
//! hook, [`strike`], and only when a fault was asked for.
//!
//! The same flag takes, `;`-separated, what the pair matrix and straggler tests need on a
//! machine whose links are all alike: `slow:A-B:FACTOR` (every message between ranks A and B
//! takes FACTOR times as long), `slow:A:FACTOR` (every message to or from A: a bad NIC),
//! `late:RANK:MICROSECONDS` (the rank arrives that much late at every collective of
//! `sweep --stragglers`) and `hosts:NAME,NAME,…` (the host name each rank reports, so
//! `matrix --by node` can be tested on one machine). [`Injected`] holds them.

use crate::coll::{Layout, Placement};
use crate::exit::Failure;
use crate::units::parse_size;
use std::sync::atomic::{AtomicBool, Ordering};

/// A fault a test asks a rank to commit (hidden `--inject-fault`); never set otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Never return from the collective.
    Stall,
    /// Flip one output element before the check counts.
    Corrupt,
    /// Exit the process abruptly (a rank that dies).
    Die,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: usize,
    /// Only at this size (bytes); any size when `None`.
    pub size_bytes: Option<u64>,
}

impl Fault {
    pub fn parse(text: &str) -> Result<Fault, Failure> {
        let bad = || {
            Failure::usage(format!(
                "--inject-fault: '{text}' is not KIND:RANK[:SIZE] with KIND stall, corrupt or die"
            ))
        };
        let mut parts = text.split(':');
        let kind = match parts.next() {
            Some("stall") => FaultKind::Stall,
            Some("corrupt") => FaultKind::Corrupt,
            Some("die") => FaultKind::Die,
            _ => return Err(bad()),
        };
        let rank = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
        let size_bytes = match parts.next() {
            Some(s) => Some(parse_size(s).map_err(|_| bad())?),
            None => None,
        };
        Ok(Fault {
            kind,
            rank,
            size_bytes,
        })
    }

    pub fn applies(&self, rank: usize, size_bytes: u64) -> bool {
        self.rank == rank && self.size_bytes.is_none_or(|s| s == size_bytes)
    }
}

/// The matrix and straggler injections (TEST-ONLY; empty in a normal run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Injected {
    /// (rank, other rank or any, factor): messages between them take `factor` times as long.
    pub slow: Vec<(usize, Option<usize>, f64)>,
    /// (rank, seconds late at every collective of the straggler pass).
    pub late: Option<(usize, f64)>,
    /// The host name of each rank, in rank order.
    pub hosts: Option<Vec<String>>,
}

impl Injected {
    /// How many times as long a message between `a` and `b` is made to take (1 = untouched).
    pub fn slowdown(&self, a: usize, b: usize) -> f64 {
        self.slow
            .iter()
            .filter(|(x, y, _)| match y {
                Some(y) => (*x == a && *y == b) || (*x == b && *y == a),
                None => *x == a || *x == b,
            })
            .map(|(_, _, f)| *f)
            .fold(1.0, f64::max)
    }

    /// Hold this rank for `seconds` without holding a core: on a machine with fewer cores
    /// than ranks a spinning rank would slow the others too, and the test would see two
    /// slow ranks instead of the one it injected. (A sleep overshoots by the scheduler's
    /// granularity, which only makes the injected rank later.)
    pub fn hold(seconds: f64) {
        if seconds > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        }
    }
}

/// Whether the TEST-ONLY hooks are on: the `NCCLPROBE_TEST_*` variables that stand a fixture in
/// for /proc/meminfo, /proc, /dev, the loader's default NCCL and a slow history writer.
static TEST_HOOKS: AtomicBool = AtomicBool::new(false);

/// Turns the TEST-ONLY hooks on. Only the entry point of a build with the `fault-injection`
/// feature calls it, before any command runs; a user's build has no call to it, so the
/// variables mean nothing there. (A run-time switch rather than a feature in every crate: the
/// libraries then compile the same for the test build and the user's, and are built once.)
pub fn enable_test_hooks() {
    TEST_HOOKS.store(true, Ordering::Relaxed);
}

/// Whether [`enable_test_hooks`] was called in this process.
pub fn test_hooks() -> bool {
    TEST_HOOKS.load(Ordering::Relaxed)
}

/// The directory or file a TEST-ONLY variable names, when the hooks are on and it is set and
/// not empty.
pub fn test_path(var: &str) -> Option<std::path::PathBuf> {
    if !test_hooks() {
        return None;
    }
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(Into::into)
}

/// TEST-ONLY (`fault-injection` builds): with `NCCLPROBE_TEST_HISTORY_STALL=SECONDS`, a history
/// writer says `history: holding a transaction` on stderr and holds its open transaction that
/// long before committing, so a test can kill it there. Does nothing in a user's build.
pub fn history_stall_before_commit() {
    if !test_hooks() {
        return;
    }
    if let Some(s) = std::env::var("NCCLPROBE_TEST_HISTORY_STALL")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        eprintln!("history: holding a transaction");
        std::thread::sleep(std::time::Duration::from_secs_f64(s.max(0.0)));
    }
}

/// Parse `--inject-fault`: at most one rank fault and any of the matrix/straggler injections,
/// `;`-separated.
pub fn parse(text: &str) -> Result<(Option<Fault>, Injected), Failure> {
    let mut fault = None;
    let mut injected = Injected::default();
    for item in text.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |why: &str| Failure::usage(format!("--inject-fault: '{item}': {why}"));
        let (kind, rest) = item.split_once(':').unwrap_or((item, ""));
        match kind {
            "slow" => {
                let (who, factor) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| bad("expected slow:A-B:FACTOR or slow:A:FACTOR"))?;
                let factor: f64 = factor
                    .parse()
                    .ok()
                    .filter(|f: &f64| f.is_finite() && *f >= 1.0)
                    .ok_or_else(|| bad("FACTOR is a number >= 1"))?;
                let rank = |r: &str| r.parse::<usize>().map_err(|_| bad("ranks are numbers"));
                let (a, b) = match who.split_once('-') {
                    Some((a, b)) => (rank(a)?, Some(rank(b)?)),
                    None => (rank(who)?, None),
                };
                injected.slow.push((a, b, factor));
            }
            "late" => {
                let (rank, micros) = rest
                    .split_once(':')
                    .ok_or_else(|| bad("expected late:RANK:MICROSECONDS"))?;
                let rank = rank.parse().map_err(|_| bad("RANK is a number"))?;
                let micros: f64 = micros
                    .parse()
                    .ok()
                    .filter(|m: &f64| m.is_finite() && *m >= 0.0)
                    .ok_or_else(|| bad("MICROSECONDS is a number >= 0"))?;
                injected.late = Some((rank, micros * 1e-6));
            }
            "hosts" => {
                injected.hosts = Some(rest.split(',').map(str::to_string).collect());
            }
            _ if fault.is_none() => fault = Some(Fault::parse(item)?),
            _ => return Err(bad("one rank fault at a time")),
        }
    }
    Ok((fault, injected))
}

/// Where in a point the harness offers the fault its chance.
pub enum Site<'a> {
    /// Inputs are on the device, the point's first collective is next.
    BeforeTiming { what: &'a str },
    /// The check pass has downloaded this rank's output and is about to count wrong elements.
    CheckOutput {
        recv: &'a mut [u8],
        layout: &'a Layout,
        placement: Placement,
        elem_bytes: usize,
    },
}

/// The one hook: commit the asked-for fault if it applies to this rank, size and site.
pub fn strike(fault: Option<&Fault>, rank: usize, size_bytes: u64, site: Site<'_>) {
    let Some(fault) = fault.filter(|f| f.applies(rank, size_bytes)) else {
        return;
    };
    match (fault.kind, site) {
        (FaultKind::Die, Site::BeforeTiming { what }) => {
            eprintln!("ncclprobe: rank {rank}: injected fault: killed during {what}");
            // As a crashed or OOM-killed rank ends: by a signal, with no clean-up at all.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            std::process::abort();
        }
        (FaultKind::Stall, Site::BeforeTiming { what }) => {
            eprintln!("ncclprobe: rank {rank}: injected fault: stalling in {what}");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        (
            FaultKind::Corrupt,
            Site::CheckOutput {
                recv,
                layout,
                placement,
                elem_bytes,
            },
        ) => corrupt_one_element(recv, layout, placement, elem_bytes),
        _ => {}
    }
}

/// Flip every bit of the first output element.
fn corrupt_one_element(recv: &mut [u8], layout: &Layout, placement: Placement, elem: usize) {
    if layout.recv_count == 0 {
        return;
    }
    let off = match placement {
        Placement::OutOfPlace => 0,
        Placement::InPlace => layout.recv_inplace_offset * elem,
    };
    if let Some(first) = recv.get_mut(off..off + elem) {
        for b in first {
            *b = !*b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(
            Fault::parse("stall:1:64K").unwrap(),
            Fault {
                kind: FaultKind::Stall,
                rank: 1,
                size_bytes: Some(65536)
            }
        );
        assert!(Fault::parse("explode:1").is_err());
        assert!(Fault::parse("die").is_err());
    }

    #[test]
    fn matrix_and_straggler_injections_parse_beside_a_fault() {
        let (fault, inj) = parse("slow:1-3:4; late:2:500;hosts:a,a,b,b;stall:0").unwrap();
        assert_eq!(fault.map(|f| f.kind), Some(FaultKind::Stall));
        assert_eq!(inj.slow, vec![(1, Some(3), 4.0)]);
        assert_eq!(inj.late, Some((2, 500e-6)));
        assert_eq!(inj.hosts.as_deref().map(<[String]>::len), Some(4));
        assert_eq!(inj.slowdown(3, 1), 4.0);
        assert_eq!(inj.slowdown(1, 2), 1.0);
        let (_, node) = parse("slow:2:3").unwrap();
        assert_eq!((node.slowdown(0, 2), node.slowdown(0, 1)), (3.0, 1.0));
        for bad in [
            "slow:1-x:2",
            "slow:1:0.5",
            "late:1",
            "stall:0;die:1",
            "boom:1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn corrupt_flips_the_first_output_element_of_the_asked_rank_and_size_only() {
        let fault = Fault::parse("corrupt:1:16").unwrap();
        let layout = Layout::new(
            crate::coll::Collective::AllReduce,
            4,
            4,
            2,
            1,
            &Default::default(),
        );
        let mut recv = vec![0u8; 16];
        fn site<'a>(recv: &'a mut [u8], layout: &'a Layout) -> Site<'a> {
            Site::CheckOutput {
                recv,
                layout,
                placement: Placement::OutOfPlace,
                elem_bytes: 4,
            }
        }
        strike(Some(&fault), 0, 16, site(&mut recv, &layout));
        strike(Some(&fault), 1, 32, site(&mut recv, &layout));
        assert_eq!(recv, vec![0u8; 16], "other ranks and sizes are left alone");
        strike(Some(&fault), 1, 16, site(&mut recv, &layout));
        assert_eq!(&recv[..4], &[0xff; 4]);
        assert_eq!(&recv[4..], &[0u8; 12]);
    }
}

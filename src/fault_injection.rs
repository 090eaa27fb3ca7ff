//! TEST-ONLY fault injection: the hidden `--inject-fault KIND:RANK[:SIZE]` makes one rank
//! stall, die or corrupt its output so the tests can prove that hangs, dead ranks and wrong
//! data are caught. Nothing sets it in a normal run; product code reaches it through the one
//! hook, [`strike`], and only when a fault was asked for.

use crate::coll::{Layout, Placement};
use crate::exit::Failure;
use crate::units::parse_size;

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
    fn corrupt_flips_the_first_output_element_of_the_asked_rank_and_size_only() {
        let fault = Fault::parse("corrupt:1:16").unwrap();
        let layout = Layout::new(crate::coll::Collective::AllReduce, 4, 4, 2, 1);
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

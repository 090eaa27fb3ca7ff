//! Reading NCCL's debug log as it grows: one pass over the bytes written since the last read
//! (NCCL writes a line per collective call with TUNING on, megabytes per point), a bounded
//! partial line, the bytes already read given back to the file system where the log is ours,
//! and the tuner's lines matched to a point as each NCCL version states their bytes.

use crate::coll::Collective;
use crate::documents::nccl_dump::{AlgoChoice, AlgoUsed};
use crate::import::nccl_log::LogFacts;
use crate::import::text::{clean, Line};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// How `--show-algo` learns the tuner's choice.
#[derive(Clone, Copy)]
pub(super) enum Mode {
    /// No tuner lines are asked for.
    Off,
    /// Ours alone, waiting for NCCL's version (`loaded`).
    Pending,
    /// TUNING only around each point's first call, switched with `ncclResetDebugInit`.
    Probe(unsafe extern "C" fn()),
    /// TUNING on for every call.
    Logged,
}

/// The longest line kept whole; NCCL's lines are at most 1 KiB (debug.cc's buffer).
const MAX_LINE: usize = 64 << 10;
/// Read per call at most: a runaway log costs time, not memory.
const MAX_READ: u64 = 256 << 20;
/// NCCL's warnings echoed to stderr at most (each is in the record's log file anyway).
const MAX_ECHOED: usize = 100;

#[derive(Default)]
pub(super) struct LogReader {
    /// NCCL_DEBUG_FILE as set (`%h`, `%p` unexpanded), when there is one to read.
    pub pattern: Option<String>,
    /// It expanded for this process: the file read now.
    pub path: Option<PathBuf>,
    /// The file is ncclprobe's (its read part may be dropped, it may be replaced).
    pub ours: bool,
    read_to: u64,
    partial: Vec<u8>,
    lines: usize,
    rotations: u32,
    echoed: usize,
    pub facts: LogFacts,
}

impl LogReader {
    /// Read what NCCL wrote to its debug file since the last call, in one pass.
    pub fn catch_up(&mut self) {
        let Some(path) = self.path.clone() else {
            return;
        };
        // Ours is opened for writing too, to give back what was read (`drop_read_part`).
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .write(self.ours)
            .open(&path)
        else {
            return;
        };
        // NCCL reopens its file with "w" after a reset: shorter than what was read means anew.
        if f.metadata().is_ok_and(|m| m.len() < self.read_to) {
            self.read_to = 0;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.read_to)).is_err() {
            return;
        }
        let name = path
            .file_name()
            .map_or("nccl.log".into(), |n| n.to_string_lossy().into_owned());
        let mut chunk = vec![0u8; 1 << 20];
        let mut read = 0u64;
        while read < MAX_READ {
            let n = match f.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            read += n as u64;
            self.read_to += n as u64;
            self.feed_bytes(&name, &chunk[..n]);
        }
        if self.ours {
            drop_read_part(&f, self.read_to);
        }
    }

    /// Whole lines of `bytes` (after what was left of the last chunk) into the facts.
    pub fn feed_bytes(&mut self, name: &str, bytes: &[u8]) {
        let mut start = 0;
        while let Some(at) = bytes[start..].iter().position(|&b| b == b'\n') {
            let end = start + at;
            if self.partial.is_empty() {
                self.feed_line(name, &bytes[start..end]);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                let room = MAX_LINE.saturating_sub(line.len());
                line.extend_from_slice(&bytes[start..end.min(start + room)]);
                self.feed_line(name, &line);
                line.clear();
                self.partial = line;
            }
            start = end + 1;
        }
        let room = MAX_LINE.saturating_sub(self.partial.len());
        let rest = &bytes[start..];
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
    }

    fn feed_line(&mut self, name: &str, bytes: &[u8]) {
        let raw = String::from_utf8_lossy(bytes);
        // Bytes given back (`drop_read_part`) read as NULs should a write race the punch.
        let raw = raw.trim_end_matches('\r').trim_start_matches('\0');
        if raw.is_empty() {
            return;
        }
        self.lines += 1;
        let (text, tag) = clean(raw);
        if text.contains("NCCL WARN") && self.echoed < MAX_ECHOED {
            // As the run goes: a hang's warnings are on the terminal before the timeout.
            eprintln!("ncclprobe: NCCL said: {}", text.trim());
            self.echoed += 1;
        }
        self.facts.feed(
            name,
            &Line {
                number: self.lines,
                raw: raw.to_string(),
                text,
                tag_rank: tag,
            },
        );
    }

    /// Point NCCL at a new file of ours with `subsys` and make it read its variables again;
    /// the old file, complete once the reset returns (it takes NCCL's log mutex), is read to
    /// its end and removed, so the log on disk stays one point's worth.
    pub fn rotate(&mut self, subsys: &str, reset: unsafe extern "C" fn()) {
        let Some(pattern) = self.pattern.clone().filter(|_| self.ours) else {
            return;
        };
        self.rotations += 1;
        let next = match pattern.strip_suffix(".log") {
            Some(stem) => format!("{stem}.{}.log", self.rotations),
            None => format!("{pattern}.{}", self.rotations),
        };
        // Both variables exist since `arm`, so these replace a value in place (the
        // environment's array is not reallocated under a reader in NCCL's threads).
        std::env::set_var("NCCL_DEBUG_SUBSYS", subsys);
        std::env::set_var("NCCL_DEBUG_FILE", &next);
        // SAFETY: `ncclResetDebugInit` takes no arguments and only marks NCCL's debug state
        // for re-reading (debug.cc, ncclResetDebugInitInternal).
        unsafe { reset() };
        self.catch_up();
        if let Some(old) = self.path.take() {
            let _ = std::fs::remove_file(old);
        }
        self.path = Some(PathBuf::from(expand(&next)));
        self.read_to = 0;
        self.partial.clear();
    }

    /// NCCL's version from its log (`NCCL version 2.28.5+cuda12.8`), as NCCL codes it.
    pub fn version_code(&self) -> Option<u32> {
        let v = self.facts.nccl_version.as_deref()?;
        let mut parts = v
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u32>().ok());
        let (major, minor) = (parts.next()??, parts.next()??);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(major * 10000 + minor * 100 + patch.min(99))
    }

    /// The tuner's choice for a point of `bytes` (nccl-tests' size: the whole buffer for
    /// AllGather and ReduceScatter) on `nranks` ranks, as the version states the bytes:
    /// through 2.23 the whole buffer (v2.22.3 enqueue.cc:1669), from 2.24 the task's per-rank
    /// count (enqueue.cc:741-742).
    pub fn algo_for(
        &self,
        coll: Collective,
        bytes: u64,
        nranks: usize,
        collectives: usize,
    ) -> Option<AlgoUsed> {
        let name = nccl_name(coll)?;
        let per_rank = matches!(coll, Collective::AllGather | Collective::ReduceScatter)
            && self.version_code().is_some_and(|v| v >= 22400);
        let stated = match per_rank {
            true => bytes / (nranks.max(1) as u64),
            false => bytes,
        };
        let named = self.facts.choices.keys().any(|c| c.collective.is_some());
        let fits = |c: &AlgoChoice| {
            c.bytes == stated
                && match &c.collective {
                    Some(n) => n == name,
                    None => !named && collectives == 1,
                }
        };
        AlgoUsed::from_choices(
            self.facts
                .choices
                .iter()
                .filter(|(c, _)| fits(c))
                .map(|(c, n)| (c, *n)),
        )
    }
}

/// Give the part of our log already read back to the file system (tmpfs keeps it in memory):
/// the file keeps its size and NCCL its offset, so nothing NCCL writes next is disturbed.
fn drop_read_part(f: &std::fs::File, read_to: u64) {
    use std::os::fd::AsRawFd;
    if read_to < (1 << 20) {
        return;
    }
    let Ok(len) = libc::off_t::try_from(read_to) else {
        return;
    };
    // SAFETY: a valid descriptor of a file this process opened; failure (a file system without
    // hole punching) leaves the file as it was.
    unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            len,
        );
    }
}

/// NCCL's name of a collective in its tuner lines; none for point-to-point calls, which NCCL
/// does not tune.
pub(super) fn nccl_name(coll: Collective) -> Option<&'static str> {
    Some(match coll {
        Collective::AllReduce => "AllReduce",
        Collective::AllGather => "AllGather",
        Collective::ReduceScatter => "ReduceScatter",
        Collective::Broadcast => "Broadcast",
        Collective::Reduce => "Reduce",
        _ => return None,
    })
}

/// NCCL's `%h` (the host name up to its first dot) and `%p` (the pid) in NCCL_DEBUG_FILE.
pub(super) fn expand(pattern: &str) -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host = host.split('.').next().unwrap_or("").to_string();
    pattern
        .replace("%h", &host)
        .replace("%p", &std::process::id().to_string())
}

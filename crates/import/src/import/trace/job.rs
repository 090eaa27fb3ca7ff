//! Which files are traces, and reading all of them: told by content, gzip or not, ranks in
//! parallel where cores allow.

use super::types::{bad, RankTrace, TraceError};
use super::{flight, inspector, kineto};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What a file holds, from its first bytes (decompressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    Kineto,
    FlightRecorder,
    FlightRecorderPickle,
    Inspector,
    /// NCCL Inspector's Prometheus textfile.
    InspectorProm,
    /// `nsys export --type sqlite` (or any SQLite database).
    Sqlite,
}

impl TraceKind {
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Kineto => "PyTorch profiler trace",
            TraceKind::FlightRecorder => "Flight Recorder dump (JSON)",
            TraceKind::FlightRecorderPickle => "Flight Recorder dump (pickle)",
            TraceKind::Inspector => "NCCL Inspector output",
            TraceKind::InspectorProm => "NCCL Inspector Prometheus textfile",
            TraceKind::Sqlite => "Nsight Systems export (SQLite)",
        }
    }
}

/// A file's bytes, through gzip when it is compressed.
pub fn open_reader(path: &Path) -> Result<Box<dyn Read + Send>, TraceError> {
    let name = path.display().to_string();
    let mut file =
        std::fs::File::open(path).map_err(|e| bad(&name, crate::import::text::io_words(&e)))?;
    let mut magic = [0u8; 2];
    let n = file
        .read(&mut magic)
        .map_err(|e| bad(&name, e.to_string()))?;
    let head = std::io::Cursor::new(magic[..n].to_vec()).chain(file);
    let reader: Box<dyn Read + Send> = if magic[..n] == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(head))
    } else {
        Box::new(head)
    };
    Ok(Box::new(std::io::BufReader::with_capacity(1 << 20, reader)))
}

/// What `head` (a file's first decompressed bytes) is, if it is one of the formats here.
pub fn kind_of(head: &[u8]) -> Option<TraceKind> {
    if head.starts_with(b"SQLite format 3\0") {
        return Some(TraceKind::Sqlite);
    }
    // A pickle opens with PROTO (0x80) and its protocol number.
    if head.len() > 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
        return Some(TraceKind::FlightRecorderPickle);
    }
    let text = String::from_utf8_lossy(head);
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if t.lines().take(50).any(|l| {
        l.starts_with("nccl_bus_bandwidth_gbs{")
            || l.starts_with("nccl_collective_exec_time_microseconds{")
    }) {
        return Some(TraceKind::InspectorProm);
    }
    if !t.starts_with('{') {
        return None;
    }
    if t.contains("\"traceEvents\"")
        || (t.contains("\"schemaVersion\"") && t.contains("\"deviceProperties\""))
    {
        Some(TraceKind::Kineto)
    } else if t.contains("\"pg_config\"")
        || t.contains("\"profiling_name\"")
        || t.contains("\"pg_status\"")
    {
        Some(TraceKind::FlightRecorder)
    } else if t.contains("\"coll_perf\"") || t.contains("\"coll_busbw_gbs\"") {
        Some(TraceKind::Inspector)
    } else {
        None
    }
}

/// What a file is, if it is one of the formats here (reads its first 64 KiB).
/// Only regular files are looked at: a FIFO or stdin can be read once, by the reader that
/// takes it.
pub fn sniff(path: &Path) -> Option<TraceKind> {
    if !path.is_file() {
        return None;
    }
    let mut head = Vec::new();
    open_reader(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    kind_of(&head)
}

/// The files of a directory that are traces or dumps, sorted by name (rank order for
/// `rank-0…`, `<prefix><rank>`); a file stands for itself.
pub fn files_of(path: &Path) -> Result<Vec<(PathBuf, TraceKind)>, TraceError> {
    let name = path.display().to_string();
    if !path.is_dir() {
        let kind = sniff(path).ok_or_else(|| {
            bad(
                &name,
                "is not a PyTorch profiler trace, Flight Recorder dump, NCCL Inspector output or Nsight Systems export",
            )
        })?;
        return Ok(vec![(path.to_path_buf(), kind)]);
    }
    let mut found = Vec::new();
    let entries =
        std::fs::read_dir(path).map_err(|e| bad(&name, crate::import::text::io_words(&e)))?;
    for entry in entries.flatten() {
        let p = entry.path();
        if p.is_file() {
            if let Some(kind) = sniff(&p) {
                found.push((p, kind));
            }
        }
    }
    // Natural order: rank-2 before rank-10.
    found.sort_by_key(|(p, _)| natural_key(&p.display().to_string()));
    if found.is_empty() {
        return Err(bad(
            &name,
            "holds no PyTorch profiler trace, Flight Recorder dump, NCCL Inspector output or Nsight Systems export",
        ));
    }
    Ok(found)
}

/// A name split into text and numbers, so numbers sort by value.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    out.push((text, digits.parse().unwrap_or(0)));
    out
}

/// Everything read from the paths given: the ranks' traces, Flight Recorder ranks, Inspector
/// records.
#[derive(Debug, Default)]
pub struct JobRecords {
    pub ranks: Vec<RankTrace>,
    pub flight: Vec<flight::FlightRank>,
    pub inspector: Vec<inspector::InspectorRecord>,
    /// Files read, with what each was.
    pub files: Vec<(String, TraceKind)>,
}

/// Read every trace and dump under `paths` (files or directories), ranks in parallel where
/// cores allow.
pub fn read_job(paths: &[PathBuf]) -> Result<JobRecords, TraceError> {
    let mut files = Vec::new();
    for p in paths {
        files.extend(files_of(p)?);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Parsed, TraceError>>>> =
        files.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some((path, kind)) = files.get(i) else {
                    break;
                };
                let parsed = read_one(path, *kind);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(parsed);
            });
        }
    });
    let mut job = JobRecords::default();
    for ((path, kind), slot) in files.iter().zip(results) {
        let parsed = slot.into_inner().unwrap_or_else(|e| e.into_inner());
        match parsed.unwrap_or_else(|| Err(bad(&path.display().to_string(), "was not read")))? {
            Parsed::Rank(r) => job.ranks.push(*r),
            Parsed::Ranks(mut r) => job.ranks.append(&mut r),
            Parsed::Flight(f) => job.flight.push(f),
            Parsed::Inspector(mut i) => job.inspector.append(&mut i),
        }
        job.files.push((path.display().to_string(), *kind));
    }
    Ok(job)
}

enum Parsed {
    Rank(Box<RankTrace>),
    /// An nsys export: every profiled process.
    Ranks(Vec<RankTrace>),
    Flight(flight::FlightRank),
    Inspector(Vec<inspector::InspectorRecord>),
}

fn read_one(path: &Path, kind: TraceKind) -> Result<Parsed, TraceError> {
    let name = path.display().to_string();
    Ok(match kind {
        TraceKind::Sqlite => {
            // SQLite reads the file itself: a compressed export must be decompressed first.
            let mut magic = [0u8; 16];
            let raw = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic));
            if raw.is_err() || &magic != b"SQLite format 3\0" {
                return Err(bad(
                    &name,
                    "is a compressed SQLite database: decompress it (gunzip) and give the .sqlite file",
                ));
            }
            Parsed::Ranks(super::nsys::read(path)?)
        }
        TraceKind::Kineto => Parsed::Rank(Box::new(kineto::read(&name, open_reader(path)?)?)),
        TraceKind::FlightRecorder => Parsed::Flight(flight::read_json(&name, open_reader(path)?)?),
        TraceKind::FlightRecorderPickle => {
            Parsed::Flight(flight::read_pickle(&name, open_reader(path)?)?)
        }
        TraceKind::Inspector => Parsed::Inspector(inspector::read(&name, open_reader(path)?)?),
        TraceKind::InspectorProm => {
            Parsed::Inspector(inspector::read_prom(&name, open_reader(path)?)?)
        }
    })
}

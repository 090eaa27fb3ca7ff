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
    examine(path).ok().flatten()
}

/// What a regular file holds, or why it cannot be read (its I/O error, a cut gzip stream).
fn examine(path: &Path) -> Result<Option<TraceKind>, String> {
    let meta = std::fs::metadata(path).map_err(|e| crate::import::text::io_words(&e))?;
    if !meta.is_file() {
        return Err(
            "is not a regular file (a FIFO, a pipe or a device): save it to a file and give that"
                .into(),
        );
    }
    if meta.len() == 0 {
        return Err("is empty".into());
    }
    let mut head = Vec::new();
    let reader = open_reader(path).map_err(|e| e.to_string())?;
    // A short or corrupt gzip stream fails here, and is said as such.
    reader
        .take(64 << 10)
        .read_to_end(&mut head)
        .map_err(|e| format!("cannot be read: {e}"))?;
    Ok(kind_of(&head))
}

const NONE_OF_THEM: &str =
    "PyTorch profiler trace, Flight Recorder dump, NCCL Inspector output or Nsight Systems export";

/// Whether a file a directory holds looks like one a job wrote (so skipping it is said).
fn looks_like_a_record(p: &Path) -> bool {
    let n = p
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    [
        ".json", ".gz", ".pkl", ".prom", ".sqlite", ".log", "rank", "trace",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// The files of a directory that are traces or dumps, sorted by name (rank order for
/// `rank-0…`, `<prefix><rank>`), and the ones skipped that looked like records (with why); a
/// file stands for itself, and is refused with its reason when it is none of them.
pub fn files_of(path: &Path) -> Result<Files, TraceError> {
    let name = path.display().to_string();
    if !path.is_dir() {
        let kind = match examine(path) {
            Ok(Some(kind)) => kind,
            Ok(None) => return Err(bad(&name, format!("is not a {NONE_OF_THEM}"))),
            Err(why) => return Err(bad(&name, why)),
        };
        return Ok(Files {
            found: vec![(path.to_path_buf(), kind)],
            skipped: Vec::new(),
        });
    }
    let mut files = Files::default();
    let entries =
        std::fs::read_dir(path).map_err(|e| bad(&name, crate::import::text::io_words(&e)))?;
    for entry in entries.flatten() {
        let p = entry.path();
        match examine(&p) {
            Ok(Some(kind)) => files.found.push((p, kind)),
            Ok(None) if looks_like_a_record(&p) => files
                .skipped
                .push(format!("{}: skipped, not a {NONE_OF_THEM}", p.display())),
            Err(why) if looks_like_a_record(&p) || !p.is_dir() => files
                .skipped
                .push(format!("{}: skipped, {why}", p.display())),
            _ => {}
        }
    }
    // Natural order: rank-2 before rank-10.
    files
        .found
        .sort_by_key(|(p, _)| natural_key(&p.display().to_string()));
    files.skipped.sort();
    if files.found.is_empty() {
        return Err(bad(&name, format!("holds no {NONE_OF_THEM}")));
    }
    Ok(files)
}

/// What a path holds: the records found, and what was skipped (said in the notes).
#[derive(Debug, Default)]
pub struct Files {
    pub found: Vec<(PathBuf, TraceKind)>,
    pub skipped: Vec<String>,
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
    /// Files of the directories given that were skipped, with why.
    pub skipped: Vec<String>,
}

/// Read every trace and dump under `paths` (files or directories), ranks in parallel where
/// cores allow.
pub fn read_job(paths: &[PathBuf]) -> Result<JobRecords, TraceError> {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for p in paths {
        let f = files_of(p)?;
        files.extend(f.found);
        skipped.extend(f.skipped);
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
    let mut job = JobRecords {
        skipped,
        ..JobRecords::default()
    };
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

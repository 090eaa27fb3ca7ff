//! What NCCL says about a run of the nccl backend. Before NCCL is loaded, the variables that
//! make it write its debug log and its topology and graph dumps are set into a directory of
//! this process's (each only when the user has not set it: theirs is read instead, and left);
//! after init and as points finish, the log is read for the network, transports, GPUDirect
//! RDMA, NVLS and channels, and with `--show-algo` the tuner's choice per size; at the end the
//! record gets all of it, and the directory is removed.
//!
//! Process-wide, like the environment NCCL reads: `arm` once, before the first NCCL call.

use crate::coll::Collective;
use crate::documents::nccl_dump::{AlgoChoice, AlgoUsed, NcclObserved};
use crate::import::nccl_log::LogFacts;
use crate::import::text::{clean, Line};
use crate::model::RunRecord;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

struct Observer {
    /// Ours, removed at the end.
    dir: Option<PathBuf>,
    /// NCCL_DEBUG_FILE as NCCL expands it for this process, when there is one.
    debug_file: Option<PathBuf>,
    topo: Option<PathBuf>,
    graph: Option<PathBuf>,
    set: Vec<String>,
    show_algo: bool,
    /// How many collectives the run measures: tuner lines of NCCL 2.19-2.22 name no
    /// collective, and are matched by size only when there is one.
    collectives: usize,
    notes: Vec<String>,
    read_to: u64,
    partial: String,
    lines: usize,
    facts: LogFacts,
}

static OBSERVER: OnceLock<Mutex<Observer>> = OnceLock::new();

fn with<R>(f: impl FnOnce(&mut Observer) -> R) -> Option<R> {
    let m = OBSERVER.get()?;
    let mut o = m.lock().unwrap_or_else(|p| p.into_inner());
    Some(f(&mut o))
}

/// NCCL's `%h` (the host name up to its first dot) and `%p` (the pid) in NCCL_DEBUG_FILE.
fn expand(pattern: &str) -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host = host.split('.').next().unwrap_or("").to_string();
    pattern
        .replace("%h", &host)
        .replace("%p", &std::process::id().to_string())
}

/// Set NCCL's debug and dump variables the user left unset; call before NCCL is loaded.
pub fn arm(show_algo: bool, collectives: usize) {
    if OBSERVER.get().is_some() {
        return;
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("ncclprobe-nccl-{}-{stamp}", std::process::id()));
    let made = std::fs::create_dir(&dir).is_ok();
    let mut set = Vec::new();
    let mut notes = Vec::new();
    let mut put = |key: &str, value: String| {
        // Before any thread of ours calls into NCCL or reads the environment.
        std::env::set_var(key, &value);
        set.push(format!("{key}={value}"));
    };
    let user = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let ours = |name: &str| made.then(|| dir.join(name));
    match user("NCCL_DEBUG") {
        None => put("NCCL_DEBUG", "INFO".into()),
        Some(v) if !matches!(v.to_ascii_uppercase().as_str(), "INFO" | "TRACE") => notes.push(format!(
            "NCCL_DEBUG={v} was set: NCCL's INFO lines (network, transports, tuner) are not there to read"
        )),
        Some(_) => {}
    }
    let subsys = if show_algo {
        "INIT,ENV,NET,GRAPH,TUNING"
    } else {
        "INIT,ENV,NET,GRAPH"
    };
    match user("NCCL_DEBUG_SUBSYS") {
        None => put("NCCL_DEBUG_SUBSYS", subsys.into()),
        Some(v)
            if show_algo
                && !v.to_ascii_uppercase().contains("TUNING")
                && !v.to_ascii_uppercase().contains("ALL") =>
        {
            notes.push(format!(
                "--show-algo: NCCL_DEBUG_SUBSYS={v} leaves out TUNING, so NCCL states no choice"
            ))
        }
        Some(_) => {}
    }
    let debug_file = match user("NCCL_DEBUG_FILE") {
        Some(p) => Some(PathBuf::from(expand(&p))),
        None => match ours("nccl.%h.%p.log") {
            Some(p) => {
                put("NCCL_DEBUG_FILE", p.display().to_string());
                Some(PathBuf::from(expand(&p.display().to_string())))
            }
            None => None,
        },
    };
    if debug_file.is_none() && user("NCCL_DEBUG").is_some() {
        notes.push("NCCL_DEBUG is set without NCCL_DEBUG_FILE: NCCL writes to stdout, where ncclprobe does not read it".into());
    }
    let mut dump = |key: &str, name: &str| match user(key) {
        Some(p) => Some(PathBuf::from(p)),
        None => ours(name).inspect(|p| put(key, p.display().to_string())),
    };
    let topo = dump("NCCL_TOPO_DUMP_FILE", "topo.xml");
    let graph = dump("NCCL_GRAPH_DUMP_FILE", "graph.xml");
    let _ = OBSERVER.set(Mutex::new(Observer {
        dir: made.then_some(dir),
        debug_file,
        topo,
        graph,
        set,
        show_algo,
        collectives,
        notes,
        read_to: 0,
        partial: String::new(),
        lines: 0,
        facts: LogFacts::default(),
    }));
}

/// Whether the table carries the tuner's column.
pub fn showing() -> bool {
    with(|o| o.show_algo).unwrap_or(false)
}

impl Observer {
    /// Read what NCCL wrote to its debug file since the last call.
    fn catch_up(&mut self) {
        let Some(path) = &self.debug_file else { return };
        let Ok(mut f) = std::fs::File::open(path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.read_to)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        // At most 64 MiB a call: a runaway log costs time, not memory.
        let Ok(n) = f.take(64 << 20).read_to_end(&mut buf) else {
            return;
        };
        self.read_to += n as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let name = path
            .file_name()
            .map_or("nccl.log".into(), |n| n.to_string_lossy().into_owned());
        while let Some(i) = self.partial.find('\n') {
            let raw: String = self.partial.drain(..=i).collect();
            let raw = raw.trim_end_matches(['\n', '\r']);
            self.lines += 1;
            let (text, tag) = clean(raw);
            self.facts.feed(
                &name,
                &Line {
                    number: self.lines,
                    raw: raw.to_string(),
                    text,
                    tag_rank: tag,
                },
            );
        }
    }

    fn algo_for(&self, coll: Collective, bytes: u64) -> Option<AlgoUsed> {
        let name = nccl_name(coll)?;
        let named = self.facts.choices.keys().any(|c| c.collective.is_some());
        let fits = |c: &AlgoChoice| {
            c.bytes == bytes
                && match &c.collective {
                    Some(n) => n == name,
                    None => !named && self.collectives == 1,
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

/// NCCL's name of a collective in its tuner lines; none for point-to-point calls, which NCCL
/// does not tune.
fn nccl_name(coll: Collective) -> Option<&'static str> {
    Some(match coll {
        Collective::AllReduce => "AllReduce",
        Collective::AllGather => "AllGather",
        Collective::ReduceScatter => "ReduceScatter",
        Collective::Broadcast => "Broadcast",
        Collective::Reduce => "Reduce",
        _ => return None,
    })
}

/// The tuner's choice for one point, from what NCCL has written so far (`--show-algo`).
pub fn algo_for(coll: Collective, bytes: u64) -> Option<AlgoUsed> {
    with(|o| {
        if !o.show_algo {
            return None;
        }
        o.catch_up();
        o.algo_for(coll, bytes)
    })
    .flatten()
}

/// Everything read, into the record: what NCCL said, per point the tuner's choice, and the
/// environment as the user set it (without the variables set here).
pub fn fill(record: &mut RunRecord) {
    let Some(observed) = with(|o| o.observed(record)) else {
        return;
    };
    record.nccl = Some(observed);
}

impl Observer {
    fn observed(&mut self, record: &mut RunRecord) -> NcclObserved {
        self.catch_up();
        let f = &self.facts;
        let mut obs = NcclObserved {
            set_by_ncclprobe: self.set.clone(),
            version: f.nccl_version.clone(),
            networks: f.networks.keys().cloned().collect(),
            net_devices: f.net_devices.clone(),
            transports: f.transports.keys().cloned().collect(),
            gdr: f.gdrdma || !f.gdr_enabled.is_empty(),
            nvls_support: f.nvls_support.as_ref().map(|(s, _)| *s),
            channels: f.channel_counts.as_ref().map(|(c, _)| c.clone()),
            tuner_lines: f.choices.values().sum(),
            warnings: f.warnings.iter().take(5).map(|e| e.text.clone()).collect(),
            notes: self.notes.clone(),
            ..NcclObserved::default()
        };
        if let Some(p) = &self.debug_file {
            if p.exists() {
                obs.files.push(file_name(p));
            }
        }
        let mut dump = crate::documents::nccl_dump::NcclDump::default();
        for path in [&self.topo, &self.graph].into_iter().flatten() {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            match crate::import::nccl_dump::from_text(&file_name(path), &text) {
                Ok(d) => {
                    obs.files.push(file_name(path));
                    dump.system = dump.system.or(d.system);
                    dump.graphs = dump.graphs.or(d.graphs);
                }
                Err(e) => obs.notes.push(format!("{e}")),
            }
        }
        if dump.system.is_some() || dump.graphs.is_some() {
            dump.rails = crate::import::nccl_dump::rails(
                dump.system.as_ref(),
                dump.graphs.as_ref(),
                &self.facts.virtual_nics,
            );
            obs.dump = Some(dump);
        }
        if self.show_algo {
            let mut missing = 0;
            for p in &mut record.points {
                p.nccl_algo = self.algo_for(p.collective, p.size_bytes);
                missing += usize::from(
                    p.nccl_algo.is_none() && nccl_name(p.collective).is_some() && p.nranks > 1,
                );
            }
            if obs.tuner_lines == 0 {
                obs.notes.push(
                    "--show-algo: NCCL stated no tuner choice (NCCL 2.18 and earlier print them only in TRACE builds; one rank runs no algorithm)".into(),
                );
            } else if missing > 0 {
                obs.notes.push(format!(
                    "--show-algo: {missing} points have no tuner line of their size"
                ));
            }
        }
        // The record's environment is the user's: not what was set here to read NCCL.
        for kv in &self.set {
            if let Some((k, _)) = kv.split_once('=') {
                record.env.remove(k);
            }
        }
        obs
    }
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Remove the directory the files were written to (the user's own files stay).
pub fn disarm() {
    with(|o| {
        if let Some(dir) = o.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}

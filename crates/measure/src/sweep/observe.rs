//! What NCCL says about a run of the nccl backend. Before NCCL is loaded, the variables that
//! make it write its debug log and its topology and graph dumps are set into a directory of
//! this process's (each only when the user has not set it: theirs is read instead, and left);
//! after init and as points finish, the log is read for the network, transports, GPUDirect
//! RDMA, NVLS and channels, and with `--show-algo` the tuner's choice per size; NCCL's
//! warnings are echoed to stderr as they are read; at the end the record gets all of it, and
//! the directory is removed.
//!
//! A user who set `NCCL_DEBUG` without `NCCL_DEBUG_FILE` is watching NCCL's log on their
//! terminal: it is left there (NCCL writes to stdout, debug.cc:34), not read, and the record
//! says so. Their `NCCL_DEBUG_SUBSYS` is never replaced; without one, NCCL's default mask
//! (INIT,BOOTSTRAP,ENV, debug.cc:48) is kept, plus TUNING with `--show-algo`.
//!
//! `--show-algo` never times a point while NCCL writes a line per call (enqueue.cc:740-743,
//! one `ncclDebugLog` each on rank 0): where NCCL has `ncclResetDebugInit` (2.24+) and the log
//! variables are ncclprobe's, TUNING is on only around each point's first (checked, untimed)
//! call; elsewhere it stays on and the record says the timings include that logging.
//!
//! Process-wide, like the environment NCCL reads: `arm` once, before the first NCCL call.

use crate::coll::Collective;
use crate::documents::nccl_dump::{AlgoUsed, NcclObserved};
use crate::model::RunRecord;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

#[path = "observe_log.rs"]
mod log;
#[cfg(test)]
#[path = "observe_tests.rs"]
mod tests;

use log::{expand, LogReader, Mode};

/// The subsystems read when ncclprobe owns the log (all valid names, debug.cc:81-113).
const OUR_SUBSYS: &str = "INIT,ENV,NET,GRAPH";
/// NCCL's own default mask (debug.cc:48), kept when the user set NCCL_DEBUG only.
const NCCL_DEFAULT_SUBSYS: &str = "INIT,BOOTSTRAP,ENV";

/// What `Observer::learned` records: the tuner's lines came from an untimed call only.
pub const LEARNED_UNTIMED: &str = "untimed-first-call";
/// The tuner's lines were on for every call: the timings include NCCL's per-call logging.
pub const LEARNED_LOGGED: &str = "logged-every-call";

struct Observer {
    /// Ours, removed at the end.
    dir: Option<PathBuf>,
    topo: Option<PathBuf>,
    graph: Option<PathBuf>,
    set: Vec<String>,
    show_algo: bool,
    /// How many collectives the run measures: tuner lines of NCCL 2.20-2.22 name no
    /// collective, and are matched by size only when there is one.
    collectives: usize,
    notes: Vec<String>,
    log: LogReader,
    mode: Mode,
}

static OBSERVER: OnceLock<Mutex<Observer>> = OnceLock::new();

fn with<R>(f: impl FnOnce(&mut Observer) -> R) -> Option<R> {
    let m = OBSERVER.get()?;
    let mut o = m.lock().unwrap_or_else(|p| p.into_inner());
    Some(f(&mut o))
}

fn user(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

fn with_tuning(subsys: &str) -> String {
    format!("{subsys},TUNING")
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
    let ours = |name: &str| made.then(|| dir.join(name));
    let (level, subsys, file) = (
        user("NCCL_DEBUG"),
        user("NCCL_DEBUG_SUBSYS"),
        user("NCCL_DEBUG_FILE"),
    );
    let mut log = LogReader::default();
    let mut mode = Mode::Off;
    match (&level, &file) {
        // The user watches NCCL's log where NCCL writes it: their terminal. It stays there.
        (Some(v), None) => {
            notes.push(format!(
                "NCCL_DEBUG={v} was set without NCCL_DEBUG_FILE: NCCL's log went to stdout as asked, and ncclprobe did not read it"
            ));
            if show_algo {
                notes.push("--show-algo: NCCL's log is the user's (on stdout), so no tuner choice was read".into());
            }
        }
        (Some(v), Some(_)) if !matches!(v.to_ascii_uppercase().as_str(), "INFO" | "TRACE") => {
            notes.push(format!(
                "NCCL_DEBUG={v} was set: NCCL's INFO lines (network, transports, tuner) are not there to read"
            ))
        }
        _ => {}
    }
    let reading = !(level.is_some() && file.is_none());
    if level.is_none() {
        put("NCCL_DEBUG", "INFO".into());
    }
    match (&subsys, reading) {
        (None, true) if level.is_none() => {
            // Ours alone: TUNING is added once NCCL's version says whether it can be
            // turned on around one call only (`loaded`).
            let pattern = match &file {
                Some(_) => None,
                None => ours("nccl.%h.%p.log"),
            };
            if let Some(p) = &pattern {
                put("NCCL_DEBUG_FILE", p.display().to_string());
            }
            let subsys = match (show_algo, pattern.is_some()) {
                (true, true) => {
                    mode = Mode::Pending;
                    OUR_SUBSYS.to_string()
                }
                (true, false) => {
                    mode = Mode::Logged;
                    with_tuning(OUR_SUBSYS)
                }
                (false, _) => OUR_SUBSYS.to_string(),
            };
            put("NCCL_DEBUG_SUBSYS", subsys);
            log.pattern = file.clone().or(pattern.map(|p| p.display().to_string()));
        }
        (None, true) => {
            // Their level and file: NCCL's default subsystems, and TUNING if asked for.
            if show_algo {
                put("NCCL_DEBUG_SUBSYS", with_tuning(NCCL_DEFAULT_SUBSYS));
                mode = Mode::Logged;
            }
            log.pattern = file.clone();
        }
        (Some(v), true) => {
            let upper = v.to_ascii_uppercase();
            if show_algo && !upper.contains("TUNING") && !upper.contains("ALL") {
                notes.push(format!(
                    "--show-algo: NCCL_DEBUG_SUBSYS={v} leaves out TUNING, so NCCL states no choice"
                ));
            } else if show_algo {
                mode = Mode::Logged;
            }
            log.pattern = file.clone().or_else(|| {
                let p = ours("nccl.%h.%p.log")?.display().to_string();
                put("NCCL_DEBUG_FILE", p.clone());
                Some(p)
            });
        }
        (_, false) => {}
    }
    log.ours = file.is_none();
    log.path = log.pattern.as_deref().map(|p| PathBuf::from(expand(p)));
    let mut dump = |key: &str, name: &str| match user(key) {
        Some(p) => Some(PathBuf::from(p)),
        None => ours(name).inspect(|p| put(key, p.display().to_string())),
    };
    let topo = dump("NCCL_TOPO_DUMP_FILE", "topo.xml");
    let graph = dump("NCCL_GRAPH_DUMP_FILE", "graph.xml");
    let _ = OBSERVER.set(Mutex::new(Observer {
        dir: made.then_some(dir),
        topo,
        graph,
        set,
        show_algo,
        collectives,
        notes,
        log,
        mode,
    }));
}

/// NCCL is loaded (before any communicator): with `ncclResetDebugInit` the tuner's lines are
/// turned on around each point's first call only; without it they are on from the start.
pub fn loaded(reset_debug: Option<unsafe extern "C" fn()>) {
    with(|o| {
        if !matches!(o.mode, Mode::Pending) {
            return;
        }
        o.mode = match reset_debug {
            Some(reset) => Mode::Probe(reset),
            None => {
                // NCCL reads its variables at its first log line, which comes with the init.
                std::env::set_var("NCCL_DEBUG_SUBSYS", with_tuning(OUR_SUBSYS));
                Mode::Logged
            }
        };
    });
}

/// Whether the table carries the tuner's column.
pub fn showing() -> bool {
    with(|o| o.show_algo).unwrap_or(false)
}

/// Around rank 0's first call of a point (`true` before it, `false` after): NCCL's tuner lines
/// are on for that call only, where NCCL can be told so.
pub fn tuning_window(on: bool) {
    with(|o| {
        if let Mode::Probe(reset) = o.mode {
            let subsys = if on {
                with_tuning(OUR_SUBSYS)
            } else {
                OUR_SUBSYS.to_string()
            };
            o.log.rotate(&subsys, reset);
        }
    });
}

/// A point is done: read what NCCL wrote since the last one (its warnings reach stderr now),
/// and with `--show-algo` the tuner's choice for it.
pub fn after_point(coll: Collective, bytes: u64, nranks: usize) -> Option<AlgoUsed> {
    with(|o| {
        o.log.catch_up();
        if !o.show_algo {
            return None;
        }
        o.log.algo_for(coll, bytes, nranks, o.collectives)
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
        self.log.catch_up();
        let f = &self.log.facts;
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
        if let Some(p) = &self.log.path {
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
                &self.log.facts.virtual_nics,
            );
            obs.dump = Some(dump);
        }
        if self.show_algo {
            self.algo_notes(record, &mut obs);
        }
        // The record's environment is the user's: not what was set here to read NCCL.
        for kv in &self.set {
            if let Some((k, _)) = kv.split_once('=') {
                record.env.remove(k);
            }
        }
        obs
    }

    /// `--show-algo`: each point's choice, how it was learned, and why points have none.
    fn algo_notes(&self, record: &mut RunRecord, obs: &mut NcclObserved) {
        let mut missing = 0;
        for p in &mut record.points {
            p.nccl_algo = self
                .log
                .algo_for(p.collective, p.size_bytes, p.nranks, self.collectives);
            missing += usize::from(
                p.nccl_algo.is_none() && log::nccl_name(p.collective).is_some() && p.nranks > 1,
            );
        }
        let agg = record
            .settings
            .as_ref()
            .and_then(|s| s.agg_iters)
            .unwrap_or(1);
        obs.algo_learned = match self.mode {
            Mode::Probe(_) => Some(LEARNED_UNTIMED.into()),
            Mode::Logged => Some(LEARNED_LOGGED.into()),
            Mode::Off | Mode::Pending => None,
        };
        match self.mode {
            // Said only when NCCL stated choices: without any, there was no logging to time.
            _ if obs.tuner_lines == 0 => {}
            Mode::Probe(_) => obs.notes.push(
                "--show-algo: NCCL's tuner lines were on for each point's first (checked, untimed) call only; the timed calls ran without them".into(),
            ),
            Mode::Logged => obs.notes.push(
                "--show-algo: NCCL wrote a tuner line per call on rank 0 throughout (no ncclResetDebugInit before NCCL 2.24, or the log variables are the user's): small-message times include that logging".into(),
            ),
            Mode::Off | Mode::Pending => {}
        }
        if agg > 1 {
            obs.notes.push(format!(
                "--show-algo: the choice shown is the checked call's, made alone; under -m {agg} NCCL tunes the {agg} calls of each timed group as one (NCCL 2.20-2.23 state the group's summed bytes, which match no size), and may choose otherwise"
            ));
        }
        let version = self.log.version_code();
        if obs.tuner_lines == 0 && !matches!(self.mode, Mode::Off) {
            obs.notes.push(
                "--show-algo: NCCL stated no tuner choice (NCCL 2.19 and earlier print none at INFO; one rank runs no algorithm)".into(),
            );
        } else if missing > 0 {
            let how = match version {
                Some(v) if v >= 22400 => {
                    "from NCCL 2.24 AllGather and ReduceScatter lines state per-rank bytes"
                }
                _ => "NCCL 2.20-2.23 lines state the whole buffer",
            };
            obs.notes.push(format!(
                "--show-algo: {missing} points have no tuner line of their size ({how})"
            ));
        }
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

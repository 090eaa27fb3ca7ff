//! What rank 0 shows and keeps while a sweep runs: the nccl-tests banner and table on stdout,
//! the progress bar on stderr, the record on disk after every point, and the lines after the
//! table when the run is over.

use super::record;
use super::select::Selection;
use crate::coll::Collective;
use crate::exit::{ExitCode, Failure};
use crate::model::{self, Point, RankInfo, RunRecord};
use crate::plan::Plan;
use crate::render::perf::{self, PerfStyle};
use crate::render::perf_json;
use crate::render::record::RecordSink;
use crate::render::table;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long the end of a run waits for the record's lock: a rank thread abandoned by a
/// timeout may hold it (while writing), and the end must not wait for that thread.
const RECORD_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Whether this process wrote the gate's verdict to `--junit` (an error ending the sweep after
/// that leaves the verdict in place instead of an `<error>` case).
pub(crate) static JUNIT_WRITTEN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// What rank 0 owns: the record on disk, stdout, the progress bar.
pub struct Rank0 {
    sink: Arc<Mutex<RecordSink>>,
    print_table: bool,
    /// The first stdout write that failed: the run goes on (the record gets every point) and
    /// ends with it (141 for a reader gone, 1 for a full disk).
    stdout_lost: Mutex<Option<Failure>>,
    progress: ProgressBar,
    /// `--qualify`/rules, and how many times the points were measured.
    gate: Option<Arc<crate::expect::options::GateRules>>,
    attempts: std::sync::atomic::AtomicUsize,
    /// Called as an nccl-tests `*_perf` binary: its output, and the plan's largest size.
    perf: Option<(Arc<PerfStyle>, u64)>,
    /// -J FILE.json: nccl-tests' JSON, rewritten after every row.
    perf_json: Option<Mutex<perf_json::Writer>>,
    /// -N 0: the sizes come again and again; records keep each size's latest.
    forever: bool,
    /// NCCL_TESTS_SPLIT: every rank's group (set with the ranks), and how a time is taken
    /// across ranks (-a).
    groups: std::sync::OnceLock<Vec<usize>>,
    across: crate::model::AcrossRanks,
}

/// The lock, unless another thread keeps it longer than `patience` (or it is poisoned).
fn lock_within<T>(m: &Mutex<T>, patience: Duration) -> Option<MutexGuard<'_, T>> {
    let deadline = Instant::now() + patience;
    loop {
        match m.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

impl Rank0 {
    /// `patience`: how long a special file (a FIFO, `/dev/fd/N`) may keep the record's one
    /// write waiting at the end (the sweep's `--timeout`).
    pub fn new(
        output: &crate::render::record::Outputs,
        record: RunRecord,
        patience: Duration,
    ) -> Rank0 {
        let progress = ProgressBar::with_draw_target(Some(0), crate::measure::progress_target());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} {pos}/{len} sizes [{elapsed}] {wide_bar}")
        {
            progress.set_style(style);
        }
        Rank0 {
            sink: Arc::new(Mutex::new(output.sink(record, patience))),
            print_table: output.table_on_stdout(),
            stdout_lost: Mutex::new(None),
            progress,
            gate: None,
            attempts: std::sync::atomic::AtomicUsize::new(0),
            perf: None,
            perf_json: None,
            forever: false,
            groups: std::sync::OnceLock::new(),
            across: Default::default(),
        }
    }

    fn with_sink<R>(&self, f: impl FnOnce(&mut RecordSink) -> R) -> Result<R, Failure> {
        let mut sink = lock_within(&self.sink, RECORD_LOCK_PATIENCE)
            .ok_or_else(|| Failure::internal("the run record stayed locked by a stuck rank"))?;
        Ok(f(&mut sink))
    }

    /// Mark the record as ended by a timeout and write it (from the watchdog's thread).
    pub fn mark_timed_out(&self, message: &str) {
        let _ = self.with_sink(|sink| {
            record::close(&mut sink.record, model::RunStatus::TimedOut, Some(message));
            sink.complete()
        });
    }

    fn println(&self, line: &str) {
        if self.print_table {
            self.progress
                .suspend(|| self.to_stdout(&format!("{line}\n")));
        }
    }

    pub fn set_ranks(
        &self,
        ranks: Vec<RankInfo>,
        nranks: usize,
        points: u64,
    ) -> Result<(), Failure> {
        // -q (never as an nccl-tests binary, whose output is its contract): no banner.
        let banner = self.perf.is_some() || !crate::term::quiet();
        for r in ranks.iter().filter(|_| banner) {
            if r.rank == ranks[0].rank {
                self.println(
                    ["#\n# Using devices", "# Using devices"][self.perf.is_some() as usize],
                );
            }
            self.println(&format!(
                "#  Rank {:2} Group {:2} Pid {:6} on {:>10} device {}",
                r.rank,
                r.group,
                r.pid,
                r.host,
                r.device.as_deref().unwrap_or("host memory")
            ));
        }
        self.with_perf_json(|json| json.set_devices(&ranks));
        let _ = self.groups.set(ranks.iter().map(|r| r.group).collect());
        if let Some((style, max)) = &self.perf {
            if *max < style.max_bytes {
                self.println(&perf::reduced_max_bytes(*max));
            }
        }
        self.progress.set_length(points);
        self.with_sink(|sink| {
            let mut hosts: Vec<String> = ranks.iter().map(|r| r.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            let backend = &mut sink.record.backend;
            backend.hosts = hosts;
            backend.ranks = ranks;
            backend.nranks = nranks;
        })
    }

    /// Notes on how the run went (`Communicator::notes`): in the header and the record.
    pub fn add_notes(&self, notes: &[String]) -> Result<(), Failure> {
        // nccl-tests prints none: as one of its binaries, the notes go to the record only.
        for n in notes
            .iter()
            .filter(|_| self.perf.is_none() && !crate::term::quiet())
        {
            self.println(&format!("# note: {n}"));
        }
        self.with_sink(|sink| sink.record.notes.extend(notes.iter().cloned()))
    }

    pub fn collective_header(&self, coll: Collective) {
        if let Some((style, _)) = &self.perf {
            self.println(&perf::header(style));
            return;
        }
        if !crate::term::quiet() {
            self.println(&format!(
                "#\n# Collective test starting: {}_perf",
                coll.name()
            ));
        }
        let mut header = table::header();
        if super::observe::showing() {
            // The tuner's column, after nccl-tests' last.
            header = header
                .lines()
                .enumerate()
                .map(|(i, l)| match i {
                    2 => format!("{l}  algo/proto/channels"),
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n");
        }
        self.println(&header);
    }

    pub fn collective_footer(
        &self,
        coll: Collective,
        points: &[Point],
        memory: Option<&crate::model::GpuMemory>,
    ) {
        if let Some((style, _)) = &self.perf {
            self.with_perf_json(|json| json.set_footer(style, points));
            let mut lines = perf::footer(style, points, memory);
            // Each group's average right after nccl-tests' own (taken over every group).
            let groups = self.groups.get().map_or(&[][..], Vec::as_slice);
            let own = perf::group_footer(points, groups, self.across);
            lines.splice(2..2, own);
            for line in lines {
                self.println(&line);
            }
            return;
        }
        self.println(&table::footer(points));
        self.println(&format!(
            "# Collective test concluded: {}_perf",
            coll.name()
        ));
    }

    /// One finished size: its table row, and both placements on disk. A point measured again
    /// (`--retries`) takes the place of the earlier one, which moves to `retried_points`.
    pub fn point(&self, oop: &Point, inp: &Point) -> Result<(), Failure> {
        let row = match &self.perf {
            Some((style, _)) => {
                self.with_perf_json(|json| json.push_row(style, oop, inp));
                perf::row(style, oop, inp)
            }
            None => table::row(oop, inp),
        };
        // Read after every point, --show-algo or not: NCCL's warnings reach stderr as they come.
        let algo = super::observe::after_point(oop.collective, oop.size_bytes, oop.nranks);
        let row =
            match super::observe::showing().then(|| algo.map_or("-".to_string(), |a| a.short())) {
                Some(algo) => format!("{row}  {algo}"),
                None => row,
            };
        self.println(&row);
        let groups = self.groups.get().map_or(&[][..], Vec::as_slice);
        for line in perf::group_rows(oop, inp, groups, self.across) {
            self.println(&line);
        }
        self.progress.inc(1);
        // Two plan sizes can report the same size (counts round down to whole elements), so
        // only a retry replaces points.
        let retrying = self.attempts.load(std::sync::atomic::Ordering::SeqCst) > 0;
        // -N 0 measures the same sizes without end: the record keeps each one's latest.
        let latest_only = self.forever;
        self.with_sink(|sink| {
            for new in [oop, inp] {
                if latest_only {
                    sink.record.points.retain(|p| p.key() != new.key());
                }
                let same = |p: &Point| p.key() == new.key();
                if let Some(i) = sink
                    .record
                    .points
                    .iter()
                    .rposition(same)
                    .filter(|_| retrying)
                {
                    let old = sink.record.points.remove(i);
                    sink.record.retried_points.push(old);
                }
                sink.record.points.push(new.clone());
            }
            sink.flush()
        })?
        .map_err(|e| Failure::internal(format!("{e:#}")))
    }

    /// Write to stdout through the one writer. A reader that went away (`ncclprobe sweep |
    /// head`) or a full disk does not stop the run (the record on disk still gets every
    /// point); the first failure is kept and ends the run (see `stdout_failure`).
    fn to_stdout(&self, text: &str) {
        if let Err(f) = crate::exit::print(text) {
            let mut lost = self.stdout_lost.lock().unwrap_or_else(|p| p.into_inner());
            lost.get_or_insert(f);
        }
    }

    /// The stdout failure the run ends with, if a write failed.
    fn stdout_failure(&self) -> Result<(), Failure> {
        let mut lost = self.stdout_lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.take().map_or(Ok(()), Err)
    }

    /// Another document (`--markdown -`, `--junit -`) is stdout's: the table stays off it.
    pub fn leave_stdout(&mut self) {
        self.print_table = false;
    }

    /// The gate (`--qualify`, rules), if the sweep has one.
    pub fn set_gate(&mut self, gate: Option<Arc<crate::expect::options::GateRules>>) {
        self.gate = gate;
    }

    fn judge(&self, record: &model::RunRecord) -> Result<crate::documents::Qualification, Failure> {
        let gate = self
            .gate
            .as_ref()
            .ok_or_else(|| Failure::internal("no gate to judge"))?;
        crate::expect::gate::judge(
            "(this sweep)",
            record,
            None,
            &gate.rules,
            &gate.expectation(),
            self.attempts.load(std::sync::atomic::Ordering::SeqCst) + 1,
            false,
        )
    }

    /// The (collective, size) points the gate fails on what is recorded so far.
    pub fn points_to_retry(&self) -> Vec<(Collective, u64)> {
        let Ok(Some(mut record)) = self.with_sink(|sink| Some(sink.record.clone())) else {
            return Vec::new();
        };
        // The run has reached its end without a failure: judge it as complete.
        record.status = model::RunStatus::Complete;
        self.judge(&record)
            .map(|q| crate::expect::qualify::failed_sizes(&q))
            .unwrap_or_default()
    }

    pub fn begin_retry(&self, todo: &[(Collective, u64)]) {
        let n = self
            .attempts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let what: Vec<String> = todo
            .iter()
            .map(|(c, s)| format!("{c} {}", crate::units::format_size(*s)))
            .collect();
        let line = format!(
            "# retry {n}: the gate failed at {}; measuring them again",
            what.join(", ")
        );
        self.println(&line);
        let _ = self.with_sink(|sink| {
            sink.record
                .notes
                .push(line.trim_start_matches("# ").to_string())
        });
    }

    /// Print as the nccl-tests binary `style` names (before the banner).
    pub fn set_perf(&mut self, style: Option<Arc<PerfStyle>>, plan: &Plan) {
        self.perf_json = style.as_ref().and_then(|s| {
            let path = s.json.as_deref()?;
            let env = std::env::vars_os()
                .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                .collect();
            Some(Mutex::new(perf_json::Writer::new(
                path,
                s.argv.clone(),
                env,
            )))
        });
        self.perf = style.map(|s| (s, plan.settings.max_bytes));
        self.forever = plan.forever;
        self.across = plan.settings.across_ranks;
        if let (true, Some(json)) = (plan.forever, &self.perf_json) {
            if let Ok(mut json) = json.lock() {
                json.keep_last(plan.sizes_bytes.len());
            }
        }
    }

    /// Keep -J's document (when there is one) up to date; a rank thread abandoned by a timeout
    /// may hold the lock, and the end does not wait for it.
    fn with_perf_json(&self, f: impl FnOnce(&mut perf_json::Writer)) {
        if let Some(mut json) = self
            .perf_json
            .as_ref()
            .and_then(|m| lock_within(m, RECORD_LOCK_PATIENCE))
        {
            f(&mut json);
        }
    }

    pub fn banner(
        &self,
        plan: &Plan,
        selection: &Selection,
        ranks_text: &str,
        libraries: &BTreeMap<String, String>,
    ) {
        if let Some((style, _)) = &self.perf {
            let nccl = libraries.get("nccl").map(String::as_str);
            let code = nccl.and_then(perf::version_code).unwrap_or(0);
            self.with_perf_json(|json| {
                json.set_config(style, plan.settings.min_bytes, code.into())
            });
            for line in perf::banner(style, plan.settings.min_bytes, nccl) {
                self.println(&line);
            }
            return;
        }
        // -q: the table without the lines above it (tool, backend, libraries, sampling).
        for line in super::banner::lines(plan, selection, ranks_text, libraries)
            .iter()
            .filter(|_| !crate::term::quiet())
        {
            self.println(line);
        }
    }

    /// Close the record with the run's outcome, print what comes after the table and what
    /// stdout was asked to carry; the exit code of the run.
    pub fn finish(
        &self,
        args: &super::options::Options,
        result: Result<(), Failure>,
    ) -> Result<ExitCode, Failure> {
        let output = &args.output;
        self.progress.finish_and_clear();
        let record = self.with_sink(|sink| {
            let r = &mut sink.record;
            super::observe::fill(r);
            let status = record::status(r, &result);
            let error = result.as_ref().err().map(|f| f.message.as_str());
            record::close(r, status, error);
            sink.flush().map(|_| sink.record.clone())
        })?;
        let record = record.map_err(|e| Failure::internal(format!("{e:#}")))?;
        // NCCL's own warnings reached stderr as the log was read (`observe::after_point`).
        super::observe::disarm();
        let error = result.as_ref().err().map(|f| f.message.as_str());
        self.with_perf_json(|json| json.finish(error));
        let verdict = match &self.gate {
            Some(gate) => Some(self.gate_verdict(gate, &record)?),
            None => None,
        };
        // Special files (a FIFO, `/dev/fd/N`) get the record once, now that it is final.
        let completed = self
            .with_sink(|sink| sink.complete())?
            .map_err(|e| Failure::internal(format!("{e:#}")));
        if let (Err(f), Err(_)) = (&completed, &result) {
            eprintln!("ncclprobe: {}", f.message);
        }
        let verdict_text = verdict
            .as_ref()
            .map(crate::render::expect::qualification_table);
        if let (Err(_), Some(text)) = (&result, &verdict_text) {
            eprint!("{text}");
        }
        // The record as judged: the gate's verdict in it, so the report, the store and the
        // record on disk say the same thing.
        let mut kept_record = record.clone();
        if kept_record.qualification.is_none() {
            kept_record.qualification = verdict.clone();
        }
        // The report is written whatever the outcome (a run that timed out is worth
        // attaching), after the gate: a page that says HEALTHY for a node that failed its gate
        // would be worse than none.
        let report = report_of(args, &kept_record);
        if let (Err(f), Err(_)) = (&report, &result) {
            eprintln!("ncclprobe: {}", f.message);
        }
        // Kept last: a store that is locked, gone or full costs none of the files above.
        let kept = crate::measure::keep::or_saved(
            crate::history::keep::keep_run(args.history.as_ref(), &kept_record, "sweep"),
            args.history.as_ref(),
            output.json.as_deref(),
            &kept_record,
            "ncclprobe-run",
        );
        if let (Err(f), Err(_)) = (&kept, &result) {
            eprintln!("ncclprobe: {}", f.message);
        }
        result?;
        completed?;
        report?;
        if let Some((style, _)) = &self.perf {
            self.stdout_failure()?;
            kept?;
            return super::outcome::perf_status(style, &record);
        }
        // A store that failed still leaves the whole output printed: the table's closing
        // lines, then the store's error (or, when the check or the gate failed too, that
        // failure's exit code, with the store's error said beside it).
        for line in super::after_table::lines(&record) {
            self.println(&line);
        }
        self.to_stdout(&crate::render::record::stdout_documents(output, &record)?);
        if let Some(text) = verdict_text {
            if self.print_table {
                self.to_stdout(&text);
            } else {
                eprint!("{text}");
            }
        }
        self.stdout_failure()?;
        match (super::outcome::judged(&record, verdict), kept) {
            (Err(judged), Err(store)) => {
                eprintln!("ncclprobe: {}", store.message);
                Err(judged)
            }
            (Err(f), Ok(())) | (Ok(()), Err(f)) => Err(f),
            (Ok(()), Ok(())) => Ok(ExitCode::Ok),
        }
    }

    /// Judge the closed record, keep the verdict in it and write the JUnit file. Runs whether
    /// the sweep succeeded or not: a gate must say that a run that timed out failed.
    fn gate_verdict(
        &self,
        gate: &crate::expect::options::GateRules,
        record: &model::RunRecord,
    ) -> Result<crate::documents::Qualification, Failure> {
        let q = self.judge(record)?;
        if let Some((p, m)) = q
            .profile
            .as_ref()
            .and_then(|p| p.mismatch().map(|m| (p, m)))
        {
            eprintln!("ncclprobe: warning: the profile {}: {m}", p.id);
        }
        self.with_sink(|sink| {
            sink.record.qualification = Some(q.clone());
            sink.flush()
        })?
        .map_err(|e| Failure::internal(format!("{e:#}")))?;
        if let Some(path) = &gate.rules.junit {
            let cx = crate::render::expect::SuiteContext::of_run(record);
            let xml = crate::render::expect::junit(&q, &cx)?;
            crate::render::record::write_document("--junit", path, xml.as_bytes())?;
            JUNIT_WRITTEN.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(q)
    }
}

/// `sweep --report/--markdown/--png-dir`: the finished record held against its expectation and
/// rendered.
fn report_of(args: &super::options::Options, record: &model::RunRecord) -> Result<(), Failure> {
    let Some(dest) = args.report.destinations()? else {
        return Ok(());
    };
    let file = match &args.output.json {
        Some(p) if p.as_os_str() != "-" => p.display().to_string(),
        _ => "(this sweep)".to_string(),
    };
    let mut docs = crate::report::Documents::default();
    docs.runs.push(crate::report::Named {
        file,
        doc: record.clone(),
    });
    docs.compare_runs_without_comparison();
    crate::report::output::produce(&docs, args.report.title(), &dest)
}

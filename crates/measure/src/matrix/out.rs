//! What rank 0 keeps while the matrix runs: the document on disk after every step, the
//! progress bar, and at the end the heat tables, the outliers and the exit code.

use crate::documents::matrix::{Endpoint, MatrixDocument, PairMeasurement};
use crate::documents::topology::Topology;
use crate::exit::{ExitCode, Failure};
use crate::model::{RankInfo, RunStatus};
use crate::render::record::paths::{is_stdout, target, Target};
use crate::render::record::{clean_stale_temps, write_atomic, write_within};
use crate::render::record::{Format, Outputs};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::Mutex;

pub struct MatrixOut {
    doc: Mutex<MatrixDocument>,
    json_path: Option<PathBuf>,
    csv_path: Option<PathBuf>,
    output: Outputs,
    progress: ProgressBar,
    /// Special files (a FIFO, `/dev/fd/N`) have had their one write, at the end.
    completed: std::sync::atomic::AtomicBool,
    /// How long a special file may keep that write waiting (`--timeout`).
    patience: std::time::Duration,
    /// `--history`: where the finished matrix is kept.
    pub history: Option<crate::history::keep::Target>,
    /// `matrix --junit FILE`: the pairwise gate judged at the end (with the pair rules).
    pub gate: Option<(PathBuf, super::options::PairRules)>,
}

impl MatrixOut {
    pub fn new(output: &Outputs, doc: MatrixDocument, patience: std::time::Duration) -> MatrixOut {
        let file = |p: &Option<PathBuf>| p.clone().filter(|p| !is_stdout(p));
        let (json_path, csv_path) = (file(&output.json), file(&output.csv));
        for p in json_path.iter().chain(csv_path.iter()) {
            clean_stale_temps(p);
        }
        let progress = ProgressBar::with_draw_target(Some(0), crate::measure::progress_target());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} {pos}/{len} pair steps [{elapsed}] {wide_bar}")
        {
            progress.set_style(style);
        }
        MatrixOut {
            doc: Mutex::new(doc),
            json_path,
            csv_path,
            output: output.clone(),
            progress,
            completed: Default::default(),
            patience,
            history: None,
            gate: None,
        }
    }

    /// The document as it stands, written where it goes (a poisoned lock still holds it).
    fn with_doc<R>(&self, f: impl FnOnce(&mut MatrixDocument) -> R) -> Result<R, Failure> {
        let mut doc = self.doc.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut doc);
        self.flush(&doc)?;
        Ok(r)
    }

    /// Regular files get the document after every step; special files once, at the end
    /// (`last`), within `--timeout`.
    fn write(&self, doc: &MatrixDocument, last: bool) -> Result<(), Failure> {
        let failed = |p: &PathBuf, e: std::io::Error| {
            Failure::internal(format!("writing {}: {e}", p.display()))
        };
        let special_too = last
            && !self
                .completed
                .swap(true, std::sync::atomic::Ordering::SeqCst);
        let mut docs = Vec::new();
        if let Some(p) = &self.json_path {
            docs.push((p, crate::render::to_json(doc)?));
        }
        if let Some(p) = &self.csv_path {
            let csv =
                crate::render::matrix::csv(doc).map_err(|e| Failure::internal(e.to_string()))?;
            docs.push((p, csv));
        }
        for (p, text) in docs {
            match target(p) {
                Target::Regular => write_atomic(p, text.as_bytes()).map_err(|e| failed(p, e))?,
                Target::Special if special_too => {
                    write_within(p, text.as_bytes(), self.patience).map_err(|e| failed(p, e))?
                }
                Target::Special => {}
            }
        }
        Ok(())
    }

    fn flush(&self, doc: &MatrixDocument) -> Result<(), Failure> {
        self.write(doc, false)
    }

    pub fn start(
        &self,
        ranks: Vec<RankInfo>,
        endpoints: Vec<Endpoint>,
        steps: u64,
    ) -> Result<(), Failure> {
        self.progress.set_length(steps);
        self.with_doc(|doc| {
            let mut hosts: Vec<String> = ranks.iter().map(|r| r.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            doc.backend.hosts = hosts;
            doc.backend.nranks = ranks.len();
            let here = ranks.first().map_or(String::new(), |r| r.host.clone());
            doc.backend.ranks = ranks;
            doc.endpoints = endpoints;
            let topology = crate::documents::matrix::analysis::topology(doc);
            label_gpus(&mut doc.endpoints, topology.as_ref(), &here);
        })
    }

    /// A step's cells; `again`: measured a second time, replacing the first pass's.
    pub fn record(&self, cells: Vec<PairMeasurement>, again: bool) -> Result<(), Failure> {
        if !again {
            self.progress.inc(1);
        }
        self.with_doc(|doc| {
            for cell in cells {
                let same = |m: &PairMeasurement| {
                    (m.from, m.to, m.size_bytes, m.direction)
                        == (cell.from, cell.to, cell.size_bytes, cell.direction)
                };
                match doc.measurements.iter_mut().find(|m| again && same(m)) {
                    Some(old) => *old = cell,
                    None => doc.measurements.push(cell),
                }
            }
        })
    }

    /// From the watchdog's thread: the run ended by a timeout (the hung pair is in `message`).
    pub fn mark_timed_out(&self, message: &str) {
        if let Ok(doc) = self.with_doc(|doc| {
            close(doc, RunStatus::TimedOut, Some(message));
            doc.clone()
        }) {
            let _ = self.write(&doc, true);
        }
    }

    /// Close the document with the outcome, print what stdout carries, decide the exit code.
    pub fn finish(&self, outcome: Result<(), Failure>) -> Result<ExitCode, Failure> {
        self.progress.finish_and_clear();
        let status = match &outcome {
            Err(f) if f.code == ExitCode::Timeout => RunStatus::TimedOut,
            Err(f) if matches!(f.code, ExitCode::Interrupted | ExitCode::Terminated) => {
                RunStatus::Interrupted
            }
            Err(_) => RunStatus::Failed,
            Ok(()) => RunStatus::Complete,
        };
        let error = outcome.as_ref().err().map(|f| f.message.clone());
        let doc = self.with_doc(|doc| {
            if doc.finished_at.is_none() {
                close(doc, status, error.as_deref());
            }
            if status == RunStatus::Complete && doc.total_wrong() > 0 {
                doc.status = RunStatus::CheckFailed;
            }
            doc.clone()
        })?;
        let completed = self.write(&doc, true);
        if let (Err(f), Err(_)) = (&completed, &outcome) {
            eprintln!("ncclprobe: {}", f.message);
        }
        let kept = crate::measure::keep::or_saved(
            crate::history::keep::keep_matrix(self.history.as_ref(), &doc),
            self.history.as_ref(),
            self.json_path.as_deref(),
            &doc,
            "ncclprobe-matrix",
        );
        if let (Err(f), Err(_)) = (&kept, &outcome) {
            eprintln!("ncclprobe: {}", f.message);
        }
        // The gate is judged whatever the outcome: a matrix cut short fails `completed`.
        let gate = match &self.gate {
            Some((path, rules)) => Some(self.gate(path, rules, &doc)?),
            None => None,
        };
        outcome?;
        completed?;
        kept?;
        let out = &self.output;
        if out.format == Format::Json || out.json_to_stdout() {
            crate::outln!("{}", crate::render::to_json(&doc)?);
        }
        if out.format == Format::Csv || out.csv_to_stdout() {
            crate::out!(
                "{}",
                crate::render::matrix::csv(&doc).map_err(|e| Failure::internal(e.to_string()))?
            );
        }
        if out.table_on_stdout() {
            crate::out!("{}", crate::render::matrix::table(&doc));
        } else {
            for line in crate::render::matrix::verdict_lines(&doc) {
                eprintln!("{line}");
            }
        }
        let wrong = doc.total_wrong();
        if wrong > 0 {
            return Err(Failure::new(
                ExitCode::CheckFailed,
                format!("check failed: {wrong} received bytes differ from what was sent"),
            ));
        }
        if let Some(q) = gate.filter(|q| !q.passed) {
            return Err(Failure::new(
                ExitCode::CheckFailed,
                format!("qualify: {}", q.summary),
            ));
        }
        Ok(ExitCode::Ok)
    }

    /// The pairwise gate on the finished document: its table on stderr, its JUnit written.
    fn gate(
        &self,
        path: &std::path::Path,
        rules: &super::options::PairRules,
        doc: &MatrixDocument,
    ) -> Result<crate::documents::Qualification, Failure> {
        let name = match &self.json_path {
            Some(p) => p.display().to_string(),
            None => "(this matrix)".to_string(),
        };
        let q = super::qualify::judge(&name, doc, rules);
        let cx = crate::render::expect::SuiteContext::of_matrix(doc);
        let xml = crate::render::expect::junit(&q, &cx)?;
        crate::render::record::write_document("--junit", path, xml.as_bytes())?;
        eprint!("{}", crate::render::expect::qualification_table(&q));
        Ok(q)
    }
}

/// End the document: status, end time, and the outliers judged over what was measured.
/// Name each rank's GPU as the topology (NVML, `nvidia-smi`) numbers it, found by the PCI
/// address the rank printed: what a user sees in `nvidia-smi topo -m` is what the tables say.
/// Endpoints the topology cannot place keep their labels.
pub fn label_gpus(endpoints: &mut [Endpoint], topology: Option<&Topology>, here: &str) {
    let Some(t) = topology else { return };
    let one_host = endpoints.iter().all(|e| e.host == here);
    for e in endpoints.iter_mut() {
        if let Some(row) = e.gpu_row(t, here) {
            e.label = if one_host {
                row
            } else {
                format!("{}:{row}", e.host)
            };
        }
    }
}

fn close(doc: &mut MatrixDocument, status: RunStatus, error: Option<&str>) {
    doc.status = status;
    doc.finished_at = Some(crate::model::now_rfc3339());
    doc.error = error.map(str::to_string);
    doc.outliers = crate::documents::matrix::analysis::outliers(doc);
}

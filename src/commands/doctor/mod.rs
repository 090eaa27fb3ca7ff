//! `ncclprobe doctor`: this machine end to end. Topology, a short sweep (a child process, or
//! in this process when a launcher started the ranks), the same sweep without the settings that
//! force a slower path, diagnosis, compare, an optional DDP simulation, then the report, with
//! every JSON behind it, in one directory. Progress and each part's time go to stderr.
//!
//! Every flag and the output directory are checked before the first step (`check`, `outdir`);
//! a signal ends the measuring, then a partial report is written that says so (`interrupt`).

mod check;
mod child;
mod inner;
mod interrupt;
mod outdir;

use crate::cli::DoctorArgs;
use crate::documents::{DiagnosisDocument, TopologyDocument};
use crate::exit::{ExitCode, Failure};
use crate::model::RunRecord;
use crate::render::report::Destinations;
use crate::report::reading::forcing_overrides;
use crate::report::verdict::State;
use crate::report::{Documents, FailedAlternative, Named, Note, Timing};
use crate::sweep::{select_backend, Backend, Environment};
use child::child_sweep;
use inner::{simulate, sweep_here, Link};
use interrupt::Interrupt;
use outdir::OutputDir;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Prints each step as it starts and keeps how long it took.
struct Steps {
    total: usize,
    done: usize,
    started: Instant,
    timings: Vec<Timing>,
}

impl Steps {
    fn begin(&mut self, what: &str) {
        self.done += 1;
        self.started = Instant::now();
        if !crate::term::quiet() {
            eprintln!("doctor [{}/{}] {what} …", self.done, self.total);
        }
    }

    fn end(&mut self, part: &str) {
        let seconds = self.started.elapsed().as_secs_f64();
        if !crate::term::quiet() {
            eprintln!("doctor       {part}: {seconds:.1} s");
        }
        self.timings.push(Timing {
            part: part.into(),
            seconds,
        });
    }
}

fn write_json(path: &Path, doc: &impl serde::Serialize) -> Result<(), Failure> {
    let text = crate::render::to_json(doc)?;
    crate::render::record::write_atomic(path, format!("{text}\n").as_bytes())
        .map_err(|e| Failure::internal(format!("cannot write {}: {e}", path.display())))
}

/// The sweep's record, read and checked as every command reads one; a file that is there but
/// not a usable record is said on stderr.
fn read_record(path: &Path) -> Option<RunRecord> {
    if !path.exists() {
        return None;
    }
    crate::import::input::read_file::<RunRecord>(path)
        .map_err(|f| eprintln!("doctor: {}", f.message))
        .ok()
}

/// The variables that force a slower path for this backend (the host backend uses none).
fn overrides_for(backend: Backend) -> Vec<(String, String)> {
    forcing_overrides(&crate::model::relevant_env())
        .into_iter()
        .filter(|(k, _)| match backend {
            Backend::Nccl => k.starts_with("NCCL_"),
            Backend::Mpi => !k.starts_with("NCCL_"),
            Backend::Host => false,
        })
        .collect()
}

/// The environment's findings (NCCL's variables, CUDA_VISIBLE_DEVICES) judge the jobs that
/// read them, not a run on a backend that does not: on the host or MPI backend they stay as
/// information for the user's NCCL jobs and do not degrade the verdict of what was measured.
fn not_read_by(backend: Backend, findings: &mut [crate::diagnose::Finding]) {
    for f in findings.iter_mut().filter(|f| f.id.starts_with("env.")) {
        if f.severity > crate::diagnose::Severity::Info {
            f.severity = crate::diagnose::Severity::Info;
            f.title = format!(
                "{} (NCCL's jobs on this machine read it; the {} backend measured here does not)",
                f.title,
                backend.name()
            );
        }
    }
    findings.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.id.cmp(&b.id)));
}

/// What every step works on: the arguments, the backend, the output directory, the documents
/// gathered so far, the steps' timings, and the signal that may have ended the measuring.
struct Doctor<'a> {
    args: &'a DoctorArgs,
    backend: Backend,
    launched: bool,
    out: OutputDir,
    docs: Documents,
    steps: Steps,
    interrupt: Interrupt,
    /// The steps a signal kept from running.
    skipped: Vec<&'static str>,
}

impl Doctor<'_> {
    fn note(&mut self, level: &str, text: String) {
        self.docs.notes.push(Note {
            level: level.into(),
            text,
        });
    }

    /// Whether a signal came and `step` is not to run; the step is remembered as skipped.
    fn skip_after_signal(&mut self, step: &'static str) -> bool {
        let skip = self.interrupt.received().is_some();
        if skip {
            self.skipped.push(step);
        }
        skip
    }

    fn write(&mut self, name: &str, doc: &impl serde::Serialize) -> Result<(), Failure> {
        let path = self.out.claim(name)?;
        write_json(&path, doc)
    }

    fn topology(&mut self) -> Result<(), Failure> {
        self.steps.begin("topology");
        let facts = crate::live::collect(&crate::live::Roots::default(), true);
        match &facts.topology {
            Some(t) => {
                let doc = TopologyDocument::new("(live)".into(), t.clone());
                self.write("topology.json", &doc)?;
                self.docs.topologies.push(Named {
                    file: "topology.json".into(),
                    doc,
                });
            }
            None => self.note(
                "info",
                "no GPU topology on this machine (NVML not found): the expectation is chosen from the backend and rank count".into(),
            ),
        }
        self.steps.end("topology");
        Ok(())
    }

    /// The short sweep; the record's path when it left one.
    fn sweep(&mut self, reason: &str) -> Result<Option<PathBuf>, Failure> {
        if self.skip_after_signal("the short sweep") {
            return Ok(None);
        }
        let run_path = self.out.claim("run.json")?;
        self.steps.begin(&format!(
            "short sweep ({} backend: {reason})",
            self.backend.name()
        ));
        let outcome = if self.launched {
            sweep_here(self.args, self.backend, &run_path).map_err(|f| f.message)
        } else {
            child_sweep(self.args, self.backend, &run_path, &[], &self.interrupt)
                .map_err(|f| f.message().to_string())
        };
        let found = match (read_record(&run_path), outcome) {
            (Some(mut run), _) => {
                // The sweep was told its backend; the reason it is the one is doctor's.
                run.backend.reason = format!("chosen by doctor: {reason}");
                self.docs.runs.push(Named {
                    file: run_path.display().to_string(),
                    doc: run,
                });
                Some(run_path)
            }
            (None, Err(message)) => {
                self.note("error", format!("the sweep left no record: {message}"));
                None
            }
            (None, Ok(())) => {
                self.note(
                    "error",
                    format!(
                        "the sweep ended but {} could not be read",
                        run_path.display()
                    ),
                );
                None
            }
        };
        self.steps.end("sweep");
        Ok(found)
    }

    /// The same sweep without the overrides that force a slower path, when it can be run.
    fn alternative(&mut self, overrides: &[(String, String)]) -> Result<(), Failure> {
        let shown: Vec<String> = overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if overrides.is_empty() {
            return Ok(());
        }
        if self.args.no_alternative {
            let text = format!(
                "{} is set; not measured without it (--no-alternative)",
                shown.join(" ")
            );
            self.note("info", text);
            return Ok(());
        }
        if self.launched {
            let text = format!(
                "{} came from the launcher: measuring without it needs the ranks started again without it",
                shown.join(" ")
            );
            self.note("info", text);
            return Ok(());
        }
        if self.skip_after_signal("the sweep without the overrides") {
            return Ok(());
        }
        let alt_path = self.out.claim("run-without-overrides.json")?;
        self.steps
            .begin(&format!("the same sweep without {}", shown.join(" ")));
        let keys: Vec<String> = overrides.iter().map(|(k, _)| k.clone()).collect();
        let outcome = child_sweep(self.args, self.backend, &alt_path, &keys, &self.interrupt);
        let error = match (read_record(&alt_path), outcome) {
            (Some(run), _) => {
                self.docs.runs.push(Named {
                    file: alt_path.display().to_string(),
                    doc: run,
                });
                None
            }
            (None, Err(f)) => Some(f.message().to_string()),
            (None, Ok(())) => Some(format!("{} could not be read", alt_path.display())),
        };
        if let Some(error) = error {
            self.docs.failed_alternatives.push(FailedAlternative {
                overrides: shown,
                error,
            });
        }
        self.steps.end("sweep without overrides");
        Ok(())
    }

    fn diagnose(&mut self, run: Option<PathBuf>) -> Result<(), Failure> {
        self.steps.begin("diagnose");
        let diagnose_args = crate::cli::DiagnoseArgs {
            from: run.into_iter().collect(),
            live: true,
            format: crate::cli::OutputFormat::Json,
            fail_on: None,
            explain: None,
        };
        let mut inputs = crate::commands::diagnose::gather(&diagnose_args)?;
        inputs.traces.extend(
            self.docs
                .traces
                .iter()
                .map(|t| (t.file.clone(), t.doc.clone())),
        );
        let mut findings = crate::diagnose::rules(&inputs);
        if self.backend != Backend::Nccl {
            not_read_by(self.backend, &mut findings);
        }
        let doc = DiagnosisDocument::new(inputs.facts(), findings);
        self.write("diagnosis.json", &doc)?;
        self.docs.diagnoses.push(Named {
            file: "diagnosis.json".into(),
            doc,
        });
        self.steps.end("diagnose");
        Ok(())
    }

    /// The job's own records (`--trace`), judged against this run's sweep where it completed.
    fn trace(&mut self, run: Option<&Path>) -> Result<(), Failure> {
        if self.args.trace.is_empty() || self.skip_after_signal("the job's trace") {
            return Ok(());
        }
        self.steps.begin("read the job's trace");
        let mut job = crate::commands::trace::read(&self.args.trace)?;
        let curve = run.filter(|p| {
            read_record(p).is_some_and(|r| r.status == crate::model::RunStatus::Complete)
        });
        let link = crate::cli::LinkArgs {
            curve: curve.map(Path::to_path_buf),
            allow_partial: true,
            ..crate::cli::LinkArgs::none()
        };
        let doc = match crate::commands::trace::judge(&mut job, &link) {
            Ok(doc) => doc,
            // A sweep without the collectives' curve: the trace is judged without a link.
            Err(f) => {
                self.note(
                    "warning",
                    format!(
                        "the job's trace is not held against this run's sweep: {}",
                        f.message
                    ),
                );
                crate::commands::trace::judge(&mut job, &crate::cli::LinkArgs::none())?
            }
        };
        self.write("trace.json", &doc)?;
        self.docs.traces.push(Named {
            file: "trace.json".into(),
            doc,
        });
        self.steps.end("trace");
        Ok(())
    }

    fn compare(&mut self) -> Result<(), Failure> {
        self.steps
            .begin("compare with what this machine should give");
        self.docs.compare_runs_without_comparison();
        let mut comparisons = std::mem::take(&mut self.docs.comparisons);
        for (i, c) in comparisons.iter_mut().enumerate() {
            let name = match i {
                0 => "comparison.json".to_string(),
                _ => format!("comparison-{}.json", i + 1),
            };
            self.write(&name, &c.doc)?;
            c.file = name;
        }
        self.docs.comparisons = comparisons;
        self.steps.end("compare");
        Ok(())
    }

    /// DDP on each measured curve (with and without the overrides), when a model was named.
    fn simulate(&mut self) -> Result<(), Failure> {
        if self.args.model.is_none() || self.skip_after_signal("the DDP simulation") {
            return Ok(());
        }
        self.steps.begin("simulate DDP on the measured curve");
        let runs: Vec<(usize, PathBuf, usize)> = self
            .docs
            .runs
            .iter()
            .enumerate()
            // Only a whole run is a curve to simulate on; a cut-short one is said below.
            .filter(|(_, r)| r.doc.status == crate::model::RunStatus::Complete)
            .map(|(i, r)| (i, PathBuf::from(&r.file), r.doc.backend.nranks))
            .collect();
        if runs.is_empty() {
            self.note(
                "warning",
                "no DDP simulation: no sweep of this doctor run completed".to_string(),
            );
        }
        for (i, path, world) in &runs {
            match simulate(self.args, Link::Curve(path), *world) {
                Ok(doc) => {
                    let name = match *i {
                        0 => "simulation.json",
                        _ => "simulation-without-overrides.json",
                    };
                    self.write(name, &doc)?;
                    self.docs.ddp.push(Named {
                        file: name.into(),
                        doc,
                    });
                }
                Err(f) => self.note(
                    "warning",
                    format!("no DDP simulation on {}: {}", path.display(), f.message),
                ),
            }
        }
        self.steps.end("simulate");
        Ok(())
    }

    /// After a signal: the report says it is partial, and what did not run.
    fn note_interruption(&mut self) {
        let Some(got) = self.interrupt.received() else {
            return;
        };
        let not_run = match self.skipped.is_empty() {
            true => "the measuring was cut short".to_string(),
            false => format!("not run: {}", self.skipped.join(", ")),
        };
        let text = format!(
            "doctor was interrupted by {}: {not_run}; this report is partial",
            got.name()
        );
        self.docs.notes.insert(
            0,
            Note {
                level: "error".into(),
                text,
            },
        );
    }

    fn report(&mut self) -> Result<crate::report::output::Rendered, Failure> {
        self.steps.begin("report");
        self.docs.timings = self.steps.timings.clone();
        let title = self.args.title.clone().unwrap_or_else(|| {
            let host = hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("ncclprobe doctor: {host}")
        });
        let dir = self.out.path().to_path_buf();
        let dest = Destinations {
            html: Some(dir.join("index.html")),
            markdown: Some(dir.join("summary.md")),
            png_dir: Some(dir),
            svg: true,
        };
        let rendered = crate::report::output::render(&self.docs, &title, &dest)?;
        self.out.claim("index.html")?;
        self.out.claim("summary.md")?;
        for plot in &rendered.plots {
            self.out.claim(&format!("{}.png", plot.name))?;
            self.out.claim(&format!("{}.svg", plot.name))?;
        }
        crate::report::output::write_all(&rendered, &dest)?;
        self.steps.end("report");
        Ok(rendered)
    }
}

pub fn run(args: &DoctorArgs) -> Result<ExitCode, Failure> {
    // Every flag is refused before anything is measured, not after.
    check::flags(args)?;
    let env = Environment::detect();
    let selection = select_backend(
        args.backend.backend.into(),
        &env,
        args.backend.nccl_lib.as_deref(),
    )?;
    let backend = selection.backend;
    // Any launcher doctor's sweep would recognise (torchrun, srun, mpirun, Kubernetes).
    let launch = crate::backend::launcher::from_env();
    let launched = (env.mpi_world_size.is_some() || launch.as_ref().is_some_and(|l| l.world > 1))
        && backend != Backend::Host;
    let rank = launch.map_or_else(crate::backend::mpi::launcher_rank, |l| l.rank);
    if launched && rank != 0 {
        // Every rank takes part in the sweep; rank 0 writes the record and the report.
        sweep_here(args, backend, &args.output.join("run.json"))?;
        return Ok(ExitCode::Ok);
    }
    let out = OutputDir::prepare(&args.output)?;
    let overrides = overrides_for(backend);
    let measures_alternative = !args.no_alternative && !overrides.is_empty() && !launched;
    let total = Instant::now();
    let mut doctor = Doctor {
        args,
        backend,
        launched,
        out,
        docs: Documents {
            hardware: args.hardware.clone(),
            ..Documents::default()
        },
        steps: Steps {
            total: 5
                + usize::from(measures_alternative)
                + usize::from(args.model.is_some())
                + usize::from(!args.trace.is_empty()),
            done: 0,
            started: Instant::now(),
            timings: Vec::new(),
        },
        interrupt: Interrupt::install(),
        skipped: Vec::new(),
    };
    doctor.topology()?;
    let run = doctor.sweep(&selection.reason)?;
    doctor.alternative(&overrides)?;
    doctor.trace(run.as_deref())?;
    doctor.diagnose(run)?;
    doctor.compare()?;
    doctor.simulate()?;
    doctor.note_interruption();
    let rendered = doctor.report()?;
    if let Some(target) = args.history.target()? {
        for run in &doctor.docs.runs {
            crate::history::keep::keep_run(Some(&target), &run.doc, "doctor")?;
        }
    }
    let verdict = &rendered.verdict;
    let dir = doctor.out.path();

    // Prose to the terminal's width ($COLUMNS), each continuation indented under its line.
    let wrapped =
        |line: String, indent: &str| crate::term::wrap_to_terminal(&line, indent).into_owned();
    crate::outln!(
        "{}",
        wrapped(format!("{}: {}", verdict.word, verdict.sentence), "  ")
    );
    for m in &verdict.measured {
        crate::outln!("{}", wrapped(format!("  {m}"), "    "));
    }
    for (i, r) in rendered.recommendations.iter().take(3).enumerate() {
        let line = match &r.gain {
            Some(g) => format!("{}. {} — {g}", i + 1, r.action),
            None => format!("{}. {}", i + 1, r.action),
        };
        crate::outln!("{}", wrapped(line, "   "));
    }
    crate::outln!(
        "report: {} ({:.1} s)",
        dir.join("index.html").display(),
        total.elapsed().as_secs_f64()
    );
    if let Some(got) = doctor.interrupt.received() {
        eprintln!(
            "ncclprobe: doctor interrupted by {}: the partial report is in {}",
            got.name(),
            dir.display()
        );
        return Ok(got.exit_code());
    }
    Ok(match verdict.state {
        State::Failed => ExitCode::CheckFailed,
        _ => ExitCode::Ok,
    })
}

//! `ncclprobe doctor`: this machine end to end. Topology, a short sweep (a child process, or
//! in this process when a launcher started the ranks), the same sweep without the settings that
//! force a slower path, diagnosis, compare, an optional DDP simulation, then the report, with
//! every JSON behind it, in one directory. Progress and each part's time go to stderr.

use crate::cli::{Cli, Command as Cmd, DoctorArgs, SimulateCommand};
use crate::documents::{DiagnosisDocument, TopologyDocument};
use crate::exit::{ExitCode, Failure};
use crate::model::RunRecord;
use crate::render::report::Destinations;
use crate::report::reading::forcing_overrides;
use crate::report::verdict::State;
use crate::report::{Documents, FailedAlternative, Named, Note, Timing};
use crate::sweep::{select_backend, Backend, Environment};
use clap::Parser;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
        eprintln!("doctor [{}/{}] {what} …", self.done, self.total);
    }

    fn end(&mut self, part: &str) {
        let seconds = self.started.elapsed().as_secs_f64();
        eprintln!("doctor       {part}: {seconds:.1} s");
        self.timings.push(Timing {
            part: part.into(),
            seconds,
        });
    }
}

fn write_json(path: &Path, doc: &impl serde::Serialize) -> Result<(), Failure> {
    let text = crate::render::to_json(doc)?;
    crate::render::record::write_atomic(path, format!("{text}\n").as_bytes())
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}

/// The short sweep's arguments, shared by the child process and the in-process run.
fn sweep_args(args: &DoctorArgs, backend: Backend, json: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec!["sweep".into(), "--backend".into(), backend.name().into()];
    if let Some(n) = args.backend.ranks.filter(|_| backend == Backend::Host) {
        v.extend(["--ranks".into(), n.to_string()]);
    }
    if backend == Backend::Nccl {
        if let Some(g) = args.backend.ngpus {
            v.extend(["-g".into(), g.to_string()]);
        }
        if let Some(lib) = &args.backend.nccl_lib {
            v.extend(["--nccl-lib".into(), lib.display().to_string()]);
        }
    }
    v.extend([
        "-b".into(),
        args.minbytes.clone(),
        "-e".into(),
        args.maxbytes.clone(),
        "-f".into(),
        args.stepfactor.clone(),
        "--point-budget".into(),
        args.point_budget.to_string(),
        "--timeout".into(),
        args.timeout.to_string(),
        "--json".into(),
        json.display().to_string(),
    ]);
    v
}

/// How a child sweep ended when it left no record to say so.
struct ChildFailure {
    message: String,
}

/// Run a sweep as a child process (under the MPI launcher for `--backend mpi`) with some
/// variables removed from its environment; its table and progress go to our stderr, and the
/// last lines of its stderr are kept for the report. A child that outlives its watchdog by far
/// is ended.
fn child_sweep(
    args: &DoctorArgs,
    backend: Backend,
    json: &Path,
    remove_env: &[String],
) -> Result<(), ChildFailure> {
    let exe = std::env::current_exe().map_err(|e| ChildFailure {
        message: format!("cannot find this program to run the sweep: {e}"),
    })?;
    let mut argv: Vec<String> = Vec::new();
    if backend == Backend::Mpi {
        argv.extend(args.launcher.split_whitespace().map(String::from));
        argv.extend(["-np".into(), args.np.to_string()]);
    }
    argv.push(exe.display().to_string());
    argv.extend(sweep_args(args, backend, json));
    let (program, rest) = argv.split_first().ok_or_else(|| ChildFailure {
        message: "--launcher is empty".into(),
    })?;
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::piped());
    for k in remove_env {
        cmd.env_remove(k);
    }
    let shown = argv.join(" ");
    let mut child = cmd.spawn().map_err(|e| ChildFailure {
        message: format!("cannot start `{shown}`: {e}"),
    })?;
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let forward = child.stderr.take().map(|err| {
        let tail = std::sync::Arc::clone(&tail);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if let Ok(mut t) = tail.lock() {
                    t.push(line);
                    let excess = t.len().saturating_sub(6);
                    t.drain(..excess);
                }
            }
        })
    });
    let limit = Duration::from_secs_f64(args.timeout * 4.0 + 120.0);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() > limit => {
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                std::thread::sleep(Duration::from_secs(5));
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "`{shown}` was still running after {:.0} s and was ended",
                    limit.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => break Err(format!("cannot wait for `{shown}`: {e}")),
        }
    };
    if let Some(f) = forward {
        let _ = f.join();
    }
    let last = tail.lock().map(|t| t.join(" | ")).unwrap_or_default();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(ChildFailure {
            message: format!("`{shown}` exited with {s}: {last}"),
        }),
        Err(message) => Err(ChildFailure { message }),
    }
}

/// The short sweep in this process (ranks started by a launcher): the sweep command itself.
fn sweep_here(args: &DoctorArgs, backend: Backend, json: &Path) -> Result<(), Failure> {
    let mut argv = vec!["ncclprobe".to_string()];
    argv.extend(sweep_args(args, backend, json));
    let cli = Cli::try_parse_from(&argv).map_err(|e| Failure::internal(e.to_string()))?;
    match &cli.command {
        Cmd::Sweep(sweep) => crate::commands::sweep::run(sweep).map(|_| ()),
        _ => Err(Failure::internal(
            "doctor built a command that is not a sweep",
        )),
    }
}

fn read_record(path: &Path) -> Option<RunRecord> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
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

fn simulate(
    args: &DoctorArgs,
    run: &Path,
    world: usize,
) -> Result<crate::documents::DdpSimulation, Failure> {
    let (Some(model), Some(ms)) = (&args.model, args.compute_ms) else {
        return Err(Failure::usage("--model needs --compute-ms"));
    };
    let argv = [
        "ncclprobe".to_string(),
        "simulate".into(),
        "ddp".into(),
        "--model".into(),
        model.clone(),
        "--world-size".into(),
        world.max(1).to_string(),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--compute-ms".into(),
        ms.to_string(),
        "--curve".into(),
        run.display().to_string(),
    ];
    let cli = Cli::try_parse_from(argv).map_err(|e| Failure::usage(e.to_string()))?;
    match &cli.command {
        Cmd::Simulate(SimulateCommand::Ddp(ddp)) => crate::commands::simulate::ddp_document(ddp),
        _ => Err(Failure::internal(
            "doctor built a command that is not simulate ddp",
        )),
    }
}

/// What every step works on: the arguments, the backend, the output directory, the documents
/// gathered so far and the steps' timings.
struct Doctor<'a> {
    args: &'a DoctorArgs,
    backend: Backend,
    launched: bool,
    dir: &'a Path,
    docs: Documents,
    steps: Steps,
}

impl Doctor<'_> {
    fn note(&mut self, level: &str, text: String) {
        self.docs.notes.push(Note {
            level: level.into(),
            text,
        });
    }

    fn topology(&mut self) -> Result<(), Failure> {
        self.steps.begin("topology");
        let facts = crate::live::collect(&crate::live::Roots::default(), true);
        match &facts.topology {
            Some(t) => {
                let doc = TopologyDocument::new("(live)".into(), t.clone());
                write_json(&self.dir.join("topology.json"), &doc)?;
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
    fn sweep(&mut self, reason: &str) -> Option<PathBuf> {
        let run_path = self.dir.join("run.json");
        self.steps.begin(&format!(
            "short sweep ({} backend: {reason})",
            self.backend.name()
        ));
        let _ = std::fs::remove_file(&run_path);
        let outcome = if self.launched {
            sweep_here(self.args, self.backend, &run_path).map_err(|f| f.message)
        } else {
            child_sweep(self.args, self.backend, &run_path, &[]).map_err(|f| f.message)
        };
        let found = match (read_record(&run_path), outcome) {
            (Some(run), _) => {
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
        found
    }

    /// The same sweep without the overrides that force a slower path, when it can be run.
    fn alternative(&mut self, overrides: &[(String, String)]) {
        let shown: Vec<String> = overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if overrides.is_empty() {
            return;
        }
        if self.args.no_alternative {
            let text = format!(
                "{} is set; not measured without it (--no-alternative)",
                shown.join(" ")
            );
            return self.note("info", text);
        }
        if self.launched {
            let text = format!(
                "{} came from the launcher: measuring without it needs the ranks started again without it",
                shown.join(" ")
            );
            return self.note("info", text);
        }
        let alt_path = self.dir.join("run-without-overrides.json");
        self.steps
            .begin(&format!("the same sweep without {}", shown.join(" ")));
        let _ = std::fs::remove_file(&alt_path);
        let keys: Vec<String> = overrides.iter().map(|(k, _)| k.clone()).collect();
        let outcome = child_sweep(self.args, self.backend, &alt_path, &keys);
        let error = match (read_record(&alt_path), outcome) {
            (Some(run), _) => {
                self.docs.runs.push(Named {
                    file: alt_path.display().to_string(),
                    doc: run,
                });
                None
            }
            (None, Err(f)) => Some(f.message),
            (None, Ok(())) => Some(format!("{} could not be read", alt_path.display())),
        };
        if let Some(error) = error {
            self.docs.failed_alternatives.push(FailedAlternative {
                overrides: shown,
                error,
            });
        }
        self.steps.end("sweep without overrides");
    }

    fn diagnose(&mut self, run: Option<PathBuf>) -> Result<(), Failure> {
        self.steps.begin("diagnose");
        let diagnose_args = crate::cli::DiagnoseArgs {
            from: run.into_iter().collect(),
            live: true,
            format: crate::cli::OutputFormat::Json,
            fail_on: None,
        };
        let inputs = crate::commands::diagnose::gather(&diagnose_args)?;
        let findings = crate::diagnose::rules(&inputs);
        let doc = DiagnosisDocument::new(inputs.facts(), findings);
        write_json(&self.dir.join("diagnosis.json"), &doc)?;
        self.docs.diagnoses.push(Named {
            file: "diagnosis.json".into(),
            doc,
        });
        self.steps.end("diagnose");
        Ok(())
    }

    fn compare(&mut self) -> Result<(), Failure> {
        self.steps
            .begin("compare with what this machine should give");
        self.docs.compare_runs_without_comparison();
        for (i, c) in self.docs.comparisons.iter_mut().enumerate() {
            let name = match i {
                0 => "comparison.json".to_string(),
                _ => format!("comparison-{}.json", i + 1),
            };
            write_json(&self.dir.join(&name), &c.doc)?;
            c.file = name;
        }
        self.steps.end("compare");
        Ok(())
    }

    /// DDP on each measured curve (with and without the overrides), when a model was named.
    fn simulate(&mut self) -> Result<(), Failure> {
        if self.args.model.is_none() {
            return Ok(());
        }
        self.steps.begin("simulate DDP on the measured curve");
        let runs: Vec<(PathBuf, usize)> = self
            .docs
            .runs
            .iter()
            .map(|r| (PathBuf::from(&r.file), r.doc.backend.nranks))
            .collect();
        for (i, (path, world)) in runs.iter().enumerate() {
            match simulate(self.args, path, *world) {
                Ok(doc) => {
                    let name = match i {
                        0 => "simulation.json",
                        _ => "simulation-without-overrides.json",
                    };
                    write_json(&self.dir.join(name), &doc)?;
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

    fn report(&mut self) -> Result<crate::report::output::Rendered, Failure> {
        self.steps.begin("report");
        self.docs.timings = self.steps.timings.clone();
        let title = self.args.title.clone().unwrap_or_else(|| {
            let host = hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("ncclprobe doctor: {host}")
        });
        let dest = Destinations {
            html: Some(self.dir.join("index.html")),
            markdown: Some(self.dir.join("summary.md")),
            png_dir: Some(self.dir.to_path_buf()),
            svg: true,
        };
        let rendered = crate::report::output::render(&self.docs, &title, &dest)?;
        crate::report::output::write_all(&rendered, &dest)?;
        self.steps.end("report");
        Ok(rendered)
    }
}

pub fn run(args: &DoctorArgs) -> Result<ExitCode, Failure> {
    // Refused before anything is measured, not after.
    if let Some(text) = &args.hardware {
        crate::expect::hardware::Hardware::parse(text).map_err(Failure::usage)?;
    }
    if args.model.is_some() && args.compute_ms.is_none() {
        return Err(Failure::usage(
            "--model needs --compute-ms (one GPU's step time)",
        ));
    }
    let env = Environment::detect();
    let selection = select_backend(
        args.backend.backend.into(),
        &env,
        args.backend.nccl_lib.as_deref(),
    )?;
    let backend = selection.backend;
    let launched = env.mpi_world_size.is_some() && backend != Backend::Host;
    let rank = crate::backend::mpi::launcher_rank();
    let dir = &args.output;
    if rank == 0 {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let run_path = dir.join("run.json");
    if launched && rank != 0 {
        // Every rank takes part in the sweep; rank 0 writes the record and the report.
        sweep_here(args, backend, &run_path)?;
        return Ok(ExitCode::Ok);
    }
    let overrides = overrides_for(backend);
    let measures_alternative = !args.no_alternative && !overrides.is_empty() && !launched;
    let total = Instant::now();
    let mut doctor = Doctor {
        args,
        backend,
        launched,
        dir,
        docs: Documents {
            hardware: args.hardware.clone(),
            ..Documents::default()
        },
        steps: Steps {
            total: 5 + usize::from(measures_alternative) + usize::from(args.model.is_some()),
            done: 0,
            started: Instant::now(),
            timings: Vec::new(),
        },
    };
    doctor.topology()?;
    let run = doctor.sweep(&selection.reason);
    doctor.alternative(&overrides);
    doctor.diagnose(run)?;
    doctor.compare()?;
    doctor.simulate()?;
    let rendered = doctor.report()?;
    let verdict = &rendered.verdict;

    crate::outln!(
        "{}: {}",
        format!("{:?}", verdict.state).to_uppercase(),
        verdict.sentence
    );
    for (i, r) in rendered.recommendations.iter().take(3).enumerate() {
        match &r.gain {
            Some(g) => crate::outln!("{}. {} — {g}", i + 1, r.action),
            None => crate::outln!("{}. {}", i + 1, r.action),
        }
    }
    crate::outln!(
        "report: {} ({:.1} s)",
        dir.join("index.html").display(),
        total.elapsed().as_secs_f64()
    );
    Ok(match verdict.state {
        State::Failed => ExitCode::CheckFailed,
        _ => ExitCode::Ok,
    })
}

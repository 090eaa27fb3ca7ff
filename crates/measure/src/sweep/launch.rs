//! ONE skeleton for every way a sweep's ranks come to life (host threads, NCCL `-g N`, one GPU
//! per process under torchrun or MPI, MPI on host memory): [`launch`]. What differs between
//! them is a [`Start`]: the plan, the banner's words and how to connect the communicators.
//!
//! The ranks run on their own threads and this thread only waits for them, so whatever
//! happens to a rank (a failure, a hang the watchdog reports, a panic) comes back here as a
//! `Failure`; the record is closed with it and the exit code is decided by `run_cli`'s table.
//! Ranks that never come back (stuck in a collective) are left behind: the process ends
//! when the command returns.

use super::options::Options;
use super::rank::run_rank;
use super::record;
use super::report::Rank0;
use super::select::Selection;
use crate::backend::{Communicator, Runner};
use crate::exit::{ExitCode, Failure};
use crate::matrix::MatrixOut;
use crate::model::Calibration;
use crate::plan::Plan;
use crate::watchdog::Watchdog;
use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// Makes this process's communicators, on a rank-side thread, with the watchdog at hand for
/// rendezvous and initialisation (which can hang).
pub type Connect<C> = Box<dyn FnOnce(&Watchdog, &Plan) -> Result<Vec<C>, Failure> + Send>;

/// What differs between the ways ranks start.
pub struct Start<C> {
    pub plan: Plan,
    /// This process holds rank 0: it prints, and keeps the record.
    pub reports: bool,
    /// How the ranks run, for the banner ("2 ranks as threads of one process").
    pub ranks_text: String,
    pub libraries: BTreeMap<String, String>,
    pub calibration: Calibration,
    pub connect: Connect<C>,
    /// Kept until the ranks are done, then dropped on this thread (MPI must be finalised by
    /// the thread that initialised it); never dropped while a rank may still be inside it.
    pub keep_alive: Option<Box<dyn std::any::Any>>,
    /// Runs a rank's whole run on a thread of the backend's own (the `mpi` backend's, which
    /// alone calls MPI); `None`: a new thread per rank.
    pub runner: Option<Runner>,
}

/// Who reports, on the process that holds rank 0: a sweep's record and table, or the pair
/// matrix's document (`ncclprobe matrix` runs on the same skeleton).
#[derive(Clone)]
enum Reporter {
    Sweep(Arc<Rank0>),
    Matrix(Arc<MatrixOut>),
}

impl Reporter {
    fn new(args: &Options, plan: &Plan, record: crate::model::RunRecord) -> Reporter {
        let patience = std::time::Duration::try_from_secs_f64(args.timing.timeout)
            .unwrap_or(crate::render::record::SPECIAL_PATIENCE);
        match &plan.matrix {
            Some(options) => {
                let doc =
                    crate::matrix::document_from_record(record, plan.settings.clone(), options);
                let mut out = MatrixOut::new(&args.output, doc, patience);
                out.history = args.history.clone();
                out.gate = args
                    .gate
                    .rules
                    .junit
                    .clone()
                    .map(|path| (path, options.rules.clone()));
                Reporter::Matrix(Arc::new(out))
            }
            None => {
                let mut r0 = Rank0::new(&args.output, record, patience);
                let elsewhere = [&args.report.markdown, &args.gate.rules.junit];
                if elsewhere.iter().any(|p| {
                    p.as_deref()
                        .is_some_and(crate::render::record::paths::is_stdout)
                }) {
                    r0.leave_stdout();
                }
                r0.set_gate(plan.gate.clone());
                r0.set_perf(plan.perf.clone(), plan);
                Reporter::Sweep(Arc::new(r0))
            }
        }
    }

    fn mark_timed_out(&self, message: &str) {
        match self {
            Reporter::Sweep(r0) => r0.mark_timed_out(message),
            Reporter::Matrix(m) => m.mark_timed_out(message),
        }
    }

    fn finish(&self, args: &Options, outcome: Result<(), Failure>) -> Result<ExitCode, Failure> {
        match self {
            Reporter::Sweep(r0) => r0.finish(args, outcome),
            Reporter::Matrix(m) => m.finish(outcome),
        }
    }
}

/// One rank's whole run: the sweep, or the matrix when the plan asks for pairs.
fn run_body(
    comm: &mut dyn Communicator,
    plan: &Plan,
    watchdog: Option<&Watchdog>,
    reporter: Option<&Reporter>,
) -> Result<(), Failure> {
    match (&plan.matrix, reporter) {
        (Some(options), reporter) => {
            let out = match reporter {
                Some(Reporter::Matrix(m)) => Some(m.as_ref()),
                _ => None,
            };
            let cx = crate::matrix::run::Context {
                plan,
                options,
                watchdog,
                out,
            };
            crate::matrix::run_rank(comm, &cx)
        }
        (None, Some(Reporter::Sweep(r0))) => run_rank(comm, plan, watchdog, Some(r0)),
        (None, _) => run_rank(comm, plan, watchdog, None),
    }
}

/// What the rank-side threads tell the waiting thread.
enum Event<C> {
    /// This many communicators are running.
    Started(usize),
    /// One rank is done: its outcome, and its communicator to release here.
    Done(Result<(), Failure>, Option<C>),
}

/// Run a sweep: record, banner, communicators, one thread per rank, the outcome.
pub fn launch<C: Communicator + Send + 'static>(
    args: &Options,
    selection: &Selection,
    start: Start<C>,
) -> Result<ExitCode, Failure> {
    let Start {
        plan,
        reports,
        ranks_text,
        libraries,
        calibration,
        connect,
        keep_alive,
        runner,
    } = start;
    let plan = Arc::new(plan);
    let watchdog = Watchdog::start(plan.settings.timeout_s);
    let rank0 = reports.then(|| {
        let record = record::new_record(&plan, selection, libraries.clone(), calibration);
        Reporter::new(args, &plan, record)
    });
    let (tx, rx) = mpsc::channel::<Event<C>>();
    watch_for_timeouts(&watchdog, rank0.clone(), tx.clone());
    watch_for_signals(tx.clone());
    match &rank0 {
        Some(Reporter::Sweep(r0)) => r0.banner(&plan, selection, &ranks_text, &libraries),
        Some(Reporter::Matrix(_)) => eprintln!(
            "ncclprobe matrix: {} backend, {ranks_text}",
            selection.backend.name()
        ),
        None => {}
    }
    let ranks_side = {
        let (plan, watchdog, rank0) = (Arc::clone(&plan), watchdog.clone(), rank0.clone());
        move || start_ranks(connect, runner, plan, watchdog, rank0, tx)
    };
    let (outcome, pending) = match std::thread::Builder::new()
        .name("ranks".into())
        .spawn(ranks_side)
    {
        Ok(_) => wait_for_ranks(&rx),
        Err(e) => (
            Err(Failure::internal(format!(
                "cannot start the rank threads: {e}"
            ))),
            Pending::Unknown,
        ),
    };
    let ok = outcome.is_ok();
    let code = match &rank0 {
        Some(r0) => r0.finish(args, outcome.map(|_| ())),
        None => {
            if let (Err(f), None) = (&outcome, &plan.matrix) {
                super::orphan::close_if_rank0_gone(args.output.json.as_deref(), f);
            }
            outcome.map(|_| ExitCode::Ok)
        }
    };
    if ok {
        drop(keep_alive);
    } else {
        // The record is closed. Ranks told to abort get a moment to do it (their peers in
        // other processes then return too); one still inside NCCL or CUDA after that keeps
        // the library in use, so the process ends without running the libraries' exit
        // handlers under it (a SIGSEGV at exit on an H100 with NCCL 2.28 otherwise).
        let all_back = drain(&rx, pending, ABORT_GRACE);
        std::mem::forget(keep_alive);
        crate::exit::end_without_teardown(if all_back {
            "every rank returned after the abort"
        } else {
            "a rank is still inside the GPU libraries"
        });
    }
    code
}

/// How long the ranks of a failed run get to abort their communicators and return.
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How many rank threads had not reported when the run ended.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Ranks(usize),
    Unknown,
}

/// Wait up to `grace` for the `pending` ranks' outcomes; true when every one came. Their
/// communicators, aborted, are not freed here (a peer may still reference what they hold).
fn drain<C>(rx: &mpsc::Receiver<Event<C>>, pending: Pending, grace: std::time::Duration) -> bool {
    let Pending::Ranks(mut left) = pending else {
        return false;
    };
    let deadline = Instant::now() + grace;
    while left > 0 {
        let Some(wait) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Done(_, comm)) => {
                std::mem::forget(comm);
                left -= 1;
            }
            Ok(Event::Started(_)) => {}
            Err(_) => return false,
        }
    }
    true
}

/// On a timeout: mark the record first (so the hung rank's own error path, woken by the
/// abort below, finds it already closed), tell the waiting thread, then abort NCCL
/// communicators so peers in other processes return too.
fn watch_for_timeouts<C: Send + 'static>(
    watchdog: &Watchdog,
    rank0: Option<Reporter>,
    tx: mpsc::Sender<Event<C>>,
) {
    watchdog.set_on_timeout(Box::new(move |failure: Failure| {
        if let Some(r0) = &rank0 {
            r0.mark_timed_out(&failure.message);
        }
        let _ = tx.send(Event::Done(Err(failure), None));
        crate::backend::nccl::abort_all();
    }));
}

/// SIGINT and SIGTERM end the run like a failure: the point in progress is dropped, the
/// record is closed as `interrupted`, NCCL communicators are aborted (so peers in other
/// processes return), and the process exits 130 or 143. Peers under an MPI launcher get the
/// signal from the launcher; a rank left alone is ended by its watchdog.
fn watch_for_signals<C: Send + 'static>(tx: mpsc::Sender<Event<C>>) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return; // the default action (the process ends) stays in place
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let (code, name) = if signal == SIGINT {
                    (ExitCode::Interrupted, "SIGINT")
                } else {
                    (ExitCode::Terminated, "SIGTERM")
                };
                let failure = Failure::new(code, format!("interrupted by {name}"));
                let _ = tx.send(Event::Done(Err(failure), None));
                crate::backend::nccl::abort_all();
            }
        });
    drop(spawned);
}

/// The rank side: connect, then one thread per communicator; every outcome goes to `tx`.
fn start_ranks<C: Communicator + Send + 'static>(
    connect: Connect<C>,
    runner: Option<Runner>,
    plan: Arc<Plan>,
    watchdog: Watchdog,
    rank0: Option<Reporter>,
    tx: mpsc::Sender<Event<C>>,
) {
    let comms = match connect(&watchdog, &plan) {
        Ok(comms) => comms,
        Err(f) => {
            let _ = tx.send(Event::Done(Err(f), None));
            return;
        }
    };
    let _ = tx.send(Event::Started(comms.len()));
    if let Some(first) = comms.first() {
        watchdog.set_missing_ranks_probe(first.missing_ranks_probe());
    }
    for (i, mut comm) in comms.into_iter().enumerate() {
        // The first communicator of the process arms the watchdog and, on rank 0, reports.
        let first = i == 0;
        let (plan, watchdog, rank0, rank_tx) = (
            Arc::clone(&plan),
            watchdog.clone(),
            rank0.clone().filter(|_| first),
            tx.clone(),
        );
        let rank = comm.rank();
        let body = move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_body(&mut comm, &plan, first.then_some(&watchdog), rank0.as_ref())
            }));
            let result = run.unwrap_or_else(|_| {
                Err(Failure::internal(format!("rank {rank} panicked (a bug)")))
            });
            let _ = rank_tx.send(Event::Done(result, Some(comm)));
        };
        let started = match &runner {
            Some(run) => run(Box::new(body)),
            None => std::thread::Builder::new()
                .name(format!("rank{rank}"))
                .spawn(body)
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = started {
            let message = format!("cannot start the thread of rank {rank}: {e}");
            let _ = tx.send(Event::Done(Err(Failure::internal(message)), None));
            return;
        }
    }
}

/// Until every rank is done or the first one fails (or the watchdog reports a hang). The
/// communicators of a successful run are released here, on this thread.
/// With a failure, how many ranks had not reported yet (a timeout or a signal reports
/// without being a rank).
fn wait_for_ranks<C>(rx: &mpsc::Receiver<Event<C>>) -> (Result<(), Failure>, Pending) {
    let mut expected = None;
    let mut finished = Vec::new();
    loop {
        match rx.recv() {
            Ok(Event::Started(n)) => expected = Some(n),
            Ok(Event::Done(Ok(()), comm)) => finished.push(comm),
            Ok(Event::Done(Err(f), comm)) => {
                let reported = finished.len() + usize::from(comm.is_some());
                // Peers of a failed rank may be blocked for good waiting for it.
                std::mem::forget(comm);
                std::mem::forget(finished);
                let pending = expected.map_or(Pending::Unknown, |n: usize| {
                    Pending::Ranks(n.saturating_sub(reported))
                });
                return (Err(f), pending);
            }
            Err(_) => {
                let lost = Failure::internal("the rank threads ended without a result");
                return (Err(lost), Pending::Ranks(0));
            }
        }
        if expected == Some(finished.len()) {
            return (Ok(()), Pending::Ranks(0));
        }
    }
}

//! The short sweep as a child process (under the MPI launcher for `--backend mpi`), in a
//! process group of its own so that a signal or a timeout reaches the launcher and everything
//! it started, never leaving a sweep behind.
//!
//! The one timeout rule: a child that prints nothing (stdout or stderr) for twice `--timeout`
//! gets SIGTERM on its process group, and SIGKILL `GRACE` later if it is still there. The
//! sweep's own watchdog ends a collective that makes no progress for `--timeout`, and the
//! sweep prints a line per point; silence for twice as long means the launcher or the sweep
//! hangs where its watchdog cannot see.

use super::inner::sweep_args;
use super::interrupt::Interrupt;
use crate::cli::DoctorArgs;
use crate::sweep::Backend;
use nix::sys::signal::Signal;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a child has, after SIGTERM, to write its record and go before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);
/// How long the child's last lines are waited for once it has exited (a grandchild that
/// keeps the pipes open must not hold doctor).
const DRAIN: Duration = Duration::from_secs(2);
/// Lines of the child's stderr the report keeps.
const TAIL_LINES: usize = 6;

/// How a child sweep ended, when not with success.
pub enum ChildFailure {
    /// It could not be started, or exited with a failure.
    Failed(String),
    /// It printed nothing for twice `--timeout` and was ended.
    TimedOut(String),
    /// Doctor got a signal and passed it on.
    Interrupted(String),
}

impl ChildFailure {
    pub fn message(&self) -> &str {
        match self {
            ChildFailure::Failed(m) | ChildFailure::TimedOut(m) | ChildFailure::Interrupted(m) => m,
        }
    }
}

/// The silence after which a child is ended: twice `--timeout` (see the module's rule).
pub fn silence_limit(timeout_s: f64) -> Duration {
    Duration::try_from_secs_f64(2.0 * timeout_s).unwrap_or(Duration::MAX)
}

enum Event {
    Line { text: String, stderr: bool },
    Closed,
}

/// Forward one of the child's pipes, line by line, to the wait loop.
fn read_lines(pipe: impl Read + Send + 'static, stderr: bool, tx: mpsc::Sender<Event>) {
    let spawned = std::thread::Builder::new()
        .name("doctor-child-output".into())
        .spawn(move || {
            for text in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(Event::Line { text, stderr }).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Closed);
        });
    drop(spawned);
}

/// Run a sweep as a child process with some variables removed from its environment; its
/// table and progress go to our stderr, and the last lines of its stderr are kept for the
/// report.
pub fn child_sweep(
    args: &DoctorArgs,
    backend: Backend,
    json: &Path,
    remove_env: &[String],
    interrupt: &Interrupt,
) -> Result<(), ChildFailure> {
    let exe = std::env::current_exe().map_err(|e| {
        ChildFailure::Failed(format!("cannot find this program to run the sweep: {e}"))
    })?;
    let mut argv: Vec<String> = Vec::new();
    if backend == Backend::Mpi {
        argv.extend(args.launcher.split_whitespace().map(String::from));
        argv.extend(["-np".into(), args.np.to_string()]);
    }
    argv.push(exe.display().to_string());
    argv.extend(sweep_args(args, backend, json));
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| ChildFailure::Failed("--launcher is empty".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for k in remove_env {
        cmd.env_remove(k);
    }
    let shown = argv.join(" ");
    let mut child = cmd
        .spawn()
        .map_err(|e| ChildFailure::Failed(format!("cannot start `{shown}`: {e}")))?;
    interrupt.set_child_group(Some(child.id() as i32));
    let ended = wait(&mut child, &shown, args.timeout, interrupt);
    interrupt.set_child_group(None);
    ended
}

/// Wait for the child, forwarding its output, ending it by the module's rule or on a signal.
fn wait(
    child: &mut Child,
    shown: &str,
    timeout_s: f64,
    interrupt: &Interrupt,
) -> Result<(), ChildFailure> {
    let (tx, rx) = mpsc::channel();
    let mut open = 0;
    if let Some(out) = child.stdout.take() {
        read_lines(out, false, tx.clone());
        open += 1;
    }
    if let Some(err) = child.stderr.take() {
        read_lines(err, true, tx);
        open += 1;
    }
    let mut tail: Vec<String> = Vec::new();
    let mut take = |event: Event, open: &mut usize, last: &mut Instant| match event {
        Event::Line { text, stderr } => {
            eprintln!("{text}");
            *last = Instant::now();
            if stderr {
                tail.push(text);
                let excess = tail.len().saturating_sub(TAIL_LINES);
                tail.drain(..excess);
            }
        }
        Event::Closed => *open -= 1,
    };
    let limit = silence_limit(timeout_s);
    let mut last_output = Instant::now();
    // When doctor sent the child SIGTERM (or the signal it got), why, and whether SIGKILL
    // followed.
    let mut ending: Option<(Instant, ChildFailure, bool)> = None;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => take(event, &mut open, &mut last_output),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(100))
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => {
                interrupt.kill_child(Signal::SIGKILL);
                let _ = child.wait();
                break Err(format!("cannot wait for `{shown}`: {e}"));
            }
        }
        match &mut ending {
            None => {
                if let Some(got) = interrupt.received() {
                    interrupt.kill_child(got.signal);
                    let why = format!("interrupted by {}: passed on to `{shown}`", got.name());
                    ending = Some((Instant::now(), ChildFailure::Interrupted(why), false));
                } else if last_output.elapsed() > limit {
                    interrupt.kill_child(Signal::SIGTERM);
                    let why = format!(
                        "the sweep timed out: `{shown}` printed nothing for {:.0} s (twice --timeout) and was ended",
                        limit.as_secs_f64()
                    );
                    eprintln!("ncclprobe: doctor: {why}");
                    ending = Some((Instant::now(), ChildFailure::TimedOut(why), false));
                }
            }
            Some((since, _, killed)) if !*killed && since.elapsed() > GRACE => {
                interrupt.kill_child(Signal::SIGKILL);
                *killed = true;
            }
            Some(_) => {}
        }
    };
    let drained = Instant::now();
    while open > 0 && drained.elapsed() < DRAIN {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => take(event, &mut open, &mut last_output),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some((_, why, _)) = ending {
        return Err(why);
    }
    let last = tail.join(" | ");
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(ChildFailure::Failed(format!(
            "`{shown}` exited with {s}: {last}"
        ))),
        Err(message) => Err(ChildFailure::Failed(message)),
    }
}

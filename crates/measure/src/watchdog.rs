//! A hang is a finding, not a freeze: a thread that notices when the collective in progress
//! makes no progress within the timeout and hands a timeout `Failure` to whoever runs the
//! ranks (see `sweep::launch`), which ends the run with exit code 4. It never ends the
//! process itself: the ranks may be stuck, the thread that waits for them is not.

use crate::exit::Failure;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Probe = Box<dyn Fn() -> Vec<usize> + Send + Sync>;
type OnTimeout = Box<dyn Fn(Failure) + Send + Sync>;

struct State {
    armed: Option<(Instant, String)>,
    missing_ranks: Option<Probe>,
    on_timeout: Option<OnTimeout>,
}

#[derive(Clone)]
pub struct Watchdog {
    timeout: Duration,
    state: Arc<Mutex<State>>,
}

impl Watchdog {
    /// Start the watchdog thread. It lives as long as the process.
    pub fn start(timeout_s: f64) -> Watchdog {
        let dog = Watchdog {
            timeout: Duration::from_secs_f64(timeout_s),
            state: Arc::new(Mutex::new(State {
                armed: None,
                missing_ranks: None,
                on_timeout: None,
            })),
        };
        let watcher = dog.clone();
        let poll = Duration::from_secs_f64((timeout_s / 20.0).clamp(0.01, 0.5));
        std::thread::Builder::new()
            .name("ncclprobe-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(poll);
                watcher.check();
            })
            .ok();
        dog
    }

    /// Note progress: `what` is now running, starting the clock afresh.
    pub fn arm(&self, what: impl Into<String>) {
        if let Ok(mut s) = self.state.lock() {
            s.armed = Some((Instant::now(), what.into()));
        }
    }

    pub fn disarm(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.armed = None;
        }
    }

    /// A way to name the ranks that have not arrived (the host backend knows; MPI does not).
    pub fn set_missing_ranks_probe(&self, probe: Option<Probe>) {
        if let Ok(mut s) = self.state.lock() {
            s.missing_ranks = probe;
        }
    }

    /// Called once, from the watchdog's thread, with the timeout; the hook reports it to the
    /// thread that waits for the ranks (and marks the record, aborts communicators).
    pub fn set_on_timeout(&self, hook: OnTimeout) {
        if let Ok(mut s) = self.state.lock() {
            s.on_timeout = Some(hook);
        }
    }

    fn check(&self) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let Some((since, what)) = &state.armed else {
            return;
        };
        if since.elapsed() < self.timeout {
            return;
        }
        let mut message = format!(
            "timeout: {what} made no progress in {:.3} s (--timeout)",
            self.timeout.as_secs_f64()
        );
        if let Some(probe) = &state.missing_ranks {
            let missing = probe();
            if !missing.is_empty() {
                let list: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
                message.push_str(&format!("; ranks that did not arrive: {}", list.join(", ")));
            }
        }
        // Fire once: the ranks are being abandoned, nothing after this is progress.
        state.armed = None;
        let hook = state.on_timeout.take();
        drop(state);
        if let Some(hook) = hook {
            hook(Failure::new(crate::exit::ExitCode::Timeout, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_stuck_step_is_reported_once_with_what_was_running() {
        let dog = Watchdog::start(0.05);
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        dog.set_on_timeout(Box::new(move |f| {
            let _ = tx.lock().map(|t| t.send(f));
        }));
        dog.set_missing_ranks_probe(Some(Box::new(|| vec![2])));
        dog.arm("all_reduce 8 B");
        let f = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("timeout reported");
        assert_eq!(f.code, crate::exit::ExitCode::Timeout);
        assert!(
            f.message.contains("all_reduce 8 B made no progress"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("ranks that did not arrive: 2"),
            "{}",
            f.message
        );
        dog.arm("again");
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "fires once"
        );
    }

    #[test]
    fn progress_keeps_it_quiet() {
        // Progress every 50 ms against a 2 s timeout: forty times the step, so a busy machine
        // that oversleeps a step cannot make it look like a hang.
        let dog = Watchdog::start(2.0);
        let (tx, rx) = mpsc::channel::<Failure>();
        let tx = Mutex::new(tx);
        dog.set_on_timeout(Box::new(move |f| {
            let _ = tx.lock().map(|t| t.send(f));
        }));
        for _ in 0..6 {
            dog.arm("step");
            std::thread::sleep(Duration::from_millis(50));
        }
        dog.disarm();
        assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());
    }
}

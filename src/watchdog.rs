//! A hang is a finding, not a freeze: a thread that ends the process with exit code 4 when the
//! collective in progress makes no progress within the timeout.

use crate::exit::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Probe = Box<dyn Fn() -> Vec<usize> + Send + Sync>;
type OnTimeout = Box<dyn Fn(&str) + Send + Sync>;

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

    /// Called with the message before the process exits (e.g. to mark the record timed out); the
    /// hook may end the process itself.
    pub fn set_on_timeout(&self, hook: OnTimeout) {
        if let Ok(mut s) = self.state.lock() {
            s.on_timeout = Some(hook);
        }
    }

    fn check(&self) {
        let Ok(state) = self.state.lock() else { return };
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
        eprintln!("ncclprobe: {message}");
        if let Some(hook) = &state.on_timeout {
            hook(&message);
        }
        std::process::exit(ExitCode::Timeout.code());
    }
}

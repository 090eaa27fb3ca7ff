//! SIGINT and SIGTERM while doctor runs. The first is remembered: the child sweep running then
//! gets it (its process group, from the wait loop in `child`), the steps that measure are
//! skipped, a partial report says so, and doctor exits 130 or 143. A second one ends doctor at
//! once, killing the child's process group.

use crate::exit::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The signals doctor has received, shared with the thread that waits for them.
#[derive(Clone)]
pub struct Interrupt {
    /// The first signal received (0: none).
    signal: Arc<AtomicI32>,
    /// The running child's process group (0: none).
    child_group: Arc<AtomicI32>,
}

/// A signal that arrived, by what it means for doctor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub signal: nix::sys::signal::Signal,
}

impl Received {
    pub fn name(self) -> &'static str {
        self.signal.as_str()
    }

    /// 130 for SIGINT, 143 for SIGTERM, as the sweep ends on them.
    pub fn exit_code(self) -> ExitCode {
        match self.signal {
            nix::sys::signal::Signal::SIGINT => ExitCode::Interrupted,
            _ => ExitCode::Terminated,
        }
    }
}

impl Interrupt {
    /// Take SIGINT and SIGTERM over from their default action (ending doctor at once, the
    /// child left running) for the rest of the process.
    pub fn install() -> Interrupt {
        let interrupt = Interrupt {
            signal: Arc::new(AtomicI32::new(0)),
            child_group: Arc::new(AtomicI32::new(0)),
        };
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            return interrupt; // the default action stays in place
        };
        let shared = interrupt.clone();
        let spawned = std::thread::Builder::new()
            .name("doctor-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if shared.signal.load(Ordering::SeqCst) == 0 {
                        shared.signal.store(signal, Ordering::SeqCst);
                        continue;
                    }
                    shared.kill_child(nix::sys::signal::Signal::SIGKILL);
                    let code = shared
                        .received()
                        .map_or(ExitCode::Terminated, |r| r.exit_code());
                    eprintln!("ncclprobe: doctor: a second signal: ending now, no report");
                    std::process::exit(code.code());
                }
            });
        drop(spawned);
        interrupt
    }

    /// The first signal received, if any.
    pub fn received(&self) -> Option<Received> {
        let raw = self.signal.load(Ordering::SeqCst);
        if raw == 0 {
            return None;
        }
        nix::sys::signal::Signal::try_from(raw)
            .ok()
            .map(|signal| Received { signal })
    }

    /// The process group of the child now running (`None` once it is gone).
    pub fn set_child_group(&self, group: Option<i32>) {
        self.child_group.store(group.unwrap_or(0), Ordering::SeqCst);
    }

    /// Send `signal` to the running child's whole process group (the launcher and what it
    /// started), if there is one.
    pub fn kill_child(&self, signal: nix::sys::signal::Signal) {
        let group = self.child_group.load(Ordering::SeqCst);
        if group > 0 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), signal);
        }
    }
}

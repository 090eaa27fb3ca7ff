//! The `mpi` backend's rank on a thread of its own, which initialises MPI at
//! `MPI_THREAD_SINGLE`, makes every MPI call and finalises MPI: what nccl-tests' MPI build
//! does on its main thread (`MPI_Init`, helper threads that never call MPI). At any higher
//! level Open MPI pays for thread safety on every call: an 8-byte all-reduce between two
//! ranks took 0.14 us at SINGLE and 0.23 us at FUNNELED or SERIALIZED (bench/mpi_overhead).

use super::imp::{start_at, MpiComm};
use crate::backend::{BackendError, Runner};
use std::sync::mpsc;

/// Work for the MPI thread, in order.
enum Job {
    Run(Box<dyn FnOnce() + Send>),
    Finalize,
}

/// The thread that initialised MPI. Dropping it finalises MPI there, after every job it was
/// given, and waits for that; forgetting it (a failed run, a rank that may be stuck inside
/// MPI) leaves MPI as it is.
pub struct MpiThread {
    jobs: mpsc::Sender<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts the MPI thread and initialises MPI on it; this process's communicator.
pub fn start_single() -> Result<(MpiComm, MpiThread), BackendError> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let (ready_tx, ready) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("mpi".into())
        .spawn(move || {
            let (universe, comm) = match start_at(mpi::Threading::Single) {
                Ok(session) => session.split(),
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(comm));
            while let Ok(Job::Run(job)) = queue.recv() {
                job();
            }
            // MPI_Finalize, on the thread that called MPI_Init_thread.
            drop(universe);
        })
        .map_err(|e| BackendError::Failed(format!("cannot start the MPI thread: {e}")))?;
    let comm = ready.recv().map_err(|_| {
        BackendError::Failed("the MPI thread ended before MPI was initialised".into())
    })??;
    Ok((
        comm,
        MpiThread {
            jobs,
            thread: Some(thread),
        },
    ))
}

impl MpiThread {
    /// What runs a closure on this thread (a rank's whole run).
    pub fn runner(&self) -> Runner {
        let jobs = self.jobs.clone();
        Box::new(move |job| {
            jobs.send(Job::Run(job))
                .map_err(|_| "the MPI thread is gone".to_string())
        })
    }
}

impl Drop for MpiThread {
    fn drop(&mut self) {
        let _ = self.jobs.send(Job::Finalize);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

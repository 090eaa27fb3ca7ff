//! The one table of process exit codes, and the error type that carries one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | internal error (a bug, an I/O failure writing results, an MPI/backend fault) |
//! | 2 | usage or bad input (flags, sizes, files) |
//! | 3 | check or qualification failed (`#wrong` > 0) |
//! | 4 | timeout: a collective made no progress within `--timeout` |
//! | 5 | backend unavailable (no MPI in this build, no NCCL, no GPU) |

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Ok = 0,
    Internal = 1,
    Usage = 2,
    CheckFailed = 3,
    Timeout = 4,
    BackendUnavailable = 5,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// An error that knows which exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Usage, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Internal, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ExitCode::BackendUnavailable, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Map any error to an exit code: a `Failure` anywhere in the chain decides, else internal.
pub fn classify(err: &anyhow::Error) -> ExitCode {
    err.chain()
        .find_map(|e| e.downcast_ref::<Failure>().map(|f| f.code))
        .unwrap_or(ExitCode::Internal)
}

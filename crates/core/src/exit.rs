//! The one table of process exit codes, and the error type that carries one. `run_cli` is
//! the only place that turns an outcome into a process exit code; the help text and the
//! README print this table (a test checks the README against it).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Ok = 0,
    Internal = 1,
    Usage = 2,
    CheckFailed = 3,
    Timeout = 4,
    BackendUnavailable = 5,
    PeerLost = 6,
    Interrupted = 130,
    ClosedPipe = 141,
    Terminated = 143,
}

/// Every exit code and what it means, in order.
pub const TABLE: &[(ExitCode, &str)] = &[
    (ExitCode::Ok, "success"),
    (
        ExitCode::Internal,
        "internal error (a bug, an I/O failure writing results, an MPI/backend fault)",
    ),
    (ExitCode::Usage, "usage or bad input (flags, sizes, files)"),
    (
        ExitCode::CheckFailed,
        "check failed (`#wrong` > 0), a `qualify` gate failed, `diagnose --fail-on` found a finding that severe, `doctor`'s verdict is failed, or `simulate memory`'s setup does not fit its GPU or host",
    ),
    (
        ExitCode::Timeout,
        "timeout: a collective (or rendezvous, or initialisation) made no progress within `--timeout`",
    ),
    (
        ExitCode::BackendUnavailable,
        "backend unavailable (no MPI in this build, no NCCL, no GPU)",
    ),
    (
        ExitCode::PeerLost,
        "a peer rank is gone: its connection closed mid-run (it crashed or was killed); this rank stopped",
    ),
    (
        ExitCode::Interrupted,
        "interrupted by SIGINT (Ctrl-C): the record is written with status `interrupted`",
    ),
    (
        ExitCode::ClosedPipe,
        "stdout closed (its reader went away, as `head` does): the command stopped quietly, as a tool killed by SIGPIPE; a sweep keeps measuring and writes its record",
    ),
    (
        ExitCode::Terminated,
        "terminated by SIGTERM: the record is written with status `interrupted`",
    ),
];

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn meaning(self) -> &'static str {
        TABLE
            .iter()
            .find(|(c, _)| *c == self)
            .map(|(_, m)| *m)
            .unwrap_or("")
    }
}

/// The table as the help text ends: "Exit codes: 0 success, 1 internal error, ...".
pub fn help_text() -> String {
    let items: Vec<String> = TABLE
        .iter()
        .map(|(c, m)| {
            let short = m.split([' ', '(', ':']).next().unwrap_or(m);
            let short = match c {
                ExitCode::Internal => "internal error",
                ExitCode::CheckFailed => "check failed",
                ExitCode::BackendUnavailable => "backend unavailable",
                ExitCode::PeerLost => "peer rank lost",
                ExitCode::Interrupted => "interrupted (SIGINT)",
                ExitCode::Terminated => "terminated (SIGTERM)",
                ExitCode::ClosedPipe => "stdout closed",
                _ => short,
            };
            format!("{} {short}", c.code())
        })
        .collect();
    format!(
        "Exit codes: {} (see the README's exit-code table).",
        items.join(", ")
    )
}

/// The table as the README shows it (Markdown).
pub fn markdown_table() -> String {
    let mut out = String::from("| code | meaning |\n|---|---|\n");
    for (c, m) in TABLE {
        out.push_str(&format!("| {} | {m} |\n", c.code()));
    }
    out
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

/// Writes `text` to stdout, flushed. A reader that went away (a closed pipe) is
/// `ExitCode::ClosedPipe` with no message; any other failure (a full disk) is an internal
/// error that says so. Every command's stdout goes through here (`out!`, `outln!`), its verdict
/// words coloured where a person reads them (`term::paint`).
pub fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Failure::internal(format!(
            "cannot write to stdout: {}",
            std::io::Error::from_raw_os_error(libc::EBADF)
        )));
    }
    let text = crate::term::paint(text);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => Failure::new(ExitCode::ClosedPipe, ""),
            _ => Failure::internal(format!("cannot write to stdout: {e}")),
        })
}

/// Whether the process started with no standard output (`>&-`), as [`stdout_at_start`] saw.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A C constructor (`.init_array`): it runs before `main`, and so before Rust's runtime reopens
/// a closed descriptor 1 on /dev/null (which keeps later files off it, and hides `>&-` from
/// every write). Each [`print`] then fails as a write to a closed descriptor does (EBADF).
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
static STDOUT_AT_START: extern "C" fn() = stdout_at_start;

extern "C" fn stdout_at_start() {
    // SAFETY: fcntl(F_GETFD) only asks whether descriptor 1 is open.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why the process must end without the libraries' exit handlers (set once, by a run that
/// ended while a rank may still be inside NCCL or CUDA).
static NO_TEARDOWN: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Ask [`end`] to skip the exit handlers: a rank thread may still be inside (or just out of
/// an abort in) NCCL or CUDA, whose own exit handlers would free what it uses. Everything
/// this process writes is already on disk and flushed by then (records are written whole).
pub fn end_without_teardown(why: &'static str) {
    let _ = NO_TEARDOWN.set(why);
}

/// End the process with `code`: normally, or with `_exit` after [`end_without_teardown`],
/// stdout flushed first either way.
pub fn end(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if NO_TEARDOWN.get().is_some() {
        // SAFETY: _exit ends the process at once; nothing after it runs.
        unsafe { libc::_exit(code) }
    }
    std::process::exit(code)
}

/// `print!` through [`print`]: `?` the failure.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::exit::print(&format!($($arg)*))?
    };
}

/// `println!` through [`print`]: `?` the failure.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::exit::print("\n")?
    };
    ($($arg:tt)*) => {
        $crate::exit::print(&format!("{}\n", format_args!($($arg)*)))?
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_in_the_table_once_and_in_order() {
        let codes: Vec<i32> = TABLE.iter().map(|(c, _)| c.code()).collect();
        let mut expected: Vec<i32> = (0..=6).collect();
        expected.extend([130, 141, 143]);
        assert_eq!(codes, expected);
        assert_eq!(ExitCode::Timeout.meaning(), TABLE[4].1);
    }

    #[test]
    fn help_names_every_code() {
        let help = help_text();
        for (c, _) in TABLE {
            assert!(help.contains(&format!("{} ", c.code())), "{help}");
        }
        assert!(help.contains("5 backend unavailable"), "{help}");
    }
}

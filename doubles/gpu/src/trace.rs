//! The call trace tests can ask for (`NCCLPROBE_TEST_DOUBLE_TRACE`), written by the CUDA and
//! NCCL parts alike.

use std::sync::OnceLock;

fn trace_path() -> Option<&'static str> {
    static TRACE: OnceLock<Option<String>> = OnceLock::new();
    TRACE
        .get_or_init(|| std::env::var("NCCLPROBE_TEST_DOUBLE_TRACE").ok())
        .as_deref()
}

pub(crate) fn tracing() -> bool {
    trace_path().is_some()
}

/// One line in the trace file (`NCCLPROBE_TEST_DOUBLE_TRACE`), when tests asked for one.
pub(crate) fn trace_line(line: &str) {
    use std::io::Write;
    if let Some(path) = trace_path() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// A test asked the double for something it does not model, or described its machine wrongly:
/// the process ends saying so, rather than answering as no real library would.
pub(crate) fn misuse(what: &str) -> ! {
    eprintln!("TEST DOUBLE: {what}");
    std::process::abort();
}

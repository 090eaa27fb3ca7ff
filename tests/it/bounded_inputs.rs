//! Inputs that would be held whole or line by line without end: the alltoallv traffic matrix
//! (`sweep --alltoallv-matrix`, the drop-in's `NCCL_TESTS_ALLTOALLV_MATRIX_FILE`) and
//! `simulate memory --oom` fed a million errors or a 300 MB line. Each is read under a cap:
//! the memory a case takes is measured (the child's peak resident size), and every case runs
//! under an address-space limit so a regression fails the test instead of the machine.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The address space a case may take (KiB, `ulimit -v`): ten times what a bounded reader needs,
/// far below what holding the input would.
const ADDRESS_LIMIT_KIB: u64 = 2_000_000;

/// `program args…` under [`ADDRESS_LIMIT_KIB`], through `sh`'s `ulimit -v`.
fn limited(program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_LIMIT_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(program)
        .args(args);
    c
}

fn ncclprobe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ncclprobe"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The peak resident size (KiB) the child reached, sampled from `/proc` until it exits, and
/// its output. `/proc/PID/status`' VmHWM only grows, so the last sample is the peak to within
/// the last few milliseconds.
fn peak_kib(mut child: Child) -> (Output, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let out = child.stdout.take();
    let err = child.stderr.take();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(out.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(err.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let mut peak = 0;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak = peak.max(hwm.unwrap_or(0));
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    (
        Output {
            status,
            stdout,
            stderr,
        },
        peak,
    )
}

/// A directory holding `alltoallv_perf` as a link to the built ncclprobe (the drop-in).
fn alltoallv_perf() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("alltoallv_perf");
    std::os::unix::fs::symlink(ncclprobe(), &link).unwrap();
    (dir, link)
}

fn dropin_with_matrix(file: &Path) -> (Output, u64) {
    let (_dir, link) = alltoallv_perf();
    let mut cmd = limited(
        &link,
        &["--backend", "host", "-t", "2", "-b", "4K", "-e", "4K"],
    );
    cmd.env("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", file);
    peak_kib(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn sweep_with_matrix(file: &Path) -> (Output, u64) {
    let args = [
        "sweep",
        "--backend",
        "host",
        "--ranks",
        "2",
        "--collective",
        "alltoallv",
        "--alltoallv-matrix",
        file.to_str().unwrap(),
        "-b",
        "4K",
        "-e",
        "4K",
    ];
    peak_kib(
        limited(&ncclprobe(), &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// nccl-tests 2.19.6 sizes the matrix file with `fseek(f, 0, SEEK_END)` and `ftell`
/// (src/alltoallv.cu, AlltoAllvReadTrafficMatrix, lines 195-199) and reads that many bytes: a
/// device such as `/dev/zero` tells 0 and is "empty" (alltoallv.cu line 272), exit 1. The
/// drop-in reads it the same way; `sweep` refuses it as a usage error (exit 2). Neither reads
/// the endless zeros.
#[test]
fn a_traffic_matrix_on_dev_zero_is_empty_as_nccl_tests_sizes_it() {
    let zero = Path::new("/dev/zero");
    let (out, peak) = dropin_with_matrix(zero);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("Invalid alltoallv traffic matrix, file /dev/zero is empty."),
        "{stdout}"
    );
    assert!(peak < 200_000, "{peak} KiB");
    let (out, peak) = sweep_with_matrix(zero);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Invalid alltoallv traffic matrix, file /dev/zero is empty."),
        "{stderr}"
    );
    assert!(peak < 200_000, "{peak} KiB");
}

/// A matrix file larger than the 256 MiB every held-whole input is capped at is refused before
/// any of it is read: exit 2 for `sweep`, testInternalError (1) for the drop-in, saying so.
#[test]
fn a_traffic_matrix_over_the_document_cap_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.txt");
    // Sparse: 257 MiB long, no block written.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(257 << 20)
        .unwrap();
    let (out, peak) = sweep_with_matrix(&big);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("larger than 256 MiB"), "{stderr}");
    assert!(peak < 200_000, "{peak} KiB");
    let (out, peak) = dropin_with_matrix(&big);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("larger than 256 MiB"), "{stdout}");
    assert!(peak < 200_000, "{peak} KiB");
}

/// Run `cmd` with `head`, then `chunks` times `chunk`, then `tail` on its stdin (streamed,
/// never held whole here); its output and peak resident size.
fn streamed(
    cmd: &mut Command,
    head: &[u8],
    chunk: &[u8],
    chunks: usize,
    tail: &[u8],
) -> (Output, u64) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (head, chunk, tail) = (head.to_vec(), chunk.to_vec(), tail.to_vec());
    let writer = std::thread::spawn(move || {
        if stdin.write_all(&head).is_err() {
            return;
        }
        for _ in 0..chunks {
            if stdin.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = stdin.write_all(&tail);
    });
    let result = peak_kib(child);
    writer.join().unwrap();
    result
}

/// Seed 004's setup (tests/it/memory_plan.rs), its error given on stdin.
fn simulate_memory_oom_stdin() -> Command {
    let args = [
        "simulate",
        "memory",
        "--model",
        "gemma-2b",
        "--strategy",
        "zero3",
        "--precision",
        "fp16",
        "--flash-attention",
        "--micro-batch",
        "1",
        "--seq-len",
        "1024",
        "--expandable-segments",
        "--offload-optimizer",
        "cpu",
        "--frozen-params",
        "5e8",
        "--host-memory-gb",
        "64",
        "--oom",
        "-",
    ];
    limited(&ncclprobe(), &args)
}

const OOM_LINE: &str = "CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free. Including non-PyTorch memory, this process has 22.66 GiB memory in use.\n";

/// Many errors: the first is planned against and the rest counted, not held (before, each was
/// kept: 1,000,000 of them took 432 MB).
#[test]
fn a_log_of_many_out_of_memory_errors_is_held_to_the_first_and_a_count() {
    let chunk = OOM_LINE.repeat(1000);
    let (out, peak) = streamed(
        &mut simulate_memory_oom_stdin(),
        b"",
        chunk.as_bytes(),
        300,
        b"",
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "300000 out-of-memory errors in (stdin); the plan is held against the first (line 1)"
        ),
        "{stdout}"
    );
    assert!(peak < 60_000, "{peak} KiB");
}

/// One 300 MB line: its first MiB is read, the rest skipped, and the plan says the line was
/// cut (before, the line was held whole: 2 GB).
#[test]
fn a_line_of_300_mb_is_cut_at_the_line_cap_and_said() {
    let mut head = b"CUDA out of memory. Tried to allocate 500.00 MiB. ".to_vec();
    head.extend(std::iter::repeat_n(b'x', (1 << 20) - head.len()));
    let filler = vec![b'x'; 1 << 20];
    let tail = b"\nGPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free. \n\
Including non-PyTorch memory, this process has 22.66 GiB memory in use.\n";
    let mut cmd = simulate_memory_oom_stdin();
    // The head, then 299 MiB more of the same line, then the rest of the error.
    let mut child_input = head;
    child_input.extend_from_slice(&filler);
    let (out, peak) = streamed(&mut cmd, &child_input, &filler, 298, tail);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("GPU 0 failed to allocate 500.00 MiB with 243.94 MiB free"),
        "{stdout}"
    );
    assert!(
        stdout.contains("line 1 of (stdin) is longer than 1 MiB"),
        "{stdout}"
    );
    assert!(peak < 60_000, "{peak} KiB");
}

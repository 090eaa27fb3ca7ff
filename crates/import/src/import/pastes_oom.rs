//! PyTorch's CUDA out-of-memory error, as 1.x printed it ("Tried to allocate 2.00 GiB (GPU 0;
//! 23.69 GiB total capacity; 21.5 GiB already allocated; 1.2 GiB free; 22.0 GiB reserved in
//! total by PyTorch)") and as 2.x does ("Tried to allocate 500.00 MiB. GPU 0 has a total
//! capacity of 23.63 GiB of which 243.94 MiB is free. ... Of the allocated memory 21.90 GiB
//! is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but unallocated."; 2.1
//! spelt it "total capacty"). Pastes often break the 2.x message after its sentences; the
//! lines that follow are read for the rest (`continue_with`).

use crate::documents::diagnosis::Evidence;
use crate::import::text::{static_regex, Line};
use regex::Regex;
use std::sync::OnceLock;

/// One out-of-memory error, its amounts in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuOom {
    pub gpu: Option<u32>,
    pub tried_bytes: f64,
    pub total_bytes: Option<f64>,
    pub free_bytes: Option<f64>,
    /// Held by PyTorch's caching allocator but not by tensors (fragmentation).
    pub reserved_unallocated_bytes: Option<f64>,
    /// "Including non-PyTorch memory, this process has X memory in use" (2.x): the whole
    /// process, its CUDA context and the allocator's reserve counted.
    pub process_in_use_bytes: Option<f64>,
    /// "Process N has X memory in use", each: the processes PyTorch lists beside this one
    /// (2.x). In a container whose PID namespace hides the host's PIDs, this process itself
    /// is listed so, and no "this process" sentence appears.
    pub listed_processes_bytes: Vec<f64>,
    /// "X reserved in total by PyTorch" (1.x): the caching allocator's whole pool.
    pub reserved_total_bytes: Option<f64>,
    /// "Of the allocated memory X is allocated by PyTorch" (2.x), or "X already allocated"
    /// (1.x): what tensors held.
    pub allocated_bytes: Option<f64>,
    pub evidence: Evidence,
}

/// The lines after the first that a pasted error may have been wrapped onto: PyTorch prints
/// it on one line, a paste often breaks it after each sentence.
pub const CONTINUATION_LINES: usize = 6;

/// An amount as PyTorch's `format_size` prints it; a page copied from a browser may hold a
/// no-break space before the unit.
/// A sign or an exponent is read too, so that a damaged or made-up figure (`-23.63 GiB`,
/// `1e308 GiB`) is caught as absurd rather than passed over as no figure at all.
const AMOUNT: &str = r"(-?[\d.]+(?:[eE][+-]?\d+)?[ \x{a0}]?(?:[KMGT]i?B|bytes|B))";

/// The error's first words: ROCm builds print the same message with HIP for CUDA.
const START: &str = r"(?:CUDA|HIP) out of memory\.";

fn tried() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, &format!(r"{START}\s*Tried to allocate {AMOUNT}"))
}

fn start() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, &format!(r"{START}\s*$"))
}

fn allocated_new() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(r"Of the allocated memory {AMOUNT} is allocated by PyTorch"),
    )
}

/// A line that holds only the error's first sentence: a paste broke it there.
pub fn starts_alone(text: &str) -> bool {
    start().is_match(text.trim())
}

fn capacity_new() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(r"GPU (\d+) has a total capac(?:i)?ty of {AMOUNT} of which {AMOUNT} is free"),
    )
}

fn capacity_old() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(
            r"\(GPU (\d+); {AMOUNT} total capacity; {AMOUNT} already allocated; {AMOUNT} free; {AMOUNT} (reserved in total by PyTorch|cached)"
        ),
    )
}

fn unallocated() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(r"{AMOUNT} is reserved by PyTorch but unallocated"),
    )
}

fn this_process() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, &format!(r"this process has {AMOUNT} memory in use"))
}

fn other_process() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, &format!(r"Process \d+ has {AMOUNT} memory in use"))
}

/// `500.00 MiB`, `23.63 GiB`, `0 bytes` in bytes (PyTorch prints binary units).
fn bytes(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let exponent_at = |i: usize| {
        matches!(b.get(i), Some(b'e' | b'E'))
            && matches!(b.get(i + 1), Some(b'0'..=b'9' | b'+' | b'-'))
    };
    let split = (0..b.len())
        .find(|&i| {
            let c = b[i];
            !(c.is_ascii_digit() || c == b'.' || (i == 0 && c == b'-') || exponent_at(i))
                && !(matches!(c, b'+' | b'-') && i > 0 && matches!(b[i - 1], b'e' | b'E'))
        })
        .unwrap_or(text.len());
    let value: f64 = text[..split].parse().ok()?;
    let power = match text[split..]
        .trim_start_matches(|c: char| c.is_whitespace())
        .trim_end_matches("iB")
        .trim_end_matches('B')
    {
        "" | "bytes" | "byte" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        _ => return None,
    };
    Some(value * 1024f64.powi(power))
}

/// The error this line holds, if any.
pub fn parse(file: &str, line: &Line) -> Option<GpuOom> {
    let t = line.text.trim();
    let tried_bytes = bytes(&tried().captures(t)?[1])?;
    let mut oom = GpuOom {
        gpu: None,
        tried_bytes,
        total_bytes: None,
        free_bytes: None,
        reserved_unallocated_bytes: None,
        process_in_use_bytes: None,
        listed_processes_bytes: Vec::new(),
        reserved_total_bytes: None,
        allocated_bytes: None,
        evidence: Evidence {
            file: file.to_string(),
            line: line.number,
            text: t.to_string(),
        },
    };
    if let Some(c) = capacity_old().captures(t) {
        oom.gpu = c[1].parse().ok();
        oom.total_bytes = bytes(&c[2]);
        oom.free_bytes = bytes(&c[4]);
        let (allocated, pool) = (bytes(&c[3]), bytes(&c[5]));
        oom.allocated_bytes = allocated;
        if &c[6] == "cached" {
            // 1.0-1.3 printed the cache beyond what tensors hold as "cached".
            oom.reserved_unallocated_bytes = pool;
            oom.reserved_total_bytes = pool.zip(allocated).map(|(c, a)| c + a);
        } else {
            oom.reserved_unallocated_bytes = pool.zip(allocated).map(|(r, a)| (r - a).max(0.0));
            oom.reserved_total_bytes = pool;
        }
    } else {
        oom.continue_with(t);
    }
    Some(oom)
}

impl GpuOom {
    /// The 2.x message's later sentences, on the error's own line or on a line it was wrapped
    /// onto; a sentence already read is not read again.
    pub fn continue_with(&mut self, text: &str) {
        if self.total_bytes.is_none() {
            if let Some(c) = capacity_new().captures(text) {
                self.gpu = c[1].parse().ok();
                self.total_bytes = bytes(&c[2]);
                self.free_bytes = bytes(&c[3]);
            }
        }
        if self.process_in_use_bytes.is_none() {
            // "this process has 0 bytes memory in use" is what PyTorch prints where NVML
            // cannot see the process (containers): not a reading.
            self.process_in_use_bytes = this_process()
                .captures(text)
                .and_then(|c| bytes(&c[1]))
                .filter(|b| *b > 0.0);
        }
        if self.allocated_bytes.is_none() {
            self.allocated_bytes = allocated_new().captures(text).and_then(|c| bytes(&c[1]));
        }
        self.listed_processes_bytes.extend(
            other_process()
                .captures_iter(text)
                .filter_map(|c| bytes(&c[1])),
        );
        if self.reserved_unallocated_bytes.is_none() {
            self.reserved_unallocated_bytes =
                unallocated().captures(text).and_then(|c| bytes(&c[1]));
        }
    }
}

//! PyTorch's CUDA out-of-memory error, as 1.x printed it ("Tried to allocate 2.00 GiB (GPU 0;
//! 23.69 GiB total capacity; 21.5 GiB already allocated; 1.2 GiB free; 22.0 GiB reserved in
//! total by PyTorch)") and as 2.x does ("Tried to allocate 500.00 MiB. GPU 0 has a total
//! capacity of 23.63 GiB of which 243.94 MiB is free. ... Of the allocated memory 21.90 GiB
//! is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but unallocated.").

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
    pub evidence: Evidence,
}

const AMOUNT: &str = r"([\d.]+ ?(?:[KMGT]i?B|bytes|B))";

fn tried() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(r"CUDA out of memory\. Tried to allocate {AMOUNT}"),
    )
}

fn capacity_new() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(r"GPU (\d+) has a total capacity of {AMOUNT} of which {AMOUNT} is free"),
    )
}

fn capacity_old() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        &format!(
            r"\(GPU (\d+); {AMOUNT} total capacity; {AMOUNT} already allocated; {AMOUNT} free; {AMOUNT} reserved in total by PyTorch"
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

/// `500.00 MiB`, `23.63 GiB`, `0 bytes` in bytes (PyTorch prints binary units).
fn bytes(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic() || c == ' ')
        .unwrap_or(text.len());
    let value: f64 = text[..split].parse().ok()?;
    let power = match text[split..]
        .trim()
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
        evidence: Evidence {
            file: file.to_string(),
            line: line.number,
            text: t.to_string(),
        },
    };
    if let Some(c) = capacity_new().captures(t) {
        oom.gpu = c[1].parse().ok();
        oom.total_bytes = bytes(&c[2]);
        oom.free_bytes = bytes(&c[3]);
        oom.reserved_unallocated_bytes = unallocated().captures(t).and_then(|c| bytes(&c[1]));
    } else if let Some(c) = capacity_old().captures(t) {
        oom.gpu = c[1].parse().ok();
        oom.total_bytes = bytes(&c[2]);
        oom.free_bytes = bytes(&c[4]);
        let (allocated, reserved) = (bytes(&c[3]), bytes(&c[5]));
        oom.reserved_unallocated_bytes = reserved.zip(allocated).map(|(r, a)| (r - a).max(0.0));
    }
    Some(oom)
}

//! `nvidia-smi` default output: the GPU list and the process table (which PID holds memory on
//! which GPU — the evidence that a process is not pinned to one GPU).

use super::text::{self, static_regex, InputError};
use regex::Regex;
use serde::Serialize;
use std::path::Path;
use std::sync::OnceLock;

pub const EXPECTED: &str = "`nvidia-smi` output (with its Processes table)";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
    pub kind: String,
    pub name: String,
    pub memory_mib: Option<u64>,
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Smi {
    /// (index, name, bus id) from the GPU list.
    pub gpus: Vec<(u32, String, Option<String>)>,
    pub processes: Vec<GpuProcess>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

fn process_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"^\|\s+(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<kind>C\+G|M\+C|C|G|M)\s+(?P<name>.+?)\s+(?P<mem>\d+|N/A)(?:MiB)?\s*\|\s*$",
    )
}

fn gpu_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"^\|\s+(?P<idx>\d+)\s+(?P<name>(?:NVIDIA|Tesla|GeForce|Quadro|RTX|A\d|H\d|L\d|TITAN)[^|]*?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)",
    )
}

pub fn parse_str(input: &str) -> Smi {
    let mut smi = Smi::default();
    let mut in_processes = false;
    let head: Vec<&str> = input.lines().take(400).collect();
    let html = super::input::html::looks_like_html(&head);
    let lines = input.lines().enumerate().flat_map(|(i, raw)| {
        let pieces = if html {
            super::input::html::unwrap(raw)
        } else {
            vec![raw.to_string()]
        };
        pieces.into_iter().map(move |p| (i, p))
    });
    for (i, raw) in lines {
        let t = text::clean(&raw).0;
        let t = t.trim_end();
        if t.contains("Driver Version:") {
            let after = |k: &str| {
                t.split(k)
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .map(str::to_string)
            };
            smi.driver_version = after("Driver Version:");
            smi.cuda_version = after("CUDA Version:");
        }
        if t.contains("Processes:") {
            in_processes = true;
            continue;
        }
        if let Some(c) = gpu_re().captures(t) {
            smi.gpus.push((
                c["idx"].parse().unwrap_or(0),
                c["name"].trim().to_string(),
                Some(c["bus"].to_string()),
            ));
            continue;
        }
        if in_processes {
            if let Some(c) = process_re().captures(t) {
                smi.processes.push(GpuProcess {
                    gpu: c["gpu"].parse().unwrap_or(0),
                    pid: c["pid"].parse().unwrap_or(0),
                    kind: c["kind"].to_string(),
                    name: c["name"].trim().to_string(),
                    memory_mib: c["mem"].parse().ok(),
                    line: i + 1,
                });
            }
        }
    }
    smi
}

pub fn parse_file(path: &Path) -> Result<Smi, InputError> {
    from_input(text::Input::open(path)?)
}

/// `nvidia-smi` output from an input opened once (held whole: it is small).
pub fn from_input(input: text::Input) -> Result<Smi, InputError> {
    let name = input.name.clone();
    let bytes = input.bytes(EXPECTED)?;
    let text: String = String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| l.to_string() + "\n")
        .collect();
    let smi = parse_str(&text);
    if smi.gpus.is_empty() && smi.processes.is_empty() {
        return Err(InputError::WrongKind {
            path: name,
            reason: "no GPU rows or process table found".into(),
            expected: EXPECTED.into(),
        });
    }
    Ok(smi)
}

impl Smi {
    /// PIDs that hold memory on more than one GPU, with those GPUs.
    pub fn multi_gpu_processes(&self) -> Vec<(u32, Vec<u32>)> {
        let mut by_pid: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for p in &self.processes {
            let gpus = by_pid.entry(p.pid).or_default();
            if !gpus.contains(&p.gpu) {
                gpus.push(p.gpu);
            }
        }
        by_pid.into_iter().filter(|(_, g)| g.len() > 1).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The situation of seeds/000: one PID on both GPUs.
    const SAMPLE: &str = "\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |
|-------------------------------+----------------------+----------------------+
|   0  NVIDIA GeForce RTX 3090  Off | 00000000:01:00.0 Off |                  N/A |
|   1  NVIDIA GeForce RTX 3090  Off | 00000000:02:00.0 Off |                  N/A |
+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A     21001      C   python                          20310MiB |
|    0   N/A  N/A     21002      C   python                            812MiB |
|    1   N/A  N/A     21002      C   python                          21510MiB |
+-----------------------------------------------------------------------------+
";

    #[test]
    fn finds_a_process_on_two_gpus() {
        let smi = parse_str(SAMPLE);
        assert_eq!(smi.gpus.len(), 2);
        assert_eq!(smi.processes.len(), 3);
        assert_eq!(smi.driver_version.as_deref(), Some("535.104.05"));
        assert_eq!(smi.multi_gpu_processes(), vec![(21002, vec![0, 1])]);
    }

    #[test]
    fn old_table_without_gi_ci_columns() {
        let smi = parse_str(
            "| Processes:   GPU Memory |\n|    1      4242    C   /usr/bin/python3     1200MiB |\n",
        );
        assert_eq!(smi.processes[0].pid, 4242);
        assert_eq!(smi.processes[0].memory_mib, Some(1200));
    }

    #[test]
    fn a_table_pasted_from_a_web_page_reads_the_same() {
        let page: String = SAMPLE
            .lines()
            .map(|l| l.replace(' ', "&nbsp;") + "<br>")
            .collect::<Vec<_>>()
            .join("");
        let smi = parse_str(&format!("<pre>{page}</pre>"));
        assert_eq!(smi.gpus.len(), 2);
        assert_eq!(smi.multi_gpu_processes(), vec![(21002, vec![0, 1])]);
    }
}

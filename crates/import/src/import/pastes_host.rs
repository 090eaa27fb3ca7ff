//! The host side of a paste: `free` (any of -b/-k/-m/-g/-h, the procps layouts with
//! `available` and the older one with `-/+ buffers/cache`), the CPU count (`nproc`, `lscpu`'s
//! `CPU(s):`), PyTorch's DataLoader worker warning, and the loader and launcher settings a
//! command line or config states (`num_workers`, `--nproc_per_node`).

use crate::documents::diagnosis::Evidence;
use crate::import::text::{static_regex, Line};
use regex::Regex;
use std::sync::OnceLock;

/// Host memory as one `free` printed it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMemory {
    pub total_bytes: f64,
    /// Memory programs hold, without the page cache: total − available, or the
    /// `-/+ buffers/cache` row's used, else the `used` column.
    pub used_bytes: f64,
    pub swap_total_bytes: Option<f64>,
    pub swap_used_bytes: Option<f64>,
    /// The header, `Mem:`, `-/+ buffers/cache:` and `Swap:` lines that were read.
    pub evidence: Vec<Evidence>,
}

impl HostMemory {
    pub fn used_fraction(&self) -> f64 {
        if self.total_bytes > 0.0 {
            self.used_bytes / self.total_bytes
        } else {
            0.0
        }
    }

    pub fn swap_used_fraction(&self) -> Option<f64> {
        match (self.swap_total_bytes, self.swap_used_bytes) {
            (Some(t), Some(u)) if t > 0.0 => Some(u / t),
            _ => None,
        }
    }
}

/// A count a line states, with the line.
#[derive(Debug, Clone, PartialEq)]
pub struct Count {
    pub value: u32,
    pub evidence: Evidence,
}

/// PyTorch's "This DataLoader will create N worker processes in total. Our suggested max
/// number of worker in current system is M, ..." (torch/utils/data/dataloader.py,
/// `check_worker_number_rationality`: M is the CPUs this process may run on,
/// `len(os.sched_getaffinity(0))`, else `os.cpu_count()`; none when neither is known).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerWarning {
    pub workers: u32,
    pub suggested_max: Option<u32>,
    /// The rank a launcher's prefix names (`[rank3]:`, `[default3]:`, `3: `): every local
    /// rank runs its own loader and warns once.
    pub rank: Option<u32>,
    pub evidence: Vec<Evidence>,
}

/// Where the readers are between lines.
#[derive(Debug, Default)]
pub struct HostReader {
    /// Bytes per plain number in `free`'s output, from its command line (KiB when unsaid).
    free_unit: Option<f64>,
    free_header: Option<(Vec<String>, Evidence)>,
    pending: Option<HostMemory>,
    /// `/proc/meminfo`'s fields so far, in KiB, with their lines.
    meminfo: Vec<(String, f64, Evidence)>,
    /// The line number of a command asking for the CPU count (`nproc`), whose answer follows.
    asked_cores: Option<usize>,
    /// A warning whose suggested maximum a wrapped paste put on a later line.
    open_warning: Option<usize>,
}

/// What one line told the host readers.
#[derive(Debug, PartialEq)]
pub enum HostFact {
    Memory(HostMemory),
    Nproc(Count),
    Lscpu(Count),
    Warning(WorkerWarning),
    /// The suggested maximum for the warning found on an earlier line.
    Suggested(u32, Evidence),
    NumWorkers(Count),
    LocalRanks(Count),
}

fn regex(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    static_regex(cell, pattern)
}

fn free_command() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(&R, r"(?:^|[\s$#>])free(?P<flags>(?:\s+-{1,2}[a-z]+)*)\s*$")
}

fn meminfo_line() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r"^(MemTotal|MemFree|MemAvailable|Buffers|Cached|SwapTotal|SwapFree):\s+(\d+)\s*kB$",
    )
}

fn nproc_command() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r#"(?:(?:^|[\s$#>])nproc(?:\s+--all)?|(?:os|multiprocessing)\.cpu_count\(\)\)?["']?\)?)\s*$"#,
    )
}

fn labelled_cores() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r"(?i)^(?:nproc|cpu cores|cpu count|os\.cpu_count\(\))\s*[:=]\s*(\d+)$",
    )
}

fn lscpu_cpus() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(&R, r"^CPU\(s\):\s+(\d+)$")
}

fn warning_workers() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r"This DataLoader will create (\d+) worker processes in total",
    )
}

fn warning_suggested() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r"suggested max number of worker in current system is (\d+)",
    )
}

fn rank_prefix() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // torchrun's `--tee`/log prefixes `[rank3]:` and `[default3]:`, srun -l's `3: `.
    regex(&R, r"^\s*(?:\[(?:rank|default)(\d+)\]:|(\d{1,5}):\s)")
}

/// The rank a line's launcher prefix names.
fn rank_of(line: &Line) -> Option<u32> {
    let prefixed = |t: &str| {
        let c = rank_prefix().captures(t)?;
        c.get(1).or(c.get(2))?.as_str().parse().ok()
    };
    prefixed(&line.text)
        .or_else(|| prefixed(&line.raw))
        .or_else(|| line.tag_rank.and_then(|r| u32::try_from(r).ok()))
}

fn num_workers() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // `--num-workers 40`, `--num_workers=40`, `num_workers=40`, `"num_workers": 40`,
    // `num_workers: 40`; not `num_workers_per_gpu`.
    regex(
        &R,
        r#"(?i)\bnum[_-]workers\b["']?\s*(?:=|:|\s)\s*["']?(\d+)"#,
    )
}

fn local_ranks() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    regex(
        &R,
        r"(?i)(?:--nproc[_-]per[_-]node|--num[_-]processes)(?:=|\s+)(\d+)|\bLOCAL_WORLD_SIZE=(\d+)",
    )
}

fn evidence(file: &str, line: &Line) -> Evidence {
    Evidence {
        file: file.to_string(),
        line: line.number,
        text: line.text.trim().to_string(),
    }
}

/// Bytes a unit letter of `free -h` stands for (binary, as procps prints: `Gi`, and the older
/// `G`); none for a plain number.
fn unit_bytes(unit: &str) -> Option<f64> {
    let power = match unit.trim_end_matches('i') {
        "B" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        _ => return None,
    };
    Some(1024f64.powi(power))
}

/// One amount of `free`'s output in bytes: `31Gi`, `1.0G`, `0B`, `1,5Gi` or a plain number in
/// the command's unit.
fn amount(token: &str, plain_unit: f64) -> Option<f64> {
    let t = token.replace(',', ".");
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let value: f64 = t[..split].parse().ok()?;
    let unit = match &t[split..] {
        "" => plain_unit,
        u => unit_bytes(u)?,
    };
    Some(value * unit)
}

/// The unit `free`'s flags give plain numbers (procps: -b, -k (the default), -m, -g, --tebi,
/// --kilo/--mega/--giga in powers of 1000).
fn free_flags_unit(flags: &str) -> f64 {
    let mut unit = 1024.0;
    for flag in flags.split_whitespace() {
        unit = match flag.trim_start_matches('-') {
            "b" | "bytes" => 1.0,
            "k" | "kibi" => 1024.0,
            "m" | "mebi" => 1024f64.powi(2),
            "g" | "gibi" => 1024f64.powi(3),
            "tebi" => 1024f64.powi(4),
            "kilo" => 1e3,
            "mega" => 1e6,
            "giga" => 1e9,
            _ => unit,
        };
    }
    unit
}

impl HostReader {
    /// What this line tells, in the order it tells it.
    pub fn feed(&mut self, file: &str, line: &Line) -> Vec<HostFact> {
        let t = line.text.trim();
        let mut facts = Vec::new();
        if let Some(m) = self.free(file, line, t) {
            facts.push(HostFact::Memory(m));
        }
        if let Some(m) = self.meminfo(file, line, t) {
            facts.push(HostFact::Memory(m));
        }
        facts.extend(self.cores(file, line, t));
        facts.extend(self.loader(file, line, t));
        facts
    }

    /// The memory a `free` block left open (a `Mem:` row without its `Swap:` row).
    pub fn finish(&mut self) -> Option<HostMemory> {
        self.pending.take().or_else(|| self.meminfo_done())
    }

    /// `/proc/meminfo` (`MemTotal:  65843212 kB`, ...): the block ends at `SwapFree`, at a
    /// second `MemTotal` or at the end of the input.
    fn meminfo(&mut self, file: &str, line: &Line, t: &str) -> Option<HostMemory> {
        let c = meminfo_line().captures(t)?;
        let key = c[1].to_string();
        let kib: f64 = c[2].parse().ok()?;
        let done = if key == "MemTotal" {
            self.meminfo_done()
        } else {
            None
        };
        self.meminfo.push((key.clone(), kib, evidence(file, line)));
        match key.as_str() {
            "SwapFree" => self.meminfo_done(),
            _ => done,
        }
    }

    fn meminfo_done(&mut self) -> Option<HostMemory> {
        let fields = std::mem::take(&mut self.meminfo);
        let kib = |name: &str| {
            fields
                .iter()
                .find(|(k, _, _)| k == name)
                .map(|(_, v, _)| v * 1024.0)
        };
        let total = kib("MemTotal")?;
        // Kernels before 3.14 have no MemAvailable: free plus the caches they may drop.
        let available = kib("MemAvailable").or_else(|| {
            Some(kib("MemFree")? + kib("Buffers").unwrap_or(0.0) + kib("Cached").unwrap_or(0.0))
        })?;
        let swap_total = kib("SwapTotal");
        let wanted = [
            "MemTotal",
            "MemAvailable",
            "MemFree",
            "SwapTotal",
            "SwapFree",
        ];
        Some(HostMemory {
            total_bytes: total,
            used_bytes: (total - available).max(0.0),
            swap_total_bytes: swap_total,
            swap_used_bytes: swap_total
                .zip(kib("SwapFree"))
                .map(|(t, f)| (t - f).max(0.0)),
            evidence: fields
                .into_iter()
                .filter(|(k, _, _)| wanted.contains(&k.as_str()))
                .map(|(_, _, e)| e)
                .collect(),
        })
    }

    fn free(&mut self, file: &str, line: &Line, t: &str) -> Option<HostMemory> {
        if let Some(c) = free_command().captures(t) {
            self.free_unit = Some(free_flags_unit(&c["flags"]));
            return self.pending.take();
        }
        let tokens: Vec<&str> = t.split_whitespace().collect();
        if tokens.first() == Some(&"total") && tokens.contains(&"used") {
            let names = tokens.iter().map(|s| s.to_string()).collect();
            self.free_header = Some((names, evidence(file, line)));
            return self.pending.take();
        }
        let unit = self.free_unit.unwrap_or(1024.0);
        let values = |from: usize| -> Option<Vec<f64>> {
            tokens[from..].iter().map(|v| amount(v, unit)).collect()
        };
        match tokens.first().copied() {
            Some("Mem:") => {
                let values = values(1)?;
                let done = self.pending.take();
                let column = |name: &str| {
                    let (names, _) = self.free_header.as_ref()?;
                    let i = names.iter().position(|n| n == name)?;
                    (names.len() == values.len()).then(|| values[i])
                };
                let total = *values.first()?;
                let used = match column("available") {
                    Some(available) => total - available,
                    None => *values.get(1)?,
                };
                let mut evidence_lines: Vec<Evidence> =
                    self.free_header.iter().map(|(_, e)| e.clone()).collect();
                evidence_lines.push(evidence(file, line));
                self.pending = Some(HostMemory {
                    total_bytes: total,
                    used_bytes: used,
                    swap_total_bytes: None,
                    swap_used_bytes: None,
                    evidence: evidence_lines,
                });
                done
            }
            Some("-/+") if tokens.get(1) == Some(&"buffers/cache:") => {
                let values = values(2)?;
                let memory = self.pending.as_mut()?;
                memory.used_bytes = *values.first()?;
                memory.evidence.push(evidence(file, line));
                None
            }
            Some("Swap:") => {
                let values = values(1)?;
                let mut memory = self.pending.take()?;
                memory.swap_total_bytes = values.first().copied();
                memory.swap_used_bytes = values.get(1).copied();
                memory.evidence.push(evidence(file, line));
                self.free_header = None;
                Some(memory)
            }
            _ => None,
        }
    }

    fn cores(&mut self, file: &str, line: &Line, t: &str) -> Option<HostFact> {
        let count = |c: regex::Captures| -> Option<Count> {
            Some(Count {
                value: c[1].parse().ok()?,
                evidence: evidence(file, line),
            })
        };
        if let Some(c) = lscpu_cpus().captures(t) {
            return count(c).map(HostFact::Lscpu);
        }
        if let Some(c) = labelled_cores().captures(t) {
            return count(c).map(HostFact::Nproc);
        }
        if t.is_empty() {
            return None;
        }
        // The answer is the next line that is not blank, and only a bare number.
        if let Some(asked) = self.asked_cores.take() {
            if let Ok(value) = t.parse::<u32>() {
                let mut evidence = evidence(file, line);
                evidence.text = format!("{value} (the answer to line {asked})");
                return Some(HostFact::Nproc(Count { value, evidence }));
            }
        }
        if nproc_command().is_match(t) {
            self.asked_cores = Some(line.number);
        }
        None
    }

    fn loader(&mut self, file: &str, line: &Line, t: &str) -> Vec<HostFact> {
        let mut facts = Vec::new();
        let suggested = warning_suggested()
            .captures(t)
            .and_then(|c| c[1].parse::<u32>().ok());
        if let Some(c) = warning_workers().captures(t) {
            let workers = c[1].parse().unwrap_or(0);
            self.open_warning = suggested
                .is_none()
                .then_some(line.number)
                .filter(|_| !t.contains("not able to compute"));
            facts.push(HostFact::Warning(WorkerWarning {
                workers,
                suggested_max: suggested,
                rank: rank_of(line),
                evidence: vec![evidence(file, line)],
            }));
        } else if let Some(opened) = self.open_warning {
            // A paste that wrapped the warning: its second half within a few lines.
            if let Some(m) = suggested {
                self.open_warning = None;
                facts.push(HostFact::Suggested(m, evidence(file, line)));
            } else if line.number > opened + 3 {
                self.open_warning = None;
            }
        }
        if let Some(c) = num_workers().captures(t) {
            if let Ok(value) = c[1].parse() {
                facts.push(HostFact::NumWorkers(Count {
                    value,
                    evidence: evidence(file, line),
                }));
            }
        }
        if let Some(c) = local_ranks().captures(t) {
            if let Some(value) = c.get(1).or(c.get(2)).and_then(|m| m.as_str().parse().ok()) {
                facts.push(HostFact::LocalRanks(Count {
                    value,
                    evidence: evidence(file, line),
                }));
            }
        }
        facts
    }
}

//! GPU utilisation and memory as `nvidia-smi` prints them: the default table (the driver 4xx
//! layout and the wider 5xx one, Linux and Windows), `--query-gpu=... --format=csv` with or
//! without header and units, and `nvidia-smi dmon` columns. One reader per format, fed line by
//! line, so a paste that holds several of them (and other text) finds each block.

use crate::documents::diagnosis::Evidence;
use crate::import::text::{static_regex, Line};
use regex::Regex;
use std::sync::OnceLock;

/// One reading of one GPU: what the line said, with the line.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    pub gpu: u32,
    pub util_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub memory_total_mib: Option<f64>,
    /// Which format it came from ("nvidia-smi", "nvidia-smi --query-gpu", "nvidia-smi dmon").
    pub format: &'static str,
    /// Its table's process list says "No running processes found". A container's
    /// nvidia-smi cannot see processes of other PID namespaces, its own job's included, so
    /// this alone does not prove the GPU idle.
    pub no_process_listed: bool,
    pub evidence: Evidence,
}

/// Where the readers are between lines.
#[derive(Debug, Default)]
pub struct GpuReader {
    /// The index of the table's last GPU row, whose second row carries memory and utilisation.
    table_gpu: Option<u32>,
    /// Memory rows seen since the table's header, for tables whose GPU rows were cut.
    table_rows: u32,
    /// Inside the Processes or MIG devices part of the table: no GPU rows there.
    table_other: bool,
    /// The fields of a `--query-gpu` block: from its header, or from the command when the
    /// output has none (`--format=csv,noheader`).
    query: Option<Columns>,
    dmon: Option<Columns>,
}

#[derive(Debug)]
struct Columns {
    names: Vec<String>,
    rows: u32,
}

fn memory_cell() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, r"^\s*(\d+)\s*MiB\s*/\s*(\d+)\s*MiB\s*$")
}

fn util_cell() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, r"^\s*(?:(\d+)\s*%|N/A)")
}

fn gpu_row() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // `|   0  NVIDIA A10G   On  | 00000000:00:1E.0 Off |`: an index, then a name.
    static_regex(&R, r"^\s*(\d+)\s+[A-Za-z]")
}

fn query_command() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"--query-gpu[=\s]+(?P<fields>[A-Za-z0-9_.,]+)(?:.*--format[=\s]+(?P<format>[a-z,]+))?",
    )
}

fn evidence(file: &str, line: &Line) -> Evidence {
    Evidence {
        file: file.to_string(),
        line: line.number,
        text: line.text.trim().to_string(),
    }
}

/// A number as a field prints it: `3 %`, `700 MiB`, `700`; `[N/A]` and `-` are none.
fn number(field: &str) -> Option<f64> {
    let t = field
        .trim()
        .trim_end_matches("MiB")
        .trim_end_matches("MB")
        .trim_end_matches('%')
        .trim();
    t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// A field's name without its unit: `memory.used [MiB]` is `memory.used`.
fn field_name(header: &str) -> String {
    header
        .split('[')
        .next()
        .unwrap_or(header)
        .trim()
        .to_ascii_lowercase()
}

fn bare_query() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"^(\d{1,3})(?:\s*%)?\s*,\s*(\d+)(?:\s*MiB)?\s*,\s*(\d+)(?:\s*MiB)?$",
    )
}

/// `3, 717, 23028` alone reads as utilisation, memory used and total only when nothing else
/// fits: a percentage, then used no more than a total of at least a GiB.
fn bare_query_row(t: &str) -> bool {
    let Some(c) = bare_query().captures(t) else {
        return false;
    };
    let n = |i: usize| c[i].parse::<u64>().unwrap_or(u64::MAX);
    n(1) <= 100 && n(2) <= n(3) && (1024..u64::MAX).contains(&n(3))
}

impl GpuReader {
    /// The sample this line gives, if any.
    pub fn feed(&mut self, file: &str, line: &Line) -> Option<GpuSample> {
        let t = line.text.trim();
        if let Some(s) = self.table(file, line, t) {
            return Some(s);
        }
        if let Some(s) = self.query(file, line, t) {
            return Some(s);
        }
        self.dmon(file, line, t)
    }

    fn table(&mut self, file: &str, line: &Line, t: &str) -> Option<GpuSample> {
        if t.contains("NVIDIA-SMI") {
            *self = GpuReader::default();
            return None;
        }
        if t.contains("Processes:") || t.contains("MIG devices:") {
            self.table_other = true;
            self.table_gpu = None;
            return None;
        }
        if !t.starts_with('|') || self.table_other {
            return None;
        }
        let cells: Vec<&str> = t.trim_matches('|').split('|').collect();
        let memory = cells
            .iter()
            .position(|c| memory_cell().is_match(c))
            .and_then(|i| Some((memory_cell().captures(cells[i])?, cells.get(i + 1)?)));
        let Some((mem, next)) = memory else {
            if let Some(c) = cells.first().and_then(|c| gpu_row().captures(c)) {
                self.table_gpu = c[1].parse().ok();
            }
            return None;
        };
        // The utilisation cell follows the memory cell; MIG rows have SM counts there, no `%`.
        let util = util_cell().captures(next)?;
        let gpu = self.table_gpu.take().unwrap_or(self.table_rows);
        self.table_rows += 1;
        Some(GpuSample {
            gpu,
            util_pct: util.get(1).and_then(|m| number(m.as_str())),
            memory_used_mib: number(&mem[1]),
            memory_total_mib: number(&mem[2]),
            format: "nvidia-smi",
            no_process_listed: false,
            evidence: evidence(file, line),
        })
    }

    fn query(&mut self, file: &str, line: &Line, t: &str) -> Option<GpuSample> {
        if let Some(c) = query_command().captures(t) {
            let fields: Vec<String> = c["fields"].split(',').map(field_name).collect();
            let format = c.name("format").map_or("", |m| m.as_str());
            self.query = format.contains("noheader").then_some(Columns {
                names: fields,
                rows: 0,
            });
            return None;
        }
        let lower = t.to_ascii_lowercase();
        if lower.contains("utilization.gpu") || lower.contains("memory.used") {
            self.query = Some(Columns {
                names: t.split(',').map(field_name).collect(),
                rows: 0,
            });
            return None;
        }
        if self.query.is_none() && bare_query_row(t) {
            // `--format=csv,noheader,nounits` pasted without its command line.
            self.query = Some(Columns {
                names: ["utilization.gpu", "memory.used", "memory.total"]
                    .map(String::from)
                    .to_vec(),
                rows: 0,
            });
        }
        let columns = self.query.as_mut()?;
        let fields: Vec<&str> = t.split(',').collect();
        let at = |name: &str| columns.names.iter().position(|n| n == name);
        let value = |name: &str| at(name).and_then(|i| fields.get(i)).and_then(|f| number(f));
        let numeric = |name: &str| {
            at(name).is_none_or(|i| {
                let f = fields[i].trim();
                number(f).is_some() || f.contains("N/A")
            })
        };
        let fits = fields.len() == columns.names.len()
            && ["utilization.gpu", "memory.used", "memory.total", "index"]
                .iter()
                .all(|n| numeric(n));
        if !fits {
            self.query = None;
            return None;
        }
        let gpu = value("index").map_or(columns.rows, |i| i as u32);
        columns.rows += 1;
        Some(GpuSample {
            gpu,
            util_pct: value("utilization.gpu"),
            memory_used_mib: value("memory.used"),
            memory_total_mib: value("memory.total"),
            format: "nvidia-smi --query-gpu",
            no_process_listed: false,
            evidence: evidence(file, line),
        })
    }

    fn dmon(&mut self, file: &str, line: &Line, t: &str) -> Option<GpuSample> {
        if let Some(head) = t.strip_prefix('#') {
            let names: Vec<String> = head
                .split_whitespace()
                .map(|s| s.trim_start_matches('#').to_ascii_lowercase())
                .collect();
            if names.iter().any(|n| n == "gpu") && names.iter().any(|n| n == "sm" || n == "fb") {
                self.dmon = Some(Columns { names, rows: 0 });
            }
            // The units line (`# Idx W C ...`) keeps the block open.
            return None;
        }
        let columns = self.dmon.as_mut()?;
        let tokens: Vec<&str> = t.split_whitespace().collect();
        let at = |name: &str| columns.names.iter().position(|n| n == name);
        let gpu = at("gpu")
            .and_then(|i| tokens.get(i))
            .and_then(|g| g.parse::<u32>().ok());
        let (Some(gpu), true) = (gpu, tokens.len() == columns.names.len()) else {
            self.dmon = None;
            return None;
        };
        columns.rows += 1;
        let value = |name: &str| at(name).and_then(|i| number(tokens[i]));
        Some(GpuSample {
            gpu,
            // dmon's `mem` is memory bandwidth in use, not capacity: `fb` is the memory used.
            util_pct: value("sm"),
            memory_used_mib: value("fb"),
            memory_total_mib: None,
            format: "nvidia-smi dmon",
            no_process_listed: false,
            evidence: evidence(file, line),
        })
    }
}

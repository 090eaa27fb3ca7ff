//! The text table, line by line: headers (old `error` and new `#wrong` columns, with or
//! without `redop`/`root`), rows, tagged and prefixed lines, the banner's facts and the footer.

use super::super::text::static_regex;
use super::super::text::Line;
use crate::coll::Collective;
use crate::dtype::Dtype;
use crate::model::RankInfo;
use regex::Regex;
use std::sync::OnceLock;

pub(super) fn rank_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &RE,
        r"^#\s+Rank\s+(\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$",
    )
}

pub(super) fn perf_name() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"\b([a-z_]+?)_perf(?:_mpi)?\b")
}

pub(super) fn nccl_version() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
}

pub(super) fn nranks_info() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"\bn[Rr]anks (\d+)")
}

/// Column layout from a header line: the columns before the first `time`, then one half.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    pub(super) pre: Vec<String>,
    pub(super) half: Vec<String>,
}

impl Layout {
    pub(super) fn from_header(tokens: &[&str]) -> Option<Layout> {
        let is_time = |t: &&str| *t == "time" || *t == "cputime";
        let first = tokens.iter().position(is_time)?;
        let second = tokens[first + 1..]
            .iter()
            .position(is_time)
            .map(|p| p + first + 1)?;
        let pre: Vec<String> = tokens[..first].iter().map(|s| s.to_string()).collect();
        if pre.first().map(String::as_str) != Some("size") {
            return None;
        }
        Some(Layout {
            pre,
            half: tokens[first..second]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        })
    }

    /// For rows seen without a header: guess from the cell count and shape.
    pub(super) fn guess(tokens: &[&str]) -> Option<Layout> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let numeric = |t: &str| t.parse::<f64>().is_ok();
        let (pre, half) = match tokens.len() {
            13 => (
                s(&["size", "count", "type", "redop", "root"]),
                s(&["time", "algbw", "busbw", "#wrong"]),
            ),
            12 if !numeric(tokens[3]) => (
                s(&["size", "count", "type", "redop"]),
                s(&["time", "algbw", "busbw", "error"]),
            ),
            11 => (
                s(&["size", "count", "type"]),
                s(&["time", "algbw", "busbw", "error"]),
            ),
            _ => return None,
        };
        Some(Layout { pre, half })
    }

    pub(super) fn width(&self) -> usize {
        self.pre.len() + 2 * self.half.len()
    }
}

#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) line: usize,
    pub(super) collective: Option<Collective>,
    pub(super) size: u64,
    pub(super) count: u64,
    pub(super) dtype: String,
    pub(super) redop: Option<String>,
    pub(super) root: i64,
    pub(super) halves: [Half; 2],
}

#[derive(Debug, Clone, Default)]
pub(super) struct Half {
    pub(super) time_us: f64,
    pub(super) algbw_gbps: f64,
    pub(super) busbw_gbps: f64,
    pub(super) wrong: Option<u64>,
    pub(super) old_error: bool,
    /// -I: the fastest and slowest single iteration, µs.
    pub(super) iter_min_us: Option<f64>,
    pub(super) iter_max_us: Option<f64>,
    /// -J with -I: every timed call (`times_us`), and how many leading ones the summary skips.
    pub(super) iter_times_us: Vec<f64>,
    pub(super) iter_skipped: usize,
}

/// Everything read from a text log, before it becomes a record.
#[derive(Default)]
pub(super) struct Parsed {
    pub(super) layout: Option<Layout>,
    pub(super) named: Option<Collective>,
    pub(super) rows: Vec<Row>,
    pub(super) ranks: Vec<RankInfo>,
    pub(super) nccl_version: Option<String>,
    pub(super) tests_version: Option<String>,
    pub(super) info_nranks: Option<usize>,
    pub(super) threads_gpus: Option<usize>,
    pub(super) avg_busbw: Option<f64>,
    pub(super) out_of_bounds: Option<u64>,
    pub(super) errors: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) truncated_at: Option<usize>,
    pub(super) headers_seen: usize,
    /// Ranks implied by a command line (`mpirun -np P ... -t T -g G`).
    pub(super) command_ranks: Option<usize>,
    /// Rows already kept, so a table printed again (a paste of many runs, processes that
    /// each printed theirs) costs no memory: (collective, size, type, op, root).
    pub(super) row_keys: std::collections::HashSet<RowKey>,
    pub(super) duplicate_rows: usize,
    /// More distinct rows than `MAX_ROWS`: the import is refused.
    pub(super) too_many_rows: bool,
    /// Rank lines already kept (the same line printed again adds nothing).
    pub(super) rank_keys: std::collections::HashSet<(usize, String, u32, Option<String>)>,
    pub(super) notes_suppressed: usize,
    /// The pieces so far of a row cut by alltoallv_perf's per-rank summary.
    pub(super) cut_row: String,
    /// NCCL_* settings the command lines above the table give (`-x NCCL_IB_HCA=...`,
    /// `NCCL_ALGO=Ring ./all_reduce_perf`, `export NCCL_...`): the last value of each.
    pub(super) env: std::collections::BTreeMap<String, String>,
    /// The sizes walked, from the banner (first) or the command line.
    pub(super) sizes: Option<crate::model::SizeRange>,
    /// Hosts a launcher's `-H` list names on the command line.
    pub(super) command_hosts: Vec<String>,
}

/// `NCCL_NAME=value` on a command line (quotes taken off the value).
fn nccl_setting() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &RE,
        r#"(?:^|[\s'"])(NCCL_[A-Z0-9_]+)=("[^"]*"|'[^']*'|[^\s'"]+)"#,
    )
}

/// What alltoallv_perf prints inside a row under NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1
/// (AlltoAllvGetBw runs after the row's start and before each placement's figures), followed
/// by `#   rank=` lines: the row's pieces are the text before it on each line.
const CUT_BY: &str = "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY:";

pub(super) type RowKey = (Option<Collective>, u64, String, Option<String>, i64);

/// The most distinct table rows an import holds. nccl-tests prints a few hundred per run at
/// most; a larger log is a concatenation to split, and holding it whole would cost memory
/// out of proportion to the file (a documented limit, exit 2 beyond it).
pub const MAX_ROWS: usize = 100_000;

/// The most notes an import keeps; the rest are counted.
const MAX_NOTES: usize = 50;

/// `mpirun -np P ./x_perf -t T -g G` runs P × T × G ranks.
pub(super) fn command_line_ranks(cmd: &str) -> Option<usize> {
    let tokens: Vec<&str> = cmd.split_whitespace().collect();
    let after = |names: &[&str]| -> Option<usize> {
        tokens
            .iter()
            .position(|t| names.contains(t))
            .and_then(|i| tokens.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    let perf = tokens.iter().position(|t| t.contains("_perf"))?;
    let launcher = &tokens[..perf];
    let np = launcher
        .iter()
        .position(|t| ["-np", "-n", "--np", "-N"].contains(t))
        .and_then(|i| launcher.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1);
    let g = after(&["-g", "--ngpus"]).unwrap_or(1);
    let t = after(&["-t", "--nthreads"]).unwrap_or(1);
    Some(np * g * t)
}

pub(super) fn is_error_line(t: &str) -> bool {
    t.contains("Test failure")
        || t.contains("Test CUDA failure")
        || t.contains("Test NCCL failure")
        || t.contains("NCCL WARN")
        || t.contains("unhandled")
        || t.contains("Test timeout")
        || t.contains("Aborted")
        || t.contains("Segmentation fault")
}

/// Where an nccl-tests line starts inside a line that launchers, loggers and containers
/// prefixed (any stack of them: Ray's `(worker, rank=N, pid=N)`, Open MPI's `[1,0]<stdout>:`,
/// `srun -l`'s `0: `, pdsh's `host: `, log timestamps): found by the shape of what nccl-tests
/// prints, not by a list of known prefixes. A `#` comment, or a row whose first two cells are
/// whole numbers and whose third is a type name, starting at a token boundary.
pub fn peel(text: &str) -> &str {
    let t = text.trim_start();
    if t.starts_with('#') || starts_row(t) {
        return t;
    }
    let boundary = |i: usize| {
        i == 0
            || t[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_whitespace() || matches!(c, ':' | ']' | ')' | '>' | '|'))
    };
    for (i, c) in t.char_indices() {
        if !boundary(i) {
            continue;
        }
        let rest = t[i..].trim_start();
        if (c == '#' || rest.starts_with('#')) && !rest.starts_with("#!") || starts_row(rest) {
            return rest;
        }
    }
    t
}

/// `size count type ...`: two whole numbers, then an nccl-tests type name.
fn starts_row(t: &str) -> bool {
    let mut tokens = t.split_whitespace();
    let number =
        |x: Option<&str>| x.is_some_and(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()));
    number(tokens.next())
        && number(tokens.next())
        && tokens.next().is_some_and(|ty| {
            Dtype::parse(ty).is_some()
                || matches!(ty, "f8e4m3" | "f8e5m2" | "fp8_e4m3" | "fp8_e5m2")
        })
}

impl Parsed {
    pub(super) fn note(&mut self, text: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(text);
        } else {
            self.notes_suppressed += 1;
        }
    }

    pub(super) fn feed(&mut self, line: &Line) {
        let t = line.text.trim();
        if t.is_empty() || line.raw.starts_with("# source:") {
            return;
        }
        if let Some(c) = nccl_version().captures(t) {
            self.nccl_version.get_or_insert_with(|| c[1].to_string());
        }
        if let Some(c) = nranks_info().captures(t) {
            self.info_nranks = c[1].parse().ok().or(self.info_nranks);
        }
        if is_error_line(t) && self.errors.len() < 50 {
            self.errors.push(format!("line {}: {}", line.number, t));
        }
        if let Some(rest) = t.strip_prefix('#') {
            self.feed_comment(rest.trim(), t, line);
            return;
        }
        if t.contains("NCCL INFO") || t.contains("NCCL WARN") {
            return;
        }
        let t = peel(t);
        if let Some(rest) = t.strip_prefix('#') {
            self.feed_comment(rest.trim(), t, line);
            return;
        }
        let whole;
        let t = match t.find(CUT_BY) {
            Some(at) => {
                self.cut_row.push_str(&t[..at]);
                self.cut_row.push(' ');
                return;
            }
            None if self.cut_row.is_empty() => t,
            None => {
                whole = std::mem::take(&mut self.cut_row) + t;
                whole.as_str()
            }
        };
        // The summary lines without their '#' (hand-copied, or a tool that strips comments):
        // read as nccl-tests prints them.
        if t.starts_with("Avg bus bandwidth") || t.starts_with("Out of bounds values") {
            self.feed_comment(t, t, line);
            return;
        }
        // A command line naming the binary (and, without a banner, the rank count), or
        // setting NCCL's variables for it.
        if !t.starts_with(|c: char| c.is_ascii_digit()) {
            for c in nccl_setting().captures_iter(t) {
                let value = c[2].trim_matches(['"', '\'']).to_string();
                self.env.insert(c[1].to_string(), value);
            }
            if let Some(c) = perf_name().captures(t) {
                if let Some(coll) = Collective::parse(&c[1]) {
                    self.named = Some(coll);
                }
                self.command_ranks = command_line_ranks(t);
                self.sizes = self.sizes.or_else(|| super::sizes::from_command(t));
                if self.command_hosts.is_empty() {
                    self.command_hosts = super::sizes::hosts_from_command(t);
                }
            }
            return;
        }
        self.feed_row(t, line);
    }

    pub(super) fn feed_comment(&mut self, rest: &str, t: &str, line: &Line) {
        if let Some(name) = rest.strip_prefix("Collective test starting:") {
            self.named = Collective::parse(name.trim());
            if self.named.is_none() {
                self.note(format!(
                    "line {}: unknown collective '{}'",
                    line.number,
                    name.trim()
                ));
            }
            return;
        }
        if let Some(v) = rest.strip_prefix("nccl-tests version") {
            self.tests_version = v.split_whitespace().next().map(str::to_string);
            return;
        }
        if let Some(v) = rest.strip_prefix("Avg bus bandwidth") {
            self.avg_busbw = v
                .trim_start_matches([' ', ':'])
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok());
            return;
        }
        if let Some(v) = rest.strip_prefix("Out of bounds values") {
            self.out_of_bounds = v
                .trim_start_matches([' ', ':'])
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok());
            return;
        }
        if rest.starts_with("nThread") {
            if let Some(r) = super::sizes::from_banner(rest) {
                self.sizes = Some(r);
            }
            let tok: Vec<&str> = rest.split_whitespace().collect();
            let get = |k: &str| {
                tok.iter()
                    .position(|t| *t == k)
                    .and_then(|i| tok.get(i + 1))
                    .and_then(|v| v.parse::<usize>().ok())
            };
            if let (Some(t), Some(g)) = (get("nThread"), get("nGpus")) {
                self.threads_gpus = Some(t * g);
            }
            return;
        }
        if let Some(c) = rank_line().captures(t) {
            let device = format!("{} [{}] {}", &c["dev"], &c["bus"], c["name"].trim());
            let info = RankInfo {
                rank: c[1].parse().unwrap_or(0),
                host: c["host"].to_string(),
                pid: c["pid"].parse().unwrap_or(0),
                device: Some(device.trim().to_string()),
                group: c
                    .name("group")
                    .and_then(|g| g.as_str().parse().ok())
                    .unwrap_or(0),
            };
            let key = (info.rank, info.host.clone(), info.pid, info.device.clone());
            if self.rank_keys.insert(key) {
                self.ranks.push(info);
            }
            return;
        }
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        if tokens.first() == Some(&"size") {
            match Layout::from_header(&tokens) {
                Some(layout) => {
                    self.headers_seen += 1;
                    self.layout = Some(layout);
                }
                None => self.note(format!(
                    "line {}: table header not understood: {rest}",
                    line.number
                )),
            }
        }
    }

    pub(super) fn feed_row(&mut self, t: &str, line: &Line) {
        // Timestamps (-S) are the only cells with ':' or '-' between digits; drop them.
        let tokens: Vec<&str> = t
            .split_whitespace()
            .filter(|x| {
                !(x.len() >= 8
                    && x.contains(['-', ':'])
                    && x.chars().next().is_some_and(|c| c.is_ascii_digit())
                    && x.parse::<f64>().is_err())
            })
            .collect();
        if tokens.len() < 2
            || tokens[0].parse::<u64>().is_err()
            || tokens[1].parse::<u64>().is_err()
        {
            return;
        }
        let layout = match &self.layout {
            Some(l) if l.width() == tokens.len() => l.clone(),
            Some(l) => {
                if tokens.iter().any(|x| x.ends_with(':')) {
                    self.truncated_at.get_or_insert(line.number);
                    self.note(format!(
                        "line {}: row interrupted by an error message; the run stopped here",
                        line.number
                    ));
                } else if tokens.len() < l.width() {
                    self.truncated_at.get_or_insert(line.number);
                    self.note(format!(
                        "line {}: row cut off after {} of {} cells",
                        line.number,
                        tokens.len(),
                        l.width()
                    ));
                } else {
                    self.note(format!(
                        "line {}: row has {} cells, the header {}; skipped",
                        line.number,
                        tokens.len(),
                        l.width()
                    ));
                }
                return;
            }
            None => match Layout::guess(&tokens) {
                Some(l) => {
                    self.note(format!("line {}: no table header before the first row; columns guessed from the row", line.number));
                    self.layout = Some(l.clone());
                    l
                }
                None => return,
            },
        };
        let cell = |name: &str| layout.pre.iter().position(|c| c == name).map(|i| tokens[i]);
        let half = |h: usize| -> Option<Half> {
            let base = layout.pre.len() + h * layout.half.len();
            let mut out = Half::default();
            for (i, name) in layout.half.iter().enumerate() {
                let v = tokens[base + i];
                match name.as_str() {
                    "time" | "cputime" => out.time_us = v.parse().ok()?,
                    "algbw" => out.algbw_gbps = v.parse().ok()?,
                    "busbw" => out.busbw_gbps = v.parse().ok()?,
                    "#wrong" | "wrong" => out.wrong = v.parse::<f64>().ok().map(|w| w as u64),
                    "error" => out.old_error = true,
                    "i_min" => out.iter_min_us = v.parse().ok(),
                    "i_max" => out.iter_max_us = v.parse().ok(),
                    _ => {}
                }
            }
            Some(out)
        };
        let (Some(h0), Some(h1)) = (half(0), half(1)) else {
            self.note(format!("line {}: non-numeric cells; skipped", line.number));
            return;
        };
        let row = Row {
            line: line.number,
            collective: self.named,
            size: tokens[0].parse().unwrap_or(0),
            count: tokens[1].parse().unwrap_or(0),
            dtype: cell("type").unwrap_or("float").to_string(),
            redop: cell("redop").map(str::to_string),
            root: cell("root").and_then(|r| r.parse().ok()).unwrap_or(-1),
            halves: [h0, h1],
        };
        let key = (
            row.collective,
            row.size,
            row.dtype.clone(),
            row.redop.clone(),
            row.root,
        );
        // A table printed again (zero-size rows legitimately repeat): keep the first.
        if !self.row_keys.insert(key) && row.size != 0 && self.headers_seen > 1 {
            self.duplicate_rows += 1;
            return;
        }
        if self.rows.len() >= MAX_ROWS {
            self.too_many_rows = true;
            return;
        }
        self.rows.push(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layouts() {
        let new: Vec<&str> =
            "size count type redop root time algbw busbw #wrong time algbw busbw #wrong"
                .split(' ')
                .collect();
        let l = Layout::from_header(&new).unwrap();
        assert_eq!(l.pre.len(), 5);
        assert_eq!(l.width(), 13);
        let old: Vec<&str> = "size count type time algbw busbw error time algbw busbw error"
            .split(' ')
            .collect();
        assert_eq!(
            Layout::from_header(&old).unwrap().pre,
            vec!["size", "count", "type"]
        );
        assert!(Layout::from_header(&["size", "count"]).is_none());
    }

    #[test]
    fn any_stack_of_prefixes_is_peeled_by_the_shape_of_the_line() {
        let row =
            "     8388608       2097152     float     sum      -1    36.07  232.57  435.12      0";
        for prefix in [
            "",
            "(RayTrainWorker pid=4242, ip=10.0.0.7) [1,0]<stdout>:",
            "(worker, rank=3, pid=99) [1,3]<stdout>:",
            "0: ",
            "node-a17: ",
            "2024-05-01T12:00:00.123456789Z stdout F ",
            "[2024-05-01 12:00:00,123] INFO | ",
        ] {
            let line = format!("{prefix}{row}");
            assert_eq!(peel(&line), row.trim_start(), "{prefix:?}");
            let header = format!("{prefix}#       size         count      type   redop");
            assert!(peel(&header).starts_with("#       size"), "{prefix:?}");
        }
        // Lines without a table stay as they are.
        assert_eq!(
            peel("mpirun -np 8 ./all_reduce_perf"),
            "mpirun -np 8 ./all_reduce_perf"
        );
        // A number pair without a type name is not a row (e.g. a date and a count).
        assert_eq!(peel("job 12 34 started"), "job 12 34 started");
    }
}

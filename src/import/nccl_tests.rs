//! nccl-tests output → run record: the text table in every variant seen in the field (old
//! `error` and new `#wrong` columns, with or without `redop`/`root`, tagged and prefixed lines,
//! interleaved NCCL INFO lines, duplicated headers, cut-off runs) and the `-J` JSON file.

use super::text::static_regex;
use super::text::{self, InputError, Line};
use crate::coll::{Collective, Placement};
use crate::dtype::{Dtype, RedOp};
use crate::model::{
    BackendInfo, Calibration, ImportInfo, Point, RankInfo, RunRecord, RunStatus, Source,
};
use crate::stats::{summarize, StopReason};
use regex::Regex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

pub const EXPECTED: &str = "nccl-tests output (the *_perf table, or its -J JSON file)";

fn rank_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &RE,
        r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$",
    )
}

fn perf_name() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"\b([a-z_]+?)_perf(?:_mpi)?\b")
}

fn nccl_version() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
}

fn nranks_info() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"\bn[Rr]anks (\d+)")
}

/// Column layout from a header line: the columns before the first `time`, then one half.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    pre: Vec<String>,
    half: Vec<String>,
}

impl Layout {
    fn from_header(tokens: &[&str]) -> Option<Layout> {
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
    fn guess(tokens: &[&str]) -> Option<Layout> {
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

    fn width(&self) -> usize {
        self.pre.len() + 2 * self.half.len()
    }
}

#[derive(Debug, Clone)]
struct Row {
    line: usize,
    collective: Option<Collective>,
    size: u64,
    count: u64,
    dtype: String,
    redop: Option<String>,
    root: i64,
    halves: [Half; 2],
}

#[derive(Debug, Clone, Copy, Default)]
struct Half {
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    wrong: Option<u64>,
    old_error: bool,
    /// -I: the fastest and slowest single iteration, µs.
    iter_min_us: Option<f64>,
    iter_max_us: Option<f64>,
}

/// Everything read from a text log, before it becomes a record.
#[derive(Default)]
struct Parsed {
    layout: Option<Layout>,
    named: Option<Collective>,
    rows: Vec<Row>,
    ranks: Vec<RankInfo>,
    nccl_version: Option<String>,
    tests_version: Option<String>,
    info_nranks: Option<usize>,
    threads_gpus: Option<usize>,
    avg_busbw: Option<f64>,
    out_of_bounds: Option<u64>,
    errors: Vec<String>,
    notes: Vec<String>,
    truncated_at: Option<usize>,
    headers_seen: usize,
    /// Ranks implied by a command line (`mpirun -np P ... -t T -g G`).
    command_ranks: Option<usize>,
}

/// `mpirun -np P ./x_perf -t T -g G` runs P × T × G ranks.
fn command_line_ranks(cmd: &str) -> Option<usize> {
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

fn is_error_line(t: &str) -> bool {
    t.contains("Test failure")
        || t.contains("Test CUDA failure")
        || t.contains("Test NCCL failure")
        || t.contains("NCCL WARN")
        || t.contains("unhandled")
        || t.contains("Test timeout")
        || t.contains("Aborted")
        || t.contains("Segmentation fault")
}

impl Parsed {
    fn feed(&mut self, line: &Line) {
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
        // A command line naming the binary (and, without a banner, the rank count).
        if !t.starts_with(|c: char| c.is_ascii_digit()) {
            if let Some(c) = perf_name().captures(t) {
                if let Some(coll) = Collective::parse(&c[1]) {
                    self.named = Some(coll);
                }
                self.command_ranks = command_line_ranks(t);
            }
            return;
        }
        self.feed_row(t, line);
    }

    fn feed_comment(&mut self, rest: &str, _t: &str, line: &Line) {
        if let Some(name) = rest.strip_prefix("Collective test starting:") {
            self.named = Collective::parse(name.trim());
            if self.named.is_none() {
                self.notes.push(format!(
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
        if let Some(c) = rank_line().captures(line.text.trim()) {
            let device = format!("{} [{}] {}", &c[4], &c[5], c[6].trim());
            self.ranks.push(RankInfo {
                rank: c[1].parse().unwrap_or(0),
                host: c[3].to_string(),
                pid: c[2].parse().unwrap_or(0),
                device: Some(device.trim().to_string()),
            });
            return;
        }
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        if tokens.first() == Some(&"size") {
            match Layout::from_header(&tokens) {
                Some(layout) => {
                    self.headers_seen += 1;
                    self.layout = Some(layout);
                }
                None => self.notes.push(format!(
                    "line {}: table header not understood: {rest}",
                    line.number
                )),
            }
        }
    }

    fn feed_row(&mut self, t: &str, line: &Line) {
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
                    self.notes.push(format!(
                        "line {}: row interrupted by an error message; the run stopped here",
                        line.number
                    ));
                } else if tokens.len() < l.width() {
                    self.truncated_at.get_or_insert(line.number);
                    self.notes.push(format!(
                        "line {}: row cut off after {} of {} cells",
                        line.number,
                        tokens.len(),
                        l.width()
                    ));
                } else {
                    self.notes.push(format!(
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
                    self.notes.push(format!("line {}: no table header before the first row; columns guessed from the row", line.number));
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
            self.notes
                .push(format!("line {}: non-numeric cells; skipped", line.number));
            return;
        };
        self.rows.push(Row {
            line: line.number,
            collective: self.named,
            size: tokens[0].parse().unwrap_or(0),
            count: tokens[1].parse().unwrap_or(0),
            dtype: cell("type").unwrap_or("float").to_string(),
            redop: cell("redop").map(str::to_string),
            root: cell("root").and_then(|r| r.parse().ok()).unwrap_or(-1),
            halves: [h0, h1],
        });
    }
}

/// `size / (count × type size)` when every row agrees: 1 for all_reduce, broadcast, reduce and
/// sendrecv; the rank count for all_gather, reduce_scatter, alltoall, gather and scatter
/// (nccl-tests prints the larger buffer's bytes, `count` is per rank). Exact, unlike the
/// bandwidth ratio, and there even when the bandwidths print as 0.
fn size_ratio(rows: &[&Row]) -> Option<u64> {
    let mut k = None;
    for r in rows.iter().filter(|r| r.count > 0) {
        let elem = r.count * Dtype::parse(&r.dtype)?.size_bytes() as u64;
        if r.size % elem != 0 {
            return None;
        }
        match k {
            None => k = Some(r.size / elem),
            Some(prev) if prev != r.size / elem => return None,
            Some(_) => {}
        }
    }
    k
}

/// Which collective a table is, from the columns when the log does not name it: a reduction op
/// and a root, the size/count ratio (above), the ratio of busbw to algbw (nccl-tests' factor
/// 2(n-1)/n, (n-1)/n or 1), and that nccl-tests never checks sendrecv and alltoall in place
/// (their in-place #wrong is N/A while out-of-place is a count).
fn infer_collective(rows: &[&Row]) -> (Collective, String) {
    let has_op = rows
        .iter()
        .any(|r| r.redop.as_deref().is_some_and(|o| o != "none"));
    let rooted = rows.iter().any(|r| r.root >= 0);
    let checked = rows.iter().filter(|r| r.halves[0].wrong.is_some()).count();
    let inplace_unchecked = checked > 0
        && rows
            .iter()
            .filter(|r| r.halves[0].wrong.is_some() && r.halves[1].wrong.is_none())
            .count()
            == checked;
    let inplace_checked = checked > 0 && !inplace_unchecked;
    // Two printed decimals: only bandwidths of 1 GB/s and more give the ratio to 1%.
    let ratio = rows
        .iter()
        .filter(|r| r.halves[0].algbw_gbps >= 1.0)
        .max_by_key(|r| r.size)
        .map(|r| r.halves[0].busbw_gbps / r.halves[0].algbw_gbps);
    let k = size_ratio(rows);
    let unknown = |why: String| (Collective::Unknown, format!("unknown: {why}"));
    match (has_op, rooted, ratio) {
        (true, true, _) => (
            Collective::Reduce,
            "inferred: a reduction op and a root".into(),
        ),
        (false, true, _) if k.is_some_and(|k| k > 1) => unknown(format!(
            "a root, no reduction op and size = count x {} ranks: gather or scatter",
            k.unwrap_or(0)
        )),
        (false, true, _) => (
            Collective::Broadcast,
            "inferred: a root and no reduction op".into(),
        ),
        (true, false, _) if k.is_some_and(|k| k > 1) => (
            Collective::ReduceScatter,
            format!(
                "inferred: reduction op, size = count x {} ranks",
                k.unwrap_or(0)
            ),
        ),
        (true, false, Some(r)) if (r - 1.0).abs() < 0.02 && inplace_unchecked => (
            Collective::Sendrecv,
            format!("inferred: busbw/algbw = {r:.2} and in-place not checked (sendrecv)"),
        ),
        (true, false, Some(r)) if r >= 0.98 => (
            Collective::AllReduce,
            format!("inferred: reduction op, busbw/algbw = {r:.2} (2(n-1)/n)"),
        ),
        (true, false, _) if k == Some(1) && inplace_checked => (
            Collective::AllReduce,
            "inferred: reduction op, size = count x type size, in-place checked (sendrecv never is)"
                .into(),
        ),
        (true, false, Some(r)) if r > 0.0 && k != Some(1) => (
            Collective::ReduceScatter,
            format!("inferred: reduction op, busbw/algbw = {r:.2} ((n-1)/n)"),
        ),
        (false, false, _) if k.is_some_and(|k| k > 1) && inplace_unchecked => (
            Collective::Alltoall,
            format!(
                "inferred: no op, size = count x {} ranks, in-place not checked (alltoall)",
                k.unwrap_or(0)
            ),
        ),
        (false, false, _) if k.is_some_and(|k| k > 1) && inplace_checked => (
            Collective::AllGather,
            format!(
                "inferred: no op, size = count x {} ranks, in-place checked (all_gather)",
                k.unwrap_or(0)
            ),
        ),
        (false, false, Some(r)) if r < 0.98 && inplace_unchecked => (
            Collective::Alltoall,
            format!("inferred: no op, busbw/algbw = {r:.2} and in-place not checked (alltoall)"),
        ),
        (false, false, Some(r)) if r < 0.98 && checked > 0 => (
            Collective::AllGather,
            format!("inferred: no op, busbw/algbw = {r:.2}, in-place checked (all_gather)"),
        ),
        _ => unknown("the log does not name it and the columns do not tell".into()),
    }
}

/// The rank count from the size/count ratio, for collectives whose printed size spans all ranks.
fn nranks_from_size(coll: Collective, rows: &[&Row]) -> Option<usize> {
    let spans_ranks = matches!(
        coll,
        Collective::AllGather
            | Collective::ReduceScatter
            | Collective::Alltoall
            | Collective::Gather
            | Collective::Scatter
    );
    size_ratio(rows)
        .filter(|&k| spans_ranks && k > 1)
        .map(|k| k as usize)
}

fn nranks_from_ratio(coll: Collective, rows: &[&Row]) -> Option<usize> {
    let r = rows
        .iter()
        .filter(|r| r.halves[0].algbw_gbps >= 0.1)
        .max_by_key(|r| r.size)
        .map(|r| r.halves[0].busbw_gbps / r.halves[0].algbw_gbps)?;
    let n = match coll {
        Collective::AllReduce if r < 1.999 => 2.0 / (2.0 - r),
        Collective::AllGather | Collective::ReduceScatter | Collective::Alltoall if r < 0.999 => {
            1.0 / (1.0 - r)
        }
        _ => return None,
    };
    (n.is_finite() && n >= 1.0).then(|| n.round() as usize)
}

fn point(
    row: &Row,
    coll: Collective,
    nranks: usize,
    h: usize,
    notes: &mut Vec<String>,
) -> Option<Point> {
    let Some(dtype) = Dtype::parse(&row.dtype) else {
        notes.push(format!(
            "line {}: data type '{}' is not one ncclprobe models; row skipped",
            row.line, row.dtype
        ));
        return None;
    };
    let redop = match row.redop.as_deref() {
        None | Some("none") => None,
        Some(op) => {
            let parsed = RedOp::parse(op);
            if parsed.is_none() {
                notes.push(format!(
                    "line {}: reduction op '{op}' kept as none",
                    row.line
                ));
            }
            parsed
        }
    };
    let half = row.halves[h];
    let time_s = half.time_us * 1e-6;
    let mut stats = summarize(&[time_s]);
    // -I: nccl-tests timed each iteration; keep the extremes it printed.
    if let (Some(lo), Some(hi)) = (half.iter_min_us, half.iter_max_us) {
        stats.min_s = lo * 1e-6;
        stats.max_s = hi * 1e-6;
    }
    Some(Point {
        collective: coll,
        nranks,
        dtype,
        redop,
        root: row.root,
        placement: if h == 0 {
            Placement::OutOfPlace
        } else {
            Placement::InPlace
        },
        size_bytes: row.size,
        count: row.count,
        time_s,
        algbw_bytes_per_s: half.algbw_gbps * 1e9,
        busbw_bytes_per_s: half.busbw_gbps * 1e9,
        wrong: half.wrong,
        iters_per_sample: 0,
        samples_s: vec![time_s],
        stats,
        stop_reason: StopReason::Fixed,
        per_rank_time_s: Vec::new(),
        nccl_model_time_s: None,
    })
}

fn empty_record(path: &Path, format: &str) -> RunRecord {
    RunRecord {
        schema_version: crate::model::SCHEMA_VERSION,
        tool: crate::buildinfo::tool_info(),
        source: Source::Imported,
        status: RunStatus::Complete,
        started_at: crate::sweep::now_rfc3339(),
        finished_at: None,
        command_line: std::env::args().collect(),
        backend: BackendInfo {
            name: "nccl".into(),
            reason: format!("imported from {}", path.display()),
            nranks: 0,
            hosts: Vec::new(),
            ranks: Vec::new(),
            library_versions: BTreeMap::new(),
        },
        env: BTreeMap::new(),
        settings: None,
        calibration: Calibration::default(),
        topology: None,
        notes: Vec::new(),
        points: Vec::new(),
        headlines: Vec::new(),
        import: Some(ImportInfo {
            file: path.display().to_string(),
            format: format.into(),
            ..Default::default()
        }),
        error: None,
    }
}

/// Import nccl-tests' text output.
pub fn import_text(path: &Path) -> Result<RunRecord, InputError> {
    let mut p = Parsed::default();
    text::for_each_line(path, EXPECTED, |line| p.feed(&line))?;
    build(path, p)
}

fn build(path: &Path, mut p: Parsed) -> Result<RunRecord, InputError> {
    let name = path.display().to_string();
    if p.rows.is_empty() && p.headers_seen == 0 && p.ranks.is_empty() && p.errors.is_empty() {
        return Err(InputError::WrongKind {
            path: name,
            reason: "no nccl-tests table, header or device lines found".into(),
            expected: EXPECTED.into(),
        });
    }
    // A second process printing the same table (non-MPI builds under mpirun): keep the first.
    // (Zero-size rows legitimately repeat: small sizes round down to 0 elements per rank.)
    let before = p.rows.len();
    if p.headers_seen > 1 {
        let mut seen = std::collections::HashSet::new();
        p.rows.retain(|r| {
            r.size == 0
                || seen.insert((
                    r.collective,
                    r.size,
                    r.dtype.clone(),
                    r.redop.clone(),
                    r.root,
                ))
        });
    }
    if p.rows.len() < before {
        p.notes.push(format!(
            "{} duplicated rows dropped (the table was printed more than once)",
            before - p.rows.len()
        ));
    }
    let mut record = empty_record(path, "nccl-tests-text");
    let mut info = record.import.take().unwrap_or_default();
    let rows: Vec<&Row> = p.rows.iter().collect();
    // Ranks: "# Rank" lines when they are a consistent 0..n-1 set.
    let mut rank_ids: Vec<usize> = p.ranks.iter().map(|r| r.rank).collect();
    rank_ids.sort_unstable();
    rank_ids.dedup();
    let ranks_consistent = !rank_ids.is_empty()
        && rank_ids.len() == p.ranks.len()
        && rank_ids.last() == Some(&(rank_ids.len() - 1));
    if !ranks_consistent && !p.ranks.is_empty() {
        p.notes.push("the '# Rank' lines repeat rank numbers: separate processes each printed their own (a non-MPI build under a launcher?)".into());
    }

    let mut groups: Vec<Option<Collective>> = Vec::new();
    for r in &rows {
        if !groups.contains(&r.collective) {
            groups.push(r.collective);
        }
    }
    let mut froms = Vec::new();
    let mut nranks_froms = Vec::new();
    for group in groups {
        let g_rows: Vec<&Row> = rows
            .iter()
            .copied()
            .filter(|r| r.collective == group)
            .collect();
        let (coll, from) = match group {
            Some(c) => (c, "named in the log".to_string()),
            None => infer_collective(&g_rows),
        };
        let (nranks, nfrom) = if ranks_consistent {
            (p.ranks.len(), "the '# Rank' lines".to_string())
        } else if let Some(n) = nranks_from_size(coll, &g_rows) {
            (n, "size / (count x type size)".to_string())
        } else if let Some(n) = nranks_from_ratio(coll, &g_rows) {
            (n, "busbw/algbw of the largest size".to_string())
        } else if let Some(n) = p.info_nranks {
            (n, "NCCL INFO nranks".to_string())
        } else if let Some(n) = p.command_ranks {
            (n, "the command line (-np × -t × -g)".to_string())
        } else if let Some(n) = p.threads_gpus {
            (n, "nThread × nGpus (a lower bound)".to_string())
        } else {
            (0, "unknown".to_string())
        };
        froms.push(format!("{coll}: {from}"));
        nranks_froms.push(nfrom);
        for row in g_rows {
            for h in 0..2 {
                if let Some(pt) = point(row, coll, nranks, h, &mut p.notes) {
                    record.points.push(pt);
                }
            }
        }
        record.backend.nranks = record.backend.nranks.max(nranks);
    }
    if p.rows.iter().any(|r| r.halves[0].old_error) {
        p.notes.push("old nccl-tests format: its 'error' column is a maximum relative error, not a count; #wrong left empty".into());
    }
    if ranks_consistent {
        record.backend.nranks = record.backend.nranks.max(p.ranks.len());
    }
    record.backend.ranks = p.ranks.clone();
    let mut hosts: Vec<String> = p.ranks.iter().map(|r| r.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    record.backend.hosts = hosts;
    if let Some(v) = &p.nccl_version {
        record
            .backend
            .library_versions
            .insert("nccl".into(), v.clone());
    }
    if let Some(v) = &p.tests_version {
        record
            .backend
            .library_versions
            .insert("nccl-tests".into(), v.clone());
    }
    let footer_seen = p.avg_busbw.is_some() || p.out_of_bounds.is_some();
    info.truncated = p.truncated_at.is_some() || !footer_seen;
    if p.truncated_at.is_none() && !footer_seen {
        p.notes.push("no '# Out of bounds' / '# Avg bus bandwidth' footer: the output ends before the run did".into());
    }
    info.nccl_tests_version = p.tests_version.clone();
    info.collective_from = if froms.is_empty() {
        "no rows".into()
    } else {
        froms.join("; ")
    };
    info.nranks_from = nranks_froms
        .first()
        .cloned()
        .unwrap_or_else(|| "no rows".into());
    info.reported_avg_busbw_gbps = p.avg_busbw;
    info.reported_out_of_bounds = p.out_of_bounds;
    info.errors = p.errors.clone();
    record.status = if record.points.is_empty() && !info.errors.is_empty() {
        RunStatus::Failed
    } else if info.truncated {
        RunStatus::Truncated
    } else if record.total_wrong() > 0 || p.out_of_bounds.unwrap_or(0) > 0 {
        RunStatus::CheckFailed
    } else {
        RunStatus::Complete
    };
    if !info.errors.is_empty() {
        record.error = info.errors.first().cloned();
    }
    record.notes = p.notes;
    record.headlines = crate::model::headlines(&record.points);
    record.import = Some(info);
    Ok(record)
}

/// Import nccl-tests' `-J` JSON (format version 3: string booleans, padded root strings).
pub fn import_json(path: &Path) -> Result<RunRecord, InputError> {
    use serde_json::Value;
    let name = path.display().to_string();
    let text = std::fs::read(path).map_err(|e| InputError::Unreadable {
        path: name.clone(),
        reason: e.to_string(),
    })?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| InputError::WrongKind {
        path: name.clone(),
        reason: format!("not JSON ({e})"),
        expected: EXPECTED.into(),
    })?;
    let results =
        v.get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| InputError::WrongKind {
                path: name.clone(),
                reason: "JSON without a 'results' list".into(),
                expected: EXPECTED.into(),
            })?;
    let num = |x: Option<&Value>| -> Option<f64> {
        match x? {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    };
    let text_of = |x: Option<&Value>| x.and_then(Value::as_str).map(|s| s.trim().to_string());
    let argv0 = v
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    let named = perf_name()
        .captures(argv0)
        .and_then(|c| Collective::parse(&c[1]));
    let devices = v
        .pointer("/config/devices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ranks: Vec<RankInfo> = devices
        .iter()
        .map(|d| RankInfo {
            rank: num(d.get("rank")).unwrap_or(0.0) as usize,
            host: text_of(d.get("hostname")).unwrap_or_default(),
            pid: num(d.get("pid")).unwrap_or(0.0) as u32,
            device: text_of(d.get("device_info")),
        })
        .collect();
    let mut parsed = Parsed {
        ranks,
        named,
        ..Default::default()
    };
    for (i, r) in results.iter().enumerate() {
        let half = |key: &str| -> Option<Half> {
            let h = r.get(key)?;
            Some(Half {
                time_us: num(h.get("time")).or_else(|| num(h.get("cpu_time")))?,
                algbw_gbps: num(h.get("alg_bw")).unwrap_or(0.0),
                busbw_gbps: num(h.get("bus_bw")).unwrap_or(0.0),
                wrong: num(h.get("nwrong")).map(|w| w as u64),
                ..Half::default()
            })
        };
        let (Some(h0), Some(h1)) = (half("out_of_place"), half("in_place")) else {
            parsed.notes.push(format!(
                "results[{i}]: missing out_of_place/in_place times; skipped"
            ));
            continue;
        };
        parsed.rows.push(Row {
            line: i + 1,
            collective: named,
            size: num(r.get("size")).unwrap_or(0.0) as u64,
            count: num(r.get("count")).unwrap_or(0.0) as u64,
            dtype: text_of(r.get("type")).unwrap_or_else(|| "float".into()),
            redop: text_of(r.get("redop")),
            root: num(r.get("root")).unwrap_or(-1.0) as i64,
            halves: [h0, h1],
        });
    }
    if let Some(nv) = num(v.get("nccl_version")) {
        let code = nv as u64;
        parsed.nccl_version = Some(format!(
            "{}.{}.{}",
            code / 10000,
            (code / 100) % 100,
            code % 100
        ));
    }
    parsed.avg_busbw = num(v.pointer("/average_bus_bandwidth/bandwidth"));
    parsed.out_of_bounds = num(v.pointer("/out_of_bounds/count")).map(|c| c as u64);
    if let Some(errs) = v.get("errors").and_then(Value::as_array) {
        parsed.errors = errs
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    parsed.headers_seen = 1;
    let mut record = build(path, parsed)?;
    if let Some(info) = record.import.as_mut() {
        info.format = "nccl-tests-json".into();
        // The JSON file is written at the end of the run: a missing end_time means it was cut.
        info.truncated = v.get("end_time").is_none();
    }
    Ok(record)
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
}

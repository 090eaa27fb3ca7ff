//! `nvidia-smi topo -m` as posted: old (`SOC`) and new (`SYS`, `NODE`) legends, NIC rows and the
//! NIC legend, CPU/NUMA affinity and GPU NUMA ID columns, tabs or spaces, and whatever paste
//! corruption leaves sound. Also the `topo -p2p` matrix (OK / NS) when it follows.

use super::input::html;
use super::text::{self, InputError, Line};
use std::path::Path;

pub use crate::documents::topology::{distance, normalise_link, DeviceInfo, Topology};

pub const EXPECTED: &str = "`nvidia-smi topo -m` output";

fn p2p_code(code: &str) -> bool {
    matches!(
        code,
        "X" | "OK" | "NS" | "CNS" | "GNS" | "TNS" | "NS*" | "U"
    )
}

fn looks_like_device(token: &str) -> bool {
    let t = token.trim();
    let digits_tail = |prefix: &str| {
        t.strip_prefix(prefix)
            .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
    };
    digits_tail("GPU")
        || digits_tail("NIC")
        || (t.contains('_')
            && t.rsplit('_')
                .next()
                .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
            && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
}

/// The most devices (matrix rows) a topology holds: NVL72 racks list 72 GPUs and their NICs;
/// a longer "matrix" is a concatenation or not a matrix, refused rather than held.
pub const MAX_DEVICES: usize = 512;

/// The most problems kept (the rest are counted).
const MAX_PROBLEMS: usize = 100;

#[derive(Default)]
struct Parser {
    topo: Topology,
    /// Columns of the matrix being read, and the affinity column names after them.
    columns: Vec<String>,
    extra: Vec<String>,
    in_p2p: bool,
    saw_soc: bool,
    matrix_rows: usize,
    /// The matrix's rows (cells, line number), laid out against the columns at the end: the
    /// header alone cannot be trusted (labels that run together).
    pending: Vec<(Vec<String>, usize)>,
    /// The matrix header's columns and affinity titles (a later `-p2p` header replaces
    /// `columns` and `extra`).
    matrix_columns: Vec<String>,
    matrix_extra: Vec<String>,
    /// The last line before the first row that was not read as a header: a header whose
    /// labels run together (`GPU0GPU1GPU2NIC0CPU Affinity`).
    header_candidate: Option<String>,
    /// Why the matrix cannot be read at all (a device named twice): one device per label, or
    /// links would be attributed to the wrong GPU.
    refused: Option<String>,
}

/// The first label that appears twice in `labels`.
fn repeated(labels: &[String]) -> Option<&String> {
    labels
        .iter()
        .enumerate()
        .find(|(i, l)| labels[..*i].contains(l))
        .map(|(_, l)| l)
}

fn cells(line: &str) -> Vec<String> {
    if line.contains('\t') {
        line.split('\t').map(|c| c.trim().to_string()).collect()
    } else {
        line.split_whitespace().map(str::to_string).collect()
    }
}

/// Device labels in a header whose labels ran together: GPUn, NICn, and old NIC names
/// (`mlx5_0`).
fn header_label_re() -> &'static regex::Regex {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    text::static_regex(&R, r"GPU\d+|NIC\d+|[A-Za-z][A-Za-z0-9]*?_\d+")
}

impl Parser {
    fn feed(&mut self, line: &Line) {
        let t = line.text.trim_end();
        if t.trim().is_empty() || line.raw.starts_with("# source:") {
            return;
        }
        let trimmed = t.trim();
        // NIC legend: "  NIC0: mlx5_0".
        if let Some((name, value)) = trimmed.split_once(':') {
            if name.starts_with("NIC")
                && looks_like_device(name)
                && !value.trim().is_empty()
                && !value.contains('=')
            {
                self.topo
                    .nic_names
                    .insert(name.to_string(), value.trim().to_string());
                return;
            }
        }
        if trimmed.starts_with("SOC") && trimmed.contains('=') {
            self.saw_soc = true;
        }
        let c = cells(t);
        let nonempty: Vec<&String> = c.iter().filter(|x| !x.is_empty()).collect();
        if nonempty.is_empty() {
            return;
        }
        // A header: device names, then (maybe) the affinity titles.
        let devices_in_line: Vec<String> = nonempty
            .iter()
            .take_while(|x| looks_like_device(x))
            .map(|x| x.to_string())
            .collect();
        let rest: Vec<&String> = nonempty
            .iter()
            .skip(devices_in_line.len())
            .copied()
            .collect();
        let rest_is_titles = rest.iter().all(|x| {
            [
                "CPU",
                "NUMA",
                "GPU",
                "Affinity",
                "ID",
                "CPU Affinity",
                "NUMA Affinity",
                "GPU NUMA ID",
            ]
            .contains(&x.as_str())
        });
        if !devices_in_line.is_empty()
            && rest_is_titles
            && (devices_in_line.len() > 1 || !rest.is_empty())
        {
            let joined = rest
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            self.extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
                .iter()
                .filter(|title| joined.contains(*title))
                .map(|s| s.to_string())
                .collect();
            self.in_p2p = self.matrix_rows > 0;
            if let Some(label) = repeated(&devices_in_line) {
                self.refuse(line, format!("the header names {label} twice"));
            }
            self.columns = devices_in_line;
            if !self.in_p2p {
                self.matrix_columns = self.columns.clone();
                self.matrix_extra = self.extra.clone();
            }
            return;
        }
        let row_like = looks_like_device(nonempty[0])
            && nonempty[1..]
                .iter()
                .take(2)
                .any(|x| x.as_str() == "X" || normalise_link(x).is_some());
        if !row_like {
            if self.matrix_rows == 0 {
                self.header_candidate = Some(trimmed.to_string());
            }
            return;
        }
        if self.in_p2p {
            if self.topo.p2p.len() < MAX_DEVICES * MAX_DEVICES {
                self.row(&c, line.number);
            }
        } else {
            self.matrix_rows += 1;
            let label = nonempty[0];
            if self
                .pending
                .iter()
                .any(|(c, _)| c.iter().find(|x| !x.is_empty()) == Some(label))
            {
                self.refuse(line, format!("a second row for {label}"));
            }
            if self.pending.len() < MAX_DEVICES {
                self.pending.push((c, line.number));
            }
        }
    }

    /// Keep the first reason the matrix cannot be read, with the line that gave it.
    fn refuse(&mut self, line: &Line, what: String) {
        if self.refused.is_none() {
            let text: String = line
                .text
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(120)
                .collect();
            self.refused = Some(format!(
                "line {}: {what} (`{text}`): each device has one row and one column",
                line.number
            ));
        }
    }

    /// The matrix's columns: the header's, or — when the header's labels run together and do
    /// not split into the rows' labels — the rows' own labels, which must then line up (one
    /// row per column, `X` on the diagonal) or the matrix is refused.
    fn lay_out(&mut self) -> Result<(), String> {
        if self.matrix_rows > MAX_DEVICES {
            return Err(format!(
                "{} matrix rows: more than the {MAX_DEVICES} devices a topology can hold (several matrices pasted together?)",
                self.matrix_rows
            ));
        }
        let labels: Vec<String> = self
            .pending
            .iter()
            .filter_map(|(c, _)| c.iter().find(|x| !x.is_empty()).cloned())
            .collect();
        // A header that names the rows but fewer columns than they have link cells lost
        // labels (run into their neighbours or into the affinity titles).
        let widest = self
            .pending
            .iter()
            .map(|(c, _)| {
                c.iter()
                    .filter(|x| !x.is_empty())
                    .skip(1)
                    .take_while(|x| normalise_link(x).is_some())
                    .count()
            })
            .max()
            .unwrap_or(0);
        let header_ok = !self.matrix_columns.is_empty()
            && labels.iter().all(|l| self.matrix_columns.contains(l))
            && widest <= self.matrix_columns.len();
        let strict = !header_ok;
        if strict {
            let header = self
                .header_candidate
                .as_deref()
                .map(|h| h.split_whitespace().collect::<String>())
                .unwrap_or_else(|| self.matrix_columns.concat());
            self.matrix_columns = self.columns_from_diagonal(&header)?;
            self.matrix_extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
                .iter()
                .filter(|t| header.contains(&t.replace(' ', "")))
                .map(|t| t.to_string())
                .collect();
            self.topo.notes.push(format!(
                "the header's labels run together ({}…); the columns were placed by the X (self) diagonal of the rows",
                header.chars().take(24).collect::<String>()
            ));
        }
        self.topo.devices = self.matrix_columns.clone();
        let p2p_columns = std::mem::replace(&mut self.columns, self.matrix_columns.clone());
        let p2p_extra = std::mem::replace(&mut self.extra, self.matrix_extra.clone());
        let was_p2p = std::mem::replace(&mut self.in_p2p, false);
        let problems_before = self.topo.problems.len();
        for (c, number) in std::mem::take(&mut self.pending) {
            self.row(&c, number);
        }
        self.columns = p2p_columns;
        self.extra = p2p_extra;
        self.in_p2p = was_p2p;
        if strict {
            let n = self.matrix_columns.len();
            // Every row states a link to every other column and X (no link) to itself.
            let misaligned = labels.iter().find(|l| {
                let stated = self.topo.links.iter().filter(|(f, _, _)| f == *l).count();
                self.topo.link(l, l).is_some() || stated + 1 != n
            });
            if let Some(l) = misaligned {
                return Err(format!(
                    "row {l} does not line up with the columns taken from the rows (a square matrix with X on the diagonal); refusing to guess"
                ));
            }
            if self.topo.problems.len() > problems_before {
                return Err(format!(
                    "the matrix does not line up with the columns taken from the rows: {}",
                    self.topo.problems[problems_before]
                ));
            }
        }
        Ok(())
    }

    /// The matrix's columns when the header cannot be split (labels that ran together, as
    /// `NIC0NIC1NIC2` or `NIC11NIC12`): each row's `X` (self) cell is its own column, so the
    /// rows place themselves; columns without a row (NICs cut from the paste) take the
    /// header's labels, read in order from the run-together text. Rows must place themselves
    /// in order and agree with the header where it names their column, or the matrix is
    /// refused rather than laid out wrong.
    fn columns_from_diagonal(&self, header: &str) -> Result<Vec<String>, String> {
        let mut placed: Vec<(String, usize)> = Vec::new();
        let mut width = 0;
        for (c, _) in &self.pending {
            let start = c.iter().position(|x| !x.is_empty()).unwrap_or(0);
            let links: Vec<&String> = c[start + 1..]
                .iter()
                .filter(|x| !x.is_empty())
                .take_while(|x| normalise_link(x).is_some())
                .collect();
            let own = links.iter().position(|x| x.trim() == "X");
            let Some(own) = own else {
                return Err(format!(
                    "row {} has no X (self) cell; not a matrix ncclprobe can line up",
                    c[start]
                ));
            };
            if placed.last().is_some_and(|(_, p)| *p >= own) {
                return Err(format!(
                    "row {} does not line up with the rows above it (its X is not right of theirs); refusing to guess",
                    c[start]
                ));
            }
            width = width.max(links.len());
            placed.push((c[start].clone(), own));
        }
        let named: Vec<&str> = header_label_re()
            .find_iter(header)
            .map(|m| m.as_str())
            .collect();
        let mut columns: Vec<Option<String>> = vec![None; width];
        for (label, at) in &placed {
            if named.len() > *at && named[*at] != label {
                return Err(format!(
                    "row {label} does not line up with the header, which names {} in its column; refusing to guess",
                    named[*at]
                ));
            }
            columns[*at] = Some(label.clone());
        }
        columns
            .into_iter()
            .enumerate()
            .map(|(j, c)| {
                c.or_else(|| named.get(j).map(|s| s.to_string())).ok_or_else(|| {
                    format!(
                        "column {} has no row and the header does not name it; not a matrix ncclprobe can line up",
                        j + 1
                    )
                })
            })
            .collect()
    }

    fn row(&mut self, c: &[String], number: usize) {
        // Tab-split rows keep empty cells; the first non-empty cell is the device.
        let start = c.iter().position(|x| !x.is_empty()).unwrap_or(0);
        let name = c[start].clone();
        let cells: Vec<&String> = if c.len() > 1 && c.iter().any(|x| x.is_empty()) {
            c[start + 1..].iter().collect()
        } else {
            c[start + 1..].iter().filter(|x| !x.is_empty()).collect()
        };
        let n = self.columns.len();
        if self.in_p2p {
            for (j, code) in cells.iter().take(n).enumerate() {
                if p2p_code(code) && code.as_str() != "X" {
                    self.topo
                        .p2p
                        .push((name.clone(), self.columns[j].clone(), code.to_string()));
                }
            }
            return;
        }
        let mut read = 0;
        for (j, code) in cells.iter().take(n).enumerate() {
            if code.as_str() == "SOC" {
                self.saw_soc = true;
            }
            match normalise_link(code) {
                Some(l) if l == "X" => {
                    if self.columns[j] != name {
                        self.topo.problems.push(format!(
                            "line {number}: {name} has X (self) in column {}",
                            self.columns[j]
                        ));
                    }
                    read += 1;
                }
                Some(l) => {
                    self.topo
                        .links
                        .push((name.clone(), self.columns[j].clone(), l));
                    read += 1;
                }
                None if code.is_empty() => {
                    self.topo.problems.push(format!(
                        "line {number}: {name} → {}: empty cell",
                        self.columns[j]
                    ));
                }
                None => {
                    self.topo.problems.push(format!(
                        "line {number}: {name} → {}: '{code}' is not a link code",
                        self.columns[j]
                    ));
                }
            }
        }
        if cells.len() < n {
            self.topo.problems.push(format!(
                "line {number}: {name} has {} of {n} link cells (cut off?)",
                cells.len().min(read.max(cells.len()))
            ));
        }
        // Affinity cells: empty ones (tab-separated pastes) are dropped; when fewer values than
        // titles remain, they belong to the last titles (nvidia-smi fills GPU NUMA ID with N/A
        // even where the affinities are empty).
        let tail: Vec<&str> = cells
            .iter()
            .skip(n)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .collect();
        let skip_titles = self.extra.len().saturating_sub(tail.len());
        let mut info = DeviceInfo::default();
        for (title, v) in self.extra.iter().skip(skip_titles).zip(tail.iter()) {
            match title.as_str() {
                "CPU Affinity" => info.cpu_affinity = Some(v.to_string()),
                "NUMA Affinity" => info.numa_affinity = Some(v.to_string()),
                _ => info.gpu_numa_id = Some(v.to_string()),
            }
        }
        if !self.topo.devices.contains(&name) {
            self.topo.devices.push(name.clone());
        }
        self.topo.info.insert(name, info);
    }
}

pub fn parse_file(path: &Path) -> Result<Topology, InputError> {
    from_input(text::Input::open(path)?)
}

/// A matrix from an input opened once.
pub fn from_input(input: text::Input) -> Result<Topology, InputError> {
    let name = input.name.clone();
    let mut p = Parser::default();
    let html = html::looks_like_html(&input.head_lines(400));
    input.lines(EXPECTED, |line| {
        if html {
            html::lines_of(&line).iter().for_each(|l| p.feed(l));
        } else {
            p.feed(&line)
        }
    })?;
    finish(p).map_err(|reason| InputError::WrongKind {
        path: name,
        reason,
        expected: EXPECTED.into(),
    })
}

pub fn parse_str(input: &str) -> Result<Topology, String> {
    let mut p = Parser::default();
    let head: Vec<&str> = input.lines().take(400).collect();
    let html = html::looks_like_html(&head);
    for (i, raw) in input.lines().enumerate() {
        let (text, tag_rank) = text::clean(raw);
        let line = Line {
            number: i + 1,
            raw: raw.to_string(),
            text,
            tag_rank,
        };
        if html {
            html::lines_of(&line).iter().for_each(|l| p.feed(l));
        } else {
            p.feed(&line);
        }
    }
    finish(p)
}

fn finish(mut p: Parser) -> Result<Topology, String> {
    if let Some(reason) = p.refused.take() {
        return Err(reason);
    }
    p.lay_out()?;
    if p.topo.problems.len() > MAX_PROBLEMS {
        let more = p.topo.problems.len() - MAX_PROBLEMS;
        p.topo.problems.truncate(MAX_PROBLEMS);
        p.topo
            .problems
            .push(format!("{more} more problems like these"));
    }
    if p.matrix_rows == 0 {
        return Err(
            "no topology matrix (a header of GPU0 GPU1 ... and rows of link codes) found".into(),
        );
    }
    p.topo.legend = if p.saw_soc { "old" } else { "new" }.into();
    Ok(p.topo)
}

#[cfg(test)]
#[path = "topo_tests.rs"]
mod tests;

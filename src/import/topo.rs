//! `nvidia-smi topo -m` as posted: old (`SOC`) and new (`SYS`, `NODE`) legends, NIC rows and the
//! NIC legend, CPU/NUMA affinity and GPU NUMA ID columns, tabs or spaces, and whatever paste
//! corruption leaves sound. Also the `topo -p2p` matrix (OK / NS) when it follows.

use super::text::{self, InputError, Line};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

pub const EXPECTED: &str = "`nvidia-smi topo -m` output";

/// A link code as the legend defines it; `SOC` (old drivers) is read as `SYS`.
pub fn normalise_link(code: &str) -> Option<String> {
    let c = code.trim();
    match c {
        "X" | "PIX" | "PXB" | "PHB" | "NODE" | "SYS" => Some(c.to_string()),
        "SOC" => Some("SYS".to_string()),
        _ if c.len() > 2 && c.starts_with("NV") && c[2..].chars().all(|d| d.is_ascii_digit()) => {
            Some(c.to_string())
        }
        _ => None,
    }
}

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

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub cpu_affinity: Option<String>,
    pub numa_affinity: Option<String>,
    pub gpu_numa_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Topology {
    /// Devices in the matrix's column order.
    pub devices: Vec<String>,
    /// (from, to, link code) for every ordered pair the matrix states.
    pub links: Vec<(String, String, String)>,
    pub info: BTreeMap<String, DeviceInfo>,
    /// NIC legend: `NIC0` → `mlx5_0`.
    pub nic_names: BTreeMap<String, String>,
    /// `topo -p2p` matrix cells, when present: (from, to, OK/NS/...).
    pub p2p: Vec<(String, String, String)>,
    /// What could not be read, with line numbers.
    pub problems: Vec<String>,
    /// `old` when the legend or cells use SOC, else `new`.
    pub legend: String,
}

impl Topology {
    pub fn link(&self, a: &str, b: &str) -> Option<&str> {
        self.links
            .iter()
            .find(|(f, t, _)| f == a && t == b)
            .map(|(_, _, l)| l.as_str())
    }
    pub fn gpus(&self) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|d| d.starts_with("GPU"))
            .map(String::as_str)
            .collect()
    }
}

#[derive(Default)]
struct Parser {
    topo: Topology,
    /// Columns of the matrix being read, and the affinity column names after them.
    columns: Vec<String>,
    extra: Vec<String>,
    in_p2p: bool,
    saw_soc: bool,
    matrix_rows: usize,
}

fn cells(line: &str) -> Vec<String> {
    if line.contains('\t') {
        line.split('\t').map(|c| c.trim().to_string()).collect()
    } else {
        line.split_whitespace().map(str::to_string).collect()
    }
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
            self.columns = devices_in_line;
            if !self.in_p2p {
                self.topo.devices = self.columns.clone();
            }
            return;
        }
        if self.columns.is_empty() || !looks_like_device(nonempty[0]) {
            return;
        }
        self.row(&c, line.number);
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
        self.matrix_rows += 1;
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
    input.lines(EXPECTED, |line| p.feed(&line))?;
    finish(p).map_err(|reason| InputError::WrongKind {
        path: name,
        reason,
        expected: EXPECTED.into(),
    })
}

pub fn parse_str(input: &str) -> Result<Topology, String> {
    let mut p = Parser::default();
    for (i, raw) in input.lines().enumerate() {
        let (text, tag_rank) = text::clean(raw);
        p.feed(&Line {
            number: i + 1,
            raw: raw.to_string(),
            text,
            tag_rank,
        });
    }
    finish(p)
}

fn finish(mut p: Parser) -> Result<Topology, String> {
    if p.matrix_rows == 0 {
        return Err(
            "no topology matrix (a header of GPU0 GPU1 ... and rows of link codes) found".into(),
        );
    }
    p.topo.legend = if p.saw_soc { "old" } else { "new" }.into();
    Ok(p.topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_old_tabbed_matrix_with_soc() {
        let t = parse_str("\tGPU0\tGPU1\tmlx4_0\tCPU Affinity\nGPU0\t X \tSOC\tPHB\t0-5\nGPU1\tSOC\t X \tSOC\t6-11\nmlx4_0\tPHB\tSOC\t X\n").unwrap();
        assert_eq!(t.devices, vec!["GPU0", "GPU1", "mlx4_0"]);
        assert_eq!(t.link("GPU0", "GPU1"), Some("SYS"));
        assert_eq!(t.link("mlx4_0", "GPU0"), Some("PHB"));
        assert_eq!(t.legend, "old");
        assert_eq!(t.info["GPU1"].cpu_affinity.as_deref(), Some("6-11"));
    }

    #[test]
    fn reports_corrupt_cells_and_keeps_the_rest() {
        let t = parse_str(
            "        GPU0    GPU1    GPU2\nGPU0     X      NV4     ?!x\nGPU1    NV4      X\n",
        )
        .unwrap();
        assert_eq!(t.link("GPU0", "GPU1"), Some("NV4"));
        assert!(
            t.problems
                .iter()
                .any(|p| p.contains("'?!x' is not a link code")),
            "{:?}",
            t.problems
        );
        assert!(
            t.problems
                .iter()
                .any(|p| p.contains("GPU1 has 2 of 3 link cells")),
            "{:?}",
            t.problems
        );
    }

    #[test]
    fn refuses_text_without_a_matrix() {
        assert!(parse_str("hello\nworld\n").is_err());
    }
}

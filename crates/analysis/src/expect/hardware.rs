//! Hardware the user states (`--hardware "2 nodes x 8 H100 SXM, 8x400G IB per node"`): what a
//! pasted run often does not carry (the NICs above all), parsed strictly and always shown as
//! stated, never as measured.

use super::designs::{self, Design};
use serde::Serialize;

/// The network a node's NICs are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicKind {
    Infiniband,
    Roce,
    Efa,
    Slingshot,
    Tcp,
    /// Google's GPUDirect-TCPX (A3 High): TCP, with the payload received into GPU memory.
    Tcpx,
    /// GPUDirect-TCPXO (A3 Mega): TCPX with the protocol offloaded to the NIC.
    Tcpxo,
}

impl NicKind {
    pub fn name(self) -> &'static str {
        match self {
            NicKind::Infiniband => "InfiniBand",
            NicKind::Roce => "RoCE",
            NicKind::Efa => "EFA",
            NicKind::Slingshot => "Slingshot",
            NicKind::Tcp => "TCP",
            NicKind::Tcpx => "GPUDirect-TCPX",
            NicKind::Tcpxo => "GPUDirect-TCPXO",
        }
    }

    /// The link class the expectations name (`links` in data/expectations.toml).
    pub fn link(self) -> &'static str {
        match self {
            NicKind::Infiniband => "ib",
            NicKind::Roce => "roce",
            NicKind::Efa => "efa",
            NicKind::Slingshot => "slingshot",
            NicKind::Tcp => "socket",
            NicKind::Tcpx => "tcpx",
            NicKind::Tcpxo => "tcpxo",
        }
    }
}

/// How a node's GPUs reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Intra {
    Nvswitch,
    Nvlink,
    /// AMD Infinity Fabric: every GPU of an OAM board linked to every other.
    Xgmi,
    Pcie,
}

/// What the user said about the machine; every field as stated.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Hardware {
    pub nodes: Option<usize>,
    pub gpus_per_node: Option<usize>,
    pub gpu: Option<String>,
    pub nics_per_node: Option<usize>,
    /// Line rate of one NIC, Gb/s.
    pub nic_gbps: Option<f64>,
    pub nic_kind: Option<NicKind>,
    pub intra: Option<Intra>,
    /// The reference design an instance, shape or system name stood for (`p5.48xlarge`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub design: Option<String>,
}

/// The forms `--hardware` takes, for its errors and help.
pub const FORMS: &str = "clauses separated by commas: an instance, shape or system name, alone or as `N x NAME` for N nodes (`2 x p5.48xlarge`, `BM.GPU.H100.8`, `4 x DGX H100`; `ncclprobe baselines --designs` lists them); `N nodes` or `N nodes x G GPU-MODEL` (e.g. `2 nodes x 8 H100 SXM`); `G x GPU-MODEL [per node]` (`8x A100`); `K x SPEED KIND [per node]` for the NICs, SPEED as 100G, 200Gb/s, 400Gbps, KIND one of IB (InfiniBand, or the generation EDR/HDR/NDR/XDR, which gives the speed), RoCE, EFA, Slingshot, TCP (also IPoIB), TCPX, TCPXO (e.g. `8x400G IB per node`, `4x NDR`, `1x 100G TCP`); `NVSwitch`, `NVLink`, `xGMI` or `PCIe` for the links inside a node";

/// InfiniBand generations and their per-port line rate.
const IB_GENERATIONS: [(&str, f64); 5] = [
    ("hdr100", 100.0),
    ("edr", 100.0),
    ("hdr", 200.0),
    ("ndr", 400.0),
    ("xdr", 800.0),
];

fn kind_word(word: &str) -> Option<(NicKind, Option<f64>)> {
    if let Some((_, gbps)) = IB_GENERATIONS.iter().find(|(g, _)| *g == word) {
        return Some((NicKind::Infiniband, Some(*gbps)));
    }
    let kind = match word {
        "ib" | "infiniband" => NicKind::Infiniband,
        "roce" | "rocev2" => NicKind::Roce,
        "efa" => NicKind::Efa,
        "slingshot" => NicKind::Slingshot,
        "tcp" | "ethernet" | "socket" | "sockets" | "ipoib" => NicKind::Tcp,
        "tcpx" | "gpudirect-tcpx" => NicKind::Tcpx,
        "tcpxo" | "gpudirect-tcpxo" => NicKind::Tcpxo,
        _ => return None,
    };
    Some((kind, None))
}

/// `400G`, `400gb`, `400gb/s`, `400gbps`, `400gbit`: the line rate in Gb/s.
fn speed_word(word: &str) -> Option<f64> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '/');
    let unit = &word[digits.len()..];
    let gbps = digits.parse::<f64>().ok().filter(|v| *v > 0.0)?;
    matches!(
        unit,
        "g" | "gb" | "gb/s" | "gbps" | "gbit" | "gbit/s" | "gbe"
    )
    .then_some(gbps)
    .or_else(|| matches!(unit, "t" | "tb/s" | "tbps").then_some(gbps * 1000.0))
}

/// `8x`, `8`, or `8` followed by `x` as its own word: a count.
fn count_of(words: &mut Vec<String>) -> Option<usize> {
    let first = words.first()?.clone();
    let (number, rest) = match first.split_once('x') {
        Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
            (n.to_string(), Some(rest.to_string()))
        }
        _ if first.chars().all(|c| c.is_ascii_digit()) => (first, None),
        _ => return None,
    };
    let n = number.parse::<usize>().ok().filter(|n| *n > 0)?;
    words.remove(0);
    match rest {
        Some(rest) if !rest.is_empty() => words.insert(0, rest),
        Some(_) => {}
        None if words.first().is_some_and(|w| w == "x" || w == "×") => {
            words.remove(0);
        }
        None => {}
    }
    Some(n)
}

impl Hardware {
    /// Parses `--hardware`; the error names the clause and shows the accepted forms.
    pub fn parse(text: &str) -> Result<Hardware, String> {
        let mut hw = Hardware::default();
        let clauses: Vec<&str> = text
            .split([',', ';'])
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        if clauses.is_empty() {
            return Err(format!("--hardware: nothing stated; {FORMS}"));
        }
        for clause in clauses {
            hw.clause(clause)
                .map_err(|why| format!("--hardware: `{clause}`: {why}; {FORMS}"))?;
        }
        Ok(hw)
    }

    fn clause(&mut self, clause: &str) -> Result<(), String> {
        let lower = clause.to_ascii_lowercase().replace('×', "x");
        let lower = lower
            .strip_suffix("per node")
            .or_else(|| lower.strip_suffix("each"))
            .unwrap_or(&lower);
        // `400 Gb/s`: a number and its unit written apart are one speed.
        let mut words: Vec<String> = Vec::new();
        for w in lower.split_whitespace() {
            match words.last_mut() {
                Some(last)
                    if last.chars().all(|c| c.is_ascii_digit() || c == '.')
                        && speed_word(&format!("{last}{w}")).is_some() =>
                {
                    last.push_str(w)
                }
                _ => words.push(w.to_string()),
            }
        }
        if words.iter().any(|w| w == "per") {
            return Err("`per` must be `per node`, at the end".into());
        }
        if let Some((nodes, design)) = design_clause(&words) {
            return self.set_design(nodes, design);
        }
        match words.as_slice() {
            [w] if ["nvswitch", "nvlink", "xgmi", "pcie"].contains(&w.as_str()) => {
                return self.set_intra(w);
            }
            _ => {}
        }
        let n = count_of(&mut words).ok_or("it must start with a count (`2 nodes`, `8x`)")?;
        if words.first().is_some_and(|w| w == "nodes" || w == "node") {
            words.remove(0);
            set_once(&mut self.nodes, n, "nodes")?;
            if words.is_empty() {
                return Ok(());
            }
            if words.first().is_some_and(|w| w == "x") {
                words.remove(0);
            }
            let g = count_of(&mut words).ok_or("after `N nodes x` comes the GPUs per node")?;
            return self.gpus(g, &words);
        }
        let speed = words.iter().find_map(|w| speed_word(w));
        let kind = words.iter().find_map(|w| kind_word(w));
        let nic_words = ["nic", "nics", "port", "ports", "hca", "hcas"];
        if speed.is_some()
            || kind.is_some()
            || words.iter().any(|w| nic_words.contains(&w.as_str()))
        {
            let extra: Vec<&String> = words
                .iter()
                .filter(|w| {
                    speed_word(w).is_none()
                        && kind_word(w).is_none()
                        && !nic_words.contains(&w.as_str())
                        && *w != "x"
                })
                .collect();
            if !extra.is_empty() {
                return Err(format!(
                    "a NIC clause takes a count, a speed and a kind; `{}` is neither",
                    extra[0]
                ));
            }
            let (kind, generation) =
                kind.ok_or("the NICs' kind is missing (IB, RoCE, EFA, Slingshot or TCP)")?;
            let gbps = match (speed, generation) {
                (Some(s), Some(g)) if s != g => {
                    return Err(format!(
                        "{s} Gb/s contradicts the InfiniBand generation ({g} Gb/s)"
                    ))
                }
                (s, g) => s.or(g).ok_or("the NICs' speed is missing (e.g. 400G)")?,
            };
            set_once(&mut self.nics_per_node, n, "NICs per node")?;
            self.nic_gbps = Some(gbps);
            self.nic_kind = Some(kind);
            return Ok(());
        }
        self.gpus(n, &words)
    }

    fn gpus(&mut self, count: usize, words: &[String]) -> Result<(), String> {
        let mut model: Vec<&str> = Vec::new();
        for w in words {
            match w.as_str() {
                "gpu" | "gpus" => {}
                "nvswitch" | "nvlink" | "xgmi" | "pcie" if !model.is_empty() => {
                    self.set_intra(w)?
                }
                w => model.push(w),
            }
        }
        if model.is_empty() {
            return Err("the GPU model is missing (e.g. `8 H100 SXM`)".into());
        }
        if !model.iter().any(|w| w.chars().any(|c| c.is_ascii_digit())) {
            return Err(format!(
                "`{}` is not a GPU model (models carry a number: A100, H100, RTX 4090, MI300X)",
                model.join(" ")
            ));
        }
        let model = model.join(" ");
        if !known_gpu(&model) {
            return Err(unknown_model(&model));
        }
        set_once(&mut self.gpus_per_node, count, "GPUs per node")?;
        self.gpu = Some(model.to_ascii_uppercase());
        Ok(())
    }

    /// Every fact of a reference design, each as if stated, and `nodes` nodes when counted.
    fn set_design(&mut self, nodes: Option<usize>, d: &Design) -> Result<(), String> {
        if let Some(n) = nodes {
            set_once(&mut self.nodes, n, "nodes")?;
        }
        if self.design.as_ref().is_some_and(|have| *have != d.id) {
            return Err("two different instances or systems stated".into());
        }
        set_once(&mut self.gpus_per_node, d.gpus, "GPUs per node")?;
        set_once(&mut self.nics_per_node, d.nics, "NICs per node")?;
        self.gpu = Some(d.gpu.to_ascii_uppercase());
        self.nic_gbps = Some(d.nic_gbps);
        self.nic_kind = Some(design_nic_kind(d));
        self.set_intra(&d.intra)?;
        self.design = Some(d.id.clone());
        Ok(())
    }

    fn set_intra(&mut self, word: &str) -> Result<(), String> {
        let intra = match word {
            "nvswitch" => Intra::Nvswitch,
            "nvlink" => Intra::Nvlink,
            "xgmi" => Intra::Xgmi,
            _ => Intra::Pcie,
        };
        match self.intra {
            Some(have) if have != intra => Err("two different links inside the node".into()),
            _ => {
                self.intra = Some(intra);
                Ok(())
            }
        }
    }

    /// Each fact as stated, for the output, which marks them stated ("stated: 8 x 400 Gb/s
    /// InfiniBand NICs per node").
    pub fn facts(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(d) = self.design.as_deref().and_then(designs::by_id) {
            out.push(format!("{} ({})", d.title, d.citation));
        }
        if let Some(n) = self.nodes {
            out.push(format!("{n} node(s)"));
        }
        match (self.gpus_per_node, &self.gpu) {
            (Some(g), Some(m)) => out.push(format!("{g} x {m} per node")),
            (Some(g), None) => out.push(format!("{g} GPUs per node")),
            _ => {}
        }
        if let (Some(n), Some(gbps), Some(kind)) =
            (self.nics_per_node, self.nic_gbps, self.nic_kind)
        {
            out.push(format!(
                "{n} x {gbps:.0} Gb/s {} NICs per node",
                kind.name()
            ));
        }
        if let Some(i) = self.intra {
            out.push(
                match i {
                    Intra::Nvswitch => "NVSwitch inside the node",
                    Intra::Nvlink => "NVLink inside the node",
                    Intra::Xgmi => "xGMI inside the node",
                    Intra::Pcie => "PCIe inside the node",
                }
                .to_string(),
            );
        }
        out
    }
}

/// The kind of a design's NICs as `--hardware` names them.
pub fn design_nic_kind(d: &Design) -> NicKind {
    match d.nic_kind.as_str() {
        "ib" => NicKind::Infiniband,
        "roce" => NicKind::Roce,
        "efa" => NicKind::Efa,
        "slingshot" => NicKind::Slingshot,
        "tcpx" => NicKind::Tcpx,
        "tcpxo" => NicKind::Tcpxo,
        _ => NicKind::Tcp,
    }
}

/// `p5.48xlarge`, `2 x p5.48xlarge`, `2 nodes x DGX H100`: the nodes counted, if they are,
/// and the design named.
fn design_clause(words: &[String]) -> Option<(Option<usize>, &'static Design)> {
    if let Some(d) = designs::by_name(&words.join(" ")) {
        return Some((None, d));
    }
    let mut rest = words.to_vec();
    let n = count_of(&mut rest)?;
    if rest.first().is_some_and(|w| w == "nodes" || w == "node") {
        rest.remove(0);
        if rest.first().is_some_and(|w| w == "x") {
            rest.remove(0);
        }
    }
    designs::by_name(&rest.join(" ")).map(|d| (Some(n), d))
}

/// Whether a stated model is one the expectations or the designs know (`H100 SXM` is, as the
/// table knows `H100`; `P5.48XLARGE` is not).
fn known_gpu(model: &str) -> bool {
    gpu_names().any(|name| super::table::contains_ci(model, name))
}

/// Every GPU name the expectations' models and the designs know (`H100`, `GB300`, `H100 80GB
/// HBM3`).
pub(super) fn gpu_names() -> impl Iterator<Item = &'static str> {
    super::table::shipped()
        .gpus
        .iter()
        .flat_map(|g| g.names.iter())
        .chain(designs::shipped().iter().flat_map(|d| d.gpu_match.iter()))
        .map(String::as_str)
}

/// The refusal of a model nobody knows, with the nearest known GPU or design name.
fn unknown_model(model: &str) -> String {
    let table = super::table::shipped();
    let candidates = table
        .gpus
        .iter()
        .flat_map(|g| g.names.iter().map(String::as_str))
        .chain(designs::all_names());
    let want = designs::key(model);
    let best = candidates
        .map(|c| (crate::flags::edits(&want, &designs::key(c)), c))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, _)| *d <= want.len().max(3) / 2);
    let hint = match best {
        Some((_, name)) => format!("; did you mean `{name}`?"),
        None => String::new(),
    };
    format!(
        "`{model}` is neither a GPU model nor an instance, shape or system ncclprobe knows{hint}"
    )
}

fn set_once(slot: &mut Option<usize>, value: usize, what: &str) -> Result<(), String> {
    match *slot {
        Some(have) if have != value => Err(format!("{what} stated twice ({have} and {value})")),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

#[cfg(test)]
#[path = "hardware_tests.rs"]
mod tests;

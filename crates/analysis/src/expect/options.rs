//! The expectation and gate options of `compare`, `qualify` and `sweep --qualify`, as plain
//! values the command line builds once.

use std::path::PathBuf;

/// What a run is held against: a pasted topology and log beside it, or a named profile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expectation {
    /// A pasted `nvidia-smi topo -m` for the run's machine.
    pub topo: Option<PathBuf>,
    /// An NCCL_DEBUG=INFO log of the run.
    pub log: Option<PathBuf>,
    /// A shipped expectation by id instead of choosing one.
    pub profile: Option<String>,
    /// The collective of points whose log did not name it.
    pub collective: Option<String>,
    /// Hardware the user states (`--hardware`), as written.
    pub hardware: Option<String>,
}

/// The gate's rules (completion and #wrong == 0 always apply).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    pub min_busbw: Option<f64>,
    pub at_size: Option<String>,
    pub max_latency_us: Option<f64>,
    pub at_size_small: Option<String>,
    pub max_skew: Option<f64>,
    pub min_ratio: Option<f64>,
    /// A TOML rules file.
    pub rules: Option<PathBuf>,
    /// Where the verdict goes as JUnit XML.
    pub junit: Option<PathBuf>,
    /// `--require gdr|nvls|transport=NAME` and `--forbid NAME`: what NCCL must (not) have used.
    pub require: Vec<String>,
    pub forbid: Vec<String>,
    /// `--max-ecc-uncorrected N`: uncorrectable ECC errors allowed per GPU.
    pub max_ecc_uncorrected: Option<u64>,
    /// `--require-link-width max|N`: each GPU's PCIe link width.
    pub require_link_width: Option<String>,
}

/// A gate after measuring (`sweep --qualify`, rules flags, `--retries`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateRules {
    /// A shipped expectation whose rules gate the run.
    pub qualify: Option<String>,
    /// Re-measure only the points that failed, up to this many times.
    pub retries: usize,
    pub rules: Rules,
}

impl GateRules {
    /// Whether anything asks for a gate.
    pub fn requested(&self) -> bool {
        let r = &self.rules;
        self.qualify.is_some()
            || r.min_busbw.is_some()
            || r.max_latency_us.is_some()
            || r.max_skew.is_some()
            || r.min_ratio.is_some()
            || r.rules.is_some()
            || r.junit.is_some()
            || !r.require.is_empty()
            || !r.forbid.is_empty()
            || r.max_ecc_uncorrected.is_some()
            || r.require_link_width.is_some()
    }

    pub fn expectation(&self) -> Expectation {
        Expectation {
            profile: self.qualify.clone(),
            ..Default::default()
        }
    }
}

//! What diagnosis can look at (`Inputs`: logs, runs, topologies, nvidia-smi output and this
//! machine), the questions rules ask of it, and the summary of it that `diagnose` prints.

use super::finding::{value_ev, Evidence};
pub use crate::documents::diagnosis::{
    Facts, InputFile, LiveSummary, Nic, RunSummary, TopologySummary,
};
use crate::import::nccl_log::LogFacts;
use crate::import::pastes::{Count, Pastes};
use crate::import::smi::Smi;
use crate::import::topo::Topology;
use crate::live;
use crate::model::RunRecord;
use std::collections::{BTreeMap, BTreeSet};

/// Everything diagnosis can look at. Rules read nothing else (no process environment, no
/// files): what the machine says is in `live`.
#[derive(Debug, Default)]
pub struct Inputs {
    pub logs: Vec<LogFacts>,
    pub runs: Vec<RunRecord>,
    /// `ncclprobe matrix` documents, with their file names.
    pub matrices: Vec<(String, crate::documents::matrix::MatrixDocument)>,
    pub topos: Vec<(String, Topology)>,
    /// NCCL's topology and graph dumps, with their file names.
    pub dumps: Vec<(String, crate::import::nccl_dump::NcclDump)>,
    pub smis: Vec<(String, Smi)>,
    /// What the text inputs paste about the host: GPU utilisation and memory, `free`, the
    /// CPU count, PyTorch's DataLoader warnings, `num_workers` and ranks per node.
    pub pastes: Vec<Pastes>,
    pub live: Option<live::Facts>,
    /// A training job's own records, judged (`ncclprobe trace`), with their paths.
    pub traces: Vec<(String, crate::documents::trace::TraceDocument)>,
    /// (file, kind) of every input read.
    pub files: Vec<(String, String)>,
}

impl Inputs {
    /// NCCL_* variables from the live environment and from "set by environment" log lines.
    pub fn env(&self) -> BTreeMap<String, (String, Evidence)> {
        let mut env = BTreeMap::new();
        if let Some(l) = &self.live {
            for (k, v) in &l.env {
                env.insert(
                    k.clone(),
                    (v.clone(), value_ev(format!("{k}={v} in this environment"))),
                );
            }
        }
        for log in &self.logs {
            for (k, (v, e)) in &log.env {
                env.insert(k.clone(), (v.clone(), e.clone()));
            }
        }
        env
    }

    /// The CPUs a DataLoader's workers share, from the first input that says.
    pub fn cores(&self) -> Option<&Count> {
        self.pastes.iter().find_map(|p| p.cores())
    }

    /// The `num_workers` and ranks per node the inputs state (the last input that says).
    pub fn num_workers(&self) -> Option<&Count> {
        self.pastes
            .iter()
            .rev()
            .find_map(|p| p.num_workers.as_ref())
    }

    pub fn local_ranks(&self) -> Option<&Count> {
        self.pastes
            .iter()
            .rev()
            .find_map(|p| p.local_ranks.as_ref())
    }

    pub fn hosts(&self) -> BTreeSet<String> {
        let mut hosts: BTreeSet<String> = self
            .logs
            .iter()
            .flat_map(|l| l.hosts.iter().cloned())
            .collect();
        for r in &self.runs {
            hosts.extend(r.backend.hosts.iter().cloned());
        }
        hosts
    }

    pub fn nranks(&self) -> Option<usize> {
        self.logs.iter().filter_map(|l| l.nranks).max().or_else(|| {
            self.runs
                .iter()
                .map(|r| r.backend.nranks)
                .filter(|&n| n > 0)
                .max()
        })
    }

    pub fn nnodes(&self) -> Option<usize> {
        self.logs.iter().filter_map(|l| l.nnodes).max()
    }

    /// More than one node: NCCL's node count, several host names, or lines that place two
    /// ranks on different nodes whatever the host names say (`cross_node`).
    pub fn multi_node(&self) -> bool {
        self.nnodes().is_some_and(|n| n > 1)
            || self.hosts().len() > 1
            || !self.cross_node().is_empty()
    }

    /// Lines that place two ranks on different nodes: from logs (a channel between two ranks
    /// on the same device, two ranks on one bus id, CollNet), and two ranks of an imported run
    /// in different processes on the same PCI address (nccl-tests' `# Rank` lines).
    pub fn cross_node(&self) -> Vec<Evidence> {
        let mut out: Vec<Evidence> = self
            .logs
            .iter()
            .flat_map(|l| l.cross_node.iter().take(4).cloned())
            .collect();
        for r in &self.runs {
            let file = r.import.as_ref().map_or("(run)", |i| i.file.as_str());
            let bus = |d: &str| {
                let open = d.find('[')?;
                let close = d[open..].find(']')? + open;
                Some(d[open + 1..close].trim().to_ascii_lowercase())
            };
            let ranks = &r.backend.ranks;
            let twin = ranks.iter().enumerate().find_map(|(i, a)| {
                let a_bus = bus(a.device.as_deref()?)?;
                ranks[i + 1..].iter().find_map(|b| {
                    let same_process = a.pid == b.pid && a.host == b.host;
                    (b.rank != a.rank
                        && b.group == a.group
                        && !same_process
                        && bus(b.device.as_deref()?)? == a_bus)
                        .then(|| (a.rank, b.rank, a_bus.clone()))
                })
            });
            if let Some((a, b, addr)) = twin {
                out.push(super::finding::ev(
                    file,
                    0,
                    format!(
                        "ranks {a} and {b} both use the GPU at {addr}: they are on different nodes"
                    ),
                ));
            }
        }
        out
    }

    /// Transports from channel lines, plus the chosen network when traffic crosses nodes.
    pub fn transports(&self) -> BTreeMap<String, Vec<Evidence>> {
        let mut out: BTreeMap<String, Vec<Evidence>> = BTreeMap::new();
        for l in &self.logs {
            for (t, e) in &l.transports {
                out.entry(t.clone())
                    .or_default()
                    .extend(e.iter().take(3).cloned());
            }
            if let Some((net, e)) = &l.network {
                if self.multi_node() {
                    out.entry(format!("NET/{net}")).or_default().push(e.clone());
                }
            }
        }
        out
    }

    /// The summary `diagnose` prints above its findings.
    pub fn facts(&self) -> Facts {
        Facts {
            nccl_version: self
                .logs
                .iter()
                .find_map(|l| l.nccl_version.clone())
                .or_else(|| {
                    self.runs
                        .iter()
                        .find_map(|r| r.backend.library_versions.get("nccl").cloned())
                }),
            transports: self.transports().into_keys().collect(),
            gdrdma: self.logs.iter().any(|l| l.gdrdma),
            network: self
                .logs
                .iter()
                .find_map(|l| l.network.as_ref().map(|(n, _)| n.clone())),
            env: self.env().into_iter().map(|(k, (v, _))| (k, v)).collect(),
            hosts: self.hosts().into_iter().collect(),
            ranks: self.nranks(),
            nodes: self.nnodes(),
            inputs: self
                .files
                .iter()
                .map(|(file, kind)| InputFile {
                    file: file.clone(),
                    kind: kind.clone(),
                })
                .collect(),
            topology: self.topos.first().map(|(file, t)| TopologySummary {
                file: file.clone(),
                devices: t.devices.clone(),
                links: t.links.len(),
            }),
            runs: self
                .runs
                .iter()
                .map(|r| RunSummary {
                    file: r.import.as_ref().map(|i| i.file.clone()),
                    status: r.status,
                    points: r.points.len(),
                    headlines: r.headlines.clone(),
                })
                .collect(),
            live: self.live.as_ref().map(|l| LiveSummary {
                nvml_gpus: l.nvml.as_ref().ok().map(|g| g.len()),
                nvml_error: l.nvml.as_ref().err().cloned(),
                driver_version: l.driver_version.clone(),
                sysfs_gpus: l.sysfs_gpus.len(),
                wsl2: !l.wsl2_evidence.is_empty(),
                kernel: l.kernel.clone(),
                devshm_bytes: l.devshm_bytes,
                cpu: l.cpu.clone(),
                nics: l
                    .nics
                    .iter()
                    .map(|(name, speed)| Nic {
                        name: name.clone(),
                        speed_mbit_per_s: *speed,
                    })
                    .collect(),
                infiniband: l.infiniband.clone(),
            }),
        }
    }
}

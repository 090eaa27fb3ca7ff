//! What is known about where a run ran: the facts of its record, of a topology and of an
//! NCCL_DEBUG=INFO log given beside it, and the overrides that move NCCL off its default path.

use crate::documents::topology::PciAddress;
use crate::import::nccl_log::LogFacts;
use crate::import::topo::Topology;
use crate::model::RunRecord;
use std::collections::BTreeMap;

/// What is known about where a run ran.
#[derive(Debug, Clone, Default)]
pub struct Situation {
    pub nranks: usize,
    pub nnodes: usize,
    /// A GPU name as the run or log printed it.
    pub gpu_name: Option<String>,
    /// The PCI address of each rank's GPU as the run printed it, in rank order (`None` where
    /// a rank printed none).
    pub rank_gpus: Vec<Option<PciAddress>>,
    /// (where from, topology).
    pub topology: Option<(String, Topology)>,
    pub env: BTreeMap<String, String>,
    /// Why the run is known to be under WSL2 (empty: not known to be).
    pub wsl2: Vec<String>,
    /// Transports an NCCL_DEBUG=INFO log shows (`P2P/IPC`, `SHM`, `NET/Socket`…) and the
    /// network it chose.
    pub log_transports: Vec<String>,
    pub log_network: Option<String>,
    /// NICs the log's IB plugin lists (`mlx5_0:1/IB`, `mlx5_1:1/RoCE`).
    pub log_nics: Vec<String>,
    /// What the user stated about the machine (`--hardware`).
    pub stated: super::hardware::Hardware,
    /// Where the statement disagreed with the run (the statement was used).
    pub stated_conflicts: Vec<String>,
    /// What was assumed to fit a `--topo` to the run (which of its GPUs the run used).
    pub topology_notes: Vec<String>,
    /// Facts read from hints rather than stated or listed (the node count from a cut device
    /// list, the GPU model from host names), each with how.
    pub hints: Vec<String>,
}

/// The environment variables that force NCCL off its default path.
pub const OVERRIDES: [&str; 6] = [
    "NCCL_SHM_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_NET",
];

impl Situation {
    /// The facts of a run record, with an optional topology and log given beside it.
    pub fn of_record(
        record: &RunRecord,
        topology: Option<(String, Topology)>,
        log: Option<&LogFacts>,
    ) -> Situation {
        let nranks = record
            .points
            .iter()
            .map(|p| p.nranks)
            .max()
            .unwrap_or(record.backend.nranks)
            .max(record.backend.nranks);
        let mut nnodes = record.backend.hosts.len().max(1);
        let mut env = record.env.clone();
        let mut wsl2 = record.wsl2_evidence.clone();
        let (mut log_transports, mut log_network, mut log_nics) = (Vec::new(), None, Vec::new());
        if let Some(l) = log {
            nnodes = nnodes
                .max(l.nnodes.unwrap_or(1))
                .max(l.hosts.len())
                .max(l.nodes_at_least());
            for (k, (v, _)) in &l.env {
                env.entry(k.clone()).or_insert_with(|| v.clone());
            }
            wsl2.extend(l.wsl_hints.iter().map(|e| e.text.clone()).take(2));
            log_transports = l.transports.keys().cloned().collect();
            log_network = l.network.as_ref().map(|(n, _)| n.clone());
            log_nics = l.net_devices.clone();
        }
        let mut hints = Vec::new();
        if let Some((n, why)) = nodes_from_rank_lines(record, nranks) {
            if n > nnodes {
                nnodes = n;
                hints.push(why);
            }
        }
        let printed = gpu_name(record);
        let mut name = printed.clone();
        if printed.as_deref().is_none_or(generic_gpu_name) {
            if let Some((model, host)) = gpu_from_hosts(record) {
                hints.push(format!("{HOST_GPU}{model} from the host name {host}"));
                name = Some(model);
            }
        }
        let record_topology = record
            .topology
            .as_ref()
            .and_then(|v| serde_json::from_value::<Topology>(v.clone()).ok())
            .filter(|t| t.gpus().len() >= 2)
            .map(|t| ("the record's topology".to_string(), t));
        Situation {
            nranks,
            nnodes,
            gpu_name: name,
            rank_gpus: record
                .backend
                .ranks
                .iter()
                .map(|r| r.device.as_deref().and_then(PciAddress::in_device_text))
                .collect(),
            topology: topology.or(record_topology),
            env,
            wsl2,
            log_transports,
            log_network,
            log_nics,
            stated: Default::default(),
            stated_conflicts: Vec::new(),
            topology_notes: Vec::new(),
            hints,
        }
    }

    /// The facts the user stated, over what the run carries: nodes (the ranks spread evenly)
    /// and the GPU model where the run names none. Returns what disagreed with the run.
    pub fn state(&mut self, hw: super::hardware::Hardware) -> Vec<String> {
        let mut conflicts = Vec::new();
        if let Some(n) = hw.nodes {
            if self.nnodes > 1 && self.nnodes != n {
                conflicts.push(format!(
                    "the run shows {} hosts; {n} node(s) stated, used as stated",
                    self.nnodes
                ));
            }
            self.nnodes = n;
        }
        // A model read from a host name is a guess the statement replaces, not a disagreement.
        let from_host = self.hints.iter().position(|h| h.starts_with(HOST_GPU));
        if let (Some(i), Some(_)) = (from_host, &hw.gpu) {
            self.hints.remove(i);
            self.gpu_name = None;
        }
        if let (Some(run), Some(stated)) = (&self.gpu_name, &hw.gpu) {
            // The stated model's words (`H100 SXM`) found in the run's name (`NVIDIA H100 80GB
            // HBM3`) agree; otherwise the two machines differ and the statement wins, said.
            let lower = run.to_lowercase();
            let design = hw.design.as_deref().and_then(super::designs::by_id);
            let agrees = generic_gpu_name(run)
                || design.is_some_and(|d| d.has_gpu(run))
                || stated
                    .split_whitespace()
                    .all(|w| lower.contains(&w.to_lowercase()));
            if !agrees {
                conflicts.push(format!(
                    "the run's GPUs are {run}; {stated} stated, used as stated"
                ));
            }
        }
        if let Some(stated) = &hw.gpu {
            self.gpu_name = Some(stated.clone());
        }
        if let Some(g) = hw.gpus_per_node {
            let per_node = self.nranks.div_ceil(self.nnodes.max(1));
            if self.nranks > 0 && per_node != g {
                conflicts.push(format!(
                    "the run put {per_node} rank(s) on a node; {g} GPUs per node stated"
                ));
            }
        }
        self.stated = hw;
        conflicts
    }

    /// A topology given beside the run, held against it: an error when it cannot be the
    /// machine the run ran on (fewer GPUs than ranks on a node, NVLink widths the run's GPU
    /// model never has); when it has more GPUs than the run used, which ones are assumed.
    pub fn fit_topology(&self, name: &str, t: &Topology) -> Result<Vec<String>, String> {
        let gpus = t.gpus();
        let per_node = self.nranks.div_ceil(self.nnodes.max(1));
        if per_node == 0 || gpus.is_empty() {
            return Ok(Vec::new());
        }
        let run_gpus = match &self.gpu_name {
            Some(g) => format!("{per_node} x {g}"),
            None => format!("{per_node} GPUs"),
        };
        if gpus.len() < per_node {
            return Err(format!(
                "{name} has {} GPUs, but the run put {per_node} ranks on a node ({run_gpus}): it is not the topology of the run's machine",
                gpus.len()
            ));
        }
        let used: Vec<&str> = gpus[..per_node].to_vec();
        // A GeForce card links to another through one NVLink bridge at most (NV2 on Turing,
        // NV4 on Ampere); wider NVLink is a data-centre GPU's.
        if let Some(g) = self.gpu_name.as_deref().filter(|g| g.contains("GeForce")) {
            let wide = used
                .iter()
                .flat_map(|a| used.iter().map(move |b| (*a, *b)))
                .find_map(|(a, b)| {
                    let code = t.link(a, b)?;
                    let lanes: u32 = code.strip_prefix("NV")?.parse().ok()?;
                    (lanes > 4).then(|| format!("{a} and {b} by {code}"))
                });
            if let Some(wide) = wide {
                return Err(format!(
                    "{name} links {wide}, which no GeForce card has (an NVLink bridge gives at most NV4), and the run's GPUs are {g}: it is not the topology of the run's machine"
                ));
            }
        }
        if gpus.len() == per_node {
            return Ok(Vec::new());
        }
        Ok(vec![format!(
            "{name} has {} GPUs and the run used {per_node} per node ({run_gpus}): assumed to be {} (the run does not say which)",
            gpus.len(),
            used.join(", ")
        )])
    }

    /// NICs per node as stated, counted in the topology, or listed by the log.
    pub fn known_nic_count(&self) -> Option<usize> {
        self.stated
            .nics_per_node
            .or_else(|| {
                self.topology
                    .as_ref()
                    .map(|(_, t)| t.devices.iter().filter(|d| d.starts_with("NIC")).count())
                    .filter(|&n| n > 0)
            })
            .or_else(|| (!self.log_nics.is_empty()).then_some(self.log_nics.len()))
            .or_else(|| self.hca_list_len())
    }

    /// Where [`Self::known_nic_count`] found its count, in words.
    pub fn nic_count_source(&self) -> &'static str {
        if self.stated.nics_per_node.is_some() {
            "--hardware"
        } else if self
            .topology
            .as_ref()
            .is_some_and(|(_, t)| t.devices.iter().any(|d| d.starts_with("NIC")))
        {
            "the topology"
        } else if !self.log_nics.is_empty() {
            "the NICs the log names"
        } else {
            "the log's NCCL_IB_HCA"
        }
    }

    /// NCCL_IB_HCA naming the NICs one by one (`mlx5_0:1,mlx5_1:1`): how many it uses. A list
    /// that excludes (`^`) or a bare prefix (`mlx5`, which matches every such NIC) says nothing.
    fn hca_list_len(&self) -> Option<usize> {
        let v = self.set("NCCL_IB_HCA")?.trim();
        let v = v.strip_prefix('=').unwrap_or(v);
        if v.starts_with('^') || v.is_empty() {
            return None;
        }
        let names: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        (names.len() > 1 || names.iter().any(|n| n.contains(':'))).then_some(names.len())
    }

    pub(super) fn set(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    pub(super) fn flag_on(&self, key: &str) -> bool {
        self.set(key).is_some_and(|v| v.trim() == "1")
    }

    /// The same facts with the path overrides taken out: what the machine would give.
    pub(super) fn without_overrides(&self) -> Situation {
        let mut s = self.clone();
        s.env.retain(|k, _| !OVERRIDES.contains(&k.as_str()));
        // A log's transports were chosen under the overrides; they say nothing without them.
        s.log_transports.clear();
        s.log_network = None;
        s.log_nics.clear();
        s
    }
}

/// The GPU a record's ranks name (`0 [0x1b] NVIDIA A100-SXM4-40GB` → the model part).
fn gpu_name(record: &RunRecord) -> Option<String> {
    record.backend.ranks.iter().find_map(|r| {
        let d = r.device.as_deref()?.trim();
        let name = match d.find(']') {
            Some(i) => d[i + 1..].trim(),
            None => d.trim_start_matches(|c: char| c.is_ascii_digit()).trim(),
        };
        (!name.is_empty()).then(|| name.to_string())
    })
}

/// How a hint that names the GPU model from a host name begins.
const HOST_GPU: &str = "GPU model ";

/// Names a driver prints for a GPU it does not know (`NVIDIA Graphics Device` on GB200 with
/// drivers older than the part): they say nothing of the model.
fn generic_gpu_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("graphics device") || n == "nvidia" || n == "unknown"
}

/// A GPU model named as a word of a host name (`slurm-gb200-207-171`, `h100-node-03`): the
/// model a known GPU name of four characters or more spells, with the host it came from.
fn gpu_from_hosts(record: &RunRecord) -> Option<(String, String)> {
    let names: Vec<&str> = super::hardware::gpu_names()
        .filter(|n| n.len() >= 4 && !n.contains(' ') && n.chars().any(|c| c.is_ascii_digit()))
        .collect();
    record.backend.hosts.iter().find_map(|host| {
        host.split(|c: char| !c.is_ascii_alphanumeric())
            .find_map(|word| names.iter().find(|n| n.eq_ignore_ascii_case(word)))
            .map(|n| (n.to_ascii_uppercase(), host.clone()))
    })
}

/// The node count a cut device list implies: the poster kept a few `# Rank` lines (often the
/// last), each naming its host and device index. With one GPU per rank and ranks filled node by
/// node, rank r sits on device r mod p of node r / p for p ranks per node; lines on one host
/// share a node, lines on two hosts do not. Only where exactly one p that divides the world fits
/// every line (rank 71 on device 3 of 72 ranks: p = 4), and never where every line says device
/// 0 (a launcher that gives each process one GPU numbers them all 0).
fn nodes_from_rank_lines(record: &RunRecord, nranks: usize) -> Option<(usize, String)> {
    let ranks = &record.backend.ranks;
    if ranks.is_empty() || ranks.len() >= nranks {
        return None;
    }
    let listed: Vec<(usize, usize, &str)> = ranks
        .iter()
        .map(|r| {
            let d = r.device.as_deref()?.trim();
            let digits: String = d.chars().take_while(|c| c.is_ascii_digit()).collect();
            Some((r.rank, digits.parse::<usize>().ok()?, r.host.as_str()))
        })
        .collect::<Option<_>>()?;
    let top = listed.iter().map(|(_, d, _)| *d).max()?;
    if top == 0 || !listed.iter().any(|(r, d, _)| r > d) {
        return None;
    }
    let fits = |p: usize| {
        nranks.is_multiple_of(p)
            && listed.iter().all(|(r, d, host)| {
                r % p == *d
                    && listed
                        .iter()
                        .all(|(r2, _, h2)| (h2 == host) == (r2 / p == r / p))
            })
    };
    let mut ps = (top + 1..=nranks).filter(|&p| fits(p));
    let p = ps.next()?;
    if ps.next().is_some() || p == nranks {
        return None;
    }
    let (r, d, _) = listed[listed.len() - 1];
    Some((
        nranks / p,
        format!(
            "{} nodes of {p} GPUs: the device list is cut, and rank {r} on device {d} of {nranks} ranks fits {p} ranks per node only",
            nranks / p
        ),
    ))
}

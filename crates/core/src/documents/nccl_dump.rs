//! What NCCL wrote about itself: the system it detected (`NCCL_TOPO_DUMP_FILE`: CPUs, the PCI
//! tree, GPUs and their NVLinks, NICs with speed and GPUDirect support) and the graphs its
//! search chose (`NCCL_GRAPH_DUMP_FILE`: per pattern the channels, their bandwidth, link types
//! and the NIC each channel enters and leaves by), with the rail map derived from both.

use serde::{Deserialize, Serialize};

/// One CPU (NUMA node) of the system dump.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpCpu {
    /// `numaid` (-1 when the kernel gave none).
    pub numa: Option<i64>,
    pub arch: Option<String>,
    pub vendor: Option<String>,
    pub affinity: Option<String>,
    /// `host_hash`: which node of a multi-node dump (NCCL 2.19+).
    pub host_hash: Option<String>,
}

/// One NVLink (or C2C) bundle from a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpNvLink {
    /// The far end's PCI bus id (a GPU, an NVSwitch, or the CPU).
    pub target: String,
    /// Links in the bundle.
    pub count: u32,
    /// The far end's PCI class: `0x068000` an NVSwitch, `0x030200`/`0x030000` a GPU,
    /// `0x060400` a CPU (POWER, Grace).
    pub tclass: Option<String>,
}

impl DumpNvLink {
    pub fn to_nvswitch(&self) -> bool {
        self.tclass.as_deref() == Some("0x068000")
    }
}

/// Where a GPU or NIC sits: under which CPU and through which PCI bridges.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Index into `NcclSystem::cpus`.
    pub cpu: usize,
    /// Bus ids of the PCI switches and bridges from the CPU down, the device's own last.
    pub pci_path: Vec<String>,
    /// The device's PCIe link as NCCL read it (`32.0 GT/s PCIe`, lanes).
    pub link_speed: Option<String>,
    pub link_width: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpGpu {
    /// NVML index (`dev`), NCCL's name for the GPU in graphs and logs; `None` in a
    /// hand-written topology file that lists the GPU only as a PCI device of its class.
    pub dev: Option<u32>,
    pub rank: Option<i64>,
    /// Compute capability as NCCL prints it (90 for Hopper).
    pub sm: Option<u32>,
    /// The GPU supports GPUDirect RDMA (`gdr="1"`).
    pub gdr: Option<bool>,
    pub bus_id: Option<String>,
    pub place: Placement,
    pub nvlinks: Vec<DumpNvLink>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpNet {
    /// Network device index (`dev`), as graphs and `NET/IB : Using [N]` number it; `None`
    /// for a NIC a topology file lists only as a PCI device of its class.
    pub dev: Option<u32>,
    /// `mlx5_0`, `eth0`, `rdmap16s27` ... (empty when only the PCI device is listed).
    pub name: String,
    /// The PCI class of the NIC's function (`0x020700` InfiniBand, `0x020000` Ethernet).
    pub pci_class: Option<String>,
    /// Port speed in Mb/s, as the net plugin reports it (400000 for NDR).
    pub speed_mbps: Option<u64>,
    pub port: Option<u32>,
    /// The port GUID; `0x0` for a socket device.
    pub guid: Option<String>,
    /// The NIC can read and write GPU memory (GPUDirect RDMA: peer memory or dma-buf).
    pub gdr: Option<bool>,
    /// CollNet (SHARP) capable.
    pub coll: Option<bool>,
    pub latency: Option<f64>,
    pub maxconn: Option<u64>,
    /// The NIC's PCI address (none for a virtual NIC attached to the CPU).
    pub bus_id: Option<String>,
    pub place: Placement,
}

impl DumpNet {
    /// A verbs (RDMA) device rather than a socket: a non-zero GUID, or a driver name that only
    /// RDMA NICs carry.
    pub fn rdma(&self) -> bool {
        let guid = self
            .guid
            .as_deref()
            .is_some_and(|g| !matches!(g.trim_start_matches("0x"), "" | "0"));
        let rdma_name = [
            "mlx5_", "mlx4_", "bnxt_re", "irdma", "ibp", "rdmap", "efa_", "hfi1_", "qedr", "ionic_",
        ]
        .iter()
        .any(|p| self.name.starts_with(p));
        let ib_class = self
            .pci_class
            .as_deref()
            .is_some_and(|c| c.starts_with("0x0207"));
        guid || rdma_name || ib_class
    }

    /// How a person names it: `mlx5_0` (NET 3), or the PCI address.
    pub fn label(&self) -> String {
        match (self.name.is_empty(), self.dev, &self.bus_id) {
            (false, Some(d), _) => format!("{} (NET {d})", self.name),
            (false, None, _) => self.name.clone(),
            (true, Some(d), _) => format!("NET {d}"),
            (true, None, Some(b)) => format!("NIC {b}"),
            (true, None, None) => "NIC ?".into(),
        }
    }
}

impl DumpGpu {
    pub fn label(&self) -> String {
        match (self.dev, &self.bus_id) {
            (Some(d), _) => format!("GPU {d}"),
            (None, Some(b)) => format!("GPU {b}"),
            (None, None) => "GPU ?".into(),
        }
    }
}

/// `NCCL_TOPO_DUMP_FILE`'s `<system>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclSystem {
    pub version: Option<String>,
    pub cpus: Vec<DumpCpu>,
    pub gpus: Vec<DumpGpu>,
    pub nets: Vec<DumpNet>,
    /// NVSwitches seen as PCI devices (`class 0x068000`) or as NVLink targets.
    pub nvswitches: usize,
}

/// One search result of `NCCL_GRAPH_DUMP_FILE`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpGraph {
    pub id: Option<u32>,
    /// `NCCL_TOPO_PATTERN_*` as a number and a name.
    pub pattern: u32,
    pub pattern_name: String,
    pub nchannels: u32,
    pub crossnic: Option<u32>,
    /// GB/s per channel inside a node and between nodes (`speedintra`/`bwintra`).
    pub bw_intra: Option<f64>,
    pub bw_inter: Option<f64>,
    pub latency_inter: Option<f64>,
    /// Path types (`NVL`, `PIX`, `SYS`, `NET` ...).
    pub type_intra: Option<String>,
    pub type_inter: Option<String>,
    pub same_channels: Option<bool>,
    pub channels: Vec<DumpChannel>,
}

/// A channel's walk: the NIC it enters by, the GPUs in order, the NIC it leaves by.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpChannel {
    pub net_in: Option<u32>,
    pub gpus: Vec<u32>,
    pub net_out: Option<u32>,
}

/// `NCCL_GRAPH_DUMP_FILE`'s `<graphs>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclGraphs {
    pub version: Option<String>,
    pub graphs: Vec<DumpGraph>,
}

/// What a graph is for: by its id where NCCL wrote one (`src/init.cc`: ring 0, tree 1,
/// CollNet chain 2, NVLS 3, CollNet direct 4; the CollNet chain searches the tree pattern),
/// else by NCCL's pattern (`src/include/graph.h`, `NCCL_TOPO_PATTERN_*`).
pub fn graph_name(id: Option<u32>, pattern: u32) -> &'static str {
    match (id, pattern) {
        (Some(2), 3) => "CollNet chain",
        (Some(4), 6) | (_, 6) => "CollNet direct",
        _ => pattern_name(pattern),
    }
}

/// NCCL's pattern names (`src/include/graph.h`, `NCCL_TOPO_PATTERN_*`).
pub fn pattern_name(pattern: u32) -> &'static str {
    match pattern {
        1 => "balanced tree",
        2 => "split tree",
        3 => "tree",
        4 => "ring",
        5 => "NVLS",
        6 => "CollNet direct",
        _ => "unknown",
    }
}

impl NcclGraphs {
    /// The graphs of one pattern with channels.
    pub fn used(&self, pattern: u32) -> impl Iterator<Item = &DumpGraph> {
        self.graphs
            .iter()
            .filter(move |g| g.pattern == pattern && g.nchannels > 0)
    }

    /// Whether the dump states the pattern at all (searched, channels or none).
    pub fn searched(&self, pattern: u32) -> bool {
        self.graphs.iter().any(|g| g.pattern == pattern)
    }

    /// The CollNet graphs (chain and direct), with channels or none.
    pub fn collnet(&self) -> impl Iterator<Item = &DumpGraph> {
        self.graphs
            .iter()
            .filter(|g| g.pattern_name.starts_with("CollNet"))
    }
}

pub const PATTERN_RING: u32 = 4;
pub const PATTERN_NVLS: u32 = 5;
pub const PATTERN_COLLNET_DIRECT: u32 = 6;

/// How far apart two devices are, nearest first, in `nvidia-smi topo -m`'s words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PathKind {
    /// Behind one PCIe switch port.
    #[serde(rename = "PIX")]
    Pix,
    /// Behind one PCIe switch, several ports apart.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the CPU's host bridge, one socket.
    #[serde(rename = "PHB")]
    Phb,
    /// Across sockets.
    #[serde(rename = "SYS")]
    Sys,
}

impl PathKind {
    pub fn code(self) -> &'static str {
        match self {
            PathKind::Pix => "PIX",
            PathKind::Pxb => "PXB",
            PathKind::Phb => "PHB",
            PathKind::Sys => "SYS",
        }
    }

    /// Whether NCCL uses GPUDirect RDMA over this path by default (`NCCL_NET_GDR_LEVEL`
    /// defaults to PXB).
    pub fn gdr_by_default(self) -> bool {
        self <= PathKind::Pxb
    }
}

/// The path between a GPU and a NIC as the dump's tree places them.
pub fn path_between(a: &Placement, b: &Placement) -> PathKind {
    if a.cpu != b.cpu {
        return PathKind::Sys;
    }
    // Bridges above each device (its own id is the last element).
    let above = |p: &Placement| p.pci_path[..p.pci_path.len().saturating_sub(1)].to_vec();
    let (x, y) = (above(a), above(b));
    let shared = x.iter().zip(&y).take_while(|(p, q)| p == q).count();
    match shared {
        0 => PathKind::Phb,
        // The same bridge right above both: one switch port's downstream (PIX); a shared
        // bridge higher up crosses the switch (PXB).
        n if n == x.len() && n == y.len() => PathKind::Pix,
        _ => PathKind::Pxb,
    }
}

/// A GPU and the NIC(s) its traffic leaves by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rail {
    /// `GPU 0`, or the GPU's PCI address when the file gives no index.
    pub gpu: String,
    pub gpu_dev: Option<u32>,
    pub gpu_bus_id: Option<String>,
    pub gpu_numa: Option<i64>,
    /// The NIC, and how many channels of the ring graph use it from this GPU; `None` when no
    /// graph was given (then `nearest` is the NIC NCCL would prefer).
    pub net: Option<u32>,
    /// `mlx5_0 (NET 0)`, or the NIC's PCI address.
    pub net_name: Option<String>,
    pub net_numa: Option<i64>,
    pub net_bus_id: Option<String>,
    pub channels: u32,
    pub path: Option<PathKind>,
    /// GPUDirect RDMA on this rail: both ends support it and the path is within NCCL's default
    /// level. `None` when the dump does not say.
    pub gdr: Option<bool>,
    /// The nearest RDMA NIC to this GPU, when it is nearer than the one used.
    pub nearest: Option<String>,
    pub nearest_path: Option<PathKind>,
}

/// `ncclprobe topo --from` on NCCL's dumps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclDump {
    pub system: Option<NcclSystem>,
    pub graphs: Option<NcclGraphs>,
    pub rails: Vec<Rail>,
}

impl NcclSystem {
    /// NVLinks from `gpu` to `other`: direct bundles, or through NVSwitches (as many as the
    /// fewer of the two GPUs has to the switches), 0 when none.
    pub fn nvlinks_between(&self, gpu: &DumpGpu, other: &DumpGpu) -> u32 {
        let to = |g: &DumpGpu, bus: &Option<String>| -> u32 {
            g.nvlinks
                .iter()
                .filter(|l| {
                    bus.as_deref()
                        .is_some_and(|b| l.target.eq_ignore_ascii_case(b))
                })
                .map(|l| l.count)
                .sum()
        };
        let switched = |g: &DumpGpu| -> u32 {
            g.nvlinks
                .iter()
                .filter(|l| l.to_nvswitch())
                .map(|l| l.count)
                .sum()
        };
        let direct = to(gpu, &other.bus_id).max(to(other, &gpu.bus_id));
        direct + switched(gpu).min(switched(other))
    }

    /// The dump as `nvidia-smi topo -m` would state it: GPUs then NICs, NV# between GPUs with
    /// NVLinks, else the PCIe path; CPU affinity and NUMA node per device. What NCCL reads from
    /// its dump is more than this matrix holds; the rails keep the rest.
    pub fn to_topology(&self) -> Topology {
        let mut t = Topology {
            legend: "new".into(),
            notes: vec!["read from an NCCL topology dump".into()],
            ..Topology::default()
        };
        let gpu_names: Vec<String> = (0..self.gpus.len()).map(|i| format!("GPU{i}")).collect();
        let nic_names: Vec<String> = (0..self.nets.len()).map(|i| format!("NIC{i}")).collect();
        t.devices.extend(gpu_names.iter().cloned());
        t.devices.extend(nic_names.iter().cloned());
        let info = |p: &Placement, bus: &Option<String>| {
            let cpu = self.cpus.get(p.cpu);
            DeviceInfo {
                cpu_affinity: cpu.and_then(|c| c.affinity.clone()),
                numa_affinity: cpu
                    .and_then(|c| c.numa)
                    .filter(|n| *n >= 0)
                    .map(|n| n.to_string()),
                gpu_numa_id: None,
                pci_bus_id: bus.clone(),
            }
        };
        for (name, g) in gpu_names.iter().zip(&self.gpus) {
            t.info.insert(name.clone(), info(&g.place, &g.bus_id));
        }
        for (name, n) in nic_names.iter().zip(&self.nets) {
            t.info.insert(name.clone(), info(&n.place, &n.bus_id));
            let label = if n.name.is_empty() {
                n.label()
            } else {
                n.name.clone()
            };
            t.nic_names.insert(name.clone(), label);
        }
        let places: Vec<(&String, &Placement)> = gpu_names
            .iter()
            .zip(self.gpus.iter().map(|g| &g.place))
            .chain(nic_names.iter().zip(self.nets.iter().map(|n| &n.place)))
            .collect();
        for (i, (a, pa)) in places.iter().enumerate() {
            for (j, (b, pb)) in places.iter().enumerate() {
                if i == j {
                    continue;
                }
                let nv = (i < self.gpus.len() && j < self.gpus.len())
                    .then(|| self.nvlinks_between(&self.gpus[i], &self.gpus[j]))
                    .filter(|n| *n > 0);
                let code = match nv {
                    Some(n) => format!("NV{n}"),
                    None => path_between(pa, pb).code().to_string(),
                };
                t.links.push(((*a).clone(), (*b).clone(), code));
            }
        }
        t
    }
}

use crate::documents::topology::{DeviceInfo, Topology};

/// One choice NCCL's tuner stated for a collective call: the algorithm, the protocol and the
/// channels it ran on, for a message size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgoChoice {
    /// `AllReduce`, ... (NCCL 2.23+ name it; 2.20-2.22 print sizes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<String>,
    /// Bytes NCCL tuned for (the message, as NCCL counts it for the collective).
    pub bytes: u64,
    /// `Ring`, `Tree`, `NVLS`, `NVLSTree`, `CollNetDirect`, `CollNetChain`, `PAT`.
    pub algo: String,
    /// `LL`, `LL128`, `Simple`.
    pub proto: String,
    /// Channels used (2.24+: `channel{Lo..Hi}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
}

/// NCCL's algorithm names (`ncclAlgoStr`), by number (`NCCL_ALGO_*`) or upper-case name
/// (`ncclAlgoToString`).
pub fn algo_name(text: &str) -> Option<&'static str> {
    Some(match text.to_ascii_uppercase().as_str() {
        "0" | "TREE" => "Tree",
        "1" | "RING" => "Ring",
        "2" | "COLLNET_DIRECT" | "COLLNETDIRECT" => "CollNetDirect",
        "3" | "COLLNET_CHAIN" | "COLLNETCHAIN" => "CollNetChain",
        "4" | "NVLS" => "NVLS",
        "5" | "NVLS_TREE" | "NVLSTREE" => "NVLSTree",
        "6" | "PAT" => "PAT",
        _ => return None,
    })
}

/// NCCL's protocol names (`ncclProtoStr`), by number (`NCCL_PROTO_*`) or name.
pub fn proto_name(text: &str) -> Option<&'static str> {
    Some(match text.to_ascii_uppercase().as_str() {
        "0" | "LL" => "LL",
        "1" | "LL128" => "LL128",
        "2" | "SIMPLE" => "Simple",
        _ => return None,
    })
}

/// Channel counts NCCL states after init (`%d coll channels, %d collnet channels, %d nvls
/// channels, %d p2p channels, ...`; older versions lack the middle two).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelCounts {
    pub coll: Option<u32>,
    pub collnet: Option<u32>,
    pub nvls: Option<u32>,
    pub p2p: Option<u32>,
}

/// What NCCL's tuner used at one point of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgoUsed {
    pub algo: String,
    pub proto: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Tuner lines that stated this choice for the point's size.
    pub calls: u64,
    /// Other choices stated for the same size (`Tree/LL x3`), when NCCL changed its mind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl AlgoUsed {
    /// `Ring/LL128/8ch`, as the table's column prints it.
    pub fn short(&self) -> String {
        match self.channels {
            Some(c) => format!("{}/{}/{c}ch", self.algo, self.proto),
            None => format!("{}/{}", self.algo, self.proto),
        }
    }

    /// The choice that the most lines state for one (collective, size), the rest in `also`.
    pub fn from_choices<'a>(
        choices: impl Iterator<Item = (&'a AlgoChoice, u64)>,
    ) -> Option<AlgoUsed> {
        let mut all: Vec<(&AlgoChoice, u64)> = choices.collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let (first, calls) = *all.first()?;
        Some(AlgoUsed {
            algo: first.algo.clone(),
            proto: first.proto.clone(),
            channels: first.channels,
            calls,
            also: all[1..]
                .iter()
                .map(|(c, n)| {
                    let ch = c.channels.map_or(String::new(), |c| format!("/{c}ch"));
                    format!("{}/{}{ch} x{n}", c.algo, c.proto)
                })
                .collect(),
        })
    }
}

/// What a run's NCCL said about itself: read from the debug log and dumps the NCCL backend
/// asked it to write (or the user's own, when they set the variables).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclObserved {
    /// Files read (file names), and the variables ncclprobe set to get them.
    pub files: Vec<String>,
    pub set_by_ncclprobe: Vec<String>,
    pub version: Option<String>,
    /// `Using network ...` (every distinct one).
    pub networks: Vec<String>,
    /// NCCL's IB plugin's ports (`mlx5_0:1/IB`).
    pub net_devices: Vec<String>,
    /// Transports the channels used (`P2P/CUMEM`, `SHM`, `NET/IB/GDRDMA` ...).
    pub transports: Vec<String>,
    pub gdr: bool,
    pub nvls_support: Option<bool>,
    pub channels: Option<ChannelCounts>,
    /// The topology and graphs NCCL dumped, with the rail map.
    pub dump: Option<NcclDump>,
    /// Tuner lines read (per-call choices).
    pub tuner_lines: u64,
    /// NCCL's own warnings (first few).
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
    /// `--show-algo`: how the tuner's choices were learned. `untimed-first-call`: its lines
    /// were on for each point's first (checked, untimed) call only; `logged-every-call`: on
    /// for every call, so the timings include NCCL's per-call logging on rank 0. Absent in
    /// records from before it was kept, and without `--show-algo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algo_learned: Option<String>,
}

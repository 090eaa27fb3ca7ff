//! `NCCL_DEBUG=INFO` logs and the error output around them: NCCL version, ranks, hosts, devices,
//! per-channel transports (new `Channel NN :` and old `Ring NN :` forms), variables set by the
//! environment, P2P and /dev/shm trouble, NCCL warnings and errors, lines that place two ranks
//! on different nodes, and PyTorch's watchdog (`torch_watchdog`).

#[path = "nccl_choices.rs"]
mod nccl_choices;
#[path = "torch_watchdog.rs"]
pub mod torch_watchdog;

pub use super::nccl_lines::normalise_transport;
use super::nccl_lines::{
    channel_re, comm_re, env_re, host_of, is_error, is_shm_failure, nnodes_re, nvls_channels,
    prefix_of, virtual_nic,
};
use super::text::{self, InputError, Line};
pub use crate::documents::diagnosis::Evidence;
use crate::documents::nccl_dump::{AlgoChoice, ChannelCounts};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use torch_watchdog::{Joiner, Report};
pub use torch_watchdog::{WatchdogEvent, WorkProgress};

pub const EXPECTED: &str = "an NCCL_DEBUG=INFO log, NCCL/PyTorch error output";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSeen {
    pub rank: usize,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub cuda_dev: Option<u32>,
    pub bus_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LogFacts {
    pub nccl_version: Option<String>,
    pub hosts: BTreeSet<String>,
    pub ranks: BTreeMap<usize, RankSeen>,
    pub nranks: Option<usize>,
    pub nnodes: Option<usize>,
    pub local_ranks: Option<usize>,
    /// Normalised transport → the lines that show it.
    pub transports: BTreeMap<String, Vec<Evidence>>,
    pub gdrdma: bool,
    /// The network plugin NCCL chose for inter-node traffic ("Socket", "IB", ...), with its line.
    pub network: Option<(String, Evidence)>,
    /// NICs NCCL's IB plugin lists (`NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE`), as
    /// `mlx5_0:1/IB`: how many a node has, and whether they are InfiniBand or RoCE.
    pub net_devices: Vec<String>,
    /// Virtual NICs NCCL fused from ports (2.21+, `NET/IB : Made virtual device [2]
    /// name=mlx5_0+mlx5_1 speed=800000 ndevs=2`): the device index graphs name, and the
    /// ports' names. From 2.24 a topology dump lists the ports only (see `nccl_dump::rails`).
    pub virtual_nics: BTreeMap<u32, Vec<String>>,
    pub env: BTreeMap<String, (String, Evidence)>,
    pub p2p_unavailable: Vec<Evidence>,
    pub gdr_disabled: Vec<Evidence>,
    pub warnings: Vec<Evidence>,
    pub errors: Vec<Evidence>,
    pub shm_failures: Vec<Evidence>,
    pub watchdog: Vec<WatchdogEvent>,
    /// Ranks' queues of NCCL work as PyTorch's watchdog reports them.
    pub progress: Vec<WorkProgress>,
    /// Lines that put two ranks on different nodes whatever the host names say: a channel
    /// whose two ends have the same device (bus id, or NVML index from NCCL 2.19), two ranks on
    /// the same bus id, a CollNet (SHARP) connection.
    pub cross_node: Vec<Evidence>,
    pub wsl_hints: Vec<Evidence>,
    /// Lines that name a known cause (`nccl_causes::cause_of`), by cause.
    pub causes: BTreeMap<&'static str, Vec<Evidence>>,
    pub bootstrap: Vec<Evidence>,
    /// Every network plugin a `Using network` line names (hosts may differ), with the lines.
    pub networks: BTreeMap<String, Vec<Evidence>>,
    /// `NET/IB : No device found.`: the IB plugin saw no usable device on that host.
    pub ib_no_device: Vec<Evidence>,
    /// `NET/Socket : Using [0]eth0:10.0.0.1<0> ...`: the interfaces the socket plugin took.
    pub socket_interfaces: Vec<Evidence>,
    /// `GPU Direct RDMA Enabled for GPU ... / HCA ...`.
    pub gdr_enabled: Vec<Evidence>,
    /// `NVLS multicast support is [not ]available on dev N`: the last one's verdict.
    pub nvls_support: Option<(bool, Evidence)>,
    /// The channel counts after init, with their line.
    pub channel_counts: Option<(ChannelCounts, Evidence)>,
    /// The tuner's per-call choices (algorithm, protocol, channels by size), each kept once
    /// with the number of lines that stated it (kept out of JSON: a map keyed by a struct).
    #[serde(skip)]
    pub choices: BTreeMap<AlgoChoice, u64>,
    /// Lines the message catalogue knows (`messages`), in order, with their processes.
    #[serde(skip)]
    pub messages: super::messages::seen::Seen,
    pub lines: usize,
    /// Lines that were NCCL's own (INFO/WARN/TRACE), to tell a log from something else.
    pub nccl_lines: usize,
    /// A watchdog message being joined from wrapped lines.
    #[serde(skip)]
    joiner: Joiner,
}

/// The most lines of one kind a log's facts keep as evidence: a 200 MB log repeating a
/// warning costs no more memory than a short one.
const MAX_EVIDENCE: usize = 100;

fn keep(list: &mut Vec<Evidence>, ev: &dyn Fn() -> Evidence) {
    if list.len() < MAX_EVIDENCE {
        list.push(ev());
    }
}

impl LogFacts {
    pub fn feed(&mut self, file: &str, line: &Line) {
        self.lines += 1;
        let mut reports = Vec::new();
        self.joiner.push(file, line, &mut |r| reports.push(r));
        self.take_reports(reports);
        let t = line.text.trim();
        if t.is_empty() || line.raw.starts_with("# source:") {
            return;
        }
        let ev = || Evidence {
            file: file.to_string(),
            line: line.number,
            text: t.chars().take(300).collect(),
        };
        let known = self.messages.feed(&ev, t, self.nccl_version.as_deref());
        // A line the catalogue knows is NCCL's (or its neighbours') even without the prefix.
        let nccl_line =
            known || t.contains("NCCL INFO") || t.contains("NCCL WARN") || t.contains("NCCL TRACE");
        if nccl_line {
            self.nccl_lines += 1;
        }
        if nccl_line {
            if let Some(host) = host_of(t) {
                if !self.hosts.contains(host) {
                    self.hosts.insert(host.to_string());
                }
            }
        }
        if let Some(v) = t.find("NCCL version ").map(|i| &t[i + 13..]) {
            if let Some(ver) = v
                .split_whitespace()
                .next()
                .filter(|s| s.starts_with(|c: char| c.is_ascii_digit()))
            {
                self.nccl_version.get_or_insert_with(|| ver.to_string());
                self.nccl_lines += usize::from(!nccl_line);
            }
        }
        self.topology_line(t, &ev);
        self.trouble_line(t, &ev);
    }

    /// The watchdog's messages, each kept once per rank and kind of report.
    fn take_reports(&mut self, reports: Vec<Report>) {
        for r in reports {
            match r {
                Report::Event(e) if self.watchdog.len() < MAX_EVIDENCE => self.watchdog.push(e),
                Report::Progress(p) if self.progress.len() < MAX_EVIDENCE => {
                    // A rank's periodic or on-signal state: the latest one counts.
                    let same = self.progress.iter().position(|q| {
                        q.rank == p.rank
                            && q.process_group == p.process_group
                            && q.failed_seq.is_none()
                            && p.failed_seq.is_none()
                    });
                    match same {
                        Some(i) => self.progress[i] = p,
                        None => self.progress.push(p),
                    }
                }
                _ => {}
            }
        }
    }

    /// Read the watchdog message still being joined (the input ended).
    pub fn flush(&mut self, file: &str) {
        let mut reports = Vec::new();
        self.joiner.flush(file, &mut |r| reports.push(r));
        self.take_reports(reports);
    }

    /// A channel line: its transport, and whether its two ends are on different nodes. NCCL
    /// prints each end as `rank[device]` (the bus id, or from 2.19 the NVML index): two ranks of
    /// one communicator never share a device on one node, so equal devices on a network
    /// channel cross nodes. (NCCL 2.4's `Ring` lines print the CUDA index, which every process
    /// may see as 0.) A CollNet connection goes to the switch (SHARP) between nodes.
    fn channel_line(&mut self, c: &regex::Captures, ev: &dyn Fn() -> Evidence) {
        let via = &c["via"];
        let transport = normalise_transport(via);
        if via.contains("GDRDMA") {
            self.gdrdma = true;
        }
        let same_device = match (c.name("fdev"), c.name("tdev")) {
            (Some(a), Some(b)) => a.as_str().eq_ignore_ascii_case(b.as_str()),
            _ => false,
        };
        // P2P (but multi-node NVLink) and SHM never leave a node, whatever their ends print
        // (old `P2P/common device` lines print one CUDA index twice).
        let node_local =
            (transport.starts_with("P2P") && !via.contains("MNNVL")) || transport == "SHM";
        let crosses = (same_device && &c["kind"] != "Ring" && !node_local)
            || transport.starts_with("COLLNET");
        if crosses && c.name("from").map(|m| m.as_str()) != c.name("to").map(|m| m.as_str()) {
            keep(&mut self.cross_node, ev);
        }
        let list = self.transports.entry(transport).or_default();
        if list.len() < 20 {
            list.push(ev());
        }
    }

    /// A rank's device; a second rank on the same bus id, in another process, is on another node.
    fn rank_line(&mut self, seen: RankSeen, ev: &dyn Fn() -> Evidence) {
        let same_process =
            |a: &RankSeen, b: &RankSeen| a.pid.is_some() && a.pid == b.pid && a.host == b.host;
        let twin = self
            .ranks
            .values()
            .find(|r| r.rank != seen.rank && r.bus_id == seen.bus_id && !same_process(r, &seen));
        if let Some(twin) = twin {
            let line = ev();
            let text = format!(
                "rank {} and rank {} both use busId {}: {}",
                twin.rank,
                seen.rank,
                seen.bus_id.as_deref().unwrap_or("?"),
                line.text
            );
            let text: String = text.chars().take(300).collect();
            keep(&mut self.cross_node, &|| Evidence {
                text: text.clone(),
                ..line.clone()
            });
        }
        self.ranks.insert(seen.rank, seen);
    }

    /// The fewest nodes the log shows: two ranks on one bus id need as many nodes as ranks
    /// share it; any line of `cross_node` needs two.
    pub fn nodes_at_least(&self) -> usize {
        if self.cross_node.is_empty() {
            return 1;
        }
        let mut per_bus: BTreeMap<&str, usize> = BTreeMap::new();
        for b in self.ranks.values().filter_map(|r| r.bus_id.as_deref()) {
            *per_bus.entry(b).or_default() += 1;
        }
        per_bus.values().copied().max().unwrap_or(0).max(2)
    }

    /// Who talks to whom and how: channels and their transports, ranks, nodes, the network,
    /// variables NCCL says were set by the environment.
    fn topology_line(&mut self, t: &str, ev: &dyn Fn() -> Evidence) {
        if let Some(c) = t
            .contains(" via ")
            .then(|| channel_re().captures(t))
            .flatten()
        {
            self.channel_line(&c, ev);
        }
        if t.contains("NVLS comm ") || nvls_channels(t).is_some_and(|n| n > 0) {
            let list = self.transports.entry("NVLS".into()).or_default();
            if list.len() < 20 {
                list.push(ev());
            }
        }
        if let Some(c) = t
            .contains("cudaDev")
            .then(|| comm_re().captures(t))
            .flatten()
        {
            let prefix = prefix_of(t);
            let seen = RankSeen {
                rank: c["rank"].parse().unwrap_or(0),
                host: prefix.map(|(h, _)| h.to_string()),
                pid: prefix.map(|(_, p)| p),
                cuda_dev: c["dev"].parse().ok(),
                bus_id: Some(c["bus"].to_ascii_lowercase()),
            };
            self.nranks = c["n"].parse().ok().or(self.nranks);
            self.rank_line(seen, ev);
        }
        if let Some(c) = t
            .contains("nNodes")
            .then(|| nnodes_re().captures(t))
            .flatten()
        {
            self.nranks = c["n"].parse().ok().or(self.nranks);
            self.nnodes = c["nodes"].parse().ok().or(self.nnodes);
            self.local_ranks = c["local"].parse().ok().or(self.local_ranks);
        }
        if let Some(c) = t
            .contains("set by environment")
            .then(|| env_re().captures(t))
            .flatten()
        {
            self.env
                .insert(c["k"].to_string(), (c["v"].to_string(), ev()));
        }
        // The network NCCL picked: only used between nodes, so not a transport by itself.
        if let Some(i) = t.find("Using network ") {
            let name = t[i + 14..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            if !name.is_empty() && self.network.is_none() {
                self.network = Some((name, ev()));
            }
        }
        if let Some(i) = t.find("NET/IB : Using ") {
            for tok in t[i + 15..].split_whitespace() {
                // `[RO]; OOB ib0:10.0.0.1<0>`: the out-of-band interface is not an RDMA port.
                if tok.starts_with(';') || tok.starts_with("OOB") || tok.ends_with(';') {
                    break;
                }
                let dev = tok.split_once(']').map_or(tok, |(_, d)| d);
                if dev.contains(':')
                    && !self.net_devices.iter().any(|d| d == dev)
                    && self.net_devices.len() < 64
                {
                    self.net_devices.push(dev.to_string());
                }
            }
        }
        if let Some((dev, ports)) = virtual_nic(t) {
            if self.virtual_nics.len() < 64 {
                self.virtual_nics.insert(dev, ports);
            }
        }
        if t.contains("Bootstrap : Using") {
            keep(&mut self.bootstrap, ev);
        }
        self.choice_line(t, ev);
    }

    /// Signs of trouble: P2P or GPUDirect off, /dev/shm failures, WSL2, warnings and errors.
    fn trouble_line(&mut self, t: &str, ev: &dyn Fn() -> Evidence) {
        if t.contains("P2P is disabled between connected GPUs")
            || t.contains("Could not enable P2P")
            || t.contains("intraNodeP2pSupport 0")
            || t.contains("Legacy IPC not supported")
            || t.contains("lacks GPU P2P capability")
        {
            keep(&mut self.p2p_unavailable, ev);
        }
        if t.contains("GPU Direct RDMA Disabled") {
            keep(&mut self.gdr_disabled, ev);
        }
        // Lower-casing costs an allocation per line: only for lines that can matter.
        let interesting = t.contains("shm")
            || t.contains("shared memory")
            || t.contains("fallocate")
            || t.contains("rror")
            || t.contains("ailure")
            || t.contains("icrosoft")
            || t.contains("usage")
            || t.contains("exited");
        let lower = if interesting {
            t.to_ascii_lowercase()
        } else {
            String::new()
        };
        if is_shm_failure(&lower) {
            keep(&mut self.shm_failures, ev);
        }
        if t.contains("pci_bus") && t.contains("real path")
            || lower.contains("microsoft-standard")
            || t.contains("/dev/dxg")
            || t.contains("WSL")
        {
            keep(&mut self.wsl_hints, ev);
        }
        if let Some(cause) = super::nccl_causes::cause_of(t) {
            keep(self.causes.entry(cause).or_default(), ev);
        }
        if t.contains("NCCL WARN") && self.warnings.len() < 100 {
            self.warnings.push(ev());
        }
        if interesting && is_error(&lower) && self.errors.len() < 100 {
            self.errors.push(ev());
        }
    }

    /// Transport names seen, sorted.
    pub fn transport_names(&self) -> Vec<String> {
        self.transports.keys().cloned().collect()
    }

    /// Something NCCL or PyTorch wrote is in here.
    pub fn is_log(&self) -> bool {
        self.nccl_lines > 0
            || !self.watchdog.is_empty()
            || !self.progress.is_empty()
            || !self.errors.is_empty()
    }
}

pub fn parse_file(path: &Path) -> Result<LogFacts, InputError> {
    from_input(text::Input::open(path)?)
}

/// A log from an input opened once.
pub fn from_input(input: text::Input) -> Result<LogFacts, InputError> {
    let name = input.name.clone();
    let mut facts = LogFacts::default();
    let html = super::input::html::looks_like_html(&input.head_lines(400));
    input.lines(EXPECTED, |line| {
        if html {
            for l in super::input::html::lines_of(&line) {
                facts.feed(&name, &l);
            }
        } else {
            facts.feed(&name, &line);
        }
    })?;
    facts.finish(name)
}

impl LogFacts {
    /// What `feed` saw, or an error when nothing in it was a log.
    pub fn finish(self, name: String) -> Result<LogFacts, InputError> {
        let mut facts = self;
        facts.flush(&name);
        if !facts.is_log() {
            return Err(InputError::WrongKind {
                path: name,
                reason: "no NCCL INFO/WARN lines, NCCL errors or watchdog messages".into(),
                expected: EXPECTED.into(),
            });
        }
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(text: &str) -> LogFacts {
        let mut f = LogFacts::default();
        for (i, raw) in text.lines().enumerate() {
            let (t, tag) = text::clean(raw);
            f.feed(
                "t",
                &Line {
                    number: i + 1,
                    raw: raw.into(),
                    text: t,
                    tag_rank: tag,
                },
            );
        }
        f.flush("t");
        f
    }

    #[test]
    fn channels_old_and_new() {
        let f = facts(
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n\
             h:1:2 [0] NCCL INFO Channel 01 : 1[89000] -> 0[3d000] via direct shared memory\n\
             m:1:2 [2] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0/GDRDMA\n\
             m:1:2 [2] NCCL INFO Channel 00/0 : 2[2] -> 6[2] [send] via NET/Socket/1\n",
        );
        assert_eq!(
            f.transport_names(),
            vec!["NET/IB", "NET/Socket", "P2P/IPC", "SHM"]
        );
        assert!(f.gdrdma);
        assert_eq!(f.hosts.iter().cloned().collect::<Vec<_>>(), vec!["h", "m"]);
    }

    #[test]
    fn watchdog_old_and_new_formats() {
        let f = facts(
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800325 milliseconds before timing out.\n\
             [rank1]:[E626 06:24:44.9 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n",
        );
        assert_eq!(f.watchdog.len(), 2);
        assert_eq!(f.watchdog[0].rank, 3);
        assert_eq!(f.watchdog[0].timeout_ms, Some(1_800_000));
        assert_eq!(f.watchdog[1].seq, Some(808));
        assert_eq!(f.watchdog[1].process_group.as_deref(), Some("0"));
    }

    #[test]
    fn every_transport_nccl_prints_lands_in_the_facts() {
        let f = facts(
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
             h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA\n\
             h:1:1 [0] NCCL INFO Channel 02/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n\
             h:1:1 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/1/GDRDMA\n\
             h:1:1 [0] NCCL INFO Coll 01 : 0 [receive] via COLLNET/SHARP/1\n\
             h:1:1 [0] NCCL INFO NVLS comm 0x5581 headRank 0 nHeads 8 buffSize 1048576 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736\n",
        );
        let names = f.transport_names();
        for t in [
            "P2P/CUMEM",
            "NET/IBext_v8",
            "NET/AWS Libfabric",
            "COLLNET/SHARP",
            "NVLS",
        ] {
            assert!(names.contains(&t.to_string()), "{t} missing from {names:?}");
        }
        assert!(f.gdrdma);
        let counts = facts("h:1:1 [0] NCCL INFO 32 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer\n");
        assert_eq!(counts.transport_names(), vec!["NVLS".to_string()]);
    }

    #[test]
    fn every_devshm_failure_wording_is_one() {
        for line in [
            "h:1:1 [0] misc/shmutils.cc:73 NCCL WARN Error: failed to extend /dev/shm/nccl-vyWQlM to 9637892 bytes, error: No space left on device (28)",
            "h:1:1 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
            "h:1:1 [0] NCCL INFO Error while creating shared memory segment /dev/shm/nccl-vyWQlM (size 9637888)",
            "h:1:1 [0] misc/shmutils.cc:59 NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-abc, error Permission denied (13)",
            "h:1:1 [0] transport/net.cc:210 NCCL WARN Error: could not create shared memory in /dev/shm",
        ] {
            let f = facts(line);
            assert_eq!(f.shm_failures.len(), 1, "{line}");
        }
        assert!(facts(
            "h:1:1 [0] NCCL INFO Allocated 9637888 bytes of shared memory in /dev/shm/nccl-x\n"
        )
        .shm_failures
        .is_empty());
    }

    #[test]
    fn lines_that_put_two_ranks_on_different_nodes() {
        // Equal devices on both ends of a channel (NVML index from 2.19, bus id before),
        // CollNet, and two processes' ranks on one bus id.
        let f = facts(
            "a:1:1 [0] NCCL INFO Channel 00/0 : 3[0] -> 4[0] [send] via NET/IB/0\n\
             a:1:1 [0] NCCL INFO Channel 01 : 1[1b000] -> 9[1b000] via NET/Socket/0\n\
             a:1:1 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/1/GDRDMA\n\
             a:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 18000 commId 0x9 - Init START\n\
             a:2:2 [0] NCCL INFO comm 0x2 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 18000 commId 0x9 - Init START\n",
        );
        assert_eq!(f.cross_node.len(), 4, "{:?}", f.cross_node);
        assert!(f.cross_node[3]
            .text
            .starts_with("rank 3 and rank 11 both use busId 18000"));
        assert_eq!(f.nodes_at_least(), 2);
        // One node: different devices, NCCL 2.4's CUDA indices, one process in two
        // communicators (the same GPU as rank 0 of one and rank 1 of the other).
        let one = facts(
            "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n\
             a:1:1 [0] NCCL INFO Ring 00 : 0[0] -> 1[0] via NET/Socket/0\n\
             a:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via P2P/common device\n\
             a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 18000 - Init START\n\
             a:1:1 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 18000 - Init START\n",
        );
        assert!(one.cross_node.is_empty(), "{:?}", one.cross_node);
        assert_eq!(one.nodes_at_least(), 1);
    }

    #[test]
    fn watchdog_queues_and_wrapped_lines_reach_the_facts() {
        let f = facts(
            "[default3]:[rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 12345, last enqueued NCCL work: 12345, last co\n\
mpleted NCCL work: 12344.\n\
             h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n",
        );
        assert_eq!(f.progress.len(), 1);
        let p = &f.progress[0];
        assert_eq!(
            (p.rank, p.failed_seq, p.last_enqueued, p.last_completed),
            (3, Some(12345), Some(12345), Some(12344))
        );
        assert_eq!(f.transport_names(), vec!["P2P/IPC"]);
        assert!(f.is_log());
    }

    #[test]
    fn an_environment_value_does_not_keep_the_sentence_period() {
        let f = facts("h:1:1 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\nh:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0.1\n");
        assert_eq!(f.env["NCCL_COLLNET_ENABLE"].0, "1");
        assert_eq!(f.env["NCCL_SOCKET_IFNAME"].0, "eth0.1");
    }
}

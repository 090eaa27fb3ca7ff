//! NCCL's own dumps: the system XML `NCCL_TOPO_DUMP_FILE` names (also the hand-written
//! `NCCL_TOPO_FILE` clouds ship, same schema) and the graph XML of `NCCL_GRAPH_DUMP_FILE`,
//! as NCCL 2.4-2.28 write them (`src/graph/xml.cc`, `topo.cc`, `search.cc`). A file may hold
//! either, both, or one inside other text (a pasted log); the blocks are found by their root
//! elements and read with an XML parser, never by matching lines.

use super::text::{Input, InputError};
pub use crate::documents::nccl_dump::*;
use roxmltree::Node;
use std::collections::BTreeMap;

pub const EXPECTED: &str =
    "an NCCL topology or graph dump (NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_DUMP_FILE)";

/// Whether text holds one of NCCL's dumps: a `<system` or `<graphs` root with NCCL's
/// version attribute, from the first lines.
pub fn looks_like(head: &[&str]) -> bool {
    head.iter().any(|l| {
        let t = l.trim_start();
        (t.starts_with("<system") || t.starts_with("<graphs")) && t.contains("version=")
    })
}

/// The most elements one dump may hold: an NVL72 rack's system has a few thousand.
const MAX_NODES: u32 = 1_000_000;

/// Read every `<system>` and `<graphs>` block of `input`; the rail map is derived from them.
pub fn from_input(input: Input) -> Result<NcclDump, InputError> {
    let name = input.name.clone();
    let bytes = input.bytes(EXPECTED)?;
    from_text(&name, &String::from_utf8_lossy(&bytes))
}

pub fn from_text(name: &str, text: &str) -> Result<NcclDump, InputError> {
    let wrong = |reason: String| InputError::WrongKind {
        path: name.to_string(),
        reason,
        expected: EXPECTED.to_string(),
    };
    let mut dump = NcclDump::default();
    for (root, start, end) in blocks(text) {
        let block = &text[start..end];
        let line_of = |pos: roxmltree::TextPos| text[..start].lines().count() + pos.row as usize;
        let options = roxmltree::ParsingOptions {
            allow_dtd: false,
            nodes_limit: MAX_NODES,
            ..roxmltree::ParsingOptions::default()
        };
        let doc = roxmltree::Document::parse_with_options(block, options).map_err(|e| {
            wrong(format!(
                "line {}: the <{root}> block is not well-formed XML ({e})",
                line_of(e.pos())
            ))
        })?;
        let top = doc.root_element();
        match root {
            "system" if dump.system.is_none() => dump.system = Some(system(top)),
            "graphs" if dump.graphs.is_none() => dump.graphs = Some(graphs(top)),
            _ => {
                return Err(wrong(format!(
                    "line {}: a second <{root}> block (one dump per file: give each node's \
                     dump as its own file)",
                    line_of(doc.text_pos_at(0))
                )))
            }
        }
    }
    if dump.system.is_none() && dump.graphs.is_none() {
        return Err(wrong(
            "no <system version=...> or <graphs version=...> element".into(),
        ));
    }
    // A pasted log around the dumps may say which NICs NCCL fused.
    let fused: BTreeMap<u32, Vec<String>> = text
        .lines()
        .filter_map(super::nccl_lines::virtual_nic)
        .take(64)
        .collect();
    dump.rails = rails(dump.system.as_ref(), dump.graphs.as_ref(), &fused);
    Ok(dump)
}

/// `(root, start, end)` of each top-level `<system ...>...</system>` or `<graphs ...>` block.
fn blocks(text: &str) -> Vec<(&'static str, usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while from < text.len() {
        let next = ["system", "graphs"]
            .iter()
            .filter_map(|r| {
                let open = format!("<{r}");
                let mut at = from;
                // `<systemfoo` is not `<system`.
                while let Some(i) = text[at..].find(&open) {
                    let i = at + i;
                    let after = text[i + open.len()..].chars().next();
                    if after.is_some_and(|c| c.is_whitespace() || c == '>' || c == '/') {
                        return Some((*r, i));
                    }
                    at = i + open.len();
                }
                None
            })
            .min_by_key(|(_, i)| *i);
        let Some((root, start)) = next else { break };
        let close = format!("</{root}>");
        let end = match text[start..].find(&close) {
            Some(i) => start + i + close.len(),
            // Unclosed (a truncated paste): handed to the parser, which says where it ends.
            None => text.len(),
        };
        out.push((root, start, end));
        from = end;
    }
    out
}

fn attr<T: std::str::FromStr>(node: Node, name: &str) -> Option<T> {
    node.attribute(name).and_then(|v| v.trim().parse().ok())
}

fn text_attr(node: Node, name: &str) -> Option<String> {
    node.attribute(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn flag(node: Node, name: &str) -> Option<bool> {
    attr::<i64>(node, name).map(|v| v != 0)
}

fn elements<'a, 'i>(node: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    node.children().filter(Node::is_element)
}

fn system(top: Node) -> NcclSystem {
    let mut sys = NcclSystem {
        version: text_attr(top, "version"),
        ..NcclSystem::default()
    };
    let mut switches = std::collections::BTreeSet::new();
    for cpu in elements(top).filter(|n| n.has_tag_name("cpu")) {
        let index = sys.cpus.len();
        sys.cpus.push(DumpCpu {
            numa: attr(cpu, "numaid"),
            arch: text_attr(cpu, "arch"),
            vendor: text_attr(cpu, "vendor"),
            affinity: text_attr(cpu, "affinity"),
            host_hash: text_attr(cpu, "host_hash"),
        });
        walk(cpu, index, &mut Vec::new(), &mut sys, &mut switches);
    }
    for gpu in &sys.gpus {
        for l in gpu.nvlinks.iter().filter(|l| l.to_nvswitch()) {
            switches.insert(l.target.to_ascii_lowercase());
        }
    }
    sys.nvswitches = switches.len();
    sys
}

/// Walk the PCI tree under one CPU, `path` holding the bus ids above `node`.
fn walk(
    node: Node,
    cpu: usize,
    path: &mut Vec<String>,
    sys: &mut NcclSystem,
    switches: &mut std::collections::BTreeSet<String>,
) {
    for child in elements(node) {
        match child.tag_name().name() {
            "pci" => {
                let bus = text_attr(child, "busid").unwrap_or_default();
                let class = text_attr(child, "class").unwrap_or_default();
                if class == "0x068000" {
                    switches.insert(bus.to_ascii_lowercase());
                }
                path.push(bus);
                walk(child, cpu, path, sys, switches);
                // A topology file may list a GPU or NIC as a PCI function of its class alone.
                let has = |tag: &str| elements(child).any(|n| n.has_tag_name(tag));
                let here = || place(child, cpu, path);
                if (class.starts_with("0x0302") || class.starts_with("0x0300")) && !has("gpu") {
                    let place = here();
                    sys.gpus.push(DumpGpu {
                        bus_id: place.pci_path.last().cloned(),
                        place,
                        ..DumpGpu::default()
                    });
                }
                if class.starts_with("0x02") && !has("nic") {
                    let place = here();
                    sys.nets.push(DumpNet {
                        pci_class: Some(class.clone()),
                        bus_id: place.pci_path.last().cloned(),
                        place,
                        ..DumpNet::default()
                    });
                }
                path.pop();
            }
            "gpu" => sys.gpus.push(gpu(child, place(node, cpu, path))),
            "nic" => {
                let place = place(node, cpu, path);
                let pci_class = node
                    .has_tag_name("pci")
                    .then(|| text_attr(node, "class"))
                    .flatten();
                for net in elements(child).filter(|n| n.has_tag_name("net")) {
                    sys.nets.push(DumpNet {
                        dev: attr(net, "dev"),
                        name: text_attr(net, "name").unwrap_or_default(),
                        pci_class: pci_class.clone(),
                        speed_mbps: attr(net, "speed"),
                        port: attr(net, "port"),
                        guid: text_attr(net, "guid"),
                        gdr: flag(net, "gdr"),
                        coll: flag(net, "coll"),
                        latency: attr(net, "latency"),
                        maxconn: attr(net, "maxconn"),
                        bus_id: place.pci_path.last().cloned(),
                        place: place.clone(),
                    });
                }
            }
            _ => {}
        }
    }
}

/// Where the device under `parent` sits: a `pci` parent is the device's own PCI function.
fn place(parent: Node, cpu: usize, path: &[String]) -> Placement {
    let own_pci = parent.has_tag_name("pci");
    Placement {
        cpu,
        pci_path: if own_pci { path.to_vec() } else { Vec::new() },
        link_speed: own_pci.then(|| text_attr(parent, "link_speed")).flatten(),
        link_width: own_pci
            .then(|| attr(parent, "link_width"))
            .flatten()
            .filter(|w| *w > 0),
    }
}

fn gpu(node: Node, place: Placement) -> DumpGpu {
    DumpGpu {
        dev: attr(node, "dev"),
        rank: attr(node, "rank"),
        sm: attr(node, "sm"),
        gdr: flag(node, "gdr"),
        bus_id: place.pci_path.last().cloned(),
        place,
        nvlinks: elements(node)
            .filter(|n| n.has_tag_name("nvlink"))
            .map(|l| DumpNvLink {
                target: text_attr(l, "target").unwrap_or_default(),
                count: attr(l, "count").unwrap_or(1),
                tclass: text_attr(l, "tclass"),
            })
            .collect(),
    }
}

fn graphs(top: Node) -> NcclGraphs {
    NcclGraphs {
        version: text_attr(top, "version"),
        graphs: elements(top)
            .filter(|n| n.has_tag_name("graph"))
            .map(graph)
            .collect(),
    }
}

fn graph(node: Node) -> DumpGraph {
    let pattern = attr(node, "pattern").unwrap_or(0);
    // NCCL 2.4-2.17 wrote `speedintra`; later versions write `bwintra`.
    let either = |a: &str, b: &str| attr(node, a).or_else(|| attr(node, b));
    DumpGraph {
        id: attr(node, "id"),
        pattern,
        pattern_name: graph_name(attr(node, "id"), pattern).to_string(),
        nchannels: attr(node, "nchannels").unwrap_or(0),
        crossnic: attr(node, "crossnic"),
        bw_intra: either("bwintra", "speedintra"),
        bw_inter: either("bwinter", "speedinter"),
        latency_inter: attr(node, "latencyinter"),
        type_intra: text_attr(node, "typeintra"),
        type_inter: text_attr(node, "typeinter"),
        same_channels: flag(node, "samechannels"),
        channels: elements(node)
            .filter(|n| n.has_tag_name("channel"))
            .map(|c| {
                let mut ch = DumpChannel::default();
                for step in elements(c) {
                    let dev = attr::<u32>(step, "dev");
                    match step.tag_name().name() {
                        "gpu" => ch.gpus.extend(dev),
                        "net" if ch.gpus.is_empty() => ch.net_in = dev,
                        "net" => ch.net_out = dev,
                        _ => {}
                    }
                }
                ch
            })
            .collect(),
    }
}

/// Each GPU's NIC: the ones the ring channels enter and leave by (the GPU a channel starts at
/// receives from its entry NIC, the one it ends at sends by its exit NIC), else the nearest.
/// `fused` holds the virtual NICs NCCL's log says it made (`LogFacts::virtual_nics`): from
/// 2.24 a topology dump comes from a pass over physical ports only (src/graph/topo.cc, v2.28.9
/// 1373-1374, `usePhysicalDevices = dumpXmlFile || ...`), while the graphs name the fused NIC
/// by an index past the ports (1347-1350), which no `<net>` of the dump has.
pub fn rails(
    system: Option<&NcclSystem>,
    graphs: Option<&NcclGraphs>,
    fused: &BTreeMap<u32, Vec<String>>,
) -> Vec<Rail> {
    let mut used: BTreeMap<(u32, u32), u32> = Default::default();
    for g in graphs.into_iter().flat_map(|g| g.used(PATTERN_RING)) {
        for ch in &g.channels {
            if let (Some(n), Some(first)) = (ch.net_in, ch.gpus.first()) {
                *used.entry((*first, n)).or_default() += 1;
            }
            if let (Some(n), Some(last)) = (ch.net_out, ch.gpus.last()) {
                *used.entry((*last, n)).or_default() += 1;
            }
        }
    }
    let Some(sys) = system else {
        // A graph alone names devices by index only: the NICs each GPU's channels use.
        return used
            .iter()
            .map(|((g, n), c)| Rail {
                gpu: format!("GPU {g}"),
                gpu_dev: Some(*g),
                net: Some(*n),
                net_name: Some(match fused.get(n) {
                    Some(ports) => format!("{} (NET {n})", ports.join("+")),
                    None => format!("NET {n}"),
                }),
                channels: *c,
                ..unplaced()
            })
            .collect();
    };
    let mut out = Vec::new();
    for gpu in &sys.gpus {
        let nearest = nearest_net(sys, gpu);
        let mine: Vec<(Nic, u32)> = used
            .iter()
            .filter(|((g, _), _)| Some(*g) == gpu.dev)
            .map(|((_, n), c)| (nic(sys, fused, *n), *c))
            .collect();
        let picks: Vec<(Option<Nic>, u32)> = if mine.is_empty() {
            vec![(nearest.map(|(n, _)| Nic::Port(n)), 0)]
        } else {
            mine.into_iter().map(|(n, c)| (Some(n), c)).collect()
        };
        for (pick, channels) in picks {
            let numa = |p: &Placement| sys.cpus.get(p.cpu).and_then(|c| c.numa);
            let (n, name) = match pick {
                Some(Nic::Unknown(dev)) => {
                    // Said as unknown, not as no NIC: the channels do use one.
                    out.push(Rail {
                        gpu: gpu.label(),
                        gpu_dev: gpu.dev,
                        gpu_bus_id: gpu.bus_id.clone(),
                        gpu_numa: numa(&gpu.place),
                        net: Some(dev),
                        net_name: Some(format!("NET {dev} (not in the topology dump: a NIC NCCL fused from ports, whose `Made virtual device` line the log lacks)")),
                        channels,
                        ..unplaced()
                    });
                    continue;
                }
                Some(Nic::Port(n)) => (Some(n), (n.label(), n.dev)),
                Some(Nic::Fused(n, name, dev)) => (Some(n), (name, Some(dev))),
                None => (None, (String::new(), None)),
            };
            let (name, net) = name;
            let path = n.map(|n| path_between(&gpu.place, &n.place));
            let other_nearer = nearest.filter(|(near, p)| {
                n.is_some_and(|n| !std::ptr::eq(*near, n)) && path.is_some_and(|used| *p < used)
            });
            out.push(Rail {
                gpu: gpu.label(),
                gpu_dev: gpu.dev,
                gpu_bus_id: gpu.bus_id.clone(),
                gpu_numa: numa(&gpu.place),
                net,
                net_name: n.map(|_| name),
                net_numa: n.and_then(|n| numa(&n.place)),
                net_bus_id: n.and_then(|n| n.bus_id.clone()),
                channels,
                path,
                gdr: n.and_then(|n| {
                    let both = gpu.gdr? && n.gdr?;
                    Some(both && path.is_some_and(PathKind::gdr_by_default))
                }),
                nearest: other_nearer.map(|(n, _)| n.label()),
                nearest_path: other_nearer.map(|(_, p)| p),
            });
        }
    }
    out
}

/// A rail with nothing known past its GPU and NIC index.
fn unplaced() -> Rail {
    Rail {
        gpu: String::new(),
        gpu_dev: None,
        gpu_bus_id: None,
        gpu_numa: None,
        net: None,
        net_name: None,
        net_numa: None,
        net_bus_id: None,
        channels: 0,
        path: None,
        gdr: None,
        nearest: None,
        nearest_path: None,
    }
}

/// What a graph's `<net dev>` is in a topology dump.
enum Nic<'a> {
    /// A `<net>` of the dump.
    Port(&'a DumpNet),
    /// A virtual NIC fused from ports of the dump: placed at its first port (ports NCCL fuses
    /// share a PCI parent, src/graph/topo.cc ncclTopoGetVNicParent), and its name.
    Fused(&'a DumpNet, String, u32),
    /// Neither: the dump lacks it, and the log says nothing of it.
    Unknown(u32),
}

fn nic<'a>(sys: &'a NcclSystem, fused: &BTreeMap<u32, Vec<String>>, dev: u32) -> Nic<'a> {
    if let Some(n) = sys.nets.iter().find(|x| x.dev == Some(dev)) {
        return Nic::Port(n);
    }
    let ports: Vec<&DumpNet> = fused
        .get(&dev)
        .into_iter()
        .flatten()
        .filter_map(|name| sys.nets.iter().find(|x| &x.name == name))
        .collect();
    match ports.first() {
        Some(first) => {
            let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            let labels: Vec<String> = ports.iter().map(|p| p.label()).collect();
            Nic::Fused(
                first,
                format!(
                    "{} (NET {dev}, fused by NCCL from {})",
                    names.join("+"),
                    labels.join(", ")
                ),
                dev,
            )
        }
        None => Nic::Unknown(dev),
    }
}

/// The nearest RDMA NIC to `gpu` (any NIC when none is RDMA), fastest first among equals.
pub fn nearest_net<'a>(sys: &'a NcclSystem, gpu: &DumpGpu) -> Option<(&'a DumpNet, PathKind)> {
    let rdma = sys.nets.iter().any(DumpNet::rdma);
    sys.nets
        .iter()
        .filter(|n| !rdma || n.rdma())
        .map(|n| (n, path_between(&gpu.place, &n.place)))
        .min_by_key(|(n, p)| (*p, std::cmp::Reverse(n.speed_mbps.unwrap_or(0)), n.dev))
}

#[cfg(test)]
#[path = "nccl_dump_tests.rs"]
pub(crate) mod tests;

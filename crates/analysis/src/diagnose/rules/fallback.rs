//! Silent fallbacks: a run that completes and "passes" while NCCL did not use what the machine
//! has — sockets beside RDMA NICs, no GPUDirect RDMA where the PCIe tree allows it, no NVLS on
//! an NVSwitch box, a GPU sending by a NIC on the other socket, a port trained below its peers,
//! an HCA list naming what is not there, CollNet asked for and not built. Read from NCCL's
//! dumps, its log lines and this machine's sysfs.

use super::super::facts::Inputs;
use super::super::finding::{ev, value_ev, Evidence, Hit, Severity};
use crate::import::nccl_dump::{DumpNet, NcclDump, PathKind, PATTERN_NVLS};

/// The dumps' NICs with their file names.
fn dump_nets(inp: &Inputs) -> Vec<(&str, &DumpNet)> {
    inp.dumps
        .iter()
        .flat_map(|(f, d)| {
            d.system
                .iter()
                .flat_map(move |s| s.nets.iter().map(move |n| (f.as_str(), n)))
        })
        .collect()
}

/// Evidence that RDMA NICs exist where NCCL ran: the IB plugin's device list, a dump's verbs
/// devices, this machine's `/sys/class/infiniband`, IPoIB interfaces the socket plugin used.
fn rdma_present(inp: &Inputs) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = Vec::new();
    for l in &inp.logs {
        if let Some(lines) = l.networks.iter().find(|(n, _)| n.as_str() != "Socket") {
            out.extend(lines.1.iter().take(1).cloned());
        }
        if !l.net_devices.is_empty() {
            out.push(ev(
                "(log)",
                0,
                format!("NCCL's IB plugin lists {}", l.net_devices.join(" ")),
            ));
        }
    }
    for (file, n) in dump_nets(inp).into_iter().filter(|(_, n)| n.rdma()).take(1) {
        out.push(ev(
            file,
            0,
            format!("the topology dump lists RDMA NIC {}", n.label()),
        ));
    }
    if let Some(live) = &inp.live {
        if !live.infiniband.is_empty() {
            out.push(value_ev(format!(
                "/sys/class/infiniband holds {}",
                live.infiniband.join(" ")
            )));
        }
    }
    out
}

pub fn socket_fallback(inp: &Inputs) -> Vec<Hit> {
    let sockets: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| {
            l.networks
                .get("Socket")
                .into_iter()
                .flatten()
                .take(2)
                .cloned()
        })
        .collect();
    if sockets.is_empty() {
        return Vec::new();
    }
    let mut evidence = sockets;
    let mut rdma = rdma_present(inp);
    // IPoIB interfaces under the socket plugin (`[0]ib0:10.0.0.1`) are InfiniBand ports.
    let ipoib: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.socket_interfaces.iter())
        .filter(|e| e.text.contains("]ib"))
        .take(1)
        .cloned()
        .collect();
    if rdma.is_empty() && ipoib.is_empty() {
        return Vec::new();
    }
    rdma.extend(ipoib);
    rdma.extend(
        inp.logs
            .iter()
            .flat_map(|l| l.ib_no_device.iter().take(1).cloned()),
    );
    evidence.extend(rdma);
    vec![Hit::new(
        "NCCL fell back to TCP sockets although RDMA NICs are there",
        evidence,
    )]
}

/// NICs that cannot do GPUDirect RDMA although an RDMA NIC sits within NCCL's default GDR
/// distance of a GPU that can.
pub fn gdr_unavailable(inp: &Inputs) -> Vec<Hit> {
    let mut out = Vec::new();
    for (file, d) in &inp.dumps {
        let Some(sys) = &d.system else { continue };
        let off: Vec<Evidence> = d
            .rails
            .iter()
            .filter(|r| r.path.is_some_and(PathKind::gdr_by_default) && r.gdr == Some(false))
            .filter_map(|r| {
                let gpu = sys.gpus.iter().find(|g| g.label() == r.gpu)?;
                let net = sys.nets.iter().find(|n| Some(n.label()) == r.net_name)?;
                (net.rdma() && gpu.gdr == Some(true) && net.gdr == Some(false)).then(|| {
                    ev(
                        file,
                        0,
                        format!(
                            "{} (gdr=1) and {} (gdr=0) are {} apart: close enough, but the NIC \
                             cannot reach GPU memory",
                            r.gpu,
                            net.label(),
                            r.path.map_or("?", |p| p.code())
                        ),
                    )
                })
            })
            .take(8)
            .collect();
        if !off.is_empty() {
            out.push(Hit::new(
                "GPUDirect RDMA is unavailable on NICs right beside the GPUs",
                off,
            ));
        }
    }
    out
}

/// Whether a dump shows GPUs of the NVLS generation (sm 90+) on NVSwitches.
fn nvswitch_hopper(d: &NcclDump) -> Option<String> {
    let s = d.system.as_ref()?;
    let hopper = s
        .gpus
        .iter()
        .filter(|g| g.sm.is_some_and(|sm| sm >= 90))
        .count();
    (s.nvswitches > 0 && hopper >= 2).then(|| {
        format!(
            "{hopper} GPUs of sm 90 or later on {} NVSwitch{}",
            s.nvswitches,
            if s.nvswitches == 1 { "" } else { "es" }
        )
    })
}

pub fn nvls_unused(inp: &Inputs) -> Vec<Hit> {
    let env = inp.env();
    let disabled = env.get("NCCL_NVLS_ENABLE").filter(|(v, _)| v.trim() == "0");
    let mut evidence = Vec::new();
    let mut capable = false;
    for (file, d) in &inp.dumps {
        if let Some(what) = nvswitch_hopper(d) {
            capable = true;
            evidence.push(ev(file, 0, what));
        }
        if let Some(g) = &d.graphs {
            if g.searched(PATTERN_NVLS) && g.used(PATTERN_NVLS).next().is_none() {
                evidence.push(ev(file, 0, "the NVLS graph has 0 channels"));
            }
        }
    }
    for l in &inp.logs {
        if let Some((false, e)) = &l.nvls_support {
            evidence.push(e.clone());
        }
        if let Some((c, e)) = &l.channel_counts {
            if c.nvls == Some(0) {
                evidence.push(e.clone());
            }
        }
        if let Some((true, e)) = &l.nvls_support {
            capable = true;
            evidence.push(e.clone());
        }
    }
    let unused = evidence.iter().any(|e| {
        e.text.contains("0 nvls channels")
            || e.text.contains("0 channels")
            || e.text.contains("support is not available")
    });
    if !capable || !unused {
        return Vec::new();
    }
    match disabled {
        Some((_, e)) => {
            evidence.push(e.clone());
            vec![Hit::new(
                "NVLS is off by NCCL_NVLS_ENABLE=0 on an NVSwitch system",
                evidence,
            )
            .with_severity(Severity::Info)]
        }
        None => vec![Hit::new(
            "NVLS (NVLink SHARP) is not used on an NVSwitch system that has it",
            evidence,
        )],
    }
}

pub fn rail_across_socket(inp: &Inputs) -> Vec<Hit> {
    let mut out = Vec::new();
    for (file, d) in &inp.dumps {
        let far: Vec<Evidence> = d
            .rails
            .iter()
            .filter(|r| r.channels > 0 && r.path == Some(PathKind::Sys))
            .filter_map(|r| {
                let nearer = r.nearest.as_ref()?;
                Some(ev(
                    file,
                    0,
                    format!(
                        "{} (NUMA {}) uses {} (NUMA {}) across the sockets on {} channel{}; {nearer} \
                         is {} from it",
                        r.gpu,
                        r.gpu_numa.map_or("?".into(), |n| n.to_string()),
                        r.net_name.as_deref().unwrap_or("?"),
                        r.net_numa.map_or("?".into(), |n| n.to_string()),
                        r.channels,
                        if r.channels == 1 { "" } else { "s" },
                        r.nearest_path.map_or("?", |p| p.code()),
                    ),
                ))
            })
            .collect();
        if !far.is_empty() {
            out.push(Hit::new(
                "GPUs send by a NIC on the other socket while one sits beside them",
                far,
            ));
        }
    }
    out
}

/// RDMA ports slower than the fastest of their kind beside them: from dumps (the plugin's
/// speed) and this machine (`rate`, and ports that are not ACTIVE).
pub fn port_below_peers(inp: &Inputs) -> Vec<Hit> {
    let mut evidence = Vec::new();
    for (file, d) in &inp.dumps {
        let Some(s) = &d.system else { continue };
        let rdma: Vec<&DumpNet> = s.nets.iter().filter(|n| n.rdma()).collect();
        let top = rdma.iter().filter_map(|n| n.speed_mbps).max().unwrap_or(0);
        for n in rdma {
            if let Some(sp) = n.speed_mbps.filter(|sp| *sp * 2 <= top) {
                evidence.push(ev(
                    file,
                    0,
                    format!(
                        "{} runs at {} Gb/s; its peers reach {} Gb/s",
                        n.label(),
                        sp / 1000,
                        top / 1000
                    ),
                ));
            }
        }
    }
    if let Some(live) = &inp.live {
        // Against ports of the same link layer: a 100G Ethernet front-end port beside 400G
        // InfiniBand rails is a different NIC, not a slow rail.
        let top_of = |layer: &Option<String>| {
            live.ib_ports
                .iter()
                .filter(|q| &q.link_layer == layer)
                .filter_map(|q| q.gbps())
                .fold(0.0_f64, f64::max)
        };
        for p in &live.ib_ports {
            let top = top_of(&p.link_layer);
            let rate = p.rate.as_deref().unwrap_or("?");
            if !p.active() {
                evidence.push(value_ev(format!(
                    "{} is {} (phys {}), rate {rate}",
                    p.name(),
                    p.state.as_deref().unwrap_or("?"),
                    p.phys_state.as_deref().unwrap_or("?")
                )));
            } else if p.gbps().is_some_and(|g| g * 2.0 <= top) {
                evidence.push(value_ev(format!(
                    "{} rate {rate}; the fastest port here runs at {top} Gb/s",
                    p.name()
                )));
            }
        }
    }
    if evidence.is_empty() {
        return Vec::new();
    }
    vec![Hit::new(
        "RDMA ports below the rate of their peers (trained down, or down)",
        evidence,
    )]
}

/// An `NCCL_IB_HCA` entry: `[^][=]mlx5_0[:1]`.
fn hca_entries(value: &str) -> (bool, Vec<(String, Option<u32>)>) {
    let v = value.trim();
    let exclude = v.starts_with('^');
    let v = v.trim_start_matches('^').trim_start_matches('=');
    let list = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once(':') {
            Some((d, p)) => (d.to_string(), p.parse().ok()),
            None => (e.to_string(), None),
        })
        .collect();
    (exclude, list)
}

/// The RDMA ports known, as (`device`, port, link layer): this machine's sysfs, else the IB
/// plugin's list in the logs (`mlx5_0:1/IB`, `/RoCE`).
fn known_ports(inp: &Inputs) -> Vec<(String, u32, String)> {
    if let Some(live) = inp.live.as_ref().filter(|l| !l.ib_ports.is_empty()) {
        return live
            .ib_ports
            .iter()
            .map(|p| {
                let layer = p.link_layer.clone().unwrap_or_default();
                (p.device.clone(), p.port, layer)
            })
            .collect();
    }
    let mut out = Vec::new();
    for d in inp.logs.iter().flat_map(|l| l.net_devices.iter()) {
        let (name, layer) = d.split_once('/').unwrap_or((d, ""));
        let (dev, port) = name.split_once(':').unwrap_or((name, "1"));
        let layer = if layer.starts_with("RoCE") {
            "Ethernet"
        } else {
            "InfiniBand"
        };
        let entry = (
            dev.to_string(),
            port.parse().unwrap_or(1),
            layer.to_string(),
        );
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

pub fn ib_hca_mismatch(inp: &Inputs) -> Vec<Hit> {
    let known = known_ports(inp);
    let mut out = Vec::new();
    let has_ib = known.iter().any(|(_, _, l)| l == "InfiniBand");
    let ethernet_among_ib = |dev: &str, port: Option<u32>| {
        has_ib
            && known
                .iter()
                .any(|(d, p, l)| d == dev && port.is_none_or(|q| q == *p) && l == "Ethernet")
    };
    if let Some((value, e)) = inp.env().get("NCCL_IB_HCA") {
        let (exclude, entries) = hca_entries(value);
        let mut evidence = vec![e.clone()];
        if !known.is_empty() && !exclude {
            for (dev, port) in &entries {
                // NCCL matches prefixes unless `=` is given: `mlx5` names every mlx5 device.
                let exact = value.trim_start_matches('^').starts_with('=');
                let found = known.iter().any(|(d, p, _)| {
                    (if exact {
                        d == dev
                    } else {
                        d.starts_with(dev.as_str())
                    }) && port.is_none_or(|q| q == *p)
                });
                if !found {
                    evidence.push(value_ev(format!(
                        "{dev}{} does not exist here",
                        port.map_or(String::new(), |p| format!(":{p}"))
                    )));
                } else if ethernet_among_ib(dev, *port) {
                    evidence.push(value_ev(format!(
                        "{dev} is an Ethernet (RoCE) port among InfiniBand ones"
                    )));
                }
            }
        }
        if evidence.len() > 1 {
            out.push(Hit::new(
                "NCCL_IB_HCA names ports that do not exist or are not InfiniBand",
                evidence,
            ));
        }
        return out;
    }
    // No list: NCCL spreads channels over every port it finds, an Ethernet one included.
    let ethernet: Vec<&(String, u32, String)> = known
        .iter()
        .filter(|(_, _, l)| has_ib && l == "Ethernet")
        .collect();
    if !ethernet.is_empty() {
        let names: Vec<String> = ethernet
            .iter()
            .map(|(d, p, _)| format!("{d}:{p}"))
            .collect();
        let what = format!(
            "{} {} Ethernet (RoCE) beside InfiniBand ports, and NCCL_IB_HCA is unset",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" }
        );
        let from_sysfs = inp.live.as_ref().is_some_and(|l| !l.ib_ports.is_empty());
        let mut evidence = vec![if from_sysfs {
            value_ev(what)
        } else {
            ev("(log)", 0, format!("{what} (NCCL's IB plugin list)"))
        }];
        evidence.extend(
            inp.logs
                .iter()
                .flat_map(|l| l.networks.values().flatten())
                .filter(|e| e.text.contains("IB"))
                .take(1)
                .cloned(),
        );
        out.push(
            Hit::new(
                "NCCL may use an Ethernet port beside the InfiniBand rails",
                evidence,
            )
            .with_severity(Severity::Warning),
        );
    }
    out
}

pub fn collnet_unused(inp: &Inputs) -> Vec<Hit> {
    let env = inp.env();
    let Some((v, e)) = env.get("NCCL_COLLNET_ENABLE") else {
        return Vec::new();
    };
    if v.trim() != "1" {
        return Vec::new();
    }
    let mut evidence = vec![e.clone()];
    for (file, d) in &inp.dumps {
        if let Some(g) = &d.graphs {
            let cn: Vec<_> = g.collnet().collect();
            if !cn.is_empty() && cn.iter().all(|g| g.nchannels == 0) {
                evidence.push(ev(file, 0, "the CollNet graphs have 0 channels"));
            }
        }
    }
    for l in &inp.logs {
        if let Some((c, e)) = &l.channel_counts {
            if c.collnet == Some(0) {
                evidence.push(e.clone());
            }
        }
    }
    if evidence.len() == 1 {
        return Vec::new();
    }
    vec![Hit::new(
        "CollNet (SHARP) is enabled but NCCL built no CollNet channel",
        evidence,
    )]
}

#[cfg(test)]
#[path = "fallback_tests.rs"]
mod tests;

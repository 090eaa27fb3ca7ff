//! NCCL's dumps for people: the system NCCL saw, the graphs it chose and the rail map (which
//! NIC each GPU's traffic leaves by, how far it is, and whether GPUDirect RDMA can work there).

use crate::documents::nccl_dump::{DumpGraph, NcclDump, NcclSystem, Rail};
use std::fmt::Write;

fn speed(mbps: Option<u64>) -> String {
    match mbps {
        Some(m) if m >= 1000 => format!("{} Gb/s", m / 1000),
        Some(m) => format!("{m} Mb/s"),
        None => "speed ?".into(),
    }
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

fn numa(n: Option<i64>) -> String {
    n.filter(|n| *n >= 0).map_or("-".into(), |n| n.to_string())
}

fn system(out: &mut String, s: &NcclSystem) {
    let _ = writeln!(
        out,
        "NCCL system: {} CPU{}, {} GPU{}, {} NIC port{}, {} NVSwitch{}",
        s.cpus.len(),
        if s.cpus.len() == 1 { "" } else { "s" },
        s.gpus.len(),
        if s.gpus.len() == 1 { "" } else { "s" },
        s.nets.len(),
        if s.nets.len() == 1 { "" } else { "s" },
        s.nvswitches,
        if s.nvswitches == 1 { "" } else { "es" },
    );
    for g in &s.gpus {
        let nvlinks: u32 = g.nvlinks.iter().map(|l| l.count).sum();
        let _ = writeln!(
            out,
            "  {:<8} {:<14} sm {:<4} NUMA {:<3} GDR {:<4} NVLinks {}{}",
            g.label(),
            g.bus_id.as_deref().unwrap_or("-"),
            g.sm.map_or("?".into(), |s| s.to_string()),
            numa(s.cpus.get(g.place.cpu).and_then(|c| c.numa)),
            yes_no(g.gdr),
            nvlinks,
            g.place.link_width.map_or(String::new(), |w| format!(
                "  PCIe x{w} {}",
                g.place.link_speed.as_deref().unwrap_or("")
            )),
        );
    }
    for n in &s.nets {
        let _ = writeln!(
            out,
            "  {:<22} {:<14} NUMA {:<3} {:<10} {:<6} GDR {:<4} CollNet {}",
            n.label(),
            n.bus_id.as_deref().unwrap_or("-"),
            numa(s.cpus.get(n.place.cpu).and_then(|c| c.numa)),
            speed(n.speed_mbps),
            if n.rdma() { "RDMA" } else { "socket" },
            yes_no(n.gdr),
            yes_no(n.coll),
        );
    }
}

fn graph_line(g: &DumpGraph) -> String {
    if g.nchannels == 0 {
        return format!("  {:<15} searched, no channels", g.pattern_name);
    }
    let bw = |b: Option<f64>, t: &Option<String>| {
        format!(
            "{} GB/s ({})",
            b.map_or("?".into(), |b| format!("{b}")),
            t.as_deref().unwrap_or("?")
        )
    };
    format!(
        "  {:<15} {} channel{}, per channel {} inside the node, {} between nodes",
        g.pattern_name,
        g.nchannels,
        if g.nchannels == 1 { "" } else { "s" },
        bw(g.bw_intra, &g.type_intra),
        bw(g.bw_inter, &g.type_inter),
    )
}

fn rail_line(r: &Rail) -> String {
    let mut note = String::new();
    if let (Some(n), Some(p)) = (&r.nearest, r.nearest_path) {
        note = format!("{n} is nearer ({})", p.code());
    }
    format!(
        "  {:<10} {:<5} {:<22} {:<5} {:<5} {:<4} {:<9} {note}",
        r.gpu,
        numa(r.gpu_numa),
        r.net_name.as_deref().unwrap_or("(no NIC)"),
        numa(r.net_numa),
        r.path.map_or("-", |p| p.code()),
        yes_no(r.gdr),
        if r.channels == 0 {
            "-".to_string()
        } else {
            r.channels.to_string()
        },
    )
}

pub fn table(d: &NcclDump) -> String {
    let mut out = String::new();
    if let Some(s) = &d.system {
        system(&mut out, s);
    }
    if let Some(gs) = &d.graphs {
        let _ = writeln!(out, "NCCL graphs (what its search chose):");
        for g in &gs.graphs {
            let _ = writeln!(out, "{}", graph_line(g));
        }
    }
    if !d.rails.is_empty() {
        let used = d.rails.iter().any(|r| r.channels > 0);
        let _ = writeln!(
            out,
            "rail map ({}):",
            if used {
                "the NIC each GPU's ring channels enter or leave by; '-' channels: the nearest NIC"
            } else {
                "no graph with NICs given: the nearest NIC to each GPU"
            }
        );
        let _ = writeln!(
            out,
            "  {:<10} {:<5} {:<22} {:<5} {:<5} {:<4} {:<9} note",
            "GPU", "NUMA", "NIC", "NUMA", "path", "GDR", "channels"
        );
        for r in &d.rails {
            let _ = writeln!(out, "{}", rail_line(r).trim_end());
        }
    }
    out
}

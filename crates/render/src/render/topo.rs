//! The link matrix for people (`nvidia-smi topo -m` laid out again, with what each GPU pair's
//! link means) and as CSV (`from,to,link` per ordered pair).

pub use crate::documents::topology::describe_link;
use crate::documents::topology::Topology;
use std::fmt::Write;

pub fn table(t: &Topology) -> String {
    let mut out = String::new();
    let width = t.devices.iter().map(|d| d.len()).max().unwrap_or(4).max(4) + 2;
    let _ = write!(out, "{:width$}", "");
    for d in &t.devices {
        let _ = write!(out, "{d:>width$}");
    }
    out.push('\n');
    for a in &t.devices {
        let _ = write!(out, "{a:width$}");
        for b in &t.devices {
            let cell = if a == b {
                "X"
            } else {
                t.link(a, b).unwrap_or("?")
            };
            let _ = write!(out, "{cell:>width$}");
        }
        if let Some(numa) = t.info.get(a).and_then(|i| i.numa_affinity.as_ref()) {
            let _ = write!(out, "   NUMA {numa}");
        }
        out.push('\n');
    }
    for (nic, name) in &t.nic_names {
        let _ = writeln!(out, "# {nic} = {name}");
    }
    let gpus = t.gpus();
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            if let Some(l) = t.link(a, b) {
                let _ = writeln!(out, "# {a} <-> {b}: {l} ({})", describe_link(l));
            }
        }
    }
    for (a, b, code) in t.p2p.iter().filter(|(_, _, c)| c != "OK") {
        let _ = writeln!(out, "# P2P {a} -> {b}: {code} (not supported)");
    }
    for n in &t.notes {
        let _ = writeln!(out, "# note: {n}");
    }
    for p in &t.problems {
        let _ = writeln!(out, "# could not read: {p}");
    }
    crate::render::safe::display(&out).into_owned()
}

/// `from,to,link` per ordered pair.
pub fn csv(topo: &Topology) -> String {
    let mut out = String::from("from,to,link\n");
    for (f, t, l) in &topo.links {
        let _ = writeln!(out, "{f},{t},{l}");
    }
    crate::render::safe::display(&out).into_owned()
}

//! `ncclprobe topo`: the link matrix, from a pasted `nvidia-smi topo -m` or this machine.

use crate::cli::{OutputFormat, TopoArgs};
use crate::exit::{ExitCode, Failure};
use crate::import::topo::{self, Topology};
use crate::import_cmd::input_failure;

/// What a link code means for NCCL traffic between two GPUs.
pub fn describe_link(code: &str) -> &'static str {
    match code {
        c if c.starts_with("NV") => "NVLink",
        "PIX" => "one PCIe switch (P2P possible)",
        "PXB" => "several PCIe switches (P2P possible)",
        "PHB" => "through the CPU's PCIe host bridge",
        "NODE" => "between host bridges of one NUMA node",
        "SYS" => "across the CPU interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
        _ => "unknown",
    }
}

pub fn print_table(t: &Topology) {
    let width = t.devices.iter().map(|d| d.len()).max().unwrap_or(4).max(4) + 2;
    print!("{:width$}", "");
    for d in &t.devices {
        print!("{d:>width$}");
    }
    println!();
    for a in &t.devices {
        print!("{a:width$}");
        for b in &t.devices {
            let cell = if a == b {
                "X"
            } else {
                t.link(a, b).unwrap_or("?")
            };
            print!("{cell:>width$}");
        }
        if let Some(info) = t.info.get(a) {
            if let Some(numa) = &info.numa_affinity {
                print!("   NUMA {numa}");
            }
        }
        println!();
    }
    for (nic, name) in &t.nic_names {
        println!("# {nic} = {name}");
    }
    let gpus = t.gpus();
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            if let Some(l) = t.link(a, b) {
                println!("# {a} <-> {b}: {l} ({})", describe_link(l));
            }
        }
    }
    for (a, b, code) in &t.p2p {
        if code != "OK" {
            println!("# P2P {a} -> {b}: {code} (not supported)");
        }
    }
    for p in &t.problems {
        println!("# could not read: {p}");
    }
}

pub fn run(args: &TopoArgs) -> Result<ExitCode, Failure> {
    let topo = match &args.from {
        Some(path) => topo::parse_file(path).map_err(input_failure)?,
        None => crate::live::topology().map_err(Failure::unavailable)?,
    };
    match args.format {
        OutputFormat::Csv => print!("{}", topo::to_csv(&topo)),
        OutputFormat::Json => {
            println!("{}", crate::render::to_json(&topo)?)
        }
        OutputFormat::Table => print_table(&topo),
    }
    Ok(ExitCode::Ok)
}

//! `ncclprobe bundle -o DIR`: what NCCL's issue template asks a reporter for, in one command.
//! A short NCCL run with `NCCL_DEBUG=INFO` (a debug file per rank, the topology and graph
//! dumps), `nvidia-smi` (plain, `topo -m`, `-q`), the InfiniBand ports (`ibstatus`, else
//! sysfs), versions, the `NCCL_*`/`CUDA_*` environment, `/etc/nccl.conf` and `~/.nccl.conf`
//! (which set variables silently), ACS and IOMMU state, ncclprobe's diagnosis of all of it,
//! and `summary.md` laid out as the template's fields; then `DIR.tar.gz`. What cannot be had
//! (no GPU, no NCCL, no `nvidia-smi`) is said, not fatal. `--redact` replaces host names,
//! addresses and user names consistently in every file. The directory is the user's alone
//! (`output`), every file is made through its handle without following a link (`collect`), and
//! only those files are redacted and archived: root bundling into a directory another user can
//! write must not become a way to overwrite or copy out that user's choice of file.

mod archive;
mod collect;
mod conf;
mod environment;
mod output;
mod process;
mod redact;
mod summary;

use collect::Bundle;
use output::shown;
use process::run;
use summary::{redact_all, summary};

use crate::cli::BundleArgs;
use crate::exit::{ExitCode, Failure};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The short run: this program's sweep on the nccl backend, NCCL told to write its debug file
/// per process and its dumps into the bundle.
fn nccl_run(b: &mut Bundle, args: &BundleArgs) {
    let Ok(exe) = std::env::current_exe() else {
        return b.missing("run.txt", "a short NCCL run", "cannot find this program");
    };
    let nccl = b.dir.join("nccl");
    if let Err(e) = b.subdir("nccl") {
        return b.missing(
            "run.txt",
            "a short NCCL run",
            format!("cannot make nccl/: {e}"),
        );
    }
    let json = b.dir.join("run.json");
    let exe = exe.display().to_string();
    let json_s = json.display().to_string();
    let mut argv = vec![
        exe.as_str(),
        "sweep",
        "--backend",
        "nccl",
        "-b",
        "8",
        "-e",
        "64M",
        "-f",
        "8",
        "--max-samples",
        "6",
        "--point-budget",
        "0.1",
        "--show-algo",
        "--json",
        json_s.as_str(),
    ];
    let timeout = format!("{}", args.timeout);
    argv.extend(["--timeout", timeout.as_str()]);
    // As NCCL's issue template asks: INFO, one debug file per process, the system dump.
    let env = [
        ("NCCL_DEBUG", "INFO".to_string()),
        ("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET,GRAPH,TUNING".to_string()),
        (
            "NCCL_DEBUG_FILE",
            nccl.join("ncclDebug.%h.%p").display().to_string(),
        ),
        (
            "NCCL_TOPO_DUMP_FILE",
            nccl.join("ncclSystem.xml").display().to_string(),
        ),
        (
            "NCCL_GRAPH_DUMP_FILE",
            nccl.join("ncclGraph.xml").display().to_string(),
        ),
    ];
    let limit = Duration::from_secs_f64(args.timeout * 2.0 + 30.0);
    match run(&argv, &env, limit) {
        Ok(out) => {
            let text = format!(
                "$ {}\n{}\n# stderr:\n{}",
                argv[1..].join(" "),
                out.stdout,
                out.stderr
            );
            b.write("run.txt", "the short NCCL run's output", &text);
            if !out.status_ok {
                b.missing(
                    "run.json",
                    "the short run's record",
                    format!("the run failed: {}", last_line(&out.stderr)),
                );
            }
        }
        Err(why) => b.missing("run.txt", "a short NCCL run", why),
    }
    // What the run wrote: regular files only, a link there is left out.
    b.adopt("nccl", &["run.json"]);
    for (file, what) in [
        (
            "nccl/ncclSystem.xml",
            "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)",
        ),
        (
            "nccl/ncclGraph.xml",
            "NCCL's graph dump (NCCL_GRAPH_DUMP_FILE)",
        ),
    ] {
        if !b.files().iter().any(|f| f == file) {
            b.missing(
                file,
                what,
                "NCCL did not write it (no communicator was made)",
            );
        }
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The Xid lines as the kernel logged them, or a line saying there were none.
fn xid_lines(xids: &[crate::import::xid::XidEvent]) -> String {
    if xids.is_empty() {
        return "no Xid event in the kernel log since boot\n".into();
    }
    xids.iter()
        .map(|x| format!("{}\n", x.evidence.text))
        .collect()
}

/// `/sys/class/infiniband/*/ports/*` as ibstatus prints it.
fn ib_sysfs(ports: &[crate::live::IbPort]) -> String {
    let mut t = String::new();
    for p in ports {
        let _ = writeln!(
            t,
            "Infiniband device '{}' port {} status:\n\tstate:\t\t {}\n\tphys state:\t {}\n\trate:\t\t {}\n\tlink_layer:\t {}\n",
            p.device,
            p.port,
            p.state.as_deref().unwrap_or("?"),
            p.phys_state.as_deref().unwrap_or("?"),
            p.rate.as_deref().unwrap_or("?"),
            p.link_layer.as_deref().unwrap_or("?"),
        );
    }
    t
}

/// Kernel, CPU, IOMMU, ACS per GPU, /dev/shm, driver: what the template's "platform" asks.
fn platform(facts: &crate::live::Facts) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "kernel: {}", facts.kernel.as_deref().unwrap_or("?"));
    let _ = writeln!(t, "cpu: {}", facts.cpu.as_deref().unwrap_or("?"));
    let _ = writeln!(
        t,
        "driver: {}",
        facts
            .driver_version
            .as_deref()
            .unwrap_or("(no NVIDIA driver answered)")
    );
    let _ = writeln!(
        t,
        "/dev/shm: {}",
        facts
            .devshm_bytes
            .map_or("?".into(), |b| format!("{b} bytes"))
    );
    let _ = writeln!(
        t,
        "IOMMU units: {}",
        if facts.iommu_units.is_empty() {
            "none".into()
        } else {
            facts.iommu_units.join(" ")
        }
    );
    let _ = writeln!(
        t,
        "kernel command line (iommu): {}",
        if facts.iommu_cmdline.is_empty() {
            "-".into()
        } else {
            facts.iommu_cmdline.join(" ")
        }
    );
    for g in &facts.sysfs_gpus {
        let acs: Vec<String> = g
            .acs_redirecting
            .iter()
            .map(|(b, v)| format!("{b}=0x{v:04x}"))
            .collect();
        let _ = writeln!(
            t,
            "GPU {}: NUMA {}, PCIe {} x{} (max {} x{}), IOMMU group {} ({}), ACS redirecting on the path: {}",
            g.address,
            g.numa_node.map_or("?".into(), |n| n.to_string()),
            g.current_link_speed.as_deref().unwrap_or("?"),
            g.current_link_width.map_or("?".into(), |w| w.to_string()),
            g.max_link_speed.as_deref().unwrap_or("?"),
            g.max_link_width.map_or("?".into(), |w| w.to_string()),
            g.iommu_group.as_deref().unwrap_or("-"),
            g.iommu_type.as_deref().unwrap_or("-"),
            if acs.is_empty() { "none".into() } else { acs.join(" ") },
        );
    }
    if let Ok(wsl) = std::fs::read_to_string("/proc/version") {
        let _ = writeln!(t, "/proc/version: {}", wsl.trim());
    }
    let container =
        Path::new("/.dockerenv").exists() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let _ = writeln!(
        t,
        "container: {}",
        if container {
            "yes (/.dockerenv or KUBERNETES_SERVICE_HOST)"
        } else {
            "not detected"
        }
    );
    t
}

/// `/etc/nccl.conf` and `~/.nccl.conf`: a regular file's first MiB, else what the path is.
fn conf_files(b: &mut Bundle) {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".nccl.conf"));
    for (from, file) in [
        (
            Some(PathBuf::from("/etc/nccl.conf")),
            "nccl-conf/etc-nccl.conf",
        ),
        (home, "nccl-conf/home-nccl.conf"),
    ] {
        let Some(from) = from else {
            b.missing(file, "~/.nccl.conf", "HOME is not set");
            continue;
        };
        let name = shown(&from);
        match conf::read(&from) {
            conf::Conf::Text { text, cut } => {
                let cut = if cut {
                    format!("; cut at {} MiB", conf::MAX_CONF_BYTES >> 20)
                } else {
                    String::new()
                };
                b.write(
                    file,
                    &format!("{name} (sets NCCL variables silently){cut}"),
                    &text,
                )
            }
            conf::Conf::LeftOut(why) => b.missing(file, &name, why),
        }
    }
}

pub fn run_bundle(args: &BundleArgs) -> Result<ExitCode, Failure> {
    let out = output::prepare(&args.output)?;
    let dir = out.dir.clone();
    let mut b = Bundle::new(dir.clone(), out.handle);
    let short = Duration::from_secs(60);
    eprintln!("ncclprobe bundle: collecting into {}", shown(&dir));
    if args.no_run {
        b.missing("run.txt", "a short NCCL run", "left out (--no-run)");
    } else {
        nccl_run(&mut b, args);
    }
    b.command("nvidia-smi.txt", "nvidia-smi", &["nvidia-smi"], short);
    b.command(
        "nvidia-smi-topo-m.txt",
        "nvidia-smi topo -m",
        &["nvidia-smi", "topo", "-m"],
        short,
    );
    b.command(
        "nvidia-smi-q.txt",
        "nvidia-smi -q",
        &["nvidia-smi", "-q"],
        short,
    );
    let facts = crate::live::collect(&crate::live::Roots::default(), true);
    match run(&["ibstatus"], &[], short) {
        Ok(out) if out.status_ok => b.write(
            "ibstatus.txt",
            "InfiniBand port state (ibstatus)",
            &out.stdout,
        ),
        _ if !facts.ib_ports.is_empty() => b.write(
            "ibstatus.txt",
            "InfiniBand port state (sysfs; ibstatus is not installed)",
            &ib_sysfs(&facts.ib_ports),
        ),
        _ => b.missing(
            "ibstatus.txt",
            "InfiniBand port state",
            "no ibstatus and no /sys/class/infiniband devices",
        ),
    }
    match &facts.xids {
        Ok(xids) => b.write(
            "kernel-xid.txt",
            "the NVIDIA driver's Xid events in the kernel log since boot (/dev/kmsg)",
            &xid_lines(xids),
        ),
        Err(why) => b.missing("kernel-xid.txt", "the driver's Xid events", why.clone()),
    }
    b.write(
        "environment.txt",
        "NCCL_*, CUDA_* and launcher variables",
        &environment::kept(),
    );
    conf_files(&mut b);
    b.write(
        "platform.txt",
        "kernel, CPU, driver, IOMMU and ACS per GPU, /dev/shm",
        &platform(&facts),
    );
    let nccl = crate::backend::nccl::find_nccl(None).ok().map(|n| {
        format!(
            "{} ({})",
            crate::backend::nccl::version_string(n.version_code),
            n.path.display()
        )
    });
    let versions = format!(
        "ncclprobe: {}\nNVIDIA driver: {}\nNCCL: {}\n",
        crate::buildinfo::tool_info().version,
        facts.driver_version.as_deref().unwrap_or("(none)"),
        nccl.as_deref().unwrap_or("(not found)"),
    );
    b.write("versions.txt", "versions", &versions);
    let diagnosis = diagnose_bundle(&b);
    b.write(
        "diagnosis.txt",
        "ncclprobe diagnose over the bundle",
        &diagnosis,
    );
    let mut redactor = redact::Redactor::default();
    if args.redact {
        redact_all(&mut b, &mut redactor);
    }
    let summary = summary(&b, args, &redactor);
    let summary = if args.redact {
        redactor.redact(&summary)
    } else {
        summary
    };
    b.write(
        "summary.md",
        "this summary, laid out as NCCL's issue template",
        &summary,
    );
    archive::write(&b, &out.beside)?;
    // The summary quotes logs and conf files: no escape sequence of theirs reaches a terminal.
    crate::out!("{}", crate::render::safe::display(&summary));
    eprintln!(
        "ncclprobe bundle: {} and {}",
        shown(&dir),
        shown(&out.beside.archive)
    );
    Ok(ExitCode::Ok)
}

/// ncclprobe's own diagnosis of what was collected.
fn diagnose_bundle(b: &Bundle) -> String {
    // Only files the bundle made or took from the short run as regular files.
    let mut from: Vec<PathBuf> = b
        .files()
        .iter()
        .filter(|f| {
            f.starts_with("nccl/") || matches!(f.as_str(), "nvidia-smi-topo-m.txt" | "run.json")
        })
        .map(|f| b.dir.join(f))
        .collect();
    from.sort();
    let args = crate::cli::DiagnoseArgs {
        from,
        live: true,
        format: crate::cli::OutputFormat::Table,
        fail_on: None,
        explain: None,
    };
    match super::diagnose::gather(&args) {
        Ok(inputs) => {
            let findings = crate::diagnose::rules(&inputs);
            crate::render::findings::table(&inputs.facts(), &findings)
        }
        Err(f) => format!("diagnose could not read the bundle: {}\n", f.message),
    }
}

//! `ncclprobe bundle -o DIR`: what NCCL's issue template asks a reporter for, in one command.
//! A short NCCL run with `NCCL_DEBUG=INFO` (a debug file per rank, the topology and graph
//! dumps), `nvidia-smi` (plain, `topo -m`, `-q`), the InfiniBand ports (`ibstatus`, else
//! sysfs), versions, the `NCCL_*`/`CUDA_*` environment, `/etc/nccl.conf` and `~/.nccl.conf`
//! (which set variables silently), ACS and IOMMU state, ncclprobe's diagnosis of all of it,
//! and `summary.md` laid out as the template's fields; then `DIR.tar.gz`. What cannot be had
//! (no GPU, no NCCL, no `nvidia-smi`) is said, not fatal. `--redact` replaces host names,
//! addresses and user names consistently in every file.

mod collect;
mod process;
mod redact;
mod summary;

use collect::Bundle;
use process::run;
use summary::{redact_all, summary};

use crate::cli::BundleArgs;
use crate::exit::{ExitCode, Failure};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory must be new or empty: a bundle never mixes with, or replaces, other files.
fn prepare(dir: &Path, archive: &Path) -> Result<(), Failure> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Failure::usage(format!(
                    "-o {}: is not empty; a bundle is written into a new or empty directory",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir)
            .map_err(|e| Failure::usage(format!("-o {}: cannot create it: {e}", dir.display())))?,
        Err(e) => return Err(Failure::usage(format!("-o {}: {e}", dir.display()))),
    }
    if archive.exists() {
        return Err(Failure::usage(format!(
            "{}: exists; move it away (the bundle's archive is written there)",
            archive.display()
        )));
    }
    Ok(())
}

fn archive_path(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or("bundle".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!("{name}.tar.gz"))
}

/// The short run: this program's sweep on the nccl backend, NCCL told to write its debug file
/// per process and its dumps into the bundle.
fn nccl_run(b: &mut Bundle, args: &BundleArgs) {
    let Ok(exe) = std::env::current_exe() else {
        return b.missing("run.txt", "a short NCCL run", "cannot find this program");
    };
    let nccl = b.dir.join("nccl");
    let _ = std::fs::create_dir_all(&nccl);
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
        if !b.dir.join(file).exists() {
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

fn environment() -> String {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            [
                "NCCL_", "CUDA_", "NVIDIA_", "UCX_", "FI_", "OMPI_", "SLURM_", "TORCH_",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                || matches!(
                    k.as_str(),
                    "LD_LIBRARY_PATH"
                        | "LD_PRELOAD"
                        | "MASTER_ADDR"
                        | "MASTER_PORT"
                        | "WORLD_SIZE"
                        | "RANK"
                        | "LOCAL_RANK"
                )
        })
        .collect();
    vars.sort();
    // Names that say they hold a secret keep the name only; credentials in values go.
    vars.into_iter()
        .map(|(k, v)| format!("{k}={}\n", crate::secrets::kept_value(&k, &v)))
        .collect()
}

pub fn run_bundle(args: &BundleArgs) -> Result<ExitCode, Failure> {
    let dir = args.output.clone();
    let archive = archive_path(&dir);
    prepare(&dir, &archive)?;
    let mut b = Bundle {
        dir: dir.clone(),
        items: Vec::new(),
    };
    let short = Duration::from_secs(60);
    eprintln!("ncclprobe bundle: collecting into {}", dir.display());
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
        &environment(),
    );
    for (from, file) in [
        (PathBuf::from("/etc/nccl.conf"), "nccl-conf/etc-nccl.conf"),
        (
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(".nccl.conf"),
            "nccl-conf/home-nccl.conf",
        ),
    ] {
        match std::fs::read_to_string(&from) {
            Ok(t) => b.write(
                file,
                &format!("{} (sets NCCL variables silently)", from.display()),
                &t,
            ),
            Err(_) => b.missing(file, &from.display().to_string(), "not present"),
        }
    }
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
        redact_all(&b, &mut redactor);
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
    write_archive(&dir, &archive)?;
    crate::out!("{summary}");
    eprintln!(
        "ncclprobe bundle: {} and {}",
        dir.display(),
        archive.display()
    );
    Ok(ExitCode::Ok)
}

/// ncclprobe's own diagnosis of what was collected.
fn diagnose_bundle(b: &Bundle) -> String {
    let mut from: Vec<PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(b.dir.join("nccl")) {
        from.extend(entries.flatten().map(|e| e.path()));
    }
    for f in ["nvidia-smi-topo-m.txt", "run.json"] {
        let p = b.dir.join(f);
        if p.exists() {
            from.push(p);
        }
    }
    from.sort();
    let args = crate::cli::DiagnoseArgs {
        from,
        live: true,
        format: crate::cli::OutputFormat::Table,
        fail_on: None,
    };
    match super::diagnose::gather(&args) {
        Ok(inputs) => {
            let findings = crate::diagnose::rules(&inputs);
            crate::render::findings::table(&inputs.facts(), &findings)
        }
        Err(f) => format!("diagnose could not read the bundle: {}\n", f.message),
    }
}

/// `DIR.tar.gz`, written beside the directory under a temporary name and renamed into place.
fn write_archive(dir: &Path, archive: &Path) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::internal(format!("{}: {e}", archive.display()));
    let tmp = archive.with_extension("gz.partial");
    let file = std::fs::File::create(&tmp).map_err(fail)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let root = dir
        .file_name()
        .map_or("bundle".into(), |n| n.to_string_lossy().into_owned());
    let result = (|| {
        tar.append_dir_all(&root, dir)?;
        tar.into_inner()?.finish()?.sync_all()
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    std::fs::rename(&tmp, archive).map_err(fail)
}

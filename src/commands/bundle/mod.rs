//! `ncclprobe bundle -o DIR`: what NCCL's issue template asks a reporter for, in one command.
//! A short NCCL run with `NCCL_DEBUG=INFO` (a debug file per rank, the topology and graph
//! dumps), `nvidia-smi` (plain, `topo -m`, `-q`), the InfiniBand ports (`ibstatus`, else
//! sysfs), versions, the `NCCL_*`/`CUDA_*` environment, `/etc/nccl.conf` and `~/.nccl.conf`
//! (which set variables silently), ACS and IOMMU state, ncclprobe's diagnosis of all of it,
//! and `summary.md` laid out as the template's fields; then `DIR.tar.gz`. What cannot be had
//! (no GPU, no NCCL, no `nvidia-smi`) is said, not fatal. `--redact` replaces host names,
//! addresses and user names consistently in every file.

mod redact;

use crate::cli::BundleArgs;
use crate::exit::{ExitCode, Failure};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one collected item came to.
struct Item {
    file: String,
    what: String,
    /// `None`: written; `Some(why)`: not there, and why.
    missing: Option<String>,
}

struct Bundle {
    dir: PathBuf,
    items: Vec<Item>,
}

impl Bundle {
    fn write(&mut self, file: &str, what: &str, text: &str) {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let missing = std::fs::write(&path, text).err().map(|e| e.to_string());
        self.items.push(Item {
            file: file.into(),
            what: what.into(),
            missing,
        });
    }

    fn missing(&mut self, file: &str, what: &str, why: impl Into<String>) {
        self.items.push(Item {
            file: file.into(),
            what: what.into(),
            missing: Some(why.into()),
        });
    }

    /// A command's output into `file`, or why there is none.
    fn command(&mut self, file: &str, what: &str, argv: &[&str], timeout: Duration) {
        match run(argv, &[], timeout) {
            Ok(out) if out.status_ok || !out.stdout.is_empty() => {
                let mut text = out.stdout;
                if !out.stderr.trim().is_empty() {
                    let _ = write!(text, "\n# stderr:\n{}", out.stderr);
                }
                self.write(file, what, &text)
            }
            Ok(out) => self.missing(
                file,
                what,
                format!("`{}` failed: {}", argv.join(" "), out.stderr.trim()),
            ),
            Err(why) => self.missing(file, what, why),
        }
    }
}

struct Output {
    status_ok: bool,
    stdout: String,
    stderr: String,
}

/// Run a program with a wall-clock limit; the whole process group is killed past it.
fn run(argv: &[&str], env: &[(&str, String)], timeout: Duration) -> Result<Output, String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let (program, args) = argv.split_first().ok_or("nothing to run")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("`{program}` is not installed here"),
        _ => format!("cannot run `{program}`: {e}"),
    })?;
    // At most 64 MiB of each stream is kept.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(64 << 20).read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(s) => break Some(s),
            None if start.elapsed() > timeout => {
                // The group: a launcher's children and anything holding the pipes go too.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if status.is_none() {
        let _ = write!(stderr, "\n(ended after {} s)", timeout.as_secs());
    }
    Ok(Output {
        status_ok: status.is_some_and(|s| s.success()),
        stdout,
        stderr,
    })
}

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
    vars.into_iter()
        .map(|(k, v)| format!("{k}={v}\n"))
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
    let diagnosis = diagnose_bundle(&b, &facts);
    b.write(
        "diagnosis.txt",
        "ncclprobe diagnose over the bundle",
        &diagnosis,
    );
    let mut redactor = redact::Redactor::default();
    if args.redact {
        redact_all(&b, &facts, &mut redactor);
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
fn diagnose_bundle(b: &Bundle, facts: &crate::live::Facts) -> String {
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
    let _ = facts;
    match super::diagnose::gather(&args) {
        Ok(inputs) => {
            let findings = crate::diagnose::rules(&inputs);
            crate::render::findings::table(&inputs.facts(), &findings)
        }
        Err(f) => format!("diagnose could not read the bundle: {}\n", f.message),
    }
}

fn redact_all(b: &Bundle, facts: &crate::live::Facts, r: &mut redact::Redactor) {
    if let Ok(h) = hostname::get() {
        let h = h.to_string_lossy().into_owned();
        r.host(&h);
        if let Some(short) = h.split('.').next() {
            r.host(short);
        }
    }
    if let Some(u) = std::env::var_os("USER").or_else(|| std::env::var_os("LOGNAME")) {
        r.user(&u.to_string_lossy());
    }
    let _ = facts;
    // Host names the NCCL logs print (`host:pid:tid`).
    let files = every_file(&b.dir);
    for f in &files {
        if let Ok(text) = std::fs::read_to_string(f) {
            for c in nccl_prefix().captures_iter(&text) {
                r.host(&c[1]);
            }
        }
    }
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            let _ = std::fs::write(&f, r.redact(&text));
        }
        // File names carry host names too (ncclDebug.%h.%p).
        if let Some(name) = f.file_name().map(|n| n.to_string_lossy().into_owned()) {
            let renamed = r.redact(&name);
            if renamed != name {
                let _ = std::fs::rename(&f, f.with_file_name(renamed));
            }
        }
    }
}

/// NCCL's line prefix, `host:pid:tid [dev] NCCL INFO`: its host.
fn nccl_prefix() -> &'static regex::Regex {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(
        &R,
        r"(?m)(?:^|\s)([A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)",
    )
}

fn every_file(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn first_warn(dir: &Path) -> Option<String> {
    every_file(&dir.join("nccl"))
        .into_iter()
        .chain([dir.join("run.txt")])
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|t| {
            t.lines()
                .find(|l| l.contains("NCCL WARN"))
                .map(str::to_string)
        })
}

/// `summary.md`: the issue template's fields, filled from the bundle.
fn summary(b: &Bundle, args: &BundleArgs, r: &redact::Redactor) -> String {
    let mut m = String::new();
    let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).ok();
    let _ = writeln!(m, "# NCCL issue bundle\n");
    let _ = writeln!(
        m,
        "Collected by `ncclprobe bundle` ({}).",
        crate::buildinfo::tool_info().version
    );
    if args.redact {
        let (h, a, u) = r.counts();
        let _ = writeln!(m, "Redacted: {h} host names, {a} IP addresses and {u} user names replaced consistently (host-N, 192.0.2.N, user-N).");
    }
    let _ = writeln!(m, "\n## How is this issue impacting you?\n\n(Lower performance than expected / Application crash / Data corruption / Application hang: say which.)\n");
    let _ = writeln!(m, "## Share Your Debug Logs\n");
    for i in &b.items {
        match &i.missing {
            None => {
                let _ = writeln!(m, "- `{}`: {}", i.file, i.what);
            }
            Some(why) => {
                let _ = writeln!(m, "- `{}`: {} — missing: {why}", i.file, i.what);
            }
        }
    }
    for f in every_file(&b.dir.join("nccl")) {
        if let Ok(rel) = f.strip_prefix(&b.dir) {
            let _ = writeln!(m, "- `{}`", rel.display());
        }
    }
    let _ = writeln!(m, "\n## Steps to Reproduce the Issue\n\n`ncclprobe sweep --backend nccl -b 8 -e 64M -f 8 --show-algo` with NCCL_DEBUG=INFO (see `run.txt`); add your own steps.\n");
    let nccl = read("versions.txt")
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("NCCL:"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "NCCL: (not found)".into());
    let _ = writeln!(
        m,
        "## NCCL Version\n\n{}\n",
        nccl.trim_start_matches("NCCL: ")
    );
    let _ = writeln!(m, "## Your platform details\n");
    if let Some(t) = read("nvidia-smi-topo-m.txt") {
        let _ = writeln!(m, "`nvidia-smi topo -m`:\n\n```\n{}\n```\n", t.trim_end());
    }
    if let Some(t) = read("platform.txt") {
        let _ = writeln!(m, "```\n{}\n```\n", t.trim_end());
    }
    let _ = writeln!(m, "## Error Message & Behavior\n");
    match first_warn(&b.dir) {
        Some(w) => {
            let _ = writeln!(m, "First NCCL WARN:\n\n```\n{w}\n```\n");
        }
        None => {
            let _ = writeln!(m, "No `NCCL WARN` line in the logs.\n");
        }
    }
    if let Some(t) = read("diagnosis.txt") {
        let _ = writeln!(m, "ncclprobe's diagnosis:\n\n```\n{}\n```", t.trim_end());
    }
    m
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

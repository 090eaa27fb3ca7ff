//! Helpers shared by the CLI tests: run the real binary, read its three outputs.
#![allow(dead_code)]

use ncclprobe::model::RunRecord;
use std::path::Path;

/// Give a real `mpirun` a session directory of its own; it lasts as long as the guard returned.
/// Call it after `without_host_settings`, which removes `OMPI_*` and `PRTE_*`.
///
/// Open MPI 4's mpirun makes `/tmp/ompi.HOST.UID` by checking, then calling mkdir; of two
/// started at the same moment the loser ends in `orte_init` ("A call to mkdir was unable to
/// create the desired directory ... File exists", open-mpi/ompi#8510), and the tests run two at
/// once. Open MPI 5 (PRRTE) reads the second variable.
pub fn own_session(mpirun: &mut std::process::Command) -> tempfile::TempDir {
    let session = tempfile::tempdir().expect("a session directory for mpirun");
    mpirun
        .env("OMPI_MCA_orte_tmpdir_base", session.path())
        .env("PRTE_MCA_prte_tmpdir_base", session.path());
    session
}

#[path = "../../../crates/backend/src/backend/test_ports.rs"]
mod test_ports;
#[allow(unused_imports)] // not every test binary meets over TCP
pub use test_ports::free_port;

pub fn bin() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("ncclprobe")
        .expect("the ncclprobe binary is built by cargo test")
}

/// A directory where `names` (e.g. `libcuda.so.1`, `libnccl.so.2`, `libnvidia-ml.so.1`) are the
/// GPU TEST DOUBLE (doubles/gpu), for LD_LIBRARY_PATH.
///
/// Each library also answers here to every other name its loader tries, or a GPU host's real
/// driver would be found under that name in the system's directories (LD_LIBRARY_PATH is
/// searched first, so a name present here always wins):
/// - with `libcuda.so.1`, every name cudarc's loader tries, `libcuda.so` first
///   (`cudarc::get_lib_name_candidates`, for "cuda" and "nvcuda"). Each is a small library of
///   its own that needs `libcuda.so.1`, so the name loads the double and a test can still put
///   another file under one of these names without writing through to the double;
/// - with `libnvidia-ml.so.1`, `libnvidia-ml.so` (nvml-wrapper's name, the product's fallback);
/// - with `libnccl.so.2`, `libnccl.so` (the product's second name in each directory).
pub fn test_double_dir(names: &[&str]) -> tempfile::TempDir {
    let lib = test_double_lib();
    let dir = tempfile::tempdir().expect("temporary directory");
    let link = |name: &str| {
        let at = dir.path().join(name);
        if !at.exists() {
            std::os::unix::fs::symlink(&lib, at).expect("symlink");
        }
    };
    for name in names {
        link(name);
    }
    if names.contains(&"libcuda.so.1") {
        for name in cudarc_driver_names() {
            let at = dir.path().join(&name);
            if !at.exists() {
                std::fs::copy(cuda_alias(), at).expect("copy the libcuda.so.1 alias");
            }
        }
    }
    if names.contains(&"libnvidia-ml.so.1") {
        link("libnvidia-ml.so");
    }
    if names.contains(&"libnccl.so.2") {
        link("libnccl.so");
    }
    dir
}

/// The test double's library itself.
pub fn test_double_lib() -> std::path::PathBuf {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_ncclprobe"));
    let lib = bin
        .parent()
        .expect("target directory")
        .join("libncclprobe_test_double_gpu.so");
    assert!(
        lib.exists(),
        "{} is missing: build the test double with `cargo build -p ncclprobe-test-double-gpu` (ci/test does)",
        lib.display()
    );
    lib
}

/// Every file name cudarc's loader opens the CUDA driver by, in its order.
pub fn cudarc_driver_names() -> Vec<String> {
    ["cuda", "nvcuda"]
        .iter()
        .flat_map(|l| cudarc::get_lib_name_candidates(l))
        .collect()
}

/// A shared library with no code that needs `libcuda.so.1` (found beside it, or on the
/// library path): loaded under another name, it resolves every symbol to that `libcuda.so.1`,
/// as the driver's `libcuda.so -> libcuda.so.1` link does. Built once with `cc`, the C compiler
/// Rust links with.
pub fn cuda_alias() -> &'static Path {
    static ALIAS: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    ALIAS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda-alias");
        let alias = dir.join("libcuda-alias.so");
        if alias.exists() {
            return alias;
        }
        let work = dir.join(format!("build-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("a directory for the libcuda.so.1 alias");
        std::fs::write(work.join("empty.c"), "").unwrap();
        let cc = |args: &[&str]| {
            let out = std::process::Command::new("cc")
                .args(args)
                .current_dir(&work)
                .output()
                .expect("cc (the C compiler Rust links with) builds the libcuda.so.1 alias");
            assert!(
                out.status.success(),
                "cc {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // The name to need, from a placeholder with that soname.
        cc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            "libcuda.so.1",
            "empty.c",
        ]);
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            "alias.so",
            "empty.c",
            "-Wl,--no-as-needed",
            "-L.",
            "-l:libcuda.so.1",
            "-Wl,-rpath,$ORIGIN",
        ]);
        std::fs::rename(work.join("alias.so"), &alias).expect("install the alias");
        let _ = std::fs::remove_dir_all(&work);
        alias
    })
}

/// This machine's live sources, for a test: a sysfs tree (`NCCLPROBE_SYSFS_ROOT`), /proc and
/// /dev trees (`NCCLPROBE_TEST_PROC_ROOT`, `NCCLPROBE_TEST_DEV_ROOT`, TEST-ONLY hooks of the
/// `fault-injection` feature), so what `topo`, `diagnose` and `doctor` find comes from the
/// fixture and not from the machine the test runs on (a GPU host's NICs, GPUs, kernel command
/// line or small /dev/shm).
pub struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    /// No PCI device, no NIC, a plain kernel: what a test means by "nothing found".
    pub fn bare() -> Machine {
        let m = Machine {
            dir: tempfile::tempdir().expect("temporary directory"),
        };
        for d in ["sys/bus/pci/devices", "sys/class/net", "proc", "dev"] {
            std::fs::create_dir_all(m.dir.path().join(d)).unwrap();
        }
        m.write(
            "proc/version",
            "Linux version 6.1.0-fixture (a test's /proc) #1 SMP\n",
        );
        m.write(
            "proc/cpuinfo",
            "vendor_id\t: GenuineIntel\nmodel name\t: fixture CPU\n",
        );
        m.write("proc/cmdline", "root=/dev/vda ro\n");
        m
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A PCI device at `address` (`0000:18:00.0`) below root complex `root` (`17`, one root
    /// port `0000:17:00.0` between them), with its attributes.
    fn pci_device(&self, root: &str, address: &str, attrs: &[(&str, &str)]) -> String {
        let rel = format!("sys/devices/pci0000:{root}/0000:{root}:00.0/{address}");
        for (name, value) in attrs {
            self.write(&format!("{rel}/{name}"), &format!("{value}\n"));
        }
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:{root}/0000:{root}:00.0/{address}"),
            self.dir.path().join("sys/bus/pci/devices").join(address),
        )
        .unwrap();
        rel
    }

    /// An NVIDIA GPU in sysfs.
    pub fn gpu(self, root: &str, address: &str, numa: i64, cpus: &str) -> Machine {
        self.pci_device(
            root,
            address,
            &[
                ("vendor", "0x10de"),
                ("class", "0x030200"),
                ("numa_node", &numa.to_string()),
                ("local_cpulist", cpus),
                ("max_link_speed", "16.0 GT/s PCIe"),
                ("current_link_speed", "16.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("current_link_width", "16"),
            ],
        );
        self
    }

    /// An RDMA NIC (`mlx5_0`) in class/infiniband, as a Mellanox PCI device.
    pub fn rdma_nic(self, name: &str, root: &str, address: &str, numa: i64) -> Machine {
        let rel = self.pci_device(
            root,
            address,
            &[
                ("vendor", "0x15b3"),
                ("class", "0x020700"),
                ("numa_node", &numa.to_string()),
            ],
        );
        let port = self.dir.path().join(&rel).join("infiniband").join(name);
        std::fs::create_dir_all(&port).unwrap();
        std::os::unix::fs::symlink("../..", port.join("device")).unwrap();
        std::fs::create_dir_all(self.dir.path().join("sys/class/infiniband")).unwrap();
        let under_sys = rel.strip_prefix("sys/").unwrap();
        std::os::unix::fs::symlink(
            format!("../../{under_sys}/infiniband/{name}"),
            self.dir.path().join("sys/class/infiniband").join(name),
        )
        .unwrap();
        self
    }

    pub fn sys(&self) -> std::path::PathBuf {
        self.dir.path().join("sys")
    }

    /// Point `cmd` at this machine: its sysfs, /proc and /dev.
    pub fn apply<C: EnvTarget>(&self, cmd: &mut C) {
        cmd.set_env("NCCLPROBE_SYSFS_ROOT", self.sys().as_os_str());
        cmd.set_env(
            "NCCLPROBE_TEST_PROC_ROOT",
            self.dir.path().join("proc").as_os_str(),
        );
        cmd.set_env(
            "NCCLPROBE_TEST_DEV_ROOT",
            self.dir.path().join("dev").as_os_str(),
        );
    }
}

/// Both kinds of command the tests start.
pub trait EnvTarget {
    fn set_env(&mut self, key: &str, value: &std::ffi::OsStr);
    fn remove_env(&mut self, key: &str);
}

impl EnvTarget for std::process::Command {
    fn set_env(&mut self, key: &str, value: &std::ffi::OsStr) {
        self.env(key, value);
    }
    fn remove_env(&mut self, key: &str) {
        self.env_remove(key);
    }
}

impl EnvTarget for assert_cmd::Command {
    fn set_env(&mut self, key: &str, value: &std::ffi::OsStr) {
        self.env(key, value);
    }
    fn remove_env(&mut self, key: &str) {
        self.env_remove(key);
    }
}

/// Remove what a GPU host or a job's launcher may have set in the test's own environment and
/// the product reads: `NCCL_*` and `CUDA_*` (the record and diagnosis read them), the
/// torchrun-style and MPI launcher variables (they pick the launch mode), the library
/// variables the NCCL search follows, and the test double's own settings (a test sets those
/// it means).
pub fn without_host_settings<C: EnvTarget>(cmd: &mut C) {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let inherited = [
            "NCCL_",
            "CUDA_",
            "NCCLPROBE_TEST_DOUBLE_",
            "OMPI_COMM_WORLD_",
            "PMI_",
            "PMIX_",
            "SLURM_",
            "OMPI_",
            "PRTE_",
            "LWS_",
            "PET_",
            "TORCHELASTIC_",
            "NCCLPROBE_RENDEZVOUS",
        ]
        .iter()
        .any(|p| key.starts_with(p));
        if inherited {
            cmd.remove_env(key);
        }
    }
    for key in [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NCCLPROBE_RENDEZVOUS_PORT",
        "MPI_LOCALNRANKS",
        "MPI_LOCALRANKID",
        "SLURMD_NODENAME",
        "JOB_COMPLETION_INDEX",
        "JOBSET_NAME",
        "K_MPI_JOB_ROLE",
    ] {
        cmd.remove_env(key);
    }
}

/// Run to success and parse stdout as JSON (a run record, simulate's or diagnose's output).
pub fn json_stdout<T: serde::de::DeserializeOwned>(cmd: &mut assert_cmd::Command) -> T {
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("stdout is one JSON document")
}

/// Strictly parsed: unknown fields are an error (the record's contract).
pub fn read_record(path: &Path) -> RunRecord {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a valid run record: {e}", path.display()))
}

/// One half (out-of-place or in-place) of a table row.
#[derive(Debug, Clone, PartialEq)]
pub struct TableHalf {
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub wrong: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    pub size: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: String,
    pub root: i64,
    pub halves: [TableHalf; 2],
}

/// Rows of the nccl-tests table in `stdout` (lines not starting with `#`, 13 columns).
pub fn table_rows(stdout: &str) -> Vec<TableRow> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(c.len(), 13, "table row with {} columns: {l}", c.len());
            let half = |i: usize| TableHalf {
                time_us: c[i].parse().unwrap(),
                algbw_gbps: c[i + 1].parse().unwrap(),
                busbw_gbps: c[i + 2].parse().unwrap(),
                wrong: c[i + 3].parse().ok(),
            };
            TableRow {
                size: c[0].parse().unwrap(),
                count: c[1].parse().unwrap(),
                dtype: c[2].to_string(),
                redop: c[3].to_string(),
                root: c[4].parse().unwrap(),
                halves: [half(5), half(9)],
            }
        })
        .collect()
}

pub fn csv_rows(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader =
        csv::Reader::from_path(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let header = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// `ncclprobe sweep --backend host --ranks N`, to which a test adds its own flags.
pub fn host_sweep(ranks: usize) -> assert_cmd::Command {
    let mut cmd = bin();
    cmd.args(["sweep", "--backend", "host", "--ranks", &ranks.to_string()]);
    cmd
}

/// What a command printed, once it exited with the code a test expects.
pub trait Printed {
    fn stdout_if(&mut self, code: i32) -> Vec<u8>;
    fn stderr_if(&mut self, code: i32) -> Vec<u8>;
}

impl Printed for assert_cmd::Command {
    fn stdout_if(&mut self, code: i32) -> Vec<u8> {
        self.assert().code(code).get_output().stdout.clone()
    }

    fn stderr_if(&mut self, code: i32) -> Vec<u8> {
        self.assert().code(code).get_output().stderr.clone()
    }
}

/// A test that injects faults through `--inject-fault` needs the TEST-ONLY `fault-injection`
/// feature (`ci/test` builds with `--all-features`); without it the flag does not exist.
pub fn needs_fault_injection() {
    if !cfg!(feature = "fault-injection") {
        panic!(
            "this test injects faults with --inject-fault, which only builds with the \
             `fault-injection` feature: run `cargo test --features fault-injection` (ci/test does)"
        );
    }
}

/// The one file of `tests/corpus/DIR` whose name starts with `prefix` (`nccl-tests`, `04-`).
pub fn corpus_file(dir: &str, prefix: &str) -> std::path::PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    let found: Vec<std::path::PathBuf> = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{}: {e}", base.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    assert_eq!(found.len(), 1, "{dir}/{prefix}*: {found:?}");
    found[0].clone()
}

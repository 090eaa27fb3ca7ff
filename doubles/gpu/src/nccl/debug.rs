//! What NCCL says about itself, as the double plays it: `NCCL_DEBUG=INFO` lines in NCCL's
//! prefix (`host:pid:tid [dev] NCCL INFO ...`) to `NCCL_DEBUG_FILE` (`%h` and `%p` expanded as
//! NCCL's debug.cc does) or stdout, filtered by `NCCL_DEBUG_SUBSYS` (a comma list, `^` to
//! invert, `ALL`; default INIT and ENV); the system and graph XML NCCL writes at init to
//! `NCCL_TOPO_DUMP_FILE` / `NCCL_GRAPH_DUMP_FILE` on rank `NCCL_TOPO_DUMP_FILE_RANK` /
//! `NCCL_GRAPH_DUMP_FILE_RANK` (default 0); and the tuner's line per collective call on rank 0:
//! none through 2.19 (the INFO line is commented out, v2.19.4 enqueue.cc:1217),
//! `%ld Bytes -> Algo %d proto %d time %f` in 2.20-2.22 (v2.20.3 enqueue.cc:1498),
//! `%s: %ld Bytes -> Algo %d proto %d time %f` in 2.23 (v2.23.4 enqueue.cc:1855), and from 2.24
//! `%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}` with per-rank bytes, written when
//! the plan is scheduled (so never for a simulated group). Each line written costs
//! `NCCLPROBE_TEST_DOUBLE_LOG_LINE_US` microseconds of spinning (default 0), as NCCL's mutex,
//! formatting and `write(2)` per line do; `ncclResetDebugInit` (2.24+) makes the next line read
//! the variables again and reopen the file, truncating it as NCCL's `fopen(.., "w")` does.
//!
//! The algorithm the double "chooses" is its own fixed table (not NCCL's cost model): AllReduce
//! Tree/LL up to 64 KiB, Ring/LL128 to 8 MiB, Ring/Simple above; the others Ring with the same
//! protocols. The network is sockets (`eth0`) unless `NCCLPROBE_TEST_DOUBLE_NET=ib` gives two
//! InfiniBand ports.

use std::io::Write;
use std::sync::Mutex;

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// What NCCL read at its first log line (debug.cc, ncclDebugInit), kept until
/// `ncclResetDebugInit`: the level, the subsystems and the file (`None`: stdout).
struct Conf {
    level: Option<String>,
    subsys: String,
    out: Option<std::fs::File>,
}

impl Conf {
    fn read() -> Conf {
        let out = env("NCCL_DEBUG_FILE").and_then(|pattern| {
            let path = pattern
                .replace("%h", &hostname())
                .replace("%p", &std::process::id().to_string());
            // NCCL opens it with "w": a file from before (or before a reset) starts over.
            std::fs::File::create(path).ok()
        });
        Conf {
            level: env("NCCL_DEBUG").map(|v| v.to_ascii_uppercase()),
            subsys: env("NCCL_DEBUG_SUBSYS").unwrap_or_else(|| "INIT,ENV".into()),
            out,
        }
    }

    fn level_info(&self) -> bool {
        self.level
            .as_deref()
            .is_some_and(|v| matches!(v, "INFO" | "TRACE"))
    }

    /// Whether `subsys` is on in NCCL_DEBUG_SUBSYS.
    fn subsys_on(&self, subsys: &str) -> bool {
        let (invert, list) = match self.subsys.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, self.subsys.as_str()),
        };
        let named = list
            .split(',')
            .map(|s| s.trim().to_ascii_uppercase())
            .any(|s| s == subsys || s == "ALL");
        named != invert
    }
}

fn hostname() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    host.trim().split('.').next().unwrap_or("").to_string()
}

static CONF: Mutex<Option<Conf>> = Mutex::new(None);

fn with_conf<R>(f: impl FnOnce(&mut Conf) -> R) -> R {
    let mut conf = CONF.lock().unwrap_or_else(|p| p.into_inner());
    f(conf.get_or_insert_with(Conf::read))
}

/// Whether INFO lines of `subsys` are written.
fn on(subsys: &str) -> bool {
    with_conf(|c| c.level_info() && c.subsys_on(subsys))
}

/// One INFO line of subsystem `subsys` from device `dev`.
pub(crate) fn info(subsys: &str, dev: i32, text: &str) {
    with_conf(|c| {
        if c.level_info() && c.subsys_on(subsys) {
            write_line(c, "", &format!("[{dev}] NCCL INFO {text}"));
        }
    })
}

/// One WARN line from device `dev` (NCCL prints them at every level but NONE and VERSION,
/// with a blank line before: debug.cc's `buffer[len++] = '\n'`).
pub(crate) fn warn(dev: i32, text: &str) {
    with_conf(|c| {
        if c.level
            .as_deref()
            .is_some_and(|v| matches!(v, "WARN" | "INFO" | "TRACE"))
        {
            write_line(c, "\n", &format!("[{dev}] init.cc:1 NCCL WARN {text}"));
        }
    })
}

fn write_line(c: &mut Conf, lead: &str, body: &str) {
    let tid = unsafe { libc_gettid() };
    let line = format!("{lead}{}:{}:{tid} {body}\n", hostname(), std::process::id());
    match c.out.as_mut() {
        // Written whole and at once, as NCCL flushes each line.
        Some(f) => {
            let _ = f.write_all(line.as_bytes());
        }
        None => {
            print!("{line}");
            let _ = std::io::stdout().flush();
        }
    }
    spin_line_cost();
}

/// NCCL's cost per line written (`NCCLPROBE_TEST_DOUBLE_LOG_LINE_US`), spent holding the lock
/// as NCCL holds its debug mutex.
fn spin_line_cost() {
    let us: u64 = env("NCCLPROBE_TEST_DOUBLE_LOG_LINE_US")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if us > 0 {
        let until = std::time::Instant::now() + std::time::Duration::from_micros(us);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// `ncclResetDebugInit` (exported from 2.24, deprecated in 2.28 but still there): the next
/// line reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE again (debug.cc,
/// `NCCL_DEBUG_RESET_TRIGGERED`).
#[no_mangle]
pub extern "C" fn ncclResetDebugInit() {
    let mut conf = CONF.lock().unwrap_or_else(|p| p.into_inner());
    *conf = None;
}

unsafe fn libc_gettid() -> i64 {
    extern "C" {
        fn syscall(n: i64, ...) -> i64;
    }
    // SYS_gettid on x86_64 and aarch64.
    #[cfg(target_arch = "x86_64")]
    const SYS_GETTID: i64 = 186;
    #[cfg(not(target_arch = "x86_64"))]
    const SYS_GETTID: i64 = 178;
    syscall(SYS_GETTID)
}

fn ib() -> bool {
    env("NCCLPROBE_TEST_DOUBLE_NET").is_some_and(|v| v == "ib" || v == "ib-fused")
}

/// `NCCLPROBE_TEST_DOUBLE_NET=ib-fused`: the two IB ports are one dual-port NIC, which NCCL
/// 2.21+ fuses into a virtual NIC, NET 2 (src/graph/topo.cc ncclTopoMakeVnic; the IB plugin's
/// merged device, src/transport/net_ib.cc). The graphs name NET 2; from 2.24 the topology dump
/// comes from a pass over physical ports (topo.cc, `usePhysicalDevices = dumpXmlFile || ...`)
/// and lists NET 0 and NET 1 only.
fn fused(version: i32) -> bool {
    version >= 22100 && env("NCCLPROBE_TEST_DOUBLE_NET").is_some_and(|v| v == "ib-fused")
}

/// What a communicator's init says, and the dumps it writes (rank `rank` of `nranks` on CUDA
/// device `dev`, NVML index `gpu`, bus id `bus`).
pub(crate) fn init_lines(
    rank: usize,
    nranks: usize,
    dev: i32,
    gpu: usize,
    bus: &str,
    version: i32,
) {
    let (major, minor, patch) = (version / 10000, version / 100 % 100, version % 100);
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        info(
            "INIT",
            dev,
            &format!("NCCL version {major}.{minor}.{patch}+cuda12.8"),
        )
    });
    if ib() {
        info(
            "NET",
            dev,
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.2<0>",
        );
        if fused(version) {
            info(
                "NET",
                dev,
                "NET/IB : Made virtual device [2] name=mlx5_0+mlx5_1 speed=800000 ndevs=2",
            );
            info("GRAPH", dev, "TOPO/NET : Made vNic 2");
        }
        info("NET", dev, "Using network IB");
    } else {
        info("NET", dev, "NET/IB : No device found.");
        info("NET", dev, "NET/Socket : Using [0]eth0:10.0.0.2<0>");
        info("NET", dev, "Using network Socket");
    }
    let bus_short = bus
        .trim_start_matches("0000:")
        .replace([':', '.'], "")
        .trim_end_matches('0')
        .to_lowercase();
    info(
        "INIT",
        dev,
        &format!("ncclCommInitRank comm 0x{:x} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {gpu} busId {bus_short}0 commId 0x1 - Init START", 0x7f00_0000_0000u64 + rank as u64 * 0x1000),
    );
    // A warning to show where NCCL's WARN lines go (`NCCLPROBE_TEST_DOUBLE_NCCL_WARN`).
    if let Some(text) = env("NCCLPROBE_TEST_DOUBLE_NCCL_WARN") {
        warn(dev, &text);
    }
    let channels = 2;
    info(
        "INIT",
        dev,
        &format!("{channels} coll channels, {channels} collnet channels, 0 nvls channels, {channels} p2p channels, {channels} p2p channels per peer"),
    );
    let dump_rank = |key: &str| env(key).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    if rank == dump_rank("NCCL_TOPO_DUMP_FILE_RANK") {
        if let Some(path) = env("NCCL_TOPO_DUMP_FILE") {
            info(
                "ENV",
                dev,
                &format!("NCCL_TOPO_DUMP_FILE set by environment to {path}"),
            );
            let _ = std::fs::write(path, system_xml(version));
        }
    }
    if rank == dump_rank("NCCL_GRAPH_DUMP_FILE_RANK") {
        if let Some(path) = env("NCCL_GRAPH_DUMP_FILE") {
            info(
                "ENV",
                dev,
                &format!("NCCL_GRAPH_DUMP_FILE set by environment to {path}"),
            );
            let _ = std::fs::write(path, graph_xml(nranks, version));
        }
    }
    info(
        "INIT",
        dev,
        &format!("ncclCommInitRank comm 0x{:x} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {gpu} busId {bus_short}0 commId 0x1 - Init COMPLETE", 0x7f00_0000_0000u64 + rank as u64 * 0x1000),
    );
}

/// The machine as NCCL 2.2x writes it: one CPU, the GPUs on their buses (`nvml.rs`'s), and the
/// network ports.
fn system_xml(version: i32) -> String {
    let gpus = crate::cuda::device::machine_gpus();
    let cc = env("NCCLPROBE_TEST_DOUBLE_COMPUTE_CAPABILITY").unwrap_or_else(|| "9.0".into());
    let sm = cc.replace('.', "");
    let mut x = String::from("<system version=\"1\">\n  <cpu host_hash=\"0x1\" numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n");
    for g in 0..gpus {
        x.push_str(&format!(
            "    <pci busid=\"0000:{:02x}:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\" subsystem_vendor=\"0x10de\" subsystem_device=\"0x16c1\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <gpu dev=\"{g}\" sm=\"{sm}\" rank=\"{g}\" gdr=\"1\"/>\n    </pci>\n",
            0x18 + 0x10 * g
        ));
    }
    if fused(version) {
        // One NIC, two ports: NCCL lists each port as a <net> of the NIC's one PCI function.
        x.push_str("    <pci busid=\"0000:c0:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <nic>\n");
        for n in 0..2 {
            x.push_str(&format!(
                "        <net name=\"mlx5_{n}\" dev=\"{n}\" speed=\"400000\" port=\"{}\" latency=\"0\" guid=\"0x{:x}\" maxconn=\"131072\" gdr=\"1\"/>\n",
                n + 1,
                0xa088_c203_00e1_b2c0u64 + n as u64
            ));
        }
        x.push_str("      </nic>\n    </pci>\n");
        if version < 22400 {
            // Before 2.24 the dump is the pass NCCL uses: the ports kept out, the vNIC in.
            x = x.replace("gdr=\"1\"/>\n", "gdr=\"1\" keep=\"0\"/>\n");
            x.push_str("    <nic>\n      <net name=\"mlx5_0+mlx5_1\" dev=\"2\" speed=\"800000\" port=\"0\" latency=\"0\" guid=\"0x0\" maxconn=\"131072\" gdr=\"1\"/>\n    </nic>\n");
        }
    } else if ib() {
        for n in 0..2 {
            x.push_str(&format!(
                "    <pci busid=\"0000:{:02x}:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <nic>\n        <net name=\"mlx5_{n}\" dev=\"{n}\" speed=\"400000\" port=\"1\" latency=\"0\" guid=\"0x{:x}\" maxconn=\"131072\" gdr=\"1\"/>\n      </nic>\n    </pci>\n",
                0xc0 + 0x10 * n,
                0xa088_c203_00e1_b2c0u64 + n as u64
            ));
        }
    } else {
        x.push_str("    <nic>\n      <net name=\"eth0\" dev=\"0\" speed=\"10000\" port=\"0\" latency=\"0\" guid=\"0x0\" maxconn=\"65536\" gdr=\"0\"/>\n    </nic>\n");
    }
    x.push_str("  </cpu>\n</system>\n");
    x
}

/// Ring and tree over the communicator's ranks in order, two channels; NVLS and CollNet searched
/// and empty, as NCCL 2.28 writes a PCIe machine's graphs (ids 0, 1, 4, 2, 3).
fn graph_xml(nranks: usize, version: i32) -> String {
    // With a fused NIC, the ring's channels enter and leave the node by it, as between nodes.
    let net = if fused(version) {
        "      <net dev=\"2\"/>\n"
    } else {
        ""
    };
    let channel = || {
        let gpus: String = (0..nranks)
            .map(|g| format!("      <gpu dev=\"{g}\"/>\n"))
            .collect();
        format!("    <channel>\n{net}{gpus}{net}    </channel>\n")
    };
    let graph = |id: u32, pattern: u32| {
        format!(
            "  <graph id=\"{id}\" pattern=\"{pattern}\" crossnic=\"0\" nchannels=\"2\" speedintra=\"24\" speedinter=\"24\" latencyinter=\"0\" typeintra=\"PIX\" typeinter=\"PIX\" samechannels=\"1\">\n{}{}  </graph>\n",
            channel(),
            channel()
        )
    };
    let empty = |id: u32, pattern: u32| {
        format!("  <graph id=\"{id}\" pattern=\"{pattern}\" crossnic=\"0\" nchannels=\"0\" speedintra=\"0\" speedinter=\"0\" latencyinter=\"0\" typeintra=\"LOC\" typeinter=\"LOC\" samechannels=\"0\"/>\n")
    };
    format!(
        "<graphs version=\"1\">\n{}{}{}{}{}</graphs>\n",
        graph(0, 4),
        graph(1, 3),
        empty(4, 6),
        empty(2, 3),
        empty(3, 5)
    )
}

/// The tuner's line for one collective call on rank 0 of `nranks` (NCCL runs no algorithm for
/// one rank). `bytes` as the version prints it: through 2.23 `nBytes`, the whole buffer (all
/// ranks' parts for AllGather and ReduceScatter); from 2.24 `task->count * typeSize`, the
/// per-rank part (enqueue.cc:741-742).
pub(crate) fn tuner_line(
    coll: &str,
    bytes: usize,
    rank: usize,
    nranks: usize,
    dev: i32,
    version: i32,
) {
    if rank != 0 || nranks < 2 || version < 22000 || !on("TUNING") {
        return;
    }
    let (algo, proto) = match (coll, bytes) {
        ("AllReduce", b) if b <= 64 << 10 => (0, 0),
        (_, b) if b <= 64 << 10 => (1, 0),
        (_, b) if b <= 8 << 20 => (1, 1),
        _ => (1, 2),
    };
    let channels = [2, 4, 8][proto];
    let time = 5.0 + bytes as f64 / 2e4;
    if version < 22300 {
        info(
            "TUNING",
            dev,
            &format!("{bytes} Bytes -> Algo {algo} proto {proto} time {time:.6}"),
        );
    } else if version < 22400 {
        info(
            "TUNING",
            dev,
            &format!("{coll}: {bytes} Bytes -> Algo {algo} proto {proto} time {time:.6}"),
        );
    } else {
        let a = ["TREE", "RING"][algo];
        let p = ["LL", "LL128", "SIMPLE"][proto];
        info(
            "TUNING",
            dev,
            &format!(
                "{coll}: {bytes} Bytes -> Algo {a} proto {p} channel{{Lo..Hi}}={{0..{}}}",
                channels - 1
            ),
        );
    }
}

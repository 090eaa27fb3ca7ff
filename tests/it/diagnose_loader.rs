//! `diagnose --from` on what users paste about the input pipeline: nvidia-smi, free, nproc and
//! PyTorch's DataLoader warning, alone or in one file, shaped like seeds/001 and seeds/003.

use crate::common;

use common::bin;
use serde_json::Value;

fn diagnose(files: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args(["diagnose", "--format", "json"]);
    for (name, body) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        cmd.arg("--from").arg(p);
    }
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).unwrap()
}

fn finding<'a>(v: &'a Value, id: &str) -> Option<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
}

fn evidence(f: &Value) -> Vec<(String, u64)> {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["text"].as_str().unwrap().to_string(),
                e["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// seeds/003: one A10 at 3% with 0.7 of 22.5 GB, 40 workers where PyTorch suggests 28.
const SEED_003: &str = "\
python scripts/train_universal_model.py --model-type lstm --batch-size 256 --num-workers 40 --device cuda --amp
/home/u/.venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 28, which is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.
  warnings.warn(_create_warning_msg(
Epoch 1/30: 100%|##########| 412/412 [00:25<00:00, 16.1it/s, loss=0.0213]
$ nvidia-smi
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA A10                     On  | 00000000:00:07.0 Off |                    0 |
|  0%   38C    P0              61W / 150W |    716MiB / 23028MiB |      3%      Default |
+-----------------------------------------+----------------------+----------------------+
$ nproc
28
";

#[test]
fn seed_003_paste_names_the_oversubscribed_loader_and_the_starved_gpu() {
    let v = diagnose(&[("003.txt", SEED_003)]);
    let over = finding(&v, "loader.oversubscribed").expect("loader.oversubscribed");
    assert_eq!(over["severity"], "warning");
    assert!(
        over["title"]
            .as_str()
            .unwrap()
            .contains("at most 28 per rank fit"),
        "{}",
        over["title"]
    );
    assert_eq!(evidence(over)[0].1, 2);
    assert!(evidence(over)[0]
        .0
        .contains("will create 40 worker processes"));
    let starved = finding(&v, "loader.starved").expect("loader.starved");
    assert_eq!(starved["severity"], "warning");
    let lines = evidence(starved);
    assert!(
        lines.contains(&(
            "|  0%   38C    P0              61W / 150W |    716MiB / 23028MiB |      3%      Default |".into(),
            13
        )),
        "{lines:?}"
    );
    assert!(finding(&v, "host.memory-pressure").is_none());
    // The file is read as what it is.
    assert_eq!(v["facts"]["inputs"][0]["kind"], "nvidia-smi");
}

/// seeds/001: three GPUs at 100% with half their memory; host RAM 94% and swap in use; as
/// separate files the way a user attaches them.
fn seed_001_gpus(util: u32) -> String {
    let mut t = "$ nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv\nindex, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n".to_string();
    for (g, used) in [(0, 9587), (1, 11761), (2, 9329)] {
        t += &format!("{g}, {util} %, {used} MiB, 20480 MiB\n");
    }
    t
}

const SEED_001_FREE: &str = "\
$ free -h
               total        used        free      shared  buff/cache   available
Mem:            32Gi        30Gi       326Mi       112Mi       1.5Gi       1.9Gi
Swap:          4.0Gi       2.1Gi       1.9Gi
";

#[test]
fn seed_001_paste_names_host_memory_pressure_and_not_a_starved_gpu() {
    let v = diagnose(&[
        ("gpus.txt", &seed_001_gpus(100)),
        ("free.txt", SEED_001_FREE),
    ]);
    let pressure = finding(&v, "host.memory-pressure").expect("host.memory-pressure");
    assert!(
        pressure["title"]
            .as_str()
            .unwrap()
            .starts_with("host RAM 94% in use, swap 52% used"),
        "{}",
        pressure["title"]
    );
    let lines = evidence(pressure);
    assert!(
        lines.iter().any(|(t, n)| t.starts_with("Mem:") && *n == 3),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|(t, n)| t.starts_with("Swap:") && *n == 4),
        "{lines:?}"
    );
    // Busy GPUs are not waiting for data, whatever the host shows.
    assert!(finding(&v, "loader.starved").is_none());
    assert_eq!(v["facts"]["inputs"][1]["kind"], "pasted host state");
    // The same host with GPUs at 20%: now they wait, and the host's memory is why.
    let v = diagnose(&[
        ("gpus.txt", &seed_001_gpus(20)),
        ("free.txt", SEED_001_FREE),
    ]);
    let starved = finding(&v, "loader.starved").expect("loader.starved");
    assert!(starved["title"]
        .as_str()
        .unwrap()
        .contains("host RAM 94% in use"));
    assert_eq!(evidence(starved).len(), 3 + 3);
}

#[test]
fn a_healthy_busy_gpu_gives_no_loader_finding() {
    let healthy = SEED_003
        .replace("--num-workers 40", "--num-workers 8")
        .replace("3%      Default", "97%      Default")
        .replace("716MiB", "15716MiB");
    let healthy: String = healthy
        .lines()
        .filter(|l| !l.contains("DataLoader will create"))
        .map(|l| format!("{l}\n"))
        .collect();
    let free = "$ free -m\n              total        used        free      shared  buff/cache   available\nMem:          64000       20000       30000         100       14000       43000\nSwap:          2047           0        2047\n";
    let v = diagnose(&[("run.txt", &healthy), ("free.txt", free)]);
    let ids: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(
        !ids.iter()
            .any(|id| id.starts_with("loader.") || id.starts_with("host.")),
        "{ids:?}"
    );
}

#[test]
fn the_real_tables_of_the_corpus_are_read_without_a_loader_finding() {
    // Idle GPUs (0 MiB, 7 MiB) and a full one at 6% (an inference server): none is starved.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/host");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("04-") {
            // MIG instances alone: their memory cells are no GPU rows, so nothing is read.
            bin()
                .args(["diagnose", "--from"])
                .arg(entry.path())
                .assert()
                .code(2);
            continue;
        }
        let body = std::fs::read_to_string(entry.path()).unwrap();
        let v = diagnose(&[("smi.txt", &body)]);
        assert!(finding(&v, "loader.starved").is_none(), "{name}");
        read += 1;
    }
    assert_eq!(read, 3);
    // The one at 6% with memory to spare would be: the rule looks at the numbers it read.
    let body = std::fs::read_to_string(dir.join("02-tesla-p4-driver550-memory-full-low-util.txt"))
        .unwrap()
        .replace("7719MiB", "3719MiB");
    let v = diagnose(&[("smi.txt", &body)]);
    assert_eq!(
        finding(&v, "loader.starved").expect("starved")["severity"],
        "info"
    );
}

#[test]
fn text_with_neither_a_log_nor_host_state_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.txt");
    std::fs::write(&p, "we set --num-workers 40 and it was slow\n").unwrap();
    let out = bin().args(["diagnose", "--from"]).arg(&p).assert().code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    // The refusal says what host state would have been read, and how to paste it.
    for format in [
        "nvidia-smi",
        "--query-gpu",
        "dmon",
        "free -h",
        "/proc/meminfo",
        "nproc",
        "lscpu",
        "DataLoader",
        "out-of-memory",
    ] {
        assert!(err.contains(format), "{format}: {err}");
    }
}

#[test]
fn fail_on_names_the_severity_as_the_flag_spells_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("warn.txt");
    std::fs::write(&p, WARNING_40_28).unwrap();
    let out = bin()
        .args(["diagnose", "--fail-on", "warning", "--from"])
        .arg(&p)
        .assert()
        .code(3);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("findings at or above warning"), "{err}");
}

const WARNING_40_28: &str = "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 28, which is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.\n";

fn title(v: &Value, id: &str) -> String {
    let f = finding(v, id).unwrap_or_else(|| panic!("{id} in {v}"));
    f["title"].as_str().unwrap().to_string()
}

#[test]
fn a_file_of_one_count_is_nproc_and_the_smaller_cpu_count_sets_the_budget() {
    // `nproc > nproc.txt`: one number, which is also valid JSON.
    let v = diagnose(&[("warn.txt", WARNING_40_28), ("nproc.txt", "4\n")]);
    assert_eq!(v["facts"]["inputs"][1]["kind"], "pasted host state");
    let t = title(&v, "loader.oversubscribed");
    assert!(t.contains("on 4 CPUs"), "{t}");
    assert!(t.contains("at most 4 per rank fit"), "{t}");
    let over = finding(&v, "loader.oversubscribed").unwrap();
    assert!(evidence(over)
        .iter()
        .any(|(t, _)| t.contains("nproc's answer")));
    // Without a newline; more CPUs than the warning counted leave the warning's budget.
    let v = diagnose(&[("warn.txt", WARNING_40_28), ("nproc.txt", "20")]);
    assert!(title(&v, "loader.oversubscribed").contains("on 20 CPUs"));
    let v = diagnose(&[("warn.txt", WARNING_40_28), ("nproc.txt", "64")]);
    assert!(title(&v, "loader.oversubscribed").contains("at most 28 per rank fit"));
    // Zero, or a number too large to be a CPU count, is still not host state.
    for body in ["0\n", "123456789\n"] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.txt");
        std::fs::write(&p, body).unwrap();
        bin().args(["diagnose", "--from"]).arg(&p).assert().code(2);
    }
}

#[test]
fn each_rank_that_warns_is_a_local_rank_sharing_the_cpus() {
    for prefix in ["[rank{}]:", "[default{}]:", "{}: "] {
        let body: String = (0..3)
            .map(|r| format!("{}{WARNING_40_28}", prefix.replace("{}", &r.to_string())))
            .collect();
        let v = diagnose(&[("ranks.log", &body)]);
        let t = title(&v, "loader.oversubscribed");
        assert!(t.contains("× 3 local ranks"), "{prefix}: {t}");
        assert!(t.contains("at most 9 per rank fit"), "{prefix}: {t}");
        let lines = evidence(finding(&v, "loader.oversubscribed").unwrap());
        assert_eq!(lines.len(), 3, "{lines:?}");
    }
    // One rank's warning repeated (every epoch) is still one rank.
    let v = diagnose(&[(
        "one.log",
        &format!("[rank0]:{WARNING_40_28}[rank0]:{WARNING_40_28}"),
    )]);
    assert!(title(&v, "loader.oversubscribed").contains("at most 28 per rank fit"));
}

#[test]
fn an_idle_gpu_that_lists_no_process_is_not_starved() {
    let table = |util: &str, processes: &str| {
        format!(
            "\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 535.129.03   Driver Version: 535.129.03   CUDA Version: 12.2     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  NVIDIA A10          On   | 00000000:00:07.0 Off |                    0 |
|  0%   30C    P0    58W / 150W |    412MiB / 23028MiB |     {util}      Default |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|=============================================================================|
{processes}
+-----------------------------------------------------------------------------+
"
        )
    };
    let none = "|  No running processes found                                                 |";
    let v = diagnose(&[("smi.txt", &table("0%", none))]);
    assert!(finding(&v, "loader.starved").is_none(), "{v}");
    // The same GPU with its process listed, or computing now and then (a container's table
    // lists none even for its own job), still waits.
    let listed = "|    0   N/A  N/A      4242      C   python                          400MiB |";
    for body in [table("0%", listed), table("3%", none)] {
        let v = diagnose(&[("smi.txt", &body)]);
        assert!(finding(&v, "loader.starved").is_some(), "{body}");
    }
}

#[test]
fn bare_query_csv_and_proc_meminfo_are_host_state() {
    // `--query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
    // pasted without its command line, beside the loader's warning.
    let v = diagnose(&[("q.txt", "3, 717, 23028\n"), ("warn.txt", WARNING_40_28)]);
    assert_eq!(v["facts"]["inputs"][0]["kind"], "pasted host state");
    let lines = evidence(finding(&v, "loader.starved").expect("starved"));
    assert!(lines.contains(&("3, 717, 23028".into(), 1)), "{lines:?}");
    let meminfo = "\
MemTotal:       32768000 kB
MemFree:          300000 kB
MemAvailable:    1900000 kB
Buffers:           10000 kB
Cached:          1500000 kB
SwapCached:        20000 kB
SwapTotal:       4194304 kB
SwapFree:        2000000 kB
";
    let v = diagnose(&[("meminfo.txt", meminfo)]);
    let t = title(&v, "host.memory-pressure");
    assert!(t.starts_with("host RAM 94% in use, swap 52% used"), "{t}");
    let lines = evidence(finding(&v, "host.memory-pressure").unwrap());
    assert_eq!(lines.len(), 5, "{lines:?}");
}

#[test]
fn numbers_that_only_look_like_a_query_row_are_not_read_as_one() {
    // Used above total, a percentage over 100, a total under a GiB: not nvidia-smi's.
    for body in ["3, 30000, 23028\n", "300, 717, 23028\n", "3, 7, 80\n"] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.txt");
        std::fs::write(&p, body).unwrap();
        bin().args(["diagnose", "--from"]).arg(&p).assert().code(2);
    }
}

#[test]
fn a_pytorch_out_of_memory_error_is_a_finding_with_its_numbers() {
    let new = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free. Including non-PyTorch memory, this process has 22.66 GiB memory in use. Of the allocated memory 20.90 GiB is allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n";
    let v = diagnose(&[("oom.txt", new)]);
    let f = finding(&v, "gpu.out-of-memory").expect("gpu.out-of-memory");
    let t = f["title"].as_str().unwrap();
    assert!(
        t.contains("GPU 0: tried to allocate 500 MiB with 244 MiB free of 23.63 GiB"),
        "{t}"
    );
    assert!(t.contains("1.50 GiB reserved but unallocated"), "{t}");
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .contains("ncclprobe simulate memory"));
    assert_eq!(evidence(f)[0].1, 1);
    let old = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.10 GiB already allocated; 1.20 GiB free; 13.20 GiB reserved in total by PyTorch)\n";
    let v = diagnose(&[("oom.txt", old)]);
    let t = title(&v, "gpu.out-of-memory");
    assert!(
        t.contains("tried to allocate 2.00 GiB with 1.20 GiB free of 15.78 GiB"),
        "{t}"
    );
    assert!(!t.contains("unallocated"), "{t}");
}

use super::*;

fn read(text: &str) -> Pastes {
    let mut p = Pastes::default();
    for (i, raw) in text.lines().enumerate() {
        let (t, tag) = text::clean(raw);
        p.feed(
            "paste",
            &Line {
                number: i + 1,
                raw: raw.into(),
                text: t,
                tag_rank: tag,
            },
        );
    }
    p.finish("paste");
    p
}

/// (gpu, util %, used MiB, total MiB) of one sample.
type Reading = (u32, Option<f64>, Option<f64>, Option<f64>);

fn gpus(p: &Pastes) -> Vec<Reading> {
    p.gpus
        .iter()
        .map(|s| (s.gpu, s.util_pct, s.memory_used_mib, s.memory_total_mib))
        .collect()
}

fn corpus(name: &str) -> String {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/corpus/host")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_default_table_of_several_drivers_gives_utilisation_and_memory() {
    let old = read(&corpus("01-titanxp-driver450-idle.txt"));
    assert_eq!(gpus(&old), vec![(0, Some(0.0), Some(7.0), Some(12196.0))]);
    assert_eq!(old.gpus[0].evidence.line, 11);
    let wide = read(&corpus("02-tesla-p4-driver550-memory-full-low-util.txt"));
    assert_eq!(
        gpus(&wide),
        vec![(0, Some(6.0), Some(7719.0), Some(8192.0))]
    );
    let container = read(&corpus("03-a10g-driver470-container.txt"));
    assert_eq!(
        gpus(&container),
        vec![(0, Some(0.0), Some(0.0), Some(22731.0))]
    );
    // MIG instances' memory cells are not GPUs.
    assert!(read(&corpus("04-mig-devices-table.txt")).gpus.is_empty());
}

#[test]
fn table_rows_keep_their_gpu_index_and_windows_layout_reads_the_same() {
    let table = "\
| NVIDIA-SMI 531.14                 Driver Version: 531.14       CUDA Version: 12.1     |
|   0  NVIDIA GeForce RTX 3080    WDDM | 00000000:01:00.0  On |                  N/A |
| 30%   45C    P8               25W / 320W |   1158MiB / 10240MiB |     11%      Default |
|   2  NVIDIA GeForce RTX 3080    WDDM | 00000000:02:00.0 Off |                  N/A |
| 30%   45C    P2              300W / 320W |   9000MiB / 10240MiB |     N/A      Default |
";
    assert_eq!(
        gpus(&read(table)),
        vec![
            (0, Some(11.0), Some(1158.0), Some(10240.0)),
            (2, None, Some(9000.0), Some(10240.0))
        ]
    );
}

#[test]
fn query_gpu_csv_with_a_header_or_with_the_command_naming_the_fields() {
    let header = "\
index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]
0, NVIDIA A10, 3 %, 700 MiB, 23028 MiB
1, NVIDIA A10, [N/A], 650 MiB, 23028 MiB
and then some prose, with commas
";
    assert_eq!(
        gpus(&read(header)),
        vec![
            (0, Some(3.0), Some(700.0), Some(23028.0)),
            (1, None, Some(650.0), Some(23028.0))
        ]
    );
    let bare = "\
$ nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits
700, 23028, 3
712, 23028, 97
";
    assert_eq!(
        gpus(&read(bare)),
        vec![
            (0, Some(3.0), Some(700.0), Some(23028.0)),
            (1, Some(97.0), Some(712.0), Some(23028.0))
        ]
    );
    // Without a header or the command the columns are unknown: nothing is guessed.
    assert!(read("700, 23028, 3\n").gpus.is_empty());
}

#[test]
fn dmon_columns_give_sm_utilisation_and_framebuffer_use() {
    let dmon = "\
# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb   bar1
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB     MB
    0     62     41      -      4      1      0      0      0      0   6250   1740    712      5
    1     61     40      -     98     40      0      0      0      0   6250   1740   9000      5
";
    assert_eq!(
        gpus(&read(dmon)),
        vec![
            (0, Some(4.0), Some(712.0), None),
            (1, Some(98.0), Some(9000.0), None)
        ]
    );
    let utilisation_only = "# gpu     sm    mem    enc    dec\n# Idx      %      %      %      %\n    0      3      0      0      0\n";
    assert_eq!(
        gpus(&read(utilisation_only)),
        vec![(0, Some(3.0), None, None)]
    );
}

#[test]
fn free_in_its_layouts_and_units() {
    let gib = 1024f64.powi(3);
    let human = "\
$ free -h
               total        used        free      shared  buff/cache   available
Mem:            31Gi        29Gi       412Mi       1.0Gi       1.6Gi       1.8Gi
Swap:          4.0Gi       2.1Gi       1.9Gi
";
    let m = &read(human).memory[0];
    assert!((m.total_bytes - 31.0 * gib).abs() < 1.0);
    // Used is what the available column leaves: 31 − 1.8 GiB.
    assert!((m.used_bytes - 29.2 * gib).abs() < 1e6, "{}", m.used_bytes);
    assert!((m.swap_used_fraction().unwrap() - 2.1 / 4.0).abs() < 1e-9);
    assert_eq!(m.evidence.len(), 3);
    assert!(m.evidence[1].text.starts_with("Mem:"));
    // procps before 3.3.10: `used` holds the cache; the -/+ row says what programs use.
    let old = "\
free -m
             total       used       free     shared    buffers     cached
Mem:         32147      31800        347          0        120      20000
-/+ buffers/cache:      11680      20467
Swap:         4095          0       4095
";
    let m = &read(old).memory[0];
    assert!((m.used_bytes - 11680.0 * 1024.0 * 1024.0).abs() < 1.0);
    assert!(m.used_fraction() < 0.4);
    assert_eq!(m.swap_used_fraction(), Some(0.0));
    // The older `free -h` letters, and plain numbers in KiB when no command says otherwise.
    let letters = "Mem:           31G         29G        412M        1.0G        1.6G        1.8G\nSwap:         4.0G        2.1G        1.9G\n";
    let m = &read(letters).memory[0];
    assert!((m.used_bytes - 29.0 * gib).abs() < 1.0);
    let kib = "              total        used        free      shared  buff/cache   available\nMem:       32768000    30000000      500000           0     2268000     1000000\n";
    let m = &read(kib).memory[0];
    assert!((m.total_bytes - 32768000.0 * 1024.0).abs() < 1.0);
    assert!((m.used_fraction() - 31768000.0 / 32768000.0).abs() < 1e-9);
    assert_eq!(m.swap_total_bytes, None);
}

#[test]
fn cpu_counts_only_where_they_are_unambiguous() {
    let asked = read("user@box:~$ nproc\n20\n");
    assert_eq!(asked.cores().map(|c| c.value), Some(20));
    assert_eq!(asked.nproc.as_ref().unwrap().evidence.line, 2);
    assert_eq!(read("28\n").cores().map(|c| c.value), Some(28));
    assert_eq!(read("nproc: 16\n").cores().map(|c| c.value), Some(16));
    let python = read("$ python -c \"import os; print(os.cpu_count())\"\n64\n");
    assert_eq!(python.cores().map(|c| c.value), Some(64));
    let lscpu = read("Architecture:        x86_64\nCPU(s):              20\nOn-line CPU(s) list: 0-19\nNUMA node0 CPU(s):   0-9\n");
    assert_eq!(lscpu.cores().map(|c| c.value), Some(20));
    // nproc (the CPUs this shell may use) over lscpu (the machine's).
    let both = read("CPU(s): 64\n$ nproc\n16\n");
    assert_eq!(both.cores().map(|c| c.value), Some(16));
    // A bare number among other lines is not a CPU count, nor one after another command.
    assert!(read("epoch 3\n20\n").cores().is_none());
    assert!(read("$ ls | wc -l\n20\n").cores().is_none());
}

#[test]
fn dataloader_warnings_of_current_and_older_pytorch() {
    let current = "/usr/local/lib/python3.11/dist-packages/torch/utils/data/dataloader.py:624: UserWarning: This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 28, which is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.\n  warnings.warn(\n";
    let w = &read(current).worker_warnings[0];
    assert_eq!((w.workers, w.suggested_max), (40, Some(28)));
    let cpuset = "UserWarning: This DataLoader will create 12 worker processes in total. Our suggested max number of worker in current system is 10 (`cpuset` is not taken into account), which is smaller than what this DataLoader is going to create.";
    let w = &read(cpuset).worker_warnings[0];
    assert_eq!((w.workers, w.suggested_max), (12, Some(10)));
    let unknown = "UserWarning: This DataLoader will create 8 worker processes in total. DataLoader is not able to compute a suggested max number of worker in current system. Please be aware";
    assert_eq!(read(unknown).worker_warnings[0].suggested_max, None);
    // A terminal that wrapped the warning.
    let wrapped = "UserWarning: This DataLoader will create 16 worker processes in total.\n Our suggested max number of worker in current system is 8, which is smaller than\n what this DataLoader is going to create.\n";
    let w = &read(wrapped).worker_warnings[0];
    assert_eq!(
        (w.workers, w.suggested_max, w.evidence.len()),
        (16, Some(8), 2)
    );
}

#[test]
fn loader_and_launcher_settings_from_command_lines_and_configs() {
    let p = read("torchrun --nproc_per_node=4 train.py --num-workers 12 --pin-memory\n");
    assert_eq!(p.num_workers.as_ref().map(|c| c.value), Some(12));
    assert_eq!(p.local_ranks.as_ref().map(|c| c.value), Some(4));
    for line in [
        "loader = DataLoader(ds, batch_size=64, num_workers=6, pin_memory=True)",
        "  num_workers: 6",
        "{\"num_workers\": 6}",
    ] {
        assert_eq!(read(line).num_workers.map(|c| c.value), Some(6), "{line}");
    }
    assert!(read("num_workers_per_gpu=3").num_workers.is_none());
    assert_eq!(
        read("accelerate launch --multi_gpu --num_processes 3 train.py")
            .local_ranks
            .map(|c| c.value),
        Some(3)
    );
    // Settings alone say nothing about the machine.
    assert!(read("--num-workers 40").is_empty());
}

#[test]
fn a_mixed_paste_finds_each_block() {
    let paste = "\
Here is what I see while training:
$ nvidia-smi
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|   0  NVIDIA A10                     On  | 00000000:00:07.0 Off |                    0 |
|  0%   38C    P0              60W / 150W |    700MiB / 23028MiB |      3%      Default |
$ free -h
               total        used        free      shared  buff/cache   available
Mem:            62Gi        20Gi        30Gi       1.0Gi        12Gi        41Gi
Swap:          2.0Gi          0B       2.0Gi
$ nproc
28
python train.py --num-workers 40 --batch-size 256
/opt/torch/utils/data/dataloader.py:560: UserWarning: This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 28, which is smaller than what this DataLoader is going to create.
";
    let p = read(paste);
    assert_eq!(gpus(&p), vec![(0, Some(3.0), Some(700.0), Some(23028.0))]);
    assert_eq!(p.memory.len(), 1);
    assert!(p.memory[0].used_fraction() < 0.4);
    assert_eq!(p.memory[0].swap_used_fraction(), Some(0.0));
    assert_eq!(p.cores().map(|c| c.value), Some(28));
    assert_eq!(p.num_workers.as_ref().map(|c| c.value), Some(40));
    assert_eq!(p.worker_warnings.len(), 1);
}

#[test]
fn an_out_of_memory_error_wrapped_after_each_sentence_is_read_whole() {
    // Seed 004 pasted PyTorch's one-line error over three lines.
    let p = read(
        "CUDA out of memory. Tried to allocate 500.00 MiB. \n\
         GPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free. \n\
         Including non-PyTorch memory, this process has 22.66 GiB memory in use.\n",
    );
    assert_eq!(p.oom_count(), 1);
    let oom = p.first_oom().unwrap();
    let gib = (1u64 << 30) as f64;
    let mib = (1u64 << 20) as f64;
    assert_eq!(oom.tried_bytes, 500.0 * mib);
    assert_eq!(oom.gpu, Some(0));
    assert_eq!(oom.total_bytes, Some(23.63 * gib));
    assert_eq!(oom.free_bytes, Some(243.94 * mib));
    assert_eq!(oom.process_in_use_bytes, Some(22.66 * gib));
    assert_eq!(oom.evidence.line, 1);
    // A sentence far below the error belongs to something else.
    let far = read(&format!(
        "CUDA out of memory. Tried to allocate 500.00 MiB.\n{}this process has 9.00 GiB memory in use.\n",
        "other\n".repeat(10)
    ));
    assert_eq!(far.first_oom().unwrap().process_in_use_bytes, None);
}

#[test]
fn pytorch_2_1s_capacty_and_a_containers_listed_process_are_read() {
    // github.com/FoundationVision/GenerateU/issues/10: in a container PyTorch lists the
    // process by PID, without "this process".
    let p = read("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty of 14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 GiB is allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated.\n");
    let oom = p.first_oom().unwrap();
    let (gib, mib) = ((1u64 << 30) as f64, (1u64 << 20) as f64);
    assert_eq!(oom.total_bytes, Some(14.75 * gib));
    assert_eq!(oom.free_bytes, Some(235.06 * mib));
    assert_eq!(oom.process_in_use_bytes, None);
    assert_eq!(oom.listed_processes_bytes, vec![14.52 * gib]);
    assert_eq!(oom.reserved_unallocated_bytes, Some(330.42 * mib));
    // Both sentences: the listed one is another process.
    let p = read("CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of 15.69 GiB of which 3.71 GiB is free. Process 811 has 1.25 GiB memory in use. Including non-PyTorch memory, this process has 10.71 GiB memory in use.\n");
    assert_eq!(
        p.first_oom().unwrap().process_in_use_bytes,
        Some(10.71 * gib)
    );
    assert_eq!(
        p.first_oom().unwrap().listed_processes_bytes,
        vec![1.25 * gib]
    );
}

#[test]
fn hip_cached_zero_bytes_a_break_after_the_first_sentence_and_a_no_break_space_are_read() {
    let (gib, mib, kib) = ((1u64 << 30) as f64, (1u64 << 20) as f64, 1024.0);
    // ROCm (github.com/huggingface/autotrain-advanced/issues/737): the same message with HIP.
    let p = read("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 124.00 MiB. GPU 0 has a total capacity of 19.94 GiB of which 554.47 MiB is free. Of the allocated memory 18.90 GiB is allocated by PyTorch, and 134.00 MiB is reserved by PyTorch but unallocated.\n");
    assert_eq!(p.first_oom().unwrap().tried_bytes, 124.0 * mib);
    assert_eq!(p.first_oom().unwrap().allocated_bytes, Some(18.90 * gib));
    // PyTorch 1.0-1.3 (github.com/pytorch/examples/issues/621): "cached" is the pool beyond
    // what tensors hold.
    let p = read("RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB (GPU 0; 11.17 GiB total capacity; 10.90 GiB already allocated; 576.00 KiB free; 30.96 MiB cached)\n");
    let oom = p.first_oom().unwrap();
    assert_eq!(oom.free_bytes, Some(576.0 * kib));
    assert_eq!(oom.reserved_unallocated_bytes, Some(30.96 * mib));
    assert_eq!(oom.reserved_total_bytes, Some(30.96 * mib + 10.90 * gib));
    // A container's "0 bytes" is no reading.
    let p = read("CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 39.38 GiB of which 3.76 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated memory 34.94 GiB is allocated by PyTorch, and 175.15 MiB is reserved by PyTorch but unallocated.\n");
    assert_eq!(p.first_oom().unwrap().process_in_use_bytes, None);
    // Broken after "CUDA out of memory.", each line with its rank prefix.
    let p = read("[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n[rank0]: Tried to allocate 16.00 MiB.\n[rank0]: GPU 0 has a total capacity of 23.56 GiB of which 34.81 MiB is free.\n[rank0]: Process 26463 has 23.07 GiB memory in use.\n");
    assert_eq!(p.oom_count(), 1);
    let oom = p.first_oom().unwrap();
    assert_eq!(oom.tried_bytes, 16.0 * mib);
    assert_eq!(oom.evidence.line, 1);
    assert_eq!(oom.total_bytes, Some(23.56 * gib));
    assert_eq!(oom.listed_processes_bytes, vec![23.07 * gib]);
    // A browser's copy of &nbsp; before the unit.
    let p = read("CUDA out of memory. Tried to allocate 500.00\u{a0}MiB. GPU 0 has a total capacity of 23.63\u{a0}GiB of which 243.94\u{a0}MiB is free.\n");
    assert_eq!(p.first_oom().unwrap().tried_bytes, 500.0 * mib);
    assert_eq!(p.first_oom().unwrap().total_bytes, Some(23.63 * gib));
}

#[test]
fn many_out_of_memory_errors_keep_the_first_and_a_count() {
    let line = "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of 8.00 GiB of which 1.00 MiB is free.\n";
    let p = read(&format!(
        "CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free.\n{}",
        line.repeat(10_000)
    ));
    assert_eq!(p.oom_count(), 10_001);
    let first = p.first_oom().unwrap();
    assert_eq!((first.gpu, first.evidence.line), (Some(0), 1));
}

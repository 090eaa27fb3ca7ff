//! The input pipeline flags `simulate ddp` and `doctor` share (PyTorch DataLoader settings,
//! the node's cores and memory, the batch's copy to the GPU, and the per-GPU batch sizes to
//! try), and their conversion back into `simulate ddp` arguments for doctor.

use clap::Args;

#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Input pipeline (PyTorch DataLoader)")]
pub struct LoaderArgs {
    /// DataLoader(num_workers=N) of each rank; 0 loads in the training process, serially with
    /// compute (PyTorch's default). A list (0,4,8) simulates each in turn and compares them.
    /// Giving --data-ms or --sample-ms models the loader.
    #[arg(long, value_name = "N[,N...]")]
    pub num_workers: Option<String>,
    /// One worker's time to produce one batch of --batch-size (read, decode, augment, collate),
    /// in ms; it scales with the batch.
    #[arg(long, value_name = "MS", conflicts_with = "sample_ms")]
    pub data_ms: Option<f64>,
    /// One worker's time per sample in ms (instead of --data-ms).
    #[arg(long, value_name = "MS")]
    pub sample_ms: Option<f64>,
    /// CPU cores the node's ranks and their workers share (default: this machine's, as
    /// sched_getaffinity counts them).
    #[arg(long, value_name = "N")]
    pub cpu_cores: Option<usize>,
    /// Ranks (training processes) per node (default: the world size, at most 8).
    #[arg(long, value_name = "N")]
    pub ranks_per_node: Option<usize>,
    /// DataLoader(pin_memory=True): batches land in page-locked memory and are copied with
    /// non_blocking=True beside compute.
    #[arg(long)]
    pub pin_memory: bool,
    /// DataLoader(prefetch_factor=N): batches each worker loads ahead (default 2; PyTorch
    /// refuses it with num_workers=0).
    #[arg(long, value_name = "N")]
    pub prefetch_factor: Option<usize>,
    /// DataLoader(persistent_workers=True): workers (and their memory) live across epochs.
    #[arg(long)]
    pub persistent_workers: bool,
    /// The dataset's size in memory, in GB: under fork every worker ends up with its own copy
    /// (reference counts write to the pages they read, and copy-on-write copies them).
    #[arg(long, value_name = "GB")]
    pub dataset_gb: Option<f64>,
    /// The node's memory in GB (default: MemTotal in /proc/meminfo).
    #[arg(long, value_name = "GB")]
    pub host_memory_gb: Option<f64>,
    /// Host-to-device copy bandwidth in GB/s for the batch (default: the --curve record's copy
    /// probe, pinned or pageable as --pin-memory says; else 20 pinned, 6 pageable).
    #[arg(long, value_name = "GB/S")]
    pub h2d_gbps: Option<f64>,
    /// Bytes of one sample as it is copied to the GPU (e.g. 600K).
    #[arg(long, value_name = "SIZE", conflicts_with = "batch_bytes")]
    pub sample_bytes: Option<String>,
    /// Bytes of one batch of --batch-size as it is copied to the GPU (e.g. 96M).
    #[arg(long, value_name = "SIZE")]
    pub batch_bytes: Option<String>,
    /// The part of each micro-step's compute that does not grow with the batch (kernel
    /// launches, Python), in ms; the rest of --compute-ms scales with the batch.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub compute_fixed_ms: f64,
    /// Per-GPU batch sizes to try (comma-separated): B keeps the effective batch by lowering
    /// the accumulation (the first --accumulation value is the one you train with); BxK tries
    /// batch B with accumulation K as given.
    #[arg(long, value_name = "LIST")]
    pub batch_sizes: Option<String>,
}

impl LoaderArgs {
    /// The --num-workers values, in the order given (empty when the flag is absent).
    pub fn num_workers_list(&self) -> Result<Vec<usize>, String> {
        let Some(text) = &self.num_workers else {
            return Ok(Vec::new());
        };
        let values: Result<Vec<usize>, String> = text
            .split(',')
            .map(|v| {
                v.trim().parse::<usize>().map_err(|_| {
                    format!("--num-workers: '{v}' is not a worker count (a whole number, or a list such as 0,4,8)")
                })
            })
            .collect();
        values
    }

    /// Whether any input pipeline flag was given (doctor refuses them without --model).
    pub fn given(&self) -> bool {
        self.data_ms.is_some() || self.sample_ms.is_some() || self.beyond_data_time()
    }

    /// Whether a flag other than the data time was given (they all need the data time).
    pub fn beyond_data_time(&self) -> bool {
        self.num_workers.is_some()
            || self.cpu_cores.is_some()
            || self.ranks_per_node.is_some()
            || self.pin_memory
            || self.persistent_workers
            || self.prefetch_factor.is_some()
            || self.dataset_gb.is_some()
            || self.host_memory_gb.is_some()
            || self.h2d_gbps.is_some()
            || self.sample_bytes.is_some()
            || self.batch_bytes.is_some()
            || self.compute_fixed_ms != 0.0
            || self.batch_sizes.is_some()
    }

    /// The same flags as `simulate ddp` arguments (`--flag=value`, so a value starting with
    /// `-` reaches the simulation's own check).
    pub fn to_argv(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut put = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                v.push(format!("--{flag}={value}"));
            }
        };
        put("num-workers", self.num_workers.clone());
        put("data-ms", self.data_ms.map(|x| x.to_string()));
        put("sample-ms", self.sample_ms.map(|x| x.to_string()));
        put("cpu-cores", self.cpu_cores.map(|n| n.to_string()));
        put("ranks-per-node", self.ranks_per_node.map(|n| n.to_string()));
        put(
            "prefetch-factor",
            self.prefetch_factor.map(|n| n.to_string()),
        );
        put("dataset-gb", self.dataset_gb.map(|x| x.to_string()));
        put("host-memory-gb", self.host_memory_gb.map(|x| x.to_string()));
        put("h2d-gbps", self.h2d_gbps.map(|x| x.to_string()));
        put("sample-bytes", self.sample_bytes.clone());
        put("batch-bytes", self.batch_bytes.clone());
        put("compute-fixed-ms", Some(self.compute_fixed_ms.to_string()));
        put("batch-sizes", self.batch_sizes.clone());
        if self.pin_memory {
            v.push("--pin-memory".into());
        }
        if self.persistent_workers {
            v.push("--persistent-workers".into());
        }
        v
    }
}

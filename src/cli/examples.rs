//! The examples at the foot of each command's `--help` (clap's `after_help`): two or three
//! commands a user types, each as the journeys write it. `tests/it/help.rs` parses every one
//! with the real parser, so an example cannot drift from the flags. And the one help text
//! built at run time: the model list of `--model`.

/// The long help of a `--model` flag: `what`, then the one preset list `simulate ddp`, `fsdp`
/// and `memory` share, with what each name is for.
pub fn model_help(what: &str) -> String {
    let names = crate::analysis::models::preset_names();
    let shapes = crate::analysis::memory::presets::preset_names();
    let inventories: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !shapes.contains(n))
        .collect();
    format!(
        "{what}\n\nPresets (ddp, fsdp and memory): {}.\nWithout a transformer shape (ddp and fsdp only): {}.",
        shapes.join(", "),
        inventories.join(", ")
    )
}

/// `ncclprobe sweep`.
pub const SWEEP: &str = "\
Examples:
  # all_reduce from 8 B to 256 MiB on this machine's GPUs (or host memory without one)
  ncclprobe sweep
  # nccl-tests flags, a JSON record and a report with its verdict
  ncclprobe sweep -b 8 -e 8G -f 2 -g 8 --json run.json --report run.html
  # a node's gate for CI: exit 3 and a JUnit case per rule when it fails
  ncclprobe sweep --qualify h100-sxm-nvswitch-8 --retries 2 --junit node.xml --report node.html";

/// `ncclprobe matrix`.
pub const MATRIX: &str = "\
Examples:
  # every pair of ranks on this machine, slow pairs named
  ncclprobe matrix
  # every pair of nodes under srun, gated, one JUnit case per slow pair and node
  ncclprobe matrix --by node --junit pairs.xml --json pairs.json";

/// `ncclprobe topo`.
pub const TOPO: &str = "\
Examples:
  # this machine's GPU/NIC links (NVML and sysfs)
  ncclprobe topo
  # a pasted `nvidia-smi topo -m`
  ncclprobe topo --from topo.txt";

/// `ncclprobe diagnose`.
pub const DIAGNOSE: &str = "\
Examples:
  # this machine
  ncclprobe diagnose
  # what a user pasted: nvidia-smi, an NCCL_DEBUG=INFO log, nccl-tests output
  ncclprobe diagnose --from smi.txt --from nccl.log
  # fail a CI step on an error-severity finding
  ncclprobe diagnose --fail-on error
  # one line of a log: the source that prints it, its cause and fix
  ncclprobe diagnose --explain 'NCCL WARN Bootstrap : no socket interface found'";

/// `ncclprobe trace`.
pub const TRACE: &str = "\
Examples:
  # one rank's torch.profiler trace: where each step went, the data loader, the collectives
  ncclprobe trace worker0.pt.trace.json.gz
  # every rank's trace, the collectives held against this machine's sweep
  ncclprobe trace traces/ --curve sweep.json
  # Flight Recorder dumps of a hung job: the collective and the ranks it stopped at
  ncclprobe trace /tmp/nccl_trace_rank_*";

/// `ncclprobe import`.
pub const IMPORT: &str = "\
Examples:
  # nccl-tests output as posted, into a run record
  ncclprobe import all_reduce.log --json run.json
  # its CSV on stdout, in the sweep's contract
  ncclprobe import all_reduce.log --format csv";

/// `ncclprobe simulate ddp`.
pub const DDP: &str = "\
Examples:
  # bucket caps and accumulation on a measured curve
  ncclprobe simulate ddp --model bert-base --world-size 2 --compute-ms 204 --curve run.json
  # a starved input pipeline: which num_workers hides loading
  ncclprobe simulate ddp --model bert-base --world-size 3 --batch-size 16 --accumulation 8,2 --compute-ms 300 --num-workers 0,4,8 --data-ms 120 --cpu-cores 20 --pin-memory
  # the job's own profiler trace: its step rebuilt, then bucket sizes, accumulation, a faster link
  ncclprobe simulate ddp --from-trace traces/ --curve run.json";

/// `ncclprobe simulate fsdp`.
pub const FSDP: &str = "\
Examples:
  # every sharding strategy for a 7B model over 400 GB/s links
  ncclprobe simulate fsdp --model llama2-7b --world-size 8 --compute-ms 900 --busbw 400 --gpu-memory-gb 80";

/// `ncclprobe simulate memory`.
pub const MEMORY: &str = "\
Examples:
  # will it fit: a Hugging Face config, ZeRO-3 with CPU offload, one 24 GB GPU
  ncclprobe simulate memory --model config.json --strategy zero3 --offload optimizer,params --seq-len 1024 --micro-batch 1 --gpu-memory-gb 24
  # the setup that ran out of memory, held against PyTorch's own message
  ncclprobe simulate memory --model gemma-2b --oom oom.txt";

/// `ncclprobe compare`.
pub const COMPARE: &str = "\
Examples:
  # a run against what its topology should give
  ncclprobe compare run.json --topo topo.txt
  # before and after an upgrade, for a ticket
  ncclprobe compare before.json after.json --format markdown";

/// `ncclprobe qualify`.
pub const QUALIFY: &str = "\
Examples:
  # a run against a shipped profile, JUnit for CI
  ncclprobe qualify run.json --profile h100-sxm-nvswitch-8 --junit node.xml
  # rules of your own
  ncclprobe qualify run.json --min-busbw 350 --at-size 1G --max-latency-us 30";

/// `ncclprobe baselines`.
pub const BASELINES: &str = "\
Examples:
  ncclprobe baselines
  ncclprobe baselines --format markdown";

/// `ncclprobe messages`.
pub const MESSAGES: &str = "\
Examples:
  # every message whose format mentions completions from a peer, with its class
  ncclprobe messages --grep 'Got completion from peer'
  # what NCCL 2.21.5 can warn about the IB transport
  ncclprobe messages --version 2.21.5 --level WARN --class nccl.net-ib
  # formats per release against the catalogue's entries
  ncclprobe messages --coverage";

/// `ncclprobe report`.
pub const REPORT: &str = "\
Examples:
  # one page for a ticket: runs overlaid, each with its verdict
  ncclprobe report before.json after.json -o report.html
  # the Markdown summary on stdout
  ncclprobe report run.json";

/// `ncclprobe doctor`.
pub const DOCTOR: &str = "\
Examples:
  # this machine end to end, the report in ncclprobe-report/
  ncclprobe doctor
  # and what DDP would do on the measured curve
  ncclprobe doctor --model bert-base --batch-size 128 --compute-ms 204 -o report/";

/// `ncclprobe bundle`.
pub const BUNDLE: &str = "\
Examples:
  # what NCCL's issue template asks for, host names and addresses replaced
  ncclprobe bundle -o nccl-issue --redact";

/// `ncclprobe history add`.
pub const HISTORY_ADD: &str = "\
Examples:
  ncclprobe history add run.json pairs.json --history fleet.sqlite
  ncclprobe history add all_reduce.log --history fleet.sqlite --node-name gpu-17";

/// `ncclprobe history check`.
pub const HISTORY_CHECK: &str = "\
Examples:
  ncclprobe history check --history fleet.sqlite";

/// `ncclprobe fleet`.
pub const FLEET: &str = "\
Examples:
  # the drain list of the last week (exit 3 when it is not empty)
  ncclprobe fleet --history fleet.sqlite --since 7d
  # for a ticket, and a page with the heat map and trends
  ncclprobe fleet --history fleet.sqlite --since 7d --format markdown --html fleet.html";

/// `ncclprobe aliases`.
pub const ALIASES: &str = "\
Examples:
  # all_reduce_perf and the other nccl-tests names, linked in ./bin
  ncclprobe aliases bin
  ./bin/all_reduce_perf -b 8 -e 1G -f 2 -g 8";

/// `ncclprobe completions`.
pub const COMPLETIONS: &str = "\
Examples:
  ncclprobe completions bash
  ncclprobe completions zsh";

/// `ncclprobe man`.
pub const MAN: &str = "\
Examples:
  ncclprobe man
  ncclprobe man sweep";

/// Every command path with its examples (for the test that parses them).
pub const ALL: &[(&str, &str)] = &[
    ("sweep", SWEEP),
    ("matrix", MATRIX),
    ("topo", TOPO),
    ("diagnose", DIAGNOSE),
    ("trace", TRACE),
    ("import", IMPORT),
    ("simulate ddp", DDP),
    ("simulate fsdp", FSDP),
    ("simulate memory", MEMORY),
    ("compare", COMPARE),
    ("qualify", QUALIFY),
    ("baselines", BASELINES),
    ("messages", MESSAGES),
    ("report", REPORT),
    ("doctor", DOCTOR),
    ("bundle", BUNDLE),
    ("history add", HISTORY_ADD),
    ("history check", HISTORY_CHECK),
    ("fleet", FLEET),
    ("aliases", ALIASES),
    ("completions", COMPLETIONS),
    ("man", MAN),
];

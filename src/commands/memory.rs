//! `ncclprobe simulate memory`: the model's shape, the setup and the capacities (flags, NVML,
//! /proc/meminfo) turned into the planner's options in one place; the plan printed as a table,
//! Markdown or JSON.

use crate::analysis::memory::{
    self, observed, overheads, presets, shape::Shape, Checkpointing, Logits, Offload, Optimizer,
    Quantization, Setup, Strategy, TrainPrecision, Trainable,
};
use crate::cli::{
    CheckpointArg, LinkArgs, LogitsArg, MemoryArgs, OffloadArg, OptimizerArg, OutputFormat,
    QuantizeArg,
};
use crate::coll::Collective;
use crate::exit::{ExitCode, Failure};
use crate::flags::{count_in, non_negative, positive};
use crate::import::input::input_failure;
use crate::import::text::Input;
use crate::render;
use std::io::Read;

const GIB: f64 = (1u64 << 30) as f64;

/// The most a config.json may weigh: published ones are a few KiB.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// A config.json read as every input is (a directory, empty or binary input refused, exit 2),
/// and no more than `MAX_CONFIG_BYTES` of it, so `/dev/zero` or a wrong file cannot hang.
fn read_config(path: &std::path::Path) -> Result<String, Failure> {
    let expected = "a Hugging Face config.json";
    let refuse = |why: String| Failure::usage(format!("--model-config {}: {why}", path.display()));
    let input = if path.as_os_str() == "-" {
        Input::open(path).map_err(input_failure)?
    } else {
        let file = std::fs::File::open(path).map_err(|e| refuse(e.to_string()))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(refuse("is a directory; give the config.json in it".into()));
        }
        Input::from_reader(
            &path.display().to_string(),
            Box::new(file.take(MAX_CONFIG_BYTES + 1)),
        )
        .map_err(input_failure)?
    };
    let bytes = input
        .bytes(expected)
        .map_err(|e| Failure::usage(format!("--model-config {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(refuse(format!(
            "larger than {} MiB; expected {expected}",
            MAX_CONFIG_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| refuse(format!("is not UTF-8 text; expected {expected}")))
}

/// `--model` names a file rather than a preset: it ends in .json or is a file here.
fn model_file(args: &MemoryArgs) -> Option<std::path::PathBuf> {
    let name = args.model.as_deref()?;
    let path = std::path::Path::new(name);
    (name.ends_with(".json") || path.is_file()).then(|| path.to_path_buf())
}

fn shape(args: &MemoryArgs) -> Result<(Shape, Vec<String>), Failure> {
    if let Some(path) = args.model_config.clone().or_else(|| model_file(args)) {
        let path = &path;
        let text = read_config(path)?;
        let name = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config".into());
        let (mut shape, notes) = presets::from_hf_config(&name, &text)
            .map_err(|e| Failure::usage(format!("--model-config {}: {e}", path.display())))?;
        shape.source = format!("the Hugging Face config {}", path.display());
        return Ok((shape, notes));
    }
    if let Some(name) = &args.model {
        let shape = presets::preset(name).map_err(|e| Failure::usage(format!("--model: {e}")))?;
        return Ok((shape, Vec::new()));
    }
    let bounded = |n: u64, what: &str, flag: &str| {
        let most = presets::SIZE_BOUNDS
            .iter()
            .find(|b| b.0 == what)
            .map_or(u64::MAX, |b| b.1);
        count_in(flag, n.min(usize::MAX as u64) as usize, 1, most as usize).map(|n| n as u64)
    };
    let need = |v: Option<u64>, what: &str, flag: &str| {
        let n = v
            .filter(|&n| n > 0)
            .ok_or_else(|| Failure::usage(format!("{flag}: give a positive count")))?;
        bounded(n, what, flag)
    };
    let (layers, hidden) = (
        need(args.layers, "layers", "--layers")?,
        need(args.hidden, "hidden", "--hidden")?,
    );
    let heads = need(args.heads, "heads", "--heads")?;
    if hidden % heads != 0 {
        return Err(Failure::usage("--heads: must divide --hidden"));
    }
    let vocab = need(args.vocab, "vocab", "--vocab")?;
    let ffn = match args.ffn.filter(|&f| f > 0) {
        Some(f) => bounded(f, "ffn", "--ffn")?,
        None => 4 * hidden,
    };
    let mut shape = Shape::decoder("flags", layers, hidden, heads, ffn, vocab);
    if let Some(kv) = args.kv_heads.filter(|&k| k > 0) {
        if heads % kv != 0 {
            return Err(Failure::usage("--kv-heads: must divide --heads"));
        }
        shape.kv_heads = kv;
    }
    Ok((
        shape,
        vec!["shape from flags: a Llama-style decoder (RMSNorm, gated MLP, untied head)".into()],
    ))
}

fn trainable(args: &MemoryArgs, shape: &Shape) -> Result<Trainable, Failure> {
    let linears = shape.linears();
    let has: Vec<&str> = memory::shape::LORA_MODULES
        .iter()
        .copied()
        .filter(|m| linears.iter().any(|l| l.0 == *m))
        .collect();
    if let Some(rank) = args.lora_rank {
        count_in(
            "--lora-rank",
            rank.min(usize::MAX as u64) as usize,
            1,
            1 << 16,
        )?;
        let text = args.lora_modules.trim();
        let modules: Vec<String> = if text.eq_ignore_ascii_case("all") {
            has.iter().map(|m| m.to_string()).collect()
        } else {
            crate::flags::parse_list(
                "--lora-modules",
                text,
                |m| {
                    memory::shape::LORA_MODULES
                        .contains(&m)
                        .then(|| m.to_string())
                },
                "q, k, v, o, gate, up, down, all",
            )?
        };
        if let Some(missing) = modules.iter().find(|m| !has.contains(&m.as_str())) {
            return Err(Failure::usage(format!(
                "--lora-modules: {} has no `{missing}` projection; its linears: {}",
                shape.name,
                has.join(", ")
            )));
        }
        let narrowest = linears
            .iter()
            .filter(|l| modules.iter().any(|m| m == l.0))
            .map(|l| l.1.min(l.2))
            .min()
            .unwrap_or(u64::MAX);
        if rank > narrowest {
            return Err(Failure::usage(format!(
                "--lora-rank: {rank} is above {narrowest}, the narrowest adapted linear's width (a rank beyond it adds parameters and no capacity)"
            )));
        }
        return Ok(Trainable::Lora { rank, modules });
    }
    if let Some(p) = args.trainable_params {
        let params = non_negative("--trainable-params", p, "parameters")?;
        let total = shape.params();
        if params > total as f64 {
            return Err(Failure::usage(format!(
                "--trainable-params: {params} is more than the model's {total} parameters"
            )));
        }
        return Ok(Trainable::Params {
            params: params as u64,
        });
    }
    Ok(Trainable::Full)
}

fn offload(o: OffloadArg) -> Offload {
    match o {
        OffloadArg::None => Offload::None,
        OffloadArg::Cpu => Offload::Cpu,
        OffloadArg::Nvme => Offload::Nvme,
    }
}

fn strategy(name: &str) -> Strategy {
    match name {
        "zero1" => Strategy::Zero1,
        "shard-grad-op" | "zero2" => Strategy::ShardGradOp,
        "full-shard" | "zero3" | "fsdp" => Strategy::FullShard,
        _ => Strategy::NoShard,
    }
}

/// The GPU's capacity: the flag, else the out-of-memory error's, else NVML's total for GPU 0.
fn gpu_capacity(
    args: &MemoryArgs,
    oom: Option<&observed::Oom>,
    notes: &mut Vec<String>,
) -> Result<Option<(f64, String)>, Failure> {
    let flagged = args
        .gpu_memory_gb
        .map(|gb| gb * 1e9)
        .or(args.gpu_memory_gib.map(|gib| gib * GIB));
    if let (Some(flag), Some(total)) = (flagged, oom.and_then(|o| o.capacity_bytes)) {
        if (flag - total).abs() > 0.01 * total {
            notes.push(format!(
                "the GPU's capacity is the flag's {:.2} GiB, not the {:.2} GiB of the GPU that ran out of memory: the plan asks whether the failed job fits that GPU",
                flag / GIB,
                total / GIB
            ));
        }
    }
    if let Some(gb) = args.gpu_memory_gb {
        return Ok(Some((
            crate::flags::positive_at_most(
                "--gpu-memory-gb",
                gb,
                "GB",
                crate::flags::MOST_GPU_MEMORY_GB,
            )? * 1e9,
            "--gpu-memory-gb".into(),
        )));
    }
    if let Some(gib) = args.gpu_memory_gib {
        return Ok(Some((
            crate::flags::positive_at_most(
                "--gpu-memory-gib",
                gib,
                "GiB",
                crate::flags::MOST_GPU_MEMORY_GB * 1e9 / GIB,
            )? * GIB,
            "--gpu-memory-gib".into(),
        )));
    }
    if let Some((total, oom)) = oom.and_then(|o| o.capacity_bytes.map(|t| (t, o))) {
        return Ok(Some((
            total,
            format!(
                "--oom: GPU {}'s total capacity ({})",
                oom.gpu.map_or("?".into(), |g| g.to_string()),
                oom.source
            ),
        )));
    }
    match crate::live::gpu_memory() {
        Ok((bytes, name)) => Ok(Some((bytes as f64, format!("NVML: GPU 0 ({name})")))),
        Err(e) => {
            notes.push(format!(
                "GPU capacity unknown (NVML: {e}): give --gpu-memory-gb to say whether it fits"
            ));
            Ok(None)
        }
    }
}

/// One node's host RAM: the flag, else MemAvailable from /proc/meminfo.
fn host_capacity(args: &MemoryArgs) -> Result<Option<(f64, String)>, Failure> {
    if let Some(gb) = args.host_memory_gb {
        return Ok(Some((
            positive("--host-memory-gb", gb, "GB")? * 1e9,
            "--host-memory-gb".into(),
        )));
    }
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        });
    Ok(available_kib.map(|kib| {
        (
            kib * 1024.0,
            "/proc/meminfo MemAvailable (this machine)".into(),
        )
    }))
}

/// The sequence the plan counts: the flag, else 2048 or the model's max_position_embeddings
/// when shorter. Beyond that maximum a model with learned positions has no embedding to
/// look up (refused); a rotary one runs, untrained there (said).
fn seq_len(flag: Option<u64>, shape: &Shape, notes: &mut Vec<String>) -> Result<u64, Failure> {
    const DEFAULT: u64 = 2048;
    let Some(n) = flag else {
        let n = shape.max_positions.map_or(DEFAULT, |m| m.min(DEFAULT));
        if n < DEFAULT {
            notes.push(format!(
                "--seq-len not given: {n}, {}'s max_position_embeddings",
                shape.name
            ));
        }
        return Ok(n);
    };
    let n = count_in("--seq-len", n.min(usize::MAX as u64) as usize, 1, 1 << 24)? as u64;
    match shape.max_positions {
        Some(most) if n > most && shape.learned_positions > 0 => Err(Failure::usage(format!(
            "--seq-len: {} has learned position embeddings for {most} positions; it cannot take {n} tokens",
            shape.name
        ))),
        Some(most) if n > most => {
            notes.push(format!(
                "--seq-len {n} is beyond {}'s max_position_embeddings {most}: it was not trained on that length (RoPE scaling needed); the memory is counted as given",
                shape.name
            ));
            Ok(n)
        }
        _ => Ok(n),
    }
}

/// The out-of-memory error `--oom` names: the first in the file, its sentences read across
/// the lines a paste wrapped them onto.
fn read_oom(path: &std::path::Path) -> Result<(observed::Oom, Vec<String>), Failure> {
    let refuse = |e: crate::import::text::InputError| Failure::usage(format!("--oom {e}"));
    let input = Input::open(path).map_err(refuse)?;
    let name = input.name.clone();
    let (_, pasted) = crate::import::pastes::with_log(input).map_err(refuse)?;
    let Some(first) = pasted.first_oom() else {
        return Err(Failure::usage(format!(
            "--oom {name}: holds no PyTorch CUDA out-of-memory error (\"CUDA out of memory. Tried to allocate ...\")"
        )));
    };
    let mut notes = Vec::new();
    if pasted.oom_count() > 1 {
        notes.push(format!(
            "--oom: {} out-of-memory errors in {name}; the plan is held against the first (line {})",
            pasted.oom_count(),
            first.evidence.line
        ));
    }
    if let Some(line) = pasted.lines.first_cut {
        let more = match pasted.lines.cut {
            1 => String::new(),
            n => format!(" (and {} more lines)", n - 1),
        };
        notes.push(format!(
            "--oom: line {line} of {name} is longer than {} MiB{more}: only its first MiB was read",
            crate::bounded::MAX_LINE_BYTES >> 20
        ));
    }
    Ok((
        observed::Oom {
            source: format!("{}:{}", first.evidence.file, first.evidence.line),
            gpu: first.gpu,
            requested_bytes: first.tried_bytes,
            // A capacity of 0 is no reading: the GPU's is then unknown, or a flag's.
            capacity_bytes: first.total_bytes.filter(|t| *t != 0.0),
            free_bytes: first.free_bytes,
            process_in_use_bytes: first.process_in_use_bytes,
            listed_processes_bytes: first.listed_processes_bytes.clone(),
            reserved_unallocated_bytes: first.reserved_unallocated_bytes,
            reserved_total_bytes: first.reserved_total_bytes,
            allocated_bytes: first.allocated_bytes,
        },
        notes,
    ))
}

/// The planner's options from the flags.
fn setup(
    args: &MemoryArgs,
    oom: Option<&observed::Oom>,
    notes: &mut Vec<String>,
) -> Result<Setup, Failure> {
    let (shape, shape_notes) = shape(args)?;
    notes.extend(shape_notes);
    let world_size = count_in("--world-size", args.world_size, 1, 1 << 20)?;
    let gpus_per_node = count_in(
        "--gpus-per-node",
        args.gpus_per_node.unwrap_or(world_size.min(8)),
        1,
        world_size,
    )?;
    let expandable_segments = args.expandable_segments
        || std::env::var("PYTORCH_CUDA_ALLOC_CONF")
            .is_ok_and(|v| v.replace(' ', "").contains("expandable_segments:True"));
    let trainable = trainable(args, &shape)?;
    let frozen_params = match args.frozen_params {
        Some(p) => {
            let p = non_negative("--frozen-params", p, "parameters")?;
            if p > 1e13 {
                return Err(Failure::usage(format!(
                    "--frozen-params: {p} parameters is beyond any model (at most 1e13)"
                )));
            }
            p as u64
        }
        None => 0,
    };
    let setup = Setup {
        seq_len: seq_len(args.seq_len, &shape, notes)?,
        shape,
        trainable,
        frozen_params,
        world_size,
        gpus_per_node,
        strategy: strategy(&args.strategy),
        offload_optimizer: offload(args.offloads().0),
        offload_params: offload(args.offloads().1),
        precision: match args.precision.as_str() {
            "fp32" => TrainPrecision::Fp32,
            "amp" => TrainPrecision::Amp,
            "pure-bf16" => TrainPrecision::PureBf16,
            _ => TrainPrecision::Mixed,
        },
        optimizer: match args.optimizer {
            OptimizerArg::Adamw => Optimizer::Adamw,
            OptimizerArg::AdamwFused => Optimizer::AdamwFused,
            OptimizerArg::Adamw8bit => Optimizer::Adamw8bit,
            OptimizerArg::Adafactor => Optimizer::Adafactor,
            OptimizerArg::Sgd => Optimizer::Sgd,
            OptimizerArg::SgdMomentum => Optimizer::SgdMomentum,
        },
        quantize: args.quantize.map(|q| match q {
            QuantizeArg::Nf4 => Quantization::Nf4,
            QuantizeArg::Int8 => Quantization::Int8,
        }),
        micro_batch: count_in("--micro-batch", args.micro_batch as usize, 1, 1 << 20)? as u64,
        checkpointing: match args.checkpointing {
            CheckpointArg::None => Checkpointing::None,
            CheckpointArg::Selective => Checkpointing::Selective,
            CheckpointArg::Full => Checkpointing::Full,
        },
        flash_attention: args.flash_attention,
        logits: match args.logits {
            LogitsArg::HfUpcast => Logits::HfUpcast,
            LogitsArg::Fp32 => Logits::Fp32,
            LogitsArg::Fused => Logits::Fused,
        },
        expandable_segments,
        // A CUDA context takes 300-1000 MiB; 64 GiB is no context at all.
        cuda_context_bytes: crate::flags::at_most(
            "--cuda-context-mb",
            non_negative("--cuda-context-mb", args.cuda_context_mb, "MiB")?,
            "MiB",
            65536.0,
        )? * 1024.0
            * 1024.0,
        fragmentation: args
            .fragmentation
            .map(|f| crate::flags::fraction("--fragmentation", f))
            .transpose()?,
        gpu_capacity: gpu_capacity(args, oom, notes)?,
        host_capacity: host_capacity(args)?,
        observed_terms: Vec::new(),
    };
    if let Some(why) = setup.invalid() {
        return Err(Failure::usage(why));
    }
    if setup.frozen_params > 0 {
        notes.push(format!(
            "{} frozen parameters beside the model's shape (--frozen-params): weights only, their activations not counted",
            setup.frozen_params
        ));
    }
    // What a measured peak holds beyond this accounting: a plan that fits by less than these
    // may still fail (seed 004: about 18 GiB here with MGM-2B's towers, 23.15 GiB at its OOM).
    notes.push(if oom.is_some() {
        "the model itself does not count activations of modules outside the decoder (vision \
         towers, adapters of a multimodal model), DeepSpeed's runtime buffers (ZeRO-3 prefetch \
         and modules kept gathered by stage3_max_reuse_distance) or memory PyTorch reserved but \
         left unallocated beyond the reserve above: at the error they are part of the \
         unexplained memory"
            .to_string()
    } else {
        "not counted: activations of modules outside the decoder (vision towers, adapters of \
         a multimodal model), DeepSpeed's runtime buffers (ZeRO-3 prefetch and modules kept \
         gathered by stage3_max_reuse_distance), other processes on the GPU, and memory \
         PyTorch reserved but left unallocated beyond the reserve above (--oom holds the plan \
         against a real failure)"
            .to_string()
    });
    if args.cuda_context_mb == 512.0 {
        notes.push(format!(
            "CUDA context taken as {} MiB (--cuda-context-mb)",
            overheads::CUDA_CONTEXT_BYTES / 1024.0 / 1024.0
        ));
    }
    Ok(setup)
}

pub fn run(args: &MemoryArgs) -> Result<ExitCode, Failure> {
    let mut notes = Vec::new();
    let oom = args.oom.as_deref().map(read_oom).transpose()?;
    if let Some((_, oom_notes)) = &oom {
        notes.extend(oom_notes.iter().cloned());
    }
    let oom = oom.map(|(o, _)| o);
    let mut setup = setup(args, oom.as_ref(), &mut notes)?;
    let observed = match &oom {
        Some(oom) => {
            let (observed, terms, oom_notes) = observed::calibrate(&setup, oom)
                .map_err(|e| Failure::usage(format!("--oom {e}")))?;
            setup.observed_terms = terms;
            notes.extend(oom_notes);
            Some(observed)
        }
        None => None,
    };
    let link = &args.link;
    let (curve, link_text) = if link.curve.is_some() || link.busbw.is_some() {
        let link = LinkArgs {
            curve: link.curve.clone(),
            busbw: link.busbw,
            latency_us: link.latency_us,
            allow_partial: link.allow_partial,
        };
        let needs = super::simulate::Needs {
            wanted: &[
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::AllReduce,
            ],
            world_size: setup.world_size,
            largest_message_bytes: None,
            link_optional: false,
        };
        let (curve, link_notes) = super::simulate::load_link(&link, &needs)?;
        let text = super::simulate::describe(&curve, &link_notes);
        (Some(curve), Some(text))
    } else {
        (None, None)
    };
    let mut doc = memory::plan(&setup, curve.as_ref(), link_text, notes, observed);
    if args.max_batch {
        let found = memory::max_batch::largest(&setup).ok_or_else(|| {
            Failure::usage("--max-batch needs the GPU's memory: NVML could not tell it; give --gpu-memory-gb or --gpu-memory-gib")
        })?;
        doc.notes.insert(0, memory::max_batch::sentence(&found));
        doc.max_micro_batch = Some(found);
    }
    let text = match args.format {
        OutputFormat::Json => render::to_json(&doc)? + "\n",
        OutputFormat::Csv => render::memory::csv(&doc),
        OutputFormat::Table => render::memory::table(&doc),
    };
    crate::out!("{text}");
    // A setup that does not fit is a failed check, so a script can gate on the plan.
    if doc.gpu.fits() == Some(false) || doc.host.fits() == Some(false) {
        return Ok(ExitCode::CheckFailed);
    }
    Ok(ExitCode::Ok)
}

use super::*;

/// DeepSpeed prints GB as bytes / 2^30 with two decimals.
fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 30) as f64)
}

#[test]
fn deepspeed_zero2_figures_of_its_memory_docs() {
    // memory.rst, estimate_zero2_model_states_mem_needs_all_cold(total_params=2851e6,
    // num_gpus_per_node=8, num_nodes=1): 127.45GB | 5.31GB (offload) and 127.45GB | 15.93GB.
    let (cpu, gpu) = deepspeed_zero2(2851e6, 8, 1, true, 1.5);
    assert_eq!((gib(cpu), gib(gpu)), ("127.45".into(), "5.31".into()));
    let (cpu, gpu) = deepspeed_zero2(2851e6, 8, 1, false, 1.5);
    assert_eq!((gib(cpu), gib(gpu)), ("127.45".into(), "15.93".into()));
}

#[test]
fn deepspeed_zero3_figures_of_its_memory_docs() {
    // memory.rst, estimate_zero3_model_states_mem_needs_all_cold(total_params=2851e6,
    // largest_layer_params=32e6, num_gpus_per_node=8, num_nodes=1).
    let rows = [
        (true, true, true, "71.69", "0.12"),
        (true, true, false, "127.45", "0.12"),
        (true, false, true, "63.72", "0.78"),
        (true, false, false, "127.45", "0.78"),
        (false, false, true, "1.43", "6.09"),
        (false, false, false, "127.45", "6.09"),
    ];
    for (opt, params, init, want_cpu, want_gpu) in rows {
        let (cpu, gpu, _) = deepspeed_zero3(2851e6, 32e6, 8, 1, opt, params, init, 1.5);
        assert_eq!(
            (gib(cpu), gib(gpu)),
            (want_cpu.to_string(), want_gpu.to_string()),
            "offload_optimizer {opt}, offload_param {params}, zero_init {init}"
        );
    }
    // The worked t5-large example (737.67M params, 32.90M largest, 4 GPUs), in MiB (>> 20):
    // largest layer 125, case 1 3291, case 2 125, case 3 477.
    let (total, largest) = (737_668_096.0, 32_899_072.0);
    let mib = |(_, gpu, _): (u64, u64, u64)| gpu >> 20;
    assert_eq!(
        mib(deepspeed_zero3(
            total, largest, 4, 1, false, false, true, 1.5
        )),
        3291
    );
    assert_eq!(
        mib(deepspeed_zero3(total, largest, 4, 1, true, true, true, 1.5)),
        125
    );
    assert_eq!(
        mib(deepspeed_zero3(
            total, largest, 4, 1, true, false, true, 1.5
        )),
        477
    );
}

fn states(offload_optimizer: Offload, offload_params: Offload) -> States {
    States {
        strategy: Strategy::FullShard,
        world_size: 8,
        gpus_per_node: 8,
        offload_optimizer,
        offload_params,
        precision: TrainPrecision::Mixed,
        params: 2851e6,
        trainable: 2851e6,
        largest_module: 32e6,
        largest_trains: true,
        optimizer: Optimizer::Adamw,
        quantized: 0.0,
        quant_bytes: 0.0,
    }
}

/// The planner's (CPU per node, GPU) in DeepSpeed's printed GiB.
fn planned(s: &States) -> (String, String) {
    (gib(s.host_total() as u64), gib(s.gpu_total() as u64))
}

#[test]
fn the_planners_zero3_states_are_deepspeeds_documented_figures() {
    // memory.rst's zero_init = 1 rows (2851M parameters, 32M largest layer, 8 GPUs, one
    // node), which is what Hugging Face's from_pretrained does under ZeRO-3.
    let rows = [
        (Offload::Cpu, Offload::Cpu, "71.69", "0.12"),
        (Offload::Cpu, Offload::None, "63.72", "0.78"),
        (Offload::None, Offload::None, "1.43", "6.09"),
    ];
    for (opt, params, want_cpu, want_gpu) in rows {
        assert_eq!(
            planned(&states(opt, params)),
            (want_cpu.to_string(), want_gpu.to_string()),
            "offload_optimizer {opt:?}, offload_param {params:?}"
        );
    }
}

#[test]
fn the_planners_zero2_states_are_deepspeeds_documented_figures() {
    // memory.rst, estimate_zero2_model_states_mem_needs_all_cold(2851e6, 8 GPUs, 1 node):
    // offload 127.45GB | 5.31GB; none 127.45GB | 15.93GB (4 + 16/8 bytes per parameter: the
    // 16-bit weights and gradients stay whole on every GPU).
    let zero2 = |opt| States {
        strategy: Strategy::ShardGradOp,
        ..states(opt, Offload::None)
    };
    assert_eq!(
        planned(&zero2(Offload::Cpu)),
        ("127.45".into(), "5.31".into())
    );
    assert_eq!(
        planned(&zero2(Offload::None)),
        ("127.45".into(), "15.93".into())
    );
    let b = zero2(Offload::None).bytes();
    assert_eq!(b.grads, (2.0 + 4.0 / 8.0) * 2851e6);
    assert_eq!(b.optimizer, 12.0 / 8.0 * 2851e6);
}

#[test]
fn no_offload_ddp_is_the_zero_papers_16_bytes_per_parameter() {
    // ZeRO §3 / Figure 1 (K = 12): 2 + 2 + 12 bytes; under ZeRO-3 DeepSpeed's 18 / N
    // (the fp32 gradient partition beside them).
    let s = states(Offload::None, Offload::None);
    let b = s.bytes();
    assert_eq!(b.weights + b.grads + b.optimizer, 18.0 * 2851e6 / 8.0);
    let ddp = States {
        strategy: Strategy::NoShard,
        ..s
    };
    assert_eq!(ddp.gpu_total(), 16.0 * 2851e6);
    assert!(States {
        strategy: Strategy::ShardGradOp,
        ..states(Offload::Cpu, Offload::Cpu)
    }
    .invalid()
    .is_some());
}

#[test]
fn optimizers_and_precisions_keep_the_states_their_sources_state() {
    use crate::documents::memory::Quantization;
    let w = |p: TrainPrecision, o: Optimizer| p.widths_with(o).optimizer;
    // Mixed precision: fp32 master weights (4) and Adam's fp32 moments (8); DeepSpeed's 12.
    assert_eq!(w(TrainPrecision::Mixed, Optimizer::Adamw), 12.0);
    // torchtune / bf16-true: the moments in bf16, no master copy.
    assert_eq!(w(TrainPrecision::PureBf16, Optimizer::Adamw), 4.0);
    // autocast: the fp32 weights are the master; the moments fp32.
    assert_eq!(w(TrainPrecision::Amp, Optimizer::Adamw), 8.0);
    // bitsandbytes: one byte per moment whatever the precision; Adafactor: nothing per
    // parameter; SGD with momentum: one buffer.
    assert_eq!(w(TrainPrecision::Fp32, Optimizer::Adamw8bit), 2.0);
    assert_eq!(w(TrainPrecision::Fp32, Optimizer::Adafactor), 0.0);
    assert_eq!(w(TrainPrecision::Fp32, Optimizer::SgdMomentum), 4.0);
    assert_eq!(w(TrainPrecision::Mixed, Optimizer::Sgd), 4.0);
    // Only autocast keeps 16-bit copies of the weights; its activations are 16-bit.
    assert_eq!(TrainPrecision::Amp.widths().cast_copy, 2.0);
    assert_eq!(TrainPrecision::Amp.widths().activation, 2.0);
    assert_eq!(TrainPrecision::Fp32.widths().activation, 4.0);
    // NF4 with double quantization: 4.127 bits per weight (QLoRA §3).
    assert!((Quantization::Nf4.bytes_per_weight() * 8.0 - 4.127).abs() < 1e-9);
}

#[test]
fn quantized_weights_count_at_their_width_and_the_rest_at_16_bits() {
    let mut s = states(Offload::None, Offload::None);
    s.strategy = Strategy::NoShard;
    s.world_size = 1;
    let full = s.bytes().weights;
    s.quantized = 2000e6;
    s.quant_bytes = 0.5;
    let q = s.bytes().weights;
    assert!((full - q - 2000e6 * 1.5).abs() < 1.0, "{full} {q}");
}

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
    }
}

#[test]
fn zero3_offload_matches_deepspeed_on_the_gpu_and_on_the_host_before_its_buffer_factor() {
    // Both offloaded: the GPU holds only the gathered largest layer; the host 18 bytes per
    // parameter over the node (DeepSpeed's zero_init figure without its 1.5 factor).
    let both = states(Offload::Cpu, Offload::Cpu);
    let (cpu, gpu, _) = deepspeed_zero3(2851e6, 32e6, 8, 1, true, true, true, 1.0);
    assert_eq!(both.gpu_total(), gpu as f64);
    assert!((both.host_total() - cpu as f64).abs() < 1.0);
    // Optimizer only: the 16-bit weight shard stays (case 3).
    let opt = states(Offload::Cpu, Offload::None);
    let (cpu, gpu, _) = deepspeed_zero3(2851e6, 32e6, 8, 1, true, false, true, 1.0);
    assert!((opt.gpu_total() - gpu as f64).abs() < 1.0);
    assert!((opt.host_total() - cpu as f64).abs() < 1.0);
}

#[test]
fn no_offload_is_the_zero_papers_16_bytes_per_parameter() {
    // ZeRO §3 / Figure 1 (K = 12): 2 + 2 + 12 bytes; sharded over N under ZeRO-3.
    let s = states(Offload::None, Offload::None);
    let b = s.bytes();
    assert_eq!(b.weights + b.grads + b.optimizer, 16.0 * 2851e6 / 8.0);
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

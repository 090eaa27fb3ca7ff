//! `ncclprobe simulate ddp|fsdp`: load the model and the link, run the simulator, print a table
//! for people or JSON for tools (and the report's heatmap).

use crate::analysis::curve::{self, Curve};
use crate::analysis::ddp::{self, Compute, Hook, Setup};
use crate::analysis::fsdp::{self, Precision, Strategy};
use crate::analysis::models::{self, Model};
use crate::cli::{ComputeArgs, DdpArgs, FsdpArgs, LinkArgs, OutputFormat};
use crate::coll::Collective;
use crate::exit::{ExitCode, Failure};
use crate::units::format_size;
use serde_json::json;

fn positive(flag: &str, v: f64) -> Result<f64, Failure> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be a positive number, got {v}"
        )))
    }
}

fn fraction(flag: &str, v: f64) -> Result<f64, Failure> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be a fraction between 0 and 1, got {v}"
        )))
    }
}

fn load_model(spec: &str) -> Result<Model, Failure> {
    models::load(spec).map_err(|e| Failure::usage(format!("--model: {e}")))
}

fn load_link(link: &LinkArgs) -> Result<Curve, Failure> {
    match (&link.curve, link.busbw) {
        (Some(path), _) => {
            // Prefer the all_reduce points; FSDP-only sweeps may hold only RS/AG.
            let mut last_err = None;
            for coll in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
            ] {
                match curve::load(path, coll) {
                    Ok(c) => return Ok(c),
                    Err(e) => last_err = Some(e),
                }
            }
            Err(Failure::usage(format!(
                "--curve: {}",
                last_err.map(|e| e.to_string()).unwrap_or_default()
            )))
        }
        (None, Some(busbw)) => Ok(Curve::AlphaBeta {
            latency_s: link.latency_us.max(0.0) * 1e-6,
            busbw_bytes_per_s: positive("--busbw", busbw)? * 1e9,
        }),
        (None, None) => Err(Failure::usage(
            "give the link: --curve FILE (a sweep's JSON or CSV) or --busbw GB/s",
        )),
    }
}

fn load_compute(c: &ComputeArgs) -> Result<Compute, Failure> {
    let opt_s = c.optimizer_ms.max(0.0) * 1e-3;
    match (c.compute_ms, c.forward_ms, c.backward_ms) {
        (_, Some(f), Some(b)) => Ok(Compute {
            forward_s: positive("--forward-ms", f)? * 1e-3,
            backward_s: positive("--backward-ms", b)? * 1e-3,
            optimizer_s: opt_s,
        }),
        (Some(ms), _, _) => {
            let step = positive("--compute-ms", ms)? * 1e-3;
            if opt_s >= step {
                return Err(Failure::usage(
                    "--optimizer-ms: must be less than --compute-ms",
                ));
            }
            Ok(Compute::from_step(step, opt_s))
        }
        _ => Err(Failure::usage(
            "give --compute-ms, or --forward-ms and --backward-ms",
        )),
    }
}

fn parse_list<T: std::str::FromStr>(
    flag: &str,
    text: &str,
    ok: impl Fn(&T) -> bool,
) -> Result<Vec<T>, Failure> {
    let values: Vec<T> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<T>()
                .ok()
                .filter(|v| ok(v))
                .ok_or_else(|| Failure::usage(format!("{flag}: '{s}' is not a valid value")))
        })
        .collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err(Failure::usage(format!("{flag}: empty list")));
    }
    Ok(values)
}

pub fn run_ddp(args: &DdpArgs) -> Result<ExitCode, Failure> {
    if args.world_size == 0 || args.batch_size == 0 {
        return Err(Failure::usage(
            "--world-size and --batch-size must be at least 1",
        ));
    }
    let mut model = load_model(&args.model)?;
    if let Some(d) = &args.grad_dtype {
        model = model.with_elem_bytes(if d == "fp32" { 4 } else { 2 });
    }
    let link = load_link(&args.link)?;
    let compute = load_compute(&args.compute)?;
    let caps = parse_list::<f64>("--bucket-cap-mb", &args.bucket_cap_mb, |v| {
        v.is_finite() && *v > 0.0
    })?;
    let accs = parse_list::<usize>("--accumulation", &args.accumulation, |v| {
        *v >= 1 && *v <= 4096
    })?;
    let hook = match args.hook.as_str() {
        "fp16" => Hook::Fp16,
        "bf16" => Hook::Bf16,
        _ => Hook::None,
    };
    let setup = Setup {
        model: &model,
        world_size: args.world_size,
        batch_size: args.batch_size,
        compute,
        curve: &link,
        first_bucket_bytes: (positive("--first-bucket-mb", args.first_bucket_mb)? * 1024.0 * 1024.0)
            as u64,
        gradient_as_bucket_view: args.gradient_as_bucket_view,
        hook,
        copy_bytes_per_s: 300e9,
        overlap_slowdown: fraction("--overlap-slowdown", args.overlap_slowdown)?,
    };
    let grid = setup.grid(&caps, &accs);
    let default_cap = if caps.contains(&25.0) { 25.0 } else { caps[0] };
    let advice = ddp::advice(&setup, &grid, default_cap);
    let shown: Vec<&ddp::Outcome> = grid
        .iter()
        .filter(|o| !args.no_sync || o.no_sync || o.accumulation == 1)
        .collect();
    let one_gpu_it = 1.0 / setup.one_gpu_step_s(1);
    let best = grid
        .iter()
        .max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));

    match args.format {
        OutputFormat::Json => {
            let value = json!({
                "model": {"name": model.name, "source": model.source, "params": model.num_params(),
                          "grad_bytes": model.grad_bytes(), "tensors": model.tensors.len()},
                "world_size": args.world_size,
                "batch_size": args.batch_size,
                "compute": compute,
                "link": link.describe(),
                "hook": hook,
                "gradient_as_bucket_view": args.gradient_as_bucket_view,
                "overlap_slowdown": setup.overlap_slowdown,
                "first_bucket_bytes": setup.first_bucket_bytes,
                "one_gpu": {"iters_per_s": one_gpu_it, "samples_per_s": one_gpu_it * args.batch_size as f64},
                "first_iteration_s": setup.first_iteration_s(),
                "configurations": shown,
                "best": best,
                "advice": advice,
            });
            println!("{}", crate::render::to_json(&value)?);
        }
        _ => {
            println!(
                "# model {}: {} parameters in {} tensors, {} of gradients ({})",
                model.name,
                model.num_params(),
                model.tensors.len(),
                format_size(model.grad_bytes()),
                model.source
            );
            println!("# link: {}", link.describe());
            if setup.overlap_slowdown > 0.0 {
                println!(
                    "# backward slows by {:.0}% of the communication time that overlaps it (--overlap-slowdown)",
                    setup.overlap_slowdown * 100.0
                );
            }
            println!(
                "# {} GPUs, batch {} per GPU; one GPU: {:.1} ms per step = {:.2} it/s (forward {:.1} ms, backward {:.1} ms, optimizer {:.1} ms)",
                args.world_size,
                args.batch_size,
                setup.one_gpu_step_s(1) * 1e3,
                one_gpu_it,
                compute.forward_s * 1e3,
                compute.backward_s * 1e3,
                compute.optimizer_s * 1e3
            );
            println!(
                "# first iteration (one bucket, no overlap): {:.1} ms",
                setup.first_iteration_s() * 1e3
            );
            println!(
                "{:>8} {:>6} {:>8} {:>8} {:>10} {:>11} {:>8} {:>10} {:>6}",
                "cap_MiB",
                "accum",
                "no_sync",
                "buckets",
                "step_ms",
                "exposed_ms",
                "it/s",
                "samples/s",
                "eff%"
            );
            for o in &shown {
                println!(
                    "{:>8} {:>6} {:>8} {:>8} {:>10.1} {:>11.1} {:>8.2} {:>10.1} {:>6.0}",
                    o.bucket_cap_mb,
                    o.accumulation,
                    if o.accumulation == 1 {
                        "-"
                    } else if o.no_sync {
                        "yes"
                    } else {
                        "no"
                    },
                    o.bucket_bytes.len(),
                    o.step_time_s * 1e3,
                    o.exposed_comm_s * 1e3,
                    o.iters_per_s,
                    o.samples_per_s,
                    o.scaling_efficiency * 100.0
                );
            }
            for line in &advice {
                println!("* {line}");
            }
        }
    }
    Ok(ExitCode::Ok)
}

pub fn run_fsdp(args: &FsdpArgs) -> Result<ExitCode, Failure> {
    if args.world_size == 0 {
        return Err(Failure::usage("--world-size must be at least 1"));
    }
    let model = load_model(&args.model)?;
    let link = load_link(&args.link)?;
    let compute = load_compute(&args.compute)?;
    let precision = if args.precision == "fp32" {
        Precision {
            param_bytes: 4.0,
            grad_bytes: 4.0,
            optimizer_bytes: 8.0,
        }
    } else {
        Precision {
            param_bytes: 2.0,
            grad_bytes: 2.0,
            optimizer_bytes: 12.0,
        }
    };
    let strategies = if args.strategy.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        args.strategy.clone()
    };
    let params = model.num_params() as f64;
    let estimates: Vec<fsdp::Estimate> = strategies
        .iter()
        .map(|&s| {
            fsdp::estimate(
                s,
                params,
                args.world_size,
                precision,
                args.activations_gb.max(0.0) * 1e9,
                &link,
                compute.forward_s,
                compute.backward_s,
                compute.optimizer_s,
            )
        })
        .collect();
    let fits = |e: &fsdp::Estimate| {
        args.gpu_memory_gb
            .map(|gb| e.total_bytes_per_gpu <= gb * 1e9)
    };
    match args.format {
        OutputFormat::Json => {
            let rows: Vec<_> = estimates
                .iter()
                .map(|e| json!({"estimate": e, "fits": fits(e)}))
                .collect();
            let value = json!({
                "model": {"name": model.name, "params": model.num_params(), "source": model.source},
                "world_size": args.world_size,
                "precision": precision,
                "link": link.describe(),
                "compute": compute,
                "strategies": rows,
            });
            println!("{}", crate::render::to_json(&value)?);
        }
        _ => {
            println!(
                "# model {}: {} parameters; {} GPUs; link: {}",
                model.name,
                model.num_params(),
                args.world_size,
                link.describe()
            );
            println!(
                "{:>24} {:>12} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
                "strategy",
                "bus_GB/gpu",
                "comm_ms",
                "exposed_ms",
                "step_ms",
                "wts_GB",
                "grads_GB",
                "optim_GB",
                "total_GB",
                "fits"
            );
            for e in &estimates {
                println!(
                    "{:>24} {:>12.2} {:>9.1} {:>11.1} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>5}",
                    e.strategy.name(),
                    e.bus_bytes_per_gpu / 1e9,
                    e.comm_s * 1e3,
                    e.exposed_comm_s * 1e3,
                    e.step_time_s * 1e3,
                    e.weights_bytes_per_gpu / 1e9,
                    e.grads_bytes_per_gpu / 1e9,
                    e.optimizer_bytes_per_gpu / 1e9,
                    e.total_bytes_per_gpu / 1e9,
                    match fits(e) {
                        Some(true) => "yes",
                        Some(false) => "NO",
                        None => "-",
                    }
                );
            }
            println!("* activations are an input (--activations-gb), not modelled; communication volumes per ZeRO §7: DDP and ZeRO-1/2 move 2Ψ, ZeRO-3/FULL_SHARD 3Ψ");
        }
    }
    Ok(ExitCode::Ok)
}

//! `ncclprobe simulate ddp|fsdp`: load the model and the link, run the simulator, hand the
//! typed document to the renderer (table for people, JSON or CSV for tools).

use crate::analysis::curve::{self, Curve};
use crate::analysis::ddp::{self, Compute, Hook, Setup};
use crate::analysis::fsdp::{self, Precision, Strategy};
use crate::analysis::models::{self, Model};
use crate::cli::{ComputeArgs, DdpArgs, FsdpArgs, LinkArgs, OutputFormat};
use crate::coll::Collective;
use crate::documents::{
    DdpSimulation, FsdpRow, FsdpSimulation, Kind, ModelSummary, OneGpu, Simulator, SCHEMA_VERSION,
};
use crate::exit::{ExitCode, Failure};
use crate::flags::{fraction, parse_list, positive};
use crate::render;

/// A simulation document as `--format` asks: JSON, CSV or the table.
fn print_document<T: serde::Serialize>(
    format: OutputFormat,
    doc: &T,
    csv: fn(&T) -> Result<String, csv::Error>,
    table: fn(&T) -> String,
) -> Result<(), Failure> {
    let text = match format {
        OutputFormat::Json => render::to_json(doc)? + "\n",
        OutputFormat::Csv => {
            csv(doc).map_err(|e| Failure::internal(format!("writing CSV: {e}")))?
        }
        OutputFormat::Table => table(doc),
    };
    print!("{text}");
    Ok(())
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
            busbw_bytes_per_s: positive("--busbw", busbw, "GB/s")? * 1e9,
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
            forward_s: positive("--forward-ms", f, "milliseconds")? * 1e-3,
            backward_s: positive("--backward-ms", b, "milliseconds")? * 1e-3,
            optimizer_s: opt_s,
        }),
        (Some(ms), _, _) => {
            let step = positive("--compute-ms", ms, "milliseconds")? * 1e-3;
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
    let caps = parse_list(
        "--bucket-cap-mb",
        &args.bucket_cap_mb,
        |s| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0),
        "positive sizes in MiB",
    )?;
    let accs = parse_list(
        "--accumulation",
        &args.accumulation,
        |s| s.parse::<usize>().ok().filter(|v| (1..=4096).contains(v)),
        "step counts from 1 to 4096",
    )?;
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
        first_bucket_bytes: (positive("--first-bucket-mb", args.first_bucket_mb, "MiB")?
            * 1024.0
            * 1024.0) as u64,
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

    let doc = DdpSimulation {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Simulation,
        simulator: Simulator::Ddp,
        tool: crate::buildinfo::tool_info(),
        model: ModelSummary::of(&model),
        world_size: args.world_size,
        batch_size: args.batch_size,
        compute,
        link: link.describe(),
        hook,
        gradient_as_bucket_view: args.gradient_as_bucket_view,
        overlap_slowdown: setup.overlap_slowdown,
        first_bucket_bytes: setup.first_bucket_bytes,
        one_gpu: OneGpu {
            iters_per_s: one_gpu_it,
            samples_per_s: one_gpu_it * args.batch_size as f64,
        },
        first_iteration_s: setup.first_iteration_s(),
        configurations: shown.into_iter().cloned().collect(),
        best: best.cloned(),
        advice,
    };
    print_document(
        args.format,
        &doc,
        render::simulate::ddp_csv,
        render::simulate::ddp_table,
    )?;
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
    let doc = FsdpSimulation {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Simulation,
        simulator: Simulator::Fsdp,
        tool: crate::buildinfo::tool_info(),
        model: ModelSummary::of(&model),
        world_size: args.world_size,
        precision,
        link: link.describe(),
        compute,
        strategies: estimates
            .into_iter()
            .map(|estimate| FsdpRow {
                fits: fits(&estimate),
                estimate,
            })
            .collect(),
    };
    print_document(
        args.format,
        &doc,
        render::simulate::fsdp_csv,
        render::simulate::fsdp_table,
    )?;
    Ok(ExitCode::Ok)
}

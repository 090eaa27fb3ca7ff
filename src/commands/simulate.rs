//! `ncclprobe simulate ddp|fsdp`: load the model and the link, run the simulator, hand the
//! typed document to the renderer (table for people, JSON or CSV for tools).

use crate::analysis::curve::{self, Curve};
use crate::analysis::ddp::{self, Compute, Hook, Setup};
use crate::analysis::fsdp::{self, Precision, Strategy};
use crate::analysis::models::{self, Model};
use crate::cli::{ComputeArgs, DdpArgs, FsdpArgs, LinkArgs, OutputFormat};
use crate::coll::Collective;
use crate::documents::{
    DdpSimulation, FsdpRow, FsdpSimulation, Kind, OneGpu, Simulator, SCHEMA_VERSION,
};
use crate::exit::{ExitCode, Failure};
use crate::flags::{count_in, fraction, non_negative, parse_list, positive};
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
    crate::out!("{text}");
    Ok(())
}

fn load_model(spec: &str) -> Result<Model, Failure> {
    models::load(spec).map_err(|e| Failure::usage(format!("--model: {e}")))
}

/// The most ranks a simulation takes (every count and byte product stays far from 64 bits).
const MAX_WORLD_SIZE: usize = 1 << 20;
/// The largest per-GPU micro-batch a simulation takes.
const MAX_BATCH_SIZE: usize = 1 << 24;

/// A measured curve smaller than this fraction of the largest message simulated never
/// reached the bandwidth the simulation extrapolates to.
const FAR_BELOW: u64 = 4096;

/// What the simulation needs of its link: the ranks it runs on and its largest message.
pub(crate) struct Needs<'a> {
    pub wanted: &'a [Collective],
    pub world_size: usize,
    pub largest_message_bytes: Option<u64>,
    /// Whether the question can be answered without the link (communication then left out).
    pub link_optional: bool,
}

/// The link: a measured curve of the first of `needs.wanted` the file holds (the others are
/// stand-ins, said so in the returned notes), or an alpha-beta model. A curve that is
/// incomplete or measured on another rank count is refused unless `--allow-partial`, which
/// says what was used (on stderr, and in the notes for the document's `link`).
pub(crate) fn load_link(link: &LinkArgs, needs: &Needs) -> Result<(Curve, Vec<String>), Failure> {
    let wanted = needs.wanted;
    match (&link.curve, link.busbw) {
        (Some(path), _) => {
            for (i, &coll) in wanted.iter().enumerate() {
                match curve::load_with_status(path, coll) {
                    Ok(loaded) => {
                        let mut notes = partial(path, &loaded, needs, link.allow_partial)?;
                        if let Some(b) = loaded
                            .backend
                            .as_deref()
                            .filter(|b| matches!(*b, "host" | "mpi"))
                        {
                            notes.push(format!(
                                "on the host-memory curve: {} was measured by the {b} backend (host memory, no GPU), so the times say what this simulation would do over host memory, not over the GPUs' link",
                                path.display()
                            ));
                        }
                        if i > 0 {
                            notes.push(format!(
                                "{coll} curve used as a stand-in for {} (same bus bandwidth assumed)",
                                wanted[0]
                            ));
                        }
                        return Ok((loaded.curve, notes));
                    }
                    Err(curve::CurveError::Bad { reason, .. })
                        if reason.starts_with("no out-of-place") => {}
                    Err(e) => return Err(Failure::usage(format!("--curve: {e}"))),
                }
            }
            let names: Vec<&str> = wanted.iter().map(|c| c.name()).collect();
            Err(Failure::usage(format!(
                "--curve: {}: no out-of-place {} points in the file",
                path.display(),
                names.join(" or ")
            )))
        }
        (None, Some(busbw)) => Ok((
            Curve::AlphaBeta {
                latency_s: non_negative("--latency-us", link.latency_us, "microseconds")? * 1e-6,
                busbw_bytes_per_s: positive("--busbw", busbw, "GB/s")? * 1e9,
            },
            Vec::new(),
        )),
        // The input pipeline's questions (is it data-bound, which num_workers) do not need
        // the link: communication is left out, and the document says so.
        (None, None) if needs.link_optional => Ok((
            Curve::AlphaBeta {
                latency_s: 0.0,
                busbw_bytes_per_s: f64::INFINITY,
            },
            Vec::new(),
        )),
        (None, None) => Err(Failure::usage(
            "give the link: --curve FILE (a sweep's JSON or CSV) or --busbw GB/s",
        )),
    }
}

/// What makes a curve partial (its run did not complete, it stops far below the messages
/// simulated, it was measured on other ranks): refused, or with `allow` said on stderr and
/// returned for the document.
fn partial(
    path: &std::path::Path,
    loaded: &curve::Loaded,
    needs: &Needs,
    allow: bool,
) -> Result<Vec<String>, Failure> {
    let largest = loaded.curve.largest_bytes().unwrap_or(0);
    let size = crate::units::format_size;
    let mut problems = Vec::new();
    if let Some(status) = loaded
        .status
        .filter(|s| *s != crate::model::RunStatus::Complete)
    {
        problems.push(format!(
            "its run is {} (measured up to {}), not complete",
            status.name(),
            size(largest)
        ));
    }
    if let Some(needed) = needs
        .largest_message_bytes
        .filter(|n| largest.saturating_mul(FAR_BELOW) < *n)
    {
        problems.push(format!(
            "it stops at {}, far below the largest message simulated ({}; past its last size the time is extrapolated at that size's bandwidth)",
            size(largest),
            size(needed)
        ));
    }
    if let Some(how) = loaded.curve.rescaling(needs.wanted[0], needs.world_size) {
        problems.push(format!("--world-size is {}: {how}", needs.world_size));
    }
    if problems.is_empty() {
        return Ok(problems);
    }
    if !allow {
        return Err(Failure::usage(format!(
            "--curve {}: {}; measure the curve again, or give --allow-partial to use it as it is",
            path.display(),
            problems.join("; ")
        )));
    }
    for p in &problems {
        eprintln!(
            "ncclprobe: --curve {}: used as allowed: {p}",
            path.display()
        );
    }
    Ok(problems
        .into_iter()
        .map(|p| format!("partial curve allowed: {p}"))
        .collect())
}

/// The link in words, with what was allowed or stood in.
pub(crate) fn describe(link: &Curve, notes: &[String]) -> String {
    std::iter::once(link.describe())
        .chain(notes.iter().cloned())
        .collect::<Vec<_>>()
        .join("; ")
}

fn load_compute(c: &ComputeArgs, optimizer: Option<(f64, f64)>) -> Result<Compute, Failure> {
    let mut opt_s = non_negative("--optimizer-ms", c.optimizer_ms, "milliseconds")? * 1e-3;
    if let (Some(gpu), 0.0, Some((params, bytes))) = (&c.gpu, c.optimizer_ms, optimizer) {
        let (bw, _) = crate::analysis::optimizer_step::bandwidth(gpu).ok_or_else(|| {
            Failure::usage(format!(
                "--gpu {gpu}: not a GPU whose memory bandwidth is known ({}); give --optimizer-ms",
                crate::analysis::optimizer_step::known().join(", ")
            ))
        })?;
        opt_s = crate::analysis::optimizer_step::step_s(params, bytes, bw);
    }
    match (c.compute_ms, c.forward_ms, c.backward_ms) {
        (_, Some(f), Some(b)) => Ok(Compute {
            forward_s: positive("--forward-ms", f, "milliseconds")? * 1e-3,
            backward_s: positive("--backward-ms", b, "milliseconds")? * 1e-3,
            optimizer_s: opt_s,
        }),
        (Some(ms), _, _) => {
            let step = positive("--compute-ms", ms, "milliseconds")? * 1e-3;
            if opt_s >= step {
                return Err(Failure::usage(format!(
                    "--optimizer-ms: must be less than --compute-ms (the optimizer step is {:.1} ms{})",
                    opt_s * 1e3,
                    if c.gpu.is_some() && c.optimizer_ms == 0.0 { ", estimated from --gpu" } else { "" }
                )));
            }
            Ok(Compute::from_step(step, opt_s))
        }
        _ => Err(Failure::usage(
            "give --compute-ms, or --forward-ms and --backward-ms",
        )),
    }
}

pub fn run_ddp(args: &DdpArgs) -> Result<ExitCode, Failure> {
    if let Some(path) = &args.from_trace {
        // mutual import with crate::commands::trace: `--from-trace` is the trace's what-if,
        // and the trace holds its collectives against the link this module loads.
        return super::trace::run_what_if(path, &args.link, args.format);
    }
    let workers = args.loader.num_workers_list().map_err(Failure::usage)?;
    if workers.len() > 1 {
        return ddp_per_worker_count(args, &workers);
    }
    let doc = ddp_document(args)?;
    print_document(
        args.format,
        &doc,
        render::simulate::ddp_csv,
        render::simulate::ddp_table,
    )?;
    Ok(ExitCode::Ok)
}

/// `simulate ddp --num-workers 0,4,8`: one simulation per worker count, each printed in
/// turn (JSON: one document a line), then the comparison a reader came for: which counts
/// leave the GPUs waiting for data, by how much, and the smallest that hides loading.
fn ddp_per_worker_count(args: &DdpArgs, workers: &[usize]) -> Result<ExitCode, Failure> {
    if args.format == OutputFormat::Csv {
        return Err(Failure::usage(
            "--format csv takes one --num-workers value (its rows have no worker column); give one, or use --format json (a document a line)",
        ));
    }
    let mut docs = Vec::new();
    for &n in workers {
        let mut one = args.clone();
        one.loader.num_workers = Some(n.to_string());
        let doc = ddp_document(&one)?;
        match args.format {
            OutputFormat::Json => crate::outln!(
                "{}",
                serde_json::to_string(&doc).map_err(|e| Failure::internal(format!("JSON: {e}")))?
            ),
            _ => crate::out!("# num_workers={n}\n{}\n", render::simulate::ddp_table(&doc)),
        }
        docs.push((n, doc));
    }
    if args.format != OutputFormat::Json {
        crate::out!("{}", worker_comparison(&docs));
    }
    Ok(ExitCode::Ok)
}

/// The lines that compare the worker counts, on the configuration trained with.
fn worker_comparison(docs: &[(usize, DdpSimulation)]) -> String {
    let mut out =
        String::from("# num_workers compared (at the bucket cap and accumulation trained with)\n");
    let mut best: Option<(usize, f64)> = None;
    for (n, doc) in docs {
        let Some(l) = &doc.loader else {
            out.push_str(&format!(
                "num_workers={n}: the loader was not modelled (give --data-ms)\n"
            ));
            continue;
        };
        let c = &l.current;
        // What loading adds to a step that did not wait for it.
        let without = c.step_time_s - c.data_wait_s;
        let adds = if without > 0.0 {
            c.data_wait_s / without
        } else {
            0.0
        };
        let state = match c.bound_by {
            crate::documents::simulation::Bound::Data => format!(
                "data-bound: loading adds {:.0}% to each step ({:.1} ms)",
                100.0 * adds,
                c.data_wait_s * 1e3
            ),
            _ if c.data_wait_s > 0.0 => format!(
                "loading adds {:.0}% to each step ({:.1} ms)",
                100.0 * adds,
                c.data_wait_s * 1e3
            ),
            _ => "loading hidden behind compute".to_string(),
        };
        out.push_str(&format!(
            "num_workers={n}: {:.0} samples/s, {state}\n",
            c.samples_per_s
        ));
        if best.is_none_or(|(_, s)| c.samples_per_s > s * 1.01) {
            best = Some((*n, c.samples_per_s));
        }
    }
    if let Some((n, s)) = best {
        out.push_str(&format!(
            "fastest of those given: num_workers={n} ({s:.0} samples/s); the smallest that hides loading is in each simulation's advice above\n"
        ));
    }
    out
}

/// The DDP simulation `simulate ddp` prints (also what `doctor` writes).
pub fn ddp_document(args: &DdpArgs) -> Result<DdpSimulation, Failure> {
    let (Some(spec), Some(world_size)) = (args.model.as_deref(), args.world_size) else {
        return Err(Failure::usage(
            "give --model and --world-size, or --from-trace PATH",
        ));
    };
    count_in("--world-size", world_size, 1, MAX_WORLD_SIZE)?;
    count_in("--batch-size", args.batch_size, 1, MAX_BATCH_SIZE)?;
    let mut model = load_model(spec)?;
    if let Some(d) = &args.grad_dtype {
        model = model.with_elem_bytes(if d == "fp32" { 4 } else { 2 });
    }
    let caps = parse_list(
        "--bucket-cap-mb",
        &args.bucket_cap_mb,
        |s| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0),
        "positive sizes in MiB",
    )?;
    // DDP all-reduces its buckets: nothing else stands in for that curve. Its largest bucket
    // is the largest cap, or all the gradients when they are fewer.
    let largest_cap_bytes = caps.iter().fold(0.0f64, |a, &c| a.max(c)) * 1024.0 * 1024.0;
    let needs = Needs {
        wanted: &[Collective::AllReduce],
        world_size,
        largest_message_bytes: Some((largest_cap_bytes as u64).min(model.grad_bytes())),
        link_optional: args.loader.data_ms.is_some() || args.loader.sample_ms.is_some(),
    };
    let (link, link_notes) = load_link(&args.link, &needs)?;
    // DDP keeps every state on every GPU, in the gradients' precision (torch.optim's foreach).
    let elem = model.tensors.first().map_or(4, |t| t.elem_bytes) as f64;
    let compute = load_compute(
        &args.compute,
        Some((
            model.num_params() as f64,
            crate::analysis::optimizer_step::adamw_bytes_per_param(elem, false),
        )),
    )?;
    let built = super::loader::build(
        &args.loader,
        world_size,
        args.batch_size,
        compute.forward_s + compute.backward_s,
        args.link.curve.as_deref(),
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
        world_size,
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
    let default_cap = if caps.contains(&25.0) { 25.0 } else { caps[0] };
    let mut fitted = None;
    let setup = match args.measured_step_ms {
        None => setup,
        Some(ms) => {
            let config = ddp::Config {
                bucket_cap_mb: default_cap,
                accumulation: accs[0],
                no_sync: true,
            };
            let measured = positive("--measured-step-ms", ms, "ms")? / 1e3;
            let sigma = setup
                .fit_overlap_slowdown(config, measured)
                .map_err(|why| Failure::usage(format!("--measured-step-ms: {why}")))?;
            fitted = Some(format!(
                "overlap slowdown {sigma:.2} fitted to the measured step of {ms:.1} ms (bucket_cap_mb={default_cap}, accumulation {}); the default is {}",
                accs[0],
                ddp::OVERLAP_SLOWDOWN
            ));
            Setup {
                overlap_slowdown: sigma,
                ..setup
            }
        }
    };
    let mut grid = setup.grid(&caps, &accs);
    let mut advice = ddp::advice(&setup, &grid, default_cap);
    advice.splice(0..0, fitted);
    // The loader's plan holds the accumulation listed first as the one trained with.
    let loader = built.map(|b| {
        crate::analysis::loader_plan::Plan {
            setup: &setup,
            loader: &b.loader,
            default_cap_mb: default_cap,
            accumulation: accs[0],
            compute_fixed_s: b.compute_fixed_s,
            compute_fixed_given: b.compute_fixed_given,
            batch_choices: &b.choices,
            sources: b.sources.clone(),
        }
        .apply(&mut grid)
    });
    let shown: Vec<&ddp::Outcome> = grid
        .iter()
        .filter(|o| !args.no_sync || o.no_sync || o.accumulation == 1)
        .collect();
    let one_gpu_it = 1.0 / setup.one_gpu_step_s(1);
    // With the loader modelled, the fastest whole step (loading included).
    let whole = |o: &ddp::Outcome| o.loader.map_or(o.samples_per_s, |l| l.samples_per_s);
    let best = grid.iter().max_by(|a, b| whole(a).total_cmp(&whole(b)));

    let doc = DdpSimulation {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Simulation,
        simulator: Simulator::Ddp,
        tool: crate::buildinfo::tool_info(),
        model: crate::analysis::models::summary(&model),
        world_size,
        batch_size: args.batch_size,
        compute,
        link: describe(&link, &link_notes),
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
        loader,
    };
    Ok(doc)
}

pub fn run_fsdp(args: &FsdpArgs) -> Result<ExitCode, Failure> {
    count_in("--world-size", args.world_size, 1, MAX_WORLD_SIZE)?;
    let activations_bytes = non_negative("--activations-gb", args.activations_gb, "GB")? * 1e9;
    let gpu_memory_gb = args
        .gpu_memory_gb
        .map(|gb| {
            crate::flags::positive_at_most(
                "--gpu-memory-gb",
                gb,
                "GB",
                crate::flags::MOST_GPU_MEMORY_GB,
            )
        })
        .transpose()?;
    let model = load_model(&args.model)?;
    // FSDP reduce-scatters gradients and all-gathers weights; an all_reduce curve can stand in.
    let wanted = [
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::AllReduce,
    ];
    // FSDP's messages are one layer's shards: the curve's reach is not judged against them.
    let needs = Needs {
        wanted: &wanted,
        world_size: args.world_size,
        largest_message_bytes: None,
        link_optional: false,
    };
    let (link, link_notes) = load_link(&args.link, &needs)?;
    let fp32 = args.precision == "fp32";
    let compute = load_compute(
        &args.compute,
        Some((
            model.num_params() as f64,
            crate::analysis::optimizer_step::adamw_bytes_per_param(
                if fp32 { 4.0 } else { 2.0 },
                !fp32,
            ),
        )),
    )?;
    let precision = if fp32 {
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
        args.strategy.iter().map(|&s| s.into()).collect()
    };
    let params = model.num_params() as f64;
    let schedule = fsdp::Schedule {
        accumulation: count_in("--accumulation", args.accumulation, 1, 1 << 16)?,
        overlap_slowdown: fraction("--overlap-slowdown", args.overlap_slowdown)?,
    };
    let estimates: Vec<fsdp::Estimate> = strategies
        .iter()
        .map(|&s| {
            // ZeRO partitions the optimizer: each GPU steps its 1/N of the states.
            let optimizer_s = match s {
                Strategy::NoShard => compute.optimizer_s,
                _ => compute.optimizer_s / args.world_size.max(1) as f64,
            };
            fsdp::estimate_scheduled(
                s,
                params,
                args.world_size,
                precision,
                activations_bytes,
                &link,
                (compute.forward_s, compute.backward_s, optimizer_s),
                schedule,
            )
        })
        .collect();
    let fits = |e: &fsdp::Estimate| gpu_memory_gb.map(|gb| e.total_bytes_per_gpu <= gb * 1e9);
    let doc = FsdpSimulation {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Simulation,
        simulator: Simulator::Fsdp,
        tool: crate::buildinfo::tool_info(),
        model: crate::analysis::models::summary(&model),
        world_size: args.world_size,
        precision,
        link: describe(&link, &link_notes),
        compute,
        accumulation: schedule.accumulation,
        overlap_slowdown: schedule.overlap_slowdown,
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

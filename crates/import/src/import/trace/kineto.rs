//! A PyTorch profiler (Kineto) trace, one rank's Chrome-trace JSON, read as a stream into what
//! the step analysis needs: GPU kernels and copies (NCCL's told apart, with their collective,
//! bytes and group), the `ProfilerStep#N` spans, DataLoader waits, optimizer steps, and which
//! thread ran backward. Everything else in the file (flows, shapes, call stacks) is read past.
//!
//! Kineto writes `ts`/`dur` in microseconds whatever `displayTimeUnit` says (nanosecond
//! traces carry the fraction). NCCL kernels name their collective: before NCCL 2.19
//! `ncclKernel_AllReduce_RING_LL_Sum_float`, since `ncclDevKernel_AllReduce_Sum_f32_RING_LL`
//! (NVIDIA/nccl src/device/generate.py). PyTorch 2.1+ puts the collective, element counts,
//! dtype and group on the kernel's args; older traces only on the CPU-side `nccl:<op>`
//! annotation (with `record_shapes`), which is found through the kernel's launch.

use super::types::{CommKernel, CommOp, Kernel, KernelKind, Phase, RankTrace, Span, TraceError};
use crate::coll::Collective;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "id")]
    tid: u64,
    #[serde(default, deserialize_with = "lenient_f64")]
    ts: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    dur: Option<f64>,
    #[serde(borrow, default)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(default, deserialize_with = "lenient_u64")]
    stream: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    correlation: Option<u64>,
    #[serde(rename = "Collective name", borrow, default)]
    collective: Option<Cow<'a, str>>,
    #[serde(rename = "In msg nelems", default, deserialize_with = "lenient_u64")]
    in_nelems: Option<u64>,
    #[serde(rename = "Out msg nelems", default, deserialize_with = "lenient_u64")]
    out_nelems: Option<u64>,
    #[serde(rename = "Group size", default, deserialize_with = "lenient_u64")]
    group_size: Option<u64>,
    #[serde(borrow, default)]
    dtype: Option<Cow<'a, str>>,
    #[serde(rename = "Process Group Name", borrow, default)]
    pg_name: Option<Cow<'a, str>>,
    #[serde(rename = "Process Group Description", borrow, default)]
    pg_desc: Option<Cow<'a, str>>,
    #[serde(rename = "Input Dims", default)]
    input_dims: Option<serde_json::Value>,
    #[serde(rename = "Input type", default)]
    input_type: Option<serde_json::Value>,
}

/// A thread or process id: Kineto writes numbers, or strings such as `"stream 7"`.
fn id<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(
        match serde_json::Value::deserialize(d).unwrap_or(serde_json::Value::Null) {
            serde_json::Value::Number(n) => n
                .as_u64()
                .or_else(|| n.as_i64().map(|v| v as u64))
                .unwrap_or(0),
            serde_json::Value::String(s) => s
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0),
            _ => 0,
        },
    )
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(
        match serde_json::Value::deserialize(d).unwrap_or(serde_json::Value::Null) {
            serde_json::Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        },
    )
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(
        match serde_json::Value::deserialize(d).unwrap_or(serde_json::Value::Null) {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
        // "NaN" and "inf" parse as floats; no time is either.
        .filter(|v: &f64| v.is_finite()),
    )
}

/// The collective an NCCL kernel's name carries, and the element type where it names one.
pub fn kernel_collective(name: &str) -> Option<(Collective, Option<crate::dtype::Dtype>)> {
    let rest = name
        .strip_prefix("ncclDevKernel_")
        .or_else(|| name.strip_prefix("ncclSymDevKernel_"))
        .or_else(|| name.strip_prefix("ncclSymkDevKernel_"))
        .or_else(|| name.strip_prefix("ncclKernel_"))
        .or_else(|| name.split_once("ncclKernel_").map(|(_, r)| r))?;
    let rest = rest.split('(').next().unwrap_or(rest);
    let mut parts = rest.split('_');
    let coll = match parts.next()? {
        "AllReduce" => Collective::AllReduce,
        "AllGather" => Collective::AllGather,
        "ReduceScatter" => Collective::ReduceScatter,
        "Broadcast" => Collective::Broadcast,
        "Reduce" => Collective::Reduce,
        "SendRecv" => Collective::Sendrecv,
        _ => Collective::Unknown,
    };
    let dtype = parts.find_map(|p| {
        crate::dtype::Dtype::parse(match p {
            "f32" => "float",
            "f16" => "half",
            "bf16" | "bfloat16" => "bfloat16",
            "f64" => "double",
            "i8" | "int8" => "int8",
            "u8" | "uint8" => "uint8",
            "i32" | "int32" => "int32",
            "u32" | "uint32" => "uint32",
            "i64" | "int64" => "int64",
            "u64" | "uint64" => "uint64",
            "f8e4m3" => "f8e4m3",
            "f8e5m2" => "f8e5m2",
            other => other,
        })
    });
    Some((coll, dtype))
}

/// The collective of a c10d name: `nccl:all_reduce`, `_allgather_base`, `allreduce`,
/// `reduce_scatter_tensor_coalesced`, `send 1->2`.
pub fn c10d_collective(name: &str) -> Collective {
    let n = name.trim_start_matches("nccl:").trim_start_matches('_');
    let n = n.split([' ', '(']).next().unwrap_or(n).to_ascii_lowercase();
    let squashed: String = n.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let starts = |p: &str| squashed.starts_with(p);
    if starts("allreduce") {
        Collective::AllReduce
    } else if starts("allgather") {
        Collective::AllGather
    } else if starts("reducescatter") {
        Collective::ReduceScatter
    } else if starts("alltoall") {
        Collective::Alltoall
    } else if starts("broadcast") {
        Collective::Broadcast
    } else if starts("reduce") {
        Collective::Reduce
    } else if starts("send") || starts("recv") {
        Collective::Sendrecv
    } else {
        Collective::Unknown
    }
}

/// Bytes of the element type PyTorch names (`Float`, `BFloat16`, `c10::Half`, `unsigned char`,
/// `long int`).
pub fn torch_dtype_bytes(name: &str) -> Option<u64> {
    let n = name.trim().trim_start_matches("c10::").to_ascii_lowercase();
    Some(match n.as_str() {
        "float" | "float32" | "int" | "int32" | "unsigned int" | "uint32" | "complexhalf" => 4,
        "double" | "float64" | "long" | "long int" | "int64" | "long long" | "uint64"
        | "complexfloat" | "unsigned long" => 8,
        "half" | "float16" | "bfloat16" | "short" | "short int" | "int16" | "uint16" => 2,
        "byte" | "char" | "unsigned char" | "signed char" | "bool" | "int8" | "uint8"
        | "float8_e4m3fn" | "float8_e5m2" | "float8_e4m3fnuz" | "float8_e5m2fnuz" => 1,
        "complexdouble" => 16,
        _ => return None,
    })
}

/// Bytes of the tensors a `record_shapes` op lists: `Input Dims` `[[n, m], [k]]` against
/// `Input type` `["float", "float"]`.
fn shaped_bytes(dims: &serde_json::Value, types: &serde_json::Value) -> Option<u64> {
    let (dims, types) = (dims.as_array()?, types.as_array()?);
    let mut total = 0u64;
    let mut any = false;
    for (d, t) in dims.iter().zip(types) {
        let Some(size) = t.as_str().and_then(torch_dtype_bytes) else {
            continue;
        };
        let Some(shape) = d.as_array() else { continue };
        if shape.is_empty() {
            continue;
        }
        let elems = shape
            .iter()
            .filter_map(|x| x.as_u64())
            .try_fold(1u64, |a, d| a.checked_mul(d))?;
        total = elems.checked_mul(size)?.checked_add(total)?;
        any = true;
    }
    any.then_some(total)
}

/// What one rank's trace is read into, while it is read.
#[derive(Default)]
struct Reader {
    trace: RankTrace,
    /// (correlation, thread, launch time) of every runtime call that carries a correlation.
    launches: Vec<(u64, u64, f64)>,
}

impl Reader {
    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.trace.events += 1;
        let Ok(ev) = serde_json::from_slice::<RawEvent>(bytes) else {
            self.trace.unreadable_events += 1;
            return Ok(());
        };
        if ev.ph.as_deref() != Some("X") {
            return Ok(());
        }
        let (Some(ts), name) = (ev.ts, ev.name.as_deref().unwrap_or("")) else {
            return Ok(());
        };
        let dur = ev.dur.unwrap_or(0.0).max(0.0);
        // Microseconds past the year 30,000, or a span of more than ten days: not a time.
        if ts.abs() >= 1e18 || dur >= 1e12 {
            self.trace.unreadable_events += 1;
            return Ok(());
        }
        let args = ev.args.unwrap_or_default();
        // Categories as Kineto spells them, old (`Kernel`) and new (`kernel`), without an
        // allocation per event.
        let cat = ev.cat.as_deref().unwrap_or("");
        let is = |names: &[&str]| names.iter().any(|n| cat.eq_ignore_ascii_case(n));
        if is(&["kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"]) {
            let kind = if cat.eq_ignore_ascii_case("kernel") {
                self.kernel_kind(name, &args)
            } else {
                KernelKind::Memory
            };
            self.trace.kernels.push(Kernel {
                start_us: ts,
                dur_us: dur,
                stream: args.stream.unwrap_or(ev.tid) as u32,
                correlation: args.correlation.unwrap_or(0),
                launch_us: ts,
                kind,
                phase: Phase::Unknown,
                step: None,
            });
        } else if is(&["cuda_runtime", "runtime", "cuda_driver"]) {
            if let Some(c) = args.correlation {
                self.launches.push((c, ev.tid, ts));
            }
        } else if is(&["cpu_op", "operator", "user_annotation", "python_function"]) {
            self.cpu_op(name, ev.tid, ts, dur, &args)
        }
        Ok(())
    }

    fn kernel_kind(&mut self, name: &str, args: &RawArgs) -> KernelKind {
        let nccl = name
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case("nccl"));
        let from_name = kernel_collective(name);
        if !nccl && from_name.is_none() {
            return KernelKind::Compute;
        }
        let coll = args
            .collective
            .as_deref()
            .map(c10d_collective)
            .filter(|c| *c != Collective::Unknown)
            .or(from_name.map(|(c, _)| c))
            .unwrap_or(Collective::Unknown);
        let elem = args
            .dtype
            .as_deref()
            .and_then(torch_dtype_bytes)
            .or_else(|| {
                from_name
                    .and_then(|(_, d)| d)
                    .map(|d| d.size_bytes() as u64)
            });
        // Sizes that overflow 64 bits are no sizes.
        let bytes = match (args.in_nelems, args.out_nelems, elem) {
            (Some(i), Some(o), Some(e)) => i.max(o).checked_mul(e).filter(|_| coll_uses_max(coll)),
            _ => None,
        }
        .or_else(|| args.in_nelems?.checked_mul(elem?));
        self.trace.comms.push(CommKernel {
            coll,
            bytes,
            in_bytes: args.in_nelems.zip(elem).and_then(|(n, e)| n.checked_mul(e)),
            out_bytes: args
                .out_nelems
                .zip(elem)
                .and_then(|(n, e)| n.checked_mul(e)),
            group_size: group_size(args.group_size),
            group: args
                .pg_desc
                .as_deref()
                .or(args.pg_name.as_deref())
                .map(str::to_string),
            from_annotation: false,
        });
        KernelKind::Comm(self.trace.comms.len() as u32 - 1)
    }

    fn cpu_op(&mut self, name: &str, tid: u64, ts: f64, dur: f64, args: &RawArgs) {
        let span = Span {
            start_us: ts,
            dur_us: dur,
            tid,
            number: None,
        };
        if let Some(n) = name.strip_prefix("ProfilerStep#") {
            self.trace.steps.push(Span {
                number: n.trim().parse().ok(),
                ..span
            });
        } else if name.starts_with("enumerate(DataLoader)") {
            self.trace.loader.push(span);
        } else if name.starts_with("Optimizer.step#") {
            self.trace.optimizer.push(span);
        } else if name.starts_with("nccl:") || name == "record_param_comms" {
            let coll = match args.collective.as_deref() {
                Some(c) => c10d_collective(c),
                None => c10d_collective(name),
            };
            let bytes = match (&args.input_dims, &args.input_type) {
                (Some(d), Some(t)) => shaped_bytes(d, t),
                _ => None,
            }
            .or_else(|| {
                args.in_nelems?
                    .checked_mul(args.dtype.as_deref().and_then(torch_dtype_bytes)?)
            });
            self.trace.comm_ops.push(CommOp {
                span,
                coll,
                bytes,
                group_size: group_size(args.group_size),
            });
        } else if !self.trace.backward_tids.contains(&tid)
            && (name.contains("evaluate_function")
                || name.ends_with("Backward")
                || name.ends_with("Backward0"))
        {
            self.trace.backward_tids.push(tid);
        }
    }

    /// Links each kernel to its launch: the step whose span holds the launch, the phase the
    /// launching thread was in, and (for NCCL kernels without args) the c10d call that
    /// enqueued it.
    fn finish(self) -> RankTrace {
        link(self.trace, self.launches)
    }
}

/// Links each kernel of `t` to its launch among `launches` (correlation, thread, time): the
/// step whose span holds the launch, the phase the launching thread was in, and (for NCCL
/// kernels without a size) the c10d call that enqueued it. Any reader's kernels go through
/// here, so profiler traces and nsys exports are judged alike.
pub fn link(mut t: RankTrace, mut launches: Vec<(u64, u64, f64)>) -> RankTrace {
    {
        launches.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.2.total_cmp(&b.2)));
        t.steps.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        t.comm_ops.sort_by(|a, b| {
            (a.span.tid, a.span.start_us)
                .partial_cmp(&(b.span.tid, b.span.start_us))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        t.optimizer
            .sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        let main = t.steps.first().map(|s| s.tid);
        t.main_tid = main;
        for k in 0..t.kernels.len() {
            let corr = t.kernels[k].correlation;
            let launch = (corr != 0)
                .then(|| launches.binary_search_by(|l| l.0.cmp(&corr)).ok())
                .flatten()
                .map(|i| launches[i]);
            let (tid, at) = match launch {
                Some((_, tid, at)) => (Some(tid), at),
                None => (None, t.kernels[k].start_us),
            };
            t.kernels[k].step = containing(&t.steps, at).map(|i| i as u32);
            t.kernels[k].launch_us = at;
            t.kernels[k].phase = match tid {
                Some(tid) if t.backward_tids.contains(&tid) => Phase::Backward,
                Some(_) if containing(&t.optimizer, at).is_some() => Phase::Optimizer,
                Some(tid) if Some(tid) == main => Phase::Forward,
                _ => Phase::Unknown,
            };
            if let (KernelKind::Comm(c), Some(tid)) = (t.kernels[k].kind, tid) {
                // The latest c10d call on the launching thread that began by the launch.
                let i = t
                    .comm_ops
                    .partition_point(|o| (o.span.tid, o.span.start_us) <= (tid, at));
                let op = i
                    .checked_sub(1)
                    .map(|i| &t.comm_ops[i])
                    .filter(|o| o.span.tid == tid && at <= o.span.start_us + o.span.dur_us)
                    .cloned();
                let comm = &mut t.comms[c as usize];
                if let Some(op) = op {
                    if (comm.coll == Collective::Unknown || comm.coll == Collective::Sendrecv)
                        && op.coll != Collective::Unknown
                    {
                        comm.coll = op.coll;
                    }
                    if comm.bytes.is_none() {
                        comm.bytes = op.bytes;
                        comm.from_annotation = op.bytes.is_some();
                    }
                    comm.group_size = comm.group_size.or(op.group_size);
                }
            }
        }
        t
    }
}

/// A process group's size, where it is one (1 to 2^24 ranks).
fn group_size(g: Option<u64>) -> Option<usize> {
    g.filter(|g| (1..=1 << 24).contains(g)).map(|g| g as usize)
}

/// Whether a collective's size is its larger buffer (all-gather's output, reduce-scatter's
/// input), nccl-tests' size convention.
fn coll_uses_max(coll: Collective) -> bool {
    matches!(coll, Collective::AllGather | Collective::ReduceScatter)
}

/// The span holding `at`, of spans sorted by start.
fn containing(spans: &[Span], at: f64) -> Option<usize> {
    let i = spans.partition_point(|s| s.start_us <= at);
    (i > 0 && at <= spans[i - 1].start_us + spans[i - 1].dur_us).then(|| i - 1)
}

/// One rank's trace from its JSON.
pub fn read(name: &str, reader: impl std::io::Read) -> Result<RankTrace, TraceError> {
    let mut r = Reader::default();
    let top = super::stream::split_object(reader, &["traceEvents"], 4 << 20, &mut |_, e| r.feed(e))
        .map_err(|e| TraceError::Bad {
            path: name.to_string(),
            reason: e.to_string(),
        })?;
    let mut trace = r.finish();
    trace.source = name.to_string();
    trace.bytes = top.bytes;
    job_info(&mut trace, &top);
    if trace.events == 0 {
        return Err(TraceError::Bad {
            path: name.to_string(),
            reason: "has no traceEvents: not a PyTorch profiler trace".into(),
        });
    }
    Ok(trace)
}

/// The job's facts from a trace's top-level keys.
fn job_info(trace: &mut RankTrace, top: &super::stream::TopLevel) {
    if let Some(info) = top.get::<serde_json::Value>("distributedInfo") {
        trace.rank = info["rank"].as_u64().map(|r| r as usize);
        trace.world_size = info["world_size"].as_u64().map(|r| r as usize);
        trace.nccl_version = info["nccl_version"].as_str().map(str::to_string);
    }
    if let Some(props) = top.get::<serde_json::Value>("deviceProperties") {
        trace.device = props[0]["name"].as_str().map(str::to_string);
    }
    trace.host = top.get::<String>("host_name");
}

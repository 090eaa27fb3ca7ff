//! `ncclprobe diagnose`: read the inputs (detecting each file's kind), run the rules, print.

use crate::cli::{DiagnoseArgs, OutputFormat};
use crate::diagnose::{rules, Inputs};
use crate::exit::{ExitCode, Failure};
use crate::import::{nccl_log, nccl_tests, smi, text, topo};
use crate::import_cmd::input_failure;
use crate::model::RunRecord;
use std::path::Path;

/// What a file is, from its first lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RunRecord,
    NcclTestsJson,
    NcclTests,
    Topo,
    Smi,
    Log,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::RunRecord => "ncclprobe run record",
            Kind::NcclTestsJson => "nccl-tests JSON",
            Kind::NcclTests => "nccl-tests output",
            Kind::Topo => "nvidia-smi topo -m",
            Kind::Smi => "nvidia-smi",
            Kind::Log => "NCCL/PyTorch log",
        }
    }
}

pub fn detect(path: &Path) -> Result<Kind, Failure> {
    let head = text::head(path, 400).map_err(input_failure)?;
    let body: Vec<&str> = head
        .iter()
        .map(|s| s.as_str())
        .filter(|l| !l.starts_with("# source:"))
        .collect();
    let first = body
        .iter()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim_start())
        .unwrap_or("");
    if first.starts_with('{') {
        let full = std::fs::read_to_string(path).unwrap_or_default();
        return Ok(if full.contains("\"schema_version\"") {
            Kind::RunRecord
        } else {
            Kind::NcclTestsJson
        });
    }
    let any = |f: &dyn Fn(&str) -> bool| body.iter().any(|l| f(l));
    if any(&|l| l.contains("NVIDIA-SMI") || (l.contains("Processes:") && l.starts_with('|'))) {
        return Ok(Kind::Smi);
    }
    if any(&|l| {
        let t = l.trim_start();
        t.starts_with("# nThread")
            || t.starts_with("#       size")
            || t.contains("Collective test starting")
            || t.contains("Avg bus bandwidth")
            || (t.starts_with('#') && t.contains("size") && t.contains("algbw"))
    }) {
        return Ok(Kind::NcclTests);
    }
    if any(&|l| {
        let toks: Vec<&str> = l.split_whitespace().collect();
        toks.first().is_some_and(|t| t.starts_with("GPU"))
            && toks
                .iter()
                .skip(1)
                .any(|t| topo::normalise_link(t).is_some_and(|c| c != "X") || *t == "X")
    }) {
        return Ok(Kind::Topo);
    }
    Ok(Kind::Log)
}

pub fn gather(args: &DiagnoseArgs) -> Result<Inputs, Failure> {
    let mut inputs = Inputs::default();
    for path in &args.from {
        let kind = detect(path)?;
        let name = path.display().to_string();
        match kind {
            Kind::RunRecord => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Failure::usage(format!("{name}: {e}")))?;
                let record: RunRecord = serde_json::from_str(&text).map_err(|e| {
                    Failure::usage(format!("{name}: not a valid ncclprobe run record: {e}"))
                })?;
                inputs.runs.push(record);
            }
            Kind::NcclTestsJson => inputs
                .runs
                .push(nccl_tests::import_json(path).map_err(input_failure)?),
            Kind::NcclTests => {
                inputs
                    .runs
                    .push(nccl_tests::import_text(path).map_err(input_failure)?);
                // nccl-tests output often carries NCCL_DEBUG lines too.
                if let Ok(log) = nccl_log::parse_file(path) {
                    inputs.logs.push(log);
                }
            }
            Kind::Topo => inputs
                .topos
                .push((name.clone(), topo::parse_file(path).map_err(input_failure)?)),
            Kind::Smi => inputs
                .smis
                .push((name.clone(), smi::parse_file(path).map_err(input_failure)?)),
            Kind::Log => inputs
                .logs
                .push(nccl_log::parse_file(path).map_err(input_failure)?),
        }
        inputs.files.push((name, kind.name().to_string()));
    }
    if args.from.is_empty() || args.live {
        let facts = crate::live::collect(&crate::live::Roots::default(), true);
        if let Some(t) = &facts.topology {
            inputs.topos.push(("(live)".into(), t.clone()));
        }
        inputs.files.push(("(this machine)".into(), "live".into()));
        inputs.live = Some(facts);
    }
    Ok(inputs)
}

pub fn run(args: &DiagnoseArgs) -> Result<ExitCode, Failure> {
    let inputs = gather(args)?;
    let findings = rules(&inputs);
    let facts = inputs.facts();
    match args.format {
        OutputFormat::Json => {
            let v = serde_json::json!({"facts": facts, "findings": findings});
            println!("{}", crate::render::to_json(&v)?);
        }
        _ => {
            for (f, k) in &inputs.files {
                println!("# input: {f} ({k})");
            }
            if let Some(l) = &inputs.live {
                if let Err(e) = &l.nvml {
                    println!("# {e}");
                }
                if l.sysfs_gpus.is_empty() && l.nvml.is_err() {
                    println!(
                        "# no NVIDIA GPU on this machine; reporting what can be read without one"
                    );
                }
            }
            println!(
                "# NCCL {}; transports {}; hosts {}; ranks {}",
                facts["nccl_version"].as_str().unwrap_or("unknown"),
                facts["transports"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", "))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "none seen".into()),
                facts["hosts"].as_array().map(|a| a.len()).unwrap_or(0),
                facts["ranks"]
                    .as_u64()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "unknown".into()),
            );
            if findings.is_empty() {
                println!("no findings");
            }
            for f in &findings {
                println!("\n[{:?}] {}: {}", f.severity, f.id, f.title);
                for e in f.evidence.iter().take(6) {
                    if e.line > 0 {
                        println!("    {}:{}: {}", e.file, e.line, e.text);
                    } else {
                        println!("    {}: {}", e.file, e.text);
                    }
                }
                println!("  why: {}", f.explanation);
                println!("  fix: {}", f.fix);
                println!("  source: {}", f.source);
            }
        }
    }
    if let Some(threshold) = args.fail_on {
        if findings.iter().any(|f| f.severity >= threshold) {
            return Err(Failure::new(
                ExitCode::CheckFailed,
                format!("diagnose: findings at or above {threshold:?}"),
            ));
        }
    }
    Ok(ExitCode::Ok)
}

//! `ncclprobe diagnose`: read the inputs (each file's kind detected), run the rules, print.

use crate::cli::{DiagnoseArgs, OutputFormat};
use crate::diagnose::{rules, Inputs};
use crate::documents::DiagnosisDocument;
use crate::exit::{ExitCode, Failure};
use crate::import::input::{input_failure, open, Kind};
use crate::import::nccl_log::LogFacts;
use crate::import::{nccl_dump, nccl_tests, pastes, topo};
use crate::render;

pub fn gather(args: &DiagnoseArgs) -> Result<Inputs, Failure> {
    let mut inputs = Inputs::default();
    for path in &args.from {
        // A job's profiler traces, Flight Recorder dumps, Inspector output: judged as `trace`.
        if path.is_dir() || crate::import::trace::sniff(path).is_some() {
            let name = path.display().to_string();
            let mut job = super::trace::read(std::slice::from_ref(path))?;
            let doc = super::trace::judge(&mut job, &crate::cli::LinkArgs::none())?;
            inputs.traces.push((name.clone(), doc));
            inputs.files.push((name, "training job records".into()));
            continue;
        }
        let (input, kind) = open(path)?;
        let name = input.name.clone();
        match kind {
            Kind::RunRecord => match crate::import::input::read_document(input)? {
                crate::import::input::Document::Run(run) => inputs.runs.push(*run),
                crate::import::input::Document::Matrix(m) => {
                    inputs.matrices.push((name.clone(), *m));
                    inputs.files.push((name, "ncclprobe matrix".into()));
                    continue;
                }
            },
            Kind::NcclTestsJson => inputs
                .runs
                .push(nccl_tests::json_from(input).map_err(input_failure)?),
            Kind::NcclTests => {
                // nccl-tests output often carries NCCL_DEBUG lines too: one pass reads both.
                let mut log = LogFacts::default();
                let run = nccl_tests::text_from(input, &mut |line| log.feed(&name, line))
                    .map_err(input_failure)?;
                inputs.runs.push(run);
                if let Ok(log) = log.finish(name.clone()) {
                    inputs.logs.push(log);
                }
            }
            Kind::Topo => inputs.topos.push((
                name.clone(),
                topo::from_input(input).map_err(input_failure)?,
            )),
            Kind::NcclDump => {
                let dump = nccl_dump::from_input(input).map_err(input_failure)?;
                if let Some(s) = &dump.system {
                    inputs.topos.push((name.clone(), s.to_topology()));
                }
                inputs.dumps.push((name.clone(), dump));
            }
            Kind::Smi => {
                let (table, pasted) = pastes::with_smi(input).map_err(input_failure)?;
                inputs.smis.push((name.clone(), table));
                inputs.pastes.push(pasted);
            }
            // Text without a log's words is still read as one: the log reader says what it
            // lacks, unless the text pastes what the host shows (nvidia-smi, free, nproc, ...).
            Kind::Log | Kind::Text => {
                let (log, pasted) = pastes::with_log(input).map_err(input_failure)?;
                match log {
                    Ok(log) => inputs.logs.push(log),
                    Err(_) if !pasted.is_empty() => {
                        inputs.pastes.push(pasted);
                        inputs.files.push((name, "pasted host state".into()));
                        continue;
                    }
                    Err(e) => {
                        return Err(Failure::usage(format!("{e}, or {}", pastes::HOST_STATE)))
                    }
                }
                if !pasted.is_empty() {
                    inputs.pastes.push(pasted);
                }
            }
            // `open` refuses these before they get here.
            Kind::Empty | Kind::Binary | Kind::SweepCsv | Kind::OtherJson(_) => {
                return Err(Failure::usage(format!("{name}: is {}", kind.is_what())))
            }
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
    if let Some(line) = &args.explain {
        return super::messages::explain_line(line, args.format);
    }
    let inputs = gather(args)?;
    let findings = rules(&inputs);
    let facts = inputs.facts();
    match args.format {
        OutputFormat::Json => {
            let doc = DiagnosisDocument::new(facts, findings.clone());
            crate::outln!("{}", render::to_json(&doc)?);
        }
        OutputFormat::Csv => crate::out!(
            "{}",
            render::findings::csv(&findings).map_err(|e| Failure::internal(e.to_string()))?
        ),
        OutputFormat::Table => crate::out!("{}", render::findings::table(&facts, &findings)),
    }
    if let Some(threshold) = args.fail_on.map(crate::diagnose::Severity::from) {
        if findings.iter().any(|f| f.severity >= threshold) {
            // As the flag spells it (`--fail-on warning`).
            let flag = format!("{threshold:?}").to_lowercase();
            return Err(Failure::new(
                ExitCode::CheckFailed,
                format!("diagnose: findings at or above {flag}"),
            ));
        }
    }
    Ok(ExitCode::Ok)
}

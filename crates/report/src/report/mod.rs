//! What a report is made of: the documents given (each recognised by its `kind`), what the
//! reader must see first (`verdict`: healthy / degraded / failed and the recommendations,
//! ranked by expected gain), how several runs are told apart (`label`), and the view the
//! templates render (`view`; a memory plan's section is `memory`'s).

pub mod figures;
pub mod label;
pub mod memory;
pub mod output;
pub mod reading;
pub mod recommend;
pub mod topology_view;
pub mod trace_view;
pub mod verdict;
pub mod view;

use crate::documents::memory::MemoryPlan;
use crate::documents::read;
use crate::documents::{
    Comparison, DdpSimulation, DiagnosisDocument, FsdpSimulation, Kind, Qualification, Simulator,
    TopologyDocument,
};
use crate::exit::Failure;
use crate::import::input::{input_failure, open, Kind as FileKind};
use crate::import::{nccl_tests, topo};
use crate::model::RunRecord;
use std::path::Path;

/// A bandwidth as reports quote it (`-` when there is none).
pub fn gbps(bytes_per_s: f64) -> String {
    if bytes_per_s.is_finite() {
        format!("{} GB/s", crate::units::fixed(bytes_per_s / 1e9, 2))
    } else {
        "-".into()
    }
}

/// A document that is not what it says, as bad input (exit 2).
fn bad(e: read::DocumentError) -> Failure {
    Failure::usage(e.to_string())
}

/// A document and the file it came from.
#[derive(Debug, Clone)]
pub struct Named<T> {
    pub file: String,
    pub doc: T,
}

/// How long one part of the work took (doctor's steps, the rendering itself).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Timing {
    pub part: String,
    pub seconds: f64,
}

/// Something the report must say that no document holds: a child run that died before it
/// wrote a record, a step that was skipped and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Note {
    /// `error`, `warning` or `info`.
    pub level: String,
    pub text: String,
}

/// A measured alternative that could not be measured: the overrides it would have removed and
/// what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAlternative {
    pub overrides: Vec<String>,
    pub error: String,
}

/// Every document a report renders; a section whose documents are absent is left out.
#[derive(Debug, Clone, Default)]
pub struct Documents {
    pub runs: Vec<Named<RunRecord>>,
    pub diagnoses: Vec<Named<DiagnosisDocument>>,
    pub ddp: Vec<Named<DdpSimulation>>,
    pub fsdp: Vec<Named<FsdpSimulation>>,
    pub memory: Vec<Named<MemoryPlan>>,
    pub comparisons: Vec<Named<Comparison>>,
    pub qualifications: Vec<Named<Qualification>>,
    pub topologies: Vec<Named<TopologyDocument>>,
    pub matrices: Vec<Named<crate::documents::matrix::MatrixDocument>>,
    /// A training job's traces judged (`ncclprobe trace`).
    pub traces: Vec<Named<crate::documents::trace::TraceDocument>>,
    pub timings: Vec<Timing>,
    pub notes: Vec<Note>,
    /// What was given but could not be judged, and why (a run no expectation applies to):
    /// the verdict is NOT JUDGED when nothing else was.
    pub not_judged: Vec<String>,
    pub failed_alternatives: Vec<FailedAlternative>,
    /// A pasted `nvidia-smi topo -m` among the inputs: the links runs are held against.
    pub topo_file: Option<std::path::PathBuf>,
    /// Hardware the user states (`--hardware`), for the runs held against expectations.
    pub hardware: Option<String>,
}

impl Documents {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
            && self.diagnoses.is_empty()
            && self.ddp.is_empty()
            && self.fsdp.is_empty()
            && self.memory.is_empty()
            && self.comparisons.is_empty()
            && self.qualifications.is_empty()
            && self.topologies.is_empty()
            && self.matrices.is_empty()
            && self.traces.is_empty()
    }

    /// Read one input: any ncclprobe document (by its `kind`), nccl-tests output (imported on
    /// the way in) or a pasted `nvidia-smi topo -m`.
    pub fn add_file(&mut self, path: &Path) -> Result<(), Failure> {
        let (input, kind) = open(path)?;
        let file = input.name.clone();
        match kind {
            FileKind::RunRecord => {
                let bytes = input.bytes("an ncclprobe document").map_err(input_failure)?;
                self.add_json(&file, &bytes)
            }
            FileKind::NcclTestsJson => {
                let doc = nccl_tests::json_from(input).map_err(input_failure)?;
                self.runs.push(Named { file, doc });
                Ok(())
            }
            FileKind::NcclTests => {
                let doc = nccl_tests::text_from(input, &mut |_| {}).map_err(input_failure)?;
                self.runs.push(Named { file, doc });
                Ok(())
            }
            FileKind::Topo => {
                let topology = topo::from_input(input).map_err(input_failure)?;
                self.topo_file.get_or_insert_with(|| path.to_path_buf());
                self.topologies.push(Named {
                    doc: TopologyDocument::new(file.clone(), topology),
                    file,
                });
                Ok(())
            }
            FileKind::NcclDump => {
                let dump = crate::import::nccl_dump::from_input(input).map_err(input_failure)?;
                let topology = dump
                    .system
                    .as_ref()
                    .map(|s| s.to_topology())
                    .unwrap_or_default();
                self.topo_file.get_or_insert_with(|| path.to_path_buf());
                let mut doc = TopologyDocument::new(file.clone(), topology);
                doc.nccl = Some(dump);
                self.topologies.push(Named { doc, file });
                Ok(())
            }
            FileKind::Log | FileKind::Smi => Err(Failure::usage(format!(
                "{file}: is {}, which a report does not render; run `ncclprobe diagnose --from {file} --format json` and give the report its document",
                kind.is_what()
            ))),
            // Its first lines name no format; a log with NCCL lines further on is still
            // diagnose's to read.
            FileKind::Text => Err(Failure::usage(format!(
                "{file}: is {}, which a report does not render; if it holds NCCL or PyTorch output further on, run `ncclprobe diagnose --from {file} --format json` and give the report its document",
                kind.is_what()
            ))),
            other => Err(Failure::usage(format!(
                "{file}: is {}, which a report does not render",
                other.is_what()
            ))),
        }
    }

    /// One of our JSON documents, told by its `kind` and read by the one reader
    /// (`documents::read`: version, kind, shape, content).
    pub fn add_json(&mut self, file: &str, bytes: &[u8]) -> Result<(), Failure> {
        let head = read::head(file, bytes).map_err(bad)?;
        let file = file.to_string();
        match head.kind {
            Kind::Run => self.runs.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Diagnosis => self.diagnoses.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Simulation if head.simulator == Some(Simulator::Fsdp) => {
                self.fsdp.push(Named {
                    doc: read::read_body(&file, bytes).map_err(bad)?,
                    file,
                })
            }
            Kind::Simulation => self.ddp.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Comparison => self.comparisons.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Qualification => self.qualifications.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Topology => self.topologies.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Matrix => self.matrices.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Baselines => {
                return Err(Failure::usage(format!(
                    "{file}: is the list of shipped expectations; a report renders runs and what was said about them"
                )))
            }
            Kind::Messages => {
                return Err(Failure::usage(format!(
                    "{file}: is the message catalogue (ncclprobe messages); a report renders runs and what was said about them"
                )))
            }
            Kind::MemoryPlan => self.memory.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
            Kind::Fleet => {
                return Err(Failure::usage(format!(
                    "{file}: is a fleet document; its page is drawn by `ncclprobe fleet --html PAGE` from the store"
                )))
            }
            Kind::Trace => self.traces.push(Named {
                doc: read::read_body(&file, bytes).map_err(bad)?,
                file,
            }),
        }
        Ok(())
    }

    /// Every comparison and qualification given must be of a run given (by its identity, or
    /// for documents without one, its file name): a verdict is never based on another run's
    /// documents. Refused (exit 2) naming the document and its run; with no run given, there
    /// is nothing to tie to.
    pub fn tie_to_runs(&self) -> Result<(), Failure> {
        if self.runs.is_empty() && self.matrices.is_empty() {
            return Ok(());
        }
        let of_a_run = |run: &str, id: Option<&str>| {
            self.runs
                .iter()
                .any(|r| reading::is_of_run(run, id, &r.file, &r.doc))
                || (id.is_none()
                    && self
                        .matrices
                        .iter()
                        .any(|m| reading::same_file(run, &m.file)))
        };
        let given: Vec<&str> = self
            .runs
            .iter()
            .map(|r| r.file.as_str())
            .chain(self.matrices.iter().map(|m| m.file.as_str()))
            .collect();
        let stray = self
            .comparisons
            .iter()
            .map(|c| ("comparison", &c.file, &c.doc.run, c.doc.run_id.as_deref()))
            .chain(self.qualifications.iter().map(|q| {
                (
                    "qualification",
                    &q.file,
                    &q.doc.run,
                    q.doc.run_id.as_deref(),
                )
            }))
            .find(|(_, _, run, id)| !of_a_run(run, *id));
        match stray {
            Some((what, file, run, id)) => Err(Failure::usage(format!(
                "{file}: is the {what} of {run}{}, which is none of the runs given ({}): give its run record too, or leave it out",
                id.map(|i| format!(" (started {i})")).unwrap_or_default(),
                given.join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// Hold every run that no comparison names against its expectation (with the pasted
    /// topology given among the inputs), so the report has a verdict per size even when only
    /// records were given. A run that cannot be judged (one rank, nothing measured, no
    /// expectation fits) gets a note saying why.
    pub fn compare_runs_without_comparison(&mut self) {
        let args = crate::expect::options::Expectation {
            topo: self.topo_file.clone(),
            hardware: self.hardware.clone(),
            ..Default::default()
        };
        let mut added = Vec::new();
        for run in &self.runs {
            let compared = self.comparisons.iter().any(|c| {
                reading::is_of_run(&c.doc.run, c.doc.run_id.as_deref(), &run.file, &run.doc)
            });
            if compared || run.doc.points.is_empty() {
                continue;
            }
            // The expectation, or the conditional answer for runs across nodes whose NICs
            // are not known.
            let doc = match crate::expect::setup::judge(&run.file, &run.doc, None, &args) {
                Ok(doc) => doc,
                Err(f) => {
                    self.not_judged.push(format!(
                        "{}: not held against an expectation: {}",
                        run.file, f.message
                    ));
                    continue;
                }
            };
            if doc.points.is_empty() && doc.nic_readings.is_empty() {
                self.not_judged
                    .push(format!("{}: {}", run.file, doc.summary));
            } else {
                added.push(Named {
                    file: format!("{} (compared by report)", run.file),
                    doc,
                });
            }
        }
        self.comparisons.extend(added);
    }

    /// Each run's label: what differs between the runs (see `label`).
    pub fn run_labels(&self) -> Vec<String> {
        let names: Vec<(&str, &RunRecord)> = self
            .runs
            .iter()
            .map(|r| (r.file.as_str(), &r.doc))
            .collect();
        label::labels(&names)
    }

    /// The comparison of a run against its expectation, if any.
    pub fn expectation_of(&self, run_file: &str) -> Option<&Comparison> {
        self.comparisons
            .iter()
            .map(|c| &c.doc)
            .find(|c| c.baseline.kind == "expectation" && reading::same_file(&c.run, run_file))
    }
}

//! What users paste about the machine a training job runs on, found wherever it sits in a
//! file (alone, several blocks together, or inside a log): GPU utilisation and memory
//! (`nvidia-smi`'s table, `--query-gpu` CSV, `dmon`), host memory (`free`), the CPU count
//! (`nproc`, `lscpu`), PyTorch's DataLoader worker warning, and the `num_workers` and ranks
//! per node a command line states, and the driver's Xid events in a kernel log. `diagnose` reads every text input through here as well as
//! through its own reader (`with_log`, `with_smi`).

#[path = "pastes_gpu.rs"]
mod gpu;
#[path = "pastes_host.rs"]
mod host;
#[path = "pastes_oom.rs"]
mod oom;

pub use gpu::GpuSample;
pub use host::{Count, HostMemory, WorkerWarning};
pub use oom::GpuOom;

use crate::import::nccl_log::{self, LogFacts};
use crate::import::smi::{self, Smi};
use crate::import::text::{self, Input, InputError, Line};

/// The host state `diagnose` reads, as its refusal of other text lists it.
pub const HOST_STATE: &str = "host state pasted as the commands print it: nvidia-smi (its table, `--query-gpu=utilization.gpu,memory.used,memory.total --format=csv` with or without header, or `dmon`), `free -h` or /proc/meminfo, `nproc` or `lscpu`, PyTorch's DataLoader worker warning (\"This DataLoader will create N worker processes\"), PyTorch's CUDA out-of-memory error, or the NVIDIA driver's Xid lines from `dmesg`";

/// Everything found, in the order the lines gave it.
#[derive(Debug, Default)]
pub struct Pastes {
    pub gpus: Vec<GpuSample>,
    pub memory: Vec<HostMemory>,
    /// PyTorch's first CUDA out-of-memory error, the latest after it (the one a wrapped
    /// sentence continues), and how many there were: a log of a million errors holds two.
    first_oom: Option<GpuOom>,
    latest_oom: Option<GpuOom>,
    oom_count: usize,
    /// What reading the input's lines came to (the lines cut at the line cap).
    pub lines: text::LinesRead,
    /// `nproc` (the CPUs this shell may use, which is what a DataLoader's workers get).
    pub nproc: Option<Count>,
    /// `lscpu`'s `CPU(s):` (every CPU of the machine).
    pub lscpu_cpus: Option<Count>,
    pub worker_warnings: Vec<WorkerWarning>,
    /// The last `num_workers` stated (a log states the run's; the last is the latest).
    pub num_workers: Option<Count>,
    /// The last processes per node a launcher line states (`--nproc_per_node`, ...).
    pub local_ranks: Option<Count>,
    /// The NVIDIA driver's Xid events in a pasted kernel log (`dmesg`, `journalctl -k`).
    pub xids: crate::import::xid::XidReader,
    /// A line holding only "CUDA out of memory.": the rest may follow on the next.
    oom_start: Option<Line>,
    /// Where the GPU rows of the latest `nvidia-smi` table start in `gpus`.
    table_start: usize,
    gpu_reader: gpu::GpuReader,
    host_reader: host::HostReader,
    /// The first line that was not blank, and whether another followed: a file that holds
    /// only a number is `nproc`'s answer.
    only_line: Option<(Line, bool)>,
}

impl Pastes {
    pub fn feed(&mut self, file: &str, line: &Line) {
        if !line.text.trim().is_empty() {
            match &mut self.only_line {
                None => self.only_line = Some((line.clone(), false)),
                Some((_, more)) => *more = true,
            }
        }
        if line.text.contains("NVIDIA-SMI") {
            self.table_start = self.gpus.len();
        }
        if line.text.contains("No running processes found") {
            for g in self.gpus.iter_mut().skip(self.table_start) {
                g.no_process_listed = g.format == "nvidia-smi";
            }
        }
        let broken_start = self
            .oom_start
            .take()
            .filter(|s| line.number <= s.number + 2)
            // The rest starts at "Tried to allocate", past any rank prefix the line repeats.
            .and_then(|s| {
                let rest = &line.text[line.text.find("Tried to allocate")?..];
                Some(Line {
                    text: format!("{} {rest}", s.text.trim()),
                    ..s
                })
            });
        if let Some(e) = oom::parse(file, line) {
            self.add_oom(e);
        } else if let Some(e) = broken_start.as_ref().and_then(|s| oom::parse(file, s)) {
            self.add_oom(e);
        } else if oom::starts_alone(&line.text) {
            self.oom_start = Some(line.clone());
        } else if let Some(last) = self.latest_oom_mut().filter(|o| {
            o.evidence.file == file
                && line.number >= o.evidence.line
                && line.number <= o.evidence.line + oom::CONTINUATION_LINES
        }) {
            last.continue_with(line.text.trim());
        }
        self.xids.feed(file, line);
        if let Some(sample) = self.gpu_reader.feed(file, line) {
            self.gpus.push(sample);
        }
        for fact in self.host_reader.feed(file, line) {
            match fact {
                host::HostFact::Memory(m) => self.memory.push(m),
                host::HostFact::Nproc(c) => self.nproc = Some(c),
                host::HostFact::Lscpu(c) => self.lscpu_cpus = Some(c),
                host::HostFact::Warning(w) => self.worker_warnings.push(w),
                host::HostFact::Suggested(max, evidence) => {
                    if let Some(w) = self.worker_warnings.last_mut() {
                        w.suggested_max = Some(max);
                        w.evidence.push(evidence);
                    }
                }
                host::HostFact::NumWorkers(c) => self.num_workers = Some(c),
                host::HostFact::LocalRanks(c) => self.local_ranks = Some(c),
            }
        }
    }

    fn add_oom(&mut self, e: GpuOom) {
        self.oom_count += 1;
        if self.first_oom.is_none() {
            self.first_oom = Some(e);
        } else {
            self.latest_oom = Some(e);
        }
    }

    fn latest_oom_mut(&mut self) -> Option<&mut GpuOom> {
        self.latest_oom.as_mut().or(self.first_oom.as_mut())
    }

    /// The first out-of-memory error: the one a plan is held against.
    pub fn first_oom(&self) -> Option<&GpuOom> {
        self.first_oom.as_ref()
    }

    /// How many out-of-memory errors the input held.
    pub fn oom_count(&self) -> usize {
        self.oom_count
    }

    /// Close the blocks the input ended in.
    pub fn finish(&mut self, file: &str) {
        if let Some(m) = self.host_reader.finish() {
            self.memory.push(m);
        }
        if let Some((line, false)) = self.only_line.take() {
            let count = line.text.trim().parse::<u32>().ok();
            if let (Some(value @ 1..=100_000), None) = (count, &self.nproc) {
                self.nproc = Some(Count {
                    value,
                    evidence: crate::documents::diagnosis::Evidence {
                        file: file.to_string(),
                        line: line.number,
                        text: format!("{value} (the whole file: nproc's answer)"),
                    },
                });
            }
        }
    }

    /// Nothing about the machine was found (settings alone say nothing of it).
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
            && self.memory.is_empty()
            && self.oom_count == 0
            && self.nproc.is_none()
            && self.lscpu_cpus.is_none()
            && self.worker_warnings.is_empty()
            && self.xids.events.is_empty()
    }

    /// The CPUs a DataLoader's workers share: `nproc` (affinity and cgroups counted), else
    /// `lscpu`'s count.
    pub fn cores(&self) -> Option<&Count> {
        self.nproc.as_ref().or(self.lscpu_cpus.as_ref())
    }
}

/// Every line of a text input, unwrapped when it was pasted from a web page.
fn each_line(
    input: Input,
    expected: &str,
    mut each: impl FnMut(&Line),
) -> Result<text::LinesRead, InputError> {
    let html = super::input::html::looks_like_html(&input.head_lines(400));
    input.lines_read(expected, |line| {
        if html {
            for l in super::input::html::lines_of(&line) {
                each(&l);
            }
        } else {
            each(&line);
        }
    })
}

/// A text input read once as a log and as pastes. The log's own error (no NCCL or PyTorch
/// lines) is handed back for the caller to use when the pastes hold nothing either.
pub fn with_log(input: Input) -> Result<(Result<LogFacts, InputError>, Pastes), InputError> {
    let name = input.name.clone();
    let mut log = LogFacts::default();
    let mut pastes = Pastes::default();
    let lines = each_line(input, nccl_log::EXPECTED, |line| {
        log.feed(&name, line);
        pastes.feed(&name, line);
    })?;
    pastes.lines = lines;
    pastes.finish(&name);
    Ok((log.finish(name), pastes))
}

/// `nvidia-smi` output read as its process table and as pastes (its GPU rows carry
/// utilisation and memory; a paste that starts with it often goes on with `free` or a log).
pub fn with_smi(input: Input) -> Result<(Smi, Pastes), InputError> {
    let name = input.name.clone();
    let bytes = input.bytes(smi::EXPECTED)?;
    let whole = String::from_utf8_lossy(&bytes);
    let table = smi::parse_str(&whole);
    let mut pastes = Pastes::default();
    let html = super::input::html::looks_like_html(&whole.lines().take(400).collect::<Vec<_>>());
    for (i, raw) in whole.lines().enumerate() {
        let (cleaned, tag_rank) = text::clean(raw);
        let line = Line {
            number: i + 1,
            raw: raw.to_string(),
            text: cleaned,
            tag_rank,
        };
        if html {
            for l in super::input::html::lines_of(&line) {
                pastes.feed(&name, &l);
            }
        } else {
            pastes.feed(&name, &line);
        }
    }
    pastes.finish(&name);
    if table.gpus.is_empty() && table.processes.is_empty() && pastes.is_empty() {
        return Err(InputError::WrongKind {
            path: name,
            reason: "no GPU rows or process table found".into(),
            expected: smi::EXPECTED.into(),
        });
    }
    Ok((table, pastes))
}

#[cfg(test)]
#[path = "pastes_tests.rs"]
mod tests;

//! What `compare`, `qualify`, `report` and a sweep's gate share: reading the run (and the topology and log beside it)
//! and choosing the expectation it is held against.

use super::options::Expectation as ExpectationArgs;
use crate::coll::Collective;
use crate::exit::Failure;
use crate::expect::{self, Choice, Situation};
use crate::import::input::{input_failure, open, read_run, Kind};
use crate::import::nccl_log::{self, LogFacts};
use crate::import::{text::Input, topo};
use crate::model::RunRecord;
use std::path::Path;

/// A run as `compare` and `qualify` read it: its name, the record, and the NCCL_DEBUG lines
/// its nccl-tests output carried.
pub struct Loaded {
    pub name: String,
    pub run: RunRecord,
    pub log: Option<LogFacts>,
}

/// A run from a record or nccl-tests output, with `--collective` naming what its log did not.
pub fn load_run(path: &Path, args: &ExpectationArgs) -> Result<Loaded, Failure> {
    let (name, mut run, log) = read_run(path)?;
    if let Some(text) = &args.collective {
        name_collective(&mut run, text)?;
    }
    Ok(Loaded { name, run, log })
}

/// `--collective NAME`: the collective of the points an old log left unnamed.
pub fn name_collective(run: &mut RunRecord, text: &str) -> Result<(), Failure> {
    let coll = Collective::parse(text)
        .filter(|c| c.is_measured())
        .ok_or_else(|| Failure::usage(format!("--collective: `{text}` is not a collective")))?;
    let mut renamed = 0;
    for p in run
        .points
        .iter_mut()
        .filter(|p| p.collective == Collective::Unknown)
    {
        p.collective = coll;
        renamed += 1;
    }
    // A summary without rows carries its collective in the import's facts.
    if let Some(info) = run.import.as_mut().filter(|i| i.collective.is_none()) {
        info.collective = Some(coll);
    }
    if renamed > 0 {
        run.headlines = crate::model::headlines(&run.points);
        run.notes
            .push(format!("{renamed} points named {coll} with --collective"));
    }
    Ok(())
}

/// The facts of a run with the `--topo` and `--log` files given beside it (`--log` wins over
/// the lines the run's own output carried).
pub fn situation(
    run: &RunRecord,
    embedded: Option<&LogFacts>,
    args: &ExpectationArgs,
) -> Result<Situation, Failure> {
    let topology = match &args.topo {
        Some(path) => {
            let (input, kind) = open(path)?;
            let name = input.name.clone();
            match kind {
                Kind::Topo => Some((name, topo::from_input(input).map_err(input_failure)?)),
                Kind::NcclDump => {
                    let dump =
                        crate::import::nccl_dump::from_input(input).map_err(input_failure)?;
                    let system = dump.system.ok_or_else(|| {
                        Failure::usage(format!(
                            "--topo {name}: is NCCL's graph dump; --topo takes its system \
                             dump (NCCL_TOPO_DUMP_FILE) or `nvidia-smi topo -m`"
                        ))
                    })?;
                    Some((name, system.to_topology()))
                }
                _ => {
                    return Err(Failure::usage(format!(
                        "--topo {name}: is {} output, not `nvidia-smi topo -m` or an NCCL \
                         topology dump",
                        kind.name()
                    )))
                }
            }
        }
        None => None,
    };
    let log = match &args.log {
        Some(path) => {
            let input = Input::open(path).map_err(input_failure)?;
            Some(nccl_log::from_input(input).map_err(input_failure)?)
        }
        None => None,
    };
    let fit = topology
        .as_ref()
        .map(|(name, t)| (format!("--topo {name}"), t.clone()));
    let mut s = Situation::of_record(run, topology, log.as_ref().or(embedded));
    if let Some((name, t)) = fit {
        s.topology_notes = s.fit_topology(&name, &t).map_err(Failure::usage)?;
        for note in &s.topology_notes {
            crate::term::note(note);
        }
    }
    if let Some(text) = &args.hardware {
        let hw = crate::expect::hardware::Hardware::parse(text).map_err(Failure::usage)?;
        s.stated_conflicts = s.state(hw);
        // Said at once: a choice that then fails (no expectation for the stated machine)
        // must not hide that the statement and the run disagree.
        for c in &s.stated_conflicts {
            eprintln!("ncclprobe: --hardware: {c}");
        }
    }
    Ok(s)
}

/// A run held against what fits it: its expectation, or the conditional answer when it spans
/// nodes whose NICs are not known (and no --profile names an expectation).
pub fn judge(
    name: &str,
    run: &RunRecord,
    embedded: Option<&LogFacts>,
    args: &ExpectationArgs,
) -> Result<crate::documents::Comparison, Failure> {
    let s = situation(run, embedded, args)?;
    if crate::expect::average::is_summary_only(run) && s.nranks < 2 {
        return Err(Failure::usage(format!(
            "{name} holds only nccl-tests' summary lines: judging its average needs the ranks, the collective and the sizes it ran; paste the banner (`# nThread ...`), the `# Rank` lines or the command line (`mpirun -np N ... all_reduce_perf -b ... -e ... -f ...`) with it"
        )));
    }
    let mut doc = if args.profile.is_none()
        && !matches!(run.backend.name.as_str(), "host" | "mpi")
        && crate::expect::conditional::needed(&s)
    {
        crate::expect::conditional::comparison(name, run, &s)
    } else {
        let choice = choice_in(run, s.clone(), args)?;
        match crate::expect::average::is_summary_only(run) {
            true => crate::expect::average::comparison(name, run, &choice),
            false => crate::expect::compare::against_expectation(name, run, &choice),
        }
    };
    doc.warnings.extend(s.stated_conflicts.iter().cloned());
    doc.warnings.extend(s.topology_notes.iter().cloned());
    Ok(doc)
}

/// `--profile`, or the expectation the facts point to. Either failing is bad input (exit 2)
/// with the reason and what to give instead.
pub fn choice(
    run: &RunRecord,
    embedded: Option<&LogFacts>,
    args: &ExpectationArgs,
) -> Result<Choice, Failure> {
    choice_in(run, situation(run, embedded, args)?, args)
}

/// [`choice`] in a situation already made.
fn choice_in(run: &RunRecord, s: Situation, args: &ExpectationArgs) -> Result<Choice, Failure> {
    let table = expect::shipped();
    match &args.profile {
        Some(id) => {
            expect::named(table, id, &s).map_err(|e| Failure::usage(format!("--profile: {e}")))
        }
        None => {
            // Whatever GPUs the machine has (the record keeps its topology), these backends
            // move the data through host memory: a GPU path's expectation says nothing of them.
            if matches!(run.backend.name.as_str(), "host" | "mpi") {
                return Err(Failure::usage(format!(
                    "the run measured the {} backend (host memory, no GPU): no shipped expectation applies; give --profile NAME, or compare it with an earlier run",
                    run.backend.name
                )));
            }
            expect::choose(table, &s).map_err(|e| Failure::usage(e.to_string()))
        }
    }
}

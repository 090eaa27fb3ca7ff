//! Telling several runs apart in one picture: each run is labelled by what differs between
//! them (environment overrides, backend, hosts, GPUs, rank count, library versions), and only
//! by the file name when nothing else does.

use crate::model::RunRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The traits of a run a reader would tell it by, in the order labels name them.
fn traits(run: &RunRecord) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = run
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    t.push(("backend".into(), run.backend.name.clone()));
    t.push(("ranks".into(), run.backend.nranks.to_string()));
    t.push(("hosts".into(), run.backend.hosts.join("+")));
    let gpus: BTreeSet<&str> = run
        .backend
        .ranks
        .iter()
        .filter_map(|r| r.device.as_deref())
        .collect();
    t.push((
        "GPUs".into(),
        gpus.into_iter().collect::<Vec<_>>().join("+"),
    ));
    for (lib, version) in &run.backend.library_versions {
        t.push((lib.clone(), version.clone()));
    }
    t
}

/// A file's name without its directories (how documents made elsewhere name the same file).
pub fn short(file: &str) -> String {
    Path::new(file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string())
}

/// One label per run, in the order given: what differs between the runs, as `KEY=value`
/// (an environment variable absent from a run reads `KEY unset`).
pub fn labels(runs: &[(&str, &RunRecord)]) -> Vec<String> {
    if runs.len() < 2 {
        return runs.iter().map(|(file, _)| short(file)).collect();
    }
    let all: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|(_, r)| traits(r).into_iter().collect())
        .collect();
    let mut keys: Vec<String> = Vec::new();
    for (_, r) in runs {
        for (k, _) in traits(r) {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    let differing: Vec<&String> = keys
        .iter()
        .filter(|k| {
            let values: BTreeSet<Option<&String>> = all.iter().map(|m| m.get(*k)).collect();
            values.len() > 1
        })
        .collect();
    let mut out: Vec<String> = all
        .iter()
        .map(|m| {
            differing
                .iter()
                .map(|k| match m.get(*k) {
                    Some(v) if k.as_str() == "backend" => format!("{v} backend"),
                    Some(v) if k.as_str() == "ranks" => format!("{v} ranks"),
                    Some(v) if v.is_empty() => format!("{k} none"),
                    Some(v) => format!("{k}={v}"),
                    None => format!("{k} unset"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    // Runs alike in everything (the same box measured twice) are told by their files.
    let seen: BTreeMap<&String, usize> = out.iter().fold(BTreeMap::new(), |mut m, l| {
        *m.entry(l).or_insert(0) += 1;
        m
    });
    let repeated: BTreeSet<String> = seen
        .into_iter()
        .filter(|(l, n)| *n > 1 || l.is_empty())
        .map(|(l, _)| l.clone())
        .collect();
    for (label, (file, _)) in out.iter_mut().zip(runs) {
        if repeated.contains(label.as_str()) {
            *label = if label.is_empty() {
                short(file)
            } else {
                format!("{} ({label})", short(file))
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunRecord, Source};

    fn run(env: &[(&str, &str)]) -> RunRecord {
        let mut r = RunRecord::blank(Source::Measured, "host", "test".into());
        r.backend.nranks = 2;
        r.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn runs_are_labelled_by_the_override_that_differs() {
        let a = run(&[("NCCL_SHM_DISABLE", "1"), ("NCCL_DEBUG", "INFO")]);
        let b = run(&[("NCCL_DEBUG", "INFO")]);
        let l = labels(&[("a.json", &a), ("b.json", &b)]);
        assert_eq!(l, ["NCCL_SHM_DISABLE=1", "NCCL_SHM_DISABLE unset"]);
    }

    #[test]
    fn identical_runs_are_told_by_their_files() {
        let a = run(&[]);
        let l = labels(&[("dir/before.json", &a), ("after.json", &a)]);
        assert_eq!(l, ["before.json", "after.json"]);
    }

    #[test]
    fn backend_and_rank_count_read_as_words() {
        let a = run(&[]);
        let mut b = run(&[]);
        b.backend.name = "mpi".into();
        b.backend.nranks = 4;
        let l = labels(&[("a", &a), ("b", &b)]);
        assert_eq!(l, ["host backend, 2 ranks", "mpi backend, 4 ranks"]);
    }
}

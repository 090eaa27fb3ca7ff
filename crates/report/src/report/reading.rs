//! What the verdict and the recommendations both read off the documents: whether two file names
//! are one run, whether a run finished, the settings that force a slower path, and the sizes at
//! which a comparison's plateau fell short.

use super::label::short;
use crate::coll::Collective;
use crate::documents::Comparison;
use crate::model::{RunRecord, RunStatus};
use std::collections::BTreeMap;

/// Environment settings that force NCCL (or MPI) onto a slower path: the ones `doctor` also
/// measures without, and whose absence in another run is a measured alternative.
pub fn forcing_overrides(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, v)| forces_slower_path(k, v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub fn forces_slower_path(key: &str, value: &str) -> bool {
    let v = value.trim().to_ascii_lowercase();
    match key {
        "NCCL_SHM_DISABLE" | "NCCL_P2P_DISABLE" | "NCCL_IB_DISABLE" => v == "1",
        "NCCL_NET" => v == "socket",
        "NCCL_P2P_LEVEL" => matches!(v.as_str(), "loc" | "0"),
        // Open MPI restricted to TCP, or with shared memory excluded.
        "OMPI_MCA_btl" => {
            let shm = ["vader", "sm", "smcuda"];
            let listed: Vec<&str> = v.split(',').map(str::trim).collect();
            if v.starts_with('^') {
                listed
                    .iter()
                    .any(|t| shm.contains(&t.trim_start_matches('^')))
            } else {
                !listed.iter().any(|t| shm.contains(t))
            }
        }
        _ => false,
    }
}

/// Whether a document's `run` (as its command was given it) names this file.
pub fn same_file(a: &str, b: &str) -> bool {
    a == b || short(a) == short(b)
}

/// Whether a document made of a run (`run`, `run_id` as it names it) is of this run record:
/// by the run's identity when the document carries one, else by the file's name.
pub fn is_of_run(doc_run: &str, doc_run_id: Option<&str>, file: &str, run: &RunRecord) -> bool {
    match doc_run_id {
        Some(id) => id == crate::model::check::identity(run),
        None => same_file(doc_run, file),
    }
}

pub fn finished(run: &RunRecord) -> bool {
    matches!(run.status, RunStatus::Complete | RunStatus::Truncated)
}

/// Whether a comparison against an expectation finds the plateau below its band: most of the
/// points from an eighth of the largest size up are `below` or `far-below`.
pub fn plateau_below(c: &Comparison) -> Vec<(Collective, f64)> {
    let mut by_coll: BTreeMap<Collective, Vec<&crate::documents::ComparedPoint>> = BTreeMap::new();
    for p in &c.points {
        by_coll.entry(p.collective).or_default().push(p);
    }
    by_coll
        .into_iter()
        .filter_map(|(coll, points)| {
            let largest = points.iter().map(|p| p.size_bytes).max()?;
            let top: Vec<_> = points
                .iter()
                .filter(|p| p.size_bytes.saturating_mul(8) > largest)
                .collect();
            let low = top
                .iter()
                .filter(|p| p.verdict == "below" || p.verdict == "far-below")
                .count();
            let mut ratios: Vec<f64> = top.iter().map(|p| p.ratio).collect();
            ratios.sort_by(f64::total_cmp);
            (low * 2 > top.len()).then(|| (coll, crate::stats::quantile_sorted(&ratios, 0.5)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_that_force_a_slower_path() {
        assert!(forces_slower_path("NCCL_SHM_DISABLE", "1"));
        assert!(!forces_slower_path("NCCL_SHM_DISABLE", "0"));
        assert!(forces_slower_path("NCCL_NET", "Socket"));
        assert!(forces_slower_path("OMPI_MCA_btl", "tcp,self"));
        assert!(forces_slower_path("OMPI_MCA_btl", "^vader"));
        assert!(!forces_slower_path("OMPI_MCA_btl", "vader,self"));
        assert!(!forces_slower_path("OMPI_MCA_btl", "^openib"));
        assert!(!forces_slower_path("NCCL_DEBUG", "INFO"));
    }

    #[test]
    fn a_file_is_named_the_same_from_another_directory() {
        assert!(same_file("out/run.json", "run.json"));
        assert!(!same_file("a.json", "b.json"));
    }
}

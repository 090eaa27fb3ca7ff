//! A CUDA out-of-memory error held against the plan: which of the step's tensors the failed
//! allocation was (by its size), what the model counts just before it, and the memory the
//! process held beyond that. The difference is carried into the plan and into every change,
//! so "does it fit" and "which change makes it fit" answer for the job that failed, not only
//! for the model of it.

use super::setup::Setup;
use crate::documents::memory::{Observed, Term};

/// PyTorch rounds an allocation above 10 MiB up to a multiple of 2 MiB before it asks the
/// driver, and prints the rounded size (CUDACachingAllocator's `get_allocation_size`).
const LARGE_ROUNDING_BYTES: f64 = 2.0 * 1024.0 * 1024.0;

/// What an out-of-memory error states, in bytes (the command reads it from PyTorch's text).
#[derive(Debug, Clone, PartialEq)]
pub struct Oom {
    /// The file and line of the error.
    pub source: String,
    pub gpu: Option<u32>,
    pub requested_bytes: f64,
    pub capacity_bytes: Option<f64>,
    pub free_bytes: Option<f64>,
    /// "this process has X memory in use".
    pub process_in_use_bytes: Option<f64>,
    /// Every "Process N has X memory in use".
    pub listed_processes_bytes: Vec<f64>,
    pub reserved_unallocated_bytes: Option<f64>,
    /// "X reserved in total by PyTorch" (1.x).
    pub reserved_total_bytes: Option<f64>,
}

/// Why an error cannot be held against the plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObservedError {
    #[error("{0}: the error states neither what the process had in use nor the GPU's capacity and free memory (PyTorch 2.x prints both; give the whole message)")]
    NoUsage(String),
}

/// What the process held when the allocation failed, where that figure came from, and the
/// other processes' share of the GPU.
fn in_use(oom: &Oom, cuda_context_bytes: f64) -> Result<(f64, String, f64), ObservedError> {
    let listed: f64 = oom.listed_processes_bytes.iter().sum();
    if let Some(mine) = oom.process_in_use_bytes {
        return Ok((
            mine,
            "PyTorch's \"this process has ... memory in use\": its CUDA context and the allocator's cache counted".into(),
            listed,
        ));
    }
    if let [only] = oom.listed_processes_bytes.as_slice() {
        return Ok((
            *only,
            "the one process the message lists (in a container PyTorch cannot tell it is this one)"
                .into(),
            0.0,
        ));
    }
    if let Some(reserved) = oom.reserved_total_bytes {
        return Ok((
            reserved + cuda_context_bytes,
            format!(
                "reserved in total by PyTorch, plus the CUDA context taken as {:.0} MiB",
                cuda_context_bytes / MIB
            ),
            0.0,
        ));
    }
    match (oom.capacity_bytes, oom.free_bytes) {
        (Some(total), Some(free)) => Ok((
            (total - free).max(0.0),
            "total capacity minus free: everything on the GPU, other processes included; the message does not say what this process held".into(),
            0.0,
        )),
        _ => Err(ObservedError::NoUsage(oom.source.clone())),
    }
}

fn matches(requested: f64, size: f64) -> bool {
    requested >= size - LARGE_ROUNDING_BYTES.max(0.005 * size)
        && requested <= size + LARGE_ROUNDING_BYTES.max(0.005 * size)
}

/// The observation, and the GPU terms to carry into the setup (`Setup::observed_terms`).
/// `setup` is the setup as it ran, without earlier observed terms.
pub fn calibrate(
    setup: &Setup,
    oom: &Oom,
) -> Result<(Observed, Vec<Term>, Vec<String>), ObservedError> {
    let (in_use_bytes, in_use_basis, others) = in_use(oom, setup.cuda_context_bytes)?;
    let mut notes = Vec::new();
    let allocations = setup.loss_allocations();
    let held_before = |i: usize| allocations[..i].iter().map(|a| a.bytes).sum::<f64>();
    let matched = allocations
        .iter()
        .position(|a| matches(oom.requested_bytes, a.bytes));
    let (matched_what, modelled_before_bytes) = match matched {
        Some(i) => {
            let what = allocations[i].what.clone();
            let before = setup.gpu_total_at(Some(held_before(i)));
            // A later tensor of the same size (the 16-bit logits' gradient in backward) would
            // leave less unexplained: say so with the figure.
            if i == 0 && allocations.len() > 1 {
                let peak = setup.gpu_total_at(None);
                notes.push(format!(
                    "the failed allocation is taken as {what} in the forward pass; if it was that tensor's gradient in backward, {:.2} GiB of the unexplained memory is the loss's and every figure is that much too high",
                    ((in_use_bytes - before).max(0.0) - (in_use_bytes - peak).max(0.0)) / GIB
                ));
            }
            (Some(what), before)
        }
        None => {
            let peak = setup.gpu_total_at(None);
            notes.push(format!(
                "no tensor the model counts is {:.2} MiB: the allocation is taken as the step's peak, so the unexplained memory is a lower bound",
                oom.requested_bytes / MIB
            ));
            (None, (peak - oom.requested_bytes).max(0.0))
        }
    };
    let gap = in_use_bytes - modelled_before_bytes;
    if gap < 0.0 {
        notes.push(format!(
            "the model counts {:.2} GiB more than the process held at the failed allocation: its figures are upper bounds for this job",
            -gap / GIB
        ));
    }
    let unexplained_bytes = gap.max(0.0);
    let mut terms = Vec::new();
    if unexplained_bytes > 0.0 {
        terms.push(Term {
            name: "unexplained (observed)".into(),
            bytes: unexplained_bytes,
            basis: format!(
                "the process held {:.2} GiB at the failed {:.2} MiB allocation; the model counts {:.2} GiB there",
                in_use_bytes / GIB,
                oom.requested_bytes / MIB,
                modelled_before_bytes / GIB
            ),
        });
    }
    if others > 0.0 {
        terms.push(Term {
            name: "other processes (observed)".into(),
            bytes: others,
            basis: format!(
                "{} other process(es) on GPU {} at the error",
                oom.listed_processes_bytes.len(),
                oom.gpu.map_or("?".into(), |g| g.to_string())
            ),
        });
    }
    if let Some(r) = oom.reserved_unallocated_bytes.filter(|r| *r > 0.0) {
        if !setup.expandable_segments {
            notes.push(format!(
                "{:.2} GiB was reserved by PyTorch but unallocated at the error: expandable_segments may return part of the unexplained memory",
                r / GIB
            ));
        }
    }
    notes.push(
        "the unexplained memory is carried unchanged into every change below: a change that removes what it is made of saves more than shown"
            .into(),
    );
    let observed = Observed {
        source: oom.source.clone(),
        gpu: oom.gpu,
        requested_bytes: oom.requested_bytes,
        free_bytes: oom.free_bytes,
        capacity_bytes: oom.capacity_bytes,
        in_use_bytes,
        in_use_basis,
        other_processes_bytes: others,
        reserved_unallocated_bytes: oom.reserved_unallocated_bytes,
        matched: matched_what,
        modelled_before_bytes,
        unexplained_bytes,
        short_at_failure_bytes: oom
            .free_bytes
            .map(|free| (oom.requested_bytes - free).max(0.0)),
    };
    Ok((observed, terms, notes))
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

#[cfg(test)]
#[path = "observed_tests.rs"]
mod tests;

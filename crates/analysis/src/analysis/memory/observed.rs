//! A CUDA out-of-memory error held against the plan: which of the step's tensors the failed
//! allocation was (by its size), what the model counts just before it, and the memory the
//! process held beyond that. The difference is carried into the plan and into every change,
//! so "does it fit" and "which change makes it fit" answer for the job that failed, not only
//! for the model of it.

use super::setup::Setup;
use crate::documents::memory::{Observed, Term};
use crate::units::size_text;

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
    /// What tensors held ("Of the allocated memory X is allocated by PyTorch").
    pub allocated_bytes: Option<f64>,
}

/// Why an error cannot be held against the plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObservedError {
    #[error("{0}: the error states neither what the process had in use nor the GPU's capacity and free memory (PyTorch 2.x prints both; give the whole message)")]
    NoUsage(String),
    #[error("{0}: {1} is beyond any GPU (negative, or more than a PiB); is the message intact?")]
    Absurd(String, String),
    #[error("{0}: {1}; figures that cannot all be true: is the message intact?")]
    Contradicts(String, String),
}

/// A figure no GPU has: the message is damaged or made up.
const MOST_BYTES: f64 = (1u64 << 50) as f64;

/// What the process held when the allocation failed, and where that figure came from.
fn in_use(oom: &Oom, cuda_context_bytes: f64) -> Result<(f64, String), ObservedError> {
    if let Some(mine) = oom.process_in_use_bytes.filter(|b| *b > 0.0) {
        return Ok((
            mine,
            "PyTorch's \"this process has ... memory in use\": its CUDA context and the allocator's cache counted".into(),
        ));
    }
    if let [only] = oom.listed_processes_bytes.as_slice() {
        return Ok((
            *only,
            "the one process the message lists: in a container PyTorch cannot tell it is this one"
                .into(),
        ));
    }
    let context = format!(
        "plus the CUDA context taken as {:.0} MiB",
        cuda_context_bytes / MIB
    );
    if let (Some(a), Some(r)) = (oom.allocated_bytes, oom.reserved_unallocated_bytes) {
        if oom.reserved_total_bytes.is_none() {
            return Ok((
                a + r + cuda_context_bytes,
                format!("allocated by PyTorch and reserved but unallocated, {context}"),
            ));
        }
    }
    if let Some(reserved) = oom.reserved_total_bytes {
        return Ok((
            reserved + cuda_context_bytes,
            format!("reserved in total by PyTorch, {context}"),
        ));
    }
    match (oom.capacity_bytes, oom.free_bytes) {
        (Some(total), Some(free)) => Ok((
            (total - free).max(0.0),
            "total capacity minus free: everything on the GPU, other processes included; the message does not say what this process held".into(),
        )),
        _ => Err(ObservedError::NoUsage(oom.source.clone())),
    }
}

fn matches(requested: f64, size: f64) -> bool {
    requested >= size - LARGE_ROUNDING_BYTES.max(0.005 * size)
        && requested <= size + LARGE_ROUNDING_BYTES.max(0.005 * size)
}

/// Memory on the GPU that was neither free nor this process's: the processes the message
/// lists, or what capacity minus free minus this process leaves (a desktop's display server,
/// another job), whichever is larger.
fn others(oom: &Oom, in_use_bytes: f64) -> f64 {
    let listed = 0.0 + oom.listed_processes_bytes.iter().sum::<f64>();
    let listed = if oom.process_in_use_bytes.is_none() && oom.listed_processes_bytes.len() == 1 {
        0.0
    } else {
        listed
    };
    let unaccounted = match (oom.capacity_bytes, oom.free_bytes) {
        (Some(total), Some(free)) => total - free - in_use_bytes,
        _ => 0.0,
    };
    // Below a MiB it is the rounding of the message's figures.
    let larger = listed.max(unaccounted);
    if larger >= MIB {
        larger
    } else {
        0.0
    }
}

/// Figures the message states that cannot all be true, in words.
fn inconsistencies(oom: &Oom, in_use_bytes: f64) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(total) = oom.capacity_bytes {
        if in_use_bytes > total * 1.01 {
            out.push(format!(
                "{}: the process held {:.2} GiB on a {:.2} GiB GPU (unified or oversubscribed memory?); the figures are taken as stated",
                oom.source,
                in_use_bytes / GIB,
                total / GIB
            ));
        }
    }
    out
}

/// Figures of one message that cannot all be true: beyond the rounding of two printed
/// figures, free memory cannot exceed capacity.
fn contradictions(oom: &Oom) -> Result<(), ObservedError> {
    if let (Some(total), Some(free)) = (oom.capacity_bytes, oom.free_bytes) {
        if free > total + MIB.max(0.001 * total) {
            return Err(ObservedError::Contradicts(
                oom.source.clone(),
                format!(
                    "{:.2} GiB free is more than the GPU's {:.2} GiB capacity",
                    free / GIB,
                    total / GIB
                ),
            ));
        }
    }
    Ok(())
}

/// The observation, the GPU terms to carry into the setup (`Setup::observed_terms`) and
/// notes. `setup` is the setup as it ran, without earlier observed terms.
pub fn calibrate(
    setup: &Setup,
    oom: &Oom,
) -> Result<(Observed, Vec<Term>, Vec<String>), ObservedError> {
    for (what, v) in [
        ("the allocation", Some(oom.requested_bytes)),
        ("the capacity", oom.capacity_bytes),
        ("the free memory", oom.free_bytes),
        ("the memory in use", oom.process_in_use_bytes),
    ] {
        if let Some(v) = v.filter(|v| !(0.0..=MOST_BYTES).contains(v)) {
            return Err(ObservedError::Absurd(
                oom.source.clone(),
                format!("{what} ({v:.0} bytes)"),
            ));
        }
    }
    contradictions(oom)?;
    let (in_use_bytes, in_use_basis) = in_use(oom, setup.cuda_context_bytes)?;
    let others = others(oom, in_use_bytes);
    let mut notes = inconsistencies(oom, in_use_bytes);
    let allocations = setup.loss_allocations();
    let held_before = |i: usize| allocations[..i].iter().map(|a| a.bytes).sum::<f64>();
    let matched = allocations
        .iter()
        .position(|a| matches(oom.requested_bytes, a.bytes));
    let peak = setup.gpu_total_at(None);
    let (matched_what, modelled_before_bytes) = match matched {
        Some(i) => {
            let what = allocations[i].what.clone();
            let before = setup.gpu_total_at(Some(held_before(i)));
            // A later tensor of the same size (its gradient in backward) would leave less
            // unexplained: say so with the figure.
            if i == 0 && allocations.len() > 1 {
                notes.push(format!(
                    "the failed allocation is taken as {what} in the forward pass; if it was that tensor's gradient in backward, {:.2} GiB of the unexplained memory is the loss's and every figure is that much too high",
                    ((in_use_bytes - before).max(0.0) - (in_use_bytes - peak).max(0.0)) / GIB
                ));
            }
            (Some(what), before)
        }
        None if oom.requested_bytes > peak => {
            notes.push(format!(
                "the failed allocation alone ({:.2} GiB) is larger than this setup's whole step ({:.2} GiB): the job allocated what the setup does not describe (check the model, batch and sequence given); it is counted as it was asked",
                oom.requested_bytes / GIB,
                peak / GIB
            ));
            (None, 0.0)
        }
        None => {
            notes.push(format!(
                "no tensor the model counts is {}: the allocation is taken as the step's peak, so the unexplained memory is a lower bound",
                size_text(oom.requested_bytes)
            ));
            (None, peak - oom.requested_bytes)
        }
    };
    let gap = in_use_bytes - modelled_before_bytes;
    if gap < 0.0 {
        notes.push(format!(
            "the model counts {:.2} GiB more than the process held at the failed allocation: its figures are upper bounds for this job",
            -gap / GIB
        ));
    }
    // The failed allocation did not fit beside what the GPU held: the plan's peak is never
    // below that, whatever the model's own accounting says.
    let mut floor = in_use_bytes + others + oom.requested_bytes;
    // An allocation smaller than the free memory failed too: what was free was in pieces
    // too small for it, so the GPU was full for this job.
    if let (Some(total), Some(free)) = (oom.capacity_bytes, oom.free_bytes) {
        if oom.requested_bytes > 0.0 && oom.requested_bytes <= free {
            floor = floor.max(total + MIB);
        }
    }
    let unexplained_bytes = gap.max(0.0).max(floor - peak - others).round();
    if let Some(free) = oom.free_bytes.filter(|f| *f >= oom.requested_bytes) {
        notes.push(format!(
            "the failed allocation asked {} while {} was free: the free memory was in pieces too small for it, or another process took it first",
            size_text(oom.requested_bytes),
            size_text(free)
        ));
    }
    let mut terms = Vec::new();
    if unexplained_bytes > 0.0 {
        terms.push(Term {
            name: "unexplained (observed)".into(),
            bytes: unexplained_bytes,
            basis: format!(
                "the process held {:.2} GiB at the failed {} allocation; the model counts {:.2} GiB there",
                in_use_bytes / GIB,
                size_text(oom.requested_bytes),
                modelled_before_bytes / GIB
            ),
        });
    }
    if others > 0.0 {
        terms.push(Term {
            name: "other memory (observed)".into(),
            bytes: others.round(),
            basis: format!(
                "on GPU {} beside this process at the error: {}",
                oom.gpu.map_or("?".into(), |g| g.to_string()),
                if oom.listed_processes_bytes.len() > 1 || oom.process_in_use_bytes.is_some() && !oom.listed_processes_bytes.is_empty() {
                    "the other processes the message lists"
                } else {
                    "capacity minus free minus this process (a display server, another job, the driver)"
                }
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
        "the unexplained memory is carried unchanged into every change listed: a change that removes what it is made of saves more than shown"
            .into(),
    );
    let observed = Observed {
        source: oom.source.clone(),
        gpu: oom.gpu,
        requested_bytes: oom.requested_bytes.round(),
        free_bytes: oom.free_bytes.map(f64::round),
        capacity_bytes: oom.capacity_bytes.map(f64::round),
        in_use_bytes: in_use_bytes.round(),
        in_use_basis,
        other_processes_bytes: others.round(),
        reserved_unallocated_bytes: oom.reserved_unallocated_bytes.map(f64::round),
        matched: matched_what,
        modelled_before_bytes: modelled_before_bytes.round(),
        unexplained_bytes,
        short_at_failure_bytes: oom
            .free_bytes
            .map(|free| (oom.requested_bytes - free).max(0.0).round()),
    };
    Ok((observed, terms, notes))
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

#[cfg(test)]
#[path = "observed_tests.rs"]
pub(crate) mod tests;

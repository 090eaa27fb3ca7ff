//! The memory planner (`simulate memory`): whether one training setup fits its GPU and its
//! host, term by term (model states by strategy and offload, activations by Korthikanti et
//! al. 2022, the context, NCCL and the allocator), and which changes make it fit, ranked by
//! cost, with the communication each adds on the measured curve (the FSDP model of
//! `analysis::fsdp`).

pub mod activations;
pub mod advice;
pub mod max_batch;
pub mod observed;
pub mod overheads;
pub mod presets;
pub mod seeds;
pub mod setup;
pub mod shape;
pub mod states;

use crate::analysis::curve::Curve;
pub use crate::documents::memory::{
    Budget, Change, Checkpointing, Logits, MemoryPlan, Observed, Offload, Optimizer, PlanSetup,
    Quantization, ShapeSummary, Term, Traffic, TrainPrecision, Trainable,
};
pub use crate::documents::simulation::Strategy;
pub use setup::{Estimate, Setup};

/// The plan document: the setup's budgets and the changes that make it fit.
pub fn plan(
    setup: &Setup,
    curve: Option<&Curve>,
    link: Option<String>,
    notes: Vec<String>,
    observed: Option<Observed>,
) -> MemoryPlan {
    let e = setup.estimate(curve);
    let changes = advice::changes(setup, &e, curve);
    MemoryPlan {
        schema_version: crate::documents::SCHEMA_VERSION,
        kind: crate::documents::Kind::MemoryPlan,
        tool: crate::buildinfo::tool_info(),
        model: setup.summary(),
        setup: setup.described(),
        gpu: e.gpu,
        host: e.host,
        traffic: e.traffic,
        link,
        changes,
        notes,
        observed,
        max_micro_batch: None,
    }
}

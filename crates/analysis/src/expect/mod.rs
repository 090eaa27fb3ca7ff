//! What "good" is: the shipped expectations (`table`), NCCL-style cost model for every message
//! size (`cost`), choosing the expectation from a run's facts (`choose`), a run against an
//! expectation (`compare`) or an earlier run (`versus`), and the CI gate (`qualify`).
//! `diagnose`'s result.below-expected asks the same engine.

pub mod average;
pub mod choose;
pub mod compare;
pub mod conditional;
pub mod cost;
pub mod designs;
pub mod fallback_gate;
pub mod gate;
pub mod hardware;
pub mod health_gate;
pub mod options;
mod path;
pub mod qualify;
pub mod setup;
pub mod shape;
pub mod situation;
pub mod table;
pub mod versus;

pub use choose::{choose, named, Choice, ChooseError, Situation};
pub use table::shipped;

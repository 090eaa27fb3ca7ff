//! What `matrix` asks of the harness beyond the sweep's settings: the engine's own options,
//! carried in the plan (this file sits in the harness layer for that reason; see the README's
//! Layers).

use crate::documents::matrix::By;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub by: By,
    pub one_pair_at_a_time: bool,
    /// A pair below this fraction of the median pair is named.
    pub outlier: f64,
    /// Round trips (latency) are timed at sizes up to this.
    pub latency_max_bytes: u64,
    /// The pair rules of `matrix --junit` (completion, correct bytes and no slow pair always).
    pub rules: PairRules,
}

/// Rules on a pair matrix; completion, correct bytes and no outlier pair always apply to one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairRules {
    /// Minimum one-way bandwidth of every pair at the largest size, GB/s.
    pub min_pair_bw: Option<f64>,
    /// Maximum latency (half a round trip) of every pair at the smallest size, microseconds.
    pub max_pair_latency_us: Option<f64>,
}

impl PairRules {
    /// The thresholds as the `--min-busbw` family takes them: finite and above zero.
    pub fn check(&self) -> Result<(), crate::exit::Failure> {
        if let Some(gbps) = self.min_pair_bw {
            crate::flags::positive("--min-pair-bw", gbps, "GB/s")?;
        }
        if let Some(us) = self.max_pair_latency_us {
            crate::flags::positive("--max-pair-latency-us", us, "microseconds")?;
        }
        Ok(())
    }
}

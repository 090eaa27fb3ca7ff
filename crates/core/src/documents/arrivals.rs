//! `sweep --stragglers` in the record: per point, when each rank entered and left single calls
//! on a common clock (`Arrivals`), and the run's straggler read from them. The timing itself is
//! `crate::arrivals` (the harness).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrivals {
    pub calls: usize,
    /// Per rank: in how many calls it entered last.
    pub last: Vec<usize>,
    /// Per rank: median seconds it entered after the median rank (negative: before).
    pub late_s: Vec<f64>,
    /// Per rank: median seconds from entering a call to leaving it.
    pub inside_s: Vec<f64>,
    /// Largest spread of the clock offsets between rounds (what the common clock is worth);
    /// 0 when every rank reads rank 0's clock (one host).
    pub clock_uncertainty_s: f64,
}

impl Arrivals {
    /// The rank that holds the collective up: last in most calls (60% or more), and entering
    /// later than half of its own time inside the call (what the call costs it without
    /// waiting) and at least 5 µs after the median rank.
    pub fn straggler(&self) -> Option<usize> {
        let n = self.last.len();
        if n < 2 || self.calls == 0 {
            return None;
        }
        let (rank, &count) = self.last.iter().enumerate().max_by_key(|(_, c)| **c)?;
        let late = self.late_s[rank];
        (count * 10 >= self.calls * 6
            && late >= 5e-6
            && late >= 0.5 * self.inside_s[rank]
            && late > self.clock_uncertainty_s)
            .then_some(rank)
    }
}

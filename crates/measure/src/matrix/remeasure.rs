//! The second look at a matrix's outliers: each suspect cell measured again alone, so a pair
//! that only shared the machine with its neighbours, or met a burst of other work, is not
//! named.

use super::run::{self, Context, Step};
use crate::backend::Communicator;
use crate::documents::matrix::{analysis, Direction, Endpoint, PairMeasurement};
use crate::exit::Failure;

/// Times a suspect is measured alone before it is taken for slow.
const ALONE_TRIES: usize = 3;

/// A cell far below the median may only have shared the cores, the memory bus or a switch
/// with the pairs beside it, or have met a burst of someone else's work: measure each such
/// cell again with nothing else moving, up to `ALONE_TRIES` times, and keep the first
/// measurement that is no longer an outlier, else the best. A bad link stays slow every time;
/// interference seldom lasts.
pub(super) fn outliers_alone(
    comm: &mut dyn Communicator,
    cx: &Context<'_>,
    endpoints: &[Endpoint],
    cells: &[PairMeasurement],
) -> Result<(), Failure> {
    let fraction = cx.options.outlier;
    let mut suspects: Vec<PairMeasurement> = analysis::outlier_cells(cells, fraction)
        .into_iter()
        .map(|(m, _)| m.clone())
        .collect();
    suspects.sort_by_key(|m| m.size_bytes);
    // Every rank holds the same cells and measurements, so all take the same decisions.
    let mut current = cells.to_vec();
    let mut prepared = None;
    for m in suspects {
        if prepared != Some(m.size_bytes) {
            run::begin_size(comm, m.size_bytes)?;
            prepared = Some(m.size_bytes);
        }
        let step = Step {
            direction: m.direction,
            round: m.round,
            units: vec![(m.from, m.to, run::rank_pairs(endpoints, m.from, m.to))],
        };
        let mut best: Option<Vec<PairMeasurement>> = None;
        for _ in 0..ALONE_TRIES {
            let mut again = run::measure_step(comm, cx, endpoints, &step, m.size_bytes)?;
            for cell in &mut again {
                cell.remeasured = true;
            }
            // Wrong bytes are kept whatever the speed: the record must show them.
            let wrong = again.iter().any(|c| c.wrong_bytes > 0);
            if wrong || best.as_ref().is_none_or(|b| faster(&again, b)) {
                best = Some(again);
            }
            let kept = best.as_deref().unwrap_or_default();
            run::after_step(comm, cx, kept, true)?;
            replace(&mut current, kept);
            let still_slow = analysis::outlier_cells(&current, fraction)
                .iter()
                .any(|(o, _)| same_cell(o, &m));
            if wrong || !still_slow {
                break;
            }
        }
    }
    Ok(())
}

fn same_cell(a: &PairMeasurement, b: &PairMeasurement) -> bool {
    (a.from, a.to, a.direction, a.size_bytes) == (b.from, b.to, b.direction, b.size_bytes)
}

/// Put `again` in place of the cells it measured again.
fn replace(cells: &mut [PairMeasurement], again: &[PairMeasurement]) {
    for new in again {
        if let Some(old) = cells.iter_mut().find(|c| same_cell(c, new)) {
            *old = new.clone();
        }
    }
}

/// Whether `a` ran faster than `b` (the same cells): less time at a latency, else more
/// bandwidth, summed over the cells.
fn faster(a: &[PairMeasurement], b: &[PairMeasurement]) -> bool {
    let score = |cells: &[PairMeasurement]| -> f64 {
        cells
            .iter()
            .map(|c| match c.direction {
                Direction::Latency => -c.time_s,
                _ => c.bw_bytes_per_s,
            })
            .sum()
    };
    score(a) > score(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::StopReason;

    fn cell(from: usize, to: usize, direction: Direction, bw: f64, time_s: f64) -> PairMeasurement {
        PairMeasurement {
            from,
            to,
            size_bytes: 1 << 24,
            direction,
            round: 0,
            concurrent_pairs: 1,
            rank_pairs: 1,
            time_s,
            bw_bytes_per_s: bw,
            iters_per_sample: 1,
            samples: 4,
            ci_rel_half_width: 0.01,
            stop_reason: StopReason::Converged,
            wrong_bytes: 0,
            remeasured: false,
        }
    }

    #[test]
    fn faster_means_more_bandwidth_or_less_latency() {
        let one_way = |bw| [cell(0, 1, Direction::OneWay, bw, 1e-3)];
        assert!(faster(&one_way(10e9), &one_way(5e9)));
        assert!(!faster(&one_way(5e9), &one_way(10e9)));
        let latency = |t| [cell(0, 1, Direction::Latency, 0.0, t)];
        assert!(faster(&latency(1e-6), &latency(3e-6)));
        assert!(!faster(&latency(3e-6), &latency(1e-6)));
    }

    #[test]
    fn a_cell_measured_again_takes_the_place_of_its_first_pass_only() {
        let mut cells = vec![
            cell(0, 1, Direction::OneWay, 10e9, 1e-3),
            cell(1, 0, Direction::OneWay, 2e9, 1e-3),
            cell(1, 0, Direction::TwoWay, 2e9, 1e-3),
        ];
        let mut again = cell(1, 0, Direction::OneWay, 9e9, 1e-3);
        again.remeasured = true;
        replace(&mut cells, std::slice::from_ref(&again));
        assert_eq!(cells[1], again);
        assert!(!cells[0].remeasured && !cells[2].remeasured);
        assert_eq!(cells[2].bw_bytes_per_s, 2e9);
    }
}

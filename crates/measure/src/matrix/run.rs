//! The matrix as one rank runs it: agree who is where, then for every size, round and
//! direction time this rank's part of the step (or wait, idle, for the others); rank 0 keeps
//! the document and writes it after every step.

use super::options::Options as MatrixOptions;
use crate::backend::{Communicator, PairRole, PointSpec};
use crate::documents::matrix::{By, Direction, Endpoint, PairMeasurement};
use crate::exit::Failure;
use crate::fault_injection::Injected;
use crate::model::RankInfo;
use crate::plan::Plan;
use crate::stats::{summarize, StopRule};
use crate::units::format_size;
use crate::watchdog::Watchdog;

/// A pair of endpoints in a step: (from endpoint, to endpoint, its rank pairs (sender or
/// starter, receiver or answerer)).
type Unit = (usize, usize, Vec<(usize, usize)>);

/// Everything that moves at once in one step: for each pair of endpoints, its rank pairs.
pub(super) struct Step {
    pub(super) direction: Direction,
    pub(super) round: usize,
    pub(super) units: Vec<Unit>,
}

impl Step {
    fn roles(&self, nranks: usize) -> Vec<PairRole> {
        let mut roles = vec![PairRole::Idle; nranks];
        for (_, _, pairs) in &self.units {
            for &(a, b) in pairs {
                let (ra, rb) = match self.direction {
                    Direction::OneWay => (PairRole::Send { to: b }, PairRole::Recv { from: a }),
                    Direction::TwoWay => (PairRole::Both { peer: b }, PairRole::Both { peer: a }),
                    Direction::Latency => (PairRole::Ping { peer: b }, PairRole::Pong { peer: a }),
                };
                roles[a] = ra;
                roles[b] = rb;
            }
        }
        roles
    }

    /// "one-way rank 0 -> rank 3, rank 1 -> rank 2 at 16MB (round 2)", for the watchdog.
    fn describe(&self, endpoints: &[Endpoint], size: u64) -> String {
        let arrow = if self.direction == Direction::OneWay {
            "->"
        } else {
            "<->"
        };
        let pairs: Vec<String> = self
            .units
            .iter()
            .map(|(a, b, _)| format!("{} {arrow} {}", endpoints[*a].label, endpoints[*b].label))
            .collect();
        format!(
            "matrix {} {} at {} (round {})",
            self.direction.name(),
            pairs.join(", "),
            format_size(size),
            self.round + 1
        )
    }
}

/// The ends of the pairs: one per rank, or one per host with its ranks in rank order. A rank's
/// GPU is labelled by its CUDA ordinal here (`GPU1`), or `rank N` where ordinals repeat on a
/// host (one GPU per process: every process calls its GPU 0); `label_gpus` then names them
/// as the topology does.
pub fn endpoints(by: By, ranks: &[RankInfo]) -> Vec<Endpoint> {
    let ordinal = |r: &RankInfo| -> Option<usize> {
        r.device
            .as_deref()
            .and_then(|d| d.split_whitespace().next()?.parse::<usize>().ok())
    };
    let one_host = ranks
        .iter()
        .all(|o| ranks.first().is_some_and(|f| f.host == o.host));
    match by {
        By::Rank => ranks
            .iter()
            .map(|r| {
                let gpu = ordinal(r).filter(|g| {
                    ranks
                        .iter()
                        .filter(|o| o.host == r.host && ordinal(o) == Some(*g))
                        .count()
                        == 1
                });
                let label = match gpu {
                    Some(g) if one_host => format!("GPU{g}"),
                    Some(g) => format!("{}:GPU{g}", r.host),
                    None => format!("rank {}", r.rank),
                };
                Endpoint {
                    label,
                    host: r.host.clone(),
                    ranks: vec![r.rank],
                    device: r.device.clone(),
                }
            })
            .collect(),
        By::Node => {
            let mut nodes: Vec<Endpoint> = Vec::new();
            for r in ranks {
                match nodes.iter_mut().find(|n| n.host == r.host) {
                    Some(n) => n.ranks.push(r.rank),
                    None => nodes.push(Endpoint {
                        label: r.host.clone(),
                        host: r.host.clone(),
                        ranks: vec![r.rank],
                        device: None,
                    }),
                }
            }
            nodes
        }
    }
}

/// Every step of the run at one size, in order: per round, one way, the other way, both
/// ways, and the round trip (at small sizes).
pub(super) fn steps(endpoints: &[Endpoint], options: &MatrixOptions, size: u64) -> Vec<Step> {
    let rounds = if options.one_pair_at_a_time {
        super::schedule::one_at_a_time(endpoints.len())
    } else {
        super::schedule::round_robin(endpoints.len())
    };
    let mut steps = Vec::new();
    for (round, pairs) in rounds.iter().enumerate() {
        let units = |flip: bool| {
            pairs
                .iter()
                .map(|&(a, b)| {
                    let (x, y) = if flip { (b, a) } else { (a, b) };
                    (x, y, rank_pairs(endpoints, x, y))
                })
                .collect::<Vec<_>>()
        };
        steps.push(Step {
            direction: Direction::OneWay,
            round,
            units: units(false),
        });
        steps.push(Step {
            direction: Direction::OneWay,
            round,
            units: units(true),
        });
        steps.push(Step {
            direction: Direction::TwoWay,
            round,
            units: units(false),
        });
        if size <= options.latency_max_bytes {
            steps.push(Step {
                direction: Direction::Latency,
                round,
                units: units(false),
            });
        }
    }
    steps
}

/// How many steps the whole run has (for the progress bar).
pub fn total_steps(endpoints: &[Endpoint], options: &MatrixOptions, sizes: &[u64]) -> u64 {
    sizes
        .iter()
        .map(|&s| steps(endpoints, options, s).len() as u64)
        .sum()
}

/// What a rank sends: a block of a prime length (so it does not line up with any power-of-two
/// size), distinct per rank, repeated; a message from the wrong peer or a stale buffer is
/// caught, and checking is a slice comparison per block.
const PATTERN_LEN: usize = 4093;

fn pattern(rank: usize) -> Vec<u8> {
    (0..PATTERN_LEN)
        .map(|i| (rank.wrapping_mul(151) ^ i.wrapping_mul(7)).wrapping_add(i >> 8) as u8)
        .collect()
}

fn fill(buf: &mut [u8], rank: usize) {
    let block = pattern(rank);
    for chunk in buf.chunks_mut(PATTERN_LEN) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// Bytes of `buf` that differ from what `rank` sends.
fn count_wrong(buf: &[u8], rank: usize) -> u64 {
    let block = pattern(rank);
    buf.chunks(PATTERN_LEN)
        .filter(|c| *c != &block[..c.len()])
        .map(|c| c.iter().zip(&block).filter(|(a, b)| a != b).count() as u64)
        .sum()
}

/// What each rank needs from the run besides its communicator.
pub struct Context<'a> {
    pub plan: &'a Plan,
    pub options: &'a MatrixOptions,
    pub watchdog: Option<&'a Watchdog>,
    pub out: Option<&'a super::out::MatrixOut>,
}

/// Buffers for `size`, the send buffer holding this rank's pattern.
pub(super) fn begin_size(comm: &mut dyn Communicator, size: u64) -> Result<(), Failure> {
    comm.prepare(&PointSpec::pair(size as usize))
        .map_err(|e| crate::backend::failure(&format!("matrix at {}", format_size(size)), e))?;
    let me = comm.rank();
    fill(&mut comm.buffers().send[..size as usize], me);
    Ok(())
}

/// Rank 0 records the step's cells (replacing the first pass's when `again`); no rank starts
/// the next step before they are on disk.
pub(super) fn after_step(
    comm: &mut dyn Communicator,
    cx: &Context<'_>,
    cells: &[PairMeasurement],
    again: bool,
) -> Result<(), Failure> {
    if let Some(out) = cx.out {
        out.record(cells.to_vec(), again)?;
    }
    comm.allgather_bytes(&[])
        .map_err(|e| crate::backend::failure("after a matrix step", e))?;
    Ok(())
}

/// Local rank i of one endpoint meets local rank i of the other.
pub(super) fn rank_pairs(endpoints: &[Endpoint], a: usize, b: usize) -> Vec<(usize, usize)> {
    endpoints[a]
        .ranks
        .iter()
        .copied()
        .zip(endpoints[b].ranks.iter().copied())
        .collect()
}

/// This rank's part of one iteration batch, with a test's injected slow link applied.
fn timed(
    comm: &mut dyn Communicator,
    role: PairRole,
    iters: usize,
    injected: &Injected,
    what: &str,
) -> Result<f64, Failure> {
    let t = comm
        .exchange(role, iters)
        .map_err(|e| crate::backend::failure(what, e))?;
    // One end of a slowed pair holds, for the time its own exchange took: were both to hold,
    // each would wait out the other's hold inside its next exchange and hold for that too, and
    // the delay would grow without bound.
    let factor = role
        .peer()
        .filter(|&p| comm.rank() < p)
        .map_or(1.0, |p| injected.slowdown(comm.rank(), p));
    if factor > 1.0 {
        let start = std::time::Instant::now();
        Injected::hold(t * (factor - 1.0));
        return Ok(t + start.elapsed().as_secs_f64());
    }
    Ok(t)
}

/// Time one step on every rank; every rank returns the same cells.
pub(super) fn measure_step(
    comm: &mut dyn Communicator,
    cx: &Context<'_>,
    endpoints: &[Endpoint],
    step: &Step,
    size: u64,
) -> Result<Vec<PairMeasurement>, Failure> {
    let s = &cx.plan.settings;
    let me = comm.rank();
    let role = step.roles(comm.nranks())[me];
    let what = step.describe(endpoints, size);
    let fail = |e| crate::backend::failure(&what, e);
    let arm = || {
        if let Some(w) = cx.watchdog {
            w.arm(&what);
        }
    };
    let bytes = size as usize;
    // The send buffer holds this rank's pattern since the size began (`fill`); the receive
    // buffer starts empty so a message that never arrived is caught.
    comm.buffers().recv[..bytes].fill(0);
    comm.upload().map_err(fail)?;
    arm();
    comm.begin_pairs(role).map_err(fail)?;
    crate::fault_injection::strike(
        cx.plan.fault.as_ref(),
        me,
        size,
        crate::fault_injection::Site::BeforeTiming { what: &what },
    );

    arm();
    timed(comm, role, s.warmup_iters.max(1), &cx.plan.injected, &what)?;
    let iters = match s.iters_per_sample {
        Some(n) => n.max(1),
        None => {
            let one = timed(comm, role, 1, &cx.plan.injected, &what)?;
            let slowest = comm.allgather_f64(one).map_err(fail)?;
            let slowest = slowest.into_iter().fold(0.0, f64::max);
            ((s.sample_target_s / slowest.max(1e-9)) as usize).clamp(1, 1 << 16)
        }
    };

    let (samples, reasons) = sample(comm, cx, step, role, iters, &what)?;

    // What arrived is what was sent.
    comm.download().map_err(fail)?;
    let wrong = match role {
        PairRole::Recv { from: p }
        | PairRole::Both { peer: p }
        | PairRole::Ping { peer: p }
        | PairRole::Pong { peer: p } => count_wrong(&comm.buffers().recv[..bytes], p) as f64,
        PairRole::Send { .. } | PairRole::Idle => 0.0,
    };
    let wrong = comm.allgather_f64(wrong).map_err(fail)?;

    let concurrent = step.units.len();
    Ok(step
        .units
        .iter()
        .zip(samples.iter().zip(reasons))
        .map(|((from, to, pairs), (samples, reason))| {
            let stats = summarize(samples);
            let per_message = match step.direction {
                Direction::Latency => stats.median_s / 2.0,
                _ => stats.median_s,
            };
            let moved = size as f64
                * pairs.len() as f64
                * if step.direction == Direction::TwoWay {
                    2.0
                } else {
                    1.0
                };
            PairMeasurement {
                from: *from,
                to: *to,
                size_bytes: size,
                direction: step.direction,
                round: step.round,
                concurrent_pairs: concurrent,
                rank_pairs: pairs.len(),
                time_s: per_message,
                bw_bytes_per_s: if per_message > 0.0 {
                    moved / per_message
                } else {
                    0.0
                },
                iters_per_sample: iters,
                samples: samples.len(),
                ci_rel_half_width: stats.ci_rel_half_width,
                stop_reason: reason.unwrap_or(crate::stats::StopReason::Budget),
                wrong_bytes: pairs
                    .iter()
                    .flat_map(|&(a, b)| [wrong[a], wrong[b]])
                    .sum::<f64>() as u64,
                remeasured: false,
            }
        })
        .collect())
}

/// Per pair of a step: its samples, and why sampling stopped.
type Sampled = (Vec<Vec<f64>>, Vec<Option<crate::stats::StopReason>>);

/// Time the step in batches until every pair's interval is tight or its budget spent; per
/// pair, its samples (seconds per iteration, the slower end's) and why sampling stopped.
fn sample(
    comm: &mut dyn Communicator,
    cx: &Context<'_>,
    step: &Step,
    role: PairRole,
    iters: usize,
    what: &str,
) -> Result<Sampled, Failure> {
    let s = &cx.plan.settings;
    let fail = |e| crate::backend::failure(what, e);
    let arm = || {
        if let Some(w) = cx.watchdog {
            w.arm(what);
        }
    };
    let rule = StopRule {
        min_samples: s.min_samples,
        max_samples: s.max_samples,
        target_rel_ci: s.target_rel_ci,
        budget_s: s.point_budget_s,
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); step.units.len()];
    let mut reasons = vec![None; step.units.len()];
    let mut measured_s = 0.0;
    // Samples in batches, exchanged once per batch: the pairs run undisturbed by the
    // harness's own messages, and ranks sitting the step out wait instead of polling.
    let mut batch = s.min_samples.max(1);
    while reasons.iter().any(Option::is_none) {
        arm();
        let mut mine = Vec::with_capacity(batch);
        for _ in 0..batch {
            mine.push(timed(comm, role, iters, &cx.plan.injected, what)? / iters as f64);
        }
        let all = comm.allgather_f64s(&mine).map_err(fail)?;
        for k in 0..batch {
            let at = |r: usize| all[r].get(k).copied().unwrap_or(f64::NAN);
            measured_s += (0..all.len()).map(at).fold(0.0, f64::max) * iters as f64;
            for (u, (_, _, pairs)) in step.units.iter().enumerate() {
                // A pair of nodes is as fast as its slowest rank pair.
                let slowest = pairs
                    .iter()
                    .flat_map(|&(a, b)| [at(a), at(b)])
                    .fold(0.0, f64::max);
                samples[u].push(slowest);
            }
        }
        for (u, reason) in reasons.iter_mut().enumerate() {
            if reason.is_none() {
                *reason = rule.decide(&samples[u], measured_s);
            }
        }
        let taken = samples.first().map_or(0, Vec::len);
        batch = (taken / 2)
            .max(2)
            .min(s.max_samples.saturating_sub(taken).max(1));
    }

    Ok((samples, reasons))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: usize, host: &str) -> RankInfo {
        RankInfo {
            rank: r,
            host: host.into(),
            pid: 1,
            device: None,
            group: 0,
        }
    }

    #[test]
    fn nodes_gather_their_ranks_and_pair_local_rank_with_local_rank() {
        let ranks = [rank(0, "a"), rank(1, "b"), rank(2, "a"), rank(3, "b")];
        let nodes = endpoints(By::Node, &ranks);
        assert_eq!(nodes.len(), 2);
        assert_eq!(
            (nodes[0].ranks.clone(), nodes[1].ranks.clone()),
            (vec![0, 2], vec![1, 3])
        );
        let options = MatrixOptions {
            by: By::Node,
            one_pair_at_a_time: false,
            outlier: 0.5,
            latency_max_bytes: 64,
            rules: Default::default(),
        };
        let steps = steps(&nodes, &options, 8);
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[0].units[0].2, vec![(0, 1), (2, 3)]);
        assert_eq!(steps[1].units[0].2, vec![(1, 0), (3, 2)]);
        let roles = steps[1].roles(4);
        assert_eq!(roles[1], PairRole::Send { to: 0 });
        assert_eq!(roles[0], PairRole::Recv { from: 1 });
    }

    #[test]
    fn gpus_are_labelled_as_the_topology_numbers_them_found_by_pci_address() {
        // One GPU per process: each calls its GPU 0; the addresses tell which they are.
        let on = |r: usize, bus: &str| RankInfo {
            device: Some(format!(" 0 [0000:{bus}:00] NVIDIA H100")),
            ..rank(r, "h")
        };
        let ranks = [on(0, "38"), on(1, "18"), on(2, "c1")];
        let mut eps = endpoints(By::Rank, &ranks);
        let labels = |eps: &[Endpoint]| eps.iter().map(|e| e.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&eps), ["rank 0", "rank 1", "rank 2"]);
        let mut t = crate::documents::topology::Topology::default();
        for (i, bus) in ["18", "28", "38"].iter().enumerate() {
            t.devices.push(format!("GPU{i}"));
            t.info.entry(format!("GPU{i}")).or_default().pci_bus_id =
                Some(format!("0000:{bus}:00.0"));
        }
        t.links.push(("GPU2".into(), "GPU0".into(), "SYS".into()));
        super::super::out::label_gpus(&mut eps, Some(&t), "h");
        // Rank 2's GPU is not in the topology: it keeps its label.
        assert_eq!(labels(&eps), ["GPU2", "GPU0", "rank 2"]);
        assert_eq!(eps[0].gpu_row(&t, "h").as_deref(), Some("GPU2"));
        assert_eq!(eps[0].gpu_row(&t, "elsewhere"), None);
        // Without addresses anywhere (older documents), the ordinal is the row.
        let old = RankInfo {
            device: Some(" 1 NVIDIA H100".into()),
            ..rank(0, "h")
        };
        let e = &endpoints(By::Rank, &[old])[0];
        let mut bare = t.clone();
        bare.info.clear();
        assert_eq!(e.gpu_row(&bare, "h").as_deref(), Some("GPU1"));
        assert_eq!(e.gpu_row(&t, "h"), None);
    }

    #[test]
    fn four_ranks_give_twelve_one_way_cells_and_six_of_each_other() {
        let ranks: Vec<RankInfo> = (0..4).map(|r| rank(r, "h")).collect();
        let eps = endpoints(By::Rank, &ranks);
        let options = MatrixOptions {
            by: By::Rank,
            one_pair_at_a_time: false,
            outlier: 0.5,
            latency_max_bytes: 64,
            rules: Default::default(),
        };
        let steps = steps(&eps, &options, 8);
        let count = |d: Direction| -> usize {
            steps
                .iter()
                .filter(|s| s.direction == d)
                .map(|s| s.units.len())
                .sum()
        };
        assert_eq!(count(Direction::OneWay), 12);
        assert_eq!(count(Direction::TwoWay), 6);
        assert_eq!(count(Direction::Latency), 6);
        assert!(
            steps.iter().all(|s| s.units.len() == 2),
            "rounds of two disjoint pairs"
        );
    }
}

//! A curve whose shape is wrong, whatever it is held against: busbw that falls over a range of
//! sizes where it should rise or hold (a protocol or algorithm switch that went wrong, a
//! CPU-side bottleneck, a buffer that stops fitting), or a plateau reached far later than NCCL's
//! model says. The per-size verdict holds each point against its own band and misses both: a
//! dip can stay inside a wide band, and a late plateau is `ok` at the largest sizes.

use crate::coll::{Collective, Placement};
use crate::documents::{ComparedPoint, ShapeFinding};
use crate::model::RunRecord;
use crate::units::format_size;
use std::collections::BTreeMap;

/// A point counts in a fall when its busbw is under this share of the best before it.
const FALL: f64 = 0.75;
/// Only sizes whose best-so-far is at least this share of the run's top busbw: below it the
/// curve is latency-bound and a dip is noise.
const BANDWIDTH_REGION: f64 = 0.3;
/// Reaching 90% of the top this many times later than the model does is a late plateau.
const LATE: f64 = 8.0;

/// (size, busbw) of one collective and placement, by size.
fn curve(r: &RunRecord, coll: Collective, placement: Placement) -> Vec<(u64, f64)> {
    let mut by_size: BTreeMap<u64, f64> = BTreeMap::new();
    for p in r
        .points
        .iter()
        .filter(|p| p.collective == coll && p.placement == placement && p.size_bytes > 0)
    {
        by_size.insert(p.size_bytes, p.busbw_from_time());
    }
    by_size.into_iter().collect()
}

/// Ranges of sizes where busbw is under FALL of the best before them, in the bandwidth
/// region: (index of the peak, first and last index of the fall, recovered after it).
fn falls(c: &[(u64, f64)]) -> Vec<(usize, usize, usize, bool)> {
    let top = c.iter().map(|x| x.1).fold(0.0, f64::max);
    let mut out = Vec::new();
    let mut peak = 0usize;
    let mut i = 1;
    while i < c.len() {
        if c[i - 1].1 >= c[peak].1 {
            peak = i - 1;
        }
        let best = c[peak].1;
        if best >= BANDWIDTH_REGION * top && c[i].1 < FALL * best {
            let start = i;
            while i + 1 < c.len() && c[i + 1].1 < FALL * best {
                i += 1;
            }
            let recovered = i + 1 < c.len();
            out.push((peak, start, i, recovered));
            peak = i;
        }
        i += 1;
    }
    out
}

/// Whether the other placement's curve falls over the same sizes (a dip both show is the
/// collective's, not one noisy sample).
fn confirmed(other: &[(u64, f64)], from: u64, to: u64, peak_size: u64) -> bool {
    if other.is_empty() {
        return true;
    }
    let at = |s: u64| other.iter().find(|x| x.0 == s).map(|x| x.1);
    let Some(peak) = at(peak_size) else {
        return true;
    };
    other
        .iter()
        .filter(|x| x.0 >= from && x.0 <= to)
        .any(|x| x.1 < FALL * peak)
}

fn gb(v: f64) -> String {
    format!("{:.1}", v / 1e9)
}

/// The findings of a run's curve; `model` holds the compared points (the expectation's curve at
/// each size) when there is one to say where the plateau should start.
pub fn findings(r: &RunRecord, model: &[ComparedPoint]) -> Vec<ShapeFinding> {
    let mut colls: Vec<Collective> = r.points.iter().map(|p| p.collective).collect();
    colls.sort();
    colls.dedup();
    let mut out = Vec::new();
    for coll in colls.into_iter().filter(|c| *c != Collective::Unknown) {
        let oop = curve(r, coll, Placement::OutOfPlace);
        let inp = curve(r, coll, Placement::InPlace);
        let (c, other) = if oop.len() >= inp.len() {
            (oop, inp)
        } else {
            (inp, oop)
        };
        if c.len() < 4 {
            continue;
        }
        for (peak, a, b, recovered) in falls(&c) {
            let (from, to) = (c[a].0, c[b].0);
            if !confirmed(&other, from, to, c[peak].0) {
                continue;
            }
            let low = c[a..=b].iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            let tail = if recovered {
                format!("and recovers at {}", format_size(c[b + 1].0))
            } else {
                "and does not recover by the largest size".to_string()
            };
            let span = if from == to {
                format!("at {}", format_size(from))
            } else {
                format!("over {}-{}", format_size(from), format_size(to))
            };
            out.push(ShapeFinding {
                collective: coll,
                kind: if recovered { "falls" } else { "falls-at-end" }.into(),
                from_bytes: from,
                to_bytes: to,
                sentence: format!(
                    "{coll} busbw falls from {} GB/s at {} to {} GB/s {span} {tail}, where it should rise or hold: {}",
                    gb(c[peak].1),
                    format_size(c[peak].0),
                    gb(low),
                    if recovered {
                        "an algorithm or protocol switch at the wrong size (NCCL_ALGO/NCCL_PROTO forced, a tuner plugin, a mis-set NCCL_*_THRESHOLD) or a CPU-side stall at those sizes"
                    } else {
                        "a buffer that stops fitting (registration, NVLS memory), the host or PCIe capping large transfers, or the run's largest sizes timing out of their cache"
                    }
                ),
            });
        }
        if let Some(f) = late_plateau(coll, &c, model) {
            out.push(f);
        }
    }
    out
}

/// The measured curve reaches 90% of its top LATE times later (or more) than the model's
/// curve reaches 90% of its own over the same sizes.
fn late_plateau(
    coll: Collective,
    c: &[(u64, f64)],
    model: &[ComparedPoint],
) -> Option<ShapeFinding> {
    let expected: Vec<(u64, f64)> = c
        .iter()
        .filter_map(|(s, _)| {
            model
                .iter()
                .find(|p| p.collective == coll && p.size_bytes == *s)
                .map(|p| (*s, p.expected_busbw_bytes_per_s))
        })
        .collect();
    if expected.len() < 4 {
        return None;
    }
    // The top is the second best size, so one high last point does not move the plateau.
    let reach = |curve: &[(u64, f64)]| {
        let mut v: Vec<f64> = curve.iter().map(|x| x.1).collect();
        v.sort_by(|a, b| b.total_cmp(a));
        let top = v.get(1).copied().unwrap_or(v[0]);
        curve.iter().find(|x| x.1 >= 0.9 * top).map(|x| x.0)
    };
    let (measured, modelled) = (reach(c)?, reach(&expected)?);
    let at = |s: u64| c.iter().find(|x| x.0 == s).map(|x| x.1).unwrap_or(0.0);
    let model_at = |s: u64| {
        expected
            .iter()
            .find(|x| x.0 == s)
            .map(|x| x.1)
            .unwrap_or(0.0)
    };
    // Where the model is at its plateau from the run's smallest size on, where it starts is
    // not seen (a paste of the large sizes only); and a run at or above three quarters of the
    // model where the model's plateau starts is not late, whatever it does after (2 nodes'
    // tree jump).
    if modelled <= expected[0].0
        || (measured as f64) < LATE * modelled as f64
        || at(modelled) >= 0.75 * model_at(modelled)
    {
        return None;
    }
    Some(ShapeFinding {
        collective: coll,
        kind: "late-plateau".into(),
        from_bytes: modelled,
        to_bytes: measured,
        sentence: format!(
            "{coll} reaches 90% of its top busbw only at {}, {}x later than NCCL's model reaches its plateau ({}: {} GB/s measured where the model gives {}): a per-call cost the model lacks (few channels, a CPU-bound proxy thread, a small NCCL_BUFFSIZE, a slow network plugin); mid sizes, where training buckets sit, run below what the fabric gives",
            format_size(measured),
            measured / modelled.max(1),
            format_size(modelled),
            gb(at(modelled)),
            gb(model_at(modelled))
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::nccl_tests::text_from;
    use crate::import::text::Input;

    const MIB: u64 = 1 << 20;

    /// An 8-rank all_reduce table with these (size, out-of-place, in-place busbw GB/s) rows.
    fn run(rows: &[(u64, f64, f64)]) -> RunRecord {
        let mut text = String::from("# nThread 1 nGpus 8 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n");
        for r in 0..8 {
            text += &format!("#  Rank {r:2} Group  0 Pid {:6} on node-0 device {r:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3\n", 1000 + r, 0x19 + r);
        }
        text += "#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
        for &(size, oop, inp) in rows {
            let cell = |busbw: f64| {
                let algbw = busbw / 1.75;
                let us = size as f64 / (algbw * 1e9) * 1e6;
                format!("{us:9.1}  {algbw:6.2}  {busbw:6.2}       0")
            };
            text += &format!(
                "{size:>12}  {:>12}     float     sum      -1  {}  {}\n",
                size / 4,
                cell(oop),
                cell(inp)
            );
        }
        text += "# Avg bus bandwidth    : 100\n";
        let input = Input::from_reader("run.txt", Box::new(std::io::Cursor::new(text))).unwrap();
        text_from(input, &mut |_| {}).unwrap()
    }

    #[test]
    fn a_dip_both_placements_show_is_found_with_its_sizes() {
        let r = run(&[
            (MIB, 20.0, 20.0),
            (4 * MIB, 60.0, 61.0),
            (16 * MIB, 120.0, 118.0),
            (64 * MIB, 70.0, 72.0),
            (256 * MIB, 150.0, 151.0),
            (1024 * MIB, 180.0, 181.0),
        ]);
        let f = findings(&r, &[]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "falls");
        assert_eq!((f[0].from_bytes, f[0].to_bytes), (64 * MIB, 64 * MIB));
        assert!(
            f[0].sentence.contains("recovers at 256 MiB"),
            "{}",
            f[0].sentence
        );
        assert!(
            f[0].sentence.contains("from 120.0 GB/s at 16 MiB to 70.0"),
            "{}",
            f[0].sentence
        );
    }

    #[test]
    fn one_noisy_sample_or_a_latency_bound_jitter_is_no_finding() {
        // Out-of-place dips at 64 MiB, in-place does not: a noisy sample.
        let noisy = run(&[
            (MIB, 20.0, 20.0),
            (4 * MIB, 60.0, 61.0),
            (16 * MIB, 120.0, 118.0),
            (64 * MIB, 70.0, 125.0),
            (256 * MIB, 150.0, 151.0),
        ]);
        assert!(findings(&noisy, &[]).is_empty());
        // Latency-bound sizes jitter far below the top: not a fall.
        let small = run(&[
            (1024, 0.5, 0.5),
            (4096, 0.2, 0.2),
            (MIB, 20.0, 20.0),
            (16 * MIB, 120.0, 118.0),
            (256 * MIB, 150.0, 151.0),
        ]);
        assert!(findings(&small, &[]).is_empty());
    }

    #[test]
    fn a_fall_at_the_largest_sizes_says_it_does_not_recover() {
        let r = run(&[
            (MIB, 30.0, 30.0),
            (16 * MIB, 150.0, 150.0),
            (256 * MIB, 160.0, 160.0),
            (1024 * MIB, 90.0, 95.0),
            (4096 * MIB, 80.0, 82.0),
        ]);
        let f = findings(&r, &[]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "falls-at-end");
        assert_eq!((f[0].from_bytes, f[0].to_bytes), (1024 * MIB, 4096 * MIB));
    }
}

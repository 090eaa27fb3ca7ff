//! Where a hang stopped, from Flight Recorder dumps of several ranks: in each process group,
//! the first collective (by its sequence number) that is not completed on every rank, and
//! why — ranks that never enqueued it (the ones everybody waits for), ranks that enqueued a
//! different collective, size or dtype under the same number, or every rank inside it and
//! none finished (NCCL or the fabric). The rules follow PyTorch's own analyzer
//! (`torch/distributed/flight_recorder`: entries matched by group and `collective_seq_id`,
//! "missing ranks", type/size/dtype mismatches). Point-to-point calls are left out.
//!
//! A dump keeps only the last entries (a ring buffer): a rank whose dump starts after a
//! sequence number, or that enqueued later ones, is taken to have completed it, as NCCL
//! completes one stream's work in order.

use crate::documents::trace::Hang;
use crate::import::trace::flight::{FlightEntry, FlightRank};
use std::collections::{BTreeMap, BTreeSet};

/// How one rank stands with one sequence number.
#[derive(Debug, Clone, PartialEq)]
enum Standing<'a> {
    Entry(&'a FlightEntry),
    /// Older than its buffer, or behind later entries: done.
    Past,
    /// Never enqueued: the rank is behind.
    Missing,
}

fn standing<'a>(entries: &BTreeMap<u64, &'a FlightEntry>, seq: u64) -> Standing<'a> {
    if let Some(e) = entries.get(&seq) {
        return Standing::Entry(e);
    }
    match (entries.keys().next(), entries.keys().next_back()) {
        (Some(&first), Some(&last)) if seq < first || seq < last => Standing::Past,
        _ => Standing::Missing,
    }
}

/// The group's hang, if one sequence number is not done on every rank of it.
fn group_hang(group: &str, ranks: &BTreeMap<usize, BTreeMap<u64, &FlightEntry>>) -> Option<Hang> {
    let all: BTreeSet<u64> = ranks.values().flat_map(|m| m.keys().copied()).collect();
    for &seq in &all {
        let stand: Vec<(usize, Standing)> =
            ranks.iter().map(|(r, m)| (*r, standing(m, seq))).collect();
        let done = |s: &Standing| match s {
            Standing::Past => true,
            Standing::Entry(e) => e.state == "completed",
            Standing::Missing => false,
        };
        if stand.iter().all(|(_, s)| done(s)) {
            continue;
        }
        let present: Vec<(usize, &FlightEntry)> = stand
            .iter()
            .filter_map(|(r, s)| match s {
                Standing::Entry(e) => Some((*r, *e)),
                _ => None,
            })
            .collect();
        let missing: Vec<usize> = stand
            .iter()
            .filter(|(_, s)| *s == Standing::Missing)
            .map(|(r, _)| *r)
            .collect();
        let name = present
            .first()
            .map(|(_, e)| e.profiling_name.clone())
            .unwrap_or_default();
        let (cause, mismatched) = mismatch(&present);
        let states: Vec<String> = stand
            .iter()
            .map(|(r, s)| match s {
                Standing::Entry(e) => format!("{r}: {}", e.state),
                Standing::Past => format!("{r}: past it"),
                Standing::Missing => format!("{r}: not enqueued"),
            })
            .collect();
        let cause = if !missing.is_empty() {
            "missing ranks".to_string()
        } else if let Some(c) = cause {
            c
        } else if present.iter().all(|(_, e)| e.state == "started") {
            "stuck in NCCL".to_string()
        } else {
            "not started".to_string()
        };
        let summary = describe(
            group,
            seq,
            &name,
            &cause,
            &missing,
            &mismatched,
            ranks.len(),
        );
        return Some(Hang {
            group: group.to_string(),
            collective_seq_id: seq,
            profiling_name: name,
            cause,
            missing_ranks: missing,
            mismatched_ranks: mismatched,
            states,
            summary,
        });
    }
    None
}

/// A disagreement among the ranks that enqueued the same number: the minority named.
fn mismatch(present: &[(usize, &FlightEntry)]) -> (Option<String>, Vec<usize>) {
    type Key = fn(&FlightEntry) -> String;
    let checks: [(&str, Key); 3] = [
        ("collective type mismatch", |e| e.profiling_name.clone()),
        ("size mismatch", |e| format!("{:?}", e.input_sizes)),
        ("dtype mismatch", |e| format!("{:?}", e.input_dtypes)),
    ];
    for (what, key) in checks {
        let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (r, e) in present {
            by.entry(key(e)).or_default().push(*r);
        }
        if by.len() > 1 {
            let majority = by.values().map(Vec::len).max().unwrap_or(0);
            let odd: Vec<usize> = by
                .values()
                .filter(|v| v.len() < majority)
                .flatten()
                .copied()
                .collect();
            let odd = if odd.is_empty() {
                by.values().skip(1).flatten().copied().collect()
            } else {
                odd
            };
            return (Some(what.to_string()), odd);
        }
    }
    (None, Vec::new())
}

fn list(r: &[usize]) -> String {
    r.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(
    group: &str,
    seq: u64,
    name: &str,
    cause: &str,
    missing: &[usize],
    odd: &[usize],
    n: usize,
) -> String {
    let what = format!("{name} #{seq} of process group {group}");
    match cause {
        "missing ranks" => format!(
            "rank(s) {} never enqueued {what}; the other {} of {n} ranks wait for them: look at what those ranks were doing (their stacks, a slow data loader, an exception, a different code path)",
            list(missing),
            n - missing.len()
        ),
        "stuck in NCCL" => format!(
            "every rank entered {what} and none completed it: the hang is inside NCCL or the fabric (a dead link, a peer's GPU), not in the program's order"
        ),
        "not started" => format!("{what} was enqueued on every rank but has not started on some: the GPU stream before it is still busy"),
        other => format!("{other} at {what}: rank(s) {} enqueued something else under the same number, a program that calls collectives in a different order or with other shapes on some ranks", list(odd)),
    }
}

/// The first hang over all groups (the one that stopped earliest), and notes.
pub fn find(dumps: &[FlightRank]) -> (Option<Hang>, Vec<String>) {
    let mut notes = Vec::new();
    let mut groups: BTreeMap<String, BTreeMap<usize, BTreeMap<u64, &FlightEntry>>> =
        BTreeMap::new();
    let mut seen: BTreeMap<usize, &str> = BTreeMap::new();
    for (i, d) in dumps.iter().enumerate() {
        let rank = d.rank.unwrap_or(i);
        if let Some(first) = seen.insert(rank, &d.source) {
            notes.push(format!(
                "{} and {first} are both rank {rank}: only {first} is read",
                d.source
            ));
            seen.insert(rank, first);
            continue;
        }
        if d.rank.is_none() {
            notes.push(format!("{}: names no rank (in its file name or its content); taken as rank {i}, its place among the dumps", d.source));
        }
        if d.dropped > 0 {
            notes.push(format!(
                "{}: {} entries lack their name, state, group or sequence number and were left out",
                d.source, d.dropped
            ));
        }
        for e in d.entries.iter().filter(|e| !e.is_p2p) {
            if let Some(seq) = e.collective_seq_id {
                groups
                    .entry(e.group.clone())
                    .or_default()
                    .entry(rank)
                    .or_default()
                    .insert(seq, e);
            }
        }
    }
    // Ranks a group has that sent no dump.
    let have: BTreeSet<usize> = dumps
        .iter()
        .enumerate()
        .map(|(i, d)| d.rank.unwrap_or(i))
        .collect();
    for d in dumps {
        for g in d.groups.values() {
            let lacking: Vec<usize> = g
                .ranks
                .iter()
                .filter(|r| !have.contains(r))
                .copied()
                .collect();
            if !lacking.is_empty() && groups.contains_key(&g.name) {
                notes.push(format!(
                    "process group {}: no dump from rank(s) {} of its {}",
                    g.name,
                    list(&lacking),
                    g.ranks.len()
                ));
            }
        }
    }
    notes.sort();
    notes.dedup();
    let mut hangs: Vec<(Option<u64>, Hang)> = Vec::new();
    for (g, ranks) in &groups {
        if ranks.len() < 2 {
            continue;
        }
        if let Some(h) = group_hang(g, ranks) {
            let created = ranks
                .values()
                .filter_map(|m| m.get(&h.collective_seq_id)?.time_created_ns)
                .min();
            hangs.push((created, h));
        }
    }
    hangs.sort_by_key(|(t, _)| t.unwrap_or(u64::MAX));
    if hangs.is_empty() && !groups.is_empty() {
        notes.push("every collective in the dumps completed on every rank that has it".into());
    }
    (hangs.into_iter().next().map(|(_, h)| h), notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::trace::flight;

    fn dump(rank: usize, entries: &[(u64, &str, &str, u64)]) -> FlightRank {
        let v = serde_json::json!({
            "version": "2.4",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "entries": entries.iter().map(|(seq, name, state, n)| serde_json::json!({
                "record_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
                "profiling_name": name, "time_created_ns": 1000 * seq,
                "input_sizes": [[n]], "input_dtypes": ["Float"], "output_sizes": [[n]],
                "output_dtypes": ["Float"], "state": state, "is_p2p": false,
                "retired": false, "timeout_ms": 600000, "frames": []
            })).collect::<Vec<_>>()
        });
        flight::from_value(&format!("nccl_trace_rank_{rank}"), &v).unwrap()
    }

    #[test]
    fn a_rank_that_never_enqueued_the_collective_is_named() {
        let ok = [
            (1, "nccl:all_reduce", "completed", 10),
            (2, "nccl:all_reduce", "started", 10),
        ];
        let behind = [(1, "nccl:all_reduce", "completed", 10)];
        let dumps = vec![dump(0, &ok), dump(1, &ok), dump(2, &behind), dump(3, &ok)];
        let (h, _) = find(&dumps);
        let h = h.unwrap();
        assert_eq!(
            (h.collective_seq_id, h.cause.as_str()),
            (2, "missing ranks")
        );
        assert_eq!(h.missing_ranks, vec![2]);
        assert!(
            h.summary
                .starts_with("rank(s) 2 never enqueued nccl:all_reduce #2"),
            "{}",
            h.summary
        );
    }

    #[test]
    fn a_size_mismatch_names_the_odd_rank_and_all_started_is_nccl() {
        let a = [(5, "nccl:all_reduce", "scheduled", 10)];
        let b = [(5, "nccl:all_reduce", "scheduled", 12)];
        let (h, _) = find(&[dump(0, &a), dump(1, &a), dump(2, &b), dump(3, &a)]);
        let h = h.unwrap();
        assert_eq!(
            (h.cause.as_str(), h.mismatched_ranks.clone()),
            ("size mismatch", vec![2])
        );
        let s = [(5, "nccl:all_gather", "started", 10)];
        let (h, _) = find(&[dump(0, &s), dump(1, &s), dump(2, &s), dump(3, &s)]);
        assert_eq!(h.unwrap().cause, "stuck in NCCL");
        let done = [(5, "nccl:all_gather", "completed", 10)];
        let (h, notes) = find(&[dump(0, &done), dump(1, &done)]);
        assert_eq!(h, None);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("no dump from rank(s) 2, 3")),
            "{notes:?}"
        );
    }
}

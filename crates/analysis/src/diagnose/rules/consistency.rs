//! Ranks that should agree and do not: the NCCL build each host runs, told by which releases
//! print the very messages it printed (the catalogue knows each message's releases, so two
//! hosts whose messages no single release prints together run different NCCL builds), and the
//! choices each host's lines state — the network and plugin, the `NCCL_*` variables NCCL read.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::{Evidence, Hit};
use crate::import::messages::catalogue;
use std::collections::{BTreeMap, BTreeSet};

const SHOWN: usize = 8;

/// A host's NCCL releases (tag indexes) and the lines that narrowed them.
type Releases = (BTreeSet<usize>, Vec<Evidence>);
/// fact → value → (who stated it, a line).
type Stated<'a> = BTreeMap<&'a str, BTreeMap<&'a str, Vec<(&'a str, &'a Evidence)>>>;

/// Per host: the NCCL releases (tag indexes) that print every NCCL message the host printed,
/// with one line that narrowed it.
fn releases_by_host(inp: &Inputs) -> BTreeMap<String, Releases> {
    let c = catalogue();
    let mut by_host: BTreeMap<String, Releases> = BTreeMap::new();
    for l in inp.logs.iter().flat_map(|log| log.messages.lines.iter()) {
        let e = &c.entries[l.entry()];
        let Some((host, _)) = &l.process else {
            continue;
        };
        if c.projects[e.project].name != "nccl" {
            continue;
        }
        let tags: BTreeSet<usize> = e.tags.iter().copied().collect();
        match by_host.get_mut(host) {
            None => {
                by_host.insert(host.clone(), (tags, vec![l.evidence.clone()]));
            }
            Some((have, lines)) => {
                let narrowed: BTreeSet<usize> = have.intersection(&tags).copied().collect();
                if narrowed.len() < have.len() {
                    lines.push(l.evidence.clone());
                }
                *have = narrowed;
            }
        }
    }
    by_host
}

fn releases(tags: &BTreeSet<usize>) -> String {
    let c = catalogue();
    let names = &c.projects[0].tags;
    let first = tags.iter().next().and_then(|&t| names.get(t));
    let last = tags.iter().next_back().and_then(|&t| names.get(t));
    match (first, last) {
        (Some(a), Some(b)) if a == b => a.clone(),
        (Some(a), Some(b)) => format!("{a} … {b}"),
        _ => "?".into(),
    }
}

pub fn versions_differ(inp: &Inputs) -> Vec<Hit> {
    let by_host = releases_by_host(inp);
    // Hosts whose messages fit no release read here (older than the catalogue, or a build
    // with changes) say nothing either way.
    let placed: Vec<(&String, &Releases)> =
        by_host.iter().filter(|(_, (t, _))| !t.is_empty()).collect();
    for (i, (a, (ta, ea))) in placed.iter().enumerate() {
        for (b, (tb, eb)) in placed.iter().skip(i + 1) {
            if ta.is_disjoint(tb) {
                let mut evidence: Vec<Evidence> = ea.iter().take(SHOWN / 2).cloned().collect();
                evidence.extend(eb.iter().take(SHOWN / 2).cloned());
                return vec![Hit::new(
                    format!(
                        "Hosts run different NCCL builds: {a}'s messages are printed only by NCCL {}, {b}'s only by {}",
                        releases(ta),
                        releases(tb)
                    ),
                    evidence,
                )];
            }
        }
    }
    Vec::new()
}

pub fn choices_differ(inp: &Inputs) -> Vec<Hit> {
    // fact → value → hosts that stated it (with a line).
    let mut facts: Stated = BTreeMap::new();
    for log in &inp.logs {
        for (key, values) in &log.messages.facts {
            for (value, said) in values {
                let hosts = facts
                    .entry(key.as_str())
                    .or_default()
                    .entry(value.as_str())
                    .or_default();
                hosts.extend(
                    said.iter()
                        .filter(|(who, _)| !who.is_empty())
                        .map(|(w, e)| (w.as_str(), e)),
                );
            }
        }
    }
    // Hosts that stated some variable: the ones whose environment NCCL's log shows.
    let env_speakers: BTreeSet<&str> = facts
        .iter()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .flat_map(|(_, v)| v.values().flatten().map(|(w, _)| *w))
        .collect();
    let mut hits = Vec::new();
    for (key, values) in &facts {
        let by_host: BTreeMap<&str, BTreeSet<&str>> =
            values.iter().fold(BTreeMap::new(), |mut m, (value, said)| {
                for (who, _) in said {
                    m.entry(*who).or_insert_with(BTreeSet::new).insert(*value);
                }
                m
            });
        let mut distinct: BTreeSet<&BTreeSet<&str>> = by_host.values().collect();
        let unset: Vec<&str> = if key.starts_with("NCCL_") {
            env_speakers
                .iter()
                .filter(|h| !by_host.contains_key(*h))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let empty = BTreeSet::new();
        if !unset.is_empty() {
            distinct.insert(&empty);
        }
        if distinct.len() < 2 {
            continue;
        }
        let mut parts: Vec<String> = values
            .iter()
            .map(|(value, said)| {
                let hosts: BTreeSet<&str> = said.iter().map(|(w, _)| *w).collect();
                format!(
                    "{value} on {}",
                    hosts.into_iter().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        if !unset.is_empty() {
            parts.push(format!("not shown as set on {}", unset.join(", ")));
        }
        let evidence: Vec<Evidence> = values
            .values()
            .flat_map(|said| said.iter().take(SHOWN / 2).map(|(_, e)| (*e).clone()))
            .take(SHOWN)
            .collect();
        hits.push(Hit::new(
            format!("Hosts disagree on {key}: {}", parts.join("; ")),
            evidence,
        ));
    }
    hits
}

/// What a log without a single problem line says NCCL chose: the network and plugin, the
/// transports its channels took, the channel counts, NVLS and GPUDirect RDMA, the variables it
/// read, the tuner's algorithms — read against what a collective over those links needs.
pub fn choices(inp: &Inputs) -> Vec<Hit> {
    let reported = inp.logs.iter().any(|l| {
        let known = |e: &Evidence| {
            l.messages
                .lines
                .iter()
                .any(|m| m.evidence.line == e.line && m.evidence.file == e.file)
        };
        l.messages.reports().next().is_some()
            || !l.errors.is_empty()
            || l.warnings.iter().any(|w| !known(w))
    });
    if reported {
        return Vec::new();
    }
    let mut hits = Vec::new();
    for log in inp.logs.iter().filter(|l| l.nccl_lines > 0) {
        let mut said: Vec<String> = Vec::new();
        let mut evidence: Vec<Evidence> = Vec::new();
        if let Some((net, e)) = &log.network {
            said.push(format!("network {net}"));
            evidence.push(e.clone());
        }
        if let Some(values) = log.messages.facts.get("network plugin") {
            let names: Vec<&str> = values.keys().map(String::as_str).collect();
            said.push(format!("plugin {}", names.join(" / ")));
            evidence.extend(values.values().flatten().take(1).map(|(_, e)| e.clone()));
        }
        if !log.transports.is_empty() {
            let t: Vec<String> = log
                .transports
                .iter()
                .map(|(name, lines)| format!("{name} ({} channel lines)", lines.len()))
                .collect();
            said.push(format!("transports {}", t.join(", ")));
            evidence.extend(log.transports.values().filter_map(|l| l.first().cloned()));
        }
        if let Some((c, e)) = &log.channel_counts {
            let mut parts = Vec::new();
            for (name, n) in [
                ("coll", c.coll),
                ("p2p", c.p2p),
                ("NVLS", c.nvls),
                ("CollNet", c.collnet),
            ] {
                if let Some(n) = n {
                    parts.push(format!("{n} {name}"));
                }
            }
            said.push(format!("channels {}", parts.join(", ")));
            evidence.push(e.clone());
        }
        if let Some((available, e)) = &log.nvls_support {
            said.push(format!(
                "NVLS {}",
                if *available {
                    "available"
                } else {
                    "not available"
                }
            ));
            evidence.push(e.clone());
        }
        if log.gdrdma || !log.gdr_enabled.is_empty() {
            said.push("GPUDirect RDMA in use".into());
        } else if !log.gdr_disabled.is_empty() {
            said.push("GPUDirect RDMA off for some GPU/NIC pairs".into());
        }
        let algos: BTreeSet<String> = log
            .choices
            .keys()
            .map(|c| format!("{}/{}", c.algo, c.proto))
            .collect();
        if !algos.is_empty() {
            said.push(format!(
                "tuner chose {}",
                algos.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        if !log.env.is_empty() {
            let vars: Vec<String> = log
                .env
                .iter()
                .map(|(k, (v, _))| format!("{k}={v}"))
                .collect();
            said.push(format!("set {}", vars.join(" ")));
            evidence.extend(log.env.values().take(3).map(|(_, e)| e.clone()));
        }
        // Context lines a note explains (a plugin not found, GDR turned off by a plugin):
        // what they mean, once each.
        let c = catalogue();
        let mut explained: BTreeSet<&str> = BTreeSet::new();
        for l in &log.messages.lines {
            if l.known.note.is_none_or(|n| c.notes[n].summary.is_none()) {
                continue;
            }
            let x = c.explain(&l.known);
            if explained.insert(x.summary) {
                evidence.push(l.evidence.clone());
            }
        }
        said.extend(explained.iter().map(|s| s.to_string()));
        if said.is_empty() {
            continue;
        }
        evidence.truncate(SHOWN);
        let mut hit = Hit::new(
            format!("No problem reported; what NCCL chose: {}", said.join("; ")),
            evidence,
        );
        hit.unless = Some("*".into());
        hits.push(hit);
    }
    hits
}

//! The GPUs' own health counters, read through NVML on this machine: uncorrectable ECC errors,
//! row remapping pending or failed (page retirement on older GPUs), PCIe replays, NVLink
//! error counters, clocks slowed by heat or power, persistence mode off.

use super::super::facts::Inputs;
use super::super::finding::{value_ev, Evidence, Hit, Severity};
use crate::live::health::{GpuHealth, THROTTLE_BAD};

/// Every GPU NVML answered for on this machine, with its health: (`GPU0 (00000000:18:00.0)`,
/// health); without NVML here, the GPUs the records given kept as their runs started.
fn gpus(inp: &Inputs) -> Vec<(String, &GpuHealth)> {
    if let Some(Ok(list)) = inp.live.as_ref().map(|l| &l.nvml) {
        if !list.is_empty() {
            return list
                .iter()
                .map(|g| (format!("GPU{} ({})", g.index, g.bus_id), &g.health))
                .collect();
        }
    }
    inp.runs
        .iter()
        .flat_map(|r| {
            let host = r
                .backend
                .hosts
                .first()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default();
            r.gpu_health.iter().map(move |g| {
                (
                    format!("{}{host}, as the run started", g.label()),
                    &g.health,
                )
            })
        })
        .collect()
}

fn each(inp: &Inputs, f: impl Fn(&str, &GpuHealth) -> Option<String>) -> Vec<Evidence> {
    gpus(inp)
        .into_iter()
        .filter_map(|(name, h)| f(&name, h))
        .map(value_ev)
        .collect()
}

fn hit(title: &str, evidence: Vec<Evidence>) -> Vec<Hit> {
    if evidence.is_empty() {
        Vec::new()
    } else {
        vec![Hit::new(title, evidence)]
    }
}

pub fn ecc_uncorrected(inp: &Inputs) -> Vec<Hit> {
    let volatile = each(inp, |g, h| {
        h.ecc_uncorrected_volatile.filter(|n| *n > 0).map(|n| {
            format!(
                "{g}: {n} uncorrectable ECC errors since the driver loaded (NVML volatile count)"
            )
        })
    });
    if !volatile.is_empty() {
        return hit("Uncorrectable ECC errors on a GPU", volatile);
    }
    // Only in the GPU's lifetime count: an old event, worth knowing, not an emergency.
    let aggregate = each(inp, |g, h| {
        h.ecc_uncorrected_aggregate
            .filter(|n| *n > 0)
            .map(|n| format!("{g}: {n} uncorrectable ECC errors over the GPU's life (NVML aggregate count), none since the driver loaded"))
    });
    hit("Uncorrectable ECC errors in a GPU's history", aggregate)
        .into_iter()
        .map(|h| h.with_severity(Severity::Info))
        .collect()
}

pub fn memory_repair(inp: &Inputs) -> Vec<Hit> {
    let failed = each(inp, |g, h| {
        h.remapped_rows.filter(|r| r.failure).map(|r| {
            format!(
                "{g}: a row remapping failed ({} uncorrectable, {} correctable rows remapped)",
                r.uncorrectable, r.correctable
            )
        })
    });
    if !failed.is_empty() {
        return hit("A GPU could not remap a failing memory row", failed);
    }
    let pending = each(inp, |g, h| {
        let rows = h.remapped_rows.filter(|r| r.pending).map(|r| {
            format!("{g}: a row remapping is pending a GPU reset ({} uncorrectable, {} correctable rows remapped)", r.uncorrectable, r.correctable)
        });
        let pages = (h.retired_pages_pending == Some(true))
            .then(|| format!("{g}: retired pages are pending a GPU reset"));
        rows.or(pages)
    });
    hit("A GPU's memory repair waits for a reset", pending)
        .into_iter()
        .map(|h| h.with_severity(Severity::Warning))
        .collect()
}

/// The GPUs' AER counters in sysfs (no driver needed): (`0000:18:00.0`, counters).
fn aer(inp: &Inputs) -> Vec<(&str, &crate::live::health::Aer)> {
    inp.live
        .iter()
        .flat_map(|l| &l.sysfs_gpus)
        .filter_map(|g| Some((g.address.as_str(), g.aer.as_ref()?)))
        .collect()
}

pub fn pcie_replays(inp: &Inputs) -> Vec<Hit> {
    let mut evidence = each(inp, |g, h| {
        h.pcie_replays
            .filter(|n| *n > 0)
            .map(|n| format!("{g}: PCIe replay counter {n} since the driver loaded"))
    });
    evidence.extend(
        aer(inp)
            .into_iter()
            .filter(|(_, a)| !a.correctable.is_empty())
            .map(|(address, a)| {
                let counts: Vec<String> = a
                    .correctable
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                value_ev(format!(
                    "{address}: corrected PCIe errors since boot: {} (sysfs aer_dev_correctable)",
                    counts.join(", ")
                ))
            }),
    );
    hit(
        "PCIe link-level replays or corrected errors on a GPU's link",
        evidence,
    )
}

pub fn pcie_uncorrectable(inp: &Inputs) -> Vec<Hit> {
    let evidence = aer(inp)
        .into_iter()
        .filter(|(_, a)| a.fatal_total + a.nonfatal_total > 0)
        .map(|(address, a)| {
            value_ev(format!(
                "{address}: {} fatal and {} non-fatal uncorrectable PCIe errors since boot (sysfs aer_dev_fatal, aer_dev_nonfatal)",
                a.fatal_total, a.nonfatal_total
            ))
        })
        .collect();
    hit("Uncorrectable PCIe errors on a GPU's link", evidence)
}

pub fn nvlink_errors(inp: &Inputs) -> Vec<Hit> {
    hit(
        "NVLink errors on active links",
        each(inp, |g, h| {
            let bad: Vec<String> = h
                .nvlink_errors
                .iter()
                .filter(|l| l.replay + l.recovery + l.crc_flit + l.crc_data > 0)
                .map(|l| {
                    format!(
                        "link {}: replay {}, recovery {}, CRC flit {}, CRC data {}",
                        l.link, l.replay, l.recovery, l.crc_flit, l.crc_data
                    )
                })
                .collect();
            (!bad.is_empty()).then(|| format!("{g}: {}", bad.join("; ")))
        }),
    )
}

pub fn throttled(inp: &Inputs) -> Vec<Hit> {
    hit(
        "A GPU's clocks are slowed by heat or power",
        each(inp, |g, h| {
            let bits = h.throttle_reasons?;
            let why: Vec<&str> = THROTTLE_BAD
                .iter()
                .filter(|(bit, _)| bits & bit != 0)
                .map(|(_, what)| *what)
                .collect();
            (!why.is_empty())
                .then(|| format!("{g}: {} (throttle reasons 0x{bits:x})", why.join(", ")))
        }),
    )
}

pub fn persistence_off(inp: &Inputs) -> Vec<Hit> {
    hit(
        "Persistence mode is off",
        each(inp, |g, h| {
            (h.persistence == Some(false)).then(|| format!("{g}: persistence mode disabled"))
        }),
    )
}

/// A GPU's name for an Xid's PCI address (`0000:18:00`): `GPU0 (0000:18:00)` when NVML here
/// knows the GPU at that address.
fn xid_gpu(inp: &Inputs, address: &str) -> String {
    let index = inp
        .live
        .as_ref()
        .and_then(|l| l.nvml.as_ref().ok())
        .and_then(|gpus| {
            gpus.iter()
                .find(|g| g.bus_id.to_ascii_lowercase().contains(address))
        })
        .map(|g| g.index);
    match index {
        Some(i) => format!("GPU{i} ({address})"),
        None => address.to_string(),
    }
}

/// The driver's Xid events, from kernel logs given and this machine's `/dev/kmsg`: one line of
/// evidence per GPU and Xid (its count, what NVIDIA says it means, the first line), the
/// severity of the worst class.
pub fn xid_events(inp: &Inputs) -> Vec<Hit> {
    use crate::import::xid::{classify, XidClass, XidEvent};
    let live = inp.live.as_ref().and_then(|l| l.xids.as_ref().ok());
    let events = inp
        .pastes
        .iter()
        .flat_map(|p| p.xids.events.iter())
        .chain(live.into_iter().flatten());
    let rank = |c: XidClass| match c {
        XidClass::Hardware => 3,
        XidClass::Degraded => 2,
        XidClass::Unknown => 1,
        XidClass::Application => 0,
    };
    // (first event, count, the worst meaning and class among them) per GPU and number.
    let mut groups: Vec<(&XidEvent, usize, (&str, XidClass))> = Vec::new();
    for e in events {
        let m = classify(e.code, &e.message);
        match groups
            .iter_mut()
            .find(|(g, _, _)| g.gpu == e.gpu && g.code == e.code)
        {
            Some((_, n, worst)) => {
                *n += 1;
                if rank(m.1) > rank(worst.1) {
                    *worst = m;
                }
            }
            None => groups.push((e, 1, m)),
        }
    }
    groups.sort_by_key(|(_, _, m)| std::cmp::Reverse(rank(m.1)));
    let Some(&(first, _, worst)) = groups.first() else {
        return Vec::new();
    };
    let evidence = groups
        .iter()
        .map(|(e, n, m)| {
            let times = if *n == 1 {
                String::new()
            } else {
                format!(", {n} times")
            };
            Evidence {
                text: format!(
                    "Xid {} on {}{times}: {}. First: {}",
                    e.code,
                    xid_gpu(inp, &e.gpu),
                    m.0,
                    e.evidence.text
                ),
                ..e.evidence.clone()
            }
        })
        .collect();
    let title = format!(
        "The NVIDIA driver reported Xid {} ({}) on {}",
        first.code,
        worst.0,
        xid_gpu(inp, &first.gpu)
    );
    let hit = Hit::new(title, evidence);
    vec![match worst.1 {
        XidClass::Hardware => hit,
        XidClass::Degraded | XidClass::Unknown => hit.with_severity(Severity::Warning),
        XidClass::Application => hit.with_severity(Severity::Info),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::health::{NvLinkErrors, RemappedRows};

    fn inputs(healths: Vec<GpuHealth>) -> Inputs {
        let mut facts = crate::live::collect(
            &crate::live::Roots {
                sys: "/nonexistent".into(),
                proc_: "/nonexistent".into(),
                dev: "/nonexistent".into(),
            },
            false,
        );
        facts.nvml = Ok(healths
            .into_iter()
            .enumerate()
            .map(|(i, health)| crate::live::NvmlGpu {
                index: i as u32,
                bus_id: format!("00000000:{:02X}:00.0", 0x18 + 0x10 * i),
                health,
                ..Default::default()
            })
            .collect());
        Inputs {
            live: Some(facts),
            ..Default::default()
        }
    }

    #[test]
    fn each_counter_raises_its_finding_and_a_healthy_gpu_none() {
        let healthy = GpuHealth {
            ecc_enabled: Some(true),
            ecc_uncorrected_volatile: Some(0),
            ecc_uncorrected_aggregate: Some(0),
            remapped_rows: Some(RemappedRows::default()),
            pcie_replays: Some(0),
            throttle_reasons: Some(0x1),
            persistence: Some(true),
            nvlink_errors: vec![NvLinkErrors {
                link: 0,
                ..Default::default()
            }],
            ..Default::default()
        };
        let inp = inputs(vec![healthy.clone()]);
        for check in [
            ecc_uncorrected,
            memory_repair,
            pcie_replays,
            nvlink_errors,
            throttled,
            persistence_off,
        ] {
            assert!(check(&inp).is_empty());
        }
        let sick = GpuHealth {
            ecc_uncorrected_volatile: Some(2),
            remapped_rows: Some(RemappedRows {
                uncorrectable: 1,
                pending: true,
                ..Default::default()
            }),
            pcie_replays: Some(40),
            throttle_reasons: Some(0x1 | 0x40),
            persistence: Some(false),
            nvlink_errors: vec![NvLinkErrors {
                link: 3,
                crc_flit: 12,
                recovery: 1,
                ..Default::default()
            }],
            ..healthy.clone()
        };
        let inp = inputs(vec![healthy.clone(), sick]);
        let text = |hits: Vec<Hit>| hits[0].evidence[0].text.clone();
        assert!(text(ecc_uncorrected(&inp)).starts_with("GPU1 (00000000:28:00.0): 2 uncorrectable"));
        assert!(text(memory_repair(&inp)).contains("pending a GPU reset"));
        assert_eq!(
            text(pcie_replays(&inp)),
            "GPU1 (00000000:28:00.0): PCIe replay counter 40 since the driver loaded"
        );
        assert!(text(nvlink_errors(&inp)).contains("link 3: replay 0, recovery 1, CRC flit 12"));
        assert!(text(throttled(&inp)).contains("HW thermal slowdown (throttle reasons 0x41)"));
        assert_eq!(persistence_off(&inp).len(), 1);
        // Not supported is not zero, and not a finding either way.
        let unknown = inputs(vec![GpuHealth::default()]);
        assert!(ecc_uncorrected(&unknown).is_empty() && memory_repair(&unknown).is_empty());
        // A failed remapping outranks a pending one.
        let failed = GpuHealth {
            remapped_rows: Some(RemappedRows {
                failure: true,
                pending: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let hits = memory_repair(&inputs(vec![failed]));
        assert!(hits[0].severity.is_none() && hits[0].title.contains("could not remap"));
    }

    #[test]
    fn a_record_brings_its_gpus_health_where_this_machine_has_no_nvml() {
        let mut run =
            crate::model::RunRecord::blank(crate::model::Source::Measured, "nccl", String::new());
        run.backend.hosts = vec!["gpu-node-07".into()];
        run.gpu_health = vec![crate::model::health::GpuState {
            index: 3,
            bus_id: "00000000:9A:00.0".into(),
            health: GpuHealth {
                pcie_replays: Some(7),
                ..Default::default()
            },
            ..Default::default()
        }];
        let inp = Inputs {
            runs: vec![run],
            ..Default::default()
        };
        let hits = pcie_replays(&inp);
        assert_eq!(
            hits[0].evidence[0].text,
            "GPU3 (00000000:9A:00.0) on gpu-node-07, as the run started: PCIe replay counter 7 since the driver loaded"
        );
    }

    #[test]
    fn xid_events_are_grouped_per_gpu_and_ranked_by_the_worst() {
        let mut pasted = crate::import::pastes::Pastes::default();
        let log = "\
[ 100.1] NVRM: Xid (PCI:0000:cb:00): 13, pid=12, name=python, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address
[ 100.2] NVRM: Xid (PCI:0000:cb:00): 13, pid=12, name=python, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 1): Out Of Range Address
[ 900.5] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.
";
        for (i, raw) in log.lines().enumerate() {
            pasted.feed(
                "dmesg.txt",
                &crate::import::text::Line {
                    number: i + 1,
                    raw: raw.into(),
                    text: raw.into(),
                    tag_rank: None,
                },
            );
        }
        let mut inp = inputs(vec![GpuHealth::default()]);
        inp.pastes.push(pasted);
        let hits = xid_events(&inp);
        assert_eq!(hits.len(), 1);
        // Xid 79 outranks the application's Xid 13, and NVML here names the GPU.
        assert!(
            hits[0].severity.is_none(),
            "hardware: the rule's own severity"
        );
        assert!(
            hits[0]
                .title
                .contains("Xid 79 (GPU has fallen off the bus) on GPU0 (0000:18:00)"),
            "{}",
            hits[0].title
        );
        assert_eq!(hits[0].evidence.len(), 2);
        assert_eq!(hits[0].evidence[0].line, 3);
        assert!(hits[0].evidence[1]
            .text
            .starts_with("Xid 13 on 0000:cb:00, 2 times: graphics engine exception"));
        // The application's faults alone are information.
        let mut only_13 = crate::import::pastes::Pastes::default();
        only_13.feed(
            "dmesg.txt",
            &crate::import::text::Line {
                number: 1,
                raw: String::new(),
                text: log.lines().next().unwrap().into(),
                tag_rank: None,
            },
        );
        let inp = Inputs {
            pastes: vec![only_13],
            ..Default::default()
        };
        assert_eq!(xid_events(&inp)[0].severity, Some(Severity::Info));
    }

    #[test]
    fn aer_counters_in_sysfs_raise_replays_and_uncorrectable_errors() {
        let mut inp = inputs(Vec::new());
        let live = inp.live.as_mut().unwrap();
        live.sysfs_gpus = vec![
            crate::live::PciGpu {
                address: "0000:18:00.0".into(),
                aer: Some(crate::live::health::Aer::default()),
                ..Default::default()
            },
            crate::live::PciGpu {
                address: "0000:9a:00.0".into(),
                aer: Some(crate::live::health::Aer {
                    correctable: vec![("BadDLLP".into(), 5), ("Timeout".into(), 2)],
                    nonfatal_total: 1,
                    fatal_total: 0,
                }),
                ..Default::default()
            },
        ];
        let replays = pcie_replays(&inp);
        assert_eq!(replays[0].evidence.len(), 1);
        assert_eq!(
            replays[0].evidence[0].text,
            "0000:9a:00.0: corrected PCIe errors since boot: BadDLLP 5, Timeout 2 (sysfs aer_dev_correctable)"
        );
        let unc = pcie_uncorrectable(&inp);
        assert!(unc[0].evidence[0]
            .text
            .starts_with("0000:9a:00.0: 0 fatal and 1 non-fatal"));
        inp.live.as_mut().unwrap().sysfs_gpus.remove(1);
        assert!(pcie_replays(&inp).is_empty() && pcie_uncorrectable(&inp).is_empty());
    }
}

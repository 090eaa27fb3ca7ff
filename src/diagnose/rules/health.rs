//! The GPUs' own health counters, read through NVML on this machine: uncorrectable ECC errors,
//! row remapping pending or failed (page retirement on older GPUs), PCIe replays, NVLink
//! error counters, clocks slowed by heat or power, persistence mode off.

use super::super::facts::Inputs;
use super::super::finding::{value_ev, Evidence, Hit, Severity};
use crate::live::health::{GpuHealth, THROTTLE_BAD};

/// Every GPU NVML answered for, with its health: (`GPU0 (00000000:18:00.0)`, health).
fn gpus(inp: &Inputs) -> Vec<(String, &GpuHealth)> {
    let Some(Ok(list)) = inp.live.as_ref().map(|l| &l.nvml) else {
        return Vec::new();
    };
    list.iter()
        .map(|g| (format!("GPU{} ({})", g.index, g.bus_id), &g.health))
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

pub fn pcie_replays(inp: &Inputs) -> Vec<Hit> {
    hit(
        "PCIe link-level replays on a GPU's link",
        each(inp, |g, h| {
            h.pcie_replays
                .filter(|n| *n > 0)
                .map(|n| format!("{g}: PCIe replay counter {n} since the driver loaded"))
        }),
    )
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
}

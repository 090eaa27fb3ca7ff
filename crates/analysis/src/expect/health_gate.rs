//! Gates on the GPUs' own health, judged on the counters the record kept as the run started:
//! `--max-ecc-uncorrected N` (uncorrectable ECC errors since the driver loaded, per GPU, and no
//! failed row remapping) and `--require-link-width [max|N]` (each GPU's PCIe link at its
//! maximum width, or at least N lanes). A record without the counters (an import, or a run where
//! NVML could not be read) fails the gate and says so: a gate never passes what it did not see.

use crate::documents::RuleResult;
use crate::model::health::GpuState;
use crate::model::RunRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthGate {
    MaxEccUncorrected(u64),
    /// `None`: each GPU at its own maximum width.
    LinkWidth(Option<u32>),
}

impl HealthGate {
    /// `--require-link-width VALUE`: `max` (the default) or a lane count.
    pub fn link_width(text: &str) -> Result<HealthGate, String> {
        let t = text.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("max") {
            return Ok(HealthGate::LinkWidth(None));
        }
        match t.trim_start_matches(['x', 'X']).parse::<u32>() {
            Ok(n) if [1, 2, 4, 8, 16, 32].contains(&n) => Ok(HealthGate::LinkWidth(Some(n))),
            _ => Err(format!(
                "--require-link-width {t}: expected max or a PCIe lane count (1, 2, 4, 8, 16, 32)"
            )),
        }
    }

    fn rule(&self) -> String {
        match self {
            HealthGate::MaxEccUncorrected(n) => format!("max-ecc-uncorrected {n}"),
            HealthGate::LinkWidth(None) => "require-link-width max".into(),
            HealthGate::LinkWidth(Some(n)) => format!("require-link-width x{n}"),
        }
    }
}

const NO_COUNTERS: &str = "the record holds no GPU health counters (NVML could not be read where it was made, or it was imported): run the sweep on the GPU machine with the NVIDIA driver loaded";

fn result(gate: &HealthGate, passed: bool, measured: Option<f64>, message: String) -> RuleResult {
    let (required, unit) = match gate {
        HealthGate::MaxEccUncorrected(n) => (Some(*n as f64), "errors"),
        HealthGate::LinkWidth(n) => (n.map(f64::from), "lanes"),
    };
    RuleResult {
        rule: gate.rule(),
        collective: None,
        size_bytes: None,
        measured,
        required,
        unit: unit.into(),
        passed,
        message,
        subject: None,
    }
}

/// Per GPU: the count, or why it cannot be judged.
fn ecc(g: &GpuState, max: u64) -> Result<(u64, Option<String>), String> {
    let h = &g.health;
    if h.ecc_enabled == Some(false) {
        return Err(format!(
            "{}: ECC is disabled, so no error is counted",
            g.label()
        ));
    }
    let n = h.ecc_uncorrected_volatile.ok_or_else(|| {
        format!(
            "{}: NVML gave no uncorrectable ECC count (not supported)",
            g.label()
        )
    })?;
    let failed = h.remapped_rows.is_some_and(|r| r.failure);
    let bad = (n > max).then(|| {
        format!(
            "{}: {n} uncorrectable ECC errors since the driver loaded",
            g.label()
        )
    });
    let bad = match (bad, failed) {
        (Some(b), true) => Some(format!("{b}, and a row remapping failed")),
        (None, true) => Some(format!(
            "{}: a row remapping failed (no spare row left)",
            g.label()
        )),
        (b, false) => b,
    };
    Ok((n, bad))
}

fn judge_ecc(gate: &HealthGate, max: u64, gpus: &[GpuState]) -> RuleResult {
    let mut worst = 0;
    let (mut bad, mut unknown) = (Vec::new(), Vec::new());
    for g in gpus {
        match ecc(g, max) {
            Ok((n, b)) => {
                worst = worst.max(n);
                bad.extend(b);
            }
            Err(why) => unknown.push(why),
        }
    }
    let passed = bad.is_empty() && unknown.is_empty();
    let message = if passed {
        format!(
            "{} GPU(s), at most {worst} uncorrectable ECC errors since the driver loaded (allowed {max})",
            gpus.len()
        )
    } else {
        bad.into_iter()
            .chain(unknown)
            .collect::<Vec<_>>()
            .join("; ")
    };
    result(gate, passed, Some(worst as f64), message)
}

fn judge_width(gate: &HealthGate, need: Option<u32>, gpus: &[GpuState]) -> RuleResult {
    let mut narrowest: Option<u32> = None;
    let (mut bad, mut unknown) = (Vec::new(), Vec::new());
    for g in gpus {
        let Some((cur, max)) = g.pcie_width else {
            unknown.push(format!("{}: NVML gave no PCIe link width", g.label()));
            continue;
        };
        narrowest = Some(narrowest.map_or(cur, |n| n.min(cur)));
        let want = need.unwrap_or(max);
        if cur < want {
            bad.push(format!(
                "{}: PCIe x{cur} of x{max}{}",
                g.label(),
                need.map(|n| format!(" (x{n} required)"))
                    .unwrap_or_default()
            ));
        }
    }
    let passed = bad.is_empty() && unknown.is_empty();
    let message = if passed {
        format!(
            "{} GPU(s) at {} (narrowest x{})",
            gpus.len(),
            need.map_or("their maximum PCIe width".to_string(), |n| format!(
                "PCIe x{n} or wider"
            )),
            narrowest.unwrap_or(0)
        )
    } else {
        bad.into_iter()
            .chain(unknown)
            .collect::<Vec<_>>()
            .join("; ")
    };
    result(gate, passed, narrowest.map(f64::from), message)
}

/// Each gate's verdict on the record's GPUs, with the GPUs that fail it named.
pub fn judge(gates: &[HealthGate], run: &RunRecord) -> Vec<RuleResult> {
    gates
        .iter()
        .map(|gate| {
            if run.gpu_health.is_empty() {
                return result(gate, false, None, format!("{}: {NO_COUNTERS}", gate.rule()));
            }
            match *gate {
                HealthGate::MaxEccUncorrected(max) => judge_ecc(gate, max, &run.gpu_health),
                HealthGate::LinkWidth(need) => judge_width(gate, need, &run.gpu_health),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{GpuHealth, RemappedRows};
    use crate::model::Source;

    fn gpu(index: u32, unc: Option<u64>, width: Option<(u32, u32)>) -> GpuState {
        GpuState {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            pcie_gen: Some((5, 5)),
            pcie_width: width,
            health: GpuHealth {
                ecc_enabled: Some(true),
                ecc_uncorrected_volatile: unc,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn run(gpus: Vec<GpuState>) -> RunRecord {
        let mut r = RunRecord::blank(Source::Measured, "nccl", String::new());
        r.gpu_health = gpus;
        r
    }

    #[test]
    fn ecc_gate_names_the_gpu_over_the_limit_and_passes_a_clean_machine() {
        let gate = [HealthGate::MaxEccUncorrected(0)];
        let clean = judge(
            &gate,
            &run(vec![gpu(0, Some(0), None), gpu(1, Some(0), None)]),
        );
        assert!(clean[0].passed, "{}", clean[0].message);
        assert_eq!(clean[0].measured, Some(0.0));
        let bad = judge(
            &gate,
            &run(vec![gpu(0, Some(0), None), gpu(1, Some(3), None)]),
        );
        assert!(!bad[0].passed);
        assert_eq!(bad[0].measured, Some(3.0));
        assert!(bad[0]
            .message
            .contains("GPU1 (00000000:19:00.0): 3 uncorrectable"));
        assert!(!bad[0].message.contains("GPU0"));
        // Within a stated allowance, passes.
        let loose = judge(
            &[HealthGate::MaxEccUncorrected(5)],
            &run(vec![gpu(1, Some(3), None)]),
        );
        assert!(loose[0].passed);
    }

    #[test]
    fn a_failed_remapping_or_an_unknown_count_fails_the_ecc_gate() {
        let mut g = gpu(2, Some(0), None);
        g.health.remapped_rows = Some(RemappedRows {
            failure: true,
            uncorrectable: 1,
            ..Default::default()
        });
        let r = judge(&[HealthGate::MaxEccUncorrected(0)], &run(vec![g]));
        assert!(!r[0].passed);
        assert!(
            r[0].message.contains("row remapping failed"),
            "{}",
            r[0].message
        );
        let mut off = gpu(0, None, None);
        off.health.ecc_enabled = Some(false);
        let r = judge(&[HealthGate::MaxEccUncorrected(0)], &run(vec![off]));
        assert!(!r[0].passed);
        assert!(r[0].message.contains("ECC is disabled"));
        let r = judge(
            &[HealthGate::MaxEccUncorrected(0)],
            &run(vec![gpu(0, None, None)]),
        );
        assert!(!r[0].passed && r[0].message.contains("not supported"));
    }

    #[test]
    fn width_gate_against_the_maximum_or_a_stated_width() {
        let gpus = vec![
            gpu(0, Some(0), Some((16, 16))),
            gpu(1, Some(0), Some((8, 16))),
        ];
        let max = judge(&[HealthGate::LinkWidth(None)], &run(gpus.clone()));
        assert!(!max[0].passed);
        assert!(max[0]
            .message
            .contains("GPU1 (00000000:19:00.0): PCIe x8 of x16"));
        assert_eq!(max[0].measured, Some(8.0));
        let x8 = judge(&[HealthGate::LinkWidth(Some(8))], &run(gpus));
        assert!(x8[0].passed, "{}", x8[0].message);
        let unknown = judge(
            &[HealthGate::LinkWidth(None)],
            &run(vec![gpu(0, Some(0), None)]),
        );
        assert!(!unknown[0].passed);
    }

    #[test]
    fn a_record_without_counters_fails_every_health_gate_and_says_why() {
        let r = judge(
            &[
                HealthGate::MaxEccUncorrected(0),
                HealthGate::LinkWidth(None),
            ],
            &run(Vec::new()),
        );
        assert!(r
            .iter()
            .all(|r| !r.passed && r.message.contains("no GPU health counters")));
    }

    #[test]
    fn link_width_values_are_read_or_refused() {
        assert_eq!(
            HealthGate::link_width("max"),
            Ok(HealthGate::LinkWidth(None))
        );
        assert_eq!(
            HealthGate::link_width("x16"),
            Ok(HealthGate::LinkWidth(Some(16)))
        );
        assert_eq!(
            HealthGate::link_width("8"),
            Ok(HealthGate::LinkWidth(Some(8)))
        );
        assert!(HealthGate::link_width("12").is_err());
        assert!(HealthGate::link_width("wide").is_err());
    }
}

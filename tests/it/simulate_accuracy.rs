//! The simulator against measured jobs (tests/corpus/training; `cargo bench --bench
//! simulate_accuracy` prints the whole table): every case is run through the binary and its
//! prediction held to what it was when the table was last updated. A change that moves a case
//! fails here: update the figure with the reason in the commit (a term that moves a case is a
//! claim about that job), and the mean errors printed by the bench with it.

#[path = "../../bench/simulate_accuracy/eval.rs"]
mod eval;

use std::path::Path;

/// (case, predicted throughput ratio of the second setting to the first)
const STEP_TODAY: &[(&str, f64)] = &[
    ("LAM-01-3090-bert-2", 1.896),
    ("LAM-01-4090-bert-2", 1.819),
    ("LAM-02-h100pcie-bert-2", 1.936),
    ("LAM-02-h100pcie-bert-8", 7.560),
    ("LAM-02-h100sxm-bert-8", 7.782),
    ("LAM-02-h100pcie-resnet-8", 7.972),
    ("LAM-03-a100pcie-bert-2", 1.937),
    ("LAM-03-a100sxm-bert-2", 1.971),
    ("LAM-03-a100sxm-bert-8", 7.873),
    ("HF-01-titan-nvlink", 1.944),
    ("HF-01-titan-pcie", 1.890),
    ("MLI-01-3090ti-nvlink", 1.981),
    ("MLI-01-3090ti-pcie", 1.924),
    ("OFF-02-10gbe-accum32", 4.310),
    ("NV-01-a100-resnet-amp-8", 7.929),
    ("NV-01-a100-resnet-tf32-8", 7.973),
    ("NV-02-v100-resnet-fp32-8", 7.970),
    ("NV-02-v100-resnet-amp-8", 7.957),
    ("NV-05-v100-squad-fp16-8", 7.631),
    ("NV-05-a100-squad-fp16-8", 7.685),
    ("FP-01-a100-bert-fp32-8", 7.680),
    ("FP-01-a100-bert-fp32-16", 14.087),
    ("HF-05-titan-deberta-zero2", 1.202),
    ("HF-03-titan-gpt2l-sgo", 1.001),
    ("HF-03-titan-gpt2l-full", 1.008),
    ("DS-02-v100-gpt2xl-z2", 1.000),
    ("DS-02-v100-gpt2xl-z3", 1.043),
    ("TT-01-h100-llama8b-128", 0.999),
    ("MPT-01-h100-13b-64", 0.997),
    ("MPT-03-h100-70b-accum", 1.031),
];

/// (case, predicted peak per GPU in GB, as the source's metric reads it)
const MEMORY_TODAY: &[(&str, f64)] = &[
    ("M01-bert-fp32-b4", 15.46),
    ("M02-bert-fp32-b1", 9.30),
    ("M03-bert-fp32-b1-ac", 7.39),
    ("M04-bert-amp-b4", 12.01),
    ("M05-bert-amp-b1-ac", 7.98),
    ("M06-bert-fp32-adafactor", 12.51),
    ("M07-bert-amp-adafactor-ac", 5.03),
    ("M08-bert-fp32-adam8bit", 13.24),
    ("M09-bert-amp-adam8bit-ac", 5.77),
    ("M23a-tt-lora-qv-r8", 16.01),
    ("M23d-tt-lora-all-r64", 17.38),
    ("M24b-tt-qlora", 5.58),
    ("M14-tt-full-fsdp4", 19.11),
    ("M37-lit-llama2-7b-lora-b1", 20.29),
    ("M38-lit-llama2-7b-lora-b2", 27.07),
    ("M39-lit-llama2-7b-qlora-b1", 10.68),
    ("M40-lit-llama2-13b-lora-b1", 36.69),
    ("M41-lit-llama2-13b-qlora-b1", 17.86),
    ("M36a-lit-phi15-lora-b1", 4.50),
    ("M36a-lit-phi15-lora-b4", 9.46),
    ("M49-hub-llama2-7b-lora-b2", 18.93),
    ("M50-hub-llama2-7b-qlora-b2", 9.32),
    ("M51-hub-llama3-8b-lora-b1", 19.07),
    ("M53-hub-mistral-7b-lora-b2", 20.38),
    ("M55-hub-tinyllama-full-b4", 12.19),
    ("M74-titan-8b-fsdp8", 133.38),
    ("M75-titan-8b-fsdp128", 114.74),
    ("M80-ds-8b-z3off-8k", 8.65),
    ("M80-ds-8b-z3off-64k", 37.59),
    ("M80-ds-8b-z3off-128k", 70.66),
    ("M69-swift-qwen7b-zero2", 75.91),
    ("M70-swift-qwen7b-zero3", 48.92),
    ("M45-hub-falcon7b-lora-b1", 16.06),
    ("M46-hub-falcon7b-qlora-b1", 6.22),
];

/// (case, predicted to fit)
const FIT_TODAY: &[(&str, bool)] = &[
    ("B01-llama2-7b-lora-b2", true),
    ("B01-llama2-7b-lora-b4", false),
    ("B02-llama2-13b-lora-b1", true),
    ("B02-llama2-13b-lora-b2", false),
    ("B04-llama2-13b-lora-fsdp2", true),
    ("B04-llama2-13b-lora-fsdp4", true),
    ("B05-gemma-7b-lora", true),
    ("B05-gemma-7b-qlora", true),
    ("B06-gemma2-9b-lora", false),
    ("B06-gemma2-9b-qlora", true),
    ("B07-llama2-7b-full-fsdp4", true),
    ("B08-llama3-8b-full-fsdp4", false),
    ("B24-llama7b-zero2-v100", false),
    ("B24-llama7b-zero3-v100", true),
    ("B26-mistral-qlora-4090", true),
    ("M01-bert-fp32-b4-fits", true),
    ("M04-bert-amp-b4-fits", true),
    ("M49-llama2-7b-lora-a10g-fits", true),
    ("M53-mistral-lora-a10g-fits", true),
    ("M74-titan-8b-fsdp8-fits", false),
    ("B03-falcon40b-lora", false),
    ("B03-falcon40b-qlora", true),
];

/// (case, predicted largest micro-batch)
const MAX_BATCH_TODAY: &[(&str, u64)] = &[
    ("B01-llama2-7b-lora", 3),
    ("B02-llama2-13b-lora", 1),
    ("M36a-phi15-lora", 21),
    ("B26-mistral-qlora-4090", 2),
    ("M55-tinyllama-full-a10g", 14),
];

fn close(got: f64, want: f64, digits: f64) -> bool {
    // The table prints 3 decimals for ratios and 2 for GB.
    (got - want).abs() <= 0.5 * 10f64.powf(-digits) + 1e-9
}

#[test]
fn every_measured_case_predicts_what_it_did() {
    let bin = assert_cmd::cargo::cargo_bin("ncclprobe");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/training");
    let table = eval::evaluate(&bin, &dir);
    println!("{}", table.render());
    assert!(table.steps.len() >= 20 && table.memory.len() >= 20 && table.fits.len() >= 20);
    let mut drift = Vec::new();
    for r in &table.steps {
        match STEP_TODAY.iter().find(|c| c.0 == r.id) {
            Some(&(_, want)) if close(r.predicted_ratio, want, 3.0) => {}
            other => drift.push(format!(
                "{}: ratio {:.3}, table {other:?}",
                r.id, r.predicted_ratio
            )),
        }
    }
    for r in &table.memory {
        match MEMORY_TODAY.iter().find(|c| c.0 == r.id) {
            Some(&(_, want)) if close(r.predicted_gb, want, 2.0) => {}
            other => drift.push(format!(
                "{}: {:.2} GB, table {other:?}",
                r.id, r.predicted_gb
            )),
        }
    }
    for r in &table.fits {
        match FIT_TODAY.iter().find(|c| c.0 == r.id) {
            Some(&(_, want)) if r.predicted == want => {}
            other => drift.push(format!("{}: fits {}, table {other:?}", r.id, r.predicted)),
        }
    }
    for r in &table.max_batch {
        match MAX_BATCH_TODAY.iter().find(|c| c.0 == r.id) {
            Some(&(_, want)) if r.predicted == Some(want) => {}
            other => drift.push(format!(
                "{}: largest batch {:?}, table {other:?}",
                r.id, r.predicted
            )),
        }
    }
    let cases = table.steps.len() + table.memory.len() + table.fits.len() + table.max_batch.len();
    assert_eq!(
        cases,
        STEP_TODAY.len() + MEMORY_TODAY.len() + FIT_TODAY.len() + MAX_BATCH_TODAY.len(),
        "a case was added or removed: add its row to the table"
    );
    assert!(drift.is_empty(), "predictions moved:\n{}", drift.join("\n"));
}

#[test]
fn a_case_is_calibrated_on_its_first_setting() {
    // The bisection finds the compute at which the first setting reaches its measured
    // throughput exactly, so a case's error lies in the second setting alone.
    let bin = assert_cmd::cargo::cargo_bin("ncclprobe");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/training");
    let corpus = eval::load(&dir);
    let case = &corpus.step[0];
    let row = eval::step_row(&bin, &dir, case);
    assert!(row.compute_ms > 0.0);
    assert!(
        (row.base_predicted / case.measured[0] - 1.0).abs() < 1e-4,
        "{} calibrated to {} of {}",
        case.id,
        row.base_predicted,
        case.measured[0]
    );
    let again = eval::step_row(&bin, &dir, case);
    assert_eq!(row.predicted_ratio, again.predicted_ratio);
    assert!((row.measured_ratio - case.measured[1] / case.measured[0]).abs() < 1e-12);
}

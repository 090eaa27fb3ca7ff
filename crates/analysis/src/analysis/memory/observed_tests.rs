use super::*;
use crate::documents::memory::{Logits, Trainable};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

pub(crate) use super::super::seeds::{seed_004_offload as seed_004, seed_004_oom};

fn calibrated(setup: &Setup, oom: &Oom) -> (Observed, Vec<Term>, Vec<String>) {
    calibrate(setup, oom).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_500_mib_is_the_16_bit_logits_and_the_rest_of_what_the_process_held_is_unexplained() {
    let s = seed_004();
    let (o, terms, notes) = calibrated(&s, &seed_004_oom());
    assert!(
        o.matched
            .as_deref()
            .is_some_and(|m| m.contains("16-bit logits")),
        "{o:?}"
    );
    // Before lm_head's output: everything but the loss's tensors.
    let before = s.gpu_total_at(Some(0.0));
    assert!((o.modelled_before_bytes - before).abs() <= 0.5);
    assert!((o.unexplained_bytes - (22.66 * GIB - before)).abs() < 1.0);
    assert_eq!(terms[0].name, "unexplained (observed)");
    assert_eq!(terms[0].bytes, o.unexplained_bytes);
    assert_eq!(terms[1].name, "other memory (observed)");
    // What the report saw: the allocation lacked 500 - 243.94 MiB.
    let short = o.short_at_failure_bytes.unwrap_or(f64::NAN);
    assert!((short - 256.06 * MIB).abs() < 1.0, "{short}");
    // The backward reading (that tensor's gradient, at the peak) is stated with its figure.
    let peak = s.gpu_total_at(None);
    let alternative = (o.unexplained_bytes - (22.66 * GIB - peak)) / GIB;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("{alternative:.2} GiB"))),
        "{notes:?}"
    );
}

#[test]
fn the_plan_carries_the_unexplained_memory_into_the_verdict_and_every_change() {
    let mut s = seed_004();
    let (o, terms, _) = calibrated(&s, &seed_004_oom());
    let alone = s.estimate(None).gpu.total_bytes;
    s.observed_terms = terms;
    let e = s.estimate(None);
    assert!(
        (e.gpu.total_bytes - (alone + o.unexplained_bytes + o.other_processes_bytes)).abs() < 1.0
    );
    // The peak lies beyond the failed allocation: short by more than the 0.25 GiB it lacked.
    assert_eq!(e.gpu.fits(), Some(false));
    let short = -e.gpu.headroom_bytes.unwrap_or(0.0);
    assert!(short > o.short_at_failure_bytes.unwrap_or(0.0));
    // Every change is judged with the same unexplained memory on top of its own accounting.
    let changes = super::super::advice::changes(&s, &e, None);
    assert!(!changes.is_empty());
    let fused = changes
        .iter()
        .find(|c| c.change.starts_with("--logits fused"))
        .unwrap_or_else(|| panic!("{changes:?}"));
    let fused_setup = Setup {
        logits: Logits::Fused,
        ..s.clone()
    };
    assert_eq!(
        fused.gpu_total_bytes,
        fused_setup.estimate(None).gpu.total_bytes,
        "{changes:#?}"
    );
    assert!(fused.gpu_total_bytes > o.unexplained_bytes);
}

#[test]
fn an_allocation_rounded_up_to_2_mib_still_matches_its_tensor() {
    // GPT-2's 50257 logits of 1024 tokens in fp16 are 98.16 MiB; PyTorch asks for 100.00 MiB.
    let s = Setup {
        shape: super::super::presets::preset("gpt2").unwrap_or_else(|e| panic!("{e}")),
        trainable: Trainable::Full,
        frozen_params: 0,
        ..seed_004()
    };
    let oom = Oom {
        requested_bytes: 100.0 * MIB,
        ..seed_004_oom()
    };
    let (o, _, _) = calibrated(&s, &oom);
    assert!(
        o.matched
            .as_deref()
            .is_some_and(|m| m.contains("16-bit logits")),
        "{o:?}"
    );
    // 4 MiB above is another tensor's size, not this one's.
    let oom = Oom {
        requested_bytes: 102.5 * MIB,
        ..seed_004_oom()
    };
    assert_eq!(calibrated(&s, &oom).0.matched, None);
}

#[test]
fn an_allocation_no_tensor_explains_is_taken_at_the_peak_as_a_lower_bound() {
    let s = seed_004();
    let oom = Oom {
        requested_bytes: 37.0 * MIB,
        ..seed_004_oom()
    };
    let (o, _, notes) = calibrated(&s, &oom);
    assert_eq!(o.matched, None);
    assert!((o.modelled_before_bytes - (s.gpu_total_at(None) - 37.0 * MIB)).abs() <= 0.5);
    assert!(notes.iter().any(|n| n.contains("lower bound")), "{notes:?}");
}

#[test]
fn what_the_process_held_comes_from_its_sentence_the_one_listed_process_or_total_minus_free() {
    let s = seed_004();
    // github.com/FoundationVision/GenerateU/issues/10, in a container.
    let listed = Oom {
        process_in_use_bytes: None,
        listed_processes_bytes: vec![14.52 * GIB],
        capacity_bytes: Some(14.75 * GIB),
        free_bytes: Some(235.06 * MIB),
        ..seed_004_oom()
    };
    let (o, terms, _) = calibrated(&s, &listed);
    assert!((o.in_use_bytes - 14.52 * GIB).abs() <= 0.5);
    assert_eq!(o.other_processes_bytes, 0.0);
    assert!(terms.iter().all(|t| t.name != "other memory (observed)"));
    // With its own sentence, the listed ones are other processes, carried as a term.
    let both = Oom {
        listed_processes_bytes: vec![1.5 * GIB, 0.5 * GIB],
        ..seed_004_oom()
    };
    let (o, terms, _) = calibrated(&s, &both);
    assert!((o.in_use_bytes - 22.66 * GIB).abs() <= 0.5);
    // Capacity minus free minus this process (0.73 GiB) is less than the 2 GiB listed.
    assert_eq!(o.other_processes_bytes, 2.0 * GIB);
    assert!(terms
        .iter()
        .any(|t| t.name == "other memory (observed)" && t.bytes == 2.0 * GIB));
    let neither = Oom {
        process_in_use_bytes: None,
        ..seed_004_oom()
    };
    let (o, _, _) = calibrated(&s, &neither);
    assert!((o.in_use_bytes - (23.63 * GIB - 243.94 * MIB)).abs() < 1.0);
    assert!(o.in_use_basis.contains("total capacity minus free"));
    // PyTorch 1.x states the allocator's pool: that and the CUDA context.
    let old = Oom {
        reserved_total_bytes: Some(13.2 * GIB),
        ..neither.clone()
    };
    let (o, _, _) = calibrated(&s, &old);
    assert!((o.in_use_bytes - (13.2 * GIB + s.cuda_context_bytes)).abs() <= 0.5);
    assert!(o.in_use_basis.contains("reserved in total by PyTorch"));
    let nothing = Oom {
        capacity_bytes: None,
        ..neither
    };
    assert!(matches!(
        calibrate(&s, &nothing),
        Err(ObservedError::NoUsage(_))
    ));
}

#[test]
fn a_model_that_counts_more_than_the_process_held_carries_nothing_and_says_so() {
    let s = seed_004();
    // Without capacity and free, nothing else is on the GPU and no floor applies.
    let oom = Oom {
        process_in_use_bytes: Some(4.0 * GIB),
        capacity_bytes: None,
        free_bytes: None,
        ..seed_004_oom()
    };
    let (o, terms, notes) = calibrated(&s, &oom);
    assert_eq!(o.unexplained_bytes, 0.0);
    assert!(terms.is_empty());
    assert!(
        notes.iter().any(|n| n.contains("upper bounds")),
        "{notes:?}"
    );
}

#[test]
fn what_is_neither_free_nor_this_processes_is_other_memory_and_the_error_never_plans_as_fitting() {
    // Seed 004: 23.63 GiB - 243.94 MiB free - 22.66 GiB = 0.73 GiB held by something else
    // on that desktop GPU (its report lists Firefox and VS Code).
    let mut s = seed_004();
    let oom = seed_004_oom();
    let (o, terms, _) = calibrated(&s, &oom);
    let expected = 23.63 * GIB - 243.94 * MIB - 22.66 * GIB;
    assert!((o.other_processes_bytes - expected).abs() < 1.0, "{o:?}");
    s.observed_terms = terms;
    let e = s.estimate(None);
    assert!(e.gpu.total_bytes >= 22.66 * GIB + expected + 500.0 * MIB - 1.0);
    // github.com/Lightning-AI/pytorch-lightning/issues/18134's shape: a small request on a
    // full GPU. Whatever the model counts, the plan is not "fits".
    for setup in [
        seed_004(),
        Setup {
            logits: Logits::Fused,
            ..seed_004()
        },
    ] {
        let oom = Oom {
            requested_bytes: 22.0 * MIB,
            capacity_bytes: Some(23.65 * GIB),
            free_bytes: Some(11.06 * MIB),
            process_in_use_bytes: Some(23.60 * GIB),
            ..seed_004_oom()
        };
        let mut setup = setup;
        let (_, terms, _) = calibrated(&setup, &oom);
        setup.observed_terms = terms;
        setup.gpu_capacity = Some((23.65 * GIB, "test".into()));
        assert_eq!(setup.estimate(None).gpu.fits(), Some(false));
    }
    // A request below the free memory failed too (fragmentation): not "fits" either.
    let oom = Oom {
        requested_bytes: 16.0 * MIB,
        free_bytes: Some(34.81 * MIB),
        ..seed_004_oom()
    };
    let mut setup = seed_004();
    let (_, terms, notes) = calibrated(&setup, &oom);
    setup.observed_terms = terms;
    assert_eq!(setup.estimate(None).gpu.fits(), Some(false));
    assert!(notes.iter().any(|n| n.contains("in pieces")), "{notes:?}");
}

#[test]
fn an_allocation_larger_than_the_whole_step_is_said_and_still_does_not_fit() {
    // github.com/wxian3/NeuroLens/issues/2's shape: 55.57 GiB asked of a 12 GiB GPU.
    let oom = Oom {
        requested_bytes: 55.57 * GIB,
        capacity_bytes: Some(12.0 * GIB),
        free_bytes: Some(9.02 * GIB),
        process_in_use_bytes: Some(1.91 * GIB),
        ..seed_004_oom()
    };
    let mut s = seed_004();
    let (o, terms, notes) = calibrated(&s, &oom);
    assert_eq!(o.modelled_before_bytes, 0.0);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("larger than this setup's whole step")),
        "{notes:?}"
    );
    s.observed_terms = terms;
    s.gpu_capacity = Some((12.0 * GIB, "test".into()));
    assert!(s.estimate(None).gpu.total_bytes >= 1.91 * GIB + 55.57 * GIB - 1.0);
    // Figures no GPU has are refused.
    let absurd = Oom {
        requested_bytes: 1e6 * 1024.0 * GIB,
        ..seed_004_oom()
    };
    assert!(matches!(
        calibrate(&s, &absurd),
        Err(ObservedError::Absurd(..))
    ));
}

#[test]
fn without_its_own_sentence_the_process_is_what_pytorch_allocated_and_reserved() {
    // "this process has 0 bytes memory in use" (NVML cannot see it in a container) is read
    // as absent: allocated + reserved but unallocated + the CUDA context.
    let oom = Oom {
        process_in_use_bytes: None,
        allocated_bytes: Some(34.94 * GIB),
        reserved_unallocated_bytes: Some(175.15 * MIB),
        requested_bytes: 3.91 * GIB,
        capacity_bytes: Some(39.38 * GIB),
        free_bytes: Some(3.76 * GIB),
        ..seed_004_oom()
    };
    let s = seed_004();
    let (o, _, _) = calibrated(&s, &oom);
    assert!((o.in_use_bytes - (34.94 * GIB + 175.15 * MIB + s.cuda_context_bytes)).abs() < 1.0);
    assert!(o.in_use_basis.contains("allocated by PyTorch"));
}

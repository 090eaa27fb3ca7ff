//! `simulate memory --max-batch`: the largest micro-batch that fits the GPU, searched over the
//! plan itself (every term at each size, so what grows with the batch, activations and logits,
//! and what does not, the states, are both in it), and the term that stops the next one.

use super::setup::Setup;
pub use crate::documents::memory::MaxBatch;

/// The largest micro-batch this GPU holds; `None` when its capacity is unknown.
pub fn largest(setup: &Setup) -> Option<MaxBatch> {
    let capacity = setup.gpu_capacity.as_ref()?.0;
    let at = |mb: u64| {
        Setup {
            micro_batch: mb,
            ..setup.clone()
        }
        .estimate(None)
        .gpu
    };
    let fits = |mb: u64| at(mb).total_bytes <= capacity;
    const MOST: u64 = 1 << 20;
    let best = if !fits(1) {
        0
    } else {
        // Double until one does not fit, then halve the gap.
        let mut lo = 1;
        let mut hi = 2;
        while hi <= MOST && fits(hi) {
            lo = hi;
            hi *= 2;
        }
        if hi > MOST {
            lo = MOST;
        } else {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
        }
        lo
    };
    let here = at(best.max(1));
    let next = at(best + 1);
    let (limiting_term, limiting_growth_bytes) = next
        .terms
        .iter()
        .map(|t| {
            let before = here
                .terms
                .iter()
                .find(|h| h.name == t.name)
                .map_or(0.0, |h| h.bytes);
            (t.name.clone(), t.bytes - before)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or_default();
    Some(MaxBatch {
        micro_batch: best,
        total_bytes: here.total_bytes,
        next_total_bytes: next.total_bytes,
        capacity_bytes: capacity,
        limiting_term,
        limiting_growth_bytes,
    })
}

/// The answer in words, for the table's notes.
pub fn sentence(m: &MaxBatch) -> String {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    if m.micro_batch == 0 {
        return format!(
            "--max-batch: not even a micro-batch of 1 fits ({:.2} of {:.2} GiB)",
            gib(m.total_bytes),
            gib(m.capacity_bytes)
        );
    }
    format!(
        "--max-batch: the largest micro-batch that fits is {} ({:.2} of {:.2} GiB); at {} the GPU needs {:.2} GiB, {} growing most (+{:.2} GiB a sample)",
        m.micro_batch,
        gib(m.total_bytes),
        gib(m.capacity_bytes),
        m.micro_batch + 1,
        gib(m.next_total_bytes),
        m.limiting_term,
        gib(m.limiting_growth_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::super::seeds::seed_004;
    use super::*;

    #[test]
    fn the_largest_batch_fits_and_one_more_does_not() {
        let gib = (1u64 << 30) as f64;
        let s = Setup {
            strategy: crate::documents::simulation::Strategy::NoShard,
            trainable: crate::documents::memory::Trainable::Lora {
                rank: 8,
                modules: vec!["q".into(), "v".into()],
            },
            gpu_capacity: Some((40.0 * gib, "test".into())),
            ..seed_004()
        };
        let m = largest(&s).expect("a capacity is given");
        assert!(m.micro_batch >= 1);
        assert!(m.total_bytes <= m.capacity_bytes);
        assert!(m.next_total_bytes > m.capacity_bytes);
        // Per sample, the activations and the logits grow; the states do not.
        assert!(
            m.limiting_term == "activations" || m.limiting_term == "logits and loss",
            "{}",
            m.limiting_term
        );
        let at = Setup {
            micro_batch: m.micro_batch,
            ..s.clone()
        };
        assert!(at.estimate(None).gpu.total_bytes <= 40.0 * gib);
        // A GPU too small for one sample says so; no capacity, no answer.
        let tiny = Setup {
            gpu_capacity: Some((1.0 * gib, "test".into())),
            ..s.clone()
        };
        assert_eq!(largest(&tiny).map(|m| m.micro_batch), Some(0));
        let unknown = Setup {
            gpu_capacity: None,
            ..s
        };
        assert!(largest(&unknown).is_none());
    }
}

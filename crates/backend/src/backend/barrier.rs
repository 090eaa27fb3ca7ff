//! The host backend's barrier: a rank spins briefly then yields, and every rank's arrivals are
//! counted so a watchdog can name the ranks that never came.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A sense-reversing barrier that spins briefly then yields (ranks may outnumber cores), and
/// counts each rank's arrivals so a watchdog can name the ranks that never came.
pub struct ArrivalBarrier {
    nranks: usize,
    waiting: AtomicUsize,
    generation: AtomicUsize,
    arrivals: Vec<AtomicU64>,
}

impl ArrivalBarrier {
    pub fn new(nranks: usize) -> Self {
        ArrivalBarrier {
            nranks,
            waiting: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            arrivals: (0..nranks).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn wait(&self, rank: usize) {
        self.wait_as(rank, false);
    }

    /// `wait`, sleeping between looks when `patient`.
    pub(super) fn wait_as(&self, rank: usize, patient: bool) {
        let generation = self.generation.load(Ordering::Acquire);
        self.arrivals[rank].fetch_add(1, Ordering::Relaxed);
        if self.waiting.fetch_add(1, Ordering::AcqRel) + 1 == self.nranks {
            self.waiting.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut wait = Backoff::patient(patient);
        while self.generation.load(Ordering::Acquire) == generation {
            wait.pause();
        }
    }

    /// Ranks that have arrived fewer times than the furthest rank: the ones being waited for.
    pub fn missing(&self) -> Vec<usize> {
        let counts: Vec<u64> = self
            .arrivals
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let furthest = counts.iter().copied().max().unwrap_or(0);
        (0..self.nranks).filter(|&r| counts[r] < furthest).collect()
    }
}

/// How a rank waits for others: spin briefly, then yield the core. A patient rank (one
/// sitting out a `matrix` step, which waits for the pairs at work) sleeps instead, longer
/// each time up to half a millisecond, so the ranks at work have the cores.
#[derive(Default)]
pub(super) struct Backoff {
    rounds: u32,
    patient: bool,
}

impl Backoff {
    pub(super) fn patient(patient: bool) -> Backoff {
        Backoff { rounds: 0, patient }
    }

    pub(super) fn pause(&mut self) {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds < 200 {
            std::hint::spin_loop();
        } else if !self.patient {
            std::thread::yield_now();
        } else {
            let micros = 10u64 << (self.rounds - 200).min(6);
            std::thread::sleep(std::time::Duration::from_micros(micros.min(500)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn barrier_reports_ranks_that_never_arrive() {
        let barrier = Arc::new(ArrivalBarrier::new(3));
        let b = Arc::clone(&barrier);
        let h = std::thread::spawn(move || b.wait(0));
        let b = Arc::clone(&barrier);
        let h2 = std::thread::spawn(move || b.wait(2));
        while barrier.arrivals[0].load(Ordering::Relaxed) == 0
            || barrier.arrivals[2].load(Ordering::Relaxed) == 0
        {
            std::thread::yield_now();
        }
        assert_eq!(barrier.missing(), vec![1]);
        barrier.wait(1);
        h.join().unwrap();
        h2.join().unwrap();
        assert!(barrier.missing().is_empty());
    }
}

use super::*;
use crate::backend::{BackendError, Communicator, PointSpec};
use crate::data::RankBuffers;
use std::time::Duration;

/// A rank whose calls take `call` and whose barriers (empty all-gathers) take `barrier`,
/// counting both.
struct Paced {
    call: Duration,
    barrier: Duration,
    calls: usize,
    barriers: usize,
}

impl Communicator for Paced {
    fn rank(&self) -> usize {
        0
    }
    fn nranks(&self) -> usize {
        2
    }
    fn prepare(&mut self, _spec: &PointSpec) -> Result<(), BackendError> {
        Ok(())
    }
    fn buffers(&mut self) -> RankBuffers<'_> {
        RankBuffers {
            send: &mut [],
            recv: &mut [],
        }
    }
    fn run(&mut self, _placement: Placement, iters: usize) -> Result<f64, BackendError> {
        self.calls += iters;
        std::thread::sleep(self.call * iters as u32);
        Ok((self.call * iters as u32).as_secs_f64())
    }
    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        if data.is_empty() {
            self.barriers += 1;
            std::thread::sleep(self.barrier);
        }
        Ok(vec![data.to_vec(); 2])
    }
}

fn batch(mode: Blocking) -> (f64, Vec<f64>, Paced) {
    let plan = crate::plan::Plan::from_options(&Default::default(), None).unwrap();
    let mut comm = Paced {
        call: Duration::from_millis(2),
        barrier: Duration::from_millis(250),
        calls: 0,
        barriers: 0,
    };
    let mut runner = PointRunner {
        comm: &mut comm,
        plan: &plan,
        watchdog: None,
        around_check: None,
    };
    let (t, each) = runner
        .blocking_batch(Placement::OutOfPlace, 4, 3, mode, "test")
        .unwrap();
    (t, each, comm)
}

#[test]
fn z1_waits_and_meets_after_every_iteration_and_counts_the_barrier() {
    let (t, each, comm) = batch(Blocking::WaitAndBarrier);
    assert_eq!((comm.calls, comm.barriers), (12, 4));
    assert!(t >= 4.0 * 0.25, "{t}");
    assert!(each.iter().all(|e| *e >= 0.25), "{each:?}");
}

#[test]
fn z2_waits_without_a_barrier() {
    let (t, each, comm) = batch(Blocking::Wait);
    assert_eq!((comm.calls, comm.barriers), (12, 0));
    assert_eq!(each.len(), 4);
    assert!(t >= 4.0 * 0.006, "{t}");
}

#[test]
fn z3_meets_after_every_iteration_but_leaves_the_barriers_out_of_the_time() {
    let (t, each, comm) = batch(Blocking::WaitBarrierExcluded);
    assert_eq!((comm.calls, comm.barriers), (12, 4));
    // Four iterations of three 2 ms calls: 24 ms; the four 250 ms barriers (1 s) are not in
    // it, and a busy machine's oversleeping stays far below them.
    assert!((0.024..0.5).contains(&t), "{t}");
    assert!((t - each.iter().sum::<f64>()).abs() < 1e-12);
}

#[test]
fn z_values_map_as_start_coll_tests_them() {
    assert_eq!(Blocking::from_flag(0), None);
    assert_eq!(Blocking::from_flag(1), Some(Blocking::WaitAndBarrier));
    assert_eq!(Blocking::from_flag(2), Some(Blocking::Wait));
    assert_eq!(Blocking::from_flag(3), Some(Blocking::WaitBarrierExcluded));
    assert_eq!(Blocking::from_flag(7), Some(Blocking::Wait));
}

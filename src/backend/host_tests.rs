use super::*;
use crate::data::{count_wrong, fill_inputs, Generator};
use crate::dtype::Dtype;

/// Runs one checked call on every rank of a thread world; returns wrong counts per rank.
fn check(
    coll: Collective,
    dtype: Dtype,
    op: RedOp,
    n: usize,
    count: usize,
    placement: Placement,
) -> Vec<u64> {
    let root = n - 1;
    let spec = PointSpec {
        coll,
        dtype,
        op,
        root,
        count,
        unalign: 0,
    };
    let gen = Generator {
        coll,
        op,
        dtype,
        nranks: n,
        root,
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = world(n)
            .into_iter()
            .map(|mut comm| {
                scope.spawn(move || {
                    comm.prepare(&spec).unwrap();
                    let r = comm.rank();
                    let layout = spec.layout(n, r);
                    fill_inputs(&gen, r, &layout, placement, comm.buffers());
                    comm.run(placement, 1).unwrap();
                    count_wrong(&gen, r, &layout, placement, comm.buffers().recv)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_collective_type_op_and_placement_is_exact() {
    for coll in Collective::ALL.into_iter().chain(Collective::EXTRA) {
        let ops: &[RedOp] = if coll.has_op() {
            &RedOp::ALL
        } else {
            &[RedOp::Sum]
        };
        for &op in ops {
            for dtype in [
                Dtype::Int8,
                Dtype::Uint8,
                Dtype::Int32,
                Dtype::Int64,
                Dtype::Half,
                Dtype::Bfloat16,
                Dtype::Float,
                Dtype::Double,
                Dtype::F8e4m3,
                Dtype::F8e5m2,
            ] {
                for n in [1usize, 2, 3, 4, 8] {
                    if coll == Collective::Hypercube && !n.is_power_of_two() {
                        continue;
                    }
                    for placement in Placement::BOTH {
                        let wrong = check(coll, dtype, op, n, 1000, placement);
                        assert!(
                            wrong.iter().all(|&w| w == 0),
                            "{coll} {dtype} {op} n={n} {placement:?}: {wrong:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn uneven_counts_and_empty_calls_work() {
    for coll in Collective::ALL.into_iter().chain(Collective::EXTRA) {
        for count in [0usize, 1, 7, 1001] {
            let wrong = check(
                coll,
                Dtype::Float,
                RedOp::Sum,
                if coll == Collective::Hypercube { 4 } else { 3 },
                count,
                Placement::OutOfPlace,
            );
            assert!(
                wrong.iter().all(|&w| w == 0),
                "{coll} count={count}: {wrong:?}"
            );
        }
    }
}

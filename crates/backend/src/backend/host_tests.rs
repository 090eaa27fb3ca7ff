use super::*;
use crate::coll::Traffic;
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
    check_traffic(coll, dtype, op, n, count, placement, Traffic::default())
}

/// `check` with alltoallv's traffic given.
fn check_traffic(
    coll: Collective,
    dtype: Dtype,
    op: RedOp,
    n: usize,
    count: usize,
    placement: Placement,
    traffic: Traffic,
) -> Vec<u64> {
    let root = n - 1;
    let spec = PointSpec {
        coll,
        dtype,
        op,
        root,
        count,
        unalign: 0,
        traffic: traffic.clone(),
        rotate_within: 0,
    };
    let gen = Generator {
        coll,
        op,
        dtype,
        nranks: n,
        root,
        traffic,
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = world(n)
            .into_iter()
            .map(|mut comm| {
                let (spec, gen) = (spec.clone(), gen.clone());
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

#[test]
fn alltoallv_moves_every_peers_part_under_any_spread_or_matrix() {
    let matrix = |text: &str| crate::coll::traffic::parse_matrix(text, 1.0, "m").unwrap();
    let traffics = [
        Traffic::Generated { spread: 0.0 },
        Traffic::Generated { spread: 0.4 },
        Traffic::Generated { spread: 1.0 },
        // Uneven rows and columns, nothing on some pairs, a rank that receives nothing.
        matrix("0 64 1000 16\n48 0 0 0\n32 32 32 0\n800 0 16 16\n"),
    ];
    for traffic in traffics {
        for n in 1usize..=4 {
            if matches!(traffic, Traffic::Matrix { .. }) && n < 2 {
                continue;
            }
            for dtype in [Dtype::Int8, Dtype::Half, Dtype::Float, Dtype::Double] {
                for count in [0usize, 7, 1000, 4096] {
                    for placement in Placement::BOTH {
                        let wrong = check_traffic(
                            Collective::Alltoallv,
                            dtype,
                            RedOp::Sum,
                            n,
                            count,
                            placement,
                            traffic.clone(),
                        );
                        assert!(
                            wrong.iter().all(|&w| w == 0),
                            "{traffic:?} n={n} {dtype} count={count} {placement:?}: {wrong:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn alltoallv_check_catches_parts_moved_under_another_split() {
    // Run with the distance-weighted split, check against the even one: wrong parts.
    let spec = PointSpec {
        coll: Collective::Alltoallv,
        dtype: Dtype::Float,
        op: RedOp::Sum,
        root: 0,
        count: 4096,
        unalign: 0,
        traffic: Traffic::Generated { spread: 1.0 },
        rotate_within: 0,
    };
    let gen = Generator {
        coll: Collective::Alltoallv,
        op: RedOp::Sum,
        dtype: Dtype::Float,
        nranks: 3,
        root: 0,
        traffic: Traffic::Generated { spread: 0.0 },
    };
    let wrong: Vec<u64> = std::thread::scope(|scope| {
        let handles: Vec<_> = world(3)
            .into_iter()
            .map(|mut comm| {
                let (spec, gen) = (spec.clone(), gen.clone());
                scope.spawn(move || {
                    comm.prepare(&spec).unwrap();
                    let r = comm.rank();
                    let layout = spec.layout(3, r);
                    fill_inputs(&gen, r, &layout, Placement::OutOfPlace, comm.buffers());
                    comm.run(Placement::OutOfPlace, 1).unwrap();
                    count_wrong(&gen, r, &layout, Placement::OutOfPlace, comm.buffers().recv)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(wrong.iter().all(|&w| w > 0), "{wrong:?}");
}

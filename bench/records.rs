//! The synthetic 2,000-point record the benchmarks share.

use ncclprobe::coll::{Collective, Placement};
use ncclprobe::dtype::Dtype;
use ncclprobe::model::RunRecord;
use std::path::Path;

/// 4 collectives x 10 types x 25 sizes x 2 placements = 2,000 points, 20 samples each, on a
/// record whose ranks name A100s (so an expectation is chosen from the facts).
pub fn record() -> RunRecord {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/nccl-tests");
    let file = std::fs::read_dir(&corpus)
        .expect("tests/corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("05-"))
        .expect("corpus 05");
    let input = ncclprobe::import::text::Input::open(&file).expect("open");
    let mut r = ncclprobe::import::nccl_tests::text_from(input, &mut |_| {}).expect("import");
    let template = r.points[0].clone();
    r.points.clear();
    let colls = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
    ];
    for coll in colls {
        for dtype in Dtype::ALL {
            for k in 3..28u32 {
                for placement in [Placement::OutOfPlace, Placement::InPlace] {
                    let size = 1u64 << k;
                    let time = 20e-6 + size as f64 / 200e9;
                    let mut p = template.clone();
                    p.collective = coll;
                    p.dtype = dtype;
                    p.placement = placement;
                    p.size_bytes = size;
                    p.time_s = time;
                    p.busbw_bytes_per_s = size as f64 * coll.busbw_factor(8) / time;
                    p.samples_s = (0..20).map(|i| time * (1.0 + 0.001 * i as f64)).collect();
                    p.per_rank_time_s = vec![time; 8];
                    p.wrong = Some(0);
                    r.points.push(p);
                }
            }
        }
    }
    r.headlines = ncclprobe::model::headlines(&r.points);
    assert_eq!(r.points.len(), 2000);
    r
}

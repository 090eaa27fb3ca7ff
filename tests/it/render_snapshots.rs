//! Renderers pinned with snapshots, from a fixed record (no timing involved).

use ncclprobe::coll::{Collective, Placement};
use ncclprobe::dtype::{Dtype, RedOp};
use ncclprobe::model::{headlines, Point, RunRecord};
use ncclprobe::render::{csv, table};
use ncclprobe::stats::{summarize, StopReason};

fn point(size: u64, placement: Placement, time_s: f64, wrong: Option<u64>) -> Point {
    let samples = vec![
        time_s * 0.99,
        time_s,
        time_s * 1.01,
        time_s,
        time_s * 1.02,
        time_s * 0.98,
    ];
    let count = size / 4;
    let (algbw, busbw) = ncclprobe::coll::bandwidths(
        Collective::AllReduce,
        count as usize,
        Dtype::Float,
        2,
        &Default::default(),
        time_s,
    );
    Point {
        collective: Collective::AllReduce,
        nranks: 2,
        dtype: Dtype::Float,
        redop: Some(RedOp::Sum),
        root: -1,
        placement,
        size_bytes: size,
        count,
        time_s,
        algbw_bytes_per_s: algbw,
        busbw_bytes_per_s: busbw,
        wrong,
        iters_per_sample: 10,
        stats: summarize(&samples),
        samples_s: samples,
        stop_reason: StopReason::Converged,
        per_rank_time_s: vec![time_s, time_s * 0.97],
        nccl_model_time_s: None,
        arrivals: None,
        cost: None,
        per_iteration: None,
        nccl_algo: None,
    }
}

fn points() -> Vec<Point> {
    // Times from 07-2080ti-x2-pcie-no-p2p-allreduce.txt.
    [
        (8u64, 12.25e-6, 12.00e-6),
        (1048576, 279.5e-6, 280.2e-6),
        (268435456, 67137e-6, 67169e-6),
    ]
    .into_iter()
    .flat_map(|(size, oop, ip)| {
        [
            point(size, Placement::OutOfPlace, oop, Some(0)),
            point(size, Placement::InPlace, ip, None),
        ]
    })
    .collect()
}

#[test]
fn table_matches_nccl_tests_layout() {
    let p = points();
    let mut text = table::header();
    for pair in p.chunks(2) {
        text.push('\n');
        text.push_str(&table::row(&pair[0], &pair[1]));
    }
    text.push('\n');
    text.push_str(&table::footer(&p));
    for h in headlines(&p) {
        text.push('\n');
        text.push_str(&table::headline(&h));
    }
    insta::assert_snapshot!(text);
}

#[test]
fn csv_contract() {
    insta::assert_snapshot!(csv::to_string(&points()).unwrap());
}

#[test]
fn record_reader_rejects_unknown_fields() {
    let mut value = serde_json::to_value(points()[0].clone()).unwrap();
    assert!(serde_json::from_value::<Point>(value.clone()).is_ok());
    value["busbw_gbps"] = serde_json::json!(1.0);
    let err = serde_json::from_value::<Point>(value).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `busbw_gbps`"),
        "{err}"
    );
    assert!(serde_json::from_str::<RunRecord>(r#"{"schema_version": 1, "extra": 2}"#).is_err());
}

/// The 2080 Ti record of `points()` held against a named expectation.
fn judged() -> (RunRecord, ncclprobe::expect::Choice) {
    let mut r = RunRecord::blank(
        ncclprobe::model::Source::Imported,
        "nccl",
        "snapshot".into(),
    );
    r.points = points();
    r.headlines = headlines(&r.points);
    r.backend.nranks = 2;
    let s = ncclprobe::expect::Situation::of_record(&r, None, None);
    let choice =
        ncclprobe::expect::named(ncclprobe::expect::shipped(), "pcie-gen3-x16-shm-switch", &s)
            .unwrap();
    (r, choice)
}

#[test]
fn comparison_table_and_markdown() {
    let (r, choice) = judged();
    let doc = ncclprobe::expect::compare::against_expectation("run.json", &r, &choice);
    insta::assert_snapshot!(
        "comparison_table",
        ncclprobe::render::expect::comparison_table(&doc)
    );
    insta::assert_snapshot!(
        "comparison_markdown",
        ncclprobe::render::expect::comparison_markdown(&doc)
    );
}

#[test]
fn qualification_table_markdown_and_junit() {
    use ncclprobe::expect::qualify::{qualify, At, Rule};
    let (mut r, choice) = judged();
    r.status = ncclprobe::model::RunStatus::Complete;
    let rules = vec![
        Rule::MinBusbw {
            coll: None,
            gbps: 4.2,
            at: At::Size(268435456),
        },
        Rule::MaxLatency {
            coll: None,
            us: 20.0,
            at: Some(8),
        },
        Rule::MaxSkew {
            coll: None,
            ratio: 1.02,
        },
    ];
    let q = qualify("run.json", &r, &rules, Some(&choice), None, 1);
    insta::assert_snapshot!(
        "qualification_table",
        ncclprobe::render::expect::qualification_table(&q)
    );
    insta::assert_snapshot!(
        "qualification_markdown",
        ncclprobe::render::expect::qualification_markdown(&q)
    );
    insta::assert_snapshot!(
        "qualification_junit",
        ncclprobe::render::expect::junit(
            &q,
            &ncclprobe::render::expect::SuiteContext {
                hostname: Some("gpu-node-07".into()),
                timestamp: Some("2026-12-01T10:00:00Z".into()),
                time: Some(std::time::Duration::from_millis(12_500)),
            }
        )
        .unwrap()
    );
}

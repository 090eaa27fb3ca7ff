use super::*;
use crate::model::{RunRecord, Source};

fn record() -> serde_json::Value {
    let mut r = RunRecord::blank(Source::Measured, "host", "test".into());
    r.status = crate::model::RunStatus::Complete;
    r.backend.nranks = 2;
    serde_json::to_value(&r).unwrap()
}

fn point() -> serde_json::Value {
    serde_json::json!({
        "collective": "all_reduce", "nranks": 2, "dtype": "float", "redop": "sum", "root": -1,
        "placement": "out-of-place", "size_bytes": 1024, "count": 256, "time_s": 1e-5,
        "algbw_bytes_per_s": 1e8, "busbw_bytes_per_s": 1e8, "wrong": 0, "iters_per_sample": 10,
        "samples_s": [1e-5, 1.1e-5],
        "stats": crate::stats::summarize(&[1e-5, 1.1e-5]),
        "stop_reason": "fixed", "per_rank_time_s": [1e-5, 1e-5]
    })
}

fn read_run(v: &serde_json::Value) -> Result<RunRecord, DocumentError> {
    read::<RunRecord>("r.json", &serde_json::to_vec(v).unwrap())
}

#[test]
fn a_good_record_is_read() {
    let mut v = record();
    v["points"] = serde_json::json!([point()]);
    assert_eq!(read_run(&v).unwrap().points.len(), 1);
}

#[test]
fn another_schema_version_is_named_with_ours() {
    for found in [0, 2, 999] {
        let mut v = record();
        v["schema_version"] = found.into();
        let e = read_run(&v).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("r.json: has schema_version {found}; this build of ncclprobe reads schema_version 1")
        );
    }
}

#[test]
fn another_kind_is_named_with_the_one_expected() {
    let mut v = record();
    v["kind"] = "comparison".into();
    let e = read_run(&v).unwrap_err().to_string();
    assert_eq!(
        e,
        "r.json: is an ncclprobe `comparison` document, not a run record"
    );
    v["kind"] = "nonsense".into();
    let e = read_run(&v).unwrap_err().to_string();
    assert!(
        e.contains("`kind` \"nonsense\" is none of ncclprobe's"),
        "{e}"
    );
}

#[test]
fn impossible_content_is_refused_naming_the_field() {
    let cases: [(&str, serde_json::Value, &str); 6] = [
        ("nranks", 0.into(), "nranks is 0"),
        ("time_s", (-1.0).into(), "time_s is -1"),
        ("time_s", 0.0.into(), "time_s is 0"),
        (
            "samples_s",
            serde_json::json!([1e-5, 0.0]),
            "samples_s[1] is 0",
        ),
        (
            "samples_s",
            serde_json::json!([-2e-5]),
            "samples_s[0] is -0.00002",
        ),
        ("count", 1_000_000.into(), "more than size_bytes 1024"),
    ];
    for (field, value, says) in cases {
        let mut p = point();
        p[field] = value;
        let mut v = record();
        v["points"] = serde_json::json!([p]);
        let e = read_run(&v).unwrap_err();
        assert!(matches!(e, DocumentError::Content { .. }), "{field}: {e}");
        assert!(e.to_string().contains(says), "{field}: {e}");
    }
    let mut v = record();
    v["backend"]["nranks"] = 0.into();
    v["points"] = serde_json::json!([point()]);
    assert!(read_run(&v)
        .unwrap_err()
        .to_string()
        .contains("backend.nranks is 0"));
}

#[test]
fn what_is_not_our_document_is_named() {
    let e = |b: &[u8]| read::<RunRecord>("x", b).unwrap_err().to_string();
    assert_eq!(
        e(b"[]"),
        "x: is JSON but not an ncclprobe document (an array)"
    );
    assert_eq!(
        e(b"null"),
        "x: is JSON but not an ncclprobe document (null)"
    );
    assert!(e(b"{\"results\": []}").contains("without `schema_version`"));
    assert!(e(b"{not json").starts_with("x: not JSON"));
}

#[test]
fn a_matrix_is_refused_where_a_run_is_read_and_the_reverse() {
    let v = record();
    let e = read::<MatrixDocument>("r.json", &serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "r.json: is an ncclprobe `run` document, not a pair matrix"
    );
}

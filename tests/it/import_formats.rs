//! nccl-tests output variants that the field corpus lacks, built from nccl-tests' own printf
//! formats (tests/fixtures/formats/, each says how on its first line): the binaries beyond the
//! seven ncclprobe measures, the -S, -I and -C columns, and a device list cut short.

use crate::common;

use common::{bin, read_record};
use ncclprobe::coll::{Collective, Placement};
use ncclprobe::model::{RunRecord, RunStatus};

fn import(name: &str) -> RunRecord {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    bin()
        .args([
            "import",
            &format!("tests/fixtures/formats/{name}"),
            "--json",
        ])
        .arg(&json)
        .assert()
        .success();
    read_record(&json)
}

#[test]
fn a_named_gather_keeps_its_name_and_nccl_tests_bus_factor() {
    let r = import("gather-named.txt");
    assert_eq!(r.status, RunStatus::Complete);
    assert_eq!(r.backend.nranks, 2);
    assert_eq!(r.points.len(), 8);
    assert!(r.points.iter().all(|p| p.collective == Collective::Gather));
    let first = &r.points[0];
    assert_eq!(
        (first.size_bytes, first.count, first.root),
        (1048576, 131072, 0)
    );
    // Printed values are kept; gather's factor (n-1)/n = 0.5 agrees with them.
    assert!((first.busbw_bytes_per_s / first.algbw_bytes_per_s - 0.5).abs() < 0.01);
    assert_eq!(Collective::Gather.busbw_factor(2), 0.5);
    assert_eq!(Collective::Hypercube.busbw_factor(8), 1.0);
}

#[test]
fn an_unnamed_gather_is_not_mistaken_for_a_broadcast() {
    let r = import("gather-unnamed.txt");
    assert!(r.points.iter().all(|p| p.collective == Collective::Unknown));
    let from = &r.import.as_ref().unwrap().collective_from;
    assert!(from.contains("gather or scatter"), "{from}");
}

#[test]
fn timestamps_after_the_in_place_half_are_skipped() {
    let r = import("timestamps-S.txt");
    assert_eq!(r.status, RunStatus::Complete);
    assert_eq!(r.points.len(), 4);
    assert!(r
        .points
        .iter()
        .all(|p| p.collective == Collective::AllGather));
    let inplace = r
        .points
        .iter()
        .find(|p| p.placement == Placement::InPlace && p.size_bytes == 2097152)
        .unwrap();
    assert_eq!(inplace.wrong, Some(0));
    assert!((inplace.busbw_bytes_per_s - 33.93e9).abs() < 1.0);
    assert_eq!(
        r.backend
            .library_versions
            .get("nccl-tests")
            .map(String::as_str),
        Some("2.17.1")
    );
}

#[test]
fn per_iteration_columns_do_not_shift_the_in_place_half() {
    let r = import("per-iteration-I.txt");
    assert_eq!(r.points.len(), 6);
    let inplace = r
        .points
        .iter()
        .find(|p| p.placement == Placement::InPlace && p.size_bytes == 4194304)
        .unwrap();
    assert!(
        (inplace.time_s - 62.50e-6).abs() < 1e-12,
        "{}",
        inplace.time_s
    );
    assert!((inplace.busbw_bytes_per_s - 117.44e9).abs() < 1.0);
}

#[test]
fn cputime_columns_and_zero_bandwidths_still_tell_an_all_reduce() {
    let r = import("cputime-C.txt");
    assert_eq!(r.points.len(), 4);
    assert!(
        r.points
            .iter()
            .all(|p| p.collective == Collective::AllReduce),
        "{:?}",
        r.import
    );
    assert!((r.points[0].time_s - 10.50e-6).abs() < 1e-12);
}

#[test]
fn a_device_list_cut_short_does_not_shrink_the_world() {
    let r = import("device-list-elided.txt");
    // Four '# Rank' lines, but busbw/algbw = 1.75 = 2(n-1)/n at every size: eight ranks.
    assert_eq!(r.backend.ranks.len(), 4);
    assert_eq!(r.backend.nranks, 8);
    let import = r.import.as_ref().unwrap();
    assert_eq!(import.nranks_from, "busbw/algbw");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("list 4 ranks") && n.contains("proves 8")),
        "{:?}",
        r.notes
    );
}

/// The same log with every line behind a stack of launcher and logger prefixes imports to
/// the same points: rows are found by their shape, not by a list of known prefixes.
#[test]
fn any_stack_of_prefixes_imports_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_dir("tests/corpus/nccl-tests")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("07-"))
        .unwrap();
    let plain = std::fs::read_to_string(&source).unwrap();
    let stacks = [
        "(RayTrainWorker pid=4242, ip=10.0.0.7) [1,0]<stdout>:",
        "2024-05-01T12:00:00.123456789Z stdout F node-a17: ",
        "[2024-05-01 12:00:00,123] INFO | 0: ",
    ];
    let reference = import_path(&source, dir.path());
    assert!(!reference.points.is_empty());
    for (i, stack) in stacks.iter().enumerate() {
        let prefixed: String = plain
            .lines()
            .enumerate()
            .map(|(n, l)| {
                if n == 0 {
                    format!("{l}\n")
                } else {
                    format!("{stack}{l}\n")
                }
            })
            .collect();
        let path = dir.path().join(format!("prefixed-{i}.log"));
        std::fs::write(&path, prefixed).unwrap();
        let r = import_path(&path, dir.path());
        let key = |r: &RunRecord| -> Vec<(u64, String, u64)> {
            r.points
                .iter()
                .map(|p| {
                    (
                        p.size_bytes,
                        p.placement.name().to_string(),
                        (p.time_s * 1e9) as u64,
                    )
                })
                .collect()
        };
        assert_eq!(key(&r), key(&reference), "{stack:?}");
        assert_eq!(r.backend.nranks, reference.backend.nranks, "{stack:?}");
    }
}

fn import_path(path: &std::path::Path, dir: &std::path::Path) -> RunRecord {
    let json = dir.join("out.json");
    bin()
        .arg("import")
        .arg(path)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    read_record(&json)
}

/// nccl-tests' -J file, as its writer (src/util.cu) lays it out: every row, the devices from
/// inside `config`, the NCCL version code, the footer's out-of-bounds count and average.
#[test]
fn a_json_report_imports_like_its_table() {
    let r = import("json-all-reduce-complete.json");
    assert_eq!(r.status, RunStatus::Complete);
    let info = r.import.as_ref().unwrap();
    assert_eq!(info.format, "nccl-tests-json");
    assert!(!info.truncated);
    assert_eq!(info.reported_out_of_bounds, Some(0));
    assert_eq!(info.reported_avg_busbw_gbps, Some(55.123));
    assert_eq!(r.backend.nranks, 2);
    assert_eq!(
        r.backend.ranks[1].device.as_deref(),
        Some("NVIDIA A100-SXM4-80GB")
    );
    assert_eq!(
        r.backend.library_versions.get("nccl").map(String::as_str),
        Some("2.27.3")
    );
    let sizes: Vec<u64> = r.points.iter().map(|p| p.size_bytes).collect();
    assert_eq!(
        sizes,
        vec![1 << 20, 1 << 20, 2 << 20, 2 << 20, 4 << 20, 4 << 20]
    );
    let oop = &r.points[4];
    assert_eq!(oop.collective, Collective::AllReduce);
    assert_eq!(oop.placement, Placement::OutOfPlace);
    assert!((oop.time_s - 62.70e-6).abs() < 1e-12);
    assert_eq!(oop.root, -1, "the root is written as a padded string");
    assert_eq!(oop.wrong, Some(0));
}

/// A run that crashed leaves the JSON document cut: the complete rows are kept, and the
/// record says truncated in both places that say so.
#[test]
fn a_cut_json_report_keeps_its_complete_rows_and_says_truncated() {
    let r = import("json-all-reduce-cut.json");
    assert_eq!(r.status, RunStatus::Truncated);
    assert!(r.import.as_ref().unwrap().truncated);
    assert_eq!(r.points.len(), 4, "two complete rows, both placements");
    assert!(
        r.notes.iter().any(|n| n.contains("the document is cut")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.backend.nranks, 2);
}

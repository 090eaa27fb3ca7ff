//! `compare`, `qualify` and `baselines` through the real binary, on corpus runs from the field
//! and on host sweeps of this machine.

use crate::common;

use common::{bin, host_sweep, json_stdout, Printed};
use ncclprobe::documents::{BaselinesDocument, Comparison, Qualification};
use std::path::{Path, PathBuf};

fn corpus(dir: &str, prefix: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("corpus directory {}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no corpus file {dir}/{prefix}*"))
}

fn compare(args: &[&str]) -> Comparison {
    let mut cmd = bin();
    cmd.arg("compare").args(args).args(["--format", "json"]);
    json_stdout(&mut cmd)
}

/// A host sweep's record in `dir`, with extra sweep flags; the sweep must end with `code`
/// (3 where a fault makes the check fail).
fn host_record(dir: &Path, name: &str, extra: &[&str], code: i32) -> PathBuf {
    let path = dir.join(name);
    host_sweep(2)
        .args(["-b", "8", "-e", "64K", "--format", "json"])
        .args(extra)
        .arg("--json")
        .arg(&path)
        .assert()
        .code(code);
    path
}

fn junit(path: &Path) -> quick_junit::Report {
    let xml = std::fs::read_to_string(path).unwrap();
    quick_junit::Report::deserialize_from_str(&xml)
        .unwrap_or_else(|e| panic!("JUnit does not parse: {e}\n{xml}"))
}

#[test]
fn an_8x_a100_nvswitch_run_passes_its_profile_with_a_junit_file() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("qual.xml");
    let out = bin()
        .args(["qualify"])
        .arg(corpus("nccl-tests", "05-"))
        .args([
            "--collective",
            "all_gather",
            "--profile",
            "a100-sxm4-nvswitch-8",
            "--junit",
        ])
        .arg(&xml)
        .args(["--format", "json"])
        .stdout_if(0);
    let q: Qualification = serde_json::from_slice(&out).unwrap();
    assert!(q.passed, "{}", q.summary);
    let bw = q.results.iter().find(|r| r.rule == "min-busbw").unwrap();
    assert!(
        bw.measured.unwrap() > 215.0 && (bw.required.unwrap() - 207.0).abs() < 0.01,
        "{bw:?}"
    );
    let report = junit(&xml);
    assert_eq!((report.tests, report.failures), (3, 0));
    assert_eq!(report.test_suites[0].test_cases.len(), 3);
}

#[test]
fn a_consumer_pcie_run_without_p2p_is_below_a_p2p_expectation_and_explained() {
    let run = corpus("nccl-tests", "07-");
    let topo = corpus("topo", "01-");
    let p2p = compare(&[run.to_str().unwrap(), "--profile", "pcie-gen3-x16-p2p"]);
    assert_eq!(p2p.baseline.id, "pcie-gen3-x16-p2p");
    let big: Vec<_> = p2p
        .points
        .iter()
        .filter(|p| p.size_bytes >= 256 << 20)
        .collect();
    assert!(!big.is_empty());
    assert!(
        big.iter()
            .all(|p| p.verdict == "far-below" && p.ratio < 0.45),
        "{big:?}"
    );
    assert!(p2p.summary.contains("0.37x"), "{}", p2p.summary);
    // Chosen from the facts, the expectation is the no-P2P path and says why.
    let chosen = compare(&[run.to_str().unwrap(), "--topo", topo.to_str().unwrap()]);
    assert_eq!(chosen.baseline.id, "pcie-gen3-x16-shm-switch");
    assert!(
        chosen.baseline.why.contains("PIX") && chosen.baseline.why.contains("NS"),
        "{}",
        chosen.baseline.why
    );
    let plateau: Vec<_> = chosen
        .points
        .iter()
        .filter(|p| p.size_bytes >= 256 << 20)
        .collect();
    assert!(plateau.iter().all(|p| p.verdict == "ok"), "{plateau:?}");
    // Every point is judged against a number, and says which layer it came from.
    assert!(chosen
        .points
        .iter()
        .any(|p| p.size_bytes == 8 && p.layer.starts_with("cost-model (Ring/LL)")));
    assert!(chosen
        .points
        .iter()
        .any(|p| p.size_bytes == 1 << 30 && p.layer.starts_with("derived plateau")));
    assert!(chosen.points.iter().all(|p| p.expected_low_bytes_per_s
        <= p.expected_busbw_bytes_per_s
        && p.expected_busbw_bytes_per_s <= p.expected_high_bytes_per_s));
}

#[test]
fn three_topologies_choose_three_expectations_with_citations() {
    for (file, extra, id) in [
        (
            corpus("nccl-tests", "05-"),
            vec!["--collective", "all_gather"],
            "a100-sxm4-nvswitch-8",
        ),
        // Across nodes the NICs must be known (else the answer is conditional, see
        // tests/is_it_normal.rs): Dell XE9680 with 8 CX-7 400G IB; OCI BM.GPU4.8 with 16 x 100G
        // RoCE on its cluster network.
        (
            corpus("nccl-tests", "04-"),
            vec!["--hardware", "8x400G IB per node"],
            "ib-ndr-400",
        ),
        (
            corpus("nccl-tests", "28-"),
            vec!["--hardware", "16x100G RoCE per node"],
            "roce-100",
        ),
    ] {
        let mut args = vec![file.to_str().unwrap()];
        args.extend(extra);
        let c = compare(&args);
        assert_eq!(c.baseline.id, id);
        assert!(
            c.baseline.citation.contains("http"),
            "{}",
            c.baseline.citation
        );
        assert!(c.summary.contains("reaches"), "{}", c.summary);
    }
}

#[test]
fn shm_disabled_in_the_record_picks_the_socket_path_and_says_what_it_costs() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("r.json");
    bin()
        .args(["import"])
        .arg(corpus("nccl-tests", "24-"))
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    v["env"]["NCCL_SHM_DISABLE"] = "1".into();
    std::fs::write(&record, v.to_string()).unwrap();
    let c = compare(&[record.to_str().unwrap()]);
    assert_eq!(c.baseline.id, "socket-tcp", "{}", c.baseline.why);
    assert!(c.baseline.why.contains("NCCL_SHM_DISABLE=1"));
    let alt = c
        .without_overrides
        .expect("what the machine would give without the override");
    assert_eq!(alt.baseline.id, "pcie-gen4-x16-shm");
    assert!(
        alt.sentence.starts_with("Without NCCL_SHM_DISABLE=1"),
        "{}",
        alt.sentence
    );
    // Under WSL2 the same override picks the derived WSL2 entry.
    v["wsl2_evidence"] = serde_json::json!(["/proc/version names microsoft-standard-WSL2"]);
    std::fs::write(&record, v.to_string()).unwrap();
    let wsl = compare(&[record.to_str().unwrap()]);
    assert_eq!(
        (wsl.baseline.id.as_str(), wsl.baseline.provenance.as_str()),
        ("wsl2-socket-shm-off", "derived")
    );
}

#[test]
fn a_run_with_wrong_data_fails_qualification_whatever_its_bandwidth() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let record = host_record(
        dir.path(),
        "bad.json",
        &["--inject-fault", "corrupt:1:1K"],
        3,
    );
    let xml = dir.path().join("q.xml");
    let out = bin()
        .arg("qualify")
        .arg(&record)
        .args(["--min-busbw", "0.000001", "--junit"])
        .arg(&xml)
        .stdout_if(3);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("FAIL   correct all_reduce"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("pass   min-busbw all_reduce")),
        "{text}"
    );
    let report = junit(&xml);
    assert_eq!(report.failures, 1);
    let failed = report.test_suites[0]
        .test_cases
        .iter()
        .find(|c| !matches!(c.status, quick_junit::TestCaseStatus::Success { .. }))
        .unwrap();
    assert_eq!(failed.name.as_str(), "correct all_reduce");
}

#[test]
fn thresholds_from_flags_and_a_rules_file_fail_with_measured_and_required() {
    let dir = tempfile::tempdir().unwrap();
    let record = host_record(dir.path(), "run.json", &[], 0);
    // No host moves 10 TB/s, and no call takes under a nanosecond.
    let q: Qualification = serde_json::from_slice(
        &bin()
            .arg("qualify")
            .arg(&record)
            .args([
                "--min-busbw",
                "10000",
                "--at-size",
                "64K",
                "--max-latency-us",
                "0.001",
                "--at-size-small",
                "8",
                "--max-skew",
                "1000",
                "--format",
                "json",
            ])
            .stdout_if(3),
    )
    .unwrap();
    let rule = |name: &str| q.results.iter().find(|r| r.rule == name).unwrap().clone();
    let bw = rule("min-busbw");
    assert!(!bw.passed && bw.size_bytes == Some(64 << 10) && bw.required == Some(10000.0));
    assert!(
        bw.message.contains("required >= 10000.00 GB/s"),
        "{}",
        bw.message
    );
    assert!(!rule("max-latency").passed);
    assert!(
        rule("max-skew").passed,
        "host ranks are within 1000x of each other"
    );
    assert!(rule("completed").passed && rule("correct").passed);
    // A size the run did not measure is a failure that says how to measure it.
    let rules = dir.path().join("gate.toml");
    std::fs::write(
        &rules,
        "[[rule]]\ncollective = \"all_reduce\"\nmin_busbw_gbps = 0.001\nat_size = \"1G\"\n",
    )
    .unwrap();
    let out = bin()
        .arg("qualify")
        .arg(&record)
        .arg("--rules")
        .arg(&rules)
        .stdout_if(3);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("not measured at 1 GiB") && text.contains("rerun with -e 1GiB"),
        "{text}"
    );
    // A bad rules file is bad input naming the rule.
    std::fs::write(&rules, "[[rule]]\nmin_busbw_gbps = 1\nmax_skew = 2\n").unwrap();
    let err = bin()
        .arg("qualify")
        .arg(&record)
        .arg("--rules")
        .arg(&rules)
        .stderr_if(2);
    assert!(String::from_utf8_lossy(&err).contains("rule 1"));
}

#[test]
fn a_run_compared_with_itself_is_within_noise_at_every_point() {
    let dir = tempfile::tempdir().unwrap();
    let record = host_record(dir.path(), "run.json", &[], 0);
    let c = compare(&[record.to_str().unwrap(), record.to_str().unwrap()]);
    assert_eq!(c.baseline.kind, "run");
    assert!(c.points.len() >= 2 * 14, "{} points", c.points.len());
    assert!(
        c.points
            .iter()
            .all(|p| p.verdict == "within-noise" && p.ratio == 1.0),
        "{:?}",
        c.points
    );
    assert!(c.points.iter().all(|p| p.p_value.is_some_and(|v| v > 0.9)));
    // As a person reads it: no change the test found is "not significant", with its p-value.
    let table = bin()
        .args([
            "compare",
            record.to_str().unwrap(),
            record.to_str().unwrap(),
        ])
        .stdout_if(0);
    let table = String::from_utf8(table).unwrap();
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("all_reduce"))
        .collect();
    assert!(!rows.is_empty(), "{table}");
    for r in rows {
        assert!(r.contains("not significant") && r.contains("p = "), "{r}");
        assert!(!r.contains("within-noise") && !r.contains("NaN"), "{r}");
    }
}

#[test]
fn a_slower_run_is_a_regression_only_where_significant_and_beyond_the_band() {
    let dir = tempfile::tempdir().unwrap();
    let before = host_record(dir.path(), "before.json", &["--samples", "12"], 0);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&before).unwrap()).unwrap();
    // Samples with a known 5% spread, so the test is about the verdict, not this machine's noise.
    for p in v["points"].as_array_mut().unwrap() {
        let t = p["time_s"].as_f64().unwrap();
        p["samples_s"] = (0..12)
            .map(|i| t * (1.0 + 0.005 * i as f64))
            .collect::<Vec<f64>>()
            .into();
    }
    std::fs::write(&before, v.to_string()).unwrap();
    // After: every sample 30% slower at 64 KiB, 2% slower elsewhere (significant, but in the band).
    for p in v["points"].as_array_mut().unwrap() {
        let f = if p["size_bytes"] == 65536 { 1.3 } else { 1.02 };
        for s in p["samples_s"].as_array_mut().unwrap() {
            *s = (s.as_f64().unwrap() * f).into();
        }
        p["time_s"] = (p["time_s"].as_f64().unwrap() * f).into();
        p["busbw_bytes_per_s"] = (p["busbw_bytes_per_s"].as_f64().unwrap() / f).into();
    }
    let after = dir.path().join("after.json");
    std::fs::write(&after, v.to_string()).unwrap();
    let c = compare(&[before.to_str().unwrap(), after.to_str().unwrap()]);
    for p in &c.points {
        let want = if p.size_bytes == 65536 {
            "regression"
        } else {
            "within-noise"
        };
        assert_eq!(p.verdict, want, "{p:?}");
    }
    assert!(c.summary.contains("2 regression(s)"), "{}", c.summary);
    let md = bin()
        .args([
            "compare",
            before.to_str().unwrap(),
            after.to_str().unwrap(),
            "--format",
            "markdown",
        ])
        .stdout_if(0);
    let md = String::from_utf8(md).unwrap();
    assert!(
        md.contains("| all_reduce | 64 KiB | out-of-place |") && md.contains("**regression**"),
        "{md}"
    );
    // Significant but inside the band: said so, not "within-noise"; the columns say which run.
    assert!(md.contains("| within the band |"), "{md}");
    assert!(md.contains("| after GB/s | before GB/s |"), "{md}");
}

#[test]
fn bad_inputs_are_refused_with_exit_2_and_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let run = corpus("nccl-tests", "07-");
    let err = |args: &[&str]| -> String {
        let out = bin().args(args).stderr_if(2);
        String::from_utf8_lossy(&out).into_owned()
    };
    let e = err(&[
        "compare",
        run.to_str().unwrap(),
        "--profile",
        "a100-nvswitch",
    ]);
    assert!(
        e.contains("unknown profile `a100-nvswitch`") && e.contains("a100-sxm4-nvswitch-8"),
        "{e}"
    );
    let topo = corpus("topo", "01-");
    let e = err(&["compare", topo.to_str().unwrap()]);
    assert!(
        e.contains("01-2080ti") && e.contains("not a run record"),
        "{e}"
    );
    let e = err(&[
        "qualify",
        run.to_str().unwrap(),
        "--topo",
        run.to_str().unwrap(),
    ]);
    assert!(e.contains("not `nvidia-smi topo -m`"), "{e}");
    // Nothing in common: other collective, other rank count.
    let e = err(&[
        "compare",
        run.to_str().unwrap(),
        corpus("nccl-tests", "05-").to_str().unwrap(),
    ]);
    assert!(
        e.contains("nothing in common") && e.contains("all_reduce float on 2 ranks"),
        "{e}"
    );
    // Another document kind is named as such.
    let sim = dir.path().join("diag.json");
    let out = bin()
        .args(["diagnose", "--from"])
        .arg(&topo)
        .args(["--format", "json"])
        .output()
        .unwrap();
    std::fs::write(&sim, out.stdout).unwrap();
    let e = err(&["compare", sim.to_str().unwrap()]);
    assert!(e.contains("`diagnosis` document"), "{e}");
    // One rank moves nothing between GPUs.
    let e = err(&["compare", corpus("nccl-tests", "09-").to_str().unwrap()]);
    assert!(e.contains("one rank"), "{e}");
    // A host run has no GPU path to expect anything of.
    let host = host_record(dir.path(), "host.json", &[], 0);
    let e = err(&["compare", host.to_str().unwrap()]);
    assert!(e.contains("host backend") && e.contains("--profile"), "{e}");
}

#[test]
fn a_running_record_is_compared_with_a_warning_and_fails_qualification() {
    let dir = tempfile::tempdir().unwrap();
    let record = host_record(dir.path(), "run.json", &[], 0);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    v["status"] = "running".into();
    let running = dir.path().join("running.json");
    std::fs::write(&running, v.to_string()).unwrap();
    let out = bin()
        .args(["compare"])
        .arg(&record)
        .arg(&running)
        .stderr_if(0);
    assert!(String::from_utf8_lossy(&out).contains("still `running`"));
    let out = bin()
        .args(["qualify"])
        .arg(&running)
        .args(["--min-busbw", "0.0001"])
        .stdout_if(3);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("FAIL   completed") && text.contains("status running"),
        "{text}"
    );
}

#[test]
fn baselines_lists_every_entry_with_provenance_and_citation() {
    let mut cmd = bin();
    cmd.args(["baselines", "--format", "json"]);
    let doc: BaselinesDocument = json_stdout(&mut cmd);
    assert!(doc.entries.len() >= 25);
    for e in &doc.entries {
        assert!(e.citation.len() > 20, "{}", e.id);
        assert!(e.busbw_gbps.contains_key("all_reduce"), "{}", e.id);
    }
    let table = bin().arg("baselines").stdout_if(0);
    let table = String::from_utf8(table).unwrap();
    assert!(table.contains("wsl2-socket-shm-off") && table.contains("[derived]"));
    let csv = bin().args(["baselines", "--format", "csv"]).stdout_if(0);
    let mut reader = csv::Reader::from_reader(csv.as_slice());
    assert_eq!(reader.headers().unwrap().get(0), Some("id"));
    assert!(reader.records().count() >= doc.entries.len());
}

#[test]
fn sweep_gates_after_measuring_and_retries_only_the_failed_points() {
    let dir = tempfile::tempdir().unwrap();
    let (json, xml) = (dir.path().join("run.json"), dir.path().join("q.xml"));
    // Impossible at 64 KiB only: the retries re-measure that size, nothing else.
    let out = host_sweep(2)
        .args([
            "-b",
            "8",
            "-e",
            "64K",
            "--min-busbw",
            "100000",
            "--at-size",
            "64K",
            "--retries",
            "2",
            "--junit",
        ])
        .arg(&xml)
        .arg("--json")
        .arg(&json)
        .stdout_if(3);
    let stdout = String::from_utf8(out).unwrap();
    assert!(
        stdout.contains("# retry 1: the gate failed at all_reduce 64 KiB")
            && stdout.contains("# retry 2:"),
        "{stdout}"
    );
    assert!(stdout.contains("FAIL after 2 retries"), "{stdout}");
    let record = common::read_record(&json);
    let q = record
        .qualification
        .as_ref()
        .expect("the record keeps the verdict");
    assert_eq!((q.passed, q.attempts), (false, 3));
    // Both placements of 64 KiB, twice, kept as earlier attempts; the rest measured once.
    assert_eq!(record.retried_points.len(), 4);
    assert!(record.retried_points.iter().all(|p| p.size_bytes == 65536));
    assert_eq!(
        record
            .points
            .iter()
            .filter(|p| p.size_bytes == 65536)
            .count(),
        2
    );
    assert_eq!(junit(&xml).failures, 1);
    // A gate that holds: exit 0, no retry.
    let ok = host_sweep(2)
        .args([
            "-b",
            "8",
            "-e",
            "1K",
            "--min-busbw",
            "0.0000001",
            "--retries",
            "2",
            "--json",
        ])
        .arg(&json)
        .stdout_if(0);
    assert!(!String::from_utf8(ok).unwrap().contains("# retry"));
    assert!(common::read_record(&json).qualification.unwrap().passed);
    // A bad profile is refused before anything is measured.
    let err = host_sweep(2)
        .args(["--qualify", "nope", "--json"])
        .arg(dir.path().join("x.json"))
        .stderr_if(2);
    assert!(String::from_utf8_lossy(&err).contains("valid names"));
    assert!(!dir.path().join("x.json").exists());
}

#[test]
fn the_nccl_lines_inside_nccl_tests_output_are_read() {
    // Leonardo: the run's own NCCL_DEBUG lines set NCCL_P2P_LEVEL=NVL; the A100s talk over
    // NVLink, so the path stands, and the line says what is in force.
    // Its one collective (sendrecv) has no figure in the entry: nothing is compared, so the
    // comparison is printed and reaches no verdict (exit 2).
    let out = bin()
        .arg("compare")
        .arg(corpus("nccl-tests", "15-"))
        .args(["--format", "json"])
        .stdout_if(2);
    let c: Comparison = serde_json::from_slice(&out).unwrap();
    assert_eq!(c.baseline.id, "a100-sxm4-nvswitch-8");
    assert!(
        c.baseline.why.contains("in force: NCCL_P2P_LEVEL=NVL"),
        "{}",
        c.baseline.why
    );
    assert!(
        c.not_compared.iter().any(|n| n.contains("sendrecv")),
        "{:?}",
        c.not_compared
    );
    // Two EKS nodes with EFA off, pasted without rank lines: one NCCL line names Socket, but
    // nothing says how many nodes or which GPUs, so no expectation is guessed.
    let out = bin()
        .arg("compare")
        .arg(corpus("nccl-tests", "18-"))
        .stderr_if(2);
    assert!(String::from_utf8_lossy(&out).contains("--topo"));
}

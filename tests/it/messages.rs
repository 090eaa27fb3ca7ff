//! Errors that say what they know: a near name for a mistyped profile or model, the command
//! that reads an input of another kind, a file that cannot be read in words.

use crate::common::bin;
use predicates::str::contains;
use std::path::Path;

#[test]
fn a_mistyped_profile_or_model_gets_the_name_it_is_near() {
    crate::common::host_sweep(2)
        .args(["--qualify", "h100"])
        .assert()
        .code(2)
        .stderr(contains("did you mean one of `h100-"));
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "bert_base",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "100", "--busbw", "10"])
        .assert()
        .code(2)
        .stderr(contains("did you mean `bert-base`?"));
    // A shape of the memory planner named to ddp: the one model list, so ddp takes it too,
    // its tensors built from the shape (the published count).
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "gemma-2b",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "100", "--busbw", "10"])
        .assert()
        .code(0)
        .stdout(contains("gemma-2b: 2506172416 parameters"));
    // And an inventory without a shape, named to memory: said what it is.
    bin()
        .args(["simulate", "memory", "--model", "resnet18"])
        .assert()
        .code(2)
        .stderr(contains("tensor inventory"));
    bin()
        .args(["simulate", "memory", "--model", "gpt2-mediun"])
        .assert()
        .code(2)
        .stderr(contains("did you mean `gpt2-medium`?"));
}

#[test]
fn import_of_another_kind_of_input_names_the_command_that_reads_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/topo");
    let topo = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "txt"))
        .unwrap_or_else(|| panic!("no topology in {}", dir.display()));
    bin()
        .arg("import")
        .arg(&topo)
        .assert()
        .code(2)
        .stderr(contains("--topo"));
}

#[test]
fn a_file_that_cannot_be_read_is_said_in_words() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = bin()
        .arg("import")
        .arg(dir.path())
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("is a directory"), "{text}");
    assert!(!text.contains("os error"), "{text}");
    let out = bin()
        .arg("import")
        .arg(dir.path().join("nofile.log"))
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("no such file"), "{text}");
    assert!(!text.contains("os error"), "{text}");
}

#[test]
fn a_profile_for_another_machine_is_said_on_stderr_and_in_the_junit() {
    // Two H200 nodes, 16 ranks, held against the one-node eight-GPU profile.
    let log = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/01-h200-2node-baremetal-socket-ifname.txt");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let xml = dir.path().join("q.xml");
    let out = bin()
        .arg("qualify")
        .arg(&log)
        .args(["--profile", "h200-nvswitch-8", "--junit"])
        .arg(&xml)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: the profile h200-nvswitch-8: its conditions differ from the run")
            && err.contains("16 ranks (it is for 8)")
            && err.contains("2 nodes (it is for 1)"),
        "{err}"
    );
    let junit = std::fs::read_to_string(&xml).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        junit.contains("name=\"warning\"") && junit.contains("16 ranks (it is for 8)"),
        "{junit}"
    );
}

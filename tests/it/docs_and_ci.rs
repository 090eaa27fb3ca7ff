//! The README and `--help` against the code they describe, and `ci/test`'s own checks.

use std::path::Path;
use std::process::Command;

#[test]
fn readme_exit_code_table_is_the_one_in_the_code() {
    let readme = std::fs::read_to_string("README.md").expect("README.md at the crate root");
    let table = ncclprobe::exit::markdown_table();
    assert!(
        readme.contains(&table),
        "README's exit-code table differs from crates/core/src/exit.rs; it should read:\n{table}"
    );
}

#[test]
fn help_ends_with_the_exit_codes() {
    let out = assert_cmd::Command::cargo_bin("ncclprobe")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    // clap wraps the text to the terminal: compare with white space folded.
    let fold = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = fold(&String::from_utf8_lossy(&out.stdout));
    assert!(
        help.contains(&fold(&ncclprobe::exit::help_text())),
        "{help}"
    );
}

/// Runs `ci/find-libclang` against a directory tree of empty files named like libraries.
fn find_libclang_in(files: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        let path = dir.path().join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }
    let out = Command::new("bash")
        .arg(Path::new("ci/find-libclang"))
        .arg(dir.path().join("lib"))
        .output()
        .expect("ci/find-libclang runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn libclang_cpp_alone_is_not_libclang() {
    // A fresh Debian 12 image: libclang-cpp14 installed, libclang-dev not.
    let (found, printed) = find_libclang_in(&["lib/libclang-cpp.so.14"]);
    assert!(
        !found,
        "libclang-cpp.so.14 was taken for libclang: {printed}"
    );
    let (found, _) = find_libclang_in(&["lib/libclang-cpp.so", "lib/libclangBasic.a"]);
    assert!(!found);
}

#[test]
fn libclang_is_found_by_the_names_bindgen_loads() {
    for name in [
        "libclang.so",
        "libclang.so.1",
        "libclang-14.so",
        "libclang-14.so.1",
        "libclang-14.0.6.so.14",
    ] {
        let (found, printed) =
            find_libclang_in(&["lib/libclang-cpp.so.14", &format!("lib/{name}")]);
        assert!(found, "{name} not found");
        assert!(printed.ends_with(name), "{printed}");
    }
}

#[test]
fn libclang_path_points_at_a_file_or_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("libclang.so.1"), b"").unwrap();
    let out = Command::new("bash")
        .arg("ci/find-libclang")
        .env("LIBCLANG_PATH", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("libclang.so.1"));
}

/// `ci/timings` sets one run's phases beside another's: every phase of both, in the last run's
/// order, with the change, and the totals.
#[test]
fn ci_timings_compares_two_runs_phase_by_phase() {
    let dir = tempfile::tempdir().unwrap();
    let last = dir.path().join("last.tsv");
    let prev = dir.path().join("prev.tsv");
    std::fs::write(
        &last,
        "# ci/test now, exit 0\nbuild\t600\ntests\t300.4\nwheel\t60\n",
    )
    .unwrap();
    std::fs::write(
        &prev,
        "# ci/test before, exit 0\nbuild\t1200\ntests\t300\nclippy\t90\n",
    )
    .unwrap();
    let out = Command::new("ci/timings")
        .arg(&last)
        .arg(&prev)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in:\n{text}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("build"), ["20:00", "10:00", "-50%"], "{text}");
    assert_eq!(row("tests"), ["5:00", "5:00", "+0%"], "{text}");
    assert_eq!(row("wheel"), ["-", "1:00"], "{text}");
    assert_eq!(row("clippy"), ["1:30", "-"], "{text}");
    assert_eq!(row("total"), ["26:30", "16:00", "-40%"], "{text}");
    let table = Command::new("ci/timings")
        .arg("--table")
        .arg(&last)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("tests") && table.contains("5:00"), "{table}");
    assert!(table.lines().last().unwrap().contains("16:00"), "{table}");
}

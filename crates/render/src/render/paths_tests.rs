use super::*;

fn refusal(files: Files) -> String {
    files.check().expect_err("refused").message
}

#[test]
fn an_output_on_an_input_is_refused_by_name_link_and_hard_link() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("run.json");
    std::fs::write(&input, "{}").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("run.json", &link).unwrap();
    let hard = dir.path().join("hard.json");
    std::fs::hard_link(&input, &hard).unwrap();
    let dotted = dir.path().join("sub/../run.json");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for out in [&input, &link, &hard, &dotted] {
        let m = refusal(
            Files::new()
                .input("RUN", Some(&input))
                .output("-o", Some(out)),
        );
        assert!(m.contains("would overwrite the input RUN"), "{m}");
    }
}

#[test]
fn two_new_outputs_on_one_path_are_refused_and_distinct_ones_pass() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let same = dir.path().join("./a.json");
    let m = refusal(
        Files::new()
            .output("--json", Some(&a))
            .output("--csv", Some(&same)),
    );
    assert!(m.contains("--json") && m.contains("--csv"), "{m}");
    Files::new()
        .output("--json", Some(&a))
        .output("--csv", Some(&dir.path().join("a.csv")))
        .input("RUN", Some(&dir.path().join("missing-input")))
        .check()
        .unwrap();
}

#[test]
fn reading_one_file_twice_is_fine_and_stdin_twice_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::write(&a, "x").unwrap();
    Files::new()
        .input("A", Some(&a))
        .input("B", Some(&a))
        .check()
        .unwrap();
    let m = refusal(
        Files::new()
            .input("A", Some(Path::new("-")))
            .input("B", Some(Path::new("-"))),
    );
    assert!(m.contains("both read stdin"), "{m}");
}

#[test]
fn stdout_takes_one_document() {
    let m = refusal(
        Files::new()
            .output("--json", Some(Path::new("-")))
            .stdout("--format csv", true),
    );
    assert!(m.contains("--format csv and --json"), "{m}");
    Files::new()
        .output("--json", Some(Path::new("-")))
        .stdout("--format csv", false)
        .check()
        .unwrap();
    assert!(is_stdout(Path::new("-")));
}

#[test]
fn directories_and_files_in_the_wrong_place_are_said_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, "x").unwrap();
    let m = refusal(Files::new().directory("--png-dir", Some(&file)));
    assert!(m.contains("is a file, not a directory"), "{m}");
    let m = refusal(Files::new().directory("--png-dir", Some(&file.join("deeper"))));
    assert!(m.contains("is a file, not a directory"), "{m}");
    let m = refusal(Files::new().output("--json", Some(dir.path())));
    assert!(m.contains("is a directory"), "{m}");
    let m = refusal(Files::new().output("--json", Some(&dir.path().join("no/x.json"))));
    assert!(m.contains("does not exist"), "{m}");
    Files::new()
        .directory("--png-dir", Some(&dir.path().join("new/deeper")))
        .check()
        .unwrap();
}

#[test]
fn descriptor_links_fifos_and_devices_are_special_and_files_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(target(&fifo), Target::Special);
    assert_eq!(target(Path::new("/dev/null")), Target::Special);
    assert_eq!(target(Path::new("/dev/fd/2")), Target::Special);
    assert_eq!(target(Path::new("/proc/self/fd/2")), Target::Special);
    assert_eq!(target(&dir.path().join("new.json")), Target::Regular);
    let link = dir.path().join("to-stderr");
    std::os::unix::fs::symlink("/dev/stderr", &link).unwrap();
    assert_eq!(target(&link), Target::Special, "through a descriptor link");
}

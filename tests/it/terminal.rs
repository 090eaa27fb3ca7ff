//! What a person at a terminal gets: `--help` grouped under headings that fit, with defaults,
//! no empty help and examples that parse; `-q` and `-v`; verdict words coloured on a terminal
//! and never where NO_COLOR is set; prose wrapped to `$COLUMNS`; tables within 120 columns.

use crate::common::bin;
use clap::{CommandFactory, Parser};
use ncclprobe::cli::Cli;
use std::collections::BTreeMap;

/// Every leaf command (`sweep`, `simulate ddp`, `history add` …) with its clap definition.
fn leaves() -> Vec<(String, clap::Command)> {
    fn walk(prefix: &str, cmd: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{prefix}{}", sub.get_name()).trim().to_string();
            if sub.get_subcommands().next().is_some() {
                walk(&format!("{path} "), sub, out);
            } else {
                out.push((path, sub.clone()));
            }
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = Vec::new();
    walk("", &cmd, &mut out);
    out
}

/// Each heading of a command's help and the long names of the flags under it.
fn headings(cmd: &clap::Command) -> BTreeMap<String, Vec<String>> {
    let mut by = BTreeMap::<String, Vec<String>>::new();
    for a in cmd.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        let heading = a.get_help_heading().unwrap_or("Options").to_string();
        by.entry(heading).or_default().push(long.to_string());
    }
    by
}

fn heading_of(cmd: &clap::Command, long: &str) -> String {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .map(|a| a.get_help_heading().unwrap_or("Options").to_string())
        .unwrap_or_else(|| panic!("no --{long}"))
}

#[test]
fn every_flag_has_help_and_headings_hold_only_their_group() {
    // The flags of each flattened group: a heading a group names holds its flags and no
    // others (clap carries a group's heading on to the flags declared after it).
    let group_flags = |augment: fn(clap::Command) -> clap::Command| -> Vec<String> {
        augment(clap::Command::new("g"))
            .get_arguments()
            .filter_map(|a| a.get_long().map(String::from))
            .collect()
    };
    use clap::Args;
    let groups: Vec<(&str, Vec<String>, &[&str])> = vec![
        (
            "Fleet history",
            group_flags(ncclprobe::cli::history::HistoryArgs::augment_args),
            &[],
        ),
        (
            "Backend",
            group_flags(ncclprobe::cli::BackendArgs::augment_args),
            // doctor's own launcher flags sit with the backend they launch.
            &["np", "launcher"],
        ),
        (
            "Link (one of)",
            group_flags(ncclprobe::cli::LinkArgs::augment_args),
            &[],
        ),
        (
            "Input pipeline (PyTorch DataLoader)",
            group_flags(ncclprobe::cli::LoaderArgs::augment_args),
            &[],
        ),
        (
            "Expectation",
            group_flags(ncclprobe::cli::ExpectationArgs::augment_args),
            &["hardware", "no-expect", "collective"],
        ),
    ];
    let mut problems = Vec::new();
    for (path, cmd) in leaves() {
        for a in cmd.get_arguments() {
            let name = a.get_id().as_str();
            if matches!(name, "help" | "version") {
                continue;
            }
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if help.trim().is_empty() {
                problems.push(format!("{path} {name}: no help"));
            }
        }
        for (heading, flags) in headings(&cmd) {
            for (group, members, extra) in &groups {
                if heading != *group {
                    continue;
                }
                for f in &flags {
                    if !members.contains(f) && !extra.contains(&f.as_str()) {
                        problems.push(format!("{path}: --{f} is under \"{heading}\""));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_flags_the_review_found_misfiled_are_where_they_belong() {
    let all: BTreeMap<String, clap::Command> = leaves().into_iter().collect();
    let doctor = &all["doctor"];
    assert_eq!(heading_of(doctor, "output"), "Report");
    assert_eq!(heading_of(doctor, "model"), "DDP simulation (with --model)");
    assert_eq!(heading_of(doctor, "stepfactor"), "Short sweep");
    assert_eq!(heading_of(&all["matrix"], "by"), "What to measure");
    assert_eq!(heading_of(&all["compare"], "format"), "Output");
    assert_eq!(
        heading_of(&all["simulate ddp"], "bucket-cap-mb"),
        "DDP (what to try)"
    );
    assert_eq!(heading_of(&all["fleet"], "html"), "Output");
    // Global flags, under their own heading everywhere.
    assert_eq!(heading_of(&all["sweep"], "quiet"), "Terminal");
}

#[test]
fn help_shows_defaults_examples_and_no_flag_it_lacks() {
    let out = bin().args(["sweep", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("--stepfactor"))
        .expect("stepfactor in sweep --help")
        .to_string();
    let after: String = text
        .lines()
        .skip_while(|l| !l.contains("--stepfactor"))
        .take(3)
        .collect();
    assert!(after.contains("default: 2"), "{line}\n{after}");
    assert!(text.contains("Examples:\n  #"), "{text}");
    // import takes no --timeout, so its help must not send anyone to one.
    let out = bin().args(["import", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("within --timeout"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("--timeout")),
        "{text}"
    );
}

/// A command line split as a POSIX shell splits it (single and double quotes; no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

#[test]
fn every_commands_examples_parse_with_the_real_parser() {
    let commands: Vec<String> = leaves().into_iter().map(|(p, _)| p).collect();
    for path in &commands {
        assert!(
            ncclprobe::cli::examples::ALL.iter().any(|(p, _)| p == path),
            "{path} has no examples"
        );
    }
    for (path, text) in ncclprobe::cli::examples::ALL {
        let examples: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ncclprobe "))
            .collect();
        assert!(!examples.is_empty(), "{path}: no example");
        for e in examples {
            let owned = shell_words(e);
            let words: Vec<&str> = owned.iter().map(String::as_str).collect();
            assert!(
                e.starts_with(&format!("ncclprobe {path}")),
                "{path}: {e} is not of this command"
            );
            if let Err(err) = Cli::try_parse_from(&words) {
                panic!("{path}: `{e}` does not parse:\n{err}");
            }
        }
        let cmd: Vec<&str> = path.split(' ').collect();
        let out = bin().args(&cmd).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        // clap wraps long lines to the terminal: compared word by word.
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words(&help).contains(&words(text)),
            "{path} --help lacks its examples:\n{help}"
        );
    }
}

#[test]
fn one_model_list_for_ddp_fsdp_and_memory() {
    // A name one simulator takes, the others take (or say why not), and every --help lists it.
    let names = ncclprobe::analysis::models::preset_names();
    for must in ["gemma-2b", "qwen2-1.5b", "phi-2", "resnet50", "bert-base"] {
        assert!(names.iter().any(|n| n == must), "{must} not in {names:?}");
    }
    for cmd in [
        ["simulate", "ddp"],
        ["simulate", "fsdp"],
        ["simulate", "memory"],
    ] {
        let out = bin().args(cmd).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
        for n in &names {
            assert!(help.contains(n.as_str()), "{cmd:?} --help lacks {n}");
        }
    }
    let out = bin()
        .args([
            "simulate",
            "fsdp",
            "--model",
            "gemma-2b",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "500", "--busbw", "20", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let params = doc["model"]["params"].as_u64().unwrap_or_default();
    assert_eq!(params, 2_506_172_416, "{doc}");
    let out = bin()
        .args(["simulate", "memory", "--model", "resnet50"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tensor inventory") && err.contains("simulate ddp"),
        "{err}"
    );
}

fn host_sweep_quiet(extra: &[&str]) -> std::process::Output {
    crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "4K"])
        .args(["-n", "2", "-w", "1", "--samples", "3"])
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .unwrap()
}

#[test]
fn quiet_leaves_out_the_banner_and_notes_but_not_the_table() {
    let loud = host_sweep_quiet(&[]);
    let quiet = host_sweep_quiet(&["-q"]);
    assert!(loud.status.success() && quiet.status.success());
    let loud = String::from_utf8_lossy(&loud.stdout).to_string();
    let quiet = String::from_utf8_lossy(&quiet.stdout).to_string();
    assert!(loud.contains("# backend host"), "{loud}");
    assert!(!quiet.contains("# backend host"), "{quiet}");
    assert!(!quiet.contains("# Using devices"), "{quiet}");
    // The table and its header stay, the same rows.
    assert_eq!(
        crate::common::table_rows(&loud).len(),
        crate::common::table_rows(&quiet).len()
    );
    assert!(quiet.contains("busbw"), "{quiet}");
    // -q and -v together are a contradiction, refused.
    let both = host_sweep_quiet(&["-q", "-v"]);
    assert_eq!(both.status.code(), Some(2));
}

#[test]
fn verdict_words_are_coloured_when_asked_and_never_under_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let out = crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "4K"])
        .args([
            "-n",
            "2",
            "-w",
            "1",
            "--samples",
            "3",
            "--min-busbw",
            "1000000",
        ])
        .arg("--json")
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let qualify = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = bin();
        cmd.arg("qualify")
            .arg(&record)
            .args(["--min-busbw", "1000000"]);
        cmd.args(args)
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // A pipe: no colour by default.
    let plain = qualify(&[], &[]);
    assert!(
        plain.contains("FAIL") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    // Forced: the failing words red, nothing else touched.
    let forced = qualify(&[("CLICOLOR_FORCE", "1")], &[]);
    assert!(forced.contains("\x1b[1;31mFAIL"), "{forced:?}");
    let stripped = forced.replace("\x1b[1;31m", "").replace("\x1b[1;32m", "");
    assert_eq!(stripped.replace("\x1b[0m", ""), plain);
    // NO_COLOR wins over the environment's force; --color always wins over both.
    let none = qualify(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")], &[]);
    assert!(!none.contains('\x1b'), "{none:?}");
    let always = qualify(&[("NO_COLOR", "1")], &["--color", "always"]);
    assert!(always.contains("\x1b[1;31m"), "{always:?}");
    let never = qualify(&[("CLICOLOR_FORCE", "1")], &["--color", "never"]);
    assert!(!never.contains('\x1b'), "{never:?}");
}

#[test]
fn diagnose_prose_wraps_to_columns() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nccl.log");
    std::fs::write(
        &log,
        "host:1:1 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1.\n\
         host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n",
    )
    .unwrap();
    let run = |columns: Option<&str>| {
        let mut cmd = bin();
        cmd.args(["diagnose", "--from"]).arg(&log);
        match columns {
            Some(c) => cmd.env("COLUMNS", c),
            None => cmd.env_remove("COLUMNS"),
        };
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let whole = run(None);
    let widest = whole.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest > 80, "the fixture must have long prose: {whole}");
    let wrapped = run(Some("80"));
    for line in wrapped.lines() {
        // A word longer than the line (a URL) may stand alone beyond it; nothing else does.
        // Evidence lines quote the input as it was (file:line: text) and are left whole.
        let evidence = line.starts_with("    ") && line.contains("nccl.log:");
        let input = line.starts_with("# input:");
        if line.split_whitespace().count() > 1 && !evidence && !input {
            assert!(line.chars().count() <= 80, "{line:?}\n{wrapped}");
        }
    }
    // Nothing is lost: the same words in the same order.
    let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(words(&whole), words(&wrapped));
}

#[test]
fn compare_rows_fit_120_columns_and_name_their_layer_once() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let out = bin()
        .arg("compare")
        .arg(&file)
        .args(["--collective", "all_gather"])
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("all_gather ") && !l.contains(" reaches "))
        .collect();
    assert!(rows.len() > 10, "{text}");
    for r in &rows {
        assert!(
            r.chars().count() <= 120,
            "{} columns: {r}",
            r.chars().count()
        );
        let keyed = r.split_whitespace().any(|w| {
            w.starts_with('[') && w.ends_with(']') && w[1..w.len() - 1].parse::<u32>().is_ok()
        });
        assert!(keyed, "{r}");
    }
    // Each key spelled out once, under the table.
    let keys: Vec<&str> = text.lines().filter(|l| l.starts_with("# [")).collect();
    assert!(!keys.is_empty() && keys.len() <= 8, "{text}");
    let layers = keys.len();
    assert_eq!(
        layers,
        keys.iter().collect::<std::collections::BTreeSet<_>>().len(),
        "a key spelled twice: {text}"
    );
}

#[test]
fn completions_and_man_pages_come_from_the_parser() {
    let out = bin().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    for word in [
        "ncclprobe",
        "sweep",
        "--stepfactor",
        "--qualify",
        "simulate",
    ] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    let out = bin().args(["completions", "zsh"]).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("#compdef ncclprobe")
    );
    let out = bin().args(["man", "simulate", "ddp"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    assert!(
        page.contains("ncclprobe\\-simulate\\-ddp") || page.contains("ncclprobe-simulate-ddp"),
        "{page}"
    );
    assert!(page.contains("bucket\\-cap\\-mb"), "{page}");
    let out = bin().arg("man").output().unwrap();
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("doctor") && top.contains("sweep"), "{top}");
    let out = bin().args(["man", "sweeep"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sweep"), "{err}");
}

#[test]
fn a_format_for_programs_never_gets_colour() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "4K"])
        .args(["-n", "2", "-w", "1", "--samples", "3", "-q", "--json"])
        .arg(&record)
        .assert()
        .success();
    for format in ["json", "csv"] {
        let out = bin()
            .arg("qualify")
            .arg(&record)
            .args([
                "--min-busbw",
                "1000000",
                "--format",
                format,
                "--color",
                "always",
            ])
            .env("CLICOLOR_FORCE", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(
            !out.stdout.contains(&0x1b),
            "{format}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

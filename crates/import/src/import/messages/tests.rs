use super::format::render_sample;
use super::*;

#[test]
fn the_shipped_catalogue_joins_up_every_note_and_class() {
    let c = catalogue();
    assert!(c.problems.is_empty(), "{:#?}", c.problems);
    assert!(c.entries.len() > 1500, "{} entries", c.entries.len());
    for e in &c.entries {
        assert!(c.classes.get(e.class).is_some(), "{} has no class", e.id);
    }
}

#[test]
fn every_entry_s_own_printed_line_is_recognised_as_it_or_as_a_surer_one() {
    // The line printf prints for each format (made-up arguments of each conversion's kind) must
    // match the entry's matcher, and the catalogue must give back an entry at least as sure.
    // A format edited in the data without its matcher following, or a matcher that cannot
    // match what its format prints, fails here.
    let c = catalogue();
    let mut checked = 0;
    for (i, e) in c.entries.iter().enumerate() {
        let line = format!(
            "host-1:4242:4250 [3] NCCL WARN {}",
            render_sample(&e.format)
        );
        assert!(
            e.regex().is_match(&line),
            "{}: {:?} does not match {line:?}",
            e.id,
            e.pattern.regex
        );
        if !e.pattern.matchable() {
            continue;
        }
        let got = c
            .recognise(&line, None)
            .unwrap_or_else(|| panic!("{}: {line:?} not recognised", e.id));
        let other = &c.entries[got.entry];
        assert!(
            got.entry == i || other.pattern.literal_len >= e.pattern.literal_len,
            "{line:?}: recognised as {} ({:?}) over {} ({:?})",
            other.id,
            other.format,
            e.id,
            e.format
        );
        checked += 1;
    }
    assert!(checked > 1400, "{checked} matchable entries");
}

#[test]
fn each_tag_s_formats_are_all_in_the_catalogue() {
    // The generator counts each tag's distinct formats as it reads the source; the entries
    // that name the tag must be exactly those.
    let c = catalogue();
    for (p, project) in c.projects.iter().enumerate() {
        for (t, per) in project.per_tag.iter().enumerate() {
            for (level, &n) in &per.formats {
                let have = c
                    .entries
                    .iter()
                    .filter(|e| e.project == p && &e.level == level && e.tags.contains(&t))
                    .count();
                assert_eq!(have, n, "{} {}: {level}", project.name, per.tag);
            }
        }
    }
    let nccl = &c.projects[0];
    assert_eq!(nccl.name, "nccl");
    assert_eq!(nccl.tags.first().map(String::as_str), Some("v2.18.1-1"));
    assert!(nccl.tags.iter().any(|t| t == "v2.30.7-1"));
}

fn class_of(line: &str) -> Option<String> {
    let c = catalogue();
    c.recognise(line, None)
        .map(|r| c.explain(&r).id.to_string())
}

#[test]
fn field_lines_get_their_class_whatever_prefix_they_carry() {
    for (line, class) in [
        ("node-1:77:80 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory", "nccl.net-ib"),
        ("gpu-7:1:1 [0] NCCL WARN NET/Socket : No usable listening interface found", "nccl.socket"),
        // kubectl logs with NCCL's prefix stripped, and a PyTorch rank prefix.
        ("Bootstrap Root : mismatch in info from procs, nranks 16 vs 8, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs 0", "nccl.bootstrap"),
        ("[rank3]: x:1:2 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.5<36617> failed : Software caused connection abort", "nccl.socket"),
        ("h:1:1 [3] include/alloc.h:48 NCCL WARN Cuda failure 'all CUDA-capable devices are busy or unavailable'", "nccl.cuda"),
        ("a:1:2 [0] misc/shmutils.cc:60 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-abc (size 9637888), error: No space left on device (28)", "nccl.shm"),
        ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5", "nccl.system-call"),
        ("RuntimeError: NCCL error: internal error - please report this issue to the NCCL developers, NCCL version 2.18.1", "nccl.internal"),
        ("w:9:9 [1] transport/nvls.cc:154 NCCL WARN Cuda failure 'system not yet initialized'", "nccl.cuda"),
    ] {
        assert_eq!(class_of(line).as_deref(), Some(class), "{line}");
    }
    for quiet in ["Epoch 3: loss 0.25", "ssh: Connection refused", "", "%s"] {
        assert_eq!(class_of(quiet), None, "{quiet}");
    }
}

#[test]
fn an_argument_s_note_explains_the_line_that_carries_it() {
    let c = catalogue();
    let explain = |line: &str| {
        let r = c.recognise(line, None).expect("recognised");
        let e = c.explain(&r);
        (e.summary.to_string(), e.rule.map(str::to_string))
    };
    let (busy, _) =
        explain("NCCL WARN Cuda failure 'all CUDA-capable devices are busy or unavailable'");
    assert!(busy.contains("Exclusive Process"), "{busy}");
    let (fm, _) = explain("NCCL WARN Cuda failure 'system not yet initialized'");
    assert!(fm.contains("Fabric Manager"), "{fm}");
    let (other, _) = explain("NCCL WARN Cuda failure 'unspecified launch failure'");
    assert_eq!(other, "A CUDA call inside NCCL failed");
    let (refused, _) = explain(
        "NCCL WARN socketStartConnect: Connect to 10.1.1.1<4444> failed : Connection refused",
    );
    assert!(refused.contains("nothing listens"), "{refused}");
    let (_, rule) = explain(
        "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    );
    assert_eq!(rule.as_deref(), Some("ib.memlock"));
}

#[test]
fn the_log_s_version_picks_between_formats_alike() {
    let c = catalogue();
    // "Cuda failure '%s'" (checks.h) and "Cuda failure %d '%s'" (cudawrap.h) both exist; a
    // line with the number is the latter's whatever the version.
    let r = c
        .recognise("NCCL WARN Cuda failure 2 'out of memory'", Some("2.21.5"))
        .expect("recognised");
    assert_eq!(c.entries[r.entry].format, "Cuda failure %d '%s'");
    let e = &c.entries[r.entry];
    assert!(c.versions(e).starts_with("v2."), "{}", c.versions(e));
    let wsl = c
        .entries
        .iter()
        .find(|e| e.format == "Bootstrap : no socket interface found")
        .expect("entry");
    assert!(c.printed_by(wsl, Some("2.18.1+cuda12.1")));
    assert!(c.printed_by(wsl, Some("2.30.7")));
    assert!(!c.printed_by(wsl, Some("2.4.8")));
}

#[test]
fn broken_judgement_files_are_reported_not_ignored() {
    let cat = r#"{"schema_version":1,"kind":"ncclprobe.message_catalogue","project":"x","source":"s","tags":["v1"],"per_tag":[],"entries":[
        {"id":"x-w-1","level":"WARN","format":"Widget %d exploded badly","subsys":[],"tags":"0","file":"src/w.cc","line":1,"function":null,"guard":null,"returns":null}]}"#;
    let c = Catalogue::load(
        &[cat],
        &[(
            "c.toml",
            "[[note]]\nproject = \"x\"\nformat = \"never printed\"\n",
        )],
    );
    assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
    assert!(c.problems.iter().any(|p| p.contains("no class covers it")));
    assert!(c
        .problems
        .iter()
        .any(|p| p.contains("no message has that format")));
    let c = Catalogue::load(&[cat], &[("c.toml", "[[class]]\nid = \"x\"\nbogus = 1\n")]);
    assert!(c.problems[0].starts_with("c.toml:"), "{:?}", c.problems);
}

#[test]
fn a_huge_line_is_looked_at_up_to_its_first_kilobytes() {
    let c = catalogue();
    let anchors = "Bootstrap : no socket interface found ".repeat(20_000);
    assert!(c.recognise(&anchors, None).is_some());
    let tail = format!(
        "{}Bootstrap : no socket interface found",
        "é".repeat(10_000)
    );
    assert!(c.recognise(&tail, None).is_none(), "past the limit");
}

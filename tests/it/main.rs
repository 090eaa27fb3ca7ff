//! Every integration test but two, as modules of one test binary: the crates are linked once for
//! all of them instead of once a file. Each module is one former `tests/NAME.rs`, with its tests
//! under the same names (`cargo test --test it NAME::`).
//!
//! Two files keep a binary of their own, because their tests must own the process: cargo runs
//! test binaries one after another, and a lock inside one process is the only way a test that
//! judges timings gets the machine to itself.
//! - `tests/matrix.rs`: the pair matrix tests judge which link is slow from timings, one matrix
//!   at a time;
//! - `tests/sweep_mpi.rs`: the straggler test holds every other MPI run back while it times one.
//!
//! The modules that read the machine (loaders, sysfs, NVML, the driver, what is installed) are
//! listed in [`MACHINE_MODULES`]; ci/test runs them once more as on a GPU host.

mod common;

mod architecture;
mod assumed_nodes;
mod bounded_inputs;
mod browser;
mod bundle_abuse;
mod corpus;
mod diagnose_loader;
mod diagnose_rules;
mod docs_and_ci;
mod doctor;
mod double_libraries;
mod expectations;
mod fallback_gates;
mod field_classes;
mod field_logs;
mod fleet_history;
mod fuzz_parsers;
mod hostile_documents;
mod hostile_inputs;
mod hostile_outputs;
mod hostile_paths;
mod hostile_sweep;
mod hostile_text;
mod import_formats;
mod is_it_normal;
mod journeys;
mod judged_runs;
mod launchers;
mod library;
mod loader_sim;
mod memory_inputs;
mod memory_plan;
mod messages;
mod nccl_double;
mod nccl_real;
mod nvml_double;
mod one_story;
mod perf_dropin;
mod perf_parsers;
mod postgres_tls;
mod provenance;
mod render_snapshots;
mod report;
mod secrets;
mod simulate_accuracy;
mod simulate_cli;
mod store_abuse;
mod sweep_host;
mod terminal;
mod trace;
mod verdicts;

/// The modules whose tests read the machine they run on (the dynamic loader and what it finds,
/// sysfs, NVML, the CUDA driver, Python's site-packages, launchers' variables): ci/test runs
/// these again under ci/gpu-host-env, where the machine looks like a GPU host, to show they
/// read what they pinned and not the machine. docs_and_ci checks ci/test names the same list.
pub const MACHINE_MODULES: &[&str] = &[
    "doctor",
    "double_libraries",
    "hostile_paths",
    "is_it_normal",
    "journeys",
    "launchers",
    "loader_sim",
    "nccl_double",
    "nccl_real",
    "nvml_double",
    "perf_dropin",
    "perf_parsers",
    "report",
    "sweep_host",
    "terminal",
    "verdicts",
];

/// The list above against the modules and against ci/test.
mod machine_modules {
    /// What a test that reads the machine names: the loaders' variables and libraries, the
    /// fixtures that stand for sysfs and /proc, the commands that look at the machine, the NCCL
    /// backend, the helper that strips the host's own settings from a command.
    const MACHINE_MARKERS: &[&str] = &[
        "NCCL_LIBRARY",
        "LD_LIBRARY_PATH",
        "NCCLPROBE_TEST_LOADER_DIR",
        "NCCLPROBE_SYSFS_ROOT",
        "NCCLPROBE_NVML_LIBRARY",
        "NCCLPROBE_CUDA_DRIVER",
        "NCCLPROBE_TEST_PROC_ROOT",
        "NCCLPROBE_TEST_DEV_ROOT",
        "NCCLPROBE_TEST_MEMINFO",
        "libcuda",
        "libnccl",
        "libnvidia-ml",
        "without_host_settings",
        "\"doctor\"",
        "\"--backend\", \"nccl\"",
        "--backend nccl",
        "nvidia/nccl",
    ];

    /// The modules of tests/it whose source names a machine marker.
    fn modules_reading_the_machine(dir: &std::path::Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs") && !p.ends_with("main.rs"))
            .filter(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                MACHINE_MARKERS.iter().any(|m| text.contains(m))
            })
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_gpu_host_pass_repeats_every_module_that_reads_the_machine() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let listed: Vec<String> = super::MACHINE_MODULES
            .iter()
            .map(|m| m.to_string())
            .collect();
        let unlisted: Vec<String> = modules_reading_the_machine(&root.join("tests/it"))
            .into_iter()
            .filter(|m| !listed.contains(m))
            .collect();
        assert!(
            unlisted.is_empty(),
            "modules that read the machine but are not in MACHINE_MODULES (tests/it/main.rs), so \
             ci/test would not run them as on a GPU host: {unlisted:?}"
        );
        for m in &listed {
            assert!(
                root.join("tests/it").join(format!("{m}.rs")).exists(),
                "MACHINE_MODULES names {m}, which tests/it does not have"
            );
        }
        // ci/test runs exactly the list.
        let ci = std::fs::read_to_string(root.join("ci/test")).unwrap();
        let body = ci
            .split_once("machine_modules=(")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(body, _)| body)
            .expect("ci/test has machine_modules=( ... )");
        let mut in_ci: Vec<String> = body.split_whitespace().map(str::to_string).collect();
        in_ci.sort();
        let mut want = listed.clone();
        want.sort();
        assert_eq!(
            in_ci, want,
            "ci/test's machine_modules and MACHINE_MODULES differ"
        );
    }

    #[test]
    fn a_module_naming_the_machine_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("quiet.rs"),
            "fn a() { bin().args([\"import\"]); }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("loud.rs"),
            "fn a() { cmd.env(\"NCCL_LIBRARY\", lib); }\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("main.rs"), "\"doctor\"\n").unwrap();
        assert_eq!(
            modules_reading_the_machine(dir.path()),
            vec!["loud".to_string()]
        );
    }
}

//! The engines without the command line: a sweep and a pair matrix run from their options (as
//! a test or a future Python binding would start them), on the host backend.

use crate::common;

use ncclprobe::render::record::{Format, Outputs};
use ncclprobe::sweep::options::{BackendChoice, BackendOptions, Options, Sizes, Timing};

fn host_options(json: &std::path::Path) -> Options {
    Options {
        sizes: Sizes {
            minbytes: "8".into(),
            maxbytes: "64".into(),
            ..Default::default()
        },
        timing: Timing {
            samples: Some(4),
            iters: Some(2),
            timeout: 60.0,
            ..Default::default()
        },
        backend: BackendOptions {
            backend: BackendChoice::Host,
            ranks: Some(2),
            ..Default::default()
        },
        output: Outputs {
            json: Some(json.to_path_buf()),
            csv: None,
            format: Format::Json,
        },
        ..Default::default()
    }
}

#[test]
fn a_sweep_runs_from_the_engines_options() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let code = ncclprobe::sweep::run(&host_options(&json)).expect("the sweep runs");
    assert_eq!(code, ncclprobe::exit::ExitCode::Ok);
    let record = common::read_record(&json);
    assert_eq!(record.backend.name, "host");
    assert_eq!(record.backend.nranks, 2);
    let mut sizes: Vec<u64> = record.points.iter().map(|p| p.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    assert_eq!(sizes, vec![8, 16, 32, 64]);
    assert!(record.points.iter().all(|p| p.wrong == Some(0)));
}

#[test]
fn options_the_engine_refuses_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut options = host_options(&json);
    options.sizes.minbytes = "1K".into();
    let failure = ncclprobe::sweep::run(&options).unwrap_err();
    assert_eq!(failure.code, ncclprobe::exit::ExitCode::Usage);
    assert!(
        failure.message.contains("-b/--minbytes"),
        "{}",
        failure.message
    );
    assert!(!json.exists(), "nothing was measured, nothing was written");
}

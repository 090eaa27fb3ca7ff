//! `cargo bench --bench simulate_accuracy`: the simulator against measured jobs
//! (tests/corpus/training): the error per case, the mean absolute error of step-time ratios
//! and of memory peaks, and how often fit/no-fit is right. Targets: 15%, 10%, 95%.

#[path = "eval.rs"]
mod eval;

fn main() {
    // NCCLPROBE_ACCURACY_BIN: another build (an older commit's, for a before/after table).
    let bin = std::env::var_os("NCCLPROBE_ACCURACY_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_ncclprobe")));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/training");
    let table = eval::evaluate(&bin, &dir);
    print!("{}", table.render());
}

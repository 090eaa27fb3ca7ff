//! Build metadata for `ncclprobe --version` and every record's `tool`: the commit, the
//! features and the profile of this binary. Only the root package reads them (the entry point
//! hands them to `buildinfo::register`), so a new commit rebuilds the binary and not the
//! library crates. The MPI backend's C shim is built by crates/backend/build.rs.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    // --no-optional-locks: `git status` would otherwise refresh and rewrite .git/index, which
    // this script watches, and every later cargo command would run it and rebuild the package
    // again.
    let dirty = Command::new("git")
        .args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    };

    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase()))
        .filter(|f| f != "default")
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(",")
    };
    let profile = std::env::var("PROFILE").unwrap_or_default();

    println!("cargo:rustc-env=NCCLPROBE_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=NCCLPROBE_FEATURES={features}");
    println!("cargo:rustc-env=NCCLPROBE_PROFILE={profile}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
}

//! What this binary is: version, commit, enabled features and profile.
//!
//! The commit, features and profile are the binary's, not this library's: the root package's
//! build.rs reads them and the entry point hands them over once with [`register`] before any
//! command runs. Keeping them out of this crate's compile-time environment is what lets a new
//! commit rebuild only the binary instead of every crate above this one. A library user that
//! never registers gets `unknown` for the commit, `none` for the features.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the binary's build said of itself.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    pub git_commit: &'static str,
    pub features: &'static str,
    pub profile: &'static str,
}

const UNREGISTERED: Build = Build {
    git_commit: "unknown",
    features: "none",
    profile: "unknown",
};

static BUILD: OnceLock<Build> = OnceLock::new();

/// Record what the binary was built from; the first call wins.
pub fn register(build: Build) {
    let _ = BUILD.set(build);
}

pub fn build() -> Build {
    BUILD.get().copied().unwrap_or(UNREGISTERED)
}

/// `0.1.0 (commit abc, features: mpi, release)`, as `--version` prints it.
pub fn version_line() -> String {
    let b = build();
    format!(
        "{VERSION} (commit {}, features: {}, {})",
        b.git_commit, b.features, b.profile
    )
}

pub fn tool_info() -> ToolInfo {
    let b = build();
    ToolInfo {
        name: "ncclprobe".to_string(),
        version: VERSION.to_string(),
        git_commit: b.git_commit.to_string(),
        features: b.features.to_string(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    pub git_commit: String,
    pub features: String,
}

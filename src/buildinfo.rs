//! What this binary is: version, commit and enabled features (set by build.rs).

use serde::{Deserialize, Serialize};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const GIT_COMMIT: &str = env!("NCCLPROBE_GIT_COMMIT");
pub const FEATURES: &str = env!("NCCLPROBE_FEATURES");

pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NCCLPROBE_GIT_COMMIT"),
    ", features: ",
    env!("NCCLPROBE_FEATURES"),
    ", ",
    env!("NCCLPROBE_PROFILE"),
    ")"
);

pub fn tool_info() -> ToolInfo {
    ToolInfo {
        name: "ncclprobe".to_string(),
        version: VERSION.to_string(),
        git_commit: GIT_COMMIT.to_string(),
        features: FEATURES.to_string(),
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

//! What the bundle holds: each file written, or missing and why.

use super::process::run;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// What one collected item came to.
pub struct Item {
    pub file: String,
    pub what: String,
    /// `None`: written; `Some(why)`: not there, and why.
    pub missing: Option<String>,
}

pub struct Bundle {
    pub dir: PathBuf,
    pub items: Vec<Item>,
}

impl Bundle {
    pub fn write(&mut self, file: &str, what: &str, text: &str) {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let missing = std::fs::write(&path, text).err().map(|e| e.to_string());
        self.items.push(Item {
            file: file.into(),
            what: what.into(),
            missing,
        });
    }

    pub fn missing(&mut self, file: &str, what: &str, why: impl Into<String>) {
        self.items.push(Item {
            file: file.into(),
            what: what.into(),
            missing: Some(why.into()),
        });
    }

    /// A command's output into `file`, or why there is none.
    pub fn command(&mut self, file: &str, what: &str, argv: &[&str], timeout: Duration) {
        match run(argv, &[], timeout) {
            Ok(out) if out.status_ok || !out.stdout.is_empty() => {
                let mut text = out.stdout;
                if !out.stderr.trim().is_empty() {
                    let _ = write!(text, "\n# stderr:\n{}", out.stderr);
                }
                self.write(file, what, &text)
            }
            Ok(out) => self.missing(
                file,
                what,
                format!("`{}` failed: {}", argv.join(" "), out.stderr.trim()),
            ),
            Err(why) => self.missing(file, what, why),
        }
    }
}

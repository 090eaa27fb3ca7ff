//! doctor's output directory. It must be new, empty, or an earlier doctor run's: a marker file
//! lists each file a run writes there (rewritten before each file, so an interrupted run is
//! listed too). The next run removes the listed files before it measures, so nothing of an
//! earlier run outlives it, and refuses a directory holding anything else: a user's file is
//! never overwritten or deleted.

use crate::exit::Failure;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The marker's name inside the directory.
pub const MARKER: &str = ".ncclprobe-doctor";

const MARKER_HEADER: &str = "# ncclprobe doctor wrote the files listed below here; its next run in this directory removes them first.";

/// How many names a refusal lists before it counts the rest.
const NAMES_SHOWN: usize = 8;

/// The directory a run writes into, and the files it has written there so far.
pub struct OutputDir {
    dir: PathBuf,
    written: Vec<String>,
}

/// What a path that should be a directory is instead, in words.
fn kind_of(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_file() {
        "a file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a directory"
    }
}

fn listed(names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(NAMES_SHOWN).map(String::as_str).collect();
    let more = names.len().saturating_sub(NAMES_SHOWN);
    let mut text = String::new();
    shown.sort_unstable();
    text.push_str(&shown.join(", "));
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}

/// Refuse `dir` when it, or a directory above it, is something else than a directory.
fn refuse_non_directory(dir: &Path) -> Result<(), Failure> {
    for (i, at) in dir.ancestors().enumerate() {
        if at.as_os_str().is_empty() {
            break;
        }
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(m) if i == 0 => {
                return Err(Failure::usage(format!(
                    "-o {} is {}, not a directory",
                    dir.display(),
                    kind_of(&m)
                )))
            }
            Ok(m) => {
                return Err(Failure::usage(format!(
                    "-o {}: {} is {}, not a directory",
                    dir.display(),
                    at.display(),
                    kind_of(&m)
                )))
            }
            Err(_) if i == 0 && std::fs::symlink_metadata(at).is_ok() => {
                return Err(Failure::usage(format!(
                    "-o {} is a symbolic link to nothing",
                    dir.display()
                )))
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// The names an earlier run's marker lists (plain names only: a marker cannot point outside).
fn read_marker(path: &Path) -> Result<BTreeSet<String>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| !l.contains('/') && *l != "." && *l != "..")
        .map(String::from)
        .collect())
}

/// Whether `name` is one the earlier run wrote: listed, or the temporary file an interrupted
/// atomic write of a listed file left (`.NAME.tmp.PID`).
fn earlier_runs(name: &str, earlier: &BTreeSet<String>) -> bool {
    earlier.contains(name)
        || name.strip_prefix('.').is_some_and(|rest| {
            rest.rsplit_once(".tmp.").is_some_and(|(file, pid)| {
                earlier.contains(file) && pid.bytes().all(|b| b.is_ascii_digit())
            })
        })
}

impl OutputDir {
    /// Check `dir` before any step and make it ready: created when missing, an earlier doctor
    /// run's files removed, anything else refused (exit 2).
    pub fn prepare(dir: &Path) -> Result<OutputDir, Failure> {
        refuse_non_directory(dir)?;
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| {
                Failure::internal(format!("cannot create -o {}: {e}", dir.display()))
            })?;
        }
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Failure::usage(format!("cannot read -o {}: {e}", dir.display())))?;
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry
                .map_err(|e| Failure::usage(format!("cannot read -o {}: {e}", dir.display())))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort_unstable();
        if !names.is_empty() {
            if !names.iter().any(|n| n == MARKER) {
                return Err(Failure::usage(format!(
                    "-o {} is not empty and was not written by ncclprobe doctor: {}; choose a new or empty directory",
                    dir.display(),
                    listed(&names)
                )));
            }
            let earlier = read_marker(&dir.join(MARKER))?;
            let is_earlier_file = |name: &String| {
                earlier_runs(name, &earlier)
                    && std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_file())
            };
            let foreign: Vec<String> = names
                .iter()
                .filter(|n| *n != MARKER && !is_earlier_file(n))
                .cloned()
                .collect();
            if !foreign.is_empty() {
                return Err(Failure::usage(format!(
                    "-o {} holds what the earlier ncclprobe doctor run there did not write: {}; move it away or choose another directory",
                    dir.display(),
                    listed(&foreign)
                )));
            }
            for name in names.iter().filter(|n| *n != MARKER) {
                let path = dir.join(name);
                std::fs::remove_file(&path).map_err(|e| {
                    Failure::internal(format!(
                        "cannot remove {} of the earlier doctor run: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        let out = OutputDir {
            dir: dir.to_path_buf(),
            written: Vec::new(),
        };
        out.write_marker()?;
        Ok(out)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// List `name` as this run's before anything writes it; its path.
    pub fn claim(&mut self, name: &str) -> Result<PathBuf, Failure> {
        if !self.written.iter().any(|n| n == name) {
            self.written.push(name.to_string());
            self.write_marker()?;
        }
        Ok(self.dir.join(name))
    }

    fn write_marker(&self) -> Result<(), Failure> {
        let mut text = format!("{MARKER_HEADER}\n");
        for name in &self.written {
            text.push_str(name);
            text.push('\n');
        }
        let path = self.dir.join(MARKER);
        crate::render::record::write_atomic(&path, text.as_bytes())
            .map_err(|e| Failure::internal(format!("cannot write {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_of_listed_names_are_the_earlier_runs() {
        let earlier: BTreeSet<String> = ["run.json".to_string()].into();
        assert!(earlier_runs("run.json", &earlier));
        assert!(earlier_runs(".run.json.tmp.4242", &earlier));
        assert!(!earlier_runs(".run.json.tmp.x", &earlier));
        assert!(!earlier_runs(".notes.txt.tmp.1", &earlier));
        assert!(!earlier_runs("notes.txt", &earlier));
    }

    #[test]
    fn a_marker_cannot_name_a_path_outside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join(MARKER);
        std::fs::write(
            &marker,
            "# header\nrun.json\n../victim\n/etc/passwd\n..\n\n",
        )
        .unwrap();
        let names: Vec<String> = read_marker(&marker).unwrap().into_iter().collect();
        assert_eq!(names, ["run.json"]);
    }
}

//! Writing results to disk as they are measured, so that a crash, a signal or a bad path loses
//! nothing and clobbers nothing that is not ours: a regular file (or a new one) is replaced
//! atomically (a temporary file beside it, then a rename), a symlink's target is replaced
//! rather than the link, and anything else (a device such as /dev/null, a FIFO) is written
//! through, never renamed over.

use crate::model::RunRecord;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary file's name for `name` in this process: `.NAME.tmp.PID`.
fn temp_name(name: &str, pid: u32) -> String {
    format!(".{name}.tmp.{pid}")
}

/// The file a path finally names: symlinks followed (a dangling link names its target-to-be).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

/// Remove `.NAME.tmp.PID` files of processes that no longer exist (a `kill -9` between writing
/// and renaming leaves one); our own and live processes' are left alone.
pub fn clean_stale_temps(path: &Path) {
    let Ok(target) = resolve(path) else { return };
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.tmp.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        if pid != std::process::id() && !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Replace what `path` names with `contents`, without ever replacing something that is not a
/// regular file (see the module comment).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let target = resolve(path)?;
    match std::fs::metadata(&target) {
        Ok(m) if !m.is_file() && !m.is_dir() => {
            // A device or FIFO: write through, never rename over it.
            let mut f = std::fs::OpenOptions::new().write(true).open(&target)?;
            return f.write_all(contents);
        }
        Ok(m) if m.is_dir() => {
            return Err(std::io::Error::other(format!(
                "{} is a directory",
                target.display()
            )))
        }
        _ => {}
    }
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(temp_name(&name, std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Where the record and CSV go; `None` for a file means stdout at the end (or not at all).
pub struct RecordSink {
    pub record: RunRecord,
    pub json_path: Option<PathBuf>,
    pub csv_path: Option<PathBuf>,
}

impl RecordSink {
    /// Flush the current record (and CSV) to their files.
    pub fn flush(&self) -> anyhow::Result<()> {
        use anyhow::Context;
        if let Some(path) = &self.json_path {
            let json = serde_json::to_vec_pretty(&self.record)?;
            write_atomic(path, &json).with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &self.csv_path {
            let csv = super::csv::to_string(&self.record.points)?;
            write_atomic(path, csv.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// What stdout carries besides (or instead of) the human table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Table,
    Csv,
    Json,
}

/// Where a run record (or pair matrix) and its CSV go: files, and what stdout carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outputs {
    /// The JSON document (rewritten as each point completes; `-` = stdout at the end).
    pub json: Option<PathBuf>,
    /// The CSV (like `json`).
    pub csv: Option<PathBuf>,
    pub format: Format,
}

impl Outputs {
    fn is_stdout(p: &Option<PathBuf>) -> bool {
        p.as_ref().is_some_and(|p| p.as_os_str() == "-")
    }

    pub fn json_to_stdout(&self) -> bool {
        Self::is_stdout(&self.json)
    }

    pub fn csv_to_stdout(&self) -> bool {
        Self::is_stdout(&self.csv)
    }

    /// Whether stdout carries the human table (nothing else was routed there).
    pub fn table_on_stdout(&self) -> bool {
        self.format == Format::Table && !self.json_to_stdout() && !self.csv_to_stdout()
    }

    /// Refuse outputs that would overwrite each other: both files on one path, or two
    /// documents on stdout.
    pub fn check(&self) -> Result<(), crate::exit::Failure> {
        let json_out = self.format == Format::Json || self.json_to_stdout();
        let csv_out = self.format == Format::Csv || self.csv_to_stdout();
        if json_out && csv_out {
            return Err(crate::exit::Failure::usage(
                "--json/--csv/--format: stdout can carry one document (the JSON or the CSV); send the other to a file",
            ));
        }
        if let (Some(j), Some(c)) = (&self.json, &self.csv) {
            let same = |a: &PathBuf, b: &PathBuf| {
                a == b
                    || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
                        (Ok(x), Ok(y)) => x == y,
                        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
                    }
            };
            if j.as_os_str() != "-" && same(j, c) {
                return Err(crate::exit::Failure::usage(format!(
                    "--json and --csv both name {}: one would overwrite the other",
                    j.display()
                )));
            }
        }
        Ok(())
    }

    /// Where the record and CSV files go (`-` is stdout, not a file). Temporary files that a
    /// killed run left beside them are removed.
    pub fn sink(&self, record: RunRecord) -> RecordSink {
        let file = |p: &Option<PathBuf>| p.clone().filter(|p| p.as_os_str() != "-");
        let (json_path, csv_path) = (file(&self.json), file(&self.csv));
        for p in json_path.iter().chain(csv_path.iter()) {
            clean_stale_temps(p);
        }
        RecordSink {
            record,
            json_path,
            csv_path,
        }
    }
}

/// What stdout carries for a run record: the JSON with `--format json` or `--json -`, the CSV
/// with `--format csv` or `--csv -` (each once, JSON first).
pub fn stdout_documents(out: &Outputs, record: &RunRecord) -> Result<String, crate::exit::Failure> {
    let mut text = String::new();
    if out.format == Format::Json || out.json_to_stdout() {
        text.push_str(&super::to_json(record)?);
        text.push('\n');
    }
    if out.format == Format::Csv || out.csv_to_stdout() {
        text.push_str(
            &super::csv::to_string(&record.points)
                .map_err(|e| crate::exit::Failure::internal(e.to_string()))?,
        );
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_is_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }

    #[test]
    fn a_fifo_is_written_through_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_atomic(&fifo, b"through").unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        use std::os::unix::fs::FileTypeExt;
        assert!(kind.is_fifo(), "the FIFO is still a FIFO");
    }

    #[test]
    fn stale_temporary_files_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.json");
        // PIDs above the kernel's pid_max (4194304 at most) never belong to a live process.
        let stale = dir.path().join(temp_name("run.json", 4_194_305));
        let mine = dir.path().join(temp_name("run.json", std::process::id()));
        let other = dir.path().join(".other.json.tmp.4194305");
        for f in [&stale, &mine, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        clean_stale_temps(&out);
        assert!(!stale.exists());
        assert!(mine.exists() && other.exists());
    }
}

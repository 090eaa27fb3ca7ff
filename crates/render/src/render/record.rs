//! Writing results to disk as they are measured, so that a crash, a signal or a bad path loses
//! nothing and clobbers nothing that is not ours: a regular file (or a new one) is replaced
//! atomically (a temporary file beside it, then a rename), a symlink's target is replaced
//! rather than the link, and anything else (a device such as /dev/null, a FIFO, a pipe or file
//! named by `/dev/stdout` or `/dev/fd/N`) is written through in place, never renamed over, once
//! at the end of a run, and within a time limit (a FIFO nobody reads fails instead of hanging).

#[path = "paths.rs"]
pub mod paths;

use crate::model::RunRecord;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary file's name for `name` in this process: `.NAME.tmp.PID`.
fn temp_name(name: &str, pid: u32) -> String {
    format!(".{name}.tmp.{pid}")
}

/// The file a path finally names: symlinks followed (a dangling link names its target-to-be),
/// by the guard's own walk; a chain still a link after it is a loop.
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let (end, _) = paths::follow(path);
    match std::fs::symlink_metadata(&end) {
        Ok(m) if m.file_type().is_symlink() => Err(std::io::Error::other(format!(
            "{}: too many levels of symbolic links",
            path.display()
        ))),
        _ => Ok(end),
    }
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

/// How long a write to a special file may wait for its reader when the caller sets no limit.
pub const SPECIAL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Replace what `path` names with `contents`, without ever replacing something that is not a
/// regular file (see the module comment); a special file gets [`SPECIAL_PATIENCE`].
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_within(path, contents, SPECIAL_PATIENCE)
}

/// [`write_atomic`], with a special file's write bounded by `patience`.
pub fn write_within(
    path: &Path,
    contents: &[u8],
    patience: std::time::Duration,
) -> std::io::Result<()> {
    if paths::target(path) == paths::Target::Special {
        return write_through(path, contents, patience);
    }
    let target = resolve(path)?;
    if std::fs::metadata(&target).is_ok_and(|m| m.is_dir()) {
        return Err(std::io::Error::other(format!(
            "{} is a directory",
            target.display()
        )));
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

/// Writes `contents` to a new file `STEM.EXT` in `dir` (`STEM-1.EXT`, `STEM-2.EXT`, … when
/// taken), never replacing anything: the whole file appears at once (a temporary file,
/// linked under its name only when that name is free). Its path.
pub fn write_new(dir: &Path, stem: &str, ext: &str, contents: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(temp_name(&format!("{stem}.{ext}"), std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(contents)?;
        f.sync_data()?;
        for n in 0..1000 {
            let name = match n {
                0 => format!("{stem}.{ext}"),
                n => format!("{stem}-{n}.{ext}"),
            };
            let target = dir.join(name);
            match std::fs::hard_link(&tmp, &target) {
                Ok(()) => return Ok(target),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "{stem}.{ext} and 999 numbered names are taken"
        )))
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// A finished document written where a flag sent it: stdout (`-`, `/dev/stdout`) through the
/// one stdout writer, a file by [`write_atomic`]. A write that fails is exit 1 (an I/O
/// failure writing results), naming the flag and the file.
pub fn write_document(flag: &str, path: &Path, bytes: &[u8]) -> Result<(), crate::exit::Failure> {
    if paths::is_stdout(path) {
        return crate::exit::print(&String::from_utf8_lossy(bytes));
    }
    write_atomic(path, bytes).map_err(|e| {
        crate::exit::Failure::internal(format!("{flag} {}: cannot write: {e}", path.display()))
    })
}

/// Write into a special file in place: the path as given is opened (a descriptor link reopens
/// what the descriptor names; a regular file behind one is appended to, as `>>` would), on a
/// thread of its own, so that a FIFO with no reader, or one whose reader stopped reading,
/// ends in an error after `patience` instead of a hang.
fn write_through(
    path: &Path,
    contents: &[u8],
    patience: std::time::Duration,
) -> std::io::Result<()> {
    let (path, contents) = (path.to_path_buf(), contents.to_vec());
    let shown = path.display().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("special-file-writer".into())
        .spawn(move || {
            let regular = std::fs::metadata(&path).is_ok_and(|m| m.is_file());
            let result = std::fs::OpenOptions::new()
                .write(true)
                .append(regular)
                .open(&path)
                .and_then(|mut f| f.write_all(&contents).and_then(|_| f.flush()));
            let _ = tx.send(result);
        })?;
    match rx.recv_timeout(patience) {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "{shown}: nothing took the output within {:.0} s (a FIFO with no reader, or one that stopped reading)",
                patience.as_secs_f64()
            ),
        )),
    }
}

/// Where the record and CSV go; `None` for a file means stdout at the end (or not at all).
/// Regular files are rewritten as each point completes; special files (see the module
/// comment) get the record once, by [`RecordSink::complete`].
pub struct RecordSink {
    pub record: RunRecord,
    pub json_path: Option<PathBuf>,
    pub csv_path: Option<PathBuf>,
    /// How long a special file's reader may keep the final write waiting.
    pub patience: std::time::Duration,
    /// The special files have had their one write.
    completed: bool,
}

impl RecordSink {
    fn documents(&self) -> anyhow::Result<Vec<(&PathBuf, Vec<u8>)>> {
        let mut docs = Vec::new();
        if let Some(path) = &self.json_path {
            docs.push((path, serde_json::to_vec_pretty(&self.record)?));
        }
        if let Some(path) = &self.csv_path {
            docs.push((
                path,
                super::csv::to_string(&self.record.points)?.into_bytes(),
            ));
        }
        Ok(docs)
    }

    /// Flush the current record (and CSV) to their regular files.
    pub fn flush(&self) -> anyhow::Result<()> {
        use anyhow::Context;
        for (path, bytes) in self.documents()? {
            if paths::target(path) == paths::Target::Regular {
                write_atomic(path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Ok(())
    }

    /// The run is over: flush, and give special files their one write (a second call
    /// leaves them alone).
    pub fn complete(&mut self) -> anyhow::Result<()> {
        use anyhow::Context;
        self.flush()?;
        if std::mem::replace(&mut self.completed, true) {
            return Ok(());
        }
        for (path, bytes) in self.documents()? {
            if paths::target(path) == paths::Target::Special {
                write_within(path, &bytes, self.patience)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
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
    /// `-`, or a path that is this process's stdout (`/dev/stdout`, `/dev/fd/1`): the
    /// document goes through the one stdout writer at the end.
    fn is_stdout(p: &Option<PathBuf>) -> bool {
        p.as_deref().is_some_and(paths::is_stdout)
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

    /// The outputs as the path guard sees them (the caller adds its inputs and other files).
    pub fn files(&self, files: paths::Files) -> paths::Files {
        files
            .output("--json", self.json.as_deref())
            .output("--csv", self.csv.as_deref())
            .stdout("--format json", self.format == Format::Json)
            .stdout("--format csv", self.format == Format::Csv)
    }

    /// Refuse outputs that would overwrite each other: both files on one path, or two
    /// documents on stdout.
    pub fn check(&self) -> Result<(), crate::exit::Failure> {
        self.files(paths::Files::new()).check()
    }

    /// Where the record and CSV files go (`-` is stdout, not a file). Temporary files that a
    /// killed run left beside them are removed.
    pub fn sink(&self, record: RunRecord, patience: std::time::Duration) -> RecordSink {
        let file = |p: &Option<PathBuf>| p.clone().filter(|p| !paths::is_stdout(p));
        let (json_path, csv_path) = (file(&self.json), file(&self.csv));
        for p in json_path.iter().chain(csv_path.iter()) {
            clean_stale_temps(p);
        }
        RecordSink {
            record,
            json_path,
            csv_path,
            patience,
            completed: false,
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

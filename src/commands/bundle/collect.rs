//! What the bundle holds: each file written, or missing and why, and the list of the files it
//! made. Every file is made through the directory's handle with create-new and no-follow
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`), so a link planted under one of its names while it runs is
//! refused, never written through; `--redact` and the archive read only the files listed.

use super::output::io;
use super::process::run;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

/// What one collected item came to.
pub struct Item {
    pub file: String,
    pub what: String,
    /// `None`: written; `Some(why)`: not there, and why.
    pub missing: Option<String>,
}

/// The most of one of the bundle's own files that is read back (for `--redact`, the summary):
/// what a program's run is kept to.
pub const READ_BACK_BYTES: u64 = 64 << 20;

pub struct Bundle {
    /// The directory, for messages and the short run's own paths.
    pub dir: PathBuf,
    handle: OwnedFd,
    pub items: Vec<Item>,
    /// The files in the bundle, relative (`nccl/ncclDebug.host.1`), as they were made: by
    /// ncclprobe, or by the short run and found to be regular files.
    files: Vec<String>,
    /// The directories made inside it (`nccl`, `nccl-conf`).
    subdirs: Vec<String>,
}

impl Bundle {
    pub fn new(dir: PathBuf, handle: OwnedFd) -> Bundle {
        Bundle {
            dir,
            handle,
            items: Vec::new(),
            files: Vec::new(),
            subdirs: Vec::new(),
        }
    }

    pub fn files(&self) -> &[String] {
        &self.files
    }

    pub fn subdirs(&self) -> &[String] {
        &self.subdirs
    }

    /// `sub` inside the bundle, made (once) with no access for others, and opened without
    /// following a link.
    pub fn subdir(&mut self, sub: &str) -> std::io::Result<OwnedFd> {
        if !self.subdirs.iter().any(|s| s == sub) {
            rustix::fs::mkdirat(&self.handle, sub, Mode::from_raw_mode(0o700)).map_err(io)?;
            self.subdirs.push(sub.to_string());
        }
        self.open_subdir(sub)
    }

    fn open_subdir(&self, sub: &str) -> std::io::Result<OwnedFd> {
        rustix::fs::openat(
            &self.handle,
            sub,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)
    }

    /// The directory `file` sits in (the bundle's, or one of its subdirectories) and its name.
    fn place<'a>(&self, file: &'a str) -> std::io::Result<(Option<OwnedFd>, &'a str)> {
        match file.split_once('/') {
            Some((sub, name)) => Ok((Some(self.open_subdir(sub)?), name)),
            None => Ok((None, file)),
        }
    }

    /// A new file of the bundle, readable by the user alone, listed in [`Bundle::files`].
    fn create(&mut self, file: &str) -> std::io::Result<std::fs::File> {
        if let Some((sub, _)) = file.split_once('/') {
            self.subdir(sub)?;
        }
        let (sub, name) = self.place(file)?;
        let fd = rustix::fs::openat(
            sub.as_ref().unwrap_or(&self.handle),
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        self.files.push(file.to_string());
        Ok(std::fs::File::from(fd))
    }

    /// One of the bundle's listed files, opened without following a link and only when it
    /// is a regular file; `write`: for rewriting in place.
    pub fn open(&self, file: &str, write: bool) -> std::io::Result<std::fs::File> {
        let (sub, name) = self.place(file)?;
        let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let fd = rustix::fs::openat(
            sub.as_ref().unwrap_or(&self.handle),
            name,
            access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let f = std::fs::File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        Ok(f)
    }

    /// A listed file's text (at most [`READ_BACK_BYTES`]), `None` when it is not there.
    pub fn read(&self, file: &str) -> Option<String> {
        if !self.files.iter().any(|f| f == file) {
            return None;
        }
        let mut bytes = Vec::new();
        let f = self.open(file, false).ok()?;
        crate::bounded::read_to_cap(f, READ_BACK_BYTES, &mut bytes).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Rename a listed file inside its directory; a name already taken is not replaced.
    pub fn rename(&mut self, file: &str, new_name: &str) -> std::io::Result<()> {
        let (sub, name) = self.place(file)?;
        let dir = sub.as_ref().unwrap_or(&self.handle);
        rustix::fs::renameat_with(dir, name, dir, new_name, rustix::fs::RenameFlags::NOREPLACE)
            .map_err(io)?;
        let renamed = match file.split_once('/') {
            Some((s, _)) => format!("{s}/{new_name}"),
            None => new_name.to_string(),
        };
        self.files.retain(|f| f != file);
        self.files.push(renamed);
        Ok(())
    }

    /// Take a listed file out of the bundle (one that could not be redacted).
    pub fn remove(&mut self, file: &str) {
        if let Ok((sub, name)) = self.place(file) {
            let _ =
                rustix::fs::unlinkat(sub.as_ref().unwrap_or(&self.handle), name, AtFlags::empty());
        }
        self.files.retain(|f| f != file);
    }

    /// List what the short run wrote into `sub` (NCCL's debug files and dumps) and `run.json`:
    /// regular files only; a link or anything else there is left out of the bundle.
    pub fn adopt(&mut self, sub: &str, top: &[&str]) {
        if let Ok(fd) = self.open_subdir(sub) {
            let mut names: Vec<String> = rustix::fs::Dir::read_from(&fd)
                .into_iter()
                .flatten()
                .flatten()
                // Some file systems do not say the type here: the open below checks it.
                .filter(|e| matches!(e.file_type(), FileType::RegularFile | FileType::Unknown))
                .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
                .collect();
            names.sort();
            for name in names {
                let file = format!("{sub}/{name}");
                if !self.files.contains(&file) && self.open(&file, false).is_ok() {
                    self.files.push(file);
                }
            }
        }
        for name in top {
            let regular = rustix::fs::statat(&self.handle, *name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
            if regular && !self.files.iter().any(|f| f == name) {
                self.files.push(name.to_string());
            }
        }
    }

    pub fn write(&mut self, file: &str, what: &str, text: &str) {
        let missing = self
            .create(file)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .err()
            .map(|e| e.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// D8: a link planted in the bundle's directory under a name the bundle writes (another
    /// user's race) is not written through: its target keeps its content.
    #[test]
    fn a_link_planted_under_a_name_the_bundle_writes_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let out = super::super::output::prepare(&dir.path().join("b")).unwrap();
        std::os::unix::fs::symlink(&victim, out.dir.join("versions.txt")).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), out.dir.join("nccl-conf"))
            .unwrap();
        let mut b = Bundle::new(out.dir.clone(), out.handle);
        b.write("versions.txt", "versions", "overwritten");
        b.write("nccl-conf/etc-nccl.conf", "conf", "overwritten");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(
            std::fs::read_dir(dir.path().join("elsewhere"))
                .unwrap()
                .count(),
            0
        );
        assert!(b.items.iter().all(|i| i.missing.is_some()));
        assert!(b.files().is_empty(), "{:?}", b.files());
        assert_eq!(b.read("versions.txt"), None);
    }
}

//! The one output-path guard: every command names the files it reads and the files it writes
//! before it does any work, and anything that would lose data is refused with exit 2 — an
//! output that is one of the inputs (by name, through a symlink or a hard link: files are
//! compared by device and inode, paths not yet created by their real directory), two outputs
//! on one file, two documents on stdout (`-`, `/dev/stdout`, `/dev/fd/1`), an output that is a
//! directory, a directory that is a file, a file whose directory does not exist.
//!
//! Special files (character devices, FIFOs, sockets, and `/dev/fd/N`, `/proc/*/fd/N`,
//! `/dev/stdout`, `/dev/stderr`) are never replaced by a rename: see [`Target`].

use crate::exit::Failure;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// nccl-tests' variable naming alltoallv_perf's traffic matrix (src/alltoallv.cu:150).
pub const ALLTOALLV_MATRIX_ENV: &str = "NCCL_TESTS_ALLTOALLV_MATRIX_FILE";

/// What a path finally names, for telling two paths apart.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    /// This process's standard output.
    Stdout,
    /// Standard input (`-` as an input).
    Stdin,
    /// An existing file or directory.
    Inode(u64, u64),
    /// A path that does not exist yet: its real directory and its name.
    New(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Input,
    Output,
    /// A directory the command writes files into.
    Directory,
}

#[derive(Debug, Clone)]
struct Entry {
    flag: String,
    path: PathBuf,
    role: Role,
}

/// The files of one command (see the module comment).
#[derive(Debug, Clone, Default)]
pub struct Files {
    entries: Vec<Entry>,
    /// Documents stdout carries whatever the paths say (`--format json`, a default table that
    /// other flags do not replace), by the flag that sends them.
    stdout: Vec<String>,
}

/// `(device, inode)` of an open standard output, when it has one.
fn stdout_inode() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let m = std::fs::File::from(fd).metadata().ok()?;
    Some((m.dev(), m.ino()))
}

/// The path a chain of symlinks ends at (a dangling link names its target-to-be), and whether
/// the chain went through a file-descriptor link (`/dev/fd/N`, `/proc/PID/fd/N`, which
/// `/dev/stdout` and `/dev/stderr` are).
pub fn follow(path: &Path) -> (PathBuf, bool) {
    let mut current = path.to_path_buf();
    let mut through_fd = is_fd_link(path);
    for _ in 0..40 {
        let Ok(m) = std::fs::symlink_metadata(&current) else {
            break;
        };
        if !m.file_type().is_symlink() {
            break;
        }
        let Ok(target) = std::fs::read_link(&current) else {
            break;
        };
        // A descriptor link to a pipe, socket or anonymous inode names no path (`pipe:[N]`):
        // the kernel opens it, not a path walk.
        if through_fd && target.is_relative() && target.to_string_lossy().contains(":[") {
            break;
        }
        current = match current.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
        through_fd |= is_fd_link(&current);
    }
    (current, through_fd)
}

/// `/dev/fd/N`, `/dev/stdout`, `/dev/stderr`, `/proc/PID/fd/N`: names of an open descriptor.
fn is_fd_link(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.starts_with("/dev/fd/")
        || s == "/dev/stdout"
        || s == "/dev/stderr"
        || s == "/dev/stdin"
        || (s.starts_with("/proc/") && s.contains("/fd/"))
}

/// How a path is written: a regular file (or a new one) by a temporary file and a rename; a
/// special file in place, once, bounded in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Regular,
    Special,
}

/// Whether `path` is written in place (see [`Target`]).
pub fn target(path: &Path) -> Target {
    let (end, through_fd) = follow(path);
    if through_fd {
        return Target::Special;
    }
    match std::fs::metadata(end) {
        Ok(m) if !m.is_file() && !m.is_dir() => Target::Special,
        _ => Target::Regular,
    }
}

/// Whether `path` is this process's standard output (`-`, `/dev/stdout`, `/dev/fd/1`, or the
/// very file stdout was redirected to).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-" || identity(path, Role::Output) == Identity::Stdout
}

fn identity(path: &Path, role: Role) -> Identity {
    if path.as_os_str() == "-" {
        return match role {
            Role::Input => Identity::Stdin,
            _ => Identity::Stdout,
        };
    }
    let (end, _) = follow(path);
    // The kernel follows descriptor links to what they hold (a pipe, a socket), which a
    // path walk cannot; `end` names what a dangling link would create.
    match std::fs::metadata(path).or_else(|_| std::fs::metadata(&end)) {
        Ok(m) => {
            let inode = (m.dev(), m.ino());
            if role != Role::Input && stdout_inode() == Some(inode) && !m.is_dir() {
                return Identity::Stdout;
            }
            Identity::Inode(inode.0, inode.1)
        }
        Err(_) => {
            let dir = end
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let dir = std::fs::canonicalize(dir)
                .or_else(|_| std::path::absolute(dir))
                .unwrap_or_else(|_| dir.to_path_buf());
            Identity::New(dir.join(end.file_name().unwrap_or_default()))
        }
    }
}

impl Files {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(mut self, flag: &str, path: Option<&Path>, role: Role) -> Self {
        if let Some(path) = path {
            self.entries.push(Entry {
                flag: flag.to_string(),
                path: path.to_path_buf(),
                role,
            });
        }
        self
    }

    /// A file the command reads.
    pub fn input(self, flag: &str, path: Option<&Path>) -> Self {
        self.push(flag, path, Role::Input)
    }

    /// Files the command reads, under one flag (or as its positional arguments).
    pub fn inputs(self, flag: &str, paths: &[PathBuf]) -> Self {
        paths
            .iter()
            .fold(self, |files, p| files.input(flag, Some(p.as_path())))
    }

    /// A file the command writes (`-` = stdout).
    pub fn output(self, flag: &str, path: Option<&Path>) -> Self {
        self.push(flag, path, Role::Output)
    }

    /// A directory the command writes files into (created when missing).
    pub fn directory(self, flag: &str, path: Option<&Path>) -> Self {
        self.push(flag, path, Role::Directory)
    }

    /// The traffic matrix `NCCL_TESTS_ALLTOALLV_MATRIX_FILE` names, when set: an input of
    /// every sweep and drop-in started with it (nccl-tests' alltoallv_perf reads it, and a
    /// sweep that does not is still not to overwrite the file the variable points at).
    pub fn alltoallv_matrix_env(self) -> Self {
        let path = std::env::var_os(ALLTOALLV_MATRIX_ENV).filter(|p| !p.is_empty());
        self.input(ALLTOALLV_MATRIX_ENV, path.as_deref().map(Path::new))
    }

    /// A document stdout carries whatever the paths say, sent by `flag` (`--format json`).
    pub fn stdout(mut self, flag: &str, carries: bool) -> Self {
        if carries {
            self.stdout.push(flag.to_string());
        }
        self
    }

    /// Refuse (exit 2, in words) anything that would lose data; see the module comment.
    pub fn check(&self) -> Result<(), Failure> {
        let named = |e: &Entry| format!("{} {}", e.flag, e.path.display());
        let mut on_stdout: Vec<String> = self.stdout.clone();
        let mut seen: Vec<(Identity, &Entry)> = Vec::new();
        for e in &self.entries {
            let id = identity(&e.path, e.role);
            if e.role != Role::Input {
                check_writable(e)?;
            }
            match (&id, e.role) {
                (Identity::Stdout, Role::Directory) => {
                    return Err(Failure::usage(format!(
                        "{}: a directory is needed here, not stdout",
                        named(e)
                    )))
                }
                (Identity::Stdout, _) => on_stdout.push(e.flag.clone()),
                (Identity::Stdin, _) => {
                    if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
                        return Err(Failure::usage(format!(
                            "{} and {} both read stdin (-): stdin can be read once; save it to a file for one of them",
                            first.flag, e.flag
                        )));
                    }
                }
                _ => {
                    // Reading one file twice loses nothing; writing it does.
                    let clash = |(i, f): &&(Identity, &Entry)| {
                        *i == id && (f.role != Role::Input || e.role != Role::Input)
                    };
                    if let Some((_, first)) = seen.iter().find(clash) {
                        return Err(overlap(first, e));
                    }
                }
            }
            seen.push((id, e));
        }
        if on_stdout.len() > 1 {
            return Err(Failure::usage(format!(
                "{}: stdout can carry one document; send the others to files",
                on_stdout.join(" and ")
            )));
        }
        Ok(())
    }
}

/// Two entries on one file: which one would destroy which.
fn overlap(first: &Entry, second: &Entry) -> Failure {
    let named = |e: &Entry| format!("{} {}", e.flag, e.path.display());
    let same = if first.path == second.path {
        String::new()
    } else {
        " (the same file)".to_string()
    };
    Failure::usage(match (first.role, second.role) {
        (Role::Input, _) => format!(
            "{} would overwrite the input {}{same}: write the output elsewhere",
            named(second),
            named(first)
        ),
        (_, Role::Input) => format!(
            "{} would overwrite the input {}{same}: write the output elsewhere",
            named(first),
            named(second)
        ),
        _ => format!(
            "{} and {} name one file{same}: one would overwrite the other",
            named(first),
            named(second)
        ),
    })
}

/// What is wrong with an output's path before anything is measured, in words.
fn check_writable(e: &Entry) -> Result<(), Failure> {
    if e.path.as_os_str() == "-" {
        return Ok(());
    }
    if e.path.as_os_str().is_empty() {
        return Err(Failure::usage(format!("{}: an empty path", e.flag)));
    }
    let (end, _) = follow(&e.path);
    let shown = e.path.display();
    let found = std::fs::metadata(&e.path).or_else(|_| std::fs::metadata(&end));
    match (found, e.role) {
        (Ok(m), Role::Directory) if !m.is_dir() => Err(Failure::usage(format!(
            "{} {shown}: is a file, not a directory",
            e.flag
        ))),
        (Ok(m), Role::Output) if m.is_dir() => Err(Failure::usage(format!(
            "{} {shown}: is a directory; name a file",
            e.flag
        ))),
        (Ok(_), _) => Ok(()),
        (Err(_), Role::Output) => {
            let dir = end
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => Err(Failure::usage(format!(
                    "{} {shown}: {} is a file, not a directory",
                    e.flag,
                    dir.display()
                ))),
                Err(_) => Err(Failure::usage(format!(
                    "{} {shown}: the directory {} does not exist",
                    e.flag,
                    dir.display()
                ))),
            }
        }
        (Err(_), _) => {
            // A directory is created with its parents; the first one that exists must be one.
            let blocking = end
                .ancestors()
                .skip(1)
                .find(|a| !a.as_os_str().is_empty() && std::fs::metadata(a).is_ok());
            match blocking {
                Some(a) if !a.is_dir() => Err(Failure::usage(format!(
                    "{} {shown}: {} is a file, not a directory",
                    e.flag,
                    a.display()
                ))),
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
#[path = "paths_tests.rs"]
mod tests;

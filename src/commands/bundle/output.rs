//! Where a bundle goes: `-o DIR` resolved to a real name (`-o .` is the working directory's
//! own name), `DIR.tar.gz` beside it and never inside, a parent that must exist, and the
//! directory made by the bundle itself or, when it exists, checked to be empty, the user's own
//! and closed to others. What is made later is made through the handles opened here, so a name
//! swapped for a link after these checks is never followed.

use crate::exit::Failure;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The bundle's directory, checked and opened without following a link.
pub struct Output {
    /// The directory as messages name it (`-o .` resolved to its real path).
    pub dir: PathBuf,
    pub handle: OwnedFd,
    pub beside: Beside,
}

/// What sits beside the directory: the archive, and the directory both are in.
pub struct Beside {
    /// The directory's own name, the archive's root.
    pub name: String,
    pub archive: PathBuf,
    pub archive_name: String,
    pub parent: OwnedFd,
}

/// A path as a message shows it: no escape sequence reaches the terminal.
pub fn shown(path: &Path) -> String {
    crate::render::safe::line(&path.display().to_string()).into_owned()
}

fn refuse(given: &Path, why: impl std::fmt::Display) -> Failure {
    Failure::usage(format!("-o {}: {why}", shown(given)))
}

const NEW_OR_EMPTY: &str = "is not empty; a bundle is written into a new or empty directory";

/// The directory to open (its parent) and its name, `.` and `..` resolved.
fn resolve(given: &Path) -> Result<(PathBuf, PathBuf, String), Failure> {
    let real;
    let path = match given.file_name() {
        Some(_) => given,
        // `.`, `..`, `a/..`: the directory they name, under its own name.
        None => {
            real = given.canonicalize().map_err(|e| refuse(given, e))?;
            &real
        }
    };
    let Some(name) = path.file_name() else {
        return Err(refuse(given, NEW_OR_EMPTY));
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((
        path.to_path_buf(),
        parent,
        name.to_string_lossy().into_owned(),
    ))
}

/// Check `-o` and make or open the bundle's directory; nothing is made when a check fails.
pub fn prepare(given: &Path) -> Result<Output, Failure> {
    let (dir, parent_path, name) = resolve(given)?;
    let parent = rustix::fs::open(
        &parent_path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT => refuse(
            given,
            format_args!(
                "{} does not exist; make it first (the bundle makes only its own directory)",
                shown(&parent_path)
            ),
        ),
        e => refuse(given, format_args!("{}: {}", shown(&parent_path), io(e))),
    })?;
    let archive_name = format!("{name}.tar.gz");
    let archive = dir.with_file_name(&archive_name);
    let handle = open_dir(&parent, &name).or_else(|e| match e {
        rustix::io::Errno::NOENT => {
            rustix::fs::mkdirat(&parent, name.as_str(), Mode::from_raw_mode(0o700))
                .map_err(|e| refuse(given, format_args!("cannot create it: {}", io(e))))?;
            open_dir(&parent, &name).map_err(|e| refuse(given, io(e)))
        }
        rustix::io::Errno::LOOP => Err(refuse(
            given,
            "is a symbolic link; name the directory itself",
        )),
        e => Err(refuse(given, io(e))),
    })?;
    if rustix::fs::Dir::read_from(&handle)
        .map_err(|e| refuse(given, io(e)))?
        .flatten()
        .any(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
    {
        return Err(refuse(given, NEW_OR_EMPTY));
    }
    closed_to_others(given, &handle)?;
    if rustix::fs::statat(&parent, archive_name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(Failure::usage(format!(
            "{}: exists; move it away (the bundle's archive is written there)",
            shown(&archive)
        )));
    }
    Ok(Output {
        dir,
        handle,
        beside: Beside {
            name,
            archive,
            archive_name,
            parent,
        },
    })
}

fn open_dir(parent: &OwnedFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// An existing directory must be the user's own and writable by no one else: another user who
/// can write into it could plant a link under a name the bundle writes, while it runs.
fn closed_to_others(given: &Path, handle: &OwnedFd) -> Result<(), Failure> {
    let st = rustix::fs::fstat(handle).map_err(|e| refuse(given, io(e)))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(refuse(
            given,
            format_args!(
                "belongs to another user (uid {}); a bundle is written into a directory of your own",
                st.st_uid
            ),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(
            given,
            format_args!(
                "others can write into it (mode {mode:04o}), and could plant links in it while the \
                 bundle runs; `chmod go-w` it or name a new directory"
            ),
        ));
    }
    Ok(())
}

pub fn io(e: rustix::io::Errno) -> std::io::Error {
    e.into()
}

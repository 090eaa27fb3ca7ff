//! `/etc/nccl.conf` and `~/.nccl.conf` as the bundle takes them: a regular file is read (its
//! first MiB); a link is named with where it points and its target left out (`~/.nccl.conf ->
//! /etc/shadow` must not copy the shadow file); a FIFO, a device, a socket or a directory is
//! named for what it is and never read, so a FIFO cannot hang the bundle nor `/dev/zero` fill
//! its memory.

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most of a conf file kept: NCCL's are a few lines.
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// What a conf file's path holds.
#[derive(Debug, PartialEq)]
pub enum Conf {
    /// A regular file's text; `cut`: it was longer than [`MAX_CONF_BYTES`].
    Text { text: String, cut: bool },
    /// Not there, or not to be read: why, in words.
    LeftOut(String),
}

/// What a file type is called when it is left out.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

pub fn read(path: &Path) -> Conf {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Conf::LeftOut("not present".into())
        }
        Err(e) => return Conf::LeftOut(format!("cannot be read: {e}")),
    };
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(path)
            .map(|t| super::output::shown(&t))
            .unwrap_or_else(|_| "?".into());
        return Conf::LeftOut(format!(
            "is a link to {to}, left out (the bundle copies no file a link points to)"
        ));
    }
    if !meta.is_file() {
        return Conf::LeftOut(format!("is {}, left out", kind(meta.file_type())));
    }
    // Opened without following a link and without waiting on a FIFO, then checked again on
    // the open file: the name may have been swapped since it was looked at.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) => return Conf::LeftOut(format!("cannot be read: {e}")),
    };
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(m) => return Conf::LeftOut(format!("is {}, left out", kind(m.file_type()))),
        Err(e) => return Conf::LeftOut(format!("cannot be read: {e}")),
    }
    let mut bytes = Vec::new();
    match crate::bounded::read_to_cap(file, MAX_CONF_BYTES, &mut bytes) {
        Ok(whole) => {
            bytes.truncate(MAX_CONF_BYTES as usize);
            Conf::Text {
                text: String::from_utf8_lossy(&bytes).into_owned(),
                cut: !whole,
            }
        }
        Err(e) => Conf::LeftOut(format!("cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_named_and_never_read() {
        for dev in ["/dev/zero", "/dev/null"] {
            assert_eq!(
                read(Path::new(dev)),
                Conf::LeftOut("is a device, left out".into())
            );
        }
    }

    #[test]
    fn a_link_is_named_with_its_target_and_a_regular_file_read() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nccl.conf");
        std::fs::write(&conf, "NCCL_DEBUG=WARN\n").unwrap();
        let link = dir.path().join("link.conf");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert_eq!(
            read(&conf),
            Conf::Text {
                text: "NCCL_DEBUG=WARN\n".into(),
                cut: false
            }
        );
        match read(&link) {
            Conf::LeftOut(why) => assert!(why.starts_with("is a link to /dev/zero, left out")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read(&dir.path().join("none")),
            Conf::LeftOut("not present".into())
        );
    }
}

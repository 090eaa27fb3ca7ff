//! `DIR.tar.gz`: the files the bundle listed and nothing else, each read through the bundle's
//! handle without following a link, written beside the directory under a temporary name made
//! create-new and renamed into place (never over an existing archive).

use super::collect::Bundle;
use super::output::{io, shown, Beside};
use crate::exit::Failure;
use rustix::fs::{AtFlags, Mode, OFlags};

fn create_new(beside: &Beside, name: &str) -> rustix::io::Result<std::os::fd::OwnedFd> {
    rustix::fs::openat(
        &beside.parent,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
}

/// A directory entry of the archive.
fn directory<W: std::io::Write>(tar: &mut tar::Builder<W>, path: &str) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o700);
    header.set_size(0);
    header.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    tar.append_data(&mut header, path, std::io::empty())
}

pub fn write(b: &Bundle, beside: &Beside) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::internal(format!("{}: {e}", shown(&beside.archive)));
    let partial = format!("{}.partial", beside.archive_name);
    // A partial archive left by a run that was killed is ours to replace.
    let fd = match create_new(beside, &partial) {
        Err(rustix::io::Errno::EXIST) => {
            let _ = rustix::fs::unlinkat(&beside.parent, partial.as_str(), AtFlags::empty());
            create_new(beside, &partial)
        }
        other => other,
    }
    .map_err(|e| fail(io(e)))?;
    let gz = flate2::write::GzEncoder::new(std::fs::File::from(fd), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let root = &beside.name;
    let result = (|| {
        directory(&mut tar, root)?;
        for sub in b.subdirs() {
            directory(&mut tar, &format!("{root}/{sub}"))?;
        }
        for file in b.files() {
            // A file that is no longer a regular file of ours (swapped since) stays out.
            let Ok(mut f) = b.open(file, false) else {
                continue;
            };
            tar.append_file(format!("{root}/{file}"), &mut f)?;
        }
        tar.into_inner()?.finish()?.sync_all()
    })();
    let rename = || {
        rustix::fs::renameat_with(
            &beside.parent,
            partial.as_str(),
            &beside.parent,
            beside.archive_name.as_str(),
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(io)
    };
    if let Err(e) = result.and_then(|()| rename()) {
        let _ = rustix::fs::unlinkat(&beside.parent, partial.as_str(), AtFlags::empty());
        return Err(fail(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{output, redact, summary};
    use super::*;

    /// D8: a link planted in the directory once the bundle's files are written is neither
    /// rewritten by `--redact` nor archived: the victim keeps its content and stays out of the
    /// tarball.
    #[test]
    fn a_link_planted_before_redaction_and_archiving_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "secret at 10.9.8.7\n").unwrap();
        let out = output::prepare(&dir.path().join("b")).unwrap();
        let mut b = Bundle::new(out.dir.clone(), out.handle);
        b.write("versions.txt", "versions", "ncclprobe: 0.1.0 on 10.1.1.1\n");
        std::os::unix::fs::symlink(&victim, out.dir.join("zz-planted.txt")).unwrap();
        std::fs::create_dir(out.dir.join("nccl")).unwrap();
        std::os::unix::fs::symlink(&victim, out.dir.join("nccl/ncclDebug.x.1")).unwrap();
        b.adopt("nccl", &["run.json"]);
        let mut redactor = redact::Redactor::default();
        summary::redact_all(&mut b, &mut redactor);
        write(&b, &out.beside).unwrap();
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "secret at 10.9.8.7\n"
        );
        assert_eq!(
            b.read("versions.txt").unwrap(),
            "ncclprobe: 0.1.0 on 192.0.2.1\n"
        );
        let file = std::fs::File::open(&out.beside.archive).unwrap();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
        let mut names = Vec::new();
        for entry in tar.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(&mut entry, &mut body);
            assert!(!body.contains("secret"), "{path}: {body}");
            names.push(path);
        }
        assert_eq!(names, ["b", "b/versions.txt"]);
    }
}

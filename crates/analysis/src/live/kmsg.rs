//! The kernel's log as `/dev/kmsg` holds it (every record still in the ring buffer since boot),
//! read for the NVIDIA driver's Xid events. Reading it needs root, or `kernel.dmesg_restrict`
//! at 0; when it cannot be read the reason is kept, and nothing is guessed.

use crate::import::xid::{self, XidEvent};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// At most this much of the log is read (the ring buffer is 128 KiB to a few MiB).
const MAX_BYTES: usize = 32 << 20;

/// The Xid events in `dev`/kmsg, or why the log could not be read.
pub fn xids(dev: &Path) -> Result<Vec<XidEvent>, String> {
    let path = dev.join("kmsg");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // Each read of /dev/kmsg returns one record; at the end it says EAGAIN instead of waiting.
    // A record overwritten while we read (EPIPE) is skipped. A plain file (a test's fixture)
    // reads as any file does.
    let mut all = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                all.extend_from_slice(&buf[..n]);
                if all.len() > MAX_BYTES {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(xid::parse(
        &path.display().to_string(),
        &String::from_utf8_lossy(&all),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn records_in_kmsg_form_give_their_events_and_a_missing_log_its_reason() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("kmsg"),
            "6,100,5000000,-;nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver\n\
             4,101,8841120519,-;NVRM: Xid (PCI:0000:18:00): 94, pid=4123, name=python3, Contained: SM (0x1). RST: No, D-RST: No\n \
             SUBSYSTEM=pci\n",
        )
        .unwrap();
        let ev = super::xids(d.path()).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!((ev[0].gpu.as_str(), ev[0].code), ("0000:18:00", 94));
        assert!(ev[0].message.starts_with("Contained: SM"));
        let none = super::xids(&d.path().join("absent")).unwrap_err();
        assert!(none.contains("kmsg"), "{none}");
    }
}

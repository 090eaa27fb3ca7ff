//! The NVIDIA driver's Xid events in a kernel log (`dmesg`, `journalctl -k`, `/dev/kmsg`,
//! `/var/log/kern.log`, or pasted into an issue):
//!
//! ```text
//! [ 8841.120519] NVRM: Xid (PCI:0000:cb:00): 79, pid=0, GPU has fallen off the bus.
//! NVRM: Xid (PCI:0000:3b:00): 48, pid=2231, name=python, An uncorrectable double bit error ...
//! ```
//!
//! The driver prints `pid=NNN, name=NAME, ` (or `pid='<unknown>', name=<unknown>, `) before the
//! message since the 470s and nothing before it earlier. Newer drivers also announce a GPU that
//! left the bus without an Xid number, over several lines ("The NVIDIA GPU 0000:b3:00.0 ...
//! fallen off the bus"): read as Xid 79. What each number means, and how bad it is, follows
//! NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors).

use super::text::{static_regex, Line};
use crate::documents::diagnosis::Evidence;
use std::sync::OnceLock;

/// One event: the GPU's PCI address as the driver names it (`0000:cb:00`), the Xid number and
/// the driver's words after it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct XidEvent {
    pub gpu: String,
    pub code: u32,
    pub message: String,
    pub evidence: Evidence,
}

/// How an Xid is to be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidClass {
    /// The GPU, its memory or its links failed: drain and reset (or service) it.
    Hardware,
    /// Memory repair recorded, error rates rising, a contained error: watch and reset soon.
    Degraded,
    /// Most often the application's own fault (a bad address, a killed context); the GPU is
    /// suspect only when it repeats across jobs.
    Application,
    /// Not in our catalog: look it up.
    Unknown,
}

/// NVIDIA's meaning for the Xids a collective job meets, and how to take each.
pub fn meaning(code: u32) -> (&'static str, XidClass) {
    use XidClass::*;
    match code {
        8 => ("GPU stopped processing (driver or application error)", Application),
        13 => ("graphics engine exception (usually an out-of-range access in a kernel)", Application),
        31 => ("GPU memory page fault (usually an invalid address in the application)", Application),
        32 => ("invalid or corrupted push buffer stream (PCIe or driver)", Degraded),
        38 => ("driver firmware error", Hardware),
        43 => ("GPU stopped processing: the context was reset (often after the application's own fault)", Application),
        45 => ("preemptive cleanup after an earlier error (the job was killed)", Application),
        48 => ("uncorrectable double-bit ECC error in GPU memory", Hardware),
        56 | 57 => ("display engine or memory interface error", Hardware),
        61 => ("internal micro-controller breakpoint", Hardware),
        62 => ("internal micro-controller halt", Hardware),
        63 => ("ECC page retirement or row remapping recorded (takes effect at the next reset)", Degraded),
        64 => ("ECC page retirement or row remapping failed to record", Hardware),
        69 => ("graphics engine class error", Application),
        74 => ("NVLink error (link fault, CRC or replay storm, link down)", Hardware),
        79 => ("GPU has fallen off the bus", Hardware),
        92 => ("high single-bit ECC error rate", Degraded),
        94 => ("contained ECC error: the affected application was stopped, the GPU kept running", Degraded),
        95 => ("uncontained ECC error: every application on the GPU was affected", Hardware),
        109 => ("context switch timeout", Application),
        119 => ("GSP firmware RPC timeout", Hardware),
        120 => ("GSP firmware error", Hardware),
        121 => ("C2C (chip-to-chip) link error", Hardware),
        140 => ("unrecovered ECC error", Hardware),
        143 => ("GPU initialization failure", Hardware),
        154 => ("GPU recovery action changed: the driver asks for a reset, drain or reboot", Hardware),
        _ => ("not in ncclprobe's catalog: see NVIDIA's Xid catalog", Unknown),
    }
}

/// An event's meaning and class, reading what the number alone does not say: NVLink5's Xids
/// 144-150 state `Fatal` or `Nonfatal` in their message, and Xid 45 (a cleanup) takes the
/// class of the Xid it says caused it ("caused by previous Xid 149").
pub fn classify(code: u32, message: &str) -> (&'static str, XidClass) {
    if (144..=150).contains(&code) {
        return if message.contains("Nonfatal") {
            (
                "NVLink5 non-fatal link event (SAW, RLW, NETIR ... unit)",
                XidClass::Degraded,
            )
        } else {
            (
                "NVLink5 link error (SAW, RLW, NETIR ... unit), fatal or not stated",
                XidClass::Hardware,
            )
        };
    }
    if code == 45 {
        let cause = message
            .split("caused by previous Xid")
            .nth(1)
            .and_then(|rest| rest.trim().split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(cause) = cause.filter(|c| *c != 45) {
            let (_, class) = classify(cause, "");
            if class != XidClass::Application {
                return (
                    "cleanup after an earlier hardware Xid: the job's channels were torn down",
                    class,
                );
            }
        }
    }
    meaning(code)
}

fn xid_line() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    // `(PCI:0000:cb:00)` today; `(0000:cb:00)` and `(GPU-<uuid>)` have been seen too.
    static_regex(
        &RE,
        r"NVRM: Xid \((?:PCI:)?(?P<gpu>[^)]+)\): (?P<code>\d+),\s*(?:pid=(?:'[^']*'|[^,]*),\s*)?(?:name=(?:'[^']*'|[^,]*),\s*)?(?P<msg>.*)$",
    )
}

fn fell_off_start() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    static_regex(
        &RE,
        r"NVRM: The NVIDIA GPU (?P<gpu>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})",
    )
}

/// Reads Xid events line by line, keeping the start of a multi-line "fallen off the bus".
#[derive(Debug, Default)]
pub struct XidReader {
    pub events: Vec<XidEvent>,
    /// "The NVIDIA GPU 0000:b3:00.0" seen: (GPU, its line), waiting for the rest.
    announced: Option<(String, Line)>,
}

impl XidReader {
    pub fn feed(&mut self, file: &str, line: &Line) {
        let evidence = |l: &Line| Evidence {
            file: file.to_string(),
            line: l.number,
            text: l.text.trim().to_string(),
        };
        if let Some(c) = xid_line().captures(&line.text) {
            self.announced = None;
            let Ok(code) = c["code"].parse() else {
                return;
            };
            self.events.push(XidEvent {
                gpu: c["gpu"].trim().to_ascii_lowercase(),
                code,
                message: c["msg"].trim().trim_end_matches('.').to_string(),
                evidence: evidence(line),
            });
            return;
        }
        if let Some(c) = fell_off_start().captures(&line.text) {
            self.announced = Some((c["gpu"].to_ascii_lowercase(), line.clone()));
        }
        let Some((gpu, start)) = &self.announced else {
            return;
        };
        if line.number > start.number + 3 {
            self.announced = None;
        } else if line.text.contains("fallen off the bus") {
            // The driver also prints the Xid for the same event on most versions: one event.
            let already = self
                .events
                .iter()
                .any(|e| e.code == 79 && e.gpu == *gpu && e.evidence.file == file);
            if !already {
                self.events.push(XidEvent {
                    gpu: gpu.clone(),
                    code: 79,
                    message:
                        "GPU has fallen off the bus (the driver's message, without an Xid number)"
                            .into(),
                    evidence: evidence(start),
                });
            }
            self.announced = None;
        }
    }
}

/// Every event in a whole text (a kernel log read at once).
pub fn parse(file: &str, text: &str) -> Vec<XidEvent> {
    let mut r = XidReader::default();
    for (i, raw) in text.lines().enumerate() {
        // `/dev/kmsg` records: `6,1234,8841120519,-;NVRM: ...`; continuation lines start with
        // a space and carry key=value pairs.
        let body = match raw.split_once(';') {
            Some((head, rest))
                if head.split(',').count() >= 3
                    && head.chars().all(|c| {
                        c.is_ascii_digit() || c == ',' || c == '-' || c == 'c' || c == '+'
                    }) =>
            {
                rest
            }
            _ => raw,
        };
        r.feed(
            file,
            &Line {
                number: i + 1,
                raw: raw.to_string(),
                text: body.to_string(),
                tag_rank: None,
            },
        );
    }
    r.events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_lines_of_each_era_are_read() {
        let log = "\
[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address
[ 8841.120519] NVRM: Xid (PCI:0000:3B:00): 48, pid=2231, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
Mar 05 23:33:35 node7 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.
6,1234,8841120519,-;NVRM: Xid (PCI:0000:ca:00): 74, pid=1912, name=pt_main_thread, NVLink: fatal error detected on link 5(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)
";
        let ev = parse("dmesg.txt", log);
        let got: Vec<(&str, u32)> = ev.iter().map(|e| (e.gpu.as_str(), e.code)).collect();
        assert_eq!(
            got,
            [
                ("0000:cb:00", 13),
                ("0000:3b:00", 48),
                ("0000:44:00", 79),
                ("0000:ca:00", 74)
            ]
        );
        assert!(ev[0].message.starts_with("Graphics SM Warp Exception"));
        assert!(ev[1]
            .message
            .starts_with("An uncorrectable double bit error"));
        assert_eq!(ev[2].message, "GPU has fallen off the bus");
        assert!(ev[3]
            .message
            .starts_with("NVLink: fatal error detected on link 5"));
        assert_eq!(ev[3].evidence.line, 4);
        assert_eq!(meaning(48).1, XidClass::Hardware);
        assert_eq!(meaning(13).1, XidClass::Application);
        assert_eq!(meaning(63).1, XidClass::Degraded);
        assert_eq!(meaning(7777).1, XidClass::Unknown);
        assert_eq!(
            classify(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6)").1,
            XidClass::Hardware
        );
        assert_eq!(
            classify(145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)").1,
            XidClass::Degraded
        );
        assert_eq!(
            classify(45, "Ch 00000001 caused by previous Xid 149").1,
            XidClass::Hardware
        );
        assert_eq!(
            classify(45, "Ch 00000001 caused by previous Xid 13").1,
            XidClass::Application
        );
        assert_eq!(
            classify(45, "Preemptive Cleanup, due to previous errors").1,
            XidClass::Application
        );
    }

    #[test]
    fn a_gpu_falling_off_without_an_xid_is_read_once() {
        let log = "\
[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
               NVRM: (PCI ID: 10de:26b5) installed in this system has
               NVRM: fallen off the bus and is not responding to commands.
[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).
";
        let ev = parse("dmesg", log);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].gpu.as_str(), ev[0].code, ev[0].evidence.line),
            ("0000:b3:00", 79, 1)
        );
        // With the Xid printed first, the announcement is the same event.
        let both =
            format!("NVRM: Xid (PCI:0000:b3:00): 79, pid=0, GPU has fallen off the bus.\n{log}");
        assert_eq!(parse("dmesg", &both).len(), 1);
        // Unrelated NVRM lines are no events.
        assert!(parse("x", "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01\nNVRM: Xid is a word\n").is_empty());
    }
}

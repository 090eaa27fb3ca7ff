//! PyTorch's ProcessGroupNCCL watchdog giving up on a collective, in the wordings PyTorch has
//! printed (ProcessGroupNCCL.cpp, 1.x to 2.8):
//!
//! - `[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=..,
//!   Timeout(ms)=..) ran for .. milliseconds before timing out.` and `Work WorkNCCL(..) timed
//!   out in blocking wait.`;
//! - one rank's queue, behind the log prefix `[PG 0 Rank 3]` (2.2), `[PG 0 (default_pg) Rank 3]`
//!   (2.3-2.4) or `[PG ID 0 PG GUID 0(default_pg) Rank 3]` (2.5+): `Timeout at NCCL work: S,
//!   last enqueued NCCL work: E, last completed NCCL work: C.`, `Exception (either an error or
//!   timeout) detected by watchdog at work: S, ...` (and its `NCCL error is` / `Work timeout
//!   is` variants), ` failure detected by watchdog at work sequence id: S PG status: last
//!   enqueued work: E, last completed work: C` (2.6+), and the state other ranks print on the
//!   dump signal (`Last enqueued NCCL work: E, last completed NCCL work: C.`).
//!
//! Lines may carry any launcher prefix (`[default3]:`, `[rank3]:`, `0: `, Ray's `(pid=..)`),
//! and a terminal may have wrapped them: the pieces that follow without a prefix are joined
//! before the message is read, with whitespace ignored, so a wrap anywhere (inside a word or a
//! number) reads the same.

pub use crate::documents::diagnosis::Evidence;
use crate::import::text::{static_regex, Line};
use regex::Regex;
use serde::Serialize;
use std::sync::OnceLock;

/// A collective the watchdog gave up on (a `WorkNCCL(...)` line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatchdogEvent {
    pub rank: usize,
    pub process_group: Option<String>,
    pub op: String,
    pub seq: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub numel_in: Option<u64>,
    pub evidence: Evidence,
}

/// One rank's queue of NCCL work as the watchdog reports it: the work it failed on (absent
/// when the rank only reports its state), the last work enqueued and the last completed.
/// `-1` is PyTorch's "none yet".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkProgress {
    pub rank: usize,
    pub process_group: Option<String>,
    /// "timeout", "error", "timeout or error", "failure" (2.6+ does not say which), or "state".
    pub kind: &'static str,
    pub failed_seq: Option<i64>,
    pub last_enqueued: Option<i64>,
    /// None when PyTorch printed a value that cannot be (above the last enqueued: an
    /// uninitialised counter in some 2.3 builds).
    pub last_completed: Option<i64>,
    pub evidence: Evidence,
}

/// What one (joined) message says.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Event(WatchdogEvent),
    Progress(WorkProgress),
}

/// The most lines a wrapped message is joined from, and its most characters.
const MAX_PIECES: usize = 8;
const MAX_CHARS: usize = 4000;

#[derive(Debug, Clone, Default, PartialEq)]
struct Pending {
    line: usize,
    text: String,
    pieces: usize,
    tag_rank: Option<usize>,
}

/// Joins a watchdog line with the unprefixed pieces a terminal wrapped off it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Joiner {
    pending: Option<Pending>,
}

impl Joiner {
    /// Feed one line; every message that ends here goes to `out` (its text read by `read`).
    pub fn push(&mut self, file: &str, line: &Line, out: &mut dyn FnMut(Report)) {
        let t = line.text.as_str();
        if let Some(p) = self.pending.as_mut() {
            if is_continuation(line) && p.pieces < MAX_PIECES && p.text.len() < MAX_CHARS {
                p.text.push_str(t);
                p.pieces += 1;
                if complete(&p.text) {
                    self.flush(file, out);
                }
                return;
            }
            self.flush(file, out);
        }
        if starts_message(t) {
            self.pending = Some(Pending {
                line: line.number,
                text: t.trim_start().to_string(),
                pieces: 1,
                tag_rank: line.tag_rank,
            });
            if complete(t) {
                self.flush(file, out);
            }
        }
    }

    /// Read the message being joined, if any (at the end of the input).
    pub fn flush(&mut self, file: &str, out: &mut dyn FnMut(Report)) {
        if let Some(p) = self.pending.take() {
            let text = p.text.trim_end();
            let ev = Evidence {
                file: file.to_string(),
                line: p.line,
                text: text.chars().take(400).collect(),
            };
            if let Some(r) = read(text, p.tag_rank, ev) {
                out(r);
            }
        }
    }
}

/// A line that may open a watchdog message: PyTorch's glog header or log prefix, or the
/// message's own words.
fn starts_message(t: &str) -> bool {
    t.contains("ProcessGroupNCCL")
        || t.contains("[PG ")
        || t.contains("Rank ")
        || t.contains("Watchdog caught")
        || t.contains("NCCL work")
}

/// A message that cannot go on: its closing words are there. The 2.6+ line has none (it ends
/// with a number), so it is read when the next line is not a piece of it.
fn complete(text: &str) -> bool {
    let s = squash(text);
    s.contains("beforetimingout")
        || s.contains("timedoutinblockingwait")
        || completed_re().is_match(&s)
}

fn completed_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, r"(?i)lastcompletedNCCLwork:-?\d+\.")
}

/// A line that is the rest of the one before it (a terminal's wrap), not a line of its own:
/// no launcher tag, no `[`-prefix, no `host:pid:tid`, no Ray `(... pid=..)`, no `N: ` (srun),
/// no traceback, glog or timestamp start.
fn is_continuation(line: &Line) -> bool {
    let t = line.text.as_str();
    let s = t.trim_start();
    if line.tag_rank.is_some() || s.is_empty() || t.starts_with('[') {
        return false;
    }
    let ray = s.starts_with('(')
        && s.split_once(')')
            .is_some_and(|(inside, _)| inside.contains("pid="));
    let srun = s.split_once(": ").is_some_and(|(n, _)| {
        !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_digit())
    });
    let new_record = [
        "Traceback",
        "frame #",
        "Exception raised from",
        "terminate called",
        "what():",
        "File \"",
        "RuntimeError",
        "torch.",
    ]
    .iter()
    .any(|w| s.starts_with(w));
    !(ray
        || srun
        || new_record
        || crate::import::nccl_lines::host_of(s).is_some()
        || glog_or_date(s))
}

/// `E0626 06:24:44.9 ...` (glog) or `2024-05-01 ...` (a timestamp).
fn glog_or_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.len() >= r.end && b[r].iter().all(u8::is_ascii_digit);
    (b.first().is_some_and(|c| b"EWIF".contains(c)) && digits(1..5) && b.get(5) == Some(&b' '))
        || (digits(0..4) && b.get(4) == Some(&b'-') && digits(5..7))
}

/// The text without whitespace: a wrap can fall between or inside words.
fn squash(text: &str) -> String {
    text.split_whitespace().collect()
}

fn rank_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // [Rank 3] / [PG 0 Rank 3] / [PG 0 (default_pg) Rank 3] / [PG ID 0 PG GUID 0(default_pg) Rank 3]
    static_regex(
        &R,
        r"\[(?:PG(?:ID)?(?P<pg>[^\]\[(]*?)(?:PGGUID[^\]\[]*?)?(?:\([^)\]]*\))?)?Rank(?P<rank>\d+)\]",
    )
}

fn launcher_rank_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(&R, r"\[rank(?P<rank>\d+)\]:")
}

fn queue_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"(?i)(?P<what>TimeoutatNCCLwork|Exception\(eitheranerrorortimeout\)detectedbywatchdogatwork|NCCLerrorisdetectedbywatchdogatwork|Worktimeoutisdetectedbywatchdogatwork|failuredetectedbywatchdogatworksequenceid)?:?(?P<seq>-?\d+)?(?:,|PGstatus:)?lastenqueued(?:NCCL)?work:(?P<enq>-?\d+),lastcompleted(?:NCCL)?work:(?P<done>-?\d+)",
    )
}

/// A joined message, read: an event, a rank's queue, or nothing of the watchdog's.
pub fn read(text: &str, tag_rank: Option<usize>, evidence: Evidence) -> Option<Report> {
    let s = squash(text);
    let (at, is_event) =
        if let Some(i) = s.find("Watchdogcaughtcollectiveoperationtimeout:WorkNCCL(") {
            (i, true)
        } else if let Some(i) = s
            .find("WorkWorkNCCL(")
            .filter(|_| s.contains("timedoutinblockingwait"))
        {
            (i, true)
        } else {
            (queue_re().find(&s)?.start(), false)
        };
    // The log prefix nearest before the message names the rank and the process group.
    let prefix = rank_re().captures_iter(&s[..at]).last();
    let rank = prefix
        .as_ref()
        .and_then(|c| c["rank"].parse().ok())
        .or_else(|| {
            launcher_rank_re()
                .captures(text)
                .and_then(|c| c["rank"].parse().ok())
        })
        .or(tag_rank)?;
    let process_group = prefix
        .as_ref()
        .and_then(|c| c.name("pg"))
        .map(|m| m.as_str().to_string())
        .filter(|pg| !pg.is_empty());
    if is_event {
        let body = &s[at..];
        let field = |k: &str| {
            body.find(k).map(|i| {
                body[i + k.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
        };
        return Some(Report::Event(WatchdogEvent {
            rank,
            process_group,
            op: field("OpType=").unwrap_or_else(|| "unknown".into()),
            seq: field("SeqNum=").and_then(|v| v.parse().ok()),
            timeout_ms: field("Timeout(ms)=").and_then(|v| v.parse().ok()),
            numel_in: field("NumelIn=").and_then(|v| v.parse().ok()),
            evidence,
        }));
    }
    let c = queue_re().captures(&s[at..])?;
    let what = c.name("what").map(|m| m.as_str().to_ascii_lowercase());
    let kind = match what.as_deref() {
        None => "state",
        Some(w) if w.starts_with("timeoutat") || w.starts_with("worktimeout") => "timeout",
        Some(w) if w.starts_with("ncclerror") => "error",
        Some(w) if w.starts_with("exception") => "timeout or error",
        Some(_) => "failure",
    };
    let num = |k: &str| c.name(k).and_then(|m| m.as_str().parse::<i64>().ok());
    let last_enqueued = num("enq");
    let last_completed = num("done").filter(|d| last_enqueued.is_none_or(|e| *d <= e));
    Some(Report::Progress(WorkProgress {
        rank,
        process_group,
        kind,
        failed_seq: what.is_some().then(|| num("seq")).flatten(),
        last_enqueued,
        last_completed,
        evidence,
    }))
}

#[cfg(test)]
#[path = "torch_watchdog_tests.rs"]
mod tests;

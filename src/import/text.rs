//! Reading pasted text as users post it: binary files refused, any encoding read lossily, and
//! the decorations that wrap real output stripped (ANSI colours, Markdown quotes, MPI tags,
//! launcher and shell prefixes).

use regex::Regex;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::OnceLock;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum InputError {
    #[error("{path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path}: empty file, expected {expected}")]
    Empty { path: String, expected: String },
    #[error("{path}: binary data (NUL bytes in the first {checked} bytes), expected {expected}")]
    Binary {
        path: String,
        checked: usize,
        expected: String,
    },
    #[error("{path}: {reason}; expected {expected}")]
    WrongKind {
        path: String,
        reason: String,
        expected: String,
    },
}

/// One line of a file: its 1-based number, the text as posted (lossy UTF-8), and the text with
/// decorations removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub number: usize,
    pub raw: String,
    pub text: String,
    /// The MPI rank from an `mpirun --tag-output` prefix, when there was one.
    pub tag_rank: Option<usize>,
}

/// A regex compiled once from a pattern written in the source (a true invariant: a pattern
/// that does not compile is a bug the first test run shows).
pub fn static_regex(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static regex"))
}

fn ansi() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    static_regex(&RE, r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
}

fn prefixes() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // [1,0]<stdout>: (Open MPI --tag-output), (head, rank=0, pid=123) (Ray-style launchers),
    // "0: " (srun -l) in front of nccl-tests lines.
    static_regex(
        &RE,
        r"^(?:\[(?P<job>\d+),(?P<rank>\d+)\]<std(?:out|err)>:|\([^()]*\brank=(?P<rank2>\d+)[^()]*\)\s?|(?P<rank3>\d{1,5}): )",
    )
}

/// Remove decorations from one line.
pub fn clean(raw: &str) -> (String, Option<usize>) {
    let mut s: std::borrow::Cow<str> = if raw.contains('\x1b') {
        ansi().replace_all(raw, "")
    } else {
        raw.into()
    };
    // Markdown block quotes ("> ", possibly nested).
    let mut t = s.trim_end_matches(['\r', '\n']);
    while let Some(rest) = t.strip_prefix('>') {
        t = rest.strip_prefix(' ').unwrap_or(rest);
    }
    let mut tag = None;
    let owned;
    let srun_prefix_ok = |rest: &str| {
        let r = rest.trim_start();
        r.starts_with('#') || r.starts_with(|c: char| c.is_ascii_digit())
    };
    if let Some(c) = prefixes().captures(t).filter(|c| {
        c.name("rank3").is_none() || srun_prefix_ok(&t[c.get(0).map(|m| m.end()).unwrap_or(0)..])
    }) {
        tag = ["rank", "rank2", "rank3"]
            .iter()
            .find_map(|n| c.name(n))
            .and_then(|m| m.as_str().parse().ok());
        let end = c.get(0).map(|m| m.end()).unwrap_or(0);
        owned = t[end..].to_string();
        s = owned.into();
        t = &s;
    }
    (t.to_string(), tag)
}

/// Bytes checked for NUL before a file is called binary.
const SNIFF: usize = 8192;

/// Read a file line by line (streaming), calling `each` per line. Refuses binary and empty
/// files with a message naming the file and what was `expected`.
pub fn for_each_line(
    path: &Path,
    expected: &str,
    mut each: impl FnMut(Line),
) -> Result<usize, InputError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| InputError::Unreadable {
        path: name.clone(),
        reason: e.to_string(),
    })?;
    read_lines(file, &name, expected, &mut each)
}

pub fn read_lines(
    reader: impl Read,
    name: &str,
    expected: &str,
    each: &mut dyn FnMut(Line),
) -> Result<usize, InputError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let head = reader.fill_buf().map_err(|e| InputError::Unreadable {
        path: name.to_string(),
        reason: e.to_string(),
    })?;
    if head.is_empty() {
        return Err(InputError::Empty {
            path: name.to_string(),
            expected: expected.to_string(),
        });
    }
    let sniff = &head[..head.len().min(SNIFF)];
    if sniff.contains(&0) {
        return Err(InputError::Binary {
            path: name.to_string(),
            checked: sniff.len(),
            expected: expected.to_string(),
        });
    }
    let mut buf = Vec::with_capacity(256);
    let mut number = 0;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| InputError::Unreadable {
                path: name.to_string(),
                reason: e.to_string(),
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        let raw = String::from_utf8_lossy(&buf);
        let raw = raw.trim_end_matches(['\n', '\r']).to_string();
        let (text, tag_rank) = clean(&raw);
        each(Line {
            number,
            raw,
            text,
            tag_rank,
        });
    }
    Ok(number)
}

/// The first lines of a file, cleaned, for deciding what kind of file it is.
pub fn head(path: &Path, max_lines: usize) -> Result<Vec<String>, InputError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| InputError::Unreadable {
        path: name.clone(),
        reason: e.to_string(),
    })?;
    let mut out = Vec::new();
    let mut reader = BufReader::new(file.take(1 << 20));
    let mut buf = Vec::new();
    while out.len() < max_lines {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => out.push(clean(&String::from_utf8_lossy(&buf)).0),
            Err(e) => {
                return Err(InputError::Unreadable {
                    path: name,
                    reason: e.to_string(),
                })
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_decorations() {
        assert_eq!(clean("[1,10]<stdout>:  8  2 float").0, "  8  2 float");
        assert_eq!(clean("[1,10]<stdout>:  8  2 float").1, Some(10));
        assert_eq!(clean("> > NCCL INFO x").0, "NCCL INFO x");
        assert_eq!(clean("\x1b[4mGPU0\x1b[0m\tGPU1").0, "GPU0\tGPU1");
        assert_eq!(
            clean("(head, rank=3, pid=42) # Out of bounds").0,
            "# Out of bounds"
        );
        assert_eq!(clean("(head, rank=3, pid=42) # Out of bounds").1, Some(3));
        assert_eq!(clean("0:  # nThread 1").0, " # nThread 1");
        // Not a prefix: a size column followed by a count.
        assert_eq!(
            clean("           8             2     float").0,
            "           8             2     float"
        );
    }

    #[test]
    fn refuses_binary_and_empty() {
        let mut n = 0;
        let mut each = |_l: Line| n += 1;
        assert!(matches!(
            read_lines(&b""[..], "x", "a log", &mut each),
            Err(InputError::Empty { .. })
        ));
        assert!(matches!(
            read_lines(&b"\x7fELF\x00\x01"[..], "x", "a log", &mut each),
            Err(InputError::Binary { .. })
        ));
        let lines =
            read_lines(&b"ok\n\xff\xfe latin1 \xe9\n"[..], "x", "a log", &mut each).unwrap();
        assert_eq!(lines, 2);
    }
}

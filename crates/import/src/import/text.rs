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
    let may_have_prefix = t.starts_with(['[', '(']) || t.starts_with(|c: char| c.is_ascii_digit());
    if let Some(c) = may_have_prefix
        .then(|| prefixes().captures(t))
        .flatten()
        .filter(|c| {
            c.name("rank3").is_none()
                || srun_prefix_ok(&t[c.get(0).map(|m| m.end()).unwrap_or(0)..])
        })
    {
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

/// Bytes kept from the start of an input to tell what kind of file it is.
const HEAD_BYTES: usize = 64 << 10;

pub use crate::bounded::{MAX_DOCUMENT_BYTES, MAX_LINE_BYTES};

/// What streaming an input's lines came to: how many, and the lines longer than
/// [`MAX_LINE_BYTES`], of which only the first MiB was read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinesRead {
    pub lines: usize,
    pub cut: usize,
    /// The number of the first line that was cut.
    pub first_cut: Option<usize>,
}

/// An input opened once — a file, or `-` for stdin. Its first bytes are kept to tell its
/// kind; the parser then reads the whole stream from the start without opening it again, so
/// pipes, FIFOs and `<(…)` work like files.
pub struct Input {
    pub name: String,
    head: Vec<u8>,
    rest: Box<dyn Read + Send>,
}

/// What stdin is called in messages.
pub const STDIN_NAME: &str = "(stdin)";

/// Set once `-` was opened: stdin can be read only once, and a second `-` would read it empty.
static STDIN_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Input {
    pub fn open(path: &Path) -> Result<Input, InputError> {
        if path.as_os_str() == "-" {
            if STDIN_TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Err(InputError::Unreadable {
                    path: "-".into(),
                    reason: "was already read by another argument (stdin can be read once)".into(),
                });
            }
            return Input::from_reader(STDIN_NAME, Box::new(std::io::stdin()));
        }
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| InputError::Unreadable {
            path: name.clone(),
            reason: io_words(&e),
        })?;
        Input::from_reader(&name, Box::new(file))
    }

    pub fn from_reader(name: &str, mut reader: Box<dyn Read + Send>) -> Result<Input, InputError> {
        let mut head = Vec::with_capacity(HEAD_BYTES);
        (&mut reader)
            .take(HEAD_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(|e| InputError::Unreadable {
                path: name.to_string(),
                reason: io_words(&e),
            })?;
        Ok(Input {
            name: name.to_string(),
            head,
            rest: reader,
        })
    }

    /// The first lines (cleaned), from the kept head only.
    pub fn head_lines(&self, max_lines: usize) -> Vec<String> {
        String::from_utf8_lossy(&self.head)
            .lines()
            .take(max_lines)
            .map(|l| clean(l).0)
            .collect()
    }

    /// Whether the first bytes hold NUL: binary data, not text.
    pub fn head_is_binary(&self) -> bool {
        self.head[..self.head.len().min(SNIFF)].contains(&0)
    }

    /// The whole input when it fits in the kept head (small files, whose content can be
    /// judged at once), else `None`.
    pub fn head_whole(&self) -> Option<&[u8]> {
        (self.head.len() < HEAD_BYTES).then_some(&self.head[..])
    }

    /// Refuse an empty or binary input, naming it and what was `expected`.
    fn check(&self, expected: &str) -> Result<(), InputError> {
        if self.head.is_empty() {
            return Err(InputError::Empty {
                path: self.name.clone(),
                expected: expected.to_string(),
            });
        }
        let sniff = &self.head[..self.head.len().min(SNIFF)];
        if sniff.contains(&0) {
            return Err(InputError::Binary {
                path: self.name.clone(),
                checked: sniff.len(),
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    /// Stream every line, from the first, to `each`; the number of lines.
    pub fn lines(self, expected: &str, each: impl FnMut(Line)) -> Result<usize, InputError> {
        Ok(self.lines_read(expected, each)?.lines)
    }

    /// [`Input::lines`], saying which lines were cut at [`MAX_LINE_BYTES`].
    pub fn lines_read(
        self,
        expected: &str,
        mut each: impl FnMut(Line),
    ) -> Result<LinesRead, InputError> {
        self.check(expected)?;
        let name = self.name.clone();
        let stream = std::io::Cursor::new(self.head).chain(self.rest);
        read_lines(stream, &name, expected, &mut each)
    }

    /// The whole input, for formats that must be held at once; refused beyond
    /// `MAX_DOCUMENT_BYTES`.
    pub fn bytes(self, expected: &str) -> Result<Vec<u8>, InputError> {
        self.check(expected)?;
        let mut all = self.head;
        let left = MAX_DOCUMENT_BYTES.saturating_sub(all.len() as u64);
        let whole = crate::bounded::read_to_cap(self.rest, left, &mut all).map_err(|e| {
            InputError::Unreadable {
                path: self.name.clone(),
                reason: e.to_string(),
            }
        })?;
        if !whole {
            return Err(InputError::WrongKind {
                path: self.name,
                reason: format!(
                    "larger than {} MiB, the most ncclprobe holds of one document",
                    MAX_DOCUMENT_BYTES >> 20
                ),
                expected: expected.to_string(),
            });
        }
        Ok(all)
    }
}

/// Read a file line by line (streaming), calling `each` per line. Refuses binary and empty
/// files with a message naming the file and what was `expected`.
pub fn for_each_line(
    path: &Path,
    expected: &str,
    each: impl FnMut(Line),
) -> Result<usize, InputError> {
    Input::open(path)?.lines(expected, each)
}

pub fn read_lines(
    reader: impl Read,
    name: &str,
    expected: &str,
    each: &mut dyn FnMut(Line),
) -> Result<LinesRead, InputError> {
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
    let mut read = LinesRead::default();
    let mut lines = crate::bounded::CappedLines::new(reader, MAX_LINE_BYTES);
    // A line past the cap (a 300 MB line) is read past, not held: only its first MiB is seen.
    while let Some(line) = lines
        .next_into(&mut buf)
        .map_err(|e| InputError::Unreadable {
            path: name.to_string(),
            reason: e.to_string(),
        })?
    {
        read.lines += 1;
        let number = read.lines;
        if line.cut {
            read.cut += 1;
            read.first_cut.get_or_insert(number);
        }
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
    Ok(read)
}

/// An input that cannot be read, in words a user acts on (not the OS's "(os error 21)").
pub fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => "no such file".into(),
        ErrorKind::IsADirectory => "is a directory, not a file: give one of the files in it".into(),
        ErrorKind::PermissionDenied => "cannot be read: permission denied".into(),
        ErrorKind::InvalidData => "is not valid text".into(),
        _ => {
            let text = e.to_string();
            match text.find(" (os error") {
                Some(at) => text[..at].to_string(),
                None => text,
            }
        }
    }
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
        assert_eq!(lines.lines, 2);
    }

    #[test]
    fn an_input_is_read_once_from_its_start_after_its_head_was_looked_at() {
        // A pipe can be read only once: the head is kept and the stream continues after it.
        let body: String = (0..20000).map(|i| format!("line {i}\n")).collect();
        let reader = Box::new(std::io::Cursor::new(body.clone().into_bytes()));
        let input = Input::from_reader("(pipe)", reader).unwrap();
        assert_eq!(input.head_lines(2), vec!["line 0", "line 1"]);
        let mut seen = Vec::new();
        input.lines("lines", |l| seen.push(l.text)).unwrap();
        assert_eq!(seen.len(), 20000);
        assert_eq!(seen[19999], "line 19999");
    }

    #[test]
    fn a_line_past_the_cap_is_cut_and_counted() {
        let mut input = b"first\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE_BYTES));
        input.extend_from_slice(b"\nlast\n");
        let mut seen = Vec::new();
        let read = read_lines(&input[..], "x", "a log", &mut |l: Line| seen.push(l.raw)).unwrap();
        assert_eq!(
            read,
            LinesRead {
                lines: 3,
                cut: 1,
                first_cut: Some(2)
            }
        );
        assert_eq!(seen[1].len(), MAX_LINE_BYTES);
        assert_eq!(seen[2], "last");
    }

    #[test]
    fn documents_are_capped() {
        let zeros = Box::new(std::io::repeat(b'{').take(MAX_DOCUMENT_BYTES + 10));
        let input = Input::from_reader("big", zeros).unwrap();
        let e = input.bytes("a JSON document").unwrap_err().to_string();
        assert!(e.contains("larger than 256 MiB"), "{e}");
        let nul = Box::new(std::io::repeat(0).take(1 << 20));
        let e = Input::from_reader("/dev/zero", nul)
            .unwrap()
            .bytes("x")
            .unwrap_err();
        assert!(matches!(e, InputError::Binary { .. }));
    }
}

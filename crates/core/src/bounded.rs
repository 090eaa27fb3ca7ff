//! Reading input that may be endless or huge under a cap: a document held whole up to
//! [`MAX_DOCUMENT_BYTES`], a line up to [`MAX_LINE_BYTES`] (the rest of a longer line skipped,
//! and said), so `/dev/zero`, a 300 MB line or a wrong file cannot exhaust memory. Every reader
//! of inputs goes through here, so they all stop at the same sizes.

use std::io::{self, BufRead, Read};

/// The most a document that must be held whole (JSON, a tensor list, a curve, a traffic
/// matrix) may weigh; beyond it the input is refused (exit 2), so `/dev/zero` or a wrong file
/// cannot exhaust memory. Line-oriented logs are streamed and have no such limit.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// The most of one line a streamed log keeps: NCCL's, PyTorch's and nccl-tests' lines are a
/// few hundred bytes, so a longer one is not a line of theirs and its rest is skipped.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Everything `reader` gives, appended to `buf`, up to `cap` bytes. `Ok(true)`: all of it;
/// `Ok(false)`: there was more than `cap` (`buf` then holds one byte over, to tell).
pub fn read_to_cap(reader: impl Read, cap: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
    let before = buf.len() as u64;
    reader.take(cap.saturating_add(1)).read_to_end(buf)?;
    Ok(buf.len() as u64 - before <= cap)
}

/// What [`CappedLines::next_into`] read of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRead {
    /// The bytes the line had in the input, its line break included.
    pub bytes: u64,
    /// Whether the line was longer than the cap: only its first `cap` bytes were kept.
    pub cut: bool,
}

/// Lines of a stream, each kept up to a cap; a longer line's rest is read past, not held.
pub struct CappedLines<R> {
    reader: R,
    cap: usize,
}

impl<R: BufRead> CappedLines<R> {
    pub fn new(reader: R, cap: usize) -> Self {
        CappedLines { reader, cap }
    }

    /// The next line into `buf` (cleared first), with its `\n` when it had one and was not
    /// cut; `None` at the end of the input.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<LineRead>> {
        buf.clear();
        let mut bytes = 0u64;
        let mut cut = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            let (len, ended) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (available.len(), false),
            };
            let keep = len.min(self.cap.saturating_sub(buf.len()));
            buf.extend_from_slice(&available[..keep]);
            cut |= keep < len;
            bytes += len as u64;
            self.reader.consume(len);
            if ended {
                break;
            }
        }
        Ok((bytes > 0).then_some(LineRead { bytes, cut }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_read_whole_up_to_the_cap_and_refused_beyond() {
        let mut buf = Vec::new();
        assert!(read_to_cap(&b"12345"[..], 5, &mut buf).unwrap());
        assert_eq!(buf, b"12345");
        let mut buf = Vec::new();
        assert!(!read_to_cap(io::repeat(0).take(1 << 40), 1 << 10, &mut buf).unwrap());
        assert_eq!(buf.len(), (1 << 10) + 1);
    }

    #[test]
    fn a_line_past_the_cap_is_cut_and_the_next_line_is_read_whole() {
        let long = vec![b'x'; 10_000];
        let mut input = b"first\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nlast");
        let mut lines = CappedLines::new(io::BufReader::with_capacity(64, &input[..]), 100);
        let mut buf = Vec::new();
        let first = lines.next_into(&mut buf).unwrap().unwrap();
        assert_eq!((buf.as_slice(), first.cut), (&b"first\n"[..], false));
        let cut = lines.next_into(&mut buf).unwrap().unwrap();
        assert_eq!(buf, vec![b'x'; 100]);
        assert_eq!(
            cut,
            LineRead {
                bytes: 10_001,
                cut: true
            }
        );
        let last = lines.next_into(&mut buf).unwrap().unwrap();
        assert_eq!((buf.as_slice(), last.cut), (&b"last"[..], false));
        assert_eq!(lines.next_into(&mut buf).unwrap(), None);
    }

    #[test]
    fn an_endless_line_is_read_past_in_bounded_memory() {
        // 64 MiB of one line under a 1 KiB cap: the buffer never grows past the cap.
        let endless = io::repeat(b'y').take(64 << 20);
        let mut lines = CappedLines::new(io::BufReader::new(endless), 1 << 10);
        let mut buf = Vec::new();
        let read = lines.next_into(&mut buf).unwrap().unwrap();
        assert_eq!((read.bytes, read.cut, buf.len()), (64 << 20, true, 1 << 10));
        assert!(buf.capacity() < 1 << 20);
    }
}

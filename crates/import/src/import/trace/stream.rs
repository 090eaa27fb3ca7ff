//! A JSON object read as a stream: the elements of its large arrays (a trace's `traceEvents`,
//! a Flight Recorder dump's `entries`) handed out one at a time, its other top-level values
//! kept whole up to a cap. Memory stays at one element plus the small values, whatever the
//! file weighs; each element is parsed by serde from its own bytes, which is several times
//! faster than serde's reader-driven parser.

use std::io::Read;

/// What a streamed object held besides the arrays handed out.
#[derive(Debug, Default)]
pub struct TopLevel {
    /// Top-level keys and their raw JSON values, each up to the cap.
    pub values: Vec<(String, Vec<u8>)>,
    /// Keys whose value was longer than the cap and was dropped.
    pub dropped: Vec<String>,
    /// Bytes read.
    pub bytes: u64,
}

impl TopLevel {
    /// A kept value, parsed.
    pub fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        let (_, raw) = self.values.iter().find(|(k, _)| k == key)?;
        serde_json::from_slice(raw).ok()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("is not a JSON object (it starts with {0:?})")]
    NotObject(char),
    #[error("ends inside the JSON (cut short?)")]
    Truncated,
    #[error("{0}")]
    Element(String),
}

/// The most one array element may weigh (a profiler event is a few KB): a longer one is
/// handed out empty, which its reader counts as unreadable, instead of being held.
pub const MAX_ELEMENT_BYTES: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Between top-level keys and values.
    Keys,
    /// Inside an array whose elements are handed out.
    Array,
    /// Inside a top-level value being kept (or skipped, past the cap).
    Value,
}

/// What receives each element: the array's key and the element's bytes.
pub type Each<'a> = dyn FnMut(&str, &[u8]) -> Result<(), String> + 'a;

/// Stream the object `reader` holds. The elements (objects or arrays) of the arrays under
/// `array_keys` go to `each(key, bytes)`; other values are kept up to `cap` bytes each.
pub fn split_object(
    mut reader: impl Read,
    array_keys: &[&str],
    cap: usize,
    each: &mut Each,
) -> Result<TopLevel, StreamError> {
    let mut chunk = vec![0u8; 1 << 20];
    let mut top = TopLevel::default();
    let mut depth = 0usize;
    let (mut in_string, mut escape) = (false, false);
    let mut started = false;
    let mut mode = Mode::Keys;
    // The last string closed at depth 1 (a key once a `:` follows), and the key in force.
    let mut string_buf: Vec<u8> = Vec::new();
    let mut key = String::new();
    let mut element: Vec<u8> = Vec::new();
    let mut in_element = false;
    let mut element_dropped = false;
    let mut value: Vec<u8> = Vec::new();
    let mut value_dropped = false;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        top.bytes += n as u64;
        let buf = &chunk[..n];
        // Where the element or value being copied began in this chunk.
        let mut from = 0usize;
        let mut i = 0usize;
        while i < buf.len() {
            let b = buf[i];
            if in_string {
                in_string = still_in_string(b, &mut escape);
                if depth == 1 && mode == Mode::Keys && in_string {
                    string_buf.push(b);
                }
                i += 1;
                continue;
            }
            if !started {
                started = opens(b)?;
                depth = usize::from(started);
                i += 1;
                continue;
            }
            match b {
                b'"' => {
                    in_string = true;
                    if depth == 1 && mode == Mode::Keys {
                        string_buf.clear();
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    if mode == Mode::Array && depth == 3 {
                        in_element = true;
                        element_dropped = false;
                        element.clear();
                        from = i;
                    }
                }
                b'}' | b']' => {
                    if mode == Mode::Array && depth == 3 && in_element {
                        if !element_dropped {
                            element.extend_from_slice(&buf[from..=i]);
                        }
                        in_element = false;
                        let whole: &[u8] = if element_dropped { b"" } else { &element };
                        each(&key, whole).map_err(StreamError::Element)?;
                    }
                    if mode == Mode::Array && depth == 2 {
                        mode = Mode::Keys;
                    }
                    if mode == Mode::Value && depth == 1 {
                        // The object closes right after a value.
                        finish_value(
                            &mut top,
                            &key,
                            &mut value,
                            &buf[from..i],
                            value_dropped,
                            cap,
                        );
                        mode = Mode::Keys;
                    }
                    depth -= 1;
                    if depth == 0 {
                        return Ok(top);
                    }
                }
                b':' if depth == 1 && mode == Mode::Keys => {
                    key = String::from_utf8_lossy(&string_buf).into_owned();
                    // Peek at what the value is: an array under a streamed key is split.
                    let next = buf[i + 1..].iter().position(|c| !c.is_ascii_whitespace());
                    let is_array = next.map(|p| buf[i + 1 + p] == b'[');
                    if array_keys.contains(&key.as_str()) && is_array != Some(false) {
                        // `[` may be in the next chunk; both ways, mode Array starts at depth 2.
                        mode = Mode::Array;
                    } else {
                        mode = Mode::Value;
                        value.clear();
                        value_dropped = false;
                        from = i + 1;
                    }
                }
                b',' if depth == 1 && mode == Mode::Value => {
                    finish_value(
                        &mut top,
                        &key,
                        &mut value,
                        &buf[from..i],
                        value_dropped,
                        cap,
                    );
                    mode = Mode::Keys;
                }
                _ => {}
            }
            i += 1;
        }
        // Carry what is being copied over to the next chunk.
        if in_element && !element_dropped {
            element.extend_from_slice(&buf[from..]);
            if element.len() > MAX_ELEMENT_BYTES {
                element_dropped = true;
                element = Vec::new();
            }
        }
        if mode == Mode::Value && !value_dropped {
            value.extend_from_slice(&buf[from..]);
            if value.len() > cap {
                value_dropped = true;
                value.clear();
            }
        }
    }
    if started {
        Err(StreamError::Truncated)
    } else {
        Err(StreamError::NotObject(' '))
    }
}

/// Whether a string goes on past `b` (its closing quote ends it; an escaped one does not).
fn still_in_string(b: u8, escape: &mut bool) -> bool {
    if *escape {
        *escape = false;
    } else if b == b'\\' {
        *escape = true;
    } else if b == b'"' {
        return false;
    }
    true
}

/// Whether `b`, before anything else, opens the object; whitespace and a byte-order mark are
/// passed over, anything else is refused.
fn opens(b: u8) -> Result<bool, StreamError> {
    if b.is_ascii_whitespace() || matches!(b, 0xEF | 0xBB | 0xBF) {
        Ok(false)
    } else if b == b'{' {
        Ok(true)
    } else {
        Err(StreamError::NotObject(b as char))
    }
}

fn finish_value(
    top: &mut TopLevel,
    key: &str,
    value: &mut Vec<u8>,
    tail: &[u8],
    dropped: bool,
    cap: usize,
) {
    if dropped || value.len() + tail.len() > cap {
        top.dropped.push(key.to_string());
    } else {
        value.extend_from_slice(tail);
        let trimmed = value.trim_ascii().to_vec();
        top.values.push((key.to_string(), trimmed));
    }
    value.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str, chunked: bool) -> (Vec<String>, TopLevel) {
        let mut seen = Vec::new();
        let reader: Box<dyn Read> = if chunked {
            // One byte per read: every boundary falls between chunks somewhere.
            Box::new(OneByte(text.as_bytes().to_vec(), 0))
        } else {
            Box::new(text.as_bytes())
        };
        let top = split_object(reader, &["traceEvents"], 64, &mut |k, e| {
            seen.push(format!("{k}={}", String::from_utf8_lossy(e)));
            Ok(())
        })
        .unwrap();
        (seen, top)
    }

    struct OneByte(Vec<u8>, usize);
    impl Read for OneByte {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.1 >= self.0.len() {
                return Ok(0);
            }
            buf[0] = self.0[self.1];
            self.1 += 1;
            Ok(1)
        }
    }

    #[test]
    fn elements_are_handed_out_and_small_values_kept_across_any_chunking() {
        let text = r#"{"schemaVersion": 1, "a\"b": "x}y", "traceEvents": [
            {"name": "k[1]", "args": {"v": [1, 2]}}, {"name": "\"}"}
        ], "big": "0123456789012345678901234567890123456789012345678901234567890123456789",
        "distributedInfo": {"rank": 3}}"#;
        for chunked in [false, true] {
            let (seen, top) = split(text, chunked);
            assert_eq!(
                seen,
                vec![
                    r#"traceEvents={"name": "k[1]", "args": {"v": [1, 2]}}"#.to_string(),
                    r#"traceEvents={"name": "\"}"}"#.to_string()
                ]
            );
            assert_eq!(top.get::<u32>("schemaVersion"), Some(1));
            assert_eq!(top.get::<String>("a\\\"b"), Some("x}y".into()));
            assert_eq!(
                top.get::<serde_json::Value>("distributedInfo").unwrap()["rank"],
                3
            );
            assert_eq!(top.dropped, vec!["big".to_string()], "chunked {chunked}");
        }
    }

    #[test]
    fn a_cut_file_and_a_non_object_are_refused() {
        let cut = split_object(
            &b"{\"traceEvents\": [{\"a\": 1}"[..],
            &["traceEvents"],
            64,
            &mut |_, _| Ok(()),
        );
        assert!(matches!(cut, Err(StreamError::Truncated)), "{cut:?}");
        let arr = split_object(&b"[1,2]"[..], &["traceEvents"], 64, &mut |_, _| Ok(()));
        assert!(matches!(arr, Err(StreamError::NotObject('['))), "{arr:?}");
    }
}

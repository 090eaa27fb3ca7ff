//! Text that came from an input (file names, a record's `error`, environment values, host and
//! GPU names, log lines) made safe to show: on a terminal it cannot move the cursor, recolour,
//! retitle the window or reverse the line around it; in Markdown it cannot become a link, an
//! image, HTML or a table break; and one value cannot swell a page. Every human renderer passes
//! what it prints through here, so one function decides what reaches a reader.

use std::borrow::Cow;

/// The most characters of one input-derived value a Markdown or HTML page shows; the rest is
/// counted ("… (N more bytes)").
pub const VALUE_CHARS: usize = 200;

/// The most characters of any one value a page shows (our own sentences included): a backstop
/// for text that carries an input's value inside a longer message.
pub const TEXT_CHARS: usize = 1000;

/// Unicode's invisible direction marks and overrides (U+200E, U+200F, U+061C, U+202A-U+202E,
/// U+2066-U+2069): they make text display in an order other than the one it has.
fn bidi(c: char) -> bool {
    matches!(
        c,
        '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// C0 and C1 controls and DEL, but the line break and tab our own layout uses.
fn control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Drops the rest of an escape sequence whose ESC (or 8-bit CSI) was just read: a CSI
/// sequence (`ESC [ 31 m`) through its final byte; a string (OSC `ESC ] 0;title BEL`, DCS, PM,
/// APC, SOS) through its terminator, never past the end of the line; any other escape its one
/// following character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, csi: bool) {
    let kind = if csi {
        Some('[')
    } else {
        chars.peek().copied()
    };
    match kind {
        Some('[') => {
            if !csi {
                chars.next();
            }
            while let Some(&c) = chars.peek() {
                if ('\u{30}'..='\u{3f}').contains(&c) || ('\u{20}'..='\u{2f}').contains(&c) {
                    chars.next();
                } else {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        chars.next();
                    }
                    return;
                }
            }
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            chars.next();
            while let Some(&c) = chars.peek() {
                if c == '\n' {
                    return;
                }
                chars.next();
                if c == '\u{7}' || c == '\u{9c}' {
                    return;
                }
                if c == '\u{1b}' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    return;
                }
            }
        }
        Some(c) if ('\u{20}'..='\u{7e}').contains(&c) => {
            chars.next();
            // `ESC ( B` and friends: intermediates, then the final character.
            if ('\u{20}'..='\u{2f}').contains(&c) {
                if let Some(&f) = chars.peek() {
                    if ('\u{30}'..='\u{7e}').contains(&f) {
                        chars.next();
                    }
                }
            }
        }
        _ => {}
    }
}

/// `text` as a terminal may show it: escape sequences removed whole, other control characters
/// (NUL, carriage return, backspace, C1) and bidi overrides dropped; line breaks and tabs kept.
pub fn display(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| control(c) || bidi(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars, false),
            '\u{9b}' => skip_escape(&mut chars, true),
            c if control(c) || bidi(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One value on one line: `display`, with line breaks and tabs as spaces.
pub fn line(text: &str) -> Cow<'_, str> {
    match display(text) {
        Cow::Borrowed(t) if !t.contains(['\n', '\t']) => Cow::Borrowed(t),
        shown => Cow::Owned(shown.replace(['\n', '\t'], " ")),
    }
}

/// At most `chars` characters of `text`; what is cut is counted: `… (N more bytes)`.
pub fn cap(text: &str, chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(chars) {
        None => Cow::Borrowed(text),
        Some((at, _)) => Cow::Owned(format!("{}… ({} more bytes)", &text[..at], text.len() - at)),
    }
}

/// Text as Markdown reads it literally, on one line: no emphasis, links, images, HTML, code
/// spans, headings, quotes or table breaks; controls and bidi overrides dropped; at most
/// `chars` characters.
pub fn markdown(text: &str, chars: usize) -> String {
    let shown = line(text);
    let shown = cap(&shown, chars);
    let mut out = String::with_capacity(shown.len() + 8);
    // A heading or a quote only starts a line.
    if shown.trim_start().starts_with(['#', '>']) {
        out.push('\\');
    }
    for c in shown.trim_start().chars() {
        match c {
            '\\' | '`' | '*' | '[' | ']' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '&' => out.push_str("&amp;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[path = "safe_tests.rs"]
mod tests;

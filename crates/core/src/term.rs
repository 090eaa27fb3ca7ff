//! How the output meets a person at a terminal: how much is said (`-q`, `-v`), whether verdict
//! words are coloured (a terminal, `--color`, `NO_COLOR`, `CLICOLOR_FORCE`), and how wide prose
//! may run (`$COLUMNS`, else the terminal's width). Set once by the command line
//! ([`configure`]); a library user who never calls it gets the defaults (everything said, colour
//! only on a terminal, prose unwrapped unless `$COLUMNS` says otherwise).

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicI8, AtomicU8, Ordering};

/// -1 quiet, 0 normal, 1.. verbose.
static LEVEL: AtomicI8 = AtomicI8::new(0);
/// 0 auto, 1 always, 2 never.
static COLOUR: AtomicU8 = AtomicU8::new(0);

/// When verdict words are coloured (`--color`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColourChoice {
    /// On a terminal, unless `NO_COLOR` is set (`CLICOLOR_FORCE` colours a pipe too).
    #[default]
    Auto,
    Always,
    Never,
}

/// What the command line asked for: `-q` (banner, progress and notes off), `-v` (repeatable:
/// the notes a normal run leaves out), `--color`.
pub fn configure(quiet: bool, verbose: u8, colour: ColourChoice) {
    let level = if quiet {
        -1
    } else {
        verbose.min(i8::MAX as u8) as i8
    };
    LEVEL.store(level, Ordering::Relaxed);
    COLOUR.store(
        match colour {
            ColourChoice::Auto => 0,
            ColourChoice::Always => 1,
            ColourChoice::Never => 2,
        },
        Ordering::Relaxed,
    );
}

/// `-q`: the banner, the progress bar and the notes are left out.
pub fn quiet() -> bool {
    LEVEL.load(Ordering::Relaxed) < 0
}

/// `-v` (or more).
pub fn verbose() -> bool {
    LEVEL.load(Ordering::Relaxed) > 0
}

/// A note on stderr (`ncclprobe: …`): what a person may want to know and a script does not
/// need. Left out under `-q`. Warnings and errors are not notes: they are always said.
pub fn note(text: &str) {
    if !quiet() {
        eprintln!("ncclprobe: {text}");
    }
}

/// A note only `-v` asks for (what was chosen and why, where a normal run says only the choice).
pub fn detail(text: &str) {
    if verbose() {
        eprintln!("ncclprobe: {text}");
    }
}

/// Whether stdout gets colour: `--color always|never`, else `NO_COLOR` (set and not empty: no
/// colour, https://no-color.org), else `CLICOLOR_FORCE` (set and not "0": colour), else a
/// terminal whose `TERM` is not `dumb`.
pub fn colour_stdout() -> bool {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match COLOUR.load(Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    if env("NO_COLOR").is_some() {
        return false;
    }
    if env("CLICOLOR_FORCE").is_some_and(|v| v != "0") {
        return true;
    }
    std::io::stdout().is_terminal() && env("TERM").is_none_or(|t| t != "dumb")
}

/// How wide prose may run: `$COLUMNS` when it is a number of 40 or more, else the width of the
/// terminal stdout is, else none (a pipe or a file: lines are left whole for whoever reads them).
pub fn width() -> Option<usize> {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
    {
        return (c >= 40).then_some(c);
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_columns().filter(|&c| c >= 40)
}

fn terminal_columns() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the winsize it is given; a zeroed one is a valid start.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Prose wrapped at word boundaries to `width` columns (counted in characters), every line after
/// the first indented by `indent`; a word longer than the line (a path, a URL) stays whole on a
/// line of its own. Line breaks already in `text` are kept.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (n, paragraph) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
            out.push_str(indent);
        }
        let lead: String = paragraph.chars().take_while(|c| *c == ' ').collect();
        let mut column = if n == 0 { 0 } else { indent.chars().count() };
        let mut first = true;
        out.push_str(&lead);
        column += lead.len();
        for word in paragraph.split(' ').filter(|w| !w.is_empty()) {
            let len = word.chars().count();
            if !first && column + 1 + len > width {
                out.push('\n');
                out.push_str(indent);
                column = indent.chars().count();
            } else if !first {
                out.push(' ');
                column += 1;
            }
            out.push_str(word);
            column += len;
            first = false;
        }
    }
    out
}

/// [`wrap`] to [`width`], or `text` as it is when no width is known.
pub fn wrap_to_terminal<'a>(text: &'a str, indent: &str) -> Cow<'a, str> {
    match width() {
        Some(w) if text.lines().any(|l| l.chars().count() > w) => Cow::Owned(wrap(text, w, indent)),
        _ => Cow::Borrowed(text),
    }
}

/// The words a verdict is made of, and their colours (SGR codes): failures red, what needs a
/// look yellow, passes green, what was not judged bold.
const WORDS: [(&str, &str); 13] = [
    ("NOT JUDGED", "1"),
    ("DOES NOT FIT", "1;31"),
    ("FITS", "1;32"),
    ("CHECK FAILED", "1;31"),
    ("SLOW PAIR", "1;31"),
    ("DEGRADED", "1;33"),
    ("HEALTHY", "1;32"),
    ("FAILED", "1;31"),
    ("[Error]", "1;31"),
    ("[Warning]", "1;33"),
    ("FAIL", "1;31"),
    ("PASS", "1;32"),
    ("SLOW", "1;31"),
];

/// `text` with its verdict words coloured, when stdout gets colour ([`colour_stdout`]); as it
/// is otherwise. A word counts only standing alone (`FAILED`, not `FAILED_RANKS` or `PASSWORD`).
pub fn paint(text: &str) -> Cow<'_, str> {
    // A JSON document printed whole is for a program whatever the terminal.
    let t = text.trim_start();
    let json = t.starts_with('{') || ["[{", "[\n", "[]", "[ "].iter().any(|p| t.starts_with(p));
    if json || !WORDS.iter().any(|(w, _)| text.contains(w)) || !colour_stdout() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(paint_words(text))
}

fn paint_words(text: &str) -> String {
    // A word joined to a name (`FAILED_RANKS`, `x-PASS`, `a/FAIL`) is not a verdict; one that
    // ends a sentence (`HEALTHY.`) is.
    let joined = |c: Option<char>, joiners: &str| {
        c.is_some_and(|c| c.is_alphanumeric() || joiners.contains(c))
    };
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for (word, sgr) in WORDS {
            if let Some(tail) = rest.strip_prefix(word) {
                let before = out.chars().next_back();
                if !joined(before, "_-./") && !joined(tail.chars().next(), "_-/") {
                    out.push_str(&format!("\x1b[{sgr}m{word}\x1b[0m"));
                    rest = tail;
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_words_and_indents_what_follows() {
        let text = "one two three four five six seven eight nine ten";
        let wrapped = wrap(text, 15, "  ");
        assert_eq!(
            wrapped,
            "one two three\n  four five six\n  seven eight\n  nine ten"
        );
        for line in wrapped.lines() {
            assert!(line.chars().count() <= 15, "{line:?}");
        }
    }

    #[test]
    fn a_word_longer_than_the_line_stays_whole() {
        let url = "https://github.com/NVIDIA/nccl/issues/1603";
        let wrapped = wrap(&format!("see {url} now"), 20, "");
        assert_eq!(wrapped, format!("see\n{url}\nnow"));
    }

    #[test]
    fn line_breaks_in_the_text_are_kept() {
        assert_eq!(wrap("a b\nc d", 80, "    "), "a b\n    c d");
    }

    #[test]
    fn only_standalone_verdict_words_are_painted() {
        let painted = paint_words("FAIL PASSWORD FAILED_RANKS [Error] x NOT JUDGED: y HEALTHY.");
        assert!(
            painted.starts_with("\x1b[1;31mFAIL\x1b[0m PASSWORD FAILED_RANKS "),
            "{painted:?}"
        );
        assert!(painted.contains("\x1b[1;31m[Error]\x1b[0m"), "{painted:?}");
        assert!(painted.contains("\x1b[1mNOT JUDGED\x1b[0m:"), "{painted:?}");
        assert!(
            painted.ends_with("\x1b[1;32mHEALTHY\x1b[0m."),
            "{painted:?}"
        );
        assert_eq!(paint_words("nothing here"), "nothing here");
    }
}

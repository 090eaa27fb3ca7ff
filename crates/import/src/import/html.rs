//! Text pasted from a web page or a mail archive (pipermail, mail-archive, Google Groups
//! "show original"): `nvidia-smi topo -m` or an NCCL log inside `<pre>`, lines broken by
//! `<br>`, spaces as `&nbsp;`, `<` and `>` as `&lt;` `&gt;`. Unwrapped back to the lines the
//! tool printed; input that is not HTML is left alone, so `<unknown function>` in a
//! traceback or `10.0.0.1<0>` in an NCCL line keep their brackets.

use crate::import::text::{self, static_regex, Line};
use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Tags a page wraps text in. Block tags end a line; the others vanish.
fn tag_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"(?i)<(?P<close>/)?(?P<name>pre|br|p|div|span|font|b|i|u|tt|code|a|blockquote|html|body|head|title|table|tbody|thead|tr|td|th|li|ul|ol|hr|strong|em|small|big|sup|sub|h[1-6]|samp|kbd|var)\b[^<>]*?/?>",
    )
}

fn entity_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    static_regex(
        &R,
        r"&(?:#(?P<dec>\d{1,7})|#[xX](?P<hex>[0-9a-fA-F]{1,6})|(?P<name>[a-zA-Z]{2,6}));",
    )
}

/// Whether these first lines of an input are HTML-wrapped text: a `<pre>`, `<br>` or `<p>`
/// tag, or one of the entities a page escapes text with.
pub fn looks_like_html<S: AsRef<str>>(head: &[S]) -> bool {
    head.iter().any(|l| {
        let l = l.as_ref();
        let lower = l.to_ascii_lowercase();
        ["<pre", "<br", "</p>", "<p>", "</div>", "<html", "</pre>"]
            .iter()
            .any(|t| lower.contains(t))
            || ["&nbsp;", "&lt;", "&gt;", "&amp;", "&quot;", "&#"]
                .iter()
                .any(|e| l.contains(e))
    })
}

/// One line of a page, as the lines of text it holds: tags taken out (block tags end a
/// line), entities decoded (`&nbsp;` as a space).
pub fn unwrap(line: &str) -> Vec<String> {
    let untagged = if line.contains('<') {
        tag_re().replace_all(line, |c: &regex::Captures| {
            let name = c["name"].to_ascii_lowercase();
            let block = matches!(
                name.as_str(),
                "br" | "p" | "div" | "tr" | "li" | "pre" | "blockquote" | "hr" | "table"
            );
            if block && !(name == "pre" && c.name("close").is_none()) {
                "\n"
            } else {
                ""
            }
        })
    } else {
        Cow::Borrowed(line)
    };
    let decoded = if untagged.contains('&') {
        entity_re().replace_all(&untagged, |c: &regex::Captures| decode(c))
    } else {
        untagged.clone()
    };
    let mut lines: Vec<String> = decoded.split('\n').map(str::to_string).collect();
    // A tag at the end of the line (`...X<br>`) is not a line of its own.
    if lines.len() > 1 && lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines
}

fn decode(c: &regex::Captures) -> String {
    let code = if let Some(d) = c.name("dec") {
        d.as_str().parse::<u32>().ok()
    } else if let Some(h) = c.name("hex") {
        u32::from_str_radix(h.as_str(), 16).ok()
    } else {
        let name = c.name("name").map_or("", |m| m.as_str());
        return match name {
            "nbsp" | "ensp" | "emsp" | "thinsp" => " ",
            "lt" => "<",
            "gt" => ">",
            "amp" => "&",
            "quot" => "\"",
            "apos" => "'",
            _ => return c[0].to_string(),
        }
        .to_string();
    };
    match code.and_then(char::from_u32) {
        Some('\u{a0}') => " ".to_string(),
        Some(ch) => ch.to_string(),
        None => c[0].to_string(),
    }
}

/// A line of an HTML-wrapped input, as the lines of text it holds, each cleaned as any input
/// line is (`text::clean`) and numbered as the line it came from.
pub fn lines_of(line: &Line) -> Vec<Line> {
    unwrap(&line.raw)
        .into_iter()
        .map(|raw| {
            let (text, tag_rank) = text::clean(&raw);
            Line {
                number: line.number,
                raw,
                text,
                tag_rank,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_give_back_the_lines_they_wrap() {
        // A pipermail-style paste: one physical line, rows split by <br>, cells by &nbsp;.
        let page = "<pre>&nbsp;&nbsp;&nbsp;&nbsp;GPU0&nbsp;&nbsp;&nbsp;&nbsp;GPU1<br>GPU0&nbsp;&nbsp;&nbsp;&nbsp; X &nbsp;&nbsp;&nbsp;&nbsp;NV12<br>GPU1&nbsp;&nbsp;&nbsp;&nbsp;NV12&nbsp;&nbsp;&nbsp;&nbsp; X </pre>";
        assert!(looks_like_html(&[page]));
        let lines = unwrap(page);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            vec!["GPU0", "X", "NV12"]
        );
        assert_eq!(
            unwrap("h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1&lt;0&gt;<br/>"),
            vec!["h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"]
        );
        assert_eq!(unwrap("&#8203;a&#x41;&bogus;"), vec!["\u{200b}aA&bogus;"]);
        // Text that is not a page keeps its brackets.
        assert!(!looks_like_html(&[
            "frame #2: <unknown function> + 0xcf2d40",
            "x<0>"
        ]));
        assert_eq!(
            unwrap("frame #2: <unknown function>"),
            vec!["frame #2: <unknown function>"]
        );
    }
}

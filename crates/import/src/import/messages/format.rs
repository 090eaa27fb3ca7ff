//! A printf format as NCCL (or another project) writes it, turned into what finds its printed
//! lines: a regex with one group per conversion, the literal text that must appear (its longest
//! piece is the anchor a multi-pattern search looks for), and how much of it is literal — how
//! sure a match is.
//!
//! `{NAME}` stands for a macro between string literals (`"Call to " name " failed"`): it matches
//! any text, as `%s` does. Only the first printed line of a format with newlines is matched.

use regex::Regex;

/// What a format prints, taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    /// The regex source (unanchored at the start: NCCL's prefix comes before it).
    pub regex: String,
    /// The longest run of literal text: a line that prints the format contains it.
    pub anchor: String,
    /// Non-space literal characters: the more, the surer a match.
    pub literal_len: usize,
    /// Conversions, in order (`d`, `s`, `lx`, `{name}` ...).
    pub conversions: Vec<String>,
}

impl Pattern {
    /// Enough literal text to tell the format's lines from others: at least 10 non-space
    /// characters with a word of three letters or more (`%s:%d -> %d` is not).
    pub fn matchable(&self) -> bool {
        self.literal_len >= 10
            && self
                .anchor
                .split(|c: char| !c.is_ascii_alphabetic())
                .any(|w| w.len() >= 3)
    }

    pub fn compile(&self) -> Regex {
        // The pieces are escaped and the conversions fixed, so this cannot fail on any format.
        Regex::new(&self.regex).expect("a format's regex")
    }
}

/// The regex for one conversion (`length` and `conv` of `%[flags][width][.prec][length]conv`).
fn conversion_regex(flags: &str, width: &str, conv: char) -> &'static str {
    let padded = !width.is_empty() || flags.contains(' ');
    match conv {
        'd' | 'i' if padded => r" *([-+]?\d+)",
        'd' | 'i' => r"([-+]?\d+)",
        'u' if padded => r" *(\d+)",
        'u' => r"(\d+)",
        'x' | 'X' if padded => r" *((?:0[xX])?[0-9a-fA-F]+)",
        'x' | 'X' => r"((?:0[xX])?[0-9a-fA-F]+)",
        'o' => r" *([0-7]+)",
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'a' | 'A' => {
            r" *([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|inf|nan|-nan))"
        }
        'c' => r"(.)",
        'p' => r"(0x[0-9a-fA-F]+|\(nil\)|0)",
        // %s, and anything a macro prints.
        _ => r"(.*?)",
    }
}

/// Escape literal text, letting any run of spaces or tabs match any other (pastes collapse them).
fn push_literal(regex: &mut String, text: &str) {
    const TEXT: &str = "(.*?)";
    for c in text.chars() {
        if c == ' ' || c == '\t' {
            if regex.ends_with(r"\s+") || regex.ends_with(r"\s*") || regex.ends_with(r"\s+)?") {
                continue;
            }
            let before_text = regex
                .len()
                .checked_sub(TEXT.len())
                .and_then(|i| regex.get(..i));
            if regex.ends_with(TEXT)
                && before_text.is_some_and(|b| b.ends_with(r"\s+") || b.ends_with(r"\s*"))
            {
                // ` %s ` prints one space when the string is empty (as `address  with`
                // is often pasted): the string and its space are one optional piece.
                regex.truncate(regex.len() - TEXT.len());
                regex.push_str(r"(?:(.*?)\s+)?");
            } else if regex.ends_with([':', ',', ';', '=']) {
                regex.push_str(r"\s*");
            } else {
                regex.push_str(r"\s+");
            }
        } else {
            if ":,;=".contains(c) && regex.ends_with(r"\s+") {
                // Spaces around punctuation come and go when people retype or wrap a line.
                regex.truncate(regex.len() - 3);
                regex.push_str(r"\s*");
            }
            regex.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
        }
    }
}

/// Take a format apart.
pub fn parse(format: &str) -> Pattern {
    let first_line = format
        .split('\n')
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let mut regex = String::new();
    let mut pieces: Vec<String> = vec![String::new()];
    let mut conversions = Vec::new();
    let chars: Vec<char> = first_line.chars().collect();
    let mut i = 0;
    let literal = |regex: &mut String, pieces: &mut Vec<String>, s: &str| {
        push_literal(regex, s);
        pieces.last_mut().expect("one piece").push_str(s);
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '%' && chars.get(i + 1) == Some(&'%') {
            literal(&mut regex, &mut pieces, "%");
            i += 2;
            continue;
        }
        if c == '%' {
            let mut j = i + 1;
            let take = |j: &mut usize, set: &dyn Fn(char) -> bool| {
                let start = *j;
                while *j < chars.len() && set(chars[*j]) {
                    *j += 1;
                }
                chars[start..*j].iter().collect::<String>()
            };
            let flags = take(&mut j, &|c| "-+ #0'".contains(c));
            let width = take(&mut j, &|c| c.is_ascii_digit() || c == '*');
            if chars.get(j) == Some(&'.') {
                j += 1;
                take(&mut j, &|c| c.is_ascii_digit() || c == '*');
            }
            let length = take(&mut j, &|c| "hlLqjzt".contains(c));
            match chars.get(j) {
                Some(&conv) if "diouxXeEfFgGaAcsp".contains(conv) => {
                    regex.push_str(conversion_regex(&flags, &width, conv));
                    conversions.push(format!("{length}{conv}"));
                    pieces.push(String::new());
                    i = j + 1;
                    continue;
                }
                _ => {
                    // Not a conversion printf knows: printed as written.
                    literal(&mut regex, &mut pieces, "%");
                    i += 1;
                    continue;
                }
            }
        }
        if c == '{' {
            if let Some(end) = chars[i + 1..].iter().position(|&c| c == '}') {
                let name: String = chars[i + 1..i + 1 + end].iter().collect();
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    regex.push_str("(.*?)");
                    conversions.push(format!("{{{name}}}"));
                    pieces.push(String::new());
                    i += end + 2;
                    continue;
                }
            }
        }
        literal(&mut regex, &mut pieces, c.encode_utf8(&mut [0; 4]));
        i += 1;
    }
    // The anchor is one piece's longest stretch without a run of spaces (which a paste may
    // have collapsed), trimmed.
    let anchor = pieces
        .iter()
        .flat_map(|p| p.split("  ").map(str::trim).collect::<Vec<_>>())
        .max_by_key(|p| p.len())
        .unwrap_or("")
        .to_string();
    let literal_len = pieces
        .iter()
        .map(|p| p.chars().filter(|c| !c.is_whitespace()).count())
        .sum();
    Pattern {
        regex,
        anchor,
        literal_len,
        conversions,
    }
}

/// The line printf would print for `format` with made-up arguments of each conversion's kind:
/// what the catalogue's own test feeds its matchers.
pub fn render_sample(format: &str) -> String {
    let first_line = format
        .split('\n')
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let pattern = parse(first_line);
    let mut out = String::new();
    let mut k = 0;
    let mut rest = first_line;
    while let Some(pos) = rest.find(['%', '{']) {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("%%") {
            out.push('%');
            rest = after;
            continue;
        }
        let conv_len = spec_len(tail);
        match conv_len {
            Some(len) if k < pattern.conversions.len() => {
                out.push_str(sample_value(&pattern.conversions[k]));
                k += 1;
                rest = &tail[len..];
            }
            _ => {
                out.push_str(&tail[..1]);
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// How long the conversion (or `{NAME}`) at the start of `s` is, if it is one.
fn spec_len(s: &str) -> Option<usize> {
    if let Some(body) = s.strip_prefix('{') {
        let end = body.find('}')?;
        let name = &body[..end];
        return (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .then_some(end + 2);
    }
    let b = s.as_bytes();
    let mut j = 1;
    while j < b.len() && b"-+ #0'".contains(&b[j]) {
        j += 1;
    }
    while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'*') {
        j += 1;
    }
    if j < b.len() && b[j] == b'.' {
        j += 1;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'*') {
            j += 1;
        }
    }
    while j < b.len() && b"hlLqjzt".contains(&b[j]) {
        j += 1;
    }
    (j < b.len() && b"diouxXeEfFgGaAcsp".contains(&b[j])).then_some(j + 1)
}

fn sample_value(conv: &str) -> &'static str {
    match conv.chars().last() {
        Some('d') | Some('i') => "-42",
        Some('u') => "7",
        Some('x') | Some('X') => "1a000",
        Some('o') => "17",
        Some('c') => "c",
        Some('p') => "0x7f3a2c001000",
        Some('e') | Some('E') | Some('f') | Some('F') | Some('g') | Some('G') => "12.50",
        _ => "mlx5_0 value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_become_groups_and_literals_stay_literal() {
        let p = parse("NET/IB : Got completion from peer %s with status=%d opcode=%d len=%u vendor err %u (%s)%s%s%s%s");
        assert_eq!(p.conversions.len(), 10);
        assert_eq!(p.anchor, "NET/IB : Got completion from peer");
        let re = p.compile();
        let line = "n:1:2 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with status=12 opcode=0 len=0 vendor err 129 (Recv)";
        let caps = re.captures(line).expect("matches");
        assert_eq!(&caps[1], "10.2.0.5<33092>");
        assert_eq!(&caps[2], "12");
        assert!(!re.is_match("NET/IB : Got completion from peer x with status=abc"));
    }

    #[test]
    fn macros_pri_widths_percent_and_pointers() {
        let p = parse("Call to {name} failed: %s");
        assert_eq!(p.conversions, vec!["{name}", "s"]);
        assert!(p.compile().is_match(
            "misc/shmutils.cc:42 NCCL WARN Call to posix_fallocate failed: No space left on device"
        ));
        let p = parse("Channel %02d/%d : %d[%lx] -> %d[%lx] via %s 100%% sure %p");
        assert!(p
            .compile()
            .is_match("Channel 03/0 : 0[1000] -> 1[2000] via P2P/IPC 100% sure 0x7f00"));
        assert!(p.compile().is_match(&render_sample(
            "Channel %02d/%d : %d[%lx] -> %d[%lx] via %s 100%% sure %p"
        )));
    }

    #[test]
    fn short_formats_are_not_matchable_and_collapsed_spaces_still_match() {
        assert!(!parse("%s:%d -> %d").matchable());
        assert!(!parse("-> %d (%s)").matchable());
        assert!(parse("Bootstrap : no socket interface found").matchable());
        let p = parse("NET/IB :   Using %s");
        assert!(p.compile().is_match("NET/IB : Using [0]mlx5_0:1/IB"));
    }

    #[test]
    fn the_sample_of_every_kind_of_format_matches_its_own_pattern() {
        for f in [
            "Cuda failure %d '%s'",
            "rank %d alignment %ld is not power of 2",
            "Error while %s shared memory segment %s (size %zi), error: %s (%d)",
            "%-10s %5.2f {NAME} %c %o %lu %llx",
            "odd % spec %y stays",
            "cost %f µsecs, then %s µ %d",
        ] {
            let sample = render_sample(f);
            assert!(parse(f).compile().is_match(&sample), "{f} -> {sample}");
        }
    }
}

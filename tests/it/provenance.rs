//! What ncclprobe prints as a source (a finding's `source:`, a baseline's citation and note, a
//! model preset's source) cites what a user can open: a URL, a public document or project, or
//! words; never a file of the project's private design notes (`seeds/`, `reference/…`).
//!
//! URLs are public by definition and are left out of the check, so a documentation page whose
//! path happens to contain `reference/` (DCGM's) is not mistaken for a private note.

use std::path::Path;

/// What only the project's private notes are called.
const INTERNAL: &[&str] = &[
    "seeds/",
    "reference/",
    "anchors.md",
    "param_inventory",
    "ddp.md",
];

/// The internal names `text` mentions outside its URLs.
fn internal_refs(text: &str) -> Vec<&'static str> {
    let mut rest = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let tail = &text[i..];
        if tail.starts_with("http://") || tail.starts_with("https://") {
            let end = tail
                .find(|c: char| c.is_whitespace() || matches!(c, ')' | ',' | ';' | '"' | '\''))
                .unwrap_or(tail.len());
            rest.push(' ');
            i += end;
        } else {
            let c = tail.chars().next().unwrap();
            rest.push(c);
            i += c.len_utf8();
        }
    }
    INTERNAL
        .iter()
        .copied()
        .filter(|needle| rest.contains(needle))
        .collect()
}

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Record `text` (found at `place`) in `offenders` when it names an internal note.
fn judge(place: String, text: &str, offenders: &mut Vec<String>) {
    let found = internal_refs(text);
    if !found.is_empty() {
        offenders.push(format!("{place}: mentions {found:?}: {text:?}"));
    }
}

/// `path.key`, or `key` at the top.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Every `citation` and `note` string in a TOML value, with a path naming where it is.
fn toml_strings(value: &toml::Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(table) => {
            let here = match table.get("id").and_then(|v| v.as_str()) {
                Some(id) => format!("{path}(id {id})"),
                None => path.to_string(),
            };
            for (key, v) in table {
                match (key.as_str(), v.as_str()) {
                    ("citation" | "note", Some(text)) => {
                        out.push((join(&here, key), text.to_string()))
                    }
                    _ => toml_strings(v, &join(&here, key), out),
                }
            }
        }
        toml::Value::Array(items) => {
            for (n, v) in items.iter().enumerate() {
                toml_strings(v, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Every `source` string in a JSON value, with a path naming where it is.
fn json_sources(value: &serde_json::Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v.as_str()) {
                    ("source", Some(text)) => out.push((join(path, key), text.to_string())),
                    _ => json_sources(v, &join(path, key), out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (n, v) in items.iter().enumerate() {
                json_sources(v, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// The string literals from byte `start` of `code` to the end of its line or a `//` comment (a
/// literal that goes on past the line is read to its end), unescaped as far as `\"`, `\\` and
/// line continuations go.
fn literals_from(code: &str, start: usize) -> Vec<String> {
    let chars: Vec<char> = code[start..].chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\n' => break,
            '/' if chars.get(i + 1) == Some(&'/') => break,
            '"' => {
                let mut lit = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                        if chars.get(i) == Some(&'\n') {
                            // A line continuation: the next line's indent is not text.
                            while chars.get(i + 1).is_some_and(|c| c.is_whitespace()) {
                                i += 1;
                            }
                        } else if let Some(&c) = chars.get(i) {
                            lit.push(c);
                        }
                    } else {
                        lit.push(chars[i]);
                    }
                    i += 1;
                }
                out.push(lit);
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The user-visible strings of the diagnose rule table: the literals on its `source:`,
/// `explanation:` and `fix:` lines and in its `SRC_` constants, each with its line number.
fn rule_strings(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for (n, line) in code.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let kind = ["source:", "explanation:", "fix:"]
            .into_iter()
            .find(|k| trimmed.starts_with(k))
            .or_else(|| {
                (trimmed.starts_with("const SRC_") || trimmed.starts_with("pub const SRC_"))
                    .then_some("SRC_")
            });
        if let Some(kind) = kind {
            for lit in literals_from(code, offset + indent) {
                out.push((format!("line {} ({kind})", n + 1), lit));
            }
        }
        offset += line.len();
    }
    out
}

#[test]
fn the_detector_sees_internal_notes_and_not_urls() {
    assert_eq!(
        internal_refs("reference/anchors.md §4.2"),
        ["reference/", "anchors.md"]
    );
    assert_eq!(internal_refs("seeds/000 (nvidia-smi)"), ["seeds/"]);
    assert_eq!(
        internal_refs("registration order (reference/param_inventory.json)").len(),
        2
    );
    assert!(
        internal_refs("DCGM, https://docs.nvidia.com/datacenter/dcgm/latest/reference/x.html")
            .is_empty()
    );
    assert!(internal_refs("(https://example.org/seeds/a): seeds are fine in words").is_empty());
    assert_eq!(
        internal_refs("https://example.org/a, then reference/ddp.md"),
        ["reference/", "ddp.md"]
    );
    let code =
        "    source: \"a\", // seeds/ in a comment\n    fix: \"b \\\"c\\\"\",\n    check: x,\n";
    let found = rule_strings(code);
    assert_eq!(
        found.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>(),
        ["a", "b \"c\""]
    );
}

#[test]
fn user_visible_sources_cite_nothing_private() {
    let mut offenders = Vec::new();

    let toml_text = read("data/expectations.toml");
    let expectations: toml::Value =
        toml::from_str(&toml_text).unwrap_or_else(|e| panic!("data/expectations.toml: {e}"));
    let mut citations = Vec::new();
    toml_strings(&expectations, "", &mut citations);
    assert!(
        citations
            .iter()
            .filter(|(p, _)| p.ends_with(".citation"))
            .count()
            >= 20,
        "data/expectations.toml: the citations were found"
    );
    for (place, text) in &citations {
        judge(
            format!("data/expectations.toml {place}"),
            text,
            &mut offenders,
        );
    }

    let models: serde_json::Value = serde_json::from_str(&read("data/models.json"))
        .unwrap_or_else(|e| panic!("data/models.json: {e}"));
    let mut sources = Vec::new();
    json_sources(&models, "", &mut sources);
    assert!(
        sources.len() >= models.as_object().map_or(1, |m| m.len()),
        "data/models.json: every preset's source was found"
    );
    for (place, text) in &sources {
        judge(format!("data/models.json {place}"), text, &mut offenders);
    }

    let rules_path = "crates/analysis/src/diagnose/rules/mod.rs";
    let strings = rule_strings(&read(rules_path));
    for kind in ["(source:)", "(explanation:)", "(fix:)", "(SRC_)"] {
        assert!(
            strings.iter().any(|(p, _)| p.ends_with(kind)),
            "{rules_path}: no {kind} string found; has the table's layout changed?"
        );
    }
    assert!(
        strings
            .iter()
            .filter(|(p, _)| p.ends_with("(explanation:)"))
            .count()
            >= 20,
        "{rules_path}: the rules' explanations were found"
    );
    for (place, text) in &strings {
        judge(format!("{rules_path} {place}"), text, &mut offenders);
    }

    assert!(
        offenders.is_empty(),
        "{} user-visible string(s) cite the project's private notes instead of a public source:\n{}",
        offenders.len(),
        offenders.join("\n")
    );
}

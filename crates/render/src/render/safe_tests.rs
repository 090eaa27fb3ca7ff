use super::*;

#[test]
fn escape_sequences_are_removed_whole() {
    assert_eq!(display("a\x1b[31mred\x1b[0m b"), "ared b");
    assert_eq!(display("\x1b]0;owned\x07title"), "title");
    assert_eq!(
        display("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"),
        "link"
    );
    assert_eq!(display("x\u{9b}2Jy"), "xy");
    assert_eq!(display("\x1b(Bplain\x1bc"), "plain");
    // An unterminated string stops at the line's end, not the text's.
    assert_eq!(display("a\x1b]0;never\nnext"), "a\nnext");
}

#[test]
fn controls_and_bidi_overrides_are_dropped_and_layout_kept() {
    let evil = "nul\0here\r\u{8}\u{7f}\u{85} \u{202e}gpj.exe\u{202c} \u{2066}\u{200f}x\u{2069}";
    assert_eq!(display(evil), "nulhere gpj.exe x");
    assert_eq!(display("col1\tcol2\nrow"), "col1\tcol2\nrow");
    assert!(matches!(display("plain µs – text"), Cow::Borrowed(_)));
    assert_eq!(line("a\nb\tc"), "a b c");
}

#[test]
fn long_values_are_capped_and_counted() {
    let long = "é".repeat(300);
    let capped = cap(&long, 200);
    assert!(capped.starts_with(&"é".repeat(200)));
    assert!(capped.ends_with("… (200 more bytes)"), "{capped}");
    assert_eq!(cap("short", 200), "short");
}

#[test]
fn markdown_values_cannot_link_embed_or_break_a_table() {
    let md = markdown(
        "[x](http://evil) ![i](http://evil/p.png) <b>h</b> a|b `c` # h \x1b[31m\u{202e}",
        200,
    );
    for live in ["[x]", "![", "<b>", "a|b", "`c`", "\x1b", "\u{202e}"] {
        assert!(!md.contains(live), "{live} left live in {md}");
    }
    assert!(md.contains("\\[x\\](http://evil)"), "{md}");
    assert!(md.contains("a\\|b"), "{md}");
    assert_eq!(markdown("# not a heading", 200), "\\# not a heading");
    assert_eq!(
        markdown("> not a quote, 2 >= 1 #3", 200),
        "\\> not a quote, 2 >= 1 #3"
    );
    assert_eq!(
        markdown(&"v".repeat(1000), 10),
        "vvvvvvvvvv… (990 more bytes)"
    );
}

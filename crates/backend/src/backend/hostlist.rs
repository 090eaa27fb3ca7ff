//! Slurm's compressed host lists (`gpu[01-04,07]`, `rack[1-2]-n[1-2]`, `a1,b[3-4]`) expanded
//! as `scontrol show hostnames` does: commas outside brackets separate entries, a bracket holds
//! numbers and ranges whose zero padding is kept, and several brackets in one entry multiply.

/// The most names `expand` gives: more than any cluster has, few enough that a hostile or
/// mistyped list (`n[0-999999]x[0-999999]`) costs no memory to refuse.
pub const MAX_HOSTS: usize = 65_536;

/// Every host name of `list`, in Slurm's order; `Err` says what is malformed, or that it
/// names more than [`MAX_HOSTS`].
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for entry in top_level_entries(list)? {
        if entry_count(entry)?.saturating_add(hosts.len()) > MAX_HOSTS {
            return Err(format!(
                "host list `{}` names more than {MAX_HOSTS} hosts",
                shown(list)
            ));
        }
        hosts.extend(expand_entry(entry)?);
    }
    Ok(hosts)
}

/// How many names one entry stands for, counted without making them.
fn entry_count(entry: &str) -> Result<usize, String> {
    let mut count = 1usize;
    let mut rest = entry;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("host list entry `{entry}`: `[` without `]`"))?;
        let mut here = 0usize;
        for part in rest[open + 1..close].split(',').map(str::trim) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (a, b) = (lo.parse::<u64>(), hi.parse::<u64>());
            // Malformed parts are refused, with the reason, by `expand_entry`.
            let n = match (a, b) {
                (Ok(a), Ok(b)) if b >= a => (b - a).saturating_add(1),
                _ => 1,
            };
            here = here.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
        }
        count = count.saturating_mul(here);
        rest = &rest[close + 1..];
    }
    Ok(count)
}

/// The start of a long list, for a message.
fn shown(list: &str) -> String {
    match list.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &list[..at]),
        None => list.to_string(),
    }
}

/// The first host of `list` (the one Slurm gives task 0 under its default distribution).
pub fn first(list: &str) -> Result<String, String> {
    let entry = top_level_entries(list)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("host list `{list}` is empty"))?;
    expand_entry(entry)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("host list `{list}` is empty"))
}

/// Split at commas that are not inside brackets.
fn top_level_entries(list: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(format!("host list `{list}`: nested `[`")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(format!("host list `{list}`: `]` without `[`")),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("host list `{list}`: `[` without `]`"));
    }
    out.push(&list[start..]);
    Ok(out
        .into_iter()
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect())
}

/// One entry: text and bracketed ranges, every combination in order (the last bracket varies
/// fastest).
fn expand_entry(entry: &str) -> Result<Vec<String>, String> {
    let Some(open) = entry.find('[') else {
        return Ok(vec![entry.to_string()]);
    };
    let close = open
        + entry[open..]
            .find(']')
            .ok_or_else(|| format!("host list entry `{entry}`: `[` without `]`"))?;
    let (prefix, inner, rest) = (&entry[..open], &entry[open + 1..close], &entry[close + 1..]);
    let tails = expand_entry(rest)?;
    let mut out = Vec::new();
    for number in bracket_numbers(inner).map_err(|e| format!("host list entry `{entry}`: {e}"))? {
        for tail in &tails {
            out.push(format!("{prefix}{number}{tail}"));
        }
    }
    Ok(out)
}

/// The numbers a bracket names, as text with the padding of the range's low bound.
fn bracket_numbers(inner: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in inner.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("`{part}` is not a number or a range of numbers"));
        }
        let parse = |s: &str| s.parse::<u64>().map_err(|e| format!("`{s}`: {e}"));
        let (a, b) = (parse(lo)?, parse(hi)?);
        if b < a {
            return Err(format!("range `{part}` runs backwards"));
        }
        if b - a >= 1 << 20 {
            return Err(format!("range `{part}` names more than a million hosts"));
        }
        let width = if lo.starts_with('0') { lo.len() } else { 0 };
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<String> {
        expand(list).unwrap()
    }

    #[test]
    fn ranges_lists_and_padding_as_slurm_documents_them() {
        // Slurm's documentation: "tux[1-3,5]" is tux1, tux2, tux3, tux5; "linux[00-02]" keeps
        // two digits.
        assert_eq!(hosts("tux[1-3,5]"), ["tux1", "tux2", "tux3", "tux5"]);
        assert_eq!(hosts("linux[00-02]"), ["linux00", "linux01", "linux02"]);
        assert_eq!(
            hosts("gpu[01-04,07]"),
            ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]
        );
        // Padding comes from the low bound; a range may cross a power of ten.
        assert_eq!(hosts("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(hosts("n[098-101]"), ["n098", "n099", "n100", "n101"]);
    }

    #[test]
    fn several_entries_and_several_brackets() {
        assert_eq!(
            hosts("a1,b[3-4],c"),
            ["a1", "b3", "b4", "c"],
            "commas outside brackets separate entries"
        );
        assert_eq!(
            hosts("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
        assert_eq!(
            hosts("dgx-h100-[7,9].ib"),
            ["dgx-h100-7.ib", "dgx-h100-9.ib"]
        );
        assert_eq!(hosts("single-host"), ["single-host"]);
        assert_eq!(first("gpu[12-15],cpu1").unwrap(), "gpu12");
    }

    #[test]
    fn malformed_lists_are_refused_with_the_reason() {
        for (bad, why) in [
            ("gpu[1-4", "without `]`"),
            ("gpu1-4]", "without `[`"),
            ("gpu[a-b]", "not a number"),
            ("gpu[4-1]", "backwards"),
            ("gpu[[1]]", "nested"),
            ("gpu[0-99999999]", "million"),
            ("", "empty"),
        ] {
            let e = first(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_list_of_more_than_the_cap_is_refused_before_it_is_made() {
        // 65,536 names expand; one more is refused, as is a product of brackets that would
        // be a trillion names, without making them.
        assert_eq!(expand("n[00000-65535]").unwrap().len(), MAX_HOSTS);
        let e = expand("n[00000-65535],x").unwrap_err();
        assert!(e.contains("more than 65536 hosts"), "{e}");
        let e = expand("a[0-999999]b[0-999999]").unwrap_err();
        assert!(e.contains("more than 65536 hosts"), "{e}");
        assert_eq!(expand("gpu[07-08]").unwrap(), ["gpu07", "gpu08"]);
    }
}

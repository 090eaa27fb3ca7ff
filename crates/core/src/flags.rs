//! Checks every command applies to flag values clap cannot check alone: lists, positive
//! numbers, fractions. Each failure is a usage error (exit 2) that names the flag.

use crate::exit::Failure;

/// A comma-separated list; every item must parse, and there must be at least one.
/// `allowed` says what would have been accepted.
pub fn parse_list<T>(
    flag: &str,
    text: &str,
    parse: impl Fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Vec<T>, Failure> {
    let values = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            parse(item).ok_or_else(|| {
                Failure::usage(format!(
                    "{flag}: unknown value '{item}'; allowed: {allowed}"
                ))
            })
        })
        .collect::<Result<Vec<T>, Failure>>()?;
    if values.is_empty() {
        return Err(Failure::usage(format!(
            "{flag}: empty list; allowed: {allowed}"
        )));
    }
    Ok(values)
}

/// Like `parse_list`, with `all` standing for every value.
pub fn parse_list_or_all<T: Clone>(
    flag: &str,
    text: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    names: &str,
) -> Result<Vec<T>, Failure> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    parse_list(flag, text, parse, &format!("{names}, all"))
}

/// A finite number above zero; `unit` completes the message ("seconds", "GB/s").
pub fn positive(flag: &str, value: f64, unit: &str) -> Result<f64, Failure> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be a positive number of {unit}, got {}",
            crate::units::plain(value)
        )))
    }
}

/// The most memory one GPU's flags may state: more than any GPU holds (288 GB of HBM, 624 GB
/// with a Grace Hopper's unified memory), so that only a typo or a made-up figure is refused.
pub const MOST_GPU_MEMORY_GB: f64 = 4096.0;

/// A positive, finite number no larger than `most`.
pub fn positive_at_most(flag: &str, value: f64, unit: &str, most: f64) -> Result<f64, Failure> {
    at_most(flag, positive(flag, value, unit)?, unit, most)
}

/// `value` when it is no larger than `most`.
pub fn at_most(flag: &str, value: f64, unit: &str, most: f64) -> Result<f64, Failure> {
    if value <= most {
        Ok(value)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be at most {} {unit}, got {}",
            crate::units::plain(most),
            crate::units::plain(value)
        )))
    }
}

/// A finite number of zero or more.
pub fn non_negative(flag: &str, value: f64, unit: &str) -> Result<f64, Failure> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be 0 or a positive number of {unit}, got {}",
            crate::units::plain(value)
        )))
    }
}

/// A count from `least` to `most`.
pub fn count_in(flag: &str, value: usize, least: usize, most: usize) -> Result<usize, Failure> {
    if (least..=most).contains(&value) {
        Ok(value)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be from {least} to {most}, got {value}"
        )))
    }
}

/// Seconds that a `Duration` can hold (and that are more than zero): a timeout of 1e20 s is
/// refused rather than overflowing.
pub fn seconds(flag: &str, value: f64) -> Result<f64, Failure> {
    let value = positive(flag, value, "seconds")?;
    match std::time::Duration::try_from_secs_f64(value) {
        Ok(d) if d.as_secs() <= MAX_SECONDS => Ok(value),
        _ => Err(Failure::usage(format!(
            "{flag}: {value} seconds is more than the {MAX_SECONDS} s ncclprobe accepts"
        ))),
    }
}

/// The longest time any seconds flag accepts: 30 days.
pub const MAX_SECONDS: u64 = 30 * 24 * 3600;

/// A number from 0 to 1.
pub fn fraction(flag: &str, value: f64) -> Result<f64, Failure> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be a fraction between 0 and 1, got {}",
            crate::units::plain(value)
        )))
    }
}

/// " (did you mean `a` or `b`?)" for a name the user gave that is none of `names`: the names it
/// matches when case, `_` and spaces are set aside, those it is a part of (`h100` →
/// `h100-sxm-nvswitch-8`), or those a typo or two away; "" when none is close.
pub fn did_you_mean(given: &str, names: &[&str]) -> String {
    let norm = |s: &str| -> String {
        s.trim()
            .to_lowercase()
            .chars()
            .map(|c| if c == '_' || c == ' ' { '-' } else { c })
            .collect()
    };
    let g = norm(given);
    if g.is_empty() {
        return String::new();
    }
    let mut close: Vec<&str> = names.iter().copied().filter(|n| norm(n) == g).collect();
    if close.is_empty() {
        close = names
            .iter()
            .copied()
            .filter(|n| g.len() >= 2 && norm(n).contains(&g))
            .collect();
    }
    if close.is_empty() {
        close = names
            .iter()
            .copied()
            .filter(|n| edits(&norm(n), &g) <= if g.len() > 6 { 2 } else { 1 })
            .collect();
    }
    match close.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean `{one}`?)"),
        many => {
            let shown: Vec<String> = many.iter().take(4).map(|n| format!("`{n}`")).collect();
            let more = if many.len() > 4 { ", …" } else { "" };
            format!(" (did you mean one of {}{more}?)", shown.join(", "))
        }
    }
}

/// Levenshtein distance (insertions, deletions, substitutions), for short names.
pub fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn did_you_mean_finds_the_name_a_user_meant() {
        let names = [
            "h100-sxm-nvswitch-8",
            "h100-pcie-2",
            "a100-sxm4-nvswitch-8",
            "bert-base",
        ];
        assert_eq!(
            super::did_you_mean("bert_base", &names),
            " (did you mean `bert-base`?)"
        );
        assert_eq!(
            super::did_you_mean("h100", &names),
            " (did you mean one of `h100-sxm-nvswitch-8`, `h100-pcie-2`?)"
        );
        assert_eq!(
            super::did_you_mean("bert-bsae", &names),
            " (did you mean `bert-base`?)"
        );
        assert_eq!(super::did_you_mean("zzz", &names), "");
        assert_eq!(super::did_you_mean("", &names), "");
    }

    use super::*;

    #[test]
    fn lists_name_the_flag_and_the_bad_item() {
        let parse = |s: &str| s.parse::<u32>().ok();
        assert_eq!(
            parse_list("-x", "1, 2,,3", parse, "numbers").unwrap(),
            vec![1, 2, 3]
        );
        let e = parse_list("-x", "1,abc", parse, "numbers").unwrap_err();
        assert_eq!(e.message, "-x: unknown value 'abc'; allowed: numbers");
        assert!(parse_list("-x", " , ", parse, "numbers").is_err());
        assert_eq!(
            parse_list_or_all("-x", "ALL", &[7, 8], parse, "7, 8").unwrap(),
            vec![7, 8]
        );
    }

    #[test]
    fn numbers_out_of_range_are_refused() {
        assert!(positive("--t", 0.0, "seconds").is_err());
        assert!(positive("--t", f64::NAN, "seconds").is_err());
        assert_eq!(positive("--t", 2.5, "seconds").unwrap(), 2.5);
        assert!(fraction("--f", 1.5).is_err());
        assert!(non_negative("--l", -1.0, "us").is_err());
        assert!(non_negative("--l", f64::NAN, "us").is_err());
        assert_eq!(non_negative("--l", 0.0, "us").unwrap(), 0.0);
        assert!(seconds("--timeout", 1e20).is_err());
        assert!(seconds("--timeout", f64::INFINITY).is_err());
        assert_eq!(seconds("--timeout", 300.0).unwrap(), 300.0);
        assert!(count_in("--world-size", usize::MAX, 1, 1 << 20).is_err());
        assert_eq!(fraction("--f", 0.0).unwrap(), 0.0);
    }
}

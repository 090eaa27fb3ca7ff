//! Sizes as nccl-tests reads them (binary K/M/G suffixes) and as we print them.

use thiserror::Error;

pub mod cnum;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SizeError {
    #[error("'{0}' is not a size: expected a whole number with an optional K, M, G or T suffix (binary, K = 1024), e.g. 8, 64K, 256M")]
    NotASize(String),
    #[error("'{0}' is too large")]
    Overflow(String),
}

/// Parse `8`, `64K`, `256M`, `1G`, `1GB`, `1GiB` (all binary, as nccl-tests' `parsesize`).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits_end == 0 {
        return Err(SizeError::NotASize(text.to_string()));
    }
    let value: u64 = t[..digits_end]
        .parse()
        .map_err(|_| SizeError::Overflow(text.to_string()))?;
    let suffix = t[digits_end..].trim().to_ascii_uppercase();
    let shift = match suffix.as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(SizeError::NotASize(text.to_string())),
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::Overflow(text.to_string()))
}

/// A compact binary size for messages: `8 B`, `64 KiB`, `256 MiB`, `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{} {}", value as u64, UNITS[unit])
    } else {
        format!("{:.1} {}", value, UNITS[unit])
    }
}

/// Whether fixed digits cannot show `value` in a line: 1e9 or more, or under 1e-6 (not zero).
fn out_of_line(value: f64) -> bool {
    let size = value.abs();
    value.is_finite() && (size >= 1e9 || (size != 0.0 && size < 1e-6))
}

/// A value as Rust prints it (`0.5`, `-1`, `NaN`), or in scientific notation where that would
/// run to hundreds of digits (see [`fixed`]).
pub fn plain(value: f64) -> String {
    match out_of_line(value) {
        true => fixed(value, 2),
        false => format!("{value}"),
    }
}

/// `value` with `decimals` decimals, as people read it; in scientific notation (`1.00e+308`,
/// C's `%e`) when it is too large (1e9 or more) or too small (under 1e-6, but not zero) for
/// fixed digits to show it in a line.
pub fn fixed(value: f64, decimals: usize) -> String {
    if out_of_line(value) {
        let s = format!("{value:.decimals$e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{value:.decimals$}")
    }
}

/// A ratio as people read it (`0.97x`); `–` where there is none to give (0/0, a figure divided
/// by zero): `NaNx` reads as a bug.
pub fn ratio(value: f64) -> String {
    match value.is_finite() {
        true => format!("{}x", fixed(value, 2)),
        false => "–".into(),
    }
}

/// A size as people read it, two decimals in binary units: MiB below a GiB, GiB below a
/// TiB, TiB from there (`500.00 MiB`, `23.63 GiB`), as PyTorch's messages print them.
pub fn size_text(bytes: f64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes < GIB {
        format!("{:.2} MiB", bytes / MIB)
    } else if bytes < 1024.0 * GIB {
        format!("{:.2} GiB", bytes / GIB)
    } else {
        format!("{:.2} TiB", bytes / GIB / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(parse_size("abc"), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size("12X"), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size(""), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size("-5"), Err(SizeError::NotASize(_))));
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            parse_size("99999999999T"),
            Err(SizeError::Overflow(_))
        ));
    }

    #[test]
    fn large_and_tiny_values_are_scientific() {
        assert_eq!(fixed(1e308, 2), "1.00e+308");
        assert_eq!(fixed(-2.5e12, 1), "-2.5e+12");
        assert_eq!(fixed(3e-9, 2), "3.00e-09");
        assert_eq!(fixed(123.456, 2), "123.46");
        assert_eq!(fixed(999_999_999.0, 0), "999999999");
        assert_eq!(fixed(0.0, 2), "0.00");
        assert_eq!(fixed(f64::INFINITY, 2), "inf");
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(1536), "1.5 KiB");
    }
}

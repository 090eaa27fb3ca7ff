//! C's number conversions as glibc 2.36 on x86-64 does them (`strtod`, `atof`, `strtol`,
//! `strtoul`, `sscanf("%lf")`, a double cast to `size_t`, a `long` stored in an `int`): how
//! nccl-tests reads every number it is given, so that ncclprobe under its names reads them
//! alike, prefixes, hex, `inf`, `nan`, overflow and all. Pure: no I/O.

/// C's `isspace` in the "C" locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// What `strtod(text, &end)` gives: the value, how many bytes it read (0: none, `end ==
/// text`), and whether it set `errno` to ERANGE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Strtod {
    pub value: f64,
    pub used: usize,
    pub erange: bool,
}

/// `strtod`: leading space, a sign, then `inf`/`infinity`, `nan`/`nan(chars)`, a hex float
/// (`0x1.8p3`) or a decimal one, each as long as it goes. ERANGE on overflow (±inf) and on an
/// inexact result below the smallest normal double, as glibc sets it.
pub fn strtod(text: &str) -> Strtod {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    let negative = b.get(i) == Some(&b'-');
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let sign = |v: f64| if negative { -v } else { v };
    let rest = &text[i..];
    let starts = |word: &str| {
        rest.len() >= word.len()
            && rest.as_bytes()[..word.len()].eq_ignore_ascii_case(word.as_bytes())
    };
    let none = Strtod {
        value: 0.0,
        used: 0,
        erange: false,
    };
    if starts("infinity") || starts("inf") {
        let n = if starts("infinity") { 8 } else { 3 };
        return Strtod {
            value: sign(f64::INFINITY),
            used: i + n,
            erange: false,
        };
    }
    if starts("nan") {
        let mut n = 3;
        // `nan(n-char-sequence)`: read only when the parenthesis closes.
        if rest.as_bytes().get(3) == Some(&b'(') {
            let inner = rest.as_bytes()[4..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            if rest.as_bytes().get(4 + inner) == Some(&b')') {
                n = 5 + inner;
            }
        }
        return Strtod {
            value: sign(f64::NAN),
            used: i + n,
            erange: false,
        };
    }
    let hex_digit_at = |k: usize| rest.as_bytes().get(k).is_some_and(u8::is_ascii_hexdigit);
    if (rest.starts_with("0x") || rest.starts_with("0X"))
        && (hex_digit_at(2) || (rest.as_bytes().get(2) == Some(&b'.') && hex_digit_at(3)))
    {
        let (value, used, erange) = hex_float(&rest[2..]);
        return Strtod {
            value: sign(value),
            used: i + 2 + used,
            erange,
        };
    }
    let Some((used, nonzero)) = decimal_extent(rest) else {
        return none;
    };
    // Rust's parse rounds correctly, as glibc does, on the text strtod would read.
    let value: f64 = rest[..used].parse().unwrap_or(0.0);
    let erange = value.is_infinite() || (nonzero && value.abs() < f64::MIN_POSITIVE);
    Strtod {
        value: sign(value),
        used: i + used,
        erange,
    }
}

/// The length of the decimal float at the start of `t` (digits, a point, digits, then an
/// exponent only when digits follow it) and whether any digit is not 0; `None` without digits.
fn decimal_extent(t: &str) -> Option<(usize, bool)> {
    let b = t.as_bytes();
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits(0);
    let mut end = int;
    let mut frac = 0;
    if b.get(end) == Some(&b'.') {
        frac = digits(end + 1);
        end += 1 + frac;
    }
    if int + frac == 0 {
        return None;
    }
    let nonzero = b[..end].iter().any(|c| (b'1'..=b'9').contains(c));
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
        let exp = digits(end + 1 + sign);
        if exp > 0 {
            end += 1 + sign + exp;
        }
    }
    Some((end, nonzero))
}

/// A hex float's digits after `0x` (at least one digit is known to be there): the value
/// rounded to nearest even, the bytes read and ERANGE.
fn hex_float(t: &str) -> (f64, usize, bool) {
    let b = t.as_bytes();
    let mut i = 0;
    let mut mantissa: u64 = 0;
    let mut sticky = false;
    let mut exp2: i64 = 0;
    let mut seen_point = false;
    while i < b.len() {
        let c = b[i];
        if c == b'.' && !seen_point {
            seen_point = true;
            i += 1;
            continue;
        }
        let Some(d) = (c as char).to_digit(16) else {
            break;
        };
        if mantissa >> 60 == 0 {
            mantissa = mantissa << 4 | u64::from(d);
            if seen_point {
                exp2 -= 4;
            }
        } else {
            // 64 bits held: the rest only decides rounding, and shifts the point.
            sticky |= d != 0;
            if !seen_point {
                exp2 += 4;
            }
        }
        i += 1;
    }
    if matches!(b.get(i), Some(b'p' | b'P')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        let start = i + 1 + sign;
        let n = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n > 0 {
            let e = t[start..start + n]
                .parse::<i64>()
                .unwrap_or(i64::MAX / 4)
                .min(1 << 40);
            exp2 += if b[i + 1] == b'-' { -e } else { e };
            i = start + n;
        }
    }
    let (value, erange) = compose(mantissa, sticky, exp2);
    (value, i, erange)
}

/// `(mantissa + sticky) * 2^exp2` as the nearest double (ties to even), and ERANGE: overflow,
/// or an inexact result below the smallest normal double.
fn compose(mantissa: u64, sticky: bool, exp2: i64) -> (f64, bool) {
    if mantissa == 0 {
        return (0.0, false);
    }
    let top = 63 - i64::from(mantissa.leading_zeros());
    let e = top + exp2;
    if e > 1023 {
        return (f64::INFINITY, true);
    }
    // Significand bits the result can hold: 53 for a normal double, fewer below 2^-1022.
    let keep = if e >= -1022 { 53 } else { 53 - (-1022 - e) };
    let drop = top + 1 - keep;
    let (sig, inexact) = if drop <= 0 {
        (mantissa << (-drop).min(63), sticky)
    } else if drop > 64 {
        (0, true)
    } else {
        let kept = if drop == 64 { 0 } else { mantissa >> drop };
        let rest = if drop == 64 {
            mantissa
        } else {
            mantissa & ((1u64 << drop) - 1)
        };
        let half = 1u64 << (drop - 1);
        let round_up = rest > half || (rest == half && (sticky || kept & 1 == 1));
        (kept + u64::from(round_up), rest != 0 || sticky)
    };
    let bits = if e >= -1022 {
        // The implicit bit carries a rounding overflow into the exponent by itself.
        (((e + 1022) as u64) << 52) + sig
    } else {
        sig
    };
    if bits >= 0x7ff0_0000_0000_0000 {
        return (f64::INFINITY, true);
    }
    let value = f64::from_bits(bits);
    (value, inexact && value < f64::MIN_POSITIVE)
}

/// `atof`: `strtod(text, NULL)`, 0 when nothing is read.
pub fn atof(text: &str) -> f64 {
    strtod(text).value
}

/// What `strtol`/`strtoul` read: the digits' magnitude (saturated), whether it overflowed,
/// whether a minus sign came first, and the bytes read (0 when no digit).
struct Integer {
    magnitude: u64,
    overflow: bool,
    negative: bool,
    used: usize,
}

/// The scan both `strtol` and `strtoul` do with `base` 0 (prefix decides), 2, 8, 10 or 16.
fn scan_integer(text: &str, base: u32) -> Integer {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    let negative = b.get(i) == Some(&b'-');
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let hex_after_prefix = matches!(b.get(i..i + 2), Some(b"0x" | b"0X"))
        && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
    let radix = match base {
        0 if hex_after_prefix => {
            i += 2;
            16
        }
        0 if b.get(i) == Some(&b'0') => 8,
        0 => 10,
        16 => {
            if hex_after_prefix {
                i += 2;
            }
            16
        }
        b => b,
    };
    let start = i;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|c| (*c as char).to_digit(radix)) {
        match magnitude
            .checked_mul(u64::from(radix))
            .and_then(|m| m.checked_add(u64::from(d)))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    Integer {
        magnitude: if overflow { u64::MAX } else { magnitude },
        overflow,
        negative,
        used: if i == start { 0 } else { i },
    }
}

/// `strtol(text, &end, base)`: the value (LONG_MAX or LONG_MIN when it does not fit) and the
/// bytes read (0 when none).
pub fn strtol(text: &str, base: u32) -> (i64, usize) {
    let n = scan_integer(text, base);
    let value = match (n.negative, n.overflow || n.magnitude > i64::MAX as u64 + 1) {
        (false, true) => i64::MAX,
        (true, true) => i64::MIN,
        (false, false) => i64::try_from(n.magnitude).unwrap_or(i64::MAX),
        (true, false) => 0i64.wrapping_sub_unsigned(n.magnitude),
    };
    (value, n.used)
}

/// `strtoul(text, &end, base)`: ULONG_MAX when the digits do not fit, else the magnitude,
/// negated modulo 2^64 after a minus sign (`"-1"` is ULONG_MAX); and the bytes read.
pub fn strtoul(text: &str, base: u32) -> (u64, usize) {
    let n = scan_integer(text, base);
    let value = match (n.overflow, n.negative) {
        (true, _) => u64::MAX,
        (false, true) => n.magnitude.wrapping_neg(),
        (false, false) => n.magnitude,
    };
    (value, n.used)
}

/// A `long` stored in an `int` (gcc keeps the low 32 bits): `(int)strtol(...)`.
pub fn c_int(value: i64) -> i64 {
    i64::from(value as i32)
}

/// `(size_t)value` as gcc compiles it on x86-64 (`cvttsd2si`, offset by 2^63 for values at
/// or above it): exact for 0 <= value < 2^64, 0 at or above 2^64 and for inf, 2^63 for NaN,
/// and the two's complement of the truncated value below 0. C leaves the out-of-range cases
/// undefined; these are what that machine code gives.
pub fn size_t_of(value: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    // cvttsd2si: NaN and values outside i64 give the "integer indefinite" 0x8000_0000_0000_0000.
    let cvtt = |v: f64| -> u64 {
        if v.is_nan() || !(-TWO_63..TWO_63).contains(&v) {
            1 << 63
        } else {
            v.trunc() as i64 as u64
        }
    };
    // `comisd` sends NaN down the first branch, as it compares unordered (below).
    if value.is_nan() || value < TWO_63 {
        cvtt(value)
    } else {
        cvtt(value - TWO_63) ^ (1 << 63)
    }
}

/// `sscanf(text, "%lf", &d)` as glibc's scanner reads a float: leading space, a sign, `nan`,
/// `inf` or `infinity` (a partial `infinity` fails the conversion), else the longest run of
/// digits, one point and an exponent letter with its sign (`1e` and `0x1p` are taken, as
/// glibc takes them), converted by strtod. The value and the text after what was read;
/// `None` for a matching failure (nothing that converts, `0x` alone).
pub fn scan_lf(text: &str) -> Option<(f64, &str)> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    let start = i;
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let lower = |k: usize| b.get(k).map(u8::to_ascii_lowercase);
    match lower(i) {
        Some(b'n') => {
            (lower(i + 1) == Some(b'a') && lower(i + 2) == Some(b'n')).then_some(())?;
            i += 3;
        }
        Some(b'i') => {
            (lower(i + 1) == Some(b'n') && lower(i + 2) == Some(b'f')).then_some(())?;
            i += 3;
            if lower(i) == Some(b'i') {
                let word = b"inity";
                (0..word.len())
                    .all(|k| lower(i + k) == Some(word[k]))
                    .then_some(())?;
                i += word.len();
            }
        }
        _ => i = scan_float_chars(b, i)?,
    }
    let read = strtod(&text[start..i]);
    (read.used > 0).then(|| (read.value, &text[i..]))
}

/// glibc's character loop for `%f` from `i` (after the sign): the end of what it collects, or
/// `None` when that is `0x` alone.
fn scan_float_chars(b: &[u8], mut i: usize) -> Option<usize> {
    let begin = i;
    let mut hex = false;
    let mut exp_char = b'e';
    let mut got_digit = false;
    let mut got_dot = false;
    let mut got_e = false;
    if b.get(i) == Some(&b'0') {
        i += 1;
        if matches!(b.get(i), Some(b'x' | b'X')) {
            hex = true;
            exp_char = b'p';
            i += 1;
        } else {
            got_digit = true;
        }
    }
    while let Some(&c) = b.get(i) {
        if c.is_ascii_digit() || (!got_e && hex && c.is_ascii_hexdigit()) {
            got_digit = true;
        } else if got_e && b[i - 1].to_ascii_lowercase() == exp_char && matches!(c, b'-' | b'+') {
            // The exponent's sign, right after its letter.
        } else if got_digit && !got_e && c.to_ascii_lowercase() == exp_char {
            got_e = true;
            got_dot = true;
        } else if !got_dot && c == b'.' {
            got_dot = true;
        } else {
            break;
        }
        i += 1;
    }
    if hex && i - begin == 2 {
        return None;
    }
    Some(i)
}

/// `printf("%g", value)`: six significant digits, `%f` or `%e` by the exponent, trailing
/// zeros dropped; `inf`, `nan` (`-nan` with the sign bit set, as glibc writes it).
pub fn format_g(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .into();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // The exponent is that of the value rounded to six digits (999999.5 is 1e+06).
    let rounded = format!("{value:.5e}");
    let (mantissa, exp) = rounded.split_once('e').unwrap_or((&rounded, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..6).contains(&exp) {
        trim(&format!("{value:.*}", (5 - exp) as usize))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    }
}

#[cfg(test)]
#[path = "cnum_tests.rs"]
mod tests;

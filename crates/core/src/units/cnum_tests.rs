//! Every expectation here is what glibc 2.36 on x86-64 returned for the same text, from a C
//! program calling strtod, sscanf("%lf %1s"), strtol, strtoul and a `(size_t)` cast.

use super::*;

/// strtod: (text, the result's bits, bytes read, ERANGE).
const STRTOD: &[(&str, u64, usize, bool)] = &[
    ("0x.", 0x0000000000000000, 1, false),
    ("0x.8", 0x3fe0000000000000, 4, false),
    ("0x1p", 0x3ff0000000000000, 3, false),
    ("0xp1", 0x0000000000000000, 1, false),
    ("0x1p-1074", 0x0000000000000001, 9, false),
    ("0x1p-1075", 0x0000000000000000, 9, true),
    ("0x1.8p-1074", 0x0000000000000002, 11, true),
    ("0x1p1023", 0x7fe0000000000000, 8, false),
    ("0x1p1024", 0x7ff0000000000000, 8, true),
    ("0x1.fffffffffffff8p1023", 0x7ff0000000000000, 23, true),
    ("1e-310", 0x000012688b70e62b, 6, true),
    ("2.2250738585072014e-308", 0x0010000000000000, 23, false),
    ("1e400", 0x7ff0000000000000, 5, true),
    ("-1e400", 0xfff0000000000000, 6, true),
    ("1e-400", 0x0000000000000000, 6, true),
    ("infinity", 0x7ff0000000000000, 8, false),
    ("infinit", 0x7ff0000000000000, 3, false),
    ("-inf", 0xfff0000000000000, 4, false),
    ("nan(a_b)x", 0x7ff8000000000000, 8, false),
    ("nan(", 0x7ff8000000000000, 3, false),
    ("  +5 GB/s", 0x4014000000000000, 4, false),
    ("1e3abc", 0x408f400000000000, 3, false),
    ("0x1p10", 0x4090000000000000, 6, false),
    ("5.", 0x4014000000000000, 2, false),
    (".5", 0x3fe0000000000000, 2, false),
    (".", 0x0000000000000000, 0, false),
    ("-.", 0x0000000000000000, 0, false),
    ("e5", 0x0000000000000000, 0, false),
    ("1e+", 0x3ff0000000000000, 1, false),
    ("1e+5x", 0x40f86a0000000000, 4, false),
    ("0x400", 0x4090000000000000, 5, false),
    ("0x1.000000000000080000001p0", 0x3ff0000000000001, 27, false),
    ("0x1.00000000000008p0", 0x3ff0000000000000, 20, false),
    ("0x1.00000000000018p0", 0x3ff0000000000002, 20, false),
    (
        "123456789012345678901234567890",
        0x45f8ee90ff6c373e,
        30,
        false,
    ),
    ("0", 0x0000000000000000, 1, false),
    ("-0", 0x8000000000000000, 2, false),
    ("", 0x0000000000000000, 0, false),
    ("abc", 0x0000000000000000, 0, false),
    ("0x0.0000000000001p-1022", 0x0000000000000001, 23, false),
    ("0x1.0000000000001p-1023", 0x0008000000000000, 23, true),
    ("\t\x0b7", 0x401c000000000000, 3, false),
    ("0X1P-2", 0x3fd0000000000000, 6, false),
];

/// sscanf("%lf"): (text, the value's bits, or None for a matching failure).
const SCAN: &[(&str, Option<u64>)] = &[
    ("8e", Some(0x4020000000000000)),
    ("8e5", Some(0x41286a0000000000)),
    ("1M", Some(0x3ff0000000000000)),
    ("8x", Some(0x4020000000000000)),
    ("1e5K", Some(0x40f86a0000000000)),
    ("0x10", Some(0x4030000000000000)),
    ("0x", None),
    ("0x1p", Some(0x3ff0000000000000)),
    ("infinity", Some(0x7ff0000000000000)),
    ("inf", Some(0x7ff0000000000000)),
    ("nan", Some(0x7ff8000000000000)),
    ("nan(12)", Some(0x7ff8000000000000)),
    ("1.5K", Some(0x3ff8000000000000)),
    ("  64", Some(0x4050000000000000)),
    ("64 K", Some(0x4050000000000000)),
    ("-1", Some(0xbff0000000000000)),
    ("1e+K", Some(0x3ff0000000000000)),
    ("64KB", Some(0x4050000000000000)),
    ("", None),
    ("1T", Some(0x3ff0000000000000)),
    (".", None),
    (".5", Some(0x3fe0000000000000)),
    ("0x10K", Some(0x4030000000000000)),
    ("1e400", Some(0x7ff0000000000000)),
    ("8 junk", Some(0x4020000000000000)),
    ("1ek", Some(0x3ff0000000000000)),
    ("1e-k", Some(0x3ff0000000000000)),
    ("0xg", None),
    ("99999999999999999999", Some(0x4415af1d78b58c40)),
    ("infinit", None),
    ("infx", Some(0x7ff0000000000000)),
    ("in", None),
    ("0x.", Some(0x0000000000000000)),
    (".e5", None),
    ("1..2", Some(0x3ff0000000000000)),
    ("-", None),
    ("+-1", None),
    ("00x10", Some(0x0000000000000000)),
    ("1e5e", Some(0x40f86a0000000000)),
    ("0x10e", Some(0x4070e00000000000)),
    ("0xAp1K", Some(0x4034000000000000)),
    ("-0x10", Some(0xc030000000000000)),
    ("\x0b8", Some(0x4020000000000000)),
    ("nanK", Some(0x7ff8000000000000)),
];

/// strtol(text, &end, 0): (text, value, bytes read).
const STRTOL: &[(&str, i64, usize)] = &[
    ("5", 5, 1),
    ("-5", -5, 2),
    ("0x10", 16, 4),
    ("010", 8, 3),
    ("08", 0, 1),
    ("0x", 0, 1),
    ("0xg", 0, 1),
    (" -7x", -7, 3),
    ("99999999999999999999", 9223372036854775807, 20),
    ("-99999999999999999999", -9223372036854775808, 21),
    ("9223372036854775808", 9223372036854775807, 19),
    ("-9223372036854775808", -9223372036854775808, 20),
    ("abc", 0, 0),
    ("", 0, 0),
    ("+3", 3, 2),
    ("4294967297", 4294967297, 10),
    ("-0x10", -16, 5),
];

/// strtoul(text, &end, 0): (text, value, bytes read).
const STRTOUL: &[(&str, u64, usize)] = &[
    ("-1", 18446744073709551615, 2),
    ("99999999999999999999", 18446744073709551615, 20),
    ("0x10", 16, 4),
    (" 7", 7, 2),
    ("-0", 0, 2),
    ("abc", 0, 0),
    ("18446744073709551615", 18446744073709551615, 20),
    ("18446744073709551616", 18446744073709551615, 20),
    ("-18446744073709551615", 1, 21),
];

/// (size_t)strtod(text): (text, value).
const CAST: &[(&str, u64)] = &[
    ("1e20", 0),
    ("18446744073709551615", 0),
    ("inf", 0),
    ("nan", 9223372036854775808),
    ("1e19", 10000000000000000000),
    ("9.3e18", 9300000000000000000),
    ("9223372036854775808", 9223372036854775808),
    ("0", 0),
    ("1.9", 1),
    ("-0.0", 0),
];

fn same(a: f64, bits: u64) -> bool {
    let b = f64::from_bits(bits);
    (a.is_nan() && b.is_nan()) || a.to_bits() == bits
}

#[test]
fn strtod_reads_as_glibc() {
    for &(text, bits, used, erange) in STRTOD {
        let got = strtod(text);
        assert!(
            same(got.value, bits),
            "{text:?}: {got:?} vs {:?}",
            f64::from_bits(bits)
        );
        assert_eq!((got.used, got.erange), (used, erange), "{text:?}");
    }
}

#[test]
fn sscanf_lf_reads_as_glibc() {
    for &(text, want) in SCAN {
        let got = scan_lf(text).map(|(v, _)| v);
        match (got, want) {
            (Some(v), Some(bits)) => assert!(same(v, bits), "{text:?}: {v}"),
            (None, None) => {}
            _ => panic!("{text:?}: {got:?} vs {want:?}"),
        }
    }
    // What is left for "%1s" after the number.
    assert_eq!(scan_lf("1e-k").map(|(_, r)| r), Some("k"));
    assert_eq!(scan_lf("nan(12)").map(|(_, r)| r), Some("(12)"));
    assert_eq!(scan_lf("64 K").map(|(_, r)| r), Some(" K"));
}

#[test]
fn strtol_and_strtoul_read_as_glibc() {
    for &(text, value, used) in STRTOL {
        assert_eq!(strtol(text, 0), (value, used), "{text:?}");
    }
    for &(text, value, used) in STRTOUL {
        assert_eq!(strtoul(text, 0), (value, used), "{text:?}");
    }
    assert_eq!(strtoul("ffffffffffffffffffff", 16).0, u64::MAX);
    assert_eq!(strtoul("0x1f", 16), (31, 4));
    assert_eq!(c_int(4294967297), 1);
    assert_eq!(c_int(i64::MAX), -1);
}

#[test]
fn size_t_casts_as_gcc_on_x86_64() {
    for &(text, value) in CAST {
        assert_eq!(size_t_of(atof(text)), value, "{text:?}");
    }
}

#[test]
fn percent_g_prints_as_glibc() {
    // printf("%g") of each, from the same C program.
    let cases = [
        (1e19, "1e+19"),
        (10.0, "10"),
        (9e307, "9e+307"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (999999.5, "1e+06"),
        (123456.0, "123456"),
        (1.5, "1.5"),
        (f64::INFINITY, "inf"),
        (f64::NAN, "nan"),
    ];
    for (v, want) in cases {
        assert_eq!(format_g(v), want, "{v}");
    }
}

//! nccl-tests' NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK (src/common.cu, run): every process
//! gets a color from its rank, and the processes of one color form their own communicator,
//! all groups running the same test at once.

/// How a process's rank becomes its color.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitOp {
    And,
    Or,
    Mod,
    Div,
}

/// A split rule as read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub op: SplitOp,
    pub value: u64,
    /// The variable and its text, for messages and the record.
    pub source: String,
}

impl Split {
    /// The color of process `proc` (its rank among the job's processes).
    pub fn color(&self, proc: usize) -> usize {
        let (p, v) = (proc as u64, self.value);
        (match self.op {
            SplitOp::And => p & v,
            SplitOp::Or => p | v,
            SplitOp::Mod => p % v.max(1),
            SplitOp::Div => p / v.max(1),
        }) as usize
    }
}

/// C's `strtoul(text, &end, base)` over what it can read: the value and whether any digit was.
fn strtoul(text: &str, base: u32) -> (u64, bool) {
    let t = text.trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    let (radix, digits) = match base {
        0 if t.len() > 1 && (t.starts_with("0x") || t.starts_with("0X")) => (16, &t[2..]),
        0 if t.starts_with('0') => (8, t),
        0 => (10, t),
        16 => (
            16,
            t.strip_prefix("0x").or(t.strip_prefix("0X")).unwrap_or(t),
        ),
        b => (b, t),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let value = u64::from_str_radix(&digits[..end], radix).unwrap_or(0);
    (value, end > 0)
}

/// nccl-tests' `parseInt`: leading space, `0b` binary, else `strtoul(s, &p, 0)`.
fn parse_int(text: &str) -> Option<u64> {
    let t = text.trim_start();
    let (value, read) = match t.get(..2) {
        Some(p) if p.eq_ignore_ascii_case("0b") => strtoul(&t[2..], 2),
        _ => strtoul(t, 0),
    };
    read.then_some(value)
}

/// The rule `NCCL_TESTS_SPLIT_MASK` (hex, as `strtoul(v, NULL, 16)`) or else `NCCL_TESTS_SPLIT`
/// (`AND`/`&`, `OR`/`|`, `MOD`/`%`, `DIV`/`/`, any case, then a number) states; `None` when
/// neither is set. nccl-tests leaves every process in group 0 for text it cannot read and
/// divides by zero for `MOD 0`/`DIV 0`: both are refused here, with the accepted forms.
pub fn from_env(mask: Option<&str>, split: Option<&str>) -> Result<Option<Split>, String> {
    if let Some(m) = mask {
        let (value, _) = strtoul(m, 16);
        return Ok(Some(Split {
            op: SplitOp::And,
            value,
            source: format!("NCCL_TESTS_SPLIT_MASK={m}"),
        }));
    }
    let Some(text) = split else {
        return Ok(None);
    };
    let bad = |why: &str| {
        format!(
            "NCCL_TESTS_SPLIT={text:?}: {why}; nccl-tests takes AND, OR, MOD or DIV (or &, |, %, /) and a number (decimal, 0x hex or 0b binary), e.g. \"MOD 8\" or \"&0x7\""
        )
    };
    let ops = [
        ("AND", SplitOp::And),
        ("&", SplitOp::And),
        ("OR", SplitOp::Or),
        ("|", SplitOp::Or),
        ("MOD", SplitOp::Mod),
        ("%", SplitOp::Mod),
        ("DIV", SplitOp::Div),
        ("/", SplitOp::Div),
    ];
    let (op, rest) = ops
        .iter()
        .find_map(|(name, op)| {
            let head = text.get(..name.len())?;
            head.eq_ignore_ascii_case(name)
                .then(|| (*op, &text[name.len()..]))
        })
        .ok_or_else(|| bad("no operation"))?;
    let value = parse_int(rest).ok_or_else(|| bad("no number after the operation"))?;
    if value == 0 && matches!(op, SplitOp::Mod | SplitOp::Div) {
        return Err(bad("a division by zero"));
    }
    Ok(Some(Split {
        op,
        value,
        source: format!("NCCL_TESTS_SPLIT={text}"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colors_follow_nccl_tests_readme_examples() {
        let rule = |s: &str| from_env(None, Some(s)).unwrap().unwrap();
        // "AND 0x7" or "MOD 8": 8 groups of one GPU per node on 8-GPU nodes.
        for r in [rule("AND 0x7"), rule("MOD 8"), rule("and7"), rule("%8")] {
            let colors: Vec<usize> = (0..16).map(|p| r.color(p)).collect();
            assert_eq!(colors[..9], [0, 1, 2, 3, 4, 5, 6, 7, 0]);
        }
        // "OR 0x7" or "DIV 8": one group per node.
        assert_eq!(rule("OR 0x7").color(9), 15);
        assert_eq!(rule("DIV 8").color(9), 1);
        assert_eq!(rule("/ 0b1000").color(17), 2);
        assert_eq!(
            rule("| 010").color(1),
            9,
            "a leading 0 is octal, as strtoul's base 0"
        );
        // The mask is hex without a prefix.
        let mask = from_env(Some("7"), Some("DIV 2")).unwrap().unwrap();
        assert_eq!((mask.color(13), mask.op), (5, SplitOp::And));
        assert_eq!(from_env(Some("0x10"), None).unwrap().unwrap().value, 16);
    }

    #[test]
    fn what_nccl_tests_would_misread_is_refused_with_the_forms() {
        assert_eq!(from_env(None, None), Ok(None));
        for bad in ["XOR 3", "MOD", "DIV 0", "% 0", "AND x"] {
            let e = from_env(None, Some(bad)).unwrap_err();
            assert!(e.contains("AND, OR, MOD or DIV"), "{bad}: {e}");
        }
    }
}

//! nccl-tests' NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK (src/common.cu:1496-1528, run): every
//! process gets a color from its rank, and the processes of one color form their own
//! communicator, all groups running the same test at once. Read as that code reads them:
//! text it cannot read leaves every process in group 0, and numbers are C's `strtoul` stored
//! in an `int` (`MOD-1` and `MOD99999999999999999999` are `% -1`).

use crate::units::cnum;

/// How a process's rank becomes its color.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitOp {
    And,
    Or,
    Mod,
    Div,
}

/// What the variables say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// NCCL_TESTS_SPLIT_MASK: `proc & strtoul(v, NULL, 16)` (common.cu:1497-1498).
    Mask(u64),
    /// NCCL_TESTS_SPLIT: an operation and its `int` operand (common.cu:1500-1524).
    Op(SplitOp, i32),
    /// NCCL_TESTS_SPLIT with no operation nccl-tests knows, or no number after it: color 0.
    Nothing,
}

/// A split rule as read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub rule: Rule,
    /// The variable and its text, for messages and the record.
    pub source: String,
}

impl Split {
    /// The color of process `proc` (its rank among the job's processes), in C's `int`
    /// arithmetic. What nccl-tests cannot survive is refused in words: `% 0` and `/ 0` (a
    /// SIGFPE there), and a negative color, which MPI_Comm_split rejects.
    pub fn color(&self, proc: usize) -> Result<usize, String> {
        let p = proc as i64;
        let color = match self.rule {
            Rule::Nothing => 0,
            Rule::Mask(m) => cnum::c_int((proc as u64 & m) as i64),
            Rule::Op(op, v) => {
                let v = i64::from(v);
                if v == 0 && matches!(op, SplitOp::Mod | SplitOp::Div) {
                    return Err(format!(
                        "{}: a division by zero (nccl-tests dies of SIGFPE here); give a number after the operation, e.g. \"MOD 8\"",
                        self.source
                    ));
                }
                cnum::c_int(match op {
                    SplitOp::And => p & v,
                    SplitOp::Or => p | v,
                    // C's % and / truncate toward zero, as Rust's do.
                    SplitOp::Mod => p % v,
                    SplitOp::Div => p / v,
                })
            }
        };
        usize::try_from(color).map_err(|_| {
            format!(
                "{}: process {proc} gets the color {color}, and MPI_Comm_split takes no negative color",
                self.source
            )
        })
    }
}

/// nccl-tests' `parseInt` (common.cu:1459-1476): leading space, `0b` binary, else
/// `strtoul(s, &p, 0)`, stored in an `int`; `None` when nothing is read.
fn parse_int(text: &str) -> Option<i32> {
    let t = text.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    if t.is_empty() {
        return None;
    }
    let binary = t.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("0b"));
    let (value, used) = match binary {
        // `p` is compared with `s`, not `s + 2`: "0b" alone reads as 0.
        true => (cnum::strtoul(&t[2..], 2).0, 1),
        false => cnum::strtoul(t, 0),
    };
    (used > 0).then_some(value as i32)
}

/// The rule `NCCL_TESTS_SPLIT_MASK` or else `NCCL_TESTS_SPLIT` states; `None` when neither
/// is set.
pub fn from_env(mask: Option<&str>, split: Option<&str>) -> Option<Split> {
    if let Some(m) = mask {
        return Some(Split {
            rule: Rule::Mask(cnum::strtoul(m, 16).0),
            source: format!("NCCL_TESTS_SPLIT_MASK={m}"),
        });
    }
    let text = split?;
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
    let rule = ops
        .iter()
        .find_map(|(name, op)| {
            let head = text.get(..name.len())?;
            head.eq_ignore_ascii_case(name)
                .then(|| parse_int(&text[name.len()..]).map(|v| Rule::Op(*op, v)))
                .flatten()
        })
        .unwrap_or(Rule::Nothing);
    Some(Split {
        rule,
        source: format!("NCCL_TESTS_SPLIT={text}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn colors(mask: Option<&str>, split: &str, procs: usize) -> Vec<Result<usize, String>> {
        let rule = from_env(mask, Some(split)).unwrap();
        (0..procs).map(|p| rule.color(p)).collect()
    }

    fn ok(v: &[usize]) -> Vec<Result<usize, String>> {
        v.iter().map(|c| Ok(*c)).collect()
    }

    #[test]
    fn colors_follow_nccl_tests_readme_examples() {
        // "AND 0x7" or "MOD 8": 8 groups of one GPU per node on 8-GPU nodes.
        for s in ["AND 0x7", "MOD 8", "and7", "%8"] {
            assert_eq!(colors(None, s, 9), ok(&[0, 1, 2, 3, 4, 5, 6, 7, 0]), "{s}");
        }
        // "OR 0x7" or "DIV 8": one group per node.
        assert_eq!(colors(None, "OR 0x7", 10)[9], Ok(15));
        assert_eq!(colors(None, "DIV 8", 10)[9], Ok(1));
        assert_eq!(colors(None, "/ 0b1000", 18)[17], Ok(2));
        // A leading 0 is octal, as strtoul's base 0.
        assert_eq!(colors(None, "| 010", 2)[1], Ok(9));
        // The mask is hex, with or without 0x; the variable wins over NCCL_TESTS_SPLIT.
        assert_eq!(colors(Some("7"), "DIV 2", 14)[13], Ok(5));
        assert_eq!(colors(Some("0x10"), "", 17)[16], Ok(16));
    }

    // common.cu:1496-1524 read with glibc's strtoul: what they make of text they do not
    // expect (review cases nt_split_1, 2, 10, 12, 13, 14, 15, nt_splitmask_big).
    #[test]
    fn unreadable_text_is_group_0_and_overflow_is_minus_1() {
        for s in ["junk", "", "AND", "OR", "xor1", "AND x"] {
            assert_eq!(colors(None, s, 3), ok(&[0, 0, 0]), "{s:?}");
        }
        // (int)strtoul("-1") and (int)ULONG_MAX are -1; p % -1 is 0.
        for s in ["MOD-1", "MOD99999999999999999999"] {
            assert_eq!(colors(None, s, 3), ok(&[0, 0, 0]), "{s:?}");
        }
        // The mask's strtoul saturates at ULONG_MAX: every process its own color.
        assert_eq!(colors(Some("ffffffffffffffffffff"), "", 3), ok(&[0, 1, 2]));
        assert_eq!(colors(Some("zz"), "", 3), ok(&[0, 0, 0]));
    }

    #[test]
    fn what_nccl_tests_cannot_survive_is_refused_in_words() {
        for s in ["MOD0", "%0", "DIV0", "/0"] {
            let e = colors(None, s, 1).remove(0).unwrap_err();
            assert!(e.contains("division by zero"), "{s}: {e}");
        }
        let e = colors(None, "OR -2", 1).remove(0).unwrap_err();
        assert!(
            e.contains("gets the color -2") && e.contains("no negative color"),
            "{e}"
        );
    }
}

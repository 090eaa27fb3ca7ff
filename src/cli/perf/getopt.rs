//! glibc's `getopt_long` over nccl-tests 2.19.6's option table (src/common.cu:1167-1205), so
//! that a drop-in reads a command line as that binary does: options in any order, the last
//! one winning, `--name=value` and unambiguous abbreviations of long names, `-b8`, bundled
//! `-hb 8`, operands skipped (glibc permutes them to the end; nccl-tests never reads them),
//! `--` ending the options, and on an error the very line glibc writes to stderr.

/// nccl-tests' optstring (src/common.cu:1205): each letter, and whether it takes a value.
const OPTSTRING: &str = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:";

/// nccl-tests' `longopts` (src/common.cu:1167-1200), in its order: the order glibc lists an
/// ambiguous abbreviation's possibilities in. Every entry but `help` takes a value.
const LONGOPTS: [(&str, char); 32] = [
    ("nthreads", 't'),
    ("ngpus", 'g'),
    ("minbytes", 'b'),
    ("maxbytes", 'e'),
    ("stepbytes", 'i'),
    ("stepfactor", 'f'),
    ("iters", 'n'),
    ("agg_iters", 'm'),
    ("warmup_iters", 'w'),
    ("run_cycles", 'N'),
    ("parallel_init", 'p'),
    ("check", 'c'),
    ("op", 'o'),
    ("datatype", 'd'),
    ("root", 'r'),
    ("blocking", 'z'),
    ("stream_null", 'y'),
    ("timeout", 'T'),
    ("cudagraph", 'G'),
    ("report_cputime", 'C'),
    ("report_timestamps", 'S'),
    ("output_file", 'J'),
    ("average", 'a'),
    ("local_register", 'R'),
    ("cta_policy", 'x'),
    ("device_implementation", 'D'),
    ("device_cta_count", 'V'),
    ("memory", 'M'),
    ("unalign", 'u'),
    ("per_iter_timing", 'I'),
    ("per_iter_skip", 'K'),
    ("help", 'h'),
];

/// ncclprobe's own options beside nccl-tests' (`--json FILE`, `--backend NAME`): taken only by
/// their whole names, so that every abbreviation nccl-tests accepts (`--b` for `--blocking`)
/// still means what it means there.
pub const EXTRAS: [&str; 2] = ["json", "backend"];

/// One step of the option loop, as `getopt_long` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An nccl-tests option by its letter, with its value.
    Opt(char, Option<String>),
    /// One of [`EXTRAS`] with its value.
    Extra(&'static str, String),
    /// `'?'`: the line glibc printed to stderr (without its newline).
    Error(String),
}

/// The option loop's state: `optind` and where in a bundle of letters it is (`nextchar`).
pub struct Getopt<'a> {
    argv0: &'a str,
    args: &'a [String],
    optind: usize,
    /// Byte offset of the next letter in `args[optind]`, inside a bundle.
    nextchar: Option<usize>,
    /// POSIXLY_CORRECT: the first operand ends the options (glibc's REQUIRE_ORDER).
    posix: bool,
    done: bool,
}

impl<'a> Getopt<'a> {
    /// `argv0` as the process was called (glibc names it so in its messages); `args` after it.
    pub fn new(argv0: &'a str, args: &'a [String], posixly_correct: bool) -> Self {
        Getopt {
            argv0,
            args,
            optind: 0,
            nextchar: None,
            posix: posixly_correct,
            done: false,
        }
    }

    fn short(&mut self, at: usize) -> Step {
        let arg = &self.args[self.optind];
        let c = arg[at..].chars().next().unwrap_or('?');
        let after = at + c.len_utf8();
        let rest = &arg[after..];
        self.nextchar = Some(after);
        if rest.is_empty() {
            self.optind += 1;
            self.nextchar = None;
        }
        let spec = OPTSTRING
            .find(c)
            .filter(|_| c != ':')
            .map(|i| OPTSTRING[i + c.len_utf8()..].starts_with(':'));
        match spec {
            None => Step::Error(format!("{}: invalid option -- '{c}'", self.argv0)),
            Some(false) => Step::Opt(c, None),
            Some(true) if !rest.is_empty() => {
                self.optind += 1;
                self.nextchar = None;
                Step::Opt(c, Some(rest.to_string()))
            }
            Some(true) => match self.args.get(self.optind) {
                Some(value) => {
                    self.optind += 1;
                    Step::Opt(c, Some(value.clone()))
                }
                None => Step::Error(format!(
                    "{}: option requires an argument -- '{c}'",
                    self.argv0
                )),
            },
        }
    }

    /// glibc's `process_long_option` for `--` + `text`.
    fn long(&mut self, text: &str) -> Step {
        self.optind += 1;
        let (name, value) = match text.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        let exact = LONGOPTS.iter().find(|(n, _)| *n == name).copied();
        let extra = EXTRAS.iter().find(|n| **n == name).copied();
        if let (None, Some(extra)) = (exact, extra) {
            return match value.map(str::to_string).or_else(|| self.value()) {
                Some(v) => Step::Extra(extra, v),
                None => self.missing(extra),
            };
        }
        let found = match exact {
            Some(f) => f,
            None => {
                let matches: Vec<(&str, char)> = LONGOPTS
                    .iter()
                    .filter(|(n, _)| n.starts_with(name))
                    .copied()
                    .collect();
                match matches.as_slice() {
                    [] => {
                        return Step::Error(format!(
                            "{}: unrecognized option '--{text}'",
                            self.argv0
                        ))
                    }
                    [one] => *one,
                    many => {
                        let names: String = many.iter().map(|(n, _)| format!(" '--{n}'")).collect();
                        return Step::Error(format!(
                            "{}: option '--{text}' is ambiguous; possibilities:{names}",
                            self.argv0
                        ));
                    }
                }
            }
        };
        let (full, letter) = found;
        let takes_value = letter != 'h';
        match (value, takes_value) {
            (Some(_), false) => Step::Error(format!(
                "{}: option '--{full}' doesn't allow an argument",
                self.argv0
            )),
            (Some(v), true) => Step::Opt(letter, Some(v.to_string())),
            (None, false) => Step::Opt(letter, None),
            (None, true) => match self.value() {
                Some(v) => Step::Opt(letter, Some(v)),
                None => self.missing(full),
            },
        }
    }

    /// The next argument as an option's value, whatever it looks like.
    fn value(&mut self) -> Option<String> {
        let v = self.args.get(self.optind)?.clone();
        self.optind += 1;
        Some(v)
    }

    fn missing(&self, full: &str) -> Step {
        Step::Error(format!(
            "{}: option '--{full}' requires an argument",
            self.argv0
        ))
    }
}

impl Iterator for Getopt<'_> {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        if self.done {
            return None;
        }
        if let Some(at) = self.nextchar {
            return Some(self.short(at));
        }
        loop {
            let arg = self.args.get(self.optind)?;
            if arg == "--" {
                self.done = true;
                return None;
            }
            if arg.len() > 1 && arg.starts_with('-') {
                break;
            }
            if self.posix {
                self.done = true;
                return None;
            }
            // An operand: glibc moves it behind the options, and nccl-tests never reads it.
            self.optind += 1;
        }
        let arg = self.args[self.optind].clone();
        Some(match arg.strip_prefix("--") {
            Some(long) => self.long(long),
            None => self.short(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(line: &str) -> Vec<Step> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        Getopt::new("./all_reduce_perf", &args, false).collect()
    }

    fn opt(c: char, v: &str) -> Step {
        Step::Opt(c, Some(v.to_string()))
    }

    // Each expectation is what glibc 2.36's getopt_long returned (and printed) for the same
    // argv with nccl-tests' option table and optstring (src/common.cu:1167-1205).
    #[test]
    fn options_are_read_as_glibc_reads_them() {
        assert_eq!(
            steps("-b 8 -e 64 -f 2 -b 16"),
            [opt('b', "8"), opt('e', "64"), opt('f', "2"), opt('b', "16")]
        );
        assert_eq!(
            steps("--minb 8 --maxb 64 --stepf 2"),
            [opt('b', "8"), opt('e', "64"), opt('f', "2")]
        );
        assert_eq!(
            steps("-b 8 extra -e 64 args"),
            [opt('b', "8"), opt('e', "64")]
        );
        assert_eq!(steps("-b 8 -- -n 5"), [opt('b', "8")]);
        assert_eq!(steps("-b8 -e64"), [opt('b', "8"), opt('e', "64")]);
        assert_eq!(steps("-hb 8"), [Step::Opt('h', None), opt('b', "8")]);
        assert_eq!(steps("-xq"), [opt('x', "q")]);
        assert_eq!(steps("--minbytes=8=9"), [opt('b', "8=9")]);
        assert_eq!(steps("--minbytes -5"), [opt('b', "-5")]);
        assert_eq!(steps("--he"), [Step::Opt('h', None)]);
        assert_eq!(steps("- -e 16"), [opt('e', "16")]);
        assert_eq!(
            steps("--json r.json --backend=host"),
            [
                Step::Extra("json", "r.json".into()),
                Step::Extra("backend", "host".into())
            ]
        );
    }

    #[test]
    fn errors_are_glibcs_own_lines() {
        let err = |line: &str| match steps(line).pop() {
            Some(Step::Error(e)) => e,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(err("-q"), "./all_reduce_perf: invalid option -- 'q'");
        assert_eq!(
            err("-n"),
            "./all_reduce_perf: option requires an argument -- 'n'"
        );
        assert_eq!(
            err("--nosuch=3"),
            "./all_reduce_perf: unrecognized option '--nosuch=3'"
        );
        assert_eq!(err("---x"), "./all_reduce_perf: unrecognized option '---x'");
        assert_eq!(
            err("--minb"),
            "./all_reduce_perf: option '--minbytes' requires an argument"
        );
        assert_eq!(
            err("--hel=1"),
            "./all_reduce_perf: option '--help' doesn't allow an argument"
        );
        assert_eq!(
            err("--p=3"),
            "./all_reduce_perf: option '--p=3' is ambiguous; possibilities: '--parallel_init' '--per_iter_timing' '--per_iter_skip'"
        );
        assert_eq!(
            err("--r 1"),
            "./all_reduce_perf: option '--r' is ambiguous; possibilities: '--run_cycles' '--root' '--report_cputime' '--report_timestamps'"
        );
        // ncclprobe's own names are whole words only.
        assert_eq!(
            err("--back host"),
            "./all_reduce_perf: unrecognized option '--back'"
        );
        assert_eq!(
            err("--json"),
            "./all_reduce_perf: option '--json' requires an argument"
        );
    }

    #[test]
    fn posixly_correct_stops_at_the_first_operand() {
        let args: Vec<String> = ["extra", "-n", "5"].map(String::from).to_vec();
        assert_eq!(Getopt::new("p", &args, true).count(), 0);
        assert_eq!(Getopt::new("p", &args, false).count(), 1);
    }
}

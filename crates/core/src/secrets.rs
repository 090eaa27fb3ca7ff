//! What is never written: credentials on a command line or in the environment a record, a
//! stored document or a bundle keeps. One filter for all of them, so a record, the fleet store
//! and an issue bundle redact the same way: URL passwords (`scheme://user:pw@`, any scheme, any
//! case), `password=` in a query string or a libpq `key=value` string, and every variable whose
//! name says it holds a secret.

use std::collections::BTreeMap;

/// What a secret is replaced by.
pub const REDACTED: &str = "<redacted>";

/// Open MPI and UCX settings that choose the transport under an MPI run (a run restricted to
/// TCP is a slower path the report must be able to name).
pub const MPI_TRANSPORT_ENV: [&str; 4] =
    ["OMPI_MCA_btl", "OMPI_MCA_pml", "OMPI_MCA_mtl", "UCX_TLS"];

/// Whether a variable's name says it holds a credential: `*TOKEN*`, `*KEY*`, `*SECRET*`,
/// `*PASSW*`, `*CREDENTIAL*`, `*COOKIE*`, `*_PW`, `*_PWD` (any case; `PWD`, the working
/// directory, is not one).
pub fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "COOKIE"]
        .iter()
        .any(|w| n.contains(w))
        || n.ends_with("_PW")
        || n.ends_with("_PWD")
        || n == "PW"
}

/// `text` with its credentials replaced by [`REDACTED`]: the password of every URL's userinfo
/// (`postgres://fleet:pw@db` → `postgres://fleet:<redacted>@db`, `POSTGRESQL://`, `https://`
/// alike) and the value of every `password=` (a query string's `?password=pw&…`, libpq's
/// `host=db password=pw`, quoted or not).
pub fn redact(text: &str) -> String {
    redact_passwords(&redact_userinfo(text))
}

fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rsplit_once('@') {
            Some((userinfo, host)) => match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(REDACTED);
                    out.push('@');
                    out.push_str(host);
                }
                None => out.push_str(authority),
            },
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn redact_passwords(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    while let Some(i) = lower[from..].find("password=") {
        let start = from + i + "password=".len();
        out.push_str(&text[from..start]);
        let value = &text[start..];
        let len = if let Some(quoted) = value.strip_prefix('\'') {
            // libpq's quoting: 'a value', a quote inside escaped as \'.
            let mut n = 1;
            let mut escaped = false;
            for c in quoted.chars() {
                n += c.len_utf8();
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => break,
                    _ => escaped = false,
                }
            }
            n
        } else {
            value
                .find(|c: char| c == '&' || c == ';' || c.is_whitespace())
                .unwrap_or(value.len())
        };
        out.push_str(REDACTED);
        from = start + len.min(value.len());
    }
    out.push_str(&text[from..]);
    out
}

/// This process's command line as a record keeps it: every argument through [`redact`].
pub fn command_line() -> Vec<String> {
    std::env::args().map(|a| redact(&a)).collect()
}

/// One variable as a record or a bundle keeps it: its value, credentials redacted, or
/// [`REDACTED`] whole when its name says it is a secret.
pub fn kept_value(name: &str, value: &str) -> String {
    if secret_name(name) {
        REDACTED.to_string()
    } else {
        redact(value)
    }
}

/// The environment variables a record may hold: `NCCL_*`, `CUDA_*` and the MPI transport
/// selection, nothing else; their values through [`kept_value`].
pub fn relevant_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("NCCL_")
                || k.starts_with("CUDA_")
                || MPI_TRANSPORT_ENV.contains(&k.as_str())
        })
        .map(|(k, v)| {
            let v = kept_value(&k, &v);
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_go_whatever_the_scheme_or_case() {
        for (given, want) in [
            (
                "--history=postgres://fleet:PW@127.0.0.1:5432/ncclprobe",
                "--history=postgres://fleet:<redacted>@127.0.0.1:5432/ncclprobe",
            ),
            (
                "POSTGRESQL://fleet:PW@db/x",
                "POSTGRESQL://fleet:<redacted>@db/x",
            ),
            (
                "https://u:p@host/a b://c:d@e",
                "https://u:<redacted>@host/a b://c:<redacted>@e",
            ),
            ("postgres://fleet@db/x", "postgres://fleet@db/x"),
            ("no url here", "no url here"),
        ] {
            assert_eq!(redact(given), want);
        }
    }

    #[test]
    fn password_values_go_in_query_strings_and_libpq_strings() {
        assert_eq!(
            redact("postgresql://127.0.0.1:57431/x?user=fleet&password=PW&sslmode=require"),
            "postgresql://127.0.0.1:57431/x?user=fleet&password=<redacted>&sslmode=require"
        );
        assert_eq!(
            redact("host=127.0.0.1 port=57431 user=fleet PASSWORD=PW dbname=ncclprobe"),
            "host=127.0.0.1 port=57431 user=fleet PASSWORD=<redacted> dbname=ncclprobe"
        );
        assert_eq!(
            redact("host=db password='a \\' b' dbname=x"),
            "host=db password=<redacted> dbname=x"
        );
        assert_eq!(redact("sslpassword=k"), "sslpassword=<redacted>");
    }

    #[test]
    fn names_that_hold_secrets_are_told() {
        for n in [
            "NVIDIA_API_KEY",
            "TORCH_HUB_TOKEN",
            "UCX_PASSWORD",
            "FI_TOKEN",
            "OMPI_MCA_pw",
            "CUDA_PW",
            "NCCL_SECRET",
            "db_password",
        ] {
            assert!(secret_name(n), "{n}");
            assert_eq!(kept_value(n, "abc"), REDACTED);
        }
        for n in [
            "NCCL_IB_HCA",
            "CUDA_VISIBLE_DEVICES",
            "SLURM_JOB_ACCOUNT",
            "NCCL_DEBUG",
        ] {
            assert!(!secret_name(n), "{n}");
        }
        assert_eq!(
            kept_value("NCCL_DB_URL", "postgres://u:pw@h/db"),
            "postgres://u:<redacted>@h/db"
        );
    }
}

//! The bundle's summary in the fields of NCCL's issue template, and `--redact` over its files.

use super::collect::Bundle;
use super::redact;
use crate::cli::BundleArgs;
use std::fmt::Write as _;

/// `--redact` over every file the bundle listed: the names to replace gathered first (this
/// host, the user, the hosts the launcher's variables and the NCCL logs name), then each file
/// rewritten in place through its own handle, never through a link, and renamed when its
/// name holds a host. A file too large to read back whole is taken out rather than kept
/// unredacted.
pub fn redact_all(b: &mut Bundle, r: &mut redact::Redactor) {
    if let Ok(h) = hostname::get() {
        let h = h.to_string_lossy().into_owned();
        r.host(&h);
        if let Some(short) = h.split('.').next() {
            r.host(short);
        }
    }
    if let Some(u) = std::env::var_os("USER").or_else(|| std::env::var_os("LOGNAME")) {
        r.user(&u.to_string_lossy());
    }
    // A home directory is named after its user, wherever it is (`/data/users/alice`).
    if let Some(name) = std::env::var_os("HOME")
        .as_deref()
        .and_then(|h| std::path::Path::new(h).file_name())
    {
        r.user(&name.to_string_lossy());
    }
    let vars: Vec<(String, String)> = std::env::vars().collect();
    for h in super::environment::hosts(
        vars.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        super::environment::kept_variable,
    ) {
        r.host(&h);
    }
    // Host names the NCCL logs print (`host:pid:tid`).
    let files = b.files().to_vec();
    for f in &files {
        if let Some(text) = b.read(f) {
            for c in nccl_prefix().captures_iter(&text) {
                r.host(&c[1]);
            }
        }
    }
    for f in files {
        if rewrite(b, &f, r).is_err() {
            b.remove(&f);
            b.missing(
                &f,
                "a file of the bundle",
                "could not be redacted, left out",
            );
            continue;
        }
        // File names carry host names too (ncclDebug.%h.%p).
        let name = f.rsplit('/').next().unwrap_or(&f).to_string();
        let renamed = r.redact_file_name(&name);
        if renamed != name && b.rename(&f, &renamed).is_err() {
            b.remove(&f);
        }
    }
}

/// One file redacted in place, through the handle opened on it without following a link.
fn rewrite(b: &Bundle, file: &str, r: &mut redact::Redactor) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = b.open(file, true)?;
    let mut bytes = Vec::new();
    if !crate::bounded::read_to_cap(&f, crate::bounded::MAX_DOCUMENT_BYTES, &mut bytes)? {
        return Err(std::io::Error::other("too large to redact"));
    }
    let redacted = r.redact(&String::from_utf8_lossy(&bytes));
    f.set_len(0)?;
    f.write_all_at(redacted.as_bytes(), 0)
}

/// NCCL's line prefix, `host:pid:tid [dev] NCCL INFO`: its host.
fn nccl_prefix() -> &'static regex::Regex {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(
        &R,
        r"(?m)(?:^|\s)([A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)",
    )
}

/// The first `NCCL WARN` line of the short run's logs.
fn first_warn(b: &Bundle) -> Option<String> {
    b.files()
        .iter()
        .filter(|f| f.starts_with("nccl/") || f.as_str() == "run.txt")
        .filter_map(|f| b.read(f))
        .find_map(|t| {
            t.lines()
                .find(|l| l.contains("NCCL WARN"))
                .map(str::to_string)
        })
}

/// `summary.md`: the issue template's fields, filled from the bundle.
pub fn summary(b: &Bundle, args: &BundleArgs, r: &redact::Redactor) -> String {
    let mut m = String::new();
    let read = |f: &str| b.read(f);
    let _ = writeln!(m, "# NCCL issue bundle\n");
    let _ = writeln!(
        m,
        "Collected by `ncclprobe bundle` ({}).",
        crate::buildinfo::tool_info().version
    );
    if args.redact {
        let c = r.counts();
        let _ = writeln!(m, "Redacted: {} host names, {} IP and MAC addresses, {} mail addresses and {} user names replaced consistently (host-N, 192.0.2.N, 2001:db8::N, 00:00:5e:00:53:NN, mail-N@example.com, user-N).", c.hosts, c.addresses, c.mails, c.users);
    }
    let _ = writeln!(m, "\n## How is this issue impacting you?\n\n(Lower performance than expected / Application crash / Data corruption / Application hang: say which.)\n");
    let _ = writeln!(m, "## Share Your Debug Logs\n");
    for i in &b.items {
        match &i.missing {
            None => {
                let _ = writeln!(m, "- `{}`: {}", i.file, i.what);
            }
            Some(why) => {
                let _ = writeln!(m, "- `{}`: {} — missing: {why}", i.file, i.what);
            }
        }
    }
    for f in b.files().iter().filter(|f| f.starts_with("nccl/")) {
        let _ = writeln!(m, "- `{f}`");
    }
    let _ = writeln!(m, "\n## Steps to Reproduce the Issue\n\n`ncclprobe sweep --backend nccl -b 8 -e 64M -f 8 --show-algo` with NCCL_DEBUG=INFO (see `run.txt`); add your own steps.\n");
    let nccl = read("versions.txt")
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("NCCL:"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "NCCL: (not found)".into());
    let _ = writeln!(
        m,
        "## NCCL Version\n\n{}\n",
        nccl.trim_start_matches("NCCL: ")
    );
    let _ = writeln!(m, "## Your platform details\n");
    if let Some(t) = read("nvidia-smi-topo-m.txt") {
        let _ = writeln!(m, "`nvidia-smi topo -m`:\n\n```\n{}\n```\n", t.trim_end());
    }
    if let Some(t) = read("platform.txt") {
        let _ = writeln!(m, "```\n{}\n```\n", t.trim_end());
    }
    let _ = writeln!(m, "## Error Message & Behavior\n");
    match first_warn(b) {
        Some(w) => {
            let _ = writeln!(m, "First NCCL WARN:\n\n```\n{w}\n```\n");
        }
        None => {
            let _ = writeln!(m, "No `NCCL WARN` line in the logs.\n");
        }
    }
    if let Some(t) = read("diagnosis.txt") {
        let _ = writeln!(m, "ncclprobe's diagnosis:\n\n```\n{}\n```", t.trim_end());
    }
    m
}

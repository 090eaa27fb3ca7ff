//! The bundle's summary in the fields of NCCL's issue template, and `--redact` over its files.

use super::collect::Bundle;
use super::redact;
use crate::cli::BundleArgs;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub fn redact_all(b: &Bundle, r: &mut redact::Redactor) {
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
    // Host names the NCCL logs print (`host:pid:tid`).
    let files = every_file(&b.dir);
    for f in &files {
        if let Ok(text) = std::fs::read_to_string(f) {
            for c in nccl_prefix().captures_iter(&text) {
                r.host(&c[1]);
            }
        }
    }
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            let _ = std::fs::write(&f, r.redact(&text));
        }
        // File names carry host names too (ncclDebug.%h.%p).
        if let Some(name) = f.file_name().map(|n| n.to_string_lossy().into_owned()) {
            let renamed = r.redact(&name);
            if renamed != name {
                let _ = std::fs::rename(&f, f.with_file_name(renamed));
            }
        }
    }
}

/// NCCL's line prefix, `host:pid:tid [dev] NCCL INFO`: its host.
fn nccl_prefix() -> &'static regex::Regex {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(
        &R,
        r"(?m)(?:^|\s)([A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)",
    )
}

pub fn every_file(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn first_warn(dir: &Path) -> Option<String> {
    every_file(&dir.join("nccl"))
        .into_iter()
        .chain([dir.join("run.txt")])
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|t| {
            t.lines()
                .find(|l| l.contains("NCCL WARN"))
                .map(str::to_string)
        })
}

/// `summary.md`: the issue template's fields, filled from the bundle.
pub fn summary(b: &Bundle, args: &BundleArgs, r: &redact::Redactor) -> String {
    let mut m = String::new();
    let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).ok();
    let _ = writeln!(m, "# NCCL issue bundle\n");
    let _ = writeln!(
        m,
        "Collected by `ncclprobe bundle` ({}).",
        crate::buildinfo::tool_info().version
    );
    if args.redact {
        let (h, a, u) = r.counts();
        let _ = writeln!(m, "Redacted: {h} host names, {a} IP addresses and {u} user names replaced consistently (host-N, 192.0.2.N, user-N).");
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
    for f in every_file(&b.dir.join("nccl")) {
        if let Ok(rel) = f.strip_prefix(&b.dir) {
            let _ = writeln!(m, "- `{}`", rel.display());
        }
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
    match first_warn(&b.dir) {
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

//! Keeping a finished document in the store (`--history`): after the run's own files are
//! written, so a store that is locked, unreachable or on a full disk loses nothing of the run.

use super::entry::{self, Stated};
use super::write::Added;
use super::{HistoryError, Location, Store};
use crate::exit::{ExitCode, Failure};
use crate::model::RunRecord;

/// Where `--history` keeps runs, and who they are from.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub location: Location,
    pub stated: Stated,
}

/// A history failure as the exit table has it: a newer store or a bad document is bad input
/// (2); a store that cannot be written is an I/O failure writing results (1).
pub fn failure(e: HistoryError) -> Failure {
    let code = match e {
        HistoryError::Newer(_)
        | HistoryError::Document(_)
        | HistoryError::Refused(_)
        | HistoryError::Empty(_) => ExitCode::Usage,
        _ => ExitCode::Internal,
    };
    Failure::new(code, format!("history: {e}"))
}

fn said(target: &Target, added: &Added, node: &str, sku: &str) {
    match added {
        Added::Stored { id } => crate::term::note(&format!(
            "kept in {} as run {id} (node {node}, {sku})",
            target.location.display()
        )),
        Added::Rejudged { id } => crate::term::note(&format!(
            "already in {} as run {id}; the verdict kept with it is now this one",
            target.location.display()
        )),
        Added::AlreadyStored { id } => crate::term::note(&format!(
            "already in {} as run {id}",
            target.location.display()
        )),
    }
}

/// Keeps a run record (a sweep's, with its gate verdict when it has one).
pub fn keep_run(target: Option<&Target>, record: &RunRecord, origin: &str) -> Result<(), Failure> {
    let Some(target) = target else { return Ok(()) };
    let e = entry::from_run(record, origin, None, &target.stated)
        .map_err(|m| failure(HistoryError::Document(m)))?;
    let mut store = Store::open(&target.location).map_err(failure)?;
    let added = store.add(&e).map_err(failure)?;
    said(target, &added, &e.identity.node, &e.identity.sku);
    Ok(())
}

/// Keeps a pair matrix.
pub fn keep_matrix(
    target: Option<&Target>,
    doc: &crate::documents::matrix::MatrixDocument,
) -> Result<(), Failure> {
    let Some(target) = target else { return Ok(()) };
    let e = entry::from_matrix(doc, "matrix", None, &target.stated)
        .map_err(|m| failure(HistoryError::Document(m)))?;
    let mut store = Store::open(&target.location).map_err(failure)?;
    let added = store.add(&e).map_err(failure)?;
    said(target, &added, &e.identity.node, &e.identity.sku);
    Ok(())
}

/// `--since`: an RFC 3339 time, or an age before `now` (`30d`, `12h`, `90m`, `3600s`), as unix
/// seconds.
pub fn since(text: &str, now: f64) -> Result<f64, String> {
    let t = text.trim();
    if let Some(u) = entry::unix_time(t) {
        return Ok(u);
    }
    // A plain date is its midnight, UTC.
    let b = t.as_bytes();
    let date_like =
        b.len() >= 10 && b[4] == b'-' && b[7] == b'-' && b[..4].iter().all(u8::is_ascii_digit);
    if b.len() == 10 && date_like {
        if let Some(u) = entry::unix_time(&format!("{t}T00:00:00Z")) {
            return Ok(u);
        }
    }
    if date_like {
        return Err(format!(
            "--since {t:?}: not a valid date or RFC 3339 time (2026-11-01, 2026-11-01T06:00:00Z)"
        ));
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("--since {t:?}: an RFC 3339 time (2026-11-01T00:00:00Z) or an age (30d, 12h, 90m)")
    })?;
    let scale = match unit {
        "d" => 86_400.0,
        "h" => 3_600.0,
        "m" => 60.0,
        "s" | "" => 1.0,
        "w" => 7.0 * 86_400.0,
        _ => return Err(format!("--since {t:?}: the unit is d, h, m, s or w")),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(format!("--since {t:?}: an age is zero or more"));
    }
    Ok(now - n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_times_and_ages() {
        assert_eq!(since("1970-01-02T00:00:00Z", 0.0).unwrap(), 86_400.0);
        assert_eq!(since("2d", 200_000.0).unwrap(), 200_000.0 - 172_800.0);
        assert_eq!(since("90m", 6000.0).unwrap(), 600.0);
        assert!(since("soon", 0.0).is_err());
        assert!(since("3y", 0.0).is_err());
        // Review D32: a plain date is its midnight; an impossible one is said as such.
        assert_eq!(since("1970-01-03", 0.0).unwrap(), 172_800.0);
        let e = since("2026-13-45T00:00:00Z", 0.0).unwrap_err();
        assert!(e.contains("not a valid date"), "{e}");
    }
}

//! What a run record must say to be read at all: ranks that exist, times that passed, sizes
//! that hold their elements. Every reader applies it (`documents::read`), and every record the
//! sweep or the importer writes satisfies it.

use super::{Point, RunRecord};

/// A number a document states must be finite and above zero.
pub fn positive(what: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("{what} is {v}; it must be finite and above zero"))
    }
}

/// A number a document states must be finite and not negative.
pub fn non_negative(what: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("{what} is {v}; it must be finite and not negative"))
    }
}

fn point(at: &str, p: &Point) -> Result<(), String> {
    let at = |field: &str| {
        format!(
            "{at} ({} {} {}).{field}",
            p.collective,
            crate::units::format_size(p.size_bytes),
            p.placement.name()
        )
    };
    if p.nranks == 0 {
        return Err(format!("{} is 0", at("nranks")));
    }
    positive(&at("time_s"), p.time_s)?;
    for (i, s) in p.samples_s.iter().enumerate() {
        positive(&at(&format!("samples_s[{i}]")), *s)?;
    }
    for (i, s) in p.per_rank_time_s.iter().enumerate() {
        non_negative(&at(&format!("per_rank_time_s[{i}]")), *s)?;
    }
    non_negative(&at("algbw_bytes_per_s"), p.algbw_bytes_per_s)?;
    non_negative(&at("busbw_bytes_per_s"), p.busbw_bytes_per_s)?;
    // `count` elements of the type are the whole message or one rank's share of it: never
    // more bytes than the size.
    let held = p.count.saturating_mul(p.dtype.size_bytes() as u64);
    if held > p.size_bytes {
        return Err(format!(
            "{} is {} {} elements ({held} bytes), more than size_bytes {}",
            at("count"),
            p.count,
            p.dtype,
            p.size_bytes
        ));
    }
    Ok(())
}

/// The first thing a run record says that cannot be.
pub fn run(r: &RunRecord) -> Result<(), String> {
    if r.backend.nranks == 0 && !r.points.is_empty() {
        return Err("backend.nranks is 0 but the record has points".into());
    }
    for (i, p) in r.points.iter().enumerate() {
        point(&format!("points[{i}]"), p)?;
    }
    for (i, p) in r.retried_points.iter().enumerate() {
        point(&format!("retried_points[{i}]"), p)?;
    }
    Ok(())
}

/// What ties a document to the run it was made of: when the run started and where. Two
/// records of one run (a copy, another name) share it; two runs do not.
pub fn identity(r: &RunRecord) -> String {
    match r.backend.hosts.first() {
        Some(host) => format!("{} on {host}", r.started_at),
        None => r.started_at.clone(),
    }
}

impl super::RunRecord {
    /// When the run started, in words: its time for a measured run; for an imported log, that
    /// the log does not say (the record's `started_at` is when it was read in).
    pub fn started_words(&self) -> String {
        match self.source {
            super::Source::Measured => format!("started {}", self.started_at),
            super::Source::Imported => {
                format!("start not in the log; imported {}", self.started_at)
            }
        }
    }
}

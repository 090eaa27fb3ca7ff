//! Putting documents in: one transaction per document (its node, run, points, gates,
//! headlines and links, or nothing), retried while other writers hold the store.

use super::engine::{Conn, DbError, Value};
use super::entry::Entry;
use super::{retry, HistoryError, Store};
use std::time::Instant;

/// What adding one document did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Added {
    /// Stored as run `id`.
    Stored { id: i64 },
    /// The same measurement was stored before.
    AlreadyStored { id: i64 },
    /// The same measurement was stored before, and this document's gate verdict (a later
    /// `qualify` of it) replaced the one kept with it.
    Rejudged { id: i64 },
}

/// Points per INSERT statement (a run's points go in a few statements, not one each).
const POINTS_PER_STATEMENT: usize = 64;

impl Store {
    /// Adds one document; adding it again changes nothing.
    pub fn add(&mut self, entry: &Entry) -> Result<Added, HistoryError> {
        let mut added = self.add_many(std::slice::from_ref(entry))?;
        Ok(added.remove(0))
    }

    /// Adds documents in one transaction: all of them, or (on an error) none.
    pub fn add_many(&mut self, entries: &[Entry]) -> Result<Vec<Added>, HistoryError> {
        let name = self.location.display();
        let deadline = Instant::now() + self.patience;
        let conn = &mut self.conn;
        retry(&name, deadline, || {
            conn.begin()?;
            match entries
                .iter()
                .map(|e| insert(conn, e))
                .collect::<Result<Vec<Added>, DbError>>()
            {
                Ok(added) => {
                    crate::fault_injection::history_stall_before_commit();
                    conn.commit()?;
                    Ok(added)
                }
                Err(e) => {
                    conn.rollback();
                    Err(e)
                }
            }
        })
    }
}

fn insert(conn: &mut Conn, e: &Entry) -> Result<Added, DbError> {
    if let Some(id) = conn
        .scalar(
            "SELECT id FROM runs WHERE digest = ?",
            &[e.digest.clone().into()],
        )?
        .int()
    {
        if (e.gates.is_empty() && e.passed.is_none()) || same_verdict(conn, id, e)? {
            return Ok(Added::AlreadyStored { id });
        }
        // The verdict is kept with the run it judged: the latest one replaces what was kept.
        conn.exec("DELETE FROM gates WHERE run_id = ?", &[id.into()])?;
        insert_gates(conn, id, e)?;
        conn.exec(
            "UPDATE runs SET passed = ?, document = ? WHERE id = ?",
            &[
                e.passed.map(i64::from).into(),
                Value::Blob(e.document.clone()),
                id.into(),
            ],
        )?;
        return Ok(Added::Rejudged { id });
    }
    let now = crate::model::now_rfc3339();
    let gpus = serde_json::to_string(&e.identity.gpus).unwrap_or_else(|_| "[]".into());
    conn.exec(
        "INSERT INTO nodes (name, sku, gpus, first_seen, last_seen) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET sku = excluded.sku, gpus = excluded.gpus,
           last_seen = excluded.last_seen",
        &[
            e.identity.node.clone().into(),
            e.identity.sku.clone().into(),
            gpus.into(),
            e.started_at.clone().into(),
            e.started_at.clone().into(),
        ],
    )?;
    let node_id = conn
        .scalar(
            "SELECT id FROM nodes WHERE name = ?",
            &[e.identity.node.clone().into()],
        )?
        .int()
        .ok_or_else(|| DbError::Other(format!("node {} vanished", e.identity.node)))?;
    let run_id = conn
        .scalar(
            "INSERT INTO runs (digest, node_id, sku, kind, origin, source_file, started_at,
               started_unix, added_at, status, passed, tool_version, driver, cuda, nccl, backend,
               nranks, hosts, env, health, document)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            &[
                e.digest.clone().into(),
                node_id.into(),
                e.identity.sku.clone().into(),
                e.kind.into(),
                e.origin.clone().into(),
                e.source_file.clone().into(),
                e.started_at.clone().into(),
                e.started_unix.into(),
                now.into(),
                e.status.clone().into(),
                e.passed.map(i64::from).into(),
                e.tool_version.clone().into(),
                e.driver.clone().into(),
                e.cuda.clone().into(),
                e.nccl.clone().into(),
                e.backend.clone().into(),
                e.nranks.into(),
                serde_json::to_string(&e.hosts).unwrap_or_default().into(),
                serde_json::to_string(&e.env).unwrap_or_default().into(),
                health_text(&e.health).into(),
                Value::Blob(e.document.clone()),
            ],
        )?
        .int()
        .ok_or_else(|| DbError::Other("the new run has no id".into()))?;
    insert_points(conn, run_id, e)?;
    insert_gates(conn, run_id, e)?;
    for h in &e.headlines {
        conn.exec(
            "INSERT INTO headlines (run_id, collective, dtype, plateau_busbw, latency_s)
             VALUES (?, ?, ?, ?, ?)",
            &[
                run_id.into(),
                h.collective.clone().into(),
                h.dtype.clone().into(),
                h.plateau_busbw.into(),
                h.latency_s.into(),
            ],
        )?;
    }
    for l in &e.links {
        conn.exec(
            "INSERT INTO links (run_id, src, dst, direction, size_bytes, bandwidth, time_s)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
            &[
                run_id.into(),
                l.src.clone().into(),
                l.dst.clone().into(),
                l.direction.clone().into(),
                l.size_bytes.into(),
                l.bandwidth.into(),
                l.time_s.into(),
            ],
        )?;
    }
    Ok(Added::Stored { id: run_id })
}

/// Whether run `id` keeps the verdict `e` carries (the same rules, results and messages).
fn same_verdict(conn: &mut Conn, id: i64, e: &Entry) -> Result<bool, DbError> {
    let rows = conn.query(
        "SELECT rule, passed, message FROM gates WHERE run_id = ?",
        &[id.into()],
    )?;
    let mut stored: Vec<(String, i64, String)> = rows
        .iter()
        .map(|r| {
            (
                r[0].text().unwrap_or("").to_string(),
                r[1].int().unwrap_or(-1),
                r[2].text().unwrap_or("").to_string(),
            )
        })
        .collect();
    let mut given: Vec<(String, i64, String)> = e
        .gates
        .iter()
        .map(|g| (g.rule.clone(), i64::from(g.passed), g.message.clone()))
        .collect();
    stored.sort();
    given.sort();
    Ok(stored == given)
}

/// The entry's gate results, as rows of run `run_id`.
fn insert_gates(conn: &mut Conn, run_id: i64, e: &Entry) -> Result<(), DbError> {
    for g in &e.gates {
        conn.exec(
            "INSERT INTO gates (run_id, rule, collective, size_bytes, measured, required, unit,
               passed, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            &[
                run_id.into(),
                g.rule.clone().into(),
                g.collective.clone().into(),
                g.size_bytes.into(),
                g.measured.into(),
                g.required.into(),
                g.unit.clone().into(),
                i64::from(g.passed).into(),
                g.message.clone().into(),
            ],
        )?;
    }
    Ok(())
}

/// The health column: `{}` when every counter is clean (most runs), so readers skip it.
fn health_text(h: &super::entry::HealthSummary) -> String {
    if *h == super::entry::HealthSummary::default() {
        "{}".into()
    } else {
        serde_json::to_string(h).unwrap_or_else(|_| "{}".into())
    }
}

/// Samples as little-endian f64s: exact, and a tenth of their JSON.
pub fn pack(samples: &[f64]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

pub fn unpack(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

const POINT_COLUMNS: usize = 15;

fn insert_points(conn: &mut Conn, run_id: i64, e: &Entry) -> Result<(), DbError> {
    for chunk in e.points.chunks(POINTS_PER_STATEMENT) {
        let row = format!("({})", vec!["?"; POINT_COLUMNS].join(", "));
        let sql = format!(
            "INSERT INTO points (run_id, collective, dtype, redop, placement, root, nranks,
               size_bytes, time_s, busbw, algbw, ci_low_s, ci_high_s, wrong, samples) VALUES {}",
            vec![row; chunk.len()].join(", ")
        );
        let mut params = Vec::with_capacity(chunk.len() * POINT_COLUMNS);
        for p in chunk {
            params.extend([
                run_id.into(),
                p.collective.clone().into(),
                p.dtype.clone().into(),
                p.redop.clone().into(),
                p.placement.clone().into(),
                p.root.into(),
                p.nranks.into(),
                p.size_bytes.into(),
                finite(p.time_s),
                finite(p.busbw),
                finite(p.algbw),
                p.ci_low_s.into(),
                p.ci_high_s.into(),
                p.wrong.into(),
                Value::Blob(pack(&p.samples)),
            ]);
        }
        conn.exec(&sql, &params)?;
    }
    Ok(())
}

/// A measurement the columns can hold (NOT NULL): NaN and infinities of a failed point are 0.
fn finite(v: f64) -> Value {
    Value::Real(if v.is_finite() { v } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_pack_exactly() {
        let s = vec![1.5e-6, 2.25e-3, f64::MIN_POSITIVE];
        assert_eq!(unpack(&pack(&s)), s);
        assert!(unpack(&[1, 2, 3]).is_empty());
    }
}

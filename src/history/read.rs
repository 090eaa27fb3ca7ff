//! Reading the store back for a fleet: run metadata for a window, then points, samples,
//! headlines and links for the runs chosen (never every sample of every run).

use super::engine::{DbError, Value};
use super::entry::HealthSummary;
use super::write::unpack;
use super::{HistoryError, Store};
use std::collections::HashMap;

/// One stored run, without its points.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    pub id: i64,
    pub node: String,
    pub sku: String,
    /// `run` or `matrix`.
    pub kind: String,
    pub started_at: String,
    pub started_unix: f64,
    pub status: String,
    pub passed: Option<bool>,
    pub health: HealthSummary,
}

/// One out-of-place point of a stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct PointLite {
    pub run_id: i64,
    pub collective: String,
    pub dtype: String,
    pub nranks: i64,
    pub size_bytes: i64,
    pub time_s: f64,
    pub busbw: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeadlineLite {
    pub run_id: i64,
    pub collective: String,
    pub plateau_busbw: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LinkLite {
    pub run_id: i64,
    pub src: String,
    pub dst: String,
    pub direction: String,
    pub size_bytes: i64,
    pub bandwidth: f64,
}

/// A point of a run: (run, collective, dtype, nranks, size).
pub type SampleKey = (i64, String, String, i64, i64);
/// Raw samples by point.
pub type Samples = HashMap<SampleKey, Vec<f64>>;

/// Ids per `IN (…)` list.
const CHUNK: usize = 2000;

fn db(store: &Store) -> impl Fn(DbError) -> HistoryError + '_ {
    move |e| HistoryError::Other(format!("{}: {e}", store.location.display()))
}

impl Store {
    /// Every run started at or after `since` (unix seconds), of `sku` when given, oldest first.
    pub fn runs_since(
        &mut self,
        since: f64,
        sku: Option<&str>,
    ) -> Result<Vec<RunMeta>, HistoryError> {
        let mut sql = String::from(
            "SELECT r.id, n.name, r.sku, r.kind, r.started_at, r.started_unix, r.status, r.passed,
                    r.health
             FROM runs r JOIN nodes n ON n.id = r.node_id
             WHERE r.started_unix >= ?",
        );
        let mut params = vec![Value::Real(since)];
        if let Some(s) = sku {
            sql.push_str(" AND r.sku = ?");
            params.push(s.into());
        }
        sql.push_str(" ORDER BY r.started_unix, r.id");
        let rows = self.conn.query(&sql, &params).map_err(|e| db(self)(e))?;
        Ok(rows
            .into_iter()
            .map(|r| RunMeta {
                id: r[0].int().unwrap_or(0),
                node: r[1].text().unwrap_or("").to_string(),
                sku: r[2].text().unwrap_or("").to_string(),
                kind: r[3].text().unwrap_or("").to_string(),
                started_at: r[4].text().unwrap_or("").to_string(),
                started_unix: r[5].real().unwrap_or(0.0),
                status: r[6].text().unwrap_or("").to_string(),
                passed: r[7].int().map(|p| p != 0),
                health: r[8]
                    .text()
                    .and_then(|h| serde_json::from_str(h).ok())
                    .unwrap_or_default(),
            })
            .collect())
    }

    /// The out-of-place points of `runs` (no samples).
    pub fn points_of(&mut self, runs: &[i64]) -> Result<Vec<PointLite>, HistoryError> {
        let mut out = Vec::new();
        for chunk in runs.chunks(CHUNK) {
            let sql = format!(
                "SELECT run_id, collective, dtype, nranks, size_bytes, time_s, busbw FROM points
                 WHERE placement = 'out-of-place' AND run_id IN ({})",
                id_list(chunk)
            );
            let rows = self.conn.query(&sql, &[]).map_err(|e| db(self)(e))?;
            out.extend(rows.into_iter().map(|r| PointLite {
                run_id: r[0].int().unwrap_or(0),
                collective: r[1].text().unwrap_or("").to_string(),
                dtype: r[2].text().unwrap_or("").to_string(),
                nranks: r[3].int().unwrap_or(0),
                size_bytes: r[4].int().unwrap_or(0),
                time_s: r[5].real().unwrap_or(f64::NAN),
                busbw: r[6].real().unwrap_or(f64::NAN),
            }));
        }
        Ok(out)
    }

    /// Raw samples (seconds per call) of the out-of-place points of `runs`, by
    /// (run, collective, dtype, nranks, size).
    pub fn samples_of(&mut self, runs: &[i64]) -> Result<Samples, HistoryError> {
        let mut out = HashMap::new();
        for chunk in runs.chunks(CHUNK) {
            let sql = format!(
                "SELECT run_id, collective, dtype, nranks, size_bytes, samples FROM points
                 WHERE placement = 'out-of-place' AND run_id IN ({})",
                id_list(chunk)
            );
            let rows = self.conn.query(&sql, &[]).map_err(|e| db(self)(e))?;
            for r in rows {
                out.insert(
                    (
                        r[0].int().unwrap_or(0),
                        r[1].text().unwrap_or("").to_string(),
                        r[2].text().unwrap_or("").to_string(),
                        r[3].int().unwrap_or(0),
                        r[4].int().unwrap_or(0),
                    ),
                    unpack(r[5].blob().unwrap_or(&[])),
                );
            }
        }
        Ok(out)
    }

    /// Each run's plateau per collective.
    pub fn headlines_of(&mut self, runs: &[i64]) -> Result<Vec<HeadlineLite>, HistoryError> {
        let mut out = Vec::new();
        for chunk in runs.chunks(CHUNK) {
            let sql = format!(
                "SELECT run_id, collective, plateau_busbw FROM headlines WHERE run_id IN ({})",
                id_list(chunk)
            );
            let rows = self.conn.query(&sql, &[]).map_err(|e| db(self)(e))?;
            out.extend(rows.into_iter().map(|r| HeadlineLite {
                run_id: r[0].int().unwrap_or(0),
                collective: r[1].text().unwrap_or("").to_string(),
                plateau_busbw: r[2].real().unwrap_or(f64::NAN),
            }));
        }
        Ok(out)
    }

    /// The pair links of matrix runs.
    pub fn links_of(&mut self, runs: &[i64]) -> Result<Vec<LinkLite>, HistoryError> {
        let mut out = Vec::new();
        for chunk in runs.chunks(CHUNK) {
            let sql = format!(
                "SELECT run_id, src, dst, direction, size_bytes, bandwidth FROM links
                 WHERE run_id IN ({})",
                id_list(chunk)
            );
            let rows = self.conn.query(&sql, &[]).map_err(|e| db(self)(e))?;
            out.extend(rows.into_iter().map(|r| LinkLite {
                run_id: r[0].int().unwrap_or(0),
                src: r[1].text().unwrap_or("").to_string(),
                dst: r[2].text().unwrap_or("").to_string(),
                direction: r[3].text().unwrap_or("").to_string(),
                size_bytes: r[4].int().unwrap_or(0),
                bandwidth: r[5].real().unwrap_or(f64::NAN),
            }));
        }
        Ok(out)
    }

    /// The failed gate rules of `run`, as their messages.
    pub fn failed_gates(&mut self, run: i64) -> Result<Vec<String>, HistoryError> {
        let rows = self
            .conn
            .query(
                "SELECT message FROM gates WHERE run_id = ? AND passed = 0",
                &[Value::Int(run)],
            )
            .map_err(|e| db(self)(e))?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r[0].text().map(str::to_string))
            .collect())
    }

    /// Counts of nodes, runs and points (`history` summary and tests).
    pub fn counts(&mut self) -> Result<(i64, i64, i64), HistoryError> {
        let mut one = |sql: &str| -> Result<i64, HistoryError> {
            let v = self
                .conn
                .scalar(sql, &[])
                .map_err(|e| HistoryError::Other(e.to_string()))?;
            Ok(v.int().unwrap_or(0))
        };
        Ok((
            one("SELECT COUNT(*) FROM nodes")?,
            one("SELECT COUNT(*) FROM runs")?,
            one("SELECT COUNT(*) FROM points")?,
        ))
    }

    /// Problems with the store's consistency (empty: none): SQLite's own integrity check, and
    /// on both engines rows that lost their run.
    pub fn check(&mut self) -> Result<Vec<String>, HistoryError> {
        let mut problems = Vec::new();
        if self.engine() == super::engine::EngineKind::Sqlite {
            let rows = self
                .conn
                .query("PRAGMA integrity_check", &[])
                .map_err(|e| HistoryError::Other(e.to_string()))?;
            for r in rows {
                if let Some(t) = r[0].text().filter(|t| *t != "ok") {
                    problems.push(format!("SQLite: {t}"));
                }
            }
        }
        for table in ["points", "gates", "headlines", "links"] {
            let n = self
                .conn
                .scalar(
                    &format!(
                        "SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = t.run_id)"
                    ),
                    &[],
                )
                .map_err(|e| HistoryError::Other(e.to_string()))?
                .int()
                .unwrap_or(0);
            if n > 0 {
                problems.push(format!("{n} rows of {table} belong to no run"));
            }
        }
        Ok(problems)
    }
}

fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

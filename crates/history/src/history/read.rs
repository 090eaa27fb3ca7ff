//! Reading the store back for a fleet: run metadata for a window, then points, samples,
//! headlines and links for the runs chosen (never every sample of every run).

use super::engine::{DbError, Value};
use super::entry::HealthSummary;
use super::write::unpack;
use super::{HistoryError, Store};
use std::collections::HashMap;
use std::sync::Arc;

/// One stored run, without its points: numbers only, so that a window of 300,000 runs reads
/// without a string per row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    pub id: i64,
    pub node: Arc<str>,
    pub sku: Arc<str>,
    /// A pair matrix (else a run record).
    pub matrix: bool,
    /// A run record that measured to its end (complete, check-failed, truncated).
    pub usable: bool,
    pub started_unix: f64,
    pub passed: Option<bool>,
    pub health: HealthSummary,
}

impl RunMeta {
    /// When it started, RFC 3339 in UTC.
    pub fn started_at(&self) -> String {
        rfc3339(self.started_unix)
    }
}

/// Unix seconds as RFC 3339, UTC, to the second.
pub fn rfc3339(unix: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix.floor() as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{unix}"))
}

/// One out-of-place point of a stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct PointLite {
    pub run_id: i64,
    pub collective: Arc<str>,
    pub dtype: Arc<str>,
    pub nranks: i64,
    pub size_bytes: i64,
    pub time_s: f64,
    pub busbw: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeadlineLite {
    pub run_id: i64,
    pub collective: Arc<str>,
    pub plateau_busbw: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LinkLite {
    pub run_id: i64,
    pub src: Arc<str>,
    pub dst: Arc<str>,
    pub direction: Arc<str>,
    pub size_bytes: i64,
    pub bandwidth: f64,
}

/// A point of a run: (run, collective, dtype, nranks, size).
pub type SampleKey = (i64, Arc<str>, Arc<str>, i64, i64);
/// Raw samples by point.
pub type Samples = HashMap<SampleKey, Vec<f64>>;

/// Ids per `IN (…)` list.
const CHUNK: usize = 2000;

/// The key of a point's samples.
pub fn sample_key(run: i64, p: &PointLite) -> SampleKey {
    (
        run,
        p.collective.clone(),
        p.dtype.clone(),
        p.nranks,
        p.size_bytes,
    )
}

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
        let mut names: HashMap<i64, (Arc<str>, Arc<str>)> = HashMap::new();
        let nodes = self
            .conn
            .query("SELECT id, name, sku FROM nodes", &[])
            .map_err(|e| db(self)(e))?;
        for r in nodes {
            let text = |v: &Value| Arc::<str>::from(v.text().unwrap_or(""));
            names.insert(r[0].int().unwrap_or(0), (text(&r[1]), text(&r[2])));
        }
        let mut sql = String::from(
            "SELECT id, node_id, CASE WHEN kind = 'matrix' THEN 1 ELSE 0 END,
                    CASE WHEN kind = 'run' AND status IN ('complete', 'check-failed', 'truncated')
                         THEN 1 ELSE 0 END,
                    started_unix, passed, CASE WHEN health = '{}' THEN NULL ELSE health END, sku
             FROM runs WHERE started_unix >= ?",
        );
        let mut params = vec![Value::Real(since)];
        if let Some(s) = sku {
            sql.push_str(" AND sku = ?");
            params.push(s.into());
        }
        sql.push_str(" ORDER BY started_unix, id");
        // The run's SKU is read only where it is not its node's (a node whose GPUs changed).
        let sql = sql.replace(", sku\n", ", NULL\n");
        let unknown: (Arc<str>, Arc<str>) = (Arc::from(""), Arc::from(""));
        let mut out = Vec::new();
        self.conn
            .for_each(&sql, &params, |r| {
                let (node, node_sku) = names.get(&r[1].int().unwrap_or(0)).unwrap_or(&unknown);
                out.push(RunMeta {
                    id: r[0].int().unwrap_or(0),
                    node: node.clone(),
                    sku: node_sku.clone(),
                    matrix: r[2].int() == Some(1),
                    usable: r[3].int() == Some(1),
                    started_unix: r[4].real().unwrap_or(0.0),
                    passed: r[5].int().map(|p| p != 0),
                    health: r[6]
                        .text()
                        .and_then(|h| serde_json::from_str(h).ok())
                        .unwrap_or_default(),
                })
            })
            .map_err(|e| db(self)(e))?;
        Ok(out)
    }

    /// `sql` (with `{ids}` where the run ids go) over `runs`, a chunk of ids at a time, each row
    /// handed to `row` with the interner of repeated names.
    fn each_of_runs(
        &mut self,
        runs: &[i64],
        sql: &str,
        mut row: impl FnMut(&[super::engine::Cell<'_>], &mut Interner),
    ) -> Result<(), HistoryError> {
        let mut names = Interner::default();
        // The ids are parameters, a full chunk of them each time (the last chunk repeats its
        // last id): one statement, prepared once and kept, serves every chunk of every call.
        let sql = sql.replace("{ids}", &vec!["?"; CHUNK].join(","));
        for chunk in runs.chunks(CHUNK) {
            let Some(&last) = chunk.last() else { continue };
            let ids: Vec<Value> = chunk
                .iter()
                .copied()
                .chain(std::iter::repeat(last))
                .take(CHUNK)
                .map(Value::Int)
                .collect();
            self.conn
                .for_each(&sql, &ids, |r| row(r, &mut names))
                .map_err(|e| db(self)(e))?;
        }
        Ok(())
    }

    /// The out-of-place points of `runs` (no samples).
    pub fn points_of(&mut self, runs: &[i64]) -> Result<Vec<PointLite>, HistoryError> {
        let mut out = Vec::new();
        self.each_of_runs(
            runs,
            "SELECT run_id, collective, dtype, nranks, size_bytes, time_s, busbw FROM points
             WHERE placement = 'out-of-place' AND run_id IN ({ids})",
            |r, names| {
                out.push(PointLite {
                    run_id: r[0].int().unwrap_or(0),
                    collective: names.get(r[1].text().unwrap_or("")),
                    dtype: names.get(r[2].text().unwrap_or("")),
                    nranks: r[3].int().unwrap_or(0),
                    size_bytes: r[4].int().unwrap_or(0),
                    time_s: r[5].real().unwrap_or(f64::NAN),
                    busbw: r[6].real().unwrap_or(f64::NAN),
                })
            },
        )?;
        Ok(out)
    }

    /// Raw samples (seconds per call) of the out-of-place points of `runs`, by
    /// (run, collective, dtype, nranks, size).
    pub fn samples_of(&mut self, runs: &[i64]) -> Result<Samples, HistoryError> {
        let mut out = HashMap::new();
        self.each_of_runs(
            runs,
            "SELECT run_id, collective, dtype, nranks, size_bytes, samples FROM points
             WHERE placement = 'out-of-place' AND run_id IN ({ids})",
            |r, names| {
                let blob = match r[5] {
                    super::engine::Cell::Blob(b) => b,
                    _ => &[],
                };
                let key = (
                    r[0].int().unwrap_or(0),
                    names.get(r[1].text().unwrap_or("")),
                    names.get(r[2].text().unwrap_or("")),
                    r[3].int().unwrap_or(0),
                    r[4].int().unwrap_or(0),
                );
                out.insert(key, unpack(blob));
            },
        )?;
        Ok(out)
    }

    /// Each run's plateau per collective.
    pub fn headlines_of(&mut self, runs: &[i64]) -> Result<Vec<HeadlineLite>, HistoryError> {
        let mut out = Vec::new();
        self.each_of_runs(
            runs,
            "SELECT run_id, collective, plateau_busbw FROM headlines WHERE run_id IN ({ids})",
            |r, names| out.push(headline(r, names)),
        )?;
        Ok(out)
    }

    /// The plateau of every run in the window (one query, however many runs).
    pub fn headlines_since(
        &mut self,
        since: f64,
        sku: Option<&str>,
    ) -> Result<Vec<HeadlineLite>, HistoryError> {
        let mut sql = String::from(
            "SELECT h.run_id, h.collective, h.plateau_busbw FROM headlines h
             JOIN runs r ON r.id = h.run_id WHERE r.started_unix >= ?",
        );
        let mut params = vec![Value::Real(since)];
        if let Some(s) = sku {
            sql.push_str(" AND r.sku = ?");
            params.push(s.into());
        }
        let mut out = Vec::new();
        let mut names = Interner::default();
        self.conn
            .for_each(&sql, &params, |r| out.push(headline(r, &mut names)))
            .map_err(|e| db(self)(e))?;
        Ok(out)
    }

    /// The pair links of matrix runs.
    pub fn links_of(&mut self, runs: &[i64]) -> Result<Vec<LinkLite>, HistoryError> {
        let mut out = Vec::new();
        self.each_of_runs(
            runs,
            "SELECT run_id, src, dst, direction, size_bytes, bandwidth FROM links
             WHERE run_id IN ({ids})",
            |r, names| {
                out.push(LinkLite {
                    run_id: r[0].int().unwrap_or(0),
                    src: names.get(r[1].text().unwrap_or("")),
                    dst: names.get(r[2].text().unwrap_or("")),
                    direction: names.get(r[3].text().unwrap_or("")),
                    size_bytes: r[4].int().unwrap_or(0),
                    bandwidth: r[5].real().unwrap_or(f64::NAN),
                })
            },
        )?;
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
}

fn headline(r: &[super::engine::Cell<'_>], names: &mut Interner) -> HeadlineLite {
    HeadlineLite {
        run_id: r[0].int().unwrap_or(0),
        collective: names.get(r[1].text().unwrap_or("")),
        plateau_busbw: r[2].real().unwrap_or(f64::NAN),
    }
}

/// One shared copy of each of the few names a large result repeats (collectives, types, GPU
/// labels).
#[derive(Default)]
struct Interner(HashMap<String, Arc<str>>);

impl Interner {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(a) = self.0.get(name) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(name);
        self.0.insert(name.to_string(), a.clone());
        a
    }
}

//! `history check`: what is wrong with a store, each problem in words (none: healthy).
//! SQLite's own integrity check, the tables this schema needs, rows that lost their run or
//! their node, and stored documents and samples that no longer decode.

use super::engine::{Cell, DbError, EngineKind};
use super::{HistoryError, Store};
use std::io::Read;

/// The tables of this schema.
const TABLES: [&str; 7] = [
    "meta",
    "nodes",
    "runs",
    "points",
    "gates",
    "headlines",
    "links",
];

/// The most of one stored document that is inflated to see whether it decodes.
const DOCUMENT_CAP: u64 = 256 << 20;

impl Store {
    /// The store's problems (empty: none); see the module comment. A store too damaged to
    /// query is one problem, not an error.
    pub fn check(&mut self) -> Result<Vec<String>, HistoryError> {
        let mut problems = Vec::new();
        match self.checked(&mut problems) {
            Ok(()) => Ok(problems),
            Err(DbError::Corrupt(m)) => {
                problems.push(format!("the store could not be read to its end: {m}"));
                Ok(problems)
            }
            Err(e) => Err(super::open::opened(&self.location.display(), e)),
        }
    }

    fn checked(&mut self, problems: &mut Vec<String>) -> Result<(), DbError> {
        let conn = &mut self.conn;
        if conn.kind() == EngineKind::Sqlite {
            for r in conn.query("PRAGMA integrity_check", &[])? {
                if let Some(t) = r[0].text().filter(|t| *t != "ok") {
                    problems.push(format!("SQLite: {t}"));
                }
            }
        }
        let present = |conn: &mut super::engine::Conn, table: &str| -> Result<bool, DbError> {
            let sql = match conn.kind() {
                EngineKind::Sqlite => {
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
                }
                EngineKind::Postgres => {
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
                }
            };
            Ok(conn.scalar(sql, &[table.into()])?.int().unwrap_or(0) > 0)
        };
        let mut missing = Vec::new();
        for t in TABLES {
            if !present(conn, t)? {
                missing.push(t);
            }
        }
        if !missing.is_empty() {
            problems.push(format!(
                "the table{} {} {} missing (dropped, or the store was cut short)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", "),
                if missing.len() > 1 { "are" } else { "is" },
            ));
        }
        let has = |t: &str| !missing.contains(&t);
        let count = |conn: &mut super::engine::Conn, sql: &str| -> Result<i64, DbError> {
            Ok(conn.scalar(sql, &[])?.int().unwrap_or(0))
        };
        if has("runs") && has("nodes") {
            let n = count(
                conn,
                "SELECT COUNT(*) FROM runs r WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = r.node_id)",
            )?;
            if n > 0 {
                problems.push(format!(
                    "{} to no node (its node row is gone)",
                    counted(n, "run belongs", "runs belong")
                ));
            }
        }
        for table in ["points", "gates", "headlines", "links"] {
            if !(has(table) && has("runs")) {
                continue;
            }
            let n = count(
                conn,
                &format!(
                    "SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = t.run_id)"
                ),
            )?;
            if n > 0 {
                problems.push(format!(
                    "{} of {table} to no run",
                    counted(n, "row belongs", "rows belong")
                ));
            }
        }
        if has("runs") {
            let mut bad: Vec<i64> = Vec::new();
            conn.for_each("SELECT id, document FROM runs ORDER BY id", &[], |r| {
                if !decodes(&r[1]) {
                    bad.push(r[0].int().unwrap_or(0));
                }
            })?;
            if !bad.is_empty() {
                problems.push(format!(
                    "{} (run {})",
                    counted(
                        bad.len() as i64,
                        "stored document does not decode",
                        "stored documents do not decode"
                    ),
                    listed(&bad)
                ));
            }
        }
        if has("points") {
            let mut bad: Vec<i64> = Vec::new();
            conn.for_each("SELECT run_id, samples FROM points", &[], |r| {
                let whole = matches!(r[1], Cell::Blob(b) if b.len() % 8 == 0);
                if !whole {
                    bad.push(r[0].int().unwrap_or(0));
                }
            })?;
            if !bad.is_empty() {
                bad.sort_unstable();
                let points = bad.len();
                bad.dedup();
                problems.push(format!(
                    "{} samples that are not whole numbers (run {})",
                    counted(points as i64, "point holds", "points hold"),
                    listed(&bad)
                ));
            }
        }
        Ok(())
    }
}

/// A stored document: deflated JSON of an object with a `kind`.
fn decodes(cell: &Cell<'_>) -> bool {
    let Cell::Blob(bytes) = cell else {
        return false;
    };
    let mut json = Vec::new();
    let inflated = flate2::read::DeflateDecoder::new(*bytes)
        .take(DOCUMENT_CAP)
        .read_to_end(&mut json);
    inflated.is_ok()
        && serde_json::from_slice::<serde_json::Value>(&json)
            .is_ok_and(|v| v.get("kind").is_some_and(|k| k.is_string()))
}

/// `n` and the words for one or for many.
fn counted(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Up to ten ids, then how many more.
fn listed(ids: &[i64]) -> String {
    let mut text = ids
        .iter()
        .take(10)
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > 10 {
        text.push_str(&format!(" and {} more", ids.len() - 10));
    }
    text
}

//! The store's tables, one list of migrations for both engines, and the version check that
//! keeps an older ncclprobe from writing to a store a newer one laid out.

use super::engine::{Conn, DbError, EngineKind, Value};

/// The schema this build writes. A store at a higher version is refused; a lower one is
/// migrated forward, in one transaction, by the first writer that opens it.
pub const SCHEMA_VERSION: i64 = 2;

/// Version 1: nodes, runs (one row per document), points with their raw samples, gate results.
const V1: &[&str] = &[
    "CREATE TABLE nodes (
        id {id},
        name TEXT NOT NULL UNIQUE,
        sku TEXT NOT NULL,
        gpus TEXT NOT NULL,
        first_seen TEXT NOT NULL,
        last_seen TEXT NOT NULL)",
    "CREATE TABLE runs (
        id {id},
        digest TEXT NOT NULL UNIQUE,
        node_id {int} NOT NULL REFERENCES nodes(id),
        sku TEXT NOT NULL,
        kind TEXT NOT NULL,
        origin TEXT NOT NULL,
        source_file TEXT,
        started_at TEXT NOT NULL,
        started_unix {real} NOT NULL,
        added_at TEXT NOT NULL,
        status TEXT NOT NULL,
        passed {int},
        tool_version TEXT NOT NULL,
        driver TEXT,
        cuda TEXT,
        nccl TEXT,
        backend TEXT NOT NULL,
        nranks {int} NOT NULL,
        hosts TEXT NOT NULL,
        env TEXT NOT NULL,
        health TEXT NOT NULL,
        document {blob} NOT NULL)",
    "CREATE INDEX runs_node_time ON runs (node_id, started_unix)",
    "CREATE TABLE points (
        run_id {int} NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        collective TEXT NOT NULL,
        dtype TEXT NOT NULL,
        redop TEXT,
        placement TEXT NOT NULL,
        root {int} NOT NULL,
        nranks {int} NOT NULL,
        size_bytes {int} NOT NULL,
        time_s {real} NOT NULL,
        busbw {real} NOT NULL,
        algbw {real} NOT NULL,
        ci_low_s {real},
        ci_high_s {real},
        wrong {int},
        samples {blob} NOT NULL)",
    "CREATE INDEX points_run ON points (run_id)",
    "CREATE TABLE gates (
        run_id {int} NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        rule TEXT NOT NULL,
        collective TEXT,
        size_bytes {int},
        measured {real},
        required {real},
        unit TEXT NOT NULL,
        passed {int} NOT NULL,
        message TEXT NOT NULL)",
    "CREATE INDEX gates_run ON gates (run_id)",
];

/// Version 2: per-run headlines (the plateau a trend is drawn from, without reading every
/// point of every run), pair-matrix links, and the per-SKU time index the fleet reads by.
const V2: &[&str] = &[
    "CREATE TABLE headlines (
        run_id {int} NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        collective TEXT NOT NULL,
        dtype TEXT NOT NULL,
        plateau_busbw {real} NOT NULL,
        latency_s {real})",
    "CREATE INDEX headlines_run ON headlines (run_id)",
    "CREATE TABLE links (
        run_id {int} NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        direction TEXT NOT NULL,
        size_bytes {int} NOT NULL,
        bandwidth {real} NOT NULL,
        time_s {real} NOT NULL)",
    "CREATE INDEX links_run ON links (run_id)",
    "CREATE INDEX runs_sku_time ON runs (sku, started_unix)",
];

const MIGRATIONS: &[(i64, &[&str])] = &[(1, V1), (2, V2)];

/// A statement in the engine's dialect.
pub fn dialect(kind: EngineKind, sql: &str) -> String {
    let (id, int, real, blob) = match kind {
        EngineKind::Sqlite => ("INTEGER PRIMARY KEY", "INTEGER", "REAL", "BLOB"),
        EngineKind::Postgres => (
            "BIGSERIAL PRIMARY KEY",
            "BIGINT",
            "DOUBLE PRECISION",
            "BYTEA",
        ),
    };
    sql.replace("{id}", id)
        .replace("{int}", int)
        .replace("{real}", real)
        .replace("{blob}", blob)
}

/// The version the store is at (0: empty), read inside the caller's transaction.
fn version(conn: &mut Conn) -> Result<i64, DbError> {
    if conn.kind() == EngineKind::Postgres && !has_meta(conn)? {
        postgres_foreign(conn)?;
    }
    conn.batch("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")?;
    let v = conn.scalar("SELECT value FROM meta WHERE key = 'schema_version'", &[])?;
    parse_version(v.text())
}

/// The meta row's text as a version: missing is 0 (a store not laid out yet); digits past
/// `i64` are a newer store; anything else is no version at all.
fn parse_version(text: Option<&str>) -> Result<i64, DbError> {
    let Some(t) = text.map(str::trim) else {
        return Ok(0);
    };
    match t.parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v),
        Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            Err(DbError::Newer(i64::MAX))
        }
        _ => Err(DbError::Unknown(t.chars().take(40).collect())),
    }
}

fn has_meta(conn: &mut Conn) -> Result<bool, DbError> {
    let sql = match conn.kind() {
        EngineKind::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
        EngineKind::Postgres => {
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'meta'"
        }
    };
    Ok(conn.scalar(sql, &[])?.int().unwrap_or(0) > 0)
}

/// A PostgreSQL schema that holds other tables and no meta table is another program's.
fn postgres_foreign(conn: &mut Conn) -> Result<(), DbError> {
    let rows = conn.query(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
        &[],
    )?;
    let names: Vec<String> = rows
        .iter()
        .filter_map(|r| r.first().and_then(Value::text).map(str::to_string))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    Err(DbError::Foreign(shown_tables(&names)))
}

/// Refuses a SQLite database that holds tables but no ncclprobe `meta` table.
pub(crate) fn foreign_tables(conn: &rusqlite::Connection) -> Result<(), DbError> {
    let mut stmt =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<String>, _>>()?;
    if names.is_empty() || names.iter().any(|n| n == "meta") {
        return Ok(());
    }
    Err(DbError::Foreign(shown_tables(&names)))
}

/// At most five table names, then how many more.
pub(crate) fn shown_tables(names: &[String]) -> String {
    let mut text = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        text.push_str(&format!(" and {} more", names.len() - 5));
    }
    text
}

/// The store's version for a reader, nothing changed: 0 for a store not laid out yet (no
/// tables at all); another program's tables, an unknown or newer version refused.
pub fn readable(conn: &mut Conn) -> Result<i64, DbError> {
    if !has_meta(conn)? {
        if let Conn::Sqlite(c) = conn {
            foreign_tables(c)?;
        } else {
            postgres_foreign(conn)?;
        }
        return Ok(0);
    }
    let rows = conn.query("SELECT value FROM meta WHERE key = 'schema_version'", &[])?;
    let found = parse_version(rows.first().and_then(|r| r.first()).and_then(Value::text))?;
    if found > SCHEMA_VERSION {
        return Err(DbError::Newer(found));
    }
    Ok(found)
}

/// Brings the store to `target` (normally [`SCHEMA_VERSION`]) under the write lock: every
/// process opening a new store at once agrees on one layout, and a crash halfway leaves the
/// version it had.
pub fn migrate_to(conn: &mut Conn, target: i64) -> Result<i64, DbError> {
    conn.begin()?;
    let result = (|| -> Result<i64, DbError> {
        if conn.kind() == EngineKind::Postgres {
            // One migrator at a time across every client of the server.
            conn.scalar("SELECT pg_advisory_xact_lock(7239110155)::text", &[])?;
        }
        let found = version(conn)?;
        if found > SCHEMA_VERSION {
            return Err(DbError::Newer(found));
        }
        for (v, statements) in MIGRATIONS {
            if *v > found && *v <= target {
                for sql in *statements {
                    conn.batch(&dialect(conn.kind(), sql))?;
                }
            }
        }
        let now = found.max(target);
        conn.exec(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[Value::Text(now.to_string())],
        )?;
        Ok(found)
    })();
    match result {
        Ok(found) => {
            conn.commit()?;
            Ok(found)
        }
        Err(e) => {
            conn.rollback();
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numbers_or_refused_by_name() {
        assert_eq!(parse_version(None), Ok(0));
        assert_eq!(parse_version(Some(" 2 ")), Ok(2));
        assert_eq!(
            parse_version(Some("9999999999999999999999")),
            Err(DbError::Newer(i64::MAX))
        );
        for junk in ["-1", "abc", "2.5", ""] {
            assert!(
                matches!(parse_version(Some(junk)), Err(DbError::Unknown(_))),
                "{junk:?}"
            );
        }
    }
}

//! One connection to a history store, SQLite or PostgreSQL, behind one small interface: SQL
//! written once with `?` placeholders and portable types, values as [`Value`], errors sorted
//! into what a caller acts on (busy, full, gone, the rest).

use std::collections::HashMap;
use std::time::Duration;

/// A value passed to or read from the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Real(v) => Some(*v as i64),
            _ => None,
        }
    }

    pub fn real(&self) -> Option<f64> {
        match self {
            Value::Real(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Text(v) => Some(v),
            _ => None,
        }
    }

    pub fn blob(&self) -> Option<&[u8]> {
        match self {
            Value::Blob(v) => Some(v),
            _ => None,
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// A value of a row as read, borrowed from the engine's buffer: readers of large results keep
/// what they need without a string per cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

impl<'a> Cell<'a> {
    pub fn to_value(self) -> Value {
        match self {
            Cell::Null => Value::Null,
            Cell::Int(v) => Value::Int(v),
            Cell::Real(v) => Value::Real(v),
            Cell::Text(v) => Value::Text(v.to_string()),
            Cell::Blob(v) => Value::Blob(v.to_vec()),
        }
    }

    pub fn int(self) -> Option<i64> {
        match self {
            Cell::Int(v) => Some(v),
            Cell::Real(v) => Some(v as i64),
            _ => None,
        }
    }

    pub fn real(self) -> Option<f64> {
        match self {
            Cell::Real(v) => Some(v),
            Cell::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    pub fn text(self) -> Option<&'a str> {
        match self {
            Cell::Text(v) => Some(v),
            _ => None,
        }
    }
}

/// What went wrong, sorted by what the caller does about it.
#[derive(Debug, Clone, PartialEq)]
pub enum DbError {
    /// Another writer holds the store: wait and try again.
    Busy(String),
    /// The disk (or the server's) is full.
    Full(String),
    /// The store cannot be reached or opened.
    Unreachable(String),
    /// The store was laid out by a newer schema than this build knows (its version).
    Newer(i64),
    /// The meta table names a schema version that is not a number any build writes.
    Unknown(String),
    /// Another program's database: its tables, and no ncclprobe meta row.
    Foreign(String),
    /// The file is damaged (SQLite's "malformed", "not a database" past its header).
    Corrupt(String),
    /// Anything else the engine said.
    Other(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Busy(m)
            | DbError::Full(m)
            | DbError::Unreachable(m)
            | DbError::Corrupt(m)
            | DbError::Other(m) => f.write_str(m),
            DbError::Newer(v) => write!(f, "laid out by history schema {v}"),
            DbError::Unknown(v) => write!(f, "unknown history schema {v:?}"),
            DbError::Foreign(t) => write!(f, "another program's database (tables {t})"),
        }
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code() {
            Some(C::DatabaseBusy | C::DatabaseLocked) => DbError::Busy(e.to_string()),
            Some(C::DiskFull) => DbError::Full(e.to_string()),
            Some(C::CannotOpen | C::PermissionDenied | C::ReadOnly) => {
                DbError::Unreachable(e.to_string())
            }
            Some(C::DatabaseCorrupt | C::NotADatabase) => DbError::Corrupt(e.to_string()),
            _ => DbError::Other(e.to_string()),
        }
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        use postgres::error::SqlState;
        let text = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => e.to_string(),
        };
        match e.code() {
            Some(c)
                if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::LOCK_NOT_AVAILABLE =>
            {
                DbError::Busy(text)
            }
            Some(c) if *c == SqlState::DISK_FULL || *c == SqlState::OUT_OF_MEMORY => {
                DbError::Full(text)
            }
            Some(_) => DbError::Other(text),
            None if e.is_closed() => DbError::Unreachable(text),
            None => DbError::Unreachable(text),
        }
    }
}

/// Which engine a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Sqlite,
    Postgres,
}

/// An open connection.
pub enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres {
        client: Box<postgres::Client>,
        statements: HashMap<String, postgres::Statement>,
    },
}

/// How long SQLite itself waits on a lock before saying busy (the writer retries above it).
pub(crate) const SQLITE_BUSY_WAIT: Duration = Duration::from_secs(5);

impl Conn {
    /// A SQLite file: created if missing, in WAL mode (readers never wait for the writer),
    /// fully synced commits, foreign keys checked.
    pub fn sqlite(path: &std::path::Path) -> Result<Conn, DbError> {
        let conn = rusqlite::Connection::open(path)
            .map_err(|e| DbError::Unreachable(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(SQLITE_BUSY_WAIT)?;
        // Another program's database was refused before this (`open::preflight`): nothing
        // of it is changed, not even its journal mode.
        // The journal mode is the file's: only the first opener changes it, and a busy file
        // keeps whichever mode it has, so a failure to switch is retried by the caller.
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::Other(format!(
                "{}: SQLite kept journal mode {mode}, not WAL",
                path.display()
            )));
        }
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")?;
        Ok(Conn::Sqlite(conn))
    }

    /// A PostgreSQL server by URL (`postgres://user@host/db`); 10 s to connect unless the URL
    /// says `connect_timeout`.
    pub fn postgres(url: &str) -> Result<Conn, DbError> {
        let (plain, tls) = super::tls::split(url)
            .map_err(|e| DbError::Unreachable(format!("{}: {e}", redact(url))))?;
        let mut config: postgres::Config = plain.parse().map_err(|e| {
            DbError::Unreachable(format!("{}: not a PostgreSQL URL: {e}", redact(url)))
        })?;
        config.ssl_mode(tls.mode.wire());
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("ncclprobe");
        }
        if config.get_password().is_none() {
            // PGPASSWORD or the password file, as libpq reads them: no password on argv.
            let host = match config.get_hosts().first() {
                Some(postgres::config::Host::Tcp(h)) => h.clone(),
                _ => "localhost".to_string(),
            };
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let os_user = std::env::var("USER").unwrap_or_default();
            let user = config.get_user().unwrap_or(&os_user).to_string();
            let db = config.get_dbname().unwrap_or(&user).to_string();
            let (password, note) = super::pgpass::password(&host, port, &db, &user);
            if let Some(n) = note {
                eprintln!("ncclprobe: warning: {n}");
            }
            if let Some(p) = password {
                config.password(p);
            }
        }
        let connected = match tls.mode {
            super::tls::Mode::Disable => config.connect(postgres::NoTls),
            _ => {
                let connector = super::tls::connector(&tls)
                    .map_err(|e| DbError::Unreachable(format!("{}: {e}", redact(url))))?;
                config.connect(connector)
            }
        };
        let client = connected.map_err(|e| {
            DbError::Unreachable(format!(
                "cannot connect to {}: {}",
                redact(url),
                super::tls::connect_error(&e, tls.mode)
            ))
        })?;
        Ok(Conn::Postgres {
            client: Box::new(client),
            statements: HashMap::new(),
        })
    }

    pub fn kind(&self) -> EngineKind {
        match self {
            Conn::Sqlite(_) => EngineKind::Sqlite,
            Conn::Postgres { .. } => EngineKind::Postgres,
        }
    }

    /// Statements without parameters, run as written (DDL, transaction control).
    pub fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(Into::into),
            Conn::Postgres { client, .. } => client.batch_execute(sql).map_err(Into::into),
        }
    }

    /// Starts a write transaction: SQLite takes the write lock now (so waiting happens here,
    /// not halfway through), PostgreSQL begins one.
    pub fn begin(&mut self) -> Result<(), DbError> {
        match self {
            Conn::Sqlite(_) => self.batch("BEGIN IMMEDIATE"),
            Conn::Postgres { .. } => self.batch("BEGIN"),
        }
    }

    pub fn commit(&mut self) -> Result<(), DbError> {
        self.batch("COMMIT")
    }

    /// Ends a transaction that failed; an error here is the connection's and is dropped with it.
    pub fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    /// One statement; the rows it changed.
    pub fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let n = stmt.execute(rusqlite::params_from_iter(params.iter().map(to_sqlite)))?;
                Ok(n as u64)
            }
            Conn::Postgres { client, statements } => {
                let stmt = pg_statement(client, statements, sql)?;
                let boxed = pg_params(&stmt, params)?;
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    boxed.iter().map(|b| b.as_ref() as _).collect();
                Ok(client.execute(&stmt, &refs)?)
            }
        }
    }

    /// One query; every row, every column, owned.
    pub fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, DbError> {
        let mut out = Vec::new();
        self.for_each(sql, params, |r| {
            out.push(r.iter().map(|c| c.to_value()).collect());
        })?;
        Ok(out)
    }

    /// One query, each row handed to `row` as borrowed cells.
    pub fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        mut row: impl FnMut(&[Cell<'_>]),
    ) -> Result<(), DbError> {
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let columns = stmt.column_count();
                let mut rows =
                    stmt.query(rusqlite::params_from_iter(params.iter().map(to_sqlite)))?;
                while let Some(r) = rows.next()? {
                    let mut cells: Vec<Cell<'_>> = Vec::with_capacity(columns);
                    for i in 0..columns {
                        use rusqlite::types::ValueRef as R;
                        cells.push(match r.get_ref(i)? {
                            R::Null => Cell::Null,
                            R::Integer(v) => Cell::Int(v),
                            R::Real(v) => Cell::Real(v),
                            R::Text(t) => Cell::Text(std::str::from_utf8(t).unwrap_or("")),
                            R::Blob(b) => Cell::Blob(b),
                        });
                    }
                    row(&cells);
                }
                Ok(())
            }
            Conn::Postgres { client, statements } => {
                use postgres::types::Type;
                let stmt = pg_statement(client, statements, sql)?;
                let boxed = pg_params(&stmt, params)?;
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    boxed.iter().map(|b| b.as_ref() as _).collect();
                for r in client.query(&stmt, &refs)? {
                    let mut cells: Vec<Cell<'_>> = Vec::with_capacity(r.len());
                    for (i, col) in r.columns().iter().enumerate() {
                        cells.push(match *col.type_() {
                            Type::INT8 => r
                                .try_get::<_, Option<i64>>(i)?
                                .map_or(Cell::Null, Cell::Int),
                            Type::INT4 => r
                                .try_get::<_, Option<i32>>(i)?
                                .map_or(Cell::Null, |v| Cell::Int(v.into())),
                            Type::FLOAT8 => r
                                .try_get::<_, Option<f64>>(i)?
                                .map_or(Cell::Null, Cell::Real),
                            Type::FLOAT4 => r
                                .try_get::<_, Option<f32>>(i)?
                                .map_or(Cell::Null, |v| Cell::Real(v.into())),
                            Type::INT2 => r
                                .try_get::<_, Option<i16>>(i)?
                                .map_or(Cell::Null, |v| Cell::Int(v.into())),
                            Type::BOOL => r
                                .try_get::<_, Option<bool>>(i)?
                                .map_or(Cell::Null, |v| Cell::Int(v.into())),
                            Type::BYTEA => r
                                .try_get::<_, Option<&[u8]>>(i)?
                                .map_or(Cell::Null, Cell::Blob),
                            _ => r
                                .try_get::<_, Option<&str>>(i)?
                                .map_or(Cell::Null, Cell::Text),
                        });
                    }
                    row(&cells);
                }
                Ok(())
            }
        }
    }

    /// The first column of the first row.
    pub fn scalar(&mut self, sql: &str, params: &[Value]) -> Result<Value, DbError> {
        Ok(self
            .query(sql, params)?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .unwrap_or(Value::Null))
    }
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as S;
    match v {
        Value::Null => S::Null,
        Value::Int(i) => S::Integer(*i),
        Value::Real(r) => S::Real(*r),
        Value::Text(t) => S::Text(t.clone()),
        Value::Blob(b) => S::Blob(b.clone()),
    }
}

/// `?` placeholders as PostgreSQL numbers them (`$1`, `$2`, …); the SQL here never has a `?`
/// inside a literal.
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

fn pg_statement(
    client: &mut postgres::Client,
    cache: &mut HashMap<String, postgres::Statement>,
    sql: &str,
) -> Result<postgres::Statement, DbError> {
    if let Some(s) = cache.get(sql) {
        return Ok(s.clone());
    }
    let stmt = client.prepare(&numbered(sql))?;
    cache.insert(sql.to_string(), stmt.clone());
    Ok(stmt)
}

type PgParam = Box<dyn postgres::types::ToSql + Sync>;

/// Each value as the Rust type of the parameter PostgreSQL inferred for it (a NULL is typed
/// too, or the server refuses it).
fn pg_params(stmt: &postgres::Statement, params: &[Value]) -> Result<Vec<PgParam>, DbError> {
    use postgres::types::Type;
    if stmt.params().len() != params.len() {
        return Err(DbError::Other(format!(
            "statement takes {} parameters, given {}",
            stmt.params().len(),
            params.len()
        )));
    }
    stmt.params()
        .iter()
        .zip(params)
        .map(|(ty, v)| -> Result<PgParam, DbError> {
            Ok(match *ty {
                Type::INT8 => Box::new(v.int()),
                Type::INT4 => Box::new(v.int().map(|i| i as i32)),
                Type::FLOAT8 => Box::new(v.real()),
                Type::FLOAT4 => Box::new(v.real().map(|r| r as f32)),
                Type::BYTEA => Box::new(v.blob().map(<[u8]>::to_vec)),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    Box::new(v.text().map(str::to_string))
                }
                ref other => {
                    return Err(DbError::Other(format!(
                        "parameter of PostgreSQL type {other} is not supported"
                    )))
                }
            })
        })
        .collect()
}

/// A URL (or a libpq `key=value` string) as messages print it: the password replaced.
pub fn redact(url: &str) -> String {
    crate::secrets::redact(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(
            numbered("INSERT INTO t (a, b) VALUES (?, ?)"),
            "INSERT INTO t (a, b) VALUES ($1, $2)"
        );
    }

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(
            redact("postgres://fleet:s3cret@db.example:5432/runs"),
            "postgres://fleet:<redacted>@db.example:5432/runs"
        );
        assert_eq!(
            redact("postgres://fleet@db/runs"),
            "postgres://fleet@db/runs"
        );
        assert_eq!(redact("/var/lib/x.sqlite"), "/var/lib/x.sqlite");
    }
}

//! Fleet history: every document a run produces, kept in a database (a SQLite file by default,
//! or a PostgreSQL server a fleet shares), so that each node can be judged against its peers
//! of the same SKU and against its own past (`fleet`, `qualify --against-fleet`).
//!
//! One schema and one set of queries serve both engines ([`engine::Conn`]). Writers retry a busy
//! store with backoff and then say so plainly; every document goes in one transaction, so a
//! writer killed halfway leaves nothing of its run behind.

pub mod against;
mod check;
pub mod engine;
pub mod entry;
pub mod fleet;
mod fleet_checks;
pub mod fleet_stats;
pub mod keep;
pub mod open;
pub mod pgpass;
pub mod read;
pub mod schema;
#[doc(hidden)]
pub mod synthetic;
pub mod tls;
pub mod write;

use engine::{Conn, DbError, EngineKind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the history lives, as `--history` names it.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// `postgres://…` or `postgresql://…` (any case), or libpq's `key=value` string, is a
    /// server; anything else a SQLite file; empty is the default file under the user's data
    /// directory.
    pub fn parse(text: &str) -> Result<Location, HistoryError> {
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Ok(Location::Postgres(t.to_string()));
        }
        // libpq's `host=db user=fleet dbname=x` string: a server, never a file of that name.
        const KEYS: [&str; 8] = [
            "host=",
            "hostaddr=",
            "port=",
            "dbname=",
            "user=",
            "password=",
            "sslmode=",
            "service=",
        ];
        if t.split_whitespace()
            .next()
            .is_some_and(|w| KEYS.iter().any(|k| w.to_ascii_lowercase().starts_with(k)))
        {
            return Ok(Location::Postgres(t.to_string()));
        }
        if text.is_empty() {
            return default_file().map(Location::Sqlite);
        }
        if t.is_empty() {
            return Err(HistoryError::Refused(format!(
                "--history {text:?}: a blank name; give a file, a postgres:// URL, or --history alone for the default store"
            )));
        }
        Ok(Location::Sqlite(PathBuf::from(t)))
    }

    /// As messages name it (no password).
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(url) => engine::redact(url),
        }
    }
}

/// `$XDG_DATA_HOME/ncclprobe/history.sqlite` (`~/.local/share/…` when it is unset or not an
/// absolute path, as the XDG specification says). A writer creates its directory; a reader
/// never does.
pub fn default_file() -> Result<PathBuf, HistoryError> {
    let base = dirs::data_dir().ok_or_else(|| {
        HistoryError::Unreachable(
            "no data directory for the default history file (neither XDG_DATA_HOME nor HOME is set): name one with --history FILE".into(),
        )
    })?;
    Ok(base.join("ncclprobe").join("history.sqlite"))
}

/// Why the history could not be used.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryError {
    /// The store cannot be opened or reached.
    Unreachable(String),
    /// Laid out by a newer ncclprobe.
    Newer(String),
    /// Other writers held it for longer than the writer waits.
    Busy(String),
    /// The disk is full.
    Full(String),
    /// A document that cannot be stored (what and why).
    Document(String),
    /// Not a store this build may use (a directory, another program's database, an unknown
    /// schema, a reader's store that does not exist): left as it is.
    Refused(String),
    /// A store that exists but holds no run yet.
    Empty(String),
    /// A damaged store (SQLite says malformed).
    Corrupt(String),
    Other(String),
}

impl std::fmt::Display for HistoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HistoryError::Unreachable(m)
            | HistoryError::Newer(m)
            | HistoryError::Busy(m)
            | HistoryError::Full(m)
            | HistoryError::Document(m)
            | HistoryError::Refused(m)
            | HistoryError::Empty(m)
            | HistoryError::Corrupt(m)
            | HistoryError::Other(m) => f.write_str(m),
        }
    }
}

/// An open store, at this build's schema.
pub struct Store {
    pub(crate) conn: Conn,
    pub location: Location,
    /// How long a writer keeps retrying a busy store.
    pub patience: Duration,
}

/// How long writers wait for a busy store by default: 64 nodes finishing together each commit
/// in milliseconds, so this is reached only when something holds the store.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(120);

impl Store {
    /// Opens (creating and migrating as needed) the store at `location`, for writing; see
    /// [`open`] for what is refused.
    pub fn open(location: &Location) -> Result<Store, HistoryError> {
        Store::open_at(location, schema::SCHEMA_VERSION)
    }

    /// Opens at a given schema version (tests build older stores with it).
    #[doc(hidden)]
    pub fn open_at(location: &Location, version: i64) -> Result<Store, HistoryError> {
        let name = location.display();
        open::preflight(location, open::Access::Write)?;
        let deadline = Instant::now() + DEFAULT_PATIENCE;
        let mut conn = retry(&name, deadline, || match location {
            Location::Sqlite(path) => Conn::sqlite(path),
            Location::Postgres(url) => Conn::postgres(url),
        })?;
        retry(&name, deadline, || schema::migrate_to(&mut conn, version))?;
        Ok(Store {
            conn,
            location: location.clone(),
            patience: DEFAULT_PATIENCE,
        })
    }

    pub fn engine(&self) -> EngineKind {
        self.conn.kind()
    }
}

/// Runs `op` until it succeeds, fails for a reason other than a busy store, or `deadline`
/// passes; waits grow from 20 ms to 1 s, spread by the process id so that writers that
/// collided do not collide again in step.
pub(crate) fn retry<T>(
    name: &str,
    deadline: Instant,
    mut op: impl FnMut() -> Result<T, DbError>,
) -> Result<T, HistoryError> {
    let mut wait = Duration::from_millis(20);
    let spread = u64::from(std::process::id() % 17);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match op() {
            Ok(v) => return Ok(v),
            Err(DbError::Busy(m)) => {
                if Instant::now() + wait > deadline {
                    return Err(HistoryError::Busy(format!(
                        "{name} stayed locked by other writers through {attempts} attempts ({m})"
                    )));
                }
                std::thread::sleep(
                    wait + Duration::from_millis(spread * wait.as_millis() as u64 / 16),
                );
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(open::opened(name, e)),
        }
    }
}

//! Opening a store as a writer or as a reader, and what is checked before either: a writer
//! creates and migrates a store but refuses a file that holds something else; a reader
//! never creates, locks or migrates anything (WAL readers do not wait for the writer), and
//! opens a store on read-only media. Both are checked before a command measures anything
//! ([`preflight`]), so a store that cannot be used costs no measurement.

use super::engine::{Conn, DbError, SQLITE_BUSY_WAIT};
// mutual import with crate::history: the store's types are its, and `Store::open` starts
// with this module's preflight.
use super::{schema, HistoryError, Location};
use std::path::{Path, PathBuf};

/// How a command uses the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `history add`, `--history` on a measuring command: created when missing.
    Write,
    /// `fleet`, `history check`, `qualify --against-fleet`: must exist; nothing is written.
    Read,
}

/// SQLite's first 16 bytes.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What `--history` names on disk for the output-path guard: the store and the files SQLite
/// keeps beside it (an output written there would be deleted or read as the store's journal).
pub fn store_files(location: &Location) -> Vec<PathBuf> {
    match location {
        Location::Postgres(_) => Vec::new(),
        Location::Sqlite(path) => {
            let mut files = vec![path.clone()];
            for suffix in ["-wal", "-shm", "-journal"] {
                let mut name = path.as_os_str().to_owned();
                name.push(suffix);
                files.push(PathBuf::from(name));
            }
            files
        }
    }
}

/// Refuses, before any work, a store the command could not use: for SQLite a path that is a
/// directory or a special file, a missing directory, a file that is not SQLite or is another
/// program's database, an unknown or newer schema; for a reader, a store that does not exist.
/// A PostgreSQL server is reached when the command keeps its run (connecting twice would
/// only double the wait on a server that is down).
pub fn preflight(location: &Location, access: Access) -> Result<(), HistoryError> {
    let Location::Sqlite(path) = location else {
        return Ok(());
    };
    let shown = location.display();
    let refused = |why: String| Err(HistoryError::Refused(format!("{shown}: {why}")));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => refused("is a directory; name a file for the history store".into()),
        Ok(m) if !m.is_file() => refused(format!(
            "is {}, not a history store; name a regular file",
            special_kind(&m)
        )),
        Ok(m) if m.len() == 0 => Ok(()),
        Ok(_) => inspect(path, &shown),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match access {
            Access::Read => refused(
                "no history store there (a read command never creates one; `ncclprobe history add FILE --history …` or `sweep --history …` starts it)".into(),
            ),
            Access::Write => {
                if super::default_file().ok().as_ref() == Some(path) {
                    if let Some(dir) = path.parent() {
                        std::fs::create_dir_all(dir).map_err(|e| {
                            HistoryError::Unreachable(format!("cannot create {}: {e}", dir.display()))
                        })?;
                    }
                }
                let end = follow(path);
                let dir = end
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                match std::fs::metadata(dir) {
                    Ok(d) if d.is_dir() => Ok(()),
                    Ok(_) => refused(format!("{} is a file, not a directory", dir.display())),
                    Err(_) => refused(format!("the directory {} does not exist", dir.display())),
                }
            }
        },
        Err(e) => Err(HistoryError::Unreachable(format!("{shown}: {e}"))),
    }
}

/// A SQLite file for reading only: no journal mode set, nothing created, so a reader needs
/// neither the write lock nor write access. On media it may not write (where SQLite cannot
/// make the WAL index beside the file) the file is read as immutable.
pub fn sqlite_reader(path: &std::path::Path) -> Result<Conn, DbError> {
    use rusqlite::OpenFlags as F;
    let flags = F::SQLITE_OPEN_READ_ONLY | F::SQLITE_OPEN_URI | F::SQLITE_OPEN_NO_MUTEX;
    let open = |uri: String| -> Result<rusqlite::Connection, DbError> {
        let conn = rusqlite::Connection::open_with_flags(uri, flags)?;
        conn.busy_timeout(SQLITE_BUSY_WAIT)?;
        conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(conn)
    };
    let uri = file_uri(path);
    let conn = match open(uri.clone()) {
        Ok(c) => c,
        Err(DbError::Unreachable(_)) if !writable_dir(path) => open(format!("{uri}?immutable=1"))?,
        Err(e) => return Err(e),
    };
    Ok(Conn::Sqlite(conn))
}

/// `file:` URI of a path, its reserved characters escaped (a name may hold `?` or `#`).
fn file_uri(path: &std::path::Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for b in absolute.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(*b as char)
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri
}

/// Whether the store's directory takes new files (the WAL index a reader may need).
fn writable_dir(path: &std::path::Path) -> bool {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// The end of a chain of symlinks (a dangling link names the file SQLite would create).
fn follow(path: &Path) -> PathBuf {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&current) {
            Ok(target) => {
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                }
            }
            Err(_) => break,
        }
    }
    current
}

fn special_kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// An existing, non-empty file: SQLite's magic, then (read-only, nothing changed) whether it
/// is an ncclprobe history this build can use.
fn inspect(path: &Path, shown: &str) -> Result<(), HistoryError> {
    let mut head = [0u8; 16];
    let magic = std::fs::File::open(path).and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut head)
    });
    if magic.is_err() || &head != SQLITE_MAGIC {
        return Err(HistoryError::Refused(format!(
            "{shown}: not a SQLite database, so not an ncclprobe history (left as it is); name another file"
        )));
    }
    let mut conn = sqlite_reader(path).map_err(|e| opened(shown, e))?;
    schema::readable(&mut conn)
        .map(|_| ())
        .map_err(|e| opened(shown, e))
}

/// `m`, prefixed with the store's name unless it names it already.
fn named(shown: &str, m: String) -> String {
    if m.contains(shown) {
        m
    } else {
        format!("{shown}: {m}")
    }
}

/// A connection or schema error in words that name the store.
pub(crate) fn opened(shown: &str, e: DbError) -> HistoryError {
    match e {
        DbError::Newer(found) => HistoryError::Newer(format!(
            "{shown} was laid out by a newer ncclprobe (history schema {found}; this one knows up to {}): upgrade ncclprobe to read or write it",
            schema::SCHEMA_VERSION
        )),
        DbError::Unknown(text) => HistoryError::Refused(format!(
            "{shown}: unknown history schema {text:?} in its meta table (not a version this or any ncclprobe writes); the store is left as it is"
        )),
        DbError::Foreign(tables) => HistoryError::Refused(format!(
            "{shown}: not an ncclprobe history: it holds another program's tables ({tables}) and no ncclprobe meta row; it is left as it is, name another store"
        )),
        DbError::Corrupt(m) => HistoryError::Corrupt(format!("{shown}: {m}")),
        DbError::Busy(m) => HistoryError::Busy(format!("{shown}: {m}")),
        DbError::Full(m) => HistoryError::Full(format!("{shown}: the disk is full ({m})")),
        DbError::Unreachable(m) => HistoryError::Unreachable(named(shown, m)),
        DbError::Other(m) => HistoryError::Other(named(shown, m)),
    }
}

impl super::Store {
    /// Opens `location` for reading (see the module comment): a store at an older schema is
    /// brought forward once, as a writer would, since this build's queries need it.
    pub fn open_reader(location: &Location) -> Result<super::Store, HistoryError> {
        preflight(location, Access::Read)?;
        let shown = location.display();
        let mut conn = match location {
            Location::Sqlite(path) => sqlite_reader(path),
            Location::Postgres(url) => Conn::postgres(url),
        }
        .map_err(|e| opened(&shown, e))?;
        match schema::readable(&mut conn).map_err(|e| opened(&shown, e))? {
            v if v == schema::SCHEMA_VERSION => Ok(super::Store {
                conn,
                location: location.clone(),
                patience: super::DEFAULT_PATIENCE,
            }),
            0 => Err(HistoryError::Empty(format!(
                "{shown}: an empty history store (no run kept in it yet)"
            ))),
            older => {
                crate::term::note(&format!(
                    "{shown} is at history schema {older}; bringing it to {} once (this takes the write lock)",
                    schema::SCHEMA_VERSION
                ));
                drop(conn);
                super::Store::open(location)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_names_its_siblings() {
        let files = store_files(&Location::Sqlite("h.sqlite".into()));
        let names: Vec<_> = files.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "h.sqlite",
                "h.sqlite-wal",
                "h.sqlite-shm",
                "h.sqlite-journal"
            ]
        );
        assert!(store_files(&Location::Postgres("postgres://db/x".into())).is_empty());
    }

    #[test]
    fn a_reader_never_creates_and_a_writer_needs_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Location::Sqlite(dir.path().join("typo.sqlite"));
        let e = preflight(&missing, Access::Read).unwrap_err();
        assert!(matches!(e, HistoryError::Refused(_)), "{e}");
        assert!(!dir.path().join("typo.sqlite").exists());
        assert!(preflight(&missing, Access::Write).is_ok());
        let nodir = Location::Sqlite(dir.path().join("no/such/h.sqlite"));
        let e = preflight(&nodir, Access::Write).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let e = preflight(&Location::Sqlite(dir.path().into()), Access::Write)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
    }

    #[test]
    fn text_and_foreign_databases_are_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.sqlite");
        std::fs::write(&text, "not a database at all").unwrap();
        let e = preflight(&Location::Sqlite(text.clone()), Access::Write)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a SQLite database") && e.contains("notes.sqlite"),
            "{e}"
        );
        let foreign = dir.path().join("app.db");
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch(
            "CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');",
        )
        .unwrap();
        drop(c);
        let before = std::fs::read(&foreign).unwrap();
        for access in [Access::Read, Access::Write] {
            let e = preflight(&Location::Sqlite(foreign.clone()), access).unwrap_err();
            assert!(matches!(e, HistoryError::Refused(_)), "{e}");
            assert!(e.to_string().contains("users"), "{e}");
        }
        // Opened as a writer too, it is refused before WAL mode or a table is added.
        let e = super::super::Store::open(&Location::Sqlite(foreign.clone()))
            .err()
            .expect("a foreign database is refused");
        assert!(matches!(e, HistoryError::Refused(_)), "{e}");
        assert_eq!(std::fs::read(&foreign).unwrap(), before);
        assert!(!dir.path().join("app.db-wal").exists());
    }
}

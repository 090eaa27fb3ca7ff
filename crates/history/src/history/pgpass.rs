//! Where a PostgreSQL password comes from when the `--history` URL has none, as libpq's users
//! expect (https://www.postgresql.org/docs/current/libpq-envars.html, libpq-pgpass.html):
//! `PGPASSWORD`, then the password file (`PGPASSFILE`, else `~/.pgpass`), whose lines are
//! `hostname:port:database:username:password` with `*` matching anything and `\` escaping `:`
//! and `\`. As libpq, a password file others may read (any group or world permission) is
//! ignored, and said so. A password never has to be on a command line, where `ps` shows it.

use std::path::{Path, PathBuf};

/// The password for this connection, and a note when a password file was passed over.
pub fn password(
    host: &str,
    port: u16,
    database: &str,
    user: &str,
) -> (Option<String>, Option<String>) {
    if let Some(p) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
        return (Some(p), None);
    }
    let Some(file) = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|h| h.join(".pgpass")))
    else {
        return (None, None);
    };
    match read(&file) {
        Ok(Some(text)) => (lookup(&text, host, port, database, user), None),
        Ok(None) => (None, None),
        Err(why) => (None, Some(why)),
    }
}

/// The file's text; none when it does not exist; why it was passed over otherwise.
fn read(file: &Path) -> Result<Option<String>, String> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return Ok(None);
    };
    if !meta.is_file() {
        return Err(format!("{}: not a regular file, not read", file.display()));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{}: others may read it (permissions {:o}), so it is ignored, as libpq does; chmod 0600 it",
            file.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    std::fs::read_to_string(file)
        .map(Some)
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// The first line of a password file that matches, its password.
pub fn lookup(text: &str, host: &str, port: u16, database: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    let want = [host, port.as_str(), database, user];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let fields = split(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w || (w == "localhost" && f == "127.0.0.1"));
            matches.then(|| fields[4].clone())
        })
}

/// A line's fields, `\:` and `\\` unescaped.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    fields.last_mut().expect("one field").push(n);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_line_gives_the_password() {
        let file = "# fleet\n\
                    db.example:5432:ncclprobe:fleet:first\n\
                    *:*:*:fleet:any\\:thing\n";
        assert_eq!(
            lookup(file, "db.example", 5432, "ncclprobe", "fleet").as_deref(),
            Some("first")
        );
        assert_eq!(
            lookup(file, "other", 5433, "x", "fleet").as_deref(),
            Some("any:thing")
        );
        assert_eq!(lookup(file, "other", 5433, "x", "postgres"), None);
    }

    #[test]
    fn a_file_others_may_read_is_passed_over_and_said() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(&f, "*:*:*:*:pw\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read(&f).unwrap_err();
        assert!(err.contains("chmod 0600"), "{err}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read(&f).unwrap().as_deref(), Some("*:*:*:*:pw\n"));
    }
}

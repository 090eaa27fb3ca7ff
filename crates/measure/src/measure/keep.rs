//! Keeping a finished run (or pair matrix) in the history store, and where the run is when
//! the store cannot take it: the `--json` file the command wrote, or else a new file written
//! now and named, so a locked, unreachable or full store never costs the measurement.

use crate::exit::Failure;
use crate::history::keep::Target;
use std::path::{Path, PathBuf};

/// `kept` (what the store said), with the way back to the store when it failed: the record's
/// file when the command wrote one (`--json FILE`), else `doc` saved in a new file in the
/// current directory (or the system's temporary directory where that cannot be written).
pub fn or_saved(
    kept: Result<(), Failure>,
    target: Option<&Target>,
    json: Option<&Path>,
    doc: &impl serde::Serialize,
    stem: &str,
) -> Result<(), Failure> {
    let (Err(mut failure), Some(target)) = (kept, target) else {
        return Ok(());
    };
    let on_disk = json.filter(|p| {
        !crate::render::record::paths::is_stdout(p)
            && crate::render::record::paths::target(p)
                == crate::render::record::paths::Target::Regular
    });
    let saved: Result<PathBuf, String> = match on_disk {
        Some(p) => Ok(p.to_path_buf()),
        None => save(doc, stem),
    };
    let store = shell_word(&target.location.display());
    match saved {
        Ok(p) => {
            let file = shell_word(&p.display().to_string());
            let how = if on_disk.is_some() {
                "is in"
            } else {
                "is saved in"
            };
            failure.message.push_str(&format!(
                "; the run {how} {file}: add it later with `ncclprobe history add {file} --history {store}`"
            ));
        }
        Err(why) => failure.message.push_str(&format!(
            "; the run could not be saved either ({why}): it is lost"
        )),
    }
    Err(failure)
}

fn save(doc: &impl serde::Serialize, stem: &str) -> Result<PathBuf, String> {
    let bytes = serde_json::to_vec_pretty(doc).map_err(|e| e.to_string())?;
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_default();
    let stem = format!("{stem}-{stamp}");
    let write = |dir: &Path| crate::render::record::write_new(dir, &stem, "json", &bytes);
    write(Path::new("."))
        .or_else(|first| write(&std::env::temp_dir()).map_err(|_| first))
        .map_err(|e| e.to_string())
}

/// A path or URL as a shell reads it back: quoted when it holds anything but plain characters.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@=,%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_they_need_it() {
        assert_eq!(shell_word("runs/h.sqlite"), "runs/h.sqlite");
        assert_eq!(shell_word("my runs/h.sqlite"), "'my runs/h.sqlite'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}

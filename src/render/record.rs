//! Writing results to disk as they are measured, atomically: write a temporary file beside the
//! target, then rename it over, so a crash or a killed rank leaves the last complete version.

use crate::model::RunRecord;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Replace `path` with `contents` atomically.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Where the record and CSV go; `None` for a file means stdout at the end (or not at all).
pub struct RecordSink {
    pub record: RunRecord,
    pub json_path: Option<PathBuf>,
    pub csv_path: Option<PathBuf>,
}

impl RecordSink {
    /// Flush the current record (and CSV) to their files.
    pub fn flush(&self) -> anyhow::Result<()> {
        use anyhow::Context;
        if let Some(path) = &self.json_path {
            let json = serde_json::to_vec_pretty(&self.record)?;
            write_atomic(path, &json).with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &self.csv_path {
            let csv = super::csv::to_string(&self.record.points)?;
            write_atomic(path, csv.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// What stdout carries for a run record: the JSON with `--format json` or `--json -`, the CSV
/// with `--format csv` or `--csv -` (each once, JSON first).
pub fn stdout_documents(
    out: &crate::cli::OutputArgs,
    record: &RunRecord,
) -> Result<String, crate::exit::Failure> {
    use crate::cli::OutputFormat;
    let mut text = String::new();
    if out.format == OutputFormat::Json || out.json_to_stdout() {
        text.push_str(&super::to_json(record)?);
        text.push('\n');
    }
    if out.format == OutputFormat::Csv || out.csv_to_stdout() {
        text.push_str(
            &super::csv::to_string(&record.points)
                .map_err(|e| crate::exit::Failure::internal(e.to_string()))?,
        );
    }
    Ok(text)
}

//! A report rendered and written: the plots drawn (PNG and SVG), the HTML page and the Markdown
//! summary filled from the report's view (`render::report` holds the templates), then written
//! without clobbering anything that is not ours. `ncclprobe report`, `sweep --report` and
//! `doctor` all come here.

use super::figures::figures;
use super::recommend::Recommendation;
use super::verdict::Verdict;
use super::view::{build, Report};
use super::Documents;
use crate::exit::Failure;
use crate::render::plots::Drawn;
use crate::render::record::paths::{is_stdout, Files};
use crate::render::report::{pages, plot_views, Destinations};
use std::path::PathBuf;

/// The title of a report nobody named.
pub const DEFAULT_TITLE: &str = "ncclprobe report";

/// Where a report goes (`sweep --report`, `report -o`) besides its HTML: the Markdown summary
/// (`-` = stdout), a directory for every plot, and the title.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outputs {
    pub html: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
    pub png_dir: Option<PathBuf>,
    pub title: Option<String>,
}

impl Outputs {
    pub fn title(&self) -> &str {
        self.title.as_deref().unwrap_or(DEFAULT_TITLE)
    }

    /// The report's outputs as the path guard sees them; `html_flag` names the HTML's flag
    /// (`--report`, `-o`).
    pub fn files(&self, files: Files, html_flag: &str) -> Files {
        files
            .output(html_flag, self.html.as_deref())
            .output("--markdown", self.markdown.as_deref())
            .directory("--png-dir", self.png_dir.as_deref())
    }

    /// Where the HTML, the Markdown and the plots go; `None` when nothing asks for a report.
    /// Refuses two outputs on one path (one would silently replace the other).
    pub fn destinations(&self) -> Result<Option<Destinations>, Failure> {
        if self.html.is_none() && self.markdown.is_none() && self.png_dir.is_none() {
            return Ok(None);
        }
        self.files(Files::new(), "the HTML report").check()?;
        Ok(Some(Destinations {
            html: self.html.clone(),
            markdown: self.markdown.clone(),
            png_dir: self.png_dir.clone(),
            svg: true,
        }))
    }
}

/// A report rendered in memory.
pub struct Rendered {
    pub html: String,
    pub markdown: String,
    pub plots: Vec<Drawn>,
    /// What the report said first, for a caller that also prints it.
    pub verdict: Verdict,
    pub recommendations: Vec<Recommendation>,
}

pub fn render(docs: &Documents, title: &str, dest: &Destinations) -> Result<Rendered, Failure> {
    let plots: Vec<Drawn> = figures(docs)
        .iter()
        .map(|p| p.draw().map_err(Failure::internal))
        .collect::<Result<_, _>>()?;
    let mut report: Report = build(docs, title);
    report.plots = plot_views(&plots, dest);
    let (html, markdown) = pages(&report)?;
    Ok(Rendered {
        html,
        markdown,
        plots,
        verdict: report.verdict,
        recommendations: report.recommendations,
    })
}

/// Render and write; the files written are listed on stderr.
pub fn produce(docs: &Documents, title: &str, dest: &Destinations) -> Result<(), Failure> {
    let rendered = render(docs, title, dest)?;
    for path in write_all(&rendered, dest)? {
        let shown = path.display().to_string();
        crate::term::note(&format!("wrote {}", crate::render::safe::line(&shown)));
    }
    Ok(())
}

/// Write what was asked for; the paths written, in order (stdout is not listed). Every path
/// is checked first: a plot whose name is another output's (`--png-dir D -o D/busbw-….png`)
/// is refused before anything is written.
pub fn write_all(rendered: &Rendered, dest: &Destinations) -> Result<Vec<PathBuf>, Failure> {
    let mut files: Vec<(&str, PathBuf, &[u8])> = Vec::new();
    if let Some(dir) = &dest.png_dir {
        for p in &rendered.plots {
            files.push(("--png-dir", dir.join(format!("{}.png", p.name)), &p.png));
            if dest.svg {
                let svg = dir.join(format!("{}.svg", p.name));
                files.push(("--png-dir", svg, p.svg.as_bytes()));
            }
        }
    }
    if let Some(md) = &dest.markdown {
        files.push(("--markdown", md.clone(), rendered.markdown.as_bytes()));
    }
    if let Some(html) = &dest.html {
        files.push(("the HTML report", html.clone(), rendered.html.as_bytes()));
    }
    if let Some(dir) = &dest.png_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::internal(format!("--png-dir {}: cannot create: {e}", dir.display()))
        })?;
    }
    files
        .iter()
        .fold(Files::new(), |guard, (flag, path, _)| {
            guard.output(flag, Some(path))
        })
        .check()?;
    let mut written = Vec::new();
    for (flag, path, bytes) in files {
        crate::render::record::write_document(flag, &path, bytes)?;
        if !is_stdout(&path) {
            written.push(path);
        }
    }
    Ok(written)
}

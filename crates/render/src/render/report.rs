//! A report rendered: the plots drawn (PNG and SVG), the HTML page (one file, images inline as
//! data URIs, a Content-Security-Policy that allows no script and no network) and the Markdown
//! summary, both from the templates under `reports/templates/` with every value escaped for
//! its format; then written without clobbering anything that is not ours.

use crate::exit::Failure;
use crate::render::plots::Drawn;
use crate::render::safe;
use base64::Engine;
use minijinja::value::{Serde, Value};
use minijinja::{escape_formatter, AutoEscape, Environment};
use serde::Serialize;
use std::path::{Path, PathBuf};

const HTML: &str = include_str!("../../../../reports/templates/report.html");
const MARKDOWN: &str = include_str!("../../../../reports/templates/summary.md");

/// Text as Markdown reads it literally: no emphasis, links, images, HTML or table breaks; no
/// control characters or bidi overrides; at most `safe::TEXT_CHARS` characters.
pub fn markdown_escape(text: &str) -> String {
    safe::markdown(text, safe::TEXT_CHARS)
}

fn environment() -> Result<Environment<'static>, Failure> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html") {
            AutoEscape::Html
        } else {
            AutoEscape::Custom("markdown".into())
        }
    });
    env.set_formatter(|out, state, value| {
        // Every value a template prints passes here: text from inputs is escaped for the
        // format and stripped of control characters and bidi overrides in both.
        if matches!(state.auto_escape(), AutoEscape::Custom(_)) {
            let text = if value.is_safe() {
                value.to_string()
            } else {
                markdown_escape(&value.to_string())
            };
            return out.write_str(&text).map_err(minijinja::Error::from);
        }
        match value.as_str() {
            Some(text) if !value.is_safe() => {
                escape_formatter(out, state, &Value::from(safe::display(text).as_ref()))
            }
            _ => escape_formatter(out, state, value),
        }
    });
    let bad = |e: minijinja::Error| Failure::internal(format!("report template: {e:#}"));
    env.add_template("report.html", HTML).map_err(bad)?;
    env.add_template("summary.md", MARKDOWN).map_err(bad)?;
    Ok(env)
}

/// Where the files go: any of them may be absent.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    pub html: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
    pub png_dir: Option<PathBuf>,
    /// SVGs beside the PNGs (doctor writes both); `report` writes them with --png-dir too.
    pub svg: bool,
}

/// Percent-encode a relative path for a Markdown link target.
pub fn link_target(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/._-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `png` as seen from the directory the Markdown sits in.
pub fn relative_to_markdown(markdown: &Path, png: &Path) -> PathBuf {
    let base = markdown.parent().unwrap_or(Path::new(""));
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let from = abs(if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    });
    let to = abs(png);
    pathdiff::diff_paths(&to, &from).unwrap_or(to)
}

/// A plot as the page shows it: inline for the HTML, a link for the Markdown.
#[derive(Debug, Clone, Serialize)]
pub struct PlotView {
    pub name: String,
    pub title: String,
    pub caption: String,
    /// `data:image/png;base64,…` for the HTML.
    pub data_uri: String,
    /// The PNG beside the Markdown, relative to it (when PNGs are written).
    pub png_path: Option<String>,
}

/// The page's view of each drawn plot, its PNG linked from where the Markdown goes.
pub fn plot_views(plots: &[Drawn], dest: &Destinations) -> Vec<PlotView> {
    plots
        .iter()
        .map(|d| PlotView {
            name: d.name.clone(),
            title: d.title.clone(),
            caption: d.caption.clone(),
            data_uri: format!(
                "data:image/png;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(&d.png)
            ),
            png_path: match (&dest.markdown, &dest.png_dir) {
                (Some(md), Some(dir)) => Some(link_target(&relative_to_markdown(
                    md,
                    &dir.join(format!("{}.png", d.name)),
                ))),
                _ => None,
            },
        })
        .collect()
}

/// The HTML page and the Markdown summary of a report's view, from the templates.
pub fn pages(report: &impl Serialize) -> Result<(String, String), Failure> {
    let env = environment()?;
    let fill = |name: &str| {
        env.get_template(name)
            .and_then(|t| t.render(minijinja::context! { r => Value::from(Serde(report)) }))
            .map_err(|e| Failure::internal(format!("report template {name}: {e:#}")))
    };
    Ok((fill("report.html")?, tidy_markdown(&fill("summary.md")?)))
}

/// Sections left out leave blank lines behind: at most one blank line in a row.
pub fn tidy_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        blank = if line.is_empty() { blank + 1 } else { 0 };
        if blank < 2 {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escape_defuses_html_links_and_tables() {
        let e = markdown_escape("<script>alert(1)</script> [x](javascript:alert(1)) a|b `c`");
        assert!(!e.contains('<'));
        assert!(e.contains("\\[x\\]"));
        assert!(e.contains("a\\|b"));
        assert!(e.contains("\\`c\\`"));
    }

    #[test]
    fn link_targets_are_percent_encoded() {
        assert_eq!(
            link_target(Path::new("my plots/a (1).png")),
            "my%20plots/a%20%281%29.png"
        );
    }

    #[test]
    fn pngs_are_linked_relative_to_the_markdown() {
        let rel = relative_to_markdown(Path::new("out/summary.md"), Path::new("out/plots/a.png"));
        assert_eq!(rel, Path::new("plots/a.png"));
        let rel = relative_to_markdown(Path::new("summary.md"), Path::new("plots/a.png"));
        assert_eq!(rel, Path::new("plots/a.png"));
    }
}

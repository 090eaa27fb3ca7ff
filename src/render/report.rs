//! A report rendered: the plots drawn (PNG and SVG), the HTML page (one file, images inline as
//! data URIs, a Content-Security-Policy that allows no script and no network) and the Markdown
//! summary, both from the templates under `reports/templates/` with every value escaped for
//! its format; then written without clobbering anything that is not ours.

use crate::exit::Failure;
use crate::render::plots::{figures::figures, Drawn};
use crate::report::view::{build, PlotView, Report};
use crate::report::Documents;
use base64::Engine;
use minijinja::value::{Serde, Value};
use minijinja::{escape_formatter, AutoEscape, Environment};
use std::path::{Path, PathBuf};

const HTML: &str = include_str!("../../reports/templates/report.html");
const MARKDOWN: &str = include_str!("../../reports/templates/summary.md");

/// Text as Markdown reads it literally: no emphasis, links, images, HTML or table breaks.
pub fn markdown_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '[' | ']' | '|' | '#' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
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
        if matches!(state.auto_escape(), AutoEscape::Custom(_)) {
            let text = if value.is_safe() {
                value.to_string()
            } else {
                markdown_escape(&value.to_string())
            };
            return out.write_str(&text).map_err(minijinja::Error::from);
        }
        escape_formatter(out, state, value)
    });
    let bad = |e: minijinja::Error| Failure::internal(format!("report template: {e:#}"));
    env.add_template("report.html", HTML).map_err(bad)?;
    env.add_template("summary.md", MARKDOWN).map_err(bad)?;
    Ok(env)
}

/// A report rendered in memory.
pub struct Rendered {
    pub html: String,
    pub markdown: String,
    pub plots: Vec<Drawn>,
    /// What the report said first, for a caller that also prints it.
    pub verdict: crate::report::verdict::Verdict,
    pub recommendations: Vec<crate::report::recommend::Recommendation>,
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
fn link_target(path: &Path) -> String {
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
fn relative_to_markdown(markdown: &Path, png: &Path) -> PathBuf {
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

pub fn render(docs: &Documents, title: &str, dest: &Destinations) -> Result<Rendered, Failure> {
    let plots: Vec<Drawn> = figures(docs)
        .iter()
        .map(|p| p.draw().map_err(Failure::internal))
        .collect::<Result<_, _>>()?;
    let mut report: Report = build(docs, title);
    report.plots = plots
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
        .collect();
    let env = environment()?;
    let fill = |name: &str| {
        env.get_template(name)
            .and_then(|t| t.render(minijinja::context! { r => Value::from(Serde(&report)) }))
            .map_err(|e| Failure::internal(format!("report template {name}: {e:#}")))
    };
    let (html, markdown) = (fill("report.html")?, tidy_markdown(&fill("summary.md")?));
    Ok(Rendered {
        html,
        markdown,
        plots,
        verdict: report.verdict,
        recommendations: report.recommendations,
    })
}

/// Sections left out leave blank lines behind: at most one blank line in a row.
fn tidy_markdown(text: &str) -> String {
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

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    crate::render::record::write_atomic(path, bytes)
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}

/// Write what was asked for; the paths written, in order.
pub fn write_all(rendered: &Rendered, dest: &Destinations) -> Result<Vec<PathBuf>, Failure> {
    let mut written = Vec::new();
    if let Some(dir) = &dest.png_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
        for p in &rendered.plots {
            let png = dir.join(format!("{}.png", p.name));
            write(&png, &p.png)?;
            written.push(png);
            if dest.svg {
                let svg = dir.join(format!("{}.svg", p.name));
                write(&svg, p.svg.as_bytes())?;
                written.push(svg);
            }
        }
    }
    match &dest.markdown {
        Some(md) if md.as_os_str() == "-" => print!("{}", rendered.markdown),
        Some(md) => {
            write(md, rendered.markdown.as_bytes())?;
            written.push(md.clone());
        }
        None => {}
    }
    if let Some(html) = &dest.html {
        write(html, rendered.html.as_bytes())?;
        written.push(html.clone());
    }
    Ok(written)
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

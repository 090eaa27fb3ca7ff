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
    env.add_filter("cite", cite);
    let bad = |e: minijinja::Error| Failure::internal(format!("report template: {e:#}"));
    env.add_template("report.html", HTML).map_err(bad)?;
    env.add_template("summary.md", MARKDOWN).map_err(bad)?;
    Ok(env)
}

/// `{{ text|cite }}` in the HTML page: our own provenance text (a citation, a finding's source,
/// where an expectation came from) escaped as any text, with each http(s) URL in it made a
/// link a reader can open. Only for text this tool wrote: input text stays unlinked.
pub fn cite(text: &str) -> Value {
    Value::from_safe_string(cite_html(&safe::display(text)))
}

fn html_escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// The escaped text with its URLs as anchors. A URL is `http://` or `https://` followed by the
/// characters RFC 3986 allows, less the punctuation that ends a sentence or closes a bracket.
pub fn cite_html(text: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&*+,;=%".contains(c);
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = ["https://", "http://"]
        .iter()
        .filter_map(|scheme| rest.find(scheme))
        .min()
    {
        html_escape(&rest[..at], &mut out);
        let tail = &rest[at..];
        let mut end = tail.find(|c: char| !allowed(c)).unwrap_or(tail.len());
        while end > 0 && tail[..end].ends_with(['.', ',', ';', ':', '!', '?', ']']) {
            end -= 1;
        }
        let url = &tail[..end];
        if url.len() <= "https://".len() {
            html_escape(url, &mut out);
        } else {
            out.push_str("<a href=\"");
            html_escape(url, &mut out);
            out.push_str("\" rel=\"noreferrer noopener\">");
            html_escape(url, &mut out);
            out.push_str("</a>");
        }
        rest = &tail[end..];
    }
    html_escape(rest, &mut out);
    out
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
mod cite_tests {
    use super::cite_html;

    #[test]
    fn urls_become_links_and_the_rest_stays_escaped() {
        assert_eq!(
            cite_html("measured, 18 GB/s, https://github.com/NVIDIA/nccl/issues/1603)."),
            "measured, 18 GB/s, <a href=\"https://github.com/NVIDIA/nccl/issues/1603\" rel=\"noreferrer noopener\">https://github.com/NVIDIA/nccl/issues/1603</a>)."
        );
        assert_eq!(
            cite_html("a <b> & \"c\""),
            "a &lt;b&gt; &amp; &quot;c&quot;"
        );
        // A quote cannot leave the attribute: it is not a URL character.
        assert_eq!(
            cite_html("https://x.org/a\"onmouseover=alert(1)"),
            "<a href=\"https://x.org/a\" rel=\"noreferrer noopener\">https://x.org/a</a>&quot;onmouseover=alert(1)"
        );
        assert_eq!(cite_html("see https://"), "see https://");
        assert_eq!(
            cite_html("a&b https://e.org/?q=1&r=2, next"),
            "a&amp;b <a href=\"https://e.org/?q=1&amp;r=2\" rel=\"noreferrer noopener\">https://e.org/?q=1&amp;r=2</a>, next"
        );
    }
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

//! A fleet document as a table, CSV (the drain list, one reason a row), JUnit (one test case
//! per node), Markdown, and the fleet page: the drain list first, a nodes × collectives heat
//! map of the ratio to peers, and a trend line per drained node.

use super::safe::{line, markdown as md};
use crate::documents::fleet::{DrainEntry, FleetDocument, NodeStanding};
use crate::exit::Failure;
use std::collections::BTreeSet;
use std::fmt::Write;

fn rules_line(doc: &FleetDocument) -> String {
    let r = &doc.rules;
    format!(
        "judged at {} and larger: below peers = under {:.0}% of their median, z ≤ {}, rank test a discovery at FDR {}; drift = more than {:.0}% lost since the baseline run",
        crate::units::format_size(r.min_size_bytes),
        r.min_ratio * 100.0,
        r.max_z,
        r.fdr,
        r.max_drift * 100.0
    )
}

/// The nodes nothing judged: no peer to hold them against (their SKU has too few nodes at
/// their sizes, or they ran only sizes below the rule's) and no earlier run of their own, and
/// no drain reason. Never coloured or passed as if they were fine.
pub fn unjudged(doc: &FleetDocument) -> Vec<&NodeStanding> {
    doc.nodes
        .iter()
        .filter(|n| n.standings.is_empty() && n.drift.is_none() && !n.drain)
        .collect()
}

/// "J of N nodes judged (against peers or their own past); not judged: a, b (why)".
pub fn judged_line(doc: &FleetDocument) -> String {
    let not: Vec<&str> = unjudged(doc).iter().map(|n| n.node.as_str()).collect();
    let judged = doc.nodes.len() - not.len();
    let mut s = format!(
        "{judged} of {} nodes judged (against peers or their own past)",
        doc.nodes.len()
    );
    if !not.is_empty() {
        let shown: Vec<&str> = not.iter().copied().take(20).collect();
        let _ = write!(
            s,
            "; not judged: {}{} (fewer than {} peers of their SKU at the sizes they ran from {} up, and no earlier run of their own)",
            shown.join(", "),
            if not.len() > shown.len() {
                format!(" and {} more", not.len() - shown.len())
            } else {
                String::new()
            },
            doc.rules.min_peers,
            crate::units::format_size(doc.rules.min_size_bytes)
        );
    }
    s
}

pub fn table(doc: &FleetDocument) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "fleet: {}", line(&doc.store));
    for g in &doc.skus {
        let _ = writeln!(s, "  {}: {} nodes, {} runs", line(&g.sku), g.nodes, g.runs);
    }
    let _ = writeln!(s, "{}", rules_line(doc));
    if doc.drain.is_empty() {
        let _ = writeln!(s, "\ndrain list: empty ({})", line(&judged_line(doc)));
    } else {
        let _ = writeln!(
            s,
            "\ndrain list ({} of {} nodes):",
            doc.drain.len(),
            doc.nodes.len()
        );
        for d in &doc.drain {
            let _ = writeln!(
                s,
                "  {}  [{}]  since {}",
                line(&d.node),
                line(&d.sku),
                d.since.as_deref().unwrap_or("?")
            );
            for r in &d.reasons {
                let _ = writeln!(s, "    {}: {}", r.check, line(&r.what));
                let _ = writeln!(s, "      {}", line(&r.evidence));
            }
        }
    }
    for n in &doc.notes {
        let _ = writeln!(s, "note: {}", line(n));
    }
    s
}

pub fn csv(doc: &FleetDocument) -> Result<String, Failure> {
    let rows = doc.drain.iter().flat_map(|d| {
        d.reasons.iter().map(move |r| {
            vec![
                d.node.clone(),
                d.sku.clone(),
                r.check.clone(),
                r.what.clone(),
                r.evidence.clone(),
                r.since.clone().unwrap_or_default(),
            ]
        })
    });
    super::csv::table(&["node", "sku", "check", "what", "evidence", "since"], rows)
        .map_err(|e| Failure::internal(format!("CSV: {e}")))
}

pub fn junit(doc: &FleetDocument) -> Result<String, Failure> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("ncclprobe fleet {}", doc.store));
    for n in &doc.nodes {
        let drained = doc.drain.iter().find(|d| d.node == n.node);
        let judged = !n.standings.is_empty() || n.drift.is_some();
        let status = match drained {
            None if !judged => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!(
                    "not judged: fewer than {} peers of its SKU at its sizes from {} up, and no earlier run of its own",
                    doc.rules.min_peers,
                    crate::units::format_size(doc.rules.min_size_bytes)
                ));
                s
            }
            None => TestCaseStatus::success(),
            Some(d) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(
                    d.reasons
                        .iter()
                        .map(|r| format!("{}: {}", r.check, r.what))
                        .collect::<Vec<_>>()
                        .join("; "),
                );
                s.set_type(d.reasons.first().map_or("drain", |r| r.check.as_str()));
                s.set_description(
                    d.reasons
                        .iter()
                        .map(|r| r.evidence.clone())
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
                s
            }
        };
        let mut case = TestCase::new(n.node.clone(), status);
        case.set_classname(format!("ncclprobe.fleet.{}", n.sku));
        suite.add_test_case(case);
    }
    let mut report = Report::new("ncclprobe");
    report.add_test_suite(suite);
    report
        .to_string()
        .map_err(|e| Failure::internal(format!("JUnit: {e}")))
}

pub fn markdown(doc: &FleetDocument) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Fleet: {}\n", md(&doc.store, 200));
    let _ = writeln!(s, "{}\n", md(&rules_line(doc), 400));
    if doc.drain.is_empty() {
        let _ = writeln!(s, "Drain list: empty ({}).", md(&judged_line(doc), 2000));
    } else {
        let _ = writeln!(s, "| node | SKU | check | what | evidence | since |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for d in &doc.drain {
            for r in &d.reasons {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    md(&d.node, 80),
                    md(&d.sku, 80),
                    md(&r.check, 20),
                    md(&r.what, 200),
                    md(&r.evidence, 600),
                    md(r.since.as_deref().unwrap_or(""), 40)
                );
            }
        }
    }
    s
}

fn esc(text: &str) -> String {
    line(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// How far from the drain threshold a ratio runs before its colour is full: the span from
/// the threshold to the peers' median, at least 10 points.
fn span(threshold: f64) -> f64 {
    (1.0 - threshold).abs().max(0.1)
}

/// A diverging scale centred on the drain threshold: white at it, red below (full at a span
/// under it), blue above (full at the peers' median and beyond); grey where nothing was judged.
fn colour(ratio: f64, threshold: f64) -> String {
    if !ratio.is_finite() {
        return "#e6e6e6".into();
    }
    let d = ((ratio - threshold) / span(threshold)).clamp(-1.0, 1.0);
    let (r, g, b) = if d < 0.0 {
        (
            255.0 + 76.0 * d,
            255.0 * (1.0 + 0.8 * d),
            255.0 * (1.0 + 0.8 * d),
        )
    } else {
        (255.0 * (1.0 - 0.75 * d), 255.0 * (1.0 - 0.45 * d), 255.0)
    };
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

/// The scale's legend: its gradient from a span below the threshold to a span above, with the
/// threshold (where a node is drained) marked.
fn legend(threshold: f64) -> String {
    let (w, left) = (300.0, 10.0);
    let sp = span(threshold);
    let mut s = format!(
        "<svg class=\"legend\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"46\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\" aria-label=\"colour scale\">",
        w + 2.0 * left + 110.0
    );
    for k in 0..30 {
        let ratio = threshold - sp + 2.0 * sp * (k as f64 + 0.5) / 30.0;
        let _ = write!(
            s,
            "<rect x=\"{:.1}\" y=\"4\" width=\"{:.1}\" height=\"14\" fill=\"{}\"/>",
            left + w * k as f64 / 30.0,
            w / 30.0 + 0.5,
            colour(ratio, threshold)
        );
    }
    let mid = left + w / 2.0;
    let _ = write!(
        s,
        "<line x1=\"{mid}\" y1=\"2\" x2=\"{mid}\" y2=\"22\" stroke=\"#1b1b1b\" stroke-width=\"1.5\"/>\
<text x=\"{left}\" y=\"34\">{:.0}%</text><text x=\"{mid}\" y=\"34\" text-anchor=\"middle\">{:.0}% drain threshold</text><text x=\"{}\" y=\"34\" text-anchor=\"end\">{:.0}% of peers</text>\
<rect x=\"{}\" y=\"4\" width=\"14\" height=\"14\" fill=\"#e6e6e6\"/><text x=\"{}\" y=\"15\">not judged</text></svg>",
        (threshold - sp) * 100.0,
        threshold * 100.0,
        left + w,
        (threshold + sp) * 100.0,
        left + w + 8.0,
        left + w + 25.0
    );
    s
}

/// Nodes × collectives, each cell the node's worst judged ratio to its peers, printed in it.
fn heat_map(doc: &FleetDocument, nodes: &[&NodeStanding]) -> String {
    let collectives: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|n| n.standings.iter().map(|s| s.collective.as_str()))
        .collect();
    let threshold = doc.rules.min_ratio;
    let (cw, ch, left, top) = (96.0, 18.0, 220.0, 24.0);
    let width = left + cw * collectives.len() as f64 + 10.0;
    let height = top + ch * nodes.len() as f64 + 10.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    for (j, c) in collectives.iter().enumerate() {
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"16\">{}</text>",
            left + cw * j as f64 + 4.0,
            esc(c)
        );
    }
    let drained: BTreeSet<&str> = doc.drain.iter().map(|d| d.node.as_str()).collect();
    for (i, n) in nodes.iter().enumerate() {
        let y = top + ch * i as f64;
        let weight = if drained.contains(n.node.as_str()) {
            "bold"
        } else {
            "normal"
        };
        let _ = write!(
            s,
            "<text x=\"4\" y=\"{}\" font-weight=\"{weight}\">{}</text>",
            y + ch - 5.0,
            esc(&n.node)
        );
        for (j, c) in collectives.iter().enumerate() {
            let cell = n.standings.iter().find(|x| x.collective == *c);
            let ratio = cell.map_or(f64::NAN, |x| x.ratio);
            let title = cell.map_or_else(
                || "not judged".to_string(),
                |x| {
                    format!(
                        "{:.0}% of peers at {}, z {:.1}",
                        x.ratio * 100.0,
                        crate::units::format_size(x.size_bytes),
                        x.z
                    )
                },
            );
            let x0 = left + cw * j as f64;
            let label =
                cell.map_or_else(|| "–".to_string(), |x| format!("{:.0}%", x.ratio * 100.0));
            let _ = write!(
                s,
                "<g><title>{} {}: {}</title><rect x=\"{x0}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"cell\">{label}</text></g>",
                esc(&n.node),
                esc(c),
                esc(&title),
                cw - 2.0,
                ch - 2.0,
                colour(ratio, threshold),
                x0 + (cw - 2.0) / 2.0,
                y + ch - 6.0,
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// A date as the trend's axis shows it (`2026-12-01`), from RFC 3339.
fn day(at: &str) -> String {
    at.get(..10).unwrap_or(at).to_string()
}

/// One node's plateau over time, per collective: a point per run (a line through them when
/// there are several), the bandwidth axis from 0 with its top value, the first and last dates.
fn trend_line(n: &NodeStanding) -> String {
    let (w, h, left, right, top, bottom) = (540.0, 160.0, 52.0, 16.0, 22.0, 30.0);
    let dated: Vec<(f64, &crate::documents::fleet::TrendPoint)> = n
        .trend
        .iter()
        .filter_map(|t| crate::model::unix_time(&t.at).map(|u| (u, t)))
        .collect();
    let values: Vec<f64> = dated
        .iter()
        .map(|(_, t)| t.plateau_busbw_bytes_per_s / 1e9)
        .filter(|v| v.is_finite())
        .collect();
    let vmax = values.iter().copied().fold(0.0, f64::max);
    if dated.is_empty() || vmax <= 0.0 {
        return String::new();
    }
    let top_value = nice_top(vmax * 1.05);
    let (t0, t1) = dated
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, (t, _)| {
            (a.0.min(*t), a.1.max(*t))
        });
    let plot_w = w - left - right;
    let x = |t: f64| left + plot_w * if t1 > t0 { (t - t0) / (t1 - t0) } else { 0.5 };
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / top_value);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"10\"><text x=\"4\" y=\"12\" font-size=\"11\">{} — plateau bus bandwidth, {} run{}</text>",
        esc(&n.node),
        n.runs,
        if n.runs == 1 { "" } else { "s" }
    );
    // Axes: bandwidth from 0 to its top, dates from the first run to the last.
    let (x0, x1, y0, y1) = (left, w - right, y(0.0), y(top_value));
    let _ = write!(
        s,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"#888\"/><line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\" stroke=\"#888\"/>\
<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} GB/s</text>",
        x0 - 4.0,
        y0 + 3.0,
        x0 - 4.0,
        y1 + 3.0,
        crate::units::fixed(top_value, 0)
    );
    let first = dated
        .iter()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|d| day(&d.1.at));
    let last = dated
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|d| day(&d.1.at));
    match (first, last) {
        (Some(a), Some(b)) if a != b => {
            let _ = write!(
                s,
                "<text x=\"{x0}\" y=\"{}\">{}</text><text x=\"{x1}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                y0 + 14.0,
                esc(&a),
                y0 + 14.0,
                esc(&b)
            );
        }
        (Some(a), _) => {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                x(t0),
                y0 + 14.0,
                esc(&a)
            );
        }
        _ => {}
    }
    let collectives: BTreeSet<&str> = dated.iter().map(|(_, t)| t.collective.as_str()).collect();
    for (k, c) in collectives.iter().enumerate() {
        let hue = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"][k % 5];
        let mut pts: Vec<(f64, f64, &str)> = dated
            .iter()
            .filter(|(_, t)| t.collective == *c)
            .map(|(u, t)| (x(*u), y(t.plateau_busbw_bytes_per_s / 1e9), t.at.as_str()))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if pts.len() > 1 {
            let line: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1},{:.1}", p.0, p.1))
                .collect();
            let _ = write!(
                s,
                "<polyline fill=\"none\" stroke=\"{hue}\" stroke-width=\"1.5\" points=\"{}\"/>",
                line.join(" ")
            );
        }
        for (px, py, at) in &pts {
            let _ = write!(
                s,
                "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\" fill=\"{hue}\"><title>{} {}</title></circle>",
                esc(c),
                esc(at)
            );
        }
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{hue}\" text-anchor=\"end\">{}</text>",
            x1,
            top + 10.0 + 12.0 * k as f64,
            esc(c)
        );
    }
    s.push_str("</svg>");
    s
}

/// A round top for an axis: 1, 2 or 5 times a power of ten, at or above `v`.
fn nice_top(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|t| *t >= v)
        .unwrap_or(10.0 * p)
}

fn drain_rows(drain: &[DrainEntry]) -> String {
    let mut s = String::new();
    for d in drain {
        for r in &d.reasons {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&d.node),
                esc(&d.sku),
                esc(&r.check),
                esc(&r.what),
                esc(&r.evidence),
                esc(r.since.as_deref().unwrap_or(""))
            );
        }
    }
    s
}

/// The page's look, the report's (fonts, rules, colours), so the two read as one tool's.
const STYLE: &str = ":root{--ink:#1b1b1b;--muted:#5a5a5a;--rule:#d8d8d8;--ok:#007a55;--bad:#b3261e}*{box-sizing:border-box}body{font:15px/1.5 system-ui,-apple-system,\"Segoe UI\",\"DejaVu Sans\",sans-serif;color:var(--ink);margin:0 auto;padding:1rem;max-width:1240px}h1{font-size:1.5rem;margin:.2rem 0 .6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid var(--rule);padding-bottom:.2rem}.verdict{border-left:8px solid var(--ok);padding:.6rem 1rem;background:#f6f6f6;margin-bottom:1rem}.verdict.drain{border-color:var(--bad)}.verdict.unjudged{border-color:var(--muted);border-left-style:dashed}.verdict .state{font-size:1.35rem;font-weight:700;text-transform:uppercase;letter-spacing:.04em}.verdict.drain .state{color:var(--bad)}.verdict.clear .state{color:var(--ok)}.small,.note{color:var(--muted);font-size:.88rem}.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.88rem;margin:.4rem 0}th,td{border:1px solid var(--rule);padding:.2rem .45rem;text-align:left;vertical-align:top}th{background:#f0f0f0}text.cell{font-size:10px;fill:#1b1b1b}svg{display:block;margin:.3rem 0}";

/// The fleet page: what to drain (or that nothing is, and which nodes were not judged) first,
/// then the heat map with its scale, then the trends. Heat-map rows: drained nodes, then the
/// rest worst first (at most 500); nodes never judged are listed, not drawn.
pub fn html(doc: &FleetDocument) -> String {
    let mut nodes: Vec<&NodeStanding> = doc
        .nodes
        .iter()
        .filter(|n| !n.standings.is_empty() || n.drain)
        .collect();
    let worst = |n: &NodeStanding| {
        n.standings
            .iter()
            .map(|s| s.ratio)
            .fold(f64::INFINITY, f64::min)
    };
    nodes.sort_by(|a, b| b.drain.cmp(&a.drain).then(worst(a).total_cmp(&worst(b))));
    let shown = nodes.len().min(500);
    let mut s = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>ncclprobe fleet: {}</title><style>{STYLE}</style></head><body>",
        if doc.drain.is_empty() { "nothing to drain".to_string() } else { format!("{} to drain", doc.drain.len()) }
    );
    let _ = write!(s, "<h1>Fleet: {}</h1>", esc(&doc.store));
    let nothing_judged = doc.drain.is_empty() && unjudged(doc).len() == doc.nodes.len();
    let (class, word) = if nothing_judged {
        ("unjudged", "Not judged".to_string())
    } else if doc.drain.is_empty() {
        ("clear", "Nothing to drain".to_string())
    } else {
        (
            "drain",
            format!("Drain {} of {} nodes", doc.drain.len(), doc.nodes.len()),
        )
    };
    let _ = write!(
        s,
        "<div class=\"verdict {class}\"><div class=\"state\">{word}</div><div class=\"why\">{}</div><div class=\"small\">{}</div></div>",
        esc(&judged_line(doc)),
        esc(&rules_line(doc))
    );
    if !doc.drain.is_empty() {
        let _ = write!(
            s,
            "<h2>Drain list</h2><div class=\"scroll\"><table id=\"drain\"><tr><th>node</th><th>SKU</th><th>check</th><th>what</th><th>evidence</th><th>since</th></tr>{}</table></div>",
            drain_rows(&doc.drain)
        );
    }
    let _ = write!(
        s,
        "<h2>Ratio to peers</h2><p class=\"small\">Each cell: the node's worst judged size for that collective, its bus bandwidth as a share of its peers' median; white at the drain threshold ({:.0}%), red below it, blue above. {shown} of {} judged nodes shown.</p>{}<div class=\"scroll\">{}</div>",
        doc.rules.min_ratio * 100.0,
        nodes.len(),
        legend(doc.rules.min_ratio),
        heat_map(doc, &nodes[..shown])
    );
    let unjudged = unjudged(doc);
    if !unjudged.is_empty() {
        let names: Vec<String> = unjudged.iter().take(200).map(|n| esc(&n.node)).collect();
        let _ = write!(
            s,
            "<p id=\"unjudged\">Not judged ({}): {}</p>",
            unjudged.len(),
            names.join(", ")
        );
    }
    s.push_str("<h2>Trends</h2>");
    let with_trend: Vec<&&NodeStanding> = nodes.iter().filter(|n| !n.trend.is_empty()).collect();
    if with_trend.is_empty() {
        s.push_str("<p class=\"small\">No trend kept (the store keeps trends for drained nodes, and for every node of a small fleet).</p>");
    }
    for n in with_trend.into_iter().take(50) {
        s.push_str(&trend_line(n));
    }
    for n in &doc.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
    }
    s.push_str("</body></html>\n");
    s
}

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
        "judged at {} and larger: below peers = under {:.0}% of their median, z <= {}, rank test a discovery at FDR {}; drift = more than {:.0}% lost since the baseline run",
        crate::units::format_size(r.min_size_bytes),
        r.min_ratio * 100.0,
        r.max_z,
        r.fdr,
        r.max_drift * 100.0
    )
}

pub fn table(doc: &FleetDocument) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "fleet: {}", line(&doc.store));
    for g in &doc.skus {
        let _ = writeln!(s, "  {}: {} nodes, {} runs", line(&g.sku), g.nodes, g.runs);
    }
    let _ = writeln!(s, "{}", rules_line(doc));
    if doc.drain.is_empty() {
        let _ = writeln!(s, "\ndrain list: empty ({} nodes judged)", doc.nodes.len());
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
        let status = match drained {
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
        let _ = writeln!(s, "Drain list: empty ({} nodes judged).", doc.nodes.len());
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

/// Red below the peers, white at them, blue above.
fn colour(ratio: f64) -> String {
    if !ratio.is_finite() {
        return "#dddddd".into();
    }
    let d = ((ratio - 1.0) / 0.3).clamp(-1.0, 1.0);
    let (r, g, b) = if d < 0.0 {
        (255.0, 255.0 * (1.0 + d), 255.0 * (1.0 + d))
    } else {
        (255.0 * (1.0 - d), 255.0 * (1.0 - d * 0.5), 255.0)
    };
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

/// Nodes × collectives, each cell the node's worst judged ratio to its peers.
fn heat_map(doc: &FleetDocument, nodes: &[&NodeStanding]) -> String {
    let collectives: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|n| n.standings.iter().map(|s| s.collective.as_str()))
        .collect();
    let (cw, ch, left, top) = (90.0, 14.0, 220.0, 24.0);
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
            y + ch - 3.0,
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
            let _ = write!(
                s,
                "<rect x=\"{}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}: {}</title></rect>",
                left + cw * j as f64,
                cw - 2.0,
                ch - 2.0,
                colour(ratio),
                esc(&n.node),
                esc(c),
                esc(&title)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// One node's plateau over time, per collective.
fn trend_line(n: &NodeStanding) -> String {
    let (w, h, pad) = (520.0, 140.0, 30.0);
    let times: Vec<f64> = n
        .trend
        .iter()
        .filter_map(|t| crate::model::unix_time(&t.at))
        .collect();
    let values: Vec<f64> = n
        .trend
        .iter()
        .map(|t| t.plateau_busbw_bytes_per_s / 1e9)
        .collect();
    let (t0, t1) = times
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, t| {
            (a.0.min(*t), a.1.max(*t))
        });
    let vmax = values.iter().copied().fold(0.0, f64::max) * 1.1;
    if times.is_empty() || vmax <= 0.0 {
        return String::new();
    }
    let x = |t: f64| pad + (w - 2.0 * pad) * if t1 > t0 { (t - t0) / (t1 - t0) } else { 0.5 };
    let y = |v: f64| h - pad + (2.0 * pad - h) * v / vmax;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"10\"><text x=\"4\" y=\"12\">{} — plateau bus bandwidth (GB/s, 0 to {vmax:.0})</text>",
        esc(&n.node)
    );
    let collectives: BTreeSet<&str> = n.trend.iter().map(|t| t.collective.as_str()).collect();
    for (k, c) in collectives.iter().enumerate() {
        let pts: Vec<String> = n
            .trend
            .iter()
            .filter(|t| t.collective == *c)
            .filter_map(|t| {
                crate::model::unix_time(&t.at)
                    .map(|u| format!("{:.1},{:.1}", x(u), y(t.plateau_busbw_bytes_per_s / 1e9)))
            })
            .collect();
        let hue = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"][k % 5];
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{hue}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
            pts.join(" "),
            esc(c)
        );
    }
    s.push_str("</svg>");
    s
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

/// The fleet page. Heat-map rows: drained nodes, then the rest worst first (at most 500).
pub fn html(doc: &FleetDocument) -> String {
    let mut nodes: Vec<&NodeStanding> = doc.nodes.iter().collect();
    let worst = |n: &NodeStanding| {
        n.standings
            .iter()
            .map(|s| s.ratio)
            .fold(f64::INFINITY, f64::min)
    };
    nodes.sort_by(|a, b| b.drain.cmp(&a.drain).then(worst(a).total_cmp(&worst(b))));
    let shown = nodes.len().min(500);
    let mut s = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>ncclprobe fleet</title><style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;font-size:12px;vertical-align:top}th{background:#f4f4f4}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>Fleet: {}</h1><p>{}</p>",
        esc(&doc.store),
        esc(&rules_line(doc))
    );
    let _ = write!(
        s,
        "<h2>Drain list ({} of {} nodes)</h2>",
        doc.drain.len(),
        doc.nodes.len()
    );
    if doc.drain.is_empty() {
        s.push_str("<p>Nothing to drain.</p>");
    } else {
        let _ = write!(
            s,
            "<table id=\"drain\"><tr><th>node</th><th>SKU</th><th>check</th><th>what</th><th>evidence</th><th>since</th></tr>{}</table>",
            drain_rows(&doc.drain)
        );
    }
    let _ = write!(
        s,
        "<h2>Ratio to peers</h2><p>Each cell: the node's worst judged size for that collective, its bus bandwidth over its peers' median (red below, blue above); {shown} of {} nodes shown.</p>{}",
        nodes.len(),
        heat_map(doc, &nodes[..shown])
    );
    s.push_str("<h2>Trends</h2>");
    for n in nodes.iter().filter(|n| !n.trend.is_empty()).take(50) {
        s.push_str(&trend_line(n));
    }
    for n in &doc.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
    }
    s.push_str("</body></html>\n");
    s
}

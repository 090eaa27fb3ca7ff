//! Expectations, comparisons and qualifications for people (terminal tables, Markdown for an
//! issue), for scripts (CSV) and for CI (JUnit XML).

use crate::documents::expectations::Table;
use crate::documents::{ComparedPoint, Comparison, Qualification};
use crate::exit::Failure;
use crate::render::safe;
use crate::units::{fixed, format_size};
use std::fmt::Write;

use super::junit::case_name;
pub use super::junit::{junit, junit_error, SuiteContext};

fn gbps(bytes_per_s: f64) -> String {
    if !bytes_per_s.is_finite() {
        return "-".into();
    }
    let g = bytes_per_s / 1e9;
    if g >= 100.0 {
        fixed(g, 1)
    } else if g >= 0.1 || g == 0.0 {
        fixed(g, 2)
    } else {
        fixed(g, 4)
    }
}

pub(crate) fn csv_failure(e: ::csv::Error) -> Failure {
    Failure::internal(e.to_string())
}

/// A Markdown table cell or line: text from files and machines cannot break the table, link,
/// embed, or swell the page (`safe::markdown`).
fn md(text: &str) -> String {
    safe::markdown(text, safe::TEXT_CHARS)
}

/// A name from the input (a file, a run) in Markdown: shorter still.
fn md_name(text: &str) -> String {
    safe::markdown(text, safe::VALUE_CHARS)
}

/// Everything a human renderer returns passes here once: no escape sequence, control or
/// bidi override from an input reaches the terminal.
fn shown(text: String) -> String {
    safe::display(&text).into_owned()
}

fn figures(e: &crate::documents::expectations::Entry) -> String {
    let unit = if e.per_nic { " per NIC" } else { "" };
    e.busbw_gbps
        .iter()
        .map(|(c, v)| format!("{c} {v}{unit}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn conditions(e: &crate::documents::expectations::Entry) -> String {
    let mut c = vec![format!("{} over {}", e.path.name(), e.links.join("/"))];
    if let Some(g) = e.pcie_gen {
        c.push(format!("PCIe Gen{g}"));
    }
    if !e.gpus.is_empty() {
        c.push(e.gpus.join("/"));
    }
    c.push(format!("ranks {}-{}", e.ranks[0], e.ranks[1]));
    c.push(format!("nodes {}-{}", e.nodes[0], e.nodes[1]));
    if let Some(n) = e.nvls {
        c.push(if n {
            "NVLS on".into()
        } else {
            "NVLS off".into()
        });
    }
    if e.wsl2 == Some(true) {
        c.push("WSL2".into());
    }
    if let Some(g) = e.nic_gbps {
        c.push(format!("{g} Gb/s NICs"));
    }
    c.join(", ")
}

pub fn baselines_table(t: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} shipped expectations (busbw GB/s at the plateau; band = healthy fraction of it)",
        t.entries.len()
    );
    for e in &t.entries {
        let _ = writeln!(out, "{:<30} {}", e.id, e.title);
        let _ = writeln!(out, "{:<30}   when: {}", "", conditions(e));
        let _ = writeln!(
            out,
            "{:<30}   busbw: {} from {}, band {:.2}-{:.2}x  [{}]",
            "",
            figures(e),
            format_size(e.plateau_from_bytes),
            e.band[0],
            e.band[1],
            e.provenance.name()
        );
        let _ = writeln!(out, "{:<30}   source: {}", "", e.citation);
    }
    out
}

pub fn baselines_csv(t: &Table) -> Result<String, Failure> {
    crate::render::csv::table(
        &[
            "id",
            "title",
            "conditions",
            "collective",
            "busbw_gbps",
            "per_nic",
            "plateau_from_bytes",
            "band_low",
            "band_high",
            "provenance",
            "citation",
        ],
        t.entries.iter().flat_map(|e| {
            e.busbw_gbps.iter().map(move |(c, v)| {
                vec![
                    e.id.clone(),
                    e.title.clone(),
                    conditions(e),
                    c.clone(),
                    v.to_string(),
                    e.per_nic.to_string(),
                    e.plateau_from_bytes.to_string(),
                    e.band[0].to_string(),
                    e.band[1].to_string(),
                    e.provenance.name().to_string(),
                    e.citation.clone(),
                ]
            })
        }),
    )
    .map_err(csv_failure)
}

pub fn baselines_markdown(t: &Table) -> String {
    let mut out = String::from("| id | setup | conditions | busbw GB/s | provenance | source |\n|---|---|---|---|---|---|\n");
    for e in &t.entries {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            e.id,
            md(&e.title),
            md(&conditions(e)),
            md(&figures(e)),
            e.provenance.name(),
            md(&e.citation)
        );
    }
    out
}

fn head(doc: &Comparison) -> Vec<String> {
    // The answer under the usual design comes first: it is what the reader asked.
    let assumed = doc
        .assumed
        .iter()
        .map(|a| format!("assumed: {}", a.sentence));
    let mut lines: Vec<String> = assumed.collect();
    lines.extend([
        format!("run: {}", doc.run),
        format!("baseline: {} — {}", doc.baseline.id, doc.baseline.title),
        format!("chosen: {}", doc.baseline.why),
    ]);
    if matches!(doc.baseline.kind.as_str(), "expectation" | "conditional") {
        lines.push(format!("source: {}", doc.baseline.citation));
    }
    lines.extend(doc.stated.iter().map(|f| format!("stated: {f}")));
    lines
}

/// The conditional answer's rows: per collective and NIC count, the per-NIC figure and the
/// line rate it matches.
fn reading_rows(doc: &Comparison) -> Vec<[String; 4]> {
    doc.nic_readings
        .iter()
        .map(|r| {
            [
                r.collective.to_string(),
                r.nics_per_node.to_string(),
                format!("{:.1}", r.per_nic_gbps),
                r.matches.clone(),
            ]
        })
        .collect()
}

fn expected_cell(p: &ComparedPoint) -> String {
    format!(
        "{} ({}-{})",
        gbps(p.expected_busbw_bytes_per_s),
        gbps(p.expected_low_bytes_per_s),
        gbps(p.expected_high_bytes_per_s)
    )
}

/// Where the compared points' expectations came from, once each: a row names its layer by key
/// (`[1]`) and the lines under the table spell the keys out, so the table stays narrow.
fn layer_keys(doc: &Comparison) -> Vec<&str> {
    let mut layers: Vec<&str> = Vec::new();
    for p in &doc.points {
        if !layers.contains(&p.layer.as_str()) {
            layers.push(&p.layer);
        }
    }
    layers
}

/// A run-vs-run point's verdict as a reader takes it: a change the rank test did not find is
/// "not significant", not "within-noise" beside a ratio far from 1.
fn versus_verdict(p: &ComparedPoint) -> String {
    match (p.verdict.as_str(), p.p_value) {
        ("within-noise", Some(v)) if v >= crate::stats::SIGNIFICANCE => "not significant".into(),
        ("within-noise", _) => "within the band".into(),
        (v, _) => v.to_string(),
    }
}

/// One compared point's cells: collective, size, placement, busbw, expected (band), ratio,
/// verdict, and where the expectation came from (its key in `layers`, and NCCL's own model) or
/// the p-value (run vs run).
fn cells(p: &ComparedPoint, vs_run: bool, layers: &[&str]) -> [String; 8] {
    let last = if vs_run {
        p.p_value
            .map(|v| format!("p = {}", fixed(v, 3)))
            .unwrap_or_else(|| "no samples".into())
    } else {
        let key = layers.iter().position(|l| *l == p.layer).unwrap_or(0) + 1;
        let mut s = format!("[{key}]");
        if let Some(n) = p.nccl_model_busbw_bytes_per_s {
            let _ = write!(s, " NCCL's model {}", gbps(n));
        }
        s
    };
    [
        p.collective.name().to_string(),
        format_size(p.size_bytes),
        p.placement.name().to_string(),
        gbps(p.measured_busbw_bytes_per_s),
        expected_cell(p),
        crate::units::ratio(p.ratio),
        if vs_run {
            versus_verdict(p)
        } else {
            p.verdict.clone()
        },
        last,
    ]
}

/// A line of prose wrapped to the terminal (`$COLUMNS`), its continuations under `indent`.
fn prose(line: &str, indent: &str) -> String {
    crate::term::wrap_to_terminal(line, indent).into_owned()
}

pub fn comparison_table(doc: &Comparison) -> String {
    let mut out = String::new();
    for l in head(doc) {
        let _ = writeln!(out, "{}", prose(&format!("# {l}"), "#   "));
    }
    if !doc.nic_readings.is_empty() {
        let _ = writeln!(
            out,
            "{:<15} {:>9} {:>12}  matches",
            "collective", "NICs/node", "GB/s per NIC"
        );
        for [c, n, g, m] in reading_rows(doc) {
            let _ = writeln!(out, "{c:<15} {n:>9} {g:>12}  {m}");
        }
        shape_lines(&mut out, doc);
        let _ = writeln!(
            out,
            "{}",
            prose(&format!("# method: {}", doc.method), "#   ")
        );
        let _ = writeln!(out, "{}", prose(&doc.summary, "  "));
        return shown(out);
    }
    let vs_run = doc.baseline.kind == "run";
    let _ = writeln!(
        out,
        "{:<15} {:>10} {:<12} {:>10} {:>24} {:>7} {:<18} {}",
        "collective",
        "size",
        "placement",
        "busbw",
        if vs_run {
            "before (noise band)"
        } else {
            "expected (band) GB/s"
        },
        "ratio",
        "verdict",
        if vs_run { "significance" } else { "from" }
    );
    let layers = layer_keys(doc);
    for p in &doc.points {
        let c = cells(p, vs_run, &layers);
        let _ = writeln!(
            out,
            "{:<15} {:>10} {:<12} {:>10} {:>24} {:>7} {:<18} {}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        );
    }
    for (n, layer) in layers.iter().enumerate().filter(|_| !vs_run) {
        let line = format!("# [{}] {layer}", n + 1);
        let _ = writeln!(out, "{}", crate::term::wrap_to_terminal(&line, "#     "));
    }
    for n in &doc.not_compared {
        let _ = writeln!(out, "# not compared: {n}");
    }
    if let Some(alt) = &doc.without_overrides {
        let _ = writeln!(out, "# {}", alt.sentence);
        let _ = writeln!(out, "#   source: {}", alt.baseline.citation);
    }
    shape_lines(&mut out, doc);
    let _ = writeln!(
        out,
        "{}",
        prose(&format!("# method: {}", doc.method), "#   ")
    );
    let _ = writeln!(out, "{}", prose(&doc.summary, "  "));
    shown(out)
}

/// The curve's shape findings, one `# shape:` line each.
fn shape_lines(out: &mut String, doc: &Comparison) {
    for f in &doc.shape {
        let _ = writeln!(
            out,
            "{}",
            prose(&format!("# shape: {}", f.sentence), "#   ")
        );
    }
}

pub fn comparison_csv(doc: &Comparison) -> Result<String, Failure> {
    crate::render::csv::table(
        &[
            "collective",
            "dtype",
            "size_bytes",
            "placement",
            "measured_busbw_gbps",
            "expected_busbw_gbps",
            "expected_low_gbps",
            "expected_high_gbps",
            "ratio",
            "verdict",
            "layer",
            "nccl_model_busbw_gbps",
            "p_value",
        ],
        doc.points.iter().map(|p| {
            vec![
                p.collective.name().to_string(),
                p.dtype.name().to_string(),
                p.size_bytes.to_string(),
                p.placement.name().to_string(),
                format!("{:.6}", p.measured_busbw_bytes_per_s / 1e9),
                format!("{:.6}", p.expected_busbw_bytes_per_s / 1e9),
                format!("{:.6}", p.expected_low_bytes_per_s / 1e9),
                format!("{:.6}", p.expected_high_bytes_per_s / 1e9),
                format!("{:.4}", p.ratio),
                p.verdict.clone(),
                p.layer.clone(),
                p.nccl_model_busbw_bytes_per_s
                    .map(|v| format!("{:.6}", v / 1e9))
                    .unwrap_or_default(),
                p.p_value.map(|v| format!("{v:.6}")).unwrap_or_default(),
            ]
        }),
    )
    .map(shown)
    .map_err(csv_failure)
}

pub fn comparison_markdown(doc: &Comparison) -> String {
    let mut out = format!(
        "### ncclprobe compare: {}\n\n{}\n\n",
        md_name(&doc.run),
        md(&doc.summary)
    );
    for l in head(doc).iter().skip(1) {
        let _ = writeln!(out, "- {}", md(l));
    }
    if let Some(alt) = &doc.without_overrides {
        let _ = writeln!(out, "- {}", md(&alt.sentence));
    }
    for w in &doc.warnings {
        let _ = writeln!(out, "- warning: {}", md(w));
    }
    for f in &doc.shape {
        let _ = writeln!(out, "- shape: {}", md(&f.sentence));
    }
    if !doc.nic_readings.is_empty() {
        let _ = writeln!(
            out,
            "\n| collective | NICs per node | GB/s per NIC | matches |\n|---|---:|---:|---|"
        );
        for row in reading_rows(doc) {
            let _ = writeln!(out, "| {} |", row.map(|c| md(&c)).join(" | "));
        }
        return shown(out);
    }
    let vs_run = doc.baseline.kind == "run";
    let _ = writeln!(
        out,
        "\n| collective | size | placement | {} | {} | ratio | verdict | {} |\n|---|---:|---|---:|---:|---:|---|---|",
        if vs_run { "after GB/s" } else { "busbw GB/s" },
        if vs_run { "before GB/s" } else { "expected GB/s (band)" },
        if vs_run { "significance" } else { "from" }
    );
    let layers = layer_keys(doc);
    for p in &doc.points {
        let mut c = cells(p, vs_run, &layers).map(|cell| md(&cell));
        if p.verdict != "ok" && p.verdict != "within-noise" {
            c[6] = format!("**{}**", c[6]);
        }
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    if !vs_run && !layers.is_empty() {
        out.push('\n');
        for (n, layer) in layers.iter().enumerate() {
            let _ = writeln!(out, "[{}] {}  ", n + 1, md(layer));
        }
    }
    for n in &doc.not_compared {
        let _ = writeln!(out, "\nNot compared: {}", md(n));
    }
    shown(out)
}

fn value(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(x) if unit == "elements" => fixed(x, 0),
        Some(x) if x.abs() < 1.0 && x != 0.0 => format!("{} {unit}", fixed(x, 4)),
        Some(x) => format!("{} {unit}", fixed(x, 2)),
        None => "-".into(),
    }
}

pub fn qualification_table(q: &Qualification) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# run: {}", q.run);
    if let Some(p) = &q.profile {
        let _ = writeln!(out, "# expectation: {}", p.why);
        let _ = writeln!(out, "# source: {}", p.citation);
    }
    let _ = writeln!(
        out,
        "{:<6} {:<34} {:>14} {:>14}  detail",
        "result", "rule", "measured", "required"
    );
    for r in &q.results {
        let _ = writeln!(
            out,
            "{:<6} {:<34} {:>14} {:>14}  {}",
            if r.passed { "pass" } else { "FAIL" },
            case_name(r),
            value(r.measured, &r.unit),
            value(r.required, &r.unit),
            r.message
        );
    }
    for (c, v) in &q.avg_busbw_bytes_per_s {
        let _ = writeln!(
            out,
            "# {c} nccl-tests \"Avg bus bandwidth\" {} GB/s (shown for familiarity; never a rule)",
            gbps(*v)
        );
    }
    let _ = writeln!(out, "{}", q.summary);
    shown(out)
}

pub fn qualification_csv(q: &Qualification) -> Result<String, Failure> {
    crate::render::csv::table(
        &[
            "rule",
            "collective",
            "size_bytes",
            "measured",
            "required",
            "unit",
            "passed",
            "message",
        ],
        q.results.iter().map(|r| {
            vec![
                r.rule.clone(),
                r.collective
                    .map(|c| c.name().to_string())
                    .unwrap_or_default(),
                r.size_bytes.map(|s| s.to_string()).unwrap_or_default(),
                r.measured.map(|v| v.to_string()).unwrap_or_default(),
                r.required.map(|v| v.to_string()).unwrap_or_default(),
                r.unit.clone(),
                r.passed.to_string(),
                r.message.clone(),
            ]
        }),
    )
    .map(shown)
    .map_err(csv_failure)
}

pub fn qualification_markdown(q: &Qualification) -> String {
    let mut out = format!(
        "### ncclprobe qualify: {} — {}\n\n{}\n\n",
        md_name(&q.run),
        if q.passed { "PASS" } else { "**FAIL**" },
        md(&q.summary)
    );
    if let Some(p) = &q.profile {
        let _ = writeln!(
            out,
            "- expectation: {}\n- source: {}\n",
            md(&p.why),
            md(&p.citation)
        );
    }
    out.push_str("| result | rule | measured | required | detail |\n|---|---|---:|---:|---|\n");
    for r in &q.results {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            if r.passed { "pass" } else { "**FAIL**" },
            md(&case_name(r)),
            value(r.measured, &r.unit),
            value(r.required, &r.unit),
            md(&r.message)
        );
    }
    shown(out)
}

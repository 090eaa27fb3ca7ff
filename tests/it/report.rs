//! `ncclprobe report`, `sweep --report` and `doctor` through the real binary: every output is
//! what it says (PNGs decode at 1200x700, SVGs parse, the HTML is one file that asks for
//! nothing outside itself), strings from machines and logs stay text, several runs are told
//! apart by what differs, and the Markdown and the HTML's text are pinned by snapshots.

use crate::common;

use common::{bin, host_sweep, needs_fault_injection, read_record, Machine, Printed};
use ncclprobe::documents::DiagnosisDocument;
use std::path::{Path, PathBuf};

const CSP: &str = "default-src 'none'; img-src data:; style-src 'unsafe-inline'";
const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";
const JS_URL: &str = "javascript:alert(1)";

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// Check an HTML report with plots: `check_page`, and every plot has alt text; returns the
/// visible text.
fn check_html(path: &Path) -> String {
    let text = check_page(path);
    let doc = scraper::Html::parse_document(&std::fs::read_to_string(path).expect("the page"));
    let sel = scraper::Selector::parse("img").expect("selector");
    let imgs: Vec<_> = doc.select(&sel).collect();
    assert!(!imgs.is_empty(), "the report has plots");
    for img in imgs {
        assert!(
            img.value().attr("alt").is_some_and(|a| !a.is_empty()),
            "every plot has alt text"
        );
    }
    text
}

/// Check an HTML report: one document with the CSP, images only as data URIs, nothing that
/// runs or loads; returns the visible text.
fn check_page(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("the HTML report");
    let doc = scraper::Html::parse_document(&text);
    let sel = |s: &str| scraper::Selector::parse(s).expect("selector");
    let csp: Vec<_> = doc
        .select(&sel("meta[http-equiv=\"Content-Security-Policy\"]"))
        .filter_map(|m| m.value().attr("content"))
        .collect();
    assert_eq!(csp, [CSP], "the CSP meta tag");
    assert_eq!(doc.select(&sel("script")).count(), 0, "no script element");
    for el in doc.select(&sel("*")) {
        for (name, value) in el.value().attrs() {
            assert!(
                !name.starts_with("on"),
                "event handler attribute {name}={value}"
            );
            let v = value.trim().to_ascii_lowercase();
            // A citation is a link to its public page: an <a> whose text is its https URL,
            // opened without a referrer. Anything else that loads is refused.
            let citation = el.value().name() == "a"
                && name == "href"
                && v.starts_with("https://")
                && el.text().collect::<String>() == value
                && el.value().attr("rel") == Some("noreferrer noopener");
            if matches!(
                name,
                "src" | "href" | "action" | "formaction" | "srcset" | "poster"
            ) && !citation
            {
                assert!(
                    v.starts_with("data:image/png;base64,") || v.starts_with('#'),
                    "{name}={value}"
                );
            }
            assert!(!v.starts_with("javascript:"), "{name}={value}");
        }
    }
    for tag in ["link", "iframe", "object", "embed", "base", "form"] {
        assert_eq!(doc.select(&sel(tag)).count(), 0, "no <{tag}>");
    }
    doc.root_element().text().collect::<Vec<_>>().join(" ")
}

fn check_png(path: &Path) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(path).expect("png"),
    ));
    let mut reader = decoder.read_info().expect("a PNG that decodes");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("its pixels decode");
    assert_eq!((info.width, info.height), (1200, 700), "{}", path.display());
    let pixels = &buf[..info.buffer_size()];
    assert!(
        pixels.iter().any(|&b| b < 128),
        "{} is not blank",
        path.display()
    );
}

fn check_svg(path: &Path) {
    let text = std::fs::read_to_string(path).expect("svg");
    let doc = roxmltree::Document::parse(&text).expect("an SVG that parses");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(root.attribute("width"), Some("1200"));
    assert_eq!(root.attribute("height"), Some("700"));
    assert!(
        doc.descendants().any(|n| n.has_tag_name("text")),
        "the SVG has titles and labels"
    );
}

/// Versions change with every release; the snapshots keep the rest.
fn redact(text: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    text.replace(&format!("ncclprobe {version}"), "ncclprobe [version]")
}

#[test]
fn a_report_renders_html_markdown_png_and_svg_from_an_imported_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = corpus("nccl-tests/24-2x4090-docker-pcie-very-low-busbw.txt");
    let (html, md, plots) = (
        dir.path().join("r.html"),
        dir.path().join("s.md"),
        dir.path().join("plots"),
    );
    let mut cmd = bin();
    cmd.arg("report")
        .arg(&run)
        .arg("-o")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .arg("--png-dir")
        .arg(&plots);
    cmd.stderr_if(0);
    let text = check_html(&html);
    assert!(
        text.contains("degraded"),
        "the verdict comes first: {text:.300}"
    );
    let pngs: Vec<PathBuf> = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    assert!(pngs.len() >= 3, "busbw, latency and ratio plots: {pngs:?}");
    for png in &pngs {
        check_png(png);
        check_svg(&png.with_extension("svg"));
    }
    let summary = std::fs::read_to_string(&md).unwrap();
    // The Markdown links the PNGs by a path relative to itself, and nothing outside.
    for png in &pngs {
        let name = png.file_name().unwrap().to_string_lossy();
        assert!(
            summary.contains(&format!("](plots/{name})")),
            "{name} linked"
        );
    }
    assert!(!summary.contains("](http"), "no outside link");
    assert!(summary.contains("<details>"), "the full table folds away");
}

#[test]
fn the_gallery_reports_are_pinned() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/gallery");
    for name in [
        "a100-nvswitch-healthy",
        "rtx4090-pcie-degraded",
        "gemma2b-24gb-out-of-memory",
    ] {
        let dir = root.join(name);
        let md = std::fs::read_to_string(dir.join("summary.md")).expect("ci/gallery renders it");
        insta::assert_snapshot!(format!("gallery-{name}-markdown"), redact(&md));
        // A memory plan alone draws no plot.
        let text = if name.contains("memory") {
            check_page(&dir.join("index.html"))
        } else {
            check_html(&dir.join("index.html"))
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        insta::assert_snapshot!(
            format!("gallery-{name}-html-text"),
            redact(&words.join(" "))
        );
    }
}

/// A host record with hostile strings where a machine or a log puts them.
fn hostile_record(dir: &Path) -> PathBuf {
    let path = dir.join("run.json");
    host_sweep(2)
        .args(["-b", "8", "-e", "64K", "-f", "8", "--json"])
        .arg(&path)
        .stdout_if(0);
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    value["backend"]["hosts"] = serde_json::json!([format!("node{SCRIPT}")]);
    value["backend"]["ranks"][0]["host"] = serde_json::json!(format!("node{IMG}"));
    value["backend"]["ranks"][0]["device"] =
        serde_json::json!(format!("0 [0x1b] NVIDIA {SCRIPT} {JS_URL}"));
    value["env"]["NCCL_SOCKET_IFNAME"] = serde_json::json!(format!("{IMG}{JS_URL}"));
    value["notes"] = serde_json::json!([format!("[click]({JS_URL}) {SCRIPT}")]);
    std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    path
}

#[test]
fn strings_from_machines_and_logs_stay_text() {
    let dir = tempfile::tempdir().unwrap();
    let run = hostile_record(dir.path());
    // A log line with the payloads, quoted as a finding's evidence.
    let log = dir.path().join(format!("log{}.txt", "&lt;"));
    let source = std::fs::read_to_string(corpus(
        "nccl-debug/03-h20-k8s-two-pods-same-node-net-socket-fallback.txt",
    ))
    .unwrap();
    let hostile: String = source
        .lines()
        .map(|l| {
            if l.contains("via NET/Socket") {
                format!("{l} {IMG} {SCRIPT} {JS_URL}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&log, hostile).unwrap();
    let diag = dir.path().join("diag.json");
    let out = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(&log)
        .stdout_if(0);
    std::fs::write(&diag, out).unwrap();
    assert!(
        std::fs::read_to_string(&diag).unwrap().contains("onerror"),
        "the payload reached the findings"
    );

    let (html, md) = (dir.path().join("r.html"), dir.path().join("s.md"));
    bin()
        .arg("report")
        .arg(&run)
        .arg(&diag)
        .arg("-o")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .arg("--png-dir")
        .arg(dir.path().join("p"))
        .stderr_if(0);
    let text = check_html(&html);
    // Shown as text, every one of them.
    assert!(text.contains(SCRIPT), "the script tag is visible text");
    assert!(text.contains("onerror=alert(1)"));
    assert!(text.contains(JS_URL));
    let summary = std::fs::read_to_string(&md).unwrap();
    for raw in ["<script", "<img", "](javascript:"] {
        assert!(!summary.contains(raw), "raw `{raw}` in the Markdown");
    }
}

/// Two runs of the same box: one with NCCL_SHM_DISABLE=1 and a third of the bandwidth.
fn forced_and_free(dir: &Path) -> (PathBuf, PathBuf) {
    let free = dir.join("free.json");
    host_sweep(2)
        .args(["-b", "1K", "-e", "1M", "-f", "4", "--json"])
        .arg(&free)
        .stdout_if(0);
    let mut record = read_record(&free);
    record.env.insert("NCCL_SHM_DISABLE".into(), "1".into());
    for p in &mut record.points {
        p.busbw_bytes_per_s /= 3.0;
        p.algbw_bytes_per_s /= 3.0;
        p.time_s *= 3.0;
    }
    record.headlines = ncclprobe::model::headlines(&record.points);
    let forced = dir.join("forced.json");
    std::fs::write(&forced, serde_json::to_vec(&record).unwrap()).unwrap();
    (forced, free)
}

#[test]
fn several_runs_are_overlaid_and_labelled_by_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let (forced, free) = forced_and_free(dir.path());
    let html = dir.path().join("r.html");
    let md = bin()
        .arg("report")
        .arg(&forced)
        .arg(&free)
        .arg("-o")
        .arg(&html)
        .arg("--markdown")
        .arg("-")
        .stdout_if(0);
    let text = check_html(&html);
    assert!(
        text.contains("NCCL_SHM_DISABLE=1") && text.contains("NCCL_SHM_DISABLE unset"),
        "{text:.2000}"
    );
    let summary = String::from_utf8(md).unwrap();
    let first = summary
        .lines()
        .find(|l| l.starts_with("1. "))
        .expect("a first recommendation");
    assert!(
        first.contains("unset NCCL\\_SHM\\_DISABLE") || first.contains("unset NCCL_SHM_DISABLE"),
        "{first}"
    );
    assert!(
        first.contains("measured") && first.contains("3.0x"),
        "{first}"
    );
}

#[test]
fn sweep_report_measures_and_renders_in_one_go() {
    let dir = tempfile::tempdir().unwrap();
    let (html, md, json) = (
        dir.path().join("r.html"),
        dir.path().join("s.md"),
        dir.path().join("run.json"),
    );
    host_sweep(2)
        .args(["-b", "8", "-e", "256K", "-f", "4", "--json"])
        .arg(&json)
        .arg("--report")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .stdout_if(0);
    check_html(&html);
    let summary = std::fs::read_to_string(&md).unwrap();
    assert!(summary.contains("run.json (measured)"), "{summary}");
    // One path for two outputs is refused before anything is measured.
    let same = dir.path().join("same");
    host_sweep(2)
        .arg("--report")
        .arg(&same)
        .arg("--markdown")
        .arg(&same)
        .stderr_if(2);
    assert!(!same.exists());
}

#[test]
fn a_report_names_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let baselines = dir.path().join("b.json");
    std::fs::write(
        &baselines,
        bin().args(["baselines", "--format", "json"]).stdout_if(0),
    )
    .unwrap();
    let err = bin().arg("report").arg(&baselines).stderr_if(2);
    assert!(String::from_utf8_lossy(&err).contains("shipped expectations"));
    let log = dir.path().join("train.log");
    std::fs::write(&log, "epoch 1 loss 0.53\nepoch 2 loss 0.41\n").unwrap();
    let err = bin().arg("report").arg(&log).stderr_if(2);
    assert!(String::from_utf8_lossy(&err).contains("diagnose --from"));
}

/// Seed 004's setup (Gemma-2B, ZeRO-3, fp16, FlashAttention, sequence 1024, batch 1, on a
/// 23.63 GiB GPU and a 64 GB host) with `extra` flags: its memory plan as JSON, written to
/// `name` in `dir`. `code` is the exit status the plan must give (3: it does not fit).
fn memory_plan(dir: &Path, name: &str, extra: &[&str], code: i32) -> PathBuf {
    let json = bin()
        .args([
            "simulate",
            "memory",
            "--model",
            "gemma-2b",
            "--strategy",
            "zero3",
            "--precision",
            "fp16",
            "--flash-attention",
            "--seq-len",
            "1024",
            "--micro-batch",
            "1",
            "--gpu-memory-gib",
            "23.63",
            "--host-memory-gb",
            "64",
            "--expandable-segments",
            "--format",
            "json",
        ])
        .args(extra)
        .stdout_if(code);
    let path = dir.join(name);
    std::fs::write(&path, json).unwrap();
    path
}

/// `report` on `inputs`: the HTML page's visible text (checked as every page is) and the
/// Markdown summary.
fn report_of(dir: &Path, inputs: &[&Path]) -> (String, String) {
    let (html, md) = (dir.join("r.html"), dir.join("s.md"));
    bin()
        .arg("report")
        .args(inputs)
        .arg("-o")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .stderr_if(0);
    (check_page(&html), std::fs::read_to_string(&md).unwrap())
}

#[test]
fn memory_plans_are_rendered_and_one_short_of_its_gpu_degrades_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let short = memory_plan(dir.path(), "short.json", &[], 3);
    let fits = memory_plan(dir.path(), "fits.json", &["--offload-optimizer", "cpu"], 0);

    let (text, summary) = report_of(dir.path(), &[&short, &fits]);
    assert!(
        summary.starts_with("### ncclprobe report: **DEGRADED**"),
        "{summary}"
    );
    assert!(
        summary.contains("the memory plan of gemma-2b (full-shard (zero-3) on 1 GPU, seq 1024 x micro-batch 1) on its GPU: does NOT fit: 53.16 GiB needed, 23.63 GiB there, 29.53 GiB short (modelled)"),
        "the verdict names the shortfall: {summary}"
    );
    // Both plans have their section, each figure with its source.
    assert_eq!(
        summary
            .matches("#### Memory plan: gemma-2b on 1 GPU")
            .count(),
        2,
        "{summary}"
    );
    assert!(summary.contains("- **GPU (modelled)**: does NOT fit: 53.16 GiB needed"));
    assert!(
        summary.contains("- **GPU (modelled)**: fits: 14.70 GiB of 23.63 GiB, 8.93 GiB to spare")
    );
    // The cheapest change that fits is the plan's first, and the report's recommendation.
    assert!(
        summary.contains("1. **fits**: ZeRO-3 with the optimizer offloaded to CPU: GPU 14.70 GiB (8.93 GiB to spare) (modelled)"),
        "{summary}"
    );
    let first = summary
        .lines()
        .find(|l| l.starts_with("1. "))
        .expect("a first recommendation");
    assert!(
        first.contains("make gemma-2b fit in memory: ZeRO-3 with the optimizer offloaded to CPU, the cheapest change in its memory plan that fits")
            && first.contains("(from simulate memory)"),
        "{first}"
    );
    assert!(
        summary.contains("short.json (memory plan)") || text.contains("short.json (memory plan)")
    );
    // The page says the same, as text.
    for said in [
        "Memory plan",
        "gemma-2b on 1 GPU",
        "does NOT fit: 53.16 GiB needed, 23.63 GiB there, 29.53 GiB short",
        "fits: 14.70 GiB of 23.63 GiB",
        "ZeRO-3 with the optimizer offloaded to CPU",
        "optimizer states",
        "short.json (memory plan)",
    ] {
        assert!(text.contains(said), "`{said}` on the page: {text:.3000}");
    }

    // The plan that fits, alone: healthy, and it says why.
    let (_, summary) = report_of(dir.path(), &[&fits]);
    assert!(
        summary.starts_with("### ncclprobe report: **HEALTHY**"),
        "{summary}"
    );
    assert!(summary.contains("fits: 14.70 GiB of 23.63 GiB, 8.93 GiB to spare (modelled)"));
    assert!(!summary.contains("#### Recommendations"), "{summary}");
}

#[test]
fn a_memory_plan_held_against_an_out_of_memory_error_shows_what_was_observed() {
    let dir = tempfile::tempdir().unwrap();
    let oom = dir.path().join("oom.txt");
    std::fs::write(
        &oom,
        "CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.63 GiB of which 243.94 MiB is free. Including non-PyTorch memory, this process has 22.66 GiB memory in use.\n",
    )
    .unwrap();
    let oom_flag = oom.to_string_lossy().into_owned();
    let plan = memory_plan(
        dir.path(),
        "seed-004.json",
        &[
            "--offload-optimizer",
            "cpu",
            "--frozen-params",
            "5e8",
            "--oom",
            &oom_flag,
        ],
        3,
    );
    let summary = String::from_utf8(bin().arg("report").arg(&plan).stdout_if(0)).unwrap();
    for said in [
        "Observed out-of-memory error (",
        "- GPU 0 failed to allocate 500.00 MiB (observed) with 243.94 MiB (observed) free: 256.06 MiB (observed) short at that allocation",
        "- the process held 22.66 GiB (observed)",
        "the allocation is the 16-bit logits",
        "the model counts 11.13 GiB (modelled) there: 11.53 GiB (observed less modelled)",
        "4.29 GiB short at the peak (modelled)",
        "- **GPU (modelled, with the observed unexplained memory)**: does NOT fit: 27.92 GiB needed, 23.63 GiB there, 4.29 GiB short",
        "1. **fits**: --logits fused",
        "1. make gemma-2b fit in memory: --logits fused (a chunked or fused cross entropy), the cheapest change in its memory plan that fits",
    ] {
        assert!(summary.contains(said), "`{said}` in the summary:\n{summary}");
    }
    // The verdict carries the unexplained memory the error showed.
    assert!(
        summary.contains("4.29 GiB short (modelled with the 11.53 GiB the observed out-of-memory error leaves unexplained)"),
        "{summary}"
    );
}

#[test]
fn a_memory_plans_strings_stay_text() {
    let dir = tempfile::tempdir().unwrap();
    let plan = memory_plan(dir.path(), "plan.json", &[], 3);
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    value["model"]["name"] = serde_json::json!(format!("gemma{SCRIPT}"));
    value["model"]["source"] = serde_json::json!(format!("config{IMG}"));
    value["notes"] = serde_json::json!([format!("[click]({JS_URL}) {SCRIPT}")]);
    std::fs::write(&plan, serde_json::to_vec(&value).unwrap()).unwrap();
    let (text, summary) = report_of(dir.path(), &[&plan]);
    assert!(
        text.contains(&format!("gemma{SCRIPT} on 1 GPU")),
        "the name is visible text: {text:.2000}"
    );
    assert!(text.contains("onerror=alert(1)"));
    assert!(text.contains(JS_URL));
    for raw in ["<script", "<img", "[click](javascript:"] {
        assert!(!summary.contains(raw), "raw `{raw}` in the Markdown");
    }
    // Each one escaped where it is shown: the heading, the model line, the notes.
    assert!(
        summary.contains("#### Memory plan: gemma&lt;script>alert(1)&lt;/script> on 1 GPU"),
        "{summary}"
    );
    assert!(
        summary.contains("config\">&lt;img src=x onerror=alert(1)>"),
        "{summary}"
    );
    assert!(
        summary.contains("- note: \\[click\\](javascript:alert(1)) &lt;script>"),
        "{summary}"
    );
}

/// `doctor` reads this machine: what it finds there must be the fixture's, not the host's (a
/// GPU host's GPUs, NICs, kernel command line, /dev/shm or NCCL variables would become
/// findings and change the verdict). `cuda` and `nvml` name the libraries it may open.
fn isolated_doctor(
    machine: &Machine,
    cuda: &std::ffi::OsStr,
    nvml: &std::ffi::OsStr,
) -> std::process::Command {
    needs_fault_injection();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    common::without_host_settings(&mut cmd);
    machine.apply(&mut cmd);
    cmd.env("NCCLPROBE_CUDA_DRIVER", cuda)
        .env("NCCLPROBE_NVML_LIBRARY", nvml);
    cmd
}

/// The diagnosis doctor wrote, with the live facts the fixture gave it.
fn doctor_diagnosis(out: &Path) -> DiagnosisDocument {
    let text = std::fs::read_to_string(out.join("diagnosis.json")).unwrap();
    let doc: DiagnosisDocument = serde_json::from_str(&text).unwrap();
    let live = doc
        .facts
        .live
        .as_ref()
        .expect("doctor reads the live machine");
    assert_eq!(
        live.kernel.as_deref(),
        Some("Linux version 6.1.0-fixture (a test's /proc) #1 SMP"),
        "/proc is the fixture's"
    );
    assert_eq!(live.cpu.as_deref(), Some("GenuineIntel: fixture CPU"));
    assert!(
        live.nics.is_empty() && live.infiniband.is_empty(),
        "{live:?}"
    );
    assert_eq!(live.devshm_bytes, None, "/dev is the fixture's");
    doc
}

#[test]
fn doctor_runs_end_to_end_on_the_host_backend() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let machine = Machine::bare();
    let mut cmd = isolated_doctor(&machine, "none".as_ref(), "none".as_ref());
    cmd.args([
        "doctor",
        "--backend",
        "host",
        "-e",
        "1M",
        "--model",
        "resnet18",
        "--compute-ms",
        "40",
        "-o",
    ])
    .arg(&out)
    .env("NCCL_SHM_DISABLE", "1");
    let output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("report: "), "{stdout}");
    assert!(
        stderr.contains("doctor [1/6] topology"),
        "progress on stderr: {stderr}"
    );
    for file in [
        "index.html",
        "summary.md",
        "run.json",
        "diagnosis.json",
        "simulation.json",
        "busbw-all_reduce.png",
        "busbw-all_reduce.svg",
    ] {
        assert!(out.join(file).exists(), "{file}: {stderr}");
    }
    let run = read_record(&out.join("run.json"));
    assert_eq!(run.backend.name, "host");
    check_html(&out.join("index.html"));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("sweep ") && summary.contains(" s"),
        "each part's time: {summary}"
    );
    // The host backend moves no data through NCCL: nothing to measure without the override.
    assert!(!out.join("run-without-overrides.json").exists());
    let diagnosis = doctor_diagnosis(&out);
    let live = diagnosis.facts.live.as_ref().unwrap();
    assert_eq!((live.nvml_gpus, live.sysfs_gpus), (None, 0), "{live:?}");
    // NCCL_SHM_DISABLE=1 in doctor's environment is a finding of its diagnosis.
    let ids: Vec<&str> = diagnosis.findings.iter().map(|f| f.id.as_str()).collect();
    assert!(ids.contains(&"env.shm-disabled"), "{ids:?}");
    // The simulation is the one asked for, on the measured world.
    let simulation: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("simulation.json")).unwrap())
            .unwrap();
    assert_eq!(simulation["kind"], "simulation");
    assert_eq!(simulation["simulator"], "ddp");
    assert_eq!(simulation["model"]["name"], "resnet18");
    assert_eq!(simulation["world_size"], run.backend.nranks);
    assert_eq!(simulation["batch_size"], 32);
    assert!(
        simulation["link"]
            .as_str()
            .is_some_and(|l| l.contains("run.json")),
        "the measured curve: {}",
        simulation["link"]
    );
    assert!(simulation["configurations"]
        .as_array()
        .is_some_and(|c| !c.is_empty()));
    assert!(
        live.nvml_error
            .as_deref()
            .is_some_and(|e| e.contains("NCCLPROBE_NVML_LIBRARY=none")),
        "{live:?}"
    );
}

#[test]
fn doctor_on_the_gpu_test_double() {
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2", "libnvidia-ml.so.1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let machine = Machine::bare();
    let output = isolated_doctor(
        &machine,
        libs.path().join("libcuda.so.1").as_os_str(),
        libs.path().join("libnvidia-ml.so.1").as_os_str(),
    )
    .args([
        "doctor",
        "--backend",
        "nccl",
        "-e",
        "64K",
        "-f",
        "16",
        "--point-budget",
        "0.05",
        "-o",
    ])
    .arg(&out)
    .env("LD_LIBRARY_PATH", libs.path())
    .env("NCCL_P2P_DISABLE", "1")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // NCCL_P2P_DISABLE=1 is a warning: degraded, not failed, on any machine.
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("DEGRADED: "),
        "{stderr}"
    );
    let run = read_record(&out.join("run.json"));
    assert_eq!(run.backend.name, "nccl", "{stderr}");
    let double = std::fs::canonicalize(common::test_double_lib()).unwrap();
    assert_eq!(
        run.backend.library_versions["cuda-driver"],
        format!("12.4 ({})", double.display())
    );
    let diagnosis = doctor_diagnosis(&out);
    let live = diagnosis.facts.live.as_ref().unwrap();
    assert_eq!(live.nvml_gpus, Some(2), "{live:?}");
    assert_eq!(live.driver_version.as_deref(), Some("535.00 (test double)"));
    let ids: Vec<&str> = diagnosis.findings.iter().map(|f| f.id.as_str()).collect();
    assert!(ids.contains(&"env.p2p-disabled"), "{ids:?}");
    assert_eq!(
        run.env.get("NCCL_P2P_DISABLE").map(String::as_str),
        Some("1")
    );
    // NCCL_P2P_DISABLE=1 forces a slower path: the same sweep is measured without it.
    let free = read_record(&out.join("run-without-overrides.json"));
    assert!(!free.env.contains_key("NCCL_P2P_DISABLE"), "{stderr}");
    let text = check_html(&out.join("index.html"));
    assert!(
        text.contains("NCCL_P2P_DISABLE=1") && text.contains("NCCL_P2P_DISABLE unset"),
        "{text:.3000}"
    );
}

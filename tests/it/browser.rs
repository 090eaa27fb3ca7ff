//! The HTML reports in a real browser: Debian's Chromium, headless, driven through the DevTools
//! protocol. Each gallery report, and a report full of hostile strings, must load with no
//! console error, no dialog, no request other than the page itself and `data:` images, every
//! image decoded, and a screenshot that is not blank. Screenshots are kept under
//! `target/browser-screenshots/` for CI artifacts. A machine without Chromium fails here with
//! the command that installs it (`ci/test` does).

use crate::common;

use common::{bin, host_sweep, Printed};
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::{Network, Page};
use headless_chrome::{Browser, LaunchOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn chromium() -> PathBuf {
    let found = ["CHROMIUM", "CHROME"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(
            [
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
                "/usr/bin/google-chrome",
            ]
            .map(PathBuf::from),
        )
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!("no Chromium found (set CHROMIUM=/path, or `apt-get install chromium`; ci/test installs it)")
    })
}

#[derive(Default)]
struct Seen {
    console_errors: Vec<String>,
    requests: Vec<String>,
    dialogs: Vec<String>,
}

/// Open `page` and check it; the screenshot is written beside the others.
/// `plots`: whether the page must show plots (a report of a memory plan alone draws none).
/// The checks; the page's citation links, counted.
fn check_in_browser(browser: &Browser, page: &Path, shot_name: &str, plots: bool) -> usize {
    let url = format!(
        "file://{}",
        page.canonicalize().expect("the report").display()
    );
    let tab = browser.new_tab().expect("a tab");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = Arc::clone(&seen);
    tab.add_event_listener(Arc::new(move |event: &Event| {
        let mut s = sink.lock().expect("events");
        match event {
            Event::RuntimeConsoleAPICalled(e)
                if format!("{:?}", e.params.Type)
                    .to_lowercase()
                    .contains("error") =>
            {
                s.console_errors.push(format!("{:?}", e.params.args));
            }
            Event::LogEntryAdded(e)
                if format!("{:?}", e.params.entry.level)
                    .to_lowercase()
                    .contains("error") =>
            {
                s.console_errors.push(e.params.entry.text.clone());
            }
            Event::RuntimeExceptionThrown(e) => s.console_errors.push(format!("{:?}", e.params)),
            Event::NetworkRequestWillBeSent(e) => s.requests.push(e.params.request.url.clone()),
            Event::PageJavascriptDialogOpening(e) => s.dialogs.push(e.params.message.clone()),
            _ => {}
        }
    }))
    .expect("listener");
    tab.enable_log().expect("Log domain");
    tab.enable_runtime().expect("Runtime domain");
    tab.call_method(Network::Enable {
        max_total_buffer_size: None,
        max_resource_buffer_size: None,
        max_post_data_size: None,
        report_direct_socket_traffic: None,
        enable_durable_messages: None,
    })
    .expect("Network domain");
    tab.navigate_to(&url)
        .expect("navigate")
        .wait_until_navigated()
        .expect("loaded");
    let widths = tab
        .evaluate(
            "JSON.stringify(Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]))",
            false,
        )
        .expect("evaluate")
        .value
        .and_then(|v| v.as_str().map(String::from))
        .expect("a JSON string");
    let images: Vec<(bool, u32, u32)> = serde_json::from_str(&widths).expect("image sizes");
    assert_eq!(
        !images.is_empty(),
        plots,
        "{}: images {images:?}",
        page.display()
    );
    for (complete, w, h) in &images {
        assert!(
            *complete && *w == 1200 && *h == 700,
            "{}: an image did not decode: {images:?}",
            page.display()
        );
    }
    // The first screen: a verdict word, its reason, no horizontal scroll at 1400 px; the
    // links a page has are its citations.
    let first = tab
        .evaluate(
            "JSON.stringify([document.querySelector('.verdict .state').innerText, document.querySelector('.verdict .why').innerText, document.documentElement.scrollWidth, window.innerWidth, document.querySelectorAll('a[href^=\"https://\"]').length])",
            false,
        )
        .expect("evaluate")
        .value
        .and_then(|v| v.as_str().map(String::from))
        .expect("a JSON string");
    let (word, why, scroll, inner, links): (String, String, u32, u32, usize) =
        serde_json::from_str(&first).expect("the first screen");
    // A report's verdict, or a fleet page's ("Nothing to drain", "Drain 3 of 48 nodes",
    // upper-cased by the page's style).
    let word = word.trim().to_uppercase();
    assert!(
        [
            "HEALTHY",
            "DEGRADED",
            "FAILED",
            "NOT JUDGED",
            "NOTHING TO DRAIN"
        ]
        .contains(&word.as_str())
            || (word.starts_with("DRAIN ") && word.ends_with(" NODES")),
        "{}: verdict word {word:?}",
        page.display()
    );
    assert!(
        !why.trim().is_empty(),
        "{}: no reason beside {word}",
        page.display()
    );
    assert!(
        scroll <= inner,
        "{}: the page scrolls sideways ({scroll} px wide in a {inner} px window)",
        page.display()
    );
    let png = tab
        .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    std::fs::write(dir.join(format!("{shot_name}.png")), &png).expect("write screenshot");
    assert!(
        pixel_variance(&png) > 100.0,
        "{}: the screenshot is blank",
        page.display()
    );
    // Events may trail the load by a moment.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let s = seen.lock().expect("events");
    assert!(
        s.console_errors.is_empty(),
        "{}: console errors {:?}",
        page.display(),
        s.console_errors
    );
    assert!(
        s.dialogs.is_empty(),
        "{}: dialogs {:?}",
        page.display(),
        s.dialogs
    );
    for r in &s.requests {
        assert!(
            r == &url || r.starts_with("data:"),
            "{}: requested {r}",
            page.display()
        );
    }
    let _ = tab.close(true);
    links
}

/// Variance of the grey levels of a PNG: near 0 for a blank page.
fn pixel_variance(png_bytes: &[u8]) -> f64 {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("screenshot decodes");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("frame");
    let channels = info.color_type.samples();
    let grey: Vec<f64> = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|px| px.iter().take(3).map(|&v| v as f64).sum::<f64>() / 3.0)
        .collect();
    let mean = grey.iter().sum::<f64>() / grey.len() as f64;
    grey.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / grey.len() as f64
}

fn launch() -> Browser {
    Browser::new(LaunchOptions {
        headless: true,
        sandbox: false,
        path: Some(chromium()),
        window_size: Some((1400, 2000)),
        ..Default::default()
    })
    .expect("Chromium starts headless")
}

#[test]
fn gallery_reports_load_cleanly_in_chromium() {
    let browser = launch();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/gallery");
    for name in [
        "a100-nvswitch-healthy",
        "rtx4090-pcie-degraded",
        "gemma2b-24gb-out-of-memory",
    ] {
        let plots = !name.contains("memory");
        let links = check_in_browser(&browser, &root.join(name).join("index.html"), name, plots);
        // The two pages held against an expectation cite it (nccl-tests#149, nccl#1603).
        assert!(
            name.contains("memory") || links > 0,
            "{name}: no citation is a link"
        );
    }
}

#[test]
fn the_fleet_page_reads_at_a_glance_in_chromium() {
    use ncclprobe::history::synthetic::{self, Fault, Spec};
    use ncclprobe::history::{Location, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("fleet.sqlite");
    let spec = Spec {
        nodes: 48,
        runs: 6,
        sizes: 20,
        samples: 12,
        seed: 7,
        planted: vec![(5, Fault::SlowLarge), (30, Fault::Drifting)],
        matrices: false,
    };
    let mut s = Store::open(&Location::parse(store.to_str().unwrap()).unwrap()).unwrap();
    for e in synthetic::entries(&spec) {
        s.add(&e).unwrap();
    }
    drop(s);
    let page = dir.path().join("fleet.html");
    crate::common::bin()
        .args(["fleet", "--history"])
        .arg(&store)
        .arg("--html")
        .arg(&page)
        .assert()
        .code(3);
    let browser = launch();
    check_in_browser(&browser, &page, "fleet", false);
}

#[test]
fn hostile_strings_run_nothing_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.json");
    host_sweep(2)
        .args(["-b", "8", "-e", "4K", "-f", "8", "--json"])
        .arg(&run)
        .stdout_if(0);
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
    let payload = "<script>alert(1)</script>\"><img src=x onerror=alert(1)>javascript:alert(1)";
    value["backend"]["hosts"] = serde_json::json!([payload]);
    value["backend"]["ranks"][0]["host"] = serde_json::json!(payload);
    value["backend"]["ranks"][0]["device"] = serde_json::json!(payload);
    value["env"]["NCCL_SOCKET_IFNAME"] = serde_json::json!(payload);
    value["notes"] = serde_json::json!([payload]);
    std::fs::write(&run, serde_json::to_vec(&value).unwrap()).unwrap();
    let html = dir.path().join("hostile.html");
    bin()
        .arg("report")
        .arg(&run)
        .arg("-o")
        .arg(&html)
        .stderr_if(0);
    check_in_browser(&launch(), &html, "hostile", true);
}

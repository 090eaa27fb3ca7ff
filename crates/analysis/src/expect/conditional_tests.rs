use super::*;
use crate::import::nccl_tests::text_from;
use crate::import::text::Input;

/// An nccl-tests all_reduce log of `nodes` x 8 ranks whose large sizes run at `busbw` GB/s.
fn run(nodes: usize, busbw: f64) -> RunRecord {
    let n = nodes * 8;
    let mut text = String::from("# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n");
    for r in 0..n {
        text += &format!(
            "#  Rank {r:2} Group  0 Pid {:6} on node-{} device {:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3\n",
            1000 + r,
            r / 8,
            r % 8,
            0x19 + r % 8
        );
    }
    text += "#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
    let factor = 2.0 * (n as f64 - 1.0) / n as f64;
    for size in [1u64 << 30, 1 << 31, 1 << 32] {
        let algbw = busbw / factor;
        let us = size as f64 / (algbw * 1e9) * 1e6;
        text += &format!(
            "{size:>12}  {:>12}     float     sum      -1  {us:7.1}  {algbw:6.2}  {busbw:6.2}       0  {us:7.1}  {algbw:6.2}  {busbw:6.2}       0\n",
            size / 4
        );
    }
    text += "# Avg bus bandwidth    : 180\n";
    let input = Input::from_reader("run.txt", Box::new(std::io::Cursor::new(text))).unwrap();
    text_from(input, &mut |_| {}).unwrap()
}

fn situation(r: &RunRecord) -> Situation {
    Situation::of_record(r, None, None)
}

#[test]
fn the_per_nic_rule_names_the_line_rate_a_figure_matches() {
    // nccl-tests#119: 24 GB/s per 200G NIC, 12 per 100G; #267: CX-7 NDR 48-49.
    assert_eq!(describe(45.0, false), "NDR 400G near line rate");
    assert_eq!(describe(22.5, false), "HDR 200G near line rate");
    assert_eq!(
        describe(11.5, false),
        "100G (EDR, HDR100, 100GbE) near line rate"
    );
    assert_eq!(describe(30.0, false), "62% of NDR 400G");
    assert!(describe(30.0, true).contains("1.25x HDR 200G (possible only on 2 nodes"));
    assert!(describe(180.0, false).starts_with("1.88x XDR 800G: above any single NIC"));
}

#[test]
fn four_nodes_at_180_read_as_ndr_with_4_nics_or_hdr_with_8() {
    // The example of the issue: "180 GB/s over 4 nodes = 45 GB/s per NIC with 4 NICs: NDR 400
    // near line rate; 22.5 GB/s with 8: HDR 200 near line rate".
    let r = run(4, 180.0);
    let s = situation(&r);
    assert_eq!(s.nnodes, 4);
    assert!(needed(&s));
    let (rows, sentence, notes) = readings(&r, &s);
    let by_count: Vec<(usize, String)> = rows
        .iter()
        .map(|r| {
            (
                r.nics_per_node,
                format!("{:.1} {}", r.per_nic_gbps, r.matches),
            )
        })
        .collect();
    assert_eq!(
        by_count,
        [
            (1, "180.0 1.87x XDR 800G: above any single NIC's line rate (only SHARP/CollNet, NVLS across nodes, or 2 nodes' tree reach that)".to_string()),
            (2, "90.0 XDR 800G near line rate".to_string()),
            (4, "45.0 NDR 400G near line rate".to_string()),
            (8, "22.5 HDR 200G near line rate".to_string()),
        ]
    );
    assert!(
        sentence.starts_with("all_reduce 180.0 GB/s busbw (1 GiB and up) over 4 nodes"),
        "{sentence}"
    );
    assert!(
        sentence.contains("one fact settles it: the NICs per node and their speed"),
        "{sentence}"
    );
    assert!(notes.is_empty());
    let doc = comparison("run.txt", &r, &s);
    assert_eq!(doc.baseline.kind, "conditional");
    assert!(doc.points.is_empty());
    assert_eq!(doc.nic_readings.len(), 4);
}

#[test]
fn two_nodes_say_they_are_no_fabric_test_and_stated_nics_settle_it() {
    let r = run(2, 139.56);
    let mut s = situation(&r);
    let (_, _, notes) = readings(&r, &s);
    assert!(notes[0].starts_with("2 nodes are not a fabric test"));
    // Stating the NICs removes the condition; the count alone does not.
    s.state(crate::expect::hardware::Hardware::parse("8 NICs x NDR").unwrap());
    assert!(!needed(&s));
    let mut only_count = situation(&r);
    only_count.log_nics = (0..8).map(|i| format!("mlx5_{i}:1/IB")).collect();
    assert!(needed(&only_count));
    let (rows, sentence, _) = readings(&r, &only_count);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].nics_per_node, 8);
    assert!(
        sentence.contains("the NICs' speed settles it"),
        "{sentence}"
    );
}

#[test]
fn one_node_needs_no_condition() {
    let r = run(1, 400.0);
    assert!(!needed(&situation(&r)));
}

#[test]
fn h100_nodes_with_nics_unknown_are_judged_against_the_hgx_design_and_asked() {
    // 90 GB/s across two 8x H100 nodes: far below HGX H100's 8 x 400G (384 GB/s), and
    // exactly what 2 such NICs give (2 x 48 x 0.94).
    let r = run(2, 90.0);
    let s = situation(&r);
    let a = assumed(&r, &s).expect("an HGX H100 design");
    assert_eq!(
        (
            a.design.as_str(),
            a.verdict.as_str(),
            a.consistent_with_nics
        ),
        ("hgx-h100-8", "far-below", Some(2))
    );
    assert!((a.expected_gbps - 384.0).abs() < 0.5, "{}", a.expected_gbps);
    assert!(
        a.sentence
            .contains("far below if these are standard DGX H100 / HGX H100 8-GPU nodes (8 x 400G)")
            && a.sentence
                .contains("consistent only with 2 NICs per node at 400G — which do you have?"),
        "{}",
        a.sentence
    );
    let doc = comparison("run.txt", &r, &s);
    assert!(doc.summary.starts_with(&a.sentence), "{}", doc.summary);
    assert_eq!(doc.nic_readings.len(), 4, "the conditional table stays");
    assert!(
        !doc.judged(),
        "an assumption is not a verdict a gate passes on"
    );

    // At the design's rate on 4 nodes: consistent; above it on 2 nodes: the tree, said.
    let ok = run(4, 370.0);
    assert_eq!(assumed(&ok, &situation(&ok)).unwrap().verdict, "consistent");
    let two = run(2, 470.0);
    let a = assumed(&two, &situation(&two)).unwrap();
    assert_eq!(a.verdict, "above-two-nodes");
    assert!(
        a.sentence.contains("not a fabric baseline"),
        "{}",
        a.sentence
    );
    // Between: below, with no NIC count that fits at 400G.
    let mid = run(4, 250.0);
    let a = assumed(&mid, &situation(&mid)).unwrap();
    assert_eq!(
        (a.verdict.as_str(), a.consistent_with_nics),
        ("below", None)
    );
    assert!(
        a.sentence.contains("how many NICs per node"),
        "{}",
        a.sentence
    );
}

#[test]
fn no_design_is_assumed_when_the_nics_are_known_or_the_node_matches_none() {
    let r = run(2, 90.0);
    let mut stated = situation(&r);
    stated.state(crate::expect::hardware::Hardware::parse("2x NDR").unwrap());
    assert!(assumed(&r, &stated).is_none());
    let mut pcie = situation(&r);
    pcie.gpu_name = Some("NVIDIA H100 PCIe".into());
    assert!(assumed(&r, &pcie).is_none());
    assert!(comparison("run.txt", &r, &pcie).assumed.is_none());
}

use super::*;

#[test]
fn the_forms_users_write_parse_to_the_same_facts() {
    let hw = Hardware::parse("2 nodes x 8 H100 SXM, 8x400G IB per node").unwrap();
    assert_eq!(hw.nodes, Some(2));
    assert_eq!(hw.gpus_per_node, Some(8));
    assert_eq!(hw.gpu.as_deref(), Some("H100 SXM"));
    assert_eq!(hw.nics_per_node, Some(8));
    assert_eq!(hw.nic_gbps, Some(400.0));
    assert_eq!(hw.nic_kind, Some(NicKind::Infiniband));
    for text in [
        "2 nodes; 8x H100 SXM; 8 x 400 Gb/s InfiniBand per node",
        "8 x H100 SXM GPUs, 2 nodes, 8x NDR",
        "2 NODES × 8 h100 sxm, 8 NICs 400gbps ib",
    ] {
        let other = Hardware::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(other, hw, "{text}");
    }
    let efa = Hardware::parse("4 nodes, 32x100G EFA per node, NVSwitch").unwrap();
    assert_eq!(
        (
            efa.nodes,
            efa.nics_per_node,
            efa.nic_gbps,
            efa.nic_kind,
            efa.intra
        ),
        (
            Some(4),
            Some(32),
            Some(100.0),
            Some(NicKind::Efa),
            Some(Intra::Nvswitch)
        )
    );
    assert_eq!(Hardware::parse("1 node").unwrap().nodes, Some(1));
    assert_eq!(Hardware::parse("2x HDR").unwrap().nic_gbps, Some(200.0));
    assert_eq!(
        Hardware::parse("4 x RTX 4090 pcie").unwrap().intra,
        Some(Intra::Pcie)
    );
}

#[test]
fn anything_else_is_refused_showing_the_accepted_forms() {
    for (text, why) in [
        ("", "nothing stated"),
        ("two nodes", "must start with a count"),
        ("8x400G", "kind is missing"),
        ("8x IB", "speed is missing"),
        ("8x 200G NDR", "contradicts the InfiniBand generation"),
        ("8x400G IB fast", "`fast` is neither"),
        ("2 nodes, 3 nodes", "nodes stated twice"),
        ("8 GPUs", "GPU model is missing"),
        ("8 fast GPUs", "not a GPU model"),
        ("8x400G IB per rack", "`per` must be `per node`"),
        ("NVSwitch, PCIe", "two different links"),
    ] {
        let e = Hardware::parse(text).unwrap_err();
        assert!(e.contains(why), "{text:?}: {e}");
        assert!(
            e.contains("8x400G IB per node"),
            "{text:?}: the forms are shown: {e}"
        );
    }
}

#[test]
fn facts_are_shown_as_stated() {
    let hw = Hardware::parse("2 nodes x 8 H100, 4x200G RoCE").unwrap();
    assert_eq!(
        hw.facts(),
        [
            "2 node(s)",
            "8 x H100 per node",
            "4 x 200 Gb/s RoCE NICs per node"
        ]
    );
}

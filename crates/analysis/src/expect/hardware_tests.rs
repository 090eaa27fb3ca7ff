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

#[test]
fn an_instance_or_shape_name_stands_for_its_design() {
    let hw = Hardware::parse("2 x p5.48xlarge").unwrap();
    assert_eq!(
        (
            hw.nodes,
            hw.gpus_per_node,
            hw.gpu.as_deref(),
            hw.nics_per_node,
            hw.nic_gbps,
            hw.nic_kind
        ),
        (
            Some(2),
            Some(8),
            Some("H100 SXM"),
            Some(32),
            Some(100.0),
            Some(NicKind::Efa)
        )
    );
    assert_eq!(hw.design.as_deref(), Some("aws-p5-48xlarge"));
    assert!(hw.facts()[0].contains("p5.48xlarge"), "{:?}", hw.facts());
    for text in [
        "2x P5-48XLARGE",
        "2 nodes x p5.48xlarge",
        "p5.48xlarge, 2 nodes",
    ] {
        assert_eq!(Hardware::parse(text).unwrap(), hw, "{text}");
    }
    let oci = Hardware::parse("BM.GPU.H100.8").unwrap();
    assert_eq!(
        (oci.nodes, oci.nics_per_node, oci.nic_kind),
        (None, Some(16), Some(NicKind::Roce))
    );
    let azure = Hardware::parse("4 x Standard_ND96isr_H100_v5").unwrap();
    assert_eq!((azure.nodes, azure.nic_gbps), (Some(4), Some(400.0)));
    // A fact that contradicts the design is refused, not silently overwritten.
    assert!(Hardware::parse("p5.48xlarge, 8x400G IB")
        .unwrap_err()
        .contains("NICs per node stated twice"));
}

#[test]
fn a_model_or_name_nobody_knows_is_refused_with_the_nearest_one() {
    let e = Hardware::parse("2 x p5.49xlarge").unwrap_err();
    assert!(
        e.contains("`p5.49xlarge` is neither a GPU model nor an instance"),
        "{e}"
    );
    assert!(e.contains("did you mean `p5.48xlarge`?"), "{e}");
    let e = Hardware::parse("8x H1OO").unwrap_err();
    assert!(e.contains("neither a GPU model"), "{e}");
    // MI300 alone is two GPUs (MI300X, MI300A): asked, not guessed.
    let e = Hardware::parse("8x MI300").unwrap_err();
    assert!(e.contains("did you mean `MI300X`?"), "{e}");
    for known in [
        "8x MI300X",
        "4 x GH200",
        "2x RTX 4090",
        "8x A10G",
        "1x GB10",
    ] {
        assert!(Hardware::parse(known).is_ok(), "{known}");
    }
}

#[test]
fn google_s_tcpx_amd_s_xgmi_and_ipoib_have_their_own_words() {
    let high = Hardware::parse("2 x a3-highgpu-8g").unwrap();
    assert_eq!(high.nic_kind, Some(NicKind::Tcpx));
    assert_eq!(NicKind::Tcpx.link(), "tcpx");
    let mega = Hardware::parse("2 x a3-megagpu-8g").unwrap();
    assert_eq!(
        (mega.nic_kind, mega.nics_per_node),
        (Some(NicKind::Tcpxo), Some(8))
    );
    assert_eq!(
        Hardware::parse("2 nodes, 4x200G GPUDirect-TCPX")
            .unwrap()
            .nic_kind,
        Some(NicKind::Tcpx)
    );
    // IPoIB is NCCL's socket transport on an InfiniBand NIC.
    assert_eq!(
        Hardware::parse("8x200G IPoIB per node").unwrap().nic_kind,
        Some(NicKind::Tcp)
    );
    // An MI300X shape's board is xGMI, said as stated.
    let mi = Hardware::parse("BM.GPU.MI300X.8").unwrap();
    assert_eq!(mi.intra, Some(Intra::Xgmi));
    assert!(
        mi.facts().iter().any(|f| f == "xGMI inside the node"),
        "{:?}",
        mi.facts()
    );
    assert_eq!(
        Hardware::parse("8x MI300X xgmi").unwrap().intra,
        Some(Intra::Xgmi)
    );
}

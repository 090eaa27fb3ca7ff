use super::*;

fn corpus(name: &str) -> String {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/corpus/nccl-dumps")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A made-up two-socket box in NCCL 2.19+'s schema (not a real dump: the layout the rules
/// must catch, written for them): per socket a PCIe switch with two H100s and one 400G
/// mlx5 port, NVLinks to four NVSwitches; the ring graph's channels leave GPU 3 (socket 1) by
/// mlx5_0 (socket 0) although mlx5_1 sits beside it.
pub const TWO_SOCKET: &str =
    include_str!("../../../../tests/fixtures/dumps/two-socket-made-up.xml");

#[test]
fn a_real_one_gpu_dump_and_its_graphs() {
    let sys = from_text("t", &corpus("90-h100x1-vm-nccl2.28.3-topo.xml")).unwrap();
    let s = sys.system.as_ref().unwrap();
    assert_eq!(s.cpus.len(), 1);
    assert_eq!(s.cpus[0].numa, Some(-1));
    assert_eq!(s.gpus.len(), 1);
    let g = &s.gpus[0];
    assert_eq!((g.dev, g.sm, g.gdr), (Some(0), Some(90), Some(true)));
    assert_eq!(g.bus_id.as_deref(), Some("0000:00:06.0"));
    // `link_width="0"` is NCCL saying it could not read the width.
    assert_eq!(g.place.link_width, None);
    assert_eq!(s.nets.len(), 1);
    let n = &s.nets[0];
    assert_eq!(
        (n.name.as_str(), n.speed_mbps, n.gdr),
        ("eth0", Some(10000), Some(false))
    );
    assert!(!n.rdma(), "a socket device (guid 0x0)");
    // The virtio NIC hangs off the CPU: one socket, no switch between.
    assert_eq!(sys.rails.len(), 1);
    assert_eq!(sys.rails[0].path, Some(PathKind::Phb));
    assert_eq!(sys.rails[0].gdr, Some(false));

    let graphs = from_text("t", &corpus("91-h100x1-vm-nccl2.28.3-graph.xml")).unwrap();
    let gs = graphs.graphs.unwrap();
    assert_eq!(gs.graphs.len(), 5);
    let ring = gs.used(PATTERN_RING).next().unwrap();
    assert_eq!((ring.nchannels, ring.channels.len()), (32, 32));
    assert_eq!(ring.bw_intra, Some(60.0), "2.28 still writes speedintra");
    assert_eq!(ring.type_intra.as_deref(), Some("LOC"));
    assert!(gs.searched(PATTERN_NVLS) && gs.used(PATTERN_NVLS).next().is_none());
}

#[test]
fn topology_files_that_list_devices_by_pci_class() {
    // Azure's NDv4 file: GPUs and HDR NICs as PCI functions only, two of each per NUMA node.
    let d = from_text("t", &corpus("01-azure-ndv4-a100x8-8ib-topo.xml")).unwrap();
    let s = d.system.unwrap();
    assert_eq!((s.cpus.len(), s.gpus.len(), s.nets.len()), (4, 8, 8));
    assert!(
        s.nets.iter().all(DumpNet::rdma),
        "class 0x0207 is InfiniBand"
    );
    assert!(d.rails.iter().all(|r| r.path == Some(PathKind::Pix)));
    assert!(d.rails.iter().all(|r| r.gpu_numa == r.net_numa));
    // AWS p5: 8 H100s, 32 EFA devices with small-integer GUIDs, four behind each GPU's switch.
    let d = from_text("t", &corpus("02-aws-p5-48xl-h100x8-32efa-topo.xml")).unwrap();
    let s = d.system.unwrap();
    assert_eq!((s.gpus.len(), s.nets.len()), (8, 32));
    assert!(s.nets.iter().all(DumpNet::rdma));
    assert!(d
        .rails
        .iter()
        .all(|r| r.path == Some(PathKind::Pix) && r.gdr == Some(true)));
}

#[test]
fn rails_follow_the_ring_channels_and_name_a_nearer_nic() {
    let d = from_text("made-up", TWO_SOCKET).unwrap();
    let s = d.system.as_ref().unwrap();
    assert_eq!(s.nvswitches, 1);
    assert_eq!(s.gpus[0].nvlinks[0].count, 18);
    let rail = |gpu: u32| d.rails.iter().find(|r| r.gpu_dev == Some(gpu)).unwrap();
    // GPU 0 receives from mlx5_0 behind its own switch.
    let r0 = rail(0);
    assert_eq!(
        (r0.net, r0.channels, r0.path),
        (Some(0), 2, Some(PathKind::Pix))
    );
    assert_eq!(r0.gdr, Some(true));
    assert_eq!(r0.nearest, None);
    // GPU 3 sends by mlx5_0 on the other socket; mlx5_1 sits behind its own switch.
    let r3 = rail(3);
    assert_eq!((r3.net, r3.path), (Some(0), Some(PathKind::Sys)));
    assert_eq!((r3.gpu_numa, r3.net_numa), (Some(1), Some(0)));
    assert_eq!(
        r3.gdr,
        Some(false),
        "SYS is beyond NCCL's default GDR level"
    );
    assert_eq!(r3.nearest.as_deref(), Some("mlx5_1 (NET 1)"));
    assert_eq!(r3.nearest_path, Some(PathKind::Pix));
    // GPUs 1 and 2 are inside the ring: no NIC of theirs is used; the nearest stands in.
    assert_eq!((rail(2).net, rail(2).channels), (Some(1), 0));
}

#[test]
fn blocks_inside_other_text_and_bad_xml_are_told_apart() {
    let pasted = format!("some log line\nNCCL INFO ...\n{TWO_SOCKET}\ntrailing words\n");
    let d = from_text("paste", &pasted).unwrap();
    assert!(d.system.is_some() && d.graphs.is_some());
    // `<systemd>` is not `<system>`.
    let e = from_text("x", "<systemd version=\"1\"/>\n").unwrap_err();
    assert!(e.to_string().contains("no <system"), "{e}");
    let broken = "line one\n<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"x\"\n";
    let e = from_text("cut.xml", broken).unwrap_err().to_string();
    assert!(
        e.contains("cut.xml") && e.contains("not well-formed"),
        "{e}"
    );
    let twice = format!("{TWO_SOCKET}{TWO_SOCKET}");
    let e = from_text("two.xml", &twice).unwrap_err().to_string();
    assert!(e.contains("a second <system>"), "{e}");
    // A DTD (entity expansion) is refused by the parser, not expanded.
    let dtd = "<!DOCTYPE system [<!ENTITY a \"aaaa\">]>\n<system version=\"1\">&a;</system>\n";
    assert!(from_text("dtd.xml", dtd).is_err());
}

#[test]
fn paths_between_placements() {
    let at = |cpu, path: &[&str]| Placement {
        cpu,
        pci_path: path.iter().map(|s| s.to_string()).collect(),
        ..Placement::default()
    };
    assert_eq!(
        path_between(&at(0, &["s", "g"]), &at(0, &["s", "n"])),
        PathKind::Pix
    );
    assert_eq!(
        path_between(&at(0, &["s", "a", "g"]), &at(0, &["s", "b", "n"])),
        PathKind::Pxb
    );
    assert_eq!(
        path_between(&at(0, &["s", "g"]), &at(0, &["t", "n"])),
        PathKind::Phb
    );
    assert_eq!(path_between(&at(0, &["g"]), &at(0, &[])), PathKind::Phb);
    assert_eq!(
        path_between(&at(0, &["s", "g"]), &at(1, &["s", "n"])),
        PathKind::Sys
    );
}

#[test]
fn the_dump_as_a_link_matrix() {
    let d = from_text("made-up", TWO_SOCKET).unwrap();
    let t = d.system.unwrap().to_topology();
    assert_eq!(t.gpus(), ["GPU0", "GPU1", "GPU2", "GPU3"]);
    assert_eq!(
        t.link("GPU0", "GPU3"),
        Some("NV18"),
        "through the NVSwitches"
    );
    assert_eq!(t.link("GPU0", "NIC0"), Some("PIX"));
    assert_eq!(t.link("GPU3", "NIC0"), Some("SYS"));
    assert_eq!(t.nic_names["NIC1"], "mlx5_1");
    assert_eq!(t.info["GPU2"].numa_affinity.as_deref(), Some("1"));
    assert_eq!(t.info["GPU0"].pci_bus_id.as_deref(), Some("0000:18:00.0"));
    // Azure's file: GPUs of two NUMA nodes are SYS apart, a pair on one switch PIX.
    let d = from_text("t", &corpus("01-azure-ndv4-a100x8-8ib-topo.xml")).unwrap();
    let t = d.system.unwrap().to_topology();
    assert_eq!(t.link("GPU0", "GPU1"), Some("PIX"));
    assert_eq!(t.link("GPU0", "GPU2"), Some("SYS"));
}

#[test]
fn a_graph_alone_still_names_each_channels_nics() {
    // NCCL's maintainer's example: traffic enters by NET 3 at GPU 0 and leaves by NET 0 at GPU 3.
    let d = from_text(
        "t",
        &corpus("04-nccl-issue524-4gpu-2nic-ring-tree-graph-no-latencyinter.xml"),
    )
    .unwrap();
    let g = d.graphs.as_ref().unwrap();
    assert_eq!(
        g.graphs[0].latency_inter, None,
        "older dumps lack latencyinter"
    );
    assert_eq!(
        g.graphs[2].pattern_name, "CollNet chain",
        "id 2 searches the tree pattern"
    );
    let pairs: Vec<(Option<u32>, Option<u32>, u32)> = d
        .rails
        .iter()
        .map(|r| (r.gpu_dev, r.net, r.channels))
        .collect();
    assert_eq!(pairs, [(Some(0), Some(3), 2), (Some(3), Some(0), 2)]);
    // The IBM Cloud VM: an NCCL 2.22 dump with NVSwitch links and eight 200G RoCE ports.
    let d = from_text(
        "t",
        &corpus("03-ibm-vsi-h100x8-nvswitch-8roce-vm-linkwidth0-topo.xml"),
    )
    .unwrap();
    let s = d.system.as_ref().unwrap();
    assert_eq!((s.gpus.len(), s.nets.len()), (8, 8));
    assert!(s.nvswitches > 0);
    assert!(s
        .nets
        .iter()
        .all(|n| n.rdma() && n.speed_mbps == Some(200_000)));
    assert_eq!(s.to_topology().link("GPU0", "GPU7"), Some("NV18"));
}

fn log(name: &str) -> crate::import::nccl_log::LogFacts {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/corpus/nccl-dumps")
        .join(name);
    crate::import::nccl_log::from_input(Input::open(&path).unwrap()).unwrap()
}

#[test]
fn what_nccl_says_it_chose_in_real_logs() {
    // 2.19-2.22: numbers only, rank 0, no collective name.
    let l = log("07-h100-multinode-ibext-v8-rank0-algo-proto-numeric-tuning-excerpt.log");
    let (first, n) = l.choices.iter().next().unwrap();
    assert_eq!(
        (first.bytes, first.algo.as_str(), first.proto.as_str()),
        (4, "Tree", "LL")
    );
    assert!(*n >= 6 && first.collective.is_none() && first.channels.is_none());
    assert!(l.gdrdma, "channels via NET/IBext_v8/7/GDRDMA");
    // One host found no IB device and fell back to sockets; the other used IB.
    let l = log("08-ib-host-no-device-socket-over-ipoib-fallback-vs-ib-host-excerpt.log");
    assert!(l.networks.contains_key("Socket") && l.networks.contains_key("IB"));
    assert!(!l.ib_no_device.is_empty());
    assert!(l.net_devices.iter().any(|d| d.ends_with("/RoCE")));
    // 2.16: GDR per HCA and per GPU/NIC pair, and the old channel-count line.
    let l = log("06-a100pcie-2node-roce-plus-ib-nccl2.16.5-gdr-sys-topo-pattern.log");
    assert!(!l.gdr_enabled.is_empty());
    let (counts, _) = l.channel_counts.clone().unwrap();
    assert!(counts.coll.is_some() && counts.nvls.is_none());
}

#[test]
fn tuner_lines_of_each_version() {
    use crate::import::nccl_lines::algo_choice;
    let new = "h:1:2 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7} cgaClusterSize 4";
    let c = algo_choice(new).unwrap();
    assert_eq!(c.collective.as_deref(), Some("AllReduce"));
    assert_eq!(
        (c.bytes, c.algo.as_str(), c.proto.as_str(), c.channels),
        (4194304, "Ring", "Simple", Some(8))
    );
    let c = algo_choice("h:1:2 [0] NCCL INFO 65536 Bytes -> Algo 4 proto 1 time 12.5").unwrap();
    assert_eq!((c.algo.as_str(), c.proto.as_str()), ("NVLS", "LL128"));
    let c = algo_choice("ReduceScatter: 8 Bytes -> Algo NVLS_TREE proto LL channel{Lo..Hi}={2..2}")
        .unwrap();
    assert_eq!((c.algo.as_str(), c.channels), ("NVLSTree", Some(1)));
    assert!(
        algo_choice("12 Bytes -> Algo 9 proto 0 time 1").is_none(),
        "unknown algorithm"
    );
    assert!(algo_choice("channel{Lo..Hi}={5..2} 1 Bytes -> Algo 1 proto 0").is_some());
    let counts = crate::import::nccl_lines::channel_counts(
        "NCCL INFO 64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, 64 p2p channels per peer",
    )
    .unwrap();
    assert_eq!(
        (counts.coll, counts.collnet, counts.nvls, counts.p2p),
        (Some(64), Some(64), Some(0), Some(64))
    );
}

/// One GPU and a dual-port NIC behind one PCIe switch, as an NCCL 2.24+ dump lists them (the
/// physical ports, NET 0 and NET 1), and a ring graph of the same run that enters and leaves
/// by NET 2: the virtual NIC NCCL fused from both ports (src/graph/topo.cc, v2.28.9
/// 1006-1029 and 1347-1350). Made up in NCCL's schema, not a real dump.
const FUSED: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:10:00.0" class="0x060400" vendor="0x1000" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1"/>
      </pci>
      <pci busid="0000:1a:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="200000" port="1" latency="0" guid="0x1" maxconn="131072" gdr="1"/>
          <net name="mlx5_1" dev="1" speed="200000" port="2" latency="0" guid="0x2" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
<graphs version="1">
  <graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="40" speedinter="40" latencyinter="0" typeintra="LOC" typeinter="PIX" samechannels="1">
    <channel>
      <net dev="2"/>
      <gpu dev="0"/>
      <net dev="2"/>
    </channel>
    <channel>
      <net dev="2"/>
      <gpu dev="0"/>
      <net dev="2"/>
    </channel>
  </graph>
</graphs>
"#;

#[test]
fn a_nic_nccl_fused_from_ports_is_joined_to_its_ports_or_said_unknown() {
    // With the log's line, the rail is the fused NIC, placed at its ports.
    let log = "node1:1:1 [0] NCCL INFO NET/IB : Made virtual device [2] name=mlx5_0+mlx5_1 speed=400000 ndevs=2\n";
    let d = from_text("t", &format!("{log}{FUSED}")).unwrap();
    assert_eq!(d.rails.len(), 1, "{:?}", d.rails);
    let r = &d.rails[0];
    assert_eq!((r.net, r.channels), (Some(2), 4), "{r:?}");
    assert_eq!(
        r.net_name.as_deref(),
        Some("mlx5_0+mlx5_1 (NET 2, fused by NCCL from mlx5_0 (NET 0), mlx5_1 (NET 1))")
    );
    assert_eq!((r.path, r.gdr), (Some(PathKind::Pix), Some(true)));
    // Without it, the NIC the channels use is unknown: never "no NIC", never the nearest
    // port standing in with no channels.
    let d = from_text("t", FUSED).unwrap();
    let r = &d.rails[0];
    assert_eq!((r.net, r.channels, r.path), (Some(2), 4, None), "{r:?}");
    assert!(
        r.net_name
            .as_deref()
            .is_some_and(|n| n.starts_with("NET 2 (not in the topology dump")),
        "{r:?}"
    );
    // The line in each form NCCL has printed it (2.30 adds the rail and plane).
    let facts = |t: &str| {
        let mut f = crate::import::nccl_log::LogFacts::default();
        f.feed(
            "t",
            &crate::import::text::Line {
                number: 1,
                raw: t.to_string(),
                text: t.to_string(),
                tag_rank: None,
            },
        );
        f.virtual_nics
    };
    let v = facts("h:1:1 [0] NCCL INFO NET/IB : Made virtual device [5] name=mlx5_2+mlx5_3 speed=800000 ndevs=2 rail=1 plane=0");
    assert_eq!(v.get(&5).map(Vec::len), Some(2));
    assert!(facts("h:1:1 [0] NCCL INFO TOPO/NET : Made vNic 5").is_empty());
}

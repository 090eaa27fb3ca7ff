use super::*;
use crate::diagnose::rules::run;
use crate::import::nccl_dump::from_text;
use crate::import::nccl_log::LogFacts;
use crate::import::text::Input;
use crate::live::{Facts, IbPort};
use std::collections::BTreeMap;

fn log(text: &str) -> LogFacts {
    let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    crate::import::nccl_log::from_input(Input::from_reader("run.log", reader).unwrap()).unwrap()
}

fn corpus(name: &str) -> String {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/corpus/nccl-dumps")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn live(ports: Vec<IbPort>, env: &[(&str, &str)]) -> Facts {
    Facts {
        nvml: Err("no driver".into()),
        driver_version: None,
        sysfs_gpus: Vec::new(),
        wsl2_evidence: Vec::new(),
        kernel: None,
        devshm_bytes: None,
        cpu: None,
        nics: Vec::new(),
        infiniband: ports.iter().map(|p| p.device.clone()).collect(),
        ib_ports: ports,
        iommu_units: Vec::new(),
        iommu_cmdline: Vec::new(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        job_rank_vars: BTreeMap::new(),
        topology: None,
        xids: Err("not read".into()),
    }
}

fn port(device: &str, rate: &str, state: &str, layer: &str) -> IbPort {
    IbPort {
        device: device.into(),
        port: 1,
        rate: Some(rate.into()),
        state: Some(state.into()),
        phys_state: Some("5: LinkUp".into()),
        link_layer: Some(layer.into()),
    }
}

fn ids(inp: &Inputs) -> Vec<String> {
    run(inp).into_iter().map(|f| f.id).collect()
}

#[test]
fn a_host_on_sockets_beside_hosts_on_ib() {
    let l = log(&corpus(
        "08-ib-host-no-device-socket-over-ipoib-fallback-vs-ib-host-excerpt.log",
    ));
    let inp = Inputs {
        logs: vec![l],
        ..Default::default()
    };
    let hits = socket_fallback(&inp);
    assert_eq!(hits.len(), 1);
    let text: Vec<&str> = hits[0].evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(
        text.iter().any(|t| t.contains("Using network Socket")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t.contains("Using network IB")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t.contains("No device found")),
        "{text:?}"
    );
    // The same log lists mlx5_4 as RoCE beside IB ports and sets no HCA list.
    assert!(ids(&inp).contains(&"net.ib-hca-mismatch".to_string()));
}

#[test]
fn sockets_alone_on_a_machine_without_rdma_are_not_a_fallback() {
    let l = log("h:1:2 [0] NCCL INFO NET/IB : No device found.\nh:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\nh:1:2 [0] NCCL INFO Using network Socket\n");
    let inp = Inputs {
        logs: vec![l],
        ..Default::default()
    };
    assert!(socket_fallback(&inp).is_empty());
    // ... but with this machine's sysfs listing an mlx5 port it is.
    let inp = Inputs {
        live: Some(live(
            vec![port(
                "mlx5_0",
                "400 Gb/sec (4X NDR)",
                "4: ACTIVE",
                "InfiniBand",
            )],
            &[],
        )),
        ..inp
    };
    assert_eq!(socket_fallback(&inp).len(), 1);
}

#[test]
fn the_made_up_two_socket_dump_trips_each_dump_rule() {
    let d = from_text("dump.xml", TWO_SOCKET).unwrap();
    let inp = Inputs {
        dumps: vec![("dump.xml".into(), d)],
        ..Default::default()
    };
    let found = ids(&inp);
    for id in [
        "rail.nic-across-socket",
        "net.port-below-peers",
        "net.gdr-unavailable",
        "nvls.unused",
    ] {
        assert!(found.contains(&id.to_string()), "{id} in {found:?}");
    }
    let rail = rail_across_socket(&inp);
    assert!(rail[0].evidence[0]
        .text
        .starts_with("GPU 3 (NUMA 1) uses mlx5_0 (NET 0) (NUMA 0)"));
    let slow = port_below_peers(&inp);
    assert_eq!(
        slow[0].evidence[0].text,
        "mlx5_1 (NET 1) runs at 100 Gb/s; its peers reach 400 Gb/s"
    );
    // With NCCL_NVLS_ENABLE=0 set, NVLS off is what was asked for: information, not a warning.
    let inp = Inputs {
        live: Some(live(Vec::new(), &[("NCCL_NVLS_ENABLE", "0")])),
        ..inp
    };
    let nvls = nvls_unused(&inp);
    assert_eq!(nvls[0].severity, Some(Severity::Info));
}

#[test]
fn real_healthy_dumps_raise_nothing_of_these() {
    for name in [
        "02-aws-p5-48xl-h100x8-32efa-topo.xml",
        "03-ibm-vsi-h100x8-nvswitch-8roce-vm-linkwidth0-topo.xml",
        "90-h100x1-vm-nccl2.28.3-topo.xml",
    ] {
        let d = from_text(name, &corpus(name)).unwrap();
        let inp = Inputs {
            dumps: vec![(name.into(), d)],
            ..Default::default()
        };
        let found: Vec<String> = ids(&inp)
            .into_iter()
            .filter(|i| i.starts_with("net.") || i.starts_with("rail.") || i.starts_with("nvls."))
            .collect();
        assert!(found.is_empty(), "{name}: {found:?}");
    }
}

#[test]
fn hca_lists_and_ports_on_this_machine() {
    let ports = vec![
        port("mlx5_0", "400 Gb/sec (4X NDR)", "4: ACTIVE", "InfiniBand"),
        port("mlx5_1", "200 Gb/sec (4X HDR)", "4: ACTIVE", "InfiniBand"),
        port("mlx5_2", "400 Gb/sec (4X NDR)", "1: DOWN", "InfiniBand"),
        port(
            "mlx5_bond_0",
            "100 Gb/sec (4X EDR)",
            "4: ACTIVE",
            "Ethernet",
        ),
    ];
    let inp = Inputs {
        live: Some(live(
            ports.clone(),
            &[("NCCL_IB_HCA", "mlx5_0,mlx5_bond_0,mlx5_7:1")],
        )),
        ..Default::default()
    };
    let hits = ib_hca_mismatch(&inp);
    let text: Vec<&str> = hits[0].evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(text.contains(&"mlx5_7:1 does not exist here"), "{text:?}");
    assert!(
        text.contains(&"mlx5_bond_0 is an Ethernet (RoCE) port among InfiniBand ones"),
        "{text:?}"
    );
    assert!(!text.iter().any(|t| t.starts_with("mlx5_0")), "{text:?}");
    // Exclusion lists name what not to use: nothing to check against.
    let inp = Inputs {
        live: Some(live(ports.clone(), &[("NCCL_IB_HCA", "^mlx5_bond_0")])),
        ..Default::default()
    };
    assert!(ib_hca_mismatch(&inp).is_empty());
    // The slow and the down port; the Ethernet one is held against Ethernet ports only.
    let inp = Inputs {
        live: Some(live(ports, &[])),
        ..Default::default()
    };
    let slow = port_below_peers(&inp);
    let text: Vec<&str> = slow[0].evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(
        text.iter()
            .any(|t| t.starts_with("mlx5_1:1 rate 200 Gb/sec")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t.starts_with("mlx5_2:1 is 1: DOWN")),
        "{text:?}"
    );
    assert!(
        !text.iter().any(|t| t.starts_with("mlx5_bond_0")),
        "{text:?}"
    );
}

#[test]
fn collnet_asked_for_and_not_built() {
    let l = log("h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\nh:1:2 [0] NCCL INFO 32 coll channels, 0 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer\n");
    let inp = Inputs {
        logs: vec![l],
        ..Default::default()
    };
    let hits = collnet_unused(&inp);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].evidence.len(), 2);
    let l = log("h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\nh:1:2 [0] NCCL INFO 32 coll channels, 16 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer\n");
    let inp = Inputs {
        logs: vec![l],
        ..Default::default()
    };
    assert!(collnet_unused(&inp).is_empty());
}

/// The made-up two-socket dump the importer's tests read too (its layout is described there).
const TWO_SOCKET: &str = include_str!("../../../../../tests/fixtures/dumps/two-socket-made-up.xml");

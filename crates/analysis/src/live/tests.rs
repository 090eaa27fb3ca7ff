//! Unit tests of `live`, kept beside it.
use super::*;

fn gpu(path: &[&str], numa: i64) -> PciGpu {
    PciGpu {
        numa_node: Some(numa),
        pci_path: path.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn link_codes_from_the_pci_tree() {
    let a = gpu(
        &[
            "pci0000:00",
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
        ],
        0,
    );
    let b = gpu(
        &[
            "pci0000:00",
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:01.0",
            "0000:04:00.0",
        ],
        0,
    );
    assert_eq!(link_from_paths(&a, &b), "PIX");
    let c = gpu(&["pci0000:00", "0000:00:02.0", "0000:05:00.0"], 0);
    assert_eq!(link_from_paths(&a, &c), "PHB");
    let d = gpu(&["pci0000:40", "0000:40:01.0", "0000:41:00.0"], 0);
    assert_eq!(link_from_paths(&a, &d), "NODE");
    let e = gpu(&["pci0000:80", "0000:80:01.0", "0000:81:00.0"], 1);
    assert_eq!(link_from_paths(&a, &e), "SYS");
}

/// A config space with an AER capability, then ACS with `ctrl`.
fn config_with_acs(ctrl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    // AER (id 1, version 1) at 0x100, next 0x148; ACS (id 0xd) at 0x148, last.
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | 1 << 16 | 0x148 << 20).to_le_bytes());
    c[0x148..0x14c].copy_from_slice(&(0x000du32 | 1 << 16).to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&ctrl.to_le_bytes());
    c
}

#[test]
fn acs_control_is_found_in_the_extended_capability_list() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config");
    std::fs::write(&f, config_with_acs(0x001d)).unwrap();
    assert_eq!(acs_control(&f), Acs::Control(0x001d));
    std::fs::write(&f, vec![0u8; 4096]).unwrap();
    assert_eq!(acs_control(&f), Acs::Absent);
    // Without root, sysfs gives only the first 64 bytes.
    std::fs::write(&f, vec![0u8; 64]).unwrap();
    assert_eq!(acs_control(&f), Acs::Unreadable);
    assert_eq!(acs_control(&dir.path().join("missing")), Acs::Unreadable);
}

#[test]
fn acs_is_read_from_the_bridges_above_each_gpu() {
    let root = tempfile::tempdir().unwrap();
    let sys = root.path().join("sys");
    let devices = sys.join("devices/pci0000:00");
    let root_port = devices.join("0000:00:01.0");
    let switch = root_port.join("0000:01:00.0");
    let gpu = switch.join("0000:02:00.0");
    std::fs::create_dir_all(&gpu).unwrap();
    std::fs::write(root_port.join("config"), config_with_acs(0x0000)).unwrap();
    std::fs::write(switch.join("config"), config_with_acs(0x001d)).unwrap();
    std::fs::write(gpu.join("vendor"), "0x10de\n").unwrap();
    std::fs::write(gpu.join("class"), "0x030200\n").unwrap();
    let bus = sys.join("bus/pci/devices");
    std::fs::create_dir_all(&bus).unwrap();
    for d in [&root_port, &switch, &gpu] {
        std::os::unix::fs::symlink(d, bus.join(d.file_name().unwrap())).unwrap();
    }
    let gpus = sysfs_gpus(&Roots {
        sys: sys.clone(),
        proc_: root.path().join("proc"),
        dev: root.path().join("dev"),
    });
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].address, "0000:02:00.0");
    assert_eq!(
        gpus[0].acs_redirecting,
        [("0000:01:00.0".to_string(), 0x001d)]
    );
    assert_eq!(gpus[0].acs_unreadable, 0);
}

#[test]
fn nvml_bus_ids_find_their_sysfs_devices() {
    assert_eq!(sysfs_address("00000000:3B:00.0"), "0000:3b:00.0");
    assert_eq!(sysfs_address("0000:3b:00.0"), "0000:3b:00.0");
    let mut t = Topology::default();
    let nvml = [NvmlGpu {
        index: 0,
        bus_id: "00000000:3B:00.0".into(),
        ..Default::default()
    }];
    let sysfs = [PciGpu {
        address: "0000:3b:00.0".into(),
        numa_node: Some(1),
        local_cpus: Some("24-47".into()),
        ..Default::default()
    }];
    add_affinity(&mut t, &nvml, &sysfs);
    assert_eq!(t.info["GPU0"].numa_affinity.as_deref(), Some("1"));
    assert_eq!(t.info["GPU0"].cpu_affinity.as_deref(), Some("24-47"));
}

#[test]
fn reads_a_fake_machine() {
    let root = tempfile::tempdir().unwrap();
    let sys = root.path().join("sys");
    let dev = sys.join("bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    for (f, v) in [
        ("vendor", "0x10de"),
        ("class", "0x030000"),
        ("numa_node", "1"),
        ("current_link_speed", "8.0 GT/s PCIe"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", "8"),
        ("max_link_width", "16"),
        ("local_cpulist", "24-47,72-95"),
    ] {
        std::fs::write(dev.join(f), format!("{v}\n")).unwrap();
    }
    // An IOMMU translating the GPU's group.
    let group = sys.join("kernel/iommu_groups/42");
    std::fs::create_dir_all(&group).unwrap();
    std::fs::write(group.join("type"), "DMA-FQ\n").unwrap();
    std::os::unix::fs::symlink(
        "../../../../kernel/iommu_groups/42",
        dev.join("iommu_group"),
    )
    .unwrap();
    std::fs::create_dir_all(sys.join("class/iommu/dmar0")).unwrap();
    let proc_ = root.path().join("proc");
    std::fs::create_dir_all(&proc_).unwrap();
    std::fs::write(
        proc_.join("cmdline"),
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on quiet\n",
    )
    .unwrap();
    std::fs::write(
        proc_.join("version"),
        "Linux version 5.15.153.1-microsoft-standard-WSL2\n",
    )
    .unwrap();
    std::fs::write(
        proc_.join("cpuinfo"),
        "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763\n",
    )
    .unwrap();
    let devdir = root.path().join("dev");
    std::fs::create_dir_all(devdir.join("shm")).unwrap();
    std::fs::write(devdir.join("dxg"), "").unwrap();
    let facts = collect(
        &Roots {
            sys,
            proc_,
            dev: devdir,
        },
        false,
    );
    assert_eq!(facts.sysfs_gpus.len(), 1);
    assert_eq!(facts.sysfs_gpus[0].current_link_width, Some(8));
    assert_eq!(facts.sysfs_gpus[0].numa_node, Some(1));
    assert_eq!(facts.wsl2_evidence.len(), 2);
    assert_eq!(facts.cpu.as_deref(), Some("AuthenticAMD: AMD EPYC 7763"));
    assert!(facts.devshm_bytes.is_some());
    assert_eq!(facts.sysfs_gpus[0].iommu_group.as_deref(), Some("42"));
    assert_eq!(facts.sysfs_gpus[0].iommu_type.as_deref(), Some("DMA-FQ"));
    assert_eq!(facts.iommu_units, ["dmar0"]);
    assert_eq!(
        facts.sysfs_gpus[0].local_cpus.as_deref(),
        Some("24-47,72-95")
    );
    let topo = facts.topology.expect("a GPU in sysfs gives a topology");
    assert_eq!(
        topo.info["GPU0"].cpu_affinity.as_deref(),
        Some("24-47,72-95")
    );
    assert_eq!(topo.info["GPU0"].numa_affinity.as_deref(), Some("1"));
    assert_eq!(facts.iommu_cmdline, ["intel_iommu=on"]);
}

#[test]
fn aer_counters_are_read_as_the_kernel_writes_them() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(super::health::aer(d.path()), None);
    std::fs::write(
        d.path().join("aer_dev_correctable"),
        "RxErr 0\nBadTLP 3\nBadDLLP 5\nRollover 0\nTimeout 2\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 10\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("aer_dev_fatal"),
        "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 0\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("aer_dev_nonfatal"),
        "Undefined 0\nCmpltTO 1\nTOTAL_ERR_NONFATAL 1\n",
    )
    .unwrap();
    let a = super::health::aer(d.path()).unwrap();
    assert_eq!(
        a.correctable,
        [
            ("BadTLP".to_string(), 3),
            ("BadDLLP".to_string(), 5),
            ("Timeout".to_string(), 2)
        ]
    );
    assert_eq!((a.fatal_total, a.nonfatal_total), (0, 1));
}

//! Diagnosis: facts gathered from files and the live machine (`facts`), and rules that turn
//! them into findings (`rules`, one table) — each with a stable id, a severity, evidence
//! (values or lines with file and line), an explanation, a fix, and the source it rests on.

pub mod catalogue;
pub mod facts;
pub mod finding;
pub mod rules;

pub use facts::{Facts, Inputs};
pub use finding::{Evidence, Finding, Severity};

/// Every finding the inputs support, worst first.
pub fn rules(inputs: &Inputs) -> Vec<Finding> {
    rules::run(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{Facts, PciGpu};
    use std::collections::BTreeMap;

    fn live(gpus: Vec<PciGpu>, devshm: Option<u64>) -> Facts {
        Facts {
            nvml: Err("no driver".into()),
            driver_version: None,
            sysfs_gpus: gpus,
            wsl2_evidence: Vec::new(),
            kernel: None,
            devshm_bytes: devshm,
            cpu: None,
            nics: Vec::new(),
            infiniband: Vec::new(),
            ib_ports: Vec::new(),
            iommu_units: Vec::new(),
            iommu_cmdline: Vec::new(),
            env: BTreeMap::new(),
            job_rank_vars: BTreeMap::new(),
            topology: None,
            xids: Err("not read".into()),
        }
    }

    fn ids(inputs: &Inputs) -> Vec<String> {
        rules(inputs).into_iter().map(|f| f.id).collect()
    }

    #[test]
    fn acs_redirect_on_bridges_between_gpus_is_a_warning_once_per_bridge() {
        let gpu = |address: &str, acs: Vec<(String, u16)>| PciGpu {
            address: address.into(),
            acs_redirecting: acs,
            ..Default::default()
        };
        let shared = vec![("0000:01:00.0".to_string(), 0x001d)];
        let facts = live(
            vec![
                gpu("0000:03:00.0", shared.clone()),
                gpu("0000:04:00.0", shared),
            ],
            Some(8 << 30),
        );
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        let acs = f
            .iter()
            .find(|f| f.id == "pcie.acs-enabled")
            .expect("finding");
        assert_eq!(acs.severity, Severity::Warning);
        assert_eq!(acs.evidence.len(), 1);
        assert!(acs.evidence[0].text.contains(
            "bridge 0000:01:00.0 above GPU 0000:03:00.0, 0000:04:00.0: ACS control 0x001d"
        ));
        let clean = live(
            vec![
                gpu("0000:03:00.0", Vec::new()),
                gpu("0000:04:00.0", Vec::new()),
            ],
            None,
        );
        assert!(!ids(&Inputs {
            live: Some(clean),
            ..Default::default()
        })
        .contains(&"pcie.acs-enabled".to_string()));
    }

    #[test]
    fn translated_iommu_on_several_gpus_is_a_warning_and_passthrough_is_not() {
        let gpu = |address: &str, kind: &str| PciGpu {
            address: address.into(),
            iommu_group: Some("7".into()),
            iommu_type: Some(kind.into()),
            ..Default::default()
        };
        let mut facts = live(
            vec![gpu("0000:3b:00.0", "DMA-FQ"), gpu("0000:5e:00.0", "DMA")],
            Some(8 << 30),
        );
        facts.iommu_cmdline = vec!["intel_iommu=on".into()];
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        let iommu = f
            .iter()
            .find(|f| f.id == "pcie.iommu-translated")
            .expect("finding");
        assert_eq!(iommu.severity, Severity::Warning);
        assert_eq!(iommu.evidence.len(), 3);
        assert!(iommu.evidence[0]
            .text
            .contains("0000:3b:00.0: IOMMU group 7, type DMA-FQ"));
        assert!(iommu.evidence[2].text.contains("intel_iommu=on"));

        let passthrough = live(
            vec![
                gpu("0000:3b:00.0", "identity"),
                gpu("0000:5e:00.0", "identity"),
            ],
            Some(8 << 30),
        );
        assert!(!ids(&Inputs {
            live: Some(passthrough),
            ..Default::default()
        })
        .contains(&"pcie.iommu-translated".to_string()));
        let one = live(vec![gpu("0000:3b:00.0", "DMA")], Some(8 << 30));
        assert!(!ids(&Inputs {
            live: Some(one),
            ..Default::default()
        })
        .contains(&"pcie.iommu-translated".to_string()));
    }

    #[test]
    fn pcie_width_downgrade_is_a_warning_and_idle_speed_is_info() {
        let narrow = PciGpu {
            address: "0000:3b:00.0".into(),
            current_link_width: Some(8),
            max_link_width: Some(16),
            current_link_speed: Some("16.0 GT/s PCIe".into()),
            max_link_speed: Some("16.0 GT/s PCIe".into()),
            ..Default::default()
        };
        let inputs = Inputs {
            live: Some(live(vec![narrow], Some(8 << 30))),
            ..Default::default()
        };
        let f = rules(&inputs);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("pcie.downgraded", Severity::Warning)
        );
        assert!(f[0].evidence[0].text.contains("x8 of x16"));
        let idle = PciGpu {
            current_link_speed: Some("2.5 GT/s PCIe".into()),
            max_link_speed: Some("16.0 GT/s PCIe".into()),
            ..Default::default()
        };
        let f = rules(&Inputs {
            live: Some(live(vec![idle], None)),
            ..Default::default()
        });
        assert_eq!(f[0].severity, Severity::Info);
    }

    #[test]
    fn nvlinks_are_compared_within_one_gpu_model_only() {
        let gpu = |index: u32, name: &str, links: u32| crate::live::NvmlGpu {
            index,
            name: name.into(),
            nvlinks_active: links,
            health: Default::default(),
            ..Default::default()
        };
        let with = |gpus: Vec<crate::live::NvmlGpu>| {
            let mut facts = live(Vec::new(), Some(8 << 30));
            facts.nvml = Ok(gpus);
            ids(&Inputs {
                live: Some(facts),
                ..Default::default()
            })
        };
        // A PCIe card beside NVLinked ones is not a down link; all links up is healthy.
        let mixed = with(vec![
            gpu(0, "H100 SXM", 18),
            gpu(1, "H100 SXM", 18),
            gpu(2, "L4", 0),
        ]);
        assert!(!mixed.contains(&"nvlink.down".to_string()));
        let degraded = with(vec![gpu(0, "H100 SXM", 18), gpu(1, "H100 SXM", 16)]);
        assert!(degraded.contains(&"nvlink.down".to_string()));
    }

    #[test]
    fn nvml_link_width_counts_too() {
        let mut facts = live(Vec::new(), None);
        facts.nvml = Ok(vec![crate::live::NvmlGpu {
            index: 1,
            name: "GPU".into(),
            bus_id: "00000000:3B:00.0".into(),
            pcie_gen: Some((4, 4)),
            pcie_width: Some((4, 16)),
            processes: Vec::new(),
            nvlinks_active: 0,
            health: Default::default(),
            uuid: None,
            serial: None,
        }]);
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("pcie.downgraded", Severity::Warning)
        );
        assert!(f[0].evidence[0].text.contains("x4 of x16 (NVML)"));
    }

    #[test]
    fn switches_are_read_as_nccl_reads_them() {
        let with = |vars: &[(&str, &str)]| {
            let mut facts = live(Vec::new(), Some(8 << 30));
            for (k, v) in vars {
                facts.env.insert(k.to_string(), v.to_string());
            }
            ids(&Inputs {
                live: Some(facts),
                ..Default::default()
            })
        };
        let p2p = "env.p2p-disabled".to_string();
        // paths.cc ncclGetLevel: P2P_DISABLE=1, or P2P_LEVEL LOC or the old integer 0.
        for vars in [
            [("NCCL_P2P_DISABLE", "1")],
            [("NCCL_P2P_LEVEL", "LOC")],
            [("NCCL_P2P_LEVEL", "0")],
        ] {
            assert!(with(&vars).contains(&p2p), "{vars:?}");
        }
        // strtol reads "true" as 0; the level names are compared with strcmp; 1 is PIX.
        for vars in [
            [("NCCL_P2P_DISABLE", "true")],
            [("NCCL_P2P_LEVEL", "loc")],
            [("NCCL_P2P_LEVEL", "1")],
            [("NCCL_P2P_LEVEL", "NVL")],
        ] {
            assert!(!with(&vars).contains(&p2p), "{vars:?}");
        }
        assert!(with(&[("NCCL_SHM_DISABLE", "0x1")]).contains(&"env.shm-disabled".to_string()));
        assert!(with(&[("NCCL_IB_DISABLE", "2")]).contains(&"env.ib-disabled".to_string()));
        assert!(!with(&[("NCCL_IB_DISABLE", "yes")]).contains(&"env.ib-disabled".to_string()));
    }

    fn log(text: &str) -> crate::import::nccl_log::LogFacts {
        let mut f = crate::import::nccl_log::LogFacts::default();
        for (i, raw) in text.lines().enumerate() {
            let (t, tag) = crate::import::text::clean(raw);
            let line = crate::import::text::Line {
                number: i + 1,
                raw: raw.into(),
                text: t,
                tag_rank: tag,
            };
            f.feed("log", &line);
        }
        f.flush("log");
        f
    }

    #[test]
    fn watchdog_queues_tell_a_hung_nccl_from_a_rank_that_never_came() {
        let title = |text: &str| {
            rules(&Inputs {
                logs: vec![log(text)],
                ..Default::default()
            })
            .into_iter()
            .find(|f| f.id == "watchdog.timeout")
            .map(|f| f.title)
            .unwrap_or_default()
        };
        // Every rank enqueued work 5 and none completed it: NCCL itself hangs.
        let all = title(
            "[rank0]:[E ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4\n\
             [rank1]:[E ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure detected by watchdog at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4\n",
        );
        assert!(
            all.contains("every rank enqueued work 5 and none completed it"),
            "{all}"
        );
        assert!(!all.contains("behind"), "{all}");
        // A rank that never enqueued anything.
        let idle = title(
            "[rank1]:[E ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.\n\
             [rank0]:[E ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from rank 1 and we will try our best to dump the debug info. Last enqueued NCCL work: -1, last completed NCCL work: -1.\n",
        );
        assert!(idle.contains("ranks [0] are behind"), "{idle}");
        assert!(
            idle.contains("ranks [0] had enqueued no NCCL work at all (-1)"),
            "{idle}"
        );
    }

    #[test]
    fn docker_default_devshm_is_small() {
        let inputs = Inputs {
            live: Some(live(Vec::new(), Some(64 << 20))),
            ..Default::default()
        };
        assert_eq!(ids(&inputs), vec!["devshm.small"]);
        let inputs = Inputs {
            live: Some(live(Vec::new(), Some(16 << 30))),
            ..Default::default()
        };
        assert!(ids(&inputs).is_empty());
    }
}

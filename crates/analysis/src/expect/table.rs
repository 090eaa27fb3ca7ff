//! The shipped expectations (`data/expectations.toml`, embedded at build time): typed, checked
//! once, and looked up by id or by GPU model.

use std::sync::OnceLock;

pub use crate::documents::expectations::{
    contains_ci, Entry, GpuModel, PathKind, Provenance, Table,
};

const SHIPPED: &str = include_str!("../../../../data/expectations.toml");

/// The table built into this binary.
pub fn shipped() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| match Table::parse(SHIPPED) {
        Ok(t) => t,
        // A build whose embedded table does not parse is caught by the test below; an empty
        // table makes every lookup say "no expectation" rather than crash a user's command.
        Err(_) => Table {
            schema_version: 1,
            gpus: Vec::new(),
            entries: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::Collective;

    #[test]
    fn the_shipped_table_parses_and_every_entry_is_cited() {
        let t = Table::parse(SHIPPED).expect("data/expectations.toml");
        assert!(t.entries.len() >= 25, "{} entries", t.entries.len());
        for e in &t.entries {
            assert!(
                e.citation.contains("http")
                    || e.citation.contains(".h")
                    || e.citation.contains(".cc")
                    || e.citation.contains(".md")
                    || e.citation.contains(".conf"),
                "{}: a citation names a source",
                e.id
            );
        }
    }

    #[test]
    fn the_issue_s_setups_are_covered() {
        let t = shipped();
        for id in [
            "a100-sxm4-nvswitch-8",
            "h100-sxm-nvswitch-8",
            "h100-sxm-nvswitch-ring",
            "h200-nvswitch-8",
            "b200-nvswitch-8",
            "nvlink-bridge-ampere-pair",
            "pcie-gen3-x16-p2p",
            "pcie-gen4-x16-p2p",
            "pcie-gen5-x16-p2p",
            "pcie-gen4-x16-p2p-hostbridge",
            "pcie-gen4-x16-shm",
            "sys-cross-socket-shm",
            "ib-hdr-200",
            "ib-ndr-400",
            "roce-100",
            "socket-tcp",
            "wsl2-socket-shm-off",
        ] {
            assert!(t.get(id).is_some(), "{id}");
        }
        assert_eq!(
            t.get("wsl2-socket-shm-off").map(|e| e.provenance),
            Some(Provenance::Derived)
        );
    }

    #[test]
    fn a_broken_table_is_refused_with_the_entry_named() {
        let good = SHIPPED.replacen("band = [0.9, 1.06]", "band = [1.2, 1.06]", 1);
        let err = Table::parse(&good).unwrap_err();
        assert!(
            err.contains("a100-sxm4-nvswitch-8") && err.contains("band"),
            "{err}"
        );
        let dup = format!("{SHIPPED}\n[[entry]]\nid = \"socket-tcp\"\ntitle = \"x\"\npath = \"net\"\nlinks = [\"socket\"]\nranks = [2, 2]\nnodes = [1, 1]\nbusbw_gbps = {{ all_reduce = 1.0 }}\nband = [0.9, 1.1]\nplateau_from_bytes = 1\nprovenance = \"derived\"\ncitation = \"https://example.org/a-long-enough-citation\"\n");
        assert!(Table::parse(&dup).unwrap_err().contains("twice"));
        let unknown = SHIPPED.replacen("all_reduce = 230.0", "allreduce = 230.0", 1);
        assert!(Table::parse(&unknown).is_err());
    }

    #[test]
    fn gpu_names_find_their_model_and_carried_figures_are_marked() {
        let t = shipped();
        assert_eq!(
            t.gpu_model("NVIDIA A100-SXM4-40GB")
                .map(|g| g.family.as_str()),
            Some("ampere")
        );
        assert_eq!(
            t.gpu_model("NVIDIA GeForce RTX 4090").map(|g| g.consumer),
            Some(true)
        );
        assert_eq!(
            t.gpu_model("NVIDIA H100 80GB HBM3").map(|g| g.pcie_gen),
            Some(5)
        );
        assert!(t.gpu_model("Some Future GPU").is_none());
        let a100 = t.get("a100-sxm4-nvswitch-8").unwrap();
        assert_eq!(a100.busbw_for(Collective::AllGather), Some((230.0, true)));
        assert_eq!(a100.busbw_for(Collective::Alltoall), None);
        let h100 = t.get("h100-sxm-nvswitch-8").unwrap();
        assert_eq!(h100.busbw_for(Collective::AllReduce), Some((480.0, false)));
        assert_eq!(h100.busbw_for(Collective::Broadcast), None);
    }
}

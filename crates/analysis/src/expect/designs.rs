//! Reference designs (`data/designs.toml`, embedded): what a node of a kind is built with, so a
//! run across nodes whose NICs nobody stated is judged against what a maintainer would assume
//! of it, and an instance or shape name (`p5.48xlarge`, `BM.GPU.H100.8`) stands for its facts.

pub use crate::documents::expectations::Design;
use serde::Deserialize;
use std::sync::OnceLock;

const SHIPPED: &str = include_str!("../../../../data/designs.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    schema_version: u32,
    #[serde(rename = "design")]
    designs: Vec<Design>,
}

/// A name without case, spaces, `_`, `-`, `.` or Azure's `Standard_` prefix: `p5.48xlarge`,
/// `P5-48XLARGE` and `p5_48xlarge` are one.
pub(super) fn key(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("standard_").unwrap_or(&lower);
    lower
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// The designs built into this binary; a test checks the file parses and every design holds.
pub fn shipped() -> &'static [Design] {
    static DESIGNS: OnceLock<Vec<Design>> = OnceLock::new();
    DESIGNS.get_or_init(|| parse(SHIPPED).unwrap_or_default())
}

fn parse(text: &str) -> Result<Vec<Design>, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if file.schema_version != 1 {
        return Err(format!("schema_version {}", file.schema_version));
    }
    for d in &file.designs {
        let bad = |why: &str| Err(format!("design {}: {why}", d.id));
        if d.names.is_empty() || d.gpu_match.is_empty() {
            return bad("no names or no GPU names");
        }
        if d.gpus == 0 || d.nics == 0 || d.domain < d.gpus.min(d.domain) || d.nic_gbps <= 0.0 {
            return bad("a count or speed is not positive");
        }
        if !d.citation.contains("http") {
            return bad("no citation with a link");
        }
        if !["ib", "roce", "efa", "slingshot", "tcp", "tcpx", "tcpxo"]
            .contains(&d.nic_kind.as_str())
        {
            return bad("nic_kind is not ib, roce, efa, slingshot, tcp, tcpx or tcpxo");
        }
        if !["nvswitch", "nvlink", "xgmi", "pcie"].contains(&d.intra.as_str()) {
            return bad("intra is not nvswitch, nvlink, xgmi or pcie");
        }
    }
    let mut keys = std::collections::BTreeMap::new();
    for d in &file.designs {
        for n in &d.names {
            if let Some(other) = keys.insert(key(n), &d.id) {
                return Err(format!("`{n}` names both {other} and {}", d.id));
            }
        }
    }
    Ok(file.designs)
}

/// The design an instance, shape or system name stands for.
pub fn by_name(name: &str) -> Option<&'static Design> {
    let k = key(name);
    (!k.is_empty())
        .then(|| {
            shipped()
                .iter()
                .find(|d| d.names.iter().any(|n| key(n) == k))
        })
        .flatten()
}

/// The design of an id.
pub fn by_id(id: &str) -> Option<&'static Design> {
    shipped().iter().find(|d| d.id == id)
}

/// The design a maintainer assumes of a node of `per_node` GPUs named `gpu`.
pub fn usual_for(gpu: &str, per_node: usize) -> Option<&'static Design> {
    shipped()
        .iter()
        .find(|d| d.usual && d.gpus == per_node && d.has_gpu(gpu))
}

/// Every name a design answers to, for did-you-mean.
pub fn all_names() -> impl Iterator<Item = &'static str> {
    shipped()
        .iter()
        .flat_map(|d| d.names.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_designs_parse_and_each_gpu_count_has_one_usual_design() {
        let all = parse(SHIPPED).expect("data/designs.toml");
        assert!(all.len() >= 30, "{} designs", all.len());
        for d in all.iter().filter(|d| d.usual) {
            let twins: Vec<&str> = all
                .iter()
                .filter(|o| o.usual && o.id != d.id && o.gpus == d.gpus)
                .filter(|o| o.gpu_match.iter().any(|m| d.has_gpu(m)))
                .map(|o| o.id.as_str())
                .collect();
            assert!(twins.is_empty(), "{} and {twins:?} are both usual", d.id);
        }
    }

    #[test]
    fn names_match_as_users_spell_them() {
        assert_eq!(by_name("p5.48xlarge").unwrap().id, "aws-p5-48xlarge");
        assert_eq!(by_name("P5-48XLARGE").unwrap().id, "aws-p5-48xlarge");
        assert_eq!(
            by_name("Standard_ND96isr_H100_v5").unwrap().id,
            "azure-nd96isr-h100-v5"
        );
        assert_eq!(by_name("bm.gpu.h100.8").unwrap().nics, 16);
        assert!(by_name("p5.49xlarge").is_none());
        assert!(by_name("").is_none());
    }

    #[test]
    fn the_usual_design_follows_the_gpu_name_the_driver_prints() {
        let hgx = usual_for("NVIDIA H100 80GB HBM3", 8).unwrap();
        assert_eq!(
            (hgx.id.as_str(), hgx.nics, hgx.nic_gbps),
            ("hgx-h100-8", 8, 400.0)
        );
        assert_eq!(
            usual_for("NVIDIA A100-SXM4-80GB", 8).unwrap().id,
            "hgx-a100-8"
        );
        assert_eq!(
            usual_for("AMD Instinct MI300X", 8).unwrap().id,
            "amd-mi300x-platform"
        );
        // An H100 PCIe card is no HGX board, and a 4-GPU H100 node has no usual design.
        assert!(usual_for("NVIDIA H100 PCIe", 8).is_none());
        assert!(usual_for("NVIDIA H100 80GB HBM3", 4).is_none());
    }

    #[test]
    fn a_design_that_breaks_a_rule_is_refused() {
        let one = SHIPPED.split("\n[[design]]").next().unwrap().to_string();
        let good = "\n[[design]]\nid = \"x\"\ntitle = \"t\"\nnames = [\"x1\"]\ngpu = \"H100\"\ngpu_match = [\"H100\"]\ngpus = 8\nintra = \"nvswitch\"\ndomain = 8\nnics = 8\nnic_gbps = 400\nnic_kind = \"ib\"\ncitation = \"https://example.com/x\"\n";
        assert!(parse(&format!("{one}{good}")).is_ok());
        for (from, to) in [
            ("nic_kind = \"ib\"", "nic_kind = \"omnipath\""),
            ("https://example.com/x", "somewhere"),
            ("nics = 8", "nics = 0"),
            ("names = [\"x1\"]", "names = [\"p5.48xlarge\"]"),
        ] {
            let bad = good.replace(from, to);
            let text = match to.contains("p5.") {
                true => format!("{SHIPPED}{bad}"),
                false => format!("{one}{bad}"),
            };
            assert!(parse(&text).is_err(), "{to} accepted");
        }
    }
}

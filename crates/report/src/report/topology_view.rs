//! The report's view of a topology document: the device matrix as a table.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct TopologyView {
    pub source: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

pub fn topology_view(t: &crate::documents::TopologyDocument) -> TopologyView {
    let devices = &t.topology.devices;
    TopologyView {
        source: t.source.clone(),
        header: devices.clone(),
        rows: devices
            .iter()
            .map(|a| {
                std::iter::once(a.clone())
                    .chain(devices.iter().map(|b| {
                        if a == b {
                            "X".into()
                        } else {
                            t.topology.link(a, b).unwrap_or("?").to_string()
                        }
                    }))
                    .collect()
            })
            .collect(),
    }
}

//! The GPU/NIC link matrix as a topology document holds it (read from `nvidia-smi topo -m` by
//! `import::topo`, or from this machine by `live`), and what each link class means.

use serde::Serialize;
use std::collections::BTreeMap;

/// A link code as the legend defines it; `SOC` (old drivers) is read as `SYS`.
pub fn normalise_link(code: &str) -> Option<String> {
    let c = code.trim();
    match c {
        "X" | "PIX" | "PXB" | "PHB" | "NODE" | "SYS" => Some(c.to_string()),
        "SOC" => Some("SYS".to_string()),
        _ if c.len() > 2 && c.starts_with("NV") && c[2..].chars().all(|d| d.is_ascii_digit()) => {
            Some(c.to_string())
        }
        _ => None,
    }
}

/// How far a link code reaches, nearest first (NVLink, one switch, ..., across sockets).
pub fn distance(code: &str) -> u8 {
    match code {
        c if c.starts_with("NV") => 0,
        "PIX" => 1,
        "PXB" => 2,
        "PHB" => 3,
        "NODE" => 4,
        _ => 5,
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub cpu_affinity: Option<String>,
    pub numa_affinity: Option<String>,
    pub gpu_numa_id: Option<String>,
    /// The device's PCI address (`0000:18:00.0`), when the topology was taken from the
    /// machine: what ties a rank's GPU, however CUDA numbered it, to its row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
}

/// A PCI address as the tools print it: NVML's `00000000:18:00.0`, CUDA's `0000:18:00.0`,
/// nccl-tests 2.19's `[0000:18:00]` and older nccl-tests' `[0x18]` (the bus number alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: Option<u32>,
    pub bus: u8,
    pub device: Option<u8>,
}

impl PciAddress {
    /// Read one address; `None` for anything else.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let t = text.trim().trim_start_matches('[').trim_end_matches(']');
        if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            return Some(PciAddress {
                domain: None,
                bus: u8::from_str_radix(hex, 16).ok()?,
                device: None,
            });
        }
        let parts: Vec<&str> = t.split(':').collect();
        let (domain, bus, rest) = match parts[..] {
            [d, b, r] => (Some(u32::from_str_radix(d, 16).ok()?), b, r),
            [b, r] => (None, b, r),
            _ => return None,
        };
        let device = rest.split('.').next()?;
        let hex = |s: &str, n: usize| s.len() <= n && !s.is_empty();
        if !hex(bus, 2) || !hex(device, 2) {
            return None;
        }
        Some(PciAddress {
            domain,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: Some(u8::from_str_radix(device, 16).ok()?),
        })
    }

    /// The address inside a rank's device text (` 0 [0000:18:00] NVIDIA H100 80GB HBM3`).
    pub fn in_device_text(text: &str) -> Option<PciAddress> {
        let open = text.find('[')?;
        let close = open + text[open..].find(']')?;
        PciAddress::parse(&text[open + 1..close])
    }

    /// Whether two addresses can name one device: every part both state agrees.
    pub fn same_device(&self, other: &PciAddress) -> bool {
        let agree = |a: Option<u32>, b: Option<u32>| a.zip(b).is_none_or(|(a, b)| a == b);
        self.bus == other.bus
            && agree(self.domain, other.domain)
            && agree(self.device.map(u32::from), other.device.map(u32::from))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Topology {
    /// Devices in the matrix's column order.
    pub devices: Vec<String>,
    /// (from, to, link code) for every ordered pair the matrix states.
    pub links: Vec<(String, String, String)>,
    pub info: BTreeMap<String, DeviceInfo>,
    /// NIC legend: `NIC0` → `mlx5_0`.
    pub nic_names: BTreeMap<String, String>,
    /// `topo -p2p` matrix cells, when present: (from, to, OK/NS/...).
    pub p2p: Vec<(String, String, String)>,
    /// What could not be read, with line numbers.
    pub problems: Vec<String>,
    /// How the matrix was read when it needed more than its header (e.g. run-together labels).
    #[serde(default)]
    pub notes: Vec<String>,
    /// `old` when the legend or cells use SOC, else `new`.
    pub legend: String,
}

impl Topology {
    /// The GPU row whose PCI address is `address`, when exactly one matches.
    pub fn gpu_at(&self, address: &PciAddress) -> Option<&str> {
        let mut found = self.gpus().into_iter().filter(|g| {
            self.info
                .get(*g)
                .and_then(|i| i.pci_bus_id.as_deref())
                .and_then(PciAddress::parse)
                .is_some_and(|a| a.same_device(address))
        });
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    pub fn link(&self, a: &str, b: &str) -> Option<&str> {
        self.links
            .iter()
            .find(|(f, t, _)| f == a && t == b)
            .map(|(_, _, l)| l.as_str())
    }
    pub fn gpus(&self) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|d| d.starts_with("GPU"))
            .map(String::as_str)
            .collect()
    }
}

/// What a link code means for NCCL traffic between two GPUs.
pub fn describe_link(code: &str) -> &'static str {
    match code {
        c if c.starts_with("NV") => "NVLink",
        "PIX" => "one PCIe switch (P2P possible)",
        "PXB" => "several PCIe switches (P2P possible)",
        "PHB" => "through the CPU's PCIe host bridge",
        "NODE" => "between host bridges of one NUMA node",
        "SYS" => "across the CPU interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::PciAddress;

    #[test]
    fn pci_addresses_are_read_as_each_tool_prints_them() {
        let a = |t| PciAddress::parse(t);
        let full = PciAddress {
            domain: Some(0),
            bus: 0x18,
            device: Some(0),
        };
        assert_eq!(a("00000000:18:00.0"), Some(full)); // NVML
        assert_eq!(a("0000:18:00.0"), Some(full)); // CUDA, sysfs
        assert_eq!(a("[0000:18:00]"), Some(full)); // nccl-tests 2.19
        let bus = a("[0x18]").unwrap(); // older nccl-tests
        assert_eq!((bus.domain, bus.bus, bus.device), (None, 0x18, None));
        assert!(bus.same_device(&full));
        assert!(!a("0001:18:00.0").unwrap().same_device(&full));
        assert!(!a("0000:19:00.0").unwrap().same_device(&full));
        for bad in [
            "",
            "GPU0",
            "0x",
            "0000:1800:00.0",
            "0000:18",
            "zz:00.0",
            "[0x1ff]",
        ] {
            assert_eq!(a(bad), None, "{bad}");
        }
        let text = PciAddress::in_device_text(" 3 [0001:b8:00] NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!((text.domain, text.bus), (Some(1), 0xb8));
        assert_eq!(PciAddress::in_device_text(" 3 NVIDIA H100"), None);
    }
}

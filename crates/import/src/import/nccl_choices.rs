//! The lines in which NCCL states what it chose: networks, GPUDirect RDMA, NVLS, channel
//! counts, and the tuner's algorithm and protocol per call.

use super::{keep, Evidence, LogFacts};

impl LogFacts {
    /// What NCCL says it chose: networks, GPUDirect RDMA, NVLS, channel counts, and the
    /// tuner's algorithm and protocol per call.
    pub(super) fn choice_line(&mut self, t: &str, ev: &dyn Fn() -> Evidence) {
        if let Some(i) = t.find("Using network ") {
            let name = t[i + 14..].trim().to_string();
            if !name.is_empty() && (self.networks.len() < 16 || self.networks.contains_key(&name)) {
                keep(self.networks.entry(name).or_default(), ev);
            }
        }
        if t.contains("NET/IB : No device found") {
            keep(&mut self.ib_no_device, ev);
        }
        if t.contains("NET/Socket : Using ") {
            keep(&mut self.socket_interfaces, ev);
        }
        if t.contains("GPU Direct RDMA Enabled for") {
            keep(&mut self.gdr_enabled, ev);
        }
        if let Some(i) = t.find("NVLS multicast support is ") {
            let rest = &t[i + 26..];
            self.nvls_support = Some((!rest.starts_with("not "), ev()));
        }
        if let Some(c) = crate::import::nccl_lines::channel_counts(t) {
            self.channel_counts = Some((c, ev()));
        }
        if t.contains(" Bytes -> Algo ") {
            if let Some(choice) = crate::import::nccl_lines::algo_choice(t) {
                // A sweep states the same few choices thousands of times.
                if self.choices.len() < 4096 || self.choices.contains_key(&choice) {
                    *self.choices.entry(choice).or_default() += 1;
                }
            }
        }
    }
}

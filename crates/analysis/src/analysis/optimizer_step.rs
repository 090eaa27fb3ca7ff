//! The optimizer step's time when nobody measured it: a streaming kernel over the states,
//! bound by the GPU's memory bandwidth. Each update reads and writes what its rule names
//! (AdamW: p, g, m, v read; p, m, v written), so its time is the bytes it moves per trainable
//! parameter over the bandwidth it reaches. The step does not shrink with the batch: on small
//! batches it is a large share of the step, and ZeRO's partitioning divides it by the GPUs.

/// Memory bandwidth by GPU, in GB/s, from NVIDIA's datasheets and product pages; the first
/// name a GPU's name contains wins, so the specific SKUs come before their family.
const BANDWIDTH_GBPS: &[(&str, f64)] = &[
    ("B300", 8000.0),
    ("B200", 8000.0),
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("A100 PCIe 40GB", 1555.0),
    ("A100 40GB", 1555.0),
    ("A100 PCIe", 1935.0),
    ("A100", 2039.0),
    ("A800", 2039.0),
    ("V100", 900.0),
    ("L40S", 864.0),
    ("L40", 864.0),
    ("L4", 300.0),
    ("A10G", 600.0),
    ("A10", 600.0),
    ("A40", 696.0),
    ("A6000", 768.0),
    ("T4", 320.0),
    ("RTX 5090", 1792.0),
    ("RTX 4090", 1008.0),
    ("RTX 3090 Ti", 1008.0),
    ("RTX 3090", 936.0),
    ("RTX 3060", 360.0),
    ("RTX 2080 Ti", 616.0),
    ("TITAN RTX", 672.0),
];

/// The share of datasheet bandwidth a streaming kernel reaches (STREAM-like triad kernels
/// reach 80-90% on HBM GPUs): an assumption, stated with every estimate.
pub const BANDWIDTH_EFFICIENCY: f64 = 0.8;

/// Letters and digits only, upper case: "rtx-3090ti", "RTX 3090 Ti" and "rtx3090_ti" match.
fn key(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// The GPU's bandwidth in bytes/s and the name it matched.
pub fn bandwidth(gpu: &str) -> Option<(f64, &'static str)> {
    let k = key(gpu);
    BANDWIDTH_GBPS
        .iter()
        .find(|(name, _)| k.contains(&key(name)))
        .map(|&(name, gbps)| (gbps * 1e9, name))
}

/// Every GPU the table knows, for an error message.
pub fn known() -> Vec<&'static str> {
    BANDWIDTH_GBPS.iter().map(|g| g.0).collect()
}

/// Bytes AdamW moves per parameter. fp32 states (fp32 or autocast training): p, g, m, v
/// read (16) and p, m, v written (12), and foreach's denominator tensor list written and read
/// again (8). Mixed precision (DeepSpeed, Megatron: fused): the 16-bit gradient read (2), the
/// fp32 master weight and moments read and written (24), the 16-bit weight written (2).
/// bf16 states: half of the fp32 foreach figure.
pub fn adamw_bytes_per_param(grad_bytes: f64, mixed: bool) -> f64 {
    match (mixed, grad_bytes >= 4.0) {
        (true, _) => 28.0,
        (false, true) => 36.0,
        (false, false) => 18.0,
    }
}

/// Seconds for one optimizer step over `params` trainable parameters on this GPU.
pub fn step_s(params: f64, bytes_per_param: f64, bandwidth_bytes_per_s: f64) -> f64 {
    params * bytes_per_param / (bandwidth_bytes_per_s * BANDWIDTH_EFFICIENCY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_their_sku_before_their_family() {
        assert_eq!(
            bandwidth("NVIDIA H100 PCIe").map(|b| b.1),
            Some("H100 PCIe")
        );
        assert_eq!(bandwidth("h100-sxm5-80gb").map(|b| b.1), Some("H100"));
        assert_eq!(bandwidth("rtx-3090ti").map(|b| b.1), Some("RTX 3090 Ti"));
        assert_eq!(bandwidth("GeForce RTX 3090").map(|b| b.1), Some("RTX 3090"));
        assert_eq!(bandwidth("titan-rtx").map(|b| b.0), Some(672e9));
        assert!(bandwidth("a toaster").is_none());
    }

    #[test]
    fn seven_billion_fp32_adamw_parameters_take_a_tenth_of_a_second_on_an_h100() {
        // 7e9 x 36 B / (0.8 x 3.35 TB/s) = 94 ms.
        let (bw, _) = bandwidth("H100").unwrap();
        let s = step_s(7e9, adamw_bytes_per_param(4.0, false), bw);
        assert!((s - 0.094).abs() < 0.001, "{s}");
    }
}

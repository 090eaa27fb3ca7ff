//! The statistics a fleet is judged by: robust centre and spread (median, MAD), the robust
//! z-score, a one-sided rank test of one node's raw samples against its peers' pooled samples,
//! the Benjamini-Hochberg false-discovery control over every test of a fleet (10,000 nodes at
//! 30 sizes would flag 15,000 healthy cells at p < 0.05), and Mann-Kendall with Sen's slope
//! for a trend over runs.

/// Median of unsorted values (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median absolute deviation from the median (unscaled).
pub fn mad(values: &[f64], centre: f64) -> f64 {
    let dev: Vec<f64> = values.iter().map(|x| (x - centre).abs()).collect();
    median(&dev)
}

/// `(x - median) / (1.4826 MAD)`: a standard normal's z for normal data, unmoved by the outliers
/// it is looking for. A spread of zero (identical peers) is floored at 0.1 % of the median so a
/// fleet of clones does not call a 0.01 % difference infinitely significant.
pub fn robust_z(x: f64, centre: f64, mad: f64) -> f64 {
    let scale = (1.4826 * mad).max(centre.abs() * 1e-3);
    if scale > 0.0 {
        (x - centre) / scale
    } else {
        0.0
    }
}

/// P(Z > z) for a standard normal, with relative accuracy in the far tail (Numerical Recipes'
/// erfc, fractional error below 1.2e-7), which false-discovery control at 1e-8 needs.
pub fn normal_sf(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let erfc = |x: f64| {
        let a = x.abs();
        let t = 1.0 / (1.0 + 0.5 * a);
        let poly = -a * a - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77))))))));
        let r = t * poly.exp();
        if x >= 0.0 {
            r
        } else {
            2.0 - r
        }
    };
    0.5 * erfc(x)
}

/// One-sided Mann-Whitney p-value that `node`'s samples (seconds) are larger — slower — than
/// the peers' pooled samples `peers_sorted` (ascending), by the normal approximation with tie
/// correction; each of the node's samples is ranked by binary search, so a pool of any size
/// costs n log m.
pub fn slower_than_peers_p(node: &[f64], peers_sorted: &[f64]) -> Option<f64> {
    let (n1, n2) = (node.len(), peers_sorted.len());
    if n1 < 3 || n2 < 3 || node.iter().any(|x| !x.is_finite()) {
        return None;
    }
    // U counts pairs where the node's sample exceeds a peer's (ties count a half).
    let mut u = 0.0;
    for &x in node {
        let below = peers_sorted.partition_point(|&p| p < x);
        let equal = peers_sorted[below..].partition_point(|&p| p <= x);
        u += below as f64 + 0.5 * equal as f64;
    }
    let (f1, f2) = (n1 as f64, n2 as f64);
    let mean = f1 * f2 / 2.0;
    let var = f1 * f2 * (f1 + f2 + 1.0) / 12.0;
    if var <= 0.0 {
        return Some(1.0);
    }
    let z = (u - mean - 0.5) / var.sqrt();
    Some(normal_sf(z).clamp(0.0, 1.0))
}

/// One-sided Mann-Whitney p-value that `after` is larger (slower) than `before`.
pub fn slower_than_p(after: &[f64], before: &[f64]) -> Option<f64> {
    let mut b: Vec<f64> = before.iter().copied().filter(|x| x.is_finite()).collect();
    b.sort_by(f64::total_cmp);
    slower_than_peers_p(after, &b)
}

/// Benjamini-Hochberg: the largest p-value still a discovery at false-discovery rate `q`
/// among `m` tests (tests not run count in `m` with p = 1). `None`: nothing is.
pub fn bh_threshold(p_values: &[f64], m: usize, q: f64) -> Option<f64> {
    let mut p: Vec<f64> = p_values.iter().copied().filter(|x| x.is_finite()).collect();
    p.sort_by(f64::total_cmp);
    let m = m.max(p.len()) as f64;
    let mut cut = None;
    for (i, &pi) in p.iter().enumerate() {
        if pi <= q * (i as f64 + 1.0) / m {
            cut = Some(pi);
        }
    }
    cut
}

/// Mann-Kendall trend test of `y` over `x` (time): (Kendall's S, one-sided p-value of a
/// decline, Sen's slope in y per unit x). `None` below four points.
pub fn decline(x: &[f64], y: &[f64]) -> Option<(f64, f64, f64)> {
    let n = x.len().min(y.len());
    if n < 4 {
        return None;
    }
    let mut s = 0.0;
    let mut slopes = Vec::with_capacity(n * (n - 1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            let d = y[j] - y[i];
            s += d.signum();
            let dx = x[j] - x[i];
            if dx != 0.0 {
                slopes.push(d / dx);
            }
        }
    }
    let nf = n as f64;
    let var = nf * (nf - 1.0) * (2.0 * nf + 5.0) / 18.0;
    // Continuity correction toward zero.
    let z = if s < 0.0 {
        (s + 1.0) / var.sqrt()
    } else {
        (s - 1.0).max(0.0) / var.sqrt()
    };
    Some((s, normal_sf(-z), median(&slopes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn robust_centre_ignores_the_outlier() {
        let v = [10.0, 10.1, 9.9, 10.05, 9.95, 3.0];
        let m = median(&v);
        assert!((m - 9.975).abs() < 1e-9, "{m}");
        let d = mad(&v, m);
        assert!(robust_z(3.0, m, d) < -40.0);
        assert!(robust_z(10.0, m, d).abs() < 1.0);
    }

    #[test]
    fn the_normal_tail_keeps_relative_accuracy() {
        // Φ(-6) = 9.8659e-10, Φ(-1.96) = 0.0249979.
        assert!((normal_sf(6.0) / 9.8659e-10 - 1.0).abs() < 1e-4);
        assert!((normal_sf(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_sf(-1.959_964) - 0.975).abs() < 1e-6);
    }

    #[test]
    fn slower_samples_are_significant_and_alike_ones_are_not() {
        let peers: Vec<f64> = (0..400).map(|i| 1.0 + (i % 20) as f64 * 0.001).collect();
        let mut sorted = peers.clone();
        sorted.sort_by(f64::total_cmp);
        let slow: Vec<f64> = (0..20).map(|i| 1.2 + i as f64 * 0.001).collect();
        assert!(slower_than_peers_p(&slow, &sorted).unwrap() < 1e-8);
        let alike: Vec<f64> = (0..20).map(|i| 1.0 + i as f64 * 0.001).collect();
        assert!(slower_than_peers_p(&alike, &sorted).unwrap() > 0.3);
        // Faster is not slower.
        let fast: Vec<f64> = (0..20).map(|i| 0.8 + i as f64 * 0.001).collect();
        assert!(slower_than_peers_p(&fast, &sorted).unwrap() > 0.99);
    }

    #[test]
    fn false_discoveries_are_controlled() {
        let mut p = vec![1e-9, 2e-9];
        p.extend((1..=1000).map(|i| i as f64 / 1000.0));
        let cut = bh_threshold(&p, 10_000, 0.01).unwrap();
        assert_eq!(cut, 2e-9);
        assert!(bh_threshold(&[0.04], 10_000, 0.01).is_none());
    }

    #[test]
    fn a_steady_decline_is_found_and_noise_is_not() {
        let x: Vec<f64> = (0..30).map(f64::from).collect();
        let falling: Vec<f64> = x
            .iter()
            .map(|i| 100.0 - 0.5 * i + (i * 7.0 % 3.0) * 0.1)
            .collect();
        let (s, p, slope) = decline(&x, &falling).unwrap();
        assert!(
            s < 0.0 && p < 1e-6 && (slope + 0.5).abs() < 0.05,
            "{s} {p} {slope}"
        );
        let flat: Vec<f64> = x.iter().map(|i| 100.0 + ((i * 7.0) % 5.0) - 2.0).collect();
        assert!(decline(&x, &flat).unwrap().1 > 0.01);
    }
}

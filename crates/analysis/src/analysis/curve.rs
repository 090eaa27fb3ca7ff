//! Time of a collective as a function of message size: interpolated from a measured or imported
//! curve (log-log), or an alpha-beta model from a latency and a bus bandwidth.

use crate::coll::{Collective, Placement};
use crate::model::{RunRecord, RunStatus};
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CurveError {
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
    #[error(transparent)]
    Input(#[from] crate::import::text::InputError),
    /// A JSON curve that the document reader refused (its message names the file).
    #[error("{0}")]
    Document(String),
}

/// A collective's time over sizes.
#[derive(Debug, Clone, PartialEq)]
pub enum Curve {
    /// (size_bytes, seconds) ascending in size, measured on `nranks` ranks.
    Measured {
        coll: Collective,
        nranks: usize,
        points: Vec<(f64, f64)>,
        source: String,
    },
    /// `latency_s + bytes_on_bus / busbw`.
    AlphaBeta {
        latency_s: f64,
        busbw_bytes_per_s: f64,
    },
}

impl Curve {
    /// Seconds for `coll` of `size_bytes` (nccl-tests' size convention) on `nranks` ranks.
    ///
    /// Between points: straight lines in log-log. Below the smallest size: its time (latency
    /// floor). Above the largest: the largest size's bandwidth. A curve measured on other rank
    /// counts is carried over through busbw, which is what busbw is for.
    pub fn time_s(&self, coll: Collective, size_bytes: f64, nranks: usize) -> f64 {
        if size_bytes <= 0.0 || nranks < 2 {
            return 0.0;
        }
        match self {
            Curve::AlphaBeta {
                latency_s,
                busbw_bytes_per_s,
            } => latency_s + size_bytes * coll.busbw_factor(nranks) / busbw_bytes_per_s,
            Curve::Measured {
                coll: measured,
                nranks: m,
                points,
                ..
            } => {
                let t = interpolate(points, size_bytes);
                // Same bus bandwidth, other collective or rank count: scale by the busbw factors.
                t * coll.busbw_factor(nranks) / measured.busbw_factor(*m)
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Curve::AlphaBeta {
                busbw_bytes_per_s, ..
            } if busbw_bytes_per_s.is_infinite() => {
                "no link given: communication not modelled (it costs nothing here); give --curve or --busbw to model it".to_string()
            }
            Curve::AlphaBeta {
                latency_s,
                busbw_bytes_per_s,
            } => format!(
                "alpha-beta model: latency {:.1} us, busbw {:.2} GB/s (given)",
                latency_s * 1e6,
                busbw_bytes_per_s / 1e9
            ),
            Curve::Measured {
                coll,
                nranks,
                points,
                source,
            } => format!(
                "{coll} curve from {source}: {} sizes, {} ranks",
                points.len(),
                nranks
            ),
        }
    }
}

fn interpolate(points: &[(f64, f64)], size: f64) -> f64 {
    let (first, last) = (points[0], points[points.len() - 1]);
    if size <= first.0 {
        return first.1;
    }
    if size >= last.0 {
        return last.1 * size / last.0;
    }
    let i = points.partition_point(|p| p.0 <= size);
    let (a, b) = (points[i - 1], points[i]);
    let f = (size.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
    (a.1.ln() + f * (b.1.ln() - a.1.ln())).exp()
}

/// Build a curve from (size, time) samples of one collective: sorted, zero sizes dropped,
/// several samples of a size merged by their median.
pub fn from_points(
    coll: Collective,
    nranks: usize,
    mut raw: Vec<(u64, f64)>,
    source: String,
) -> Option<Curve> {
    raw.retain(|(s, t)| *s > 0 && t.is_finite() && *t > 0.0);
    raw.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let j = raw[i..]
            .iter()
            .position(|p| p.0 != raw[i].0)
            .map(|k| i + k)
            .unwrap_or(raw.len());
        points.push((raw[i].0 as f64, raw[(i + j) / 2].1));
        i = j;
    }
    // Time must not fall as size grows; a noisy dip would make larger buckets look free.
    for k in 1..points.len() {
        if points[k].1 < points[k - 1].1 {
            points[k].1 = points[k - 1].1;
        }
    }
    (!points.is_empty()).then_some(Curve::Measured {
        coll,
        nranks,
        points,
        source,
    })
}

/// A curve as read from its file, with what says whether it is whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub curve: Curve,
    /// The run's status, for a run record (a CSV carries none).
    pub status: Option<RunStatus>,
    /// The backend that measured it, for a run record (`host`, `mpi`, `nccl`, `imported`'s
    /// `nccl`): a curve of host memory says nothing about GPUs, and whoever uses it says so.
    pub backend: Option<String>,
}

/// Read `coll`'s out-of-place points from a run record (JSON) or a CSV in the sweep's contract.
pub fn load(path: &Path, coll: Collective) -> Result<Curve, CurveError> {
    load_with_status(path, coll).map(|l| l.curve)
}

/// [`load`], with the run's status.
pub fn load_with_status(path: &Path, coll: Collective) -> Result<Loaded, CurveError> {
    let mut status = None;
    let mut backend = None;
    let bad = |reason: String| CurveError::Bad {
        path: path.display().to_string(),
        reason,
    };
    let bytes = crate::import::text::Input::open(path)?.bytes("a sweep's JSON record or CSV")?;
    let text = String::from_utf8_lossy(&bytes);
    let (nranks, points) = if text.trim_start().starts_with('{') {
        let record: RunRecord = crate::documents::read::read(&path.display().to_string(), &bytes)
            .map_err(|e| CurveError::Document(e.to_string()))?;
        status = Some(record.status);
        backend = Some(record.backend.name.clone());
        let pts: Vec<_> = record
            .points
            .iter()
            .filter(|p| p.collective == coll && p.placement == Placement::OutOfPlace)
            .collect();
        let nranks = pts.first().map(|p| p.nranks).unwrap_or(0);
        (
            nranks,
            pts.iter()
                .map(|p| (p.size_bytes, p.time_s))
                .collect::<Vec<_>>(),
        )
    } else {
        read_csv(&text, coll).map_err(bad)?
    };
    if points.is_empty() {
        return Err(bad(format!("no out-of-place {coll} points in the file")));
    }
    if nranks < 2 {
        return Err(bad(format!(
            "the {coll} points were measured on {nranks} rank(s); a curve needs 2 or more"
        )));
    }
    from_points(coll, nranks, points, path.display().to_string())
        .map(|curve| Loaded {
            curve,
            status,
            backend,
        })
        .ok_or_else(|| bad(format!("no usable (non-zero) {coll} points")))
}

impl Curve {
    /// The largest size measured (a model: none).
    pub fn largest_bytes(&self) -> Option<u64> {
        match self {
            Curve::Measured { points, .. } => points.last().map(|p| p.0 as u64),
            Curve::AlphaBeta { .. } => None,
        }
    }

    /// How a measured curve reaches `nranks` ranks, when it was measured on others.
    pub fn rescaling(&self, to: Collective, nranks: usize) -> Option<String> {
        let Curve::Measured {
            coll, nranks: m, ..
        } = self
        else {
            return None;
        };
        (*m != nranks).then(|| {
            let (from_f, to_f) = (coll.busbw_factor(*m), to.busbw_factor(nranks));
            format!(
                "measured on {m} ranks, rescaled to {nranks}: same busbw, so time x {to_f:.3}/{from_f:.3} = x {:.3} ({to}'s bus factor on {nranks} ranks over {coll}'s on {m})",
                to_f / from_f
            )
        })
    }
}

fn read_csv(text: &str, coll: Collective) -> Result<(usize, Vec<(u64, f64)>), String> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| e.to_string())?.clone();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("expected the sweep CSV header (collective,nranks,size_bytes,...,time_us,...); no '{name}' column"))
    };
    let (c_coll, c_n, c_size, c_place, c_time) = (
        col("collective")?,
        col("nranks")?,
        col("size_bytes")?,
        col("placement")?,
        col("time_us")?,
    );
    let mut nranks = 0;
    let mut points = Vec::new();
    for (line, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| format!("line {}: {e}", line + 2))?;
        if Collective::parse(&rec[c_coll]) != Some(coll) || &rec[c_place] != "out-of-place" {
            continue;
        }
        let num = |i: usize| {
            rec[i]
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("line {}: '{}' is not a number", line + 2, &rec[i]))
        };
        nranks = num(c_n)? as usize;
        points.push((num(c_size)? as u64, num(c_time)? * 1e-6));
    }
    Ok((nranks, points))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_002() -> Curve {
        // seeds/002: NCCL all_reduce on 2 GPUs: 4 MB in 9 ms, 40 MB in 83 ms, 200 MB in 390 ms.
        from_points(
            Collective::AllReduce,
            2,
            vec![
                (4_000_000, 9e-3),
                (40_000_000, 83e-3),
                (200_000_000, 390e-3),
            ],
            "seed".into(),
        )
        .unwrap()
    }

    #[test]
    fn interpolates_in_log_log_and_extrapolates_by_bandwidth() {
        let c = seed_002();
        assert!((c.time_s(Collective::AllReduce, 40e6, 2) - 83e-3).abs() < 1e-12);
        let mid = c.time_s(Collective::AllReduce, 12.649e6, 2); // geometric mean of 4 and 40 MB
        assert!((mid - (9e-3f64 * 83e-3).sqrt()).abs() < 1e-4, "{mid}");
        assert_eq!(
            c.time_s(Collective::AllReduce, 1.0, 2),
            9e-3,
            "latency floor"
        );
        assert!((c.time_s(Collective::AllReduce, 400e6, 2) - 780e-3).abs() < 1e-9);
        // 4 ranks: busbw factor 1.5 instead of 1.
        assert!((c.time_s(Collective::AllReduce, 40e6, 4) - 83e-3 * 1.5).abs() < 1e-9);
        // reduce-scatter over the same bus: half the all-reduce's bytes on the bus.
        assert!((c.time_s(Collective::ReduceScatter, 40e6, 2) - 83e-3 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn alpha_beta_matches_nccl_tests_busbw() {
        let c = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 10e9,
        };
        // all_reduce on 8 ranks moves 2*7/8 of the buffer over each link.
        assert!((c.time_s(Collective::AllReduce, 1e9, 8) - 0.175).abs() < 1e-12);
    }

    #[test]
    fn reads_the_sweep_csv() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.csv");
        std::fs::write(
            &path,
            "collective,nranks,size_bytes,count,dtype,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong\n\
             all_reduce,2,1024,256,float,sum,-1,out-of-place,10.0,0.1,0.1,0\n\
             all_reduce,2,1024,256,float,sum,-1,in-place,99.0,0.1,0.1,0\n\
             all_gather,2,2048,512,float,,-1,out-of-place,5.0,0.4,0.2,\n\
             all_reduce,2,2048,512,float,sum,-1,out-of-place,20.0,0.1,0.1,0\n",
        )
        .unwrap();
        let c = load(&path, Collective::AllReduce).unwrap();
        match c {
            Curve::Measured {
                nranks, ref points, ..
            } => {
                assert_eq!(nranks, 2);
                assert_eq!(points.len(), 2);
                assert_eq!((points[0].0, points[1].0), (1024.0, 2048.0));
                assert!((points[0].1 - 10e-6).abs() < 1e-15 && (points[1].1 - 20e-6).abs() < 1e-15);
            }
            _ => panic!("expected a measured curve"),
        }
        assert!(load(&path, Collective::Broadcast)
            .unwrap_err()
            .to_string()
            .contains("no out-of-place broadcast points"));
    }
}

//! The CSV contract: a stable header other tools (and our own checks) read.
//!
//! `collective,nranks,size_bytes,count,dtype,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong`
//! One row per point and placement; `redop` empty for collectives without one; `root` -1 for
//! collectives without one; `wrong` empty when not checked; bandwidths in GB/s (1e9 B/s).

use crate::model::Point;

pub const HEADER: [&str; 12] = [
    "collective",
    "nranks",
    "size_bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "placement",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
];

pub fn row(p: &Point) -> [String; 12] {
    [
        p.collective.name().to_string(),
        p.nranks.to_string(),
        p.size_bytes.to_string(),
        p.count.to_string(),
        p.dtype.name().to_string(),
        p.redop.map(|o| o.name().to_string()).unwrap_or_default(),
        p.root.to_string(),
        p.placement.name().to_string(),
        format!("{:.3}", p.time_s * 1e6),
        format!("{:.6}", p.algbw_bytes_per_s / 1e9),
        format!("{:.6}", p.busbw_bytes_per_s / 1e9),
        p.wrong.map(|w| w.to_string()).unwrap_or_default(),
    ]
}

pub fn to_string(points: &[Point]) -> Result<String, ::csv::Error> {
    table(&HEADER, points.iter().map(row))
}

/// Any CSV table: a header, then one row per item (quoted where a field needs it).
pub fn table<R, I>(
    header: &[&str],
    rows: impl IntoIterator<Item = R>,
) -> Result<String, ::csv::Error>
where
    R: IntoIterator<Item = I>,
    I: AsRef<[u8]>,
{
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.write_record(header)?;
    for r in rows {
        w.write_record(r)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ::csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

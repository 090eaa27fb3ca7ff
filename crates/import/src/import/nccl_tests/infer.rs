//! What the log does not say outright: the collective from how size and count relate, the
//! rank count from the sizes.

use crate::coll::Collective;
use crate::dtype::Dtype;

use super::table::Row;

/// `size / (count × type size)` when every row agrees: 1 for all_reduce, broadcast, reduce and
/// sendrecv; the rank count for all_gather, reduce_scatter, alltoall, gather and scatter
/// (nccl-tests prints the larger buffer's bytes, `count` is per rank). Exact, unlike the
/// bandwidth ratio, and there even when the bandwidths print as 0.
pub(super) fn size_ratio(rows: &[&Row]) -> Option<u64> {
    let mut k = None;
    for r in rows.iter().filter(|r| r.count > 0) {
        let elem = r.count * Dtype::parse(&r.dtype)?.size_bytes() as u64;
        if r.size % elem != 0 {
            return None;
        }
        match k {
            None => k = Some(r.size / elem),
            Some(prev) if prev != r.size / elem => return None,
            Some(_) => {}
        }
    }
    k
}

/// Which collective a table is, from the columns when the log does not name it: a reduction op
/// and a root, the size/count ratio (above), the ratio of busbw to algbw (nccl-tests' factor
/// 2(n-1)/n, (n-1)/n or 1), and that nccl-tests never checks sendrecv and alltoall in place
/// (their in-place #wrong is N/A while out-of-place is a count).
pub(super) fn infer_collective(rows: &[&Row]) -> (Collective, String) {
    let has_op = rows
        .iter()
        .any(|r| r.redop.as_deref().is_some_and(|o| o != "none"));
    let rooted = rows.iter().any(|r| r.root >= 0);
    let checked = rows.iter().filter(|r| r.halves[0].wrong.is_some()).count();
    let inplace_unchecked = checked > 0
        && rows
            .iter()
            .filter(|r| r.halves[0].wrong.is_some() && r.halves[1].wrong.is_none())
            .count()
            == checked;
    let inplace_checked = checked > 0 && !inplace_unchecked;
    // Two printed decimals: only bandwidths of 1 GB/s and more give the ratio to 1%.
    let ratio = rows
        .iter()
        .filter(|r| r.halves[0].algbw_gbps >= 1.0)
        .max_by_key(|r| r.size)
        .map(|r| r.halves[0].busbw_gbps / r.halves[0].algbw_gbps);
    let k = size_ratio(rows);
    let unknown = |why: String| (Collective::Unknown, why);
    match (has_op, rooted, ratio) {
        (true, true, _) => (
            Collective::Reduce,
            "inferred: a reduction op and a root".into(),
        ),
        (false, true, _) if k.is_some_and(|k| k > 1) => unknown(format!(
            "a root, no reduction op and size = count x {} ranks: gather or scatter",
            k.unwrap_or(0)
        )),
        (false, true, _) => (
            Collective::Broadcast,
            "inferred: a root and no reduction op".into(),
        ),
        (true, false, _) if k.is_some_and(|k| k > 1) => (
            Collective::ReduceScatter,
            format!(
                "inferred: reduction op, size = count x {} ranks",
                k.unwrap_or(0)
            ),
        ),
        (true, false, Some(r)) if (r - 1.0).abs() < 0.02 && inplace_unchecked => (
            Collective::Sendrecv,
            format!("inferred: busbw/algbw = {r:.2} and in-place not checked (sendrecv)"),
        ),
        (true, false, Some(r)) if r >= 0.98 => (
            Collective::AllReduce,
            format!("inferred: reduction op, busbw/algbw = {r:.2} (2(n-1)/n)"),
        ),
        (true, false, _) if k == Some(1) && inplace_checked => (
            Collective::AllReduce,
            "inferred: reduction op, size = count x type size, in-place checked (sendrecv never is)"
                .into(),
        ),
        (true, false, Some(r)) if r > 0.0 && k != Some(1) => (
            Collective::ReduceScatter,
            format!("inferred: reduction op, busbw/algbw = {r:.2} ((n-1)/n)"),
        ),
        (false, false, _) if k.is_some_and(|k| k > 1) && inplace_unchecked => (
            Collective::Alltoall,
            format!(
                "inferred: no op, size = count x {} ranks, in-place not checked (alltoall)",
                k.unwrap_or(0)
            ),
        ),
        (false, false, _) if k.is_some_and(|k| k > 1) && inplace_checked => (
            Collective::AllGather,
            format!(
                "inferred: no op, size = count x {} ranks, in-place checked (all_gather)",
                k.unwrap_or(0)
            ),
        ),
        (false, false, Some(r)) if r < 0.98 && inplace_unchecked => (
            Collective::Alltoall,
            format!("inferred: no op, busbw/algbw = {r:.2} and in-place not checked (alltoall)"),
        ),
        (false, false, Some(r)) if r < 0.98 && checked > 0 => (
            Collective::AllGather,
            format!("inferred: no op, busbw/algbw = {r:.2}, in-place checked (all_gather)"),
        ),
        _ => unknown(format!(
            "not named in the log, and its columns fit {}: give --collective NAME",
            fits(rows, k, inplace_checked)
        )),
    }
}

/// The collectives a table the columns cannot settle may be, in words ("all_gather or
/// reduce_scatter"): by the size/count ratio (1 for the collectives whose size is one rank's
/// buffer, the rank count for those whose size spans the ranks), without the ones a column rules
/// out (no reduction op: not the reductions; in place checked: not alltoall or sendrecv, which
/// nccl-tests never checks in place).
fn fits(rows: &[&Row], k: Option<u64>, inplace_checked: bool) -> String {
    use Collective::*;
    let op_column = rows.iter().any(|r| r.redop.is_some());
    let no_op = op_column
        && rows
            .iter()
            .all(|r| r.redop.as_deref().is_none_or(|o| o == "none"));
    let mut c: Vec<Collective> = match k {
        Some(1) => vec![AllReduce, Broadcast, Reduce, Sendrecv],
        Some(_) => vec![AllGather, ReduceScatter, Alltoall, Gather, Scatter],
        None => vec![
            AllReduce,
            AllGather,
            ReduceScatter,
            Broadcast,
            Reduce,
            Alltoall,
        ],
    };
    if no_op {
        c.retain(|x| !matches!(x, AllReduce | Reduce | ReduceScatter));
    }
    if inplace_checked {
        c.retain(|x| !matches!(x, Alltoall | Sendrecv));
    }
    let names: Vec<String> = c.iter().map(|x| x.to_string()).collect();
    match names.as_slice() {
        [] => "no collective nccl-tests runs".into(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The rank count from the size/count ratio, for collectives whose printed size spans all ranks.
///
/// A table whose collective the columns cannot settle still tells its rank count this way:
/// size = count x type size x k with k > 1 holds only for the collectives whose size spans the
/// ranks (all_gather, reduce_scatter, alltoall, gather, scatter), and for every one of them k is
/// the rank count.
pub(super) fn nranks_from_size(coll: Collective, rows: &[&Row]) -> Option<usize> {
    let spans_ranks = matches!(
        coll,
        Collective::AllGather
            | Collective::ReduceScatter
            | Collective::Alltoall
            | Collective::Gather
            | Collective::Scatter
            | Collective::Unknown
    );
    size_ratio(rows)
        .filter(|&k| spans_ranks && k > 1)
        .map(|k| k as usize)
}

/// The rank count the ratio of busbw to algbw suggests, from the largest size (a best guess
/// where nothing else tells).
pub(super) fn nranks_from_ratio(coll: Collective, rows: &[&Row]) -> Option<usize> {
    let r = rows
        .iter()
        .filter(|r| r.halves[0].algbw_gbps >= 0.1)
        .max_by_key(|r| r.size)
        .map(|r| r.halves[0].busbw_gbps / r.halves[0].algbw_gbps)?;
    let n = match coll {
        Collective::AllReduce if r < 1.999 => 2.0 / (2.0 - r),
        Collective::AllGather | Collective::ReduceScatter | Collective::Alltoall if r < 0.999 => {
            1.0 / (1.0 - r)
        }
        _ => return None,
    };
    (n.is_finite() && n >= 1.0).then(|| n.round() as usize)
}

/// The rank count the bandwidth ratio proves: every row at 1 GB/s or more, with its two
/// printed decimals taken as ±0.005, bounds n; the answer is the one integer inside all the
/// bounds, or none when the decimals leave room for two (large worlds: 2(n-1)/n nears 2).
pub(super) fn nranks_proven_by_ratio(coll: Collective, rows: &[&Row]) -> Option<usize> {
    let (lo, hi) = nranks_ratio_bounds(coll, rows)?;
    let (first, last) = (lo.ceil(), hi.floor());
    (lo.is_finite() && first == last && first >= 2.0).then_some(first as usize)
}

/// The range of rank counts every row's busbw/algbw allows (its two printed decimals taken as
/// ±0.005), from the rows at 1 GB/s or more; `None` when there are none.
pub(super) fn nranks_ratio_bounds(coll: Collective, rows: &[&Row]) -> Option<(f64, f64)> {
    let n_of = |r: f64| match coll {
        Collective::AllReduce => 2.0 / (2.0 - r),
        Collective::AllGather | Collective::ReduceScatter | Collective::Alltoall => 1.0 / (1.0 - r),
        _ => f64::NAN,
    };
    let ceiling = match coll {
        Collective::AllReduce => 2.0,
        _ => 1.0,
    };
    const HALF_DIGIT: f64 = 0.005;
    let (mut lo, mut hi) = (1.0f64, f64::INFINITY);
    let mut seen = false;
    for h in rows
        .iter()
        .map(|r| &r.halves[0])
        .filter(|h| h.algbw_gbps >= 1.0)
    {
        let r_lo = (h.busbw_gbps - HALF_DIGIT) / (h.algbw_gbps + HALF_DIGIT);
        let r_hi = (h.busbw_gbps + HALF_DIGIT) / (h.algbw_gbps - HALF_DIGIT);
        lo = lo.max(n_of(r_lo));
        hi = hi.min(if r_hi < ceiling {
            n_of(r_hi)
        } else {
            f64::INFINITY
        });
        seen = true;
    }
    seen.then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::nccl_tests::table::Half;

    fn row(algbw: f64, busbw: f64) -> Row {
        let half = Half {
            time_us: 1.0,
            algbw_gbps: algbw,
            busbw_gbps: busbw,
            wrong: Some(0),
            old_error: false,
            ..Half::default()
        };
        Row {
            line: 1,
            collective: None,
            size: 1 << 30,
            count: 1 << 28,
            dtype: "float".into(),
            redop: Some("sum".into()),
            root: -1,
            halves: [half.clone(), half],
        }
    }

    fn proven(coll: Collective, bws: &[(f64, f64)]) -> Option<usize> {
        let rows: Vec<Row> = bws.iter().map(|&(a, b)| row(a, b)).collect();
        nranks_proven_by_ratio(coll, &rows.iter().collect::<Vec<_>>())
    }

    #[test]
    fn the_ratio_proves_a_rank_count_only_where_two_decimals_allow_one() {
        // 2(n-1)/n for n = 8, printed to two decimals.
        assert_eq!(proven(Collective::AllReduce, &[(315.70, 552.47)]), Some(8));
        // (n-1)/n for all_gather, n = 4.
        assert_eq!(proven(Collective::AllGather, &[(120.00, 90.00)]), Some(4));
        // 128 ranks (1.984) at 20 GB/s: the decimals leave 124 to 135 open, no answer ...
        assert_eq!(proven(Collective::AllReduce, &[(20.00, 39.69)]), None);
        // ... until a larger row pins it.
        assert_eq!(
            proven(Collective::AllReduce, &[(20.00, 39.69), (300.00, 595.31)]),
            Some(128)
        );
        // Rows under 1 GB/s say nothing, nor does a collective without a ratio.
        assert_eq!(proven(Collective::AllReduce, &[(0.50, 0.87)]), None);
        assert_eq!(proven(Collective::Broadcast, &[(300.00, 300.00)]), None);
        // One rank: busbw 0 is no world of two or more.
        assert_eq!(proven(Collective::AllReduce, &[(300.00, 0.00)]), None);
        // Rows that disagree prove nothing.
        assert_eq!(
            proven(Collective::AllReduce, &[(300.00, 525.00), (300.00, 450.00)]),
            None
        );
    }
}

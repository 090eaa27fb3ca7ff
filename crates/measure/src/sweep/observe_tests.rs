//! The log reader: linear in the log's size, bounded, and matching tuner lines per version.

use super::log::LogReader;
use crate::coll::Collective;
use std::io::Write;

/// A log of NCCL 2.28 tuner lines, `lines` of them, one size.
fn tuner_log(lines: usize) -> Vec<u8> {
    let line = "host-1:1234:1240 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n";
    line.repeat(lines).into_bytes()
}

/// NCCL writes a line per call: a small-message point is 5-15 MB of them, read between two
/// points on rank 0 while every other rank waits. One pass: well under 2 s for 10 MB (the
/// per-line drain it replaces took minutes).
#[test]
fn ten_megabytes_of_tuner_lines_are_read_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nccl.log");
    let log = tuner_log(10_000_000 / 100);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"host-1:1234:1234 [0] NCCL INFO NCCL version 2.28.9+cuda12.8\n")
        .unwrap();
    f.write_all(&log).unwrap();
    let mut r = LogReader::default();
    r.path = Some(path.clone());
    r.ours = true;
    let started = std::time::Instant::now();
    r.catch_up();
    let took = started.elapsed();
    assert!(took.as_secs_f64() < 2.0, "{took:?}");
    assert_eq!(r.facts.choices.values().sum::<u64>(), 100_000);
    let a = r
        .algo_for(Collective::AllReduce, 1024, 2, 1)
        .expect("the choice");
    assert_eq!((a.short().as_str(), a.calls), ("Ring/LL/2ch", 100_000));
    // The part read is given back where the file system can (tmpfs, ext4): the file keeps its
    // size, and what NCCL appends next is still read.
    let blocks = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&path).unwrap().blocks()
    };
    assert!(blocks * 512 < 10_000_000, "{blocks} blocks kept");
    f.write_all(b"host-1:1234:1240 [0] NCCL INFO AllReduce: 2048 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}\n")
        .unwrap();
    r.catch_up();
    assert!(r.algo_for(Collective::AllReduce, 2048, 2, 1).is_some());
}

/// A line split across two reads is read once, whole; a line without end is kept bounded.
#[test]
fn lines_across_reads_are_joined_and_a_runaway_line_is_bounded() {
    let mut r = LogReader::default();
    let line = "h:1:2 [0] NCCL INFO Broadcast: 4096 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}\n";
    let (a, b) = line.split_at(40);
    r.feed_bytes("nccl.log", a.as_bytes());
    r.feed_bytes("nccl.log", b.as_bytes());
    assert_eq!(r.facts.choices.values().sum::<u64>(), 1);
    let junk = vec![b'x'; 8 << 20];
    r.feed_bytes("nccl.log", &junk);
    r.feed_bytes("nccl.log", b"\n");
    r.feed_bytes("nccl.log", line.as_bytes());
    assert_eq!(r.facts.choices.values().sum::<u64>(), 2);
}

/// From NCCL 2.24 AllGather and ReduceScatter lines state the per-rank bytes; through 2.23
/// the whole buffer (nccl-tests' size).
#[test]
fn all_gather_bytes_are_matched_as_the_version_states_them() {
    for (version, stated, matched) in [
        ("2.28.9", 1024, true),
        ("2.23.4", 4096, true),
        ("2.28.9", 4096, false),
    ] {
        let mut r = LogReader::default();
        let log = format!(
            "h:1:1 [0] NCCL INFO NCCL version {version}+cuda12.8\nh:1:2 [0] NCCL INFO AllGather: {stated} Bytes -> Algo RING proto LL channel{{Lo..Hi}}={{0..1}}\n"
        );
        r.feed_bytes("nccl.log", log.as_bytes());
        assert_eq!(
            r.algo_for(Collective::AllGather, 4096, 4, 1).is_some(),
            matched,
            "{version} {stated}"
        );
    }
}

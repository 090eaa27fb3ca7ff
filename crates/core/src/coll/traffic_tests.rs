use super::*;

fn generated(spread: f64) -> Traffic {
    Traffic::Generated { spread }
}

/// The example in src/alltoallv.cu's header comment.
const EXAMPLE: &str = "100  200  150\n50   100  75\n300  150  200\n";

#[test]
fn generated_split_follows_the_distance_and_rounds_to_16_bytes() {
    // 4 ranks, 6000 bytes each: distances 1, 2, 3 of 6 -> 1000, 2000, 3000, rounded down.
    let t = generated(1.0);
    let row: Vec<u64> = (0..4).map(|to| t.peer_bytes(0, to, 4, 6000)).collect();
    assert_eq!(row, [0, 992, 2000, 2992]);
    // Rank 2's distances wrap around: to 3 is 1, to 0 is 2, to 1 is 3.
    let row: Vec<u64> = (0..4).map(|to| t.peer_bytes(2, to, 4, 6000)).collect();
    assert_eq!(row, [2000, 2992, 0, 992]);
    // Spread 0: an even split, itself included.
    let even = generated(0.0);
    assert!((0..4).all(|to| even.peer_bytes(1, to, 4, 6000) == 1488));
    // Half way: the mean of the two, then rounded (0.5*1500 + 0.5*1000 = 1250 -> 1248).
    assert_eq!(generated(0.5).peer_bytes(0, 1, 4, 6000), 1248);
    // One rank keeps everything, rounded.
    assert_eq!(t.peer_bytes(0, 0, 1, 1000), 992);
}

#[test]
fn counts_and_buffers_match_nccl_tests_bookkeeping() {
    let t = generated(1.0);
    // paramcount: 1000 floats on 3 ranks -> 333, rounded to 4 floats -> 332.
    assert_eq!(t.param_count(1000, 4, 3), 332);
    assert_eq!(t.param_count(1000, 1, 3), 320);
    // Every rank sends and receives the same: 332*3*4 = 3984 bytes split 0 : 1 : 2 of 3,
    // 1328 and 2656 bytes (both multiples of 16), 332 and 664 floats.
    let (send, recv) = t.max_counts(4, 3, 3984);
    assert_eq!((send, recv), (332 + 664, 332 + 664));
    let m = parse_matrix(EXAMPLE, 1.0, "m").unwrap();
    assert_eq!(m.param_count(1000, 4, 3), 0);
}

#[test]
fn a_matrix_is_scaled_rounded_and_its_busiest_rank_sizes_the_buffers() {
    let m = parse_matrix(EXAMPLE, 1.0, "traffic.txt").unwrap();
    let Traffic::Matrix { dim, bytes, .. } = &m else {
        panic!("not a matrix: {m:?}")
    };
    assert_eq!(*dim, 3);
    assert_eq!(**bytes, [96, 192, 144, 48, 96, 64, 288, 144, 192]);
    // Row sums 432, 208, 624; column sums 432, 432, 400.
    assert_eq!(m.max_counts(1, 3, 0), (624, 432));
    // In floats each part is 1/4 of its bytes.
    assert_eq!(m.max_counts(4, 3, 0), (156, 108));
    // Two ranks use the top-left corner only.
    assert_eq!(m.max_counts(1, 2, 0), (288, 288));
    // (rows 96+192 and 48+96, columns 96+48 and 192+96)
    let doubled = parse_matrix(EXAMPLE, 2.5, "t").unwrap();
    assert_eq!(doubled.peer_bytes(1, 2, 3, 0), 176); // 75 * 2.5 = 187.5 -> 176
    assert!(m.check(3, 624, 624).is_ok());
    assert_eq!(
        m.check(4, 624, 624).unwrap_err(),
        "Invalid alltoallv traffic matrix, requested nranks (4) is larger than matrix size (3) in file traffic.txt."
    );
    assert_eq!(
        m.check(3, 600, 600).unwrap_err(),
        "maxBytes (-e) must be at least 624 bytes as required by traffic matrix file traffic.txt (got 600). Increase -e."
    );
    assert!(m
        .check(3, 8, 1024)
        .unwrap_err()
        .starts_with("-b and -e options must be set to the same value"));
    assert!(generated(1.0).check(1000, 8, 1 << 30).is_ok());
}

#[test]
fn each_rank_knows_where_its_parts_are() {
    let m = parse_matrix(EXAMPLE, 1.0, "m").unwrap();
    let x = m.exchange(1, 3, 0, 4);
    // Rank 1 sends 48, 96, 64 bytes (12, 24, 16 floats), packed.
    let spans = |v: &[Span]| v.iter().map(|s| (s.offset, s.count)).collect::<Vec<_>>();
    assert_eq!(spans(&x.send), [(0, 12), (12, 24), (36, 16)]);
    // It receives 192, 96, 144 bytes (48, 24, 36 floats), packed in sender order.
    assert_eq!(spans(&x.recv), [(0, 48), (48, 24), (72, 36)]);
    // Its part of each sender's input follows what the sender sent rank 0.
    assert_eq!(x.at_peer, [24, 12, 72]);
    // Rank 0's parts are first everywhere.
    assert_eq!(m.exchange(0, 3, 0, 4).at_peer, [0, 0, 0]);
}

#[test]
fn bad_matrices_are_refused_in_nccl_tests_words() {
    let err = |text: &str| parse_matrix(text, 1.0, "f").unwrap_err();
    assert_eq!(
        err("1 2\n3\n"),
        "Invalid alltoallv traffic matrix column count in file f row 1. Expected 2 columns, got 1."
    );
    assert_eq!(
        err("1 2 3\n4 5 6\n"),
        "Invalid alltoallv traffic matrix, file f must be square (got 2x3)."
    );
    assert_eq!(
        err(" \n\n"),
        "Invalid alltoallv traffic matrix, file f is empty."
    );
    assert_eq!(
        err("1 2\n3 -4\n"),
        "Invalid alltoallv traffic matrix value at row 1 col 1 in file f. Value must be non-negative."
    );
    assert_eq!(
        err("1 2\n3 4x\n"),
        "Invalid alltoallv traffic matrix value at row 1 col 1 in file f."
    );
    // strtod's ERANGE is refused in the plain words (alltoallv.cu:239-242); hex is read.
    assert_eq!(
        err("1 1e400\n1 1\n"),
        "Invalid alltoallv traffic matrix value at row 0 col 1 in file f."
    );
    assert_eq!(
        err("1 1e-400\n1 1\n"),
        "Invalid alltoallv traffic matrix value at row 0 col 1 in file f."
    );
    assert_eq!(
        err("inf 1\n1 1\n"),
        "Invalid alltoallv traffic matrix value at row 0 col 0 in file f. Value overflow (value=inf scale=1)."
    );
    let hex = parse_matrix("0x400 0x1p4\n0 0\n", 1.0, "f").unwrap();
    assert_eq!(
        (hex.peer_bytes(0, 0, 2, 0), hex.peer_bytes(0, 1, 2, 0)),
        (1024, 16)
    );
    // A NaN passes every test there: `(size_t)NaN` is 2^63 with gcc on x86-64.
    let nan = parse_matrix("nan 1\n1 1\n", 1.0, "f").unwrap();
    assert_eq!(nan.peer_bytes(0, 0, 2, 0), 1 << 63);
    let huge = parse_matrix("1e19 0\n0 0\n", 10.0, "f").unwrap_err();
    assert!(huge.contains("Value overflow"), "{huge}");
    // Blank lines, tabs, CRLF and a last line without a newline are all fine.
    let ok = parse_matrix("\r\n16\t32\r\n\n48 64", 1.0, "f").unwrap();
    assert_eq!(ok.peer_bytes(1, 1, 2, 0), 64);
}

#[test]
fn environment_values_are_read_as_strtod_reads_them() {
    let spread = |text: &str| match Traffic::generated(Some(text)) {
        Traffic::Generated { spread } => spread,
        other => panic!("{other:?}"),
    };
    assert_eq!(spread("0.5"), 0.5);
    assert_eq!(spread(" 0.25"), 0.25);
    assert_eq!(spread("2"), 1.0);
    assert_eq!(spread("-1"), 0.0);
    // Not a whole number: the default.
    assert_eq!(spread("0.25 "), 1.0);
    assert_eq!(spread("half"), 1.0);
    assert_eq!(spread("nan"), 1.0);
    assert_eq!(Traffic::matrix_scale(Some("-3")), 0.0);
    assert_eq!(Traffic::matrix_scale(Some("4")), 4.0);
    assert_eq!(Traffic::matrix_scale(None), 1.0);
}

#[test]
fn the_summary_prints_every_rank_as_nccl_tests_does() {
    let text = generated(1.0).summary(2, 64, 4, 1e-3);
    assert_eq!(
        text,
        "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=2 total_bytes=512 spread=1.000 time_usec=1000.00\n\
         #   rank=0 send_bytes=512 recv_bytes=512 alg_bw=0.00 bus_bw=0.00\n\
         #   rank=1 send_bytes=512 recv_bytes=512 alg_bw=0.00 bus_bw=0.00\n"
    );
    let m = parse_matrix(EXAMPLE, 1.0, "m").unwrap();
    let text = m.summary(3, 0, 4, 1e-6);
    assert!(text.starts_with(
        "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=3 matrix_dim=3 scale=1.000 time_usec=1.00\n"
    ));
    assert!(text.contains("#   rank=2 send_bytes=624 recv_bytes=400 alg_bw=0.62 bus_bw=0.42\n"));
}

/// nccl-tests sizes the file with fseek/ftell (alltoallv.cu lines 195-199): a device tells 0
/// and is empty, a pipe cannot seek, a directory cannot be read; past the document cap the
/// file is refused before it is read.
#[test]
fn the_file_is_sized_by_seeking_as_nccl_tests_sizes_it() {
    use std::path::Path;
    assert_eq!(
        read_matrix(Path::new("/dev/zero"), 1.0).unwrap_err(),
        "Invalid alltoallv traffic matrix, file /dev/zero is empty."
    );
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = read_matrix(&fifo, 1.0).unwrap_err();
    assert!(
        e.starts_with("Unable to seek alltoallv traffic matrix file"),
        "{e}"
    );
    let e = read_matrix(dir.path(), 1.0).unwrap_err();
    assert!(
        e.starts_with("Unable to read alltoallv traffic matrix file"),
        "{e}"
    );
    let big = dir.path().join("big.txt");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(crate::bounded::MAX_DOCUMENT_BYTES + 1)
        .unwrap();
    let e = read_matrix(&big, 1.0).unwrap_err();
    assert!(e.contains("larger than 256 MiB"), "{e}");
    let ok = dir.path().join("ok.txt");
    std::fs::write(&ok, "0 16\n32 0\n").unwrap();
    assert!(matches!(
        read_matrix(&ok, 1.0),
        Ok(Traffic::Matrix { dim: 2, .. })
    ));
}

//! Property tests as fuzzers for every parser: arbitrary bytes and mangled corpus files never
//! panic, and every outcome is either a result or an error naming the file. Failing inputs are
//! kept by proptest under tests/fuzz_parsers.proptest-regressions.

use ncclprobe::import::{nccl_log, nccl_tests, smi, topo};
use proptest::prelude::*;
use std::path::Path;

fn corpus_lines() -> Vec<String> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut lines = Vec::new();
    for dir in ["nccl-tests", "nccl-debug", "topo"] {
        for e in std::fs::read_dir(base.join(dir)).unwrap().flatten() {
            let bytes = std::fs::read(e.path()).unwrap();
            lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
        }
    }
    lines
}

fn run_all(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("input.txt");
    std::fs::write(&p, bytes).unwrap();
    for result in [
        nccl_tests::import_text(&p).err().map(|e| e.to_string()),
        nccl_tests::import_json(&p).err().map(|e| e.to_string()),
        topo::parse_file(&p).err().map(|e| e.to_string()),
        nccl_log::parse_file(&p).err().map(|e| e.to_string()),
        smi::parse_file(&p).err().map(|e| e.to_string()),
    ]
    .into_iter()
    .flatten()
    {
        assert!(
            result.contains("input.txt"),
            "an error must name the file: {result}"
        );
    }
}

/// A corpus-shaped document: real lines, shuffled, cut, with bytes flipped.
fn mangled() -> impl Strategy<Value = Vec<u8>> {
    let lines = corpus_lines();
    let n = lines.len();
    (proptest::collection::vec(
        (0..n, 0usize..200, any::<u8>(), any::<bool>()),
        1..120,
    ),)
        .prop_map(move |(picks,)| {
            let mut out = Vec::new();
            for (i, cut, byte, flip) in picks {
                let mut l = lines[i].clone().into_bytes();
                if flip && !l.is_empty() {
                    let at = cut % l.len();
                    l[at] = byte;
                } else {
                    l.truncate(cut.max(1).min(l.len()));
                }
                out.extend_from_slice(&l);
                out.push(if flip { b'\t' } else { b'\n' });
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        run_all(&bytes);
    }

    #[test]
    fn mangled_corpus_never_panics(doc in mangled()) {
        run_all(&doc);
    }

    #[test]
    fn topo_strings_never_panic(s in "[ \\tA-Z0-9_X#:-]{0,400}") {
        let _ = topo::parse_str(&s);
        let _ = smi::parse_str(&s);
    }
}

//! Input files as every command reads them: what kind a file is (from its first lines), and
//! how reading problems become exit code 2 naming the file.

#[path = "html.rs"]
pub mod html;

use crate::documents::read::{self as document, Document as Readable};
use crate::exit::Failure;
use crate::import::nccl_log::LogFacts;
use crate::import::text::STDIN_NAME;
use crate::import::{nccl_tests, text::Input, text::InputError, topo};
use crate::model::RunRecord;
use std::path::Path;

/// Every input problem (unreadable, empty, binary, wrong kind) is bad input: exit 2.
pub fn input_failure(e: InputError) -> Failure {
    Failure::usage(e.to_string())
}

/// What a file is, from its first lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RunRecord,
    NcclTestsJson,
    NcclTests,
    Topo,
    /// NCCL's system or graph XML (`NCCL_TOPO_DUMP_FILE`, `NCCL_GRAPH_DUMP_FILE`).
    NcclDump,
    Smi,
    /// NCCL_DEBUG or PyTorch output, told by its content (NCCL, torch, CUDA or MPI lines).
    Log,
    /// Nothing, or only blank lines.
    Empty,
    /// NUL bytes near the start.
    Binary,
    /// The CSV `sweep --csv` writes (a curve for `simulate`, not a record).
    SweepCsv,
    /// JSON that is not an object (`[]`, `null`, a number).
    OtherJson(&'static str),
    /// Text in none of the formats above.
    Text,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::RunRecord => "ncclprobe run record",
            Kind::NcclTestsJson => "nccl-tests JSON",
            Kind::NcclTests => "nccl-tests output",
            Kind::Topo => "nvidia-smi topo -m",
            Kind::NcclDump => "NCCL topology/graph dump",
            Kind::Smi => "nvidia-smi",
            Kind::Log => "NCCL/PyTorch log",
            Kind::Empty => "an empty file",
            Kind::Binary => "binary data",
            Kind::SweepCsv => "an ncclprobe CSV",
            Kind::OtherJson(_) => "JSON",
            Kind::Text => "text",
        }
    }

    /// What a command that wanted something else is told this input is (`X: is ...`).
    pub fn is_what(self) -> String {
        match self {
            Kind::Text => "text in none of the formats ncclprobe reads".into(),
            Kind::OtherJson(what) => format!("JSON but not an ncclprobe document ({what})"),
            other => format!("{} output", other.name()),
        }
    }
}

/// The header `sweep --csv` writes (render::csv).
const SWEEP_CSV_HEADER: &str = "collective,nranks,size_bytes,";

/// Words only NCCL, PyTorch, CUDA or MPI output carries, or a line the message catalogue
/// knows (NCCL's lines with their prefix stripped, UCX's, Open MPI's): what makes text a log.
fn is_log_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "nccl",
        "torch",
        "c10d",
        "processgroup",
        "cuda",
        "mpi",
        "watchdog",
    ]
    .iter()
    .any(|w| l.contains(w))
        || super::messages::catalogue()
            .recognise(line.trim(), None)
            .is_some()
}

/// JSON that is not an object, named: `[]`, `null`, ... A log line may open with `[` too
/// (`[2025-05-12 17:31:38]`, `[0]`): a small input must parse whole, a large one must open
/// an array of objects, arrays or strings.
fn other_json(input: &Input, first: &str) -> Option<&'static str> {
    let Some(whole) = input.head_whole() else {
        let inside = first.strip_prefix('[')?.trim_start();
        return inside.starts_with(['{', '[', '"']).then_some("an array");
    };
    match serde_json::from_slice::<serde_json::Value>(whole).ok()? {
        serde_json::Value::Null => Some("null"),
        serde_json::Value::Bool(_) => Some("a boolean"),
        // A whole file of one count is `nproc`'s answer, host state `diagnose` reads.
        serde_json::Value::Number(n) if n.as_u64().is_some_and(|n| (1..=100_000).contains(&n)) => {
            None
        }
        serde_json::Value::Number(_) => Some("a number"),
        serde_json::Value::String(_) => Some("a string"),
        serde_json::Value::Array(_) => Some("an array"),
        serde_json::Value::Object(_) => None,
    }
}

fn is_nccl_tests_line(line: &str) -> bool {
    let t = crate::import::nccl_tests::peel(line);
    t.starts_with("# nThread")
        || t.starts_with("#       size")
        || t.contains("Collective test starting")
        || t.contains("Avg bus bandwidth")
        || (t.starts_with('#') && t.contains("size") && t.contains("algbw"))
}

fn is_topo_row(line: &str) -> bool {
    let toks: Vec<&str> = line.split_whitespace().collect();
    toks.first().is_some_and(|t| t.starts_with("GPU"))
        && toks
            .iter()
            .skip(1)
            .any(|t| topo::normalise_link(t).is_some_and(|c| c != "X") || *t == "X")
}

/// The first lines of an input, cleaned, and unwrapped when they were pasted from a web page.
fn head_of(input: &Input) -> Vec<String> {
    let head = input.head_lines(400);
    if !html::looks_like_html(&head) {
        return head;
    }
    head.iter()
        .flat_map(|l| html::unwrap(l))
        .map(|l| crate::import::text::clean(&l).0)
        .collect()
}

/// A table of another benchmark that borrows nccl-tests' column names but not their order,
/// named: mscclpp-test (MSCCL++'s test/mscclpp-test/common.cc prints `size count` and then
/// in-place `time algbw busbw #wrong` before out-of-place, with no type, redop or root, and
/// fills one of the halves). Read as nccl-tests, its in-place numbers would land in the
/// out-of-place columns; it is refused instead.
fn foreign_table(body: &[&str]) -> Option<String> {
    let comments: Vec<&str> = body
        .iter()
        .map(|l| crate::import::nccl_tests::peel(l).trim_start())
        .filter(|l| l.starts_with('#'))
        .collect();
    let tokens = |l: &str| -> Vec<String> {
        l.trim_start_matches('#')
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let size_header = comments
        .iter()
        .map(|l| tokens(l))
        .find(|t| t.first().map(String::as_str) == Some("size") && t.iter().any(|x| x == "time"))?;
    let typed = size_header.iter().any(|x| x == "type" || x == "redop");
    let in_place_first = comments.iter().any(
        |l| matches!((l.find("in-place"), l.find("out-of-place")), (Some(a), Some(b)) if a < b),
    );
    let mscclpp = body
        .iter()
        .any(|l| l.contains("MSCCL++") || l.contains("mscclpp"));
    if typed || !(in_place_first || mscclpp) {
        return None;
    }
    let tool = if mscclpp {
        "mscclpp-test"
    } else {
        "a benchmark other than nccl-tests"
    };
    Some(format!(
        "looks like {tool} output: its table has in-place columns first and no type/redop/root columns ({}), which ncclprobe does not read as nccl-tests' (out-of-place first); measure with nccl-tests or `ncclprobe sweep` for a record",
        size_header.join(" ")
    ))
}

/// What an input is, from its first lines.
pub fn detect(input: &Input) -> Kind {
    if input.head_is_binary() {
        return Kind::Binary;
    }
    let head = head_of(input);
    let body: Vec<&str> = head
        .iter()
        .map(|s| s.as_str())
        .filter(|l| !l.starts_with("# source:"))
        .collect();
    let Some(first) = body
        .iter()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim_start())
    else {
        return Kind::Empty;
    };
    if first.starts_with('{') {
        // Our documents carry a schema version and a kind; nccl-tests' JSON has neither. A
        // compact document with sorted keys may put `schema_version` past the head, but `kind`
        // comes before its long `points`.
        let ours = |l: &&str| {
            l.contains("\"schema_version\"") || l.contains("\"kind\":") || l.contains("\"kind\" :")
        };
        return if body.iter().any(ours) {
            Kind::RunRecord
        } else {
            Kind::NcclTestsJson
        };
    }
    if let Some(what) = other_json(input, first) {
        return Kind::OtherJson(what);
    }
    if first.starts_with(SWEEP_CSV_HEADER) {
        return Kind::SweepCsv;
    }
    let any = |f: &dyn Fn(&str) -> bool| body.iter().any(|l| f(l));
    if super::nccl_dump::looks_like(&body) {
        return Kind::NcclDump;
    }
    if any(&|l| l.contains("NVIDIA-SMI") || (l.contains("Processes:") && l.starts_with('|'))) {
        return Kind::Smi;
    }
    if any(&is_nccl_tests_line) {
        return Kind::NcclTests;
    }
    if any(&is_topo_row) {
        return Kind::Topo;
    }
    if any(&is_log_line) {
        return Kind::Log;
    }
    Kind::Text
}

/// Inputs no command reads, refused naming what they are.
fn refuse_unreadable(name: &str, kind: Kind) -> Result<(), Failure> {
    let what = match kind {
        Kind::Empty if name == STDIN_NAME => "is empty (nothing came on stdin)".to_string(),
        Kind::Empty => "is empty (an empty file)".to_string(),
        Kind::Binary => "is binary data, not text".to_string(),
        Kind::SweepCsv => {
            "is an ncclprobe CSV (sweep --csv); pass the JSON record (--json)".to_string()
        }
        Kind::OtherJson(what) => format!("is JSON but not an ncclprobe document ({what})"),
        _ => return Ok(()),
    };
    Err(Failure::usage(format!("{name}: {what}")))
}

/// Open an input once (`-` is stdin) and tell its kind.
pub fn open(path: &Path) -> Result<(Input, Kind), Failure> {
    let input = Input::open(path).map_err(input_failure)?;
    let kind = detect(&input);
    let (input, kind) = match kind {
        Kind::NcclTestsJson if input.head_whole().is_none() => settle_json(input)?,
        _ => (input, kind),
    };
    refuse_unreadable(&input.name, kind)?;
    if kind == Kind::NcclTests {
        let head = head_of(&input);
        let body: Vec<&str> = head.iter().map(String::as_str).collect();
        if let Some(why) = foreign_table(&body) {
            return Err(Failure::usage(format!("{}: {why}", input.name)));
        }
    }
    Ok((input, kind))
}

/// A JSON object too long to judge by its first bytes (keys sorted, as `jq -S` writes them,
/// put a long `env` before `kind` and `schema_version`): read whole, and told by its top-level
/// keys; the input is handed on from memory.
fn settle_json(input: Input) -> Result<(Input, Kind), Failure> {
    let name = input.name.clone();
    let bytes = input.bytes("a JSON document").map_err(input_failure)?;
    let ours = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes)
        .is_ok_and(|m| m.contains_key("schema_version") || m.contains_key("kind"));
    let kind = if ours {
        Kind::RunRecord
    } else {
        Kind::NcclTestsJson
    };
    let input =
        Input::from_reader(&name, Box::new(std::io::Cursor::new(bytes))).map_err(input_failure)?;
    Ok((input, kind))
}

/// nccl-tests output as posted, text or `-J` JSON, decided by the content.
pub fn import_nccl_tests(path: &Path) -> Result<RunRecord, Failure> {
    let (input, kind) = open(path)?;
    // Inputs of another kind, told by their content: the command that reads each.
    let elsewhere = match kind {
        Kind::Topo => Some("`nvidia-smi topo -m` output: give it to `compare RUN --topo FILE` or `topo --from FILE`"),
        Kind::Smi => Some("`nvidia-smi` output: give it to `diagnose --from FILE`"),
        Kind::NcclDump => Some("NCCL's topology or graph XML: give it to `diagnose --from FILE` or `topo --from FILE`"),
        _ => None,
    };
    if let Some(what) = elsewhere {
        return Err(Failure::usage(format!(
            "{}: {what}; `import` reads nccl-tests output",
            input.name
        )));
    }
    match kind {
        Kind::RunRecord | Kind::NcclTestsJson => nccl_tests::json_from(input),
        _ => nccl_tests::text_from(input, &mut |_| {}),
    }
    .map_err(input_failure)
}

/// What `diagnose` and `qualify` read from our JSON: a run record or a pair matrix.
pub enum Document {
    Run(Box<RunRecord>),
    Matrix(Box<crate::documents::matrix::MatrixDocument>),
}

fn document_failure(e: document::DocumentError) -> Failure {
    Failure::usage(e.to_string())
}

/// One of our documents of type `T`, held whole and checked by the one reader
/// (`documents::read`): schema version, kind, shape and content.
pub fn read_doc<T: Readable>(input: Input) -> Result<T, Failure> {
    let name = input.name.clone();
    let bytes = input
        .bytes(&format!("an ncclprobe {}", T::NAME))
        .map_err(input_failure)?;
    document::read(&name, &bytes).map_err(document_failure)
}

/// One of our documents of type `T` from a file (`-` is stdin), refused as `open` refuses.
pub fn read_file<T: Readable>(path: &Path) -> Result<T, Failure> {
    let (input, _) = open(path)?;
    read_doc(input)
}

/// A run record, or a `kind: matrix` document.
pub fn read_document(input: Input) -> Result<Document, Failure> {
    let name = input.name.clone();
    let bytes = input
        .bytes("an ncclprobe run record or pair matrix")
        .map_err(input_failure)?;
    let head = document::head(&name, &bytes).map_err(document_failure)?;
    match head.kind {
        crate::documents::Kind::Matrix => document::read_body(&name, &bytes)
            .map(|m| Document::Matrix(Box::new(m)))
            .map_err(document_failure),
        _ => document::read(&name, &bytes)
            .map(|r| Document::Run(Box::new(r)))
            .map_err(document_failure),
    }
}

/// An ncclprobe run record, checked by the one reader.
pub fn read_run_record(input: Input) -> Result<RunRecord, Failure> {
    read_doc(input)
}

/// A run: an ncclprobe run record, or nccl-tests output (text or -J JSON) imported on the way
/// in, with the NCCL_DEBUG lines nccl-tests output often carries. Anything else is bad input
/// naming the file and what it is.
pub fn read_run(path: &Path) -> Result<(String, RunRecord, Option<LogFacts>), Failure> {
    let (input, kind) = open(path)?;
    read_run_from(input, kind)
}

/// [`read_run`] of an input already opened (stdin can be opened once).
pub fn read_run_from(
    input: Input,
    kind: Kind,
) -> Result<(String, RunRecord, Option<LogFacts>), Failure> {
    let name = input.name.clone();
    let mut log = None;
    let run = match kind {
        Kind::RunRecord => read_run_record(input)?,
        Kind::NcclTestsJson => nccl_tests::json_from(input).map_err(input_failure)?,
        Kind::NcclTests => {
            let mut facts = LogFacts::default();
            let run = nccl_tests::text_from(input, &mut |line| facts.feed(&name, line))
                .map_err(input_failure)?;
            log = facts.finish(name.clone()).ok();
            run
        }
        other => {
            return Err(Failure::usage(format!(
                "{name}: is {}, not a run record (ncclprobe sweep --json, or nccl-tests output)",
                other.is_what()
            )))
        }
    };
    Ok((name, run, log))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(text: &str) -> Kind {
        let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        detect(&Input::from_reader("test", reader).unwrap())
    }
    #[test]
    fn kinds_are_told_apart_by_their_first_lines() {
        assert_eq!(kind_of("# nThread 1 nGpus 8 minBytes 8\n"), Kind::NcclTests);
        assert_eq!(
            kind_of("\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t X \n"),
            Kind::Topo
        );
        assert_eq!(
            kind_of("+---+\n| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05 |\n"),
            Kind::Smi
        );
        assert_eq!(kind_of("{\"schema_version\": 1}\n"), Kind::RunRecord);
        assert_eq!(kind_of("{\"nccl-tests\": 1}\n"), Kind::NcclTestsJson);
        // Compact, keys sorted: the schema version lies far past the head, the kind does not.
        let compact = format!(
            "{{\"backend\":{{}},\"kind\":\"run\",\"points\":[{}],\"schema_version\":1}}",
            "0,".repeat(400_000)
        );
        assert_eq!(kind_of(&compact), Kind::RunRecord);
        assert_eq!(
            kind_of("node1:123:123 [0] NCCL INFO Bootstrap : Using eth0\n"),
            Kind::Log
        );
        assert_eq!(
            kind_of("<!-- source: x -->\n<system version=\"1\">\n  <cpu numaid=\"0\">\n"),
            Kind::NcclDump
        );
        assert_eq!(kind_of("<graphs version=\"1\">\n"), Kind::NcclDump);
        // A topology inside a web page is a topology.
        assert_eq!(
            kind_of("<pre>&nbsp;GPU0&nbsp;&nbsp;GPU1<br>GPU0&nbsp;&nbsp;X&nbsp;&nbsp;NV12<br>GPU1&nbsp;&nbsp;NV12&nbsp;&nbsp;X</pre>\n"),
            Kind::Topo
        );
    }

    #[test]
    fn real_logs_are_told_by_their_content() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/corpus/nccl-debug");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "txt") {
                let kind = detect(&Input::open(&path).unwrap());
                // Some carry nccl-tests' table too; none is unrecognised text.
                assert!(
                    matches!(kind, Kind::Log | Kind::NcclTests),
                    "{}: {kind:?}",
                    path.display()
                );
                seen += 1;
            }
        }
        assert!(seen >= 10, "{seen} logs in {}", dir.display());
        assert_eq!(kind_of("hello\nworld\n"), Kind::Text);
        assert_eq!(kind_of(""), Kind::Empty);
        assert_eq!(kind_of("\n  \n"), Kind::Empty);
        assert_eq!(kind_of("\x7fELF\x00\x01"), Kind::Binary);
        assert_eq!(kind_of("[]"), Kind::OtherJson("an array"));
        assert_eq!(kind_of("null\n"), Kind::OtherJson("null"));
        assert_eq!(
            kind_of("collective,nranks,size_bytes,count,dtype\n"),
            Kind::SweepCsv
        );
    }

    #[test]
    fn tables_of_other_benchmarks_are_named_not_read() {
        let header = "#                                        in-place                       out-of-place\n\
#       size         count     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
        let body = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
        let lines = body(&format!("# Initializing MSCCL++\n{header}"));
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let why = foreign_table(&refs).expect("refused");
        assert!(why.starts_with("looks like mscclpp-test output"), "{why}");
        // The same layout without the name is still refused, naming what it is not.
        let lines = body(header);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert!(foreign_table(&refs)
            .unwrap()
            .contains("other than nccl-tests"));
        // nccl-tests itself (out-of-place first, typed), also when run on MSCCL++'s NCCL API.
        let nccl_tests = "# Using MSCCL++ NCCL shim\n\
#                                                              out-of-place                       in-place\n\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
        let lines = body(nccl_tests);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(foreign_table(&refs), None);
    }
}

//! nccl-tests output → run record: the text table in every variant seen in the field (old
//! `error` and new `#wrong` columns, with or without `redop`/`root`, tagged and prefixed lines,
//! interleaved NCCL INFO lines, duplicated headers, cut-off runs) and the `-J` JSON file.

mod build;
mod infer;
mod json;
mod sizes;
mod table;

use build::build;
pub use build::EXPECTED;
pub use json::{import_json, json_from};

pub use table::peel;
use table::Parsed;

use super::text::{Input, InputError, Line};
use crate::model::RunRecord;
use std::path::Path;

/// Import nccl-tests' text output.
pub fn import_text(path: &Path) -> Result<RunRecord, InputError> {
    text_from(Input::open(path)?, &mut |_| {})
}

/// Import nccl-tests' text output from an input opened once; every line also goes to `tee`
/// (diagnose reads the NCCL lines that nccl-tests output carries in the same pass).
pub fn text_from(input: Input, tee: &mut dyn FnMut(&Line)) -> Result<RunRecord, InputError> {
    let name = input.name.clone();
    let mut p = Parsed::default();
    // A table pasted from a web page (a mail archive's `<pre>`, `&nbsp;`): its text lines.
    let html = crate::import::input::html::looks_like_html(&input.head_lines(400));
    input.lines(EXPECTED, |line| {
        tee(&line);
        match html {
            true => crate::import::input::html::lines_of(&line)
                .iter()
                .for_each(|l| p.feed(l)),
            false => p.feed(&line),
        }
    })?;
    build(&name, p)
}

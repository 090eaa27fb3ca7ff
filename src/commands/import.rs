//! `ncclprobe import`: nccl-tests output in, our record and CSV out, with what had to be guessed.

use crate::cli::ImportArgs;
use crate::exit::{ExitCode, Failure};
use crate::import::input::import_nccl_tests;
use crate::render::{record::stdout_documents, table};

pub fn run(args: &ImportArgs) -> Result<ExitCode, Failure> {
    let out = &args.output.outputs();
    out.check()?;
    let mut sink = out.sink(
        import_nccl_tests(&args.file)?,
        crate::render::record::SPECIAL_PATIENCE,
    );
    sink.complete()
        .map_err(|e| Failure::internal(format!("{e:#}")))?;
    let record = sink.record;
    if out.table_on_stdout() {
        // The name the input was read under ("(stdin)" for `-`), as the record has it.
        let name = record
            .import
            .as_ref()
            .map(|i| i.file.clone())
            .unwrap_or_else(|| args.file.display().to_string());
        crate::out!("{}", table::imported(&name, &record));
    }
    crate::out!("{}", stdout_documents(out, &record)?);
    Ok(ExitCode::Ok)
}

//! `ncclprobe qualify`: gate a run on rules; exit 0 pass, 3 fail, 2 bad input.

use super::expectation::load_run;
use crate::cli::{DocFormat, QualifyArgs, RuleArgs};
use crate::documents::Qualification;
use crate::exit::{ExitCode, Failure};
use crate::expect::gate::judge;
use crate::render;

/// Print the verdict and write the JUnit file; the exit code says pass (0) or fail (3).
pub fn report(q: &Qualification, args: &RuleArgs, format: DocFormat) -> Result<ExitCode, Failure> {
    if let Some(path) = &args.junit {
        let xml = render::expect::junit(q)?;
        render::record::write_atomic(path, xml.as_bytes())
            .map_err(|e| Failure::internal(format!("--junit {}: {e}", path.display())))?;
    }
    match format {
        DocFormat::Json => println!("{}", render::to_json(q)?),
        DocFormat::Csv => print!("{}", render::expect::qualification_csv(q)?),
        DocFormat::Markdown => print!("{}", render::expect::qualification_markdown(q)),
        DocFormat::Table => print!("{}", render::expect::qualification_table(q)),
    }
    Ok(if q.passed {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

pub fn run(args: &QualifyArgs) -> Result<ExitCode, Failure> {
    if let (input, super::input::Kind::RunRecord) = super::input::open(&args.run)? {
        let name = input.name.clone();
        if let super::input::Document::Matrix(doc) = super::input::read_document(input)? {
            let q = crate::matrix::qualify::judge(&name, &doc, &args.pairs);
            return report(&q, &args.rules, args.format);
        }
    }
    if args.pairs.min_pair_bw.is_some() || args.pairs.max_pair_latency_us.is_some() {
        return Err(Failure::usage(
            "--min-pair-bw/--max-pair-latency-us judge a pair matrix (ncclprobe matrix --json); this is a run",
        ));
    }
    let loaded = load_run(&args.run, &args.expectation)?;
    let q = judge(
        &loaded.name,
        &loaded.run,
        loaded.log.as_ref(),
        &args.rules,
        &args.expectation,
        1,
        true,
    )?;
    report(&q, &args.rules, args.format)
}

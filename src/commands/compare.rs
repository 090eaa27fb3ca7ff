//! `ncclprobe compare`: one run against its expectation, or two runs against each other.

use crate::cli::{CompareArgs, DocFormat};
use crate::exit::{ExitCode, Failure};
use crate::expect::setup::{judge, load_run};
use crate::expect::versus;
use crate::render;

pub fn run(args: &CompareArgs) -> Result<ExitCode, Failure> {
    crate::flags::fraction("--noise", args.noise)?;
    let expectation = args.expectation.expectation();
    let doc = match args.runs.as_slice() {
        [one] => {
            let one = load_run(one, &expectation)?;
            judge(&one.name, &one.run, one.log.as_ref(), &expectation)?
        }
        [before, after] => {
            if expectation.profile.is_some()
                || expectation.topo.is_some()
                || expectation.hardware.is_some()
            {
                return Err(Failure::usage(
                    "compare BEFORE AFTER holds two runs against each other; --profile, --topo and --hardware are for one run against its expectation",
                ));
            }
            let (b, a) = (
                load_run(before, &expectation)?,
                load_run(after, &expectation)?,
            );
            versus::against_run(&b.name, &b.run, &a.name, &a.run, args.noise)
                .map_err(Failure::usage)?
        }
        _ => {
            return Err(Failure::usage(
                "compare takes one run, or two (BEFORE AFTER)",
            ))
        }
    };
    for w in &doc.warnings {
        eprintln!("ncclprobe: warning: {}", render::safe::line(w));
    }
    match args.format {
        DocFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        DocFormat::Csv => crate::out!("{}", render::expect::comparison_csv(&doc)?),
        DocFormat::Markdown => crate::out!("{}", render::expect::comparison_markdown(&doc)),
        DocFormat::Table => crate::out!("{}", render::expect::comparison_table(&doc)),
    }
    // A comparison that compared nothing, or only gave the readings per NIC count, reached
    // no verdict: a script must not read it as a pass.
    if !doc.judged() {
        let why = match doc.nic_readings.is_empty() {
            true => doc.summary.clone(),
            false => format!("{} ({})", doc.summary, doc.baseline.why),
        };
        let why = render::safe::line(&why).into_owned();
        return Err(Failure::usage(match why.contains("not judged") {
            true => why,
            false => format!("not judged: {why}"),
        }));
    }
    Ok(ExitCode::Ok)
}

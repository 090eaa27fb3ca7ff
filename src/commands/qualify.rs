//! `ncclprobe qualify`: gate a run on rules; exit 0 pass, 3 fail, 2 bad input.

use crate::cli::{DocFormat, QualifyArgs};
use crate::documents::Qualification;
use crate::exit::{ExitCode, Failure};
use crate::expect::gate::judge;
use crate::expect::options::Rules;
use crate::expect::setup::load_run;
use crate::render;

/// Print the verdict and write the JUnit file; the exit code says pass (0) or fail (3).
pub fn report(
    q: &Qualification,
    args: &Rules,
    format: DocFormat,
    cx: &render::expect::SuiteContext,
) -> Result<ExitCode, Failure> {
    if let Some(m) = q
        .profile
        .as_ref()
        .and_then(|p| p.mismatch().map(|m| (p, m)))
    {
        eprintln!("ncclprobe: warning: the profile {}: {}", m.0.id, m.1);
    }
    if let Some(path) = &args.junit {
        let xml = render::expect::junit(q, cx)?;
        render::record::write_document("--junit", path, xml.as_bytes())?;
        if render::record::paths::is_stdout(path) {
            // The JUnit is stdout's document (the guard refused another); the verdict is said
            // on stderr.
            eprint!("{}", render::expect::qualification_table(q));
            return Ok(exit_code(q));
        }
    }
    match format {
        DocFormat::Json => crate::outln!("{}", render::to_json(q)?),
        DocFormat::Csv => crate::out!("{}", render::expect::qualification_csv(q)?),
        DocFormat::Markdown => crate::out!("{}", render::expect::qualification_markdown(q)),
        DocFormat::Table => crate::out!("{}", render::expect::qualification_table(q)),
    }
    Ok(exit_code(q))
}

fn exit_code(q: &Qualification) -> ExitCode {
    if q.results.is_empty() {
        // Nothing was judged: not a pass, and not a node's failure either.
        ExitCode::Usage
    } else if q.passed {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    }
}

pub fn run(args: &QualifyArgs) -> Result<ExitCode, Failure> {
    let (rules, expectation, pairs) = (
        args.rules.rules(),
        args.expectation.expectation(),
        args.pairs.rules(),
    );
    pairs.check()?;
    if let (input, crate::import::input::Kind::RunRecord) = crate::import::input::open(&args.run)? {
        let name = input.name.clone();
        if let crate::import::input::Document::Matrix(doc) =
            crate::import::input::read_document(input)?
        {
            // A gate never passes a rule it did not check.
            let run_only = run_rules_given(&rules, &expectation);
            if !run_only.is_empty() {
                return Err(Failure::usage(format!(
                    "{} judge a run, and {name} is a pair matrix (a `matrix` document): a matrix is gated by --min-pair-bw and --max-pair-latency-us",
                    run_only.join(", ")
                )));
            }
            if args.against_fleet.is_some() {
                return Err(Failure::usage(format!(
                    "--against-fleet judges a run's collectives against its peers, and {name} is a pair matrix: `fleet` judges matrices' links"
                )));
            }
            let q = crate::matrix::qualify::judge(&name, &doc, &pairs);
            crate::history::keep::keep_matrix(args.history.target()?.as_ref(), &doc)?;
            let cx = render::expect::SuiteContext::of_matrix(&doc);
            return report(&q, &rules, args.format, &cx);
        }
    }
    if pairs.min_pair_bw.is_some() || pairs.max_pair_latency_us.is_some() {
        return Err(Failure::usage(
            "--min-pair-bw/--max-pair-latency-us judge a pair matrix (ncclprobe matrix --json); this is a run",
        ));
    }
    let loaded = load_run(&args.run, &expectation)?;
    if loaded.run.backend.nranks == 1 {
        crate::expect::gate::one_rank(&rules, &expectation.profile)?;
    }
    // --log wins over the lines the run's own output carried.
    let log = match &expectation.log {
        Some(path) => {
            let input = crate::import::text::Input::open(path)
                .map_err(crate::import::input::input_failure)?;
            Some(
                crate::import::nccl_log::from_input(input)
                    .map_err(crate::import::input::input_failure)?,
            )
        }
        None => loaded.log,
    };
    let mut q = judge(
        &loaded.name,
        &loaded.run,
        log.as_ref(),
        &rules,
        &expectation,
        1,
        // With --against-fleet alone, the fleet is what the run is held against.
        args.against_fleet.is_none(),
    )?;
    if let Some(db) = &args.against_fleet {
        use crate::history::against::Against;
        match against_fleet(db, args, &loaded.run)? {
            Against::Judged(results) => q.results.extend(results),
            // The fleet the only rule, and it could not judge: no verdict (as `fleet` says
            // of a node no peer judged), not a node's failure.
            Against::NotJudged(why) if !judged_beside_the_fleet(&q.results) => {
                return Err(Failure::usage(format!("NOT JUDGED: {}", why.message)))
            }
            // Beside other rules, a rule not checked is not a pass.
            Against::NotJudged(why) => q.results.push(why),
        }
        (q.passed, q.summary) = crate::expect::qualify::conclude(&q.results, 1);
    }
    // --node-name and --sku may say who the run is from for --against-fleet alone.
    let target = match (&args.history.history, &args.against_fleet) {
        (None, Some(_)) => None,
        _ => args.history.target()?,
    };
    if let Some(target) = target {
        // The verdict is kept with the run it judged.
        let mut judged = loaded.run.clone();
        judged.qualification = Some(q.clone());
        crate::history::keep::keep_run(Some(&target), &judged, "qualify")?;
    }
    report(
        &q,
        &rules,
        args.format,
        &render::expect::SuiteContext::of_run(&loaded.run),
    )
}

/// Whether a rule beyond the ones every run gets (it completed, nothing was wrong) judged
/// the run, or one of those failed: then a fleet that could not judge is a failed rule
/// beside them; else there is no verdict at all.
fn judged_beside_the_fleet(results: &[crate::documents::RuleResult]) -> bool {
    results
        .iter()
        .any(|r| !r.passed || !matches!(r.rule.as_str(), "completed" | "correct"))
}

/// The run against its SKU's other nodes in the store `db`.
fn against_fleet(
    db: &str,
    args: &QualifyArgs,
    run: &crate::model::RunRecord,
) -> Result<crate::history::against::Against, Failure> {
    use crate::history::keep::failure;
    let rules = args.fleet_rules.rules()?;
    let location = crate::cli::history::parse(db)?;
    let mut store = crate::history::Store::open_reader(&location).map_err(failure)?;
    crate::history::against::against_fleet(&mut store, run, &args.history.stated(), &rules)
        .map_err(failure)
}

/// The flags given that only a run (not a pair matrix) can be judged by.
fn run_rules_given(
    rules: &crate::expect::options::Rules,
    expectation: &crate::expect::options::Expectation,
) -> Vec<&'static str> {
    [
        (rules.min_busbw.is_some(), "--min-busbw"),
        (rules.max_latency_us.is_some(), "--max-latency-us"),
        (rules.max_skew.is_some(), "--max-skew"),
        (rules.min_ratio.is_some(), "--min-ratio"),
        (rules.rules.is_some(), "--rules"),
        (!rules.require.is_empty(), "--require"),
        (!rules.forbid.is_empty(), "--forbid"),
        (rules.max_ecc_uncorrected.is_some(), "--max-ecc-uncorrected"),
        (rules.require_link_width.is_some(), "--require-link-width"),
        (expectation.profile.is_some(), "--profile"),
        (expectation.topo.is_some(), "--topo"),
        (expectation.log.is_some(), "--log"),
        (expectation.hardware.is_some(), "--hardware"),
        (expectation.collective.is_some(), "--collective"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect()
}

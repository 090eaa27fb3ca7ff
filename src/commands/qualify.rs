//! `ncclprobe qualify`: gate a run on rules; exit 0 pass, 3 fail, 2 bad input.

use super::expectation::{choice, load_run};
use crate::cli::{DocFormat, QualifyArgs, RuleArgs};
use crate::documents::Qualification;
use crate::exit::{ExitCode, Failure};
use crate::expect::compare::baseline_ref;
use crate::expect::qualify::{self, At, Rule, RuleSet};
use crate::expect::Choice;
use crate::model::RunRecord;
use crate::render;
use crate::units::parse_size;

/// The rules the flags and the rules file give, and the profile either names.
pub fn rules_from(args: &RuleArgs, profile: &Option<String>) -> Result<(Vec<Rule>, Option<String>), Failure> {
    let mut rules = Vec::new();
    let mut profile = profile.clone();
    let size = |flag: &str, v: &Option<String>| -> Result<Option<u64>, Failure> {
        v.as_deref()
            .map(|t| parse_size(t).map_err(|e| Failure::usage(format!("{flag}: {e}"))))
            .transpose()
    };
    if let Some(gbps) = args.min_busbw {
        crate::flags::positive("--min-busbw", gbps, "GB/s")?;
        let at = size("--at-size", &args.at_size)?.map(At::Size).unwrap_or(At::Largest);
        rules.push(Rule::MinBusbw { coll: None, gbps, at });
    }
    if let Some(us) = args.max_latency_us {
        crate::flags::positive("--max-latency-us", us, "us")?;
        rules.push(Rule::MaxLatency { coll: None, us, at: size("--at-size-small", &args.at_size_small)? });
    }
    if let Some(ratio) = args.max_skew {
        if !(ratio.is_finite() && ratio >= 1.0) {
            return Err(Failure::usage(format!("--max-skew: slowest/fastest is at least 1, not {ratio}")));
        }
        rules.push(Rule::MaxSkew { coll: None, ratio });
    }
    if let Some(ratio) = args.min_ratio {
        crate::flags::positive("--min-ratio", ratio, "x")?;
        rules.push(Rule::MinRatio { coll: None, ratio });
    }
    if let Some(path) = &args.rules {
        let input = crate::import::text::Input::open(path).map_err(super::input::input_failure)?;
        let name = input.name.clone();
        let bytes = input.bytes("a TOML rules file").map_err(super::input::input_failure)?;
        let set = RuleSet::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|e| Failure::usage(format!("{name}: {e}")))?;
        if profile.is_none() {
            profile = set.profile;
        }
        rules.extend(set.rules);
    }
    Ok((rules, profile))
}

/// Judge a run against flags, a rules file and a profile (or, with none of them, the
/// expectation its facts point to).
pub fn judge(
    name: &str,
    run: &RunRecord,
    args: &RuleArgs,
    expectation: &crate::cli::ExpectationArgs,
    attempts: usize,
) -> Result<Qualification, Failure> {
    let (mut rules, profile) = rules_from(args, &expectation.profile)?;
    let mut exp = expectation.clone();
    exp.profile = profile.clone();
    let wants_ratio = rules.iter().any(|r| matches!(r, Rule::MinRatio { .. }));
    let only_always = rules.is_empty();
    // An expectation is needed for a profile, for min-ratio, and when nothing else is asked.
    let chosen: Option<Choice> = if profile.is_some() || wants_ratio || only_always {
        Some(choice(run, &exp)?)
    } else {
        None
    };
    if let Some(c) = &chosen {
        if profile.is_some() || only_always {
            rules.extend(qualify::profile_rules(c, run));
        }
    }
    Ok(qualify::qualify(name, run, &rules, chosen.as_ref(), chosen.as_ref().map(baseline_ref), attempts))
}

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
    Ok(if q.passed { ExitCode::Ok } else { ExitCode::CheckFailed })
}

pub fn run(args: &QualifyArgs) -> Result<ExitCode, Failure> {
    let (name, run) = load_run(&args.run, &args.expectation)?;
    let q = judge(&name, &run, &args.rules, &args.expectation, 1)?;
    report(&q, &args.rules, args.format)
}

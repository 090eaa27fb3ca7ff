//! JUnit XML of a gate's verdict, as CI systems read it: a test case per rule (per slow pair
//! and node), the suite's host, start and duration, and an error case for a gate that could
//! not run.

use crate::documents::Qualification;
use crate::exit::Failure;
use crate::units::format_size;
use std::fmt::Write;

/// Where and when a gate ran, for the JUnit suite's `hostname`, `timestamp` and `time`: CI
/// systems that collect sixteen nodes' files tell them apart by these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SuiteContext {
    pub hostname: Option<String>,
    /// RFC 3339, as the run record keeps it.
    pub timestamp: Option<String>,
    pub time: Option<std::time::Duration>,
}

impl SuiteContext {
    /// The run's hosts, its start and how long it took (a run still open has no time).
    pub fn of_run(run: &crate::model::RunRecord) -> SuiteContext {
        let parse = |t: &str| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        };
        // An imported log does not say when its run started (the record's time is the import's).
        let started = match run.source {
            crate::model::Source::Imported => None,
            crate::model::Source::Measured => parse(&run.started_at),
        };
        let time = match (started, run.finished_at.as_deref().and_then(parse)) {
            (Some(a), Some(b)) if b >= a => std::time::Duration::try_from(b - a).ok(),
            _ => None,
        };
        let hostname = match run.backend.hosts.as_slice() {
            [] => None,
            hosts => Some(hosts.join(",")),
        };
        SuiteContext {
            hostname,
            timestamp: started.map(|_| run.started_at.clone()),
            time,
        }
    }
}

impl SuiteContext {
    /// A pair matrix's hosts and start (its length is not kept).
    pub fn of_matrix(doc: &crate::documents::matrix::MatrixDocument) -> SuiteContext {
        SuiteContext {
            hostname: Some(doc.backend.hosts.join(",")).filter(|h| !h.is_empty()),
            timestamp: Some(doc.started_at.clone()),
            time: None,
        }
    }
}

fn suite_with(name: String, cx: &SuiteContext) -> quick_junit::TestSuite {
    let mut suite = quick_junit::TestSuite::new(name);
    // `hostname` and `timestamp` are attributes of <testsuite> in the JUnit schema CI systems
    // read (Jenkins, GitLab); quick-junit writes the ones it has no field for from `extra`.
    if let Some(h) = &cx.hostname {
        suite.extra.insert("hostname".into(), h.as_str().into());
    }
    if let Some(t) = &cx.timestamp {
        suite.extra.insert("timestamp".into(), t.as_str().into());
    }
    if let Some(t) = cx.time {
        suite.set_time(t);
    }
    suite
}

fn junit_text(suite: quick_junit::TestSuite) -> Result<String, Failure> {
    let mut report = quick_junit::Report::new("ncclprobe");
    report.add_test_suite(suite);
    report
        .to_string()
        .map_err(|e| Failure::internal(format!("JUnit: {e}")))
}

/// JUnit XML: one test suite, one test case per rule and collective; a failure's message holds
/// the measured and the required value.
pub fn junit(q: &Qualification, cx: &SuiteContext) -> Result<String, Failure> {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus};
    let mut suite = suite_with(format!("ncclprobe qualify {}", q.run), cx);
    if q.results.is_empty() {
        // Nothing judged is not a pass: CI shows an error, not an empty green suite.
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
        s.set_message(q.summary.clone());
        s.set_type("not-judged");
        let mut case = TestCase::new("gate", s);
        case.set_classname("ncclprobe.qualify");
        suite.add_test_case(case);
    }
    for r in &q.results {
        let status = if r.passed {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(r.message.clone());
            s.set_type(r.rule.clone());
            s
        };
        let mut case = TestCase::new(case_name(r), status);
        case.set_classname(format!("ncclprobe.qualify.{}", r.rule));
        if r.passed {
            case.set_system_out(r.message.clone());
        }
        suite.add_test_case(case);
    }
    if let Some(p) = &q.profile {
        suite.add_property(("expectation", p.id.as_str()));
        if let Some(m) = p.mismatch() {
            suite.add_property(("warning", format!("the profile {}: {m}", p.id).as_str()));
        }
    }
    suite.add_property(("attempts", q.attempts.to_string().as_str()));
    junit_text(suite)
}

/// A gate that could not run (refused before measuring, no backend, a run that ended before
/// it was judged): one `<error>` test case with the reason and the exit code, so CI shows a
/// failed node rather than "no test results".
pub fn junit_error(
    suite_name: &str,
    message: &str,
    code: crate::exit::ExitCode,
    cx: &SuiteContext,
) -> Result<String, Failure> {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus};
    let mut suite = suite_with(suite_name.to_string(), cx);
    let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
    s.set_message(message.to_string());
    s.set_type(format!("exit {}: {}", code as i32, code.meaning()));
    let mut case = TestCase::new("gate", s);
    case.set_classname("ncclprobe.qualify");
    suite.add_test_case(case);
    junit_text(suite)
}

pub(crate) fn case_name(r: &crate::documents::RuleResult) -> String {
    let mut name = r.rule.clone();
    if let Some(c) = r.collective {
        let _ = write!(name, " {c}");
    }
    if let Some(s) = r.size_bytes {
        let _ = write!(name, " {}", format_size(s));
    }
    if let Some(s) = &r.subject {
        let _ = write!(name, " {s}");
    }
    name
}

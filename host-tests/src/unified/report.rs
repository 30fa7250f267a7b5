//! Results: per-file lines as the run goes, per-suite counts, the JSON report,
//! and the comparison with the expected-pass list.

use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::requirements::UNMET;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Passed,
    Failed,
    Skipped,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

#[derive(Clone, Debug)]
pub struct TestResult {
    pub suite: String,
    /// Relative to the spec tests' root, e.g. `crud/tests/unified/find.json`.
    pub file: String,
    pub test: String,
    pub status: Status,
    pub reason: String,
    pub millis: u128,
    /// Placed on the auth+TLS deployment a run without `--auth` keeps for the tests
    /// whose `runOnRequirements` need authentication (`deployment::place`).
    pub auth_tls: bool,
}

#[derive(Default)]
pub struct Report {
    pub results: Vec<TestResult>,
}

/// Counts of one suite (or file).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Of these, placed on the auth+TLS deployment.
    pub auth_tls: usize,
}

impl Counts {
    fn add(&mut self, r: &TestResult) {
        match r.status {
            Status::Passed => self.passed += 1,
            Status::Failed => self.failed += 1,
            Status::Skipped => self.skipped += 1,
        }
        self.auth_tls += usize::from(r.auth_tls);
    }

    fn sum(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.auth_tls += other.auth_tls;
    }
}

impl Report {
    pub fn add(&mut self, r: TestResult) {
        self.results.push(r);
    }

    /// One line for the file, then one per failure (and with `verbose`, per skip).
    pub fn print_file(&self, file: &str, verbose: bool) {
        let mut counts = Counts::default();
        let mut millis = 0;
        let of_file: Vec<&TestResult> = self.results.iter().filter(|r| r.file == file).collect();
        for r in &of_file {
            counts.add(r);
            millis += r.millis;
        }
        let auth_tls = match counts.auth_tls {
            0 => String::new(),
            n => format!(", {n} on the auth+TLS deployment"),
        };
        println!(
            "{file}: {} passed, {} failed, {} skipped ({:.1} s{auth_tls})",
            counts.passed,
            counts.failed,
            counts.skipped,
            millis as f64 / 1000.0
        );
        for r in of_file {
            match r.status {
                Status::Failed => println!("    FAIL {}: {}", r.test, r.reason),
                Status::Skipped if verbose => println!("    skip {}: {}", r.test, r.reason),
                Status::Passed if verbose => println!("    ok   {}", r.test),
                _ => {}
            }
        }
    }

    pub fn suites(&self) -> BTreeMap<&str, Counts> {
        let mut out: BTreeMap<&str, Counts> = BTreeMap::new();
        for r in &self.results {
            out.entry(r.suite.as_str()).or_default().add(r);
        }
        out
    }

    /// The per-suite table and the totals: each test once, with the result of the
    /// deployment it was placed on (the last column counts those on the auth+TLS one).
    pub fn summary(&self) -> String {
        let line = |name: &str, c: &Counts| {
            format!(
                "    {name:<50} {:>6} {:>6} {:>7} {:>9}\n",
                c.passed, c.failed, c.skipped, c.auth_tls
            )
        };
        let mut out = format!(
            "==> spec suites, driver component: {}\n    {:<50} {:>6} {:>6} {:>7} {:>9}\n",
            crate::FACE,
            "suite",
            "passed",
            "failed",
            "skipped",
            "auth+tls"
        );
        let mut total = Counts::default();
        for (suite, c) in self.suites() {
            out += &line(suite, &c);
            total.sum(c);
        }
        out + &line("total", &total)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let suites: serde_json::Map<String, serde_json::Value> = self
            .suites()
            .into_iter()
            .map(|(s, c)| {
                let counts = json!({ "passed": c.passed, "failed": c.failed,
                    "skipped": c.skipped, "auth_tls": c.auth_tls });
                (s.to_string(), counts)
            })
            .collect();
        let tests: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                json!({
                    "suite": r.suite, "file": r.file, "test": r.test,
                    "result": r.status.word(), "reason": r.reason, "ms": r.millis as u64,
                    "auth_tls": r.auth_tls,
                })
            })
            .collect();
        json!({ "face": crate::FACE, "suites": suites, "tests": tests })
    }

    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `(file, test)` of every passing test.
    pub fn passed(&self) -> BTreeSet<(String, String)> {
        self.results
            .iter()
            .filter(|r| r.status == Status::Passed)
            .map(|r| (r.file.clone(), r.test.clone()))
            .collect()
    }

    /// `(file, test)` of every test that passed on the auth+TLS deployment
    /// (`auth_tls`), or on the run's own.
    pub fn passed_on(&self, auth_tls: bool) -> BTreeSet<(String, String)> {
        self.results
            .iter()
            .filter(|r| r.status == Status::Passed && r.auth_tls == auth_tls)
            .map(|r| (r.file.clone(), r.test.clone()))
            .collect()
    }

    /// Listed tests that did not pass (with why), and passing tests not on the list.
    /// `in_scope` says which listed tests this run was meant to cover.
    /// Checks the run against the expected-pass list (the tests `in_scope` of
    /// this run). With `unmet_ok`, for a run whose configuration differs from
    /// the one the list describes (`--auth`, `--tls`), a test its
    /// `runOnRequirements` rules out there (`auth: false`) is not a regression.
    pub fn compare(
        &self,
        expected: &BTreeSet<(String, String)>,
        in_scope: &dyn Fn(&str, &str) -> bool,
        unmet_ok: bool,
    ) -> Comparison {
        let by_name: BTreeMap<(&str, &str), &TestResult> = self
            .results
            .iter()
            .map(|r| ((r.file.as_str(), r.test.as_str()), r))
            .collect();
        let mut out = Comparison::default();
        for (file, test) in expected.iter().filter(|(f, t)| in_scope(f, t)) {
            match by_name.get(&(file.as_str(), test.as_str())) {
                Some(r) if r.status == Status::Passed => {}
                Some(r)
                    if unmet_ok && r.status == Status::Skipped && r.reason.starts_with(UNMET) =>
                {
                    out.unmet.push(format!("{file}: {test} ({})", r.reason))
                }
                Some(r) => out.regressions.push(format!(
                    "{file}: {test}: {} ({})",
                    r.status.word(),
                    r.reason
                )),
                None => out
                    .regressions
                    .push(format!("{file}: {test}: missing from this run")),
            }
        }
        out.new = self
            .passed()
            .into_iter()
            .filter(|t| !expected.contains(t))
            .map(|(f, t)| format!("{f}: {t}"))
            .collect();
        out
    }
}

/// [`Report::compare`]'s answer, one line per test.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Expected to pass, and failed, was skipped or did not run.
    pub regressions: Vec<String>,
    /// Passed, and not on the list.
    pub new: Vec<String>,
    /// Expected to pass, and ruled out by this configuration's `runOnRequirements`.
    pub unmet: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(file: &str, test: &str, status: Status) -> TestResult {
        TestResult {
            suite: "crud/tests/unified".into(),
            file: file.into(),
            test: test.into(),
            status,
            reason: if status == Status::Passed {
                String::new()
            } else {
                "why".into()
            },
            millis: 3,
            auth_tls: false,
        }
    }

    #[test]
    fn counts_json_and_the_expected_list() {
        let mut report = Report::default();
        report.add(result("a.json", "one", Status::Passed));
        report.add(result("a.json", "two", Status::Failed));
        report.add(result("a.json", "three", Status::Skipped));
        report.add(result("b.json", "four", Status::Passed));
        let counts = report.suites()["crud/tests/unified"];
        assert_eq!((counts.passed, counts.failed, counts.skipped), (2, 1, 1));
        let json = report.to_json();
        assert_eq!(json["suites"]["crud/tests/unified"]["failed"], 1);
        assert_eq!(json["tests"][1]["result"], "failed");
        assert_eq!(json["tests"][1]["reason"], "why");
        let expected: BTreeSet<(String, String)> =
            [("a.json", "one"), ("a.json", "two"), ("c.json", "gone")]
                .into_iter()
                .map(|(f, t)| (f.to_string(), t.to_string()))
                .collect();
        let c = report.compare(&expected, &|_, _| true, false);
        assert_eq!(
            c.regressions,
            [
                "a.json: two: failed (why)",
                "c.json: gone: missing from this run"
            ]
        );
        assert_eq!(c.new, ["b.json: four"]);
        let c = report.compare(&expected, &|f, _| f != "c.json", false);
        assert_eq!(c.regressions, ["a.json: two: failed (why)"]);
    }

    #[test]
    fn each_test_counts_once_with_its_deployment() {
        let mut report = Report::default();
        report.add(result("a.json", "plain", Status::Passed));
        let mut on_auth = result("h.json", "handshake", Status::Passed);
        on_auth.auth_tls = true;
        report.add(on_auth);
        let mut failed = result("h.json", "broken", Status::Failed);
        failed.auth_tls = true;
        report.add(failed);
        let mut other = result("s.json", "x", Status::Skipped);
        other.suite = "sessions/tests".into();
        report.add(other);
        let counts = report.suites()["crud/tests/unified"];
        assert_eq!(
            counts,
            Counts {
                passed: 2,
                failed: 1,
                skipped: 0,
                auth_tls: 2
            }
        );
        let pair = |f: &str, t: &str| (f.to_string(), t.to_string());
        assert_eq!(
            report.passed_on(false).into_iter().collect::<Vec<_>>(),
            [pair("a.json", "plain")]
        );
        assert_eq!(
            report.passed_on(true).into_iter().collect::<Vec<_>>(),
            [pair("h.json", "handshake")]
        );
        assert_eq!(report.passed().len(), 2);
        let json = report.to_json();
        assert_eq!(json["tests"][1]["auth_tls"], true);
        assert_eq!(json["tests"][0]["auth_tls"], false);
        assert_eq!(json["suites"]["crud/tests/unified"]["auth_tls"], 2);
        let table = report.summary();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            words(lines[1]),
            ["suite", "passed", "failed", "skipped", "auth+tls"]
        );
        assert_eq!(words(lines[2]), ["crud/tests/unified", "2", "1", "0", "2"]);
        assert_eq!(words(lines[3]), ["sessions/tests", "0", "0", "1", "0"]);
        assert_eq!(words(lines[4]), ["total", "2", "1", "1", "2"]);
    }

    #[test]
    fn unmet_requirements_are_accepted_only_when_asked_and_failures_never() {
        let mut report = Report::default();
        let mut unmet = result("a.json", "auth off only", Status::Skipped);
        unmet.reason = format!("{UNMET}: refuses authentication (spec-runner runs with --auth)");
        report.add(unmet);
        report.add(result("a.json", "skip list", Status::Skipped));
        report.add(result("a.json", "broken", Status::Failed));
        let expected: BTreeSet<(String, String)> = ["auth off only", "skip list", "broken"]
            .into_iter()
            .map(|t| ("a.json".to_string(), t.to_string()))
            .collect();
        let plain = report.compare(&expected, &|_, _| true, false);
        assert_eq!(plain.regressions.len(), 3, "{plain:?}");
        let auth = report.compare(&expected, &|_, _| true, true);
        assert_eq!(
            auth.regressions,
            [
                "a.json: broken: failed (why)",
                "a.json: skip list: skipped (why)"
            ]
        );
        assert_eq!(auth.unmet.len(), 1, "{auth:?}");
        assert!(auth.unmet[0].starts_with("a.json: auth off only ("));
    }
}

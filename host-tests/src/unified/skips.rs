//! The checked-in lists: tests skipped on purpose (`spec/skips.txt`) and tests
//! that must keep passing (`spec/expected-pass.txt`, and `spec/expected-pass-auth-tls.txt`
//! for those that need authentication).
//!
//! Both name a test as `<file>: <description>`, the file relative to the spec
//! tests' root (e.g. `crud/tests/unified/find.json`). A skip line adds a glob
//! (`*` matches any run of characters) and, after ` | `, the one-line reason:
//!
//! ```text
//! # comments and blank lines are ignored
//! gridfs/tests/delete.json: * | nx-27017 rejects the collection name fs.files (TEST-SERVER.md)
//! ```
//!
//! A reason tagged `[structural: single-threaded-monitoring]` holds for the
//! WASI 0.2 face only: the 0.3 face runs a monitor task per server, so
//! there the test runs (`applies`).

use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub file: String,
    pub description: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct SkipList {
    entries: Vec<Skip>,
}

/// The skips that hold on one face only: a single-threaded client's
/// monitoring (the 0.2 face), which the 0.3 face's monitor tasks replace.
const SYNC_FACE_ONLY: &str = "[structural: single-threaded-monitoring]";

/// Whether a skip with `reason` holds on the face (`async_face`: WASI 0.3).
fn applies(reason: &str, async_face: bool) -> bool {
    !(async_face && reason.contains(SYNC_FACE_ONLY))
}

/// Splits `<file>.json: <rest>`; descriptions may contain ": " themselves.
fn split_name(line: &str) -> Option<(&str, &str)> {
    let at = line.find(".json: ")? + ".json".len();
    Some((line[..at].trim(), line[at + 2..].trim()))
}

/// Lines that carry data, with their 1-based numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

impl SkipList {
    pub fn parse(text: &str) -> Result<SkipList, String> {
        let mut entries = Vec::new();
        for (n, line) in data_lines(text) {
            let bad = |why: &str| format!("line {n}: {why}: {line}");
            let (file, rest) = split_name(line).ok_or_else(|| bad("expected `<file>.json: `"))?;
            let (description, reason) = rest
                .split_once(" | ")
                .ok_or_else(|| bad("expected ` | <reason>` after the description"))?;
            let (description, reason) = (description.trim(), reason.trim());
            if description.is_empty() || reason.is_empty() {
                return Err(bad("empty description or reason"));
            }
            entries.push(Skip {
                file: file.to_string(),
                description: description.to_string(),
                reason: reason.to_string(),
            });
        }
        Ok(SkipList { entries })
    }

    /// The reason `description` in `file` is skipped, if it is.
    pub fn reason(&self, file: &str, description: &str) -> Option<&str> {
        self.entries
            .iter()
            .filter(|s| applies(&s.reason, cfg!(feature = "async-face")))
            .find(|s| glob(&s.file, file) && glob(&s.description, description))
            .map(|s| s.reason.as_str())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `*` matches any (possibly empty) run of characters; everything else literally.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    if !text.ends_with(last) {
        return false;
    }
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// One `<file>: <description>` per line, as a set.
pub fn parse_expected(text: &str) -> Result<BTreeSet<(String, String)>, String> {
    let mut out = BTreeSet::new();
    for (n, line) in data_lines(text) {
        let (file, description) = split_name(line)
            .ok_or_else(|| format!("line {n}: expected `<file>.json: <description>`: {line}"))?;
        if description.is_empty() {
            return Err(format!("line {n}: empty description: {line}"));
        }
        out.insert((file.to_string(), description.to_string()));
    }
    Ok(out)
}

/// The header of `expected-pass.txt`: the tests that pass on a run's own deployment.
pub const EXPECTED_HEADER: &str =
    "# Spec tests that pass and must keep passing: `cargo xtask test` fails if one of\n\
     # these fails or is missing. Regenerate from a full run with\n\
     # `cargo xtask spec --all --update-expected`.\n";

/// The header of `expected-pass-auth-tls.txt`: the tests that pass on the auth+TLS
/// deployment a run without `--auth` places the tests that need authentication on.
pub const EXPECTED_AUTH_TLS_HEADER: &str =
    "# Spec tests that only an authenticated deployment can pass (their runOnRequirements\n\
     # need authentication): a run without --auth runs them on its auth+TLS deployment.\n\
     # Both runs of `cargo xtask test` check them with expected-pass.txt. Regenerated\n\
     # with it by `cargo xtask spec --all --update-expected`.\n";

/// The list's text for `tests`, sorted, under `header` (which says how to regenerate it).
pub fn format_expected(header: &str, tests: &BTreeSet<(String, String)>) -> String {
    let mut out = String::from(header);
    for (file, description) in tests {
        out.push_str(&format!("{file}: {description}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_threaded_monitoring_skips_hold_on_the_sync_face_only() {
        let reason = "polls inline [structural: single-threaded-monitoring]";
        assert!(applies(reason, false));
        assert!(!applies(reason, true));
        assert!(applies("nx-27017 refuses it [nx-gaps.py: where-js]", true));
    }

    #[test]
    fn glob_matches_stars_anywhere() {
        assert!(glob("*", ""));
        assert!(glob("*", "anything"));
        assert!(glob("abc", "abc"));
        assert!(!glob("abc", "abcd"));
        assert!(glob("find*", "find with sort"));
        assert!(glob("*sort", "find with sort"));
        assert!(glob("f*w*t", "find with sort"));
        assert!(!glob("f*x*t", "find with sort"));
        assert!(!glob("ab*ba", "aba"), "the parts may not overlap");
        assert!(glob("crud/*/find.json", "crud/tests/unified/find.json"));
    }

    #[test]
    fn skip_lines_need_a_file_a_description_and_a_reason() {
        let text = "# header\n\n\
            gridfs/tests/delete.json: * | nx-27017 rejects fs.files\n\
            crud/tests/unified/find.json: Find: with sort* | sorts _id as strings\n";
        let list = SkipList::parse(text).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            list.reason("gridfs/tests/delete.json", "delete when length is 0"),
            Some("nx-27017 rejects fs.files")
        );
        assert_eq!(
            list.reason("crud/tests/unified/find.json", "Find: with sort on _id"),
            Some("sorts _id as strings")
        );
        assert_eq!(list.reason("crud/tests/unified/find.json", "Find"), None);
        for bad in [
            "no file here | reason",
            "crud/x.json: description without reason",
            "crud/x.json: * | ",
        ] {
            let err = SkipList::parse(bad).unwrap_err();
            assert!(err.starts_with("line 1:"), "{err}");
        }
    }

    #[test]
    fn expected_list_round_trips() {
        let text = "# c\ncrud/a.json: one: two\nsessions/b.json: three\n";
        let set = parse_expected(text).unwrap();
        assert!(set.contains(&("crud/a.json".to_string(), "one: two".to_string())));
        for header in [EXPECTED_HEADER, EXPECTED_AUTH_TLS_HEADER] {
            let text = format_expected(header, &set);
            assert!(text.starts_with(header));
            assert_eq!(parse_expected(&text).unwrap(), set);
        }
        assert!(parse_expected("crud/a.json:").is_err());
        assert!(parse_expected("just words").is_err());
    }
}

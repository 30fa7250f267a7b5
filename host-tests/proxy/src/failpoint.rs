//! Fail points as mongod keeps them (a name, a mode, a data document), the `failCommand`
//! activation rules, and the error labels mongod attaches.
//!
//! Names the proxy acts on:
//! - `failCommand`: mongod's; data fields `failCommands`, `closeConnection`, `errorCode`,
//!   `errorLabels`, `errorExtraInfo`, `writeConcernError`, `blockConnection` + `blockTimeMS`,
//!   `appName`, `namespace`, `failInternalCommands`, `failAllCommands`; and two proxy-only
//!   fields, [`REPLY_DELAY`] (`proxyReplyDelayMS`) and [`THEN`] (`proxyThen`).
//! - `maxTimeAlwaysTimeOut`: mongod's; any command carrying `maxTimeMS` fails with code 50.
//! - `failGetMoreAfterCursorCheckout`: mongod's; `getMore` fails with `data.errorCode`.
//! - `onPrimaryTransactionalWrite`: mongod's; see [`ON_PRIMARY_TRANSACTIONAL_WRITE`].
//! - [`SLOW_COMMAND`] (`proxySlowCommand`): proxy-only, test-only; see its doc.
//!
//! `{waitForFailPoint: name, timesEntered: N, maxTimeMS: M}` waits until the member's point has
//! fired N times in all, as mongod's does.
//!
//! Any other name is refused as mongod refuses a name it does not know: FailPointSetFailed
//! (266), "<name> not found". Each member (each mongod) has its own set.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use bson::{doc, Bson, Document};

use crate::codes;
use crate::commands;

pub const FAIL_COMMAND: &str = "failCommand";
pub const MAX_TIME_ALWAYS_TIME_OUT: &str = "maxTimeAlwaysTimeOut";
pub const FAIL_GET_MORE: &str = "failGetMoreAfterCursorCheckout";
/// mongod's, on a retryable write (txnNumber, no autocommit) inside its write unit: data
/// `closeConnection` (default true) hangs up, `failBeforeCommitExceptionCode` fails it before
/// the commit (so it is not applied), `collectionNS` limits it. Without that code the write
/// is applied and then the connection is closed, the reply lost.
pub const ON_PRIMARY_TRANSACTIONAL_WRITE: &str = "onPrimaryTransactionalWrite";
/// Proxy-only, test-only emulation of a slow server, since the backend cannot be made slow:
/// `{configureFailPoint: "proxySlowCommand", mode, data: {failCommands: [..], executionTimeMS: N,
/// appName?}}` makes each matching command "execute" for N ms before it is forwarded. A command
/// whose `maxTimeMS` is shorter is answered `MaxTimeMSExpired` (code 50) once `maxTimeMS` has
/// passed, and is not forwarded; the connection stays open. Modes and counts as for `failCommand`.
pub const SLOW_COMMAND: &str = "proxySlowCommand";
/// Proxy-only, test-only `failCommand` data field: when `blockConnection` is cut short by the
/// command's `maxTimeMS`, the MaxTimeMSExpired (code 50) reply is sent this many ms later, as a
/// loaded server's would be (a client whose own deadline was `maxTimeMS` times out first).
pub const REPLY_DELAY: &str = "proxyReplyDelayMS";
/// Proxy-only, test-only data field of any point in `{times: N}` mode: `{mode, data}`, the
/// configuration the point takes once its N times are used up. It stands for a test that
/// reconfigures the point from a command-failed listener, between an attempt and its retry
/// (the Retryable Writes prose tests 3 and 6), which a guest cannot do mid-operation.
pub const THEN: &str = "proxyThen";

#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Off,
    AlwaysOn,
    Times(i64),
    Skip(i64),
    Probability(f64),
}

pub fn as_number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(*i as f64),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

impl Mode {
    pub fn parse(v: &Bson) -> Result<Mode, String> {
        match v {
            Bson::String(s) if s == "off" => Ok(Mode::Off),
            Bson::String(s) if s == "alwaysOn" => Ok(Mode::AlwaysOn),
            Bson::Document(d) if d.len() == 1 => {
                let (key, value) = d.iter().next().expect("len checked");
                let n = as_number(value).ok_or_else(|| format!("'{key}' must be a number"))?;
                match key.as_str() {
                    "times" | "skip" if n < 0.0 || n.fract() != 0.0 => {
                        Err(format!("'{key}' must be a non-negative integer"))
                    }
                    "times" => Ok(Mode::Times(n as i64)),
                    "skip" => Ok(Mode::Skip(n as i64)),
                    "activationProbability" if (0.0..=1.0).contains(&n) => Ok(Mode::Probability(n)),
                    "activationProbability" => {
                        Err("activationProbability must be in [0, 1]".into())
                    }
                    _ => Err(format!("unknown mode '{key}'")),
                }
            }
            other => Err(format!("invalid mode {other}")),
        }
    }

    fn describe(&self) -> Bson {
        match self {
            Mode::Off => "off".into(),
            Mode::AlwaysOn => "alwaysOn".into(),
            Mode::Times(n) => doc! { "times": *n }.into(),
            Mode::Skip(n) => doc! { "skip": *n }.into(),
            Mode::Probability(p) => doc! { "activationProbability": *p }.into(),
        }
    }
}

/// The names [`FailPoints::configure`] accepts.
pub const KNOWN: &[&str] = &[
    FAIL_COMMAND,
    MAX_TIME_ALWAYS_TIME_OUT,
    FAIL_GET_MORE,
    ON_PRIMARY_TRANSACTIONAL_WRITE,
    SLOW_COMMAND,
];

struct Point {
    mode: Mode,
    data: Document,
}

pub struct FailPoints {
    points: HashMap<String, Point>,
    /// mongod's `timesEntered`: per name, over the process' life; a new mode does not reset it.
    entered: HashMap<String, i64>,
    rng: u64,
}

impl Default for FailPoints {
    fn default() -> Self {
        let seed = RandomState::new().hash_one(0u8);
        FailPoints {
            points: HashMap::new(),
            entered: HashMap::new(),
            rng: seed | 1,
        }
    }
}

impl FailPoints {
    /// Replaces `name`'s configuration; answers its `timesEntered` so far, as mongod's `count`
    /// does, or None for a name mongod would not know.
    pub fn configure(&mut self, name: &str, mode: Mode, data: Document) -> Option<i64> {
        if !KNOWN.contains(&name) {
            return None;
        }
        if mode == Mode::Off || mode == Mode::Times(0) {
            self.points.remove(name);
        } else {
            self.points.insert(name.to_string(), Point { mode, data });
        }
        Some(self.entered(name))
    }

    /// mongod's `executeIf`: the predicate first, then the mode; `times`/`skip` only move for
    /// commands the predicate matched. Answers the data when the point fires.
    pub fn check(&mut self, name: &str, pred: impl FnOnce(&Document) -> bool) -> Option<Document> {
        let roll = self.next_f64();
        let point = self.points.get_mut(name)?;
        if !pred(&point.data) {
            return None;
        }
        let fire = match &mut point.mode {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(n) => {
                *n -= 1;
                true
            }
            Mode::Skip(n) if *n > 0 => {
                *n -= 1;
                false
            }
            Mode::Skip(_) => true,
            Mode::Probability(p) => roll < *p,
        };
        if !fire {
            return None;
        }
        let data = point.data.clone();
        if point.mode == Mode::Times(0) {
            self.points.remove(name);
            let then = data.get_document(THEN).ok();
            if let Some((mode, data)) =
                then.and_then(|t| Some((t.get("mode")?, t.get_document("data").ok()?)))
            {
                if let Ok(mode) = Mode::parse(mode) {
                    self.configure(name, mode, data.clone());
                }
            }
        }
        *self.entered.entry(name.to_string()).or_default() += 1;
        Some(data)
    }

    /// How many times `name` has fired since the proxy started.
    pub fn entered(&self, name: &str) -> i64 {
        self.entered.get(name).copied().unwrap_or(0)
    }

    /// `{name: {mode, data, timesEntered}}` for `proxyStats`.
    pub fn summary(&self) -> Document {
        let mut out = Document::new();
        let mut names: Vec<_> = self.points.keys().collect();
        names.sort();
        for name in names {
            let p = &self.points[name];
            out.insert(
                name.clone(),
                doc! { "mode": p.mode.describe(), "data": p.data.clone(), "timesEntered": self.entered(name) },
            );
        }
        out
    }

    /// xorshift64*: plenty for activationProbability, and no dependency.
    fn next_f64(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What the activation rules look at for one command.
pub struct CmdInfo<'a> {
    pub name: &'a str,
    pub db: &'a str,
    pub body: &'a Document,
    pub app_name: Option<&'a str>,
    pub internal_client: bool,
    /// The presented server version's maxWireVersion (some codes' categories changed).
    pub max_wire: i32,
}

impl CmdInfo<'_> {
    pub fn namespace(&self) -> String {
        match self.body.get(self.name) {
            Some(Bson::String(coll)) => format!("{}.{coll}", self.db),
            _ => self.db.to_string(),
        }
    }

    fn has(&self, key: &str) -> bool {
        self.body.contains_key(key)
    }
}

/// mongod's `shouldActivateFailCommandFailPoint`.
pub fn should_activate(data: &Document, cmd: &CmdInfo) -> bool {
    if cmd.name == "configureFailPoint" {
        return false;
    }
    if data.contains_key("appName") {
        let want = data.get_str("appName").unwrap_or("");
        if cmd.app_name.unwrap_or("") != want {
            return false;
        }
    }
    if data.contains_key("namespace") && data.get_str("namespace").unwrap_or("") != cmd.namespace()
    {
        return false;
    }
    if cmd.internal_client && !data.get_bool("failInternalCommands").unwrap_or(false) {
        return false;
    }
    if data.contains_key("failAllCommands") {
        return true;
    }
    data.get_array("failCommands").is_ok_and(|names| {
        names.iter().any(|n| {
            n.as_str()
                .is_some_and(|n| commands::same_command(n, cmd.name))
        })
    })
}

pub fn flag(data: &Document, key: &str) -> bool {
    data.get_bool(key).unwrap_or(false)
}

pub fn number(data: &Document, key: &str) -> Option<f64> {
    data.get(key).and_then(as_number)
}

/// `errorLabels` from the failpoint data: they replace whatever mongod would attach.
pub fn labels_override(data: &Document) -> Option<Vec<String>> {
    let labels = data.get_array("errorLabels").ok()?;
    Some(
        labels
            .iter()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect(),
    )
}

/// mongod's `ErrorLabelBuilder` (error_labels.cpp), minus NoWritesPerformed.
pub fn error_labels(
    cmd: &CmdInfo,
    code: Option<i32>,
    wc_code: Option<i32>,
    change_stream: bool,
) -> Vec<String> {
    let txn = cmd.has("txnNumber");
    let autocommit = cmd.has("autocommit");
    let commit_or_abort = matches!(cmd.name, "commitTransaction" | "abortTransaction");
    let mut labels = Vec::new();
    if let Some(code) = code {
        if txn && autocommit && codes::is_transient_txn(code, wc_code.is_some(), commit_or_abort) {
            labels.push("TransientTransactionError".to_string());
            return labels;
        }
    }
    let retryable_write = txn && !autocommit;
    let txn_end = txn && autocommit && commit_or_abort;
    let retriable =
        code.is_some_and(codes::is_retriable) || wc_code.is_some_and(codes::is_retriable);
    // Servers label RetryableWriteError from 4.4 (wire 9); before, drivers did.
    if (retryable_write || txn_end) && retriable && cmd.max_wire >= 9 {
        labels.push("RetryableWriteError".to_string());
        return labels;
    }
    if let Some(code) = code {
        let cs_command = matches!(cmd.name, "aggregate" | "getMore");
        if cs_command
            && change_stream
            && wc_code.is_none()
            && codes::is_resumable_change_stream(code, cmd.max_wire)
        {
            labels.push("ResumableChangeStreamError".to_string());
        } else if codes::is_non_resumable_change_stream(code) {
            labels.push("NonResumableChangeStreamError".to_string());
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(Mode::parse(&"alwaysOn".into()), Ok(Mode::AlwaysOn));
        assert_eq!(Mode::parse(&doc! {"times": 2}.into()), Ok(Mode::Times(2)));
        assert_eq!(Mode::parse(&doc! {"skip": 1i64}.into()), Ok(Mode::Skip(1)));
        assert!(Mode::parse(&doc! {"times": -1}.into()).is_err());
        assert!(Mode::parse(&doc! {"activationProbability": 1.5}.into()).is_err());
        assert!(Mode::parse(&"sometimes".into()).is_err());
    }

    #[test]
    fn servers_before_4_4_label_no_retryable_write_error() {
        let body = doc! { "insert": "c", "txnNumber": 1i64 };
        let cmd = |max_wire| CmdInfo {
            name: "insert",
            db: "d",
            body: &body,
            app_name: None,
            internal_client: false,
            max_wire,
        };
        let retryable = vec!["RetryableWriteError".to_string()];
        assert_eq!(error_labels(&cmd(9), Some(91), None, false), retryable);
        assert_eq!(error_labels(&cmd(9), None, Some(91), false), retryable);
        assert!(error_labels(&cmd(8), Some(91), None, false).is_empty());
        assert!(error_labels(&cmd(8), None, Some(91), false).is_empty());
    }

    #[test]
    fn times_count_only_matching() {
        let mut fps = FailPoints::default();
        fps.configure(FAIL_COMMAND, Mode::Times(1), doc! {});
        assert!(fps.check(FAIL_COMMAND, |_| false).is_none());
        assert!(fps.check(FAIL_COMMAND, |_| true).is_some());
        assert!(fps.check(FAIL_COMMAND, |_| true).is_none());
    }

    #[test]
    fn proxy_then_takes_over_when_times_run_out() {
        let mut fps = FailPoints::default();
        let then = doc! { "mode": "alwaysOn", "data": { "errorCode": 10107 } };
        fps.configure(
            FAIL_COMMAND,
            Mode::Times(1),
            doc! { "errorCode": 91, THEN: then },
        );
        let code = |d: Option<Document>| d.map(|d| d.get_i32("errorCode").unwrap());
        assert_eq!(code(fps.check(FAIL_COMMAND, |_| true)), Some(91));
        assert_eq!(code(fps.check(FAIL_COMMAND, |_| true)), Some(10107));
        assert_eq!(code(fps.check(FAIL_COMMAND, |_| true)), Some(10107));
        assert_eq!(fps.entered(FAIL_COMMAND), 3);
    }

    #[test]
    fn times_entered_survives_a_new_mode_and_unknown_names_are_refused() {
        let mut fps = FailPoints::default();
        assert_eq!(
            fps.configure(FAIL_COMMAND, Mode::AlwaysOn, doc! {}),
            Some(0)
        );
        assert!(fps.check(FAIL_COMMAND, |_| true).is_some());
        assert!(fps.check(FAIL_COMMAND, |_| true).is_some());
        assert_eq!(fps.configure(FAIL_COMMAND, Mode::Off, doc! {}), Some(2));
        assert_eq!(
            fps.configure(FAIL_COMMAND, Mode::Times(1), doc! {}),
            Some(2)
        );
        assert!(fps.check(FAIL_COMMAND, |_| true).is_some());
        assert_eq!(fps.entered(FAIL_COMMAND), 3);
        assert_eq!(
            fps.configure("noSuchFailPoint", Mode::AlwaysOn, doc! {}),
            None
        );
    }
}

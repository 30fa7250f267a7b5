//! `commitTransaction` / `abortTransaction` (Transactions spec). Retried
//! once like a retryable write; a retried commit asks for w: majority.

use super::{Command, Operation};
use crate::error::Result;
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use bson::{cstr, rawdoc, RawDocumentBuf};

pub struct EndTransaction {
    commit: bool,
    write_concern: Option<RawDocumentBuf>,
    max_commit_time_ms: Option<u64>,
    attempts: u32,
    /// timeoutMS is set: no wtimeout is added to a retried commit.
    csot: bool,
}

impl EndTransaction {
    pub fn commit(write_concern: Option<RawDocumentBuf>, max_commit_time_ms: Option<u64>) -> Self {
        EndTransaction {
            commit: true,
            write_concern,
            max_commit_time_ms,
            attempts: 0,
            csot: false,
        }
    }

    /// A commit after a commit: the spec sends it as it sends a retry.
    pub fn recommit(
        write_concern: Option<RawDocumentBuf>,
        max_commit_time_ms: Option<u64>,
    ) -> Self {
        EndTransaction {
            attempts: 1,
            ..Self::commit(write_concern, max_commit_time_ms)
        }
    }

    /// Under CSOT the deadline replaces wtimeout and maxCommitTimeMS.
    pub fn under_csot(&mut self) -> Result<()> {
        self.csot = true;
        self.max_commit_time_ms = None;
        if let Some(wc) = &self.write_concern {
            self.write_concern = Some(crate::concern::without_wtimeout(wc)?);
        }
        Ok(())
    }

    pub fn abort(write_concern: Option<RawDocumentBuf>) -> Self {
        EndTransaction {
            commit: false,
            write_concern,
            max_commit_time_ms: None,
            attempts: 0,
            csot: false,
        }
    }
}

impl Operation for EndTransaction {
    fn name(&self) -> &str {
        match self.commit {
            true => "commitTransaction",
            false => "abortTransaction",
        }
    }

    type Output = ();

    fn build(&mut self, _: &HelloReply) -> Result<Command> {
        self.attempts += 1;
        let (name, key) = if self.commit {
            ("commitTransaction", cstr!("commitTransaction"))
        } else {
            ("abortTransaction", cstr!("abortTransaction"))
        };
        let mut body = RawDocumentBuf::new();
        body.append(key, 1);
        let mut wc = self.write_concern.clone();
        if self.commit && self.attempts > 1 {
            wc = Some(retried_commit_concern(wc.as_ref(), self.csot)?);
        }
        // An empty write concern is the server's default: not sent.
        if let Some(wc) = wc.filter(|w| !w.is_empty()) {
            body.append(cstr!("writeConcern"), wc);
        }
        if let (true, Some(ms)) = (self.commit, self.max_commit_time_ms) {
            body.append(cstr!("maxTimeMS"), ms as i64);
        }
        Ok(Command {
            name: name.into(),
            db: "admin".into(),
            body,
            sequences: Vec::new(),
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, _: &str) -> Result<()> {
        super::check_write_errors(&reply)
    }

    fn retryability(&self) -> Retryability {
        Retryability::Write
    }

    fn ends_transaction(&self) -> bool {
        true
    }

    fn before_overload_retry(&mut self) {
        // The retry keeps the caller's write concern (no w:majority upgrade).
        self.attempts -= 1;
    }

    fn sends_max_time(&self) -> bool {
        self.max_commit_time_ms.is_none() || !self.commit
    }
}

/// A retried commit must not be satisfied by a minority (Transactions
/// spec): `w: majority`, the caller's other fields (`j`) kept, and
/// `wtimeout: 10000` unless one is given or timeoutMS bounds the commit.
fn retried_commit_concern(wc: Option<&RawDocumentBuf>, csot: bool) -> Result<RawDocumentBuf> {
    let mut out = rawdoc! { "w": "majority" };
    let mut wtimeout = None;
    if let Some(wc) = wc {
        for item in wc {
            let (k, v) = item?;
            match k.as_str() {
                "w" => {}
                "wtimeout" => wtimeout = Some(bson::RawBson::from(v)),
                _ => out.append(k, v),
            }
        }
    }
    if !csot {
        out.append(
            cstr!("wtimeout"),
            wtimeout.unwrap_or(bson::RawBson::Int32(10_000)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_commit_asks_for_majority() {
        let mut op = EndTransaction::commit(Some(rawdoc! { "w": 1 }), Some(500));
        let first = op.build(&HelloReply::default()).unwrap();
        assert_eq!(first.db, "admin");
        assert_eq!(
            first.body,
            rawdoc! { "commitTransaction": 1, "writeConcern": { "w": 1 }, "maxTimeMS": 500i64 }
        );
        let retry = op.build(&HelloReply::default()).unwrap();
        assert_eq!(
            retry.body.get_document("writeConcern").unwrap(),
            &*rawdoc! { "w": "majority", "wtimeout": 10_000 }
        );
    }

    #[test]
    fn a_retried_commit_keeps_j_and_wtimeout() {
        let mut op =
            EndTransaction::commit(Some(rawdoc! { "w": 2, "j": true, "wtimeout": 5000 }), None);
        op.build(&HelloReply::default()).unwrap();
        let retry = op.build(&HelloReply::default()).unwrap();
        assert_eq!(
            retry.body.get_document("writeConcern").unwrap(),
            &*rawdoc! { "w": "majority", "j": true, "wtimeout": 5000 }
        );
    }

    #[test]
    fn a_recommit_asks_for_majority_at_once() {
        let mut op = EndTransaction::recommit(None, None);
        let body = op.build(&HelloReply::default()).unwrap().body;
        assert_eq!(
            body.get_document("writeConcern").unwrap(),
            &*rawdoc! { "w": "majority", "wtimeout": 10_000 }
        );
    }

    #[test]
    fn csot_replaces_wtimeout_and_max_commit_time() {
        let mut op = EndTransaction::commit(Some(rawdoc! { "w": 1, "wtimeout": 5 }), Some(500));
        op.under_csot().unwrap();
        let body = op.build(&HelloReply::default()).unwrap().body;
        assert_eq!(
            body,
            rawdoc! { "commitTransaction": 1, "writeConcern": { "w": 1 } }
        );
        assert!(op.sends_max_time(), "the deadline's maxTimeMS instead");
    }

    #[test]
    fn no_empty_write_concern_and_a_retry_keeps_j() {
        let mut op = EndTransaction::commit(Some(rawdoc! {}), None);
        let first = op.build(&HelloReply::default()).unwrap().body;
        assert_eq!(first, rawdoc! { "commitTransaction": 1 });
        let mut op = EndTransaction::commit(Some(rawdoc! { "wtimeout": 5 }), None);
        op.under_csot().unwrap();
        assert_eq!(
            op.build(&HelloReply::default()).unwrap().body,
            rawdoc! { "commitTransaction": 1 },
            "nothing left once wtimeout is dropped"
        );
        let mut op = EndTransaction::recommit(Some(rawdoc! { "w": 1, "j": true }), None);
        assert_eq!(
            op.build(&HelloReply::default())
                .unwrap()
                .body
                .get_document("writeConcern")
                .unwrap(),
            &*rawdoc! { "w": "majority", "j": true, "wtimeout": 10_000 }
        );
        let mut op = EndTransaction::recommit(Some(rawdoc! { "j": true }), None);
        op.under_csot().unwrap();
        assert_eq!(
            op.build(&HelloReply::default())
                .unwrap()
                .body
                .get_document("writeConcern")
                .unwrap(),
            &*rawdoc! { "w": "majority", "j": true },
            "under timeoutMS no wtimeout"
        );
        let mut op = EndTransaction::abort(Some(rawdoc! {}));
        assert_eq!(
            op.build(&HelloReply::default()).unwrap().body,
            rawdoc! { "abortTransaction": 1 }
        );
    }

    #[test]
    fn abort_has_no_max_time_of_its_own() {
        let mut op = EndTransaction::abort(None);
        assert_eq!(
            op.build(&HelloReply::default()).unwrap().body,
            rawdoc! { "abortTransaction": 1 }
        );
        assert!(op.sends_max_time());
    }
}

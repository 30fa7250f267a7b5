//! `findAndModify` for findOneAndDelete/Replace/Update (CRUD spec): a
//! retryable write whose reply carries the document, unless the write was
//! unacknowledged.

use super::{Command, Operation, RunCommand};
use crate::error::Result;
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use bson::RawDocumentBuf;

/// The command as the collection built it (write concern included).
pub struct FindAndModify(pub RunCommand);

impl Operation for FindAndModify {
    /// The reply; `None` for an unacknowledged write, whose reply (if the
    /// server sent one at all) acknowledges nothing.
    type Output = Option<RawDocumentBuf>;

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        let cmd = self.0.build(hello)?;
        super::check_unacknowledged_hint(&cmd.body, &Default::default(), hello.max_wire_version)?;
        Ok(cmd)
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<Self::Output> {
        if crate::concern::sends_unacknowledged(&self.0.command) {
            return Ok(None);
        }
        self.0.handle_reply(reply, address).map(Some)
    }

    fn criteria(&self) -> Criteria {
        self.0.criteria()
    }

    fn retryability(&self) -> Retryability {
        self.0.retryability()
    }

    fn causally_consistent(&self) -> bool {
        self.0.causally_consistent()
    }

    fn sends_max_time(&self) -> bool {
        self.0.sends_max_time()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn op(command: RawDocumentBuf) -> FindAndModify {
        FindAndModify(RunCommand {
            retryability: Retryability::Write,
            ..RunCommand::new("db", command, Criteria::Write)
        })
    }

    #[test]
    fn an_unacknowledged_write_returns_no_document() {
        let reply = rawdoc! { "ok": 1, "value": { "_id": 2, "x": 22 } };
        let mut w0 =
            op(rawdoc! { "findAndModify": "c", "remove": true, "writeConcern": { "w": 0 } });
        assert_eq!(w0.handle_reply(reply.clone(), "a").unwrap(), None);
        let mut acked = op(rawdoc! { "findAndModify": "c", "remove": true });
        assert_eq!(acked.handle_reply(reply.clone(), "a").unwrap(), Some(reply));
    }

    #[test]
    fn an_unacknowledged_hint_is_refused_before_4_4() {
        let cmd = rawdoc! { "findAndModify": "c", "remove": true, "hint": "_id_", "writeConcern": { "w": 0 } };
        let old = HelloReply {
            max_wire_version: 8,
            ..HelloReply::default()
        };
        assert!(op(cmd.clone()).build(&old).is_err());
        let new = HelloReply {
            max_wire_version: 9,
            ..HelloReply::default()
        };
        assert_eq!(op(cmd.clone()).build(&new).unwrap().body, cmd);
    }
}

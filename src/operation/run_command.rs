use super::{Command, Operation};
use crate::error::{Error, Result};
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use bson::RawDocumentBuf;

/// The user's command, sent as given (plus what the executor adds).
pub struct RunCommand {
    pub db: String,
    pub command: RawDocumentBuf,
    pub criteria: Criteria,
    /// Set by the helpers that know the command is a retryable read.
    pub retryability: Retryability,
    /// Whether a derived maxTimeMS may go on it (CSOT cursor rules).
    pub max_time: bool,
}

impl RunCommand {
    /// A command as the user wrote it: not retried.
    pub fn new(db: &str, command: RawDocumentBuf, criteria: Criteria) -> RunCommand {
        RunCommand {
            db: db.to_string(),
            command,
            criteria,
            retryability: Retryability::None,
            max_time: true,
        }
    }

    /// A read the Retryable Reads spec retries (find, aggregate without $out/$merge, list*...).
    pub fn read(db: &str, command: RawDocumentBuf) -> RunCommand {
        RunCommand {
            db: db.to_string(),
            command,
            criteria: Criteria::read(crate::sdam::selection::ReadMode::Primary),
            retryability: Retryability::Read,
            max_time: true,
        }
    }
}

impl Operation for RunCommand {
    fn name(&self) -> &str {
        self.command
            .iter()
            .next()
            .and_then(|e| e.ok())
            .map_or("", |(k, _)| k.as_str())
    }

    type Output = RawDocumentBuf;

    fn causally_consistent(&self) -> bool {
        false
    }

    fn build(&mut self, _: &HelloReply) -> Result<Command> {
        let name = match self.command.iter().next() {
            Some(Ok((key, _))) => key.to_string(),
            _ => {
                return Err(Error::invalid_argument(
                    "run-command needs a non-empty command document",
                ))
            }
        };
        Ok(Command {
            name,
            db: self.db.clone(),
            body: self.command.clone(),
            sequences: Vec::new(),
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, _: &str) -> Result<RawDocumentBuf> {
        // findAndModify: a labelled write concern error is retried, as for
        // the write commands (write.rs).
        if self.retryability == Retryability::Write {
            if let Some(e) = super::retryable_write_concern_error(&reply) {
                return Err(e);
            }
        }
        Ok(reply)
    }

    fn criteria(&self) -> Criteria {
        self.criteria.clone()
    }

    fn retryability(&self) -> Retryability {
        self.retryability
    }

    fn sends_max_time(&self) -> bool {
        // The command is not searched for a maxTimeMS of its own (CSOT spec,
        // "RunCommand"); helpers strip the caller's under CSOT beforehand.
        self.max_time
    }
}

/// A user command whose reply is a cursor (aggregate, listCollections...).
pub struct CursorCommand(pub RunCommand);

impl Operation for CursorCommand {
    fn name(&self) -> &str {
        self.0.name()
    }

    type Output = super::CursorReply;

    fn causally_consistent(&self) -> bool {
        false
    }

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        self.0.build(hello)
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<super::CursorReply> {
        super::CursorReply::parse(&reply, address)
    }

    fn criteria(&self) -> Criteria {
        self.0.criteria.clone()
    }

    fn retryability(&self) -> Retryability {
        self.0.retryability
    }

    fn sends_max_time(&self) -> bool {
        self.0.sends_max_time()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn the_command_is_not_searched_for_max_time() {
        let cmd = rawdoc! { "ping": 1, "maxTimeMS": 5 };
        let mut op = RunCommand::new("db", cmd.clone(), Criteria::Write);
        assert!(op.sends_max_time(), "under CSOT the derived one is added");
        assert_eq!(op.build(&HelloReply::default()).unwrap().body, cmd);
    }

    #[test]
    fn a_retryable_write_raises_a_labelled_write_concern_error_for_retry() {
        let reply = rawdoc! {
            "ok": 1, "value": null,
            "writeConcernError": { "code": 91, "errmsg": "shutdown" },
            "errorLabels": ["RetryableWriteError"],
        };
        let mut fam = RunCommand {
            retryability: Retryability::Write,
            ..RunCommand::new("db", rawdoc! { "findAndModify": "c" }, Criteria::Write)
        };
        let e = fam.handle_reply(reply.clone(), "a").unwrap_err();
        assert_eq!(e.code, Some(91));
        assert!(e.has_label("RetryableWriteError"));
        // The user's own command is returned as the server answered it.
        let mut user = RunCommand::new("db", rawdoc! { "findAndModify": "c" }, Criteria::Write);
        assert_eq!(
            user.handle_reply(reply, "a")
                .unwrap()
                .get_i32("ok")
                .unwrap(),
            1
        );
    }
}

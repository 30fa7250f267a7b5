//! The transaction state machine of one session (Transactions spec), sans
//! I/O: what each command in a transaction carries, and what commit and
//! abort must do in each state.

use crate::error::{Error, Result};
use crate::sdam::selection::{Criteria, ReadMode, ReadPreference};
use bson::RawDocumentBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    None,
    /// Started; no command sent yet.
    Starting,
    InProgress,
    Committed,
    /// Committed without ever sending a command (nothing to commit).
    CommittedEmpty,
    Aborted,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransactionOptions {
    pub read_concern: Option<RawDocumentBuf>,
    pub write_concern: Option<RawDocumentBuf>,
    pub read_preference: Option<RawDocumentBuf>,
    pub max_commit_time_ms: Option<u64>,
}

/// Fields a command inside a transaction carries.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnFields {
    pub txn_number: i64,
    /// The first command: `startTransaction: true` and the read concern.
    pub start: bool,
    pub read_concern: Option<RawDocumentBuf>,
}

/// What commit or abort must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndAction {
    /// Nothing reached the server: no command, just the new state.
    Nothing,
    Send,
    /// Committing again after a commit: sent as a retry is (w: majority).
    Resend,
}

#[derive(Debug, Clone)]
pub struct Transaction {
    pub state: State,
    pub options: TransactionOptions,
    /// `options.read_preference` parsed (primary when unset).
    read_preference: ReadPreference,
    pub txn_number: i64,
}

impl Default for Transaction {
    fn default() -> Self {
        Transaction {
            state: State::None,
            options: TransactionOptions::default(),
            read_preference: ReadPreference::primary(),
            txn_number: 0,
        }
    }
}

/// Transactions spec: a transaction reads from its primary only, so a read
/// with any other read preference fails before anything is sent. Writes
/// are not checked.
pub fn check_read(criteria: &Criteria) -> Result<()> {
    match criteria {
        Criteria::Read(p) | Criteria::WriteStage(p) if p.mode != ReadMode::Primary => Err(
            Error::invalid_argument("read preference in a transaction must be primary"),
        ),
        _ => Ok(()),
    }
}

impl Transaction {
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Starting | State::InProgress)
    }

    /// `txn_number` is the session's next number, reserved for this transaction.
    pub fn start(&mut self, options: TransactionOptions, txn_number: i64) -> Result<()> {
        if self.is_active() {
            return Err(Error::invalid_argument("transaction already in progress"));
        }
        if let Some(wc) = &options.write_concern {
            if crate::concern::is_unacknowledged(wc) {
                return Err(Error::invalid_argument(
                    "transactions do not support unacknowledged write concern",
                ));
            }
        }
        // Only parsed here: whether it is primary is a read's concern (`check_read`).
        let read_preference = match &options.read_preference {
            Some(d) => ReadPreference::from_document(d)
                .map_err(|e| Error::invalid_argument(format!("invalid read preference: {e}")))?,
            None => ReadPreference::primary(),
        };
        *self = Transaction {
            state: State::Starting,
            options,
            read_preference,
            txn_number,
        };
        Ok(())
    }

    /// The read preference of a read inside this transaction: the
    /// operation's own, else the transaction's, which overrides the
    /// handles' defaults (Transactions spec). `None` outside a transaction.
    pub fn read_preference(&self, given: Option<&ReadPreference>) -> Option<ReadPreference> {
        self.is_active()
            .then(|| given.unwrap_or(&self.read_preference).clone())
    }

    /// For a command sent inside the transaction: its fields, and the move
    /// to InProgress. `None` outside a transaction.
    pub fn on_command(&mut self) -> Option<TxnFields> {
        match self.state {
            State::Starting => {
                self.state = State::InProgress;
                Some(TxnFields {
                    txn_number: self.txn_number,
                    start: true,
                    read_concern: self.options.read_concern.clone(),
                })
            }
            State::InProgress => Some(TxnFields {
                txn_number: self.txn_number,
                start: false,
                read_concern: None,
            }),
            // Any other operation after a transaction ended leaves it behind
            // (Transactions spec): commit and abort then find none.
            State::Committed | State::CommittedEmpty | State::Aborted => {
                self.state = State::None;
                None
            }
            State::None => None,
        }
    }

    /// The command that started the transaction was refused as overloaded,
    /// so the server never started it: its retry starts it again.
    pub fn restart_after_overload(&mut self) {
        if self.state == State::InProgress {
            self.state = State::Starting;
        }
    }

    pub fn commit(&mut self) -> Result<EndAction> {
        match self.state {
            State::None => Err(Error::invalid_argument("no transaction started")),
            State::Aborted => Err(Error::invalid_argument(
                "cannot call commitTransaction after calling abortTransaction",
            )),
            State::Starting | State::CommittedEmpty => {
                self.state = State::CommittedEmpty;
                Ok(EndAction::Nothing)
            }
            State::InProgress => {
                self.state = State::Committed;
                Ok(EndAction::Send)
            }
            // Committing again after a commit is allowed: it re-sends the commit.
            State::Committed => Ok(EndAction::Resend),
        }
    }

    pub fn abort(&mut self) -> Result<EndAction> {
        match self.state {
            State::None => Err(Error::invalid_argument("no transaction started")),
            State::Committed | State::CommittedEmpty => Err(Error::invalid_argument(
                "cannot call abortTransaction after calling commitTransaction",
            )),
            State::Aborted => Err(Error::invalid_argument(
                "cannot call abortTransaction twice",
            )),
            State::Starting => {
                self.state = State::Aborted;
                Ok(EndAction::Nothing)
            }
            State::InProgress => {
                self.state = State::Aborted;
                Ok(EndAction::Send)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn started() -> Transaction {
        let mut t = Transaction::default();
        let opts = TransactionOptions {
            read_concern: Some(rawdoc! { "level": "snapshot" }),
            ..Default::default()
        };
        t.start(opts, 7).unwrap();
        t
    }

    #[test]
    fn first_command_starts_the_transaction() {
        let mut t = started();
        let first = t.on_command().unwrap();
        assert_eq!((first.txn_number, first.start), (7, true));
        assert!(first.read_concern.is_some());
        let second = t.on_command().unwrap();
        assert_eq!((second.start, second.read_concern), (false, None));
        assert_eq!(t.state, State::InProgress);
        assert!(Transaction::default().on_command().is_none());
    }

    #[test]
    fn an_operation_after_the_end_resets_the_state() {
        let mut t = started();
        t.on_command();
        t.commit().unwrap();
        assert!(t.on_command().is_none(), "outside the transaction");
        assert_eq!(t.state, State::None);
        let e = t.commit().unwrap_err();
        assert!(e.message.contains("no transaction started"));
        let mut t = started();
        t.abort().unwrap();
        t.on_command();
        let e = t.abort().unwrap_err();
        assert!(e.message.contains("no transaction started"));
    }

    #[test]
    fn empty_transactions_end_without_a_command() {
        let mut t = started();
        assert_eq!(t.commit().unwrap(), EndAction::Nothing);
        assert_eq!(
            t.commit().unwrap(),
            EndAction::Nothing,
            "committing again is fine"
        );
        let mut t = started();
        assert_eq!(t.abort().unwrap(), EndAction::Nothing);
    }

    #[test]
    fn state_rules() {
        let mut t = started();
        assert!(
            t.start(TransactionOptions::default(), 8).is_err(),
            "already in progress"
        );
        t.on_command();
        assert_eq!(t.commit().unwrap(), EndAction::Send);
        assert_eq!(
            t.commit().unwrap(),
            EndAction::Resend,
            "re-commit is allowed"
        );
        assert!(t.abort().is_err(), "abort after commit");
        let mut t = started();
        t.on_command();
        assert_eq!(t.abort().unwrap(), EndAction::Send);
        assert!(t.abort().is_err());
        assert!(t.commit().is_err(), "commit after abort");
        assert!(Transaction::default().commit().is_err());
        // A new transaction after the last one ended.
        t.start(TransactionOptions::default(), 9).unwrap();
        assert_eq!(t.state, State::Starting);
    }

    #[test]
    fn reads_take_the_transactions_read_preference_and_must_be_primary() {
        let secondary = ReadPreference::from(ReadMode::Secondary);
        let mut t = Transaction::default();
        assert_eq!(t.read_preference(None), None, "outside a transaction");
        let opts = TransactionOptions {
            read_preference: Some(rawdoc! { "mode": "secondary" }),
            ..Default::default()
        };
        t.start(opts, 1).unwrap();
        let read = t.read_preference(None).unwrap();
        assert_eq!(read, secondary);
        let e = check_read(&Criteria::Read(read)).unwrap_err();
        assert!(e
            .message
            .contains("read preference in a transaction must be primary"));
        // The operation's own wins; writes are never checked.
        let primary = ReadPreference::primary();
        assert_eq!(t.read_preference(Some(&primary)), Some(primary.clone()));
        assert!(check_read(&Criteria::Read(primary)).is_ok());
        assert!(check_read(&Criteria::Write).is_ok());
        // Unset: primary.
        let mut t = Transaction::default();
        t.start(TransactionOptions::default(), 2).unwrap();
        assert_eq!(t.read_preference(None), Some(ReadPreference::primary()));
        let bad = TransactionOptions {
            read_preference: Some(rawdoc! { "mode": "sideways" }),
            ..Default::default()
        };
        assert!(Transaction::default().start(bad, 3).is_err());
    }

    #[test]
    fn unacknowledged_write_concern_is_refused() {
        let mut t = Transaction::default();
        let opts = TransactionOptions {
            write_concern: Some(rawdoc! { "w": 0 }),
            ..Default::default()
        };
        assert!(t.start(opts, 1).is_err());
    }
}

use super::face::session::{
    self as wit_session, GuestSession, GuestTransactionRunner, RunnerStep, TransactionOptions,
    TransactionRunner as WitRunner, TransactionState as WitTransactionState,
    WithTransactionOptions,
};
use super::slot::Slot;
use super::{doc, to_wit, wit, wrap, Component, WitResult};
use crate::{Error, ErrorKind, Session, TransactionRunner};

pub struct SessionRes(pub Session);

/// WIT methods take `&self`; the runner's loop state needs `&mut`.
pub struct RunnerRes(Slot<TransactionRunner>);

impl wit_session::Guest for Component {
    type Session = SessionRes;
    type TransactionRunner = RunnerRes;
}

impl GuestTransactionRunner for RunnerRes {
    io! {
        fn step(&self) -> WitResult<RunnerStep> {
            match self.0.lease("transaction runner")?.step().await {
                Ok(crate::RunnerStep::RunBody) => Ok(RunnerStep::RunBody),
                Ok(crate::RunnerStep::Done) => Ok(RunnerStep::Done),
                Err(e) => Err(to_wit(e)),
            }
        }
    }

    fn report(&self, outcome: Result<(), wit::Error>) -> WitResult<()> {
        let mut runner = self.0.lease("transaction runner")?;
        wrap(runner.report(outcome.map_err(from_wit)))
    }
}

/// The caller's error, back into the driver's type (labels decide retries).
fn from_wit(e: wit::Error) -> Error {
    let kind = match e.kind {
        wit::ErrorKind::Timeout => ErrorKind::Timeout,
        wit::ErrorKind::Network => ErrorKind::Network,
        wit::ErrorKind::Server => ErrorKind::Server,
        wit::ErrorKind::ServerSelection => ErrorKind::ServerSelection,
        wit::ErrorKind::InvalidArgument => ErrorKind::InvalidArgument,
        wit::ErrorKind::NotImplemented => ErrorKind::NotImplemented,
        wit::ErrorKind::Protocol => ErrorKind::Protocol,
        wit::ErrorKind::Closed => ErrorKind::Closed,
        wit::ErrorKind::Authentication => ErrorKind::Authentication,
        wit::ErrorKind::AccessDenied => ErrorKind::AccessDenied,
        wit::ErrorKind::DuplicateKey => ErrorKind::DuplicateKey,
        wit::ErrorKind::WriteConcern => ErrorKind::WriteConcern,
    };
    // A malformed reply document is dropped rather than refused: the error
    // itself is what the caller reports.
    let reply = e
        .reply
        .and_then(|b| bson::RawDocumentBuf::from_bytes(b).ok())
        .map(Box::new);
    Error {
        kind,
        code: e.code,
        code_name: e.code_name,
        labels: e.labels,
        message: e.message,
        cause: e.cause.map(|c| Box::new(crate::error::Cause::Text(c))),
        reply,
        // The body's outcome decides a retry by its kind and labels only.
        write_failure: None,
    }
}

impl GuestSession for SessionRes {
    fn id(&self) -> Vec<u8> {
        self.0.id().into_bytes()
    }

    fn cluster_time(&self) -> Option<Vec<u8>> {
        self.0.cluster_time().map(|d| d.into_bytes())
    }

    fn operation_time(&self) -> Option<Vec<u8>> {
        self.0
            .operation_time()
            .map(|t| bson::rawdoc! { "t": t }.into_bytes())
    }

    fn advance_cluster_time(&self, cluster_time: Vec<u8>) -> WitResult<()> {
        self.0.advance_cluster_time(doc(cluster_time)?);
        Ok(())
    }

    fn advance_operation_time(&self, operation_time: Vec<u8>) -> WitResult<()> {
        let d = doc(operation_time)?;
        let t = wrap(
            d.get_timestamp("t")
                .map_err(|_| crate::Error::invalid_argument("expected {t: <timestamp>}")),
        )?;
        self.0.advance_operation_time(t);
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        self.0.in_transaction()
    }

    fn transaction_state(&self) -> WitTransactionState {
        use crate::TransactionState as S;
        match self.0.transaction_state() {
            S::None => WitTransactionState::None,
            S::Starting => WitTransactionState::Starting,
            S::InProgress => WitTransactionState::InProgress,
            S::Committed | S::CommittedEmpty => WitTransactionState::Committed,
            S::Aborted => WitTransactionState::Aborted,
        }
    }

    fn is_dirty(&self) -> bool {
        self.0.is_dirty()
    }

    fn snapshot_time(&self) -> Option<Vec<u8>> {
        self.0
            .snapshot_time()
            .map(|t| bson::rawdoc! { "t": t }.into_bytes())
    }

    fn pinned_server(&self) -> Option<String> {
        self.0.pinned_server()
    }

    fn start_transaction(&self, options: TransactionOptions) -> WitResult<()> {
        wrap(self.0.start_transaction(transaction_options(options)?))
    }

    io! {
        fn commit_transaction(&self, timeout_ms: Option<u64>) -> WitResult<()> {
            wrap(self.0.commit_transaction(timeout_ms).await)
        }
    }

    io! {
        fn abort_transaction(&self, timeout_ms: Option<u64>) -> WitResult<()> {
            wrap(self.0.abort_transaction(timeout_ms).await)
        }
    }

    fn with_transaction(&self, options: WithTransactionOptions) -> WitRunner {
        // Bad option documents surface at the first step, as start errors do.
        let runner = match transaction_options(options.transaction) {
            Ok(transaction) => self.0.transaction_runner(crate::WithTransactionOptions {
                transaction,
                timeout_ms: options.timeout_ms,
            }),
            Err(e) => TransactionRunner::failed(&self.0, from_wit(e)),
        };
        WitRunner::new(RunnerRes(Slot::new(runner)))
    }

    io! {
        fn end(&self) {
            self.0.end().await
        }
    }
}

pub fn transaction_options(o: TransactionOptions) -> WitResult<crate::TransactionOptions> {
    Ok(crate::TransactionOptions {
        read_concern: o.read_concern.map(|c| super::read_concern(c).to_document()),
        write_concern: o
            .write_concern
            .map(|c| super::write_concern(c).to_document()),
        read_preference: o
            .read_preference
            .as_ref()
            .map(super::read_preference)
            .transpose()?
            .map(|p| p.to_document()),
        max_commit_time_ms: o.max_commit_time_ms,
    })
}

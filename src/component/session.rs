use super::exports::mongo_wasi::driver::session::{
    self as wit_session, GuestSession, TransactionOptions,
};
use super::{doc, opt_doc, wrap, Component, WitResult};
use crate::Session;

pub struct SessionRes(pub Session);

impl wit_session::Guest for Component {
    type Session = SessionRes;
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

    fn start_transaction(&self, options: TransactionOptions) -> WitResult<()> {
        wrap(self.0.start_transaction(transaction_options(options)?))
    }

    fn commit_transaction(&self, timeout_ms: Option<u64>) -> WitResult<()> {
        wrap(self.0.commit_transaction(timeout_ms))
    }

    fn abort_transaction(&self, timeout_ms: Option<u64>) -> WitResult<()> {
        wrap(self.0.abort_transaction(timeout_ms))
    }

    fn end(&self) {
        self.0.end()
    }
}

pub fn transaction_options(o: TransactionOptions) -> WitResult<crate::TransactionOptions> {
    Ok(crate::TransactionOptions {
        read_concern: opt_doc(o.read_concern)?,
        write_concern: opt_doc(o.write_concern)?,
        read_preference: opt_doc(o.read_preference)?,
        max_commit_time_ms: o.max_commit_time_ms,
    })
}

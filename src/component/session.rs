use super::exports::mongo_wasi::driver::session::{
    self as wit_session, GuestSession, TransactionOptions,
};
use super::{doc, not_implemented, wrap, Component, WitResult};
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
        false
    }

    fn start_transaction(&self, _: TransactionOptions) -> WitResult<()> {
        wrap(self.0.start_transaction())
    }

    fn commit_transaction(&self, _: Option<u64>) -> WitResult<()> {
        not_implemented("transactions")
    }

    fn abort_transaction(&self, _: Option<u64>) -> WitResult<()> {
        not_implemented("transactions")
    }

    fn end(&self) {
        self.0.end()
    }
}

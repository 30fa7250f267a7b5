//! The client, as the API shows it: databases, sessions, change streams,
//! monitoring drains and close. Cheap to clone. Its state and the way to
//! the executor are the engine's (`inner.rs`), which imports nothing here.

pub(crate) mod inner;

pub use inner::ClientOptions;

use crate::csot::OpTimeout;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::monitoring::CommandEvent;
use crate::operation::{Operation, RunCommand};
use crate::sdam::selection::{Criteria, ReadPreference};
use crate::sdam::TopologyDescription;
use crate::session::{Session, TransactionOptions};
use bson::{rawdoc, RawDocumentBuf};
use inner::ClientInner;
use std::rc::Rc;

#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Rc<ClientInner>,
}

impl Client {
    pub fn connect(uri: &str) -> Result<Client> {
        Client::with_options(uri, ClientOptions::default())
    }

    /// Parses and validates the URI; no I/O happens until the first operation.
    pub fn with_options(uri: &str, options: ClientOptions) -> Result<Client> {
        let inner = Rc::new(ClientInner::new(uri, options)?);
        Ok(Client { inner })
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.inner.timeout_ms
    }

    /// What this client learned that a client in a new instance can reuse,
    /// as an opaque, versioned blob (`crate::warm`): the SCRAM keys this
    /// instance derived for the client's credential, so the next instance
    /// skips PBKDF2, and a `mongodb+srv` URI's SRV and TXT answers and the
    /// addresses the DNS servers gave for its servers' names, with their
    /// expiry, so it skips those DNS lookups while they are fresh.
    /// Never the password, but as secret as it: the keys authenticate as
    /// the user. No I/O.
    pub fn warm_state(&self) -> Vec<u8> {
        let topology = self.inner.topology.borrow();
        let auth = topology.connect_settings().auth.clone();
        let scram = auth.map(|a| a.warm_keys()).unwrap_or_default();
        let srv = topology.srv_answers().cloned();
        // The addresses of this client's servers' names.
        let hosts: Vec<&str> = topology
            .description
            .servers
            .iter()
            .filter_map(|s| s.address.rsplit_once(':').map(|(host, _)| host))
            .collect();
        let addresses = crate::runtime::learned_addresses(&hosts);
        crate::warm::WarmState {
            scram,
            srv,
            addresses,
        }
        .encode()
    }

    /// How many times this instance ran PBKDF2 (SCRAM key derivation) for
    /// any client: a connection whose keys came from the instance's cache or
    /// an adopted warm state runs none. 0 for a client without a password.
    pub fn scram_derivations(&self) -> u64 {
        let auth = self.inner.topology.borrow().connect_settings().auth.clone();
        auth.map_or(0, |a| a.cache().derivations())
    }

    /// Takes back a blob [`Client::warm_state`] handed out (call it before
    /// the first operation): the SCRAM keys derived for this client's user
    /// and password go into the instance's key cache, and a connection whose
    /// server announces the same salt and iteration count skips PBKDF2 (a
    /// changed salt or count derives again). A `mongodb+srv` client keeps
    /// the SRV and TXT answers for its discovery, which uses them instead of
    /// DNS if they are for its SRV name and not expired (by the wall clock),
    /// through the same seedlist rules; adopted addresses answer for their
    /// name while fresh (instance-wide, as the key cache). Returns how many
    /// key sets, SRV answers and host names' addresses were taken. A blob that is not a warm state is `InvalidArgument`; one of
    /// another format version is ignored (0). No I/O.
    pub fn adopt_warm_state(&self, blob: &[u8]) -> Result<u32> {
        let state = crate::warm::WarmState::decode(blob)?;
        let mut topology = self.inner.topology.borrow_mut();
        let auth = topology.connect_settings().auth.clone();
        let taken = auth.map_or(0, |a| a.adopt_warm_keys(&state.scram));
        let srv = state
            .srv
            .is_some_and(|answers| topology.adopt_srv_answers(answers));
        let addresses = crate::runtime::adopt_addresses(&state.addresses);
        Ok(taken as u32 + u32::from(srv) + addresses as u32)
    }

    /// A database handle; `timeout_ms` `None` inherits the client's.
    pub fn database(&self, name: &str, timeout_ms: Option<u64>) -> Database {
        let timeout_ms =
            crate::csot::resolve_timeout_ms(None, None, &[timeout_ms, self.inner.timeout_ms]);
        Database::new(self.clone(), name, timeout_ms)
    }

    pub fn start_session(&self, default_timeout_ms: Option<u64>) -> Session {
        self.start_session_with(default_timeout_ms, TransactionOptions::default())
    }

    /// A session whose transactions default to `default_transaction`.
    pub fn start_session_with(
        &self,
        default_timeout_ms: Option<u64>,
        default_transaction: TransactionOptions,
    ) -> Session {
        // A transaction's concerns and read preference default to the
        // client's (Transactions spec).
        let default_transaction = TransactionOptions {
            read_concern: default_transaction
                .read_concern
                .or_else(|| self.inner.read_concern.clone()),
            write_concern: default_transaction
                .write_concern
                .or_else(|| self.inner.write_concern.clone()),
            read_preference: default_transaction.read_preference.or_else(|| {
                self.inner
                    .read_preference
                    .as_ref()
                    .map(ReadPreference::to_document)
            }),
            ..default_transaction
        };
        let minutes = self.inner.session_timeout();
        Session::explicit(
            &self.inner,
            &self.inner.sessions,
            minutes,
            default_timeout_ms,
            default_transaction,
        )
    }

    /// Drains the recorded command events (empty unless monitoring is on).
    pub fn take_command_events(&self) -> Vec<CommandEvent> {
        self.inner
            .events
            .borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Drains the recorded log messages (Logging spec; empty unless
    /// `ClientOptions::log` turns a component on), in the order they came.
    pub fn take_log_messages(&self) -> Vec<crate::logging::LogMessage> {
        self.inner.log.take()
    }

    /// Drains the recorded pool events (CMAP, and pending-response drains;
    /// empty unless monitoring is on).
    pub fn take_pool_events(&self) -> Vec<crate::cmap::PoolEvent> {
        self.inner.topology.borrow_mut().take_pool_events()
    }

    /// Each server's pool as it stands: connections checked out, idle, and
    /// idle but owed a reply.
    pub fn pool_status(&self) -> Vec<crate::cmap::PoolStatus> {
        self.inner.topology.borrow().pool_status()
    }

    /// Server sessions checked out now by live session handles (explicit
    /// ones not yet ended, implicit ones of operations and cursors in
    /// progress). With no handle left, anything but 0 is a leaked session.
    pub fn sessions_in_use(&self) -> usize {
        self.inner.sessions.checked_out()
    }

    /// Runs the server checks a background monitor would have run by now
    /// (`Topology::check_due_servers`), within the client's timeoutMS, else
    /// serverSelectionTimeoutMS.
    pub async fn check_servers(&self) -> Result<()> {
        self.inner.check_open()?;
        let timeout = self.start_timeout(self.inner.timeout_ms);
        let deadline = timeout.selection_deadline(crate::runtime::now());
        self.inner
            .topology
            .check_due_servers(&timeout, deadline)
            .await
    }

    /// Clears the pool of `address` (`host:port`) as SDAM does after a
    /// failed server check; `interrupt_in_use_connections` as after a
    /// network timeout: operations using its connections fail at once with
    /// a retryable PoolClearedError (WASI 0.3). Checkouts waiting in the pool
    /// fail too. For test runners (CMAP spec tests' `clear`); an application
    /// has no need of it.
    #[doc(hidden)]
    pub fn clear_pool(&self, address: &str, interrupt_in_use_connections: bool) {
        let error = crate::error::Error::network("cleared by the caller");
        let mut t = self.inner.topology.borrow_mut();
        t.clear_pool(address, interrupt_in_use_connections);
        // As after a failed check: the server is Unknown until checked again.
        t.mark_unknown(address, &error);
    }

    /// The CMAP spec tests' pool operations, on the pool of `address`
    /// alone (no server selection, no SDAM): `create` (the pool, paused,
    /// as a runner's first step), `ready`, `clear`, `checkOut`
    /// (bounded by waitQueueTimeoutMS, else serverSelectionTimeoutMS),
    /// `checkIn`. For test runners; an application has no need of them.
    #[doc(hidden)]
    pub fn pool_create(&self, address: &str) {
        self.inner.topology.borrow_mut().pool_create(address);
    }

    #[doc(hidden)]
    pub fn pool_ready(&self, address: &str) {
        self.inner.topology.borrow_mut().pool_ready(address);
    }

    #[doc(hidden)]
    pub fn pool_clear(&self, address: &str, interrupt_in_use_connections: bool) {
        self.inner
            .topology
            .borrow_mut()
            .clear_pool(address, interrupt_in_use_connections);
    }

    #[doc(hidden)]
    pub async fn pool_check_out(&self, address: &str) -> Result<PooledConnection> {
        let timeout = self.start_timeout(None);
        let selection = timeout.selection_deadline(crate::runtime::now());
        let conn = self
            .inner
            .topology
            .checkout(address, &timeout, selection, false)
            .await?;
        Ok(PooledConnection(conn))
    }

    #[doc(hidden)]
    pub fn pool_check_in(&self, conn: PooledConnection) {
        self.inner.topology.borrow_mut().checkin(conn.0);
    }

    /// Drains the recorded SDAM events (empty unless monitoring is on).
    pub fn take_sdam_events(&self) -> Vec<crate::sdam::monitoring::SdamEvent> {
        self.inner.topology.borrow_mut().take_sdam_events()
    }

    pub fn topology_description(&self) -> TopologyDescription {
        self.inner.topology.borrow().description.clone()
    }

    /// Names a library that wraps this client in the handshake of every
    /// connection made from now on (Handshake spec, appendMetadata).
    /// Connections already made keep theirs: none is closed or opened for
    /// it. The same info twice is appended once; a field holding `|` is
    /// `invalid-argument`.
    pub fn append_metadata(&self, info: crate::handshake::DriverInfo) -> Result<()> {
        let info = info.checked()?;
        let mut infos = self.inner.driver_infos.borrow_mut();
        if infos.contains(&info) {
            return Ok(());
        }
        self.inner.topology.borrow_mut().append_driver_info(&info)?;
        infos.push(info);
        Ok(())
    }

    /// Ends the pooled server sessions (best effort, under the client's
    /// timeoutMS, else the legacy timeouts) and closes every pooled
    /// connection. The client stays closed: every later operation of it or
    /// of its databases, collections, cursors and sessions fails with
    /// `Closed`; a second close does nothing.
    pub async fn close(&self) {
        let timeout_ms = crate::csot::resolve_timeout_ms(None, None, &[self.inner.timeout_ms]);
        self.inner.close_within(timeout_ms).await;
    }

    /// The bound on the endSessions a dropped client sends (`close_on_drop`).
    pub const DROP_END_SESSIONS_MS: u64 = 1000;

    /// `close` for a client dropped without it: endSessions bounded by
    /// `DROP_END_SESSIONS_MS`, or by the client's timeoutMS when smaller, so
    /// a forgotten close neither leaks server sessions nor blocks long.
    pub async fn close_on_drop(&self) {
        let bound = match self.inner.timeout_ms {
            Some(ms) if ms > 0 => ms.min(Self::DROP_END_SESSIONS_MS),
            _ => Self::DROP_END_SESSIONS_MS,
        };
        self.inner.close_within(Some(bound)).await;
    }

    // The engine's entry points, for the API objects that hold a `Client`.

    /// The explicit session, else a new implicit one (which a cursor keeps).
    pub(crate) fn session_for(&self, explicit: Option<&Session>) -> Session {
        self.inner.session_for(explicit)
    }

    /// Behind a load balancer: returns the connection pinned to cursor `id`, if any.
    pub(crate) fn release_cursor_connection(&self, id: i64) {
        self.inner.release_cursor_connection(id)
    }

    /// Starts the operation's clock now and runs it.
    pub(crate) async fn execute<O: Operation>(
        &self,
        op: &mut O,
        timeout_ms: Option<u64>,
        session: Option<&Session>,
    ) -> Result<O::Output> {
        self.inner.execute(op, timeout_ms, session).await
    }

    pub(crate) fn start_timeout(&self, timeout_ms: Option<u64>) -> OpTimeout {
        self.inner.start_timeout(timeout_ms)
    }

    /// Runs `op` under an already-started budget, optionally pinned to a server.
    pub(crate) async fn execute_within<O: Operation>(
        &self,
        op: &mut O,
        timeout: &OpTimeout,
        session: Option<&Session>,
        pinned: Option<&str>,
    ) -> Result<O::Output> {
        self.inner
            .execute_within(op, timeout, session, pinned)
            .await
    }

    /// A change stream on the whole deployment (`allChangesForCluster` on admin).
    pub async fn watch(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &crate::collection::OpOptions<'_>,
    ) -> Result<crate::cursor::Cursor> {
        let options = &options.flattened()?;
        let mut extra = rawdoc! { "allChangesForCluster": true };
        crate::operation::merge_extra(&mut extra, options.extra.as_deref())?;
        let options = crate::collection::OpOptions {
            extra: Some(extra),
            ..options.clone()
        };
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.inner.timeout_ms]);
        crate::change_stream::open(
            self,
            "admin",
            bson::RawBson::Int32(1),
            pipeline,
            &options,
            batch_size,
            timeout_ms,
        )
        .await
    }

    /// `listDatabases` (a retryable read): one document per database.
    pub async fn list_databases(
        &self,
        filter: RawDocumentBuf,
        name_only: bool,
        options: &crate::collection::OpOptions<'_>,
    ) -> Result<Vec<RawDocumentBuf>> {
        let options = &options.flattened()?;
        let mut cmd = rawdoc! { "listDatabases": 1, "filter": filter };
        if name_only {
            cmd.append(bson::cstr!("nameOnly"), true);
        }
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.inner.timeout_ms]);
        let extra = crate::csot::without_caller_max_time(options.extra.as_ref(), timeout_ms)?;
        crate::operation::merge_extra(&mut cmd, extra.as_deref())?;
        let mut op = RunCommand {
            criteria: Criteria::Read(options.read_preference_or_primary()),
            ..RunCommand::read("admin", cmd)
        };
        let reply = self.execute(&mut op, timeout_ms, options.session).await?;
        let list = reply
            .get_array("databases")
            .map_err(|_| Error::protocol("listDatabases reply has no databases array"))?;
        crate::operation::documents_of(list)
    }

    pub async fn list_database_names(
        &self,
        filter: RawDocumentBuf,
        options: &crate::collection::OpOptions<'_>,
    ) -> Result<Vec<String>> {
        let dbs = self.list_databases(filter, true, options).await?;
        Ok(dbs
            .iter()
            .filter_map(|d| d.get_str("name").ok().map(str::to_string))
            .collect())
    }
}

/// A connection checked out by `Client::pool_check_out` (CMAP spec tests);
/// dropped without `pool_check_in`, it is closed and stops counting.
#[doc(hidden)]
pub struct PooledConnection(crate::conn::Connection);

impl PooledConnection {
    /// The driver's id of the connection (CMAP events' `connectionId`).
    pub fn id(&self) -> u64 {
        self.0.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::versioned_api::{ServerApi, ServerApiVersion};

    /// The warm state of a client that learned nothing is an empty blob of
    /// the current version; a client without a password takes nothing from
    /// a blob; what is not a warm state is invalid-argument.
    #[test]
    fn warm_state_without_keys_and_bad_blobs() {
        let plain = Client::connect("mongodb://127.0.0.1:1/").unwrap();
        let blob = plain.warm_state();
        assert!(crate::warm::WarmState::decode(&blob).unwrap().is_empty());
        assert_eq!(plain.adopt_warm_state(&blob).unwrap(), 0);
        assert_eq!(plain.scram_derivations(), 0);
        let user = Client::connect("mongodb://u:p@127.0.0.1:1/").unwrap();
        assert_eq!(user.adopt_warm_state(&blob).unwrap(), 0);
        for bad in [&b""[..], b"{}", &[7u8; 70_000]] {
            let e = user.adopt_warm_state(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        }
    }

    fn refusal(uri: &str) -> Error {
        match Client::connect(uri) {
            Ok(_) => panic!("{uri} was accepted"),
            Err(e) => e,
        }
    }

    /// A known option with an invalid value fails `connect`: its message
    /// does not say "ignored" (issue: what a new user trips over).
    #[test]
    fn an_invalid_value_that_fails_connect_is_not_called_ignored() {
        let e = refusal("mongodb://h/?timeoutMS=-1");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("'timeoutMS'"), "{}", e.message);
        assert!(!e.message.contains("ignored"), "{}", e.message);
    }

    /// What the URI options spec only warns about does not fail `connect`.
    #[test]
    fn bad_compression_options_only_warn() {
        for uri in [
            "mongodb://h/?compressors=bogus",
            "mongodb://h/?compressors=zlib&zlibCompressionLevel=99",
        ] {
            assert!(Client::connect(uri).is_ok(), "{uri}");
        }
    }

    /// A bad port hints at percent-encoding only when an '@' follows, so
    /// that it may be the start of a password.
    #[test]
    fn a_bad_port_gets_the_encoding_hint_only_before_an_at() {
        let plain = refusal("mongodb://h:abc/");
        assert!(plain.message.contains("invalid port"), "{}", plain.message);
        assert!(!plain.message.contains("percent"), "{}", plain.message);
        let password = refusal("mongodb://user:pa?appName=a@b");
        assert!(
            password.message.contains("percent-encoded"),
            "{}",
            password.message
        );
    }

    #[test]
    fn proxy_options_are_refused_by_name() {
        let e = refusal("mongodb://h/?proxyHost=p");
        assert_eq!(e.kind, ErrorKind::NotImplemented);
        assert!(e.message.contains("proxyHost"), "{}", e.message);
        let e = refusal("mongodb://h/?proxyHost=p&proxyPort=1081&proxyUsername=u&proxyPassword=s");
        assert_eq!(e.kind, ErrorKind::NotImplemented);
        assert!(
            e.message
                .contains("proxyHost, proxyPort, proxyUsername, proxyPassword"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("=s"), "the password is never echoed");
    }

    #[test]
    fn invalid_proxy_options_stay_invalid_arguments() {
        // The URI options spec's own checks come first.
        for uri in [
            "mongodb://h/?proxyPort=1080",
            "mongodb://h/?proxyHost=p&proxyUsername=u",
        ] {
            assert_eq!(refusal(uri).kind, ErrorKind::InvalidArgument, "{uri}");
        }
    }

    #[test]
    fn a_declared_api_reaches_the_executor_and_the_handshake() {
        let api = ServerApi {
            strict: Some(true),
            ..ServerApi::new(ServerApiVersion::V1)
        };
        let options = ClientOptions {
            server_api: Some(api.clone()),
            ..Default::default()
        };
        let client = Client::with_options("mongodb://127.0.0.1:1/", options).unwrap();
        assert_eq!(client.inner.server_api.as_ref(), Some(&api));
        let topology = client.inner.topology.borrow();
        assert_eq!(topology.connect_settings().server_api.as_ref(), Some(&api));
        let plain = Client::connect("mongodb://127.0.0.1:1/").unwrap();
        assert!(plain.inner.server_api.is_none());
    }
}

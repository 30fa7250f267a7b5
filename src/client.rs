//! The client: parsed options, the topology, monitoring. Cheap to clone.

use crate::csot::{LegacyTimeouts, OpTimeout};
use crate::database::Database;
use crate::error::{Error, Result};
use crate::executor::{self, Context};
use crate::logging::{Component, Level, Logger};
use crate::monitoring::CommandEvent;
use crate::operation::{Operation, RunCommand};
use crate::sdam::selection::{Criteria, ReadMode, ReadPreference};
use crate::sdam::{address_of, TopologyDescription};
use crate::session::{Session, SessionPool, TransactionOptions};
use crate::topology::{Topology, TopologySettings};
use crate::uri::{self, HostAddress};
use crate::versioned_api::ServerApi;
use bson::{rawdoc, RawDocumentBuf};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// Settings given in code; they override the URI.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    pub timeout_ms: Option<u64>,
    pub monitor_commands: bool,
    /// The declared Stable API, sent with every command (never from the URI,
    /// as the Versioned API spec requires).
    pub server_api: Option<ServerApi>,
    /// PEM CA certificates trusted instead of the bundled Mozilla roots (and
    /// instead of `tlsCAFile`). TLS itself is turned on by `tls=true` in the URI.
    pub tls_ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its unencrypted private key in one PEM
    /// (instead of `tlsCertificateKeyFile`), for mutual TLS and MONGODB-X509.
    pub tls_certificate_key_pem: Option<Vec<u8>>,
    /// Logging spec: the components and levels to record for
    /// `take_log_messages`, and maxDocumentLength (all off by default).
    pub log: crate::logging::LogOptions,
}

pub(crate) struct ClientInner {
    pub(crate) topology: RefCell<Topology>,
    pub(crate) legacy: LegacyTimeouts,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) retry_reads: bool,
    /// Defaults from the URI, inherited by databases and collections.
    pub(crate) read_concern: Option<RawDocumentBuf>,
    pub(crate) write_concern: Option<RawDocumentBuf>,
    /// The URI's readPreference, readPreferenceTags and maxStalenessSeconds.
    pub(crate) read_preference: Option<ReadPreference>,
    pub(crate) retry_writes: bool,
    /// maxAdaptiveRetries: the cap on retries once a server is overloaded.
    pub(crate) max_adaptive_retries: u32,
    /// enableOverloadRetargeting: a retry after an overload error avoids the
    /// server that answered it (Client Backpressure; off by default).
    pub(crate) overload_retargeting: bool,
    pub(crate) sessions: Rc<SessionPool>,
    /// The greatest `$clusterTime` any reply carried.
    pub(crate) cluster_time: RefCell<Option<RawDocumentBuf>>,
    /// The declared Stable API (also in the topology's connect settings).
    pub(crate) server_api: Option<ServerApi>,
    events: RefCell<Option<Vec<CommandEvent>>>,
    /// The client's log, shared with its topology (one queue, in order).
    pub(crate) log: Logger,
    next_op_id: Cell<i64>,
    /// Set by `close`: every later operation fails with `Closed`.
    closed: Cell<bool>,
    /// The libraries `append_metadata` named, each once.
    driver_infos: RefCell<Vec<crate::handshake::DriverInfo>>,
}

impl ClientInner {
    /// Whether command events are kept or logged (else none is built).
    pub(crate) fn monitoring(&self) -> bool {
        self.events.borrow().is_some() || self.log.enabled(Component::Command, Level::Debug)
    }

    pub(crate) fn record(&self, event: impl FnOnce() -> CommandEvent) {
        if !self.monitoring() {
            return;
        }
        let event = event();
        self.log.event(&event);
        if let Some(events) = self.events.borrow_mut().as_mut() {
            events.push(event);
        }
    }

    pub(crate) fn implicit_session(&self) -> Session {
        let minutes = self
            .topology
            .borrow()
            .description
            .logical_session_timeout_minutes;
        Session::new(&self.sessions, minutes, true, None)
    }

    /// `Closed` once the client was closed (checked before every operation).
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.closed.get() {
            true => Err(Error::closed("client")),
            false => Ok(()),
        }
    }

    /// The id `next_operation_id` will give.
    pub(crate) fn peek_operation_id(&self) -> i64 {
        self.next_op_id.get()
    }

    pub(crate) fn next_operation_id(&self) -> i64 {
        let id = self.next_op_id.get();
        self.next_op_id.set(id + 1);
        id
    }
}

/// The pool options the URI set, as "Connection pool created" messages
/// show them (CMAP logging: only those given).
fn pool_options(o: &uri::UriOptions) -> RawDocumentBuf {
    let mut d = RawDocumentBuf::new();
    let counts = [
        (bson::cstr!("maxIdleTimeMS"), o.max_idle_time_ms),
        (bson::cstr!("minPoolSize"), o.min_pool_size.map(u64::from)),
        (bson::cstr!("maxPoolSize"), o.max_pool_size.map(u64::from)),
        (
            bson::cstr!("maxConnecting"),
            o.max_connecting.map(u64::from),
        ),
        (bson::cstr!("waitQueueTimeoutMS"), o.wait_queue_timeout_ms),
    ];
    for (key, value) in counts {
        if let Some(v) = value {
            d.append(key, i64::try_from(v).unwrap_or(i64::MAX));
        }
    }
    d
}

/// The SOCKS5 proxy options the URI gave (the URI parser has already
/// checked that they come with proxyHost and in pairs), for the refusal.
fn proxy_options(o: &uri::UriOptions) -> Option<String> {
    let given: Vec<&str> = [
        ("proxyHost", o.proxy_host.is_some()),
        ("proxyPort", o.proxy_port.is_some()),
        ("proxyUsername", o.proxy_username.is_some()),
        ("proxyPassword", o.proxy_password.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    (!given.is_empty()).then(|| given.join(", "))
}

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
        let cs = uri::parse(uri)?;
        check_supported(&cs)?;
        let auth = cs
            .credential
            .clone()
            .map(crate::auth::Authenticator::new)
            .transpose()?
            .map(Rc::new);
        // A mongodb+srv URI gets its seeds at the first operation (seedlist discovery).
        let seeds = if cs.srv { Vec::new() } else { seeds(&cs)? };
        let o = &cs.options;
        let tls = match cs.tls_enabled() {
            false => None,
            true => {
                let pem = crate::tls::PemInputs {
                    ca: options.tls_ca_pem.as_deref(),
                    certificate_key: options.tls_certificate_key_pem.as_deref(),
                };
                Some(crate::tls::client_config(
                    o,
                    pem,
                    &crate::runtime::read_file,
                )?)
            }
        };
        let app_name = o.app_name.as_deref();
        let log = Logger::new(&options.log, pool_options(o));
        let platform = crate::runtime::env_var("MONGO_WASI_PLATFORM");
        let settings = TopologySettings {
            seeds,
            direct: o.direct_connection,
            replica_set: o.replica_set.clone(),
            srv: cs.srv.then(|| cs.clone()),
            local_threshold: Duration::from_millis(o.local_threshold_ms.unwrap_or(15)),
            connect: crate::conn::ConnectSettings {
                metadata: crate::handshake::client_metadata(app_name, platform.as_deref()),
                server_api: options.server_api.clone(),
                name_servers: Vec::new(),
                auth,
                tls,
                load_balanced: o.load_balanced == Some(true),
            },
            max_pool_size: o.max_pool_size.unwrap_or(100) as usize,
            min_pool_size: o.min_pool_size.unwrap_or(0) as usize,
            // SDAM: single-threaded clients check every 60 s by default.
            heartbeat: Duration::from_millis(o.heartbeat_frequency_ms.unwrap_or(60_000)),
            monitor_pool: options.monitor_commands,
            log: log.clone(),
        };
        let defaults = LegacyTimeouts::default();
        let legacy = LegacyTimeouts {
            server_selection_ms: o
                .server_selection_timeout_ms
                .unwrap_or(defaults.server_selection_ms),
            connect_ms: o.connect_timeout_ms.unwrap_or(defaults.connect_ms),
            socket_ms: o.socket_timeout_ms.unwrap_or(defaults.socket_ms),
        };
        Ok(Client {
            inner: Rc::new(ClientInner {
                topology: RefCell::new(Topology::new(settings)),
                legacy,
                // The client's own level: its options over the URI's.
                timeout_ms: crate::csot::resolve_timeout_ms(
                    None,
                    None,
                    &[options.timeout_ms, o.timeout_ms],
                ),
                retry_reads: o.retry_reads.unwrap_or(true),
                read_concern: crate::concern::read_concern_from_uri(o),
                write_concern: crate::concern::write_concern_from_uri(o),
                read_preference: ReadPreference::from_uri(o),
                retry_writes: o.retry_writes.unwrap_or(true),
                max_adaptive_retries: o
                    .max_adaptive_retries
                    .unwrap_or(crate::backpressure::MAX_RETRIES),
                overload_retargeting: o.enable_overload_retargeting.unwrap_or(false),
                sessions: Rc::new(SessionPool::default()),
                cluster_time: RefCell::new(None),
                server_api: options.server_api,
                events: RefCell::new(options.monitor_commands.then(Vec::new)),
                log,
                closed: Cell::new(false),
                driver_infos: RefCell::new(Vec::new()),
                next_op_id: Cell::new(1),
            }),
        })
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.inner.timeout_ms
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
        let minutes = self.session_timeout();
        Session::explicit(
            self,
            &self.inner.sessions,
            minutes,
            default_timeout_ms,
            default_transaction,
        )
    }

    /// The explicit session, else a new implicit one (which a cursor keeps).
    pub(crate) fn session_for(&self, explicit: Option<&Session>) -> Session {
        explicit
            .cloned()
            .unwrap_or_else(|| self.inner.implicit_session())
    }

    fn session_timeout(&self) -> Option<i64> {
        self.inner
            .topology
            .borrow()
            .description
            .logical_session_timeout_minutes
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

    /// Runs the server checks a background monitor would have run by now
    /// (`Topology::check_due_servers`), within the client's timeoutMS, else
    /// serverSelectionTimeoutMS.
    pub fn check_servers(&self) -> Result<()> {
        self.inner.check_open()?;
        let timeout = self.start_timeout(self.inner.timeout_ms);
        let deadline = timeout.selection_deadline(crate::runtime::now());
        self.inner
            .topology
            .borrow_mut()
            .check_due_servers(&timeout, deadline)
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
    pub fn close(&self) {
        let timeout_ms = crate::csot::resolve_timeout_ms(None, None, &[self.inner.timeout_ms]);
        self.close_within(timeout_ms);
    }

    /// The bound on the endSessions a dropped client sends (`close_on_drop`).
    pub const DROP_END_SESSIONS_MS: u64 = 1000;

    /// `close` for a client dropped without it: endSessions bounded by
    /// `DROP_END_SESSIONS_MS`, or by the client's timeoutMS when smaller, so
    /// a forgotten close neither leaks server sessions nor blocks long.
    pub fn close_on_drop(&self) {
        let bound = match self.inner.timeout_ms {
            Some(ms) if ms > 0 => ms.min(Self::DROP_END_SESSIONS_MS),
            _ => Self::DROP_END_SESSIONS_MS,
        };
        self.close_within(Some(bound));
    }

    fn close_within(&self, timeout_ms: Option<u64>) {
        if self.inner.closed.get() {
            return;
        }
        let mut ids = self.inner.sessions.drain();
        // Best effort (Driver Sessions spec), so only to a server already known
        // to suit: closing never waits out server selection, which against a
        // server that never answered would cost the whole timeout again.
        let criteria = Criteria::read(ReadMode::PrimaryPreferred);
        if !self.inner.topology.borrow().knows_suitable(&criteria) {
            ids.clear();
        }
        // endSessions takes at most 10,000 ids per command (Driver Sessions spec).
        for chunk in ids.chunks(10_000) {
            let mut arr = bson::RawArrayBuf::new();
            for id in chunk {
                arr.push(id.clone());
            }
            let mut op = RunCommand::new("admin", rawdoc! { "endSessions": arr }, criteria.clone());
            let budget = self.start_timeout(timeout_ms);
            let ctx = Context {
                timeout: budget,
                session: None,
                pinned: None,
            };
            let _ = executor::execute_without_session(&self.inner, &mut op, &ctx);
        }
        self.inner.topology.borrow_mut().close();
        self.inner.closed.set(true);
    }

    /// Behind a load balancer: returns the connection pinned to cursor `id`, if any.
    pub(crate) fn release_cursor_connection(&self, id: i64) {
        self.inner
            .topology
            .borrow_mut()
            .release_cursor_connection(id);
    }

    /// Starts the operation's clock now and runs it.
    pub(crate) fn execute<O: Operation>(
        &self,
        op: &mut O,
        timeout_ms: Option<u64>,
        session: Option<&Session>,
    ) -> Result<O::Output> {
        let timeout = self.start_timeout(timeout_ms);
        self.execute_within(op, &timeout, session, None)
    }

    pub(crate) fn start_timeout(&self, timeout_ms: Option<u64>) -> OpTimeout {
        OpTimeout::start(crate::runtime::now(), timeout_ms, self.inner.legacy)
    }

    /// Runs `op` under an already-started budget (several commands of one
    /// operation, or a cursor's getMore), optionally pinned to a server.
    pub(crate) fn execute_within<O: Operation>(
        &self,
        op: &mut O,
        timeout: &OpTimeout,
        session: Option<&Session>,
        pinned: Option<&str>,
    ) -> Result<O::Output> {
        let ctx = Context {
            timeout: *timeout,
            session,
            pinned,
        };
        executor::execute(&self.inner, op, &ctx)
    }

    /// A change stream on the whole deployment (`allChangesForCluster` on admin).
    pub fn watch(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &crate::OpOptions,
    ) -> Result<crate::Cursor> {
        let options = &options.flattened()?;
        let mut extra = rawdoc! { "allChangesForCluster": true };
        crate::operation::merge_extra(&mut extra, options.extra.as_deref())?;
        let options = crate::OpOptions {
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
    }

    /// `listDatabases` (a retryable read): one document per database.
    pub fn list_databases(
        &self,
        filter: RawDocumentBuf,
        name_only: bool,
        options: &crate::OpOptions,
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
        let reply = self.execute(&mut op, timeout_ms, options.session)?;
        let list = reply
            .get_array("databases")
            .map_err(|_| Error::protocol("listDatabases reply has no databases array"))?;
        crate::operation::documents_of(list)
    }

    pub fn list_database_names(
        &self,
        filter: RawDocumentBuf,
        options: &crate::OpOptions,
    ) -> Result<Vec<String>> {
        let dbs = self.list_databases(filter, true, options)?;
        Ok(dbs
            .iter()
            .filter_map(|d| d.get_str("name").ok().map(str::to_string))
            .collect())
    }
}

/// What this driver refuses in a (resolved) connection string. A `mongodb+srv`
/// URI is checked as given and again once its TXT record was applied.
pub(crate) fn check_supported(cs: &uri::ConnectionString) -> Result<()> {
    if let Some(first) = cs.invalid_values.first() {
        return Err(Error::invalid_argument(format!(
            "invalid connection string: {first}"
        )));
    }
    if let Some(given) = proxy_options(&cs.options) {
        return Err(Error::not_implemented(&format!("a SOCKS5 proxy ({given})")));
    }
    Ok(())
}

/// The seed addresses, deduplicated.
pub(crate) fn seeds(cs: &uri::ConnectionString) -> Result<Vec<String>> {
    let mut seeds = Vec::new();
    for host in &cs.hosts {
        if let HostAddress::Unix { path } = host {
            return Err(Error::invalid_argument(format!(
                "unix domain socket {path}: WASI 0.2 sockets offer TCP only"
            )));
        }
        let address = address_of(host);
        if !seeds.contains(&address) {
            seeds.push(address);
        }
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn refusal(uri: &str) -> Error {
        match Client::connect(uri) {
            Ok(_) => panic!("{uri} was accepted"),
            Err(e) => e,
        }
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
            ..ServerApi::new(crate::ServerApiVersion::V1)
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

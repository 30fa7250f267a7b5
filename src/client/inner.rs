//! The client's engine: its options resolved from the URI and code, the
//! topology and pools, the session pool, monitoring, and the one entry to
//! the executor. The API face (`Client`, in mod.rs) and the API objects
//! run every operation through here; nothing here knows them.

use crate::csot::{LegacyTimeouts, OpTimeout};
use crate::error::{Error, Result};
use crate::executor::{self, Context};
use crate::logging::{Component, Level, Logger};
use crate::monitoring::CommandEvent;
use crate::operation::{Operation, RunCommand};
use crate::sdam::selection::{Criteria, ReadMode, ReadPreference};
use crate::session::{Session, SessionPool};
use crate::topology::{check_supported, seeds, Shared, Topology, TopologySettings};
use crate::uri;
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
    pub(crate) topology: Shared,
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
    pub(crate) events: RefCell<Option<Vec<CommandEvent>>>,
    /// The client's log, shared with its topology (one queue, in order).
    pub(crate) log: Logger,
    next_op_id: Cell<i64>,
    /// Set by `close`: every later operation fails with `Closed`.
    closed: Cell<bool>,
    /// The libraries `append_metadata` named, each once.
    pub(crate) driver_infos: RefCell<Vec<crate::handshake::DriverInfo>>,
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

    /// Parses and validates the URI and builds the client's state; no I/O.
    pub(crate) fn new(uri: &str, options: ClientOptions) -> Result<ClientInner> {
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
        let pool_options = pool_options(o);
        let log = Logger::new(&options.log, pool_options.clone());
        let platform = crate::runtime::env_var("MONGO_WASI_PLATFORM");
        let settings = TopologySettings {
            seeds,
            direct: o.direct_connection,
            replica_set: o.replica_set.clone(),
            srv: cs.srv.then(|| cs.clone()),
            local_threshold: Duration::from_millis(o.local_threshold_ms.unwrap_or(15)),
            connect: Rc::new(crate::conn::ConnectSettings {
                metadata: crate::handshake::client_metadata(app_name, platform.as_deref()),
                server_api: options.server_api.clone(),
                name_servers: Vec::new(),
                auth,
                server_verified: tls.is_some()
                    && crate::tls::verification(o) == crate::tls::Verification::Full,
                tls,
                load_balanced: o.load_balanced == Some(true),
                compression: crate::wire::Compression {
                    compressors: o.compressors.clone().unwrap_or_default(),
                    zlib_level: o.zlib_compression_level,
                },
            }),
            max_pool_size: o.max_pool_size.unwrap_or(100) as usize,
            max_connecting: o.max_connecting.unwrap_or(2) as usize,
            wait_queue_timeout: o.wait_queue_timeout_ms.map(Duration::from_millis),
            min_pool_size: o.min_pool_size.unwrap_or(0) as usize,
            max_idle_time: o
                .max_idle_time_ms
                .filter(|&ms| ms > 0)
                .map(Duration::from_millis),
            // connectTimeoutMS bounds a background establishment (CSOT spec);
            // 0 ("none") keeps the default there, so a fill task always ends.
            background_connect_ms: o
                .connect_timeout_ms
                .filter(|&ms| ms > 0)
                .unwrap_or(LegacyTimeouts::default().connect_ms),
            // SDAM: single-threaded clients check every 60 s by default,
            // WASI 0.3's monitor tasks every 10 s.
            heartbeat: Duration::from_millis(o.heartbeat_frequency_ms.unwrap_or(
                match crate::runtime::CONCURRENT {
                    true => 10_000,
                    false => 60_000,
                },
            )),
            streaming: match o.server_monitoring_mode {
                Some(crate::uri::ServerMonitoringMode::Poll) => false,
                Some(crate::uri::ServerMonitoringMode::Stream) => true,
                Some(crate::uri::ServerMonitoringMode::Auto) | None => {
                    !crate::handshake::is_faas(crate::runtime::env_var)
                }
            },
            monitor_pool: options.monitor_commands,
            log: log.clone(),
            pool_options,
        };
        let defaults = LegacyTimeouts::default();
        let legacy = LegacyTimeouts {
            server_selection_ms: o
                .server_selection_timeout_ms
                .unwrap_or(defaults.server_selection_ms),
            connect_ms: o.connect_timeout_ms.unwrap_or(defaults.connect_ms),
            socket_ms: o.socket_timeout_ms.unwrap_or(defaults.socket_ms),
        };
        Ok(ClientInner {
            topology: Shared::new(Topology::new(settings)),
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
        })
    }

    /// The explicit session, else a new implicit one (which a cursor keeps).
    pub(crate) fn session_for(&self, explicit: Option<&Session>) -> Session {
        explicit.cloned().unwrap_or_else(|| self.implicit_session())
    }

    pub(crate) fn session_timeout(&self) -> Option<i64> {
        self.topology
            .borrow()
            .description
            .logical_session_timeout_minutes
    }

    pub(crate) async fn close_within(&self, timeout_ms: Option<u64>) {
        if self.closed.get() {
            return;
        }
        let mut ids = self.sessions.drain();
        // Best effort (Driver Sessions spec), so only to a server already known
        // to suit: closing never waits out server selection, which against a
        // server that never answered would cost the whole timeout again.
        let criteria = Criteria::read(ReadMode::PrimaryPreferred);
        if !self.topology.borrow().knows_suitable(&criteria) {
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
            let _ = executor::execute_without_session(self, &mut op, &ctx).await;
        }
        self.topology.borrow_mut().close();
        self.closed.set(true);
    }

    /// Behind a load balancer: returns the connection pinned to cursor `id`, if any.
    pub(crate) fn release_cursor_connection(&self, id: i64) {
        self.topology.borrow_mut().release_cursor_connection(id);
    }

    /// Starts the operation's clock now and runs it.
    pub(crate) async fn execute<O: Operation>(
        &self,
        op: &mut O,
        timeout_ms: Option<u64>,
        session: Option<&Session>,
    ) -> Result<O::Output> {
        let timeout = self.start_timeout(timeout_ms);
        self.execute_within(op, &timeout, session, None).await
    }

    pub(crate) fn start_timeout(&self, timeout_ms: Option<u64>) -> OpTimeout {
        OpTimeout::start(crate::runtime::now(), timeout_ms, self.legacy)
    }

    /// Runs `op` under an already-started budget (several commands of one
    /// operation, or a cursor's getMore), optionally pinned to a server.
    pub(crate) async fn execute_within<O: Operation>(
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
        executor::execute(self, op, &ctx).await
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

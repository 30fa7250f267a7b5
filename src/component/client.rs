use super::face::client::{
    self as wit_client, ClientBulkWriteOptions, ClientOptions, ClientWriteModel, DriverInfo,
    GuestClient, Session, SessionOptions,
};
use super::face::collection::{AggregateOptions, OpOptions};
use super::face::cursor::Cursor as WitCursor;
use super::face::database::{CollectionOptions, Database};
use super::face::types::{
    ClientBulkWriteError, ClientBulkWriteResult, CommandEvent, CommandEventKind, LogComponent,
    LogLevel, LogMessage, LogOptions, PoolEvent, PoolEventKind, SdamEvent, SdamEventKind,
    ServerDescription, ServerType, TopologyDescription, TopologyType,
};
use super::session::SessionRes;
use super::{doc, to_wit, wrap, Component, WitResult};
use crate::monitoring::EventKind;
use crate::Client;

pub struct ClientRes(pub Client);

/// A client resource dropped without `close` still ends its server
/// sessions (bounded by `Client::DROP_END_SESSIONS_MS`); after `close`
/// this does nothing.
impl Drop for ClientRes {
    fn drop(&mut self) {
        // Drop cannot await: detached, on a clone of the client (0.2 blocks
        // here; 0.3 detaches it from the next async export's task).
        let client = self.0.clone();
        super::deferred::defer(move || {
            crate::runtime::detach(async move { client.close_on_drop().await })
        });
    }
}

impl wit_client::Guest for Component {
    type Client = ClientRes;
}

impl GuestClient for ClientRes {
    fn connect(uri: String, options: ClientOptions) -> WitResult<wit_client::Client> {
        let server_api = match options.server_api {
            Some(api) => Some(crate::ServerApi {
                version: wrap(crate::ServerApiVersion::parse(&api.version))?,
                strict: api.strict,
                deprecation_errors: api.deprecation_errors,
            }),
            None => None,
        };
        let opts = crate::ClientOptions {
            timeout_ms: options.timeout_ms,
            monitor_commands: options.monitor_commands,
            server_api,
            tls_ca_pem: options.tls_ca_pem,
            tls_certificate_key_pem: options.tls_certificate_key_pem,
            log: options.logging.map(log_options).unwrap_or_default(),
        };
        let client = wrap(Client::with_options(&uri, opts))?;
        Ok(wit_client::Client::new(ClientRes(client)))
    }

    io! {
        fn bulk_write(
            &self,
            models: Vec<ClientWriteModel>,
            options: ClientBulkWriteOptions<'_>,
        ) -> Result<ClientBulkWriteResult, ClientBulkWriteError> {
            let models = models
                .into_iter()
                .map(|m| {
                    Ok(crate::ClientWriteModel {
                        namespace: m.namespace,
                        model: super::collection::write_model(m.model)?,
                        sort: super::opt_doc(m.sort)?,
                    })
                })
                .collect::<WitResult<Vec<_>>>()?;
            let opts = crate::ClientBulkWriteOptions {
                timeout_ms: options.timeout_ms,
                session: options.session.as_ref().map(|s| &s.get::<SessionRes>().0),
                ordered: options.ordered,
                bypass_document_validation: options.bypass_document_validation,
                comment: super::collection::opt_value(options.comment)?,
                let_vars: super::opt_doc(options.let_)?,
                write_concern: options.write_concern.map(super::write_concern),
                verbose_results: options.verbose_results,
                extra: super::opt_doc(options.extra)?,
            };
            let r = self.0.bulk_write(&models, &opts).await;
            Ok(super::client_bulk_write_result(
                r.map_err(super::to_wit_client_bulk)?,
            ))
        }
    }

    fn warm_state(&self) -> Vec<u8> {
        self.0.warm_state()
    }

    fn adopt_warm_state(&self, blob: Vec<u8>) -> WitResult<u32> {
        wrap(self.0.adopt_warm_state(&blob))
    }

    fn scram_derivations(&self) -> u64 {
        self.0.scram_derivations()
    }

    fn database(&self, name: String, options: CollectionOptions) -> Database {
        let (rc, bad_rc) = super::option_doc(options.read_concern);
        let (wc, bad_wc) = super::option_doc(options.write_concern);
        let (rp, bad_rp) = super::option_read_preference(options.read_preference);
        let db = self
            .0
            .database(&name, options.timeout_ms)
            .with_concerns(rc, wc)
            .with_read_preference(rp);
        let bad = bad_rc.or(bad_wc).or(bad_rp);
        Database::new(super::database::DatabaseRes(db.poisoned(bad)))
    }

    fn start_session(&self, options: SessionOptions) -> WitResult<Session> {
        let snapshot = options.snapshot == Some(true);
        if snapshot && options.causal_consistency == Some(true) {
            return Err(to_wit(crate::Error::invalid_argument(
                "a session cannot be both causally consistent and a snapshot session",
            )));
        }
        let defaults = match options.default_transaction_options {
            Some(o) => super::session::transaction_options(o)?,
            None => crate::TransactionOptions::default(),
        };
        let session = self
            .0
            .start_session_with(options.default_timeout_ms, defaults);
        if let Some(on) = options.causal_consistency {
            session.set_causal_consistency(on);
        }
        if snapshot {
            session.set_snapshot();
        }
        if let Some(t) = options.snapshot_time {
            let t = doc(t)?.get_timestamp("t").ok().filter(|_| snapshot);
            let t = t.ok_or_else(|| {
                to_wit(crate::Error::invalid_argument(
                    "snapshot-time needs snapshot: true and {t: <timestamp>}",
                ))
            })?;
            session.set_snapshot_time(t);
        }
        Ok(Session::new(SessionRes(session)))
    }

    io! {
        fn list_databases(
            &self,
            filter: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<Vec<u8>>> {
            let opts = super::collection::op_options(&options)?;
            let dbs = wrap(self.0.list_databases(doc(filter)?, false, &opts).await)?;
            Ok(dbs.into_iter().map(|d| d.into_bytes()).collect())
        }
    }

    io! {
        fn list_database_names(
            &self,
            filter: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<String>> {
            let opts = super::collection::op_options(&options)?;
            wrap(self.0.list_database_names(doc(filter)?, &opts).await)
        }
    }

    io! {
        fn watch(
            &self,
            pipeline: Vec<Vec<u8>>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = super::collection::aggregate_parts(&options)?;
            wrap(crate::change_stream::refuse_timeout_mode(mode))?;
            Ok(super::collection::CursorRes::wit(wrap(
                self.0
                    .watch(&super::docs(pipeline)?, batch_size, &opts)
                    .await,
            )?))
        }
    }

    fn take_command_events(&self) -> Vec<CommandEvent> {
        self.0
            .take_command_events()
            .into_iter()
            .map(|e| CommandEvent {
                kind: match e.kind {
                    EventKind::Started => CommandEventKind::Started,
                    EventKind::Succeeded => CommandEventKind::Succeeded,
                    EventKind::Failed => CommandEventKind::Failed,
                },
                command_name: e.command_name,
                database_name: e.database_name,
                request_id: e.request_id,
                operation_id: e.operation_id,
                connection_id: e.connection_id,
                server_connection_id: e.server_connection_id,
                server_address: e.server_address,
                duration_micros: e.duration.map(|d| d.as_micros() as u64),
                command: e.command.map(|d| d.into_bytes()),
                reply: e.reply.map(|d| d.into_bytes()),
                failure: e.failure.map(to_wit),
                service_id: e.service_id.map(|id| id.to_hex()),
            })
            .collect()
    }

    fn take_log_messages(&self) -> Vec<LogMessage> {
        use crate::logging::Component as C;
        self.0
            .take_log_messages()
            .into_iter()
            .map(|m| LogMessage {
                component: match m.component {
                    C::Command => LogComponent::Command,
                    C::Topology => LogComponent::Topology,
                    C::ServerSelection => LogComponent::ServerSelection,
                    C::Connection => LogComponent::Connection,
                },
                level: to_wit_level(m.level),
                message: m.message,
                data: m.data.into_bytes(),
            })
            .collect()
    }

    fn take_pool_events(&self) -> Vec<PoolEvent> {
        use crate::cmap::PoolEventKind as K;
        self.0
            .take_pool_events()
            .into_iter()
            .map(|e| PoolEvent {
                kind: match e.kind {
                    K::PendingResponseStarted => PoolEventKind::PendingResponseStarted,
                    K::PendingResponseSucceeded => PoolEventKind::PendingResponseSucceeded,
                    K::PendingResponseFailed => PoolEventKind::PendingResponseFailed,
                    K::PoolCreated => PoolEventKind::PoolCreated,
                    K::PoolReady => PoolEventKind::PoolReady,
                    K::PoolCleared => PoolEventKind::PoolCleared,
                    K::PoolClosed => PoolEventKind::PoolClosed,
                    K::ConnectionCreated => PoolEventKind::ConnectionCreated,
                    K::ConnectionReady => PoolEventKind::ConnectionReady,
                    K::ConnectionClosed => PoolEventKind::ConnectionClosed,
                    K::ConnectionCheckOutStarted => PoolEventKind::ConnectionCheckOutStarted,
                    K::ConnectionCheckOutFailed => PoolEventKind::ConnectionCheckOutFailed,
                    K::ConnectionCheckedOut => PoolEventKind::ConnectionCheckedOut,
                    K::ConnectionCheckedIn => PoolEventKind::ConnectionCheckedIn,
                },
                connection_id: e.connection_id,
                server_address: e.server_address,
                request_id: e.request_id,
                duration_micros: e.duration.map(|d| d.as_micros() as u64),
                reason: e.reason,
                closed: e.closed,
                service_id: e.service_id.map(|id| id.to_hex()),
                interrupt_in_use_connections: e.interrupt_in_use_connections,
            })
            .collect()
    }

    io! {
        fn check_servers(&self) -> WitResult<()> {
            wrap(self.0.check_servers().await)
        }
    }

    fn take_sdam_events(&self) -> Vec<SdamEvent> {
        self.0
            .take_sdam_events()
            .into_iter()
            .map(sdam_event)
            .collect()
    }

    fn append_metadata(&self, info: DriverInfo) -> WitResult<()> {
        wrap(self.0.append_metadata(crate::handshake::DriverInfo {
            name: info.name,
            version: info.version,
            platform: info.platform,
        }))
    }

    io! {
        fn close(&self) {
            self.0.close().await
        }
    }
}

fn server_description(s: &crate::sdam::ServerDescription) -> ServerDescription {
    use crate::sdam::ServerType as T;
    let hello = s.hello.as_ref();
    let list = |f: fn(&crate::handshake::HelloReply) -> &Vec<String>| {
        hello.map(f).cloned().unwrap_or_default()
    };
    ServerDescription {
        address: s.address.clone(),
        server_type: match s.kind {
            T::Unknown => ServerType::Unknown,
            T::Standalone => ServerType::Standalone,
            T::Mongos => ServerType::Mongos,
            T::PossiblePrimary => ServerType::PossiblePrimary,
            T::RsPrimary => ServerType::RsPrimary,
            T::RsSecondary => ServerType::RsSecondary,
            T::RsArbiter => ServerType::RsArbiter,
            T::RsOther => ServerType::RsOther,
            T::RsGhost => ServerType::RsGhost,
            T::LoadBalancer => ServerType::LoadBalancer,
        },
        error: s.error.clone(),
        average_rtt_micros: s.average_rtt.map(|d| d.as_micros() as u64),
        set_name: s.set_name().map(str::to_string),
        primary: hello.and_then(|h| h.primary.clone()),
        hosts: list(|h| &h.hosts),
        passives: list(|h| &h.passives),
        arbiters: list(|h| &h.arbiters),
        min_wire_version: hello.map_or(0, |h| h.min_wire_version),
        max_wire_version: hello.map_or(0, |h| h.max_wire_version),
    }
}

fn topology_description(t: &crate::sdam::TopologyDescription) -> TopologyDescription {
    use crate::sdam::TopologyType as T;
    TopologyDescription {
        topology_type: match t.kind {
            T::Single => TopologyType::Single,
            T::Unknown => TopologyType::Unknown,
            T::Sharded => TopologyType::Sharded,
            T::ReplicaSetNoPrimary => TopologyType::ReplicaSetNoPrimary,
            T::ReplicaSetWithPrimary => TopologyType::ReplicaSetWithPrimary,
            T::LoadBalanced => TopologyType::LoadBalanced,
        },
        set_name: t.set_name.clone(),
        servers: t.servers.iter().map(server_description).collect(),
    }
}

fn log_options(o: LogOptions) -> crate::logging::LogOptions {
    let level = |l: Option<LogLevel>| l.map(from_wit_level).unwrap_or_default();
    crate::logging::LogOptions {
        command: level(o.command),
        topology: level(o.topology),
        server_selection: level(o.server_selection),
        connection: level(o.connection),
        max_document_length: o.max_document_length.map(|n| n as usize),
    }
}

fn from_wit_level(l: LogLevel) -> crate::logging::Level {
    use crate::logging::Level as L;
    match l {
        LogLevel::Off => L::Off,
        LogLevel::Emergency => L::Emergency,
        LogLevel::Alert => L::Alert,
        LogLevel::Critical => L::Critical,
        LogLevel::Error => L::Error,
        LogLevel::Warning => L::Warning,
        LogLevel::Notice => L::Notice,
        LogLevel::Informational => L::Informational,
        LogLevel::Debug => L::Debug,
        LogLevel::Trace => L::Trace,
    }
}

fn to_wit_level(l: crate::logging::Level) -> LogLevel {
    use crate::logging::Level as L;
    match l {
        L::Off => LogLevel::Off,
        L::Emergency => LogLevel::Emergency,
        L::Alert => LogLevel::Alert,
        L::Critical => LogLevel::Critical,
        L::Error => LogLevel::Error,
        L::Warning => LogLevel::Warning,
        L::Notice => LogLevel::Notice,
        L::Informational => LogLevel::Informational,
        L::Debug => LogLevel::Debug,
        L::Trace => LogLevel::Trace,
    }
}

fn sdam_event(e: crate::sdam::monitoring::SdamEvent) -> SdamEvent {
    use crate::sdam::monitoring::SdamEvent as E;
    let event = |kind, server_address: String| SdamEvent {
        kind,
        server_address,
        previous_server: None,
        new_server: None,
        previous_topology: None,
        new_topology: None,
        connection_id: 0,
        awaited: false,
        duration_micros: None,
        failure: None,
    };
    let heartbeat = |kind, h: crate::sdam::monitoring::Heartbeat| SdamEvent {
        connection_id: h.connection_id,
        awaited: h.awaited,
        duration_micros: h.duration.map(|d| d.as_micros() as u64),
        failure: h.failure,
        ..event(kind, h.address)
    };
    match e {
        E::TopologyOpening => event(SdamEventKind::TopologyOpening, String::new()),
        E::TopologyClosed => event(SdamEventKind::TopologyClosed, String::new()),
        E::TopologyDescriptionChanged { previous, new } => SdamEvent {
            previous_topology: Some(topology_description(&previous)),
            new_topology: Some(topology_description(&new)),
            ..event(SdamEventKind::TopologyDescriptionChanged, String::new())
        },
        E::ServerOpening { address } => event(SdamEventKind::ServerOpening, address),
        E::ServerClosed { address } => event(SdamEventKind::ServerClosed, address),
        E::ServerDescriptionChanged {
            address,
            previous,
            new,
        } => SdamEvent {
            previous_server: Some(server_description(&previous)),
            new_server: Some(server_description(&new)),
            ..event(SdamEventKind::ServerDescriptionChanged, address)
        },
        E::ServerHeartbeatStarted(h) => heartbeat(SdamEventKind::ServerHeartbeatStarted, h),
        E::ServerHeartbeatSucceeded(h) => heartbeat(SdamEventKind::ServerHeartbeatSucceeded, h),
        E::ServerHeartbeatFailed(h) => heartbeat(SdamEventKind::ServerHeartbeatFailed, h),
    }
}

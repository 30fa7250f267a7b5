//! The live topology: SDAM descriptions, RTT per server and a connection
//! pool per server. Single-threaded (the SDAM spec's single-threaded mode):
//! servers are checked when selection finds nothing suitable (or a
//! heartbeat is due): on an idle pooled connection when there is one, else
//! on a new connection, which then goes straight into the pool.

use crate::cmap::{
    self, AfterDrain, CheckOutFailedReason, CloseReason, DrainStep, PoolEvent, PoolEventKind,
    PoolEvents,
};
use crate::conn::{AuthWhen, ConnectSettings, Connection, Established};
use crate::csot::OpTimeout;
use crate::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime;
use crate::sdam::monitoring::{Heartbeat, SdamEvent};
use crate::sdam::rtt::RttStats;
use crate::sdam::selection::{self, Criteria};
use crate::sdam::{
    address_of, AppError, CommandError, ServerDescription, ServerType, TopologyDescription,
};
use crate::uri::{self, HostAddress};
use bson::oid::ObjectId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

mod monitor;
mod prepare;

/// The SDAM spec's minHeartbeatFrequencyMS: the least time between checks of one server.
const MIN_HEARTBEAT: Duration = Duration::from_millis(500);

/// Where monitoring connections' ids start.
const MONITOR_IDS: u64 = 1 << 32;

/// The description a topology starts from: its seeds, or one load balancer.
fn describe(settings: &TopologySettings) -> TopologyDescription {
    match (settings.connect.load_balanced, settings.seeds.first()) {
        (true, Some(seed)) => TopologyDescription::load_balanced(seed),
        _ => TopologyDescription::new(
            &settings.seeds,
            settings.direct,
            settings.replica_set.clone(),
        ),
    }
}

pub struct TopologySettings {
    pub seeds: Vec<String>,
    /// The directConnection URI option, if given.
    pub direct: Option<bool>,
    pub replica_set: Option<String>,
    /// A `mongodb+srv` URI whose seeds are still to be discovered (at the
    /// first selection, under its deadline); `None` once they are.
    pub srv: Option<crate::uri::ConnectionString>,
    pub local_threshold: Duration,
    /// Shared with the establishments in flight (cloned per connect, not copied).
    pub connect: Rc<ConnectSettings>,
    pub max_pool_size: usize,
    /// CMAP maxConnecting: establishments in flight per pool (with concurrent callers).
    pub max_connecting: usize,
    /// waitQueueTimeoutMS: the longest a checkout waits for a connection,
    /// unless timeoutMS is set (CSOT replaces it).
    pub wait_queue_timeout: Option<Duration>,
    /// CMAP minPoolSize: filled by `check_due_servers` (the host's idle
    /// time) on both faces, and on WASI 0.3 by a background task per pool
    /// too (`Topology::fill_soon`).
    pub min_pool_size: usize,
    /// CMAP maxIdleTimeMS: an available connection idle this long is closed
    /// (reason `idle`) instead of checked out.
    pub max_idle_time: Option<Duration>,
    /// connectTimeoutMS, which bounds each background establishment (CSOT
    /// "Background Connection Pooling"; never 0 here).
    pub background_connect_ms: u64,
    /// How often a known server is checked again (heartbeatFrequencyMS; 60 s
    /// by default single-threaded, 10 s with WASI 0.3's monitors), which
    /// also keeps RTT samples fresh for CSOT; a streaming monitor's
    /// maxAwaitTimeMS.
    pub heartbeat: Duration,
    /// serverMonitoringMode resolved: whether WASI 0.3's monitors stream
    /// from a server that can (stream, or auto outside FaaS platforms).
    pub streaming: bool,
    /// Record pool events (CMAP and pending-response drains) for
    /// `take_pool_events`, and SDAM events for `take_sdam_events`.
    pub monitor_pool: bool,
    /// The client's log (connection and topology messages).
    pub log: crate::logging::Logger,
    /// The pool options the URI gave (CMAP ConnectionPoolCreatedEvent.options).
    pub pool_options: bson::RawDocumentBuf,
}

#[derive(Default)]
struct ServerState {
    rtt: RttStats,
    idle: Vec<Connection>,
    generation: u64,
    last_check: Option<crate::deadline::Instant>,
    /// The last check's failure when retrying cannot mend it
    /// (`Error::is_permanent`: the host's refusal, a bad address, a peer
    /// that is not TLS).
    permanent: Option<Error>,
    /// CMAP: the pool is ready after a successful check, paused by a clear.
    ready: bool,
    /// Idle connections a server check opened that no checkout has taken
    /// yet: CMAP events announce them (created, ready) at their first checkout.
    unannounced: Vec<u64>,
    /// Behind a load balancer: the clears of each service (`serviceId`),
    /// added to `generation` for its connections.
    service_clears: Vec<(ObjectId, u64)>,
    /// Its connections checked out (maxPoolSize counts them).
    in_use: Rc<cmap::InUse>,
    /// Its connections being established (maxConnecting counts them).
    connecting: usize,
    /// WASI 0.3: a background task is filling it to minPoolSize.
    filling: bool,
}

pub struct Topology {
    settings: TopologySettings,
    pub description: TopologyDescription,
    servers: HashMap<String, ServerState>,
    next_conn_id: u64,
    rng: u64,
    events: PoolEvents,
    /// Behind a load balancer: connections pinned to open cursors, by cursor id
    /// (Load Balancer spec), checked out until the cursor is done.
    cursor_connections: Vec<(i64, Connection)>,
    /// Whether a plain URI's DNS servers were read (`configure_name_servers`).
    dns_configured: bool,
    /// Checks that ended: selections waiting for the topology to change watch them.
    checks: Rc<cmap::Changes>,
    /// The client was closed: checkouts fail, check-ins close, background tasks end.
    closed: bool,
    /// Itself, for the background tasks of WASI 0.3 (a drain, a pool's
    /// fill), which end when the client is gone.
    me: std::rc::Weak<RefCell<Topology>>,
    /// `mongodb+srv`: the SRV and TXT answers for a warm state, adopted
    /// before discovery (used if fresh) or the ones discovery used.
    srv_answers: Option<crate::warm::SrvAnswers>,
    /// WASI 0.3: each server's monitor task (`monitor.rs`), by address.
    monitors: HashMap<String, Rc<monitor::Signals>>,
    /// Ids of monitoring connections, apart from the pools' (whose ids
    /// the CMAP events number from 1).
    next_monitor_id: u64,
    /// WASI 0.3, a cold client: each seed's prepared transport (`prepare.rs`).
    prepared: HashMap<String, prepare::Prepared>,
    prepared_tokens: u64,
}

impl Topology {
    /// New connections' handshakes name `info` too (`Client::append_metadata`).
    pub fn append_driver_info(&mut self, info: &crate::handshake::DriverInfo) -> Result<()> {
        let metadata = &mut Rc::make_mut(&mut self.settings.connect).metadata;
        *metadata = crate::handshake::with_driver_info(metadata, info)?;
        Ok(())
    }

    pub fn new(settings: TopologySettings) -> Topology {
        let mut description = describe(&settings);
        if runtime::CONCURRENT {
            description.multi_threaded();
        }
        description.observe(settings.monitor_pool, &settings.log);
        let rng = runtime::now().0 | 1;
        Topology {
            events: PoolEvents::new(settings.monitor_pool).logging(settings.log.clone()),
            cursor_connections: Vec::new(),
            settings,
            description,
            servers: HashMap::new(),
            next_conn_id: 1,
            rng,
            dns_configured: false,
            checks: Rc::default(),
            closed: false,
            me: std::rc::Weak::new(),
            srv_answers: None,
            monitors: HashMap::new(),
            next_monitor_id: MONITOR_IDS,
            prepared: HashMap::new(),
            prepared_tokens: 0,
        }
    }

    /// Whether servers are checked by monitor tasks (WASI 0.3; never behind
    /// a load balancer) rather than inside operations.
    fn monitored(&self) -> bool {
        runtime::CONCURRENT && !self.settings.connect.load_balanced
    }

    /// Starts a monitor for each server of the description that has none,
    /// and stops those of servers no longer in it (server-monitoring spec).
    fn sync_monitors(&mut self) {
        if !self.monitored() || self.closed || self.settings.srv.is_some() {
            return;
        }
        // Every selection calls this: in step (the usual case), it costs
        // one lookup per server and allocates nothing.
        let servers = &self.description.servers;
        if servers.len() == self.monitors.len()
            && servers
                .iter()
                .all(|s| self.monitors.contains_key(&s.address))
        {
            return;
        }
        let servers: Vec<String> = self
            .description
            .servers
            .iter()
            .map(|s| s.address.clone())
            .collect();
        self.monitors.retain(|address, signals| {
            let keep = servers.contains(address);
            if !keep {
                signals.stop();
            }
            keep
        });
        for address in servers {
            if !self.monitors.contains_key(&address) {
                let signals = Rc::new(monitor::Signals::default());
                self.monitors.insert(address.clone(), signals.clone());
                if self.prepares(&address) {
                    self.start_preparing(&address, &signals);
                }
                runtime::detach(monitor::run(self.me.clone(), address, signals));
            }
        }
    }

    /// Stops every monitor at whatever await it stands (close, drop).
    fn stop_monitors(&mut self) {
        for (_, signals) in self.monitors.drain() {
            signals.stop();
        }
        self.drop_prepared();
    }

    /// Asks every monitor for a check now (selection found nothing suitable).
    fn request_checks(&self) {
        for signals in self.monitors.values() {
            signals.wake.notify();
        }
    }

    fn next_monitor_id(&mut self) -> u64 {
        self.next_monitor_id += 1;
        self.next_monitor_id
    }

    /// A monitor's check succeeded: the server's new description, then its
    /// pool ready (server-monitoring spec, with the description's update).
    /// `rtt`: a sample (a polling hello, a handshake), not a streamed reply.
    fn monitor_checked(
        &mut self,
        address: &str,
        hello: crate::handshake::HelloReply,
        rtt: Option<Duration>,
    ) {
        let state = self.state(address);
        state.permanent = None;
        if let Some(rtt) = rtt {
            state.rtt.add(rtt);
        }
        let average = state.rtt.average();
        self.checked(address, hello, average);
        self.ready(address);
        self.sync_monitors();
    }

    /// A monitor's check failed: SDAM "network or command error during
    /// server check" (Unknown, pool cleared; interrupted after a timeout).
    fn monitor_failed(&mut self, address: &str, e: &Error) {
        self.state(address).permanent = e.is_permanent().then(|| e.clone());
        self.check_failed_and_clear(address, e);
    }

    pub fn connect_settings(&self) -> &ConnectSettings {
        &self.settings.connect
    }

    /// The SRV and TXT answers this client's discovery used, for a warm
    /// state (`None` before discovery and for a plain URI).
    pub fn srv_answers(&self) -> Option<&crate::warm::SrvAnswers> {
        self.srv_answers
            .as_ref()
            .filter(|_| self.settings.srv.is_none())
    }

    /// A warm state's SRV answers, for a discovery still to come; whether
    /// they were taken (not after discovery, nor for a plain URI). Used
    /// only if fresh and for this URI's SRV name (`discovery::discover`).
    pub fn adopt_srv_answers(&mut self, answers: crate::warm::SrvAnswers) -> bool {
        if self.settings.srv.is_none() {
            return false;
        }
        self.srv_answers = Some(answers);
        true
    }

    /// A plain URI's DNS servers: those the host configured (the
    /// `MONGO_WASI_DNS_SERVER` environment variable, else a preopened
    /// resolv.conf's nameservers), asked for every host name before
    /// ip-name-lookup (runtime::dns). Read once, at the first selection;
    /// none configured leaves ip-name-lookup alone.
    fn configure_name_servers(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.dns_configured, true) {
            return Ok(());
        }
        let (env, file) = runtime::dns_config();
        match crate::dns::config::name_servers(env.as_deref(), file.as_deref()) {
            Ok(servers) => Rc::make_mut(&mut self.settings.connect).name_servers = servers,
            // The variable is set but wrong: say so rather than ignore it.
            Err(e) if env.is_some() => return Err(Error::invalid_argument(e)),
            Err(_) => {} // no resolv.conf, or no nameserver line in it
        }
        Ok(())
    }

    /// Selection's window for `criteria` (avoiding `avoid` where it can) and
    /// its pick: the addresses that suit, and the one chosen.
    fn pick(
        &mut self,
        criteria: &Criteria,
        avoid: &[&str],
    ) -> Result<(Vec<String>, Option<String>)> {
        let window = selection::suitable(
            &self.description,
            criteria,
            self.settings.local_threshold,
            self.settings.heartbeat,
            avoid,
        )
        .map_err(|e| selection_error(e, criteria))?;
        let found: Vec<String> = window.iter().map(|s| s.address.clone()).collect();
        let mut rng = self.rng;
        // Of two random suitable servers, the one with fewer operations in progress.
        let servers = &self.servers;
        let in_progress = |a: &str| servers.get(a).map_or(0, |s| s.in_use.total() as u64);
        let choice = selection::choose(&window, in_progress, |_| next_random(&mut rng) as usize)
            .map(|s| s.address.clone());
        self.rng = rng;
        Ok((found, choice))
    }

    /// The servers a scan checks: each not checked within
    /// minHeartbeatFrequencyMS, Unknown ones first.
    fn due_for_scan(&self, now: crate::deadline::Instant) -> Vec<String> {
        let mut due: Vec<(u8, String)> = self
            .description
            .servers
            .iter()
            .filter(|s| {
                let last = self.servers.get(&s.address).and_then(|st| st.last_check);
                last.is_none_or(|t| now.since(t) >= MIN_HEARTBEAT)
            })
            .map(|s| (scan_order(s.kind), s.address.clone()))
            .collect();
        due.sort_by_key(|(order, _)| *order);
        due.into_iter().map(|(_, a)| a).collect()
    }

    /// The servers a background monitor would have checked by now.
    fn due_for_heartbeat(&self, now: crate::deadline::Instant) -> Vec<String> {
        let heartbeat = self.settings.heartbeat;
        self.description
            .servers
            .iter()
            .filter(|s| s.kind != ServerType::LoadBalancer)
            .filter(|s| {
                let last = self.servers.get(&s.address).and_then(|st| st.last_check);
                let every = match s.kind.is_known() {
                    true => heartbeat,
                    false => MIN_HEARTBEAT.min(heartbeat),
                };
                last.is_none_or(|t| now.since(t) >= every)
            })
            .map(|s| s.address.clone())
            .collect()
    }

    /// The pools minPoolSize applies to now (known servers; never behind a load balancer).
    fn to_fill(&self) -> Vec<String> {
        if self.settings.min_pool_size == 0 || self.settings.connect.load_balanced {
            return Vec::new();
        }
        self.description
            .servers
            .iter()
            .filter(|s| s.kind.is_known())
            .map(|s| s.address.clone())
            .collect()
    }

    /// Whether the ready pool of `address` is short of minPoolSize. A
    /// check's connection no checkout took yet is the monitor's in CMAP
    /// terms, not yet the pool's: it does not count.
    fn short_of_min(&mut self, address: &str) -> bool {
        let min = self
            .settings
            .min_pool_size
            .min(self.settings.max_pool_size.max(1));
        let state = self.state(address);
        let pooled = state.idle.len() - state.unannounced.len().min(state.idle.len());
        state.ready && pooled < min
    }

    /// A new connection's id, announced as created (CMAP).
    fn created(&mut self, address: &str) -> u64 {
        let id = self.next_id();
        self.events
            .emit(|| PoolEvent::new(PoolEventKind::ConnectionCreated, address, id));
        id
    }

    /// An idle connection a heartbeat may use, taken out with its place
    /// (not a check's connection still to authenticate: its conversation is open).
    fn take_for_heartbeat(&mut self, address: &str) -> Option<(usize, Connection)> {
        let state = self.state(address);
        let generation = state.generation;
        let usable = |c: &Connection| {
            c.generation == generation
                && !c.is_broken()
                && c.pending().is_none()
                && !state.unannounced.contains(&c.id)
        };
        let at = state.idle.iter().rposition(usable)?;
        Some((at, state.idle.remove(at)))
    }

    /// The most recent idle connection still current; stale and broken ones
    /// met on the way are closed, and with maxIdleTimeMS every one idle
    /// that long (CMAP: perished).
    fn take_idle(&mut self, address: &str) -> Option<Connection> {
        if let Some(max_idle) = self.settings.max_idle_time {
            self.close_idle_past(address, max_idle);
        }
        while let Some(conn) = self.state(address).idle.pop() {
            let generation = self.generation_of(address, conn.hello.service_id);
            if conn.generation == generation && !conn.is_broken() {
                return Some(conn);
            }
            let reason = match conn.is_broken() {
                true => CloseReason::Error,
                false => CloseReason::Stale,
            };
            self.closed(&conn, reason);
        }
        None
    }

    /// Closes the available connections of `address` idle for `max_idle` or longer.
    fn close_idle_past(&mut self, address: &str, max_idle: Duration) {
        let now = runtime::now();
        let state = self.state(address);
        let perished = |c: &Connection| cmap::idle_too_long(c.available_since, now, Some(max_idle));
        if !state.idle.iter().any(perished) {
            return;
        }
        let (gone, kept): (Vec<Connection>, Vec<Connection>) = std::mem::take(&mut state.idle)
            .into_iter()
            .partition(perished);
        state.idle = kept;
        for conn in &gone {
            self.closed(conn, CloseReason::Idle);
        }
    }

    /// Whether a checkout must wait before opening a connection: maxPoolSize
    /// connections are checked out, or (with concurrent callers)
    /// maxConnecting are being established.
    fn pool_full(&mut self, address: &str) -> Option<Full> {
        let (max, max_connecting) = (self.settings.max_pool_size, self.settings.max_connecting);
        let state = self.state(address);
        if max != 0 && state.in_use.total() + state.connecting >= max {
            return Some(Full::InUse);
        }
        if runtime::CONCURRENT && state.connecting >= max_connecting.max(1) {
            return Some(Full::Connecting);
        }
        None
    }

    /// Whether `address` was last checked a heartbeat ago or more.
    fn check_due(&mut self, address: &str) -> bool {
        let heartbeat = self.settings.heartbeat;
        let now = runtime::now();
        self.state(address)
            .last_check
            .is_some_and(|t| now.since(t) >= heartbeat)
    }

    /// Whether `conn` is a server check's connection no checkout took yet
    /// (it is then no longer counted as such).
    fn unannounced(&mut self, conn: &Connection) -> bool {
        let state = self.state(&conn.address);
        let Some(at) = state.unannounced.iter().position(|&id| id == conn.id) else {
            return false;
        };
        state.unannounced.swap_remove(at);
        true
    }

    /// The end of a checkout's handshake: the connection is ready, or it is
    /// closed (after the pool is cleared, unless it timed out).
    fn handshake_done(
        &mut self,
        address: &str,
        id: u64,
        created: crate::deadline::Instant,
        result: Result<Connection>,
        timeout: &OpTimeout,
    ) -> Result<Connection> {
        match result {
            Ok(conn) => {
                let took = runtime::now().since(created);
                self.events.emit(|| {
                    PoolEvent::new(PoolEventKind::ConnectionReady, address, id).took(took)
                });
                Ok(conn)
            }
            Err(e) => Err(self.handshake_failed(address, id, e, timeout)),
        }
    }

    /// A checkout's new connection: `handshake_done`, unless it waits to
    /// authenticate with the read it was opened for: its checkout then
    /// stays open (`Shared::end_deferred_checkout`).
    fn established(
        &mut self,
        address: &str,
        id: u64,
        created: crate::deadline::Instant,
        result: Result<Connection>,
        (timeout, selection): (&OpTimeout, Deadline),
    ) -> Result<Connection> {
        match result {
            Ok(mut conn) if conn.awaits_authentication() => {
                conn.deferred = Some(crate::conn::DeferredCheckout {
                    checkout_started: created,
                    created,
                    selection,
                });
                Ok(conn)
            }
            other => self.handshake_done(address, id, created, other, timeout),
        }
    }

    /// A clear with interruptInUseConnections ended a checkout's handshake:
    /// the clear already did SDAM's part, the connection is only closed.
    fn interrupted_establishment(&mut self, address: &str, id: u64) -> Error {
        self.events.emit(|| {
            PoolEvent::new(PoolEventKind::ConnectionClosed, address, id)
                .because(CloseReason::Stale.as_str())
        });
        cmap::pool_cleared(address, true)
    }

    /// A checkout's handshake failed: SDAM's part, and its connection closed.
    fn handshake_failed(&mut self, address: &str, id: u64, e: Error, timeout: &OpTimeout) -> Error {
        let expired = timeout.deadline().is_expired(runtime::now());
        if crate::sdam::establishment_marks_unknown(&e, expired) {
            self.mark_unknown(address, &e);
        }
        self.events.emit(|| {
            PoolEvent::new(PoolEventKind::ConnectionClosed, address, id)
                .because(CloseReason::Error.as_str())
                .error(&e)
        });
        e
    }

    /// A pooled connection is dropped: announced ones get their closed event.
    fn closed(&mut self, conn: &Connection, reason: CloseReason) {
        let state = self.state(&conn.address);
        if let Some(at) = state.unannounced.iter().position(|&id| id == conn.id) {
            state.unannounced.swap_remove(at);
            return;
        }
        self.events.emit(|| {
            PoolEvent::new(PoolEventKind::ConnectionClosed, &conn.address, conn.id)
                .because(reason.as_str())
        });
    }

    /// Drains the recorded pool events.
    pub fn take_pool_events(&mut self) -> Vec<PoolEvent> {
        self.events.take()
    }

    /// Drains the recorded SDAM events.
    pub fn take_sdam_events(&mut self) -> Vec<SdamEvent> {
        self.description.take_events()
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_conn_id;
        self.next_conn_id += 1;
        id
    }

    /// A checked-out connection comes back: it stays idle, or is closed
    /// (broken, stale, or the pool is full or closed). A pending one (its
    /// operation timed out with the reply still due) is kept too: on WASI
    /// 0.2 its reply is drained at the next checkout; on 0.3 a background
    /// task drains it now and then makes it available, so no operation
    /// waits for it (it still counts as in use meanwhile: maxPoolSize).
    pub fn checkin(&mut self, mut conn: Connection) {
        self.events
            .emit(|| PoolEvent::new(PoolEventKind::ConnectionCheckedIn, &conn.address, conn.id));
        if runtime::CONCURRENT && conn.pending().is_some() && !conn.is_broken() && !self.closed {
            let current = self.generation_of(&conn.address, conn.hello.service_id);
            if conn.generation == current {
                runtime::detach(drain_in_background(self.me.clone(), conn));
                return;
            }
        }
        conn.lease = None;
        self.keep_or_close(conn);
    }

    /// A checked-out connection whose operation was dropped mid-request or
    /// mid-reply (a cancelled caller): the server may still answer on it, so
    /// it is closed, never pooled (its socket closes as it drops). CMAP hears
    /// it come back and close.
    pub fn abandoned(&mut self, address: &str, id: u64) {
        self.events
            .emit(|| PoolEvent::new(PoolEventKind::ConnectionCheckedIn, address, id));
        self.events.emit(|| {
            PoolEvent::new(PoolEventKind::ConnectionClosed, address, id)
                .because(CloseReason::Error.as_str())
        });
    }

    /// Per server: connections checked out and idle (idle ones still owed a
    /// reply counted apart), for a host watching what an instance holds.
    pub fn pool_status(&self) -> Vec<cmap::PoolStatus> {
        let mut out: Vec<cmap::PoolStatus> = self
            .servers
            .iter()
            .map(|(address, s)| cmap::PoolStatus {
                address: address.clone(),
                in_use: s.in_use.total(),
                idle: s.idle.len(),
                pending: s.idle.iter().filter(|c| c.pending().is_some()).count(),
            })
            .collect();
        out.sort_by(|a, b| a.address.cmp(&b.address));
        out
    }

    fn keep_or_close(&mut self, mut conn: Connection) {
        if self.closed {
            return self.closed(&conn, CloseReason::PoolClosed);
        }
        let max = self.settings.max_pool_size;
        let current = conn.generation == self.generation_of(&conn.address, conn.hello.service_id);
        if self.settings.max_idle_time.is_some() {
            conn.available_since = runtime::now();
        }
        let state = self.state(&conn.address);
        match cmap::checkin_outcome(conn.is_broken(), current, state.idle.len(), max) {
            None => {
                state.idle.push(conn);
                if runtime::CONCURRENT {
                    // A check's or a fill's connection: the first in line takes it.
                    state.in_use.notify();
                }
            }
            Some(reason) => self.closed(&conn, reason),
        }
    }

    /// WASI 0.3: starts a background task filling the pool of `address` to
    /// minPoolSize, unless one runs or it needs none (CMAP "Background
    /// Thread"; never on 0.2, whose `check_due_servers` fills pools inline).
    fn fill_soon(&mut self, address: &str) {
        if !runtime::CONCURRENT || self.settings.min_pool_size == 0 {
            return;
        }
        if self.needs_filling(address) && !std::mem::replace(&mut self.state(address).filling, true)
        {
            runtime::detach(fill_in_background(self.me.clone(), address.to_string()));
        }
    }

    /// Whether a background fill may open another connection to `address`
    /// now: the pool is ready, below minPoolSize in total (available, in
    /// use and being established) and below maxConnecting establishments.
    fn needs_filling(&mut self, address: &str) -> bool {
        let (min, max) = (self.settings.min_pool_size, self.settings.max_pool_size);
        let max_connecting = self.settings.max_connecting.max(1);
        let lb = self.settings.connect.load_balanced;
        let closed = self.closed;
        let state = self.state(address);
        let total = state.idle.len() + state.in_use.total() + state.connecting;
        !closed
            && !lb
            && state.ready
            && total < min
            && (max == 0 || total < max)
            && state.connecting < max_connecting
    }

    /// A network error (not a timeout) marks the server unknown and clears its pool.
    pub fn mark_unknown(&mut self, address: &str, err: &Error) {
        self.clear(address, None);
        self.check_failed(address, err);
    }

    /// A server check failed: the server is Unknown and its pool cleared;
    /// after a network timeout with interruptInUseConnections (SDAM
    /// "Network or command error during server check"), so operations
    /// still waiting on that server's connections fail at once.
    fn check_failed_and_clear(&mut self, address: &str, err: &Error) {
        self.clear_with(address, None, err.is_timeout());
        self.check_failed(address, err);
    }

    /// Clears the pool of `address` (the CMAP spec tests' `clear`):
    /// `interrupt` (interruptInUseConnections) also interrupts its
    /// connections in use.
    pub fn clear_pool(&mut self, address: &str, interrupt: bool) {
        self.clear_with(address, None, interrupt);
    }

    /// Creates the pool of `address` (paused), unless it exists: the CMAP
    /// spec tests' first step, which announces ConnectionPoolCreated.
    pub fn pool_create(&mut self, address: &str) {
        self.state(address);
    }

    /// Marks the pool of `address` ready, as a successful check does (the
    /// CMAP spec tests' `ready`); on WASI 0.3 its minPoolSize fill starts.
    pub fn pool_ready(&mut self, address: &str) {
        self.ready(address);
    }

    fn ready(&mut self, address: &str) {
        if !std::mem::replace(&mut self.state(address).ready, true) {
            self.events
                .emit(|| PoolEvent::new(PoolEventKind::PoolReady, address, 0));
            // After the ready event (CMAP): the background fill may start.
            self.fill_soon(address);
        }
    }

    /// A server error on a connection of pool `generation` to a server of
    /// `max_wire_version` (behind a load balancer, to `service`): SDAM error
    /// handling (`sdam::TopologyDescription::handle_application_error`)
    /// decides whether it marks the server Unknown and clears its pool.
    pub fn handle_server_error(
        &mut self,
        address: &str,
        (generation, service): (u64, Option<ObjectId>),
        max_wire_version: i32,
        err: &Error,
    ) {
        let pool_generation = self.generation_of(address, service);
        let error = AppError::Command(CommandError::from_error(err));
        let outcome = self.description.handle_application_error(
            address,
            generation,
            pool_generation,
            max_wire_version,
            &error,
        );
        if outcome.marked_unknown {
            self.state(address).rtt.forget_average();
            // A state change error: the monitor checks at once (SDAM).
            if let Some(signals) = self.monitors.get(address) {
                signals.wake.notify();
            }
        }
        if outcome.clear_pool {
            self.clear(address, service);
        }
    }

    /// A network error (not a timeout) or a garbled reply on a connection of
    /// pool `generation` (behind a load balancer, to `service`): the server
    /// is Unknown and its pool cleared, unless the pool was cleared since (a
    /// stale error, SDAM error handling).
    pub fn handle_network_error(
        &mut self,
        address: &str,
        (generation, service): (u64, Option<ObjectId>),
        err: &Error,
    ) {
        let pool_generation = self.generation_of(address, service);
        let error = AppError::Network(err.to_string());
        let outcome = self.description.handle_application_error(
            address,
            generation,
            pool_generation,
            0,
            &error,
        );
        if outcome.marked_unknown {
            self.state(address).rtt.forget_average();
            // The monitor's check in progress is cancelled with its
            // connection (server-monitoring spec, "hello Cancellation").
            if let Some(signals) = self.monitors.get(address) {
                signals.cancel.notify();
            }
        }
        if outcome.clear_pool {
            self.clear(address, service);
        }
    }

    /// A successful check's description, stamped with the time (max staleness).
    fn checked(
        &mut self,
        address: &str,
        hello: crate::handshake::HelloReply,
        rtt: Option<Duration>,
    ) {
        let at = i64::try_from(runtime::now().0 / 1_000_000).ok();
        let sd = ServerDescription::checked(address.to_string(), hello, rtt, at);
        self.description.apply(sd);
    }

    /// A failed check: the server is Unknown, and its average RTT starts over.
    fn check_failed(&mut self, address: &str, err: &Error) {
        self.state(address).rtt.forget_average();
        self.description.update(address, Err(err.to_string()));
    }

    /// The generation a connection of `address` to `service` must have to
    /// be current: the pool's, plus (behind a load balancer) its service's
    /// clears. Both only grow, so a sum unchanged means neither changed.
    fn generation_of(&mut self, address: &str, service: Option<ObjectId>) -> u64 {
        let state = self.state(address);
        let clears = service
            .and_then(|id| state.service_clears.iter().find(|(s, _)| *s == id))
            .map_or(0, |(_, n)| *n);
        state.generation + clears
    }

    /// Clears the pool of `address`: a new generation, the pool paused until
    /// a check succeeds, its idle connections closed as stale. A load-balanced
    /// pool is never paused and announces every clear (CMAP, "Clearing a load
    /// balanced pool"); there only the connections to the failed one's
    /// `service` go (Load Balancer spec), or all without one.
    fn clear(&mut self, address: &str, service: Option<ObjectId>) {
        self.clear_with(address, service, false)
    }

    /// `clear`, and with `interrupt` (interruptInUseConnections; never
    /// behind a load balancer) the connections in use of the generation
    /// cleared are interrupted. Outside a load balancer every checkout
    /// waiting in the pool's queue fails with PoolClearedError.
    fn clear_with(&mut self, address: &str, service: Option<ObjectId>, interrupt: bool) {
        let load_balanced = self.settings.connect.load_balanced;
        let interrupt = interrupt && !load_balanced;
        let state = self.state(address);
        if !load_balanced {
            state.in_use.cleared(state.generation, interrupt);
        }
        let service = service.filter(|_| load_balanced);
        match service {
            Some(id) => match state.service_clears.iter_mut().find(|(s, _)| *s == id) {
                Some((_, n)) => *n += 1,
                None => state.service_clears.push((id, 1)),
            },
            None => state.generation += 1,
        }
        let was_ready = load_balanced || std::mem::replace(&mut state.ready, false);
        let (idle, kept) = std::mem::take(&mut state.idle)
            .into_iter()
            .partition(|c| service.is_none() || c.hello.service_id == service);
        state.idle = kept;
        let idle: Vec<Connection> = idle;
        if was_ready {
            self.events.emit(|| PoolEvent {
                service_id: service,
                interrupt_in_use_connections: interrupt,
                ..PoolEvent::new(PoolEventKind::PoolCleared, address, 0)
            });
        }
        for conn in &idle {
            self.closed(conn, CloseReason::Stale);
        }
    }

    /// The connection pinned to cursor `id`, taken for its next command.
    pub fn take_cursor_connection(&mut self, id: i64) -> Option<Connection> {
        let at = self.cursor_connections.iter().position(|(c, _)| *c == id)?;
        Some(self.cursor_connections.swap_remove(at).1)
    }

    /// Keeps `conn` checked out, pinned to cursor `id`.
    pub fn hold_cursor_connection(&mut self, id: i64, conn: Connection) {
        if let Some(lease) = &conn.lease {
            lease.set_purpose(cmap::Purpose::Cursor);
        }
        self.cursor_connections.push((id, conn));
    }

    /// Cursor `id` is done: its pinned connection (if any) goes back to the pool.
    pub fn release_cursor_connection(&mut self, id: i64) {
        if let Some(conn) = self.take_cursor_connection(id) {
            self.checkin(conn);
        }
    }

    /// Whether a server known now suits `criteria`: no check, no waiting.
    pub fn knows_suitable(&self, criteria: &Criteria) -> bool {
        selection::suitable(
            &self.description,
            criteria,
            self.settings.local_threshold,
            self.settings.heartbeat,
            &[],
        )
        .is_ok_and(|s| !s.is_empty())
    }

    pub fn min_rtt(&mut self, address: &str) -> Duration {
        self.state(address).rtt.min()
    }

    pub fn close(&mut self) {
        self.closed = true;
        self.stop_monitors();
        let addresses: Vec<String> = self.servers.keys().cloned().collect();
        for address in addresses {
            let state = self.state(&address);
            state.generation += 1;
            state.ready = false;
            // Checkouts waiting look again, and fail: the pool is closed.
            state.in_use.notify();
            let idle = std::mem::take(&mut state.idle);
            for conn in &idle {
                self.closed(conn, CloseReason::PoolClosed);
            }
            self.events
                .emit(|| PoolEvent::new(PoolEventKind::PoolClosed, &address, 0));
        }
        self.description.close();
    }

    /// The pool of `address`, created (and announced) at its first use.
    fn state(&mut self, address: &str) -> &mut ServerState {
        let (events, options) = (&mut self.events, &self.settings.pool_options);
        self.servers.entry(address.to_string()).or_insert_with(|| {
            events.emit(|| PoolEvent {
                options: Some(options.clone()),
                ..PoolEvent::new(PoolEventKind::PoolCreated, address, 0)
            });
            ServerState::default()
        })
    }

    /// The failure when the last check of every server failed for good
    /// (`Error::is_permanent`; of each in turn: one seed denied does not
    /// fail a topology).
    fn failed_for_good_everywhere(&self) -> Option<Error> {
        let mut denied = self.description.servers.iter().map(|s| {
            self.servers
                .get(&s.address)
                .and_then(|state| state.permanent.as_ref())
        });
        let first = denied.next()??.clone();
        let mut rest = Vec::new();
        for e in denied {
            rest.push(e?.message.clone());
        }
        Some(match rest.is_empty() {
            true => first,
            false => {
                let message = format!("{}; {}", first.message, rest.join("; "));
                Error { message, ..first }
            }
        })
    }

    /// What selection saw: each server (the first few of a long list), or
    /// why the topology is empty.
    fn selection_failure(&self, criteria: &Criteria) -> String {
        const SHOWN: usize = 10;
        let all = &self.description.servers;
        let mut servers: Vec<String> = all
            .iter()
            .take(SHOWN)
            .map(|s| match &s.error {
                Some(e) => format!("{} ({}: {e})", s.address, s.kind.as_str()),
                None => format!("{} ({})", s.address, s.kind.as_str()),
            })
            .collect();
        if all.len() > SHOWN {
            servers.push(format!("and {} more", all.len() - SHOWN));
        }
        let mut message = format!(
            "no server suitable for {criteria} in {} topology [{}]",
            self.description.kind.as_str(),
            servers.join(", ")
        );
        if all.is_empty() && !self.description.removed.is_empty() {
            message.push_str(&format!(
                ": the topology is empty; {}",
                self.description.removed.join("; ")
            ));
        }
        message
    }
}

/// A topology dropped without `close` (its client dropped) still stops its
/// monitors now, rather than at their next step: one may be waiting on an
/// awaited hello for heartbeatFrequencyMS.
impl Drop for Topology {
    fn drop(&mut self) {
        self.stop_monitors();
    }
}

/// The topology as concurrent operations share it (one per client). Its
/// state is borrowed only between awaits: a borrow held across one panics
/// when another operation runs meanwhile, and a panic ends every request of
/// the instance. What needs I/O (selection's checks, checkout's connects and
/// drains, seedlist discovery) is here; what only changes state is on
/// `Topology`, reached through `Deref` for a statement at a time.
/// On WASI 0.3 its background tasks (a pending reply's drain, a pool's
/// minPoolSize fill) hold it weakly, and end once the client is gone.
pub struct Shared(Rc<RefCell<Topology>>);

impl std::ops::Deref for Shared {
    type Target = RefCell<Topology>;
    fn deref(&self) -> &RefCell<Topology> {
        &self.0
    }
}

impl Shared {
    pub fn new(mut topology: Topology) -> Shared {
        Shared(Rc::new_cyclic(|me| {
            topology.me = me.clone();
            RefCell::new(topology)
        }))
    }

    /// Selects a server for `criteria`, checking servers as needed, within
    /// the operation's selection deadline (`OpTimeout::selection_deadline`).
    /// `deprioritized`: servers a retried operation's earlier attempts failed
    /// on, avoided where another server is suitable (the executor decides
    /// which, by `retryable::deprioritizes`).
    /// `log`: the selection's log messages (started, waiting, succeeded or failed).
    pub async fn select(
        &self,
        criteria: &Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
        deprioritized: &[String],
        log: &selection::SelectionLog<'_>,
    ) -> Result<String> {
        log.started(&self.borrow().description);
        let result = self
            .select_server(criteria, timeout, deadline, deprioritized, log)
            .await;
        let t = self.borrow();
        match &result {
            Ok(address) => log.succeeded(&t.description, address),
            Err(e) => log.failed(&t.description, e),
        }
        drop(t);
        result
    }

    async fn select_server(
        &self,
        criteria: &Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
        deprioritized: &[String],
        log: &selection::SelectionLog<'_>,
    ) -> Result<String> {
        let mut waiting = false;
        self.discover_seeds(timeout, deadline).await?;
        // Whether unknown servers were checked because only deprioritized ones suited.
        let mut looked_further = false;
        loop {
            // Monitor tasks (WASI 0.3) check servers; selection waits for them.
            let monitored = {
                let mut t = self.borrow_mut();
                t.sync_monitors();
                t.monitored()
            };
            // Another operation's check (or a monitor's) may end while this
            // one waits: it wakes it.
            let checked_elsewhere = cmap::Changes::next(&self.borrow().checks);
            let avoid: Vec<&str> = deprioritized.iter().map(String::as_str).collect();
            let (found, choice) = self.borrow_mut().pick(criteria, &avoid)?;
            if let Some(pick) = choice {
                // Only deprioritized servers suit: a member this client has not
                // checked yet may suit too (SDAM here learns of members lazily),
                // so check those once before going back.
                let only_avoided = found.iter().all(|a| avoid.contains(&a.as_str()));
                if only_avoided && !avoid.is_empty() && !looked_further && !monitored {
                    looked_further = true;
                    if self.scan(criteria, timeout, deadline).await? {
                        continue;
                    }
                }
                let due = !monitored && self.borrow_mut().check_due(&pick);
                if !due {
                    return Ok(pick);
                }
                // Due for its heartbeat: check it, then select again on what it said.
                self.check(&pick, criteria, timeout, deadline).await?;
                continue;
            }
            let now = runtime::now();
            if !std::mem::replace(&mut waiting, true) {
                log.waiting(&self.borrow().description, deadline.remaining(now));
            }
            if deadline.is_expired(now) {
                let failure = self.borrow().selection_failure(criteria);
                return Err(timeout.selection_error(now, failure));
            }
            let checked = match monitored {
                // Server Selection, multi-threaded: request immediate checks, then wait.
                true => {
                    self.borrow().request_checks();
                    false
                }
                false => self.scan(criteria, timeout, deadline).await?,
            };
            let failed = self.borrow().failed_for_good_everywhere();
            if let Some(failed) = failed {
                // The host's policy, an address or a peer will not change
                // while selection waits.
                return Err(failed);
            }
            if !checked {
                // Nothing new to learn yet: wait out minHeartbeatFrequencyMS
                // (bounded), or less if a check another operation runs ends.
                let wait = Deadline::after(now, MIN_HEARTBEAT).min(deadline);
                first(runtime::sleep_until(wait), checked_elsewhere).await;
            }
        }
    }

    /// Seedlist discovery: the SRV/TXT lookups, then the topology starts over
    /// from the hosts found. A failure leaves it pending for the next operation.
    /// A plain URI's seeds are known: only its DNS servers are read (once).
    async fn discover_seeds(&self, timeout: &OpTimeout, deadline: Deadline) -> Result<()> {
        let srv = self.borrow().settings.srv.clone();
        let Some(cs) = srv else {
            return self.borrow_mut().configure_name_servers();
        };
        let warm = self.borrow().srv_answers.clone();
        let found = crate::discovery::discover(&cs, warm.as_ref(), deadline)
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    let cause = e
                        .cause
                        .as_ref()
                        .map_or(e.message.clone(), |c| c.to_string());
                    timeout.selection_error(runtime::now(), format!("mongodb+srv: {cause}"))
                } else {
                    e
                }
            })?;
        check_supported(&found.cs)?;
        let seeds = seeds(&found.cs)?;
        let auth = match found.cs.credential.clone() {
            // A TXT record's authSource says where the user is defined.
            Some(credential) => Some(Rc::new(crate::auth::Authenticator::new(credential)?)),
            None => None,
        };
        let mut t = self.borrow_mut();
        if t.settings.srv.is_none() {
            // Another operation's discovery finished first.
            return Ok(());
        }
        let set_name = found.cs.options.replica_set.clone();
        // SRV seeds are never a direct connection, even when there is one.
        t.settings.direct = Some(false);
        t.settings.seeds = seeds;
        t.settings.replica_set = set_name;
        let connect = Rc::make_mut(&mut t.settings.connect);
        // A TXT record may say loadBalanced=true.
        connect.load_balanced = found.cs.options.load_balanced == Some(true);
        connect.name_servers = found.name_servers;
        if auth.is_some() {
            connect.auth = auth;
        }
        let described = describe(&t.settings);
        t.description.restart(described);
        t.settings.srv = None;
        t.srv_answers = Some(found.answers);
        Ok(())
    }

    /// The scan when nothing suits (Server Selection: the topology is
    /// stale): checks every server not checked within
    /// minHeartbeatFrequencyMS, Unknown ones first. Known ones too: after a
    /// step-down the new primary is still described as the secondary it was,
    /// and only its own hello says otherwise. Returns whether it checked any.
    async fn scan(
        &self,
        criteria: &Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
    ) -> Result<bool> {
        let due = self.borrow().due_for_scan(runtime::now());
        for address in &due {
            self.check(address, criteria, timeout, deadline).await?;
        }
        Ok(!due.is_empty())
    }

    /// The checks a background monitor would have run by now (this client
    /// has none): each server never checked, due for its heartbeat, or
    /// Unknown and not checked within minHeartbeatFrequencyMS, within
    /// `deadline`. For a host with idle time.
    pub async fn check_due_servers(&self, timeout: &OpTimeout, deadline: Deadline) -> Result<()> {
        self.discover_seeds(timeout, deadline).await?;
        if self.borrow().monitored() {
            // Monitor tasks check the servers (WASI 0.3).
            self.borrow_mut().sync_monitors();
            return Ok(());
        }
        let due = self.borrow().due_for_heartbeat(runtime::now());
        let criteria = Criteria::read(crate::sdam::selection::ReadMode::PrimaryPreferred);
        for address in &due {
            self.check(address, &criteria, timeout, deadline).await?;
        }
        self.fill_pools(timeout, deadline).await;
        Ok(())
    }

    /// CMAP minPoolSize: each ready pool short of it gets new connections,
    /// fully established (hello and authentication), one at a time within
    /// `deadline`. A failure ends that pool's filling; it is the pool's
    /// (events, SDAM error handling as for a checkout), not the caller's.
    async fn fill_pools(&self, timeout: &OpTimeout, deadline: Deadline) {
        let addresses = self.borrow().to_fill();
        for address in addresses {
            while self.borrow_mut().short_of_min(&address) {
                let now = runtime::now();
                if deadline.is_expired(now) {
                    return;
                }
                let (connect, handshake) = timeout.establish_deadlines(deadline, now);
                let id = self.borrow_mut().created(&address);
                let result = self
                    .establish(
                        &address,
                        id,
                        connect.min(deadline),
                        handshake.min(deadline),
                        (AuthWhen::Now, None),
                    )
                    .await;
                let mut t = self.borrow_mut();
                match t.handshake_done(&address, id, now, result, timeout) {
                    Ok(conn) => t.keep_or_close(conn),
                    Err(_) => break,
                }
            }
        }
    }

    /// One server check (an RTT sample, and the server's description): a
    /// hello on an idle pooled connection, else a new connection's handshake
    /// (the hello; authentication waits for its first checkout), which then
    /// joins the pool.
    async fn check(
        &self,
        address: &str,
        criteria: &Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
    ) -> Result<()> {
        self.borrow_mut().state(address).last_check = Some(runtime::now());
        // However it ends (a dropped future included), selections waiting on it look again.
        let _ended = CheckEnded(self);
        let (connect, handshake) = timeout.establish_deadlines(deadline, runtime::now());
        if self.heartbeat(address, handshake.min(deadline)).await {
            self.borrow_mut().state(address).permanent = None;
            return Ok(());
        }
        let id = self.borrow_mut().next_id();
        // The check's hello only: its connection authenticates at its first checkout.
        let (connect, handshake) = (connect.min(deadline), handshake.min(deadline));
        let result = self
            .establish(
                address,
                id,
                connect,
                handshake,
                (AuthWhen::AtCheckout, None),
            )
            .await;
        let mut t = self.borrow_mut();
        t.state(address).permanent = match &result {
            Err(e) if e.is_permanent() => Some(e.clone()),
            _ => None,
        };
        match result {
            // Scans repeat every minHeartbeatFrequencyMS while nothing is suitable
            // (no primary for a while): their connections must not pile up idle,
            // so one joins an empty pool only, unannounced (no checkout asked for
            // it yet); otherwise it is dropped, never having been announced.
            Ok(conn) if t.state(address).idle.is_empty() => {
                t.state(address).unannounced.push(conn.id);
                t.keep_or_close(conn);
            }
            Ok(_) => {}
            Err(e) if e.is_timeout() && deadline.is_expired(runtime::now()) => {
                let now = runtime::now();
                if timeout.csot.is_some_and(|op| op.is_expired(now)) {
                    // The caller's timeoutMS cut the check short: that says
                    // nothing of the server (CSOT), so its description stays
                    // and the check does not count, and the next operation
                    // checks it at once rather than after
                    // minHeartbeatFrequencyMS (docs/csot.md). The error names
                    // the section that was waiting (e.g. the handshake).
                    t.state(address).last_check = None;
                    return Err(e);
                }
                // The selection budget (serverSelectionTimeoutMS) ran out
                // mid-check: the server did not answer in that time.
                t.check_failed(address, &e);
                return Err(timeout.selection_error(now, t.selection_failure(criteria)));
            }
            // An incompatible server (its wire versions): `establish`
            // recorded its description, so selection now fails at once with
            // the SDAM spec's compatibility error instead of waiting.
            Err(e) if e.kind == ErrorKind::ServerSelection => {}
            Err(e) if e.kind == ErrorKind::Authentication => {
                // The auth spec: mark the server Unknown and clear its pool,
                // and fail with the auth error rather than wait out selection
                // (it would only repeat it, and then hide it).
                t.mark_unknown(address, &e);
                return Err(e);
            }
            // SDAM "network or command error during server check": the
            // server is Unknown and its pool cleared (after the retry on a
            // new connection, for a known server's pooled check); after a
            // timeout its connections in use are interrupted too.
            Err(e) => t.check_failed_and_clear(address, &e),
        }
        Ok(())
    }

    /// A check on an idle pooled connection, when there is one (no new
    /// connection per heartbeat). Returns whether it answered; a connection
    /// that failed is closed, and the caller checks on a new one (so a
    /// known server's failed check is retried once, as SDAM asks).
    async fn heartbeat(&self, address: &str, deadline: Deadline) -> bool {
        let Some((at, mut conn)) = self.borrow_mut().take_for_heartbeat(address) else {
            return false;
        };
        let (id, started) = (conn.id, runtime::now());
        self.borrow_mut()
            .description
            .emit(|| Heartbeat::started(address, id));
        let connect = self.borrow().settings.connect.clone();
        let result = conn.heartbeat(&connect, deadline).await;
        let mut t = self.borrow_mut();
        match result {
            Ok((rtt, reply)) => {
                let server_id = conn.hello.connection_id;
                t.description
                    .emit(|| Heartbeat::succeeded(address, id, rtt, server_id, reply));
                let hello = conn.hello.clone();
                let state = t.state(address);
                state.rtt.add(rtt);
                let average = state.rtt.average();
                let at = at.min(state.idle.len());
                state.idle.insert(at, conn);
                t.checked(address, hello, average);
                true
            }
            Err(e) => {
                let took = runtime::now().since(started);
                t.description
                    .emit(|| Heartbeat::failed(address, id, took, e.to_string()));
                conn.abandon_pending();
                t.closed(&conn, CloseReason::Error);
                false
            }
        }
    }

    /// A connection to `address`: an idle one, or a new one. An idle one
    /// still pending a reply is drained first (cmap.rs); one whose drain
    /// fails is closed and the next is tried, while one whose operation ran
    /// out of time inside the window stays pending in the pool.
    /// `selection` is the deadline selection ran under: under CSOT what is
    /// left of it bounds the checkout (CSOT spec, "Server Selection").
    ///
    /// `read_only`: the operation's command has no side effect. A server
    /// check's connection whose SCRAM proof that command may follow in one
    /// flight (`Connection::may_send_behind_proof`) comes back with its
    /// checkout still open: `end_deferred_checkout` ends it.
    pub async fn checkout(
        &self,
        address: &str,
        timeout: &OpTimeout,
        selection: Deadline,
        read_only: bool,
    ) -> Result<Connection> {
        let started = runtime::now();
        let event = |kind, id| PoolEvent::new(kind, address, id);
        self.borrow_mut()
            .events
            .emit(|| event(PoolEventKind::ConnectionCheckOutStarted, 0));
        let mut checking_out = CheckingOut {
            shared: self,
            address,
            started,
            ended: false,
        };
        let mut result = self.check_out(address, timeout, selection, read_only).await;
        checking_out.ended = true;
        let mut t = self.borrow_mut();
        if let Ok(conn) = &mut result {
            conn.lease = Some(cmap::InUse::lease(&t.state(address).in_use));
        }
        let took = runtime::now().since(started);
        match &mut result {
            Ok(Connection {
                deferred: Some(d), ..
            }) => d.checkout_started = started,
            Ok(conn) => t
                .events
                .emit(|| event(PoolEventKind::ConnectionCheckedOut, conn.id).took(took)),
            Err(e) => t.events.emit(|| {
                event(PoolEventKind::ConnectionCheckOutFailed, 0)
                    .took(took)
                    .because(CheckOutFailedReason::of(e).as_str())
                    .error(e)
            }),
        }
        // WASI 0.3: keep minPoolSize (a connection may have been closed).
        t.fill_soon(address);
        drop(t);
        result
    }

    /// The checkout itself. With concurrent callers (WASI 0.3) it waits in
    /// the pool's FIFO wait queue (CMAP WaitQueue): only the first in line
    /// takes an idle connection or starts establishing one, and it waits
    /// there while maxPoolSize connections are in use or maxConnecting are
    /// being established. Each waiter's wait is bounded by its own deadline
    /// (waitQueueTimeoutMS, or under CSOT what selection's deadline leaves),
    /// never by another's, and a waiter that leaves (a timeout, a dropped
    /// future) wakes the one behind it. A clear fails every waiter.
    async fn check_out(
        &self,
        address: &str,
        timeout: &OpTimeout,
        selection: Deadline,
        read_only: bool,
    ) -> Result<Connection> {
        let wait_queue = match (timeout.csot, self.borrow().settings.wait_queue_timeout) {
            (None, Some(limit)) if runtime::CONCURRENT => Deadline::after(runtime::now(), limit),
            _ => Deadline::Infinite,
        };
        let until = selection.min(wait_queue);
        // One caller at a time on WASI 0.2: no queue, nothing to wait for.
        let ticket = match runtime::CONCURRENT {
            true => Some(cmap::InUse::enter(&self.borrow_mut().state(address).in_use)),
            false => None,
        };
        loop {
            let changed = match &ticket {
                Some(ticket) => {
                    let changed = {
                        let mut t = self.borrow_mut();
                        if t.closed {
                            return Err(Error::closed("connection pool"));
                        }
                        let lb = t.settings.connect.load_balanced;
                        let state = t.state(address);
                        // A paused pool (cleared since its last good check)
                        // hands out nothing (CMAP); a load balancer's never pauses.
                        if ticket.cleared() || !(state.ready || lb) {
                            return Err(cmap::pool_cleared(address, false));
                        }
                        cmap::InUse::changed(&state.in_use)
                    };
                    if !ticket.is_first() {
                        self.wait_turn(address, until, changed).await?;
                        continue;
                    }
                    Some(changed)
                }
                None => None,
            };
            let idle = self.borrow_mut().take_idle(address);
            if let Some(mut conn) = idle {
                match self.drain(&mut conn, timeout).await {
                    Ok(true) if self.borrow_mut().unannounced(&conn) => {
                        let settings = Rc::clone(&self.borrow().settings.connect);
                        if conn.may_send_behind_proof(&settings, read_only) {
                            return Ok(self.defer_announce(conn, selection));
                        }
                        return self.announce(conn, timeout, selection).await;
                    }
                    Ok(true) => return Ok(conn),
                    Ok(false) => {
                        self.borrow_mut().closed(&conn, CloseReason::Error);
                        continue;
                    }
                    Err(e) => {
                        self.borrow_mut().state(address).idle.push(conn);
                        return Err(e);
                    }
                }
            }
            // maxPoolSize, and maxConnecting (CMAP): the first in line waits
            // for a connection to come back or an establishment to end.
            let full = self.borrow_mut().pool_full(address);
            match (full, changed) {
                (None, _) => break,
                (Some(_), Some(changed)) => self.wait_turn(address, until, changed).await?,
                (Some(_), None) => {
                    // One caller at a time: none can come back while this waits.
                    let mut t = self.borrow_mut();
                    let max = t.settings.max_pool_size;
                    return Err(t.state(address).in_use.wait_queue_timeout(max));
                }
            }
        }
        let (connect, handshake) = timeout.establish_deadlines(selection, runtime::now());
        let created = runtime::now();
        let (id, load_balanced, generation, pool) = {
            let mut t = self.borrow_mut();
            let state = t.state(address);
            state.connecting += 1;
            let (generation, pool) = (state.generation, Rc::clone(&state.in_use));
            (
                t.created(address),
                t.settings.connect.load_balanced,
                generation,
                pool,
            )
        };
        // Counted as connecting until the handshake ends, however it ends
        // (a dropped future included); out of the queue from here on.
        let mut connecting = Connecting::new(self, address, id);
        drop(ticket);
        if load_balanced {
            let result = self
                .establish_behind_load_balancer(address, id, created, (connect, handshake), timeout)
                .await;
            connecting.ended();
            return result;
        }
        // A read may follow the proof (auth::command_may_follow_proof).
        let auth_when = match read_only {
            true => AuthWhen::NowOrWithRead,
            false => AuthWhen::Now,
        };
        // A cold client's transport, opened beside the first check (prepare.rs).
        let prepared = match runtime::CONCURRENT {
            true => self.prepared(address, generation, connect).await,
            false => None,
        };
        let establish = self.establish(address, id, connect, handshake, (auth_when, prepared));
        // WASI 0.3: a clear with interruptInUseConnections interrupts an establishment too.
        let raced = unless_interrupted(Some(pool), generation, establish).await;
        connecting.ended();
        let mut t = self.borrow_mut();
        match raced {
            Ok(conn) => t.established(address, id, created, Ok(conn), (timeout, selection)),
            Err(Some(e)) => t.handshake_done(address, id, created, Err(e), timeout),
            Err(None) => Err(t.interrupted_establishment(address, id)),
        }
    }

    /// Waits for the pool's next change (`changed`), within `until`: its
    /// expiry is the checkout's WaitQueueTimeoutError (CMAP).
    async fn wait_turn(
        &self,
        address: &str,
        until: Deadline,
        changed: impl std::future::Future<Output = ()>,
    ) -> Result<()> {
        let waited = runtime::within(until, "connection pool wait queue", async {
            changed.await;
            Ok(())
        })
        .await;
        if waited.is_err() {
            let mut t = self.borrow_mut();
            let max = t.settings.max_pool_size;
            return Err(t.state(address).in_use.wait_queue_timeout(max));
        }
        Ok(())
    }

    /// Load Balancer spec, "Initial Handshake Errors": an error before the hello
    /// completes gets no SDAM error handling; one after it (authentication) clears
    /// the pool but never marks the load balancer Unknown.
    async fn establish_behind_load_balancer(
        &self,
        address: &str,
        id: u64,
        created: crate::deadline::Instant,
        (connect, handshake): (Deadline, Deadline),
        timeout: &OpTimeout,
    ) -> Result<Connection> {
        let failed = |t: &mut Topology, e: Error| {
            t.events.emit(|| {
                PoolEvent::new(PoolEventKind::ConnectionClosed, address, id)
                    .because(CloseReason::Error.as_str())
                    .error(&e)
            });
            Err(e)
        };
        let established = self.establish(
            address,
            id,
            connect,
            handshake,
            (AuthWhen::AtCheckout, None),
        );
        let mut conn = match established.await {
            Ok(conn) => conn,
            Err(e) => return failed(&mut self.borrow_mut(), e),
        };
        // Its generation is its service's, known from the hello (Load Balancer spec).
        let service = conn.hello.service_id;
        conn.generation = self.borrow_mut().generation_of(address, service);
        let settings = self.borrow().settings.connect.clone();
        let result = conn.finish_handshake(&settings, handshake).await;
        let mut t = self.borrow_mut();
        match result {
            Ok(()) => t.handshake_done(address, id, created, Ok(conn), timeout),
            // Load Balancer spec: an error after the hello goes through SDAM
            // error handling, clearing only its service's connections.
            Err(e) => {
                let expired = timeout.deadline().is_expired(runtime::now());
                if crate::sdam::establishment_marks_unknown(&e, expired) {
                    t.clear(address, service);
                }
                failed(&mut t, e)
            }
        }
    }

    /// `announce`, for a connection whose first command will follow its SCRAM
    /// proof: CMAP sees it created now, and `end_deferred_checkout` says
    /// whether it became ready.
    fn defer_announce(&self, mut conn: Connection, selection: Deadline) -> Connection {
        let now = runtime::now();
        self.borrow_mut()
            .events
            .emit(|| PoolEvent::new(PoolEventKind::ConnectionCreated, &conn.address, conn.id));
        conn.deferred = Some(crate::conn::DeferredCheckout {
            checkout_started: now,
            created: now,
            selection,
        });
        conn
    }

    /// Ends a checkout `checkout` left open: the connection authenticates,
    /// with `command` (request id, body, sequences) in the same write behind
    /// the proof, or alone without one (as `announce` does). Then it is
    /// ready and checked out, or closed and the checkout failed: the CMAP
    /// events and SDAM handling of any checkout's handshake. `Ok(true)`: the
    /// command was sent, and its reply is next. Nothing to do when nothing
    /// was left open.
    pub async fn end_deferred_checkout(
        &self,
        conn: &mut Connection,
        timeout: &OpTimeout,
        command: Option<crate::conn::Outgoing<'_>>,
    ) -> Result<bool> {
        let Some(left) = conn.deferred.take() else {
            return Ok(false);
        };
        let (address, id) = (conn.address.clone(), conn.id);
        let settings = Rc::clone(&self.borrow().settings.connect);
        // Bounded by selection, as when the check ran the whole handshake.
        let (_, handshake) = timeout.establish_deadlines(left.selection, left.created);
        let deadline = handshake.min(left.selection);
        // A dropped future: the connection closed, the checkout failed.
        let mut checking_out = CheckingOut {
            shared: self,
            address: &address,
            started: left.checkout_started,
            ended: false,
        };
        let mut announcing = Connecting {
            shared: self,
            address: &address,
            id: Some(id),
            counted: false,
        };
        // WASI 0.3: a clear with interruptInUseConnections interrupts it, as
        // it does an establishment.
        let (pool, generation) = (cmap::InUse::of(conn.lease.as_ref()), conn.generation);
        let exchange = async {
            match (command, settings.auth.as_deref()) {
                (Some(command), Some(auth)) => {
                    conn.send_behind_proof(auth, command, deadline).await
                }
                _ => conn
                    .finish_handshake(&settings, deadline)
                    .await
                    .map(|()| false),
            }
        };
        let result = unless_interrupted(pool, generation, exchange).await;
        announcing.ended();
        checking_out.ended = true;
        let mut t = self.borrow_mut();
        let now = runtime::now();
        let event = |kind| PoolEvent::new(kind, &address, id);
        let result = match result {
            Ok(sent) => Ok(sent),
            Err(Some(e)) => Err(t.handshake_failed(&address, id, e, timeout)),
            Err(None) => Err(t.interrupted_establishment(&address, id)),
        };
        match result {
            Ok(sent) => {
                let ready = now.since(left.created);
                t.events
                    .emit(|| event(PoolEventKind::ConnectionReady).took(ready));
                let took = now.since(left.checkout_started);
                t.events
                    .emit(|| event(PoolEventKind::ConnectionCheckedOut).took(took));
                Ok(sent)
            }
            Err(e) => {
                let took = now.since(left.checkout_started);
                t.events.emit(|| {
                    event(PoolEventKind::ConnectionCheckOutFailed)
                        .took(took)
                        .because(CheckOutFailedReason::of(&e).as_str())
                        .error(&e)
                });
                Err(checkout_handshake_error(
                    timeout,
                    left.selection,
                    &address,
                    e,
                ))
            }
        }
    }

    /// A check's connection at its first checkout: CMAP sees it created now,
    /// and it authenticates (the rest of its handshake) before it is ready,
    /// so a failure there is the checkout's, as the specs expect.
    async fn announce(
        &self,
        mut conn: Connection,
        timeout: &OpTimeout,
        selection: Deadline,
    ) -> Result<Connection> {
        let (address, id, created) = (conn.address.clone(), conn.id, runtime::now());
        let settings = {
            let mut t = self.borrow_mut();
            t.events
                .emit(|| PoolEvent::new(PoolEventKind::ConnectionCreated, &address, id));
            t.settings.connect.clone()
        };
        // Bounded by selection, as when the check ran the whole handshake.
        let (_, handshake) = timeout.establish_deadlines(selection, created);
        let mut announcing = Connecting {
            shared: self,
            address: &address,
            id: Some(id),
            counted: false,
        };
        let result = conn
            .finish_handshake(&settings, handshake.min(selection))
            .await
            .map(|()| conn);
        announcing.ended();
        let result = self
            .borrow_mut()
            .handshake_done(&address, id, created, result, timeout);
        result.map_err(|e| checkout_handshake_error(timeout, selection, &address, e))
    }

    /// The drain step of a checkout. `Ok(true)`: the connection is ready;
    /// `Ok(false)`: it was closed (dropped with `conn` by the caller);
    /// `Err`: the operation's deadline ran out, the connection stays pending.
    async fn drain(&self, conn: &mut Connection, timeout: &OpTimeout) -> Result<bool> {
        let Some(pending) = conn.pending() else {
            return Ok(true);
        };
        let started = runtime::now();
        let (connection_id, address) = (conn.id, conn.address.clone());
        let event = |kind, duration, reason, closed| PoolEvent {
            request_id: pending.request_id,
            duration,
            reason,
            closed,
            ..PoolEvent::new(kind, &address, connection_id)
        };
        self.borrow_mut()
            .events
            .emit(|| event(PoolEventKind::PendingResponseStarted, None, None, false));
        let deadline = match pending.step(started, timeout) {
            DrainStep::Drain(deadline) => Ok(deadline),
            DrainStep::AlivenessCheck => match conn.probe_pending().await {
                // Bytes came: the window restarted.
                Ok(true) => Ok(conn
                    .pending()
                    .unwrap_or(pending)
                    .drain_deadline(runtime::now(), timeout)),
                Ok(false) => Err(Error::network(
                    "pending reply never arrived (aliveness check)",
                )),
                Err(e) => Err(e),
            },
        };
        let result = match deadline {
            Ok(deadline) => conn.drain_pending(deadline).await,
            Err(e) => Err(e),
        };
        let now = runtime::now();
        let took = Some(now.since(started));
        let mut t = self.borrow_mut();
        let Err(e) = result else {
            let kind = PoolEventKind::PendingResponseSucceeded;
            t.events.emit(|| event(kind, took, None, false));
            return Ok(true);
        };
        let keep = conn
            .pending()
            .is_some_and(|p| p.after_failure(&e, now) == AfterDrain::KeepPending);
        let kind = PoolEventKind::PendingResponseFailed;
        t.events
            .emit(|| event(kind, took, Some(e.to_string()), !keep));
        if keep {
            Err(Error::timeout("pending response drain").with_cause(e.to_string()))
        } else {
            conn.abandon_pending();
            Ok(false)
        }
    }

    async fn establish(
        &self,
        address: &str,
        id: u64,
        connect: Deadline,
        handshake: Deadline,
        (auth_when, prepared): (AuthWhen, Option<runtime::Stream>),
    ) -> Result<Connection> {
        let (host, port) = split_address(address)?;
        // A server check's new connection (not a checkout's): the monitor's
        // heartbeat, announced before its socket is opened.
        let check = auth_when == AuthWhen::AtCheckout;
        let started = runtime::now();
        let (generation, settings) = {
            let mut t = self.borrow_mut();
            if check {
                t.description.emit(|| Heartbeat::started(address, id));
            }
            (t.state(address).generation, t.settings.connect.clone())
        };
        let result = Connection::establish(
            address,
            &host,
            port,
            &settings,
            id,
            generation,
            (connect, handshake),
            auth_when,
            prepared,
        )
        .await;
        let mut t = self.borrow_mut();
        if check {
            t.description.emit(|| match &result {
                Ok(c) => {
                    let server_id = c.conn.hello.connection_id;
                    Heartbeat::succeeded(address, id, c.rtt, server_id, c.reply.clone())
                }
                Err(e) => {
                    Heartbeat::failed(address, id, runtime::now().since(started), e.to_string())
                }
            });
        }
        let Established { conn, rtt, .. } = result?;
        let state = t.state(address);
        if runtime::CONCURRENT && !check && conn.generation != state.generation {
            // The pool was cleared while this one connected (WASI 0.3): it is
            // stale, and says nothing of the server now (SDAM), nor readies
            // the pool; the checkout that opened it still gets it (CMAP).
            return Ok(conn);
        }
        // With monitor tasks, RTT samples are theirs alone (server-monitoring
        // spec): a pool connection's handshake is no sample.
        if check || !runtime::CONCURRENT {
            state.rtt.add(rtt);
        }
        let average = state.rtt.average();
        t.checked(address, conn.hello.clone(), average);
        // A check's hello is recorded first, even from a server this driver
        // cannot use: its description's compatibility error then fails
        // selection at once, with the spec's message (SDAM). A pool's
        // connection was refused before authenticating (conn.rs).
        if check {
            conn.hello.check_wire_version(address)?;
        }
        t.ready(address);
        Ok(conn)
    }
}

/// WASI 0.3, a pending response drained in the background (the
/// pending-response rules of cmap.rs: within its window, counted from the
/// timeout): the connection is then available again, or closed. It counts as
/// in use until then (its lease), so maxPoolSize still holds; no operation
/// waits for it. A client gone meanwhile drops it.
async fn drain_in_background(me: std::rc::Weak<RefCell<Topology>>, mut conn: Connection) {
    let Some(topology) = me.upgrade() else {
        return;
    };
    let shared = Shared(topology);
    // timeoutMS=0: no operation's budget, the window alone bounds the drain.
    let window_only = OpTimeout::start(
        runtime::now(),
        Some(0),
        crate::csot::LegacyTimeouts::default(),
    );
    let drained = shared.drain(&mut conn, &window_only).await;
    let mut t = shared.borrow_mut();
    conn.lease = None;
    match drained {
        Ok(true) => t.keep_or_close(conn),
        // Closed (its reply never came, or came wrong); `Err` is a timeout
        // inside the window, which the window-only deadline rules out.
        Ok(false) | Err(_) => {
            conn.abandon_pending();
            t.closed(&conn, CloseReason::Error);
        }
    }
}

/// WASI 0.3, CMAP's background "populate the pool" for `address`: one
/// connection at a time (maxConnecting permitting) while the pool is ready
/// and below minPoolSize, each establishment bounded by connectTimeoutMS;
/// idle connections past maxIdleTimeMS are closed (and replaced) on the way.
/// It ends when the pool is full enough, is cleared or closed, an
/// establishment fails (SDAM handles the error, as for a checkout), or the
/// client is gone; a checkout's end starts it again if needed.
async fn fill_in_background(me: std::rc::Weak<RefCell<Topology>>, address: String) {
    loop {
        let Some(topology) = me.upgrade() else {
            return;
        };
        let shared = Shared(topology);
        let (id, connect_ms) = {
            let mut t = shared.borrow_mut();
            // Perished idle connections go first, and are replaced (CMAP).
            if let Some(max_idle) = t.settings.max_idle_time {
                t.close_idle_past(&address, max_idle);
            }
            if !t.needs_filling(&address) {
                t.state(&address).filling = false;
                return;
            }
            t.state(&address).connecting += 1;
            (t.created(&address), t.settings.background_connect_ms)
        };
        let mut connecting = Connecting::new(&shared, &address, id);
        let created = runtime::now();
        let deadline = Deadline::from_ms(created, Some(connect_ms));
        let result = shared
            .establish(&address, id, deadline, deadline, (AuthWhen::Now, None))
            .await;
        connecting.ended();
        let legacy = crate::csot::LegacyTimeouts {
            connect_ms,
            ..Default::default()
        };
        let timeout = OpTimeout::start(created, None, legacy);
        let mut t = shared.borrow_mut();
        match t.handshake_done(&address, id, created, result, &timeout) {
            Ok(conn) => t.keep_or_close(conn),
            Err(_) => {
                t.state(&address).filling = false;
                return;
            }
        }
    }
}

/// Wakes the selections waiting for a check to end, when it is dropped.
struct CheckEnded<'a>(&'a Shared);

impl Drop for CheckEnded<'_> {
    fn drop(&mut self) {
        if let Ok(t) = self.0.try_borrow() {
            t.checks.notify();
        }
    }
}

/// Whichever of two waits ends first (the other is dropped).
async fn first(a: impl std::future::Future<Output = ()>, b: impl std::future::Future<Output = ()>) {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| match (a.as_mut().poll(cx), b.as_mut().poll(cx)) {
        (std::task::Poll::Pending, std::task::Poll::Pending) => std::task::Poll::Pending,
        _ => std::task::Poll::Ready(()),
    })
    .await
}

/// Whichever of two futures ends first, `a` polled first (the other is dropped).
pub(crate) async fn race<T>(
    a: impl std::future::Future<Output = T>,
    b: impl std::future::Future<Output = T>,
) -> T {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| match a.as_mut().poll(cx) {
        std::task::Poll::Ready(out) => std::task::Poll::Ready(out),
        std::task::Poll::Pending => b.as_mut().poll(cx),
    })
    .await
}

/// An operation's round trip on a connection of `generation` (`io`),
/// interrupted by a clear with interruptInUseConnections of its `pool`
/// (`InUse::of`)
/// (WASI 0.3; on 0.2 nothing runs beside it, so `io` runs alone): the I/O is
/// dropped, which cancels it, and the operation fails with the CMAP spec's
/// retryable PoolClearedError. The connection is stale: closed at check-in.
pub(crate) async fn interruptible<T>(
    pool: Option<Rc<cmap::InUse>>,
    (address, generation): (&str, u64),
    io: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    unless_interrupted(pool, generation, io)
        .await
        .map_err(|e| e.unwrap_or_else(|| cmap::pool_cleared(address, true)))
}

/// `io`, unless a clear with interruptInUseConnections of `pool` ends its
/// connections of `generation` first (WASI 0.3; on 0.2 `io` runs alone):
/// then `Err(None)`, `io` dropped.
async fn unless_interrupted<T>(
    pool: Option<Rc<cmap::InUse>>,
    generation: u64,
    io: impl std::future::Future<Output = Result<T>>,
) -> std::result::Result<T, Option<Error>> {
    let io = async { io.await.map_err(Some) };
    let Some(pool) = pool.filter(|_| runtime::CONCURRENT) else {
        return io.await;
    };
    let interrupted = async {
        cmap::InUse::interrupted(pool, generation).await;
        Err(None)
    };
    race(io, interrupted).await
}

/// Why a checkout must wait before it may open a connection (CMAP).
#[derive(Clone, Copy)]
enum Full {
    /// maxPoolSize connections are checked out.
    InUse,
    /// maxConnecting connections are being established.
    Connecting,
}

/// An establishment in progress, counted against maxConnecting until it is
/// dropped, which wakes the checkouts waiting on it. Dropped before its end
/// was announced (a cancelled caller), it announces connection `id` closed:
/// CMAP saw it created, and sees every created connection end.
struct Connecting<'a> {
    shared: &'a Shared,
    address: &'a str,
    id: Option<u64>,
    /// Counted against maxConnecting (not a check's connection being announced).
    counted: bool,
}

impl<'a> Connecting<'a> {
    fn new(shared: &'a Shared, address: &'a str, id: u64) -> Connecting<'a> {
        Connecting {
            shared,
            address,
            id: Some(id),
            counted: true,
        }
    }

    /// The establishment's end is announced from here on (handshake_done).
    fn ended(&mut self) {
        self.id = None;
    }
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        // `try_`: a drop during a panic's unwinding must not panic again.
        if let Ok(mut t) = self.shared.try_borrow_mut() {
            if self.counted {
                let state = t.state(self.address);
                state.connecting = state.connecting.saturating_sub(1);
                state.in_use.notify();
            }
            if let Some(id) = self.id {
                t.events.emit(|| {
                    PoolEvent::new(PoolEventKind::ConnectionClosed, self.address, id)
                        .because(CloseReason::Error.as_str())
                });
            }
        }
    }
}

/// A checkout in progress: dropped before it ended (a cancelled caller),
/// it announces the checkout failed, so every CheckOutStarted has its end.
struct CheckingOut<'a> {
    shared: &'a Shared,
    address: &'a str,
    started: crate::deadline::Instant,
    ended: bool,
}

impl Drop for CheckingOut<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Ok(mut t) = self.shared.try_borrow_mut() {
            let took = runtime::now().since(self.started);
            let e = Error::network("the checkout was cancelled (its caller's future was dropped)");
            t.events.emit(|| {
                PoolEvent::new(PoolEventKind::ConnectionCheckOutFailed, self.address, 0)
                    .took(took)
                    .because(CheckOutFailedReason::ConnectionError.as_str())
                    .error(&e)
            });
        }
    }
}

/// A checkout's handshake error, when a check's connection authenticates at
/// its first checkout: out of computedServerSelectionTimeout (CSOT spec) it
/// is selection's timeout, not a retryable network one; the operation's own
/// deadline's expiry stays the section's.
fn checkout_handshake_error(
    timeout: &OpTimeout,
    selection: Deadline,
    address: &str,
    e: Error,
) -> Error {
    let now = runtime::now();
    match timeout.csot {
        _ if !e.is_timeout() || !selection.is_expired(now) => e,
        Some(op) if op.is_expired(now) => e,
        _ => timeout.selection_error(now, format!("{address}: {e}")),
    }
}

/// xorshift: enough to spread load across the latency window.
fn next_random(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Single-threaded scanning order (SDAM): a possible primary first, then
/// servers not checked yet, then known ones.
fn scan_order(kind: ServerType) -> u8 {
    match kind {
        ServerType::PossiblePrimary => 0,
        ServerType::Unknown => 1,
        _ => 2,
    }
}

/// A selection that cannot succeed: an invalid read preference is the
/// caller's error; an incompatible server is a selection failure.
fn selection_error(e: selection::SelectionError, criteria: &Criteria) -> Error {
    match e {
        selection::SelectionError::InvalidReadPreference(m) => {
            Error::invalid_argument(format!("invalid read preference in {criteria}: {m}"))
        }
        selection::SelectionError::Incompatible(m) => Error::new(ErrorKind::ServerSelection, m),
    }
}

fn split_address(address: &str) -> Result<(String, u16)> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| Error::invalid_argument(format!("address {address} has no port")))?;
    let port = port
        .parse()
        .map_err(|_| Error::invalid_argument(format!("address {address} has a bad port")))?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(load_balanced: bool) -> Topology {
        Topology::new(TopologySettings {
            seeds: vec!["lb:27017".into()],
            direct: None,
            replica_set: None,
            srv: None,
            local_threshold: Duration::from_millis(15),
            connect: Rc::new(ConnectSettings {
                load_balanced,
                ..Default::default()
            }),
            max_pool_size: 10,
            max_connecting: 2,
            wait_queue_timeout: None,
            min_pool_size: 0,
            max_idle_time: None,
            background_connect_ms: 10_000,
            heartbeat: Duration::from_secs(60),
            streaming: false,
            monitor_pool: false,
            log: Default::default(),
            pool_options: bson::rawdoc! { "maxPoolSize": 10_i64 },
        })
    }

    #[test]
    fn a_clear_fails_the_wait_queue_and_says_whether_it_interrupts() {
        let mut t = topology(false);
        t.settings.monitor_pool = true;
        t.events = PoolEvents::new(true);
        let a = "lb:27017";
        t.pool_ready(a);
        let waiting = cmap::InUse::enter(&t.state(a).in_use);
        t.clear_pool(a, true);
        assert!(waiting.cleared(), "a clear fails the checkouts waiting");
        let in_use = Rc::clone(&t.state(a).in_use);
        assert!(in_use.is_interrupted(0) && !in_use.is_interrupted(1));
        // A paused pool: cleared again, no event (CMAP), but its waiters still fail.
        let later = cmap::InUse::enter(&in_use);
        t.clear_pool(a, false);
        assert!(later.cleared());
        let cleared: Vec<bool> = t
            .take_pool_events()
            .iter()
            .filter(|e| e.kind == PoolEventKind::PoolCleared)
            .map(|e| e.interrupt_in_use_connections)
            .collect();
        assert_eq!(cleared, [true]);
        // Behind a load balancer the wait queue is left alone (CMAP).
        let mut lb = topology(true);
        let waiting = cmap::InUse::enter(&lb.state(a).in_use);
        lb.clear_pool(a, true);
        assert!(!waiting.cleared());
        assert!(!lb.state(a).in_use.is_interrupted(0));
    }

    #[test]
    fn a_pool_is_created_once_and_announced_with_its_options() {
        let mut t = topology(false);
        t.events = PoolEvents::new(true);
        t.pool_create("a:1");
        t.pool_create("a:1");
        t.pool_ready("a:1");
        let events = t.take_pool_events();
        let created: Vec<_> = events
            .iter()
            .filter(|e| e.kind == PoolEventKind::PoolCreated)
            .collect();
        assert_eq!(created.len(), 1, "{events:?}");
        let options = created[0].options.as_ref().expect("options");
        assert_eq!(options.get_i64("maxPoolSize").ok(), Some(10));
        assert!(events
            .iter()
            .all(|e| e.kind == PoolEventKind::PoolCreated || e.options.is_none()));
    }

    #[test]
    fn a_background_fill_runs_only_for_a_ready_pool_short_of_min_pool_size() {
        let a = "lb:27017";
        let mut t = topology(false);
        t.settings.min_pool_size = 2;
        assert!(!t.needs_filling(a), "paused: never");
        t.state(a).ready = true;
        assert!(t.needs_filling(a));
        t.state(a).connecting = 2;
        assert!(!t.needs_filling(a), "maxConnecting establishments already");
        t.state(a).connecting = 1;
        let lease = cmap::InUse::lease(&t.state(a).in_use);
        assert!(!t.needs_filling(a), "in use + connecting = minPoolSize");
        drop(lease);
        t.close();
        assert!(!t.needs_filling(a), "closed");
        let mut lb = topology(true);
        lb.settings.min_pool_size = 2;
        lb.state(a).ready = true;
        assert!(!lb.needs_filling(a), "never behind a load balancer");
    }

    #[test]
    fn behind_a_load_balancer_a_clear_ages_only_its_services_connections() {
        let (x, y) = (Some(ObjectId::new()), Some(ObjectId::new()));
        let mut t = topology(true);
        let a = "lb:27017";
        assert_eq!(t.generation_of(a, x), 0);
        t.clear(a, x);
        assert_eq!((t.generation_of(a, x), t.generation_of(a, y)), (1, 0));
        t.clear(a, x);
        assert_eq!(t.generation_of(a, x), 2);
        // A clear without a service (closing, a network error before the
        // hello) ages every connection.
        t.clear(a, None);
        assert_eq!((t.generation_of(a, x), t.generation_of(a, y)), (3, 1));
        // Without a load balancer the service is ignored: the whole pool goes.
        let mut t = topology(false);
        t.clear(a, x);
        assert_eq!((t.generation_of(a, x), t.generation_of(a, y)), (1, 1));
    }
}

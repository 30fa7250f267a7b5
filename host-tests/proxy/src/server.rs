//! The listeners, the state every connection shares, and a clean shutdown.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bson::Document;

use crate::auth::{AuthConfig, Users};
use crate::conn;
use crate::failpoint::{FailPoints, Mode};
use crate::local_sessions::{Cursors, SessionCache};
use crate::retry_record::RetryRecords;
use crate::stats::Stats;
use crate::topology::{Topology, TopologyState, TopologyVersion};
use crate::version::CurrentVersion;

/// How to start a [`Proxy`].
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The wire-compatible server every client connection is forwarded to.
    pub backend: SocketAddr,
    pub topology: Topology,
    /// What `buildInfo` reports; `maxWireVersion` follows from it ("7.0.0" gives 21).
    pub build_version: String,
    /// Loopback addresses to listen on, one per member (for a standalone: one or more).
    /// Empty: one ephemeral `127.0.0.1` port per member.
    pub listen: Vec<SocketAddr>,
    /// Log dropped connections and protocol errors to stderr.
    pub verbose: bool,
    /// Users, and whether commands need an authenticated connection. Off by default.
    pub auth: AuthConfig,
    /// Terminate TLS on client connections with this configuration (its
    /// client-certificate verifier decides about mutual TLS).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl ProxyConfig {
    /// A standalone reporting server 7.0.0 on one ephemeral port.
    pub fn new(backend: SocketAddr) -> ProxyConfig {
        ProxyConfig {
            backend,
            topology: Topology::Standalone,
            build_version: "7.0.0".to_string(),
            listen: Vec::new(),
            verbose: false,
            auth: AuthConfig::default(),
            tls: None,
        }
    }

    /// A sharded cluster of `mongoses` mongos routers.
    pub fn sharded(backend: SocketAddr, mongoses: usize) -> ProxyConfig {
        ProxyConfig {
            topology: Topology::Sharded { mongoses },
            ..ProxyConfig::new(backend)
        }
    }

    /// A load balancer in front of a mongos, for drivers in load-balanced mode.
    pub fn load_balanced(backend: SocketAddr) -> ProxyConfig {
        ProxyConfig::load_balanced_multi(backend, 1)
    }

    /// A load balancer in front of `mongoses` mongoses (connections spread round
    /// robin), as the load-balancer spec tests' `MULTI_MONGOS_LB_URI`.
    pub fn load_balanced_multi(backend: SocketAddr, mongoses: usize) -> ProxyConfig {
        ProxyConfig {
            topology: Topology::LoadBalanced { mongoses },
            ..ProxyConfig::new(backend)
        }
    }

    /// A replica set of `members` data-bearing members, no arbiter.
    pub fn replica_set(backend: SocketAddr, name: &str, members: usize) -> ProxyConfig {
        let topology = Topology::ReplicaSet {
            name: name.to_string(),
            members,
            arbiters: 0,
        };
        ProxyConfig {
            topology,
            ..ProxyConfig::new(backend)
        }
    }
}

/// Poison-tolerant lock: a panicking connection thread must not wedge the others.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct Shared {
    pub backend: SocketAddr,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub version: CurrentVersion,
    pub verbose: bool,
    pub ports: Vec<u16>,
    pub topology: Mutex<TopologyState>,
    /// Signalled (with `topology` held) when a topology version may have moved and when the
    /// proxy stops: awaitable hellos wait on it (see [`Shared::await_topology_change`]).
    topology_changed: Condvar,
    /// One set per mongod process: per member of a replica set, per mongos,
    /// and one for a standalone (however many addresses it listens on);
    /// see [`Shared::failpoints`].
    failpoints: Vec<Mutex<FailPoints>>,
    pub stats: Mutex<Stats>,
    /// Auth on: commands need an authenticated connection.
    pub auth_enabled: bool,
    pub users: Mutex<Users>,
    /// What the mongoses know of transactions (sharded presentation only).
    pub transactions: Mutex<crate::mongos::Transactions>,
    /// Cursor ids of open change streams, for the ResumableChangeStreamError label.
    pub change_streams: Mutex<HashSet<i64>>,
    /// Cursor ids of open tailable awaitData cursors (change streams among them): the only
    /// ones whose `getMore` may carry `maxTimeMS`.
    pub await_data: Mutex<HashSet<i64>>,
    /// Stamps replies of replica-set members and mongoses (`cluster_time.rs`).
    pub clock: crate::cluster_time::Clock,
    /// Replies to retryable writes, for their retries (see `retry_record.rs`).
    pub retries: Mutex<RetryRecords>,
    /// Transactions seen starting, for those nx-27017 never opened (`transaction_state.rs`).
    pub started_transactions: Mutex<crate::transaction_state::Started>,
    /// Each mongod's logical session cache, as the fail points: see [`Shared::sessions`].
    sessions: Vec<Mutex<SessionCache>>,
    /// Cursors over `$listLocalSessions` records (`local_sessions.rs`).
    pub session_cursors: Mutex<Cursors>,
    /// Names the collections `$listLocalSessions` records are stored in.
    pub next_sessions_collection: AtomicU64,
    stopped: Mutex<bool>,
    wake: Condvar,
    /// Sockets of live connections, shut down on stop to unblock their threads.
    sockets: Mutex<HashMap<u64, Vec<TcpStream>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    next_conn: AtomicU64,
    next_request: AtomicI32,
}

impl Shared {
    /// The fail points that `member`'s connections see and configure.
    pub fn failpoints(&self, member: usize) -> MutexGuard<'_, FailPoints> {
        lock(self.failpoints.get(member).unwrap_or(&self.failpoints[0]))
    }

    /// The logical session cache of `member`'s mongod.
    pub fn sessions(&self, member: usize) -> MutexGuard<'_, SessionCache> {
        lock(self.sessions.get(member).unwrap_or(&self.sessions[0]))
    }

    /// Runs `change` on the topology and wakes every awaitable hello to look again.
    pub fn change_topology<R>(&self, change: impl FnOnce(&mut TopologyState) -> R) -> R {
        let mut topology = lock(&self.topology);
        let out = change(&mut topology);
        self.topology_changed.notify_all();
        out
    }

    /// An awaitable hello's wait: until `member`'s topology version is no longer `seen`,
    /// `until` passes, the proxy stops, or `client_gone` (asked every [`CLIENT_POLL`], out of
    /// the lock) says the client left. Sleeps on a condition variable, holding no lock.
    pub fn await_topology_change(
        &self,
        member: usize,
        seen: TopologyVersion,
        until: Instant,
        client_gone: impl Fn() -> bool,
    ) -> Awaited {
        loop {
            let topology = lock(&self.topology);
            if self.is_stopped() {
                return Awaited::Stopped;
            }
            if topology.topology_version(member) != seen {
                return Awaited::Changed;
            }
            let now = Instant::now();
            if now >= until {
                return Awaited::TimedOut;
            }
            let step = (until - now).min(CLIENT_POLL);
            let (topology, _) = self
                .topology_changed
                .wait_timeout(topology, step)
                .unwrap_or_else(|e| e.into_inner());
            drop(topology);
            if client_gone() {
                return Awaited::ClientGone;
            }
        }
    }

    pub fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleeps until `until` unless the proxy stops first; answers false if it stopped.
    pub fn sleep_until(&self, until: Instant) -> bool {
        let mut stopped = lock(&self.stopped);
        loop {
            let now = Instant::now();
            if *stopped {
                return false;
            }
            if now >= until {
                return true;
            }
            stopped = self
                .wake
                .wait_timeout(stopped, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Tracks a socket so that shutdown can unblock its thread; false once stopping.
    pub fn track(&self, conn: u64, socket: &TcpStream) -> bool {
        let stopped = lock(&self.stopped);
        if *stopped {
            return false;
        }
        match socket.try_clone() {
            Ok(clone) => {
                lock(&self.sockets).entry(conn).or_default().push(clone);
                drop(stopped);
                true
            }
            Err(_) => false,
        }
    }

    pub fn untrack(&self, conn: u64) {
        lock(&self.sockets).remove(&conn);
    }

    /// Presents server version `text`; when that changes hello (`maxWireVersion`), every
    /// mongod's topology version moves on, so that awaiting hellos answer it.
    pub fn set_version(&self, text: &str) -> Result<crate::topology::Version, String> {
        let before = self.version.get();
        let now = self.version.set(text)?;
        if now.max_wire != before.max_wire {
            self.change_topology(TopologyState::bump_all);
        }
        Ok(now)
    }

    pub fn request_id(&self) -> i32 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    pub fn log(&self, msg: &str) {
        if self.verbose {
            eprintln!("failpoint-proxy: {msg}");
        }
    }
}

/// How often an awaitable hello's wait looks whether its client is still there.
pub(crate) const CLIENT_POLL: Duration = Duration::from_millis(100);

/// How an awaitable hello's wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Awaited {
    Changed,
    TimedOut,
    Stopped,
    ClientGone,
}

/// A running proxy. Stops (closing every connection and joining every thread) on
/// [`Proxy::shutdown`] or drop.
pub struct Proxy {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    acceptors: Vec<JoinHandle<()>>,
}

impl Proxy {
    pub fn start(config: ProxyConfig) -> io::Result<Proxy> {
        let bad = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let members = match &config.topology {
            Topology::Standalone => config.listen.len().max(1),
            Topology::ReplicaSet { members: 0, .. } => {
                return Err(bad("a replica set needs a member".into()))
            }
            Topology::ReplicaSet {
                members, arbiters, ..
            } => members + arbiters,
            Topology::Sharded { mongoses: 0 } => {
                return Err(bad("a cluster needs a mongos".into()))
            }
            Topology::Sharded { mongoses } => *mongoses,
            Topology::LoadBalanced { .. } => 1,
        };
        if !config.listen.is_empty() && config.listen.len() != members {
            return Err(bad(format!(
                "{members} members but {} listen addresses",
                config.listen.len()
            )));
        }
        if let Some(a) = config.listen.iter().find(|a| !a.ip().is_loopback()) {
            return Err(bad(format!("{a} is not a loopback address")));
        }
        let mut listeners = Vec::with_capacity(members);
        for i in 0..members {
            let addr = config
                .listen
                .get(i)
                .copied()
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
            listeners.push(TcpListener::bind(addr)?);
        }
        let addrs = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<io::Result<Vec<_>>>()?;
        let hosts = addrs.iter().map(SocketAddr::to_string).collect();
        let users = Users::new(&config.auth).map_err(bad)?;
        let fail_point_sets = match config.topology {
            Topology::Standalone => 1,
            _ => members,
        };
        let shared = Arc::new(Shared {
            backend: config.backend,
            tls: config.tls.clone(),
            version: CurrentVersion::new(&config.build_version),
            verbose: config.verbose,
            ports: addrs.iter().map(SocketAddr::port).collect(),
            topology: Mutex::new(TopologyState::new(&config.topology, hosts)),
            topology_changed: Condvar::new(),
            failpoints: (0..fail_point_sets)
                .map(|_| Mutex::new(FailPoints::default()))
                .collect(),
            stats: Mutex::new(Stats::default()),
            auth_enabled: config.auth.enabled,
            users: Mutex::new(users),
            transactions: Mutex::new(Default::default()),
            change_streams: Mutex::new(HashSet::new()),
            await_data: Mutex::new(HashSet::new()),
            clock: Default::default(),
            retries: Mutex::new(RetryRecords::default()),
            started_transactions: Mutex::new(Default::default()),
            sessions: (0..fail_point_sets)
                .map(|_| Mutex::new(SessionCache::default()))
                .collect(),
            session_cursors: Mutex::new(Cursors::default()),
            next_sessions_collection: AtomicU64::new(1),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
            sockets: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(1),
            next_request: AtomicI32::new(1),
        });
        let mut proxy = Proxy {
            shared: shared.clone(),
            addrs,
            acceptors: Vec::new(),
        };
        for (member, listener) in listeners.into_iter().enumerate() {
            let shared = shared.clone();
            let spawned = thread::Builder::new()
                .name(format!("proxy-accept-{member}"))
                .spawn(move || accept_loop(shared, member, listener));
            match spawned {
                Ok(handle) => proxy.acceptors.push(handle),
                Err(e) => {
                    proxy.shutdown();
                    return Err(e);
                }
            }
        }
        Ok(proxy)
    }

    /// The listen addresses, in member order.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).clone()
    }

    pub fn reset_stats(&self) {
        lock(&self.shared.stats).reset();
    }

    /// The member index of the current primary (None for a standalone).
    pub fn primary(&self) -> Option<usize> {
        lock(&self.shared.topology).primary
    }

    /// Elects `target` (or the next data member) as primary with a new term, as
    /// `{proxyStepDown: 1}` does. Answers the new primary's member index.
    pub fn step_down(&self, target: Option<usize>) -> Result<usize, String> {
        self.shared.change_topology(|t| t.elect(target))
    }

    /// Configures fail point `name` on `member` (a standalone has one set), as a
    /// `configureFailPoint` sent to that member would, without a connection: the soak
    /// injects a fault before each operation. Answers the point's `timesEntered`, or
    /// None for a name mongod would not know.
    pub fn configure_fail_point(
        &self,
        member: usize,
        name: &str,
        mode: Mode,
        data: Document,
    ) -> Option<i64> {
        self.shared.failpoints(member).configure(name, mode, data)
    }

    /// Presents server version `text` (`major.minor[.patch]`) to connections made from now
    /// on, as `{proxySetVersion: text}` does: hello's `maxWireVersion`, `buildInfo`.
    pub fn set_version(&self, text: &str) -> Result<(), String> {
        self.shared.set_version(text).map(drop)
    }

    /// Stops accepting, closes every connection and joins every thread. Idempotent.
    pub fn shutdown(&mut self) {
        {
            let mut stopped = lock(&self.shared.stopped);
            if *stopped && self.acceptors.is_empty() {
                return;
            }
            *stopped = true;
            self.shared.wake.notify_all();
        }
        // Awaitable hellos wake and see `stopped`.
        self.shared.change_topology(|_| ());
        // A blocking accept() only returns for a connection: give each listener one.
        for addr in &self.addrs {
            let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
        }
        for handle in self.acceptors.drain(..) {
            let _ = handle.join();
        }
        for sockets in lock(&self.shared.sockets).values() {
            for s in sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let workers: Vec<_> = lock(&self.shared.workers).drain(..).collect();
        for handle in workers {
            let _ = handle.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(shared: Arc<Shared>, member: usize, listener: TcpListener) {
    for stream in listener.incoming() {
        if shared.is_stopped() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                shared.log(&format!("accept: {e}"));
                // E.g. out of descriptors: back off instead of spinning.
                if !shared.sleep_until(Instant::now() + Duration::from_millis(20)) {
                    break;
                }
                continue;
            }
        };
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if !shared.track(id, &stream) {
            break;
        }
        lock(&shared.stats).opened();
        let worker = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("proxy-conn-{id}"))
            .spawn(move || conn::serve(worker, member, stream, id));
        match spawned {
            Ok(handle) => {
                let mut workers = lock(&shared.workers);
                workers.retain(|h| !h.is_finished());
                workers.push(handle);
            }
            Err(e) => {
                shared.log(&format!("spawn: {e}"));
                shared.untrack(id);
                lock(&shared.stats).closed();
            }
        }
    }
}

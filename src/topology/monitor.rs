//! WASI 0.3: a monitor task per server (the server-monitoring spec's
//! "multi-threaded or asynchronous monitoring"), on a dedicated connection
//! that never authenticates and never counts against the pool. It streams
//! (awaitable hellos with exhaustAllowed, and an RTT task on a second
//! connection) when the server offers a topologyVersion and
//! serverMonitoringMode allows; otherwise it polls every
//! heartbeatFrequencyMS. Each check's outcome updates the topology and wakes
//! the selections waiting for it. The tasks hold the topology weakly and
//! borrow it only between awaits; closing the client (or the server leaving
//! the topology) stops them at whatever await they stand.

use super::{split_address, Topology, MIN_HEARTBEAT};
use crate::cmap::Changes;
use crate::conn::{ConnectSettings, Connection, Established};
use crate::deadline::{Deadline, Instant};
use crate::error::{Error, Result};
use crate::handshake;
use crate::runtime;
use crate::sdam::monitoring::{Heartbeat, SdamEvent};
use crate::sdam::{ServerType, TopologyVersion};
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::time::Duration;

/// What the client says to one server's monitor.
#[derive(Default)]
pub(super) struct Signals {
    /// Check now (a selection found nothing suitable): wakes a monitor
    /// between checks, never one in the middle of one.
    pub wake: Rc<Changes>,
    /// Drop the check in progress and its connection: an operation's
    /// network error marked the server Unknown, or (with `stopped`) the
    /// client closed or the server left the topology.
    pub cancel: Rc<Changes>,
    pub stopped: Cell<bool>,
}

impl Signals {
    pub fn stop(&self) {
        self.stopped.set(true);
        self.cancel.notify();
    }
}

/// What one check needs from the topology, read between awaits.
struct Plan {
    /// The monitor's handshake: the client's, without credentials (a
    /// monitor never authenticates, nor negotiates mechanisms).
    connect: Rc<ConnectSettings>,
    heartbeat: Duration,
    connect_ms: u64,
    streaming: bool,
    /// The server's description before this check.
    known: bool,
    topology_version: Option<TopologyVersion>,
}

/// Runs `f` on the topology, unless the client is gone or closed.
fn with<T>(me: &Weak<RefCell<Topology>>, f: impl FnOnce(&mut Topology) -> T) -> Option<T> {
    let topology = me.upgrade()?;
    let mut t = topology.try_borrow_mut().ok()?;
    if t.closed {
        return None;
    }
    Some(f(&mut t))
}

fn plan(t: &mut Topology, address: &str, cached: &mut Option<Rc<ConnectSettings>>) -> Plan {
    let settings = &t.settings;
    let connect = cached
        .get_or_insert_with(|| {
            let mut c = (*settings.connect).clone();
            c.auth = None;
            Rc::new(c)
        })
        .clone();
    let server = t.description.servers.iter().find(|s| s.address == address);
    Plan {
        connect,
        heartbeat: settings.heartbeat,
        connect_ms: settings.background_connect_ms,
        streaming: settings.streaming,
        known: server.is_some_and(|s| s.kind != ServerType::Unknown),
        topology_version: server.and_then(|s| s.topology_version),
    }
}

/// One server's monitor, until `signals` stop it or the client is gone.
pub(super) async fn run(me: Weak<RefCell<Topology>>, address: String, signals: Rc<Signals>) {
    let mut conn: Option<Connection> = None;
    let mut settings = None;
    let mut rtt_task = false;
    loop {
        if signals.stopped.get() {
            return;
        }
        let Some(plan) = with(&me, |t| plan(t, &address, &mut settings)) else {
            return;
        };
        let cancelled = Changes::next(&signals.cancel);
        let outcome = super::race(
            async { Some(check(&me, &address, &mut conn, &plan).await) },
            async {
                cancelled.await;
                None
            },
        )
        .await;
        let Some(outcome) = outcome else {
            // Cancelled: the connection goes; the next check waits its turn.
            conn = None;
            if signals.stopped.get() {
                return;
            }
            wait(&signals, plan.heartbeat).await;
            continue;
        };
        let at_once = match outcome {
            Ok(supports_streaming) => {
                let streaming = plan.streaming && supports_streaming;
                if streaming && !std::mem::replace(&mut rtt_task, true) {
                    runtime::detach(measure_rtt(me.clone(), address.clone(), signals.clone()));
                }
                streaming || conn.as_ref().is_some_and(Connection::is_streaming)
            }
            Err(e) => {
                conn = None;
                // SDAM: a known server's network error is checked again at
                // once (on a new connection) before the monitor sleeps.
                e.is_network() && plan.known
            }
        };
        if with(&me, |t| t.checks.notify()).is_none() {
            return;
        }
        if !at_once {
            wait(&signals, plan.heartbeat).await;
        }
    }
}

/// The polling protocol's pause: heartbeatFrequencyMS, or less when a
/// check is requested, but never less than minHeartbeatFrequencyMS since
/// the last check ended; a stop ends it at once.
async fn wait(signals: &Signals, heartbeat: Duration) {
    let started = runtime::now();
    let woken = Changes::next(&signals.wake);
    let stopped = Changes::next(&signals.cancel);
    super::first(
        super::first(
            runtime::sleep_until(Deadline::after(started, heartbeat)),
            woken,
        ),
        stopped,
    )
    .await;
    if signals.stopped.get() {
        return;
    }
    let floor = Deadline::after(started, MIN_HEARTBEAT);
    super::first(runtime::sleep_until(floor), Changes::next(&signals.cancel)).await;
}

/// One check: a new connection's handshake, the next reply of a streaming
/// hello, a new awaitable hello, or a polling hello. Its outcome goes into
/// the topology here; `Ok` says whether the server can stream.
async fn check(
    me: &Weak<RefCell<Topology>>,
    address: &str,
    conn: &mut Option<Connection>,
    plan: &Plan,
) -> Result<bool> {
    let started = runtime::now();
    // The streaming protocol's checks are awaited hellos (SDAM events say so).
    let awaited = conn
        .as_ref()
        .is_some_and(|c| c.is_streaming() || plan.streaming && plan.topology_version.is_some());
    let id = match conn {
        Some(c) => c.id,
        None => with(me, Topology::next_monitor_id).ok_or_else(gone)?,
    };
    let emit = |t: &mut Topology, event: SdamEvent| {
        let event = if awaited { event.awaited() } else { event };
        t.description.emit(|| event);
    };
    let result = match conn.as_mut() {
        None => {
            with(me, |t| emit(t, Heartbeat::started(address, id))).ok_or_else(gone)?;
            connect(address, id, plan, started).await.map(
                |Established {
                     conn: c,
                     rtt,
                     reply,
                 }| {
                    *conn = Some(c);
                    (rtt, Some(rtt), reply)
                },
            )
        }
        Some(c) => {
            with(me, |t| emit(t, Heartbeat::started(address, id))).ok_or_else(gone)?;
            if awaited {
                streamed(c, plan).await.map(|reply| {
                    let took = runtime::now().since(started);
                    (took, None, reply)
                })
            } else {
                let deadline = Deadline::from_ms(started, Some(plan.connect_ms));
                c.heartbeat(&plan.connect, deadline)
                    .await
                    .map(|(rtt, reply)| (rtt, Some(rtt), reply))
            }
        }
    };
    let topology = me.upgrade().ok_or_else(gone)?;
    let mut t = topology.borrow_mut();
    if t.closed {
        return Err(gone());
    }
    match result {
        Ok((took, rtt, reply)) => {
            let hello = match conn {
                Some(c) => c.hello.clone(),
                None => return Err(gone()),
            };
            let server_id = hello.connection_id;
            emit(
                &mut t,
                Heartbeat::succeeded(address, id, took, server_id, reply),
            );
            let supports_streaming = hello.topology_version.is_some();
            t.monitor_checked(address, hello, rtt);
            Ok(supports_streaming)
        }
        Err(e) => {
            let took = runtime::now().since(started);
            emit(&mut t, Heartbeat::failed(address, id, took, e.to_string()));
            t.monitor_failed(address, &e);
            Err(e)
        }
    }
}

/// A new monitoring connection: TCP (and TLS) and the hello, each within
/// connectTimeoutMS.
async fn connect(address: &str, id: u64, plan: &Plan, started: Instant) -> Result<Established> {
    let (host, port) = split_address(address)?;
    let deadline = Deadline::from_ms(started, Some(plan.connect_ms));
    Connection::establish(
        address,
        &host,
        port,
        &plan.connect,
        id,
        0,
        (deadline, deadline),
        crate::conn::AuthWhen::AtCheckout,
        None,
    )
    .await
}

/// The next reply of the streaming hello, sending the awaitable hello first
/// when the last reply ended the stream; within connectTimeoutMS plus
/// heartbeatFrequencyMS (the server waits up to the latter to answer).
async fn streamed(c: &mut Connection, plan: &Plan) -> Result<bson::RawDocumentBuf> {
    let now = runtime::now();
    let deadline = Deadline::after(now, Duration::from_millis(plan.connect_ms) + plan.heartbeat);
    if !c.is_streaming() {
        let seen = plan.topology_version.ok_or_else(|| {
            Error::protocol("the server offered no topologyVersion to stream from")
        })?;
        let ms = u64::try_from(plan.heartbeat.as_millis()).unwrap_or(u64::MAX);
        let cmd = handshake::awaitable_hello_command(plan.connect.server_api.as_ref(), &seen, ms);
        c.start_stream(&cmd, deadline).await?;
    }
    Ok(c.next_streamed(deadline).await?.0)
}

/// The streaming protocol's RTT task: a hello on its own connection every
/// heartbeatFrequencyMS, its round trip a sample for selection and CSOT;
/// it publishes no event, and a failure changes nothing but its connection.
async fn measure_rtt(me: Weak<RefCell<Topology>>, address: String, signals: Rc<Signals>) {
    let mut conn: Option<Connection> = None;
    let mut settings = None;
    loop {
        if signals.stopped.get() {
            return;
        }
        let Some(plan) = with(&me, |t| plan(t, &address, &mut settings)) else {
            return;
        };
        let started = runtime::now();
        let stopped = Changes::next(&signals.cancel);
        let sample = super::race(
            async {
                // The sample is a hello on an established connection: a
                // new one's handshake (TCP, TLS) would overstate the RTT.
                let c = match &mut conn {
                    Some(c) => c,
                    None => {
                        let id = with(&me, Topology::next_monitor_id).ok_or_else(gone)?;
                        let e = connect(&address, id, &plan, started).await?;
                        conn.insert(e.conn)
                    }
                };
                let deadline =
                    Deadline::after(runtime::now(), Duration::from_millis(plan.connect_ms));
                c.heartbeat(&plan.connect, deadline)
                    .await
                    .map(|(rtt, _)| rtt)
            },
            async {
                stopped.await;
                Err(gone())
            },
        )
        .await;
        match sample {
            Ok(rtt) => {
                if with(&me, |t| t.state(&address).rtt.add(rtt)).is_none() {
                    return;
                }
            }
            Err(_) => conn = None,
        }
        if signals.stopped.get() {
            return;
        }
        let pause = Deadline::after(started, plan.heartbeat);
        super::first(runtime::sleep_until(pause), Changes::next(&signals.cancel)).await;
    }
}

fn gone() -> Error {
    Error::network("the client was closed")
}

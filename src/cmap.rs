//! Connection Monitoring and Pooling, sans I/O: the "pending response" state
//! of the CMAP proposal (DRIVERS-2884, "Awaiting Pending Read"). A command
//! sent with `maxTimeMS` whose read timed out after the request was fully
//! written will still be answered (the server gives up at `maxTimeMS`), so its
//! connection goes back to the pool *pending* instead of being closed; the
//! next checkout reads and discards that reply first, within a bounded window.
//! This module decides the window and every transition; `conn.rs` does the
//! reads and `topology.rs` the checkout.

use crate::csot::OpTimeout;
use crate::deadline::{Deadline, Instant};
use crate::error::{Error, ErrorKind};
use crate::logging::{Component, Context, Fields, LogMessage, Loggable};
use bson::cstr;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// CMAP, establishing a connection: a network error or timeout in the TCP
/// connect, TLS or hello of a pool's new connection (not in authentication)
/// gets the `SystemOverloadedError` and `RetryableError` labels, so SDAM
/// leaves the server and pool alone and the overload retry policy applies.
pub fn label_establishment_error(mut e: Error) -> Error {
    if e.is_network() {
        e.add_label(crate::backpressure::OVERLOADED);
        e.add_label("RetryableError");
    }
    e
}

/// How long a pending reply is waited for, counted from the timeout (or from
/// the last aliveness check that found bytes). Past it the reply is presumed lost.
pub const PENDING_RESPONSE_WINDOW: Duration = Duration::from_secs(3);

/// The aliveness check of a connection pending longer than the window: a read
/// of whatever is already buffered, given this long (it never waits for the server).
pub const ALIVENESS_PROBE: Duration = Duration::from_millis(1);

/// What a pending connection still expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingResponse {
    /// The request whose reply is outstanding: the reply's `responseTo`.
    pub request_id: i32,
    /// When the read timed out, or when an aliveness check last found bytes.
    pub since: Instant,
    /// Bytes of the reply frame read before the timeout (kept in the
    /// connection's buffer; the drain resumes after them).
    pub read: usize,
}

/// The first step of a checkout that finds a pending connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// Pending longer than the window: probe for buffered bytes; none means
    /// the connection is closed, some restart the window.
    AlivenessCheck,
    /// Read the rest of the reply by this deadline.
    Drain(Deadline),
}

/// What becomes of a pending connection whose drain did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDrain {
    /// The operation's own deadline ran out inside the window: the connection
    /// returns to the pool still pending, and the operation fails with a timeout.
    KeepPending,
    /// The window ran out, or the drain failed (a protocol or network error):
    /// the connection is closed and the operation checks out another one.
    Close,
}

impl PendingResponse {
    /// A read for `request_id` timed out at `now` with `read` bytes of its reply in hand.
    pub fn timed_out(request_id: i32, read: usize, now: Instant) -> PendingResponse {
        PendingResponse {
            request_id,
            since: now,
            read,
        }
    }

    fn window_end(&self) -> Deadline {
        Deadline::after(self.since, PENDING_RESPONSE_WINDOW)
    }

    pub fn window_elapsed(&self, now: Instant) -> bool {
        self.window_end().is_expired(now)
    }

    /// What a checkout at `now`, for an operation with budget `op`, does first.
    pub fn step(&self, now: Instant, op: &OpTimeout) -> DrainStep {
        if self.window_elapsed(now) {
            DrainStep::AlivenessCheck
        } else {
            DrainStep::Drain(self.drain_deadline(now, op))
        }
    }

    /// The drain's deadline: the earlier of the window's end and the new
    /// operation's budget (its timeoutMS deadline; without one, what
    /// serverSelectionTimeoutMS leaves, as the proposal says for drivers
    /// without waitQueueTimeoutMS).
    pub fn drain_deadline(&self, now: Instant, op: &OpTimeout) -> Deadline {
        let op_budget = match op.csot {
            Some(deadline) => deadline,
            None => op.selection_deadline(now),
        };
        self.window_end().min(op_budget)
    }

    /// The aliveness check found bytes at `now`: the window starts again.
    pub fn alive(&mut self, now: Instant, read: usize) {
        self.since = now;
        self.read = read;
    }

    /// The drain failed with `err` at `now`.
    pub fn after_failure(&self, err: &Error, now: Instant) -> AfterDrain {
        if err.kind == ErrorKind::Timeout && !self.window_elapsed(now) {
            AfterDrain::KeepPending
        } else {
            AfterDrain::Close
        }
    }
}

/// Only a command that carried `maxTimeMS` is sure to be answered soon, so
/// only its timed-out connection is kept pending (the proposal's condition);
/// any other timeout closes the connection as before.
pub fn keeps_pending(sent_max_time: bool) -> bool {
    sent_max_time
}

/// A pool event: the CMAP spec's monitoring events, and the pending-response
/// proposal's three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolEventKind {
    PendingResponseStarted,
    PendingResponseSucceeded,
    PendingResponseFailed,
    /// A server's pool was created (the first time the server is used).
    PoolCreated,
    /// A check found the server usable: the pool (new, or paused by a clear) is ready.
    PoolReady,
    /// The pool was cleared (a network error or a state-change error): its
    /// generation went up and its idle connections are closed as stale.
    PoolCleared,
    /// The client was closed.
    PoolClosed,
    ConnectionCreated,
    /// The handshake (and authentication) finished; `duration` since created.
    ConnectionReady,
    /// `reason`: one of [`CloseReason`].
    ConnectionClosed,
    ConnectionCheckOutStarted,
    /// `reason`: one of [`CheckOutFailedReason`]; `duration` since started.
    ConnectionCheckOutFailed,
    /// `duration` since the checkout started.
    ConnectionCheckedOut,
    ConnectionCheckedIn,
}

/// Why a connection was closed (ConnectionClosedEvent.reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Its pool was cleared since it was created.
    Stale,
    /// Not needed: the pool already holds maxPoolSize idle connections.
    Idle,
    /// An I/O failure broke it, or its handshake failed.
    Error,
    PoolClosed,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Stale => "stale",
            CloseReason::Idle => "idle",
            CloseReason::Error => "error",
            CloseReason::PoolClosed => "poolClosed",
        }
    }
}

/// Why a checkout failed (ConnectionCheckOutFailedEvent.reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOutFailedReason {
    PoolClosed,
    Timeout,
    ConnectionError,
}

impl CheckOutFailedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutFailedReason::PoolClosed => "poolClosed",
            CheckOutFailedReason::Timeout => "timeout",
            CheckOutFailedReason::ConnectionError => "connectionError",
        }
    }

    /// A checkout that failed with `err`: a timeout, or a connection that
    /// could not be established (or drained).
    pub fn of(err: &Error) -> CheckOutFailedReason {
        if err.kind == ErrorKind::Closed {
            CheckOutFailedReason::PoolClosed
        } else if err.is_timeout() {
            CheckOutFailedReason::Timeout
        } else {
            CheckOutFailedReason::ConnectionError
        }
    }
}

/// The connections of one pool checked out, by purpose (Load Balancer spec,
/// "Connection Tracking"). Each is counted by its [`Lease`] until that is
/// dropped, so a connection closed or lost anywhere stops counting too.
/// With concurrent callers (WASI 0.3) it also holds the pool's wait queue and
/// its interruptions of in-use connections: everything a checkout waits on.
#[derive(Debug, Default)]
pub struct InUse {
    total: Cell<usize>,
    cursors: Cell<usize>,
    transactions: Cell<usize>,
    /// The pool's changes, which checkouts waiting for a connection watch.
    changes: Rc<Changes>,
    /// CMAP's WaitQueue: the checkouts waiting, in arrival order.
    queue: RefCell<VecDeque<u64>>,
    /// The next ticket's number.
    next_ticket: Cell<u64>,
    /// Clears of the pool so far: a ticket taken before the latest one
    /// fails (CMAP: a clear fails every request in the WaitQueue).
    clears: Cell<u64>,
    /// A clear with interruptInUseConnections: connections of this
    /// generation or older are interrupted wherever they are in use.
    interrupted: Cell<Option<u64>>,
}

/// A checkout's place in its pool's wait queue (CMAP WaitQueue), held until
/// it takes a connection or starts establishing one. However it is dropped
/// (done, timed out, or its future dropped) it leaves the queue, and the
/// checkout behind it is woken: a waiter gone never blocks the others.
#[derive(Debug)]
pub struct Ticket {
    pool: Rc<InUse>,
    number: u64,
    /// The pool's clears when it was taken.
    clears: u64,
}

impl Ticket {
    /// Whether this checkout is the oldest waiting: only it may take an idle
    /// connection or start establishing one (FIFO).
    pub fn is_first(&self) -> bool {
        self.pool.queue.borrow().front() == Some(&self.number)
    }

    /// Whether the pool was cleared since this checkout began waiting.
    pub fn cleared(&self) -> bool {
        self.pool.clears.get() != self.clears
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // `try_`: never a second panic while unwinding.
        let Ok(mut queue) = self.pool.queue.try_borrow_mut() else {
            return;
        };
        let first = queue.front() == Some(&self.number);
        if let Some(at) = queue.iter().position(|&n| n == self.number) {
            queue.remove(at);
        }
        drop(queue);
        if first {
            // The next in line may go now.
            self.pool.notify();
        }
    }
}

/// PoolClearedError: a checkout waiting in a pool that was cleared, or an
/// operation whose connection a clear interrupted. A network error, so
/// retryable; the executor never hands a checkout's error to SDAM, and an
/// interrupted connection's generation is stale, so neither marks the server
/// Unknown again (CMAP "Clearing a non-load balanced pool").
pub fn pool_cleared(address: &str, interrupted: bool) -> Error {
    let message = match interrupted {
        true => format!("Connection to {address} interrupted due to server monitor timeout"),
        false => format!(
            "Connection pool for {address} was cleared: no connection until the server is checked again"
        ),
    };
    let mut e = Error::network(message);
    e.add_label("RetryableError");
    e
}

/// Whether an available connection has been idle too long (CMAP
/// maxIdleTimeMS: "perished", closed with reason `idle` instead of used).
pub fn idle_too_long(since: Instant, now: Instant, max_idle: Option<Duration>) -> bool {
    max_idle.is_some_and(|max| now.since(since) >= max)
}

/// Something that changes (a pool, a topology) and the tasks waiting for
/// its next change: a count and their wakers, single-threaded.
#[derive(Debug, Default)]
pub struct Changes {
    count: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Changes {
    /// It changed: every waiting task looks again.
    pub fn notify(&self) {
        self.count.set(self.count.get() + 1);
        for waker in self.waiters.take() {
            waker.wake();
        }
    }

    /// Ready at the first change after this call (not after the first poll).
    pub fn next(this: &Rc<Changes>) -> impl std::future::Future<Output = ()> {
        let (this, seen) = (Rc::clone(this), this.count.get());
        std::future::poll_fn(move |cx| {
            if this.count.get() != seen {
                return Poll::Ready(());
            }
            let mut waiters = this.waiters.borrow_mut();
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// One server's pool as it stands ([`crate::Client::pool_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    pub address: String,
    /// Checked out (by operations, cursors or transactions).
    pub in_use: usize,
    /// Idle in the pool, `pending` included.
    pub idle: usize,
    /// Idle, but still owed the reply of an operation that timed out: drained
    /// before reuse (WASI 0.2; on 0.3 a background task drains such a
    /// connection at once, and it counts in `in_use` until then).
    pub pending: usize,
}

/// What a checked-out connection is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Operation,
    /// Pinned to a cursor (behind a load balancer).
    Cursor,
    /// Pinned to a transaction (behind a load balancer).
    Transaction,
}

/// One checked-out connection's place in its pool's [`InUse`].
#[derive(Debug)]
pub struct Lease {
    pool: Rc<InUse>,
    purpose: Cell<Purpose>,
}

impl InUse {
    pub fn lease(pool: &Rc<InUse>) -> Lease {
        pool.total.set(pool.total.get() + 1);
        Lease {
            pool: Rc::clone(pool),
            purpose: Cell::new(Purpose::Operation),
        }
    }

    pub fn total(&self) -> usize {
        self.total.get()
    }

    /// The pool changed (a connection came back, was closed, or an
    /// establishment ended): the checkouts waiting on it look again.
    pub fn notify(&self) {
        self.changes.notify();
    }

    /// Ready at the pool's next change after this call.
    pub fn changed(pool: &Rc<InUse>) -> impl std::future::Future<Output = ()> {
        Changes::next(&pool.changes)
    }

    /// The pool a checked-out connection counts in, for its interruption
    /// (WASI 0.3 only: `None` on 0.2, where nothing runs beside an operation).
    pub fn of(lease: Option<&Lease>) -> Option<Rc<InUse>> {
        match crate::runtime::CONCURRENT {
            true => lease.map(|l| Rc::clone(&l.pool)),
            false => None,
        }
    }

    /// Joins the wait queue, at its end.
    pub fn enter(pool: &Rc<InUse>) -> Ticket {
        let number = pool.next_ticket.get();
        pool.next_ticket.set(number + 1);
        pool.queue.borrow_mut().push_back(number);
        Ticket {
            pool: Rc::clone(pool),
            number,
            clears: pool.clears.get(),
        }
    }

    /// Checkouts waiting (the wait queue's length).
    pub fn waiting(&self) -> usize {
        self.queue.borrow().len()
    }

    /// The pool was cleared (not behind a load balancer): every checkout
    /// waiting fails, and with `interrupt` the connections in use of
    /// `generation` (the one cleared) or older are interrupted.
    pub fn cleared(&self, generation: u64, interrupt: bool) {
        self.clears.set(self.clears.get() + 1);
        if interrupt {
            let through = self
                .interrupted
                .get()
                .map_or(generation, |g| g.max(generation));
            self.interrupted.set(Some(through));
        }
        self.notify();
    }

    /// Whether a connection of `generation` is interrupted.
    pub fn is_interrupted(&self, generation: u64) -> bool {
        self.interrupted.get().is_some_and(|g| generation <= g)
    }

    /// Ready once a clear interrupts connections of `generation` (never, if none does).
    pub async fn interrupted(pool: Rc<InUse>, generation: u64) {
        loop {
            let changed = Changes::next(&pool.changes);
            if pool.is_interrupted(generation) {
                return;
            }
            changed.await;
        }
    }

    fn counter(&self, purpose: Purpose) -> Option<&Cell<usize>> {
        match purpose {
            Purpose::Operation => None,
            Purpose::Cursor => Some(&self.cursors),
            Purpose::Transaction => Some(&self.transactions),
        }
    }

    /// CMAP's WaitQueueTimeoutError for a pool at `max_pool_size`, with the
    /// Load Balancer spec's account of what holds its connections. It is a
    /// timeout of the checkout, which belongs to server selection (CSOT
    /// spec), so not a network error: nothing retries it.
    pub fn wait_queue_timeout(&self, max_pool_size: usize) -> Error {
        let (cursors, transactions) = (self.cursors.get(), self.transactions.get());
        let other = self.total().saturating_sub(cursors + transactions);
        let message = format!(
            "Timeout waiting for connection from the connection pool. maxPoolSize: \
             {max_pool_size}, connections in use by cursors: {cursors}, connections in use \
             by transactions: {transactions}, connections in use by other operations: {other}"
        );
        Error::new(ErrorKind::Timeout, message.clone())
            .caused_by(Error::new(ErrorKind::ServerSelection, message))
    }
}

impl Lease {
    pub fn set_purpose(&self, purpose: Purpose) {
        let pool = &self.pool;
        if let Some(c) = pool.counter(self.purpose.replace(purpose)) {
            c.set(c.get().saturating_sub(1));
        }
        if let Some(c) = pool.counter(purpose) {
            c.set(c.get() + 1);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.set_purpose(Purpose::Operation);
        let total = &self.pool.total;
        total.set(total.get().saturating_sub(1));
        self.pool.notify();
    }
}

/// What a checkin does with a connection: keep it idle, or close it.
pub fn checkin_outcome(
    broken: bool,
    current_generation: bool,
    idle: usize,
    max_pool_size: usize,
) -> Option<CloseReason> {
    if broken {
        Some(CloseReason::Error)
    } else if !current_generation {
        Some(CloseReason::Stale)
    } else if max_pool_size != 0 && idle >= max_pool_size {
        Some(CloseReason::Idle)
    } else {
        None
    }
}

/// One pool event (recorded when the client monitors commands).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolEvent {
    pub kind: PoolEventKind,
    /// The connection's id; 0 on pool-level events and checkout started/failed.
    pub connection_id: u64,
    pub server_address: String,
    /// On pending-response events: the request whose reply was drained; else 0.
    pub request_id: i32,
    /// Pending-response succeeded/failed: how long the drain took. Connection
    /// ready: since created. Checked out / checkout failed: since started.
    pub duration: Option<Duration>,
    /// Pending-response failed: why. Connection closed: a [`CloseReason`];
    /// checkout failed: a [`CheckOutFailedReason`].
    pub reason: Option<String>,
    /// Pending-response failed: whether the connection was closed.
    pub closed: bool,
    /// Connection closed for an error, checkout failed: the error, for the
    /// log message (events carry only the reason).
    pub error: Option<String>,
    /// Pool cleared behind a load balancer: the service cleared.
    pub service_id: Option<bson::oid::ObjectId>,
    /// Pool cleared: whether in-use connections were interrupted (a monitor's timeout).
    pub interrupt_in_use_connections: bool,
    /// Pool created: the pool options the URI gave (CMAP: the non-default ones).
    pub options: Option<bson::RawDocumentBuf>,
}

impl PoolEvent {
    pub fn new(kind: PoolEventKind, address: &str, connection_id: u64) -> PoolEvent {
        PoolEvent {
            kind,
            connection_id,
            server_address: address.to_string(),
            request_id: 0,
            duration: None,
            reason: None,
            closed: false,
            error: None,
            service_id: None,
            interrupt_in_use_connections: false,
            options: None,
        }
    }

    pub fn error(self, error: &Error) -> PoolEvent {
        PoolEvent {
            error: Some(error.to_string()),
            ..self
        }
    }

    pub fn took(self, duration: Duration) -> PoolEvent {
        PoolEvent {
            duration: Some(duration),
            ..self
        }
    }

    pub fn because(self, reason: &str) -> PoolEvent {
        PoolEvent {
            reason: Some(reason.to_string()),
            ..self
        }
    }
}

/// The recorded pool events (bounded; only when the client monitors or logs).
pub type PoolEvents = crate::monitoring::Recorder<PoolEvent>;

/// The CMAP spec's log messages ("Connection Pool Logging"), one per event
/// (the pending-response events have none): the reasons in the spec's words.
impl Loggable for PoolEvent {
    const COMPONENT: Component = Component::Connection;

    fn log_message(&self, cx: &Context) -> Option<LogMessage> {
        use PoolEventKind as K;
        let message = match self.kind {
            K::PendingResponseStarted | K::PendingResponseSucceeded | K::PendingResponseFailed => {
                return None
            }
            K::PoolCreated => "Connection pool created",
            K::PoolReady => "Connection pool ready",
            K::PoolCleared => "Connection pool cleared",
            K::PoolClosed => "Connection pool closed",
            K::ConnectionCreated => "Connection created",
            K::ConnectionReady => "Connection ready",
            K::ConnectionClosed => "Connection closed",
            K::ConnectionCheckOutStarted => "Connection checkout started",
            K::ConnectionCheckOutFailed => "Connection checkout failed",
            K::ConnectionCheckedOut => "Connection checked out",
            K::ConnectionCheckedIn => "Connection checked in",
        };
        let mut f = Fields::new(cx, Component::Connection, message).server(&self.server_address);
        if self.kind == K::PoolCreated {
            f = f.all(&cx.pool_options);
        }
        let per_connection = !matches!(
            self.kind,
            K::PoolCreated
                | K::PoolReady
                | K::PoolCleared
                | K::PoolClosed
                | K::ConnectionCheckOutStarted
                | K::ConnectionCheckOutFailed
        );
        if per_connection {
            f = f.int(cstr!("driverConnectionId"), self.connection_id as i64);
        }
        let reason = match (self.kind, self.reason.as_deref()) {
            (K::ConnectionClosed, Some("stale")) => {
                Some("Connection became stale because the pool was cleared")
            }
            (K::ConnectionClosed, Some("idle")) => Some(
                "Connection has been available but unused for longer than the configured max idle time",
            ),
            (K::ConnectionClosed, Some("error")) => {
                Some("An error occurred while using the connection")
            }
            (K::ConnectionClosed | K::ConnectionCheckOutFailed, Some("poolClosed")) => {
                Some("Connection pool was closed")
            }
            (K::ConnectionCheckOutFailed, Some("timeout")) => {
                Some("Wait queue timeout elapsed without a connection becoming available")
            }
            (K::ConnectionCheckOutFailed, Some("connectionError")) => {
                Some("An error occurred while trying to establish a new connection")
            }
            (_, other) => other,
        };
        if let Some(reason) = reason {
            f = f.str(cstr!("reason"), reason);
        }
        let failed = matches!(self.reason.as_deref(), Some("error" | "connectionError"));
        if failed {
            let error = self.error.as_deref().unwrap_or("the connection failed");
            f = f.text(cstr!("error"), error);
        }
        if let Some(d) = self.duration {
            f = f.duration(d);
        }
        if let Some(id) = self.service_id {
            f = f.str(cstr!("serviceId"), &id.to_hex());
        }
        f.finish()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn leases_count_connections_in_use_by_purpose_until_dropped() {
        let pool = Rc::new(InUse::default());
        let op = InUse::lease(&pool);
        let cursor = InUse::lease(&pool);
        cursor.set_purpose(Purpose::Cursor);
        let txn = InUse::lease(&pool);
        txn.set_purpose(Purpose::Transaction);
        assert_eq!(pool.total(), 3);
        let e = pool.wait_queue_timeout(3);
        assert!(e.is_timeout() && !e.is_network(), "{e:?}");
        assert!(e.message.contains(
            "maxPoolSize: 3, connections in use by cursors: 1, connections in use by \
             transactions: 1, connections in use by other operations: 1"
        ));
        drop((op, cursor));
        drop(txn);
        assert_eq!(pool.total(), 0);
        let e = pool.wait_queue_timeout(1);
        assert!(e
            .message
            .contains("cursors: 0, connections in use by transactions: 0"));
    }

    use super::*;

    fn logged(e: &PoolEvent) -> bson::RawDocumentBuf {
        let cx = Context {
            max_document_length: 1000,
            pool_options: bson::rawdoc! { "maxPoolSize": 5_i64 },
            topology_id: 1,
        };
        e.log_message(&cx).expect("a message").data
    }

    #[test]
    fn pool_messages_carry_the_spec_reasons_and_fields() {
        let created = logged(&PoolEvent::new(PoolEventKind::PoolCreated, "h:7", 0));
        assert_eq!(
            created.get_str("message").unwrap(),
            "Connection pool created"
        );
        assert_eq!(
            created.get_i64("maxPoolSize").unwrap(),
            5,
            "the URI's options"
        );
        assert_eq!(created.get_i64("serverPort").unwrap(), 7);
        assert!(created.get("driverConnectionId").unwrap().is_none());
        let stale = PoolEvent::new(PoolEventKind::ConnectionClosed, "h:7", 3)
            .because(CloseReason::Stale.as_str());
        let stale = logged(&stale);
        assert_eq!(
            stale.get_str("reason").unwrap(),
            "Connection became stale because the pool was cleared"
        );
        assert_eq!(stale.get_i64("driverConnectionId").unwrap(), 3);
        assert!(stale.get("error").unwrap().is_none(), "no error unless one");
        let failed = PoolEvent::new(PoolEventKind::ConnectionCheckOutFailed, "h:7", 0)
            .because(CheckOutFailedReason::ConnectionError.as_str())
            .error(&Error::network("connection refused"))
            .took(Duration::from_millis(2));
        let failed = logged(&failed);
        assert_eq!(
            failed.get_str("reason").unwrap(),
            "An error occurred while trying to establish a new connection"
        );
        assert!(failed
            .get_str("error")
            .unwrap()
            .contains("connection refused"));
        assert_eq!(failed.get_f64("durationMS").unwrap(), 2.0);
        let cx = Context {
            max_document_length: 1000,
            pool_options: bson::RawDocumentBuf::new(),
            topology_id: 1,
        };
        let pending = PoolEvent::new(PoolEventKind::PendingResponseStarted, "h:7", 3);
        assert!(pending.log_message(&cx).is_none(), "no message in the spec");
    }

    #[test]
    fn a_pool_logs_without_monitoring_and_only_its_component() {
        use crate::logging::{Level, LogOptions, Logger};
        let on = |connection| {
            let options = LogOptions {
                connection,
                ..Default::default()
            };
            Logger::new(&options, bson::RawDocumentBuf::new())
        };
        let log = on(Level::Debug);
        let mut events = PoolEvents::new(false).logging(log.clone());
        events.emit(|| PoolEvent::new(PoolEventKind::PoolReady, "h:1", 0));
        assert!(
            events.take().is_empty(),
            "no events kept without monitoring"
        );
        let messages = log.take();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].message, "Connection pool ready");
        let quiet = on(Level::Informational);
        let mut events = PoolEvents::new(false).logging(quiet.clone());
        events.emit(|| unreachable!("debug messages are off: nothing is built"));
        assert!(quiet.take().is_empty());
    }
    use crate::csot::LegacyTimeouts;

    const MS: u64 = 1_000_000;

    #[test]
    fn network_errors_and_timeouts_of_an_establishment_are_overloads_others_are_not() {
        for e in [Error::network("reset"), Error::timeout("hello")] {
            let e = label_establishment_error(e);
            assert!(crate::backpressure::is_overload(&e), "{e}");
            assert!(e.has_label("RetryableError"), "{e}");
        }
        let mut auth = Error::network("x");
        auth.kind = ErrorKind::Authentication;
        let auth = label_establishment_error(auth);
        assert!(!crate::backpressure::is_overload(&auth));
        let mut server = Error::network("x");
        server.kind = ErrorKind::Server;
        server.code = Some(91);
        assert!(!label_establishment_error(server).has_label("RetryableError"));
    }

    fn csot(now: Instant, ms: u64) -> OpTimeout {
        OpTimeout::start(now, Some(ms), LegacyTimeouts::default())
    }

    #[test]
    fn the_drain_is_bounded_by_the_window_and_the_new_operation() {
        let p = PendingResponse::timed_out(7, 3, Instant(1_000 * MS));
        // A short operation: its own deadline.
        let now = Instant(1_100 * MS);
        assert_eq!(
            p.step(now, &csot(now, 200)),
            DrainStep::Drain(Deadline::At(Instant(1_300 * MS)))
        );
        // A long one: the window's end (3 s after the timeout).
        assert_eq!(
            p.step(now, &csot(now, 60_000)),
            DrainStep::Drain(Deadline::At(Instant(4_000 * MS)))
        );
        // timeoutMS=0: the window alone.
        let unlimited = OpTimeout::start(now, Some(0), LegacyTimeouts::default());
        assert_eq!(
            p.drain_deadline(now, &unlimited),
            Deadline::At(Instant(4_000 * MS))
        );
        // No timeoutMS: serverSelectionTimeoutMS caps it.
        let legacy = OpTimeout::start(
            now,
            None,
            LegacyTimeouts {
                server_selection_ms: 500,
                ..LegacyTimeouts::default()
            },
        );
        assert_eq!(
            p.drain_deadline(now, &legacy),
            Deadline::At(Instant(1_600 * MS))
        );
    }

    #[test]
    fn past_the_window_an_aliveness_check_comes_first_and_restarts_it() {
        let mut p = PendingResponse::timed_out(7, 0, Instant(0));
        let later = Instant(3_000 * MS);
        assert_eq!(p.step(later, &csot(later, 100)), DrainStep::AlivenessCheck);
        p.alive(later, 1);
        assert_eq!((p.since, p.read), (later, 1));
        assert_eq!(
            p.step(later, &csot(later, 100)),
            DrainStep::Drain(Deadline::At(Instant(3_100 * MS)))
        );
    }

    #[test]
    fn a_timeout_inside_the_window_keeps_the_connection_anything_else_closes_it() {
        let p = PendingResponse::timed_out(7, 0, Instant(0));
        let timeout = Error::timeout("socket read");
        let inside = Instant(2_000 * MS);
        let outside = Instant(3_000 * MS);
        assert_eq!(p.after_failure(&timeout, inside), AfterDrain::KeepPending);
        assert_eq!(p.after_failure(&timeout, outside), AfterDrain::Close);
        let protocol = Error::protocol("reply answers request 8 but 7 was sent");
        assert_eq!(p.after_failure(&protocol, inside), AfterDrain::Close);
        let network = Error::network("connection closed by the server");
        assert_eq!(p.after_failure(&network, inside), AfterDrain::Close);
    }

    #[test]
    fn checkin_keeps_a_healthy_connection_and_closes_the_rest_with_their_reason() {
        assert_eq!(checkin_outcome(false, true, 0, 100), None);
        assert_eq!(checkin_outcome(false, true, 5, 0), None, "0: no limit");
        assert_eq!(
            checkin_outcome(true, true, 0, 100),
            Some(CloseReason::Error)
        );
        assert_eq!(
            checkin_outcome(true, false, 0, 100),
            Some(CloseReason::Error)
        );
        assert_eq!(
            checkin_outcome(false, false, 0, 100),
            Some(CloseReason::Stale)
        );
        assert_eq!(checkin_outcome(false, true, 2, 2), Some(CloseReason::Idle));
    }

    #[test]
    fn checkout_failure_reasons() {
        let reason = |e: &Error| CheckOutFailedReason::of(e).as_str();
        assert_eq!(reason(&Error::timeout("connect")), "timeout");
        assert_eq!(reason(&Error::network("refused")), "connectionError");
        assert_eq!(reason(&Error::protocol("bad hello")), "connectionError");
        let auth = Error::new(ErrorKind::Authentication, "bad password");
        assert_eq!(reason(&auth), "connectionError");
        assert_eq!(
            reason(&Error::new(ErrorKind::Closed, "closed")),
            "poolClosed"
        );
    }

    #[test]
    fn pool_event_builders() {
        let e = PoolEvent::new(PoolEventKind::ConnectionClosed, "h:1", 3)
            .because(CloseReason::Stale.as_str())
            .took(Duration::from_millis(2));
        assert_eq!(e.reason.as_deref(), Some("stale"));
        assert_eq!(e.duration, Some(Duration::from_millis(2)));
    }

    /// A future's one poll, with a waker that records whether it was woken.
    fn poll_once<F: std::future::Future>(
        f: std::pin::Pin<&mut F>,
        woken: &std::sync::Arc<Flag>,
    ) -> Poll<F::Output> {
        let waker = Waker::from(std::sync::Arc::clone(woken));
        f.poll(&mut std::task::Context::from_waker(&waker))
    }

    #[derive(Default)]
    struct Flag(std::sync::atomic::AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    impl Flag {
        fn take(&self) -> bool {
            self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[test]
    fn the_wait_queue_serves_in_arrival_order_and_a_ticket_dropped_anywhere_leaves_it() {
        let pool = Rc::new(InUse::default());
        let (a, b, c) = (
            InUse::enter(&pool),
            InUse::enter(&pool),
            InUse::enter(&pool),
        );
        assert!(a.is_first() && !b.is_first() && !c.is_first());
        assert_eq!(pool.waiting(), 3);
        // The second gives up (a timeout, a dropped future): the first stays first.
        let woken = std::sync::Arc::new(Flag::default());
        let mut next = std::pin::pin!(InUse::changed(&pool));
        assert!(poll_once(next.as_mut(), &woken).is_pending());
        drop(b);
        assert!(!woken.take(), "not the first: nobody is woken");
        assert!(a.is_first() && !c.is_first());
        // The first leaves: the next in line is woken and is first.
        drop(a);
        assert!(woken.take(), "the one behind is woken");
        assert!(poll_once(next.as_mut(), &woken).is_ready());
        assert!(c.is_first());
        let d = InUse::enter(&pool);
        assert!(!d.is_first(), "a newcomer waits behind");
        drop(c);
        assert!(d.is_first());
        drop(d);
        assert_eq!(pool.waiting(), 0);
    }

    #[test]
    fn a_clear_fails_the_waiting_tickets_only_and_interrupts_older_generations() {
        let pool = Rc::new(InUse::default());
        let before = InUse::enter(&pool);
        let woken = std::sync::Arc::new(Flag::default());
        let mut next = std::pin::pin!(InUse::changed(&pool));
        assert!(poll_once(next.as_mut(), &woken).is_pending());
        pool.cleared(3, false);
        assert!(woken.take(), "waiters are woken to fail at once");
        assert!(before.cleared());
        assert!(
            !InUse::enter(&pool).cleared(),
            "a later checkout is not failed"
        );
        assert!(!pool.is_interrupted(0), "no interruption without the flag");
        let mut interrupted = std::pin::pin!(InUse::interrupted(Rc::clone(&pool), 3));
        assert!(poll_once(interrupted.as_mut(), &woken).is_pending());
        pool.cleared(3, true);
        assert!(woken.take());
        assert!(poll_once(interrupted.as_mut(), &woken).is_ready());
        assert!(pool.is_interrupted(2) && pool.is_interrupted(3));
        assert!(
            !pool.is_interrupted(4),
            "connections made after the clear are not"
        );
        let e = pool_cleared("h:1", true);
        assert!(e.is_network() && !e.is_timeout(), "retryable: {e}");
        assert_eq!(
            e.message,
            "Connection to h:1 interrupted due to server monitor timeout"
        );
    }

    #[test]
    fn max_idle_time_perishes_connections_idle_that_long() {
        let since = Instant(1_000 * MS);
        let max = Some(Duration::from_millis(100));
        assert!(!idle_too_long(since, Instant(1_099 * MS), max));
        assert!(idle_too_long(since, Instant(1_100 * MS), max));
        assert!(
            !idle_too_long(since, Instant(9_000 * MS), None),
            "unset: never"
        );
    }

    #[test]
    fn only_commands_with_max_time_ms_leave_a_pending_connection() {
        assert!(keeps_pending(true));
        assert!(!keeps_pending(false));
    }
}

//! The executor: one place that runs every operation. It selects a server,
//! checks out a connection, adds `$db`, the Stable API fields, `lsid`,
//! `$clusterTime`, `txnNumber` and `maxTimeMS`, does the round trip under the operation's deadline,
//! records monitoring events, returns the connection to its pool, and
//! retries per the Retryable Reads/Writes and Client Backpressure specs.

use crate::backpressure;
use crate::client::inner::ClientInner;
use crate::conn::{next_request_id, Connection};
use crate::csot::OpTimeout;
use crate::deadline::Deadline;
use crate::error::check_ok_field;
use crate::error::{Error, ErrorKind, Result};
use crate::monitoring::{is_sensitive, redact_failure, CommandEvent, EventKind};
use crate::operation::Operation;
use crate::retryable::{after_failure, deprioritizes, may_retry, Failure, Retryability};
use crate::runtime;
use crate::sdam::TopologyType;
use crate::session::{cluster_time, Session};
use bson::{cstr, rawdoc, RawBsonRef, RawDocument, RawDocumentBuf};

/// Per-call context: the operation's time budget, its session, and (for
/// getMore/killCursors) the server it must go to.
pub struct Context<'a> {
    pub timeout: OpTimeout,
    pub session: Option<&'a Session>,
    pub pinned: Option<&'a str>,
}

/// What carries over from one attempt to the next.
struct Attempts {
    /// A retryable write's number, fixed at its first attempt.
    txn_number: Option<i64>,
    /// The selected server can retry this kind of operation.
    retry_supported: bool,
    /// The attempt failed in a way no retry can fix (refused before sending).
    final_error: bool,
    /// The server the latest attempt went to.
    failed_on: Option<String>,
    /// Servers a retry avoids where another is suitable (`retryable::deprioritizes`).
    deprioritized: Vec<String>,
    /// The attempt carried `startTransaction`.
    started_txn: bool,
}

/// Runs `op` with the context's session, or an implicit one.
/// A final error gets its settled kind (`Error::settled`: duplicate key,
/// write concern) only here, after the retry loop looked at its code.
pub async fn execute<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
) -> Result<O::Output> {
    let result = match ctx.session {
        // A withTransaction body's deadline bounds every operation on its session.
        Some(s) => {
            let ctx = Context {
                timeout: s.bound(ctx.timeout),
                ..*ctx
            };
            run(client, op, &ctx).await
        }
        None => {
            let implicit = client.implicit_session();
            let ctx = Context {
                session: Some(&implicit),
                ..*ctx
            };
            run(client, op, &ctx).await
        }
    };
    result.map_err(Error::settled)
}

/// Runs `op` with no session at all (endSessions itself).
pub async fn execute_without_session<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
) -> Result<O::Output> {
    run(client, op, ctx).await
}

/// The retry loop: once without timeoutMS, as often as the deadline allows with it.
async fn run<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
) -> Result<O::Output> {
    client.check_open()?;
    let in_txn = ctx.session.is_some_and(Session::in_transaction);
    // A cursor's getMore goes where its cursor is, whatever it was opened with.
    if in_txn && ctx.pinned.is_none() && !op.ends_transaction() {
        crate::session::transaction::check_read(&op.criteria())?;
    }
    // A session used outside a transaction is no longer pinned (Transactions spec).
    if let (false, false, Some(s)) = (in_txn, op.ends_transaction(), ctx.session) {
        s.unpin();
    }
    let kind = match op.retryability() {
        _ if ctx.pinned.is_some() => Retryability::None,
        // Inside a transaction only commit and abort are retried.
        _ if in_txn && !op.ends_transaction() => Retryability::None,
        Retryability::Read if client.retry_reads => Retryability::Read,
        // Commit and abort retry whatever retryWrites says (Transactions spec).
        Retryability::Write if client.retry_writes || op.ends_transaction() => Retryability::Write,
        _ => Retryability::None,
    };
    // Under CSOT (timeoutMS=0 included) retries go on until success, a
    // non-retryable error or the deadline (CSOT spec, "Retryability").
    let csot = ctx.timeout.is_csot();
    let mut state = Attempts {
        txn_number: None,
        retry_supported: true,
        final_error: false,
        failed_on: None,
        deprioritized: Vec::new(),
        started_txn: false,
    };
    let mut previous: Option<Error> = None;
    let mut attempts = 0;
    let mut overload = backpressure::Policy::new(client.max_adaptive_retries);
    loop {
        attempts += 1;
        let err = match attempt(client, op, ctx, kind, &mut state).await {
            Ok(out) => return Ok(out),
            Err(mut e) => {
                // A network error inside a transaction: the whole transaction may be retried.
                if in_txn && !op.ends_transaction() && transient(&e) {
                    e.add_label("TransientTransactionError");
                }
                // The transaction may be retried as a whole, on any mongos.
                if let (true, Some(s)) = (e.has_label("TransientTransactionError"), ctx.session) {
                    s.unpin();
                }
                // A network error on a retryable write says so (Retryable Writes spec).
                if kind == Retryability::Write && state.retry_supported && e.is_network() {
                    e.add_label("RetryableWriteError");
                }
                e
            }
        };
        let expired = ctx.timeout.deadline().is_expired(runtime::now());
        // The selected server could not retry this write: no retry.
        let kind = match state.retry_supported {
            true => kind,
            false => Retryability::None,
        };
        let verdict = after_failure(
            kind,
            Failure {
                err: &err,
                previous: previous.take(),
                attempts,
                csot,
                expired,
                unsent: state.final_error,
            },
        );
        if state.final_error {
            return Err(verdict.report);
        }
        // Whether the Retryable Reads/Writes rules count this error at all,
        // whatever the attempt count (the backpressure spec asks).
        let retryable = may_retry(kind, &err, 1, true, expired);
        // Client Backpressure has the last word: an overload error may be
        // retried (after its backoff) where the retryable specs say no, and
        // caps every retry once the server said it is overloaded.
        let again = backpressure_wait(
            client,
            op,
            ctx,
            &mut overload,
            &err,
            attempts,
            verdict.retry,
            retryable,
            state.started_txn,
        )
        .await;
        if !again {
            return Err(verdict.report);
        }
        // A retried commit or abort may go to another mongos (Transactions spec).
        if let (true, Some(s)) = (op.ends_transaction(), ctx.session) {
            s.unpin();
        }
        let topology = client.topology.borrow().description.kind;
        if deprioritizes(topology, &err, client.overload_retargeting) {
            state.deprioritized.extend(state.failed_on.take());
        }
        previous = Some(verdict.report);
    }
}

/// Client Backpressure: whether to retry after `err`, the Retryable
/// Reads/Writes verdict (`allows`, `retryable`) folded in; sleeps an overload
/// error's backoff (never past the deadline) and readies the resend before
/// saying yes.
#[allow(clippy::too_many_arguments)]
async fn backpressure_wait<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
    policy: &mut backpressure::Policy,
    err: &Error,
    attempts: u32,
    allows: bool,
    retryable: bool,
    started_txn: bool,
) -> bool {
    let now = runtime::now();
    let deadline = ctx.timeout.deadline();
    let failed = backpressure::Failed {
        error: err,
        attempts,
        retry_policy_allows: allows,
        retry_policy_retryable: retryable,
        gate_open: op
            .overload_gate()
            .open(client.retry_reads, client.retry_writes),
        now,
        deadline,
        jitter: runtime::jitter(),
    };
    match policy.next(&failed) {
        None => false,
        Some(wait) => {
            if !wait.is_zero() {
                runtime::sleep_until(Deadline::after(now, wait).min(deadline)).await;
            }
            if backpressure::is_overload(err) {
                // Refused at the door: the server saw neither the command
                // nor its transaction's start; the retry resends both as they were.
                op.before_overload_retry();
                if let (true, Some(s)) = (started_txn, ctx.session) {
                    s.restart_transaction_after_overload();
                }
            }
            true
        }
    }
}

/// One attempt: select, check out, send, receive.
async fn attempt<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
    kind: Retryability,
    state: &mut Attempts,
) -> Result<O::Output> {
    // The topology is borrowed a statement at a time: other operations of
    // this client run while this one waits on I/O.
    let topology = &client.topology;
    // computedServerSelectionTimeout: selection, then checkout and connect.
    let selection = ctx.timeout.selection_deadline(runtime::now());
    let criteria = op.criteria();
    // A transaction on a mongos runs on the one its first command went to.
    let txn_session = ctx
        .session
        .filter(|s| s.in_transaction() || op.ends_transaction());
    let address = match (ctx.pinned, txn_session.and_then(Session::pinned_server)) {
        (Some(a), _) => a.to_string(),
        (None, Some(a)) => a,
        (None, None) => {
            let log = crate::sdam::selection::SelectionLog {
                log: &client.log,
                operation: op.name(),
                // The id the command sent to the selected server takes.
                operation_id: client.peek_operation_id(),
                criteria: &criteria,
            };
            let deprioritized = &state.deprioritized;
            let a = topology
                .select(&criteria, &ctx.timeout, selection, deprioritized, &log)
                .await?;
            // The topology type is known once selection found a server. A
            // commit or abort after an unpin is not pinned again.
            let starts_pin = txn_session.filter(|s| s.in_transaction());
            let pins = pins_transactions(topology.borrow().description.kind);
            if let (Some(s), true) = (starts_pin, pins) {
                s.pin(&a);
            }
            a
        }
    };
    state.failed_on = Some(address.clone());
    // Behind a load balancer a pinned transaction keeps its connection too,
    // and so does an open cursor (Load Balancer spec).
    let lb = topology.borrow().description.kind == TopologyType::LoadBalanced;
    let holder = txn_session.filter(|_| lb);
    let cursor = op.cursor_id().filter(|_| lb && holder.is_none());
    let held = match holder {
        Some(s) => s.take_connection(),
        None => cursor.and_then(|id| topology.borrow_mut().take_cursor_connection(id)),
    };
    // A read may ride behind a cold connection's SCRAM proof (auth::command_may_follow_proof).
    let read_only = op.retryability() == Retryability::Read && txn_session.is_none();
    let mut conn = match held {
        Some(held) => held,
        None => {
            topology
                .checkout(&address, &ctx.timeout, selection, read_only)
                .await?
        }
    };
    // `keep`: the cursor the connection stays pinned to.
    let give_back = |conn: Connection, keep: Option<i64>| match (holder, keep) {
        (Some(s), _) if s.pinned_server().is_some() => s.hold_connection(conn),
        (None, Some(id)) if lb => client
            .topology
            .borrow_mut()
            .hold_cursor_connection(id, conn),
        _ => client.topology.borrow_mut().checkin(conn),
    };
    let (min_rtt, read_preference) = {
        let mut t = topology.borrow_mut();
        // getMore/killCursors go where their cursor is, as they are.
        let read_preference = match ctx.pinned {
            Some(_) => None,
            None => crate::sdam::selection::read_preference_document(
                t.description.kind,
                t.description
                    .server(&address)
                    .map_or(crate::sdam::ServerType::Unknown, |s| s.kind),
                &criteria.resolve(&t.description),
            ),
        };
        (t.min_rtt(&address), read_preference)
    };

    let prepared = prepare(
        client,
        op,
        ctx,
        (kind, state),
        &conn,
        (read_preference, min_rtt),
    );
    let Prepared {
        cmd,
        sent_max_time,
        started,
    } = match prepared {
        Ok(p) => p,
        Err(e) => {
            // A checkout left open for this command ends without it.
            topology
                .end_deferred_checkout(&mut conn, &ctx.timeout, None)
                .await?;
            give_back(conn, cursor);
            return Err(e);
        }
    };
    let body = &cmd.body;
    let sequences: Vec<(&str, &[u8])> = cmd
        .sequences
        .iter()
        .map(|(id, docs)| (id.as_str(), docs.bytes()))
        .collect();

    let sensitive = is_sensitive(&cmd.name, body);
    let kills = cmd.name == "killCursors";
    let op_id = client.next_operation_id();
    let (connection_id, server_connection_id) = (conn.id, conn.hello.connection_id);
    let (generation, max_wire_version) = (conn.generation, conn.hello.max_wire_version);
    let service_id = conn.hello.service_id;
    let event = |kind,
                 request_id,
                 duration,
                 command: Option<RawDocumentBuf>,
                 reply: Option<RawDocumentBuf>,
                 failure| {
        client.record(|| CommandEvent {
            kind,
            command_name: cmd.name.clone(),
            database_name: cmd.db.clone(),
            request_id,
            operation_id: op_id,
            connection_id,
            server_connection_id,
            server_address: address.clone(),
            service_id,
            duration,
            command: command.map(|c| if sensitive { RawDocumentBuf::new() } else { c }),
            reply: reply.map(|r| if sensitive { RawDocumentBuf::new() } else { r }),
            failure,
        })
    };

    let request_id = next_request_id();
    // A checkout left open (`read_only`): the command goes in the proof's
    // write, and the checkout ends (ready, checked out) before it is
    // announced started; a failed proof fails the checkout, and the
    // command is never announced.
    let behind = match conn.deferred.is_some() {
        false => false,
        true => {
            // The request is out: a caller dropped here leaves the server holding it.
            let in_flight = InFlight {
                client,
                session: ctx.session,
                address: &address,
                connection_id: None,
            };
            let command = (request_id, body.as_ref(), sequences.as_slice());
            let sent = topology
                .end_deferred_checkout(&mut conn, &ctx.timeout, Some(command))
                .await;
            std::mem::forget(in_flight);
            sent?
        }
    };
    if client.monitoring() {
        let shown = with_sequences(body, &cmd.sequences);
        event(
            EventKind::Started,
            request_id,
            None,
            Some(shown),
            None,
            None,
        );
    }
    let deadline = ctx.timeout.io_deadline(started);
    // Armed while the request is in flight: a caller dropped here leaves the
    // server holding it.
    let in_flight = InFlight {
        client,
        session: ctx.session,
        address: &address,
        connection_id: Some(connection_id),
    };
    // WASI 0.3: a clear with interruptInUseConnections ends the round trip
    // (the connection is then stale: closed at check-in, not abandoned).
    let pool = crate::cmap::InUse::of(conn.lease.as_ref());
    let round_trip = async {
        match behind {
            true => Ok(()),
            false => conn.send(request_id, body, &sequences, deadline).await,
        }?;
        conn.receive(request_id, deadline).await
    };
    let result = crate::topology::interruptible(pool, (&address, generation), round_trip).await;
    std::mem::forget(in_flight);
    let elapsed = runtime::now().since(started);

    let failed = |e: &Error, reply: Option<RawDocumentBuf>| {
        if client.monitoring() {
            event(
                EventKind::Failed,
                request_id,
                Some(elapsed),
                None,
                reply,
                Some(if sensitive {
                    redact_failure(e)
                } else {
                    e.clone()
                }),
            );
        }
    };
    // Servers before 4.4 leave labelling retryable write errors to the driver.
    let result = match result {
        Ok(reply) if kind == Retryability::Write && state.retry_supported => {
            crate::retryable::label_legacy_reply(reply, max_wire_version, conn.hello.is_mongos)
        }
        other => other,
    };
    match result {
        Ok(reply) => {
            // An open cursor keeps the connection; a getMore's error does too
            // (until the cursor is closed), a killCursors never does.
            let head = Head::read(&reply);
            let ok = check_ok_field(&reply, head.ok);
            let keep = match (kills, head.open_cursor()) {
                (true, _) => None,
                (false, Some(id)) => Some(id),
                (false, None) => cursor.filter(|_| ok.is_err()),
            };
            gossip(client, ctx.session, &reply, &head);
            if let Err(e) = ok {
                let e = ctx.timeout.transform(e);
                // The pool is cleared before the connection comes back, which
                // a clear then closes as stale (CMAP event order).
                client.topology.borrow_mut().handle_server_error(
                    &address,
                    (generation, service_id),
                    max_wire_version,
                    &e,
                );
                give_back(conn, keep);
                failed(&e, Some(reply));
                return Err(e);
            }
            give_back(conn, keep);
            if client.monitoring() {
                // Command monitoring: an unacknowledged write's reply is shown as {ok: 1}.
                let shown = match crate::concern::sends_unacknowledged(body) {
                    true => rawdoc! { "ok": 1 },
                    false => reply.clone(),
                };
                event(
                    EventKind::Succeeded,
                    request_id,
                    Some(elapsed),
                    None,
                    Some(shown),
                    None,
                );
            }
            let large = crate::csot::decoding_is_checked(reply.as_bytes().len());
            let output = op
                .handle_reply(reply, &address)
                .map_err(|e| ctx.timeout.transform(e))?;
            // Taking a large reply apart costs time in its size (millions of
            // tiny documents: a fifth of a find), so the deadline holds for it
            // too. Not for a reply that leaves a cursor open: the cursor
            // goes back to the caller, whose next call meets the deadline.
            if large && keep.is_none() {
                ctx.timeout
                    .deadline()
                    .check(runtime::now(), "reply decoding")?;
            }
            Ok(output)
        }
        Err(e) => {
            // SDAM: a failed socket (not a timeout) or a garbled reply.
            if (e.is_network() && !e.is_timeout()) || e.kind == ErrorKind::Protocol {
                client.topology.borrow_mut().handle_network_error(
                    &address,
                    (generation, service_id),
                    &e,
                );
                // The server may still hold the session's state.
                if let Some(s) = ctx.session {
                    s.mark_dirty();
                }
            }
            // A read that timed out after a command with maxTimeMS left the
            // connection pending: it returns to the pool and its reply is
            // drained at the next checkout (cmap.rs). Any other failed
            // socket is closed when checked in.
            if !(conn.pending().is_some() && crate::cmap::keeps_pending(sent_max_time)) {
                conn.abandon_pending();
            }
            give_back(conn, cursor.filter(|_| !kills));
            failed(&e, None);
            Err(e)
        }
    }
}

/// A command ready to send (its body complete).
struct Prepared {
    cmd: crate::operation::Command,
    /// CSOT's maxTimeMS is on it.
    sent_max_time: bool,
    /// The clock reading of the CSOT check: the round trip's start.
    started: crate::deadline::Instant,
}

/// Builds the command for `conn`'s server: `$db`, the Stable API, the read
/// preference, the session's fields, and CSOT's `maxTimeMS`. Every command
/// is checked before it is sent (csot.rs): a refused one is never sent, and
/// the error is final.
fn prepare<O: Operation>(
    client: &ClientInner,
    op: &mut O,
    ctx: &Context<'_>,
    (kind, state): (Retryability, &mut Attempts),
    conn: &Connection,
    (read_preference, min_rtt): (Option<RawDocumentBuf>, std::time::Duration),
) -> Result<Prepared> {
    let crate::operation::Command {
        name,
        db,
        body,
        sequences,
    } = op.build(&conn.hello)?;
    let mut body = crate::operation::strip_raw_data(body, conn.hello.max_wire_version)?;
    body.append(cstr!("$db"), db.as_str());
    // The Stable API goes on every command, getMore and transactions included.
    crate::versioned_api::apply(client.server_api.as_ref(), &mut body);
    if let Some(pref) = read_preference {
        body.append(cstr!("$readPreference"), pref);
    }
    attach_session(
        client,
        conn,
        ctx.session,
        kind,
        CommandKind {
            name: &name,
            ends_transaction: op.ends_transaction(),
            causally_consistent: op.causally_consistent(),
        },
        state,
        &mut body,
    )?;
    let mut sent_max_time = false;
    // One reading of the clock for the check and the round trip's start.
    let started = runtime::now();
    match ctx
        .timeout
        .before_send(started, min_rtt, op.sends_max_time())
    {
        Ok(Some(ms)) => {
            body.append(cstr!("maxTimeMS"), ms as i64);
            sent_max_time = true;
        }
        Ok(None) => {}
        Err(e) => {
            state.final_error = true;
            return Err(e);
        }
    }
    let cmd = crate::operation::Command {
        name,
        db,
        body,
        sequences,
    };
    Ok(Prepared {
        cmd,
        sent_max_time,
        started,
    })
}

/// A command in flight whose future was dropped (its caller cancelled, e.g.
/// a serverless host whose HTTP client went away) between sending and the
/// whole reply: the connection is closed as it drops, never pooled, and the
/// session may hold server state (a running command, a transaction), so it
/// is not reused (as after a network error). Forgotten once the exchange ends.
struct InFlight<'a> {
    client: &'a ClientInner,
    session: Option<&'a Session>,
    address: &'a str,
    /// `None` while its checkout is still open (that checkout's own guards
    /// announce the connection closed and the checkout failed).
    connection_id: Option<u64>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // `try_`: a drop during a panic's unwinding must not panic again.
        if let (Some(id), Ok(mut t)) = (self.connection_id, self.client.topology.try_borrow_mut()) {
            t.abandoned(self.address, id);
        }
        if let Some(s) = self.session {
            s.mark_dirty();
        }
    }
}

/// What the session rules need to know of the command being sent.
struct CommandKind<'a> {
    name: &'a str,
    ends_transaction: bool,
    causally_consistent: bool,
}

/// `lsid` when the server supports sessions, `$clusterTime` when one is
/// known, and a retryable write's `txnNumber` when the server can retry it.
fn attach_session(
    client: &ClientInner,
    conn: &Connection,
    session: Option<&Session>,
    kind: Retryability,
    kind_of: CommandKind<'_>,
    state: &mut Attempts,
    body: &mut RawDocumentBuf,
) -> Result<()> {
    let supports_sessions = conn.hello.logical_session_timeout_minutes.is_some();
    if let Some(s) = session {
        if supports_sessions {
            s.apply_to(body)?;
        } else if !s.is_implicit() {
            return Err(Error::invalid_argument(format!(
                "the server at {} does not support sessions",
                conn.address
            )));
        }
    }
    let known = client.cluster_time.borrow().clone();
    if let Some(ct) = cluster_time::latest(known, session.and_then(Session::cluster_time)) {
        body.append(cstr!("$clusterTime"), ct);
    }
    if let Some(txn) = session.and_then(|s| s.txn_fields(kind_of.ends_transaction)) {
        body.append(cstr!("txnNumber"), txn.txn_number);
        state.started_txn = txn.start;
        if txn.start {
            body.append(cstr!("startTransaction"), true);
            // The first command of a transaction carries its read concern, and in a
            // causally consistent session `afterClusterTime` whatever the command.
            let after = session.and_then(Session::after_cluster_time);
            let rc = match after {
                Some(t) => Some(crate::causal_consistency::merged(
                    txn.read_concern.as_deref(),
                    t,
                )?),
                None => txn.read_concern,
            };
            if let Some(rc) = rc {
                body.append(cstr!("readConcern"), rc);
            }
        }
        body.append(cstr!("autocommit"), false);
        if let (true, Some(token)) = (
            kind_of.ends_transaction,
            session.and_then(Session::recovery_token),
        ) {
            body.append(cstr!("recoveryToken"), token);
        }
        return Ok(());
    }
    let snapshot_rc = session
        .filter(|_| crate::session::reads_at_snapshot(kind_of.name))
        .and_then(Session::snapshot_read_concern);
    if let Some(rc) = snapshot_rc {
        // Snapshot Reads spec: on every command the session runs (the server
        // refuses the ones that cannot read at a snapshot), from 5.0.
        if conn.hello.max_wire_version < crate::handshake::SNAPSHOT_MIN_WIRE_VERSION {
            return Err(Error::invalid_argument(
                "snapshot reads require MongoDB 5.0 or later",
            ));
        }
        crate::concern::set(body, crate::concern::READ, rc)?;
        return Ok(());
    }
    let after = session.and_then(Session::after_cluster_time);
    let causal = kind_of.causally_consistent
        && crate::causal_consistency::takes_after_cluster_time(kind_of.name);
    if let (true, false, Some(t)) = (causal, kind_of.ends_transaction, after) {
        // Unacknowledged writes get no operationTime back, so none is sent either.
        if !crate::concern::sends_unacknowledged(body) {
            crate::causal_consistency::apply(body, t)?;
        }
    }
    if kind == Retryability::Write {
        // Retryable writes need sessions and a replica set or mongos.
        let replicated = conn.hello.set_name.is_some() || conn.hello.is_mongos;
        // Unacknowledged writes are never retryable (no txnNumber either).
        state.retry_supported = supports_sessions
            && replicated
            && session.is_some()
            && !crate::concern::sends_unacknowledged(body);
        if let (true, Some(s)) = (state.retry_supported, session) {
            let n = match state.txn_number {
                Some(n) => n,
                None => *state.txn_number.insert(s.next_txn_number()?),
            };
            body.append(cstr!("txnNumber"), n);
        }
    }
    Ok(())
}

/// Topologies whose transactions are pinned to one server: a mongos keeps a
/// transaction's state that the others do not know (Transactions spec), and
/// a load balancer's connections may reach any mongos (Load Balancer spec).
fn pins_transactions(kind: TopologyType) -> bool {
    matches!(kind, TopologyType::Sharded | TopologyType::LoadBalanced)
}

/// Errors that leave a transaction retryable as a whole (Transactions spec).
fn transient(e: &Error) -> bool {
    e.is_network() || e.is_selection_failure()
}

/// Keeps the greatest `$clusterTime` and the session's `operationTime`.
fn gossip(client: &ClientInner, session: Option<&Session>, reply: &RawDocument, head: &Head) {
    if let Some(ct) = head.cluster_time {
        cluster_time::advance(&mut client.cluster_time.borrow_mut(), ct.to_owned());
        if let Some(s) = session {
            s.advance_cluster_time(ct.to_owned());
        }
    }
    if let (Some(t), Some(s)) = (head.operation_time, session) {
        s.advance_operation_time(t);
    }
    if let Some(s) = session {
        s.note_snapshot_time(reply);
    }
    // A mongos names the shard that can tell a transaction's outcome (Transactions spec).
    if let (Some(token), Some(s)) = (head.recovery_token, session) {
        s.set_recovery_token(token.to_owned());
    }
}

/// The top-level fields of a reply the executor reads, found in one scan.
struct Head<'a> {
    ok: Option<RawBsonRef<'a>>,
    cluster_time: Option<&'a RawDocument>,
    operation_time: Option<bson::Timestamp>,
    recovery_token: Option<&'a RawDocument>,
    cursor: Option<&'a RawDocument>,
}

impl<'a> Head<'a> {
    fn read(reply: &'a RawDocument) -> Self {
        let [ok, cluster_time, operation_time, recovery_token, cursor] = crate::wire::raw::get_all(
            reply,
            [
                "ok",
                "$clusterTime",
                "operationTime",
                "recoveryToken",
                "cursor",
            ],
        );
        Head {
            ok,
            cluster_time: cluster_time.and_then(|v| v.as_document()),
            operation_time: operation_time.and_then(|v| v.as_timestamp()),
            recovery_token: recovery_token.and_then(|v| v.as_document()),
            cursor: cursor.and_then(|v| v.as_document()),
        }
    }

    /// The id of the open cursor the reply describes (none when it is exhausted).
    fn open_cursor(&self) -> Option<i64> {
        match crate::wire::raw::get(self.cursor?, "id")? {
            RawBsonRef::Int64(id) if id != 0 => Some(id),
            RawBsonRef::Int32(id) if id != 0 => Some(i64::from(id)),
            _ => None,
        }
    }
}

/// Monitoring shows a command with its document sequences folded back in,
/// as the command monitoring spec requires.
fn with_sequences(
    body: &RawDocumentBuf,
    sequences: &[(&'static bson::raw::CStr, crate::wire::Slice)],
) -> RawDocumentBuf {
    let mut out = body.clone();
    for (id, docs) in sequences {
        let mut arr = bson::RawArrayBuf::new();
        for d in docs.iter() {
            arr.push(d);
        }
        out.append(*id, arr);
    }
    out
}

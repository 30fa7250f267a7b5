//! What to do with one command: mongod's order of checks (lookup, session, fail points,
//! replica-set role) and the replies the proxy makes itself.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use bson::{doc, Document};

use super::{Action, Conn};
use crate::admin;
use crate::api_version;
use crate::auth;
use crate::codes::{self, error_doc, with_labels};
use crate::commands::{self, canonical};
use crate::failpoint as fp;
use crate::server::lock;
use crate::topology::{HelloRequest, Role};
use crate::version_behaviour::{self, Refusal};

/// Longest block/deadline honoured, so that absurd values cannot overflow an `Instant`.
const MAX_WAIT_MS: u64 = 24 * 3600 * 1000;

pub(super) fn after(start: Instant, ms: u64) -> Instant {
    start + Duration::from_millis(ms.min(MAX_WAIT_MS))
}

/// How often `waitForFailPoint` looks at the count again.
const POLL_FAIL_POINT: Duration = Duration::from_millis(2);

fn not_found(name: &str) -> Document {
    error_doc(codes::FAIL_POINT_SET_FAILED, &format!("{name} not found"))
}

/// Commands the proxy answers itself.
const LOCAL: &[&str] = &[
    "hello",
    "buildInfo",
    "getCmdLineOpts",
    "getParameter",
    "setParameter",
    "hostInfo",
    "connectionStatus",
    "whatsmyuri",
    "startSession",
    "killAllSessions",
    "killAllSessionsByPattern",
    "killSessions",
    "refreshSessions",
    "replSetGetStatus",
    "replSetStepDown",
    "replSetFreeze",
    "saslStart",
    "saslContinue",
    "authenticate",
    "logout",
    "createUser",
    "updateUser",
    "dropUser",
    "usersInfo",
    "dropAllUsersFromDatabase",
];

/// The proxy's own admin commands: not counted, never subject to failpoints.
const PROXY_ADMIN: &[&str] = &[
    "proxyStats",
    "proxyResetStats",
    "proxyStepDown",
    "proxySetVersion",
];

pub(super) enum Waited {
    Done,
    Expired,
    Stopped,
    /// The client hung up: mongod interrupts such an operation (ClientDisconnect), so it
    /// never runs (e.g. a write whose client timed out while it was blocked).
    ClientGone,
}

/// How often a blocked command looks whether its client is still there.
const CLIENT_CHECK: Duration = Duration::from_millis(2);

impl Conn {
    /// mongod's order: look the command up, check the session, fail points, then run it.
    pub(super) fn dispatch(
        &mut self,
        name: &str,
        db: &str,
        body: &Document,
        sequences: &[(String, Vec<Document>)],
        received: Instant,
    ) -> Action {
        if PROXY_ADMIN.contains(&name) {
            return Action::Reply(self.proxy_admin(name, body));
        }
        lock(&self.shared.stats).command(name);
        // getnonce (MONGODB-CR's first step) is gone from 6.2 on.
        let getnonce = name == "getnonce" && self.shared.version.get().array[..2] < [6, 2][..];
        let local =
            LOCAL.contains(&canonical(name)) || api_version::is_test_command(name) || getnonce;
        let routing = self.role() == Role::Mongos && crate::mongos::is_router_command(name);
        let known = local
            || routing
            || name == "configureFailPoint"
            || name == "waitForFailPoint"
            || commands::is_forwarded(name, self.shared.version.get().max_wire)
            || (commands::is_search_index_command(name, body)
                && self.shared.version.get().max_wire >= 21);
        if !known {
            return Action::Reply(error_doc(
                codes::COMMAND_NOT_FOUND,
                &format!("no such command: '{name}'"),
            ));
        }
        if let Some(refusal) = self.auth_gate(name, db) {
            return Action::Reply(refusal);
        }
        self.vivify_session(body);
        if name == "configureFailPoint" {
            return Action::Reply(self.configure_fail_point(db, body));
        }
        if name == "waitForFailPoint" {
            return Action::Reply(self.wait_for_fail_point(db, body, received));
        }
        if commands::is_hello(name) && !self.handshake_done {
            // Client metadata is only accepted on the first hello of a connection.
            self.handshake_done = true;
            self.app_name = body
                .get_document("client")
                .and_then(|c| c.get_document("application"))
                .and_then(|a| a.get_str("name"))
                .ok()
                .map(str::to_string);
            self.internal_client = body.contains_key("internalClient");
            // Set the backend connection up now, as mongod does during its handshake:
            // otherwise the connect and the backend's first command on it are charged to
            // the client's first command, inside its socket timeout (20 ms in a CSOT
            // deprecated-options test). A failure here is met again by the first forward.
            if self.warm_backend().is_err() {
                self.backend = None;
            }
        }
        if let Err(reply) = api_version::check(name, body, api_version::ACCEPT_API_VERSION_2) {
            return Action::Reply(reply);
        }
        if self.role() == Role::Standalone && body.contains_key("txnNumber") {
            let msg = "Transaction numbers are only allowed on a replica set member or mongos";
            return Action::Reply(error_doc(codes::ILLEGAL_OPERATION, msg));
        }
        // What the presented version cannot parse fails before fail points; what it cannot
        // store fails as write errors when the command runs (below).
        let version = self.shared.version.get();
        let write_errors = match version_behaviour::refusal(&version, name, body, sequences) {
            Some(Refusal::Command(reply)) => return Action::Reply(reply),
            Some(Refusal::Statements(errors)) => Some(errors),
            // What mongod of any version refuses to store (insert.rs).
            None => crate::insert::dollar_id_errors(body, sequences),
        };
        let deadline = commands::max_time_ms(name, body).map(|ms| after(received, ms));
        let change_stream = self.is_change_stream(name, body);
        if let Some(action) = self.fail_points(name, db, body, deadline, change_stream) {
            return action;
        }
        let standalone = self.role() == Role::Standalone;
        if let Some(refusal) = crate::cluster_time::snapshot_refusal(standalone, name, body) {
            return Action::Reply(refusal);
        }
        if standalone && commands::is_change_stream_aggregate(name, body) {
            let msg = "The $changeStream stage is only supported on replica sets";
            return Action::Reply(error_doc(codes::CHANGE_STREAM_NEEDS_REPLICA_SET, msg));
        }
        if commands::is_search_index_command(name, body) {
            // A mongod without Atlas Search (nx-27017 has none either).
            let msg = "Using Atlas Search Database Commands and the $listSearchIndexes \
                       aggregation stage requires additional configuration. Please connect to \
                       Atlas or an AtlasCLI local deployment to enable. For more information on \
                       how to connect, see https://dochub.mongodb.org/core/atlas-cli-deploy-local-reqs.";
            return Action::Reply(error_doc(codes::SEARCH_NOT_ENABLED, msg));
        }
        if routing {
            return Action::Reply(crate::mongos::router_command(name, db));
        }
        if commands::is_hello(name) {
            return self.hello(name, db, body);
        }
        if local {
            return Action::Reply(self.local_command(name, db, body));
        }
        let role = self.role();
        if matches!(role, Role::Secondary | Role::Arbiter) {
            let info = self.info(name, db, body);
            let state_change = self.state_change_error_version();
            let refuse = |code: i32, msg: &str| {
                let labels = fp::error_labels(&info, Some(code), None, change_stream);
                let mut reply = with_labels(error_doc(code, msg), labels);
                if let Some(tv) = &state_change {
                    reply.insert("topologyVersion", tv.clone());
                }
                Action::Reply(reply)
            };
            let txn_end = matches!(name, "commitTransaction" | "abortTransaction");
            // From 5.0 a secondary runs an aggregate's $out or $merge, writing through the
            // primary, when the client allows it to read.
            let secondary_write = canonical(name) == "aggregate"
                && version.max_wire >= 13
                && commands::secondary_ok(body);
            if (commands::is_write(name, body) && !secondary_write) || txn_end {
                return refuse(codes::NOT_WRITABLE_PRIMARY, "not primary");
            }
            if role == Role::Arbiter && commands::is_read(name) {
                return refuse(
                    codes::NOT_PRIMARY_OR_SECONDARY,
                    "node is not in primary or recovering state",
                );
            }
            if commands::is_read(name) && !commands::secondary_ok(body) {
                return refuse(
                    codes::NOT_PRIMARY_NO_SECONDARY_OK,
                    "not primary and secondaryOk=false",
                );
            }
        }
        if let Some(errors) = write_errors {
            match version_behaviour::write_reply(canonical(name), body, sequences, errors) {
                Some(reply) => return Action::Reply(reply),
                None => self.shared.log(&format!(
                    "{name}: a batch mixing statements {} takes and refuses, forwarded as it is",
                    version.text
                )),
            }
        }
        if let Some(refusal) = self.get_more_max_time(name, body) {
            return Action::Reply(refusal);
        }
        let mut close_after = false;
        // A retry mongod answers from its record never reaches the write path.
        let recorded = crate::retry_record::key(name, db, body)
            .is_some_and(|k| lock(&self.shared.retries).get(&k).is_some());
        if body.contains_key("txnNumber")
            && !body.contains_key("autocommit")
            && commands::is_write(name, body)
            && !recorded
        {
            let ns = self.info(name, db, body).namespace();
            let fired = self
                .failpoints()
                .check(fp::ON_PRIMARY_TRANSACTIONAL_WRITE, |d| {
                    d.get_str("collectionNS")
                        .map_or(true, |want| want.is_empty() || want == ns)
                });
            if let Some(data) = fired {
                let close = data.get_bool("closeConnection").unwrap_or(true);
                match fp::number(&data, "failBeforeCommitExceptionCode") {
                    Some(_) if close => return Action::Close,
                    Some(code) => {
                        let code = code as i32;
                        let info = self.info(name, db, body);
                        let labels = fp::error_labels(&info, Some(code), None, false);
                        let msg = "Failing write due to onPrimaryTransactionalWrite";
                        return Action::Reply(with_labels(error_doc(code, msg), labels));
                    }
                    None => close_after = close,
                }
            }
        }
        // Several mongoses: each knows only the transactions started through it.
        if role == Role::Mongos && self.shared.ports.len() > 1 {
            let mut txns = lock(&self.shared.transactions);
            if let Some(reply) = txns.before_forward(self.member, name, body) {
                drop(txns);
                // The transaction failed: the shard drops its writes (here nx-27017,
                // whose uncommitted writes are visible to everyone until aborted).
                if reply.contains_key("errorLabels") {
                    if let Err(e) = self.abort_backend_transaction(body) {
                        self.shared.log(&format!("abort on the backend: {e}"));
                    }
                }
                return Action::Reply(reply);
            }
        }
        // What nx-27017 cannot run: $listLocalSessions, distinct on _id, $out (the proxy's).
        if crate::local_sessions::applies(name, body) {
            return self.list_local_sessions(db, body);
        }
        if let Some(action) = self.local_sessions_cursor(name, db, body) {
            return action;
        }
        if super::distinct_id::applies(name, body) {
            return self.distinct_on_id(db, body);
        }
        if super::out_stage::applies(name, body) {
            return self.aggregate_with_out(db, body);
        }
        Action::Forward {
            close_after,
            supports_wc: commands::supports_write_concern(name, body),
        }
    }

    /// The `topologyVersion` mongod (4.4+) puts in this member's "not primary" errors.
    fn state_change_error_version(&self) -> Option<Document> {
        if self.shared.version.get().max_wire < crate::topology::MIN_AWAITABLE_WIRE {
            return None;
        }
        let tv = lock(&self.shared.topology).topology_version(self.member);
        Some(tv.to_document())
    }

    /// With auth on, an unauthenticated connection may only run the handshake and the
    /// authentication commands (mongod checks this before fail points).
    fn auth_gate(&self, name: &str, db: &str) -> Option<Document> {
        if !self.shared.auth_enabled
            || self.auth.is_authenticated()
            || auth::allowed_unauthenticated(name)
        {
            return None;
        }
        // mongod's localhost exception: with no user yet, a loopback client (every client
        // of this proxy) may create the first one in admin.
        if name == "createUser" && db == "admin" && lock(&self.shared.users).is_empty() {
            return None;
        }
        let msg = format!("Command {name} requires authentication");
        Some(error_doc(codes::UNAUTHORIZED, &msg))
    }

    fn note_auth(&self, step: &auth::Step) {
        let mut stats = lock(&self.shared.stats);
        stats.auth_failed += step.failed as u64;
        stats.auth_succeeded += step.authenticated as u64;
        stats.speculative_auth_succeeded += (step.authenticated && step.speculative) as u64;
    }

    /// The fail points that act before a command runs. `Some` when one decided the outcome.
    fn fail_points(
        &mut self,
        name: &str,
        db: &str,
        body: &Document,
        deadline: Option<Instant>,
        change_stream: bool,
    ) -> Option<Action> {
        let info = self.info(name, db, body);
        // failCommand fires before getMore checks its cursor out, so mongod does not know
        // the getMore continues a change stream: no ResumableChangeStreamError label
        // (error_labels.cpp reads the originating command). failGetMoreAfterCursorCheckout
        // fires after, and gets it.
        let known_change_stream = change_stream && name != "getMore";
        let labels = |code: i32, data: Option<&Document>, change_stream: bool| {
            data.and_then(fp::labels_override)
                .unwrap_or_else(|| fp::error_labels(&info, Some(code), None, change_stream))
        };
        let expired = |data: Option<&Document>| {
            let reply = error_doc(codes::MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
            Some(Action::Reply(with_labels(
                reply,
                labels(codes::MAX_TIME_MS_EXPIRED, data, change_stream),
            )))
        };

        let fired = self.failpoints().check(fp::FAIL_COMMAND, |d| {
            fp::should_activate(d, &info)
                && (fp::flag(d, "closeConnection")
                    || fp::flag(d, "blockConnection")
                    || fp::number(d, "errorCode").is_some())
        });
        if let Some(data) = fired {
            if fp::flag(&data, "blockConnection") {
                let Some(ms) = fp::number(&data, "blockTimeMS").filter(|ms| *ms >= 0.0) else {
                    let msg = "must specify 'blockTimeMS' when 'blockConnection' is true";
                    return Some(Action::Reply(error_doc(codes::INVALID_OPTIONS, msg)));
                };
                match self.wait(ms as u64, deadline) {
                    Waited::Done => {}
                    Waited::Expired => {
                        // Proxy-only: the code-50 reply comes this much after maxTimeMS.
                        let late = fp::number(&data, fp::REPLY_DELAY).unwrap_or(0.0).max(0.0);
                        if !self.shared.sleep_until(after(Instant::now(), late as u64)) {
                            return Some(Action::Close);
                        }
                        return expired(Some(&data));
                    }
                    Waited::Stopped | Waited::ClientGone => return Some(Action::Close),
                }
            }
            if fp::flag(&data, "closeConnection") {
                return Some(Action::Close);
            }
            if let Some(code) = fp::number(&data, "errorCode") {
                let code = code as i32;
                let mut reply = error_doc(code, "Failing command via 'failCommand' failpoint");
                if let Ok(extra) = data.get_document("errorExtraInfo") {
                    reply.extend(extra.clone());
                }
                let labels = labels(code, Some(&data), known_change_stream);
                return Some(Action::Reply(with_labels(reply, labels)));
            }
        }

        let mut fps = self.failpoints();
        if deadline.is_some() && fps.check(fp::MAX_TIME_ALWAYS_TIME_OUT, |_| true).is_some() {
            drop(fps);
            return expired(None);
        }
        if name == "getMore" {
            if let Some(data) =
                fps.check(fp::FAIL_GET_MORE, |d| fp::number(d, "errorCode").is_some())
            {
                let code = fp::number(&data, "errorCode").unwrap_or(1.0) as i32;
                let reply = error_doc(code, "Hit the 'failGetMoreAfterCursorCheckout' failpoint");
                return Some(Action::Reply(with_labels(
                    reply,
                    labels(code, None, change_stream),
                )));
            }
        }
        let slow = fps.check(fp::SLOW_COMMAND, |d| fp::should_activate(d, &info));
        drop(fps);
        if let Some(data) = slow {
            let ms = fp::number(&data, "executionTimeMS").unwrap_or(0.0).max(0.0);
            match self.wait(ms as u64, deadline) {
                Waited::Done => {}
                Waited::Expired => return expired(None),
                Waited::Stopped | Waited::ClientGone => return Some(Action::Close),
            }
        }
        None
    }

    /// mongod's getMore `validateMaxTimeMS`: `maxTimeMS` (any value, 0 too) is an await time,
    /// so only a tailable awaitData cursor may carry it.
    fn get_more_max_time(&self, name: &str, body: &Document) -> Option<Document> {
        if name != "getMore" || !body.contains_key("maxTimeMS") {
            return None;
        }
        let id = super::cursor_id(body.get("getMore"))?;
        if lock(&self.shared.await_data).contains(&id) {
            return None;
        }
        let msg = "cannot set maxTimeMS on getMore command for a non-awaitData cursor";
        Some(error_doc(codes::BAD_VALUE, msg))
    }

    /// Sleeps `ms`, cut short by the command's deadline (mongod's interruptible sleep) or
    /// by the client hanging up.
    pub(super) fn wait(&self, ms: u64, deadline: Option<Instant>) -> Waited {
        let until = after(Instant::now(), ms);
        let (end, outcome) = match deadline {
            Some(deadline) if deadline < until => (deadline, Waited::Expired),
            _ => (until, Waited::Done),
        };
        loop {
            if self.client_gone() {
                return Waited::ClientGone;
            }
            let now = Instant::now();
            if now >= end {
                return outcome;
            }
            if !self.shared.sleep_until(end.min(now + CLIENT_CHECK)) {
                return Waited::Stopped;
            }
        }
    }

    /// The client closed its end (or the socket failed); pipelined bytes mean it is there.
    pub(super) fn client_gone(&self) -> bool {
        if self.client.socket().set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let gone = match self.client.socket().peek(&mut byte) {
            Ok(n) => n == 0,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        };
        let _ = self.client.socket().set_nonblocking(false);
        gone
    }

    fn configure_fail_point(&mut self, db: &str, body: &Document) -> Document {
        if db != "admin" {
            return error_doc(
                codes::UNAUTHORIZED,
                "configureFailPoint may only be run against the admin database.",
            );
        }
        let Ok(name) = body.get_str("configureFailPoint") else {
            return error_doc(
                codes::BAD_VALUE,
                "configureFailPoint requires a fail point name",
            );
        };
        let Some(mode) = body.get("mode") else {
            return error_doc(codes::BAD_VALUE, "Missing required field 'mode'");
        };
        let mode = match fp::Mode::parse(mode) {
            Ok(m) => m,
            Err(e) => return error_doc(codes::BAD_VALUE, &e),
        };
        let data = body.get_document("data").cloned().unwrap_or_default();
        match self.failpoints().configure(name, mode, data) {
            Some(count) => doc! { "count": count, "ok": 1.0 },
            None => not_found(name),
        }
    }

    /// mongod's `waitForFailPoint`: waits until this member's fail point `name` has been
    /// entered `timesEntered` times in all (the count `configureFailPoint` answered, plus
    /// the entries awaited), bounded by the required `maxTimeMS`.
    fn wait_for_fail_point(&self, db: &str, body: &Document, received: Instant) -> Document {
        if db != "admin" {
            return error_doc(
                codes::UNAUTHORIZED,
                "waitForFailPoint may only be run against the admin database.",
            );
        }
        let Some(max_time) = body.get("maxTimeMS") else {
            return error_doc(codes::FAILED_TO_PARSE, "Missing maxTimeMS");
        };
        let Some(max_time) = fp::as_number(max_time).filter(|ms| *ms >= 0.0) else {
            return error_doc(codes::BAD_VALUE, "maxTimeMS must be a non-negative number");
        };
        let Some(times) = fp::number(body, "timesEntered") else {
            let msg = "BSON field 'waitForFailPoint.timesEntered' is missing but a required field";
            return error_doc(codes::IDL_MISSING_FIELD, msg);
        };
        let Ok(name) = body.get_str("waitForFailPoint") else {
            return error_doc(
                codes::BAD_VALUE,
                "waitForFailPoint requires a fail point name",
            );
        };
        if !fp::KNOWN.contains(&name) {
            return not_found(name);
        }
        // maxTimeMS 0 is "no limit", as everywhere in mongod.
        let deadline = (max_time >= 1.0).then(|| after(received, max_time as u64));
        loop {
            if self.failpoints().entered(name) >= times as i64 {
                return doc! { "ok": 1.0 };
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return error_doc(codes::MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
            }
            let step = now + POLL_FAIL_POINT;
            if !self
                .shared
                .sleep_until(deadline.map_or(step, |d| d.min(step)))
            {
                return error_doc(codes::SHUTDOWN_IN_PROGRESS, "proxy stopping");
            }
        }
    }

    fn proxy_admin(&mut self, name: &str, body: &Document) -> Document {
        match name {
            "proxyStats" => {
                let mut reply = lock(&self.shared.stats).to_document();
                reply.insert("failPoints", self.failpoints().summary());
                reply.insert("ok", 1.0);
                reply
            }
            "proxyResetStats" => {
                lock(&self.shared.stats).reset();
                doc! { "ok": 1.0 }
            }
            "proxySetVersion" => {
                let text = body.get_str("proxySetVersion").unwrap_or("");
                match self.shared.set_version(text) {
                    Ok(v) => doc! { "version": v.text, "maxWireVersion": v.max_wire, "ok": 1.0 },
                    Err(e) => error_doc(codes::BAD_VALUE, &e),
                }
            }
            _ => {
                let target = fp::number(body, "newPrimary").map(|n| n as usize);
                self.shared.change_topology(|topology| match topology.elect(target) {
                    Ok(p) => {
                        doc! { "primary": topology.hosts[p].as_str(), "electionId": topology.election_id(), "ok": 1.0 }
                    }
                    Err(e) => error_doc(codes::BAD_VALUE, &e),
                })
            }
        }
    }

    pub(super) fn local_command(&mut self, name: &str, db: &str, body: &Document) -> Document {
        let admin_only = matches!(
            name,
            "getCmdLineOpts"
                | "getParameter"
                | "setParameter"
                | "replSetGetStatus"
                | "replSetStepDown"
                | "replSetFreeze"
        );
        if admin_only && db != "admin" {
            return error_doc(
                codes::UNAUTHORIZED,
                &format!("{name} may only be run against the admin database."),
            );
        }
        let version = &self.shared.version.get();
        match canonical(name) {
            "hello" => {
                let req = HelloRequest {
                    legacy: name != "hello",
                    hello_ok: body.get_bool("helloOk").unwrap_or(false),
                    connection_id: self.id as i32,
                };
                let mut reply = lock(&self.shared.topology).hello(self.member, &req, version);
                let users = lock(&self.shared.users);
                let subject = self.peer_subject.as_deref();
                let out = auth::hello_fields(&users, &mut self.auth, body, subject, &mut reply);
                drop(users);
                if let Some(step) = out.speculative {
                    self.note_auth(&step);
                }
                let service_id = lock(&self.shared.topology).service_id(self.id);
                match service_id {
                    Some(id) => crate::load_balancer::hello(body, id, reply),
                    None => reply,
                }
            }
            "saslStart" | "saslContinue" | "authenticate" => {
                let users = lock(&self.shared.users);
                let step = match name {
                    "saslStart" => self.auth.sasl_start(&users, db, body),
                    "saslContinue" => self.auth.sasl_continue(body),
                    _ => {
                        let subject = self.peer_subject.as_deref();
                        self.auth.authenticate(&users, db, body, subject)
                    }
                };
                drop(users);
                self.note_auth(&step);
                step.reply
            }
            "logout" => {
                self.auth.logout();
                doc! { "ok": 1.0 }
            }
            // PBKDF2 runs outside the lock: hellos and SASL steps of other connections go on.
            "createUser" => {
                let iterations = lock(&self.shared.users).iterations();
                match auth::create_user(db, body, iterations)
                    .and_then(|user| lock(&self.shared.users).insert(user))
                {
                    Ok(()) => doc! { "ok": 1.0 },
                    Err(e) => e,
                }
            }
            // PBKDF2 outside the lock, as for createUser.
            "updateUser" => {
                let iterations = lock(&self.shared.users).iterations();
                let body = auth::update_user_body(&lock(&self.shared.users), db, body);
                match body
                    .and_then(|b| auth::create_user(db, &b, iterations))
                    .and_then(|user| lock(&self.shared.users).replace(user))
                {
                    Ok(()) => doc! { "ok": 1.0 },
                    Err(e) => e,
                }
            }
            "dropUser" | "usersInfo" | "dropAllUsersFromDatabase" => {
                lock(&self.shared.users).command(name, db, body)
            }
            "buildInfo" => admin::build_info(version),
            "getCmdLineOpts" => {
                let set_name = lock(&self.shared.topology).set_name.clone();
                admin::cmd_line_opts(self.shared.ports[self.member], set_name.as_deref())
            }
            "getParameter" => admin::get_parameter(body, version),
            "hostInfo" => admin::host_info(),
            "connectionStatus" => admin::connection_status(self.auth.auth_info()),
            "whatsmyuri" => {
                let you = self
                    .client
                    .socket()
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                doc! { "you": you, "ok": 1.0 }
            }
            "startSession" => {
                let state = RandomState::new();
                let mut random = [0u8; 16];
                random[..8].copy_from_slice(&state.hash_one(self.id).to_le_bytes());
                random[8..].copy_from_slice(&state.hash_one(Instant::now()).to_le_bytes());
                admin::start_session(random)
            }
            "getnonce" => {
                let nonce = RandomState::new().hash_one(self.id);
                doc! { "nonce": format!("{nonce:016x}"), "ok": 1.0 }
            }
            "replSetGetStatus" => lock(&self.shared.topology).status(self.member),
            "replSetStepDown" => {
                if let Err(refusal) = step_down_arguments(body) {
                    return refusal;
                }
                let member = self.member;
                match self.shared.change_topology(|t| t.step_down(member)) {
                    Ok(_) => doc! { "ok": 1.0 },
                    Err((code, msg)) => {
                        let mut reply = error_doc(code, &msg);
                        if code == codes::NOT_WRITABLE_PRIMARY {
                            if let Some(tv) = self.state_change_error_version() {
                                reply.insert("topologyVersion", tv);
                            }
                        }
                        reply
                    }
                }
            }
            "replSetFreeze" => {
                let secs = match body.get("replSetFreeze").and_then(fp::as_number) {
                    Some(n) if n.fract() == 0.0 => n as i64,
                    _ => {
                        let msg = "replSetFreeze takes a number of seconds";
                        return error_doc(codes::TYPE_MISMATCH, msg);
                    }
                };
                let member = self.member;
                match self.shared.change_topology(|t| t.freeze(member, secs)) {
                    Ok(reply) => reply,
                    Err((code, msg)) => error_doc(code, &msg),
                }
            }
            // setParameter, the session-killing commands and the API test commands: nothing
            // to do here.
            _ => doc! { "ok": 1.0 },
        }
    }
}

/// mongod's checks of `replSetStepDown`'s arguments (`{replSetStepDown: secs,
/// secondaryCatchUpPeriodSecs?, force?}`); the values themselves change nothing here: the
/// emulated secondaries are always caught up.
fn step_down_arguments(body: &Document) -> Result<(), Document> {
    let secs = match body.get("replSetStepDown").and_then(fp::as_number) {
        // mongod reads the first element as a number: 0 or not a number is the default.
        Some(0.0) | None => 60.0,
        Some(n) if n < 0.0 => {
            return Err(error_doc(
                codes::BAD_VALUE,
                "stepdown period must be a positive integer",
            ))
        }
        Some(n) => n,
    };
    let force = match body.get("force") {
        None => false,
        Some(bson::Bson::Boolean(b)) => *b,
        Some(v) => fp::as_number(v).is_some_and(|n| n != 0.0),
    };
    let catch_up = match body.get("secondaryCatchUpPeriodSecs") {
        None if force => 0.0,
        None => 10.0,
        Some(v) => match fp::as_number(v) {
            Some(n) => n,
            None => {
                let msg = "secondaryCatchUpPeriodSecs must be a number";
                return Err(error_doc(codes::TYPE_MISMATCH, msg));
            }
        },
    };
    if catch_up < 0.0 {
        let msg = "secondaryCatchUpPeriodSecs period must be a positive or absent";
        return Err(error_doc(codes::BAD_VALUE, msg));
    }
    if secs < catch_up {
        let msg = "stepdown period must be longer than secondaryCatchUpPeriodSecs";
        return Err(error_doc(codes::BAD_VALUE, msg));
    }
    Ok(())
}

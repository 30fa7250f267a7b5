//! The live topology: SDAM descriptions, RTT per server and a connection
//! pool per server. Single-threaded (the SDAM spec's single-threaded mode):
//! servers are checked when selection finds nothing suitable, and the
//! handshake's connection goes straight into the pool.

use crate::cmap::{AfterDrain, DrainStep, PoolEvent, PoolEventKind};
use crate::conn::{ConnectSettings, Connection, Established};
use crate::csot::OpTimeout;
use crate::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime;
use crate::sdam::rtt::RttStats;
use crate::sdam::selection::{self, Criteria};
use crate::sdam::{ServerType, TopologyDescription};
use std::collections::HashMap;
use std::time::Duration;

/// The SDAM spec's minHeartbeatFrequencyMS: the least time between checks of one server.
const MIN_HEARTBEAT: Duration = Duration::from_millis(500);

pub struct TopologySettings {
    pub seeds: Vec<String>,
    /// The directConnection URI option, if given.
    pub direct: Option<bool>,
    pub replica_set: Option<String>,
    /// A `mongodb+srv` URI whose seeds are still to be discovered (at the
    /// first selection, under its deadline); `None` once they are.
    pub srv: Option<crate::uri::ConnectionString>,
    pub local_threshold: Duration,
    pub connect: ConnectSettings,
    pub max_pool_size: usize,
    /// How often a known server is checked again (SDAM single-threaded
    /// default: 60 s), which also keeps RTT samples fresh for CSOT.
    pub heartbeat: Duration,
    /// Record pool events (pending-response drains) for `take_pool_events`.
    pub monitor_pool: bool,
}

#[derive(Default)]
struct ServerState {
    rtt: RttStats,
    idle: Vec<Connection>,
    generation: u64,
    last_check: Option<crate::deadline::Instant>,
}

pub struct Topology {
    settings: TopologySettings,
    pub description: TopologyDescription,
    servers: HashMap<String, ServerState>,
    next_conn_id: u64,
    rng: u64,
    /// `Some` when pool events are recorded.
    pool_events: Option<Vec<PoolEvent>>,
}

impl Topology {
    pub fn new(settings: TopologySettings) -> Topology {
        let description = TopologyDescription::new(
            &settings.seeds,
            settings.direct,
            settings.replica_set.clone(),
        );
        let rng = runtime::now().0 | 1;
        let pool_events = settings.monitor_pool.then(Vec::new);
        Topology {
            pool_events,
            settings,
            description,
            servers: HashMap::new(),
            next_conn_id: 1,
            rng,
        }
    }

    #[cfg(test)]
    pub fn connect_settings(&self) -> &ConnectSettings {
        &self.settings.connect
    }

    /// Selects a server for `criteria`, checking servers as needed, within
    /// the operation's selection deadline (`OpTimeout::selection_deadline`).
    /// `failed_on`: the server a retried operation's previous attempt failed
    /// on (deprioritized where the retryable specs say so).
    pub fn select(
        &mut self,
        criteria: Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
        failed_on: Option<&str>,
    ) -> Result<String> {
        if self.settings.srv.is_some() {
            self.discover_seeds(timeout, deadline)?;
        }
        loop {
            let avoid: Vec<&str> = failed_on
                .filter(|_| crate::retryable::deprioritizes(self.description.kind))
                .into_iter()
                .collect();
            let found: Vec<String> = selection::suitable(
                &self.description,
                criteria,
                self.settings.local_threshold,
                &avoid,
            )
            .into_iter()
            .map(|s| s.address.clone())
            .collect();
            if !found.is_empty() {
                let pick = found[self.next_random() as usize % found.len()].clone();
                if !self.check_due(&pick) {
                    return Ok(pick);
                }
                // Due for its heartbeat: check it, then select again on what it said.
                self.check(&pick, criteria, timeout, deadline)?;
                continue;
            }
            let now = runtime::now();
            if deadline.is_expired(now) {
                return Err(timeout.selection_error(now, self.selection_failure(criteria)));
            }
            if !self.scan(criteria, timeout, deadline)? {
                // Nothing new to learn yet: wait out minHeartbeatFrequencyMS (bounded).
                runtime::sleep_until(Deadline::after(now, MIN_HEARTBEAT).min(deadline));
            }
        }
    }

    /// Seedlist discovery: the SRV/TXT lookups, then the topology starts over
    /// from the hosts found. A failure leaves it pending for the next operation.
    fn discover_seeds(&mut self, timeout: &OpTimeout, deadline: Deadline) -> Result<()> {
        let Some(cs) = &self.settings.srv else {
            return Ok(());
        };
        let found = crate::discovery::discover(cs, deadline).map_err(|e| {
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
        crate::client::check_supported(&found.cs)?;
        let seeds = crate::client::seeds(&found.cs)?;
        let set_name = found.cs.options.replica_set.clone();
        // SRV seeds are never a direct connection, even when there is one.
        self.description = TopologyDescription::new(&seeds, Some(false), set_name.clone());
        self.settings.seeds = seeds;
        self.settings.replica_set = set_name;
        self.settings.connect.name_servers = found.name_servers;
        if let Some(credential) = found.cs.credential.clone() {
            // A TXT record's authSource says where the user is defined.
            let auth = crate::auth::Authenticator::new(credential)?;
            self.settings.connect.auth = Some(std::rc::Rc::new(auth));
        }
        self.settings.srv = None;
        Ok(())
    }

    /// The single-threaded scan (Server Selection: nothing suitable, so the
    /// topology is stale): checks every server not checked within
    /// minHeartbeatFrequencyMS, Unknown ones first. Known ones too: after a
    /// step-down the new primary is still described as the secondary it was,
    /// and only its own hello says otherwise. Returns whether it checked any.
    fn scan(
        &mut self,
        criteria: Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
    ) -> Result<bool> {
        let now = runtime::now();
        let mut due: Vec<(bool, String)> = self
            .description
            .servers
            .iter()
            .filter(|s| {
                let last = self.servers.get(&s.address).and_then(|st| st.last_check);
                last.is_none_or(|t| now.since(t) >= MIN_HEARTBEAT)
            })
            .map(|s| (s.kind != ServerType::Unknown, s.address.clone()))
            .collect();
        due.sort_by_key(|(known, _)| *known);
        for (_, address) in &due {
            self.check(address, criteria, timeout, deadline)?;
        }
        Ok(!due.is_empty())
    }

    /// Whether `address` was last checked a heartbeat ago or more.
    fn check_due(&mut self, address: &str) -> bool {
        let heartbeat = self.settings.heartbeat;
        let now = runtime::now();
        self.state(address)
            .last_check
            .is_some_and(|t| now.since(t) >= heartbeat)
    }

    /// One server check: a new connection's handshake (an RTT sample, and
    /// the server's description); the connection then joins the pool.
    fn check(
        &mut self,
        address: &str,
        criteria: Criteria,
        timeout: &OpTimeout,
        deadline: Deadline,
    ) -> Result<()> {
        self.state(address).last_check = Some(runtime::now());
        let (connect, handshake) = timeout.establish_deadlines(deadline, runtime::now());
        match self.establish(address, connect.min(deadline), handshake.min(deadline)) {
            // Scans repeat every minHeartbeatFrequencyMS while nothing is suitable
            // (no primary for a while), and heartbeats every heartbeatFrequencyMS:
            // their connections must not pile up idle, so one joins an empty pool only.
            Ok(conn) if self.state(address).idle.is_empty() => self.checkin(conn),
            Ok(_) => {}
            Err(e) if e.is_timeout() && deadline.is_expired(runtime::now()) => {
                // The selection budget ran out mid-check. Under CSOT the
                // operation's own deadline expired: report the section
                // that was waiting (e.g. the handshake), not selection.
                let now = runtime::now();
                self.description.update(address, Err(e.to_string()));
                return Err(match timeout.csot {
                    Some(op) if op.is_expired(now) => e,
                    _ => timeout.selection_error(now, self.selection_failure(criteria)),
                });
            }
            Err(e) if e.kind == ErrorKind::Authentication => {
                // The auth spec: mark the server Unknown and clear its pool,
                // and fail with the auth error rather than wait out selection
                // (it would only repeat it, and then hide it).
                self.mark_unknown(address, &e);
                return Err(e);
            }
            Err(e) => self.description.update(address, Err(e.to_string())),
        }
        Ok(())
    }

    /// A connection to `address`: an idle one, or a new one. An idle one
    /// still pending a reply is drained first (cmap.rs); one whose drain
    /// fails is closed and the next is tried, while one whose operation ran
    /// out of time inside the window stays pending in the pool.
    /// `selection` is the deadline selection ran under: under CSOT what is
    /// left of it bounds the checkout (CSOT spec, "Server Selection").
    pub fn checkout(
        &mut self,
        address: &str,
        timeout: &OpTimeout,
        selection: Deadline,
    ) -> Result<Connection> {
        let generation = self.state(address).generation;
        while let Some(mut conn) = self.state(address).idle.pop() {
            if conn.generation != generation || conn.is_broken() {
                continue;
            }
            match self.drain(&mut conn, timeout) {
                Ok(true) => return Ok(conn),
                Ok(false) => continue,
                Err(e) => {
                    self.state(address).idle.push(conn);
                    return Err(e);
                }
            }
        }
        let (connect, handshake) = timeout.establish_deadlines(selection, runtime::now());
        self.establish(address, connect, handshake)
            .inspect_err(|e| {
                if !e.is_timeout() {
                    self.mark_unknown(address, e);
                }
            })
    }

    /// The drain step of a checkout. `Ok(true)`: the connection is ready;
    /// `Ok(false)`: it was closed (dropped with `conn` by the caller);
    /// `Err`: the operation's deadline ran out, the connection stays pending.
    fn drain(&mut self, conn: &mut Connection, timeout: &OpTimeout) -> Result<bool> {
        let Some(pending) = conn.pending() else {
            return Ok(true);
        };
        let started = runtime::now();
        let (connection_id, address) = (conn.id, conn.address.clone());
        let event = |kind, duration, reason, closed| PoolEvent {
            kind,
            connection_id,
            server_address: address.clone(),
            request_id: pending.request_id,
            duration,
            reason,
            closed,
        };
        self.pool_event(|| event(PoolEventKind::PendingResponseStarted, None, None, false));
        let deadline = match pending.step(started, timeout) {
            DrainStep::Drain(deadline) => Ok(deadline),
            DrainStep::AlivenessCheck => match conn.probe_pending() {
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
        let result = deadline.and_then(|deadline| conn.drain_pending(deadline));
        let now = runtime::now();
        let took = Some(now.since(started));
        let Err(e) = result else {
            let kind = PoolEventKind::PendingResponseSucceeded;
            self.pool_event(|| event(kind, took, None, false));
            return Ok(true);
        };
        let keep = conn
            .pending()
            .is_some_and(|p| p.after_failure(&e, now) == AfterDrain::KeepPending);
        let kind = PoolEventKind::PendingResponseFailed;
        self.pool_event(|| event(kind, took, Some(e.to_string()), !keep));
        if keep {
            Err(Error::timeout("pending response drain").with_cause(e.to_string()))
        } else {
            conn.abandon_pending();
            Ok(false)
        }
    }

    fn pool_event(&mut self, event: impl FnOnce() -> PoolEvent) {
        if let Some(events) = self.pool_events.as_mut() {
            events.push(event());
        }
    }

    /// Drains the recorded pool events.
    pub fn take_pool_events(&mut self) -> Vec<PoolEvent> {
        self.pool_events
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn establish(
        &mut self,
        address: &str,
        connect: Deadline,
        handshake: Deadline,
    ) -> Result<Connection> {
        let (host, port) = split_address(address)?;
        let id = self.next_conn_id;
        self.next_conn_id += 1;
        let generation = self.state(address).generation;
        let Established { conn, rtt } = Connection::establish(
            address,
            &host,
            port,
            &self.settings.connect,
            id,
            generation,
            (connect, handshake),
        )?;
        let state = self.state(address);
        state.rtt.add(rtt);
        let average = state.rtt.average();
        self.description
            .update(address, Ok((conn.hello.clone(), average)));
        Ok(conn)
    }

    pub fn checkin(&mut self, conn: Connection) {
        let max = self.settings.max_pool_size;
        let state = self.state(&conn.address);
        // A pending connection is kept too: its reply is drained at checkout.
        if !conn.is_broken()
            && conn.generation == state.generation
            && (max == 0 || state.idle.len() < max)
        {
            state.idle.push(conn);
        }
    }

    /// A network error (not a timeout) marks the server unknown and clears its pool.
    pub fn mark_unknown(&mut self, address: &str, err: &Error) {
        let state = self.state(address);
        state.generation += 1;
        state.idle.clear();
        self.description.update(address, Err(err.to_string()));
    }

    /// A server error that reveals a state change (SDAM error handling).
    pub fn handle_server_error(&mut self, address: &str, err: &Error) {
        let Some(clear) = err.code.and_then(crate::sdam::state_change_error) else {
            return;
        };
        if clear {
            let state = self.state(address);
            state.generation += 1;
            state.idle.clear();
        }
        self.description.update(address, Err(err.to_string()));
    }

    pub fn min_rtt(&mut self, address: &str) -> Duration {
        self.state(address).rtt.min()
    }

    pub fn close(&mut self) {
        for state in self.servers.values_mut() {
            state.generation += 1;
            state.idle.clear();
        }
    }

    fn state(&mut self, address: &str) -> &mut ServerState {
        self.servers.entry(address.to_string()).or_default()
    }

    fn selection_failure(&self, criteria: Criteria) -> String {
        let servers: Vec<String> = self
            .description
            .servers
            .iter()
            .map(|s| match &s.error {
                Some(e) => format!("{} ({:?}: {e})", s.address, s.kind),
                None => format!("{} ({:?})", s.address, s.kind),
            })
            .collect();
        format!(
            "no server suitable for {criteria:?} in {:?} topology [{}]",
            self.description.kind,
            servers.join(", ")
        )
    }

    fn next_random(&mut self) -> u64 {
        // xorshift: enough to spread load across the latency window.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
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

//! WASI 0.3, a cold client: the transport (TCP, and TLS) of each seed's
//! first pool connection opens while that server's monitor makes its first
//! check, instead of after it. Selection waits for the check (TCP, TLS,
//! hello); the checkout that follows then starts its handshake on an open
//! socket, two round trips sooner with TLS (docs/driver.md, "Round trips of
//! a cold request").
//!
//! A prepared transport is not a CMAP connection: it has no id and no
//! event, and nothing is sent on it. A checkout that must open a connection
//! adopts it (`Shared::prepared`) while the pool's generation is the one it
//! opened in; the connection is created (and announced) then. One unused
//! for `LIFE`, or whose monitor stops (close, the server left the topology,
//! a check cancelled), is closed.

use super::{first, monitor, race, split_address, Shared, Topology};
use crate::cmap::Changes;
use crate::deadline::Deadline;
use crate::runtime::{self, Stream};
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

/// How long a prepared transport waits for its checkout: a cold client's
/// first checkout follows the first check by a round trip.
const LIFE: Duration = Duration::from_secs(5);

/// A server's prepared transport, or the task opening it (`token` tells
/// one task's from a later one's).
pub(super) enum Prepared {
    /// `opened` changes when the task ends, opened or not.
    Opening { token: u64, opened: Rc<Changes> },
    Open {
        token: u64,
        stream: Stream,
        generation: u64,
    },
}

impl Prepared {
    fn token(&self) -> u64 {
        match self {
            Prepared::Opening { token, .. } | Prepared::Open { token, .. } => *token,
        }
    }
}

impl Topology {
    /// Whether `address` gets a prepared transport as its monitor starts:
    /// only while no server is known (a cold client's seeds: members
    /// found later are not guessed at), and only for an empty pool.
    pub(super) fn prepares(&self, address: &str) -> bool {
        let never_checked = self
            .description
            .servers
            .iter()
            .all(|s| s.kind == crate::sdam::ServerType::Unknown);
        let empty = self
            .servers
            .get(address)
            .is_none_or(|s| s.idle.is_empty() && s.in_use.total() == 0 && s.connecting == 0);
        never_checked && empty && !self.prepared.contains_key(address)
    }

    /// Starts the task that opens `address`'s transport beside its monitor.
    pub(super) fn start_preparing(&mut self, address: &str, signals: &Rc<monitor::Signals>) {
        self.prepared_tokens += 1;
        let token = self.prepared_tokens;
        let opened = Rc::default();
        self.prepared
            .insert(address.to_string(), Prepared::Opening { token, opened });
        runtime::detach(open(
            self.me.clone(),
            address.to_string(),
            Rc::clone(signals),
            token,
        ));
    }

    /// The open transport of `address` for a new connection of the pool's
    /// `generation`; one of an older generation is closed.
    fn take_prepared(&mut self, address: &str, generation: u64) -> Option<Stream> {
        if !matches!(self.prepared.get(address), Some(Prepared::Open { .. })) {
            return None;
        }
        match self.prepared.remove(address) {
            Some(Prepared::Open {
                stream,
                generation: g,
                ..
            }) if g == generation => Some(stream),
            _ => None,
        }
    }

    /// Closes every prepared transport (close, drop).
    pub(super) fn drop_prepared(&mut self) {
        for (_, p) in self.prepared.drain() {
            if let Prepared::Opening { opened, .. } = p {
                opened.notify();
            }
        }
    }

    /// Ends task `token`'s entry (opened or not), waking its waiters.
    fn forget_prepared(&mut self, address: &str, token: u64) {
        if self.prepared.get(address).map(Prepared::token) != Some(token) {
            return;
        }
        if let Some(Prepared::Opening { opened, .. }) = self.prepared.remove(address) {
            opened.notify();
        }
    }
}

impl Shared {
    /// The prepared transport of `address` for a new connection of the
    /// pool's `generation`. One still opening is waited for, within
    /// `connect`: it began before any new connect could.
    pub(super) async fn prepared(
        &self,
        address: &str,
        generation: u64,
        connect: Deadline,
    ) -> Option<Stream> {
        let opened = match self.borrow().prepared.get(address)? {
            Prepared::Opening { opened, .. } => Some(Changes::next(opened)),
            Prepared::Open { .. } => None,
        };
        if let Some(opened) = opened {
            let waited = runtime::within(connect, "prepared transport", async {
                opened.await;
                Ok(())
            });
            waited.await.ok()?;
        }
        self.borrow_mut().take_prepared(address, generation)
    }
}

/// The task: opens the transport within connectTimeoutMS, keeps it for
/// `LIFE` unless a checkout takes it, then closes it.
async fn open(
    me: Weak<RefCell<Topology>>,
    address: String,
    signals: Rc<monitor::Signals>,
    token: u64,
) {
    let plan = me.upgrade().map(|shared| {
        let t = shared.borrow();
        let generation = t.servers.get(&address).map_or(0, |s| s.generation);
        let connect_ms = t.settings.background_connect_ms;
        (Rc::clone(&t.settings.connect), generation, connect_ms)
    });
    let Some((settings, generation, connect_ms)) = plan else {
        return;
    };
    let opening = async {
        let (host, port) = split_address(&address).ok()?;
        let deadline = Deadline::from_ms(runtime::now(), Some(connect_ms));
        let (servers, tls) = (&settings.name_servers, settings.tls.as_ref());
        let stream = Stream::connect(&address, &host, port, servers, tls, deadline).await;
        stream.ok()
    };
    let cancelled = async {
        Changes::next(&signals.cancel).await;
        None
    };
    let stream = race(opening, cancelled).await;
    {
        let Some(shared) = me.upgrade() else { return };
        let mut t = shared.borrow_mut();
        let wanted = t.prepared.get(&address).map(Prepared::token) == Some(token);
        match stream {
            Some(stream) if wanted && !t.closed && !signals.stopped.get() => {
                let open = Prepared::Open {
                    token,
                    stream,
                    generation,
                };
                if let Some(Prepared::Opening { opened, .. }) =
                    t.prepared.insert(address.clone(), open)
                {
                    opened.notify();
                }
            }
            _ => {
                t.forget_prepared(&address, token);
                return;
            }
        }
    }
    let expiry = runtime::sleep_until(Deadline::after(runtime::now(), LIFE));
    first(expiry, Changes::next(&signals.cancel)).await;
    if let Some(shared) = me.upgrade() {
        shared.borrow_mut().forget_prepared(&address, token);
    }
}

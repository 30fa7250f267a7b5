//! The DNS client's channel over wasi:sockets/udp 0.2 (the lookup itself is
//! `dns_udp`'s): one socket connected to one server, every wait blocking in
//! `wait`.

use super::dns_udp::SECTION;
use super::wait;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::net::SocketAddr;
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::network::{ErrorCode, IpAddressFamily};
use wasi::sockets::udp::{
    IncomingDatagramStream, OutgoingDatagram, OutgoingDatagramStream, UdpSocket,
};
use wasi::sockets::udp_create_socket::create_udp_socket;

/// Datagrams taken per receive call.
const BATCH: u64 = 8;

/// One UDP socket connected to one server. Field order is drop order: the
/// streams are children of the socket.
pub(super) struct Channel {
    /// Datagrams of a batch beyond the one a receive returned (several
    /// queries in flight: their replies may come in one batch).
    held: std::cell::RefCell<std::collections::VecDeque<Vec<u8>>>,
    incoming: IncomingDatagramStream,
    outgoing: OutgoingDatagramStream,
    _socket: UdpSocket,
}

impl Channel {
    pub(super) fn open(server: SocketAddr, deadline: Deadline) -> Result<Channel> {
        let (family, remote) = super::tcp::to_wasi_addr(server.ip(), server.port());
        let unspecified = match family {
            IpAddressFamily::Ipv4 => std::net::IpAddr::from([0u8; 4]),
            IpAddressFamily::Ipv6 => std::net::IpAddr::from([0u16; 8]),
        };
        let (_, local) = super::tcp::to_wasi_addr(unspecified, 0);
        let err = |e| sock_err(server, "open a UDP socket to", e);
        let socket = create_udp_socket(family).map_err(err)?;
        socket.start_bind(&instance_network(), local).map_err(err)?;
        let pollable = socket.subscribe();
        loop {
            if deadline.is_expired(super::now()) {
                return Err(Error::timeout(SECTION));
            }
            match socket.finish_bind() {
                Ok(()) => break,
                Err(ErrorCode::WouldBlock) => wait(&pollable, deadline, SECTION)?,
                Err(e) => return Err(err(e)),
            }
        }
        drop(pollable);
        let (incoming, outgoing) = socket.stream(Some(remote)).map_err(err)?;
        Ok(Channel {
            held: Default::default(),
            incoming,
            outgoing,
            _socket: socket,
        })
    }

    pub(super) async fn send(
        &self,
        server: SocketAddr,
        query: &[u8],
        deadline: Deadline,
    ) -> Result<()> {
        let pollable = self.outgoing.subscribe();
        loop {
            if deadline.is_expired(super::now()) {
                return Err(Error::timeout(SECTION));
            }
            let permits = self
                .outgoing
                .check_send()
                .map_err(|e| sock_err(server, "send to", e))?;
            if permits == 0 {
                wait(&pollable, deadline, SECTION)?;
                continue;
            }
            let datagram = OutgoingDatagram {
                data: query.to_vec(),
                remote_address: None,
            };
            let sent = self
                .outgoing
                .send(&[datagram])
                .map_err(|e| sock_err(server, "send to", e))?;
            if sent == 1 {
                return Ok(());
            }
        }
    }

    /// The first datagram that `is_ours`, or `None` once `until` has passed.
    /// Other datagrams are dropped and the wait goes on.
    pub(super) async fn receive(
        &self,
        server: SocketAddr,
        is_ours: &dyn Fn(&[u8]) -> bool,
        until: Deadline,
    ) -> Result<Option<Vec<u8>>> {
        // Held from an earlier batch first (no borrow lives past this statement).
        let held: Vec<Vec<u8>> = self.held.borrow_mut().drain(..).collect();
        let mut held = held.into_iter();
        if let Some(data) = held.by_ref().find(|d| is_ours(d)) {
            self.held.borrow_mut().extend(held);
            return Ok(Some(data));
        }
        let pollable = self.incoming.subscribe();
        loop {
            // Checked on every pass: a flood of stray datagrams cannot hold us past it.
            if until.is_expired(super::now()) {
                return Ok(None);
            }
            let datagrams = self
                .incoming
                .receive(BATCH)
                .map_err(|e| sock_err(server, "receive from", e))?;
            let mut ours = datagrams
                .into_iter()
                .filter(|dg| is_ours(&dg.data))
                .map(|dg| dg.data);
            if let Some(first) = ours.next() {
                // At most BATCH - 1 held: each call takes one batch.
                self.held.borrow_mut().extend(ours);
                return Ok(Some(first));
            }
            match wait(&pollable, until, SECTION) {
                Ok(()) => {}
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn sock_err(server: SocketAddr, what: &str, e: ErrorCode) -> Error {
    super::socket_error(e, &format!("{what} the DNS server {server}"))
}

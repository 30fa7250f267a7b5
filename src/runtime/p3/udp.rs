//! The DNS client's channel over wasi:sockets 0.3 UDP (the lookup itself is
//! `dns_udp`'s).
//!
//! 0.3 UDP is simpler than 0.2's: `connect` binds implicitly and is
//! synchronous, and `send`/`receive` are async calls on the socket. A receive
//! dropped by the deadline is cancelled; a datagram it lost is what a
//! retransmission covers.

use super::super::dns_udp::SECTION;
use super::within;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::net::SocketAddr;
use wasip3::sockets::types::{ErrorCode, UdpSocket};

/// A UDP socket connected to one server.
pub(crate) struct Channel(UdpSocket);

impl Channel {
    /// Connects to `server` (bound implicitly, so no wait: `_deadline` is
    /// 0.2's, whose bind waits).
    pub(crate) fn open(server: SocketAddr, _deadline: Deadline) -> Result<Channel> {
        let (family, remote) = super::tcp::to_wasi_addr(server.ip(), server.port());
        let err = |e| sock_err(server, "open a UDP socket to", e);
        let socket = UdpSocket::create(family).map_err(err)?;
        socket.connect(remote).map_err(err)?;
        Ok(Channel(socket))
    }

    pub(crate) async fn send(
        &self,
        server: SocketAddr,
        query: &[u8],
        deadline: Deadline,
    ) -> Result<()> {
        within(deadline, SECTION, async {
            self.0
                .send(query.to_vec(), None)
                .await
                .map_err(|e| sock_err(server, "send to", e))
        })
        .await
    }

    /// The first datagram that `is_ours`, or `None` once `until` has passed.
    /// Other datagrams are dropped and the wait goes on.
    pub(crate) async fn receive(
        &self,
        server: SocketAddr,
        is_ours: &dyn Fn(&[u8]) -> bool,
        until: Deadline,
    ) -> Result<Option<Vec<u8>>> {
        loop {
            // Each pass checks the clock: a flood of stray datagrams cannot hold us past it.
            let received = within(until, SECTION, async {
                self.0
                    .receive()
                    .await
                    .map_err(|e| sock_err(server, "receive from", e))
            })
            .await;
            match received {
                Ok((data, _)) if is_ours(&data) => return Ok(Some(data)),
                Ok(_) => {}
                Err(e) if e.is_timeout() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

fn sock_err(server: SocketAddr, what: &str, e: ErrorCode) -> Error {
    super::socket_error_p3(e, &format!("{what} the DNS server {server}"))
}

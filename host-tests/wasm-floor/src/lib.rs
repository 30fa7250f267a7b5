//! The floor under wasmtime: one OP_MSG round trip over `wasi:sockets` with
//! the fewest WASI calls a guest can make (one blocking write-and-flush, then
//! blocking reads until the frame is whole). The bench runs it through the
//! same host and engine as the driver, so the driver's time over this one is
//! what the driver itself costs, and this one's over the native floor is the
//! platform's (the export call, WASI's calls, wasmtime-wasi's runtime).
//!
//! `calls` times single WASI calls from inside one export call (the harness's
//! `--call-cost`).
//!
//! No deadline: it is a measuring stick, not a driver.

wit_bindgen::generate!({ path: "wit", world: "floor" });

use std::cell::RefCell;
use wasi::io::streams::{InputStream, OutputStream};
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::network::{ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
use wasi::sockets::tcp::TcpSocket;
use wasi::sockets::tcp_create_socket::create_tcp_socket;

struct Conn {
    // Dropped after the streams (fields drop in order).
    input: InputStream,
    output: OutputStream,
    _socket: TcpSocket,
}

thread_local! {
    static CONN: RefCell<Option<Conn>> = const { RefCell::new(None) };
}

/// `blocking-write-and-flush` takes at most this much a call.
const WRITE_MAX: usize = 4096;
/// The first read asks for this much: a small reply comes in one call.
const FIRST_READ: u64 = 64 * 1024;
/// The largest frame a server may send (mongod's 48,000,000 bytes, as the driver's
/// `wire::MAX_MESSAGE_SIZE`): a larger length is refused, not read.
const MAX_FRAME: usize = 48_000_000;

struct Floor;

impl Guest for Floor {
    fn connect(port: u16) -> Result<(), String> {
        let socket = create_tcp_socket(IpAddressFamily::Ipv4).map_err(|e| e.to_string())?;
        let to = IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port,
            address: (127, 0, 0, 1),
        });
        socket
            .start_connect(&instance_network(), to)
            .map_err(|e| e.to_string())?;
        let ready = socket.subscribe();
        let (input, output) = loop {
            match socket.finish_connect() {
                Ok(streams) => break streams,
                Err(ErrorCode::WouldBlock) => ready.block(),
                Err(e) => return Err(e.to_string()),
            }
        };
        drop(ready);
        CONN.set(Some(Conn {
            input,
            output,
            _socket: socket,
        }));
        Ok(())
    }

    fn round_trip(message: Vec<u8>) -> Result<Vec<u8>, String> {
        CONN.with_borrow(|conn| {
            let c = conn.as_ref().ok_or("not connected")?;
            for part in message.chunks(WRITE_MAX) {
                c.output
                    .blocking_write_and_flush(part)
                    .map_err(|e| format!("write: {e:?}"))?;
            }
            let read = |n: u64| c.input.blocking_read(n).map_err(|e| format!("read: {e:?}"));
            let mut reply = read(FIRST_READ)?;
            loop {
                let want = match reply.get(..4) {
                    Some(head) => frame_len(head)?,
                    None => 4,
                };
                if reply.len() >= want {
                    return Ok(reply);
                }
                reply.extend_from_slice(&read((want - reply.len()) as u64)?);
            }
        })
    }

    fn calls(which: String, n: u32) -> Result<u64, String> {
        let mut sum = 0u64;
        match which.as_str() {
            "clock" => {
                for _ in 0..n {
                    sum = sum.wrapping_add(wasi::clocks::monotonic_clock::now());
                }
            }
            "read" => CONN.with_borrow(|conn| {
                let c = conn.as_ref().ok_or("not connected")?;
                for _ in 0..n {
                    let got = c.input.read(4096).map_err(|e| format!("read: {e:?}"))?;
                    sum += got.len() as u64;
                }
                Ok::<_, String>(())
            })?,
            other => return Err(format!("no such call: {other}")),
        }
        Ok(sum)
    }
}

/// The frame's length from its four-byte head; negative or over
/// [`MAX_FRAME`] is an error.
fn frame_len(head: &[u8]) -> Result<usize, String> {
    let head: [u8; 4] = head.try_into().map_err(|_| "short frame head")?;
    usize::try_from(i32::from_le_bytes(head))
        .ok()
        .filter(|&n| n <= MAX_FRAME)
        .ok_or_else(|| format!("frame length {} refused", i32::from_le_bytes(head)))
}

export!(Floor);

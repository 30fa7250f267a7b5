//! A delaying relay on loopback: a distant server without netem (this kernel
//! has none). Every chunk read from one side is written to the other half a
//! round-trip time later, in order, each on its own clock (a chunk that
//! arrives 1 ms after another leaves 1 ms after it: nothing is serialised
//! behind a sleep). TCP, and UDP on the same port for a DNS server.
//!
//! TCP's own handshake happens on loopback at once, so the relay charges it:
//! what the client sends in the first round trip after `accept` is held as if
//! the connection had been set up one RTT later.
//!
//! `bytes_per_sec` caps each direction as a link would: a chunk waits for the
//! link to be free, takes `len / rate` to cross, then the propagation delay.
//!
//! The relay counts round trips as *flights*: on a TCP connection, one for its
//! handshake and one each time the client sends after the server last spoke
//! (a client turn that waits for an answer); over UDP, one per datagram sent
//! upstream. Each flight has the interval the client waited, so the flights
//! that overlap (a monitor's and a pool's connection at once, SRV and TXT at
//! once) can be told from those one after another ([`Flights::serial`]).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Round-trip time: each direction is delayed by half of it.
    pub rtt: Duration,
    /// A cap on each direction's throughput; `None`: unlimited.
    pub bytes_per_sec: Option<u64>,
}

impl Config {
    pub fn rtt(rtt: Duration) -> Config {
        Config {
            rtt,
            bytes_per_sec: None,
        }
    }
}

/// What kind of round trip a flight was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A TCP connection's SYN / SYN-ACK.
    Handshake,
    /// A client turn on a TCP connection that waited for an answer.
    Tcp,
    /// A datagram (a DNS query) that waited for one back.
    Udp,
}

#[derive(Clone, Copy, Debug)]
pub struct Flight {
    pub kind: Kind,
    /// The relay's connection number (UDP: one per client address).
    pub conn: u64,
    /// When the client's flight began (in the relay's simulated timeline).
    pub sent: Instant,
    /// When its answer reached the client; `None`: never answered.
    pub answered: Option<Instant>,
    /// Bytes the client sent in it.
    pub bytes: usize,
}

/// The flights the relay saw, in the order they began.
#[derive(Clone, Debug, Default)]
pub struct Flights(pub Vec<Flight>);

impl Flights {
    /// Flights that were answered, handshakes included: the round trips made.
    pub fn answered(&self) -> usize {
        self.0.iter().filter(|f| f.answered.is_some()).count()
    }

    pub fn count(&self, kind: Kind) -> usize {
        self.0
            .iter()
            .filter(|f| f.kind == kind && f.answered.is_some())
            .count()
    }

    /// TCP connections opened.
    pub fn connections(&self) -> usize {
        self.count(Kind::Handshake)
    }

    /// Round trips one after another: answered flights grouped while they
    /// overlap (one that begins before every earlier one is answered rides
    /// with them), so flights made at once count once. Meaningful when the
    /// RTT is well above the time the ends take to answer.
    pub fn serial(&self) -> usize {
        let mut fs: Vec<(Instant, Instant)> = self
            .0
            .iter()
            .filter_map(|f| Some((f.sent, f.answered?)))
            .collect();
        fs.sort();
        let mut n = 0;
        let mut end: Option<Instant> = None;
        for (sent, answered) in fs {
            match end {
                Some(e) if sent < e => end = Some(e.max(answered)),
                _ => {
                    n += 1;
                    end = Some(answered);
                }
            }
        }
        n
    }
}

type Ledger = Arc<Mutex<Vec<Flight>>>;

/// A running relay; stops when dropped (its connections are shut down).
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    ledger: Ledger,
    open: Arc<Mutex<Vec<TcpStream>>>,
    threads: Vec<JoinHandle<()>>,
    /// TCP payload bytes relayed so far: client to server, server to client.
    bytes: Arc<[AtomicU64; 2]>,
}

impl Relay {
    /// A TCP relay on a free loopback port to `upstream`.
    pub fn tcp(upstream: SocketAddr, config: Config) -> io::Result<Relay> {
        Relay::start("127.0.0.1:0".parse().unwrap(), upstream, config, false)
    }

    /// A relay on `listen` (port 0: any free one) to `upstream`, TCP and,
    /// with `udp`, UDP on the same port (a DNS server's two transports).
    pub fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        config: Config,
        udp: bool,
    ) -> io::Result<Relay> {
        if !listen.ip().is_loopback() || !upstream.ip().is_loopback() {
            return Err(io::Error::other("the relay is for loopback only"));
        }
        let (listener, datagrams) = if udp {
            // A fixed port may still be held for a moment by a relay just dropped.
            let mut found = None;
            let mut last = io::Error::other("no port");
            for _ in 0..20 {
                match UdpSocket::bind(listen)
                    .and_then(|u| Ok((TcpListener::bind(u.local_addr()?)?, u)))
                {
                    Ok((t, u)) => {
                        found = Some((t, Some(u)));
                        break;
                    }
                    Err(e) => {
                        last = e;
                        if listen.port() != 0 {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            }
            found.ok_or(last)?
        } else {
            (TcpListener::bind(listen)?, None)
        };
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let next_conn = Arc::new(AtomicU64::new(0));
        let bytes: Arc<[AtomicU64; 2]> = Arc::default();
        let mut threads = Vec::new();
        {
            let (stop, ledger, open, next_conn, bytes) = (
                stop.clone(),
                ledger.clone(),
                open.clone(),
                next_conn.clone(),
                bytes.clone(),
            );
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let id = next_conn.fetch_add(1, Ordering::Relaxed);
                            let pair =
                                tcp_pair(client, upstream, config, id, &ledger, &open, &bytes);
                            if let Err(e) = pair {
                                eprintln!("relay: connection to {upstream}: {e}");
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }));
        }
        if let Some(socket) = datagrams {
            let (stop, ledger) = (stop.clone(), ledger.clone());
            threads.push(std::thread::spawn(move || {
                udp_relay(socket, upstream, config, &stop, &ledger, &next_conn)
            }));
        }
        Ok(Relay {
            addr,
            stop,
            ledger,
            open,
            threads,
            bytes,
        })
    }

    /// TCP payload bytes relayed so far, (client to server, server to client).
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.bytes[0].load(Ordering::Relaxed),
            self.bytes[1].load(Ordering::Relaxed),
        )
    }

    /// Where clients connect (and send datagrams).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The flights so far, forgotten here.
    pub fn take(&self) -> Flights {
        let mut v = std::mem::take(&mut *self.ledger.lock().unwrap());
        v.sort_by_key(|f| f.sent);
        Flights(v)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One direction's delay line: items leave in the order they came, each at
/// its own due time. The link model (propagation + optional rate) decides
/// the due time when the item is queued.
struct Line {
    tx: Sender<(Instant, Option<Vec<u8>>)>,
    half: Duration,
    rate: Option<u64>,
    link_free: Instant,
}

/// A chunk and when it is due (`None`: the write half is shut).
type Timed = (Instant, Option<Vec<u8>>);

impl Line {
    /// A delay line writing to `out` (`None` data: shut its write half).
    fn new(config: Config, mut out: impl FnMut(Option<&[u8]>) -> bool + Send + 'static) -> Line {
        let (tx, rx): (_, Receiver<Timed>) = channel();
        std::thread::spawn(move || {
            for (due, data) in rx {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if !out(data.as_deref()) {
                    break;
                }
            }
        });
        Line {
            tx,
            half: config.rtt / 2,
            rate: config.bytes_per_sec,
            link_free: Instant::now(),
        }
    }

    /// Queues `data` that reached the relay at `at`; when it reaches the other end.
    fn send(&mut self, at: Instant, data: Option<Vec<u8>>) -> Instant {
        let start = at.max(self.link_free);
        let crossing = match (self.rate, &data) {
            (Some(rate), Some(d)) if rate > 0 => {
                Duration::from_secs_f64(d.len() as f64 / rate as f64)
            }
            _ => Duration::ZERO,
        };
        self.link_free = start + crossing;
        let due = self.link_free + self.half;
        let _ = self.tx.send((due, data));
        due
    }
}

/// Flight `i` of connection `conn` in the ledger, unless `Relay::take`
/// handed it out since (the index then names another flight, or none).
fn flight(ledger: &mut [Flight], i: usize, conn: u64) -> Option<&mut Flight> {
    ledger.get_mut(i).filter(|f| f.conn == conn)
}

/// Per connection: whether the client's last flight still waits for an answer.
struct Turn {
    waiting: Option<usize>,
}

fn tcp_pair(
    client: TcpStream,
    upstream: SocketAddr,
    config: Config,
    conn: u64,
    ledger: &Ledger,
    open: &Mutex<Vec<TcpStream>>,
    bytes: &Arc<[AtomicU64; 2]>,
) -> io::Result<()> {
    let accepted = Instant::now();
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut o = open.lock().unwrap();
        o.retain(|s| s.peer_addr().is_ok());
        o.push(client.try_clone()?);
        o.push(server.try_clone()?);
    }
    // The TCP handshake: a round trip before the client may send.
    let ready = accepted + config.rtt;
    ledger.lock().unwrap().push(Flight {
        kind: Kind::Handshake,
        conn,
        sent: accepted,
        answered: Some(ready),
        bytes: 0,
    });
    let turn = Arc::new(Mutex::new(Turn { waiting: None }));
    let writer = |mut to: TcpStream| {
        move |data: Option<&[u8]>| match data {
            Some(d) => to.write_all(d).is_ok(),
            None => {
                let _ = to.shutdown(Shutdown::Write);
                false
            }
        }
    };
    // Client to server.
    {
        let mut line = Line::new(config, writer(server.try_clone()?));
        let (mut from, turn, ledger) = (client.try_clone()?, turn.clone(), ledger.clone());
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let at = Instant::now().max(ready);
                if n == 0 {
                    line.send(at, None);
                    break;
                }
                bytes[0].fetch_add(n as u64, Ordering::Relaxed);
                {
                    let mut t = turn.lock().unwrap();
                    let mut l = ledger.lock().unwrap();
                    match t.waiting.and_then(|i| flight(&mut l, i, conn)) {
                        Some(f) => f.bytes += n,
                        None => {
                            t.waiting = Some(l.len());
                            l.push(Flight {
                                kind: Kind::Tcp,
                                conn,
                                sent: at,
                                answered: None,
                                bytes: n,
                            });
                        }
                    }
                }
                line.send(at, Some(buf[..n].to_vec()));
            }
        });
    }
    // Server to client.
    {
        let mut line = Line::new(config, writer(client));
        let (mut from, ledger, bytes) = (server, ledger.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let at = Instant::now();
                if n == 0 {
                    line.send(at, None);
                    break;
                }
                bytes[1].fetch_add(n as u64, Ordering::Relaxed);
                let due = line.send(at, Some(buf[..n].to_vec()));
                if let Some(i) = turn.lock().unwrap().waiting.take() {
                    if let Some(f) = flight(&mut ledger.lock().unwrap(), i, conn) {
                        f.answered = Some(due);
                    }
                }
            }
        });
    }
    Ok(())
}

/// How long a UDP peer's reply reader waits for a reply before it ends.
const READER_IDLE: Duration = if cfg!(test) {
    Duration::from_millis(300)
} else {
    Duration::from_secs(10)
};

/// UDP: one upstream socket per client address (so replies find their way
/// back), a delay line each way.
fn udp_relay(
    socket: UdpSocket,
    upstream: SocketAddr,
    config: Config,
    stop: &Arc<AtomicBool>,
    ledger: &Ledger,
    next_conn: &AtomicU64,
) {
    let _ = socket.set_read_timeout(Some(Duration::from_millis(50)));
    let back = socket.try_clone().expect("clone the UDP socket");
    // Replies to clients: one line; each item names its client.
    let (to_clients_tx, to_clients_rx) = channel::<(Instant, SocketAddr, Vec<u8>)>();
    std::thread::spawn(move || {
        for (due, peer, data) in to_clients_rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let _ = back.send_to(&data, peer);
        }
    });
    let to_clients = Arc::new(Mutex::new((to_clients_tx, Instant::now())));
    // (client, DNS id) -> the flight waiting for that reply.
    let pending: Arc<Mutex<HashMap<(SocketAddr, u16), usize>>> = Arc::default();
    // Per client address: its flight counter, its line upstream, and whether
    // the thread reading its replies still runs.
    let mut peers: HashMap<SocketAddr, (u64, Line, Arc<AtomicBool>)> = HashMap::new();
    let mut buf = [0u8; 65_535];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let at = Instant::now();
        // A peer whose reply reader ended (idle for 10 s) is a new peer now: the
        // OS reuses ephemeral ports, and a stale entry would send upstream with
        // no one reading the replies (seen as a lookup that never got an answer).
        if peers
            .get(&peer)
            .is_some_and(|(_, _, alive)| !alive.load(Ordering::Relaxed))
        {
            peers.remove(&peer);
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = peers.entry(peer) {
            let Ok(up) = UdpSocket::bind("127.0.0.1:0").and_then(|u| {
                u.connect(upstream)?;
                u.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(u)
            }) else {
                continue;
            };
            let conn = next_conn.fetch_add(1, Ordering::Relaxed);
            let sender = up.try_clone().expect("clone the UDP socket");
            let line = Line::new(config, move |d| {
                d.map(|d| sender.send(d).is_ok()).unwrap_or(false)
            });
            // Replies from upstream, toward `peer`.
            let (to_clients, pending, ledger, stop) = (
                to_clients.clone(),
                pending.clone(),
                ledger.clone(),
                stop.clone(),
            );
            let half = config.rtt / 2;
            let alive = Arc::new(AtomicBool::new(true));
            let reading = alive.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65_535];
                let mut idle = Duration::ZERO;
                // Ends with the relay, or READER_IDLE after its last reply.
                while idle < READER_IDLE && !stop.load(Ordering::Relaxed) {
                    let Ok(n) = up.recv(&mut buf) else {
                        idle += Duration::from_millis(50);
                        continue;
                    };
                    idle = Duration::ZERO;
                    let due = Instant::now() + half;
                    {
                        let (tx, _) = &*to_clients.lock().unwrap();
                        let _ = tx.send((due, peer, buf[..n].to_vec()));
                    }
                    if n >= 2 {
                        let id = u16::from_be_bytes([buf[0], buf[1]]);
                        if let Some(i) = pending.lock().unwrap().remove(&(peer, id)) {
                            if let Some(f) = flight(&mut ledger.lock().unwrap(), i, conn) {
                                f.answered = Some(due);
                            }
                        }
                    }
                }
                reading.store(false, Ordering::Relaxed);
            });
            slot.insert((conn, line, alive));
        }
        let (conn, line, _) = peers.get_mut(&peer).expect("inserted above");
        if n >= 2 {
            let id = u16::from_be_bytes([buf[0], buf[1]]);
            let mut l = ledger.lock().unwrap();
            pending.lock().unwrap().insert((peer, id), l.len());
            l.push(Flight {
                kind: Kind::Udp,
                conn: *conn,
                sent: at,
                answered: None,
                bytes: n,
            });
        }
        line.send(at, Some(buf[..n].to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming().take(4) {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn each_turn_pays_the_rtt_and_is_counted() {
        let rtt = Duration::from_millis(40);
        let relay = Relay::tcp(echo(), Config::rtt(rtt)).unwrap();
        let t = Instant::now();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        let mut buf = [0u8; 2];
        for _ in 0..3 {
            c.write_all(b"hi").unwrap();
            c.read_exact(&mut buf).unwrap();
        }
        let took = t.elapsed();
        // Handshake + 3 turns = 4 RTT; generous above for a loaded machine.
        assert!(took >= rtt * 4, "{took:?}");
        assert!(took < rtt * 4 + Duration::from_millis(400), "{took:?}");
        drop(c);
        std::thread::sleep(Duration::from_millis(50));
        let f = relay.take();
        assert_eq!(f.connections(), 1);
        assert_eq!(f.count(Kind::Tcp), 3);
        assert_eq!(f.serial(), 4);
    }

    #[test]
    fn chunks_are_not_serialised_behind_each_other() {
        let rtt = Duration::from_millis(100);
        let relay = Relay::tcp(echo(), Config::rtt(rtt)).unwrap();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        std::thread::sleep(rtt); // past the handshake
        let t = Instant::now();
        // Five sends 10 ms apart, no waiting: all back within about one RTT
        // of the last, not five.
        for _ in 0..5 {
            c.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut got = 0;
        let mut buf = [0u8; 8];
        while got < 5 {
            got += c.read(&mut buf).unwrap();
        }
        let took = t.elapsed();
        assert!(took >= rtt, "{took:?}");
        assert!(took < rtt * 2 + Duration::from_millis(200), "{took:?}");
        let f = relay.take();
        assert_eq!(f.serial(), 2, "{f:?}"); // the handshake, then overlapping turns
    }

    #[test]
    fn a_rate_cap_slows_a_bulk_transfer() {
        let relay = Relay::tcp(
            echo(),
            Config {
                rtt: Duration::ZERO,
                bytes_per_sec: Some(100_000),
            },
        )
        .unwrap();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        let t = Instant::now();
        let data = vec![7u8; 20_000];
        let mut back = vec![0u8; 20_000];
        let mut w = c.try_clone().unwrap();
        let writer = std::thread::spawn(move || w.write_all(&data).unwrap());
        c.read_exact(&mut back).unwrap();
        writer.join().unwrap();
        // 20 kB at 100 kB/s each way: at least 0.2 s (pipelined both ways).
        assert!(
            t.elapsed() >= Duration::from_millis(190),
            "{:?}",
            t.elapsed()
        );
    }

    /// A UDP server echoing two datagrams, behind a relay of `rtt`, and a
    /// client socket that waits at most `wait` for each answer.
    fn udp_echo_relay(rtt: Duration, wait: Duration) -> (Relay, UdpSocket) {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let up = server.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            for _ in 0..2 {
                let (n, peer) = server.recv_from(&mut buf).unwrap();
                server.send_to(&buf[..n], peer).unwrap();
            }
        });
        let relay =
            Relay::start("127.0.0.1:0".parse().unwrap(), up, Config::rtt(rtt), true).unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(wait)).unwrap();
        (relay, c)
    }

    #[test]
    fn datagrams_pay_the_rtt_and_count_as_flights() {
        let rtt = Duration::from_millis(40);
        let (relay, c) = udp_echo_relay(rtt, Duration::from_secs(5));
        let t = Instant::now();
        c.send_to(b"\x00\x01q", relay.addr()).unwrap();
        c.send_to(b"\x00\x02q", relay.addr()).unwrap();
        let mut buf = [0u8; 16];
        c.recv(&mut buf).unwrap();
        c.recv(&mut buf).unwrap();
        let took = t.elapsed();
        assert!(took >= rtt && took < rtt * 2, "{took:?}");
        let f = relay.take();
        assert_eq!(f.count(Kind::Udp), 2);
        assert_eq!(f.serial(), 1, "two queries at once: one round trip");
    }

    /// A client address back after its reply reader ended (an ephemeral
    /// port the OS gave again) still gets its answers.
    #[test]
    fn a_peer_back_after_its_reader_ended_is_answered() {
        let (relay, c) = udp_echo_relay(Duration::ZERO, Duration::from_secs(3));
        let mut buf = [0u8; 16];
        c.send_to(b"\x00\x01q", relay.addr()).unwrap();
        c.recv(&mut buf).expect("the first answer");
        std::thread::sleep(READER_IDLE * 3);
        c.send_to(b"\x00\x02q", relay.addr()).unwrap();
        let n = c.recv(&mut buf).expect("an answer after the reader ended");
        assert_eq!(&buf[..n], b"\x00\x02q");
    }
}

//! A small authoritative DNS server on loopback for the `mongodb+srv` tests:
//! UDP and TCP on the same port, std threads, answers only from the records
//! it was given (NXDOMAIN otherwise), stops when dropped. Its encoder is
//! written apart from the driver's parser on purpose, and compresses the
//! answer owner names so the driver's pointer handling is exercised.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const SRV: u16 = 33;
const TXT: u16 = 16;
const A: u16 = 1;

/// Records by lowercase name, in the order given.
#[derive(Clone, Debug, Default)]
pub struct Records {
    srv: HashMap<String, Vec<(u16, String)>>,
    txt: HashMap<String, Vec<Vec<String>>>,
    a: HashMap<String, Vec<Ipv4Addr>>,
}

impl Records {
    pub fn srv(mut self, name: &str, port: u16, target: &str) -> Self {
        let e = self.srv.entry(name.to_ascii_lowercase()).or_default();
        e.push((port, target.to_string()));
        self
    }

    /// One TXT record of one or more character-strings.
    pub fn txt(mut self, name: &str, strings: &[&str]) -> Self {
        let e = self.txt.entry(name.to_ascii_lowercase()).or_default();
        e.push(strings.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn a(mut self, name: &str, ip: Ipv4Addr) -> Self {
        self.a
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push(ip);
        self
    }

    /// The seedlist spec's records (`tests/data/seedlist-records.txt`), with
    /// each SRV port passed through `port` (to point at ephemeral test ports).
    pub fn seedlist_spec(port: impl Fn(u16) -> u16) -> Records {
        let path = crate::repo_root().join("tests/data/seedlist-records.txt");
        let text = std::fs::read_to_string(&path).expect("seedlist records file");
        let mut r = Records::default();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            r = match w.as_slice() {
                ["SRV", name, p, target] => r.srv(name, port(p.parse().expect("port")), target),
                ["TXT", name, strings] => {
                    let parts: Vec<&str> = strings.split('|').collect();
                    r.txt(name, &parts)
                }
                ["A", name, ip] => r.a(name, ip.parse().expect("ipv4")),
                _ => r,
            };
        }
        r
    }
}

/// How the responder misbehaves, for the failure tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Answer,
    /// Reads queries and never answers.
    Silent,
    /// Over UDP, answers every query with TC=1 and no records; TCP answers fully.
    TruncateUdp,
    /// Over UDP, sends garbage and the reply under another id before the reply.
    StrayFirst,
    /// Answers with a reply that claims 65535 answers it does not hold.
    Malformed,
}

pub struct DnsResponder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    udp_queries: Arc<AtomicUsize>,
    tcp_queries: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    threads: Vec<JoinHandle<()>>,
}

impl DnsResponder {
    pub fn start(records: Records, mode: Mode) -> std::io::Result<DnsResponder> {
        // UDP and TCP on one port number: bind UDP first, then TCP on its port.
        let (udp, tcp) = (0..20)
            .find_map(|_| {
                let udp = UdpSocket::bind("127.0.0.1:0").ok()?;
                let tcp = TcpListener::bind(udp.local_addr().ok()?).ok()?;
                Some((udp, tcp))
            })
            .ok_or_else(|| std::io::Error::other("no free port for UDP and TCP"))?;
        let addr = udp.local_addr()?;
        udp.set_read_timeout(Some(Duration::from_millis(50)))?;
        tcp.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let udp_queries = Arc::new(AtomicUsize::new(0));
        let tcp_queries = Arc::new(AtomicUsize::new(0));
        let log = Arc::new(Mutex::new(Vec::new()));
        let records = Arc::new(records);
        let mut threads = Vec::new();
        {
            let (stop, count, records, log) = (
                stop.clone(),
                udp_queries.clone(),
                records.clone(),
                log.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                        continue;
                    };
                    count.fetch_add(1, Ordering::Relaxed);
                    if mode == Mode::Silent {
                        continue;
                    }
                    if let Some((reply, q)) = answer(&buf[..n], &records, mode == Mode::TruncateUdp)
                    {
                        log.lock().unwrap().push(format!("udp {q}"));
                        if mode == Mode::StrayFirst {
                            let mut other = reply.clone();
                            other[1] ^= 1;
                            let _ = udp.send_to(b"\x00garbage", peer);
                            let _ = udp.send_to(&other, peer);
                        }
                        let mut reply = reply;
                        if mode == Mode::Malformed {
                            reply[6] = 0xFF;
                            reply[7] = 0xFF;
                        }
                        let _ = udp.send_to(&reply, peer);
                    }
                }
            }));
        }
        {
            let (stop, count, records, log) = (
                stop.clone(),
                tcp_queries.clone(),
                records.clone(),
                log.clone(),
            );
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match tcp.accept() {
                        Ok((s, _)) => {
                            if mode != Mode::Silent {
                                serve_tcp(s, &records, &count, &log);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }));
        }
        Ok(DnsResponder {
            addr,
            stop,
            udp_queries,
            tcp_queries,
            log,
            threads,
        })
    }

    /// The UDP and TCP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn udp_queries(&self) -> usize {
        self.udp_queries.load(Ordering::Relaxed)
    }

    pub fn tcp_queries(&self) -> usize {
        self.tcp_queries.load(Ordering::Relaxed)
    }

    /// "udp NAME TYPE" / "tcp NAME TYPE" for each query answered.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for DnsResponder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One TCP connection: length-prefixed queries until EOF, a bad frame, or 1 s idle.
fn serve_tcp(mut s: TcpStream, records: &Records, count: &AtomicUsize, log: &Mutex<Vec<String>>) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    for _ in 0..16 {
        let mut len = [0u8; 2];
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if s.read_exact(&mut msg).is_err() {
            return;
        }
        count.fetch_add(1, Ordering::Relaxed);
        let Some((reply, q)) = answer(&msg, records, false) else {
            return;
        };
        log.lock().unwrap().push(format!("tcp {q}"));
        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if s.write_all(&framed).is_err() {
            return;
        }
    }
}

/// The reply to one query and a "NAME TYPE" description; `None` for garbage.
fn answer(query: &[u8], records: &Records, truncate: bool) -> Option<(Vec<u8>, String)> {
    if query.len() < 12 || query[2] & 0x80 != 0 || query[4..6] != [0, 1] {
        return None;
    }
    // The question's name (uncompressed, as queries are).
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(pos)?);
        if len == 0 {
            pos += 1;
            break;
        }
        if len > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(query.get(pos + 1..pos + 1 + len)?).to_string());
        pos += 1 + len;
    }
    let qtype = u16::from_be_bytes([*query.get(pos)?, *query.get(pos + 1)?]);
    let question = query.get(12..pos + 4)?;
    let name = labels.join(".").to_ascii_lowercase();
    let mut rdatas: Vec<Vec<u8>> = Vec::new();
    match qtype {
        SRV => {
            for (port, target) in records.srv.get(&name).into_iter().flatten() {
                let mut d = vec![0, 0, 0, 0];
                d.extend_from_slice(&port.to_be_bytes());
                encode_name(&mut d, target);
                rdatas.push(d);
            }
        }
        TXT => {
            for strings in records.txt.get(&name).into_iter().flatten() {
                let mut d = Vec::new();
                for s in strings {
                    d.push(s.len() as u8);
                    d.extend_from_slice(s.as_bytes());
                }
                rdatas.push(d);
            }
        }
        A => {
            for ip in records.a.get(&name).into_iter().flatten() {
                rdatas.push(ip.octets().to_vec());
            }
        }
        _ => {}
    }
    let known = records.srv.contains_key(&name)
        || records.txt.contains_key(&name)
        || records.a.contains_key(&name);
    let rcode = if known { 0 } else { 3 };
    let tc = truncate && qtype != A;
    let mut flags: u16 = 0x8400 | 0x0100 | rcode; // QR, AA, RD copied
    if tc {
        flags |= 0x0200;
    }
    let answers = if tc { Vec::new() } else { rdatas };
    let mut m = Vec::new();
    m.extend_from_slice(&query[0..2]);
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(question);
    for rdata in &answers {
        m.extend_from_slice(&[0xC0, 12]); // the owner: a pointer to the question's name
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(rdata);
    }
    let kind = match qtype {
        SRV => "SRV",
        TXT => "TXT",
        A => "A",
        28 => "AAAA",
        _ => "other",
    };
    Some((m, format!("{name} {kind}")))
}

fn encode_name(out: &mut Vec<u8>, name: &str) {
    for label in name.trim_end_matches('.').split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

//! The distant section (`--only distant`): a cold request (a new client, then
//! one findOne) against a server one round-trip time away, for plain, TLS,
//! TLS + SCRAM-SHA-256 and TLS + MONGODB-X509, each by host:port and by
//! `mongodb+srv`, at 0 and 20 ms RTT.
//!
//! The topology: the bench's in-memory server behind three failpoint proxies
//! (plain; TLS; TLS with users), each behind a delaying relay
//! (`host_tests::relay`), and the DNS responder (SRV, TXT, A) behind a relay
//! of its own, so every TCP handshake, TLS flight, command and DNS query pays
//! the RTT. The relays count the flights (see `relay.rs`): `flights` is every
//! round trip the request made (TCP handshakes, client turns that waited for
//! an answer, DNS queries), `serial` those one after another (flights that
//! overlap, such as a monitor's and a pool's connection or two queries at
//! once, count once).
//!
//! CPU time: mongo-wasi's is the CPU time of the thread that runs the guest
//! (wasm code and the WASI host calls it makes; wasmtime-wasi's own I/O
//! threads and the relays/proxies are not in it); the `mongodb` crate's and
//! PyMongo's are their whole process's CPU time over the request (their
//! monitor threads included).
//!
//! The other drivers resolve names with the system's resolver, which reads
//! /etc/resolv.conf (port 53 only): they run under `unshare -m` with a
//! resolv.conf naming the DNS relay at 127.53.0.1:53 bound over the real one
//! (root only; without it their `mongodb+srv` rows are skipped).
//!
//! The bandwidth-limited case: a warm mongo-wasi client across a link of
//! [`LINK_RTT_MS`] and [`LINK_BYTES_PER_SEC`] each way (the relay's cap),
//! reading [`FIND_MANY`] documents with find and inserting [`INSERT_MANY`]
//! with insertMany, once per compressor (none, snappy, zlib, zstd; the proxy
//! speaks OP_COMPRESSED): the wall time and the bytes on the link each way.
//! The documents are the driver benchmark's (copies of tweet.json, each with
//! its own _id), which compress better than most real data.

use crate::contenders::External;
use crate::report::quantile;
use crate::Results;
use bson::rawdoc;
use host_tests::bench_server::BenchServer;
use host_tests::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions;
use host_tests::dns_responder::{DnsResponder, Mode, Records};
use host_tests::guest::{find_options, Guest};
use host_tests::relay::{self, Flights, Kind, Relay};
use mongo_wasi_proxy::testcerts::{ClientAuth, TestCerts, CLIENT_SUBJECT};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const WASI: &str = "mongo-wasi";
/// mongo-wasi on WASI 0.3: a new wasmtime CLI process per request
/// (host-tests/p3-bench `cold`), as a 0.3 host's instance after idling out.
const P3: &str = "mongo-wasi-p3";
/// mongo-wasi in a new instance given the warm state of the one before.
const WASI_WARM: &str = "mongo-wasi+warm";
const NATIVE: &str = "mongodb-rust";
const PYMONGO: &str = "pymongo";
/// The RTTs measured, ms.
const RTTS: [u64; 2] = [0, 20];
/// The cases, in the order printed.
const CASES: [&str; 4] = ["plain", "tls", "tls_scram_sha_256", "tls_x509"];
/// The SRV records' domain and target (in the test server certificate).
const DOMAIN: &str = "test.build.10gen.cc";
const TARGET: &str = "localhost.test.build.10gen.cc";
/// Where the DNS relay listens when it can: port 53, which /etc/resolv.conf implies.
const DNS_ADDR: &str = "127.53.0.1:53";
const SCRAM_USER: &str = "bench";
const SCRAM_PW: &str = "bench-pw";

pub struct Setup<'a> {
    pub native: Option<&'a Path>,
    pub python: Option<(&'a Path, &'a Path)>,
    pub data_dir: &'a Path,
    /// The bandwidth case's document (tweet.json).
    pub tweet: &'a bson::RawDocument,
    /// Cold requests per cell (contender, case, srv, RTT).
    pub runs: usize,
    /// The wasmtime CLI and the WASI 0.3 guest (host-tests/p3-bench), for
    /// the `mongo-wasi-p3` rows.
    pub p3: Option<(&'a Path, &'a Path)>,
}

/// The WASI 0.3 guest, precompiled, and what each of its runs is given.
struct P3Guest {
    wasmtime: PathBuf,
    cwasm: PathBuf,
    /// The certificates' directory, preopened at the same path.
    certs: PathBuf,
}

impl P3Guest {
    fn new(wasmtime: &Path, guest: &Path, certs: &Path) -> anyhow::Result<P3Guest> {
        Ok(P3Guest {
            wasmtime: wasmtime.to_path_buf(),
            cwasm: crate::concurrent::compile(wasmtime, guest)?,
            certs: certs.to_path_buf(),
        })
    }

    /// One cold request in a new process: its start and end (the guest's
    /// wall clock), its wall ms (the guest's monotonic clock), and the
    /// process's CPU ms (wasmtime's loading of the precompiled guest included).
    fn cold(
        &self,
        d: &Distant,
        uri: &str,
        clock: &Clock,
    ) -> anyhow::Result<(Instant, Instant, f64, f64)> {
        let cpu = children_cpu();
        let out = Command::new(&self.wasmtime)
            .args(crate::concurrent::RUN)
            .arg("--dir")
            .arg(format!("{0}::{0}", self.certs.display()))
            .arg("--env")
            .arg(format!("MONGO_WASI_DNS_SERVER={}", d.dns.addr()))
            .arg(&self.cwasm)
            .arg("cold")
            .arg(uri)
            .stdin(std::process::Stdio::null())
            .output()?;
        let cpu_ms = (children_cpu() - cpu).as_secs_f64() * 1e3;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let v: Value = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!(
                "{P3} {uri}: {e}: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let times =
            cold_reply(&v, clock, cpu_ms).map_err(|e| anyhow::anyhow!("{P3} {uri}: {e}"))?;
        anyhow::ensure!(v["found"] == true, "{P3}: the cold findOne found nothing");
        Ok(times)
    }
}

/// A child's answer for one cold request (`{"t0_ns", "t1_ns", "total_s"}`,
/// or `{"error"}`): its start and end on `clock`, its wall ms, and `cpu_ms`.
fn cold_reply(
    v: &Value,
    clock: &Clock,
    cpu_ms: f64,
) -> anyhow::Result<(Instant, Instant, f64, f64)> {
    if let Some(e) = v.get("error") {
        anyhow::bail!("{e}");
    }
    let ns = |k: &str| v[k].as_u64().unwrap_or(0);
    let wall = v["total_s"].as_f64().unwrap_or(0.0) * 1e3;
    Ok((
        clock.instant(ns("t0_ns")),
        clock.instant(ns("t1_ns")),
        wall,
        cpu_ms,
    ))
}

/// CPU time of this process's waited-for children.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a pointer to a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The bandwidth-limited link: RTT and each direction's cap (8 Mbit/s).
const LINK_RTT_MS: u64 = 20;
const LINK_BYTES_PER_SEC: u64 = 1_000_000;
/// Documents read by find, and inserted by insertMany, per run.
const FIND_MANY: i64 = 1_000;
const INSERT_MANY: usize = 1_000;
const COMPRESSORS: [&str; 4] = ["none", "snappy", "zlib", "zstd"];

/// One transfer across the capped link.
#[derive(Clone, Debug, Default)]
pub struct Transfer {
    pub wall_ms: f64,
    /// Bytes on the link, client to server and back.
    pub up: u64,
    pub down: u64,
}

/// (compressor, "find_many" | "insert_many") -> runs.
pub type Bandwidth = BTreeMap<(String, String), Vec<Transfer>>;

/// One cold request's figures.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub wall_ms: f64,
    pub cpu_ms: f64,
    pub flights: usize,
    pub serial: usize,
    pub connections: usize,
    pub dns: usize,
}

/// (contender, case, srv, rtt ms) -> runs.
pub type Figures = BTreeMap<(String, String, bool, u64), Vec<Run>>;

/// The URI of `case` (by host:port of `port`, or by SRV name), with what the
/// other drivers need from files (`files`: the CA and client certificate paths).
fn uri(case: &str, srv: bool, port: u16, files: Option<(&Path, &Path)>) -> String {
    let host = match srv {
        true => format!("{}.{DOMAIN}", case.replace('_', "-")),
        false => format!("127.0.0.1:{port}"),
    };
    let scheme = if srv { "mongodb+srv" } else { "mongodb" };
    let user = match case {
        "tls_scram_sha_256" => format!("{SCRAM_USER}:{SCRAM_PW}@"),
        _ => String::new(),
    };
    let mut q = vec![];
    match case {
        "plain" => q.push("tls=false".to_string()),
        _ => q.push("tls=true".to_string()),
    }
    match case {
        "tls_scram_sha_256" => q.push("authMechanism=SCRAM-SHA-256".into()),
        "tls_x509" => q.push("authMechanism=MONGODB-X509".into()),
        _ => {}
    }
    // A failure shows in seconds, not after the drivers' 30 s default.
    q.push("serverSelectionTimeoutMS=10000".into());
    if let (Some((ca, client)), true) = (files, case != "plain") {
        q.push(format!("tlsCAFile={}", ca.display()));
        if case == "tls_x509" {
            q.push(format!("tlsCertificateKeyFile={}", client.display()));
        }
    }
    format!("{scheme}://{user}{host}/?{}", q.join("&"))
}

/// The proxies in front of the in-memory server, one per kind of case.
struct Proxies {
    plain: Proxy,
    tls: Proxy,
    auth: Proxy,
}

impl Proxies {
    fn start(backend: SocketAddr, certs: &TestCerts) -> anyhow::Result<Proxies> {
        let tls = || Some(certs.server_config(&certs.server, ClientAuth::Optional));
        Ok(Proxies {
            plain: Proxy::start(ProxyConfig::new(backend))?,
            tls: Proxy::start(ProxyConfig {
                tls: tls(),
                ..ProxyConfig::new(backend)
            })?,
            auth: Proxy::start(ProxyConfig {
                tls: tls(),
                auth: AuthConfig::with_users(vec![
                    User::x509(CLIENT_SUBJECT),
                    User::new(SCRAM_USER, "admin", SCRAM_PW),
                ]),
                ..ProxyConfig::new(backend)
            })?,
        })
    }

    fn of(&self, case: &str) -> &Proxy {
        match case {
            "plain" => &self.plain,
            "tls" => &self.tls,
            _ => &self.auth,
        }
    }
}

/// One RTT's topology: a relay per case and one for DNS.
struct Distant {
    relays: BTreeMap<&'static str, Relay>,
    dns: Relay,
    _responder: DnsResponder,
}

impl Distant {
    fn start(proxies: &Proxies, rtt: Duration, dns_at: SocketAddr) -> anyhow::Result<Distant> {
        let config = relay::Config::rtt(rtt);
        let mut relays = BTreeMap::new();
        let mut records = Records::default().a(TARGET, Ipv4Addr::LOCALHOST);
        for case in CASES {
            let r = Relay::tcp(proxies.of(case).addresses()[0], config)?;
            let name = format!("{}.{DOMAIN}", case.replace('_', "-"));
            records = records.srv(&format!("_mongodb._tcp.{name}"), r.addr().port(), TARGET);
            // Atlas publishes a TXT record (authSource, replicaSet); X.509's
            // source is $external, so none there.
            if case != "tls_x509" {
                records = records.txt(&name, &["authSource=admin"]);
            }
            relays.insert(case, r);
        }
        let responder = DnsResponder::start(records, Mode::Answer)?;
        let dns = Relay::start(dns_at, responder.addr(), config, true)?;
        Ok(Distant {
            relays,
            dns,
            _responder: responder,
        })
    }

    /// Everything the relays saw since the last call.
    fn take(&self) -> Flights {
        let mut all = self.dns.take().0;
        for r in self.relays.values() {
            all.extend(r.take().0);
        }
        all.sort_by_key(|f| f.sent);
        Flights(all)
    }
}

/// The flights of one request: begun at or after `t0`, answered by `t1`.
fn run_of(flights: &Flights, t0: Instant, t1: Instant, wall_ms: f64, cpu_ms: f64) -> Run {
    let slack = Duration::from_millis(1);
    let f = Flights(
        flights
            .0
            .iter()
            .filter(|f| f.sent + slack >= t0 && f.answered.is_some_and(|a| a <= t1 + slack))
            .copied()
            .collect(),
    );
    Run {
        wall_ms,
        cpu_ms,
        flights: f.answered(),
        serial: f.serial(),
        connections: f.connections(),
        dns: f.count(Kind::Udp),
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CLOCK_MONOTONIC (std's `Instant` clock; the children's too), or the wall
/// clock (a WASI guest's), as an Instant mapper: a child's nanoseconds to
/// this process's `Instant`.
struct Clock {
    at: Instant,
    ns: u64,
}

impl Clock {
    /// The wall clock: nanoseconds since the epoch.
    fn wall() -> Clock {
        let at = Instant::now();
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        Clock {
            at,
            ns: since.map_or(0, |d| d.as_nanos() as u64),
        }
    }

    fn new() -> Clock {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let at = Instant::now();
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Clock {
            at,
            ns: ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        }
    }

    fn instant(&self, ns: u64) -> Instant {
        if ns >= self.ns {
            self.at + Duration::from_nanos(ns - self.ns)
        } else {
            self.at - Duration::from_nanos(self.ns - ns)
        }
    }
}

/// mongo-wasi: a new instance (not timed), then client construction and the
/// first findOne (timed). With `warm`, the client adopts that warm state
/// (timed) before the findOne. Returns the client's warm state afterwards.
fn wasi_cold(
    d: &Distant,
    certs: &TestCerts,
    case: &str,
    srv: bool,
    warm: Option<&[u8]>,
) -> anyhow::Result<(Instant, Instant, f64, Vec<u8>)> {
    let relay = &d.relays[case];
    let dns = d.dns.addr();
    let dns_s = dns.to_string();
    let env = [("MONGO_WASI_DNS_SERVER", dns_s.as_str())];
    let tcp = [relay.addr(), dns];
    let mut g = Guest::in_sandbox(&host_tests::Sandbox {
        tcp: &tcp,
        udp: &[dns],
        env: &env,
        ..Default::default()
    })?;
    let opts = ClientOptions {
        timeout_ms: Some(30_000),
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: (case != "plain").then(|| certs.ca.as_bytes().to_vec()),
        tls_certificate_key_pem: (case == "tls_x509").then(|| certs.client.bundle().into_bytes()),
        logging: None,
    };
    let uri = uri(case, srv, relay.addr().port(), None);
    let cpu = thread_cpu();
    let t0 = Instant::now();
    let client = g
        .connect_with(&uri, opts)?
        .map_err(|e| anyhow::anyhow!("connect {uri}: {}", e.message))?;
    if let Some(blob) = warm {
        g.adopt_warm_state(client, blob)?
            .map_err(|e| anyhow::anyhow!("adopt-warm-state: {}", e.message))?;
    }
    let db = g.database(client, "perftest", None)?;
    let coll = g.collection(db, "corpus", None)?;
    let doc = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one(
            &mut g.store,
            coll.0,
            &rawdoc! { "_id": 1 }.into_bytes(),
            &find_options(),
        )?
        .map_err(|e| anyhow::anyhow!("findOne {uri}: {}", e.message))?;
    let t1 = Instant::now();
    let cpu_ms = (thread_cpu() - cpu).as_secs_f64() * 1e3;
    anyhow::ensure!(doc.is_some(), "cold findOne found nothing");
    if warm.is_some() {
        let derived = g.scram_derivations(client)?;
        anyhow::ensure!(derived == 0, "a warm instance ran PBKDF2 {derived} times");
    }
    let blob = g.warm_state(client)?;
    Ok((t0, t1, cpu_ms, blob))
}

/// A child contender, under `unshare -m` with `resolv` over /etc/resolv.conf when given.
fn start_external(
    name: &'static str,
    mut argv: Vec<String>,
    resolv: Option<&Path>,
) -> anyhow::Result<External> {
    let cmd = match resolv {
        Some(rc) => {
            let mut c = Command::new("unshare");
            c.args([
                "-m",
                "sh",
                "-c",
                r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#,
            ])
            .arg(rc)
            .args(&argv);
            c
        }
        None => {
            let mut c = Command::new(argv.remove(0));
            c.args(&argv);
            c
        }
    };
    External::start(name, cmd)
}

pub fn run(s: &Setup, server: &BenchServer, r: &mut Results) -> anyhow::Result<()> {
    let started = Instant::now();
    let certs = TestCerts::generate();
    let dir = certs.write_dir()?;
    let (ca, client_pem) = (dir.file("ca.pem"), dir.file("client.pem"));
    let proxies = Proxies::start(server.addr, &certs)?;
    // Port 53 on a loopback address of its own, for resolv.conf; else any port
    // (and the other drivers' SRV rows are skipped).
    let want: SocketAddr = DNS_ADDR.parse()?;
    let probe = std::net::UdpSocket::bind(want).is_ok();
    let dns_at = if probe {
        want
    } else {
        r.errors.push(format!(
            "distant: cannot bind {DNS_ADDR} (not root?): the other drivers' mongodb+srv rows \
             are skipped"
        ));
        "127.0.0.1:0".parse()?
    };
    let resolv: Option<PathBuf> = if probe {
        let p = std::env::temp_dir().join(format!("mongo-wasi-resolv-{}", std::process::id()));
        std::fs::write(&p, format!("nameserver {}\n", want.ip()))?;
        // unshare + mount must work here; else run the children plainly.
        let ok = Command::new("unshare")
            .args(["-m", "sh", "-c", r#"mount --bind "$0" /etc/resolv.conf"#])
            .arg(&p)
            .status()
            .is_ok_and(|st| st.success());
        if ok {
            Some(p)
        } else {
            r.errors.push(
                "distant: `unshare -m` + bind mount failed: the other drivers' mongodb+srv rows \
                 are skipped"
                    .into(),
            );
            None
        }
    } else {
        None
    };
    let base = format!("mongodb://{}/", server.addr);
    let data = s.data_dir.display().to_string();
    let mut externals: Vec<External> = Vec::new();
    if let Some(bin) = s.native {
        let argv = vec![bin.display().to_string(), base.clone(), data.clone()];
        match start_external(NATIVE, argv, resolv.as_deref()) {
            Ok(c) => externals.push(c),
            Err(e) => {
                eprintln!("bench: distant: no mongodb crate: {e:#}");
                r.errors.push(format!("distant: no mongodb crate: {e:#}"));
            }
        }
    }
    if let Some((py, script)) = s.python {
        let argv = vec![
            py.display().to_string(),
            script.display().to_string(),
            base.clone(),
            data.clone(),
        ];
        match start_external(PYMONGO, argv, resolv.as_deref()) {
            Ok(c) => externals.push(c),
            Err(e) => {
                eprintln!("bench: distant: no PyMongo: {e:#}");
                r.errors.push(format!("distant: no PyMongo: {e:#}"));
            }
        }
    }
    let clock = Clock::new();
    let wall_clock = Clock::wall();
    let p3 = match s.p3 {
        Some((wasmtime, guest)) => {
            let dir = ca.parent().unwrap_or(Path::new("."));
            match P3Guest::new(wasmtime, guest, dir) {
                Ok(g) => Some(g),
                Err(e) => {
                    r.errors.push(format!("distant: no {P3}: {e:#}"));
                    None
                }
            }
        }
        None => None,
    };
    let local = 1 + p3.is_some() as usize;
    for rtt in RTTS {
        let d = Distant::start(&proxies, Duration::from_millis(rtt), dns_at)?;
        for i in 0..s.runs {
            for case in CASES {
                for srv in [false, true] {
                    // The cold mongo-wasi client's warm state, for the warm row.
                    let mut blob = None;
                    // Rotate who goes first.
                    let n = local + externals.len();
                    for k in 0..n {
                        let who = (k + i) % n;
                        d.take();
                        let port = d.relays[case].addr().port();
                        let (name, got) = if who == 0 {
                            let got = wasi_cold(&d, &certs, case, srv, None).map(
                                |(t0, t1, cpu, warm)| {
                                    blob = Some(warm);
                                    let wall = (t1 - t0).as_secs_f64() * 1e3;
                                    (t0, t1, wall, cpu)
                                },
                            );
                            (WASI, got)
                        } else if let (Some(g), 1) = (&p3, who) {
                            let u = uri(case, srv, port, Some((&ca, &client_pem)));
                            (P3, g.cold(&d, &u, &wall_clock))
                        } else {
                            let c = &mut externals[who - local];
                            let name = c.name_str();
                            if srv && resolv.is_none() {
                                continue;
                            }
                            let u = uri(case, srv, port, Some((&ca, &client_pem)));
                            let got = c.request(&format!("distant 1 {u}")).and_then(|v| {
                                let cpu = v["cpu_s"].as_f64().unwrap_or(0.0) * 1e3;
                                cold_reply(&v, &clock, cpu)
                            });
                            (name, got)
                        };
                        record(r, &d, (name, case, srv, rtt), got);
                    }
                    // A new instance with the warm state the cold one handed out
                    // (SCRAM keys, SRV/TXT and A answers): where it pays, SCRAM.
                    if let (Some(blob), "tls_scram_sha_256") = (&blob, case) {
                        d.take();
                        let got = wasi_cold(&d, &certs, case, srv, Some(blob))
                            .map(|(t0, t1, cpu, _)| (t0, t1, (t1 - t0).as_secs_f64() * 1e3, cpu));
                        record(r, &d, (WASI_WARM, case, srv, rtt), got);
                    }
                }
            }
            eprintln!(
                "bench: distant, {rtt} ms RTT, run {}/{} done",
                i + 1,
                s.runs
            );
        }
    }
    drop(externals);
    if let Some(p) = resolv {
        let _ = std::fs::remove_file(p);
    }
    if let Err(e) = bandwidth(s, &proxies.plain, r) {
        eprintln!("bench: distant bandwidth: {e:#}");
        r.errors.push(format!("distant bandwidth: {e:#}"));
    }
    r.distant_seconds = started.elapsed().as_secs_f64();
    Ok(())
}

/// The bandwidth-limited case (see the module's doc): a warm client per
/// compressor, `runs` times find-many then insertMany each.
fn bandwidth(s: &Setup, proxy: &Proxy, r: &mut Results) -> anyhow::Result<()> {
    let config = relay::Config {
        rtt: Duration::from_millis(LINK_RTT_MS),
        bytes_per_sec: Some(LINK_BYTES_PER_SEC),
    };
    let link = Relay::tcp(proxy.addresses()[0], config)?;
    let docs: Vec<bson::RawDocumentBuf> = (0..INSERT_MANY)
        .map(|i| {
            let mut d = rawdoc! { "_id": i as i64 };
            for (k, v) in s.tweet.iter().flatten() {
                if k.as_str() != "_id" {
                    d.append(k, bson::RawBson::from(v));
                }
            }
            Ok(d)
        })
        .collect::<anyhow::Result<_>>()?;
    for i in 0..s.runs {
        for c in COMPRESSORS {
            let tcp = [link.addr()];
            let mut g = Guest::in_sandbox(&host_tests::Sandbox {
                tcp: &tcp,
                ..Default::default()
            })?;
            let query = match c {
                "none" => String::new(),
                c => format!("?compressors={c}"),
            };
            let uri = format!("mongodb://{}/{query}", link.addr());
            let client = g
                .connect(&uri, Some(60_000), false)?
                .map_err(|e| anyhow::anyhow!("connect {uri}: {}", e.message))?;
            let db = g.database(client, "perftest", None)?;
            let coll = g.collection(db, "corpus", None)?;
            // Warm: the connection and its handshake are not timed.
            g.run_command(db, &rawdoc! { "ping": 1 }, None)?
                .map_err(|e| anyhow::anyhow!("warm-up ping ({c}): {}", e.message))?;
            let before = link.bytes();
            let t0 = Instant::now();
            let opts = FindOptions {
                limit: Some(FIND_MANY),
                ..find_options()
            };
            let cursor = g
                .find(coll, &rawdoc! {}, &opts)?
                .map_err(|e| anyhow::anyhow!("find ({c}): {}", e.message))?;
            let mut read = 0;
            // Bounded: a cursor that never ends fails the check below.
            for _ in 0..=FIND_MANY {
                let batch = g
                    .next_batch(cursor)?
                    .map_err(|e| anyhow::anyhow!("find's getMore ({c}): {}", e.message))?;
                read += batch.documents.len();
                if batch.exhausted {
                    break;
                }
            }
            let find_ms = t0.elapsed().as_secs_f64() * 1e3;
            anyhow::ensure!(read as i64 == FIND_MANY, "find ({c}) read {read} documents");
            let mid = link.bytes();
            let t1 = Instant::now();
            let ids = g
                .insert_many(coll, &docs, &host_tests::guest::no_options())?
                .map_err(|e| anyhow::anyhow!("insertMany ({c}): {e:?}"))?;
            let insert_ms = t1.elapsed().as_secs_f64() * 1e3;
            anyhow::ensure!(
                ids.len() == INSERT_MANY,
                "insertMany ({c}) acknowledged {}",
                ids.len()
            );
            // The last reply reached the client: nothing is still on the link.
            let after = link.bytes();
            g.close(client)?;
            for (workload, ms, (u0, d0), (u1, d1)) in [
                ("find_many", find_ms, before, mid),
                ("insert_many", insert_ms, mid, after),
            ] {
                r.bandwidth
                    .entry((c.to_string(), workload.to_string()))
                    .or_default()
                    .push(Transfer {
                        wall_ms: ms,
                        up: u1 - u0,
                        down: d1 - d0,
                    });
            }
        }
        eprintln!(
            "bench: distant, bandwidth-limited link, run {}/{} done",
            i + 1,
            s.runs
        );
    }
    Ok(())
}

fn bandwidth_json(r: &Results) -> Value {
    if r.bandwidth.is_empty() {
        return Value::Null;
    }
    let mut out = Map::new();
    for ((c, workload), runs) in &r.bandwidth {
        let mid = |f: &dyn Fn(&Transfer) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            quantile(&v, 0.5)
        };
        let cell = json!({
            "wall_ms": (mid(&|t| t.wall_ms) * 10.0).round() / 10.0,
            "bytes_up": mid(&|t| t.up as f64).round(),
            "bytes_down": mid(&|t| t.down as f64).round(),
            "runs": runs.len(),
        });
        out.entry(workload.clone())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap()
            .insert(c.clone(), cell);
    }
    json!({
        "rtt_ms": LINK_RTT_MS,
        "bytes_per_sec": LINK_BYTES_PER_SEC,
        "find_many_documents": FIND_MANY,
        "insert_many_documents": INSERT_MANY,
        "by_workload": out,
    })
}

/// One cold request's outcome into the figures (its flights from the
/// relays' ledger), or its error into the report.
fn record(
    r: &mut Results,
    d: &Distant,
    (name, case, srv, rtt): (&str, &str, bool, u64),
    got: anyhow::Result<(Instant, Instant, f64, f64)>,
) {
    match got {
        Ok((t0, t1, wall, cpu)) => {
            // Let the last answers land in the ledger.
            std::thread::sleep(Duration::from_millis(2));
            let run = run_of(&d.take(), t0, t1, wall, cpu);
            r.distant
                .entry((name.to_string(), case.to_string(), srv, rtt))
                .or_default()
                .push(run);
        }
        Err(e) => {
            let msg = format!("distant {name} {case} srv={srv} rtt={rtt}: {e:#}");
            eprintln!("bench: {msg}");
            r.errors.push(msg);
        }
    }
}

fn median<T: Copy + Into<f64>>(runs: &[Run], f: impl Fn(&Run) -> T) -> f64 {
    let v: Vec<f64> = runs.iter().map(|r| f(r).into()).collect();
    quantile(&v, 0.5)
}

/// `{rtt_ms: {case: {"host"|"srv": {contender: {...}}}}}`, medians.
pub fn json(r: &Results) -> Value {
    if r.distant.is_empty() {
        return Value::Null;
    }
    let mut out = Map::new();
    for ((c, case, srv, rtt), runs) in &r.distant {
        let cell = json!({
            "wall_ms": (median(runs, |r| r.wall_ms) * 100.0).round() / 100.0,
            "round_trips": median(runs, |r| r.flights as u32),
            "serial_round_trips": median(runs, |r| r.serial as u32),
            "connections": median(runs, |r| r.connections as u32),
            "dns_queries": median(runs, |r| r.dns as u32),
            "cpu_ms": (median(runs, |r| r.cpu_ms) * 100.0).round() / 100.0,
            "runs": runs.len(),
        });
        let by_rtt = out
            .entry(format!("{rtt}"))
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap();
        let by_case = by_rtt
            .entry(case.clone())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap();
        let by_srv = by_case
            .entry(if *srv { "srv" } else { "host" })
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap();
        by_srv.insert(c.clone(), cell);
    }
    json!({
        "rtt_ms": out,
        "bandwidth": bandwidth_json(r),
        "seconds": (r.distant_seconds * 10.0).round() / 10.0,
        "note": "round_trips: the relays' flights (TCP handshakes, client turns that waited \
                 for an answer, DNS queries); serial_round_trips: those one after another; \
                 cpu_ms: mongo-wasi the guest's thread, the others their process",
    })
}

pub fn print(r: &Results, out: &mut String) {
    use std::fmt::Write;
    let j = json(r);
    let Some(by_rtt) = j["rtt_ms"].as_object() else {
        return;
    };
    let _ = writeln!(
        out,
        "\ndistant: a cold request (new client, first findOne) through a delaying relay, \
         median of {} runs ({:.0} s)\n  round trips: all flights / one after another \
         (TCP handshakes, waited-for client turns, DNS queries); CPU: mongo-wasi's guest \
         thread, the others' process",
        r.distant.values().map(|v| v.len()).max().unwrap_or(0),
        r.distant_seconds
    );
    let _ = writeln!(
        out,
        "  {:>4} {:<18} {:<5} {:<15} {:>9} {:>8} {:>5} {:>4} {:>8}",
        "RTT", "case", "addr", "contender", "wall ms", "RTs", "conns", "DNS", "CPU ms"
    );
    for (rtt, by_case) in by_rtt {
        for case in CASES {
            for addr in ["host", "srv"] {
                let Some(by) = by_case[case][addr].as_object() else {
                    continue;
                };
                for c in [WASI, WASI_WARM, P3, NATIVE, PYMONGO] {
                    let Some(v) = by.get(c) else { continue };
                    let _ = writeln!(
                        out,
                        "  {rtt:>4} {case:<18} {addr:<5} {c:<15} {:>9.2} {:>8} {:>5} {:>4} {:>8.2}",
                        v["wall_ms"].as_f64().unwrap_or(0.0),
                        format!("{}/{}", v["round_trips"], v["serial_round_trips"]),
                        v["connections"].to_string(),
                        v["dns_queries"].to_string(),
                        v["cpu_ms"].as_f64().unwrap_or(0.0),
                    );
                }
            }
        }
    }
    let bw = &j["bandwidth"];
    let Some(by_workload) = bw["by_workload"].as_object() else {
        return;
    };
    let _ = writeln!(
        out,
        "\ndistant, bandwidth-limited: a warm mongo-wasi client, {} ms RTT, {} bytes/s each \
         way; find of {} documents, insertMany of {}; median wall time and bytes on the link",
        bw["rtt_ms"], bw["bytes_per_sec"], bw["find_many_documents"], bw["insert_many_documents"]
    );
    let _ = writeln!(
        out,
        "  {:<12} {:<10} {:>9} {:>12} {:>12}",
        "workload", "compressor", "wall ms", "bytes up", "bytes down"
    );
    for (workload, by_c) in by_workload {
        for c in COMPRESSORS {
            let Some(v) = by_c.get(c) else { continue };
            let _ = writeln!(
                out,
                "  {workload:<12} {c:<10} {:>9.1} {:>12.0} {:>12.0}",
                v["wall_ms"].as_f64().unwrap_or(0.0),
                v["bytes_up"].as_f64().unwrap_or(0.0),
                v["bytes_down"].as_f64().unwrap_or(0.0),
            );
        }
    }
}

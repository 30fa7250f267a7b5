//! The contenders: mongo-wasi through its WIT exports (in this process, under
//! wasmtime), the floor (raw OP_MSG on a plain socket, in this process), and
//! child processes (the `mongodb` crate, PyMongo) that speak the line protocol
//! of `workload.rs`.

use crate::workload::{Data, Sample, Workload};
use anyhow::Context;
use bson::{rawdoc, RawDocument, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::gridfs::{
    BucketOptions, GridfsOptions, UploadOptions,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::Error;
use host_tests::guest::{find_options, no_options, Collection, Database, Guest};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;
use wasmtime::component::ResourceAny;

/// One request to a contender.
#[derive(Clone, Copy, Debug)]
pub enum Cmd {
    Work(Workload, usize),
    /// A new client: construction, connect, first findOne.
    Cold,
    /// `ops` finds on `perftest.slow` under timeoutMS = the second field.
    Deadline(usize, u64),
    /// `ops` finds on `perftest.honour` under timeoutMS = the second field.
    Churn(usize, u64),
    /// `ops` BSON encodes or decodes: `encode_flat`, `decode_deep`, ...
    Bson(&'static str, usize),
    /// `ops` operations of the workload, the second field at a time on one
    /// client (the concurrency section; only the `mongodb` crate's process
    /// runs it here, mongo-wasi's side is the WASI 0.3 guest of concurrent.rs).
    Concurrent(Workload, usize, usize),
}

impl Cmd {
    pub fn line(self) -> String {
        match self {
            Cmd::Work(w, ops) => format!("{} {ops}", w.name()),
            Cmd::Cold => "cold 1".into(),
            Cmd::Deadline(ops, t) => format!("deadline {ops} {t}"),
            Cmd::Churn(ops, t) => format!("churn {ops} {t}"),
            Cmd::Bson(what, ops) => format!("bson_{what} {ops}"),
            Cmd::Concurrent(w, ops, width) => format!("concurrent_{} {ops} {width}", w.name()),
        }
    }
}

pub trait Contender {
    fn name(&self) -> &'static str;
    /// `Ok(None)`: this contender does not run that command.
    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>>;
}

/// Times `ops` calls of `f`, each on its own.
fn timed(ops: usize, mut f: impl FnMut(usize) -> anyhow::Result<()>) -> anyhow::Result<Sample> {
    let mut per_op_us = Vec::with_capacity(ops);
    let all = Instant::now();
    for i in 0..ops {
        let t = Instant::now();
        f(i)?;
        per_op_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(Sample {
        total_s: all.elapsed().as_secs_f64(),
        per_op_us,
    })
}

/// Times `f` once, as a whole iteration.
fn whole(f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Sample> {
    let t = Instant::now();
    f()?;
    Ok(Sample {
        total_s: t.elapsed().as_secs_f64(),
        per_op_us: Vec::new(),
    })
}

/// Like `timed`, but a failed operation is expected (a timeout) and timed too.
fn timed_failing(ops: usize, mut f: impl FnMut() -> bool) -> anyhow::Result<Sample> {
    let mut failures = 0;
    let s = timed(ops, |_| {
        if !f() {
            failures += 1;
        }
        Ok(())
    })?;
    if failures != ops {
        anyhow::bail!("{} of {ops} operations did not time out", ops - failures);
    }
    Ok(s)
}

// ---------------------------------------------------------------- mongo-wasi

pub struct Wasi<'d> {
    pub guest: Guest,
    db: Database,
    corpus: Collection,
    scratch: Collection,
    slow: Collection,
    honour: Collection,
    bucket: ResourceAny,
    data: &'d Data,
    addr: SocketAddr,
    gridfs_id: Option<Vec<u8>>,
}

fn wit<T>(r: Result<T, Error>) -> anyhow::Result<T> {
    r.map_err(|e| anyhow::anyhow!("{:?}: {}", e.kind, e.message))
}

impl<'d> Wasi<'d> {
    pub fn new(addr: SocketAddr, data: &'d Data) -> anyhow::Result<Wasi<'d>> {
        let uri = format!("mongodb://{addr}/");
        let mut guest = Guest::new(&[addr])?;
        let client = wit(guest.connect(&uri, None, false)?)?;
        let db = guest.database(client, "perftest", None)?;
        let corpus = guest.collection(db, "corpus", None)?;
        let scratch = guest.collection(db, "scratch", None)?;
        let slow = guest.collection(db, "slow", None)?;
        let honour = guest.collection(db, "honour", None)?;
        let opts = BucketOptions {
            bucket_name: None,
            chunk_size_bytes: None,
            write_concern: None,
            read_concern: None,
            read_preference: None,
            timeout_ms: None,
        };
        let bucket = guest
            .driver
            .mongo_wasi_driver_database()
            .database()
            .call_gridfs_bucket(&mut guest.store, db.0, &opts)?;
        wit(guest.run_command(db, &rawdoc! { "ping": 1 }, None)?)?;
        Ok(Wasi {
            guest,
            db,
            corpus,
            scratch,
            slow,
            honour,
            bucket,
            data,
            addr,
            gridfs_id: None,
        })
    }

    fn find_one(
        &mut self,
        coll: Collection,
        filter: &RawDocument,
        timeout_ms: Option<u64>,
    ) -> anyhow::Result<Result<Option<Vec<u8>>, Error>> {
        let mut opts = find_options();
        opts.timeout_ms = timeout_ms;
        Ok(self
            .guest
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_find_one(
                &mut self.guest.store,
                coll.0,
                &filter.as_bytes().to_vec(),
                &opts,
            )?)
    }

    fn upload(&mut self) -> anyhow::Result<Vec<u8>> {
        let opts = UploadOptions {
            id: None,
            chunk_size_bytes: None,
            metadata: None,
            timeout_ms: None,
            session: None,
        };
        let id = wit(self
            .guest
            .driver
            .mongo_wasi_driver_gridfs()
            .bucket()
            .call_upload_from_bytes(
                &mut self.guest.store,
                self.bucket,
                "gridfs_large",
                &self.data.gridfs,
                &opts,
            )?)?;
        Ok(id)
    }
}

/// Reads each document of a packed batch in place, as a caller would; how many.
fn packed_documents(documents: &[u8], count: u32) -> anyhow::Result<usize> {
    let (mut at, mut n) = (0, 0);
    while at + 4 <= documents.len() {
        let len = i32::from_le_bytes(documents[at..at + 4].try_into()?) as usize;
        let doc = RawDocument::from_bytes(documents.get(at..at + len).unwrap_or_default())?;
        std::hint::black_box(doc);
        at += len;
        n += 1;
    }
    anyhow::ensure!(
        n == count as usize,
        "packed batch of {n} documents, not {count}"
    );
    Ok(n)
}

/// Cold start of mongo-wasi: instantiate the pre-compiled component, connect, first findOne.
/// The whole, and its phases in microseconds (instantiate, connect, first findOne:
/// `connect` parses the URI and does no I/O, so the first findOne dials, shakes
/// hands and finds).
pub fn wasi_cold(addr: SocketAddr) -> anyhow::Result<(f64, Vec<f64>)> {
    let t = Instant::now();
    let mut guest = Guest::new(&[addr])?;
    let instantiated = t.elapsed();
    let client = wit(guest.connect(&format!("mongodb://{addr}/"), None, false)?)?;
    let db = guest.database(client, "perftest", None)?;
    let coll = guest.collection(db, "corpus", None)?;
    let connected = t.elapsed();
    let doc = wit(guest
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one(
            &mut guest.store,
            coll.0,
            &rawdoc! { "_id": 1 }.into_bytes(),
            &find_options(),
        )?)?;
    let took = t.elapsed();
    anyhow::ensure!(doc.is_some(), "cold findOne found nothing");
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let phases = vec![
        us(instantiated),
        us(connected - instantiated),
        us(took - connected),
    ];
    Ok((took.as_secs_f64(), phases))
}

impl Contender for Wasi<'_> {
    fn name(&self) -> &'static str {
        "mongo-wasi"
    }

    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>> {
        use Workload::*;
        let data = self.data;
        let s = match cmd {
            Cmd::Work(RunCommand, ops) => {
                let hello = rawdoc! { "hello": true };
                let db = self.db;
                timed(ops, |_| {
                    wit(self.guest.run_command(db, &hello, None)?)?;
                    Ok(())
                })?
            }
            Cmd::Work(FindOne, ops) => {
                let corpus = self.corpus;
                timed(ops, |i| {
                    let filter = rawdoc! { "_id": (i % 10_000 + 1) as i32 };
                    let d = wit(self.find_one(corpus, &filter, None)?)?;
                    anyhow::ensure!(d.is_some(), "findOne found nothing");
                    Ok(())
                })?
            }
            Cmd::Work(w @ (InsertOneSmall | InsertOneLarge), ops) => {
                let doc = if w == InsertOneSmall {
                    &data.small
                } else {
                    &data.large
                };
                // The document's bytes and the options are built before the
                // clock starts, as for the other contenders.
                let (coll, doc, opts) = (self.scratch, doc.as_bytes().to_vec(), no_options());
                let g = &mut self.guest;
                let c = g.driver.mongo_wasi_driver_collection().collection();
                timed(ops, |_| {
                    wit(c.call_insert_one(&mut g.store, coll.0, &doc, &opts)?)?;
                    Ok(())
                })?
            }
            Cmd::Work(FindMany, ops) => {
                let corpus = self.corpus;
                let g = &mut self.guest;
                whole(|| {
                    let cursor = wit(g.find(corpus, &rawdoc! {}, &find_options())?)?;
                    let mut n = 0;
                    // One buffer per batch (next-batch-packed), its documents
                    // read in place as a caller would.
                    loop {
                        let b = wit(g.next_batch_packed(cursor)?)?;
                        n += packed_documents(&b.documents, b.count)?;
                        if b.exhausted {
                            break;
                        }
                    }
                    g.drop_resource(cursor.0)?;
                    anyhow::ensure!(n == ops, "find many: {n} documents, not {ops}");
                    Ok(())
                })?
            }
            Cmd::Work(w @ (InsertManySmall | InsertManyLarge), ops) => {
                let doc = if w == InsertManySmall {
                    &data.small
                } else {
                    &data.large
                };
                // One buffer (insert-many-packed), built before the clock;
                // the ids come back packed and are read in place.
                let docs: Vec<u8> = doc.as_bytes().repeat(ops);
                let (coll, opts) = (self.scratch, no_options());
                let g = &mut self.guest;
                let c = g.driver.mongo_wasi_driver_collection().collection();
                whole(|| {
                    let r = c.call_insert_many_packed(&mut g.store, coll.0, &docs, &opts)?;
                    let ids = wit(r.map_err(|e| e.error))?;
                    packed_documents(&ids, ops as u32).context("insertMany's ids")?;
                    Ok(())
                })?
            }
            Cmd::Work(GridfsUpload, _) => {
                let mut id = None;
                let s = whole(|| {
                    id = Some(self.upload()?);
                    Ok(())
                })?;
                self.gridfs_id = id;
                s
            }
            Cmd::Work(GridfsDownload, _) => {
                let id = match self.gridfs_id.clone() {
                    Some(id) => id,
                    None => self.upload()?,
                };
                self.gridfs_id = Some(id.clone());
                let (bucket, want) = (self.bucket, data.gridfs.len());
                let g = &mut self.guest;
                whole(|| {
                    let bytes = wit(g
                        .driver
                        .mongo_wasi_driver_gridfs()
                        .bucket()
                        .call_download_to_bytes(
                            &mut g.store,
                            bucket,
                            &id,
                            GridfsOptions {
                                timeout_ms: None,
                                session: None,
                            },
                        )?)?;
                    anyhow::ensure!(bytes.len() == want, "downloaded {} bytes", bytes.len());
                    Ok(())
                })?
            }
            Cmd::Cold => {
                // The phases ride in per_op_us (main.rs reads them for Cold).
                let (total_s, per_op_us) = wasi_cold(self.addr)?;
                Sample { total_s, per_op_us }
            }
            Cmd::Bson(what, ops) => bson_codec(data, what, ops)?,
            Cmd::Deadline(ops, t) | Cmd::Churn(ops, t) => {
                let coll = if matches!(cmd, Cmd::Deadline(..)) {
                    self.slow
                } else {
                    self.honour
                };
                let filter = rawdoc! {};
                let mut err = None;
                let s = timed_failing(ops, || match self.find_one(coll, &filter, Some(t)) {
                    Ok(Ok(_)) => true,
                    Ok(Err(_)) => false,
                    Err(e) => {
                        err = Some(e);
                        false
                    }
                })?;
                if let Some(e) = err {
                    return Err(e);
                }
                s
            }
            Cmd::Concurrent(..) => return Ok(None),
        };
        Ok(Some(s))
    }
}

// ------------------------------------------------- mongo-wasi, async host

/// The async bindings' interfaces.
mod a {
    pub use host_tests::async_bindings::exports::mongo_wasi::driver::{
        client, collection, database, gridfs, types,
    };
}

/// mongo-wasi as an async host runs it (as `wasmtime serve` and other
/// serverless hosts do): async exports and WASI, on a current-thread tokio
/// runtime that this thread drives, so a reply wakes this thread and no
/// other. The sync host (`Wasi`) blocks on wasmtime-wasi's own multi-thread
/// runtime, whose I/O driver thread wakes first for every reply. The same
/// component and server; the `work` section only.
pub struct WasiAsync<'d> {
    rt: tokio::runtime::Runtime,
    store: wasmtime::Store<host_tests::HostState>,
    driver: host_tests::async_bindings::Driver,
    db: ResourceAny,
    corpus: ResourceAny,
    scratch: ResourceAny,
    bucket: ResourceAny,
    data: &'d Data,
    gridfs_id: Option<Vec<u8>>,
}

fn wit_async<T>(r: Result<T, a::types::Error>) -> anyhow::Result<T> {
    r.map_err(|e| anyhow::anyhow!("{:?}: {}", e.kind, e.message))
}

fn async_find_options() -> a::collection::FindOptions {
    host_tests::no_find_options!(a::collection::FindOptions)
}

fn async_op_options() -> a::collection::OpOptions {
    host_tests::no_op_options!(a::collection::OpOptions)
}

impl<'d> WasiAsync<'d> {
    pub fn new(addr: SocketAddr, data: &'d Data) -> anyhow::Result<WasiAsync<'d>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut store = host_tests::new_store(host_tests::wasi_state(&[addr], &[], true));
        let st = &mut store;
        let (driver, db, corpus, scratch, bucket) = rt.block_on(async {
            let driver = host_tests::async_driver_pre()
                .instantiate_async(&mut *st)
                .await?;
            let opts = a::client::ClientOptions {
                timeout_ms: None,
                monitor_commands: false,
                server_api: None,
                tls_ca_pem: None,
                tls_certificate_key_pem: None,
                logging: None,
            };
            let c = driver.mongo_wasi_driver_client().client();
            let uri = format!("mongodb://{addr}/");
            let client = wit_async(c.call_connect(&mut *st, &uri, &opts).await?)?;
            let none = a::database::CollectionOptions {
                timeout_ms: None,
                read_concern: None,
                write_concern: None,
                read_preference: None,
            };
            let db = c.call_database(&mut *st, client, "perftest", &none).await?;
            let d = driver.mongo_wasi_driver_database().database();
            let corpus = d.call_collection(&mut *st, db, "corpus", &none).await?;
            let scratch = d.call_collection(&mut *st, db, "scratch", &none).await?;
            let opts = a::gridfs::BucketOptions {
                bucket_name: None,
                chunk_size_bytes: None,
                write_concern: None,
                read_concern: None,
                read_preference: None,
                timeout_ms: None,
            };
            let bucket = d.call_gridfs_bucket(&mut *st, db, &opts).await?;
            anyhow::Ok((driver, db, corpus, scratch, bucket))
        })?;
        Ok(WasiAsync {
            rt,
            store,
            driver,
            db,
            corpus,
            scratch,
            bucket,
            data,
            gridfs_id: None,
        })
    }

    fn upload(&mut self) -> anyhow::Result<Vec<u8>> {
        let opts = a::gridfs::UploadOptions {
            id: None,
            chunk_size_bytes: None,
            metadata: None,
            timeout_ms: None,
            session: None,
        };
        let b = self.driver.mongo_wasi_driver_gridfs().bucket();
        let call = b.call_upload_from_bytes(
            &mut self.store,
            self.bucket,
            "gridfs_large",
            &self.data.gridfs,
            &opts,
        );
        wit_async(self.rt.block_on(call)?)
    }
}

impl Contender for WasiAsync<'_> {
    fn name(&self) -> &'static str {
        "mongo-wasi-async"
    }

    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>> {
        use Workload::*;
        let data = self.data;
        let (rt, store) = (&self.rt, &mut self.store);
        let coll = self.driver.mongo_wasi_driver_collection().collection();
        let s = match cmd {
            Cmd::Work(RunCommand, ops) => {
                let hello = rawdoc! { "hello": true }.into_bytes();
                let opts = a::database::RunCommandOptions {
                    timeout_ms: None,
                    session: None,
                    read_preference: None,
                };
                let d = self.driver.mongo_wasi_driver_database().database();
                timed(ops, |_| {
                    wit_async(rt.block_on(d.call_run_command(
                        &mut *store,
                        self.db,
                        &hello,
                        &opts,
                    ))?)?;
                    Ok(())
                })?
            }
            Cmd::Work(FindOne, ops) => {
                let opts = async_find_options();
                timed(ops, |i| {
                    let filter = rawdoc! { "_id": (i % 10_000 + 1) as i32 }.into_bytes();
                    let call = coll.call_find_one(&mut *store, self.corpus, &filter, &opts);
                    let d = wit_async(rt.block_on(call)?)?;
                    anyhow::ensure!(d.is_some(), "findOne found nothing");
                    Ok(())
                })?
            }
            Cmd::Work(w @ (InsertOneSmall | InsertOneLarge), ops) => {
                let doc = if w == InsertOneSmall {
                    &data.small
                } else {
                    &data.large
                };
                let (doc, opts) = (doc.as_bytes().to_vec(), async_op_options());
                timed(ops, |_| {
                    let call = coll.call_insert_one(&mut *store, self.scratch, &doc, &opts);
                    wit_async(rt.block_on(call)?)?;
                    Ok(())
                })?
            }
            Cmd::Work(FindMany, ops) => {
                let cursors = self.driver.mongo_wasi_driver_cursor().cursor();
                let filter = rawdoc! {}.into_bytes();
                let opts = async_find_options();
                whole(|| {
                    rt.block_on(async {
                        let call = coll.call_find(&mut *store, self.corpus, &filter, &opts);
                        let cursor = wit_async(call.await?)?;
                        let mut n = 0;
                        loop {
                            let call = cursors.call_next_batch_packed(&mut *store, cursor);
                            let b = wit_async(call.await?)?;
                            n += packed_documents(&b.documents, b.count)?;
                            if b.exhausted {
                                break;
                            }
                        }
                        cursor.resource_drop_async(&mut *store).await?;
                        anyhow::ensure!(n == ops, "find many: {n} documents, not {ops}");
                        Ok(())
                    })
                })?
            }
            Cmd::Work(w @ (InsertManySmall | InsertManyLarge), ops) => {
                let doc = if w == InsertManySmall {
                    &data.small
                } else {
                    &data.large
                };
                let docs: Vec<u8> = doc.as_bytes().repeat(ops);
                let opts = async_op_options();
                whole(|| {
                    let call =
                        coll.call_insert_many_packed(&mut *store, self.scratch, &docs, &opts);
                    let ids = wit_async(rt.block_on(call)?.map_err(|e| e.error))?;
                    packed_documents(&ids, ops as u32).context("insertMany's ids")?;
                    Ok(())
                })?
            }
            Cmd::Work(GridfsUpload, _) => {
                let mut id = None;
                let s = whole(|| {
                    id = Some(self.upload()?);
                    Ok(())
                })?;
                self.gridfs_id = id;
                s
            }
            Cmd::Work(GridfsDownload, _) => {
                let id = match self.gridfs_id.clone() {
                    Some(id) => id,
                    None => self.upload()?,
                };
                self.gridfs_id = Some(id.clone());
                let (rt, store, want) = (&self.rt, &mut self.store, data.gridfs.len());
                let b = self.driver.mongo_wasi_driver_gridfs().bucket();
                let opts = a::gridfs::GridfsOptions {
                    timeout_ms: None,
                    session: None,
                };
                whole(|| {
                    let call = b.call_download_to_bytes(&mut *store, self.bucket, &id, opts);
                    let bytes = wit_async(rt.block_on(call)?)?;
                    anyhow::ensure!(bytes.len() == want, "downloaded {} bytes", bytes.len());
                    Ok(())
                })?
            }
            _ => return Ok(None),
        };
        Ok(Some(s))
    }
}

/// BSON encode/decode with the bson crate the driver is built on, natively:
/// mongo-wasi's API takes and returns BSON bytes, so the caller's own codec
/// does this work (here a Rust host's).
pub fn bson_codec(data: &Data, what: &str, ops: usize) -> anyhow::Result<Sample> {
    let (op, set) = what.split_once('_').unwrap_or((what, ""));
    let Some((_, doc, _)) = data.bson_sets.iter().find(|(n, _, _)| *n == set) else {
        anyhow::bail!("no BSON set {set}");
    };
    let bytes = doc.to_vec()?;
    whole(|| {
        for _ in 0..ops {
            if op == "encode" {
                std::hint::black_box(doc.to_vec()?);
            } else {
                std::hint::black_box(bson::Document::from_reader(&mut &bytes[..])?);
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- the floor

/// A raw OP_MSG round trip on a plain blocking socket: no driver at all.
pub struct Floor<'d> {
    stream: TcpStream,
    addr: SocketAddr,
    next_id: i32,
    buf: Vec<u8>,
    data: &'d Data,
}

fn op_msg(out: &mut Vec<u8>, id: i32, body: &[u8], seq: Option<(&str, &[&[u8]])>) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&2013i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    out.extend_from_slice(body);
    if let Some((name, docs)) = seq {
        out.push(1);
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        for d in docs {
            out.extend_from_slice(d);
        }
        let len = (out.len() - start) as i32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

impl<'d> Floor<'d> {
    pub fn new(addr: SocketAddr, data: &'d Data) -> anyhow::Result<Floor<'d>> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Floor {
            stream,
            addr,
            next_id: 1,
            buf: Vec::new(),
            data,
        })
    }

    /// Drops `perftest.corpus` and inserts `tweet` `n` times with `_id` 1..=n
    /// (for a real server; the in-memory one has it preloaded).
    pub fn preload(&mut self, tweet: &RawDocument, n: usize) -> anyhow::Result<()> {
        let drop = rawdoc! { "drop": "corpus", "$db": "perftest" };
        self.round_trip(drop.as_bytes(), None)?;
        let docs = host_tests::bench_server::corpus(tweet, n);
        let body = rawdoc! { "insert": "corpus", "$db": "perftest" };
        for chunk in docs.chunks(1_000) {
            let refs: Vec<&[u8]> = chunk.iter().map(|d| d.as_bytes()).collect();
            let r = self.round_trip(body.as_bytes(), Some(("documents", &refs)))?;
            anyhow::ensure!(
                r.get_i32("n").ok() == Some(chunk.len() as i32),
                "preload: {r:?}"
            );
        }
        Ok(())
    }

    /// One round trip; the reply body stays in `self.buf[21..]`.
    fn round_trip(
        &mut self,
        body: &[u8],
        seq: Option<(&str, &[&[u8]])>,
    ) -> anyhow::Result<&RawDocument> {
        let mut out = std::mem::take(&mut self.buf);
        op_msg(&mut out, self.next_id, body, seq);
        self.next_id += 1;
        self.stream.write_all(&out)?;
        let mut head = [0u8; 4];
        self.stream.read_exact(&mut head)?;
        let len = i32::from_le_bytes(head) as usize;
        out.resize(len, 0);
        self.stream.read_exact(&mut out[4..])?;
        self.buf = out;
        Ok(RawDocument::from_bytes(&self.buf[21..])?)
    }
}

pub fn floor_cold(addr: SocketAddr) -> anyhow::Result<f64> {
    let t = Instant::now();
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut f = Floor {
        stream,
        addr,
        next_id: 1,
        buf: Vec::new(),
        data: &EMPTY_DATA,
    };
    let q = rawdoc! { "find": "corpus", "filter": { "_id": 1 }, "limit": 1, "singleBatch": true, "$db": "perftest" };
    f.round_trip(q.as_bytes(), None)?;
    Ok(t.elapsed().as_secs_f64())
}

/// The floor's cold start needs no data; `Data` has no cheap constructor, so hold an empty one.
static EMPTY_DATA: std::sync::LazyLock<Data> = std::sync::LazyLock::new(|| Data {
    tweet: RawDocumentBuf::new(),
    small: RawDocumentBuf::new(),
    large: RawDocumentBuf::new(),
    gridfs: Vec::new(),
    bson_sets: Vec::new(),
});

impl Contender for Floor<'_> {
    fn name(&self) -> &'static str {
        "floor"
    }

    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>> {
        use Workload::*;
        let data = self.data;
        let s = match cmd {
            Cmd::Work(w @ (RunCommand | FindOne | FindMany), ops) => {
                return floor_work(self, w, ops)
            }
            Cmd::Work(w @ (InsertOneSmall | InsertOneLarge), ops) => {
                let doc = if w == InsertOneSmall {
                    &data.small
                } else {
                    &data.large
                };
                let body = rawdoc! { "insert": "scratch", "$db": "perftest" };
                // A fresh _id each, as a driver adds one: an int64 element
                // (type, "_id\0", 8 bytes) before the fields, copied once.
                let fields = &doc.as_bytes()[4..];
                let len = 4 + 13 + fields.len();
                let mut d = Vec::with_capacity(len);
                timed(ops, |i| {
                    d.clear();
                    d.extend_from_slice(&(len as i32).to_le_bytes());
                    d.extend_from_slice(b"\x12_id\0");
                    d.extend_from_slice(&(i as i64).to_le_bytes());
                    d.extend_from_slice(fields);
                    self.round_trip(body.as_bytes(), Some(("documents", &[&d[..]])))?;
                    Ok(())
                })?
            }
            Cmd::Cold => Sample {
                total_s: floor_cold(self.addr)?,
                per_op_us: Vec::new(),
            },
            _ => return Ok(None),
        };
        Ok(Some(s))
    }
}

// ---------------------------------------------------------------- the floor under wasmtime

mod floor_bindings {
    wasmtime::component::bindgen!({ path: "wasm-floor/wit", world: "floor" });
}

mod floor_async_bindings {
    wasmtime::component::bindgen!({
        path: "wasm-floor/wit",
        world: "floor",
        exports: { default: async },
    });
}

/// `MONGO_WASI_FLOOR_COMPONENT`, else host-tests/wasm-floor's release build.
pub fn wasm_floor_path() -> std::path::PathBuf {
    std::env::var_os("MONGO_WASI_FLOOR_COMPONENT")
        .map(Into::into)
        .unwrap_or_else(|| {
            host_tests::repo_root().join("target/wasm32-wasip2/release/wasm_floor.wasm")
        })
}

/// The floor's round trip made by a minimal component (host-tests/wasm-floor)
/// through the same engine, WASI host and sandbox as mongo-wasi, under the
/// sync host or the async one as mongo-wasi's two contenders: what any guest
/// pays for the export call and WASI's calls, before a driver's work.
pub struct WasmFloor {
    store: wasmtime::Store<host_tests::HostState>,
    host: FloorHost,
    next_id: i32,
    buf: Vec<u8>,
}

enum FloorHost {
    Sync(floor_bindings::Floor),
    Async(tokio::runtime::Runtime, floor_async_bindings::Floor),
}

impl WasmFloor {
    pub fn new(addr: SocketAddr, async_host: bool) -> anyhow::Result<WasmFloor> {
        let component = host_tests::load(&wasm_floor_path())?;
        let mut store = host_tests::new_store(host_tests::wasi_state(&[addr], &[], true));
        let host = if async_host {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let mut linker = wasmtime::component::Linker::new(host_tests::engine());
            wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
            let floor = rt.block_on(floor_async_bindings::Floor::instantiate_async(
                &mut store, &component, &linker,
            ))?;
            FloorHost::Async(rt, floor)
        } else {
            let linker = host_tests::linker()?;
            FloorHost::Sync(floor_bindings::Floor::instantiate(
                &mut store, &component, &linker,
            )?)
        };
        let connected = match &host {
            FloorHost::Sync(f) => f.call_connect(&mut store, addr.port())?,
            FloorHost::Async(rt, f) => rt.block_on(f.call_connect(&mut store, addr.port()))?,
        };
        connected.map_err(|e| anyhow::anyhow!("wasm floor connect: {e}"))?;
        Ok(WasmFloor {
            store,
            host,
            next_id: 1,
            buf: Vec::new(),
        })
    }

    /// `n` calls of one WASI function (`clock` or `read`) in one export call.
    pub fn calls(&mut self, which: &str, n: u32) -> anyhow::Result<u64> {
        let r = match &self.host {
            FloorHost::Sync(f) => f.call_calls(&mut self.store, which, n)?,
            FloorHost::Async(rt, f) => rt.block_on(f.call_calls(&mut self.store, which, n))?,
        };
        r.map_err(|e| anyhow::anyhow!("wasm floor: {e}"))
    }

    /// One round trip through the guest; the reply body stays in `self.buf[21..]`.
    fn round_trip(&mut self, body: &[u8]) -> anyhow::Result<&RawDocument> {
        op_msg(&mut self.buf, self.next_id, body, None);
        self.next_id += 1;
        let reply = match &self.host {
            FloorHost::Sync(f) => f.call_round_trip(&mut self.store, &self.buf)?,
            FloorHost::Async(rt, f) => {
                rt.block_on(f.call_round_trip(&mut self.store, &self.buf))?
            }
        };
        self.buf = reply.map_err(|e| anyhow::anyhow!("wasm floor: {e}"))?;
        Ok(RawDocument::from_bytes(
            self.buf.get(21..).unwrap_or_default(),
        )?)
    }
}

impl Contender for WasmFloor {
    fn name(&self) -> &'static str {
        match self.host {
            FloorHost::Sync(_) => "wasm-floor",
            FloorHost::Async(..) => "wasm-floor-async",
        }
    }

    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>> {
        match cmd {
            Cmd::Work(w, ops) => floor_work(self, w, ops),
            _ => Ok(None),
        }
    }
}

/// One OP_MSG round trip of a body with no document sequence; the reply's
/// body is borrowed until the next.
trait Exchange {
    fn exchange(&mut self, body: &[u8]) -> anyhow::Result<&RawDocument>;
}

impl Exchange for Floor<'_> {
    fn exchange(&mut self, body: &[u8]) -> anyhow::Result<&RawDocument> {
        self.round_trip(body, None)
    }
}

impl Exchange for WasmFloor {
    fn exchange(&mut self, body: &[u8]) -> anyhow::Result<&RawDocument> {
        self.round_trip(body)
    }
}

/// The floors' workloads (runCommand, findOne, find many; `None` for the
/// others): the same commands whichever way `exchange` carries them, a
/// native socket or a minimal component.
fn floor_work(f: &mut impl Exchange, w: Workload, ops: usize) -> anyhow::Result<Option<Sample>> {
    use Workload::*;
    let s = match w {
        RunCommand => {
            let hello = rawdoc! { "hello": true, "$db": "admin" };
            timed(ops, |_| {
                f.exchange(hello.as_bytes())?;
                Ok(())
            })?
        }
        FindOne => timed(ops, |i| {
            let q = rawdoc! {
                "find": "corpus", "filter": { "_id": (i % 10_000 + 1) as i32 },
                "limit": 1, "singleBatch": true, "$db": "perftest",
            };
            f.exchange(q.as_bytes())?;
            Ok(())
        })?,
        FindMany => whole(|| {
            let q = rawdoc! { "find": "corpus", "filter": {}, "$db": "perftest" };
            let mut n = 0;
            let mut id = {
                let c = f.exchange(q.as_bytes())?.get_document("cursor")?;
                n += c.get_array("firstBatch")?.into_iter().count();
                c.get_i64("id")?
            };
            while id != 0 {
                let gm = rawdoc! { "getMore": id, "collection": "corpus", "$db": "perftest" };
                let c = f.exchange(gm.as_bytes())?.get_document("cursor")?;
                n += c.get_array("nextBatch")?.into_iter().count();
                id = c.get_i64("id")?;
            }
            anyhow::ensure!(n == ops, "floor find many: {n} documents");
            Ok(())
        })?,
        _ => return Ok(None),
    };
    Ok(Some(s))
}

// ---------------------------------------------------------------- child processes

/// A contender in another process (the `mongodb` crate, PyMongo).
pub struct External {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl External {
    /// Starts `cmd` (given the server URI and the data directory as its last arguments)
    /// and waits for its `ready` line.
    pub fn start(name: &'static str, mut cmd: Command) -> anyhow::Result<External> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {name}: {e}"))?;
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        anyhow::ensure!(line.trim() == "ready", "{name} did not start: {line:?}");
        Ok(External {
            name,
            child,
            stdin,
            stdout,
        })
    }
}

impl External {
    /// One request line; its JSON reply as it is (for replies beyond a `Sample`).
    pub fn request(&mut self, line: &str) -> anyhow::Result<serde_json::Value> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        let mut reply = String::new();
        self.stdout.read_line(&mut reply)?;
        anyhow::ensure!(!reply.is_empty(), "{} exited", self.name);
        Ok(serde_json::from_str(reply.trim())?)
    }

    pub fn name_str(&self) -> &'static str {
        self.name
    }
}

impl Contender for External {
    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&mut self, cmd: Cmd) -> anyhow::Result<Option<Sample>> {
        writeln!(self.stdin, "{}", cmd.line())?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        anyhow::ensure!(!line.is_empty(), "{} exited", self.name);
        crate::workload::parse_reply(&line)
    }
}

impl Drop for External {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit 0");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

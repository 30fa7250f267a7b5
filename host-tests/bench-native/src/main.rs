//! The official `mongodb` crate on tokio (current-thread runtime), as a contender
//! of `cargo xtask bench` (host-tests/src/bin/bench).
//!
//! Usage: bench-native URI DATA_DIR. Prints `ready`, then answers each request
//! line `<workload> <ops> [arg]` with one JSON line: `{"total_s": t,
//! "per_op_us": [...]}`, `{"unsupported": true}` or `{"error": "..."}`.
//! Reads and writes use `Collection<RawDocumentBuf>`, the crate's fastest
//! path: like mongo-wasi's API, documents go in and come back as BSON
//! bytes, neither encoded from nor decoded into a `Document`.
//!
//! `concurrent_find_one OPS WIDTH` and `concurrent_insert_one_small OPS WIDTH`
//! (the concurrency section): OPS/WIDTH rounds of WIDTH operations at once,
//! each a `tokio::spawn`ed task on this current-thread runtime, on a second
//! client whose pool holds WIDTH connections (`maxPoolSize=WIDTH`, as the
//! WASI 0.3 guest's); a round ends when its last task does.

use futures_util::io::{AsyncReadExt, AsyncWriteExt};
use futures_util::TryStreamExt;
use mongodb::bson::{self, doc, Document, RawDocumentBuf};
use mongodb::{Client, Collection, Database};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Data {
    small: RawDocumentBuf,
    large: RawDocumentBuf,
    gridfs: Vec<u8>,
    sets: Vec<(&'static str, Document)>,
}

fn json_doc(path: &Path) -> Result<Document> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    match bson::Bson::try_from(v)? {
        bson::Bson::Document(d) => Ok(d),
        _ => Err(format!("{} is not a document", path.display()).into()),
    }
}

struct Sample {
    total_s: f64,
    per_op_us: Vec<f64>,
}

fn whole_since(t: Instant) -> Sample {
    Sample {
        total_s: t.elapsed().as_secs_f64(),
        per_op_us: Vec::new(),
    }
}

struct Bench {
    uri: String,
    client: Client,
    db: Database,
    corpus: Collection<RawDocumentBuf>,
    scratch: Collection<RawDocumentBuf>,
    data: Data,
    gridfs_id: Option<bson::Bson>,
    /// The concurrency section's client (`maxPoolSize=WIDTH`) and its width.
    wide: Option<(usize, Client)>,
    /// Fields the last request adds to its reply (the distant section's).
    extra: Option<serde_json::Value>,
}

impl Bench {
    async fn upload(&self) -> Result<bson::Bson> {
        let bucket = self.db.gridfs_bucket(None);
        let mut up = bucket.open_upload_stream("gridfs_large").await?;
        up.write_all(&self.data.gridfs).await?;
        up.close().await?;
        Ok(up.id().clone())
    }

    /// `ops` operations `width` at a time (see the module's comment).
    async fn concurrent(&mut self, op: &str, ops: usize, width: usize) -> Result<Sample> {
        if self.wide.as_ref().map(|w| w.0) != Some(width) {
            let sep = if self.uri.contains('?') { '&' } else { '?' };
            let uri = format!("{}{sep}maxPoolSize={width}", self.uri);
            self.wide = Some((width, Client::with_uri_str(&uri).await?));
        }
        let db = self.wide.as_ref().unwrap().1.database("perftest");
        let find = match op {
            "find_one" => true,
            "insert_one_small" => false,
            _ => return Err(format!("no concurrent {op}").into()),
        };
        let coll: Collection<RawDocumentBuf> =
            db.collection(if find { "corpus" } else { "scratch" });
        let doc = std::sync::Arc::new(self.data.small.clone());
        let rounds = ops.div_ceil(width.max(1));
        let mut per_op_us = Vec::with_capacity(rounds * width);
        let all = Instant::now();
        for r in 0..rounds {
            let tasks: Vec<_> = (r * width..(r + 1) * width)
                .map(|i| {
                    let (coll, doc) = (coll.clone(), doc.clone());
                    tokio::spawn(async move {
                        let t = Instant::now();
                        if find {
                            let d = coll
                                .find_one(doc! { "_id": (i % 10_000 + 1) as i32 })
                                .await
                                .map_err(|e| e.to_string())?;
                            if d.is_none() {
                                return Err("findOne found nothing".to_string());
                            }
                        } else {
                            coll.insert_one(&*doc).await.map_err(|e| e.to_string())?;
                        }
                        Ok::<f64, String>(t.elapsed().as_secs_f64() * 1e6)
                    })
                })
                .collect();
            for t in tasks {
                per_op_us.push(t.await??);
            }
        }
        Ok(Sample {
            total_s: all.elapsed().as_secs_f64(),
            per_op_us,
        })
    }

    async fn run(&mut self, name: &str, ops: usize, arg: Option<&str>) -> Result<Option<Sample>> {
        macro_rules! timed {
            ($i:ident, $body:expr) => {{
                let mut per_op_us = Vec::with_capacity(ops);
                let all = Instant::now();
                for $i in 0..ops {
                    let t = Instant::now();
                    $body;
                    per_op_us.push(t.elapsed().as_secs_f64() * 1e6);
                }
                Sample {
                    total_s: all.elapsed().as_secs_f64(),
                    per_op_us,
                }
            }};
        }
        if let Some(op) = name.strip_prefix("concurrent_") {
            let width: usize = arg.and_then(|a| a.parse().ok()).unwrap_or(16);
            return self.concurrent(op, ops, width).await.map(Some);
        }
        let s = match name {
            "run_command" => {
                let admin = self.client.database("admin");
                timed!(_i, admin.run_command(doc! { "hello": true }).await?)
            }
            "find_one" => timed!(i, {
                let d = self
                    .corpus
                    .find_one(doc! { "_id": (i % 10_000 + 1) as i32 })
                    .await?;
                if d.is_none() {
                    return Err("findOne found nothing".into());
                }
            }),
            "insert_one_small" | "insert_one_large" => {
                let doc = if name.ends_with("small") {
                    &self.data.small
                } else {
                    &self.data.large
                };
                // By reference: the harness copies nothing inside the clock.
                timed!(_i, self.scratch.insert_one(doc).await?)
            }
            "find_many" => {
                let t = Instant::now();
                let docs: Vec<RawDocumentBuf> =
                    self.corpus.find(doc! {}).await?.try_collect().await?;
                let s = whole_since(t);
                if docs.len() != ops {
                    return Err(format!("find many: {} documents", docs.len()).into());
                }
                s
            }
            "insert_many_small" | "insert_many_large" => {
                let doc = if name.ends_with("small") {
                    &self.data.small
                } else {
                    &self.data.large
                };
                let docs = vec![doc.clone(); ops];
                let t = Instant::now();
                self.scratch.insert_many(docs).await?;
                whole_since(t)
            }
            "gridfs_upload" => {
                let t = Instant::now();
                let id = self.upload().await?;
                let s = whole_since(t);
                self.gridfs_id = Some(id);
                s
            }
            "gridfs_download" => {
                let id = match self.gridfs_id.clone() {
                    Some(id) => id,
                    None => self.upload().await?,
                };
                self.gridfs_id = Some(id.clone());
                let bucket = self.db.gridfs_bucket(None);
                let t = Instant::now();
                let mut down = bucket.open_download_stream(id).await?;
                let mut out = Vec::new();
                down.read_to_end(&mut out).await?;
                let s = whole_since(t);
                if out.len() != self.data.gridfs.len() {
                    return Err(format!("downloaded {} bytes", out.len()).into());
                }
                s
            }
            "cold" => {
                let t = Instant::now();
                let c = Client::with_uri_str(&self.uri).await?;
                let d = c
                    .database("perftest")
                    .collection::<RawDocumentBuf>("corpus")
                    .find_one(doc! { "_id": 1 })
                    .await?;
                let s = whole_since(t);
                c.shutdown().await;
                if d.is_none() {
                    return Err("cold findOne found nothing".into());
                }
                s
            }
            // A cold request to the URI in `arg` (the distant section): also
            // its CLOCK_MONOTONIC bounds and the process's CPU time.
            "distant" => {
                let uri = arg.ok_or("distant needs a URI")?;
                let cpu = clock(libc::CLOCK_PROCESS_CPUTIME_ID);
                let t0 = clock(libc::CLOCK_MONOTONIC);
                let t = Instant::now();
                // Bounded: a request that hangs is an error, not a stuck bench.
                let cold = async {
                    let c = Client::with_uri_str(uri).await?;
                    let d = c
                        .database("perftest")
                        .collection::<RawDocumentBuf>("corpus")
                        .find_one(doc! { "_id": 1 })
                        .await?;
                    Ok::<_, mongodb::error::Error>((c, d))
                };
                let (c, d) = tokio::time::timeout(std::time::Duration::from_secs(20), cold)
                    .await
                    .map_err(|_| "no answer in 20 s")??;
                let total_s = t.elapsed().as_secs_f64();
                let t1 = clock(libc::CLOCK_MONOTONIC);
                let cpu = clock(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu;
                // Not `shutdown().await`: it waits for the monitor; the
                // client's tasks end on their own once it is dropped.
                drop(c);
                if d.is_none() {
                    return Err("cold findOne found nothing".into());
                }
                self.extra = Some(serde_json::json!({
                    "t0_ns": t0, "t1_ns": t1, "cpu_s": cpu as f64 / 1e9,
                }));
                Sample {
                    total_s,
                    per_op_us: Vec::new(),
                }
            }
            n if n.starts_with("bson_") => {
                let (op, set) = n[5..].split_once('_').unwrap_or(("", ""));
                let Some((_, doc)) = self.data.sets.iter().find(|(s, _)| *s == set) else {
                    return Ok(None);
                };
                let bytes = bson::to_vec(doc)?;
                let t = Instant::now();
                for _ in 0..ops {
                    if op == "encode" {
                        std::hint::black_box(bson::to_vec(doc)?);
                    } else {
                        std::hint::black_box(bson::from_slice::<Document>(&bytes)?);
                    }
                }
                whole_since(t)
            }
            // No client-side operation timeout (CSOT) in this driver.
            _ => {
                let _ = arg;
                return Ok(None);
            }
        };
        Ok(Some(s))
    }
}

/// A clock's reading in nanoseconds.
fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (uri, dir) = match args.as_slice() {
        [_, uri, dir] => (uri.clone(), PathBuf::from(dir)),
        _ => return Err("usage: bench-native URI DATA_DIR".into()),
    };
    let single = dir.join("single_and_multi_document");
    let ext = dir.join("extended_bson");
    let mut sets = Vec::new();
    for n in ["flat", "deep", "full"] {
        sets.push((n, json_doc(&ext.join(format!("{n}_bson.json")))?));
    }
    let data = Data {
        small: RawDocumentBuf::try_from(&json_doc(&single.join("small_doc.json"))?)?,
        large: RawDocumentBuf::try_from(&json_doc(&single.join("large_doc.json"))?)?,
        gridfs: std::fs::read(single.join("gridfs_large.bin"))?,
        sets,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = Client::with_uri_str(&uri).await?;
        let db = client.database("perftest");
        db.run_command(doc! { "ping": 1 }).await?;
        let mut b = Bench {
            uri,
            corpus: db.collection("corpus"),
            scratch: db.collection("scratch"),
            db,
            client,
            data,
            gridfs_id: None,
            wide: None,
            extra: None,
        };
        println!("ready");
        let stdin = std::io::stdin();
        // Reading stdin blocks the (only) runtime thread between requests: fine,
        // nothing is timed then (the driver's monitor waits too).
        for line in stdin.lock().lines() {
            let line = line?;
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (name, ops, arg) = match parts.as_slice() {
                ["quit", ..] | [] => break,
                [n, ops, rest @ ..] => {
                    (*n, ops.parse::<usize>().unwrap_or(1), rest.first().copied())
                }
                [n] => (*n, 1, None),
            };
            let reply = match b.run(name, ops, arg).await {
                Ok(Some(s)) => {
                    let mut v = serde_json::json!({"total_s": s.total_s, "per_op_us": s.per_op_us});
                    if let (Some(m), Some(serde_json::Value::Object(x))) =
                        (v.as_object_mut(), b.extra.take())
                    {
                        m.extend(x);
                    }
                    v
                }
                Ok(None) => serde_json::json!({"unsupported": true}),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            };
            println!("{reply}");
        }
        Ok(())
    })
}

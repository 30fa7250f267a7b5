//! The workloads (the driver benchmarking spec's micro-benchmarks), their data
//! and the wire protocol every contender speaks with the harness.
//!
//! A contender runs one iteration per request: the harness writes
//! `<workload> <ops> [arg]` and reads back one JSON line
//! `{"total_s": t, "per_op_us": [...]}` (or `{"unsupported": true}`,
//! `{"error": "..."}`); the native and PyMongo contenders are child processes
//! speaking it over stdin/stdout, the others run in this process.

use bson::RawDocumentBuf;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    RunCommand,
    FindOne,
    InsertOneSmall,
    InsertOneLarge,
    FindMany,
    InsertManySmall,
    InsertManyLarge,
    GridfsUpload,
    GridfsDownload,
}

use Workload::*;

pub const ALL: [Workload; 9] = [
    RunCommand,
    FindOne,
    InsertOneSmall,
    InsertOneLarge,
    FindMany,
    InsertManySmall,
    InsertManyLarge,
    GridfsUpload,
    GridfsDownload,
];

/// The latency set, also run against nx-27017 for reference.
pub const LATENCY: [Workload; 3] = [RunCommand, FindOne, InsertOneSmall];

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            RunCommand => "run_command",
            FindOne => "find_one",
            InsertOneSmall => "insert_one_small",
            InsertOneLarge => "insert_one_large",
            FindMany => "find_many",
            InsertManySmall => "insert_many_small",
            InsertManyLarge => "insert_many_large",
            GridfsUpload => "gridfs_upload",
            GridfsDownload => "gridfs_download",
        }
    }

    /// Operations per iteration, as the spec has them (`quick`: a tenth, at least one).
    pub fn ops(self, quick: bool) -> usize {
        let full = match self {
            RunCommand | FindOne | InsertOneSmall => 10_000,
            InsertOneLarge => 10,
            // One find (or insertMany, upload, download) of this many documents.
            FindMany | InsertManySmall => 10_000,
            InsertManyLarge => 10,
            GridfsUpload | GridfsDownload => 1,
        };
        if quick && full >= 100 && self != FindMany {
            full / 10
        } else {
            full
        }
    }

    /// Whether each operation is timed on its own (latency) or the iteration as a whole.
    pub fn per_op(self) -> bool {
        matches!(self, RunCommand | FindOne | InsertOneSmall | InsertOneLarge)
    }

    /// The spec's dataset size per operation unit, in bytes, for MB/s.
    pub fn unit_bytes(self) -> f64 {
        match self {
            RunCommand => 13.0,
            FindOne | FindMany => 1622.0,
            InsertOneSmall | InsertManySmall => 275.0,
            InsertOneLarge | InsertManyLarge => 2_731_089.0,
            GridfsUpload | GridfsDownload => 52_428_800.0,
        }
    }
}

pub fn parse(name: &str) -> Option<Workload> {
    ALL.into_iter().find(|w| w.name() == name)
}

/// The spec's data, read from the extracted bench-data directory.
pub struct Data {
    pub tweet: RawDocumentBuf,
    pub small: RawDocumentBuf,
    pub large: RawDocumentBuf,
    pub gridfs: Vec<u8>,
    /// flat, deep, full (extended JSON, as documents).
    pub bson_sets: Vec<(&'static str, bson::Document, usize)>,
}

fn json_doc(path: &Path) -> anyhow::Result<bson::Document> {
    let text = std::fs::read_to_string(path)?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let b = bson::Bson::try_from(v)?;
    match b {
        bson::Bson::Document(d) => Ok(d),
        _ => anyhow::bail!("{} is not a document", path.display()),
    }
}

impl Data {
    pub fn load(dir: &Path) -> anyhow::Result<Data> {
        let single = dir.join("single_and_multi_document");
        let ext = dir.join("extended_bson");
        let raw = |d: bson::Document| RawDocumentBuf::try_from(&d);
        let mut tweet = json_doc(&single.join("tweet.json"))?;
        tweet.remove("_id");
        let mut bson_sets = Vec::new();
        for name in ["flat", "deep", "full"] {
            let path = ext.join(format!("{name}_bson.json"));
            let size = std::fs::metadata(&path)?.len() as usize;
            bson_sets.push((name, json_doc(&path)?, size));
        }
        Ok(Data {
            tweet: raw(tweet)?,
            small: raw(json_doc(&single.join("small_doc.json"))?)?,
            large: raw(json_doc(&single.join("large_doc.json"))?)?,
            gridfs: std::fs::read(single.join("gridfs_large.bin"))?,
            bson_sets,
        })
    }
}

/// One iteration's figures.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub total_s: f64,
    pub per_op_us: Vec<f64>,
}

pub fn parse_reply(line: &str) -> anyhow::Result<Option<Sample>> {
    let v: serde_json::Value = serde_json::from_str(line.trim())?;
    if v.get("unsupported").is_some() {
        return Ok(None);
    }
    if let Some(e) = v.get("error") {
        anyhow::bail!("{e}");
    }
    let total_s = v["total_s"].as_f64().unwrap_or(0.0);
    let per_op_us = v["per_op_us"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    Ok(Some(Sample { total_s, per_op_us }))
}

//! `mapReduce` (deprecated by the server, still in the Retryable Reads spec):
//! with `out: {inline: 1}` it is a read and retried as one; any other output
//! writes a collection, so it goes to a writable server and is not retried.

use super::Collection;
use super::OpOptions;
use crate::error::{Error, Result};
use crate::retryable::Retryability;
use bson::{rawdoc, RawBson, RawDocumentBuf};

/// The command for `map`/`reduce` (JavaScript source, sent as BSON code) into
/// `out`, and how it may be retried.
pub(crate) fn command(
    collection: &str,
    map: &str,
    reduce: &str,
    out: RawDocumentBuf,
) -> Result<(RawDocumentBuf, Retryability)> {
    if out.is_empty() {
        return Err(Error::invalid_argument(
            "mapReduce needs an output: {inline: 1} or a collection",
        ));
    }
    let inline = out.get("inline").ok().flatten().is_some();
    let body = rawdoc! {
        "mapReduce": collection,
        "map": RawBson::JavaScriptCode(map.to_string()),
        "reduce": RawBson::JavaScriptCode(reduce.to_string()),
        "out": out,
    };
    let retry = if inline {
        Retryability::Read
    } else {
        Retryability::None
    };
    Ok((body, retry))
}

/// The reply without the fields every reply carries (`ok`, `$clusterTime`, `operationTime`).
pub(crate) fn result(reply: RawDocumentBuf) -> Result<RawDocumentBuf> {
    let mut out = RawDocumentBuf::new();
    for entry in reply.iter() {
        let (key, value) = entry.map_err(|e| Error::protocol(format!("mapReduce reply: {e}")))?;
        if !matches!(key.as_str(), "ok" | "$clusterTime" | "operationTime") {
            out.append(key, RawBson::from(value));
        }
    }
    Ok(out)
}

impl Collection {
    /// Runs `mapReduce` on this collection; see [`command`] for retries.
    pub fn map_reduce(
        &self,
        map: &str,
        reduce: &str,
        out: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<RawDocumentBuf> {
        let (body, retry) = command(&self.name, map, reduce, out)?;
        result(self.command(body, options, retry)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_output_is_a_retryable_read() {
        let (body, retry) = command(
            "c",
            "function(){}",
            "function(k,v){}",
            rawdoc! { "inline": 1 },
        )
        .unwrap();
        assert_eq!(retry, Retryability::Read);
        assert_eq!(body.get_str("mapReduce").unwrap(), "c");
        assert_eq!(
            body.get("map").unwrap().unwrap().as_javascript(),
            Some("function(){}")
        );
        assert_eq!(
            body.get_document("out").unwrap().get_i32("inline").unwrap(),
            1
        );
    }

    #[test]
    fn output_to_a_collection_is_not_retried() {
        let (_, retry) = command("c", "m", "r", rawdoc! { "replace": "out" }).unwrap();
        assert_eq!(retry, Retryability::None);
        assert!(command("c", "m", "r", rawdoc! {}).is_err());
    }

    #[test]
    fn result_drops_bookkeeping_fields() {
        let reply = rawdoc! { "results": [{ "_id": 0, "value": 6 }], "ok": 1.0,
        "operationTime": bson::Timestamp { time: 1, increment: 1 } };
        let r = result(reply).unwrap();
        assert_eq!(r.iter().count(), 1);
        assert_eq!(r.get_array("results").unwrap().into_iter().count(), 1);
    }
}

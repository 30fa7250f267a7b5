//! `mapReduce` (deprecated by the server). With `out: {inline: 1}` it is a
//! read (read preference and read concern apply); any other output writes a
//! collection, so it goes to a writable server. Either way it is never retried:
//! the Retryable Reads spec says drivers MUST NOT retry Collection.mapReduce
//! (the server's "Early Failure on Socket Disconnect" does not cover it).

use super::Collection;
use super::OpOptions;
use crate::error::{Error, Result};
use crate::operation::RunCommand;
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use bson::{rawdoc, RawBson, RawDocumentBuf};

/// The command for `map`/`reduce` (JavaScript source, sent as BSON code) into
/// `out`, and whether it is a read (inline output).
pub(crate) fn command(
    collection: &str,
    map: &str,
    reduce: &str,
    out: RawDocumentBuf,
) -> Result<(RawDocumentBuf, bool)> {
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
    Ok((body, inline))
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
    /// Runs `mapReduce` on this collection, never retried (see the module doc).
    pub async fn map_reduce(
        &self,
        map: &str,
        reduce: &str,
        out: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<RawDocumentBuf> {
        let (mut body, read) = command(&self.name, map, reduce, out)?;
        let options = &options.flattened()?;
        let options = match read {
            true => self.reading(options)?,
            false => self.writing(options)?,
        };
        crate::operation::merge_extra(&mut body, options.extra.as_deref())?;
        let mut op = match read {
            true => RunCommand {
                criteria: crate::sdam::selection::Criteria::Read(
                    self.read_preference(options.read_preference.as_ref(), options.session),
                ),
                ..RunCommand::read(&self.db.name, body)
            },
            false => RunCommand::new(&self.db.name, body, Criteria::Write),
        };
        op.retryability = Retryability::None;
        let timeout = self.resolve(options.timeout_ms, options.session)?;
        result(
            self.db
                .client
                .execute(&mut op, timeout, options.session)
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_output_is_a_read() {
        let (body, read) = command(
            "c",
            "function(){}",
            "function(k,v){}",
            rawdoc! { "inline": 1 },
        )
        .unwrap();
        assert!(read);
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
    fn output_to_a_collection_is_a_write() {
        let (_, read) = command("c", "m", "r", rawdoc! { "replace": "out" }).unwrap();
        assert!(!read);
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

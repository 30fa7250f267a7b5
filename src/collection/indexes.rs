//! Index management (Index Management spec): create, list, drop.

use super::{Collection, OpOptions};
use crate::cursor::{Cursor, TimeoutMode};
use crate::error::{Error, Result};
use crate::retryable::Retryability;
use bson::{cstr, rawdoc, RawArrayBuf, RawDocument, RawDocumentBuf};

/// The fields of `createIndexes` itself; every other option of `create_index`
/// describes the index (unique, sparse, name, expireAfterSeconds, ...).
const COMMAND_FIELDS: [&str; 5] = [
    "commitQuorum",
    "comment",
    "writeConcern",
    "maxTimeMS",
    "rawData",
];

impl Collection {
    /// One index on `keys`; `options.extra` holds the index's options and the
    /// command's own fields (`COMMAND_FIELDS`), each sent where it belongs.
    /// Returns the index name.
    pub async fn create_index(
        &self,
        keys: &RawDocument,
        options: &OpOptions<'_>,
    ) -> Result<String> {
        let (model, extra) = index_model(keys, options.extra.as_deref())?;
        let options = OpOptions {
            extra,
            ..options.clone()
        };
        let names = self.create_indexes(&[model], &options).await?;
        Ok(names.into_iter().next().unwrap_or_default())
    }

    /// Each model is `{key: {...}, ...index options}`; returns the index names.
    pub async fn create_indexes(
        &self,
        models: &[RawDocumentBuf],
        options: &OpOptions<'_>,
    ) -> Result<Vec<String>> {
        let mut indexes = RawArrayBuf::new();
        let mut names = Vec::new();
        for model in models {
            let keys = model
                .get_document("key")
                .map_err(|_| Error::invalid_argument("index model needs a key document"))?;
            let name = match model.get_str("name") {
                Ok(n) => n.to_string(),
                Err(_) => default_index_name(keys)?,
            };
            let mut index = model.clone();
            if model.get("name")?.is_none() {
                index.append(cstr!("name"), name.as_str());
            }
            indexes.push(index);
            names.push(name);
        }
        let body = rawdoc! { "createIndexes": self.name.as_str(), "indexes": indexes };
        self.command(body, options, Retryability::None).await?;
        Ok(names)
    }

    pub async fn list_indexes(
        &self,
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let mut cursor_opts = RawDocumentBuf::new();
        if let Some(b) = batch_size {
            cursor_opts.append(cstr!("batchSize"), i64::from(b));
        }
        let body = rawdoc! { "listIndexes": self.name.as_str(), "cursor": cursor_opts };
        self.cursor_command(body, batch_size, options, mode, Retryability::Read, false)
            .await
    }

    /// Drops one index by name (`"*"`: all but `_id`).
    pub async fn drop_index(&self, name: &str, options: &OpOptions<'_>) -> Result<()> {
        let body = rawdoc! { "dropIndexes": self.name.as_str(), "index": name };
        self.command(body, options, Retryability::None)
            .await
            .map(|_| ())
    }
}

/// `{key: keys, ...index options}` and what is left for the command.
fn index_model(
    keys: &RawDocument,
    extra: Option<&RawDocument>,
) -> Result<(RawDocumentBuf, Option<RawDocumentBuf>)> {
    let mut model = rawdoc! { "key": keys.to_owned() };
    let mut command = RawDocumentBuf::new();
    for item in extra.into_iter().flatten() {
        let (k, v) = item?;
        if k == "key" {
            return Err(Error::invalid_argument(
                "create-index takes its keys as an argument, not as `key` in extra",
            ));
        }
        match COMMAND_FIELDS.contains(&k.as_str()) {
            true => command.append(k, v),
            false => model.append(k, v),
        }
    }
    Ok((model, (!command.is_empty()).then_some(command)))
}

/// The spec's default index name: `field_dir` joined by `_`.
fn default_index_name(keys: &RawDocument) -> Result<String> {
    let mut parts = Vec::new();
    for item in keys {
        let (k, v) = item?;
        let dir = match v {
            bson::RawBsonRef::Int32(i) => i.to_string(),
            bson::RawBsonRef::Int64(i) => i.to_string(),
            bson::RawBsonRef::Double(d) => d.to_string(),
            bson::RawBsonRef::String(s) => s.to_string(),
            _ => {
                return Err(Error::invalid_argument(
                    "index key directions are numbers or strings",
                ))
            }
        };
        parts.push(format!("{k}_{dir}"));
    }
    Ok(parts.join("_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_index_names() {
        assert_eq!(
            default_index_name(&rawdoc! { "a": 1, "b": -1 }).unwrap(),
            "a_1_b_-1"
        );
        assert_eq!(
            default_index_name(&rawdoc! { "t": "text" }).unwrap(),
            "t_text"
        );
        assert!(default_index_name(&rawdoc! { "a": true }).is_err());
    }

    #[test]
    fn index_options_go_in_the_index_and_command_fields_in_the_command() {
        let keys = rawdoc! { "n": 1 };
        let extra = rawdoc! { "unique": true, "comment": "c", "expireAfterSeconds": 60, "commitQuorum": "majority" };
        let (model, command) = index_model(&keys, Some(&extra)).unwrap();
        assert_eq!(
            model,
            rawdoc! { "key": { "n": 1 }, "unique": true, "expireAfterSeconds": 60 }
        );
        assert_eq!(
            command,
            Some(rawdoc! { "comment": "c", "commitQuorum": "majority" })
        );
        let (model, command) = index_model(&keys, None).unwrap();
        assert_eq!((model, command), (rawdoc! { "key": { "n": 1 } }, None));
        assert!(index_model(&keys, Some(&rawdoc! { "key": { "m": 1 } })).is_err());
    }
}

//! Atlas Search index management (Index Management spec, "Search Index
//! Management"): createSearchIndexes, updateSearchIndex, dropSearchIndex
//! and the `$listSearchIndexes` stage. The spec leaves the handles' read
//! and write concerns off these commands, so they go as given.

use super::{aggregate_command, array, Collection, OpOptions};
use crate::cursor::{Cursor, TimeoutMode};
use crate::error::{Error, Result};
use crate::retryable::Retryability;
use bson::{rawdoc, RawBson, RawDocument, RawDocumentBuf};

/// A search index to create: `{definition, name?, type?}` as the server
/// takes it (`type` is "search" or "vectorSearch").
pub struct SearchIndexModel {
    pub definition: RawDocumentBuf,
    pub name: Option<String>,
    pub kind: Option<String>,
}

impl SearchIndexModel {
    fn to_document(&self) -> RawDocumentBuf {
        let mut d = rawdoc! { "definition": self.definition.clone() };
        if let Some(name) = &self.name {
            d.append(bson::cstr!("name"), name.as_str());
        }
        if let Some(kind) = &self.kind {
            d.append(bson::cstr!("type"), kind.as_str());
        }
        d
    }
}

impl Collection {
    /// One `createSearchIndexes` for all `models`; the names the server
    /// gave them, in order. Not retried.
    pub async fn create_search_indexes(
        &self,
        models: &[SearchIndexModel],
        options: &OpOptions<'_>,
    ) -> Result<Vec<String>> {
        let indexes: Vec<RawDocumentBuf> = models.iter().map(|m| m.to_document()).collect();
        let body =
            rawdoc! { "createSearchIndexes": self.name.as_str(), "indexes": array(&indexes) };
        let reply = self
            .command_as_given(body, options, Retryability::None)
            .await?;
        created_names(&reply)
    }

    /// `dropSearchIndex` of the index called `name`. Not retried.
    pub async fn drop_search_index(&self, name: &str, options: &OpOptions<'_>) -> Result<()> {
        let body = rawdoc! { "dropSearchIndex": self.name.as_str(), "name": name };
        self.command_as_given(body, options, Retryability::None)
            .await
            .map(|_| ())
    }

    /// `updateSearchIndex`: `name`'s definition becomes `definition`. Not retried.
    pub async fn update_search_index(
        &self,
        name: &str,
        definition: &RawDocument,
        options: &OpOptions<'_>,
    ) -> Result<()> {
        let body = rawdoc! {
            "updateSearchIndex": self.name.as_str(),
            "name": name,
            "definition": definition.to_owned(),
        };
        self.command_as_given(body, options, Retryability::None)
            .await
            .map(|_| ())
    }

    /// A cursor over the search indexes (all, or the one called `name`):
    /// an aggregate of `$listSearchIndexes`, retried as a read.
    pub async fn list_search_indexes(
        &self,
        name: Option<&str>,
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let stage = match name {
            Some(n) => rawdoc! { "$listSearchIndexes": { "name": n } },
            None => rawdoc! { "$listSearchIndexes": {} },
        };
        let body = aggregate_command(RawBson::String(self.name.clone()), &[stage], batch_size);
        self.cursor_command(body, batch_size, options, mode, Retryability::Read, false)
            .await
    }
}

/// The names in a `createSearchIndexes` reply's `indexesCreated`.
fn created_names(reply: &RawDocument) -> Result<Vec<String>> {
    let bad = || Error::protocol("createSearchIndexes reply without indexesCreated names");
    let created = reply.get_array("indexesCreated").map_err(|_| bad())?;
    let mut names = Vec::new();
    for entry in created {
        let entry = entry?.as_document().ok_or_else(bad)?;
        names.push(entry.get_str("name").map_err(|_| bad())?.to_string());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_send_only_the_fields_given_and_replies_give_the_names() {
        let m = SearchIndexModel {
            definition: rawdoc! { "mappings": { "dynamic": true } },
            name: None,
            kind: Some("vectorSearch".into()),
        };
        assert_eq!(
            m.to_document(),
            rawdoc! { "definition": { "mappings": { "dynamic": true } }, "type": "vectorSearch" }
        );
        let reply = rawdoc! { "indexesCreated": [{ "id": "1", "name": "a" }, { "id": "2", "name": "b" }], "ok": 1 };
        assert_eq!(created_names(&reply).unwrap(), ["a", "b"]);
        assert!(created_names(&rawdoc! { "ok": 1 }).is_err());
    }
}

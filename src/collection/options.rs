//! The CRUD spec's everyday options as types (WIT 0.2.0), turned into
//! command fields by their server names in this one place: every operation
//! then reads them from `extra` as it always did, and a typed field replaces
//! the same field given in `extra`.

use super::OpOptions;
use crate::concern::{ReadConcern, WriteConcern};
use crate::error::{Error, Result};
use crate::sdam::selection::ReadPreference;
use bson::raw::CString;
use bson::{RawArrayBuf, RawBson, RawDocumentBuf};

/// An index to use (CRUD spec `hint`): its name or its key pattern.
#[derive(Debug, Clone, PartialEq)]
pub enum Hint {
    Name(String),
    Keys(RawDocumentBuf),
}

/// Which document findAndModify returns (CRUD spec `returnDocument`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnDocument {
    Before,
    After,
}

impl Hint {
    fn to_bson(&self) -> RawBson {
        match self {
            Hint::Name(n) => RawBson::String(n.clone()),
            Hint::Keys(k) => RawBson::Document(k.clone()),
        }
    }
}

/// The typed options that become command fields, shared by op, find and
/// aggregate options.
#[derive(Default, Clone)]
pub(crate) struct Typed<'o> {
    pub upsert: Option<bool>,
    pub ordered: Option<bool>,
    pub hint: Option<&'o Hint>,
    pub collation: Option<&'o RawDocumentBuf>,
    pub comment: Option<&'o RawBson>,
    pub let_vars: Option<&'o RawDocumentBuf>,
    pub array_filters: Option<&'o [RawDocumentBuf]>,
    pub return_document: Option<ReturnDocument>,
    pub projection: Option<&'o RawDocumentBuf>,
    pub sort: Option<&'o RawDocumentBuf>,
    pub bypass_document_validation: Option<bool>,
    pub max_await_time_ms: Option<u64>,
    pub read_concern: Option<&'o ReadConcern>,
    pub write_concern: Option<&'o WriteConcern>,
}

impl Typed<'_> {
    /// `extra` with each typed field set by its server name (replacing the
    /// same field in `extra`); `extra` unchanged when none is set.
    pub(crate) fn merged_into(
        &self,
        extra: Option<&RawDocumentBuf>,
    ) -> Result<Option<RawDocumentBuf>> {
        let mut typed: Vec<(&'static str, RawBson)> = Vec::new();
        let mut put = |name: &'static str, v: Option<RawBson>| {
            if let Some(v) = v {
                typed.push((name, v));
            }
        };
        put("upsert", self.upsert.map(RawBson::Boolean));
        put("ordered", self.ordered.map(RawBson::Boolean));
        put("hint", self.hint.map(Hint::to_bson));
        put("collation", self.collation.cloned().map(RawBson::Document));
        put("comment", self.comment.cloned());
        put("let", self.let_vars.cloned().map(RawBson::Document));
        put(
            "arrayFilters",
            self.array_filters.map(|f| {
                let mut a = RawArrayBuf::new();
                for d in f {
                    a.push(d.clone());
                }
                RawBson::Array(a)
            }),
        );
        put(
            "returnDocument",
            self.return_document.map(|r| {
                RawBson::String(match r {
                    ReturnDocument::Before => "Before".into(),
                    ReturnDocument::After => "After".into(),
                })
            }),
        );
        put(
            "projection",
            self.projection.cloned().map(RawBson::Document),
        );
        put("sort", self.sort.cloned().map(RawBson::Document));
        put(
            "bypassDocumentValidation",
            self.bypass_document_validation.map(RawBson::Boolean),
        );
        put(
            "maxAwaitTimeMS",
            self.max_await_time_ms
                .map(|ms| RawBson::Int64(ms.min(i64::MAX as u64) as i64)),
        );
        put(
            "readConcern",
            self.read_concern
                .map(|c| RawBson::Document(c.to_document())),
        );
        put(
            "writeConcern",
            self.write_concern
                .map(|c| RawBson::Document(c.to_document())),
        );
        if typed.is_empty() {
            return Ok(extra.cloned());
        }
        let mut out = RawDocumentBuf::new();
        if let Some(extra) = extra {
            for item in extra {
                let (k, v) = item?;
                if !typed.iter().any(|(name, _)| *name == k.as_str()) {
                    out.append(k, v);
                }
            }
        }
        for (name, v) in typed {
            let key = CString::try_from(name)
                .map_err(|_| Error::invalid_argument("invalid field name"))?;
            out.append(key, v);
        }
        Ok(Some(out))
    }
}

impl<'a> OpOptions<'a> {
    fn typed(&self) -> Typed<'_> {
        Typed {
            upsert: self.upsert,
            ordered: self.ordered,
            hint: self.hint.as_ref(),
            collation: self.collation.as_ref(),
            comment: self.comment.as_ref(),
            let_vars: self.let_vars.as_ref(),
            array_filters: self.array_filters.as_deref(),
            return_document: self.return_document,
            projection: self.projection.as_ref(),
            sort: self.sort.as_ref(),
            bypass_document_validation: self.bypass_document_validation,
            max_await_time_ms: self.max_await_time_ms,
            read_concern: self.read_concern.as_ref(),
            write_concern: self.write_concern.as_ref(),
        }
    }

    /// These options with every typed field moved into `extra` by its
    /// server name; the deadline, session and read preference stay.
    pub(crate) fn flattened(&self) -> Result<OpOptions<'a>> {
        Ok(OpOptions {
            timeout_ms: self.timeout_ms,
            session: self.session,
            extra: self.typed().merged_into(self.extra.as_ref())?,
            read_preference: self.read_preference.clone(),
            ..Default::default()
        })
    }

    /// The read preference a read of these options selects by (primary when unset).
    pub(crate) fn read_preference_or_primary(&self) -> ReadPreference {
        self.read_preference.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdam::selection::ReadMode;
    use crate::uri::W;
    use bson::rawdoc;

    #[test]
    fn typed_fields_take_their_server_names_and_win_over_extra() {
        let opts = OpOptions {
            extra: Some(rawdoc! { "upsert": false, "comment": "old", "maxTimeMS": 5 }),
            upsert: Some(true),
            hint: Some(Hint::Name("a_1".into())),
            comment: Some(RawBson::String("new".into())),
            let_vars: Some(rawdoc! { "x": 1 }),
            array_filters: Some(vec![rawdoc! { "e.a": 1 }]),
            return_document: Some(ReturnDocument::After),
            write_concern: Some(WriteConcern {
                w: Some(W::Majority),
                journal: Some(true),
                wtimeout_ms: None,
            }),
            read_preference: Some(ReadPreference {
                mode: ReadMode::Secondary,
                ..Default::default()
            }),
            ..Default::default()
        };
        let flat = opts.flattened().unwrap();
        assert_eq!(
            flat.extra.clone().unwrap(),
            rawdoc! {
                "maxTimeMS": 5,
                "upsert": true,
                "hint": "a_1",
                "comment": "new",
                "let": { "x": 1 },
                "arrayFilters": [{ "e.a": 1 }],
                "returnDocument": "After",
                "writeConcern": { "w": "majority", "j": true },
            }
        );
        assert_eq!(flat.read_preference_or_primary().mode, ReadMode::Secondary);
        assert!(flat.upsert.is_none(), "flattened once, not twice");
    }

    #[test]
    fn no_typed_field_leaves_extra_alone() {
        let opts = OpOptions {
            extra: Some(rawdoc! { "hint": { "a": 1 } }),
            ..Default::default()
        };
        assert_eq!(opts.flattened().unwrap().extra, opts.extra);
        assert_eq!(OpOptions::default().flattened().unwrap().extra, None);
        assert_eq!(
            OpOptions::default().read_preference_or_primary().mode,
            ReadMode::Primary
        );
    }
}

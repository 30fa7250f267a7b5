//! Read and write concern (Read and Write Concern spec), sans I/O: the
//! client's defaults from the URI, inherited by databases and collections,
//! and added to an operation's command unless it runs in a transaction or
//! the caller set one already.

use crate::error::Result;
use crate::uri::{UriOptions, W};
use bson::raw::CStr;
use bson::{cstr, RawDocument, RawDocumentBuf};

/// A read concern (Read and Write Concern spec).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadConcern {
    pub level: String,
}

/// A write concern (Read and Write Concern spec).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteConcern {
    pub w: Option<W>,
    pub journal: Option<bool>,
    pub wtimeout_ms: Option<u64>,
}

impl ReadConcern {
    pub fn to_document(&self) -> RawDocumentBuf {
        let mut d = RawDocumentBuf::new();
        d.append(cstr!("level"), self.level.as_str());
        d
    }
}

impl WriteConcern {
    /// `{w?, j?, wtimeout?}`, as the server reads it.
    pub fn to_document(&self) -> RawDocumentBuf {
        let mut wc = RawDocumentBuf::new();
        match &self.w {
            Some(W::Nodes(n)) => wc.append(cstr!("w"), *n as i32),
            Some(W::Majority) => wc.append(cstr!("w"), "majority"),
            Some(W::Tag(t)) => wc.append(cstr!("w"), t.as_str()),
            None => {}
        }
        if let Some(j) = self.journal {
            wc.append(cstr!("j"), j);
        }
        if let Some(ms) = self.wtimeout_ms {
            wc.append(cstr!("wtimeout"), ms.min(i64::MAX as u64) as i64);
        }
        wc
    }
}

/// The URI's `w`, `journal` and `wtimeoutMS` as a write concern document.
pub fn write_concern_from_uri(o: &UriOptions) -> Option<RawDocumentBuf> {
    let wc = WriteConcern {
        w: o.w.clone(),
        journal: o.journal,
        wtimeout_ms: o.w_timeout_ms,
    }
    .to_document();
    wc.iter().next().is_some().then_some(wc)
}

/// The URI's `readConcernLevel` as a read concern document.
pub fn read_concern_from_uri(o: &UriOptions) -> Option<RawDocumentBuf> {
    o.read_concern_level.as_deref().map(|level| {
        let mut rc = RawDocumentBuf::new();
        rc.append(cstr!("level"), level);
        rc
    })
}

/// An unacknowledged write concern (`w: 0`, any numeric type): such a
/// write is neither retryable nor allowed in a transaction (Retryable
/// Writes spec, "Unsupported Write Operations"; Transactions spec).
pub fn is_unacknowledged(wc: &bson::RawDocument) -> bool {
    match wc.get("w") {
        Ok(Some(bson::RawBsonRef::Int32(w))) => w == 0,
        Ok(Some(bson::RawBsonRef::Int64(w))) => w == 0,
        Ok(Some(bson::RawBsonRef::Double(w))) => w == 0.0,
        _ => false,
    }
}

/// Whether a command carries an unacknowledged `writeConcern`.
pub fn sends_unacknowledged(command: &bson::RawDocument) -> bool {
    command
        .get_document(WRITE.as_str())
        .is_ok_and(is_unacknowledged)
}

/// Under CSOT the deadline replaces `wtimeout`: it is dropped from the
/// write concern an operation inherits (CSOT spec, deprecated options).
pub fn without_wtimeout(wc: &RawDocumentBuf) -> Result<RawDocumentBuf> {
    without(wc, "wtimeout")
}

/// `concern` without its field `key`.
pub fn without(concern: &RawDocument, key: &str) -> Result<RawDocumentBuf> {
    let mut out = RawDocumentBuf::new();
    for item in concern {
        let (k, v) = item?;
        if k.as_str() != key {
            out.append(k, v);
        }
    }
    Ok(out)
}

pub const READ: &CStr = cstr!("readConcern");
pub const WRITE: &CStr = cstr!("writeConcern");

/// Sets `body`'s `key` (a concern) to `value`: replaced in place, else appended.
pub fn set(body: &mut RawDocumentBuf, key: &CStr, value: RawDocumentBuf) -> Result<()> {
    if body.get(key.as_str())?.is_none() {
        body.append(key, value);
        return Ok(());
    }
    let mut out = RawDocumentBuf::new();
    for item in body.iter() {
        let (k, v) = item?;
        match k == key {
            true => out.append(k, value.clone()),
            false => out.append(k, v),
        }
    }
    *body = out;
    Ok(())
}

/// `extra` with `key: concern` added when absent. An empty concern (the
/// server's default) is not sent.
pub fn with_default(
    extra: Option<&RawDocumentBuf>,
    key: &CStr,
    concern: Option<&RawDocumentBuf>,
) -> Result<Option<RawDocumentBuf>> {
    let Some(concern) = concern.filter(|c| c.iter().next().is_some()) else {
        return Ok(extra.cloned());
    };
    let mut out = extra.cloned().unwrap_or_default();
    if out.get(key.as_str())?.is_none() {
        out.append(key, concern.clone());
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn unacknowledged_is_w_0_of_any_numeric_type() {
        assert!(is_unacknowledged(&rawdoc! { "w": 0 }));
        assert!(is_unacknowledged(&rawdoc! { "w": 0i64 }));
        assert!(is_unacknowledged(&rawdoc! { "w": 0.0 }));
        assert!(!is_unacknowledged(&rawdoc! { "w": 1 }));
        assert!(!is_unacknowledged(&rawdoc! { "w": "majority" }));
        assert!(!is_unacknowledged(&rawdoc! { "j": true }));
        assert!(sends_unacknowledged(
            &rawdoc! { "insert": "c", "writeConcern": { "w": 0 } }
        ));
        assert!(!sends_unacknowledged(&rawdoc! { "insert": "c" }));
    }

    #[test]
    fn from_the_uri() {
        let cs = crate::uri::parse(
            "mongodb://h/?w=majority&journal=true&wtimeoutMS=100&readConcernLevel=local",
        )
        .unwrap();
        assert_eq!(
            write_concern_from_uri(&cs.options),
            Some(rawdoc! { "w": "majority", "j": true, "wtimeout": 100i64 })
        );
        assert_eq!(
            read_concern_from_uri(&cs.options),
            Some(rawdoc! { "level": "local" })
        );
        let plain = crate::uri::parse("mongodb://h/").unwrap();
        assert_eq!(write_concern_from_uri(&plain.options), None);
        assert_eq!(read_concern_from_uri(&plain.options), None);
    }

    #[test]
    fn csot_drops_wtimeout() {
        let wc = rawdoc! { "w": 1, "wtimeout": 100 };
        assert_eq!(without_wtimeout(&wc).unwrap(), rawdoc! { "w": 1 });
    }

    #[test]
    fn defaults_do_not_override_the_caller() {
        let wc = rawdoc! { "w": 1 };
        let added = with_default(None, WRITE, Some(&wc)).unwrap().unwrap();
        assert_eq!(added, rawdoc! { "writeConcern": { "w": 1 } });
        let own = rawdoc! { "writeConcern": { "w": 2 } };
        assert_eq!(
            with_default(Some(&own), WRITE, Some(&wc)).unwrap().unwrap(),
            own
        );
        assert_eq!(
            with_default(None, WRITE, Some(&rawdoc! {})).unwrap(),
            None,
            "empty: server default"
        );
    }
}

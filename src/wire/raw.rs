//! One pass over raw BSON bytes, without `bson`'s iterators: the full
//! check of a document ([`walk`], [`walk_finding`] for an insert's `_id`),
//! its top-level elements ([`elements`]) and lookups by key ([`find`],
//! [`get`], [`get_all`]). All size each element the same way (`size_of`,
//! `value_size`), so what the check accepts, the others skip through.
//!
//! They are for what every operation reads (a reply's `ok`, `$clusterTime`,
//! `cursor`; a command's `rawData`): `bson`'s `get` checks each key it passes
//! twice and builds an error, its key copied, for every absent field.

use bson::{RawBsonRef, RawDocument, RawDocumentBuf, Timestamp};

/// What is wrong with the bytes, for an error message.
pub type Malformed = &'static str;

/// Element types the driver reads the bytes of.
pub const DOCUMENT: u8 = 0x03;
pub const ARRAY: u8 = 0x04;

/// Malformed bytes as the driver's error (as `bson`'s own errors are).
pub fn error(what: Malformed) -> crate::error::Error {
    crate::error::Error::protocol(format!("malformed BSON: {what}"))
}

#[inline(always)]
fn i32_at(b: &[u8], at: usize) -> Result<i32, Malformed> {
    match b.get(at..at.saturating_add(4)) {
        Some(s) => Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        None => Err("a length runs past its document"),
    }
}

/// A cstring from `at`, inside the document ending at `end` (its
/// terminator): where its NUL is. Keys and regex parts must be UTF-8.
#[inline(always)]
fn cstring(b: &[u8], at: usize, end: usize) -> Result<usize, Malformed> {
    // Eight bytes a step (it runs over every key of every batch): a
    // has-zero-byte test finds the NUL, and the high bits seen before it
    // say whether any byte is non-ASCII. Keys are nearly always ASCII,
    // which needs no UTF-8 check. The words may read past `end` into the
    // bytes after it; a NUL found there is out of the document.
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut high = 0u64;
    let mut i = at;
    let nul = loop {
        let Some(chunk) = b.get(i..i + 8) else {
            // The last few bytes of the buffer: one at a time.
            let tail = b.get(i..end).unwrap_or_default();
            match tail.iter().position(|&c| c == 0) {
                Some(n) => {
                    high |= tail[..n].iter().fold(0, |h, &c| h | u64::from(c));
                    break i + n;
                }
                None => return Err("a cstring has no terminator"),
            }
        };
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let zero = w.wrapping_sub(LOW) & !w & HIGH;
        if zero != 0 {
            // The lowest flagged byte is the first NUL (flags above it may be false).
            let n = zero.trailing_zeros() as usize / 8;
            high |= w & ((1u64 << (8 * n)) - 1);
            break i + n;
        }
        high |= w;
        i += 8;
    };
    if nul >= end {
        return Err("a cstring has no terminator");
    }
    if high & HIGH != 0 {
        std::str::from_utf8(&b[at..nul]).map_err(|_| "a key or pattern is not UTF-8")?;
    }
    Ok(nul)
}

/// A length-prefixed string at `at`: its whole size (length + 4).
#[inline(always)]
fn string(b: &[u8], at: usize) -> Result<usize, Malformed> {
    let len = i32_at(b, at)?;
    if len < 1 {
        return Err("a string length is below 1");
    }
    let size = len as usize + 4;
    match b.get(at + size - 1) {
        Some(0) => Ok(size),
        Some(_) => Err("a string is not NUL-terminated"),
        None => Err("a string runs past its document"),
    }
}

/// A document at `at` that must end before `limit`: its terminator.
fn document(b: &[u8], at: usize, limit: usize) -> Result<usize, Malformed> {
    let len = i32_at(b, at)?;
    if len < 5 {
        return Err("a document is shorter than 5 bytes");
    }
    let end = at
        .checked_add(len as usize - 1)
        .ok_or("a length overflows")?;
    if end >= limit {
        return Err("a document runs past its parent");
    }
    if b[end] != 0 {
        return Err("a document is not NUL-terminated");
    }
    Ok(end)
}

/// Where a value must descend into: a document or array (its elements
/// from `at`, ending at `end`), or none.
enum Inner {
    Leaf,
    Document { at: usize, end: usize },
}

/// [`value_size`] with the types of nearly every element sized inline, the
/// others (and every error) there. Inlined into the loops over elements.
#[inline(always)]
fn size_of(b: &[u8], kind: u8, v: usize, end: usize) -> Result<(usize, Inner), Malformed> {
    let size = match kind {
        0x10 => 4,
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        0x0A => 0,
        0x02 => string(b, v)?,
        0x08 if b.get(v).is_some_and(|&c| c <= 1) => 1,
        DOCUMENT | ARRAY => {
            let inner = document(b, v, end)?;
            let at = v + 4;
            return Ok((inner + 1 - v, Inner::Document { at, end: inner }));
        }
        _ => return value_size(b, kind, v, end),
    };
    match v.checked_add(size) {
        Some(next) if next <= end => Ok((size, Inner::Leaf)),
        _ => Err("a value runs past its document"),
    }
}

/// The top-level element at `at` of the document ending at `end`: its type,
/// where its key's NUL is, and its value's size (one step of `elements`
/// and `find`).
#[inline(always)]
fn element(b: &[u8], at: usize, end: usize) -> Result<(u8, usize, usize), Malformed> {
    let nul = cstring(b, at + 1, end)?;
    let (size, _) = size_of(b, b[at], nul + 1, end)?;
    Ok((b[at], nul, size))
}

/// The size of the value of type `kind` at `v` in the document ending at
/// `end`, its own framing checked (a container's elements are not).
fn value_size(b: &[u8], kind: u8, v: usize, end: usize) -> Result<(usize, Inner), Malformed> {
    let size = match kind {
        0x01 | 0x09 | 0x11 | 0x12 => 8, // double, date, timestamp, int64
        0x10 => 4,                      // int32
        0x07 => 12,                     // ObjectId
        0x13 => 16,                     // Decimal128
        0x06 | 0x0A | 0x7F | 0xFF => 0, // undefined, null, max/min key
        0x08 => match b.get(v) {
            Some(0 | 1) => 1,
            _ => return Err("a boolean is not 0 or 1"),
        },
        0x02 | 0x0D | 0x0E => string(b, v)?, // string, code, symbol
        0x0C => {
            // DBPointer: a UTF-8 namespace and an ObjectId.
            let n = string(b, v)?;
            std::str::from_utf8(&b[v + 4..v + n - 1])
                .map_err(|_| "a DBPointer namespace is not UTF-8")?;
            n + 12
        }
        0x0B => {
            let pattern = cstring(b, v, end)?;
            cstring(b, pattern + 1, end)? + 1 - v
        }
        0x05 => {
            let len = i32_at(b, v)?;
            if len < 0 {
                return Err("a binary length is negative");
            }
            let len = len as usize;
            if b.get(v + 4) == Some(&2) {
                // The old binary subtype repeats the length inside.
                if len < 4 || i32_at(b, v + 5)? != len as i32 - 4 {
                    return Err("an old binary's inner length is wrong");
                }
            }
            len + 5
        }
        DOCUMENT | ARRAY => {
            let inner = document(b, v, end)?;
            return Ok((
                inner + 1 - v,
                Inner::Document {
                    at: v + 4,
                    end: inner,
                },
            ));
        }
        0x0F => {
            // Code with scope: total length, code string, scope document.
            let len = i32_at(b, v)?;
            if len < 14 {
                return Err("a code-with-scope is too short");
            }
            let total = len as usize;
            if v.checked_add(total).is_none_or(|e| e > end) {
                return Err("a code-with-scope runs past its document");
            }
            let code = string(b, v + 4)?;
            if code > total - 4 {
                return Err("a code-with-scope's code runs past it");
            }
            std::str::from_utf8(&b[v + 8..v + 4 + code - 1])
                .map_err(|_| "a code-with-scope's code is not UTF-8")?;
            let scope = v + 4 + code;
            if i32_at(b, scope)? as i64 != (v + total - scope) as i64 {
                return Err("a code-with-scope's scope length is wrong");
            }
            // The scope ends where the element does.
            let inner = document(b, scope, end)?;
            return Ok((
                total,
                Inner::Document {
                    at: scope + 4,
                    end: inner,
                },
            ));
        }
        _ => return Err("an unknown element type"),
    };
    match v.checked_add(size) {
        Some(next) if next <= end => Ok((size, Inner::Leaf)),
        _ => Err("a value runs past its document"),
    }
}

/// The document's own length and terminator.
fn framed(b: &[u8]) -> Result<(), Malformed> {
    if b.len() < 5 || i32_at(b, 0)? as usize != b.len() || b[b.len() - 1] != 0 {
        return Err("the document's length or terminator is wrong");
    }
    Ok(())
}

/// Checks every element of the document `b`, nested documents, arrays and
/// scopes included (at most `max_depth` levels): element types, keys,
/// lengths, terminators; string values' bytes are data and not checked.
/// One loop with a stack of open documents' ends, never the call stack.
pub fn walk_to(b: &[u8], max_depth: usize) -> Result<(), Malformed> {
    walk_finding_to(b, max_depth, None).map(|_| ())
}

/// [`walk`], which also finds the top-level element `key` on its way:
/// where it starts (its type byte), the first if repeated. An insert
/// checks the caller's document and looks for its `_id` in one pass.
pub fn walk_finding(b: &[u8], key: &[u8]) -> Result<Option<usize>, Malformed> {
    walk_finding_to(b, super::MAX_DEPTH, Some(key))
}

fn walk_finding_to(
    b: &[u8],
    max_depth: usize,
    key: Option<&[u8]>,
) -> Result<Option<usize>, Malformed> {
    framed(b)?;
    // The top level apart, without the stack: most documents are flat,
    // and this loop is the hot one of every insert and reply check.
    let end = b.len() - 1;
    let mut found = None;
    let mut at = 4;
    while at != end {
        let kind = b[at];
        let v = cstring(b, at + 1, end)? + 1;
        if found.is_none() && key.is_some_and(|k| k == &b[at + 1..v - 1]) {
            found = Some(at);
        }
        let (size, inner) = size_of(b, kind, v, end)?;
        if let Inner::Document { at, end } = inner {
            if max_depth <= 1 {
                return Err("documents nest too deep");
            }
            walk_inside(b, at, end, max_depth - 1)?;
        }
        at = v + size;
    }
    Ok(found)
}

/// The elements from `at` of a nested document ending at `end`, and
/// everything they hold: one loop with a stack of open documents' ends,
/// never the call stack.
#[inline(never)]
fn walk_inside(b: &[u8], mut at: usize, mut end: usize, max_depth: usize) -> Result<(), Malformed> {
    // The terminators of the enclosing documents, innermost last.
    let mut ends = Vec::new();
    loop {
        if at == end {
            match ends.pop() {
                Some(outer) => {
                    at = end + 1;
                    end = outer;
                    continue;
                }
                None => return Ok(()),
            }
        }
        let kind = b[at];
        let v = cstring(b, at + 1, end)? + 1;
        let (size, inner) = size_of(b, kind, v, end)?;
        match inner {
            Inner::Leaf => at = v + size,
            Inner::Document {
                at: first,
                end: inner_end,
            } => {
                if ends.len() + 1 >= max_depth {
                    return Err("documents nest too deep");
                }
                // After the inner document the parent goes on: its end + 1.
                ends.push(end);
                (at, end) = (first, inner_end);
            }
        }
    }
}

/// The document `{v: <value>}` (a WIT `value`) from an element's type and
/// value bytes, written at its exact size.
pub fn value_doc(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + 3 + value.len() + 1);
    push_value_doc(&mut b, kind, value);
    b
}

/// [`value_doc`] appended to `out` (values back to back, one buffer).
pub fn push_value_doc(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let len = 4 + 3 + value.len() + 1;
    out.extend_from_slice(&(len as i32).to_le_bytes());
    out.extend_from_slice(&[kind, b'v', 0]);
    out.extend_from_slice(value);
    out.push(0);
}

/// The documents of `b`, back to back as a packed batch holds them, each
/// framed by its length (its elements are not checked). Bytes that do not
/// split so are the last item, as its error.
pub fn packed(b: &[u8]) -> Packed<'_> {
    Packed { b, failed: false }
}

/// See [`packed`].
pub struct Packed<'a> {
    b: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Packed<'a> {
    type Item = Result<&'a [u8], Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.b.is_empty() || self.failed {
            return None;
        }
        let len = i32_at(self.b, 0).unwrap_or(0);
        match usize::try_from(len) {
            Ok(n) if n >= 5 && n <= self.b.len() => {
                let (doc, rest) = self.b.split_at(n);
                self.b = rest;
                Some(Ok(doc))
            }
            _ => {
                self.failed = true;
                Some(Err("a packed document's length is wrong"))
            }
        }
    }
}

/// [`walk_to`] with the wire's depth limit.
pub fn walk(b: &[u8]) -> Result<(), Malformed> {
    walk_to(b, super::MAX_DEPTH)
}

/// One top-level element: its type, key and value bytes.
pub type Element<'a> = (u8, &'a [u8], &'a [u8]);

/// The top-level elements of the document `b` in order, each framed as
/// [`walk`] checks it (containers are not entered). A malformed document
/// or element is the last item, as its error.
pub fn elements(b: &[u8]) -> Elements<'_> {
    match framed(b) {
        Ok(()) => Elements {
            b,
            at: 4,
            end: b.len() - 1,
            failed: None,
        },
        Err(e) => Elements {
            b,
            at: 0,
            end: 0,
            failed: Some(e),
        },
    }
}

/// See [`elements`].
pub struct Elements<'a> {
    b: &'a [u8],
    at: usize,
    end: usize,
    failed: Option<Malformed>,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        if self.at >= self.end {
            return None;
        }
        let (b, at, end) = (self.b, self.at, self.end);
        let element = element(b, at, end)
            .map(|(kind, nul, size)| (kind, &b[at + 1..nul], &b[nul + 1..nul + 1 + size]));
        self.at = match &element {
            Ok((_, key, value)) => at + 2 + key.len() + value.len(),
            Err(_) => end,
        };
        Some(element)
    }
}

/// The top-level element `key` of the document `b`: its type and value
/// bytes. Skips the other elements by their sizes, checking their framing
/// as [`walk`] does but not descending into them.
pub fn find<'a>(b: &'a [u8], key: &[u8]) -> Result<Option<(u8, &'a [u8])>, Malformed> {
    // The loop of `elements`, without the iterator: with its state and
    // items in memory, searching a large document for an absent `_id`
    // took longer than checking it in full.
    framed(b)?;
    let end = b.len() - 1;
    let mut at = 4;
    while at < end {
        let (kind, nul, size) = element(b, at, end)?;
        if &b[at + 1..nul] == key {
            return Ok(Some((kind, &b[nul + 1..nul + 1 + size])));
        }
        at = nul + 1 + size;
    }
    Ok(None)
}

/// The top-level field `key` of `doc` as `bson`'s `RawDocument::get` reads
/// it, found by [`find`]; absent, malformed or unreadable is `None`. The
/// scalars and documents are read here; other types (arrays among them,
/// which only `bson` can hand out) by `bson`, once found.
pub fn get<'a>(doc: &'a RawDocument, key: &str) -> Option<RawBsonRef<'a>> {
    let (kind, v) = find(doc.as_bytes(), key.as_bytes()).ok()??;
    decode(doc, key, kind, v)
}

/// An integer field sent as int32, int64 or an integral double (servers
/// and nx-27017 use all three for counts and sizes); `None` otherwise.
pub fn int_field(doc: &RawDocument, key: &str) -> Option<i64> {
    match get(doc, key)? {
        RawBsonRef::Int32(v) => Some(v.into()),
        RawBsonRef::Int64(v) => Some(v),
        RawBsonRef::Double(v) if v.fract() == 0.0 => Some(v as i64),
        _ => None,
    }
}

/// Takes `name` out of `extra`: its value, and `extra` without it.
pub fn take_field(
    extra: Option<&RawDocumentBuf>,
    name: &str,
) -> crate::error::Result<(Option<bson::RawBson>, Option<RawDocumentBuf>)> {
    let Some(extra) = extra else {
        return Ok((None, None));
    };
    let mut rest = RawDocumentBuf::new();
    let mut value = None;
    for item in extra {
        let (k, v) = item?;
        if k.as_str() == name {
            value = Some(v.into());
        } else {
            rest.append(k, v);
        }
    }
    Ok((value, Some(rest)))
}

/// The top-level fields `keys` of `doc`, each as [`get`] reads it, found in
/// one pass: a reply's `ok`, `$clusterTime`, `cursor`... are read together.
pub fn get_all<'a, const N: usize>(
    doc: &'a RawDocument,
    keys: [&str; N],
) -> [Option<RawBsonRef<'a>>; N] {
    let mut out = [None; N];
    let mut seen = [false; N];
    for element in elements(doc.as_bytes()) {
        let Ok((kind, k, v)) = element else { break };
        // The first of duplicate keys counts, as for `find`.
        if let Some(i) = (0..N).find(|&i| !seen[i] && keys[i].as_bytes() == k) {
            seen[i] = true;
            out[i] = decode(doc, keys[i], kind, v);
        }
    }
    out
}

/// The value bytes `v` of type `kind` of the field `key` of `doc`.
fn decode<'a>(doc: &'a RawDocument, key: &str, kind: u8, v: &'a [u8]) -> Option<RawBsonRef<'a>> {
    let le4 = |at: usize| <[u8; 4]>::try_from(&v[at..at + 4]).ok();
    let le8 = || <[u8; 8]>::try_from(v).ok();
    Some(match kind {
        0x01 => RawBsonRef::Double(f64::from_le_bytes(le8()?)),
        0x02 => RawBsonRef::String(std::str::from_utf8(&v[4..v.len() - 1]).ok()?),
        DOCUMENT => RawBsonRef::Document(RawDocument::from_bytes(v).ok()?),
        0x08 => RawBsonRef::Boolean(v[0] == 1),
        0x0A => RawBsonRef::Null,
        0x10 => RawBsonRef::Int32(i32::from_le_bytes(le4(0)?)),
        0x11 => RawBsonRef::Timestamp(Timestamp {
            increment: u32::from_le_bytes(le4(0)?),
            time: u32::from_le_bytes(le4(4)?),
        }),
        0x12 => RawBsonRef::Int64(i64::from_le_bytes(le8()?)),
        _ => doc.get(key).ok()??,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn int_fields_of_any_integer_type() {
        let d = rawdoc! { "a": 1, "b": 2i64, "c": 3.0, "d": 3.5, "e": "4" };
        let got: Vec<Option<i64>> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|k| int_field(&d, k))
            .collect();
        assert_eq!(got, [Some(1), Some(2), Some(3), None, None, None]);
    }

    #[test]
    fn value_doc_is_what_rawdoc_writes() {
        let id = bson::oid::ObjectId::new();
        assert_eq!(
            value_doc(0x07, &id.bytes()),
            rawdoc! { "v": id }.into_bytes()
        );
        let v = rawdoc! { "v": "xy" };
        let (kind, _, value) = elements(v.as_bytes()).next().unwrap().unwrap();
        assert_eq!(value_doc(kind, value), v.into_bytes());
    }

    #[test]
    fn walk_counts_depth_from_the_top_level() {
        let flat = rawdoc! { "a": 1 };
        let one = rawdoc! { "a": {}, "b": [1] };
        let two = rawdoc! { "a": { "b": [] } };
        assert!(walk_to(flat.as_bytes(), 1).is_ok());
        assert!(walk_to(one.as_bytes(), 1).is_err());
        assert!(walk_to(one.as_bytes(), 2).is_ok());
        assert!(walk_to(two.as_bytes(), 2).is_err());
        assert!(walk_to(two.as_bytes(), 3).is_ok());
    }

    #[test]
    fn packed_splits_documents_by_their_lengths() {
        let (a, b) = (rawdoc! { "a": 1 }, rawdoc! { "b": "xy" });
        let mut both = a.as_bytes().to_vec();
        both.extend_from_slice(b.as_bytes());
        let docs: Vec<_> = packed(&both).collect::<Result<_, _>>().unwrap();
        assert_eq!(docs, [a.as_bytes(), b.as_bytes()]);
        assert_eq!(packed(&[]).count(), 0);
        // A length past the end, below 5, negative, or a short tail: one
        // error, last.
        for bad in [
            &both[..both.len() - 1],
            &[4, 0, 0, 0, 0],
            &[0xff; 5],
            &both[..3],
        ] {
            let items: Vec<_> = packed(bad).collect();
            assert!(items.last().unwrap().is_err(), "{bad:?}");
            assert_eq!(items.iter().filter(|r| r.is_err()).count(), 1);
        }
    }

    #[test]
    fn walk_finding_finds_a_top_level_key_and_checks_everything() {
        let doc = rawdoc! { "a": { "_id": 1 }, "_id": 2, "_id": 3 };
        let b = doc.as_bytes();
        let at = walk_finding(b, b"_id").unwrap().unwrap();
        assert_eq!(
            find(b, b"_id").unwrap().map(|(_, v)| v),
            Some(&b[at + 5..at + 9])
        );
        assert_eq!(walk_finding(b, b"x"), Ok(None), "not at the top level");
        assert_eq!(
            walk_finding(rawdoc! { "a": { "x": 1 } }.as_bytes(), b"x"),
            Ok(None)
        );
        // A malformed element after the key is still an error.
        let mut bad = rawdoc! { "_id": 1, "s": "xy" }.into_bytes();
        bad[18] = 0x7f;
        assert!(walk_finding(&bad, b"_id").is_err() && walk(&bad).is_err());
    }

    #[test]
    fn get_all_reads_each_field_as_get_does() {
        let doc = rawdoc! { "a": 1, "b": { "x": 1 }, "a": 2, "c": "s", "ok": 1.0 };
        let keys = ["ok", "a", "missing", "b", "c"];
        let got = get_all(&doc, keys);
        for (key, value) in keys.iter().zip(got) {
            assert_eq!(value, get(&doc, key), "{key}");
        }
        assert_eq!(
            got[1],
            Some(RawBsonRef::Int32(1)),
            "the first of duplicates"
        );
        // Malformed after `a`: `a` still reads, what follows does not.
        let mut bytes = rawdoc! { "a": 1, "s": "xy", "ok": 1 }.into_bytes();
        bytes[15] = 0x7f;
        let bad = RawDocument::from_bytes(&bytes).unwrap();
        assert_eq!(get_all(bad, ["a", "ok"]), [get(bad, "a"), get(bad, "ok")]);
        assert_eq!(
            get_all(bad, ["a", "ok"]),
            [Some(RawBsonRef::Int32(1)), None]
        );
    }

    #[test]
    fn cstring_finds_the_first_nul_at_every_offset_and_checks_only_its_bytes() {
        // A byte-at-a-time scan is the reference.
        let reference = |s: &[u8]| -> Result<usize, Malformed> {
            let n = s.iter().position(|&c| c == 0).ok_or("none")?;
            std::str::from_utf8(&s[..n]).map_err(|_| "utf8")?;
            Ok(n)
        };
        for len in 0..24 {
            for pad in [b'a', 0x01, 0x80, 0xff] {
                let mut s = vec![b'k'; len];
                if len > 2 {
                    s[len / 2] = pad;
                }
                s.push(0);
                // What follows the NUL is not the key's: never checked.
                s.extend_from_slice(&[0xff, 0x00, 0xfe]);
                let end = s.len();
                let got = cstring(&s, 0, end).map_err(|_| "err");
                let want = reference(&s).map_err(|_| "err");
                assert_eq!(got, want, "len {len} pad {pad:#x}");
            }
            // No terminator within the document.
            let s = vec![b'k'; len];
            assert!(cstring(&s, 0, len).is_err());
            // A NUL past the document's end (the word scan reads on) is not its key's.
            let mut s = vec![b'k'; len];
            s.extend_from_slice(&[0; 9]);
            assert!(cstring(&s, 0, len).is_err(), "len {len}");
            assert_eq!(cstring(&s, 0, len + 1), Ok(len));
        }
        // é as UTF-8 is accepted; a lone continuation byte is not.
        assert_eq!(cstring("caf\u{e9}\0".as_bytes(), 0, 6), Ok(5));
        assert!(cstring(b"ab\x80cdefgh\0", 0, 12).is_err());
    }

    #[test]
    fn find_returns_a_top_level_value_and_skips_nested_keys() {
        let d = rawdoc! { "a": { "_id": 1 }, "s": "x", "_id": 7i64, "z": [1] };
        let (kind, bytes) = find(d.as_bytes(), b"_id").unwrap().unwrap();
        assert_eq!((kind, bytes), (0x12, &7i64.to_le_bytes()[..]));
        assert_eq!(find(d.as_bytes(), b"none").unwrap(), None);
        assert_eq!(find(rawdoc! {}.as_bytes(), b"_id").unwrap(), None);
        // A string's length past the document is an error, not a panic.
        let mut bad = rawdoc! { "s": "abc", "_id": 1 }.into_bytes();
        bad[7] = 0x7f;
        assert!(find(&bad, b"_id").is_err());
    }

    #[test]
    fn get_reads_every_type_as_bson_does() {
        use bson::{oid::ObjectId, spec::BinarySubtype, Binary, DateTime, Decimal128, Regex};
        let d = rawdoc! {
            "f": 1.5, "s": "é", "d": { "x": [1] }, "a": [1, "two"], "b": true, "n": null,
            "i": -3, "t": Timestamp { time: 7, increment: 9 }, "l": i64::MIN,
            "o": ObjectId::from_bytes([1; 12]), "dt": DateTime::from_millis(5),
            "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2] },
            "re": Regex { pattern: "a".try_into().unwrap(), options: "i".try_into().unwrap() },
            "dec": Decimal128::from_bytes([3; 16]), "empty": "",
        };
        for item in &d {
            let (key, value) = item.unwrap();
            assert_eq!(get(&d, key.as_str()), Some(value), "{key}");
        }
        assert_eq!(get(&d, "absent"), None);
        assert_eq!(get(&d, "x"), None, "nested keys are not top-level");
        // Unreadable, not a panic: a bad length, or a string that is not UTF-8.
        let mut bad = rawdoc! { "s": "abc", "ok": 1 }.into_bytes();
        bad[7] = 0x7f;
        assert_eq!(get(RawDocument::from_bytes(&bad).unwrap(), "ok"), None);
        let mut latin = rawdoc! { "s": "ab" }.into_bytes();
        latin[11] = 0xff;
        assert_eq!(get(RawDocument::from_bytes(&latin).unwrap(), "s"), None);
    }

    #[test]
    fn elements_frame_each_top_level_element_and_stop_at_the_first_error() {
        let d = rawdoc! { "a": 1, "b": { "c": "d" }, "e": [true] };
        let got: Vec<_> = elements(d.as_bytes()).map(Result::unwrap).collect();
        let keys: Vec<_> = got.iter().map(|(_, k, _)| *k).collect();
        assert_eq!(keys, [&b"a"[..], b"b", b"e"]);
        assert_eq!(got[1].0, DOCUMENT);
        assert_eq!(got[1].2, rawdoc! { "c": "d" }.as_bytes());
        assert_eq!(got[2].0, ARRAY);
        assert_eq!(elements(rawdoc! {}.as_bytes()).count(), 0);
        // A bad frame, and a bad element after a good one: one error, then none.
        let results: Vec<_> = elements(&[5, 0, 0, 0]).collect();
        assert!(matches!(results[..], [Err(_)]));
        let mut bad = d.into_bytes();
        bad[14] = 0x7f; // "b"'s length
        let results: Vec<_> = elements(&bad).collect();
        assert!(matches!(results[..], [Ok(_), Err(_)]), "{results:?}");
    }
}

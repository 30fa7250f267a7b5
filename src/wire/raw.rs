//! One pass over raw BSON bytes, without `bson`'s iterators: the full
//! check of a document ([`walk`]) and a top-level lookup ([`find`]). Both
//! size each element the same way ([`value_size`]), so what the check
//! accepts, the lookup can skip through.

/// What is wrong with the bytes, for an error message.
pub type Malformed = &'static str;

fn i32_at(b: &[u8], at: usize) -> Result<i32, Malformed> {
    match b.get(at..at.saturating_add(4)) {
        Some(s) => Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        None => Err("a length runs past its document"),
    }
}

/// A cstring from `at`, inside the document ending at `end` (its
/// terminator): where its NUL is. Keys and regex parts must be UTF-8.
fn cstring(b: &[u8], at: usize, end: usize) -> Result<usize, Malformed> {
    let s = b.get(at..end).ok_or("a cstring runs past its document")?;
    // One scan finds the NUL and whether any byte is non-ASCII: keys are
    // nearly always ASCII, which needs no UTF-8 check.
    let mut high = 0u8;
    for (n, &c) in s.iter().enumerate() {
        if c == 0 {
            if high >= 0x80 {
                std::str::from_utf8(&s[..n]).map_err(|_| "a key or pattern is not UTF-8")?;
            }
            return Ok(at + n);
        }
        high |= c;
    }
    Err("a cstring has no terminator")
}

/// A length-prefixed string at `at`: its whole size (length + 4).
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
        0x03 | 0x04 => {
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
    framed(b)?;
    // The terminator of each open document, innermost last.
    let mut ends = vec![b.len() - 1];
    let mut at = 4;
    while let Some(&end) = ends.last() {
        if at == end {
            ends.pop();
            at = end + 1;
            continue;
        }
        let v = cstring(b, at + 1, end)? + 1;
        match value_size(b, b[at], v, end)? {
            (size, Inner::Leaf) => at = v + size,
            (_, Inner::Document { at: inner, end }) => {
                if ends.len() >= max_depth {
                    return Err("documents nest too deep");
                }
                // After the inner document the parent goes on: its end + 1.
                ends.push(end);
                at = inner;
            }
        }
    }
    Ok(())
}

/// [`walk_to`] with the wire's depth limit.
pub fn walk(b: &[u8]) -> Result<(), Malformed> {
    walk_to(b, super::MAX_DEPTH)
}

/// The top-level element `key` of the document `b`: its type and value
/// bytes. Skips the other elements by their sizes, checking their framing
/// as [`walk`] does but not descending into them.
pub fn find<'a>(b: &'a [u8], key: &[u8]) -> Result<Option<(u8, &'a [u8])>, Malformed> {
    framed(b)?;
    let end = b.len() - 1;
    let mut at = 4;
    while at != end {
        let nul = cstring(b, at + 1, end)?;
        let v = nul + 1;
        let (size, _) = value_size(b, b[at], v, end)?;
        if &b[at + 1..nul] == key {
            return Ok(Some((b[at], &b[v..v + size])));
        }
        at = v + size;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

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
}

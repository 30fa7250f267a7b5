//! Percent-decoding and the RFC 3986 userinfo character rules.

use super::UriError;

/// Decodes `%XX` escapes. A `%` that does not start two hex digits is an error, and so is a
/// result that is not UTF-8 (all keys and values must be UTF-8). `+` stays a `+`.
pub(crate) fn percent_decode(s: &str, what: &str) -> Result<String, UriError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hi = bytes.next().and_then(hex_value);
        let lo = bytes.next().and_then(hex_value);
        match (hi, lo) {
            (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
            _ => {
                return Err(UriError::new(format!(
                    "{what} contains a '%' that is not a valid percent-encoding (%XX)"
                )))
            }
        }
    }
    String::from_utf8(out)
        .map_err(|_| UriError::new(format!("{what} is not valid UTF-8 once percent-decoded")))
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits and decodes `user[:password]`. Per the connection string spec an `@`, a second `:`
/// or a bad `%` is an error; we also reject ASCII characters RFC 3986 does not allow in
/// userinfo (non-ASCII text is accepted). Messages never echo the userinfo itself.
pub(crate) fn userinfo(raw: &str) -> Result<(String, Option<String>), UriError> {
    const HINT: &str = "the username and password must be URL encoded (percent-encoded)";
    if raw.contains('@') {
        return Err(UriError::new(format!("userinfo contains an '@': {HINT}")));
    }
    if raw.matches(':').count() > 1 {
        return Err(UriError::new(format!(
            "userinfo contains more than one ':': {HINT}"
        )));
    }
    if let Some(c) = raw.chars().find(|&c| c.is_ascii() && !userinfo_char(c)) {
        return Err(UriError::new(format!(
            "userinfo contains the character {c:?}: {HINT}"
        )));
    }
    let (user, password) = match raw.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (raw, None),
    };
    let user = percent_decode(user, "the username")
        .map_err(|e| UriError::new(format!("{}: {HINT}", e.message)))?;
    let password = password
        .map(|p| percent_decode(p, "the password"))
        .transpose()
        .map_err(|e| UriError::new(format!("{}: {HINT}", e.message)))?;
    Ok((user, password))
}

/// unreserved / pct-encoded / sub-delims / ":" (RFC 3986 section 3.2.1).
fn userinfo_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~%!$&'()*+,;=:".contains(c)
}

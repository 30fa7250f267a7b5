//! SASLprep (RFC 4013), which SCRAM-SHA-256 applies to passwords (never to
//! user names). The `stringprep` crate implements the profile and its
//! Unicode tables; this module only keeps the password out of its errors.

use crate::error::{Error, ErrorKind, Result};
use std::borrow::Cow;

/// The prepared form of `password`. The error never quotes the password
/// (the crate's own message names the offending character).
pub fn prepare(password: &str) -> Result<Cow<'_, str>> {
    // ASCII printable text is its own SASLprep form: skip the tables.
    if password.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(Cow::Borrowed(password));
    }
    stringprep::saslprep(password).map_err(|_| {
        Error::new(
            ErrorKind::Authentication,
            "the password contains characters SASLprep (RFC 4013) prohibits \
             (control, private-use, unassigned or mixed-direction text)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::prepare;

    #[test]
    fn the_auth_spec_cases() {
        // The auth spec's test plan: both forms of each password authenticate.
        assert_eq!(prepare("IX").unwrap(), "IX");
        assert_eq!(
            prepare("I\u{00AD}X").unwrap(),
            "IX",
            "soft hyphen maps to nothing"
        );
        assert_eq!(
            prepare("\u{2163}").unwrap(),
            "IV",
            "ROMAN NUMERAL FOUR, NFKC"
        );
        assert_eq!(prepare("I\u{00AD}V").unwrap(), "IV");
        assert_eq!(
            prepare("\u{2168}").unwrap(),
            "IX",
            "ROMAN NUMERAL NINE, NFKC"
        );
    }

    #[test]
    fn the_rfc_4013_examples() {
        assert_eq!(prepare("user").unwrap(), "user");
        assert_eq!(prepare("USER").unwrap(), "USER", "case is preserved");
        assert_eq!(prepare("\u{00AA}").unwrap(), "a");
        assert_eq!(
            prepare("\u{00A0}x").unwrap(),
            " x",
            "non-ASCII space maps to space"
        );
        assert!(prepare("\u{0007}").is_err(), "control character");
        assert!(
            prepare("\u{0627}1").is_err(),
            "bidi: RandALCat then a digit"
        );
    }

    #[test]
    fn the_error_does_not_quote_the_password() {
        let e = prepare("secret\u{0007}").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(!e.to_string().contains('\u{0007}'), "{e}");
    }
}

//! The server side of SCRAM (RFC 5802) with SHA-1 and SHA-256 (RFC 7677), as mongod runs it:
//! SCRAM-SHA-1 keys the password digest `hex(md5("user:mongo:pass"))`, SCRAM-SHA-256 the
//! SASLprep'd password. Sans-I/O: the caller supplies the salt and the server nonce.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use sha1::Sha1;
use sha2::Sha256;

/// mongod's defaults (`scramIterationCount`, `scramSHA256IterationCount`).
pub const SHA1_ITERATIONS: u32 = 10_000;
pub const SHA256_ITERATIONS: u32 = 15_000;
/// mongod's salt lengths: 16 bytes for SHA-1, 28 (the digest size minus 4) for SHA-256.
pub const SHA1_SALT_LEN: usize = 16;
pub const SHA256_SALT_LEN: usize = 28;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    Sha1,
    Sha256,
}

impl Hash {
    pub fn mechanism(self) -> &'static str {
        match self {
            Hash::Sha1 => "SCRAM-SHA-1",
            Hash::Sha256 => "SCRAM-SHA-256",
        }
    }

    pub fn from_mechanism(name: &str) -> Option<Hash> {
        match name {
            "SCRAM-SHA-1" => Some(Hash::Sha1),
            "SCRAM-SHA-256" => Some(Hash::Sha256),
            _ => None,
        }
    }

    pub fn salt_len(self) -> usize {
        match self {
            Hash::Sha1 => SHA1_SALT_LEN,
            Hash::Sha256 => SHA256_SALT_LEN,
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha1 => Sha1::digest(data).to_vec(),
            Hash::Sha256 => Sha256::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha1 => {
                let mut m = Hmac::<Sha1>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Hash::Sha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Hash::Sha1 => {
                pbkdf2::pbkdf2_hmac_array::<Sha1, 20>(password, salt, iterations).to_vec()
            }
            Hash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the mechanism feeds to PBKDF2: mongod's digest for SHA-1, SASLprep for SHA-256
/// (a password SASLprep refuses is used as given, as mongod does for legacy passwords).
pub fn password_input(hash: Hash, user: &str, password: &str) -> String {
    match hash {
        Hash::Sha1 => hex(&Md5::digest(format!("{user}:mongo:{password}").as_bytes())),
        Hash::Sha256 => stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A user's stored SCRAM credentials for one hash (what mongod keeps in `system.users`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub hash: Hash,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credentials {
    /// `input` is [`password_input`]'s result.
    pub fn derive(hash: Hash, input: &str, salt: Vec<u8>, iterations: u32) -> Credentials {
        let salted = hash.hi(input.as_bytes(), &salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        Credentials {
            hash,
            stored_key: hash.digest(&client_key),
            server_key: hash.hmac(&salted, b"Server Key"),
            salt,
            iterations,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum ScramError {
    /// The message does not follow the grammar (mongod: BadValue, masked as auth failure).
    Malformed(&'static str),
    /// Channel binding, or a nonce or proof that does not match: authentication failed.
    Refused(&'static str),
}

/// The client-first message, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    pub nonce: String,
    gs2_header: String,
    bare: String,
}

/// `gs2-header client-first-message-bare`; the user name unescaped (`=2C`, `=3D`).
pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let mut parts = text.splitn(3, ',');
    let cb = parts.next().unwrap_or_default();
    let authzid = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
    let bare = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
    match cb {
        "n" | "y" => {}
        c if c.starts_with("p=") => return Err(ScramError::Refused("channel binding")),
        _ => return Err(ScramError::Malformed("bad gs2 channel binding flag")),
    }
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(ScramError::Malformed("bad gs2 authzid"));
    }
    let mut attrs = bare.split(',');
    let user = attrs
        .next()
        .and_then(|a| a.strip_prefix("n="))
        .ok_or(ScramError::Malformed("no user name"))?;
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or(ScramError::Malformed("no client nonce"))?;
    if nonce
        .bytes()
        .any(|b| !(0x21..=0x7e).contains(&b) || b == b',')
    {
        return Err(ScramError::Malformed("bad client nonce"));
    }
    Ok(ClientFirst {
        user: unescape(user)?,
        nonce: nonce.to_string(),
        gs2_header: format!("{cb},{authzid},"),
        bare: bare.to_string(),
    })
}

fn unescape(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(ScramError::Malformed("empty user name"));
    }
    Ok(out)
}

/// A conversation after the server-first message, waiting for the client's proof.
#[derive(Clone, Debug)]
pub struct Conversation {
    creds: Credentials,
    gs2_header: String,
    nonce: String,
    auth_message_head: String,
}

/// Answers the server-first message; `server_nonce` is printable and without commas.
pub fn server_first(
    client: &ClientFirst,
    creds: &Credentials,
    server_nonce: &str,
) -> (Conversation, String) {
    let nonce = format!("{}{server_nonce}", client.nonce);
    let message = format!(
        "r={nonce},s={},i={}",
        B64.encode(&creds.salt),
        creds.iterations
    );
    let conv = Conversation {
        creds: creds.clone(),
        gs2_header: client.gs2_header.clone(),
        auth_message_head: format!("{},{message}", client.bare),
        nonce,
    };
    (conv, message)
}

impl Conversation {
    /// Checks the client-final message; answers the server-final message (`v=...`).
    pub fn client_final(&self, payload: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        if B64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::Refused("channel binding mismatch"));
        }
        if nonce != self.nonce {
            return Err(ScramError::Refused("nonce mismatch"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let hash = self.creds.hash;
        let auth_message = format!("{},{without_proof}", self.auth_message_head);
        let signature = hash.hmac(&self.creds.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::Refused("proof has the wrong length"));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if hash.digest(&client_key) != self.creds.stored_key {
            return Err(ScramError::Refused("wrong proof"));
        }
        let server_signature = hash.hmac(&self.creds.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

/// The client's proof (RFC 5802 section 3), for tests that drive the server end to end.
#[cfg(test)]
pub fn client_proof(
    hash: Hash,
    input: &str,
    salt: &[u8],
    iterations: u32,
    auth_message: &str,
) -> Vec<u8> {
    let salted = hash.hi(input.as_bytes(), salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let signature = hash.hmac(&hash.digest(&client_key), auth_message.as_bytes());
    client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One whole exchange with a vector: the salt and iteration count, then the client-first
    /// message, the server nonce, the expected server-first and the client-final message.
    /// Answers the server-final message.
    fn exchange(
        hash: Hash,
        input: &str,
        (salt_b64, iterations): (&str, u32),
        [client_first, server_nonce, expect_server_first, client_final]: [&str; 4],
    ) -> Result<String, ScramError> {
        let creds = Credentials::derive(hash, input, B64.decode(salt_b64).unwrap(), iterations);
        let first = parse_client_first(client_first.as_bytes()).unwrap();
        assert_eq!(first.user, "user");
        let (conv, message) = server_first(&first, &creds, server_nonce);
        assert_eq!(message, expect_server_first);
        conv.client_final(client_final.as_bytes())
    }

    #[test]
    fn rfc5802_sha1_vector() {
        let out = exchange(
            Hash::Sha1,
            "pencil",
            ("QSXCR+Q6sek8bf92", 4096),
            [
                "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
                "3rfcNHYJY1ZVvWVs7j",
                "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
                "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
            ],
        );
        assert_eq!(out.unwrap(), "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
    }

    #[test]
    fn rfc7677_sha256_vector() {
        let out = exchange(
            Hash::Sha256,
            &password_input(Hash::Sha256, "user", "pencil"),
            ("W22ZaJ0SNY7soEsUEjb6gQ==", 4096),
            [
                "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            ],
        );
        assert_eq!(
            out.unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    /// The auth spec's SCRAM-SHA-1 conversation: the password goes through mongod's digest.
    #[test]
    fn mongodb_sha1_digests_the_password() {
        let input = password_input(Hash::Sha1, "user", "pencil");
        assert_eq!(input, "1c33006ec1ffd90f9cadcbcc0e118200");
        let out = exchange(
            Hash::Sha1,
            &input,
            ("rQ9ZY3MntBeuP3E1TDVC4w==", 10000),
            [
                "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
                "Ho+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE",
                "r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000",
                "c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,p=MC2T8BvbmWRckDw8oWl5IVghwCY=",
            ],
        );
        assert_eq!(out.unwrap(), "v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=");
    }

    #[test]
    fn wrong_proof_and_nonce_are_refused() {
        let creds = Credentials::derive(Hash::Sha256, "pencil", b"salt".to_vec(), 4096);
        let first = parse_client_first(b"n,,n=user,r=abc").unwrap();
        let (conv, _) = server_first(&first, &creds, "xyz");
        let bad_proof = format!("c=biws,r=abcxyz,p={}", B64.encode([0u8; 32]));
        assert_eq!(
            conv.client_final(bad_proof.as_bytes()),
            Err(ScramError::Refused("wrong proof"))
        );
        let bad_nonce = format!("c=biws,r=abcxyZ,p={}", B64.encode([0u8; 32]));
        assert_eq!(
            conv.client_final(bad_nonce.as_bytes()),
            Err(ScramError::Refused("nonce mismatch"))
        );
        let short = format!("c=biws,r=abcxyz,p={}", B64.encode([0u8; 20]));
        assert!(conv.client_final(short.as_bytes()).is_err());
        assert!(conv.client_final(b"c=biws,r=abcxyz").is_err());
    }

    #[test]
    fn client_first_grammar() {
        let f = parse_client_first(b"n,,n=a=2Cb=3Dc,r=n0nce").unwrap();
        assert_eq!((f.user.as_str(), f.nonce.as_str()), ("a,b=c", "n0nce"));
        assert_eq!(
            parse_client_first(b"p=tls-unique,,n=u,r=x"),
            Err(ScramError::Refused("channel binding"))
        );
        for bad in [
            &b"n,,n=u"[..],
            b"x,,n=u,r=x",
            b"n,,r=x",
            b"n,,n=,r=x",
            b"n,,n=a=2Xb,r=x",
            b"n,,n=u,r=",
            b"n",
            b"\xff,,n=u,r=x",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sha256_input_is_saslprepped() {
        // RFC 4013: a non-ASCII space maps to SPACE, a soft hyphen to nothing.
        assert_eq!(password_input(Hash::Sha256, "u", "I\u{00AD}X"), "IX");
        assert_eq!(password_input(Hash::Sha256, "u", "a\u{2000}b"), "a b");
        assert_eq!(password_input(Hash::Sha256, "u", "\u{2168}"), "IX");
    }
}

//! SCRAM-SHA-1 (RFC 5802) and SCRAM-SHA-256 (RFC 7677) as the auth spec
//! profiles them, sans I/O: the client-first message, the client-final
//! message with its proof, and the check of the server's signature. User
//! names are never SASLprepped; SCRAM-SHA-1 derives its key from MongoDB's
//! password digest, SCRAM-SHA-256 from the SASLprepped password. Crypto is
//! `ring` (the TLS stack's own), MD5 only for the legacy digest.

use super::saslprep;
use crate::error::{Error, ErrorKind, Result};
use crate::warm::ScramKeys;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::rc::Rc;

/// The auth spec's floor: fewer iterations would allow a downgrade attack.
pub const MIN_ITERATIONS: u32 = 4096;
/// A lying server must not make the guest compute for minutes, even without
/// a deadline. Real deployments use 10,000 to 15,000.
pub const MAX_ITERATIONS: u32 = 10_000_000;
/// PBKDF2 runs in slices of this many iterations ([`Pbkdf2::step`]); the
/// engine checks the operation's deadline before each and, on WASI 0.3,
/// yields to the other tasks between them (about 1 ms of work in the guest;
/// a clock read is ~0.1 us).
pub const ITERATIONS_PER_SLICE: u32 = 1024;
/// SCRAM keys kept per instance (an entry per user and mechanism in
/// practice; the bound keeps a server that varies its salt harmless).
const CACHE_CAPACITY: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

    fn hmac_key(self, key: &[u8]) -> hmac::Key {
        let alg = match self {
            Hash::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Hash::Sha256 => hmac::HMAC_SHA256,
        };
        hmac::Key::new(alg, key)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&self.hmac_key(key), data).as_ref().to_vec()
    }

    fn h(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            Hash::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            Hash::Sha256 => &digest::SHA256,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }
}

/// RFC 5802's Hi(): PBKDF2-HMAC with one output block (HMAC's output size),
/// as ring's `pbkdf2::derive` computes it (the HMAC key set up once, one
/// `hmac::sign` per iteration, each U_i xored into the result), but
/// resumable: [`Pbkdf2::step`] runs a slice of the iterations and returns, so
/// the caller checks its deadline (and yields) between slices. A server's
/// iteration count cannot hold an operation past its deadline, nor, on WASI
/// 0.3, starve the instance's other tasks.
pub struct Pbkdf2 {
    key: hmac::Key,
    /// U_i, the last HMAC output.
    u: hmac::Tag,
    /// U_1 xor ... xor U_i.
    out: [u8; 32],
    len: usize,
    /// Iterations still to run.
    left: u32,
}

impl Pbkdf2 {
    /// Sets up the key and computes U_1 (one iteration).
    pub fn new(hash: Hash, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Pbkdf2 {
        let key = hash.hmac_key(password);
        let mut first = hmac::Context::with_key(&key);
        first.update(salt);
        first.update(&1u32.to_be_bytes());
        let u = first.sign();
        let mut out = [0u8; 32];
        let len = u.as_ref().len();
        out[..len].copy_from_slice(u.as_ref());
        Pbkdf2 {
            key,
            u,
            out,
            len,
            left: iterations.get() - 1,
        }
    }

    /// Runs up to `n` more iterations; true once all have run.
    pub fn step(&mut self, n: u32) -> bool {
        let run = n.min(self.left);
        let out = &mut self.out[..self.len];
        for _ in 0..run {
            self.u = hmac::sign(&self.key, self.u.as_ref());
            for (o, b) in out.iter_mut().zip(self.u.as_ref()) {
                *o ^= b;
            }
        }
        self.left -= run;
        self.left == 0
    }

    /// Iterations still to run.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// The salted password, once [`Pbkdf2::step`] has returned true.
    pub fn output(&self) -> Option<&[u8]> {
        (self.left == 0).then(|| &self.out[..self.len])
    }
}

/// MongoDB's SCRAM-SHA-1 password: hex(md5("<user>:mongo:<password>")),
/// neither part SASLprepped.
pub fn mongo_password_digest(username: &str, password: &str) -> String {
    use md5::{Digest, Md5};
    let sum = Md5::digest(format!("{username}:mongo:{password}").as_bytes());
    sum.iter().map(|b| format!("{b:02x}")).collect()
}

/// What PBKDF2 produced for one password, salt and iteration count.
#[derive(Clone)]
struct Keys {
    client_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl Keys {
    fn from_salted(hash: Hash, salted: &[u8]) -> Keys {
        Keys {
            client_key: hash.hmac(salted, b"Client Key"),
            server_key: hash.hmac(salted, b"Server Key"),
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    hash: Hash,
    /// The password as key derivation takes it (digested or SASLprepped).
    password: String,
    salt: Vec<u8>,
    iterations: u32,
}

/// A cache entry: the keys, or their derivation under way. Conversations
/// that need the same keys at once (a pool's connections opening together
/// on WASI 0.3) share one derivation and each advances it: the work is
/// done once, not once per connection.
enum Entry {
    Ready(Keys),
    Deriving(Rc<RefCell<Pbkdf2>>),
}

/// The auth spec's SCRAM cache: client and server keys per (mechanism,
/// password, salt, iterations), so that a new connection, or a new client
/// of the same user, does not run PBKDF2 again.
#[derive(Default)]
pub struct KeyCache {
    entries: RefCell<HashMap<CacheKey, Entry>>,
    /// How often PBKDF2 started (tests check that the cache is used).
    derivations: Cell<u64>,
}

impl std::fmt::Debug for KeyCache {
    /// Never the keys or passwords.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("entries", &self.entries.borrow().len())
            .finish()
    }
}

impl KeyCache {
    pub fn derivations(&self) -> u64 {
        self.derivations.get()
    }

    /// The keys if known, else the derivation to advance (a new one, or
    /// the one another conversation started).
    fn lookup(&self, key: &CacheKey) -> std::result::Result<Keys, Rc<RefCell<Pbkdf2>>> {
        let mut entries = self.entries.borrow_mut();
        match entries.get(key) {
            Some(Entry::Ready(k)) => return Ok(k.clone()),
            Some(Entry::Deriving(d)) => return Err(Rc::clone(d)),
            None => {}
        }
        self.derivations.set(self.derivations.get() + 1);
        let iterations = NonZeroU32::new(key.iterations).expect("checked by parse_server_first");
        let d = Rc::new(RefCell::new(Pbkdf2::new(
            key.hash,
            key.password.as_bytes(),
            &key.salt,
            iterations,
        )));
        if entries.len() >= CACHE_CAPACITY {
            entries.clear();
        }
        entries.insert(key.clone(), Entry::Deriving(Rc::clone(&d)));
        Err(d)
    }

    /// The derived keys of one credential, for a warm state: the entries
    /// whose password (in key-derivation form, per mechanism) is in
    /// `passwords`, each with its check value (never the password).
    pub(crate) fn export(&self, user: &str, passwords: &[(Hash, String)]) -> Vec<ScramKeys> {
        let entries = self.entries.borrow();
        let mut out: Vec<ScramKeys> = entries
            .iter()
            .filter_map(|(k, e)| match e {
                Entry::Ready(keys) if passwords.contains(&(k.hash, k.password.clone())) => {
                    Some(ScramKeys {
                        mechanism: k.hash.mechanism().to_string(),
                        salt: k.salt.clone(),
                        iterations: k.iterations,
                        check: check_value(k.hash, k, user, &keys.client_key),
                        client_key: keys.client_key.clone(),
                        server_key: keys.server_key.clone(),
                    })
                }
                _ => None,
            })
            .collect();
        // A stable order: the same keys make the same blob.
        out.sort_by(|a, b| {
            (&a.mechanism, &a.salt, a.iterations).cmp(&(&b.mechanism, &b.salt, b.iterations))
        });
        out
    }

    /// Takes a warm state's keys into the cache, those whose check value
    /// proves they were derived for `user` and one of `passwords` (others
    /// are left out). Returns how many were taken.
    pub(crate) fn import(
        &self,
        user: &str,
        passwords: &[(Hash, String)],
        keys: &[ScramKeys],
    ) -> usize {
        let mut taken = 0;
        for k in keys {
            let Some((hash, password)) =
                passwords.iter().find(|(h, _)| h.mechanism() == k.mechanism)
            else {
                continue;
            };
            let len = hash
                .hmac_key(b"")
                .algorithm()
                .digest_algorithm()
                .output_len();
            let ok = k.client_key.len() == len
                && k.server_key.len() == len
                && hmac::verify(
                    &hmac::Key::new(hmac::HMAC_SHA256, &k.client_key),
                    &check_message(*hash, user, password, &k.salt, k.iterations),
                    &k.check,
                )
                .is_ok();
            if !ok || !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&k.iterations) {
                continue;
            }
            let key = CacheKey {
                hash: *hash,
                password: password.clone(),
                salt: k.salt.clone(),
                iterations: k.iterations,
            };
            self.insert(
                key,
                Keys {
                    client_key: k.client_key.clone(),
                    server_key: k.server_key.clone(),
                },
            );
            taken += 1;
        }
        taken
    }

    fn insert(&self, key: CacheKey, keys: Keys) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= CACHE_CAPACITY && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(key, Entry::Ready(keys));
    }
}

/// What a warm state's check value authenticates: the mechanism, the user,
/// the password in key-derivation form, the salt and the iteration count.
fn check_message(hash: Hash, user: &str, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut m = format!(
        "mongo-wasi warm state v1\0{}\0{user}\0{password}\0{iterations}\0",
        hash.mechanism()
    )
    .into_bytes();
    m.extend_from_slice(salt);
    m
}

/// HMAC-SHA256(ClientKey, check_message): binds a warm state's keys to the
/// credential, salt and iteration count they were derived for.
fn check_value(hash: Hash, key: &CacheKey, user: &str, client_key: &[u8]) -> Vec<u8> {
    let message = check_message(hash, user, &key.password, &key.salt, key.iterations);
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, client_key), &message)
        .as_ref()
        .to_vec()
}

enum State {
    /// client-first sent; the server-first message is next.
    First,
    /// The server-first message read; its keys are being derived
    /// ([`Scram::derive`]) unless the cache knew them.
    Deriving {
        key: CacheKey,
        pbkdf2: std::result::Result<Keys, Rc<RefCell<Pbkdf2>>>,
        without_proof: String,
        auth_message: String,
    },
    /// client-final sent; the server must prove it knows the keys.
    Final {
        server_key: Vec<u8>,
        auth_message: String,
    },
    /// The server's signature checked out.
    Verified,
}

/// One SCRAM conversation, client side.
pub struct Scram {
    hash: Hash,
    /// The password as key derivation takes it.
    password: String,
    nonce: String,
    client_first_bare: String,
    state: State,
}

impl Scram {
    /// A conversation for `username` and the plain-text `password`; `nonce`
    /// must be printable ASCII without commas (base64 of random bytes).
    pub fn new(hash: Hash, username: &str, password: &str, nonce: String) -> Result<Scram> {
        let password = match hash {
            Hash::Sha1 => mongo_password_digest(username, password),
            Hash::Sha256 => saslprep::prepare(password)?.into_owned(),
        };
        Ok(Scram::prepared(hash, username, password, nonce))
    }

    /// A conversation whose password is already in key-derivation form.
    fn prepared(hash: Hash, username: &str, password: String, nonce: String) -> Scram {
        // RFC 5802 saslname: ',' and '=' are escaped; no SASLprep (auth spec).
        let name = username.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password,
            client_first_bare: format!("n={name},r={nonce}"),
            nonce,
            state: State::First,
        }
    }

    pub fn hash(&self) -> Hash {
        self.hash
    }

    /// The client-first message: no channel binding (`n,,`), as the spec requires.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Reads the server-first message. The client-final message comes from
    /// [`Scram::derive`], once the keys are derived (or found in `cache`).
    pub fn server_first(&mut self, server_first: &[u8], cache: &KeyCache) -> Result<()> {
        if !matches!(self.state, State::First) {
            return Err(self.malformed("a second server-first message"));
        }
        let text = std::str::from_utf8(server_first)
            .map_err(|_| self.malformed("a server-first message that is not UTF-8"))?;
        let ServerFirst {
            nonce,
            salt,
            iterations,
        } = self.parse_server_first(text)?;
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let key = CacheKey {
            hash: self.hash,
            password: self.password.clone(),
            salt,
            iterations: iterations.get(),
        };
        self.state = State::Deriving {
            pbkdf2: cache.lookup(&key),
            key,
            without_proof,
            auth_message,
        };
        Ok(())
    }

    /// Advances key derivation by up to `iterations` (a slice: the caller
    /// checks its deadline between calls). Returns the client-final message
    /// with the proof once the keys are known, and stores them in `cache`;
    /// `None` while iterations remain.
    pub fn derive(&mut self, iterations: u32, cache: &KeyCache) -> Result<Option<Vec<u8>>> {
        let State::Deriving {
            key,
            pbkdf2,
            without_proof,
            auth_message,
        } = &mut self.state
        else {
            return Err(self.malformed("a client-final message out of turn"));
        };
        let keys = match pbkdf2 {
            Ok(keys) => keys.clone(),
            Err(d) => {
                let mut d = d.borrow_mut();
                if !d.step(iterations) {
                    return Ok(None);
                }
                let keys = Keys::from_salted(self.hash, d.output().expect("finished"));
                cache.insert(key.clone(), keys.clone());
                keys
            }
        };
        let stored_key = self.hash.h(&keys.client_key);
        let signature = self.hash.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = keys
            .client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let message = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
        self.state = State::Final {
            server_key: keys.server_key,
            auth_message: std::mem::take(auth_message),
        };
        Ok(Some(message))
    }

    /// [`Scram::server_first`] then [`Scram::derive`] to the end, calling
    /// `in_time` before each slice and ending with its error.
    pub fn client_final(
        &mut self,
        server_first: &[u8],
        cache: &KeyCache,
        in_time: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<u8>> {
        self.server_first(server_first, cache)?;
        loop {
            in_time()?;
            if let Some(message) = self.derive(ITERATIONS_PER_SLICE, cache)? {
                return Ok(message);
            }
        }
    }

    /// Checks the server-final message: the server's signature proves it
    /// holds the same keys (it is not an impostor accepting any proof).
    pub fn verify_server_final(&mut self, server_final: &[u8]) -> Result<()> {
        let State::Final {
            server_key,
            auth_message,
        } = &self.state
        else {
            return Err(self.malformed("a server-final message out of turn"));
        };
        let text = std::str::from_utf8(server_final)
            .map_err(|_| self.malformed("a server-final message that is not UTF-8"))?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(reason) = first.strip_prefix("e=") {
            return Err(self.failed(format!("the server rejected the proof ({reason})")));
        }
        let Some(v) = first.strip_prefix("v=") else {
            return Err(self.malformed("a server-final message without v="));
        };
        let signature = BASE64
            .decode(v)
            .map_err(|_| self.malformed("a server signature that is not base64"))?;
        // Constant-time comparison.
        hmac::verify(
            &self.hash.hmac_key(server_key),
            auth_message.as_bytes(),
            &signature,
        )
        .map_err(|_| {
            self.failed("the server's signature is wrong: it does not know the password (or someone is in the middle)".to_string())
        })?;
        self.state = State::Verified;
        Ok(())
    }

    pub fn is_verified(&self) -> bool {
        matches!(self.state, State::Verified)
    }

    pub(crate) fn parse_server_first<'a>(&self, text: &'a str) -> Result<ServerFirst<'a>> {
        let mut parts = text.split(',');
        let mut next = |attr: &str| -> Result<&'a str> {
            let part = parts.next().unwrap_or_default();
            if part.starts_with("m=") {
                return Err(self.malformed("a mandatory extension (m=) this client does not know"));
            }
            part.strip_prefix(attr)
                .ok_or_else(|| self.malformed(&format!("a server-first message without {attr}")))
        };
        let nonce = next("r=")?;
        let salt = next("s=")?;
        let iterations = next("i=")?;
        // Further attributes are extensions, which the client may ignore.
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err(self.failed(
                "the server's nonce does not extend the client's (a replayed or forged message)"
                    .to_string(),
            ));
        }
        if !nonce.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(self.malformed("a nonce with characters RFC 5802 forbids"));
        }
        let salt = BASE64
            .decode(salt)
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.malformed("a salt that is empty or not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| self.malformed("an iteration count that is not a number"))?;
        if iterations < MIN_ITERATIONS {
            return Err(self.failed(format!(
                "the server asked for {iterations} iterations, fewer than the {MIN_ITERATIONS} the auth spec requires"
            )));
        }
        if iterations > MAX_ITERATIONS {
            return Err(self.failed(format!(
                "the server asked for {iterations} iterations, more than this driver's limit of {MAX_ITERATIONS}"
            )));
        }
        let iterations = NonZeroU32::new(iterations).expect("at least MIN_ITERATIONS");
        Ok(ServerFirst {
            nonce,
            salt,
            iterations,
        })
    }

    fn failed(&self, what: String) -> Error {
        Error::new(
            ErrorKind::Authentication,
            format!("{} failed: {what}", self.hash.mechanism()),
        )
    }

    fn malformed(&self, what: &str) -> Error {
        self.failed(format!("malformed server message: {what}"))
    }
}

pub(crate) struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: NonZeroU32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No deadline.
    fn in_time() -> Result<()> {
        Ok(())
    }

    /// Hi() to its end in slices of `slice` iterations.
    fn hi(hash: Hash, password: &[u8], salt: &[u8], iterations: u32, slice: u32) -> Vec<u8> {
        let mut d = Pbkdf2::new(hash, password, salt, NonZeroU32::new(iterations).unwrap());
        let mut slices = 0;
        while !d.step(slice) {
            slices += 1;
        }
        assert_eq!(slices, (iterations - 1).div_ceil(slice).saturating_sub(1));
        assert_eq!(d.remaining(), 0);
        d.output().unwrap().to_vec()
    }

    /// The sliced Hi() is ring's PBKDF2, whatever the slices.
    #[test]
    fn hi_in_slices_matches_ring_pbkdf2() {
        use ring::pbkdf2;
        for iterations in [
            1,
            2,
            4096,
            ITERATIONS_PER_SLICE,
            ITERATIONS_PER_SLICE + 1,
            15_000,
        ] {
            let n = NonZeroU32::new(iterations).unwrap();
            for (hash, alg, len) in [
                (Hash::Sha1, pbkdf2::PBKDF2_HMAC_SHA1, 20),
                (Hash::Sha256, pbkdf2::PBKDF2_HMAC_SHA256, 32),
            ] {
                let mut want = vec![0; len];
                pbkdf2::derive(alg, n, b"salt", b"pencil", &mut want);
                for slice in [1, 7, ITERATIONS_PER_SLICE, u32::MAX] {
                    let got = hi(hash, b"pencil", b"salt", iterations, slice);
                    assert_eq!(got, want, "{hash:?}, {iterations} iterations by {slice}");
                }
            }
        }
    }

    /// RFC 6070's PBKDF2-HMAC-SHA1 vectors (dkLen = 20: one block), and
    /// the same inputs with HMAC-SHA256 (no RFC lists them; computed with
    /// Python's hashlib.pbkdf2_hmac). RFC 7677's SCRAM-SHA-256 vector is
    /// `rfc_7677_sha256_vector` below.
    #[test]
    fn hi_matches_the_rfc_6070_vectors() {
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        for (iterations, want) in [
            (1, "0c60c80f961f0e71f3a9b524af6012062fe037a6"),
            (2, "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957"),
            (4096, "4b007901b765489abead49d926f721d065a429c1"),
        ] {
            assert_eq!(
                hex(&hi(Hash::Sha1, b"password", b"salt", iterations, 100)),
                want
            );
        }
        for (iterations, want) in [
            (
                1,
                "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b",
            ),
            (
                2,
                "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43",
            ),
            (
                4096,
                "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a",
            ),
        ] {
            assert_eq!(
                hex(&hi(Hash::Sha256, b"password", b"salt", iterations, 100)),
                want
            );
        }
    }

    /// The check runs before the first slice and between slices, and its
    /// error ends the derivation there; a later conversation of the same
    /// keys resumes the derivation where it stopped.
    #[test]
    fn derivation_stops_at_the_first_failed_check_and_resumes_later() {
        let first = format!("r=NNserver,s=QSXCR+Q6sek8bf92,i={MAX_ITERATIONS}");
        let checks = Cell::new(0u32);
        let in_time = || {
            checks.set(checks.get() + 1);
            match checks.get() {
                1..=4 => Ok(()),
                _ => Err(Error::timeout("SCRAM key derivation (PBKDF2)")),
            }
        };
        let cache = KeyCache::default();
        let mut s = Scram::new(Hash::Sha256, "u", "p", "NN".into()).unwrap();
        let e = s
            .client_final(first.as_bytes(), &cache, &in_time)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert_eq!(
            checks.get(),
            5,
            "checked before each of 4 slices, then failed"
        );
        let left = |cache: &KeyCache| match cache.entries.borrow().values().next() {
            Some(Entry::Deriving(d)) => d.borrow().remaining(),
            _ => panic!("a derivation under way"),
        };
        assert_eq!(left(&cache), MAX_ITERATIONS - 1 - 4 * ITERATIONS_PER_SLICE);
        // Another conversation of the same keys goes on from there.
        let mut s = Scram::new(Hash::Sha256, "u", "p", "NN".into()).unwrap();
        s.server_first(first.as_bytes(), &cache).unwrap();
        assert_eq!(s.derive(ITERATIONS_PER_SLICE, &cache).unwrap(), None);
        assert_eq!(left(&cache), MAX_ITERATIONS - 1 - 5 * ITERATIONS_PER_SLICE);
        assert_eq!(cache.derivations(), 1);
        let never = || Err(Error::timeout("expired"));
        let mut s = Scram::new(Hash::Sha1, "u", "p", "NN".into()).unwrap();
        assert!(
            s.client_final(first.as_bytes(), &cache, &never).is_err(),
            "checked before the first slice"
        );
    }

    /// Two conversations needing the same keys at once (a pool's
    /// connections opening together) share one derivation.
    #[test]
    fn concurrent_conversations_share_one_derivation() {
        let first = b"r=NNserver,s=QSXCR+Q6sek8bf92,i=4096";
        let cache = KeyCache::default();
        let mut a = Scram::new(Hash::Sha256, "u", "p", "NN".into()).unwrap();
        let mut b = Scram::new(Hash::Sha256, "u", "p", "NN".into()).unwrap();
        a.server_first(first, &cache).unwrap();
        b.server_first(first, &cache).unwrap();
        // Each advances the shared state: 4095 iterations in 4 slices.
        assert_eq!(a.derive(1024, &cache).unwrap(), None);
        assert_eq!(b.derive(1024, &cache).unwrap(), None);
        assert_eq!(a.derive(1024, &cache).unwrap(), None);
        let from_b = b.derive(1024, &cache).unwrap().expect("done");
        let from_a = a.derive(1, &cache).unwrap().expect("done");
        assert_eq!(from_a, from_b);
        assert_eq!(cache.derivations(), 1);
        // The keys are in the cache now.
        let mut c = Scram::new(Hash::Sha256, "u", "p", "NN".into()).unwrap();
        c.server_first(first, &cache).unwrap();
        assert_eq!(c.derive(0, &cache).unwrap(), Some(from_a));
        assert_eq!(cache.derivations(), 1);
    }

    /// A warm state's keys: handed out only for the credential asked for,
    /// taken back only by the same user, password and mechanism (the check
    /// value), and used only while the salt and iteration count match.
    #[test]
    fn warm_keys_round_trip_only_for_their_credential() {
        let first = b"r=NNserver,s=QSXCR+Q6sek8bf92,i=4096";
        let pw = [(Hash::Sha256, "pencil".to_string())];
        let conversation = || Scram::new(Hash::Sha256, "user", "pencil", "NN".into()).unwrap();
        let cache = KeyCache::default();
        let proof = conversation()
            .client_final(first, &cache, &in_time)
            .unwrap();
        let keys = cache.export("user", &pw);
        assert_eq!(keys.len(), 1);
        assert_eq!(
            (keys[0].iterations, &keys[0].salt[..]),
            (4096, &BASE64.decode("QSXCR+Q6sek8bf92").unwrap()[..])
        );
        assert!(cache
            .export("user", &[(Hash::Sha256, "other".into())])
            .is_empty());
        assert!(!format!("{keys:?}").contains("pencil"));

        let fresh = KeyCache::default();
        assert_eq!(fresh.import("someone", &pw, &keys), 0, "another user");
        assert_eq!(
            fresh.import("user", &[(Hash::Sha256, "other".into())], &keys),
            0,
            "another password"
        );
        assert_eq!(
            fresh.import("user", &[(Hash::Sha1, "pencil".into())], &keys),
            0,
            "another mechanism"
        );
        let mut tampered = keys.clone();
        tampered[0].client_key[0] ^= 1;
        assert_eq!(fresh.import("user", &pw, &tampered), 0, "a changed key");
        assert_eq!(fresh.import("user", &pw, &keys), 1);
        assert_eq!(
            conversation()
                .client_final(first, &fresh, &in_time)
                .unwrap(),
            proof
        );
        assert_eq!(fresh.derivations(), 0, "no PBKDF2");
        // Another salt, or another iteration count: derived again.
        conversation()
            .client_final(b"r=NNserver,s=QSXCR+Q6sek8bf93,i=4096", &fresh, &in_time)
            .unwrap();
        assert_eq!(fresh.derivations(), 1);
        conversation()
            .client_final(b"r=NNserver,s=QSXCR+Q6sek8bf92,i=4097", &fresh, &in_time)
            .unwrap();
        assert_eq!(fresh.derivations(), 2);
        // The check value covers the salt and iteration count too.
        let mut moved = keys.clone();
        moved[0].iterations = 4097;
        assert_eq!(KeyCache::default().import("user", &pw, &moved), 0);
        let mut moved = keys.clone();
        moved[0].salt.push(0);
        assert_eq!(KeyCache::default().import("user", &pw, &moved), 0);
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    /// RFC 5802 section 5, with the plain password (the RFC does not digest).
    #[test]
    fn rfc_5802_sha1_vector() {
        let cache = KeyCache::default();
        let mut s = Scram::prepared(
            Hash::Sha1,
            "user",
            "pencil".into(),
            "fyko+d2lbbFgONRv9qkxdawL".into(),
        );
        assert_eq!(
            text(s.client_first()),
            "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
        );
        let server_first =
            b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096";
        assert_eq!(
            text(s.client_final(server_first, &cache, &in_time).unwrap()),
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
        );
        s.verify_server_final(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
            .unwrap();
        assert!(s.is_verified());
    }

    /// RFC 7677 section 3.
    #[test]
    fn rfc_7677_sha256_vector() {
        let cache = KeyCache::default();
        let mut s = Scram::new(
            Hash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        )
        .unwrap();
        assert_eq!(text(s.client_first()), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            text(s.client_final(server_first, &cache, &in_time).unwrap()),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        s.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    /// The auth spec's MongoDB SCRAM-SHA-1 conversation (the digested password).
    #[test]
    fn auth_spec_mongodb_sha1_conversation() {
        let cache = KeyCache::default();
        let mut s = Scram::new(
            Hash::Sha1,
            "user",
            "pencil",
            "fyko+d2lbbFgONRv9qkxdawL".into(),
        )
        .unwrap();
        let server_first = b"r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000";
        assert_eq!(
            text(s.client_final(server_first, &cache, &in_time).unwrap()),
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,\
             p=MC2T8BvbmWRckDw8oWl5IVghwCY="
        );
        s.verify_server_final(b"v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=")
            .unwrap();
    }

    #[test]
    fn mongodb_password_digest() {
        // md5("user:mongo:pencil"), computed independently (Python hashlib).
        assert_eq!(
            mongo_password_digest("user", "pencil"),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
    }

    #[test]
    fn user_names_are_escaped_not_prepared() {
        let s = Scram::prepared(Hash::Sha256, "a,b=c\u{00AD}", String::new(), "N".into());
        assert_eq!(text(s.client_first()), "n,,n=a=2Cb=3Dc\u{00AD},r=N");
    }

    fn sha256_after_first(server_first: &[u8]) -> Result<Vec<u8>> {
        let mut s = Scram::new(
            Hash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        )?;
        s.client_final(server_first, &KeyCache::default(), &in_time)
    }

    #[test]
    fn tampered_server_signature_is_rejected() {
        let cache = KeyCache::default();
        let mut s = Scram::new(
            Hash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        )
        .unwrap();
        s.client_final(
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            &cache,
            &in_time,
        )
        .unwrap();
        // The right signature with its first character changed.
        let e = s
            .verify_server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Authentication);
        assert!(e.message.contains("signature is wrong"), "{e}");
        assert!(!s.is_verified());
        let e = s.verify_server_final(b"e=other-error").unwrap_err();
        assert!(e.message.contains("other-error"), "{e}");
    }

    #[test]
    fn too_few_iterations_are_rejected() {
        let e = sha256_after_first(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095")
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Authentication);
        assert!(e.message.contains("4095 iterations"), "{e}");
        assert!(
            sha256_after_first(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
                .is_ok()
        );
        let e = sha256_after_first(
            b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4000000000",
        )
        .unwrap_err();
        assert!(e.message.contains("limit"), "{e}");
    }

    #[test]
    fn malformed_server_first_messages_are_clear_errors() {
        for (msg, expect) in [
            (&b""[..], "without r="),
            (
                b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=AA==,i=4096",
                "mandatory extension",
            ),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "without s="),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=AA==", "without i="),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=!!,i=4096", "not base64"),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096", "empty"),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=AA==,i=lots", "not a number"),
            (b"r=someoneelse,s=AA==,i=4096", "nonce"),
            (b"r=rOprNGfwEbeRWgbNEkqO,s=AA==,i=4096", "nonce"),
            (b"\xff\xfe", "UTF-8"),
        ] {
            let e = sha256_after_first(msg).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Authentication, "{msg:?}");
            assert!(e.message.contains(expect), "{msg:?}: {e}");
        }
    }

    #[test]
    fn the_cache_skips_pbkdf2_for_the_same_salt() {
        let cache = KeyCache::default();
        let first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let run = |cache: &KeyCache| {
            let mut s = Scram::new(
                Hash::Sha256,
                "user",
                "pencil",
                "rOprNGfwEbeRWgbNEkqO".into(),
            )
            .unwrap();
            s.client_final(first, cache, &in_time).unwrap()
        };
        let a = run(&cache);
        let b = run(&cache);
        assert_eq!(a, b);
        assert_eq!(cache.derivations(), 1);
        // Another salt (or mechanism, or password) derives again.
        let mut s = Scram::new(Hash::Sha256, "user", "pencil", "N".into()).unwrap();
        s.client_final(b"r=NN,s=QSXCR+Q6sek8bf92,i=4096", &cache, &in_time)
            .unwrap();
        assert_eq!(cache.derivations(), 2);
        let mut s = Scram::new(Hash::Sha256, "user", "other", "N".into()).unwrap();
        s.client_final(b"r=NN,s=QSXCR+Q6sek8bf92,i=4096", &cache, &in_time)
            .unwrap();
        assert_eq!(cache.derivations(), 3);
    }

    #[test]
    fn sha256_passwords_are_saslprepped() {
        // "I\u{00AD}X" and "IX" derive the same proof.
        let first = b"r=NNxyz,s=QSXCR+Q6sek8bf92,i=4096";
        let proof = |pw: &str| {
            let mut s = Scram::new(Hash::Sha256, "IX", pw, "NN".into()).unwrap();
            s.client_final(first, &KeyCache::default(), &in_time)
                .unwrap()
        };
        assert_eq!(proof("I\u{00AD}X"), proof("IX"));
        assert_ne!(proof("IY"), proof("IX"));
    }
}

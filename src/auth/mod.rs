//! Authentication (the auth spec, and the handshake spec's speculative
//! authentication), sans I/O. A client holds one [`Authenticator`]: its
//! credential and its SCRAM key cache. For each new connection it says what
//! the `hello` carries (`saslSupportedMechs`, `speculativeAuthenticate`),
//! then a [`Conversation`] takes the server's replies and returns the next
//! command until the server has accepted the credential. `conn` does the I/O.

mod plain;
mod saslprep;
pub mod scram;
mod x509;

use crate::error::{check_ok, Error, ErrorKind, Result};
use crate::uri::{AuthMechanism, Credential};
use crate::warm::ScramKeys;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bson::spec::BinarySubtype;
use bson::{cstr, rawdoc, Binary, RawBson, RawDocument, RawDocumentBuf};
use scram::{Hash, KeyCache, Scram};
use std::rc::Rc;

/// Random bytes in a SCRAM client nonce (32 base64 characters).
pub const NONCE_BYTES: u64 = 24;

/// A SCRAM client nonce from random bytes (base64: printable, no commas).
pub fn nonce_from(random: &[u8]) -> String {
    BASE64.encode(random)
}

thread_local! {
    /// The SCRAM key cache, one per instance (the guest has one thread): a
    /// new client of the same user (same password, salt and iterations)
    /// skips PBKDF2 as a new connection does.
    static KEYS: Rc<KeyCache> = Rc::default();
}

/// A client's credential and the instance's SCRAM key cache, shared by
/// every connection the client opens.
pub struct Authenticator {
    credential: Credential,
    cache: Rc<KeyCache>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Credential's Debug redacts the password.
        f.debug_struct("Authenticator")
            .field("credential", &self.credential)
            .field("cache", &self.cache)
            .finish()
    }
}

/// The next thing to do in a conversation.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Send this command to the credential's source database (OP_MSG, `$db`
    /// added by the sender) and give the reply to [`Conversation::reply`].
    Send(RawDocumentBuf),
    /// SCRAM's key derivation (PBKDF2) is under way: check the deadline,
    /// call [`Conversation::derive`] for the next slice (and, on WASI 0.3,
    /// yield to the other tasks between slices).
    Derive,
    /// The server accepted the credential.
    Done,
}

/// What the handshake's `hello` carries for the credential, and the
/// conversation its speculative part began.
pub struct HelloAuth<'a> {
    /// `saslSupportedMechs: "<source>.<user>"` when the mechanism is negotiated.
    pub sasl_supported_mechs: Option<String>,
    /// `speculativeAuthenticate`: the conversation's first command (plus `db` for SCRAM).
    pub speculative: Option<RawDocumentBuf>,
    conversation: Option<Conversation<'a>>,
}

/// A conversation the handshake's `hello` began, kept with its connection
/// until authentication resumes (a server check's connection authenticates
/// at its first checkout).
pub struct Suspended {
    mechanism: AuthMechanism,
    kind: Kind,
}

/// Whether a connection's first command may go in the same flight as the
/// last message of the SCRAM conversation its hello began, saving a round
/// trip (docs/driver.md, "Round trips of a cold request"). Only when:
/// - TLS verified the server (chain and host name): the command goes to the
///   server the certificate names before SCRAM's server signature is read;
/// - the server answered the hello's speculative saslStart, so it is 4.4+
///   and ends SCRAM at the client proof (`skipEmptyExchange`): the command
///   runs after authentication, as a server runs one connection's messages
///   in order (or fails as Unauthorized if the proof is refused);
/// - the command has no side effect (a retryable read, outside any
///   transaction): where a server does not enforce authentication it runs
///   even when the proof fails, and that must change nothing.
///
/// The server signature is still checked before the command's reply is used.
pub fn command_may_follow_proof(
    server_verified: bool,
    suspended: Option<&Suspended>,
    hello_reply: &RawDocument,
    read_only: bool,
) -> bool {
    let scram = suspended.is_some_and(|s| matches!(s.kind, Kind::Scram { .. }));
    let answered = hello_reply.get_document("speculativeAuthenticate").is_ok();
    server_verified && scram && answered && read_only
}

impl HelloAuth<'_> {
    /// Keeps the speculative conversation (the hello's fields are sent).
    pub fn suspend(self) -> Option<Suspended> {
        self.conversation.map(|c| Suspended {
            mechanism: c.mechanism,
            kind: c.kind,
        })
    }
}

impl Authenticator {
    /// The hello's conversation back, for `after_hello`.
    pub fn resume(&self, suspended: Option<Suspended>) -> HelloAuth<'_> {
        HelloAuth {
            sasl_supported_mechs: None,
            speculative: None,
            conversation: suspended.map(|s| Conversation {
                auth: self,
                mechanism: s.mechanism,
                kind: s.kind,
            }),
        }
    }

    /// Refuses the mechanisms this driver does not implement.
    pub fn new(credential: Credential) -> Result<Authenticator> {
        use AuthMechanism::*;
        match credential.mechanism {
            None | Some(ScramSha1 | ScramSha256 | Plain | MongodbX509) => {}
            Some(m) => {
                return Err(Error::not_implemented(&format!(
                    "authMechanism {}",
                    m.as_str()
                )))
            }
        }
        Ok(Authenticator {
            credential,
            cache: KEYS.with(Rc::clone),
        })
    }

    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    pub fn cache(&self) -> &KeyCache {
        &self.cache
    }

    /// The password in key-derivation form for each SCRAM mechanism this
    /// credential may use (none for other mechanisms).
    fn scram_passwords(&self) -> Vec<(Hash, String)> {
        let c = &self.credential;
        let (Some(user), Some(password)) = (c.username.as_deref(), c.password.as_deref()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if matches!(c.mechanism, None | Some(AuthMechanism::ScramSha1)) {
            out.push((Hash::Sha1, scram::mongo_password_digest(user, password)));
        }
        if matches!(c.mechanism, None | Some(AuthMechanism::ScramSha256)) {
            if let Ok(p) = saslprep::prepare(password) {
                out.push((Hash::Sha256, p.into_owned()));
            }
        }
        out
    }

    /// The SCRAM keys this instance derived for this credential, for a warm
    /// state (`crate::warm`).
    pub fn warm_keys(&self) -> Vec<ScramKeys> {
        let user = self.credential.username.as_deref().unwrap_or_default();
        self.cache.export(user, &self.scram_passwords())
    }

    /// Takes a warm state's SCRAM keys into the instance's cache, those
    /// derived for this credential (user and password); returns how many.
    /// A connection then skips PBKDF2 when the server's salt and iteration
    /// count are the ones the keys were derived with.
    pub fn adopt_warm_keys(&self, keys: &[ScramKeys]) -> usize {
        let user = self.credential.username.as_deref().unwrap_or_default();
        self.cache.import(user, &self.scram_passwords(), keys)
    }

    /// The `hello` fields for a new connection; `nonce` is asked for a
    /// speculative SCRAM start.
    pub fn hello_fields(&self, nonce: impl FnOnce() -> String) -> Result<HelloAuth<'_>> {
        let c = &self.credential;
        let sasl_supported_mechs = match c.mechanism {
            // The user name as given: the server looks it up unprepared.
            None => Some(format!(
                "{}.{}",
                c.source,
                c.username.as_deref().unwrap_or_default()
            )),
            Some(_) => None,
        };
        // Negotiation speculates with SCRAM-SHA-256 (handshake spec), unless
        // SASLprep refuses the password (SCRAM-SHA-1 may still accept it);
        // PLAIN has no speculative form.
        let conversation = match c.mechanism {
            None => self.conversation(AuthMechanism::ScramSha256, nonce).ok(),
            Some(AuthMechanism::Plain) => None,
            Some(m) => Some(self.conversation(m, nonce)?),
        };
        let speculative = conversation.as_ref().map(Conversation::speculative_command);
        Ok(HelloAuth {
            sasl_supported_mechs,
            speculative,
            conversation,
        })
    }

    /// After the handshake reply: continue the speculative conversation the
    /// server answered, else start one with the configured or negotiated
    /// mechanism. `nonce` is asked only for a new SCRAM conversation.
    pub fn after_hello<'a>(
        &'a self,
        hello: HelloAuth<'a>,
        reply: &RawDocument,
        nonce: impl FnOnce() -> String,
    ) -> Result<(Conversation<'a>, Step)> {
        if let (Some(mut conv), Ok(answer)) = (
            hello.conversation,
            reply.get_document("speculativeAuthenticate"),
        ) {
            let step = conv.advance(answer)?;
            return Ok((conv, step));
        }
        let mechanism = match self.credential.mechanism {
            Some(m) => m,
            None => negotiate(reply),
        };
        let conv = self.conversation(mechanism, nonce)?;
        let first = conv.first_command();
        Ok((conv, Step::Send(first)))
    }

    /// A failed `hello` with a credential is an authentication error (auth
    /// spec), except a state change error (shutting down, recovering, not
    /// primary): the server refused the hello itself, before authenticating,
    /// and SDAM handles it as it does any handshake's (SDAM
    /// hello-command-error under auth).
    pub fn hello_failed(&self, e: Error) -> Error {
        if e.code.and_then(crate::error::state_change_error).is_some() {
            return e;
        }
        as_auth_error(e, &self.describe(None))
    }

    fn conversation(
        &self,
        mechanism: AuthMechanism,
        nonce: impl FnOnce() -> String,
    ) -> Result<Conversation<'_>> {
        let c = &self.credential;
        let username = c.username.as_deref().unwrap_or_default();
        let password = c.password.as_deref().unwrap_or_default();
        let kind = match mechanism {
            AuthMechanism::ScramSha1 => Kind::Scram {
                scram: Box::new(Scram::new(Hash::Sha1, username, password, nonce())?),
                id: None,
            },
            AuthMechanism::ScramSha256 => Kind::Scram {
                scram: Box::new(Scram::new(Hash::Sha256, username, password, nonce())?),
                id: None,
            },
            AuthMechanism::Plain => Kind::Plain,
            AuthMechanism::MongodbX509 => Kind::X509,
            m => {
                return Err(Error::not_implemented(&format!(
                    "authMechanism {}",
                    m.as_str()
                )))
            }
        };
        Ok(Conversation {
            auth: self,
            mechanism,
            kind,
        })
    }

    /// "SCRAM-SHA-256 authentication of user "u" on "admin"": never the password.
    fn describe(&self, mechanism: Option<AuthMechanism>) -> String {
        let c = &self.credential;
        let mech = mechanism.or(c.mechanism).map_or("", AuthMechanism::as_str);
        let user = match &c.username {
            Some(u) => format!("user {u:?}"),
            None => "the certificate's subject".to_string(),
        };
        format!("{mech} authentication of {user} on {:?}", c.source)
            .trim_start()
            .to_string()
    }
}

/// The auth spec's default mechanism: SCRAM-SHA-256 when the server lists
/// it for the user, else SCRAM-SHA-1 (the list itself is not validated).
pub fn negotiate(hello_reply: &RawDocument) -> AuthMechanism {
    let listed = hello_reply
        .get_array("saslSupportedMechs")
        .map(|a| {
            a.into_iter()
                .flatten()
                .any(|m| m.as_str() == Some("SCRAM-SHA-256"))
        })
        .unwrap_or(false);
    if listed {
        AuthMechanism::ScramSha256
    } else {
        AuthMechanism::ScramSha1
    }
}

enum Kind {
    Scram {
        scram: Box<Scram>,
        /// The server's conversationId, once saslStart was answered.
        id: Option<RawBson>,
    },
    Plain,
    X509,
}

/// One authentication conversation on one connection. Each reply moves it
/// forward or fails it, so it ends after a bounded number of round trips.
pub struct Conversation<'a> {
    auth: &'a Authenticator,
    mechanism: AuthMechanism,
    kind: Kind,
}

impl Conversation<'_> {
    pub fn mechanism(&self) -> AuthMechanism {
        self.mechanism
    }

    /// The database the conversation's commands go to.
    pub fn db(&self) -> &str {
        &self.auth.credential.source
    }

    /// Takes the server's reply to the last command and returns the next
    /// step.
    pub fn reply(&mut self, reply: &RawDocument) -> Result<Step> {
        check_ok(reply).map_err(|e| as_auth_error(e, &self.describe()))?;
        self.advance(reply)
    }

    /// After [`Step::Derive`]: runs up to `iterations` more of SCRAM's key
    /// derivation (a slice; `scram::ITERATIONS_PER_SLICE`), then says what
    /// is next: `Derive` again, or the client-final message to send.
    pub fn derive(&mut self, iterations: u32) -> Result<Step> {
        let cache = &self.auth.cache;
        match &mut self.kind {
            Kind::Scram {
                scram,
                id: Some(cid),
            } => Ok(match scram.derive(iterations, cache)? {
                Some(client_final) => Step::Send(sasl_continue(cid.clone(), client_final)),
                None => Step::Derive,
            }),
            _ => Err(Error::new(
                ErrorKind::Authentication,
                format!("{} failed: no key derivation is due", self.describe()),
            )),
        }
    }

    fn first_command(&self) -> RawDocumentBuf {
        let c = &self.auth.credential;
        match &self.kind {
            Kind::Scram { scram, .. } => rawdoc! {
                "saslStart": 1,
                "mechanism": scram.hash().mechanism(),
                "payload": binary(scram.client_first()),
                "autoAuthorize": 1,
                "options": { "skipEmptyExchange": true },
            },
            Kind::Plain => plain::sasl_start(
                c.username.as_deref().unwrap_or_default(),
                c.password.as_deref().unwrap_or_default(),
            ),
            Kind::X509 => x509::authenticate(c.username.as_deref()),
        }
    }

    /// The first command as `speculativeAuthenticate` carries it: SCRAM
    /// names its database with `db`; X.509's is always `$external`.
    fn speculative_command(&self) -> RawDocumentBuf {
        let mut cmd = self.first_command();
        if let Kind::Scram { .. } = self.kind {
            cmd.append(cstr!("db"), self.db());
        }
        cmd
    }

    /// Moves on from a successful reply (a command's, or the hello's
    /// `speculativeAuthenticate`, which has the same fields but no `ok`).
    fn advance(&mut self, reply: &RawDocument) -> Result<Step> {
        let done = reply.get_bool("done").unwrap_or(false);
        let what = self.describe();
        let failed =
            |why: &str| Error::new(ErrorKind::Authentication, format!("{what} failed: {why}"));
        let cache = &self.auth.cache;
        match &mut self.kind {
            Kind::X509 => Ok(Step::Done),
            Kind::Plain if done => Ok(Step::Done),
            Kind::Plain => Err(failed("the server did not end the PLAIN conversation")),
            Kind::Scram { scram, id } => {
                let Some(conversation_id) = id.clone() else {
                    // The answer to saslStart: the server-first message.
                    let cid: RawBson = reply
                        .get("conversationId")
                        .ok()
                        .flatten()
                        .ok_or_else(|| failed("the saslStart reply has no conversationId"))?
                        .into();
                    if done {
                        return Err(failed(
                            "the server ended the conversation before proving it knows the password",
                        ));
                    }
                    let server_first = payload(reply, &failed)?;
                    scram.server_first(&server_first, cache)?;
                    *id = Some(cid);
                    return Ok(Step::Derive);
                };
                if !scram.is_verified() {
                    scram.verify_server_final(&payload(reply, &failed)?)?;
                    return Ok(if done {
                        Step::Done
                    } else {
                        // A server without skipEmptyExchange wants one more, empty, exchange.
                        Step::Send(sasl_continue(conversation_id, Vec::new()))
                    });
                }
                if done {
                    Ok(Step::Done)
                } else {
                    Err(failed(
                        "the server did not end the conversation after the empty exchange",
                    ))
                }
            }
        }
    }

    fn describe(&self) -> String {
        self.auth.describe(Some(self.mechanism))
    }
}

fn binary(bytes: Vec<u8>) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    }
}

fn sasl_continue(conversation_id: RawBson, payload: Vec<u8>) -> RawDocumentBuf {
    let mut cmd = rawdoc! { "saslContinue": 1 };
    cmd.append(cstr!("conversationId"), conversation_id);
    cmd.append(cstr!("payload"), binary(payload));
    cmd
}

/// A reply's SASL payload: binary, or (some servers) a base64 string.
fn payload(reply: &RawDocument, failed: &dyn Fn(&str) -> Error) -> Result<Vec<u8>> {
    match reply.get("payload").ok().flatten() {
        Some(bson::RawBsonRef::Binary(b)) => Ok(b.bytes.to_vec()),
        Some(bson::RawBsonRef::String(s)) => BASE64
            .decode(s)
            .map_err(|_| failed("the reply's payload string is not base64")),
        _ => Err(failed("the reply has no payload")),
    }
}

/// A server's refusal as an `authentication` error: its code, codeName and
/// labels kept (e.g. 18 AuthenticationFailed), the message naming the
/// mechanism and user. The reply of a failed command carries no payload.
fn as_auth_error(mut e: Error, what: &str) -> Error {
    if e.kind == ErrorKind::Server {
        e.message = format!("{what} failed: {}", e.message);
        e.kind = ErrorKind::Authentication;
    }
    e
}

#[cfg(test)]
mod tests;

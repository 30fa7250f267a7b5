//! The server side of authentication as mongod 7.0 runs it: users (configured, or made with
//! `createUser` through the proxy), `saslStart`/`saslContinue` with SCRAM-SHA-1, SCRAM-SHA-256
//! and PLAIN, `authenticate` with MONGODB-X509, and the handshake's `saslSupportedMechs` and
//! `speculativeAuthenticate`. The users live in the proxy, never in the backend.

pub mod scram;

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};

use crate::codes::{self, error_doc};
use scram::Hash;

pub const EXTERNAL: &str = "$external";
pub const SCRAM_SHA_1: &str = "SCRAM-SHA-1";
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
pub const PLAIN: &str = "PLAIN";
pub const X509: &str = "MONGODB-X509";
/// What `getParameter`'s `authenticationMechanisms` reports.
pub const MECHANISMS: &[&str] = &[X509, PLAIN, SCRAM_SHA_1, SCRAM_SHA_256];
/// mongod's only conversation id.
const CONVERSATION_ID: i32 = 1;
const FAILED: &str = "Authentication failed.";

/// A user the proxy knows from the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub db: String,
    /// None for X.509 users. On `$external` it plays the LDAP directory's password for PLAIN.
    pub password: Option<String>,
    /// Mechanisms the user may authenticate with.
    pub mechanisms: Vec<String>,
}

impl User {
    /// A password user: SCRAM-SHA-1 and SCRAM-SHA-256 (PLAIN on `$external`), as `createUser`.
    pub fn new(name: &str, db: &str, password: &str) -> User {
        let mechanisms = match db {
            EXTERNAL => vec![PLAIN.to_string()],
            _ => vec![SCRAM_SHA_1.to_string(), SCRAM_SHA_256.to_string()],
        };
        User {
            name: name.to_string(),
            db: db.to_string(),
            password: Some(password.to_string()),
            mechanisms,
        }
    }

    /// An X.509 user: the certificate's subject (RFC 2253 form) on `$external`.
    pub fn x509(subject: &str) -> User {
        User {
            name: subject.to_string(),
            db: EXTERNAL.to_string(),
            password: None,
            mechanisms: vec![X509.to_string()],
        }
    }

    pub fn with_mechanisms(mut self, mechanisms: &[&str]) -> User {
        self.mechanisms = mechanisms.iter().map(|m| m.to_string()).collect();
        self
    }
}

/// Authentication for one proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// When on, commands other than the handshake and authentication need an authenticated
    /// connection (code 13), as on a mongod started with `--auth`.
    pub enabled: bool,
    pub users: Vec<User>,
    /// mongod's `scramIterationCount` (10000) and `scramSHA256IterationCount` (15000).
    pub sha1_iterations: u32,
    pub sha256_iterations: u32,
    /// Answer a hello's `speculativeAuthenticate` (mongod 4.4+). Off plays an older server,
    /// so tests can measure what speculative authentication saves.
    pub speculative: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            users: Vec::new(),
            sha1_iterations: scram::SHA1_ITERATIONS,
            sha256_iterations: scram::SHA256_ITERATIONS,
            speculative: true,
        }
    }
}

impl AuthConfig {
    /// Auth on, with these users.
    pub fn with_users(users: Vec<User>) -> AuthConfig {
        AuthConfig {
            enabled: true,
            users,
            ..AuthConfig::default()
        }
    }
}

/// Commands an unauthenticated connection may run on a mongod with auth on.
pub fn allowed_unauthenticated(name: &str) -> bool {
    matches!(
        crate::commands::canonical(name),
        "hello"
            | "saslStart"
            | "saslContinue"
            | "authenticate"
            | "ping"
            | "buildInfo"
            | "getnonce"
            | "logout"
    )
}

/// A user with its derived SCRAM credentials, ready to store.
pub(crate) struct Stored {
    user: User,
    roles: Vec<Bson>,
    creds: Vec<scram::Credentials>,
}

/// The SCRAM iteration counts new credentials get.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Iterations {
    sha1: u32,
    sha256: u32,
}

/// The user store every connection of one proxy shares.
pub(crate) struct Users {
    map: BTreeMap<(String, String), Stored>,
    iterations: Iterations,
    /// [`AuthConfig::speculative`].
    speculative: bool,
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    getrandom::fill(&mut out).expect("the OS random source");
    out
}

fn refused(code: i32, msg: &str) -> Document {
    error_doc(code, msg)
}

/// Checks a user and derives its SCRAM credentials (PBKDF2: slow, so callers run it
/// outside the store's lock); [`Users::insert`] stores the result.
fn prepare(user: User, roles: Vec<Bson>, iterations: Iterations) -> Result<Stored, Document> {
    for m in &user.mechanisms {
        if !MECHANISMS.contains(&m.as_str()) {
            return Err(refused(
                codes::BAD_VALUE,
                &format!("Unknown auth mechanism '{m}'"),
            ));
        }
    }
    if user.mechanisms.is_empty() {
        return Err(refused(
            codes::BAD_VALUE,
            "mechanisms field must not be empty",
        ));
    }
    let mut creds = Vec::new();
    if let Some(password) = &user.password {
        for m in &user.mechanisms {
            let Some(hash) = Hash::from_mechanism(m) else {
                continue;
            };
            let count = match hash {
                Hash::Sha1 => iterations.sha1,
                Hash::Sha256 => iterations.sha256,
            };
            let input = scram::password_input(hash, &user.name, password);
            let salt = random_bytes(hash.salt_len());
            creds.push(scram::Credentials::derive(hash, &input, salt, count));
        }
    }
    Ok(Stored { user, roles, creds })
}

/// `createUser`'s checks, then [`prepare`].
pub(crate) fn create_user(
    db: &str,
    body: &Document,
    iterations: Iterations,
) -> Result<Stored, Document> {
    let name = match body.get_str("createUser") {
        Ok(n) if !n.is_empty() => n,
        _ => {
            return Err(refused(
                codes::BAD_VALUE,
                "User document needs 'user' field to be set",
            ))
        }
    };
    let Ok(roles) = body.get_array("roles") else {
        return Err(refused(
            codes::BAD_VALUE,
            "\"createUser\" command requires a \"roles\" array",
        ));
    };
    if body.get_bool("digestPassword").ok() == Some(false) {
        return Err(refused(
            codes::BAD_VALUE,
            "the proxy supports only digestPassword: true",
        ));
    }
    let password = body.get_str("pwd").ok();
    let mechanisms: Vec<String> = match body.get_array("mechanisms") {
        Ok(list) => list
            .iter()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect(),
        Err(_) if db == EXTERNAL => vec![X509.to_string(), PLAIN.to_string()],
        Err(_) => vec![SCRAM_SHA_1.to_string(), SCRAM_SHA_256.to_string()],
    };
    match (db == EXTERNAL, password) {
        (true, Some(_)) => {
            let msg = "Cannot create users with a password in the $external database";
            return Err(refused(codes::BAD_VALUE, msg));
        }
        (false, None) => {
            let msg = "Must provide a 'pwd' field for all user documents, except those with \
                       '$external' as the user's source db";
            return Err(refused(codes::BAD_VALUE, msg));
        }
        (false, Some(_)) if mechanisms.iter().any(|m| Hash::from_mechanism(m).is_none()) => {
            return Err(refused(
                codes::BAD_VALUE,
                "Only SCRAM mechanisms may be set for users with a password",
            ));
        }
        _ => {}
    }
    let user = User {
        name: name.to_string(),
        db: db.to_string(),
        password: password.map(str::to_string),
        mechanisms,
    };
    prepare(user, roles.clone(), iterations)
}

/// `updateUser` as a `createUser` of the user's new state (its stored password, roles and
/// mechanisms, with what the update names replaced), for [`create_user`] to derive the
/// credentials of outside the users' lock, then [`Users::replace`].
pub(crate) fn update_user_body(
    users: &Users,
    db: &str,
    body: &Document,
) -> Result<Document, Document> {
    let Ok(name) = body.get_str("updateUser") else {
        return Err(refused(codes::BAD_VALUE, "updateUser needs a user name"));
    };
    let Some(stored) = users.get(db, name) else {
        let msg = format!("Could not find user \"{name}\" for db \"{db}\"");
        return Err(refused(codes::USER_NOT_FOUND, &msg));
    };
    if ![
        "pwd",
        "roles",
        "mechanisms",
        "customData",
        "authenticationRestrictions",
    ]
    .iter()
    .any(|k| body.contains_key(k))
    {
        let msg = "Must specify at least one field to update in updateUser";
        return Err(refused(codes::BAD_VALUE, msg));
    }
    let mut out = doc! { "createUser": name, "roles": stored.roles.clone() };
    if let Some(pwd) = &stored.user.password {
        out.insert("pwd", pwd.as_str());
    }
    out.insert("mechanisms", stored.user.mechanisms.clone());
    for key in ["pwd", "roles", "mechanisms", "digestPassword"] {
        if let Some(v) = body.get(key) {
            out.insert(key, v.clone());
        }
    }
    Ok(out)
}

impl Users {
    /// Stores `stored` in place of the user of the same name (`updateUser`).
    pub fn replace(&mut self, stored: Stored) -> Result<(), Document> {
        let key = (stored.user.db.clone(), stored.user.name.clone());
        self.map.insert(key, stored);
        Ok(())
    }

    pub fn new(config: &AuthConfig) -> Result<Users, String> {
        let mut users = Users {
            map: BTreeMap::new(),
            iterations: Iterations {
                sha1: config.sha1_iterations.max(1),
                sha256: config.sha256_iterations.max(1),
            },
            speculative: config.speculative,
        };
        let root = || vec![doc! { "role": "root", "db": "admin" }.into()];
        for user in &config.users {
            let errmsg = |e: Document| e.get_str("errmsg").unwrap_or("bad user").to_string();
            let stored = prepare(user.clone(), root(), users.iterations).map_err(errmsg)?;
            users.insert(stored).map_err(errmsg)?;
        }
        Ok(users)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iterations(&self) -> Iterations {
        self.iterations
    }

    /// Stores a [`prepare`]d user; a user of that name in that database already exists: 51003.
    pub fn insert(&mut self, stored: Stored) -> Result<(), Document> {
        let key = (stored.user.db.clone(), stored.user.name.clone());
        if self.map.contains_key(&key) {
            let msg = format!("User \"{}@{}\" already exists", key.1, key.0);
            return Err(refused(codes::USER_EXISTS, &msg));
        }
        self.map.insert(key, stored);
        Ok(())
    }

    fn get(&self, db: &str, name: &str) -> Option<&Stored> {
        self.map.get(&(db.to_string(), name.to_string()))
    }

    /// The SASL mechanisms `hello`'s `saslSupportedMechs` lists for `db.user`.
    pub fn sasl_mechanisms(&self, db_user: &str) -> Option<Vec<String>> {
        let (db, name) = db_user.split_once('.')?;
        let stored = self.get(db, name)?;
        Some(
            stored
                .user
                .mechanisms
                .iter()
                .filter(|m| m.as_str() != X509)
                .cloned()
                .collect(),
        )
    }

    /// `dropUser`, `usersInfo`, `dropAllUsersFromDatabase` (`createUser`: [`create_user`],
    /// then [`Users::insert`]).
    pub fn command(&mut self, name: &str, db: &str, body: &Document) -> Document {
        match name {
            "dropUser" => {
                let Ok(user) = body.get_str("dropUser") else {
                    return refused(codes::BAD_VALUE, "dropUser needs a user name");
                };
                match self.map.remove(&(db.to_string(), user.to_string())) {
                    Some(_) => doc! { "ok": 1.0 },
                    None => refused(
                        codes::USER_NOT_FOUND,
                        &format!("User '{user}@{db}' not found"),
                    ),
                }
            }
            "dropAllUsersFromDatabase" => {
                let before = self.map.len();
                self.map.retain(|(d, _), _| d != db);
                doc! { "n": (before - self.map.len()) as i32, "ok": 1.0 }
            }
            _ => self.users_info(db, body),
        }
    }

    fn users_info(&self, db: &str, body: &Document) -> Document {
        let wanted: Vec<(String, Option<String>)> = match body.get("usersInfo") {
            Some(Bson::String(name)) => vec![(db.to_string(), Some(name.clone()))],
            Some(Bson::Document(d)) => match (d.get_str("db"), d.get_str("user")) {
                (Ok(d), Ok(u)) => vec![(d.to_string(), Some(u.to_string()))],
                _ => return refused(codes::BAD_VALUE, "usersInfo needs user and db"),
            },
            Some(Bson::Array(list)) => {
                let mut out = Vec::new();
                for item in list {
                    match item {
                        Bson::String(n) => out.push((db.to_string(), Some(n.clone()))),
                        Bson::Document(d) => match (d.get_str("db"), d.get_str("user")) {
                            (Ok(d), Ok(u)) => out.push((d.to_string(), Some(u.to_string()))),
                            _ => return refused(codes::BAD_VALUE, "usersInfo needs user and db"),
                        },
                        _ => return refused(codes::BAD_VALUE, "bad usersInfo entry"),
                    }
                }
                out
            }
            // `usersInfo: 1`: every user of this database (or all, with forAllDBs).
            _ => vec![(db.to_string(), None)],
        };
        let all_dbs = body.get_bool("forAllDBs").unwrap_or(false);
        let users: Vec<Bson> = self
            .map
            .iter()
            .filter(|((d, n), _)| {
                wanted
                    .iter()
                    .any(|(wd, wn)| (all_dbs || wd == d) && wn.as_ref().is_none_or(|wn| wn == n))
            })
            .map(|((d, n), s)| {
                doc! {
                    "_id": format!("{d}.{n}"),
                    "user": n.as_str(),
                    "db": d.as_str(),
                    "roles": s.roles.clone(),
                    "mechanisms": s.user.mechanisms.clone(),
                }
                .into()
            })
            .collect();
        doc! { "users": users, "ok": 1.0 }
    }
}

/// A SASL conversation in progress on one connection.
struct Pending {
    db: String,
    user: String,
    conv: scram::Conversation,
    skip_empty_exchange: bool,
    /// The proof was right and `v=` went out with `done: false`: one empty step is left.
    proof_checked: bool,
    /// The client sent the payload as a base64 string: answer the same way.
    text_payload: bool,
    /// Begun by a hello's `speculativeAuthenticate`.
    speculative: bool,
}

/// One connection's authentication state.
#[derive(Default)]
pub(crate) struct Session {
    /// `(user, db)` once authenticated.
    pub user: Option<(String, String)>,
    pending: Option<Pending>,
}

/// What a step did, for the proxy's counters.
pub(crate) struct Step {
    pub reply: Document,
    pub authenticated: bool,
    pub failed: bool,
    /// Authenticated by a conversation a hello's `speculativeAuthenticate` began.
    pub speculative: bool,
}

impl Step {
    fn ok(reply: Document, authenticated: bool) -> Step {
        Step {
            reply,
            authenticated,
            failed: false,
            speculative: false,
        }
    }

    fn fail(reply: Document) -> Step {
        Step {
            reply,
            authenticated: false,
            failed: true,
            speculative: false,
        }
    }
}

fn auth_failed() -> Step {
    Step::fail(error_doc(codes::AUTHENTICATION_FAILED, FAILED))
}

/// `payload` as bytes; the flag says it came as a base64 string.
fn payload(body: &Document) -> Result<(Vec<u8>, bool), Document> {
    match body.get("payload") {
        Some(Bson::Binary(b)) => Ok((b.bytes.clone(), false)),
        Some(Bson::String(s)) => B64
            .decode(s)
            .map(|b| (b, true))
            .map_err(|_| refused(codes::BAD_VALUE, "payload is not base64")),
        _ => Err(refused(
            codes::BAD_VALUE,
            "Missing required field 'payload'",
        )),
    }
}

fn payload_value(bytes: Vec<u8>, text: bool) -> Bson {
    match text {
        true => Bson::String(B64.encode(bytes)),
        false => Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes,
        }),
    }
}

fn sasl_reply(done: bool, bytes: Vec<u8>, text: bool) -> Document {
    doc! {
        "conversationId": CONVERSATION_ID,
        "done": done,
        "payload": payload_value(bytes, text),
        "ok": 1.0,
    }
}

impl Session {
    pub fn is_authenticated(&self) -> bool {
        self.user.is_some()
    }

    pub fn logout(&mut self) {
        self.user = None;
        self.pending = None;
    }

    /// `saslStart` on `db` (or the `speculativeAuthenticate` document of a hello).
    pub fn sasl_start(&mut self, users: &Users, db: &str, body: &Document) -> Step {
        self.pending = None;
        let Ok(mechanism) = body.get_str("mechanism") else {
            return Step::fail(refused(
                codes::BAD_VALUE,
                "Missing required field 'mechanism'",
            ));
        };
        if !MECHANISMS.contains(&mechanism) || mechanism == X509 {
            let msg = format!(
                "Received authentication for mechanism {mechanism} which is unknown or not enabled"
            );
            return Step::fail(refused(codes::MECHANISM_UNAVAILABLE, &msg));
        }
        let (bytes, text) = match payload(body) {
            Ok(p) => p,
            Err(e) => return Step::fail(e),
        };
        if mechanism == PLAIN {
            return self.plain(users, db, &bytes, text);
        }
        let hash = Hash::from_mechanism(mechanism).expect("a SCRAM mechanism");
        let Ok(first) = scram::parse_client_first(&bytes) else {
            return auth_failed();
        };
        let Some(stored) = users.get(db, &first.user) else {
            return auth_failed();
        };
        let allowed = stored.user.mechanisms.iter().any(|m| m == mechanism);
        let Some(creds) = stored
            .creds
            .iter()
            .find(|c| c.hash == hash)
            .filter(|_| allowed)
        else {
            return auth_failed();
        };
        let server_nonce = B64.encode(random_bytes(24));
        let (conv, message) = scram::server_first(&first, creds, &server_nonce);
        let skip_empty_exchange = body
            .get_document("options")
            .and_then(|o| o.get_bool("skipEmptyExchange"))
            .unwrap_or(false);
        self.pending = Some(Pending {
            db: db.to_string(),
            user: first.user,
            conv,
            skip_empty_exchange,
            proof_checked: false,
            text_payload: text,
            speculative: false,
        });
        Step::ok(sasl_reply(false, message.into_bytes(), text), false)
    }

    /// PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, done in one step.
    fn plain(&mut self, users: &Users, db: &str, bytes: &[u8], text: bool) -> Step {
        let parts: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
        let [authzid, authcid, passwd] = parts[..] else {
            return auth_failed();
        };
        let (Ok(authzid), Ok(user), Ok(passwd)) = (
            std::str::from_utf8(authzid),
            std::str::from_utf8(authcid),
            std::str::from_utf8(passwd),
        ) else {
            return auth_failed();
        };
        if !authzid.is_empty() && authzid != user {
            return auth_failed();
        }
        let ok = users.get(db, user).is_some_and(|s| {
            s.user.mechanisms.iter().any(|m| m == PLAIN)
                && s.user.password.as_deref() == Some(passwd)
        });
        if !ok {
            return auth_failed();
        }
        self.user = Some((user.to_string(), db.to_string()));
        Step::ok(sasl_reply(true, Vec::new(), text), true)
    }

    pub fn sasl_continue(&mut self, body: &Document) -> Step {
        let Some(pending) = self.pending.take() else {
            return Step::fail(refused(
                codes::PROTOCOL_ERROR,
                "No SASL session state found",
            ));
        };
        match crate::failpoint::number(body, "conversationId") {
            Some(id) if id == CONVERSATION_ID as f64 => {}
            Some(_) => {
                let msg = "sasl: Mismatched conversation id";
                return Step::fail(refused(codes::PROTOCOL_ERROR, msg));
            }
            None => {
                let msg = "Missing expected field \"conversationId\"";
                return Step::fail(refused(codes::NO_SUCH_KEY, msg));
            }
        }
        let (bytes, _) = match payload(body) {
            Ok(p) => p,
            Err(e) => return Step::fail(e),
        };
        let text = pending.text_payload;
        let speculative = pending.speculative;
        let mut done = |user: String, db: String, payload: Vec<u8>| {
            self.user = Some((user, db));
            let mut step = Step::ok(sasl_reply(true, payload, text), true);
            step.speculative = speculative;
            step
        };
        if pending.proof_checked {
            if !bytes.is_empty() {
                return auth_failed();
            }
            return done(pending.user, pending.db, Vec::new());
        }
        let Ok(server_final) = pending.conv.client_final(&bytes) else {
            return auth_failed();
        };
        if pending.skip_empty_exchange {
            return done(pending.user, pending.db, server_final.into_bytes());
        }
        self.pending = Some(Pending {
            proof_checked: true,
            ..pending
        });
        Step::ok(sasl_reply(false, server_final.into_bytes(), text), false)
    }

    /// `authenticate` with MONGODB-X509: the user is the client certificate's subject.
    pub fn authenticate(
        &mut self,
        users: &Users,
        db: &str,
        body: &Document,
        peer_subject: Option<&str>,
    ) -> Step {
        self.pending = None;
        let mechanism = body.get_str("mechanism").unwrap_or_default();
        if mechanism != X509 {
            let msg = format!("Unsupported mechanism '{mechanism}' for the authenticate command");
            return Step::fail(refused(codes::MECHANISM_UNAVAILABLE, &msg));
        }
        if db != EXTERNAL {
            let msg = "X.509 authentication must always use the $external database.";
            return Step::fail(refused(codes::PROTOCOL_ERROR, msg));
        }
        let Some(subject) = peer_subject else {
            return auth_failed();
        };
        if body.get_str("user").is_ok_and(|u| u != subject) {
            return auth_failed();
        }
        let known = users
            .get(EXTERNAL, subject)
            .is_some_and(|s| s.user.mechanisms.iter().any(|m| m == X509));
        if !known {
            return auth_failed();
        }
        self.user = Some((subject.to_string(), EXTERNAL.to_string()));
        Step::ok(
            doc! { "dbname": EXTERNAL, "user": subject, "ok": 1.0 },
            true,
        )
    }

    /// `connectionStatus`'s `authInfo`.
    pub fn auth_info(&self) -> Document {
        let users: Vec<Bson> = self
            .user
            .iter()
            .map(|(u, d)| doc! { "user": u.as_str(), "db": d.as_str() }.into())
            .collect();
        doc! { "authenticatedUsers": users, "authenticatedUserRoles": [] }
    }
}

/// What the handshake's auth fields did, for the proxy's counters.
#[derive(Default)]
pub(crate) struct HelloAuth {
    pub speculative: Option<Step>,
}

/// Adds `saslSupportedMechs` and `speculativeAuthenticate` to a hello reply, as mongod does.
/// A failed speculative attempt only leaves the field out.
pub(crate) fn hello_fields(
    users: &Users,
    session: &mut Session,
    request: &Document,
    peer_subject: Option<&str>,
    reply: &mut Document,
) -> HelloAuth {
    if let Ok(db_user) = request.get_str("saslSupportedMechs") {
        if let Some(mechs) = users.sasl_mechanisms(db_user) {
            reply.insert("saslSupportedMechs", mechs);
        }
    }
    let mut out = HelloAuth::default();
    let Ok(spec) = request.get_document("speculativeAuthenticate") else {
        return out;
    };
    if !users.speculative {
        return out;
    }
    let db = spec.get_str("db").unwrap_or(EXTERNAL);
    let mut step = if spec.contains_key("saslStart") {
        // mongod: a db is required, and a plaintext mechanism may not speculate.
        if spec.get_str("db").is_err() || spec.get_str("mechanism").ok() == Some(PLAIN) {
            return out;
        }
        session.sasl_start(users, db, spec)
    } else if spec.contains_key("authenticate") {
        session.authenticate(users, db, spec, peer_subject)
    } else {
        return out;
    };
    if let Some(pending) = session.pending.as_mut() {
        pending.speculative = true;
    }
    step.speculative = step.authenticated;
    if !step.failed {
        let mut answer = step.reply.clone();
        answer.remove("ok");
        reply.insert("speculativeAuthenticate", answer);
    }
    out.speculative = Some(step);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Users {
        let mut config = AuthConfig::with_users(vec![
            User::new("alice", "admin", "pw"),
            User::new("sha1only", "admin", "pw").with_mechanisms(&[SCRAM_SHA_1]),
            User::new("ldap", EXTERNAL, "secret"),
            User::x509("CN=client,O=test"),
        ]);
        config.sha1_iterations = 4096;
        config.sha256_iterations = 4096;
        Users::new(&config).unwrap()
    }

    fn bin(bytes: &[u8]) -> Bson {
        payload_value(bytes.to_vec(), false)
    }

    fn bytes(reply: &Document) -> Vec<u8> {
        match reply.get("payload") {
            Some(Bson::Binary(b)) => b.bytes.clone(),
            other => panic!("payload {other:?}"),
        }
    }

    /// The client's final message for `server_first`, as a driver computes it.
    fn client_final(
        hash: Hash,
        user: &str,
        password: &str,
        nonce: &str,
        server_first: &str,
    ) -> String {
        let fields: BTreeMap<&str, &str> = server_first
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let r = server_first
            .split(',')
            .next()
            .unwrap()
            .strip_prefix("r=")
            .unwrap();
        let salt = B64.decode(fields["s"]).unwrap();
        let i: u32 = fields["i"].parse().unwrap();
        let without_proof = format!("c=biws,r={r}");
        let auth_message = format!("n={user},r={nonce},{server_first},{without_proof}");
        let input = scram::password_input(hash, user, password);
        let proof = scram::client_proof(hash, &input, &salt, i, &auth_message);
        format!("{without_proof},p={}", B64.encode(proof))
    }

    fn start(s: &mut Session, u: &Users, mech: &str, user: &str, skip: bool) -> Step {
        let body = doc! {
            "saslStart": 1, "mechanism": mech,
            "payload": bin(format!("n,,n={user},r=clientnonce").as_bytes()),
            "options": { "skipEmptyExchange": skip },
        };
        s.sasl_start(u, "admin", &body)
    }

    fn cont(s: &mut Session, payload: &[u8]) -> Step {
        s.sasl_continue(&doc! { "saslContinue": 1, "conversationId": 1, "payload": bin(payload) })
    }

    #[test]
    fn scram_sha256_with_skip_empty_exchange() {
        let u = users();
        let mut s = Session::default();
        let first = start(&mut s, &u, SCRAM_SHA_256, "alice", true);
        assert!(!first.failed, "{:?}", first.reply);
        assert_eq!(first.reply.get_i32("conversationId").unwrap(), 1);
        assert!(!first.reply.get_bool("done").unwrap());
        let server_first = String::from_utf8(bytes(&first.reply)).unwrap();
        assert!(server_first.starts_with("r=clientnonce") && server_first.ends_with(",i=4096"));
        let fin = client_final(Hash::Sha256, "alice", "pw", "clientnonce", &server_first);
        let done = cont(&mut s, fin.as_bytes());
        assert!(done.authenticated && done.reply.get_bool("done").unwrap());
        assert!(bytes(&done.reply).starts_with(b"v="));
        assert_eq!(s.user, Some(("alice".into(), "admin".into())));
    }

    #[test]
    fn scram_sha1_without_skip_takes_an_empty_step() {
        let u = users();
        let mut s = Session::default();
        let first = start(&mut s, &u, SCRAM_SHA_1, "alice", false);
        let server_first = String::from_utf8(bytes(&first.reply)).unwrap();
        let fin = client_final(Hash::Sha1, "alice", "pw", "clientnonce", &server_first);
        let second = cont(&mut s, fin.as_bytes());
        assert!(!second.failed && !second.authenticated);
        assert!(!second.reply.get_bool("done").unwrap());
        assert!(!s.is_authenticated());
        let last = cont(&mut s, b"");
        assert!(last.authenticated && last.reply.get_bool("done").unwrap());
        assert!(bytes(&last.reply).is_empty());
    }

    #[test]
    fn failures_answer_authentication_failed() {
        let u = users();
        let mut s = Session::default();
        let first = start(&mut s, &u, SCRAM_SHA_256, "alice", true);
        let server_first = String::from_utf8(bytes(&first.reply)).unwrap();
        let fin = client_final(Hash::Sha256, "alice", "wrong", "clientnonce", &server_first);
        let step = cont(&mut s, fin.as_bytes());
        assert!(step.failed);
        assert_eq!(step.reply.get_i32("code").unwrap(), 18);
        assert_eq!(
            step.reply.get_str("errmsg").unwrap(),
            "Authentication failed."
        );
        assert!(!s.is_authenticated());
        // The conversation is over: another continue has no state.
        assert_eq!(cont(&mut s, b"").reply.get_i32("code").unwrap(), 17);
        // Unknown user, and a mechanism the user lacks.
        assert_eq!(
            start(&mut s, &u, SCRAM_SHA_256, "nobody", true)
                .reply
                .get_i32("code")
                .unwrap(),
            18
        );
        assert_eq!(
            start(&mut s, &u, SCRAM_SHA_256, "sha1only", true)
                .reply
                .get_i32("code")
                .unwrap(),
            18
        );
        assert_eq!(
            start(&mut s, &u, "GSSAPI", "alice", true)
                .reply
                .get_i32("code")
                .unwrap(),
            334
        );
    }

    #[test]
    fn plain_and_x509_on_external() {
        let u = users();
        let mut s = Session::default();
        let plain = |p: &[u8]| doc! { "saslStart": 1, "mechanism": PLAIN, "payload": bin(p) };
        let bad = s.sasl_start(&u, EXTERNAL, &plain(b"\0ldap\0nope"));
        assert_eq!(bad.reply.get_i32("code").unwrap(), 18);
        let good = s.sasl_start(&u, EXTERNAL, &plain(b"\0ldap\0secret"));
        assert!(good.authenticated && good.reply.get_bool("done").unwrap());

        let x509 = doc! { "authenticate": 1, "mechanism": X509 };
        let mut s = Session::default();
        assert!(
            s.authenticate(&u, EXTERNAL, &x509, None).failed,
            "no TLS, no subject"
        );
        assert!(s.authenticate(&u, EXTERNAL, &x509, Some("CN=other")).failed);
        let named = doc! { "authenticate": 1, "mechanism": X509, "user": "CN=someone" };
        let mismatch = s.authenticate(&u, EXTERNAL, &named, Some("CN=client,O=test"));
        assert_eq!(mismatch.reply.get_i32("code").unwrap(), 18);
        let wrong_db = s.authenticate(&u, "admin", &x509, Some("CN=client,O=test"));
        assert_eq!(wrong_db.reply.get_i32("code").unwrap(), 17);
        let ok = s.authenticate(&u, EXTERNAL, &x509, Some("CN=client,O=test"));
        assert_eq!(ok.reply.get_str("user").unwrap(), "CN=client,O=test");
        assert_eq!(s.user, Some(("CN=client,O=test".into(), EXTERNAL.into())));
    }

    #[test]
    fn hello_negotiates_and_speculates() {
        let u = users();
        let mut s = Session::default();
        let req = doc! {
            "hello": 1,
            "saslSupportedMechs": "admin.alice",
            "speculativeAuthenticate": {
                "saslStart": 1, "mechanism": SCRAM_SHA_256, "db": "admin",
                "payload": bin(b"n,,n=alice,r=clientnonce"), "options": { "skipEmptyExchange": true },
            },
        };
        let mut reply = doc! { "isWritablePrimary": true, "ok": 1.0 };
        let out = hello_fields(&u, &mut s, &req, None, &mut reply);
        assert!(out.speculative.is_some_and(|st| !st.failed));
        let mechs = reply.get_array("saslSupportedMechs").unwrap();
        assert_eq!(
            mechs,
            &vec![Bson::from(SCRAM_SHA_1), Bson::from(SCRAM_SHA_256)]
        );
        let spec = reply.get_document("speculativeAuthenticate").unwrap();
        assert!(!spec.contains_key("ok") && spec.get_i32("conversationId").is_ok());
        let server_first = String::from_utf8(bytes(spec)).unwrap();
        let fin = client_final(Hash::Sha256, "alice", "pw", "clientnonce", &server_first);
        assert!(cont(&mut s, fin.as_bytes()).authenticated);

        // PLAIN may not speculate.
        let req = doc! { "hello": 1, "speculativeAuthenticate": { "saslStart": 1,
        "mechanism": PLAIN, "db": EXTERNAL, "payload": bin(b"\0ldap\0secret") } };
        let mut reply = doc! {};
        let mut fresh = Session::default();
        assert!(hello_fields(&u, &mut fresh, &req, None, &mut reply)
            .speculative
            .is_none());
        assert!(reply.is_empty() && !fresh.is_authenticated());

        // Unknown user: no saslSupportedMechs; a failed speculation leaves the field out.
        let req = doc! { "hello": 1, "saslSupportedMechs": "admin.nobody",
        "speculativeAuthenticate": { "saslStart": 1, "mechanism": SCRAM_SHA_256, "db": "admin",
            "payload": bin(b"n,,n=nobody,r=x") } };
        let mut reply = doc! {};
        hello_fields(&u, &mut Session::default(), &req, None, &mut reply);
        assert!(reply.is_empty(), "{reply:?}");
    }

    #[test]
    fn speculative_x509_authenticates_in_the_hello() {
        let u = users();
        let req = doc! { "hello": 1, "speculativeAuthenticate": {
        "authenticate": 1, "mechanism": X509, "db": EXTERNAL } };
        let mut s = Session::default();
        let mut reply = doc! {};
        let out = hello_fields(&u, &mut s, &req, Some("CN=client,O=test"), &mut reply);
        assert!(out
            .speculative
            .is_some_and(|st| st.authenticated && st.speculative));
        assert_eq!(
            reply.get_document("speculativeAuthenticate").unwrap(),
            &doc! { "dbname": EXTERNAL, "user": "CN=client,O=test" }
        );
        // Without TLS there is no subject: the field is left out and nobody is authenticated.
        let mut s = Session::default();
        let mut reply = doc! {};
        hello_fields(&u, &mut s, &req, None, &mut reply);
        assert!(reply.is_empty() && !s.is_authenticated());
    }

    #[test]
    fn speculation_can_be_switched_off() {
        let mut config = AuthConfig::with_users(vec![User::x509("CN=client,O=test")]);
        config.speculative = false;
        let u = Users::new(&config).unwrap();
        let req = doc! { "hello": 1, "speculativeAuthenticate": {
        "authenticate": 1, "mechanism": X509, "db": EXTERNAL } };
        let mut s = Session::default();
        let mut reply = doc! {};
        let out = hello_fields(&u, &mut s, &req, Some("CN=client,O=test"), &mut reply);
        assert!(out.speculative.is_none() && reply.is_empty() && !s.is_authenticated());
    }

    fn create(u: &mut Users, db: &str, body: &Document) -> Document {
        match create_user(db, body, u.iterations()).and_then(|s| u.insert(s)) {
            Ok(()) => doc! { "ok": 1.0 },
            Err(e) => e,
        }
    }

    #[test]
    fn user_commands() {
        let mut u = users();
        let created = create(
            &mut u,
            "db1",
            &doc! { "createUser": "bob", "pwd": "pw", "roles": [] },
        );
        assert_eq!(created.get_f64("ok").unwrap(), 1.0);
        let again = create(
            &mut u,
            "db1",
            &doc! { "createUser": "bob", "pwd": "pw", "roles": [] },
        );
        assert_eq!(again.get_i32("code").unwrap(), 51003);
        let no_pwd = create(&mut u, "db1", &doc! { "createUser": "c", "roles": [] });
        assert_eq!(no_pwd.get_i32("code").unwrap(), 2);
        let no_roles = create(&mut u, "db1", &doc! { "createUser": "c", "pwd": "x" });
        assert_eq!(no_roles.get_i32("code").unwrap(), 2);
        let info = u.command("usersInfo", "db1", &doc! { "usersInfo": "bob" });
        let list = info.get_array("users").unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(
            list[0].as_document().unwrap().get_str("_id").unwrap(),
            "db1.bob"
        );
        let all = u.command(
            "usersInfo",
            "admin",
            &doc! { "usersInfo": 1, "forAllDBs": true },
        );
        assert_eq!(all.get_array("users").unwrap().len(), 5);
        let mut s = Session::default();
        let body = doc! { "saslStart": 1, "mechanism": SCRAM_SHA_256,
        "payload": bin(b"n,,n=bob,r=clientnonce"), "options": { "skipEmptyExchange": true } };
        let first = s.sasl_start(&u, "db1", &body);
        let server_first = String::from_utf8(bytes(&first.reply)).unwrap();
        let fin = client_final(Hash::Sha256, "bob", "pw", "clientnonce", &server_first);
        assert!(cont(&mut s, fin.as_bytes()).authenticated);
        // updateUser: a new password; the old one no longer authenticates.
        let update = doc! { "updateUser": "bob", "pwd": "new" };
        let new = update_user_body(&u, "db1", &update)
            .and_then(|b| create_user("db1", &b, u.iterations()))
            .and_then(|st| u.replace(st));
        assert!(new.is_ok());
        for (pwd, ok) in [("pw", false), ("new", true)] {
            let mut s = Session::default();
            let first = s.sasl_start(&u, "db1", &body);
            let server_first = String::from_utf8(bytes(&first.reply)).unwrap();
            let fin = client_final(Hash::Sha256, "bob", pwd, "clientnonce", &server_first);
            assert_eq!(cont(&mut s, fin.as_bytes()).authenticated, ok, "{pwd}");
        }
        let missing = update_user_body(&u, "db1", &doc! { "updateUser": "nobody", "pwd": "x" });
        assert_eq!(missing.unwrap_err().get_i32("code").unwrap(), 11);
        let nothing = update_user_body(&u, "db1", &doc! { "updateUser": "bob" });
        assert_eq!(nothing.unwrap_err().get_i32("code").unwrap(), 2);
        assert_eq!(
            u.command("dropUser", "db1", &doc! { "dropUser": "bob" })
                .get_f64("ok")
                .unwrap(),
            1.0
        );
        assert_eq!(
            u.command("dropUser", "db1", &doc! { "dropUser": "bob" })
                .get_i32("code")
                .unwrap(),
            11
        );
        let n = u.command(
            "dropAllUsersFromDatabase",
            "admin",
            &doc! { "dropAllUsersFromDatabase": 1 },
        );
        assert_eq!(n.get_i32("n").unwrap(), 2);
    }
}

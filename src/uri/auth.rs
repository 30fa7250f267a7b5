//! The auth spec's credential rules: when a URI asks for authentication, and what each
//! mechanism requires of the username, password, source and mechanism properties.

use std::collections::BTreeMap;

use super::options::UriOptions;
use super::values::{fatal, ValueResult};
use super::UriError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMechanism {
    ScramSha1,
    ScramSha256,
    Plain,
    Gssapi,
    MongodbX509,
    MongodbAws,
    MongodbOidc,
}

impl AuthMechanism {
    const ALL: [AuthMechanism; 7] = [
        AuthMechanism::ScramSha1,
        AuthMechanism::ScramSha256,
        AuthMechanism::Plain,
        AuthMechanism::Gssapi,
        AuthMechanism::MongodbX509,
        AuthMechanism::MongodbAws,
        AuthMechanism::MongodbOidc,
    ];

    /// The name used in `authMechanism` and in `saslStart`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMechanism::ScramSha1 => "SCRAM-SHA-1",
            AuthMechanism::ScramSha256 => "SCRAM-SHA-256",
            AuthMechanism::Plain => "PLAIN",
            AuthMechanism::Gssapi => "GSSAPI",
            AuthMechanism::MongodbX509 => "MONGODB-X509",
            AuthMechanism::MongodbAws => "MONGODB-AWS",
            AuthMechanism::MongodbOidc => "MONGODB-OIDC",
        }
    }
}

/// Parses `authMechanism`. An unknown mechanism is fatal: ignoring it would silently
/// authenticate some other way.
pub(crate) fn mechanism(v: &str) -> ValueResult<AuthMechanism> {
    match AuthMechanism::ALL
        .into_iter()
        .find(|m| m.as_str().eq_ignore_ascii_case(v))
    {
        Some(m) => Ok(m),
        None if v.eq_ignore_ascii_case("MONGODB-CR") => {
            fatal("authMechanism MONGODB-CR was removed in MongoDB 4.0")
        }
        None => fatal(format!("unsupported authMechanism {v:?}")),
    }
}

/// An auth spec `MongoCredential`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: Option<String>,
    pub password: Option<String>,
    /// The database the auth conversation is sent to.
    pub source: String,
    /// `None`: negotiate SCRAM-SHA-256 or SCRAM-SHA-1 in the handshake.
    pub mechanism: Option<AuthMechanism>,
    /// With defaults applied (GSSAPI's `SERVICE_NAME`); empty when there are none.
    pub mechanism_properties: BTreeMap<String, String>,
}

impl std::fmt::Debug for Credential {
    /// Keeps the password and property values (tokens) out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("source", &self.source)
            .field("mechanism", &self.mechanism)
            .field("mechanism_properties", &self.mechanism_properties.keys())
            .finish()
    }
}

const EXTERNAL: &str = "$external";

/// Builds the credential, or `None` when the URI does not ask for authentication (no
/// userinfo and no `authMechanism`; a path database or `authSource` alone does not).
pub(crate) fn credential(
    username: Option<&str>,
    password: Option<&str>,
    database: Option<&str>,
    o: &UriOptions,
) -> Result<Option<Credential>, UriError> {
    let props = o.auth_mechanism_properties.clone().unwrap_or_default();
    let mechanism = o.auth_mechanism;
    if mechanism.is_none() && username.is_none() {
        if !props.is_empty() {
            return Err(err("authMechanismProperties requires authMechanism"));
        }
        return Ok(None);
    }
    let name = mechanism.map_or("the default auth mechanism", AuthMechanism::as_str);
    let external_only = || -> Result<String, UriError> {
        match o.auth_source.as_deref() {
            None | Some(EXTERNAL) => Ok(EXTERNAL.to_owned()),
            Some(_) => Err(err(format!("{name} requires authSource to be $external"))),
        }
    };
    let plain = mechanism == Some(AuthMechanism::Plain);
    let (source, props) = match mechanism {
        // No mechanism: negotiated SCRAM, so the SCRAM rules apply.
        None
        | Some(AuthMechanism::ScramSha1 | AuthMechanism::ScramSha256 | AuthMechanism::Plain) => {
            require_username(username, name)?;
            // No password is fine for SCRAM: `mongodb://alice@host` is a valid URI.
            if plain && password.is_none() {
                return Err(err("PLAIN requires a password"));
            }
            no_properties(&props, name)?;
            let default_db = if plain { EXTERNAL } else { "admin" };
            let source = o.auth_source.as_deref().or(database).unwrap_or(default_db);
            (source.to_owned(), props)
        }
        Some(AuthMechanism::Gssapi) => {
            require_username(username, name)?;
            (external_only()?, gssapi_properties(props)?)
        }
        Some(AuthMechanism::MongodbX509) => {
            no_password(password, name)?;
            no_properties(&props, name)?;
            (external_only()?, props)
        }
        Some(AuthMechanism::MongodbAws) => {
            // DRIVERS-3131: credentials come from the environment, never from the URI.
            if username.is_some() || password.is_some() {
                return Err(err(
                    "MONGODB-AWS does not accept a username or password in the connection \
                     string; credentials come from the environment",
                ));
            }
            if !props.is_empty() {
                return Err(err(
                    "MONGODB-AWS does not accept authMechanismProperties (AWS_SESSION_TOKEN \
                     comes from the environment)",
                ));
            }
            (external_only()?, props)
        }
        Some(AuthMechanism::MongodbOidc) => {
            no_password(password, name)?;
            oidc_properties(&props, username.is_some())?;
            (external_only()?, props)
        }
    };
    Ok(Some(Credential {
        username: username.map(str::to_owned),
        password: password.map(str::to_owned),
        source,
        mechanism,
        mechanism_properties: props,
    }))
}

fn err(message: impl Into<String>) -> UriError {
    UriError::new(message)
}

fn require_username(username: Option<&str>, name: &str) -> Result<(), UriError> {
    match username {
        Some(_) => Ok(()),
        None => Err(err(format!("{name} requires a username"))),
    }
}

fn no_password(password: Option<&str>, name: &str) -> Result<(), UriError> {
    match password {
        None => Ok(()),
        Some(_) => Err(err(format!("{name} does not accept a password"))),
    }
}

fn no_properties(props: &BTreeMap<String, String>, name: &str) -> Result<(), UriError> {
    if props.is_empty() {
        Ok(())
    } else {
        Err(err(format!(
            "{name} does not accept authMechanismProperties"
        )))
    }
}

fn unsupported_property(key: &str, name: &str) -> UriError {
    err(format!(
        "{name} does not support the mechanism property {key:?}"
    ))
}

fn gssapi_properties(
    mut props: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, UriError> {
    for (key, value) in &props {
        match key.as_str() {
            "SERVICE_NAME" | "SERVICE_REALM" | "SERVICE_HOST" => {}
            "CANONICALIZE_HOST_NAME" => {
                if !["none", "forward", "forwardAndReverse", "true", "false"]
                    .contains(&value.as_str())
                {
                    return Err(err(format!(
                        "CANONICALIZE_HOST_NAME must be none, forward or forwardAndReverse, \
                         not {value:?}"
                    )));
                }
            }
            _ => return Err(unsupported_property(key, "GSSAPI")),
        }
    }
    props
        .entry("SERVICE_NAME".to_owned())
        .or_insert_with(|| "mongodb".to_owned());
    Ok(props)
}

/// A URI cannot carry an OIDC callback, so it must name a built-in ENVIRONMENT.
fn oidc_properties(props: &BTreeMap<String, String>, has_username: bool) -> Result<(), UriError> {
    const NAME: &str = "MONGODB-OIDC";
    if let Some(key) = props
        .keys()
        .find(|k| !["ENVIRONMENT", "TOKEN_RESOURCE"].contains(&k.as_str()))
    {
        return Err(unsupported_property(key, NAME));
    }
    let Some(environment) = props.get("ENVIRONMENT") else {
        return Err(err(
            "MONGODB-OIDC needs authMechanismProperties ENVIRONMENT (or a callback, which a \
             connection string cannot give)",
        ));
    };
    let needs_resource = match environment.as_str() {
        "azure" | "gcp" => true,
        "test" | "k8s" => false,
        other => {
            return Err(err(format!(
                "unsupported MONGODB-OIDC ENVIRONMENT {other:?} (expected test, azure, gcp or k8s)"
            )))
        }
    };
    if needs_resource != props.contains_key("TOKEN_RESOURCE") {
        return Err(err(if needs_resource {
            format!("MONGODB-OIDC ENVIRONMENT {environment} requires TOKEN_RESOURCE")
        } else {
            format!("MONGODB-OIDC ENVIRONMENT {environment} does not accept TOKEN_RESOURCE")
        }));
    }
    // Only Azure uses a username (as the managed identity's client id).
    if has_username && environment != "azure" {
        return Err(err(format!(
            "MONGODB-OIDC ENVIRONMENT {environment} does not accept a username"
        )));
    }
    Ok(())
}

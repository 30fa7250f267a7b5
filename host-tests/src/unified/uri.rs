//! A client entity's connection string: the topology's URI with the entity's
//! `uriOptions` as query parameters.

use bson::{Bson, Document};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The run's `--compressors` list (spec-runner), when there is one.
static COMPRESSORS: OnceLock<Vec<String>> = OnceLock::new();
/// Client entities made so far: each gets the list rotated by one more.
static CLIENTS: AtomicUsize = AtomicUsize::new(0);

/// Every client entity from now on offers these compressors (a comma-separated
/// list), rotated by one per client so that each compressor is the preferred,
/// hence the negotiated, one for a third of the clients. A client whose
/// `uriOptions` name `compressors` keeps its own.
pub fn set_compressors(list: &str) {
    let list = list.split(',').filter(|c| !c.is_empty()).map(String::from);
    let _ = COMPRESSORS.set(list.collect());
}

/// The next client's rotation of the run's compressors, if it has any.
fn next_compressors() -> Option<String> {
    let list = COMPRESSORS.get().filter(|l| !l.is_empty())?;
    let n = CLIENTS.fetch_add(1, Ordering::Relaxed) % list.len();
    let mut rotated = list[n..].to_vec();
    rotated.extend_from_slice(&list[..n]);
    Some(rotated.join(","))
}

/// The mechanisms the runner's own credentials (`--auth`) can authenticate with.
const RUNNER_MECHANISMS: &[&str] = &["SCRAM-SHA-1", "SCRAM-SHA-256"];

/// The topology's URI with `uriOptions` as query parameters (overriding the URI's own).
/// The runner's credentials (the base URI's user info under `--auth`) stay, unless the
/// options name an `authMechanism` they cannot serve (MONGODB-OIDC, MONGODB-X509, ...).
pub fn client_uri(base: &str, options: &Document) -> Result<String, String> {
    let mechanism = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authMechanism"))
        .map(|(_, v)| v);
    let base = match mechanism {
        Some(Bson::String(m)) if RUNNER_MECHANISMS.contains(&m.as_str()) => base.to_string(),
        Some(_) => without_credentials(base),
        None => base.to_string(),
    };
    let base = base.as_str();
    let (head, query) = match base.split_once('?') {
        Some((h, q)) => (h.to_string(), q.to_string()),
        None if base.contains('/') && base.matches('/').count() > 2 => {
            (base.to_string(), String::new())
        }
        None => (format!("{base}/"), String::new()),
    };
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .filter(|(k, _)| !options.keys().any(|o| o.eq_ignore_ascii_case(k)))
        .collect();
    let named = |key: &str| {
        options.keys().any(|o| o.eq_ignore_ascii_case(key))
            || params.iter().any(|(k, _)| k.eq_ignore_ascii_case(key))
    };
    if !named("compressors") {
        if let Some(list) = next_compressors() {
            params.push(("compressors".to_string(), list));
        }
    }
    for (key, value) in options {
        match value {
            // readPreferenceTags: one parameter per tag set.
            Bson::Array(sets) => {
                for set in sets {
                    params.push((key.clone(), uri_value(key, set)?));
                }
            }
            other => params.push((key.clone(), uri_value(key, other)?)),
        }
    }
    if params.is_empty() {
        return Ok(head);
    }
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(format!("{head}?{}", query.join("&")))
}

/// `base` (credentials and options kept) connecting directly to `address` only.
pub fn direct(base: &str, address: &str) -> Result<String, String> {
    let (scheme, rest) = base
        .split_once("://")
        .ok_or_else(|| format!("not a URI: {base}"))?;
    let (authority, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let user = authority.rsplit_once('@').map_or("", |(u, _)| u);
    let at = if user.is_empty() { "" } else { "@" };
    let query = tail.split_once('?').map_or("", |(_, q)| q);
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.to_ascii_lowercase().starts_with("directconnection="))
        .collect();
    params.push("directConnection=true");
    Ok(format!(
        "{scheme}://{user}{at}{address}/?{}",
        params.join("&")
    ))
}

/// `mongodb://user:pw@host/...` without `user:pw@`.
fn without_credentials(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => uri.to_string(),
    }
}

fn uri_value(key: &str, v: &Bson) -> Result<String, String> {
    Ok(match v {
        Bson::String(s) => encode(s),
        Bson::Boolean(b) => b.to_string(),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) if d.fract() == 0.0 => format!("{}", *d as i64),
        Bson::Double(d) => d.to_string(),
        // authMechanismProperties, a tag set: `k:v,k:v`.
        Bson::Document(d) if super::matching::special(d).is_some() => {
            return Err(format!(
                "uriOptions.{key}: $$placeholder values are not supported"
            ))
        }
        Bson::Document(d) => {
            let pairs: Result<Vec<String>, String> = d
                .iter()
                .map(|(k, v)| Ok(format!("{}:{}", encode(k), uri_value(key, v)?)))
                .collect();
            pairs?.join(",")
        }
        other => return Err(format!("uriOptions.{key}: cannot put {other} in a URI")),
    })
}

/// Percent-encodes all but unreserved characters (and the `:`/`,` of tag sets).
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_keeps_credentials_and_options() {
        assert_eq!(
            direct("mongodb://u:p@a:1,b:2/?tls=true", "b:2").unwrap(),
            "mongodb://u:p@b:2/?tls=true&directConnection=true"
        );
        assert_eq!(
            direct("mongodb://a:1", "a:1").unwrap(),
            "mongodb://a:1/?directConnection=true"
        );
    }
    use bson::doc;

    #[test]
    fn uri_options_become_query_parameters() {
        let base = "mongodb://127.0.0.1:5/?replicaSet=rs0";
        assert_eq!(client_uri(base, &doc! {}).unwrap(), base);
        let uri = client_uri(
            base,
            &doc! { "retryWrites": false, "w": "majority", "timeoutMS": 250 },
        )
        .unwrap();
        assert_eq!(
            uri,
            "mongodb://127.0.0.1:5/?replicaSet=rs0&retryWrites=false&w=majority&timeoutMS=250"
        );
        let over = client_uri(base, &doc! { "replicaset": "other" }).unwrap();
        assert_eq!(over, "mongodb://127.0.0.1:5/?replicaset=other");
        let plain = client_uri("mongodb://127.0.0.1:5", &doc! { "appname": "my app" }).unwrap();
        assert_eq!(plain, "mongodb://127.0.0.1:5/?appname=my%20app");
    }

    #[test]
    fn runner_credentials_stay_unless_another_mechanism_is_named() {
        let base = "mongodb://u:p@127.0.0.1:5/?replicaSet=rs0";
        let uri = client_uri(base, &doc! { "appname": "a" }).unwrap();
        assert_eq!(uri, "mongodb://u:p@127.0.0.1:5/?replicaSet=rs0&appname=a");
        let scram = client_uri(base, &doc! { "authMechanism": "SCRAM-SHA-1" }).unwrap();
        assert_eq!(
            scram,
            "mongodb://u:p@127.0.0.1:5/?replicaSet=rs0&authMechanism=SCRAM-SHA-1"
        );
        let oidc = doc! { "authMechanism": "MONGODB-OIDC", "appName": "x" };
        assert_eq!(
            client_uri(base, &oidc).unwrap(),
            "mongodb://127.0.0.1:5/?replicaSet=rs0&authMechanism=MONGODB-OIDC&appName=x"
        );
        let x509 = client_uri(
            "mongodb://u:p@h:1",
            &doc! { "authmechanism": "MONGODB-X509" },
        );
        assert_eq!(x509.unwrap(), "mongodb://h:1/?authmechanism=MONGODB-X509");
        assert_eq!(without_credentials("mongodb://h:1/"), "mongodb://h:1/");
    }

    #[test]
    fn tag_sets_and_placeholders() {
        let tags = doc! { "readPreferenceTags": [{ "dc": "ny", "rack": 1 }, {}] };
        let uri = client_uri("mongodb://h:1/", &tags).unwrap();
        assert_eq!(
            uri,
            "mongodb://h:1/?readPreferenceTags=dc:ny,rack:1&readPreferenceTags="
        );
        let placeholder = doc! { "authMechanismProperties": { "$$placeholder": 1 } };
        assert!(client_uri("mongodb://h:1/", &placeholder)
            .unwrap_err()
            .contains("placeholder"));
    }
}

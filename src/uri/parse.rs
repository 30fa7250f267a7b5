//! The connection string grammar:
//! `scheme://[userinfo@]host[:port][,host[:port]...][/[database]][?key=value[&key=value...]]`

use std::net::Ipv6Addr;

use super::decode::{percent_decode, userinfo};
use super::options::OptionsBuilder;
use super::{auth, validate, ConnectionString, HostAddress, UriError};

/// The longest connection string accepted. Real ones are a few hundred bytes (long seed
/// lists and auth properties stay within a few KiB); 64 KiB keeps that headroom a
/// hundredfold while bounding the time, memory and warnings a hostile string can cost.
pub const MAX_URI_LEN: usize = 64 * 1024;

fn err<T>(message: impl Into<String>) -> Result<T, UriError> {
    Err(UriError::new(message))
}

pub(crate) fn parse(uri: &str) -> Result<ConnectionString, UriError> {
    if uri.len() > MAX_URI_LEN {
        return err(format!(
            "the connection string is {} bytes long; at most {MAX_URI_LEN} are accepted",
            uri.len()
        ));
    }
    let (srv, rest) = scheme(uri)?;

    // Host information ends at the first '/' or '?' (the slash before options is optional).
    let (host_info, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (path, query) = match tail.strip_prefix('/') {
        Some(t) => t.split_once('?').map_or((t, None), |(p, q)| (p, Some(q))),
        None => ("", tail.strip_prefix('?')),
    };
    if !host_info.contains('@') {
        misplaced_userinfo(path, query)?;
    }
    // Userinfo ends at the last '@': an '@' inside it is reported by `userinfo`.
    let (user, hosts_raw) = match host_info.rsplit_once('@') {
        Some((info, hosts)) => (Some(userinfo(info)?), hosts),
        None => (None, host_info),
    };
    if hosts_raw.is_empty() {
        return if tail.starts_with('/') && host_info.is_empty() {
            err(
                "no host given; UNIX domain socket paths must be URL encoded \
                 (e.g. %2Ftmp%2Fmongodb-27017.sock)",
            )
        } else {
            err("no host given")
        };
    }
    // A bad port may be the start of a password whose '/' or '?' was not
    // encoded only when an '@' comes later.
    let maybe_password = !host_info.contains('@') && tail.contains('@');
    let hosts = hosts_raw
        .split(',')
        .map(|raw| host(raw, maybe_password))
        .collect::<Result<Vec<_>, _>>()?;
    if srv {
        check_srv_host(&hosts)?;
    }

    let auth_database = database(path)?;

    let mut builder = OptionsBuilder::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return err(format!(
                "option {:?} has no '=': options must be key=value pairs",
                truncate(pair)
            ));
        };
        let key = percent_decode(key, "an option name")?;
        if key.is_empty() {
            return err("an option has an empty name");
        }
        let value = percent_decode(value, &format!("the value of option '{key}'"))?;
        builder.apply(&key, &value)?;
    }
    validate::check(srv, &hosts, &builder)?;

    let (username, password) = match user {
        // The '@' asks for authentication even when empty; no mechanism accepts "".
        Some((name, _)) if name.is_empty() => return err("the username must not be empty"),
        Some((name, password)) => (Some(name), password),
        None => (None, None),
    };
    let credential = auth::credential(
        username.as_deref(),
        password.as_deref(),
        auth_database.as_deref(),
        &builder.options,
    )?;
    Ok(ConnectionString {
        srv,
        hosts,
        username,
        password,
        auth_database,
        options: builder.options,
        credential,
        warnings: builder.warnings,
        invalid_values: builder.invalid,
    })
}

/// With no userinfo before the host list, an '@' after it ends a userinfo that held an
/// unencoded '/' or '?' (`user:pa?ss@host`): the start of the password would be read as a
/// port and its rest as a database or options. The connection string spec makes such a
/// string invalid; the error never echoes it. An '@' stays allowed in the value of a known
/// option (`?appName=a@b`); an unknown one could be a piece of the password.
fn misplaced_userinfo(path: &str, query: Option<&str>) -> Result<(), UriError> {
    let pair = query.and_then(|q| q.split('&').find(|pair| pair.contains('@')));
    let misplaced = path.contains('@')
        || pair.is_some_and(|pair| match pair.split_once('=') {
            None => true,
            Some((key, _)) => !percent_decode(key, "").is_ok_and(|k| super::options::is_known(&k)),
        });
    if misplaced {
        return err(
            "an '@' follows the host list: a '/', '?' or '@' in a username or password must \
             be percent-encoded (%2F, %3F, %40), and so must an '@' in the database name",
        );
    }
    Ok(())
}

/// Strips `mongodb://` or `mongodb+srv://` (schemes are case-insensitive).
fn scheme(uri: &str) -> Result<(bool, &str), UriError> {
    for (prefix, srv) in [("mongodb://", false), ("mongodb+srv://", true)] {
        if let (Some(head), Some(rest)) = (uri.get(..prefix.len()), uri.get(prefix.len()..)) {
            if head.eq_ignore_ascii_case(prefix) {
                return Ok((srv, rest));
            }
        }
    }
    err("the connection string must start with mongodb:// or mongodb+srv://")
}

/// One host identifier: `[v6]`, `[v6]:port`, `host`, `host:port` or an encoded socket path.
fn host(raw: &str, maybe_password: bool) -> Result<HostAddress, UriError> {
    if raw.is_empty() {
        return err("empty host in the host list");
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let Some((literal, after)) = inner.split_once(']') else {
            return err(format!("IP literal {:?} has no closing ']'", truncate(raw)));
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(port(p, maybe_password)?),
                None => return err(format!("unexpected text after ']' in {:?}", truncate(raw))),
            },
        };
        let literal = percent_decode(literal, "an IP literal")?;
        // A zone id follows '%' (written %25 in a URI).
        let address = literal.split_once('%').map_or(literal.as_str(), |(a, _)| a);
        if address.parse::<Ipv6Addr>().is_err() {
            return err(format!("{:?} is not an IPv6 address", truncate(&literal)));
        }
        // Lowercase the address only: zone ids can be case-sensitive interface names.
        let host = match literal.split_once('%') {
            Some((address, zone)) => format!("{}%{zone}", address.to_ascii_lowercase()),
            None => literal.to_ascii_lowercase(),
        };
        return Ok(HostAddress::Tcp { host, port });
    }
    // The port follows the first ':' ("host::27017" thus has the invalid port ":27017").
    let (name, port) = match raw.split_once(':') {
        Some((name, p)) => (name, Some(port(p, maybe_password)?)),
        None => (raw, None),
    };
    let name = percent_decode(name, "a host")?;
    if name.contains('/') {
        if port.is_some() || !name.ends_with(".sock") {
            return err(format!(
                "unsupported host {:?}: a UNIX domain socket path must end in .sock and \
                 have no port",
                truncate(&name)
            ));
        }
        return Ok(HostAddress::Unix { path: name });
    }
    if name.is_empty() {
        return err(format!("host {:?} has no name", truncate(raw)));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c.is_whitespace() || c.is_control() || "@:[]?#,%\\\"<>".contains(c))
    {
        return err(format!(
            "host {:?} contains the character {c:?}",
            truncate(&name)
        ));
    }
    Ok(HostAddress::Tcp {
        host: name.to_ascii_lowercase(),
        port,
    })
}

/// A decimal port in 1..=65535. The text is not echoed: after a password with an unencoded
/// '/', it would be part of the password, which is hinted at when that may be the cause.
fn port(p: &str, maybe_password: bool) -> Result<u16, UriError> {
    let valid = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    match p.parse::<u16>() {
        Ok(n) if valid && n != 0 => Ok(n),
        _ if maybe_password => err(
            "a host has an invalid port (expected an integer from 1 to 65535); reserved \
             characters in a username or password must be percent-encoded",
        ),
        _ => err("a host has an invalid port (expected an integer from 1 to 65535)"),
    }
}

/// `mongodb+srv`: exactly one host name, no port (seedlist discovery spec).
fn check_srv_host(hosts: &[HostAddress]) -> Result<(), UriError> {
    match hosts {
        [HostAddress::Tcp { host, port: None }] if !host.contains(':') => Ok(()),
        [HostAddress::Tcp { port: Some(_), .. }] => err("a mongodb+srv URI cannot give a port"),
        [_] => err("a mongodb+srv URI needs a host name, not an IP literal or socket path"),
        _ => err("a mongodb+srv URI must give exactly one host name"),
    }
}

/// The auth database: decoded, and free of the characters the spec prohibits. The name is
/// not echoed: after a username with an unencoded '/', it holds the password.
fn database(path: &str) -> Result<Option<String>, UriError> {
    let db = percent_decode(path, "the database name")?;
    if db.is_empty() {
        return Ok(None);
    }
    if let Some(c) = db.chars().find(|c| "/\\ \"$".contains(*c)) {
        return err(format!(
            "the database name contains the prohibited character {c:?}; reserved characters \
             in a username or password must be percent-encoded"
        ));
    }
    Ok(Some(db))
}

/// Keeps error messages short when the input is huge.
fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

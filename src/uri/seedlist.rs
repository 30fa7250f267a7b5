//! Initial DNS Seedlist Discovery, sans I/O: the names a `mongodb+srv` URI
//! asks DNS for, and how the SRV and TXT answers become the seed list and
//! default options. The lookups themselves are the caller's (`runtime::udp`
//! in the driver; canned records in tests).

use super::decode::percent_decode;
use super::options::OptionsBuilder;
use super::{auth, validate, ConnectionString, HostAddress, UriError};

/// One SRV answer (priority and weight are ignored, as the spec requires).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvTarget {
    pub host: String,
    pub port: u16,
}

/// The only options a TXT record may set.
const TXT_OPTIONS: [&str; 3] = ["authsource", "replicaset", "loadbalanced"];

fn err<T>(message: impl Into<String>) -> Result<T, UriError> {
    Err(UriError::new(message))
}

/// The SRV host name of a `mongodb+srv` URI.
pub fn host(cs: &ConnectionString) -> Result<&str, UriError> {
    match cs.hosts.as_slice() {
        [HostAddress::Tcp { host, port: None }] if cs.srv => Ok(host),
        _ => err("not a mongodb+srv URI with one host name"),
    }
}

/// The SRV query: `_{srvServiceName}._tcp.{hostname}`.
pub fn srv_query(cs: &ConnectionString) -> Result<String, UriError> {
    Ok(format!("_{}._tcp.{}", cs.srv_service_name(), host(cs)?))
}

/// Whether `target` (an SRV answer) may be used for the SRV name `srv_host`:
/// it must end in `.{domainname}`, where the domain drops the first label of
/// a name with three or more parts and is the whole name otherwise (so a
/// target of a short name has at least one more level).
pub fn shares_parent_domain(srv_host: &str, target: &str) -> bool {
    let srv_host = srv_host.trim_end_matches('.').to_ascii_lowercase();
    let target = target.trim_end_matches('.').to_ascii_lowercase();
    let domain = match srv_host.split_once('.') {
        Some((_, rest)) if rest.contains('.') => rest,
        _ => srv_host.as_str(),
    };
    target.len() > domain.len() + 1
        && target.ends_with(domain)
        && target.as_bytes()[target.len() - domain.len() - 1] == b'.'
}

/// Applies the SRV and TXT answers to a `mongodb+srv` URI: the hosts become
/// the SRV targets (each checked against the parent domain), the one TXT
/// record's options fill what the URI left unset, the topology rules are
/// checked again, and a positive `srvMaxHosts` keeps a random subset
/// (Fisher-Yates; `random(n)` returns a number in `0..n`).
///
/// `txt` holds one entry per TXT record, its strings already concatenated.
/// The result keeps `srv: true` (TLS still defaults to on).
pub fn apply(
    cs: &ConnectionString,
    srv: &[SrvTarget],
    txt: &[Vec<u8>],
    random: &mut dyn FnMut(usize) -> usize,
) -> Result<ConnectionString, UriError> {
    let name = host(cs)?.to_owned();
    if srv.is_empty() {
        return err(format!(
            "no SRV records for {}: the URI gives no hosts",
            srv_query(cs)?
        ));
    }
    let mut hosts: Vec<HostAddress> = Vec::with_capacity(srv.len());
    for t in srv {
        if !shares_parent_domain(&name, &t.host) {
            return err(format!(
                "the SRV record for {name} names host {:?}, which is not in its parent domain",
                t.host
            ));
        }
        if t.port == 0 {
            return err(format!("the SRV record for {name} gives port 0"));
        }
        let host = HostAddress::Tcp {
            host: t.host.trim_end_matches('.').to_ascii_lowercase(),
            port: Some(t.port),
        };
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }

    let mut out = cs.clone();
    let txt_options = match txt {
        [] => OptionsBuilder::default(),
        [one] => txt_record(&name, one)?,
        _ => {
            return err(format!(
                "{name} has {} TXT records; at most one is allowed",
                txt.len()
            ))
        }
    };
    // Options in the URI (or given in code) override the TXT record's.
    let o = &mut out.options;
    let t = txt_options.options;
    o.auth_source = o.auth_source.take().or(t.auth_source);
    o.replica_set = o.replica_set.take().or(t.replica_set);
    o.load_balanced = o.load_balanced.or(t.load_balanced);
    out.warnings.extend(txt_options.warnings);
    out.invalid_values.extend(txt_options.invalid);
    validate::topology(hosts.len(), true, &out.options)?;
    out.credential = auth::credential(
        out.username.as_deref(),
        out.password.as_deref(),
        out.auth_database.as_deref(),
        &out.options,
    )?;

    let max = out.options.srv_max_hosts.unwrap_or(0) as usize;
    if max > 0 && max < hosts.len() {
        for i in (1..hosts.len()).rev() {
            let j = random(i + 1).min(i);
            hosts.swap(i, j);
        }
        hosts.truncate(max);
    }
    out.hosts = hosts;
    Ok(out)
}

/// A TXT record's options: `key=value` pairs joined by `&`, percent-encoded like
/// a URI's. Only authSource, replicaSet and loadBalanced may appear; invalid
/// values are handled as in a URI (dropped, listed in `invalid`).
fn txt_record(name: &str, record: &[u8]) -> Result<OptionsBuilder, UriError> {
    let Ok(text) = std::str::from_utf8(record) else {
        return err(format!("the TXT record of {name} is not UTF-8"));
    };
    let mut b = OptionsBuilder::default();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return err(format!(
                "the TXT record of {name} is malformed: {pair:?} is not key=value"
            ));
        };
        let key = percent_decode(key, "a TXT record option name")?;
        if !TXT_OPTIONS.contains(&key.to_ascii_lowercase().as_str()) {
            return err(format!(
                "the TXT record of {name} sets {key:?}: only authSource, replicaSet and \
                 loadBalanced are allowed there"
            ));
        }
        let value = percent_decode(value, &format!("the TXT record's value of '{key}'"))?;
        b.apply(&key, &value)?;
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> SrvTarget {
        SrvTarget {
            host: host.into(),
            port,
        }
    }

    fn first(_: usize) -> usize {
        0
    }

    fn applied(uri: &str, srv: &[SrvTarget], txt: &[&str]) -> Result<ConnectionString, UriError> {
        let cs = super::super::parse(uri).expect("valid URI");
        let txt: Vec<Vec<u8>> = txt.iter().map(|t| t.as_bytes().to_vec()).collect();
        apply(&cs, srv, &txt, &mut first)
    }

    #[test]
    fn parent_domain_rules_including_short_names() {
        // Prose tests 1-4 of the seedlist spec.
        for (srv, ok) in [
            ("localhost", "test_1.localhost"),
            ("mongo.local", "test_1.mongo.local"),
            ("blogs.mongodb.com", "cluster.mongodb.com"),
            ("blogs.mongodb.com", "a.b.MONGODB.com."),
        ] {
            assert!(shares_parent_domain(srv, ok), "{srv} -> {ok}");
        }
        for (srv, bad) in [
            ("localhost", "localhost.mongodb"),
            ("mongo.local", "test_1.evil.local"),
            ("blogs.mongodb.com", "blogs.evil.com"),
            ("localhost", "localhost"),
            ("mongo.local", "mongo.local"),
            ("localhost", "test_1.cluster_1localhost"),
            ("mongo.local", "test_1.my_hostmongo.local"),
            ("blogs.mongodb.com", "cluster.testmongodb.com"),
            ("blogs.mongodb.com", "mongodb.com"),
            ("blogs.mongodb.com", ".mongodb.com"),
            ("blogs.mongodb.com", ""),
        ] {
            assert!(!shares_parent_domain(srv, bad), "{srv} -> {bad}");
        }
        assert!(shares_parent_domain("localhost", "a.localhost"));
        let e = applied(
            "mongodb+srv://localhost/?tls=false",
            &[target("localhost", 1)],
            &[],
        );
        assert!(e.unwrap_err().message.contains("parent domain"));
    }

    #[test]
    fn query_names() {
        let cs = super::super::parse("mongodb+srv://Test22.Example.com/?srvServiceName=customname")
            .unwrap();
        assert_eq!(
            srv_query(&cs).unwrap(),
            "_customname._tcp.test22.example.com"
        );
        let cs = super::super::parse("mongodb://a.example.com").unwrap();
        assert!(srv_query(&cs).is_err());
    }

    #[test]
    fn txt_options_are_defaults_the_uri_overrides() {
        let srv = [target("h1.example.com", 27017)];
        let cs = applied(
            "mongodb+srv://c.example.com/?authSource=uri",
            &srv,
            &["replicaSet=rs&authSource=txt"],
        )
        .unwrap();
        assert_eq!(cs.options.replica_set.as_deref(), Some("rs"));
        assert_eq!(cs.options.auth_source.as_deref(), Some("uri"));
        assert!(cs.tls_enabled());
        assert_eq!(cs.hosts[0].to_string(), "h1.example.com:27017");
        let cs = applied(
            "mongodb+srv://c.example.com/?tls=false",
            &srv,
            &["loadBalanced=true"],
        )
        .unwrap();
        assert_eq!(cs.options.load_balanced, Some(true));
        assert!(!cs.tls_enabled());
        // Percent-encoded values, as in a URI.
        let cs = applied("mongodb+srv://c.example.com", &srv, &["replicaSet=a%26b"]).unwrap();
        assert_eq!(cs.options.replica_set.as_deref(), Some("a&b"));
    }

    #[test]
    fn txt_errors() {
        let srv = [target("h1.example.com", 27017)];
        for (txt, why) in [
            (vec!["ssl=false"], "only authSource"),
            (vec!["socketTimeoutMS=500"], "only authSource"),
            (vec!["authSource"], "not key=value"),
            (vec!["replicaSet=a", "authSource=b"], "2 TXT records"),
            (vec!["replicaSet=%zz"], "percent"),
        ] {
            let e = applied("mongodb+srv://c.example.com", &srv, &txt).unwrap_err();
            assert!(e.message.contains(why), "{txt:?}: {}", e.message);
        }
        let cs = super::super::parse("mongodb+srv://c.example.com").unwrap();
        assert!(apply(&cs, &srv, &[vec![0xFF]], &mut first).is_err());
        // An invalid value is handled as in a URI: dropped and reported.
        let cs = applied("mongodb+srv://c.example.com", &srv, &["loadBalanced=maybe"]).unwrap();
        assert_eq!(cs.options.load_balanced, None);
        assert_eq!(cs.invalid_values.len(), 1);
    }

    #[test]
    fn rules_checked_again_with_the_records() {
        let two = [target("a.example.com", 1), target("b.example.com", 2)];
        let one = [target("a.example.com", 1)];
        for (uri, srv, txt) in [
            (
                "mongodb+srv://c.example.com/?loadBalanced=true",
                &two[..],
                &[][..],
            ),
            (
                "mongodb+srv://c.example.com/?replicaSet=rs",
                &one[..],
                &["loadBalanced=true"][..],
            ),
            (
                "mongodb+srv://c.example.com/?srvMaxHosts=1",
                &one[..],
                &["loadBalanced=true"][..],
            ),
            (
                "mongodb+srv://c.example.com/?srvMaxHosts=1",
                &one[..],
                &["replicaSet=rs"][..],
            ),
            ("mongodb+srv://c.example.com", &[][..], &[][..]),
        ] {
            assert!(applied(uri, srv, txt).is_err(), "{uri} {srv:?} {txt:?}");
        }
    }

    #[test]
    fn srv_max_hosts_keeps_a_random_subset() {
        let srv: Vec<SrvTarget> = (1..=5)
            .map(|i| target(&format!("h{i}.example.com"), 27017))
            .collect();
        let all = applied("mongodb+srv://c.example.com/?srvMaxHosts=0", &srv, &[]).unwrap();
        assert_eq!(all.hosts.len(), 5);
        let cs = super::super::parse("mongodb+srv://c.example.com/?srvMaxHosts=2").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..50usize {
            let mut x = seed;
            let mut random = |n: usize| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) % n
            };
            let out = apply(&cs, &srv, &[], &mut random).unwrap();
            assert_eq!(out.hosts.len(), 2);
            assert_ne!(out.hosts[0], out.hosts[1]);
            seen.extend(out.hosts.iter().map(|h| h.to_string()));
        }
        assert!(seen.len() > 2, "the subset varies: {seen:?}");
        // A random source out of range cannot index past the list.
        let out = apply(&cs, &srv, &[], &mut |_| usize::MAX).unwrap();
        assert_eq!(out.hosts.len(), 2);
    }
}

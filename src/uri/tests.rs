//! Unit tests for the grammar's tricky corners; the spec suites live in tests/uri_spec.rs.

use super::*;
use bson::Bson;

fn ok(uri: &str) -> ConnectionString {
    match parse(uri) {
        Ok(cs) => cs,
        Err(e) => panic!("{uri:?} should parse: {e}"),
    }
}

fn fails(uri: &str) -> String {
    match parse(uri) {
        Ok(cs) => panic!("{uri:?} should fail, got {cs:?}"),
        Err(e) => e.message,
    }
}

fn tcp(host: &str, port: Option<u16>) -> HostAddress {
    HostAddress::Tcp {
        host: host.into(),
        port,
    }
}

#[test]
fn percent_encoding_in_every_part() {
    let cs = ok("mongodb://us%3Aer:p%40ss%2Fw%25rd@h%C3%BCst/d%3Fb?appName=a%26b%3Dc");
    assert_eq!(cs.username.as_deref(), Some("us:er"));
    assert_eq!(cs.password.as_deref(), Some("p@ss/w%rd"));
    assert_eq!(cs.hosts, vec![tcp("hüst", None)]);
    assert_eq!(cs.auth_database.as_deref(), Some("d?b"));
    assert_eq!(cs.options.app_name.as_deref(), Some("a&b=c"));
    // '+' is not a space in a connection string.
    assert_eq!(ok("mongodb://a+b@h").username.as_deref(), Some("a+b"));
}

#[test]
fn bad_percent_escapes_are_errors() {
    for uri in [
        "mongodb://%",
        "mongodb://h%",
        "mongodb://h%4",
        "mongodb://h%zz",
        "mongodb://u%:p@h",
        "mongodb://h/db%",
        "mongodb://h/?appName=%G1",
        "mongodb://h/?app%Name=x",
    ] {
        fails(uri);
    }
}

#[test]
fn escapes_that_are_not_utf8_are_errors() {
    assert!(fails("mongodb://%FF%FE@h").contains("UTF-8"));
    assert!(fails("mongodb://h/?appName=%C3").contains("UTF-8"));
    fails("mongodb://h/%80");
    fails("mongodb://%ED%A0%80.example.com"); // an encoded UTF-16 surrogate
}

#[test]
fn ipv6_literals() {
    let cs = ok("mongodb://[::1],[FE80::1%25Eth0]:27018,[2001:db8::7]:1");
    assert_eq!(
        cs.hosts,
        vec![
            tcp("::1", None),
            tcp("fe80::1%Eth0", Some(27018)),
            tcp("2001:db8::7", Some(1)),
        ]
    );
    assert_eq!(cs.hosts[0].to_string(), "[::1]:27017");
    assert_eq!(cs.hosts[1].to_string(), "[fe80::1%Eth0]:27018");
    for uri in [
        "mongodb://[::1",
        "mongodb://[::1]x",
        "mongodb://[::1]:",
        "mongodb://[]",
        "mongodb://[not-ip]",
        "mongodb://[127.0.0.1]",
        "mongodb://::1",
        "mongodb://[::1]]",
    ] {
        fails(uri);
    }
}

#[test]
fn empty_hosts_are_errors() {
    for uri in [
        "mongodb://",
        "mongodb:///db",
        "mongodb://?w=1",
        "mongodb://u:p@",
        "mongodb://u:p@/db",
        "mongodb://a,,b",
        "mongodb://a,",
        "mongodb://,a",
        "mongodb://:27017",
    ] {
        fails(uri);
    }
}

#[test]
fn bad_ports() {
    for uri in [
        "mongodb://h:",
        "mongodb://h:0",
        "mongodb://h:65536",
        "mongodb://h:99999999999999999999",
        "mongodb://h:+1",
        "mongodb://h:-1",
        "mongodb://h: 1",
        "mongodb://h:1a",
        "mongodb://h:1:2",
        "mongodb://h:２",
    ] {
        fails(uri);
    }
    assert_eq!(ok("mongodb://h:65535").hosts, vec![tcp("h", Some(65535))]);
    assert_eq!(ok("mongodb://h:00080").hosts, vec![tcp("h", Some(80))]);
}

#[test]
fn errors_do_not_echo_a_password_fragment() {
    // The unencoded '/' ends the host list inside the password...
    let message = fails("mongodb://user:sec/ret@host");
    assert!(!message.contains("sec"), "{message}");
    // ...or inside the username, putting the password in the path.
    let message = fails("mongodb://us/er:secret@host/db");
    assert!(!message.contains("secret"), "{message}");
}

#[test]
fn hosts_are_lowercased_but_socket_paths_are_not() {
    let cs = ok("mongodb://Example.COM:1,%2FTmp%2FM.sock");
    assert_eq!(
        cs.hosts,
        vec![
            tcp("example.com", Some(1)),
            HostAddress::Unix {
                path: "/Tmp/M.sock".into()
            }
        ]
    );
    assert_eq!(cs.hosts[1].to_string(), "/Tmp/M.sock");
    fails("mongodb://%2Ftmp%2Fm.sock:27017");
    fails("mongodb://h%25x"); // a decoded '%' is not part of any host name
    fails("mongodb://h%3A1"); // nor a decoded ':'
    fails("mongodb://h%20x");
    fails("mongodb://%2Ftmp%2Fm.socket");
}

#[test]
fn scheme_and_srv_form() {
    assert!(ok("MongoDB+SRV://cluster0.example.net").srv);
    assert!(ok("mongodb+srv://localhost").tls_enabled());
    assert!(!ok("mongodb+srv://localhost/?tls=false").tls_enabled());
    assert!(!ok("mongodb://localhost").tls_enabled());
    assert_eq!(ok("mongodb+srv://a.b.c").srv_service_name(), "mongodb");
    for uri in [
        "mongodb+srv://a.b.c:27017",
        "mongodb+srv://a.b.c,d.b.c",
        "mongodb+srv://[::1]",
        "mongodb+srv://%2Ftmp%2Fm.sock",
        "mongodb+srv://a.b.c/?directConnection=true",
        "mongodb:/h",
        "mongodb+srv:/h",
        "http://h",
        "mongodb",
        "",
    ] {
        fails(uri);
    }
}

#[test]
fn options_grammar() {
    let cs = ok("mongodb://h/?&w=majority&&journal=true&");
    assert_eq!(cs.options.w, Some(W::Majority));
    assert_eq!(cs.options.journal, Some(true));
    assert!(cs.warnings.is_empty(), "{:?}", cs.warnings);
    fails("mongodb://h/?w");
    // An invalid tag set is dropped whole and leaves no empty list behind.
    let cs = ok("mongodb://h/?readPreference=nearest&readPreferenceTags=dc:ny,rack");
    assert_eq!(
        (cs.options.read_preference_tags, cs.warnings.len()),
        (None, 1)
    );
    fails("mongodb://h/?=1");
    // The value is everything after the first '='.
    assert_eq!(
        ok("mongodb://h/?appName=a=b").options.app_name.as_deref(),
        Some("a=b")
    );
    // Keys are case-insensitive.
    assert_eq!(ok("mongodb://h/?TIMEOUTms=5").options.timeout_ms, Some(5));
}

#[test]
fn cross_option_rules_beyond_the_suites() {
    for uri in [
        "mongodb://h/?w=0&journal=true",
        "mongodb://h/?readPreferenceTags=dc:ny",
        "mongodb://h/?readPreference=primary&maxStalenessSeconds=120",
        "mongodb://h/?tls=true&tls=false",
        "mongodb://h/?ssl=true&tls=TRUE&ssl=false",
        "mongodb://h/?tlsInsecure=invalid&tlsAllowInvalidCertificates=true",
        "mongodb://h/?authMechanismProperties=SERVICE_NAME:x",
        "mongodb://h/?authMechanism=MONGODB-CR",
        "mongodb://h/?authMechanism=NOPE",
        "mongodb://u@h/?authMechanism=PLAIN",
        "mongodb://u:p@h/?authMechanismProperties=SERVICE_NAME:x",
        "mongodb://u@h/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:gcp,TOKEN_RESOURCE:r",
        "mongodb://h/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:test,TOKEN_RESOURCE:r",
        "mongodb://u@h/?authMechanism=GSSAPI&authMechanismProperties=SERVICE_NAME:x,ALLOWED_HOSTS:y",
        "mongodb://@h",
        "mongodb://:p@h",
    ] {
        fails(uri);
    }
    assert!(
        ok("mongodb://h/?readPreference=primary&readPreferenceTags=")
            .warnings
            .is_empty()
    );
    assert!(ok("mongodb://h/?maxStalenessSeconds=-1")
        .warnings
        .is_empty());
    let cs = ok(
        "mongodb://u@h/?authMechanism=gssapi&authMechanismProperties=canonicalize_host_name:true",
    );
    let credential = cs.credential.expect("a credential");
    assert_eq!(credential.mechanism, Some(AuthMechanism::Gssapi));
    assert_eq!(credential.source, "$external");
    assert_eq!(credential.mechanism_properties.len(), 2); // + the default SERVICE_NAME
    assert_eq!(ok("mongodb://h/db?authSource=x").credential, None);
}

#[test]
fn invalid_values_warn_without_leaking_secrets() {
    let cs = ok("mongodb://h/?proxyHost=p&proxyUsername=u&proxyPassword=s3cret&timeoutMS=-1");
    assert_eq!(cs.options.timeout_ms, None);
    assert_eq!(cs.warnings.len(), 1);
    let cs = ok("mongodb://u@h/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:azure,TOKEN_RESOURCE:a,s3cret");
    assert!(!cs.warnings.is_empty());
    assert!(cs.warnings.iter().all(|w| !w.contains("s3cret")));
    let cs = ok(
        "mongodb://u:s3cret@h/?proxyHost=p&proxyUsername=u&proxyPassword=s3cret\
                 &tlsCertificateKeyFilePassword=s3cret&appName=shown",
    );
    let debug = format!("{cs:?}");
    assert!(
        !debug.contains("s3cret") && debug.contains("shown"),
        "{debug}"
    );
}

#[test]
fn integer_limits_never_panic() {
    for v in [
        "2147483648",
        "-2147483649",
        "9223372036854775808",
        "-0",
        "1e3",
        " 1",
    ] {
        let cs = ok(&format!(
            "mongodb://h/?connectTimeoutMS={v}&maxPoolSize={v}&w={v}"
        ));
        assert_eq!(cs.options.max_pool_size.is_some(), v == "-0");
    }
    assert_eq!(
        ok("mongodb://h/?wTimeoutMS=9223372036854775807")
            .options
            .w_timeout_ms,
        Some(i64::MAX as u64)
    );
    assert_eq!(ok("mongodb://h/?w=4294967296").options.w, None);
    assert_eq!(ok("mongodb://h/?w=-1").options.w, None);
}

#[test]
fn to_document_uses_lowercase_names() {
    let d =
        ok("mongodb://h/?ssl=true&w=2&readPreference=SECONDARY&readPreferenceTags=&wTimeoutMS=5")
            .options
            .to_document();
    assert_eq!(d.get("tls"), Some(&Bson::Boolean(true)));
    assert_eq!(d.get("w"), Some(&Bson::Int32(2)));
    assert_eq!(
        d.get("readpreference"),
        Some(&Bson::String("secondary".into()))
    );
    assert_eq!(
        d.get("readpreferencetags"),
        Some(&Bson::Array(vec![Bson::Document(Default::default())]))
    );
    assert_eq!(d.get("wtimeoutms"), Some(&Bson::Int32(5)));
}

#[test]
fn garbage_never_panics() {
    let long = format!("mongodb://{}", "a".repeat(MAX_URI_LEN - 10));
    assert_eq!(ok(&long).hosts.len(), 1);
    let many = format!("mongodb://h/?{}", "w=1&".repeat(10_000));
    assert_eq!(ok(&many).warnings.len(), 9_999);
    let _ = parse(&format!("mongodb://{}", "%".repeat(100_000)));
    let _ = parse(&format!("mongodb://{}", "[".repeat(100_000)));
    // Deterministic pseudo-random strings over the grammar's special characters.
    let alphabet: Vec<char> = "mongodb+srv:/?&=@,[]%:.2F5a0ü\u{0}\u{7f} "
        .chars()
        .collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut s = String::from(if seed.is_multiple_of(3) {
            "mongodb+srv://"
        } else {
            "mongodb://"
        });
        for _ in 0..(seed % 40) {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            s.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
        }
        let _ = parse(&s);
    }
}

#[test]
fn an_over_long_uri_is_refused_up_front() {
    let huge = format!("mongodb://{}", "a".repeat(1 << 20));
    assert!(fails(&huge).contains("at most 65536"), "{}", fails(&huge));
    // 100k distinct keys: refused before any option is looked at.
    let keys: String = (0..100_000).map(|i| format!("k{i}=1&")).collect();
    let started = std::time::Instant::now();
    let message = fails(&format!("mongodb://h/?{keys}"));
    assert!(message.contains("bytes long"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    let at_cap = format!("mongodb://{}", "a".repeat(MAX_URI_LEN - "mongodb://".len()));
    assert_eq!(ok(&at_cap).hosts.len(), 1);
    fails(&format!("{at_cap}a"));
}

#[test]
fn distinct_option_keys_cost_linear_time() {
    // Below the parser's length cap, but straight to the options builder: a list
    // of seen keys searched per key took 57 s for 100k keys; a set takes well under 1 s
    // (5 s is a bound a loaded machine keeps, and the quadratic version misses).
    let started = std::time::Instant::now();
    let mut builder = options::OptionsBuilder::default();
    for i in 0..100_000 {
        builder.apply(&format!("unknownOption{i}"), "1").unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(builder.warnings.len(), 100_000);
    assert!(builder.given("unknownoption99999"));
    assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
    // As many keys as fit under the cap parse quickly too.
    let keys: String = (0..5_000).map(|i| format!("k{i}=1&")).collect();
    assert_eq!(ok(&format!("mongodb://h/?{keys}")).warnings.len(), 5_000);
}

#[test]
fn reserved_characters_in_userinfo_are_errors_that_never_echo_the_password() {
    for uri in [
        // '?' ends the host list: "pa" or "12" would be read as a port...
        "mongodb://user:pa?Qz@host:27017/",
        "mongodb://user:12?Qz@host:27017/",
        "mongodb://user:12?Qz@host:27017/?appName=x",
        "mongodb://user:12?Qz=x@host:27017/",
        "mongodb://us?Qz:pass@host/",
        // ...and so does '/', putting the rest of the password in the database name.
        "mongodb://user:12/Qz@host:27017/",
        "mongodb://user:12/Qz=@host/",
        "mongodb://user:12/Qz?x=1@host/",
        "mongodb://user:12/?Qz@host/",
        // '#', '[', ']', a second ':' and a second '@' stay in the userinfo.
        "mongodb://user:pa#Qz@host/",
        "mongodb://user:pa[Qz@host/",
        "mongodb://user:pa]Qz@host/",
        "mongodb://user:pa:Qz@host/",
        "mongodb://user:pa@Qz@host/",
    ] {
        let message = fails(uri);
        assert!(!message.contains("Qz"), "{uri}: {message}");
        assert!(message.contains("encoded"), "{uri}: {message}");
    }
    let cs = ok("mongodb://user:pa%3Fss%2F%40@host:27017/");
    assert_eq!(cs.password.as_deref(), Some("pa?ss/@"));
    // An '@' in an option's value is fine where it cannot be a password's end.
    assert_eq!(
        ok("mongodb://h/?appName=a@b").options.app_name.as_deref(),
        Some("a@b")
    );
    assert_eq!(
        ok("mongodb://h?appName=a@b").options.app_name.as_deref(),
        Some("a@b")
    );
    assert_eq!(ok("mongodb://u@h/?unknown=a@b").warnings.len(), 1);
    // Without userinfo, an unknown key there may be a password's piece: refused.
    fails("mongodb://h/?unknown=a@b");
    // Encoded in the database name, it is allowed.
    assert_eq!(
        ok("mongodb://h/d%40b").auth_database.as_deref(),
        Some("d@b")
    );
}

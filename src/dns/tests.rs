//! Byte-vector tests: well-formed replies, and hostile ones that must fail cleanly.

use super::*;

const ID: u16 = 0xBEEF;
const SRV_NAME: &str = "_mongodb._tcp.test1.test.build.10gen.cc";

/// The header of a reply with `flags` and counts (one question).
fn header(id: u16, flags: u16, ancount: u16) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&ancount.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m
}

fn name(m: &mut Vec<u8>, name: &str) {
    for label in name.split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
}

/// A reply to `qname`/`rtype` with the given answer records (owner: a pointer to the question).
fn reply(flags: u16, qname: &str, rtype: RecordType, answers: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = header(ID, flags, answers.len() as u16);
    name(&mut m, qname);
    m.extend_from_slice(&rtype.code().to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    for (kind, rdata) in answers {
        m.extend_from_slice(&[0xC0, 12]);
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0x0E, 0x10]);
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(rdata);
    }
    m
}

fn srv_rdata(port: u16, target: &str) -> Vec<u8> {
    let mut d = vec![0, 1, 0, 5];
    d.extend_from_slice(&port.to_be_bytes());
    name(&mut d, target);
    d
}

const OK: u16 = 0x8180; // QR, RD, RA

#[test]
fn a_query_has_the_id_rd_and_one_question() {
    let q = query(0x1234, "test1.example.com.", RecordType::Txt).unwrap();
    assert_eq!(&q[..12], &[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&q[12..31], b"\x05test1\x07example\x03com\x00");
    assert_eq!(&q[31..], &[0, 16, 0, 1]);
    for bad in ["", ".", "a..b", &format!("{}.com", "x".repeat(64))] {
        assert!(
            matches!(query(1, bad, RecordType::A), Err(DnsError::BadName(_))),
            "{bad:?}"
        );
    }
    let long = vec!["abcdefghi"; 26].join(".");
    assert!(long.len() > 255);
    assert!(query(1, &long, RecordType::A).is_err());
}

#[test]
fn srv_answers_with_compressed_owner_and_target() {
    // The second target points into the first record's target.
    let mut m = reply(
        OK,
        SRV_NAME,
        RecordType::Srv,
        &[(33, srv_rdata(27017, "localhost.test.build.10gen.cc"))],
    );
    let first_target = m.len() - "localhost.test.build.10gen.cc".len() - 2;
    let mut rdata = vec![0, 0, 0, 0, 0x69, 0x8A];
    rdata.extend_from_slice(&[0xC0 | (first_target >> 8) as u8, first_target as u8]);
    m.extend_from_slice(&[0xC0, 12, 0, 33, 0, 1, 0, 0, 0, 60, 0, rdata.len() as u8]);
    m.extend_from_slice(&rdata);
    m[7] = 2;
    let r = parse_reply(&m, ID, SRV_NAME, RecordType::Srv).unwrap();
    assert!(!r.truncated);
    // 3600 s and 60 s: the smaller one is the answer's.
    assert_eq!(r.ttl, Some(60));
    assert_eq!(
        r.answers,
        vec![
            Record::Srv {
                priority: 1,
                weight: 5,
                port: 27017,
                target: "localhost.test.build.10gen.cc".into()
            },
            Record::Srv {
                priority: 0,
                weight: 0,
                port: 27018,
                target: "localhost.test.build.10gen.cc".into()
            },
        ]
    );
}

#[test]
fn txt_strings_concatenate_and_other_types_are_skipped() {
    let txt = b"\x08replicaS\x06et=rep\x02l0".to_vec();
    let cname = {
        let mut d = Vec::new();
        name(&mut d, "elsewhere.example");
        d
    };
    let m = reply(
        OK,
        "test11.test.build.10gen.cc",
        RecordType::Txt,
        &[(5, cname), (16, txt), (16, vec![])],
    );
    let r = parse_reply(&m, ID, "TEST11.test.build.10gen.cc.", RecordType::Txt).unwrap();
    assert_eq!(
        r.answers,
        vec![
            Record::Txt(b"replicaSet=repl0".to_vec()),
            Record::Txt(vec![])
        ]
    );
}

#[test]
fn a_and_aaaa() {
    let m = reply(OK, "h.example", RecordType::A, &[(1, vec![127, 0, 0, 1])]);
    assert_eq!(
        parse_reply(&m, ID, "h.example", RecordType::A)
            .unwrap()
            .answers,
        vec![Record::A(Ipv4Addr::LOCALHOST)]
    );
    let mut six = vec![0; 16];
    six[15] = 1;
    let m = reply(OK, "h.example", RecordType::Aaaa, &[(28, six)]);
    assert_eq!(
        parse_reply(&m, ID, "h.example", RecordType::Aaaa)
            .unwrap()
            .answers,
        vec![Record::Aaaa(Ipv6Addr::LOCALHOST)]
    );
    let m = reply(OK, "h.example", RecordType::A, &[(1, vec![127, 0, 1])]);
    assert!(matches!(
        parse_reply(&m, ID, "h.example", RecordType::A),
        Err(DnsError::Malformed(_))
    ));
}

#[test]
fn rcodes_and_truncation() {
    let nx = reply(0x8183, SRV_NAME, RecordType::Srv, &[]);
    assert_eq!(
        parse_reply(&nx, ID, SRV_NAME, RecordType::Srv),
        Err(DnsError::NxDomain)
    );
    let fail = reply(0x8182, SRV_NAME, RecordType::Srv, &[]);
    assert_eq!(
        parse_reply(&fail, ID, SRV_NAME, RecordType::Srv),
        Err(DnsError::ServFail)
    );
    let refused = reply(0x8185, SRV_NAME, RecordType::Srv, &[]);
    assert_eq!(
        parse_reply(&refused, ID, SRV_NAME, RecordType::Srv),
        Err(DnsError::Rcode(5))
    );
    // A server that gives up may omit the question.
    let mut bare = header(ID, 0x8182, 0);
    bare[5] = 0;
    assert_eq!(
        parse_reply(&bare, ID, SRV_NAME, RecordType::Srv),
        Err(DnsError::ServFail)
    );
    // TC: the partial answer is not read; the caller asks over TCP.
    let mut tc = reply(
        OK | 0x0200,
        SRV_NAME,
        RecordType::Srv,
        &[(33, srv_rdata(1, "a.b"))],
    );
    tc.truncate(tc.len() - 3);
    let r = parse_reply(&tc, ID, SRV_NAME, RecordType::Srv).unwrap();
    assert!(r.truncated && r.answers.is_empty());
}

#[test]
fn replies_to_other_queries_are_not_ours() {
    let good = reply(OK, SRV_NAME, RecordType::Srv, &[]);
    assert!(parse_reply(&good, ID, SRV_NAME, RecordType::Srv).is_ok());
    let cases: Vec<(Vec<u8>, u16, &str, RecordType)> = vec![
        (good.clone(), ID ^ 1, SRV_NAME, RecordType::Srv),
        (
            good.clone(),
            ID,
            "_mongodb._tcp.other.example",
            RecordType::Srv,
        ),
        (good.clone(), ID, SRV_NAME, RecordType::Txt),
        (
            reply(0x0100, SRV_NAME, RecordType::Srv, &[]),
            ID,
            SRV_NAME,
            RecordType::Srv,
        ),
        (
            reply(OK | 0x0800, SRV_NAME, RecordType::Srv, &[]),
            ID,
            SRV_NAME,
            RecordType::Srv,
        ),
        (good[..11].to_vec(), ID, SRV_NAME, RecordType::Srv),
    ];
    for (m, id, name, rtype) in cases {
        assert!(
            matches!(parse_reply(&m, id, name, rtype), Err(DnsError::NotOurs(_))),
            "{m:?} {name} {rtype}"
        );
    }
}

#[test]
fn hostile_replies_fail_without_panicking() {
    let q = SRV_NAME;
    let base = reply(OK, q, RecordType::Srv, &[(33, srv_rdata(27017, "a.b.c"))]);
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();

    // A pointer to itself, and two pointers pointing at each other.
    let mut m = base.clone();
    let target = m.len() - 7; // the SRV target's first byte
    m[target] = 0xC0 | (target >> 8) as u8;
    m[target + 1] = target as u8;
    cases.push(("self pointer", m));
    let mut m = header(ID, OK, 0);
    let at = m.len();
    m.extend_from_slice(&[0xC0, (at + 2) as u8, 0xC0, at as u8]);
    cases.push(("pointer loop in the question", m));
    // A forward pointer.
    let mut m = base.clone();
    let owner = HEADER + q.len() + 2 + 4;
    m[owner + 1] = 0xFF;
    cases.push(("forward pointer", m));
    // A pointer past the end.
    let mut m = base.clone();
    m[target] = 0xFF;
    m[target + 1] = 0xFF;
    cases.push(("pointer out of bounds", m));
    // Label types 01 and 10.
    let mut m = base.clone();
    m[target] = 0x41;
    cases.push(("extended label", m));
    // Every cut of a valid reply.
    for cut in HEADER + q.len() + 6..base.len() {
        cases.push(("truncated record", base[..cut].to_vec()));
    }
    // rdlength beyond the message, or not filled by the target.
    let mut m = base.clone();
    let rdlen = owner + 10;
    m[rdlen + 1] += 1;
    cases.push(("rdlength past the end", m));
    let mut m = base.clone();
    m[rdlen + 1] -= 1;
    m.pop();
    cases.push(("rdlength cuts the target", m));
    // 65535 answers announced in a short message.
    let mut m = base.clone();
    m[6] = 0xFF;
    m[7] = 0xFF;
    cases.push(("huge answer count", m));
    // A name over 255 bytes through chained labels.
    let mut m = header(ID, OK, 0);
    for _ in 0..5 {
        m.push(63);
        m.extend_from_slice(&[b'a'; 63]);
    }
    m.push(0);
    m.extend_from_slice(&[0, 33, 0, 1]);
    cases.push(("name over 255 bytes", m));
    // A target with a dot or a slash inside a label.
    let mut d = vec![0, 0, 0, 0, 0, 1, 3];
    d.extend_from_slice(b"a/b\x00");
    cases.push(("bad target byte", reply(OK, q, RecordType::Srv, &[(33, d)])));
    // A TXT string longer than its record.
    cases.push((
        "txt overrun",
        reply(
            OK,
            "t.example",
            RecordType::Txt,
            &[(16, b"\x09short".to_vec())],
        ),
    ));

    for (what, m) in cases {
        let name = if what == "txt overrun" {
            "t.example"
        } else {
            q
        };
        let rtype = if what == "txt overrun" {
            RecordType::Txt
        } else {
            RecordType::Srv
        };
        match parse_reply(&m, ID, name, rtype) {
            Err(DnsError::Malformed(_)) | Err(DnsError::NotOurs(_)) => {}
            other => panic!("{what}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    // A deterministic generator: every byte string is either parsed or refused.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let good = reply(
        OK,
        SRV_NAME,
        RecordType::Srv,
        &[(33, srv_rdata(27017, "a.b.c"))],
    );
    for _ in 0..20_000 {
        let mut m = good.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % m.len();
            m[i] = (x >> 32) as u8;
        }
        x ^= x << 13;
        m.truncate((x as usize) % (m.len() + 1));
        let _ = parse_reply(&m, ID, SRV_NAME, RecordType::Srv);
    }
}

/// A TTL with the top bit set counts as 0 (RFC 2181 8); no answers, no TTL.
#[test]
fn the_ttl_is_the_smallest_and_a_negative_one_is_zero() {
    let mut m = reply(
        OK,
        SRV_NAME,
        RecordType::Srv,
        &[(33, srv_rdata(1, "a.b.c"))],
    );
    let at = m.len() - srv_rdata(1, "a.b.c").len() - 6;
    m[at..at + 4].copy_from_slice(&[0x80, 0, 0, 1]);
    let r = parse_reply(&m, ID, SRV_NAME, RecordType::Srv).unwrap();
    assert_eq!(r.ttl, Some(0));
    let m = reply(OK, SRV_NAME, RecordType::Srv, &[]);
    assert_eq!(
        parse_reply(&m, ID, SRV_NAME, RecordType::Srv).unwrap().ttl,
        None
    );
}

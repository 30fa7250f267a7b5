//! The conversation driven by scripted server replies (the RFC 7677 vector
//! with its fixed nonce), negotiation and the speculative document shapes.

use super::*;
use bson::{rawdoc, Bson};

const PASSWORD: &str = "pencil";
const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn auth(uri: &str) -> Authenticator {
    let cs = crate::uri::parse(uri).unwrap();
    Authenticator::new(cs.credential.expect("a credential")).unwrap()
}

fn bin(s: &str) -> Binary {
    binary(s.as_bytes().to_vec())
}

/// Runs key derivation to its end (no deadline), as conn does between its
/// deadline checks.
fn derived(conv: &mut Conversation<'_>, mut step: Step) -> Result<Step> {
    while step == Step::Derive {
        step = conv.derive(u32::MAX)?;
    }
    Ok(step)
}

/// `Authenticator::after_hello`, key derivation run to its end.
fn after_hello<'a>(
    a: &'a Authenticator,
    hello: HelloAuth<'a>,
    reply: &RawDocument,
    nonce: impl FnOnce() -> String,
) -> Result<(Conversation<'a>, Step)> {
    let (mut conv, step) = a.after_hello(hello, reply, nonce)?;
    let step = derived(&mut conv, step)?;
    Ok((conv, step))
}

/// `Conversation::reply`, key derivation run to its end.
fn answer(conv: &mut Conversation<'_>, r: &RawDocument) -> Result<Step> {
    let step = conv.reply(r)?;
    derived(conv, step)
}

fn no_nonce() -> String {
    panic!("no new conversation was expected")
}

fn sent(step: Step) -> RawDocumentBuf {
    match step {
        Step::Send(cmd) => cmd,
        other => panic!("expected a command, not {other:?}"),
    }
}

fn payload_text(cmd: &RawDocument) -> String {
    String::from_utf8(cmd.get_binary("payload").unwrap().bytes.to_vec()).unwrap()
}

#[test]
fn negotiation_prefers_sha256_and_defaults_to_sha1() {
    let mechs = |m: Bson| {
        let mut d = rawdoc! { "ok": 1 };
        d.append(cstr!("saslSupportedMechs"), RawBson::try_from(m).unwrap());
        negotiate(&d)
    };
    use AuthMechanism::*;
    assert_eq!(
        mechs(bson::bson!(["SCRAM-SHA-1", "SCRAM-SHA-256"])),
        ScramSha256
    );
    assert_eq!(mechs(bson::bson!(["SCRAM-SHA-1"])), ScramSha1);
    assert_eq!(
        mechs(bson::bson!(["PLAIN"])),
        ScramSha1,
        "never PLAIN by default"
    );
    assert_eq!(
        mechs(bson::bson!(["NEW-MECH", 5])),
        ScramSha1,
        "unknown entries are fine"
    );
    assert_eq!(
        mechs(bson::bson!("SCRAM-SHA-256")),
        ScramSha1,
        "not an array"
    );
    assert_eq!(negotiate(&rawdoc! { "ok": 1 }), ScramSha1, "absent");
}

#[test]
fn negotiated_hello_asks_for_mechanisms_and_speculates_sha256() {
    let a = auth("mongodb://us%2Cer:pencil@h/app");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    assert_eq!(hello.sasl_supported_mechs.as_deref(), Some("app.us,er"));
    let spec = hello.speculative.unwrap();
    assert_eq!(
        spec,
        rawdoc! {
            "saslStart": 1,
            "mechanism": "SCRAM-SHA-256",
            "payload": bin("n,,n=us=2Cer,r=rOprNGfwEbeRWgbNEkqO"),
            "autoAuthorize": 1,
            "options": { "skipEmptyExchange": true },
            "db": "app",
        }
    );
}

#[test]
fn explicit_mechanisms_shape_the_hello() {
    let a = auth("mongodb://user:pencil@h/?authMechanism=SCRAM-SHA-1");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    assert_eq!(hello.sasl_supported_mechs, None);
    let spec = hello.speculative.unwrap();
    assert_eq!(spec.get_str("mechanism").unwrap(), "SCRAM-SHA-1");
    assert_eq!(spec.get_str("db").unwrap(), "admin");

    let a = auth("mongodb://h/?authMechanism=MONGODB-X509");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    assert_eq!(hello.sasl_supported_mechs, None);
    assert_eq!(
        hello.speculative.unwrap(),
        rawdoc! { "authenticate": 1, "mechanism": "MONGODB-X509" }
    );
    let a = auth("mongodb://CN%3Dclient@h/?authMechanism=MONGODB-X509");
    let spec = a
        .hello_fields(|| NONCE.into())
        .unwrap()
        .speculative
        .unwrap();
    assert_eq!(spec.get_str("user").unwrap(), "CN=client");

    let a = auth("mongodb://user:pencil@h/?authMechanism=PLAIN");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    assert!(hello.speculative.is_none() && hello.sasl_supported_mechs.is_none());
}

#[test]
fn speculative_sha256_conversation_saves_the_saslstart() {
    let a = auth("mongodb://user:pencil@h/");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    let reply = rawdoc! {
        "ok": 1,
        "saslSupportedMechs": ["SCRAM-SHA-256"],
        "speculativeAuthenticate": {
            "conversationId": 1, "done": false, "payload": bin(SERVER_FIRST),
        },
    };
    let (mut conv, step) = after_hello(&a, hello, &reply, no_nonce).unwrap();
    assert_eq!(conv.mechanism(), AuthMechanism::ScramSha256);
    assert_eq!(conv.db(), "admin");
    let cmd = sent(step);
    assert_eq!(cmd.get_i32("saslContinue").unwrap(), 1);
    assert_eq!(cmd.get_i32("conversationId").unwrap(), 1);
    assert_eq!(payload_text(&cmd), CLIENT_FINAL);
    let last = rawdoc! { "ok": 1, "conversationId": 1, "done": true, "payload": bin(SERVER_FINAL) };
    assert_eq!(answer(&mut conv, &last).unwrap(), Step::Done);
    assert_eq!(a.cache().derivations(), 1);
}

#[test]
fn a_second_client_of_the_same_user_skips_pbkdf2() {
    let conversation = |a: &Authenticator| {
        let hello = a.hello_fields(|| NONCE.into()).unwrap();
        let reply = rawdoc! {
            "ok": 1,
            "speculativeAuthenticate": {
                "conversationId": 1, "done": false, "payload": bin(SERVER_FIRST),
            },
        };
        let (mut conv, step) = after_hello(a, hello, &reply, no_nonce).unwrap();
        assert_eq!(payload_text(&sent(step)), CLIENT_FINAL);
        let last =
            rawdoc! { "ok": 1, "conversationId": 1, "done": true, "payload": bin(SERVER_FINAL) };
        assert_eq!(answer(&mut conv, &last).unwrap(), Step::Done);
    };
    let first = auth("mongodb://user:pencil@h/");
    conversation(&first);
    let second = auth("mongodb://user:pencil@h/?appName=other");
    // One instance, one cache: the second client sees the first's run...
    assert_eq!(second.cache().derivations(), 1);
    conversation(&second);
    // ...and its proof came from it.
    assert_eq!(second.cache().derivations(), 1);
}

#[test]
fn without_a_speculative_answer_the_negotiated_mechanism_starts_over() {
    let a = auth("mongodb://user:pencil@h/");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    let reply = rawdoc! { "ok": 1, "saslSupportedMechs": ["SCRAM-SHA-1"] };
    let (conv, step) = after_hello(&a, hello, &reply, || "fresh".into()).unwrap();
    assert_eq!(conv.mechanism(), AuthMechanism::ScramSha1);
    let cmd = sent(step);
    assert_eq!(cmd.get_str("mechanism").unwrap(), "SCRAM-SHA-1");
    assert_eq!(payload_text(&cmd), "n,,n=user,r=fresh");
    assert!(
        cmd.get("db").unwrap().is_none(),
        "db is only for the speculative form"
    );
    assert_eq!(
        cmd.get_document("options").unwrap(),
        rawdoc! { "skipEmptyExchange": true }.as_ref()
    );
}

#[test]
fn full_conversation_with_the_pre_4_4_empty_exchange() {
    let a = auth("mongodb://user:pencil@h/?authMechanism=SCRAM-SHA-256");
    let hello = a.hello_fields(|| "unused".into()).unwrap();
    let (mut conv, step) = after_hello(&a, hello, &rawdoc! { "ok": 1 }, || NONCE.into()).unwrap();
    assert_eq!(
        payload_text(&sent(step)),
        "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    );
    let step = answer(
        &mut conv,
        &rawdoc! { "ok": 1, "conversationId": 7_i64, "done": false, "payload": bin(SERVER_FIRST) },
    )
    .unwrap();
    let cmd = sent(step);
    assert_eq!(cmd.get_i64("conversationId").unwrap(), 7, "echoed as sent");
    assert_eq!(payload_text(&cmd), CLIENT_FINAL);
    let step = answer(
        &mut conv,
        &rawdoc! { "ok": 1, "conversationId": 7_i64, "done": false, "payload": bin(SERVER_FINAL) },
    )
    .unwrap();
    assert_eq!(payload_text(&sent(step)), "");
    assert_eq!(
        answer(
            &mut conv,
            &rawdoc! { "ok": 1, "conversationId": 7_i64, "done": true, "payload": bin("") }
        )
        .unwrap(),
        Step::Done
    );
}

fn started(uri: &str) -> (Authenticator, RawDocumentBuf) {
    (
        auth(uri),
        rawdoc! { "ok": 1, "speculativeAuthenticate": {
        "conversationId": 1, "done": false, "payload": bin(SERVER_FIRST) } },
    )
}

#[test]
fn a_refusal_is_an_authentication_error_with_the_code_and_without_the_password() {
    let (a, reply) = started("mongodb://user:pencil@h/");
    let (mut conv, _) = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .unwrap();
    let e = answer(&mut conv, &rawdoc! { "ok": 0, "errmsg": "Authentication failed.", "code": 18, "codeName": "AuthenticationFailed" })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert_eq!(e.code, Some(18));
    assert_eq!(e.code_name.as_deref(), Some("AuthenticationFailed"));
    assert!(e.message.contains("SCRAM-SHA-256"), "{e}");
    assert!(e.message.contains("\"user\""), "{e}");
    assert!(e.message.contains("Authentication failed."), "{e}");
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(PASSWORD), "{shown}");
}

#[test]
fn a_tampered_signature_fails_the_conversation() {
    let (a, reply) = started("mongodb://user:pencil@h/");
    let (mut conv, _) = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .unwrap();
    let forged = SERVER_FINAL.replace("v=6", "v=7");
    let e = answer(
        &mut conv,
        &rawdoc! { "ok": 1, "conversationId": 1, "done": true, "payload": bin(&forged) },
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert!(e.message.contains("signature"), "{e}");
}

#[test]
fn a_server_that_skips_its_proof_is_refused() {
    let a = auth("mongodb://user:pencil@h/");
    let reply = rawdoc! { "ok": 1, "speculativeAuthenticate": {
    "conversationId": 1, "done": true, "payload": bin(SERVER_FIRST) } };
    let e = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .err()
    .expect("done before the server's proof");
    assert!(e.message.contains("before proving"), "{e}");
    // No conversationId: malformed.
    let reply = rawdoc! { "ok": 1, "speculativeAuthenticate": { "done": false, "payload": bin(SERVER_FIRST) } };
    let e = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .err()
    .unwrap();
    assert!(e.message.contains("conversationId"), "{e}");
    // No payload.
    let reply =
        rawdoc! { "ok": 1, "speculativeAuthenticate": { "conversationId": 1, "done": false } };
    let e = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .err()
    .unwrap();
    assert!(e.message.contains("payload"), "{e}");
}

#[test]
fn x509_speculation_answered_is_done_and_plain_is_one_step() {
    let a = auth("mongodb://h/?authMechanism=MONGODB-X509");
    let reply = rawdoc! { "ok": 1, "speculativeAuthenticate": { "dbname": "$external", "user": "CN=client" } };
    let (_, step) = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &reply,
        no_nonce,
    )
    .unwrap();
    assert_eq!(step, Step::Done);

    let (mut conv, step) = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &rawdoc! { "ok": 1 },
        no_nonce,
    )
    .unwrap();
    assert_eq!(
        sent(step),
        rawdoc! { "authenticate": 1, "mechanism": "MONGODB-X509" }
    );
    assert_eq!(conv.db(), "$external");
    assert_eq!(
        answer(&mut conv, &rawdoc! { "ok": 1, "user": "CN=client" }).unwrap(),
        Step::Done
    );

    let a = auth("mongodb://user:pencil@h/?authMechanism=PLAIN");
    let (mut conv, step) = after_hello(
        &a,
        a.hello_fields(|| NONCE.into()).unwrap(),
        &rawdoc! { "ok": 1 },
        no_nonce,
    )
    .unwrap();
    assert_eq!(
        sent(step).get_binary("payload").unwrap().bytes,
        b"\0user\0pencil"
    );
    assert_eq!(conv.db(), "$external");
    assert_eq!(
        answer(
            &mut conv,
            &rawdoc! { "ok": 1, "conversationId": 1, "done": true, "payload": bin("") }
        )
        .unwrap(),
        Step::Done
    );
}

#[test]
fn a_failed_hello_is_an_authentication_error() {
    let a = auth("mongodb://user:pencil@h/");
    let server = crate::error::check_ok(
        &rawdoc! { "ok": 0, "errmsg": "no", "code": 11, "codeName": "UserNotFound" },
    )
    .unwrap_err();
    let e = a.hello_failed(server);
    assert_eq!((e.kind, e.code), (ErrorKind::Authentication, Some(11)));
    let net = a.hello_failed(Error::network("closed"));
    assert_eq!(net.kind, ErrorKind::Network, "a network error stays one");
    // A hello refused for shutdown is the server's state, not the credential's.
    let shutdown = crate::error::check_ok(
        &rawdoc! { "ok": 0, "errmsg": "shutting down", "code": 91, "codeName": "ShutdownInProgress" },
    )
    .unwrap_err();
    let e = a.hello_failed(shutdown);
    assert_eq!((e.kind, e.code), (ErrorKind::Server, Some(91)));
}

#[test]
fn a_password_sasl_prep_refuses_is_not_speculated_when_negotiated() {
    // U+0007 is prohibited by SASLprep, which only SCRAM-SHA-256 applies.
    let a = auth("mongodb://user:bell%07@h/");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    assert!(hello.speculative.is_none());
    assert!(hello.sasl_supported_mechs.is_some());
    let reply = rawdoc! { "ok": 1, "saslSupportedMechs": ["SCRAM-SHA-1"] };
    let (conv, _) = after_hello(&a, hello, &reply, || "n".into()).unwrap();
    assert_eq!(conv.mechanism(), AuthMechanism::ScramSha1);

    let a = auth("mongodb://user:bell%07@h/?authMechanism=SCRAM-SHA-256");
    let e = a
        .hello_fields(|| NONCE.into())
        .err()
        .expect("SASLprep refuses");
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert!(!e.message.contains("bell"), "{e}");
}

#[test]
fn unimplemented_mechanisms_are_refused_up_front() {
    let cs = crate::uri::parse("mongodb://u@h/?authMechanism=GSSAPI").unwrap();
    let e = Authenticator::new(cs.credential.unwrap()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotImplemented);
    assert!(e.message.contains("GSSAPI"));
}

#[test]
fn nonces_are_printable_and_comma_free() {
    let n = nonce_from(&[0xfb, 0xff, 0x2c, 0x00, 0x01, 0x02]);
    assert!(
        n.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b','),
        "{n}"
    );
    assert_eq!(nonce_from(&[0; NONCE_BYTES as usize]).len(), 32);
}

/// The server-first message makes the conversation derive its keys in
/// slices (4096 iterations: the first with the setup, 4095 in 4 slices of
/// 1024), and only then send the client-final message.
#[test]
fn key_derivation_comes_in_slices_before_the_client_final_message() {
    let a = auth("mongodb://user:pencil@h/?authMechanism=SCRAM-SHA-256");
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    let reply = rawdoc! { "ok": 1, "speculativeAuthenticate": {
    "conversationId": 3, "done": false, "payload": bin(SERVER_FIRST) } };
    let (mut conv, step) = a.after_hello(hello, &reply, no_nonce).unwrap();
    assert_eq!(step, Step::Derive);
    for _ in 0..3 {
        assert_eq!(conv.derive(1024).unwrap(), Step::Derive);
    }
    let cmd = sent(conv.derive(1024).unwrap());
    assert_eq!(cmd.get_i32("conversationId").unwrap(), 3);
    assert_eq!(payload_text(&cmd), CLIENT_FINAL);
    let e = conv.derive(1024).unwrap_err();
    assert!(e.message.contains("out of turn"), "{e}");
    // A second connection finds the keys: one call, no iterations.
    let hello = a.hello_fields(|| NONCE.into()).unwrap();
    let (mut conv, step) = a.after_hello(hello, &reply, no_nonce).unwrap();
    assert_eq!(step, Step::Derive);
    assert_eq!(payload_text(&sent(conv.derive(0).unwrap())), CLIENT_FINAL);
    assert_eq!(a.cache().derivations(), 1);
}

#[test]
fn a_command_follows_the_proof_only_when_every_condition_holds() {
    let scram = auth("mongodb://user:pencil@h/?authMechanism=SCRAM-SHA-256");
    let plain = auth("mongodb://user:pencil@h/?authMechanism=PLAIN");
    let answered = rawdoc! {
        "ok": 1,
        "speculativeAuthenticate": { "conversationId": 1, "done": false, "payload": bin(SERVER_FIRST) },
    };
    let unanswered = rawdoc! { "ok": 1 };
    let suspended = |a: &Authenticator| a.hello_fields(|| NONCE.into()).unwrap().suspend();
    let s = suspended(&scram);
    assert!(command_may_follow_proof(true, s.as_ref(), &answered, true));
    // TLS did not verify the server; the server did not speculate (pre-4.4);
    // the command has a side effect.
    assert!(!command_may_follow_proof(
        false,
        s.as_ref(),
        &answered,
        true
    ));
    assert!(!command_may_follow_proof(
        true,
        s.as_ref(),
        &unanswered,
        true
    ));
    assert!(!command_may_follow_proof(
        true,
        s.as_ref(),
        &answered,
        false
    ));
    // No conversation begun in the hello, or not SCRAM (PLAIN has no speculative form).
    assert!(!command_may_follow_proof(true, None, &answered, true));
    let p = suspended(&plain);
    assert!(!command_may_follow_proof(true, p.as_ref(), &answered, true));
}

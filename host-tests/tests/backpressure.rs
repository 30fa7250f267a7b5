//! Client Backpressure through the failpoint proxy in front of nx-27017: an
//! overload error (SystemOverloadedError + RetryableError) is retried at most
//! maxAdaptiveRetries times, after a jittered backoff, and never past timeoutMS.

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    CommandEventKind, Error, ErrorKind,
};
use host_tests::guest::find_options;
use std::time::{Duration, Instant};

/// Slack for a loaded 2-core machine (compiling, other suites running).
const TOLERANCE: Duration = Duration::from_millis(2000);

type Setup = host_tests::guest::ProxiedCollection;

fn setup(test: &str, uri_options: &str) -> Setup {
    host_tests::guest::proxied_collection(&format!("backpressure_{test}"), uri_options)
}

/// Every `find` answers IngressRequestRateLimitExceeded, labelled overloaded.
fn overload_finds(s: &mut Setup, extra: bson::RawDocumentBuf) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": "alwaysOn",
        "data": {
            "failCommands": ["find"],
            "errorCode": 462,
            "errorLabels": ["SystemOverloadedError", "RetryableError"],
            "errorExtraInfo": extra,
        },
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    s.guest.take_events(s.client).unwrap();
}

fn failing_find(s: &mut Setup) -> Error {
    s.guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("every find is refused")
}

fn finds_started(s: &mut Setup) -> usize {
    let events = s.guest.take_events(s.client).unwrap();
    events
        .iter()
        .filter(|e| e.command_name == "find" && e.kind == CommandEventKind::Started)
        .count()
}

fn assert_overload(err: &Error) {
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::Server, Some(462)),
        "{err:?}"
    );
    for label in ["SystemOverloadedError", "RetryableError"] {
        assert!(err.labels.iter().any(|l| l == label), "{label}: {err:?}");
    }
}

#[test]
fn overload_errors_are_retried_twice_with_backoff() {
    let mut s = setup("twice", "");
    overload_finds(&mut s, rawdoc! {});
    // Backoffs are jitter × 200 ms and jitter × 400 ms: 300 ms on average per
    // operation, below 600 ms. Five operations make the lower bound safe.
    let runs = 5;
    let started = Instant::now();
    for _ in 0..runs {
        let one = Instant::now();
        let err = failing_find(&mut s);
        assert_overload(&err);
        assert_eq!(finds_started(&mut s), 3, "MAX_RETRIES + 1 attempts");
        assert!(
            one.elapsed() < Duration::from_millis(600) + TOLERANCE,
            "{:?}",
            one.elapsed()
        );
    }
    let total = started.elapsed();
    assert!(
        total >= Duration::from_millis(300),
        "retries waited a backoff: {total:?} for {runs} operations"
    );
}

#[test]
fn max_adaptive_retries_caps_the_retries() {
    let mut s = setup("one", "?maxAdaptiveRetries=1");
    overload_finds(&mut s, rawdoc! {});
    assert_overload(&failing_find(&mut s));
    assert_eq!(finds_started(&mut s), 2);

    let mut s = setup("none", "?maxAdaptiveRetries=0");
    overload_finds(&mut s, rawdoc! {});
    assert_overload(&failing_find(&mut s));
    assert_eq!(finds_started(&mut s), 1);
}

#[test]
fn retry_reads_false_turns_overload_retries_off_for_reads() {
    let mut s = setup("off", "?retryReads=false");
    overload_finds(&mut s, rawdoc! {});
    assert_overload(&failing_find(&mut s));
    assert_eq!(finds_started(&mut s), 1);
}

#[test]
fn a_backoff_past_the_deadline_is_not_taken() {
    // baseBackoffMS 10 s: each backoff is jitter × 10 s, so with timeoutMS=300
    // only a jitter below 3% fits; a driver that slept through it (or to the
    // deadline and then tried again) would take seconds or time out.
    let mut s = setup("deadline", "?timeoutMS=300");
    overload_finds(&mut s, rawdoc! { "baseBackoffMS": 10_000 });
    let started = Instant::now();
    let err = failing_find(&mut s);
    let elapsed = started.elapsed();
    assert_overload(&err);
    assert!(
        elapsed < Duration::from_millis(300) + TOLERANCE,
        "stopped at the deadline: {elapsed:?}"
    );
    let attempts = finds_started(&mut s);
    assert!((1..=3).contains(&attempts), "{attempts} attempts");
}

#[test]
fn an_overloaded_get_more_is_retried_on_its_cursor() {
    // The spec's getMore-retried.json cannot run on nx-27017 (skips.txt): the same check here.
    let mut s = setup("getmore", "");
    for x in 2..=3 {
        s.guest
            .insert_one(
                s.coll,
                &rawdoc! { "x": x },
                &host_tests::guest::no_options(),
            )
            .unwrap()
            .unwrap();
    }
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 2 },
        "data": {
            "failCommands": ["getMore"],
            "errorCode": 2,
            "errorLabels": ["RetryableError", "SystemOverloadedError"],
        },
    };
    s.guest.run_command(admin, &fp, None).unwrap().unwrap();
    let opts = FindOptions {
        batch_size: Some(2),
        ..find_options()
    };
    let cursor = s.guest.find(s.coll, &rawdoc! {}, &opts).unwrap().unwrap();
    let mut seen = 0;
    loop {
        let batch = s
            .guest
            .next_batch(cursor)
            .unwrap()
            .expect("retried getMore");
        seen += batch.documents.len();
        if batch.exhausted {
            break;
        }
    }
    assert_eq!(seen, 3);
    let events = s.guest.take_events(s.client).unwrap();
    let get_mores: Vec<_> = events
        .iter()
        .filter(|e| e.command_name == "getMore")
        .map(|e| e.kind)
        .collect();
    use CommandEventKind::*;
    assert_eq!(
        get_mores,
        [Started, Failed, Started, Failed, Started, Succeeded]
    );
}

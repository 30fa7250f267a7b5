//! Log messages as a client entity observes them (`observeLogMessages`) and
//! `expectLogMessages` (unified test format, "expectedLogMessagesForClient").
//! The data of a message is matched with the same rules as events and
//! results (`matching::matches`, as a root document).

use super::matching::{matches, Lookup};
use crate::bindings::exports::mongo_wasi::driver::types::{
    LogComponent, LogLevel, LogMessage, LogOptions,
};
use bson::{Bson, Document};

/// One message as the runner keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct LogObserved {
    pub component: &'static str,
    pub level: &'static str,
    pub data: Document,
}

impl LogObserved {
    pub fn from_wit(m: &LogMessage) -> Result<LogObserved, String> {
        let data = Document::from_reader(&m.data[..])
            .map_err(|e| format!("log message {:?}: data is not BSON: {e}", m.message))?;
        Ok(LogObserved {
            component: component_name(m.component),
            level: level_name(m.level),
            data,
        })
    }
}

pub fn component_name(c: LogComponent) -> &'static str {
    match c {
        LogComponent::Command => "command",
        LogComponent::Topology => "topology",
        LogComponent::ServerSelection => "serverSelection",
        LogComponent::Connection => "connection",
    }
}

pub fn level_name(l: LogLevel) -> &'static str {
    match l {
        LogLevel::Off => "off",
        LogLevel::Emergency => "emergency",
        LogLevel::Alert => "alert",
        LogLevel::Critical => "critical",
        LogLevel::Error => "error",
        LogLevel::Warning => "warning",
        LogLevel::Notice => "notice",
        LogLevel::Informational => "info",
        LogLevel::Debug => "debug",
        LogLevel::Trace => "trace",
    }
}

fn level(name: &str) -> Result<LogLevel, String> {
    Ok(match name {
        "off" => LogLevel::Off,
        "emergency" => LogLevel::Emergency,
        "alert" => LogLevel::Alert,
        "critical" => LogLevel::Critical,
        "error" => LogLevel::Error,
        "warn" | "warning" => LogLevel::Warning,
        "notice" => LogLevel::Notice,
        "info" | "informational" => LogLevel::Informational,
        "debug" => LogLevel::Debug,
        "trace" => LogLevel::Trace,
        other => return Err(format!("observeLogMessages: unknown level {other:?}")),
    })
}

/// A client entity's `observeLogMessages` as the client option (`None`
/// when absent: the client logs nothing).
pub fn options(client: &Document) -> Result<Option<LogOptions>, String> {
    let Some(spec) = client.get("observeLogMessages") else {
        return Ok(None);
    };
    let spec = spec
        .as_document()
        .ok_or("observeLogMessages is not a document")?;
    let mut o = LogOptions {
        command: None,
        topology: None,
        server_selection: None,
        connection: None,
        max_document_length: None,
    };
    for (component, value) in spec {
        let l = level(
            value
                .as_str()
                .ok_or("observeLogMessages: a level is a string")?,
        )?;
        match component.as_str() {
            "command" => o.command = Some(l),
            "topology" => o.topology = Some(l),
            "serverSelection" => o.server_selection = Some(l),
            "connection" => o.connection = Some(l),
            other => return Err(format!("observeLogMessages: unknown component {other:?}")),
        }
    }
    Ok(Some(o))
}

/// Whether `expected` (an expectedLogMessage) matches `actual`: level and
/// component equal, `data` as a root document, and `failureIsRedacted`.
pub fn message_matches(
    expected: &Document,
    actual: &LogObserved,
    lookup: &dyn Lookup,
) -> Result<(), String> {
    let want_level = expected.get_str("level").map_err(|_| "no level")?;
    if level(want_level)? != level(actual.level)? {
        return Err(format!(
            "level: expected {want_level}, got {}",
            actual.level
        ));
    }
    let want_component = expected.get_str("component").map_err(|_| "no component")?;
    if want_component != actual.component {
        return Err(format!(
            "component: expected {want_component}, got {}",
            actual.component
        ));
    }
    let data = expected.get("data").ok_or("no data")?;
    matches(
        data,
        Some(&Bson::Document(actual.data.clone())),
        true,
        lookup,
    )
    .map_err(|m| format!("data{}", m.trim_start_matches('$')))?;
    if let Ok(redacted) = expected.get_bool("failureIsRedacted") {
        let failure = actual
            .data
            .get_str("failure")
            .map_err(|_| "failureIsRedacted: the message has no failure")?;
        // The driver's redaction keeps a server error's code and replaces
        // its text (monitoring::redact_failure).
        if failure.contains("(redacted)") != redacted {
            return Err(format!(
                "failureIsRedacted {redacted}, but the failure is {failure:?}"
            ));
        }
    }
    Ok(())
}

/// One expectedLogMessagesForClient against the client's messages: those
/// matching an `ignoreMessages` entry are dropped, then the rest must match
/// in order, with no more unless `ignoreExtraMessages`.
pub fn check(expected: &Document, got: &[LogObserved], lookup: &dyn Lookup) -> Result<(), String> {
    let want = expected
        .get_array("messages")
        .map_err(|_| "expectLogMessages entry without messages")?;
    let ignore: Vec<&Document> = match expected.get_array("ignoreMessages") {
        Ok(list) => list.iter().filter_map(Bson::as_document).collect(),
        Err(_) => Vec::new(),
    };
    let extra_ok = expected.get_bool("ignoreExtraMessages").unwrap_or(false);
    let got: Vec<&LogObserved> = got
        .iter()
        .filter(|m| !ignore.iter().any(|i| message_matches(i, m, lookup).is_ok()))
        .collect();
    let count_ok = match extra_ok {
        true => got.len() >= want.len(),
        false => got.len() == want.len(),
    };
    if !count_ok {
        return Err(format!(
            "expected {} messages, got {}: {}",
            want.len(),
            got.len(),
            summary(&got)
        ));
    }
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let w = w
            .as_document()
            .ok_or("an expected message is not a document")?;
        message_matches(w, g, lookup)
            .map_err(|m| format!("message {i}: {m}; got {}", summary(&got)))?;
    }
    Ok(())
}

fn summary(got: &[&LogObserved]) -> String {
    let names: Vec<&str> = got
        .iter()
        .map(|m| m.data.get_str("message").unwrap_or("?"))
        .collect();
    format!("[{}]", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unified::matching::NoEntities;
    use bson::doc;

    fn msg(message: &str, extra: Document) -> LogObserved {
        let mut data = doc! { "message": message };
        data.extend(extra);
        LogObserved {
            component: "command",
            level: "debug",
            data,
        }
    }

    #[test]
    fn messages_match_in_order_after_ignored_ones() {
        let got = [
            msg(
                "Command started",
                doc! { "commandName": "ping", "requestId": 3 },
            ),
            msg("Heartbeat", doc! {}),
            msg("Command succeeded", doc! { "reply": "{\"ok\":1}" }),
        ];
        let expected = doc! {
            "client": "c",
            "messages": [
                { "level": "debug", "component": "command",
                  "data": { "message": "Command started", "commandName": "ping" } },
                { "level": "debug", "component": "command",
                  "data": { "message": "Command succeeded",
                            "reply": { "$$matchAsDocument": { "ok": 1 } } } },
            ],
            "ignoreMessages": [
                { "level": "debug", "component": "command", "data": { "message": "Heartbeat" } }
            ],
        };
        check(&expected, &got, &NoEntities).unwrap();
        let mut strict = expected.clone();
        strict.remove("ignoreMessages");
        assert!(
            check(&strict, &got, &NoEntities).is_err(),
            "an extra message fails"
        );
        strict.insert("ignoreExtraMessages", true);
        assert!(
            check(&strict, &got, &NoEntities).is_err(),
            "extras only at the end"
        );
        let mut wrong = expected.clone();
        wrong.insert(
            "messages",
            vec![Bson::Document(
                doc! { "level": "info", "component": "command",
                "data": { "message": "Command started" } },
            )],
        );
        wrong.insert("ignoreExtraMessages", true);
        assert!(
            check(&wrong, &got, &NoEntities).is_err(),
            "the level must match"
        );
    }

    #[test]
    fn failure_is_redacted_is_checked() {
        let redacted = msg(
            "Command failed",
            doc! { "failure": "Server: the server's error for a sensitive command (redacted) (code 18)" },
        );
        let plain = msg(
            "Command failed",
            doc! { "failure": "Network: connection closed" },
        );
        let want = |r: bool| {
            doc! { "level": "debug", "component": "command", "failureIsRedacted": r,
            "data": { "message": "Command failed", "failure": { "$$exists": true } } }
        };
        message_matches(&want(true), &redacted, &NoEntities).unwrap();
        message_matches(&want(false), &plain, &NoEntities).unwrap();
        assert!(message_matches(&want(true), &plain, &NoEntities).is_err());
        assert!(message_matches(&want(false), &redacted, &NoEntities).is_err());
    }

    #[test]
    fn observe_log_messages_becomes_the_client_option() {
        let o =
            options(&doc! { "observeLogMessages": { "command": "debug", "connection": "info" } })
                .unwrap()
                .unwrap();
        assert_eq!(o.command, Some(LogLevel::Debug));
        assert_eq!(o.connection, Some(LogLevel::Informational));
        assert_eq!(o.topology, None);
        assert!(options(&doc! {}).unwrap().is_none());
        assert!(options(&doc! { "observeLogMessages": { "nope": "debug" } }).is_err());
    }
}

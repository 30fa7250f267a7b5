//! `expectError`: the assertions about an error a driver operation returned.

use super::matching::{self, Lookup};
use super::operations::OpError;
use crate::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind};
use bson::{Bson, Document};

/// The server reply an error carries, decoded.
pub fn reply(e: &Error) -> Option<Document> {
    e.reply
        .as_ref()
        .and_then(|b| Document::from_reader(b.as_slice()).ok())
}

/// One line describing a driver error, for failure reasons.
pub fn describe(e: &Error) -> String {
    let mut s = format!("{:?} error: {}", e.kind, e.message);
    if let Some(code) = e.code {
        s.push_str(&format!(" (code {code}"));
        if let Some(name) = &e.code_name {
            s.push_str(&format!(" {name}"));
        }
        s.push(')');
    }
    if !e.labels.is_empty() {
        s.push_str(&format!(" labels {:?}", e.labels));
    }
    s
}

/// Not derived from a server response: validation, network, selection, deadline.
pub fn is_client_error(e: &Error) -> bool {
    let server = matches!(
        e.kind,
        ErrorKind::Server | ErrorKind::DuplicateKey | ErrorKind::WriteConcern
    );
    !server && e.reply.is_none()
}

/// The errors a reply aggregates: itself, its write errors, its write concern error.
fn nested(reply: &Document) -> Vec<&Document> {
    let mut out = vec![reply];
    if let Ok(list) = reply.get_array("writeErrors") {
        out.extend(list.iter().filter_map(Bson::as_document));
    }
    if let Ok(wce) = reply.get_document("writeConcernError") {
        out.push(wce);
    }
    out
}

/// Checks every assertion of an `expectedError` document; the first that fails says why.
pub fn check(expected: &Document, e: &OpError, lookup: &dyn Lookup) -> Result<(), String> {
    let reply = reply(e);
    let nested = reply.as_ref().map(nested).unwrap_or_default();
    let fail = |what: String| Err(format!("{what}; the error was {}", describe(e)));
    for (key, want) in expected {
        match key.as_str() {
            "isError" => {}
            "isClientError" => {
                let want = want.as_bool().ok_or("isClientError needs a bool")?;
                if is_client_error(e) != want {
                    return fail(format!("expected isClientError {want}"));
                }
            }
            "isTimeoutError" => {
                let want = want.as_bool().ok_or("isTimeoutError needs a bool")?;
                if (e.kind == ErrorKind::Timeout) != want {
                    return fail(format!("expected isTimeoutError {want}"));
                }
            }
            "errorContains" => {
                let want = want.as_str().ok_or("errorContains needs a string")?;
                let needle = want.to_lowercase();
                let in_reply = nested
                    .iter()
                    .filter_map(|d| d.get_str("errmsg").ok())
                    .any(|m| m.to_lowercase().contains(&needle));
                if !e.message.to_lowercase().contains(&needle) && !in_reply {
                    return fail(format!("expected the message to contain {want:?}"));
                }
            }
            "errorCode" => {
                let want = matching::number(want).ok_or("errorCode needs a number")?;
                let codes = nested
                    .iter()
                    .filter_map(|d| d.get("code").and_then(matching::number));
                let mut all = e.code.map(f64::from).into_iter().chain(codes);
                if !all.any(|c| c == want) {
                    return fail(format!("expected error code {want}"));
                }
            }
            "errorCodeName" => {
                let want = want.as_str().ok_or("errorCodeName needs a string")?;
                let names = nested.iter().filter_map(|d| d.get_str("codeName").ok());
                let mut all = e.code_name.as_deref().into_iter().chain(names);
                if !all.any(|n| n.eq_ignore_ascii_case(want)) {
                    return fail(format!("expected code name {want}"));
                }
            }
            "errorLabelsContain" | "errorLabelsOmit" => {
                let labels = want.as_array().ok_or(format!("{key} needs an array"))?;
                let contain = key == "errorLabelsContain";
                for label in labels.iter().filter_map(Bson::as_str) {
                    if e.labels.iter().any(|l| l == label) != contain {
                        let verb = if contain { "to have" } else { "not to have" };
                        return fail(format!("expected the error {verb} label {label}"));
                    }
                }
            }
            "errorResponse" => {
                let Some(reply) = &reply else {
                    return fail(
                        "expected a server response (errorResponse), there is none".into(),
                    );
                };
                matching::matches(want, Some(&Bson::Document(reply.clone())), true, lookup)
                    .map_err(|m| format!("errorResponse: {m}"))?;
            }
            // A partial result (BulkWriteException.writeResult / partialResult):
            // the client bulk-write-error's `partial-result`, else the
            // bulk-write-error's (insert-many and bulk-write), else nothing.
            "expectResult" => {
                use crate::unified::operations::{client, collection};
                let partial = match (&e.client_partial_result, &e.partial_result) {
                    (Some(r), _) => Some(Bson::Document(
                        client::client_result_document(r).map_err(|f| f.0)?,
                    )),
                    (None, Some(r)) => Some(Bson::Document(
                        collection::bulk_result_document(r).map_err(|f| f.0)?,
                    )),
                    (None, None) => None,
                };
                matching::matches(want, partial.as_ref(), true, lookup)
                    .map_err(|m| format!("expectError.expectResult: {m}"))?
            }
            // Client bulk write: the write errors by model index, each
            // matched; exactly the indexes expected.
            "writeErrors" => {
                let want = want.as_document().ok_or("writeErrors needs a document")?;
                let mut got = Document::new();
                for w in &e.write_errors {
                    let mut d = bson::doc! { "code": w.code, "message": w.message.as_str() };
                    if let Some(details) = w
                        .details
                        .as_ref()
                        .and_then(|b| Document::from_reader(b.as_slice()).ok())
                    {
                        d.insert("details", details);
                    }
                    got.insert(w.index.to_string(), d);
                }
                if got.len() != want.len() {
                    return fail(format!(
                        "expected {} write errors, got {} ({got})",
                        want.len(),
                        got.len()
                    ));
                }
                // Each error is a root document: extra fields are allowed.
                for (index, w) in want {
                    matching::matches(w, got.get(index), true, lookup)
                        .map_err(|m| format!("expectError.writeErrors.{index}: {m}"))?;
                }
            }
            // The write concern errors in order, each matched.
            "writeConcernErrors" => {
                let got: Vec<Bson> = e
                    .write_concern_errors
                    .iter()
                    .map(|w| {
                        let mut d = bson::doc! { "code": w.code, "message": w.message.as_str() };
                        if let Some(details) = w
                            .details
                            .as_ref()
                            .and_then(|b| Document::from_reader(b.as_slice()).ok())
                        {
                            d.insert("details", details);
                        }
                        Bson::Document(d)
                    })
                    .collect();
                let want = want.as_array().ok_or("writeConcernErrors needs an array")?;
                if want.len() != got.len() {
                    return fail(format!(
                        "expected {} write concern errors, got {}",
                        want.len(),
                        got.len()
                    ));
                }
                for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                    matching::matches(w, Some(g), true, lookup)
                        .map_err(|m| format!("expectError.writeConcernErrors[{i}]: {m}"))?;
                }
            }
            other => return Err(format!("unknown expectError field {other:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unified::matching::NoEntities;
    use bson::{doc, rawdoc};

    fn server_error() -> Error {
        let reply = rawdoc! {
            "ok": 1, "n": 0,
            "writeErrors": [{ "index": 0, "code": 11000, "codeName": "DuplicateKey", "errmsg": "E11000 duplicate key" }],
        };
        Error {
            kind: ErrorKind::Server,
            code: Some(11000),
            code_name: None,
            labels: vec!["RetryableWriteError".into()],
            message: "write failed".into(),
            cause: None,
            reply: Some(reply.as_bytes().to_vec()),
        }
    }

    fn run(expected: Document, e: &Error) -> Result<(), String> {
        check(&expected, &OpError::from(e.clone()), &NoEntities)
    }

    #[test]
    fn codes_names_and_messages_look_into_write_errors() {
        let e = server_error();
        run(
            doc! { "isError": true, "isClientError": false, "errorCode": 11000 },
            &e,
        )
        .unwrap();
        run(doc! { "errorCodeName": "duplicatekey" }, &e).unwrap();
        run(doc! { "errorContains": "E11000 DUPLICATE" }, &e).unwrap();
        run(doc! { "errorContains": "WRITE FAILED" }, &e).unwrap();
        let err = run(doc! { "errorCode": 2 }, &e).unwrap_err();
        assert!(
            err.contains("expected error code 2") && err.contains("11000"),
            "{err}"
        );
    }

    #[test]
    fn labels_and_kinds() {
        let e = server_error();
        run(doc! { "errorLabelsContain": ["RetryableWriteError"] }, &e).unwrap();
        run(
            doc! { "errorLabelsOmit": ["TransientTransactionError"] },
            &e,
        )
        .unwrap();
        assert!(run(doc! { "errorLabelsOmit": ["RetryableWriteError"] }, &e).is_err());
        assert!(run(doc! { "isTimeoutError": true }, &e).is_err());
        let timeout = Error {
            kind: ErrorKind::Timeout,
            reply: None,
            ..server_error()
        };
        run(
            doc! { "isTimeoutError": true, "isClientError": true },
            &timeout,
        )
        .unwrap();
    }

    #[test]
    fn error_response_is_a_root_match_and_partial_results_must_be_optional() {
        let e = server_error();
        run(doc! { "errorResponse": { "n": 0 } }, &e).unwrap();
        assert!(run(doc! { "errorResponse": { "n": 1 } }, &e).is_err());
        run(
            doc! { "expectResult": { "$$unsetOrMatches": { "insertedCount": 0 } } },
            &e,
        )
        .unwrap();
        assert!(run(doc! { "expectResult": { "insertedCount": 0 } }, &e).is_err());
        assert!(run(doc! { "bogus": 1 }, &e)
            .unwrap_err()
            .contains("unknown"));
    }
}

//! What a mongod older than the version the proxy presents by default refuses: the proxy
//! presents, per test, the version the test asks for (`version.rs`), but nx-27017 takes
//! everything, so a command that the presented version would refuse is refused here, with
//! that mongod's error code and message. Each rule applies only below the version that
//! started accepting the command (every bound but one is at or below 5.0; `sort` in an
//! update statement came with 8.0, so the default 7.0 refuses it, as mongod 7.0 does).
//!
//! Two kinds of refusal, as mongod makes them: a command it cannot parse fails as a whole
//! (an unknown or mistyped field); a statement it cannot store is a write error at that
//! statement's index (`$`-prefixed field names). The proxy answers a write itself only when
//! none of its statements would run (ordered: the first one is refused; unordered: all
//! are), and an unacknowledged one (`w: 0`) `{ok: 1}` as mongod does. A batch that mixes
//! accepted and refused statements is forwarded as it is: the proxy does not split a batch
//! (no spec test sends one).

use bson::{doc, Bson, Document};

use crate::codes::{self, error_doc, IDL_UNKNOWN_FIELD};
use crate::commands::canonical;
use crate::topology::Version;

/// findAndModify's own parser (4.2, 4.4): `BSON field '<field>' is an unknown field.`
const FIND_AND_MODIFY_UNKNOWN_FIELD: i32 = 51177;
const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;

/// What in a command an older mongod refuses.
#[derive(Clone, Copy, Debug)]
enum What {
    /// The top-level field is present.
    Field(&'static str),
    /// The top-level field is present and not a string.
    NotString(&'static str),
    /// findAndModify's field, with `remove: true` (`true`) or with an update (`false`).
    FindAndModifyField(&'static str, bool),
    /// A statement of the array (`deletes`, `updates`) has the field.
    StatementField(&'static str, &'static str),
    /// An inserted document has a top-level `$`-prefixed field name.
    DollarPrefixedInsert,
    /// A replacement document (not update operators, not a pipeline) has a `$`-prefixed
    /// field name at any depth (DBRef's `$ref`, `$id`, `$db` excepted).
    DollarPrefixedReplacement,
}

/// How that mongod words the refusal.
#[derive(Clone, Copy, Debug)]
enum Wording {
    /// IDL's unknown field (insert, update, delete).
    IdlUnknown,
    /// IDL's wrong type (count, distinct).
    IdlWrongType,
    /// findAndModify's parser (4.2/4.4).
    FindAndModifyUnknown,
    /// find's QueryRequest (4.2/4.4): unrecognized field.
    FindUnrecognized,
    /// find's QueryRequest (4.2): a field of the wrong type.
    FindWrongType,
    /// aggregate's AggregationRequest (4.2/4.4): unrecognized field.
    AggregateUnrecognized,
    /// aggregate's AggregationRequest (4.2): `comment must be a string`.
    AggregateCommentType,
    /// insert's `fixDocumentForInsert` (a write error).
    InsertDollarField,
    /// storage validation of a replacement (a write error; findAndModify's is a command error).
    StorageDollarField,
}

struct Rule {
    command: &'static str,
    /// The first mongod version that accepts it.
    since: [i32; 3],
    what: What,
    wording: Wording,
}

const fn rule(command: &'static str, since: [i32; 3], what: What, wording: Wording) -> Rule {
    Rule {
        command,
        since,
        what,
        wording,
    }
}

use What::*;
use Wording::*;

/// The rules, one per command and refusal; `since` is the first mongod that accepts it.
#[rustfmt::skip]
const RULES: &[Rule] = &[
    rule("insert", [4, 4, 0], Field("comment"), IdlUnknown), // 4.4: comment on every command
    rule("update", [4, 4, 0], Field("comment"), IdlUnknown), // 4.4: comment on every command
    rule("delete", [4, 4, 0], Field("comment"), IdlUnknown), // 4.4: comment on every command
    rule("findAndModify", [4, 4, 0], Field("comment"), FindAndModifyUnknown), // 4.4: comment on every command
    rule("find", [4, 4, 0], NotString("comment"), FindWrongType), // 4.4: any comment (a string before)
    rule("aggregate", [4, 4, 0], NotString("comment"), AggregateCommentType), // 4.4: any comment (a string before)
    rule("count", [4, 4, 14], NotString("comment"), IdlWrongType), // 4.4.14: any comment
    rule("distinct", [4, 4, 14], NotString("comment"), IdlWrongType), // 4.4.14: any comment
    rule("find", [5, 0, 0], Field("let"), FindUnrecognized), // 5.0: let
    rule("aggregate", [5, 0, 0], Field("let"), AggregateUnrecognized), // 5.0: let
    rule("update", [5, 0, 0], Field("let"), IdlUnknown), // 5.0: let
    rule("delete", [5, 0, 0], Field("let"), IdlUnknown), // 5.0: let
    rule("findAndModify", [5, 0, 0], Field("let"), FindAndModifyUnknown), // 5.0: let
    rule("delete", [4, 3, 4], StatementField("deletes", "hint"), IdlUnknown), // 4.3.4 (4.4): delete hint
    rule("update", [8, 0, 0], StatementField("updates", "sort"), IdlUnknown), // 8.0: sort in an update statement
    rule("findAndModify", [4, 3, 1], FindAndModifyField("hint", false), FindAndModifyUnknown), // 4.3.1 (4.4): hint with an update
    rule("findAndModify", [4, 3, 4], FindAndModifyField("hint", true), FindAndModifyUnknown), // 4.3.4 (4.4): hint with remove
    rule("find", [4, 3, 1], Field("allowDiskUse"), FindUnrecognized), // 4.3.1 (4.4): allowDiskUse
    rule("insert", [5, 0, 0], DollarPrefixedInsert, InsertDollarField), // 5.0: $-prefixed fields storable
    rule("update", [5, 0, 0], DollarPrefixedReplacement, StorageDollarField), // 5.0: $-prefixed fields storable
    rule("findAndModify", [5, 0, 0], DollarPrefixedReplacement, StorageDollarField), // 5.0: $-prefixed fields storable
];

/// A refusal: the whole command's error reply, or write errors (statement index, error).
#[derive(Debug, PartialEq)]
pub enum Refusal {
    Command(Document),
    Statements(Vec<(usize, Document)>),
}

/// The documents of `identifier` (`documents`, `updates`, `deletes`), in the body or in a
/// document sequence.
pub(crate) fn statements<'a>(
    body: &'a Document,
    sequences: &'a [(String, Vec<Document>)],
    identifier: &str,
) -> Vec<&'a Document> {
    if let Ok(array) = body.get_array(identifier) {
        return array.iter().filter_map(Bson::as_document).collect();
    }
    sequences
        .iter()
        .filter(|(id, _)| id == identifier)
        .flat_map(|(_, docs)| docs.iter())
        .collect()
}

/// mongod's `typeName`.
fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Timestamp(_) => "timestamp",
        Bson::Decimal128(_) => "decimal",
        _ => "other",
    }
}

/// A replacement, not update operators (first key `$...`) nor a pipeline (an array).
fn replacement(update: Option<&Bson>) -> Option<&Document> {
    match update? {
        Bson::Document(d) if !d.keys().next().is_some_and(|k| k.starts_with('$')) => Some(d),
        _ => None,
    }
}

/// The first `$`-prefixed field name at any depth, as (name, dotted path).
fn dollar_field(doc: &Document, path: &str) -> Option<(String, String)> {
    let dbref = |k: &str| matches!(k, "$ref" | "$id" | "$db");
    let join = |k: &str| match path {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    for (key, value) in doc {
        if key.starts_with('$') && !dbref(key) {
            return Some((key.clone(), join(key)));
        }
        if let Some(found) = dollar_value(value, &join(key)) {
            return Some(found);
        }
    }
    None
}

fn dollar_value(value: &Bson, path: &str) -> Option<(String, String)> {
    match value {
        Bson::Document(d) => dollar_field(d, path),
        Bson::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| dollar_value(v, &format!("{path}.{i}"))),
        _ => None,
    }
}

fn unknown_field(wording: Wording, command: &str, field: &str, body: &Document) -> Document {
    match wording {
        IdlUnknown => error_doc(
            IDL_UNKNOWN_FIELD,
            &format!("BSON field '{command}.{field}' is an unknown field."),
        ),
        FindAndModifyUnknown => error_doc(
            FIND_AND_MODIFY_UNKNOWN_FIELD,
            &format!("BSON field '{field}' is an unknown field."),
        ),
        FindUnrecognized => error_doc(
            codes::FAILED_TO_PARSE,
            &format!("Failed to parse: {body}. Unrecognized field '{field}'."),
        ),
        _ => error_doc(
            codes::FAILED_TO_PARSE,
            &format!("unrecognized field '{field}'"),
        ),
    }
}

fn wrong_type(wording: Wording, command: &str, field: &str, value: &Bson) -> Document {
    let type_name = type_name(value);
    match wording {
        FindWrongType => error_doc(
            codes::FAILED_TO_PARSE,
            &format!(
                "Failed to parse: {field}: {value}. '{field}' field must be of BSON type string."
            ),
        ),
        AggregateCommentType => error_doc(
            codes::TYPE_MISMATCH,
            &format!("{field} must be a string, not a {type_name}"),
        ),
        _ => error_doc(
            codes::TYPE_MISMATCH,
            &format!(
                "BSON field '{command}.{field}' is the wrong type '{type_name}', expected type 'string'"
            ),
        ),
    }
}

fn storage_error(name: &str, path: &str) -> Document {
    error_doc(
        DOLLAR_PREFIXED_FIELD_NAME,
        &format!("The dollar ($) prefixed field '{name}' in '{path}' is not valid for storage."),
    )
}

/// A write error as it appears in `writeErrors` (without the index).
fn write_error(code: i32, errmsg: String) -> Document {
    doc! { "code": code, "errmsg": errmsg }
}

fn apply(rule: &Rule, body: &Document, sequences: &[(String, Vec<Document>)]) -> Option<Refusal> {
    let command = rule.command;
    let unknown = |field: &str| Refusal::Command(unknown_field(rule.wording, command, field, body));
    match rule.what {
        Field(field) => body.contains_key(field).then(|| unknown(field)),
        NotString(field) => match body.get(field) {
            None | Some(Bson::String(_)) => None,
            Some(value) => Some(Refusal::Command(wrong_type(
                rule.wording,
                command,
                field,
                value,
            ))),
        },
        FindAndModifyField(field, remove) => {
            let removes = body.get_bool("remove").unwrap_or(false);
            (removes == remove && body.contains_key(field)).then(|| unknown(field))
        }
        StatementField(array, field) => statements(body, sequences, array)
            .iter()
            .any(|s| s.contains_key(field))
            .then(|| unknown(&format!("{array}.{field}"))),
        DollarPrefixedInsert => {
            let errors: Vec<(usize, Document)> = statements(body, sequences, "documents")
                .iter()
                .enumerate()
                .filter_map(|(i, d)| {
                    let key = d.keys().find(|k| k.starts_with('$'))?;
                    let msg = format!("Document can't have $ prefixed field names: {key}");
                    Some((i, write_error(codes::BAD_VALUE, msg)))
                })
                .collect();
            (!errors.is_empty()).then_some(Refusal::Statements(errors))
        }
        DollarPrefixedReplacement if command == "findAndModify" => {
            let (name, path) = dollar_field(replacement(body.get("update"))?, "")?;
            Some(Refusal::Command(storage_error(&name, &path)))
        }
        DollarPrefixedReplacement => {
            let errors: Vec<(usize, Document)> = statements(body, sequences, "updates")
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let (name, path) = dollar_field(replacement(s.get("u"))?, "")?;
                    let e = storage_error(&name, &path);
                    let msg = e.get_str("errmsg").unwrap_or_default().to_string();
                    Some((i, write_error(DOLLAR_PREFIXED_FIELD_NAME, msg)))
                })
                .collect();
            (!errors.is_empty()).then_some(Refusal::Statements(errors))
        }
    }
}

/// What mongod `version` refuses of command `name` (`body` and its document sequences);
/// None when it takes it. Command refusals come first, as parsing precedes execution.
pub fn refusal(
    version: &Version,
    name: &str,
    body: &Document,
    sequences: &[(String, Vec<Document>)],
) -> Option<Refusal> {
    let name = canonical(name);
    let at = [version.array[0], version.array[1], version.array[2]];
    let mut statements: Option<Refusal> = None;
    for rule in RULES.iter().filter(|r| r.command == name && at < r.since) {
        match apply(rule, body, sequences) {
            Some(r @ Refusal::Command(_)) => return Some(r),
            Some(r) => statements = statements.or(Some(r)),
            None => {}
        }
    }
    statements
}

/// `writeConcern: {w: 0}`: mongod's `shouldSkipOutput` then answers a write `{ok: 1}`,
/// without its write errors.
fn unacknowledged(body: &Document) -> bool {
    let w = body
        .get_document("writeConcern")
        .ok()
        .and_then(|wc| wc.get("w"));
    match w {
        Some(Bson::Int32(n)) => *n == 0,
        Some(Bson::Int64(n)) => *n == 0,
        Some(Bson::Double(n)) => *n == 0.0,
        _ => false,
    }
}

/// The reply to a write whose statements `errors` refused, when none of its statements
/// would run; None for a batch that mixes accepted and refused statements.
pub fn write_reply(
    name: &str,
    body: &Document,
    sequences: &[(String, Vec<Document>)],
    errors: Vec<(usize, Document)>,
) -> Option<Document> {
    let identifier = match name {
        "insert" => "documents",
        "update" => "updates",
        _ => return None,
    };
    let count = statements(body, sequences, identifier).len();
    let ordered = body.get_bool("ordered").unwrap_or(true);
    let first = errors.first().map(|(i, _)| *i)?;
    let reported: Vec<Bson> = match ordered {
        true if first == 0 => errors.into_iter().take(1),
        false if errors.len() == count => errors.into_iter().take(count),
        _ => return None,
    }
    .map(|(index, e)| {
        let mut out = doc! { "index": index as i32 };
        out.extend(e);
        Bson::Document(out)
    })
    .collect();
    if unacknowledged(body) {
        return Some(doc! { "ok": 1.0 });
    }
    let mut reply = doc! { "n": 0 };
    if name == "update" {
        reply.insert("nModified", 0);
    }
    reply.insert("writeErrors", reported);
    reply.insert("ok", 1.0);
    Some(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: &str) -> Version {
        Version::parse(v)
    }

    fn code(version: &str, name: &str, body: Document) -> Option<i32> {
        match refusal(&at(version), name, &body, &[])? {
            Refusal::Command(reply) => Some(reply.get_i32("code").unwrap()),
            Refusal::Statements(errors) => Some(errors[0].1.get_i32("code").unwrap()),
        }
    }

    /// Each row: refused just below its bound, accepted at it (and at the default 7.0 when
    /// the bound is not above it).
    #[test]
    fn every_rule_refuses_below_its_bound_only() {
        #[rustfmt::skip]
        let cases: Vec<(&str, Document, &str, &str, i32)> = vec![
            ("insert", doc! { "insert": "c", "documents": [{ "x": 1 }], "comment": "c" }, "4.2.0", "4.4.0", IDL_UNKNOWN_FIELD),
            ("update", doc! { "update": "c", "updates": [], "comment": "c" }, "4.2.0", "4.4.0", IDL_UNKNOWN_FIELD),
            ("delete", doc! { "delete": "c", "deletes": [], "comment": {"k": 1} }, "4.2.0", "4.4.0", IDL_UNKNOWN_FIELD),
            ("findAndModify", doc! { "findAndModify": "c", "remove": true, "comment": "c" }, "4.2.0", "4.4.0", FIND_AND_MODIFY_UNKNOWN_FIELD),
            ("find", doc! { "find": "c", "comment": { "k": 1 } }, "4.2.0", "4.4.0", codes::FAILED_TO_PARSE),
            ("aggregate", doc! { "aggregate": "c", "pipeline": [], "comment": { "k": 1 } }, "4.2.0", "4.4.0", codes::TYPE_MISMATCH),
            ("count", doc! { "count": "c", "comment": { "k": 1 } }, "4.4.13", "4.4.14", codes::TYPE_MISMATCH),
            ("distinct", doc! { "distinct": "c", "key": "x", "comment": { "k": 1 } }, "4.4.7", "4.4.14", codes::TYPE_MISMATCH),
            ("find", doc! { "find": "c", "let": { "x": 1 } }, "4.4.7", "5.0.0", codes::FAILED_TO_PARSE),
            ("aggregate", doc! { "aggregate": "c", "pipeline": [], "let": { "x": 1 } }, "4.4.7", "5.0.0", codes::FAILED_TO_PARSE),
            ("update", doc! { "update": "c", "updates": [], "let": { "x": 1 } }, "4.4.7", "5.0.0", IDL_UNKNOWN_FIELD),
            ("delete", doc! { "delete": "c", "deletes": [], "let": { "x": 1 } }, "4.4.7", "5.0.0", IDL_UNKNOWN_FIELD),
            ("findAndModify", doc! { "findAndModify": "c", "update": {"$set": {"x": 1}}, "let": { "x": 1 } }, "4.4.7", "5.0.0", FIND_AND_MODIFY_UNKNOWN_FIELD),
            ("delete", doc! { "delete": "c", "deletes": [{ "q": {}, "limit": 1, "hint": "_id_" }] }, "4.3.3", "4.3.4", IDL_UNKNOWN_FIELD),
            ("findAndModify", doc! { "findAndModify": "c", "update": {"$inc": {"x": 1}}, "hint": "_id_" }, "4.3.0", "4.3.1", FIND_AND_MODIFY_UNKNOWN_FIELD),
            ("findAndModify", doc! { "findAndModify": "c", "remove": true, "hint": { "_id": 1 } }, "4.3.3", "4.3.4", FIND_AND_MODIFY_UNKNOWN_FIELD),
            ("find", doc! { "find": "c", "allowDiskUse": false }, "4.2.0", "4.3.1", codes::FAILED_TO_PARSE),
            ("insert", doc! { "insert": "c", "documents": [{ "_id": 1, "$a": 1 }] }, "4.4.7", "5.0.0", codes::BAD_VALUE),
            ("update", doc! { "update": "c", "updates": [{ "q": {}, "u": { "a": { "$b": 1 } } }] }, "4.4.7", "5.0.0", DOLLAR_PREFIXED_FIELD_NAME),
            ("findAndModify", doc! { "findAndModify": "c", "update": { "a": [{ "$b": 1 }] } }, "4.4.7", "5.0.0", DOLLAR_PREFIXED_FIELD_NAME),
            ("update", doc! { "update": "c", "updates": [{ "q": {}, "u": { "$set": { "x": 1 } }, "sort": { "_id": 1 } }] }, "7.0.5", "8.0.0", IDL_UNKNOWN_FIELD),
        ];
        for (name, body, below, since, want) in cases {
            assert_eq!(
                code(below, name, body.clone()),
                Some(want),
                "{name} at {below}: {body}"
            );
            assert_eq!(
                code(since, name, body.clone()),
                None,
                "{name} at {since}: {body}"
            );
            if since <= "7.0.0" {
                assert_eq!(
                    code("7.0.0", name, body.clone()),
                    None,
                    "{name} at 7.0.0: {body}"
                );
            }
            assert_eq!(
                code("8.2.1", name, body.clone()),
                None,
                "{name} at 8.2.1: {body}"
            );
        }
    }

    #[test]
    fn what_older_servers_took_stays_accepted() {
        let string_comment = doc! { "find": "c", "comment": "c" };
        assert_eq!(code("4.2.0", "find", string_comment), None);
        let agg = doc! { "aggregate": "c", "pipeline": [], "comment": "c" };
        assert_eq!(code("4.2.0", "aggregate", agg), None);
        let update_hint = doc! { "update": "c", "updates": [{ "q": {}, "u": { "$set": { "x": 1 } }, "hint": "_id_" }] };
        assert_eq!(
            code("4.2.0", "update", update_hint),
            None,
            "update hint: 4.2"
        );
        let operators =
            doc! { "update": "c", "updates": [{ "q": {}, "u": { "$set": { "a": 1 } } }] };
        assert_eq!(code("4.2.0", "update", operators), None);
        let pipeline = doc! { "findAndModify": "c", "update": [{ "$set": { "a": 1 } }] };
        assert_eq!(code("4.2.0", "findAndModify", pipeline), None);
        let embedded = doc! { "insert": "c", "documents": [{ "a": { "$b": 1 } }] };
        assert_eq!(
            code("4.2.0", "insert", embedded),
            None,
            "only top-level $ on insert"
        );
        let dbref = doc! { "update": "c", "updates": [{ "q": {}, "u": { "r": { "$ref": "c", "$id": 1 } } }] };
        assert_eq!(code("4.2.0", "update", dbref), None);
        let alias = doc! { "findandmodify": "c", "remove": true, "comment": "c" };
        assert_eq!(
            code("4.2.0", "findandmodify", alias),
            Some(FIND_AND_MODIFY_UNKNOWN_FIELD)
        );
    }

    #[test]
    fn messages_are_mongods() {
        let reply = |v: &str, name: &str, body: Document| match refusal(&at(v), name, &body, &[]) {
            Some(Refusal::Command(r)) => r.get_str("errmsg").unwrap().to_string(),
            other => panic!("{other:?}"),
        };
        let let_ = doc! { "x": 1 };
        assert_eq!(
            reply(
                "4.4.7",
                "delete",
                doc! { "delete": "c", "deletes": [], "let": let_.clone() }
            ),
            "BSON field 'delete.let' is an unknown field."
        );
        assert_eq!(
            reply(
                "4.4.7",
                "aggregate",
                doc! { "aggregate": "c", "pipeline": [], "let": let_.clone() }
            ),
            "unrecognized field 'let'"
        );
        assert!(
            reply("4.4.7", "find", doc! { "find": "c", "let": let_.clone() })
                .ends_with("Unrecognized field 'let'.")
        );
        assert_eq!(
            reply(
                "4.4.7",
                "findAndModify",
                doc! { "findAndModify": "c", "remove": true, "let": let_ }
            ),
            "BSON field 'let' is an unknown field."
        );
        assert_eq!(
            reply(
                "4.2.0",
                "aggregate",
                doc! { "aggregate": "c", "pipeline": [], "comment": { "k": 1 } }
            ),
            "comment must be a string, not a object"
        );
        assert_eq!(
            reply(
                "4.4.7",
                "count",
                doc! { "count": "c", "comment": { "k": 1 } }
            ),
            "BSON field 'count.comment' is the wrong type 'object', expected type 'string'"
        );
        assert_eq!(
            reply(
                "4.4.7",
                "findAndModify",
                doc! { "findAndModify": "c", "update": { "_id": 1, "a": { "$b": 1 } } }
            ),
            "The dollar ($) prefixed field '$b' in 'a.$b' is not valid for storage."
        );
        let hint = doc! { "delete": "c", "deletes": [{ "q": {}, "limit": 0, "hint": "_id_" }] };
        assert_eq!(
            reply("4.2.0", "delete", hint),
            "BSON field 'delete.deletes.hint' is an unknown field."
        );
    }

    #[test]
    fn statements_come_from_document_sequences_too() {
        let body = doc! { "insert": "c", "ordered": true };
        let seq = vec![(
            "documents".to_string(),
            vec![doc! { "_id": 1, "$a": 1 }, doc! { "_id": 2 }],
        )];
        let Some(Refusal::Statements(errors)) = refusal(&at("4.4.7"), "insert", &body, &seq) else {
            panic!("refused");
        };
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].1.get_str("errmsg").unwrap(),
            "Document can't have $ prefixed field names: $a"
        );
        let reply = write_reply("insert", &body, &seq, errors).unwrap();
        assert_eq!(reply.get_i32("n").unwrap(), 0);
        let e = reply.get_array("writeErrors").unwrap()[0]
            .as_document()
            .unwrap();
        assert_eq!(
            (e.get_i32("index").unwrap(), e.get_i32("code").unwrap()),
            (0, 2)
        );
        assert!(refusal(&at("5.0.9"), "insert", &body, &seq).is_none());
    }

    #[test]
    fn unacknowledged_writes_get_no_write_errors() {
        let body = doc! { "update": "c", "writeConcern": { "w": 0 },
        "updates": [{ "q": {}, "u": { "a": { "$b": 1 } } }] };
        let Some(Refusal::Statements(errors)) = refusal(&at("4.4.7"), "update", &body, &[]) else {
            panic!("refused");
        };
        let reply = write_reply("update", &body, &[], errors).unwrap();
        assert_eq!(reply, doc! { "ok": 1.0 });
    }

    #[test]
    fn mixed_batches_are_left_to_the_backend() {
        let updates = vec![
            doc! { "q": { "_id": 1 }, "u": { "x": 1 } },
            doc! { "q": { "_id": 2 }, "u": { "a": { "$b": 1 } } },
        ];
        let seq = vec![("updates".to_string(), updates)];
        let ordered = doc! { "update": "c" };
        let Some(Refusal::Statements(errors)) = refusal(&at("4.2.0"), "update", &ordered, &seq)
        else {
            panic!("refused");
        };
        assert_eq!(errors[0].0, 1);
        assert!(write_reply("update", &ordered, &seq, errors.clone()).is_none());
        let unordered = doc! { "update": "c", "ordered": false };
        assert!(write_reply("update", &unordered, &seq, errors.clone()).is_none());
        // Unordered and every statement refused: answered here, every error reported.
        let all = vec![("updates".to_string(), vec![seq[0].1[1].clone(); 2])];
        let Some(Refusal::Statements(errors)) = refusal(&at("4.2.0"), "update", &unordered, &all)
        else {
            panic!("refused");
        };
        let reply = write_reply("update", &unordered, &all, errors).unwrap();
        assert_eq!(reply.get_array("writeErrors").unwrap().len(), 2);
        assert_eq!(reply.get_i32("nModified").unwrap(), 0);
    }
}

//! The unified format's "Evaluating Matches": expected values from the test file
//! against actual BSON, with the `$$` special operators, extra fields allowed only
//! in root-level documents, and numeric types compared by value.

use bson::{Bson, Document};

/// Entities the `$$matchesEntity` and `$$sessionLsid` operators refer to.
pub trait Lookup {
    fn bson_entity(&self, name: &str) -> Option<Bson>;
    fn session_lsid(&self, name: &str) -> Option<Document>;
}

/// No entities at all (unit tests).
pub struct NoEntities;

impl Lookup for NoEntities {
    fn bson_entity(&self, _: &str) -> Option<Bson> {
        None
    }
    fn session_lsid(&self, _: &str) -> Option<Document> {
        None
    }
}

/// Matches `expected` against `actual` (absent: `None`); `root` allows extra
/// fields in the top document. The error names the path of the first mismatch.
pub fn matches(
    expected: &Bson,
    actual: Option<&Bson>,
    root: bool,
    lookup: &dyn Lookup,
) -> Result<(), String> {
    Matcher { lookup }.value(expected, actual, root, "$")
}

/// An iterable result: as many documents as expected, each matched as a root.
pub fn matches_documents(
    expected: &Bson,
    actual: &[Bson],
    lookup: &dyn Lookup,
) -> Result<(), String> {
    let Bson::Array(expected) = expected else {
        return matches(expected, Some(&Bson::Array(actual.to_vec())), false, lookup);
    };
    if expected.len() != actual.len() {
        return Err(format!(
            "$: expected {} documents, got {}: {}",
            expected.len(),
            actual.len(),
            show(&Bson::Array(actual.to_vec()))
        ));
    }
    let m = Matcher { lookup };
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        m.value(e, Some(a), true, &format!("$[{i}]"))?;
    }
    Ok(())
}

/// `test.outcome`'s comparison: "the rules in Evaluating Matches do not apply and the
/// documents MUST match exactly", key order aside. So no `$$` operators, no extra fields at
/// any level, and a number matches only the same BSON type with the same value.
pub fn exactly(expected: &Bson, actual: &Bson, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Bson::Document(e), Bson::Document(a)) => {
            for (key, ev) in e {
                let child = format!("{path}.{key}");
                match a.get(key) {
                    None => return Err(format!("{child}: missing (expected {})", show(ev))),
                    Some(av) => exactly(ev, av, &child)?,
                }
            }
            match a.keys().find(|k| !e.contains_key(k.as_str())) {
                None => Ok(()),
                Some(extra) => Err(format!(
                    "{path}: unexpected field {extra:?} in {}",
                    show(actual)
                )),
            }
        }
        (Bson::Array(e), Bson::Array(a)) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                exactly(e, a, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Bson::Array(e), Bson::Array(a)) => Err(format!(
            "{path}: expected {} elements, got {}: {}",
            e.len(),
            a.len(),
            show(actual)
        )),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!(
            "{path}: expected {} ({}), got {} ({})",
            show(e),
            type_name(e),
            show(a),
            type_name(a)
        )),
    }
}

/// The operator and its argument, if `doc` is a `$$` special operator.
pub fn special(doc: &Document) -> Option<(&str, &Bson)> {
    let mut it = doc.iter();
    let (key, value) = it.next()?;
    (it.next().is_none() && key.starts_with("$$")).then_some((key.as_str(), value))
}

struct Matcher<'a> {
    lookup: &'a dyn Lookup,
}

impl Matcher<'_> {
    fn value(&self, e: &Bson, a: Option<&Bson>, root: bool, path: &str) -> Result<(), String> {
        match e {
            Bson::Document(e) => {
                if let Some((op, arg)) = special(e) {
                    return self.operator(op, arg, a, root, path);
                }
                let Some(Bson::Document(a)) = a else {
                    return Err(format!("{path}: expected a document, got {}", opt(a)));
                };
                self.document(e, a, root, path)
            }
            Bson::Array(e) => {
                let Some(Bson::Array(a)) = a else {
                    return Err(format!("{path}: expected an array, got {}", opt(a)));
                };
                if e.len() != a.len() {
                    return Err(format!(
                        "{path}: expected {} elements, got {}: {}",
                        e.len(),
                        a.len(),
                        show(&Bson::Array(a.clone()))
                    ));
                }
                for (i, (e, a)) in e.iter().zip(a).enumerate() {
                    self.value(e, Some(a), false, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            _ => match a {
                Some(a) if scalar_eq(e, a) => Ok(()),
                _ => Err(format!("{path}: expected {}, got {}", show(e), opt(a))),
            },
        }
    }

    fn document(&self, e: &Document, a: &Document, root: bool, path: &str) -> Result<(), String> {
        for (key, ev) in e {
            let child = format!("{path}.{key}");
            let av = a.get(key);
            // Key-level operators ($$exists, $$unsetOrMatches) decide about absence.
            if let Bson::Document(d) = ev {
                if let Some((op, arg)) = special(d) {
                    self.operator(op, arg, av, false, &child)?;
                    continue;
                }
            }
            if av.is_none() {
                return Err(format!("{child}: missing (expected {})", show(ev)));
            }
            self.value(ev, av, false, &child)?;
        }
        if !root {
            if let Some(extra) = a.keys().find(|k| !e.contains_key(k.as_str())) {
                return Err(format!(
                    "{path}: unexpected field {extra:?} in {}",
                    show(&Bson::Document(a.clone()))
                ));
            }
        }
        Ok(())
    }

    fn operator(
        &self,
        op: &str,
        arg: &Bson,
        a: Option<&Bson>,
        root: bool,
        path: &str,
    ) -> Result<(), String> {
        match op {
            "$$exists" => {
                let want = arg
                    .as_bool()
                    .ok_or(format!("{path}: $$exists needs a bool"))?;
                match (want, a) {
                    (true, None) => Err(format!("{path}: missing (expected to exist)")),
                    (false, Some(a)) => Err(format!("{path}: expected absent, got {}", show(a))),
                    _ => Ok(()),
                }
            }
            "$$type" => {
                let Some(a) = a else {
                    return Err(format!("{path}: missing (expected $$type {})", show(arg)));
                };
                let names: Vec<&str> = match arg {
                    Bson::String(s) => vec![s.as_str()],
                    Bson::Array(v) => v.iter().filter_map(Bson::as_str).collect(),
                    _ => return Err(format!("{path}: $$type needs a string or an array")),
                };
                for name in &names {
                    if !known_type(name) {
                        return Err(format!("{path}: unknown $$type {name:?}"));
                    }
                }
                if names.iter().any(|n| type_matches(n, a)) {
                    Ok(())
                } else {
                    Err(format!(
                        "{path}: expected type {}, got {}",
                        show(arg),
                        show(a)
                    ))
                }
            }
            "$$unsetOrMatches" => match a {
                None => Ok(()),
                Some(_) => self.value(arg, a, root, path),
            },
            "$$matchesEntity" => {
                let name = arg
                    .as_str()
                    .ok_or(format!("{path}: $$matchesEntity needs a name"))?;
                let entity = self
                    .lookup
                    .bson_entity(name)
                    .ok_or(format!("{path}: no BSON entity named {name:?}"))?;
                self.value(&entity, a, root, path)
            }
            "$$matchesHexBytes" => {
                let hex = arg
                    .as_str()
                    .ok_or(format!("{path}: $$matchesHexBytes needs a string"))?;
                let want = decode_hex(hex).map_err(|e| format!("{path}: {e}"))?;
                let got: Option<&[u8]> = match a {
                    Some(Bson::Binary(b)) => Some(&b.bytes),
                    Some(Bson::String(s)) => Some(s.as_bytes()),
                    _ => None,
                };
                match got {
                    Some(got) if got == want.as_slice() => Ok(()),
                    _ => Err(format!("{path}: expected bytes {hex}, got {}", opt(a))),
                }
            }
            "$$sessionLsid" => {
                let name = arg
                    .as_str()
                    .ok_or(format!("{path}: $$sessionLsid needs a name"))?;
                let lsid = self
                    .lookup
                    .session_lsid(name)
                    .ok_or(format!("{path}: no session entity named {name:?}"))?;
                self.value(&Bson::Document(lsid), a, false, path)
                    .map_err(|e| format!("{e} (the lsid of {name})"))
            }
            "$$lte" => match (number(arg), a.and_then(number)) {
                (Some(max), Some(got)) if got <= max => Ok(()),
                (Some(_), _) => Err(format!("{path}: expected <= {}, got {}", show(arg), opt(a))),
                (None, _) => Err(format!("{path}: $$lte needs a number")),
            },
            "$$matchAsDocument" => {
                let Some(Bson::String(json)) = a else {
                    return Err(format!(
                        "{path}: expected an extended JSON string, got {}",
                        opt(a)
                    ));
                };
                let parsed = parse_ext_json(json).map_err(|e| format!("{path}: {e}"))?;
                self.value(arg, Some(&Bson::Document(parsed)), false, path)
            }
            "$$matchAsRoot" => self.value(arg, a, true, path),
            other => Err(format!("{path}: unknown special operator {other}")),
        }
    }
}

/// Equality of non-container values; 32-bit, 64-bit and double compare by value.
fn scalar_eq(e: &Bson, a: &Bson) -> bool {
    match (e, a) {
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            integer(e) == integer(a)
        }
        (Bson::Double(_), _) | (_, Bson::Double(_)) => match (number(e), number(a)) {
            (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => false,
        },
        _ => e == a,
    }
}

fn integer(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

/// A numeric value as f64 (Decimal128 excluded, as the spec says).
pub fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(*i as f64),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

const TYPES: &[&str] = &[
    "double",
    "string",
    "object",
    "array",
    "binData",
    "undefined",
    "objectId",
    "bool",
    "date",
    "null",
    "regex",
    "dbPointer",
    "javascript",
    "symbol",
    "javascriptWithScope",
    "int",
    "timestamp",
    "long",
    "decimal",
    "minKey",
    "maxKey",
    "number",
];

fn known_type(name: &str) -> bool {
    TYPES.contains(&name)
}

/// The `$type` query operator's names.
fn type_matches(name: &str, v: &Bson) -> bool {
    match name {
        "number" => matches!(
            v,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
        ),
        _ => type_name(v) == name,
    }
}

pub fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// Hex digits (case-insensitive, even count, may be empty) as bytes.
pub fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("malformed hex bytes {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// Canonical or relaxed extended JSON text as a document.
pub fn parse_ext_json(json: &str) -> Result<Document, String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    match Bson::try_from(value) {
        Ok(Bson::Document(d)) => Ok(d),
        Ok(other) => Err(format!("not a document: {}", show(&other))),
        Err(e) => Err(format!("not extended JSON: {e}")),
    }
}

/// A value as relaxed extended JSON, cut short for one-line messages.
pub fn show(v: &Bson) -> String {
    const MAX: usize = 300;
    let mut s = v.clone().into_relaxed_extjson().to_string();
    if s.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

fn opt(v: Option<&Bson>) -> String {
    v.map_or_else(|| "nothing".to_string(), show)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc, spec::BinarySubtype, Binary};

    fn ok(e: Bson, a: Bson) {
        matches(&e, Some(&a), true, &NoEntities).unwrap();
    }

    fn fails(e: Bson, a: Bson) -> String {
        matches(&e, Some(&a), true, &NoEntities).unwrap_err()
    }

    #[test]
    fn outcome_data_must_match_exactly_but_in_any_key_order() {
        let exact = |e: Bson, a: Bson| exactly(&e, &a, "$");
        exact(bson!([{"_id": 1, "x": 11}]), bson!([{"x": 11, "_id": 1}])).unwrap();
        let err = exact(bson!([{"_id": 1, "x": 11}]), bson!([{"_id": 1, "x": 11.0}])).unwrap_err();
        assert!(err.contains("$[0].x") && err.contains("double"), "{err}");
        assert!(exact(bson!({"x": 1}), bson!({"x": 1_i64})).is_err());
        // Root documents get no extra fields either, nor do nested ones.
        assert!(exact(bson!({"_id": 1}), bson!({"_id": 1, "y": 1}))
            .unwrap_err()
            .contains("\"y\""));
        assert!(exact(bson!({"a": {"b": 1}}), bson!({"a": {"b": 1, "c": 2}})).is_err());
        // `$$` operators are not operators here: they are data to compare.
        assert!(exact(bson!({"x": {"$$exists": true}}), bson!({"x": 1})).is_err());
        assert!(exact(bson!([1, 2]), bson!([1]))
            .unwrap_err()
            .contains("2 elements"));
        assert!(exact(bson!([]), bson!([])).is_ok());
    }

    #[test]
    fn root_documents_may_have_extra_fields_nested_ones_may_not() {
        ok(bson!({"x": 1}), bson!({"x": 1, "y": 1}));
        let err = fails(bson!({"x": {"y": 1}}), bson!({"x": {"y": 1, "z": 1}}));
        assert!(err.contains("$.x") && err.contains("\"z\""), "{err}");
        assert!(fails(bson!({"x": 1, "y": 1}), bson!({"x": 1})).contains("$.y: missing"));
    }

    #[test]
    fn key_order_does_not_matter_and_numbers_compare_by_value() {
        ok(bson!({"x": 1, "y": 2}), bson!({"y": 2_i64, "x": 1.0}));
        assert!(fails(bson!({"x": 1}), bson!({"x": 1.5})).contains("expected 1"));
        assert!(fails(bson!({"x": 1}), bson!({"x": "1"})).contains("$.x"));
        ok(bson!(i64::MAX), bson!(i64::MAX));
        assert!(fails(bson!(i64::MAX), bson!(i64::MAX - 1)).contains("expected"));
    }

    #[test]
    fn arrays_need_the_same_length_and_elements_are_not_roots() {
        ok(bson!([1, {"a": 1}]), bson!([1, {"a": 1}]));
        assert!(fails(bson!([1, 2, 3]), bson!([1, 2, 3, 4])).contains("3 elements, got 4"));
        assert!(fails(bson!([{"a": 1}]), bson!([{"a": 1, "b": 2}])).contains("\"b\""));
    }

    #[test]
    fn iterable_results_match_each_document_as_a_root() {
        let actual = [bson!({"_id": 1, "x": 1}), bson!({"_id": 2, "x": 2})];
        matches_documents(&bson!([{"_id": 1}, {"_id": 2}]), &actual, &NoEntities).unwrap();
        let err = matches_documents(&bson!([{"_id": 1}]), &actual, &NoEntities).unwrap_err();
        assert!(err.contains("expected 1 documents, got 2"), "{err}");
    }

    #[test]
    fn exists_and_unset_or_matches() {
        ok(bson!({"a": {"$$exists": true}}), bson!({"a": null}));
        ok(bson!({"a": {"$$exists": false}}), bson!({"b": 1}));
        assert!(fails(bson!({"a": {"$$exists": false}}), bson!({"a": 1})).contains("absent"));
        assert!(fails(bson!({"a": {"$$exists": true}}), bson!({})).contains("missing"));
        ok(bson!({"a": {"$$unsetOrMatches": 1}}), bson!({}));
        ok(bson!({"a": {"$$unsetOrMatches": 1}}), bson!({"a": 1_i64}));
        assert!(fails(bson!({"a": {"$$unsetOrMatches": 1}}), bson!({"a": 2})).contains("$.a"));
        // A whole result that may be absent keeps its root leniency.
        let e = bson!({"$$unsetOrMatches": {"insertedId": {"$$unsetOrMatches": 2}}});
        matches(&e, None, true, &NoEntities).unwrap();
        ok(e, bson!({"insertedId": 2, "extra": true}));
    }

    #[test]
    fn type_operator_with_aliases_and_lists() {
        ok(
            bson!({"n": {"$$type": ["int", "long"]}}),
            bson!({"n": 5_i64}),
        );
        ok(bson!({"n": {"$$type": "number"}}), bson!({"n": 5.5}));
        ok(bson!({"a": {"$$type": "array"}}), bson!({"a": ["x"]}));
        assert!(fails(bson!({"n": {"$$type": "string"}}), bson!({"n": 1})).contains("type"));
        assert!(fails(bson!({"n": {"$$type": "bogus"}}), bson!({"n": 1})).contains("unknown"));
        assert!(fails(bson!({"n": {"$$type": "int"}}), bson!({})).contains("missing"));
    }

    #[test]
    fn lte_is_numeric() {
        ok(bson!({"t": {"$$lte": 5}}), bson!({"t": 5.0}));
        ok(bson!({"t": {"$$lte": 1}}), bson!({"t": 0_i64}));
        assert!(fails(bson!({"t": {"$$lte": 1}}), bson!({"t": 1.1})).contains("<="));
    }

    #[test]
    fn hex_bytes_match_binary_or_string() {
        let bin = Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![0x12, 0xab],
        });
        ok(bson!({"$$matchesHexBytes": "12AB"}), bin);
        ok(bson!({"$$matchesHexBytes": ""}), bson!(""));
        assert!(fails(bson!({"$$matchesHexBytes": "1"}), bson!("")).contains("malformed"));
        assert_eq!(decode_hex("0aFf").unwrap(), vec![0x0a, 0xff]);
    }

    struct Entities;
    impl Lookup for Entities {
        fn bson_entity(&self, name: &str) -> Option<Bson> {
            (name == "id0").then(|| bson!(42))
        }
        fn session_lsid(&self, name: &str) -> Option<Document> {
            (name == "session0").then(|| doc! {"id": 7})
        }
    }

    #[test]
    fn entities_and_session_ids() {
        let m = |e: Bson, a: Bson| matches(&e, Some(&a), true, &Entities);
        m(
            bson!({"_id": {"$$matchesEntity": "id0"}}),
            bson!({"_id": 42}),
        )
        .unwrap();
        assert!(m(bson!({"$$matchesEntity": "nope"}), bson!(1))
            .unwrap_err()
            .contains("no BSON entity"));
        m(
            bson!({"lsid": {"$$sessionLsid": "session0"}}),
            bson!({"lsid": {"id": 7}}),
        )
        .unwrap();
        assert!(m(
            bson!({"lsid": {"$$sessionLsid": "session0"}}),
            bson!({"lsid": {"id": 8}})
        )
        .is_err());
    }

    #[test]
    fn match_as_document_and_as_root() {
        ok(
            bson!({"c": {"$$matchAsDocument": {"a": 1}}}),
            bson!({"c": "{\"a\": {\"$numberLong\": \"1\"}}"}),
        );
        assert!(fails(
            bson!({"c": {"$$matchAsDocument": {"a": 1}}}),
            bson!({"c": "{\"a\": 1, \"b\": 2}"})
        )
        .contains("\"b\""));
        ok(
            bson!({"c": {"$$matchAsDocument": {"$$matchAsRoot": {"a": 1}}}}),
            bson!({"c": "{\"a\": 1, \"b\": 2}"}),
        );
        ok(
            bson!({"x": {"$$matchAsRoot": {"a": 1}}}),
            bson!({"x": {"a": 1, "b": 2}}),
        );
    }

    #[test]
    fn special_needs_a_single_dollar_dollar_key() {
        assert!(special(&doc! {"$$type": "int"}).is_some());
        assert!(special(&doc! {"$type": "int"}).is_none());
        assert!(special(&doc! {"$$type": "int", "x": 1}).is_none());
        // A query operator in an expected command is an ordinary field.
        ok(bson!({"filter": {"$gt": 1}}), bson!({"filter": {"$gt": 1}}));
    }

    #[test]
    fn messages_are_bounded() {
        let long = "x".repeat(1000);
        let err = fails(bson!({"a": 1}), bson!({"a": long}));
        assert!(err.len() < 400, "{}", err.len());
    }
}

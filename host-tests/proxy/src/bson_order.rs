//! mongod's BSON comparison order (`BSONElement::woCompare` without collation), and the
//! `distinct` reply mongod makes with it: mongod collects distinct values into an ordered
//! set (`BSONElementSet`) and answers them sorted, where nx-27017 answers them in hash
//! order (`nx-gaps.py`: distinct-order).
//!
//! Types compare by their canonical rank first (MinKey, null, numbers, strings and
//! symbols, objects, arrays, binary, ObjectId, bool, date, timestamp, regex, DBPointer,
//! code, code with scope, MaxKey), then by value. Numbers compare by value across int32,
//! int64, double and decimal (NaN below every other number); decimals are compared through
//! their nearest double (nx-27017 stores no Decimal128: `nx-gaps.py`: decimal128).

use std::cmp::Ordering;

use bson::{Bson, Document};

/// mongod's `canonicalizeBSONType`.
fn rank(v: &Bson) -> i32 {
    match v {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        Bson::Null => 5,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// A number, exact for integers.
enum Num {
    Int(i64),
    Float(f64),
}

fn number(v: &Bson) -> Num {
    match v {
        Bson::Int32(i) => Num::Int(i64::from(*i)),
        Bson::Int64(i) => Num::Int(*i),
        Bson::Double(d) => Num::Float(*d),
        Bson::Decimal128(d) => Num::Float(d.to_string().parse().unwrap_or(f64::NAN)),
        _ => Num::Float(f64::NAN),
    }
}

/// Doubles as mongod orders them: NaN equals NaN and is below everything else.
fn compare_floats(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// An int64 against a double, exactly (mongod's `compareLongToDouble`).
fn compare_int_float(i: i64, d: f64) -> Ordering {
    if d.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 is exact as a double; every double at or above it exceeds every int64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d >= TWO_63 {
        return Ordering::Less;
    }
    if d < -TWO_63 {
        return Ordering::Greater;
    }
    // In range: compare integer parts exactly, then the fraction.
    let whole = d.trunc();
    match i.cmp(&(whole as i64)) {
        Ordering::Equal => compare_floats(0.0, d - whole),
        other => other,
    }
}

fn compare_numbers(a: &Bson, b: &Bson) -> Ordering {
    match (number(a), number(b)) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (Num::Int(x), Num::Float(y)) => compare_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => compare_int_float(y, x).reverse(),
        (Num::Float(x), Num::Float(y)) => compare_floats(x, y),
    }
}

/// Field by field: type rank, then field name, then value; a prefix sorts first
/// (`BSONObj::woCompare`).
fn compare_fields<'a>(
    a: impl Iterator<Item = (&'a str, &'a Bson)>,
    b: impl Iterator<Item = (&'a str, &'a Bson)>,
) -> Ordering {
    let mut b = b;
    for (ka, va) in a {
        let Some((kb, vb)) = b.next() else {
            return Ordering::Greater;
        };
        let order = rank(va)
            .cmp(&rank(vb))
            .then_with(|| ka.cmp(kb))
            .then_with(|| compare(va, vb));
        if order != Ordering::Equal {
            return order;
        }
    }
    match b.next() {
        Some(_) => Ordering::Less,
        None => Ordering::Equal,
    }
}

fn compare_documents(a: &Document, b: &Document) -> Ordering {
    compare_fields(
        a.iter().map(|(k, v)| (k.as_str(), v)),
        b.iter().map(|(k, v)| (k.as_str(), v)),
    )
}

/// mongod's BSON comparison order of two values.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let by_rank = rank(a).cmp(&rank(b));
    if by_rank != Ordering::Equal {
        return by_rank;
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        // An array is a document with the indexes as field names: element by element.
        (Bson::Array(x), Bson::Array(y)) => {
            let names = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
            let (nx, ny) = (names(x.len()), names(y.len()));
            compare_fields(
                nx.iter().map(String::as_str).zip(x.iter()),
                ny.iter().map(String::as_str).zip(y.iter()),
            )
        }
        // Length, then subtype, then the bytes.
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .cmp(y.pattern.as_str())
            .then_with(|| x.options.as_str().cmp(y.options.as_str())),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => {
            // No accessors in the bson crate: its raw encoding (namespace length, namespace,
            // ObjectId) orders as mongod does.
            let raw = |v: &Bson| bson::doc! { "": v.clone() }.to_vec().unwrap_or_default();
            raw(a).cmp(&raw(b))
        }
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| compare_documents(&x.scope, &y.scope)),
        (x, y) if rank(x) == 10 => compare_numbers(x, y),
        // MinKey, MaxKey, null, undefined: one value each.
        _ => Ordering::Equal,
    }
}

/// A successful `distinct` reply with its `values` in mongod's order; None when `reply`
/// is not one or is already in order.
pub fn sorted_distinct(name: &str, reply: &Document) -> Option<Document> {
    if name != "distinct" {
        return None;
    }
    let values = reply.get_array("values").ok()?;
    if values.is_sorted_by(|a, b| compare(a, b) != Ordering::Greater) {
        return None;
    }
    let mut sorted = values.clone();
    sorted.sort_by(compare);
    let mut out = reply.clone();
    out.insert("values", sorted);
    Some(out)
}

/// `values` as mongod's ordered set holds them: sorted, each value once (1 and 1.0 are one).
pub fn distinct(mut values: Vec<Bson>) -> Vec<Bson> {
    values.sort_by(compare);
    values.dedup_by(|a, b| compare(a, b) == Ordering::Equal);
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::oid::ObjectId;
    use bson::spec::BinarySubtype;
    use bson::{doc, Binary, DateTime, Decimal128, Regex, Timestamp};

    fn sorted(mut v: Vec<Bson>) -> Vec<Bson> {
        v.sort_by(compare);
        v
    }

    #[test]
    fn types_sort_by_canonical_rank() {
        let oid = ObjectId::from_bytes([1; 12]);
        let bin = Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![1],
        });
        let regex = Bson::RegularExpression(Regex {
            pattern: "a".to_string().try_into().unwrap(),
            options: String::new().try_into().unwrap(),
        });
        let ts = Bson::Timestamp(Timestamp {
            time: 1,
            increment: 1,
        });
        let date = Bson::DateTime(DateTime::from_millis(0));
        let want = vec![
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(1),
            Bson::String("a".into()),
            Bson::Document(doc! { "a": 1 }),
            Bson::Array(vec![Bson::Int32(1)]),
            bin.clone(),
            Bson::ObjectId(oid),
            Bson::Boolean(false),
            date.clone(),
            ts.clone(),
            regex.clone(),
            Bson::MaxKey,
        ];
        let mut shuffled = want.clone();
        shuffled.reverse();
        shuffled.rotate_left(5);
        assert_eq!(sorted(shuffled), want);
    }

    #[test]
    fn numbers_compare_by_value_across_types() {
        let d = |s: &str| Bson::Decimal128(s.parse::<Decimal128>().unwrap());
        let got = sorted(vec![
            Bson::Int64(3),
            Bson::Double(2.5),
            Bson::Int32(-7),
            d("1.5"),
            Bson::Double(f64::NAN),
            Bson::Int32(33),
            Bson::Int32(11),
            Bson::Double(f64::NEG_INFINITY),
        ]);
        assert_eq!(
            format!("{got:?}"),
            format!(
                "{:?}",
                vec![
                    Bson::Double(f64::NAN),
                    Bson::Double(f64::NEG_INFINITY),
                    Bson::Int32(-7),
                    d("1.5"),
                    Bson::Double(2.5),
                    Bson::Int64(3),
                    Bson::Int32(11),
                    Bson::Int32(33),
                ]
            )
        );
        // Exact beyond 2^53, where a cast to double would call them equal.
        let big = 1i64 << 60;
        assert_eq!(
            compare(&Bson::Int64(big + 1), &Bson::Double(big as f64)),
            Ordering::Greater
        );
        assert_eq!(
            compare(&Bson::Int64(i64::MAX), &Bson::Double(9.3e18)),
            Ordering::Less
        );
        assert_eq!(
            compare(&Bson::Int32(2), &Bson::Double(2.0)),
            Ordering::Equal
        );
        assert_eq!(
            compare(&Bson::Int32(-3), &Bson::Double(-2.5)),
            Ordering::Less
        );
    }

    #[test]
    fn strings_documents_and_arrays_compare_by_content() {
        // Bytewise, so upper case first; a prefix first.
        assert_eq!(
            sorted(vec!["b".into(), "B".into(), "ab".into(), "a".into()]),
            vec![
                Bson::from("B"),
                Bson::from("a"),
                Bson::from("ab"),
                Bson::from("b")
            ]
        );
        assert_eq!(
            compare(&Bson::Symbol("a".into()), &Bson::String("b".into())),
            Ordering::Less
        );
        // Field type before field name before value; fewer fields first.
        let docs = sorted(vec![
            doc! { "a": "x" }.into(),
            doc! { "b": 1 }.into(),
            doc! { "a": 2 }.into(),
            doc! { "a": 1, "b": 1 }.into(),
            doc! { "a": 1 }.into(),
            doc! {}.into(),
        ]);
        assert_eq!(
            docs,
            vec![
                Bson::from(doc! {}),
                doc! { "a": 1 }.into(),
                doc! { "a": 1, "b": 1 }.into(),
                doc! { "a": 2 }.into(),
                doc! { "b": 1 }.into(),
                doc! { "a": "x" }.into(),
            ]
        );
        let arr = |v: Vec<i32>| Bson::Array(v.into_iter().map(Bson::Int32).collect());
        assert_eq!(
            sorted(vec![
                arr(vec![2]),
                arr(vec![1, 5]),
                arr(vec![1]),
                arr(vec![])
            ]),
            vec![arr(vec![]), arr(vec![1]), arr(vec![1, 5]), arr(vec![2])]
        );
    }

    #[test]
    fn other_types_compare_by_value() {
        let bin = |sub: BinarySubtype, bytes: Vec<u8>| {
            Bson::Binary(Binary {
                subtype: sub,
                bytes,
            })
        };
        // Length before subtype before bytes.
        assert_eq!(
            sorted(vec![
                bin(BinarySubtype::Generic, vec![0, 0]),
                bin(BinarySubtype::Uuid, vec![9]),
                bin(BinarySubtype::Generic, vec![9]),
                bin(BinarySubtype::Generic, vec![1]),
            ]),
            vec![
                bin(BinarySubtype::Generic, vec![1]),
                bin(BinarySubtype::Generic, vec![9]),
                bin(BinarySubtype::Uuid, vec![9]),
                bin(BinarySubtype::Generic, vec![0, 0]),
            ]
        );
        assert_eq!(
            sorted(vec![true.into(), false.into()]),
            vec![Bson::from(false), Bson::from(true)]
        );
        let date = |ms| Bson::DateTime(DateTime::from_millis(ms));
        assert_eq!(sorted(vec![date(5), date(-5)]), vec![date(-5), date(5)]);
        let ts = |time, increment| Bson::Timestamp(Timestamp { time, increment });
        assert_eq!(
            sorted(vec![ts(2, 0), ts(1, 9), ts(1, 2)]),
            vec![ts(1, 2), ts(1, 9), ts(2, 0)]
        );
        let oid = |b| Bson::ObjectId(ObjectId::from_bytes([b; 12]));
        assert_eq!(sorted(vec![oid(2), oid(1)]), vec![oid(1), oid(2)]);
    }

    #[test]
    fn distinct_values_are_sorted_once_each() {
        let got = distinct(vec![
            Bson::Int32(2),
            Bson::Double(1.0),
            Bson::from("a"),
            Bson::Int64(1),
            Bson::Int32(2),
        ]);
        assert_eq!(
            got,
            vec![Bson::Double(1.0), Bson::Int32(2), Bson::from("a")]
        );
    }

    #[test]
    fn distinct_replies_are_sorted() {
        let reply = doc! { "values": [33, 11, 22], "ok": 1.0 };
        let out = sorted_distinct("distinct", &reply).unwrap();
        assert_eq!(out, doc! { "values": [11, 22, 33], "ok": 1.0 });
        assert!(sorted_distinct("distinct", &out).is_none());
        assert!(sorted_distinct("find", &reply).is_none());
        assert!(sorted_distinct("distinct", &doc! { "ok": 0.0, "code": 2 }).is_none());
    }
}

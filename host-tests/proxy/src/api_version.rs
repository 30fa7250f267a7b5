//! mongod's Stable API checks, which nx-27017 does not make (it ignores `apiVersion`,
//! `apiStrict` and `apiDeprecationErrors`): the API parameters are validated on every command,
//! `apiStrict: true` refuses a command outside the declared version, `apiDeprecationErrors:
//! true` refuses one deprecated in it. Also the API test commands mongod registers under
//! `enableTestCommands`, which the spec tests run. The proxy presents a mongod started with
//! `acceptApiVersion2=1`, as the versioned-api spec tests require.

use bson::{Bson, Document};

use crate::codes::{self, error_doc};
use crate::commands::canonical;

/// mongod's `acceptApiVersion2` server parameter, as the proxy presents it.
pub const ACCEPT_API_VERSION_2: bool = true;

/// The commands in API version 1 (mongod 7.0).
const VERSION_1: &[&str] = &[
    "abortTransaction",
    "aggregate",
    "authenticate",
    "collMod",
    "commitTransaction",
    "count",
    "create",
    "createIndexes",
    "delete",
    "drop",
    "dropDatabase",
    "dropIndexes",
    "endSessions",
    "explain",
    "find",
    "findAndModify",
    "getMore",
    "hello",
    "insert",
    "killCursors",
    "listCollections",
    "listDatabases",
    "listIndexes",
    "ping",
    "refreshSessions",
    "saslContinue",
    "saslStart",
    "update",
];

/// mongod's API test commands: (name, versions it is in, versions it is deprecated in).
const TEST_COMMANDS: &[(&str, &[&str], &[&str])] = &[
    ("testDeprecation", &["1"], &["1"]),
    ("testVersion2", &["2"], &[]),
    ("testDeprecationInVersion2", &["1", "2"], &["2"]),
];

pub fn is_test_command(name: &str) -> bool {
    TEST_COMMANDS.iter().any(|(n, ..)| *n == name)
}

fn in_version(name: &str, version: &str) -> bool {
    match TEST_COMMANDS.iter().find(|(n, ..)| *n == name) {
        Some((_, versions, _)) => versions.contains(&version),
        // Version 2 holds the test commands only.
        None => version == "1" && VERSION_1.contains(&canonical(name)),
    }
}

fn deprecated_in(name: &str, version: &str) -> bool {
    TEST_COMMANDS
        .iter()
        .any(|(n, _, deprecated)| *n == name && deprecated.contains(&version))
}

fn type_mismatch(field: &str, value: &Bson, expected: &str) -> Document {
    let msg = format!(
        "BSON field 'APIParametersFromClient.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(value)
    );
    error_doc(codes::TYPE_MISMATCH, &msg)
}

fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Null => "null",
        _ => "other",
    }
}

/// mongod's `initializeAPIParameters` for one command it knows: `Err` is the error reply.
pub fn check(name: &str, body: &Document, accept_version_2: bool) -> Result<(), Document> {
    let version = match body.get("apiVersion") {
        None => None,
        Some(Bson::String(v)) => Some(v.as_str()),
        Some(other) => return Err(type_mismatch("apiVersion", other, "string")),
    };
    let flag = |field: &str| match body.get(field) {
        None => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(other) => Err(type_mismatch(field, other, "bool")),
    };
    let strict = flag("apiStrict")?;
    let deprecation_errors = flag("apiDeprecationErrors")?;
    let Some(version) = version else {
        if strict.is_some() || deprecation_errors.is_some() {
            let msg = "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion";
            return Err(error_doc(codes::API_PARAMETERS_WITHOUT_VERSION, msg));
        }
        return Ok(());
    };
    match version {
        "1" => {}
        "2" if accept_version_2 => {}
        "2" => {
            let msg = "Cannot accept API version 2 unless acceptApiVersion2 is set";
            return Err(error_doc(codes::API_VERSION_ERROR, msg));
        }
        _ => {
            return Err(error_doc(
                codes::API_VERSION_ERROR,
                "API version must be \"1\"",
            ))
        }
    }
    if strict == Some(true) && !in_version(name, version) {
        let msg = format!(
            "Provided apiStrict:true, but the command {name} is not in API Version {version}"
        );
        return Err(error_doc(codes::API_STRICT_ERROR, &msg));
    }
    if deprecation_errors == Some(true) && deprecated_in(name, version) {
        let msg = format!(
            "Provided apiDeprecationErrors:true, but the command {name} is deprecated in API Version {version}"
        );
        return Err(error_doc(codes::API_DEPRECATION_ERROR, &msg));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(name: &str, body: Document) -> Option<i32> {
        check(name, &body, true)
            .err()
            .map(|e| e.get_i32("code").unwrap())
    }

    #[test]
    fn no_parameters_and_version_one_pass() {
        assert_eq!(code("distinct", doc! { "distinct": "c" }), None);
        assert_eq!(code("ping", doc! { "ping": 1, "apiVersion": "1" }), None);
        let all = doc! { "find": "c", "apiVersion": "1", "apiStrict": true, "apiDeprecationErrors": true };
        assert_eq!(code("find", all), None);
    }

    #[test]
    fn parameters_are_validated() {
        let unknown =
            doc! { "ping": 1, "apiVersion": "server_will_never_support_this_api_version" };
        assert_eq!(code("ping", unknown), Some(codes::API_VERSION_ERROR));
        let reply = check("ping", &doc! { "ping": 1, "apiStrict": true }, true).unwrap_err();
        assert_eq!(reply.get_i32("code").unwrap(), 4886600);
        assert_eq!(
            code("ping", doc! { "ping": 1, "apiDeprecationErrors": false }),
            Some(4886600)
        );
        assert_eq!(
            code("ping", doc! { "ping": 1, "apiVersion": 1 }),
            Some(codes::TYPE_MISMATCH)
        );
        let v2 = doc! { "ping": 1, "apiVersion": "2" };
        assert_eq!(code("ping", v2.clone()), None);
        let refused = check("ping", &v2, false).unwrap_err();
        assert_eq!(refused.get_i32("code").unwrap(), codes::API_VERSION_ERROR);
    }

    #[test]
    fn strict_refuses_commands_outside_the_version() {
        let reply = check(
            "distinct",
            &doc! { "distinct": "c", "apiVersion": "1", "apiStrict": true },
            true,
        )
        .unwrap_err();
        assert_eq!(reply.get_str("codeName").unwrap(), "APIStrictError");
        assert!(reply
            .get_str("errmsg")
            .unwrap()
            .contains("command distinct is not in API Version 1"));
        let lenient = doc! { "distinct": "c", "apiVersion": "1", "apiStrict": false };
        assert_eq!(code("distinct", lenient), None);
        let v2 = doc! { "testVersion2": 1, "apiVersion": "1", "apiStrict": true };
        assert_eq!(code("testVersion2", v2), Some(codes::API_STRICT_ERROR));
        let alias = doc! { "findandmodify": "c", "apiVersion": "1", "apiStrict": true };
        assert_eq!(code("findandmodify", alias), None);
    }

    #[test]
    fn deprecation_errors_refuse_deprecated_commands() {
        let body = doc! { "testDeprecationInVersion2": 1, "apiVersion": "2", "apiDeprecationErrors": true };
        let reply = check("testDeprecationInVersion2", &body, true).unwrap_err();
        assert_eq!(reply.get_str("codeName").unwrap(), "APIDeprecationError");
        assert!(reply
            .get_str("errmsg")
            .unwrap()
            .contains("command testDeprecationInVersion2 is deprecated in API Version 2"));
        let in_one = doc! { "testDeprecationInVersion2": 1, "apiVersion": "1", "apiDeprecationErrors": true };
        assert_eq!(code("testDeprecationInVersion2", in_one), None);
        assert!(is_test_command("testVersion2") && !is_test_command("ping"));
    }
}

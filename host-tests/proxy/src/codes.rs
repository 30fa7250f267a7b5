//! Server error codes: names (as mongod 7.0 spells them), categories, and the error reply shape.

use bson::{doc, Bson, Document};

pub const BAD_VALUE: i32 = 2;
pub const FAILED_TO_PARSE: i32 = 9;
pub const NO_SUCH_KEY: i32 = 4;
pub const USER_NOT_FOUND: i32 = 11;
pub const UNAUTHORIZED: i32 = 13;
pub const TYPE_MISMATCH: i32 = 14;
pub const PROTOCOL_ERROR: i32 = 17;
pub const AUTHENTICATION_FAILED: i32 = 18;
pub const ILLEGAL_OPERATION: i32 = 20;
pub const MAX_TIME_MS_EXPIRED: i32 = 50;
pub const COMMAND_NOT_FOUND: i32 = 59;
pub const INVALID_OPTIONS: i32 = 72;
pub const NO_REPLICATION_ENABLED: i32 = 76;
pub const EXCEEDED_TIME_LIMIT: i32 = 262;
pub const FAIL_POINT_SET_FAILED: i32 = 266;
pub const SHUTDOWN_IN_PROGRESS: i32 = 91;
pub const NO_SUCH_TRANSACTION: i32 = 251;
pub const API_VERSION_ERROR: i32 = 322;
pub const API_STRICT_ERROR: i32 = 323;
pub const API_DEPRECATION_ERROR: i32 = 324;
pub const MECHANISM_UNAVAILABLE: i32 = 334;
pub const UNSUPPORTED_OP_QUERY_COMMAND: i32 = 352;
/// mongod's "User ... already exists".
pub const USER_EXISTS: i32 = 51003;
pub const NOT_WRITABLE_PRIMARY: i32 = 10107;
pub const NOT_SECONDARY: i32 = 95;
pub const NOT_PRIMARY_NO_SECONDARY_OK: i32 = 13435;
pub const NOT_PRIMARY_OR_SECONDARY: i32 = 13436;
pub const OP_MSG_NO_DB: i32 = 40571;
/// `$changeStream` on a mongod that is not a replica-set member (no oplog).
pub const CHANGE_STREAM_NEEDS_REPLICA_SET: i32 = 40573;
/// Atlas Search index commands on a mongod without a search index
/// management host (`throwIfNotRunningWithRemoteSearchIndexManagement`).
pub const SEARCH_NOT_ENABLED: i32 = 31082;
/// A BSON field that must be a document is not (`topologyVersion: "x"`).
pub const OBJECT_EXPECTED: i32 = 10065;
/// IDL: a field's validator refused its value (`maxAwaitTimeMS: -1`).
pub const IDL_COMPARISON: i32 = 51024;
/// IDL: a required field is missing (a location code: no name).
pub const IDL_MISSING_FIELD: i32 = 40414;
/// IDL: `BSON field '<x>.<y>' is an unknown field.`
pub const IDL_UNKNOWN_FIELD: i32 = 40415;
/// A pipeline stage that must come first (`$listLocalSessions`) came later.
pub const LOCATION_40602: i32 = 40602;
/// apiStrict/apiDeprecationErrors without apiVersion (a location code: no name).
pub const API_PARAMETERS_WITHOUT_VERSION: i32 = 4886600;

const NAMES: &[(i32, &str)] = &[
    (1, "InternalError"),
    (2, "BadValue"),
    (4, "NoSuchKey"),
    (6, "HostUnreachable"),
    (7, "HostNotFound"),
    (8, "UnknownError"),
    (9, "FailedToParse"),
    (11, "UserNotFound"),
    (13, "Unauthorized"),
    (14, "TypeMismatch"),
    (17, "ProtocolError"),
    (18, "AuthenticationFailed"),
    (20, "IllegalOperation"),
    (22, "InvalidBSON"),
    (24, "LockTimeout"),
    (26, "NamespaceNotFound"),
    (27, "IndexNotFound"),
    (43, "CursorNotFound"),
    (48, "NamespaceExists"),
    (50, "MaxTimeMSExpired"),
    (59, "CommandNotFound"),
    (63, "OBSOLETE_StaleShardVersion"),
    (64, "WriteConcernFailed"),
    (67, "CannotCreateIndex"),
    (72, "InvalidOptions"),
    (73, "InvalidNamespace"),
    (76, "NoReplicationEnabled"),
    (79, "UnknownReplWriteConcern"),
    (85, "IndexOptionsConflict"),
    (86, "IndexKeySpecsConflict"),
    (89, "NetworkTimeout"),
    (91, "ShutdownInProgress"),
    (95, "NotSecondary"),
    (96, "OperationFailed"),
    (100, "UnsatisfiableWriteConcern"),
    (112, "WriteConflict"),
    (115, "CommandNotSupported"),
    (117, "ConflictingOperationInProgress"),
    (121, "DocumentValidationFailure"),
    (133, "FailedToSatisfyReadPreference"),
    (134, "ReadConcernMajorityNotAvailableYet"),
    (136, "CappedPositionLost"),
    (150, "StaleEpoch"),
    (175, "QueryPlanKilled"),
    (189, "PrimarySteppedDown"),
    (211, "KeyNotFound"),
    (223, "IllegalOpMsgFlag"),
    (225, "TransactionTooOld"),
    (234, "RetryChangeStream"),
    (237, "CursorKilled"),
    (239, "SnapshotTooOld"),
    (244, "NOT_YET_AVAILABLE_TransactionAborted"),
    (246, "SnapshotUnavailable"),
    (249, "StaleDbVersion"),
    (250, "StaleChunkHistory"),
    (251, "NoSuchTransaction"),
    (256, "TransactionCommitted"),
    (257, "TransactionTooLarge"),
    (262, "ExceededTimeLimit"),
    (263, "OperationNotSupportedInTransaction"),
    (266, "FailPointSetFailed"),
    (267, "PreparedTransactionInProgress"),
    (272, "MigrationConflict"),
    (279, "ClientDisconnect"),
    (280, "ChangeStreamFatalError"),
    (286, "ChangeStreamHistoryLost"),
    (290, "TransactionExceededLifetimeLimitSeconds"),
    (322, "APIVersionError"),
    (323, "APIStrictError"),
    (324, "APIDeprecationError"),
    (334, "MechanismUnavailable"),
    (352, "UnsupportedOpQueryCommand"),
    (9001, "SocketException"),
    (10107, "NotWritablePrimary"),
    (11000, "DuplicateKey"),
    (11600, "InterruptedAtShutdown"),
    (11601, "Interrupted"),
    (11602, "InterruptedDueToReplStateChange"),
    (13297, "DatabaseDifferCase"),
    (13388, "StaleConfig"),
    (13435, "NotPrimaryNoSecondaryOk"),
    (13436, "NotPrimaryOrSecondary"),
    (14031, "OutOfDiskSpace"),
    (31082, "SearchNotEnabled"),
];

/// mongod names a code it has no name for "Location<code>".
pub fn code_name(code: i32) -> String {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("Location{code}"))
}

/// mongod's RetriableError category (7.0).
pub fn is_retriable(code: i32) -> bool {
    matches!(
        code,
        6 | 7 | 89 | 91 | 134 | 189 | 262 | 358 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436
    )
}

pub fn is_network(code: i32) -> bool {
    matches!(code, 6 | 7 | 89 | 9001)
}

fn is_snapshot(code: i32) -> bool {
    matches!(code, 239 | 246 | 250 | 272)
}

fn is_need_retargetting(code: i32) -> bool {
    matches!(code, 13388 | 150)
}

/// mongod's `isTransientTransactionError` (error_labels.cpp).
pub fn is_transient_txn(code: i32, has_wce: bool, commit_or_abort: bool) -> bool {
    if code == 358 {
        return false;
    }
    if matches!(code, 112 | 24 | 267 | 343 | 249) {
        return true;
    }
    let mut transient = is_snapshot(code) || is_need_retargetting(code);
    if commit_or_abort {
        transient |= code == 251 && !has_wce;
    } else {
        transient |= is_retriable(code) || code == 251;
    }
    transient
}

/// Codes that may get the ResumableChangeStreamError label on a change-stream command, from
/// a server presenting `max_wire`: before 7.0 (wire 21) 63 was StaleShardVersion, a
/// NeedRetargettingError (7.0 made the code obsolete).
pub fn is_resumable_change_stream(code: i32, max_wire: i32) -> bool {
    is_retriable(code)
        || is_network(code)
        || is_need_retargetting(code)
        || matches!(code, 234 | 133)
        || (code == 63 && max_wire < 21)
}

pub fn is_non_resumable_change_stream(code: i32) -> bool {
    matches!(code, 280 | 286)
}

/// `{ok: 0, errmsg, code, codeName}` as mongod shapes a failed command.
pub fn error_doc(code: i32, errmsg: &str) -> Document {
    doc! { "ok": 0.0, "errmsg": errmsg, "code": code, "codeName": code_name(code) }
}

pub fn with_labels(mut reply: Document, labels: Vec<String>) -> Document {
    if !labels.is_empty() {
        reply.insert(
            "errorLabels",
            Bson::Array(labels.into_iter().map(Bson::String).collect()),
        );
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_shard_version_is_resumable_until_7_0() {
        assert!(is_resumable_change_stream(63, 17));
        assert!(!is_resumable_change_stream(63, 21));
        assert!(is_resumable_change_stream(6, 25));
        assert!(!is_resumable_change_stream(2, 8));
    }

    #[test]
    fn names_and_fallback() {
        assert_eq!(code_name(91), "ShutdownInProgress");
        assert_eq!(code_name(12345), "Location12345");
        assert!(is_retriable(10107) && !is_retriable(2));
        assert!(is_transient_txn(112, false, false));
        assert!(!is_transient_txn(91, false, true));
    }
}

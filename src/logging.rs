//! Logging spec, sans I/O: structured log messages per component and
//! severity, recorded only for the components and levels a client enables,
//! and drained like events (`Client::take_log_messages`). Documents appear as
//! relaxed extended JSON cut at maxDocumentLength (bytes, on a UTF-8
//! boundary) with "..." appended. The messages themselves are built next to
//! the events they mirror (`Loggable` in monitoring, cmap, sdam::monitoring).

use bson::raw::{CStr, RawDocument};
use bson::{RawBsonRef, RawDocumentBuf};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

/// Severity, most severe first (the spec's syslog levels). A component
/// enabled at a level records the messages of that level and the more severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    #[default]
    Off,
    Emergency,
    Alert,
    Critical,
    Error,
    Warning,
    Notice,
    Informational,
    Debug,
    Trace,
}

/// The spec's components (the specification each message comes from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Command,
    Topology,
    ServerSelection,
    Connection,
}

/// The default maxDocumentLength (bytes of extended JSON).
pub const DEFAULT_MAX_DOCUMENT_LENGTH: usize = 1000;

/// At most this many messages wait to be taken; past it the oldest are
/// dropped (as events: `monitoring::MAX_EVENTS`).
pub const MAX_MESSAGES: usize = crate::monitoring::MAX_EVENTS;

/// What a client logs: each component's minimum severity (off by default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub command: Level,
    pub topology: Level,
    pub server_selection: Level,
    pub connection: Level,
    /// Extended JSON longer than this many bytes is cut (default 1000).
    pub max_document_length: Option<usize>,
}

/// One structured log message. `data` holds the spec's fields, `message`
/// among them, as one BSON document (documents inside as extended JSON strings).
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage {
    pub component: Component,
    pub level: Level,
    pub message: String,
    pub data: RawDocumentBuf,
}

/// What building a message needs beyond its event.
#[derive(Debug)]
pub struct Context {
    pub max_document_length: usize,
    /// The pool options the URI gave explicitly ("Connection pool created").
    pub pool_options: RawDocumentBuf,
    /// The client's topology in SDAM messages (one per client).
    pub topology_id: i64,
}

#[derive(Debug)]
struct Shared {
    levels: [Level; 4],
    context: Context,
    messages: RefCell<VecDeque<LogMessage>>,
}

/// A client's log: cheap to clone, every clone records into the same queue
/// (so command, pool and SDAM messages keep their order). Off, it is `None`
/// and costs a branch.
#[derive(Debug, Clone, Default)]
pub struct Logger(Option<Rc<Shared>>);

impl Logger {
    /// `None` when every component is off.
    pub fn new(options: &LogOptions, pool_options: RawDocumentBuf) -> Logger {
        let levels = [
            options.command,
            options.topology,
            options.server_selection,
            options.connection,
        ];
        if levels.iter().all(|l| *l == Level::Off) {
            return Logger(None);
        }
        let max_document_length = options
            .max_document_length
            .unwrap_or(DEFAULT_MAX_DOCUMENT_LENGTH);
        Logger(Some(Rc::new(Shared {
            levels,
            context: Context {
                max_document_length,
                pool_options,
                topology_id: next_topology_id(),
            },
            messages: RefCell::new(VecDeque::new()),
        })))
    }

    /// Whether messages of `component` at `level` are recorded.
    #[inline]
    pub fn enabled(&self, component: Component, level: Level) -> bool {
        match &self.0 {
            None => false,
            Some(s) => level != Level::Off && level <= s.levels[component as usize],
        }
    }

    /// Records the message `make` builds, if its component and level are
    /// enabled (else `make` is not even called).
    pub fn log(
        &self,
        component: Component,
        level: Level,
        make: impl FnOnce(&Context) -> Option<LogMessage>,
    ) {
        let Some(shared) = self.0.as_ref() else {
            return;
        };
        if !self.enabled(component, level) {
            return;
        }
        if let Some(message) = make(&shared.context) {
            let mut messages = shared.messages.borrow_mut();
            if messages.len() >= MAX_MESSAGES {
                messages.pop_front();
            }
            messages.push_back(message);
        }
    }

    /// Records an event's message (at debug, the level of every message
    /// that mirrors an event).
    pub fn event<E: Loggable>(&self, event: &E) {
        self.log(E::COMPONENT, Level::Debug, |cx| event.log_message(cx));
    }

    pub fn take(&self) -> Vec<LogMessage> {
        match &self.0 {
            Some(s) => s.messages.borrow_mut().drain(..).collect(),
            None => Vec::new(),
        }
    }
}

/// A new topologyId (SDAM messages: distinct per client of the process).
fn next_topology_id() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NEXT: AtomicI64 = AtomicI64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// An event that has a log message (at debug level) in its component.
pub trait Loggable {
    const COMPONENT: Component;
    /// The event's message; `None` for events the spec gives none.
    fn log_message(&self, cx: &Context) -> Option<LogMessage>;
}

/// Builds one message's data, keys in the spec's order.
pub struct Fields<'a> {
    component: Component,
    level: Level,
    message: &'static str,
    cx: &'a Context,
    data: RawDocumentBuf,
}

impl<'a> Fields<'a> {
    pub fn new(cx: &'a Context, component: Component, message: &'static str) -> Fields<'a> {
        let mut data = RawDocumentBuf::new();
        data.append(bson::cstr!("message"), message);
        Fields {
            component,
            level: Level::Debug,
            message,
            cx,
            data,
        }
    }

    /// A level other than debug (the default).
    pub fn at(self, level: Level) -> Self {
        Fields { level, ..self }
    }

    pub fn str(mut self, key: &CStr, value: &str) -> Self {
        self.data.append(key, value);
        self
    }

    pub fn int(mut self, key: &CStr, value: i64) -> Self {
        self.data.append(key, value);
        self
    }

    pub fn bool(mut self, key: &CStr, value: bool) -> Self {
        self.data.append(key, value);
        self
    }

    /// `serverHost` and `serverPort` of a `host:port` address.
    pub fn server(self, address: &str) -> Self {
        let (host, port) = split_address(address);
        self.str(bson::cstr!("serverHost"), host)
            .int(bson::cstr!("serverPort"), i64::from(port))
    }

    /// `durationMS`, in (fractional) milliseconds.
    pub fn duration(mut self, d: Duration) -> Self {
        self.data
            .append(bson::cstr!("durationMS"), d.as_secs_f64() * 1000.0);
        self
    }

    /// A document as truncated relaxed extended JSON.
    pub fn document(self, key: &CStr, doc: &RawDocument) -> Self {
        let json = ext_json(doc, self.cx.max_document_length);
        self.str(key, &json)
    }

    /// Text that may be long (an error, which can quote the server), cut
    /// like a document.
    pub fn text(self, key: &CStr, text: &str) -> Self {
        let cut = truncate(text, self.cx.max_document_length);
        self.str(key, &cut)
    }

    /// Appends every field of `doc` as is.
    pub fn all(mut self, doc: &RawDocument) -> Self {
        for (k, v) in doc.iter().flatten() {
            self.data.append(k, bson::RawBson::from(v));
        }
        self
    }

    pub fn finish(self) -> Option<LogMessage> {
        Some(LogMessage {
            component: self.component,
            level: self.level,
            message: self.message.to_string(),
            data: self.data,
        })
    }
}

/// `host` and port of `host:port` (`[v6]:port` too); 27017 when absent.
pub fn split_address(address: &str) -> (&str, u16) {
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) if h.ends_with(']') || !h.contains(':') => (h, p.parse().unwrap_or(27017)),
        _ => (address, 27017),
    };
    (host.trim_start_matches('[').trim_end_matches(']'), port)
}

/// `text` cut to at most `max` bytes on a character boundary, with "..."
/// appended when anything was cut (the ellipsis does not count).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 3);
    out.push_str(&text[..end]);
    out.push_str("...");
    out
}

/// `doc` as relaxed extended JSON, cut at `max` bytes (`truncate`). Writing
/// stops once past `max`, so a huge document costs no more than the cut.
pub fn ext_json(doc: &RawDocument, max: usize) -> String {
    let mut w = JsonWriter {
        out: String::new(),
        limit: max.saturating_add(1),
    };
    w.document(doc);
    truncate(&w.out, max)
}

struct JsonWriter {
    out: String,
    /// Writing stops once the output is this long.
    limit: usize,
}

impl JsonWriter {
    fn full(&self) -> bool {
        self.out.len() >= self.limit
    }

    fn document(&mut self, doc: &RawDocument) {
        self.out.push('{');
        for (i, element) in doc.iter().enumerate() {
            if self.full() {
                return;
            }
            let Ok((key, value)) = element else {
                // A malformed document: show what could be read.
                break;
            };
            if i > 0 {
                self.out.push(',');
            }
            self.string(key.as_str());
            self.out.push(':');
            self.value(value);
        }
        self.out.push('}');
    }

    fn array(&mut self, arr: &bson::RawArray) {
        self.out.push('[');
        for (i, value) in arr.into_iter().enumerate() {
            if self.full() {
                return;
            }
            let Ok(value) = value else { break };
            if i > 0 {
                self.out.push(',');
            }
            self.value(value);
        }
        self.out.push(']');
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
            if self.full() {
                return;
            }
        }
        self.out.push('"');
    }

    /// `{"$key":"text"}`
    fn wrapped(&mut self, key: &str, text: &str) {
        let _ = write!(self.out, "{{\"{key}\":");
        self.string(text);
        self.out.push('}');
    }

    fn value(&mut self, value: RawBsonRef<'_>) {
        match value {
            RawBsonRef::Double(d) if d.is_finite() => {
                let _ = write!(self.out, "{d:?}");
            }
            RawBsonRef::Double(d) => {
                let text = match d {
                    d if d.is_nan() => "NaN",
                    d if d > 0.0 => "Infinity",
                    _ => "-Infinity",
                };
                self.wrapped("$numberDouble", text);
            }
            RawBsonRef::String(s) => self.string(s),
            RawBsonRef::Document(d) => self.document(d),
            RawBsonRef::Array(a) => self.array(a),
            RawBsonRef::Boolean(b) => {
                let _ = write!(self.out, "{b}");
            }
            RawBsonRef::Null => self.out.push_str("null"),
            RawBsonRef::Undefined => self.out.push_str("{\"$undefined\":true}"),
            RawBsonRef::Int32(i) => {
                let _ = write!(self.out, "{i}");
            }
            RawBsonRef::Int64(i) => {
                let _ = write!(self.out, "{i}");
            }
            RawBsonRef::ObjectId(oid) => self.wrapped("$oid", &oid.to_hex()),
            RawBsonRef::DateTime(dt) => match dt.try_to_rfc3339_string() {
                Ok(iso) if (0..=253_402_300_799_999).contains(&dt.timestamp_millis()) => {
                    self.wrapped("$date", &iso)
                }
                _ => {
                    let ms = dt.timestamp_millis().to_string();
                    self.out.push_str("{\"$date\":");
                    self.wrapped("$numberLong", &ms);
                    self.out.push('}');
                }
            },
            RawBsonRef::Binary(b) => {
                use base64::Engine as _;
                let data = base64::engine::general_purpose::STANDARD.encode(b.bytes);
                let subtype = u8::from(b.subtype);
                let _ = write!(
                    self.out,
                    "{{\"$binary\":{{\"base64\":\"{data}\",\"subType\":\"{subtype:02x}\"}}}}"
                );
            }
            RawBsonRef::RegularExpression(r) => {
                self.out.push_str("{\"$regularExpression\":{\"pattern\":");
                self.string(r.pattern.as_str());
                self.out.push_str(",\"options\":");
                self.string(r.options.as_str());
                self.out.push_str("}}");
            }
            RawBsonRef::JavaScriptCode(code) => self.wrapped("$code", code),
            RawBsonRef::JavaScriptCodeWithScope(c) => {
                self.out.push_str("{\"$code\":");
                self.string(c.code);
                self.out.push_str(",\"$scope\":");
                self.document(c.scope);
                self.out.push('}');
            }
            RawBsonRef::Timestamp(t) => {
                let _ = write!(
                    self.out,
                    "{{\"$timestamp\":{{\"t\":{},\"i\":{}}}}}",
                    t.time, t.increment
                );
            }
            RawBsonRef::Symbol(s) => self.wrapped("$symbol", s),
            RawBsonRef::Decimal128(d) => self.wrapped("$numberDecimal", &d.to_string()),
            RawBsonRef::MaxKey => self.out.push_str("{\"$maxKey\":1}"),
            RawBsonRef::MinKey => self.out.push_str("{\"$minKey\":1}"),
            // Deprecated and its fields are private to bson: shown by name only.
            RawBsonRef::DbPointer(_) => self.out.push_str("{\"$dbPointer\":{}}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn cx(max: usize) -> Context {
        Context {
            max_document_length: max,
            pool_options: RawDocumentBuf::new(),
            topology_id: 1,
        }
    }

    #[test]
    fn extended_json_is_relaxed_and_parses_back() {
        let oid = bson::oid::ObjectId::parse_str("5f0c9e9f1c9d440000a1b2c3").unwrap();
        let doc = rawdoc! {
            "find": "c", "n": 1, "l": 2_i64, "d": 1.5, "whole": 2.0, "t": true, "z": null,
            "s": "a\"b\\c\n\u{1}é", "a": [1, {"x": "y"}], "id": oid,
            "inf": f64::INFINITY,
            "when": bson::DateTime::from_millis(0),
            "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "ts": bson::Timestamp { time: 5, increment: 6 },
        };
        let json = ext_json(&doc, 10_000);
        assert!(json.starts_with(r#"{"find":"c","n":1,"l":2,"d":1.5,"whole":2.0,"t":true"#));
        assert!(json.contains(r#""id":{"$oid":"5f0c9e9f1c9d440000a1b2c3"}"#));
        assert!(json.contains(r#""inf":{"$numberDouble":"Infinity"}"#));
        assert!(json.contains(r#""when":{"$date":"1970-01-01T00:00:00Z"}"#));
        assert!(json.contains(r#""bin":{"$binary":{"base64":"AQID","subType":"00"}}"#));
        assert!(json.contains(r#""ts":{"$timestamp":{"t":5,"i":6}}"#));
        let back: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(back["s"], "a\"b\\c\n\u{1}é");
        assert_eq!(back["a"][1]["x"], "y");
    }

    #[test]
    fn truncation_cuts_at_the_limit_on_a_char_boundary_and_adds_an_ellipsis() {
        let doc = rawdoc! { "s": "x".repeat(2000) };
        let json = ext_json(&doc, DEFAULT_MAX_DOCUMENT_LENGTH);
        assert_eq!(json.len(), 1000 + 3);
        assert!(json.ends_with("xxx..."));
        assert_eq!(
            ext_json(&rawdoc! { "a": 1 }, 1000),
            r#"{"a":1}"#,
            "short: whole"
        );
        assert_eq!(
            ext_json(&rawdoc! { "a": 1 }, 7),
            r#"{"a":1}"#,
            "exactly max: whole"
        );
        assert_eq!(ext_json(&rawdoc! { "a": 1 }, 6), r#"{"a":1..."#);
        // "é" is two bytes: a cut inside it goes back to its start.
        assert_eq!(truncate("aé", 2), "a...");
        assert_eq!(truncate("aé", 3), "aé");
        assert_eq!(ext_json(&rawdoc! { "a": 1 }, 0), "...");
    }

    #[test]
    fn a_huge_document_is_written_only_up_to_the_cut() {
        let mut big = bson::RawArrayBuf::new();
        for i in 0..100_000 {
            big.push(i);
        }
        let mut w = JsonWriter {
            out: String::new(),
            limit: 51,
        };
        w.document(&rawdoc! { "a": big });
        assert!(w.out.len() < 100, "stopped early: {} bytes", w.out.len());
    }

    #[test]
    fn severity_filters_per_component() {
        let options = LogOptions {
            command: Level::Debug,
            connection: Level::Informational,
            ..Default::default()
        };
        let log = Logger::new(&options, RawDocumentBuf::new());
        assert!(log.enabled(Component::Command, Level::Debug));
        assert!(log.enabled(Component::Command, Level::Error));
        assert!(!log.enabled(Component::Command, Level::Trace));
        assert!(log.enabled(Component::Connection, Level::Informational));
        assert!(!log.enabled(Component::Connection, Level::Debug));
        assert!(!log.enabled(Component::Topology, Level::Emergency));
        assert!(!log.enabled(Component::Command, Level::Off));
        let message = |cx: &Context| Fields::new(cx, Component::Connection, "m").finish();
        log.log(Component::Connection, Level::Debug, |_| {
            unreachable!("filtered")
        });
        log.log(Component::Connection, Level::Informational, message);
        let clone = log.clone();
        clone.log(Component::Connection, Level::Informational, message);
        assert_eq!(log.take().len(), 2, "clones share one queue");
        assert!(log.take().is_empty(), "taking drains");
        let off = Logger::new(&LogOptions::default(), RawDocumentBuf::new());
        assert!(off.0.is_none(), "all off: nothing allocated");
        off.log(Component::Command, Level::Error, |_| unreachable!("off"));
    }

    #[test]
    fn fields_carry_server_duration_and_cut_text() {
        let cx = cx(4);
        let m = Fields::new(&cx, Component::Command, "Command failed")
            .server("[::1]:27018")
            .duration(Duration::from_micros(1500))
            .text(bson::cstr!("failure"), "abcdefgh")
            .document(bson::cstr!("reply"), &rawdoc! { "ok": 1 })
            .finish()
            .unwrap();
        let d = &m.data;
        assert_eq!(d.get_str("message").unwrap(), "Command failed");
        assert_eq!(d.get_str("serverHost").unwrap(), "::1");
        assert_eq!(d.get_i64("serverPort").unwrap(), 27018);
        assert_eq!(d.get_f64("durationMS").unwrap(), 1.5);
        assert_eq!(d.get_str("failure").unwrap(), "abcd...");
        assert_eq!(d.get_str("reply").unwrap(), "{\"ok...");
        assert_eq!(split_address("db.example:1"), ("db.example", 1));
        assert_eq!(split_address("db.example"), ("db.example", 27017));
    }
}

//! Server selection (Server Selection and Max Staleness specs), sans I/O:
//! read preferences, which known servers suit an operation, the latency
//! window among them, the choice within it, and the `$readPreference` a
//! command carries. The official JSON suites run natively
//! (`tests/server_selection_spec.rs`).

use super::{ServerDescription, ServerType, TopologyDescription, TopologyType};
use crate::uri::TagSet;
use bson::{cstr, RawDocument, RawDocumentBuf};
use std::time::Duration;

/// Server Selection logging: what one selection's messages tell (the
/// operation, its id, the criteria) and the messages themselves.
pub struct SelectionLog<'a> {
    pub log: &'a crate::logging::Logger,
    pub operation: &'a str,
    pub operation_id: i64,
    pub criteria: &'a Criteria,
}

impl SelectionLog<'_> {
    fn message(
        &self,
        level: crate::logging::Level,
        message: &'static str,
        topology: &TopologyDescription,
        more: impl FnOnce(crate::logging::Fields) -> crate::logging::Fields,
    ) {
        use crate::logging::{Component, Fields};
        self.log.log(Component::ServerSelection, level, |cx| {
            let f = Fields::new(cx, Component::ServerSelection, message)
                .at(level)
                .text(cstr!("selector"), &format!("{:?}", self.criteria))
                .int(cstr!("operationId"), self.operation_id)
                .str(cstr!("operation"), self.operation)
                .text(
                    cstr!("topologyDescription"),
                    &super::monitoring::summary(topology),
                );
            more(f).finish()
        });
    }

    pub fn started(&self, topology: &TopologyDescription) {
        let level = crate::logging::Level::Debug;
        self.message(level, "Server selection started", topology, |f| f);
    }

    /// Once per selection, when no server suits yet.
    pub fn waiting(&self, topology: &TopologyDescription, remaining: Option<Duration>) {
        let level = crate::logging::Level::Informational;
        let message = "Waiting for suitable server to become available";
        self.message(level, message, topology, |f| match remaining {
            Some(d) => f.int(cstr!("remainingTimeMS"), d.as_millis() as i64),
            None => f,
        });
    }

    pub fn succeeded(&self, topology: &TopologyDescription, address: &str) {
        let level = crate::logging::Level::Debug;
        self.message(level, "Server selection succeeded", topology, |f| {
            f.server(address)
        });
    }

    pub fn failed(&self, topology: &TopologyDescription, failure: &crate::error::Error) {
        let level = crate::logging::Level::Debug;
        self.message(level, "Server selection failed", topology, |f| {
            f.text(cstr!("failure"), &failure.to_string())
        });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

impl ReadMode {
    pub fn parse(s: &str) -> Option<ReadMode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "primary" => ReadMode::Primary,
            "primarypreferred" => ReadMode::PrimaryPreferred,
            "secondary" => ReadMode::Secondary,
            "secondarypreferred" => ReadMode::SecondaryPreferred,
            "nearest" => ReadMode::Nearest,
            _ => return None,
        })
    }

    /// The mode's name in a `$readPreference` document.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::Primary => "primary",
            ReadMode::PrimaryPreferred => "primaryPreferred",
            ReadMode::Secondary => "secondary",
            ReadMode::SecondaryPreferred => "secondaryPreferred",
            ReadMode::Nearest => "nearest",
        }
    }
}

/// The Max Staleness spec's idleWritePeriodMS: an idle primary writes this often.
pub const IDLE_WRITE_PERIOD: Duration = Duration::from_secs(10);
/// smallestMaxStalenessSeconds.
pub const SMALLEST_MAX_STALENESS_SECONDS: i64 = 90;

/// A read preference: a mode, tag sets tried in order (none: any server),
/// and a maximum staleness in seconds (`None`: no maximum; -1 means none too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPreference {
    pub mode: ReadMode,
    pub tag_sets: Vec<TagSet>,
    pub max_staleness_seconds: Option<i64>,
}

impl Default for ReadPreference {
    /// Mode primary, the spec's default.
    fn default() -> Self {
        ReadPreference::primary()
    }
}

impl From<ReadMode> for ReadPreference {
    fn from(mode: ReadMode) -> Self {
        ReadPreference {
            mode,
            tag_sets: Vec::new(),
            max_staleness_seconds: None,
        }
    }
}

impl ReadPreference {
    pub fn primary() -> Self {
        ReadMode::Primary.into()
    }

    /// From a `{mode, tags (or tag_sets), maxStalenessSeconds}` document;
    /// an unknown mode or a malformed field is an error that says which.
    pub fn from_document(doc: &RawDocument) -> Result<Self, String> {
        let mode = match doc.get("mode").map_err(|e| e.to_string())? {
            None => ReadMode::Primary,
            Some(m) => {
                let m = m.as_str().ok_or("read preference mode must be a string")?;
                ReadMode::parse(m).ok_or_else(|| format!("unknown read preference mode {m:?}"))?
            }
        };
        let mut tag_sets = Vec::new();
        let tags = doc.get_array("tags").or_else(|_| doc.get_array("tag_sets"));
        for set in tags.into_iter().flatten() {
            let set = set.map_err(|e| e.to_string())?;
            let set = set.as_document().ok_or("a tag set must be a document")?;
            let mut tags = TagSet::new();
            for field in set {
                let (k, v) = field.map_err(|e| e.to_string())?;
                let v = v.as_str().ok_or("a tag's value must be a string")?;
                tags.insert(k.to_string(), v.to_string());
            }
            tag_sets.push(tags);
        }
        let max_staleness_seconds =
            match doc.get("maxStalenessSeconds").map_err(|e| e.to_string())? {
                None => None,
                Some(_) => match crate::wire::raw::int_field(doc, "maxStalenessSeconds") {
                    Some(-1) => None,
                    Some(s) => Some(s),
                    None => return Err("maxStalenessSeconds must be an integer".into()),
                },
            };
        Ok(ReadPreference {
            mode,
            tag_sets,
            max_staleness_seconds,
        })
    }

    /// The client's default from the URI (readPreference, readPreferenceTags,
    /// maxStalenessSeconds), if it gives one.
    pub fn from_uri(o: &crate::uri::UriOptions) -> Option<Self> {
        let mode = ReadMode::parse(o.read_preference?.as_str())?;
        Some(ReadPreference {
            mode,
            tag_sets: o.read_preference_tags.clone().unwrap_or_default(),
            max_staleness_seconds: o.max_staleness_seconds.map(i64::from).filter(|s| *s != -1),
        })
    }

    /// The `$readPreference` document (mode, `tags`, `maxStalenessSeconds`).
    pub fn to_document(&self) -> RawDocumentBuf {
        let mut doc = RawDocumentBuf::new();
        doc.append(cstr!("mode"), self.mode.as_str());
        if self.mode != ReadMode::Primary {
            if !self.tag_sets.is_empty() {
                let mut sets = bson::RawArrayBuf::new();
                for set in &self.tag_sets {
                    let mut d = RawDocumentBuf::new();
                    for (k, v) in set {
                        // Tag names come from the user; a NUL cannot go in BSON.
                        if let Ok(k) = <&bson::raw::CStr>::try_from(k.as_str()) {
                            d.append(k, v.as_str());
                        }
                    }
                    sets.push(d);
                }
                doc.append(cstr!("tags"), sets);
            }
            match self.max_staleness_seconds.map(|s| (s, i32::try_from(s))) {
                Some((_, Ok(s))) => doc.append(cstr!("maxStalenessSeconds"), s),
                Some((s, Err(_))) => doc.append(cstr!("maxStalenessSeconds"), s),
                None => {}
            }
        }
        doc
    }

    /// The spec's validation: tag sets or a max staleness with mode
    /// primary, and (in a replica set) a max staleness below
    /// smallestMaxStalenessSeconds or heartbeatFrequencyMS + idleWritePeriodMS.
    pub fn validate(&self, kind: TopologyType, heartbeat: Duration) -> Result<(), String> {
        if self.mode == ReadMode::Primary {
            if self.tag_sets.iter().any(|t| !t.is_empty()) {
                return Err("read preference mode primary cannot have tag sets".into());
            }
            if self.max_staleness_seconds.is_some() {
                return Err("read preference mode primary cannot have maxStalenessSeconds".into());
            }
        }
        let Some(max) = self.max_staleness_seconds else {
            return Ok(());
        };
        let least = (heartbeat + IDLE_WRITE_PERIOD).as_millis();
        if kind.is_replica_set()
            && (max < SMALLEST_MAX_STALENESS_SECONDS || i128::from(max) * 1000 < least as i128)
        {
            return Err(format!(
                "maxStalenessSeconds {max} is less than {SMALLEST_MAX_STALENESS_SECONDS} or than \
                 heartbeatFrequencyMS + idleWritePeriodMS ({least} ms)"
            ));
        }
        Ok(())
    }
}

/// What an operation needs: a writable server, or a readable one by read preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Criteria {
    Write,
    Read(ReadPreference),
    /// An aggregate with `$out`/`$merge` (CRUD spec): a read by this
    /// preference when every known server is 5.0+, else a write.
    WriteStage(ReadPreference),
}

/// As a message shows it: "a write", "a read (read preference secondary,
/// tags [{dc: ny}], maxStalenessSeconds 90)".
impl std::fmt::Display for Criteria {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Criteria::Write => f.write_str("a write"),
            Criteria::Read(pref) => write!(f, "a read ({pref})"),
            Criteria::WriteStage(pref) => write!(f, "an aggregate with $out or $merge ({pref})"),
        }
    }
}

impl std::fmt::Display for ReadPreference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "read preference {}", self.mode.as_str())?;
        if !self.tag_sets.is_empty() {
            let sets: Vec<String> = self
                .tag_sets
                .iter()
                .map(|set| {
                    let tags: Vec<String> = set.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    format!("{{{}}}", tags.join(", "))
                })
                .collect();
            write!(f, ", tags [{}]", sets.join(", "))?;
        }
        if let Some(s) = self.max_staleness_seconds {
            write!(f, ", maxStalenessSeconds {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[test]
fn criteria_read_as_words_not_rust() {
    let mut pref = ReadPreference::from(ReadMode::Secondary);
    pref.tag_sets = vec![[("dc".to_string(), "ny".to_string())].into()];
    pref.max_staleness_seconds = Some(90);
    assert_eq!(
        Criteria::Read(pref).to_string(),
        "a read (read preference secondary, tags [{dc: ny}], maxStalenessSeconds 90)"
    );
    assert_eq!(
        Criteria::read(ReadMode::Primary).to_string(),
        "a read (read preference primary)"
    );
    assert_eq!(Criteria::Write.to_string(), "a write");
}

/// Servers from 5.0 (wire version 13) run `$out`/`$merge` on secondaries.
const WRITE_STAGE_ON_SECONDARY_WIRE_VERSION: i32 = 13;

impl Criteria {
    /// A read with only a mode.
    pub fn read(mode: ReadMode) -> Criteria {
        Criteria::Read(mode.into())
    }

    /// What the criteria ask of `topology` as it is now: a write-stage
    /// aggregate reads by its preference only once servers are known and
    /// all of them are 5.0+; otherwise it goes to the primary.
    pub fn resolve(&self, topology: &TopologyDescription) -> Criteria {
        let Criteria::WriteStage(pref) = self else {
            return self.clone();
        };
        let mut known = topology
            .servers
            .iter()
            .filter(|s| s.kind.is_known())
            .peekable();
        let all_new = known.peek().is_some()
            && known.all(|s| {
                s.hello
                    .as_ref()
                    .is_some_and(|h| h.max_wire_version >= WRITE_STAGE_ON_SECONDARY_WIRE_VERSION)
            });
        match all_new {
            true => Criteria::Read(pref.clone()),
            false => Criteria::Write,
        }
    }
}

/// Why selection cannot succeed whatever the topology learns next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectionError {
    /// The read preference is invalid (for this topology).
    InvalidReadPreference(String),
    /// A server's wire versions do not overlap this driver's.
    Incompatible(String),
}

/// The `$readPreference` a command sends over OP_MSG to a server of
/// `server` type in a `topology` (Server Selection spec): none for writes;
/// in a Single topology none to a standalone, primaryPreferred (or the
/// read preference when it is not primary) to a replica set member, so any
/// member serves it; elsewhere the read preference unless it is primary,
/// the servers' default. The one place that decides secondaryOk.
pub fn read_preference_document(
    topology: TopologyType,
    server: ServerType,
    criteria: &Criteria,
) -> Option<RawDocumentBuf> {
    let Criteria::Read(pref) = criteria else {
        // WriteStage resolves (`Criteria::resolve`) before it gets here.
        return None;
    };
    let primary = pref.mode == ReadMode::Primary;
    match topology {
        TopologyType::Unknown => None,
        TopologyType::Single => match server {
            ServerType::Standalone => None,
            ServerType::Mongos | ServerType::LoadBalancer => (!primary).then(|| pref.to_document()),
            _ if primary => Some(ReadPreference::from(ReadMode::PrimaryPreferred).to_document()),
            _ => Some(pref.to_document()),
        },
        _ => (!primary).then(|| pref.to_document()),
    }
}

/// The servers suitable for `criteria` (deprioritized ones left out unless
/// nothing else suits), narrowed to the latency window.
pub fn suitable<'a>(
    topology: &'a TopologyDescription,
    criteria: &Criteria,
    local_threshold: Duration,
    heartbeat: Duration,
    deprioritized: &[&str],
) -> Result<Vec<&'a ServerDescription>, SelectionError> {
    let criteria = &criteria.resolve(topology);
    let found = suitable_servers(topology, criteria, heartbeat, deprioritized)?;
    Ok(latency_window(found, local_threshold))
}

/// The spec's "find suitable servers": deprioritized servers (where a
/// retried operation just failed) are filtered out first and let back in
/// only if nothing else suits; then by topology type and operation type.
pub fn suitable_servers<'a>(
    topology: &'a TopologyDescription,
    criteria: &Criteria,
    heartbeat: Duration,
    deprioritized: &[&str],
) -> Result<Vec<&'a ServerDescription>, SelectionError> {
    if let Some(e) = &topology.compatibility_error {
        return Err(SelectionError::Incompatible(e.clone()));
    }
    if let Criteria::Read(pref) = criteria {
        pref.validate(topology.kind, heartbeat)
            .map_err(SelectionError::InvalidReadPreference)?;
    }
    let preferred: Vec<&ServerDescription> = topology
        .servers
        .iter()
        .filter(|s| !deprioritized.contains(&s.address.as_str()))
        .collect();
    let mut found = candidates(topology, preferred, criteria, heartbeat);
    if found.is_empty() && !deprioritized.is_empty() {
        found = candidates(
            topology,
            topology.servers.iter().collect(),
            criteria,
            heartbeat,
        );
    }
    Ok(found)
}

/// The candidates among `servers` by topology type and operation type.
fn candidates<'a>(
    topology: &'a TopologyDescription,
    servers: Vec<&'a ServerDescription>,
    criteria: &Criteria,
    heartbeat: Duration,
) -> Vec<&'a ServerDescription> {
    let of = |kinds: &[ServerType]| -> Vec<&'a ServerDescription> {
        servers
            .iter()
            .copied()
            .filter(|s| kinds.contains(&s.kind))
            .collect()
    };
    match topology.kind {
        TopologyType::Unknown => Vec::new(),
        // Single: any known server; the user chose it (a direct connection).
        TopologyType::Single => servers
            .iter()
            .copied()
            .filter(|s| s.kind.is_known())
            .collect(),
        // Mongos and load balancers get the read preference passed through.
        TopologyType::Sharded => of(&[ServerType::Mongos]),
        TopologyType::LoadBalanced => of(&[ServerType::LoadBalancer]),
        TopologyType::ReplicaSetNoPrimary | TopologyType::ReplicaSetWithPrimary => {
            let pref = match criteria {
                Criteria::Write | Criteria::WriteStage(_) => return of(&[ServerType::RsPrimary]),
                Criteria::Read(pref) => pref,
            };
            let primary = || of(&[ServerType::RsPrimary]);
            let eligible = |kinds: &[ServerType]| eligible(topology, of(kinds), pref, heartbeat);
            match pref.mode {
                ReadMode::Primary => primary(),
                ReadMode::PrimaryPreferred => {
                    let p = primary();
                    if p.is_empty() {
                        eligible(&[ServerType::RsSecondary])
                    } else {
                        p
                    }
                }
                ReadMode::Secondary => eligible(&[ServerType::RsSecondary]),
                ReadMode::SecondaryPreferred => {
                    let s = eligible(&[ServerType::RsSecondary]);
                    if s.is_empty() {
                        primary()
                    } else {
                        s
                    }
                }
                ReadMode::Nearest => eligible(&[ServerType::RsPrimary, ServerType::RsSecondary]),
            }
        }
    }
}

/// Candidates narrowed by maxStalenessSeconds, then by the first tag set
/// that matches any of them.
fn eligible<'a>(
    topology: &TopologyDescription,
    candidates: Vec<&'a ServerDescription>,
    pref: &ReadPreference,
    heartbeat: Duration,
) -> Vec<&'a ServerDescription> {
    let fresh: Vec<&ServerDescription> = match pref.max_staleness_seconds {
        Some(max) if max > 0 => candidates
            .into_iter()
            .filter(|s| staleness_ms(topology, s, heartbeat) <= i128::from(max) * 1000)
            .collect(),
        _ => candidates,
    };
    if pref.tag_sets.is_empty() {
        return fresh;
    }
    for set in &pref.tag_sets {
        let matching: Vec<&ServerDescription> = fresh
            .iter()
            .copied()
            .filter(|s| {
                let tags = s.tags();
                set.iter()
                    .all(|(k, v)| tags.and_then(|t| t.get(k)) == Some(v))
            })
            .collect();
        if !matching.is_empty() {
            return matching;
        }
    }
    Vec::new()
}

/// A secondary's estimated staleness in ms (Server Selection spec,
/// maxStalenessSeconds); zero for any other server.
fn staleness_ms(
    topology: &TopologyDescription,
    s: &ServerDescription,
    heartbeat: Duration,
) -> i128 {
    if s.kind != ServerType::RsSecondary {
        return 0;
    }
    let write = |d: &ServerDescription| i128::from(d.last_write_date().unwrap_or(0));
    let update = |d: &ServerDescription| i128::from(d.last_update_ms.unwrap_or(0));
    let heartbeat = heartbeat.as_millis() as i128;
    let primary = topology
        .servers
        .iter()
        .find(|p| p.kind == ServerType::RsPrimary);
    match (topology.kind, primary) {
        (TopologyType::ReplicaSetWithPrimary, Some(p)) => {
            (update(s) - write(s)) - (update(p) - write(p)) + heartbeat
        }
        _ => {
            let newest = topology
                .servers
                .iter()
                .filter(|d| d.kind == ServerType::RsSecondary)
                .map(write)
                .max()
                .unwrap_or(0);
            newest - write(s) + heartbeat
        }
    }
}

/// The suitable servers whose average RTT is within `threshold` of the fastest's.
pub fn latency_window(
    servers: Vec<&ServerDescription>,
    threshold: Duration,
) -> Vec<&ServerDescription> {
    let Some(fastest) = servers.iter().filter_map(|s| s.average_rtt).min() else {
        return servers;
    };
    servers
        .into_iter()
        .filter(|s| s.average_rtt.is_none_or(|rtt| rtt <= fastest + threshold))
        .collect()
}

/// The choice within the latency window: of two picked at random, the one
/// with fewer operations in progress (Server Selection spec; a
/// single-threaded client has at most one, so this is a random pick).
/// `random(n)` returns a number below `n`.
pub fn choose<'a>(
    window: &[&'a ServerDescription],
    operation_count: impl Fn(&str) -> u64,
    mut random: impl FnMut(usize) -> usize,
) -> Option<&'a ServerDescription> {
    match window.len() {
        0 => None,
        1 => Some(window[0]),
        n => {
            let a = random(n) % n;
            let b = (a + 1 + random(n - 1) % (n - 1)) % n;
            let (a, b) = (window[a], window[b]);
            Some(
                if operation_count(&b.address) < operation_count(&a.address) {
                    b
                } else {
                    a
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::HelloReply;

    fn topo(members: &[(&str, ServerType, u64)], kind: TopologyType) -> TopologyDescription {
        let seeds: Vec<String> = members.iter().map(|(a, _, _)| a.to_string()).collect();
        let mut t = TopologyDescription::new(&seeds, Some(false), Some("rs0".into()));
        t.kind = kind;
        for (s, (_, k, rtt)) in t.servers.iter_mut().zip(members) {
            s.kind = *k;
            s.hello = Some(HelloReply::default());
            s.average_rtt = Some(Duration::from_millis(*rtt));
        }
        t
    }

    const WINDOW: Duration = Duration::from_millis(15);
    const HEARTBEAT: Duration = Duration::from_secs(10);

    fn pick<'a>(t: &'a TopologyDescription, c: &Criteria, avoid: &[&str]) -> Vec<&'a str> {
        suitable(t, c, WINDOW, HEARTBEAT, avoid)
            .unwrap()
            .iter()
            .map(|s| s.address.as_str())
            .collect()
    }

    fn read(mode: ReadMode) -> Criteria {
        Criteria::read(mode)
    }

    #[test]
    fn a_write_stage_aggregate_reads_by_preference_only_when_every_known_server_is_5_0() {
        use ServerType as S;
        let secondary = ReadPreference::from(ReadMode::Secondary);
        let stage = Criteria::WriteStage(secondary.clone());
        let members = [
            ("p:1", S::RsPrimary, 5),
            ("s:1", S::RsSecondary, 5),
            ("u:1", S::Unknown, 5),
        ];
        let mut t = topo(&members, TopologyType::ReplicaSetWithPrimary);
        let wire = |t: &mut TopologyDescription, at: usize, v: i32| {
            t.servers[at].hello.as_mut().unwrap().max_wire_version = v;
        };
        for at in 0..3 {
            wire(&mut t, at, 13);
        }
        // The unknown member does not count.
        wire(&mut t, 2, 8);
        assert_eq!(stage.resolve(&t), Criteria::Read(secondary.clone()));
        assert_eq!(pick(&t, &stage, &[]), ["s:1"]);
        // One 4.4 secondary: the primary takes it, and no $readPreference is sent.
        wire(&mut t, 1, 9);
        assert_eq!(stage.resolve(&t), Criteria::Write);
        assert_eq!(pick(&t, &stage, &[]), ["p:1"]);
        // Nothing known yet: a write until servers are.
        let unknown = topo(&[("u:1", S::Unknown, 5)], TopologyType::Unknown);
        assert_eq!(stage.resolve(&unknown), Criteria::Write);
        // Other criteria are what they are.
        assert_eq!(read(ReadMode::Nearest).resolve(&t), read(ReadMode::Nearest));
    }

    #[test]
    fn read_preference_document_follows_topology_and_server() {
        use ServerType as S;
        use TopologyType as T;
        let mode = |d: Option<RawDocumentBuf>| d.map(|d| d.get_str("mode").unwrap().to_string());
        let nearest = read(ReadMode::Nearest);
        let primary = read(ReadMode::Primary);
        let rs = T::ReplicaSetWithPrimary;
        let doc = |t, s, c: &Criteria| mode(read_preference_document(t, s, c));
        assert_eq!(
            doc(rs, S::RsSecondary, &nearest).as_deref(),
            Some("nearest")
        );
        assert_eq!(doc(rs, S::RsPrimary, &primary), None);
        assert_eq!(doc(rs, S::RsPrimary, &Criteria::Write), None);
        assert_eq!(
            doc(T::Sharded, S::Mongos, &read(ReadMode::PrimaryPreferred)).as_deref(),
            Some("primaryPreferred")
        );
        // Direct connections: nothing to a standalone, any member may serve a replica set read.
        assert_eq!(doc(T::Single, S::Standalone, &nearest), None);
        assert_eq!(
            doc(T::Single, S::RsSecondary, &primary).as_deref(),
            Some("primaryPreferred")
        );
        assert_eq!(doc(T::Single, S::Mongos, &primary), None);
        assert_eq!(
            doc(T::Single, S::Mongos, &nearest).as_deref(),
            Some("nearest")
        );
        for s in [
            "primary",
            "primaryPreferred",
            "secondary",
            "secondaryPreferred",
            "nearest",
        ] {
            assert_eq!(ReadMode::parse(s).unwrap().as_str(), s);
        }
    }

    #[test]
    fn read_preference_documents_round_trip_and_validate() {
        let doc = bson::rawdoc! { "mode": "secondary", "tags": [{ "dc": "ny" }, {}], "maxStalenessSeconds": 120 };
        let pref = ReadPreference::from_document(&doc).unwrap();
        assert_eq!(pref.tag_sets.len(), 2);
        assert_eq!(pref.max_staleness_seconds, Some(120));
        assert_eq!(pref.to_document(), doc);
        let rs = TopologyType::ReplicaSetNoPrimary;
        assert!(pref.validate(rs, HEARTBEAT).is_ok());
        // Below heartbeatFrequencyMS + idleWritePeriodMS.
        assert!(pref.validate(rs, Duration::from_secs(115)).is_err());
        // mongos checks it itself.
        assert!(pref
            .validate(TopologyType::Sharded, Duration::from_secs(115))
            .is_ok());
        let bad = bson::rawdoc! { "mode": "primary", "tags": [{ "dc": "ny" }] };
        let bad = ReadPreference::from_document(&bad).unwrap();
        assert!(bad.validate(TopologyType::Sharded, HEARTBEAT).is_err());
        assert!(ReadPreference::from_document(&bson::rawdoc! { "mode": "fastest" }).is_err());
        let none = bson::rawdoc! { "mode": "nearest", "maxStalenessSeconds": -1 };
        assert_eq!(
            ReadPreference::from_document(&none)
                .unwrap()
                .max_staleness_seconds,
            None
        );
    }

    #[test]
    fn writes_go_to_the_primary() {
        let t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 5),
                ("s:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(pick(&t, &Criteria::Write, &[]), ["p:1"]);
        assert_eq!(pick(&t, &read(ReadMode::Secondary), &[]), ["s:1"]);
    }

    #[test]
    fn tag_sets_are_tried_in_order() {
        let mut t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 1),
                ("a:1", ServerType::RsSecondary, 1),
                ("b:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        let tag = |dc: &str| TagSet::from([("dc".to_string(), dc.to_string())]);
        t.servers[1].hello.as_mut().unwrap().tags = tag("ny");
        t.servers[2].hello.as_mut().unwrap().tags = tag("sf");
        let pref = |sets: Vec<TagSet>, mode| {
            Criteria::Read(ReadPreference {
                mode,
                tag_sets: sets,
                max_staleness_seconds: None,
            })
        };
        let c = pref(vec![tag("la"), tag("sf"), tag("ny")], ReadMode::Secondary);
        assert_eq!(pick(&t, &c, &[]), ["b:1"]);
        let c = pref(vec![tag("la")], ReadMode::Secondary);
        assert!(pick(&t, &c, &[]).is_empty());
        // secondaryPreferred falls back to the primary, whose tags do not matter.
        let c = pref(vec![tag("la")], ReadMode::SecondaryPreferred);
        assert_eq!(pick(&t, &c, &[]), ["p:1"]);
    }

    #[test]
    fn preferred_modes_fall_back() {
        let t = topo(
            &[("s:1", ServerType::RsSecondary, 1)],
            TopologyType::ReplicaSetNoPrimary,
        );
        assert!(pick(&t, &Criteria::Write, &[]).is_empty());
        assert_eq!(pick(&t, &read(ReadMode::PrimaryPreferred), &[]), ["s:1"]);
        let t = topo(
            &[("p:1", ServerType::RsPrimary, 1)],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(pick(&t, &read(ReadMode::SecondaryPreferred), &[]), ["p:1"]);
    }

    #[test]
    fn latency_window_drops_slow_servers() {
        let t = topo(
            &[
                ("a:1", ServerType::RsSecondary, 5),
                ("b:1", ServerType::RsSecondary, 19),
                ("c:1", ServerType::RsSecondary, 30),
            ],
            TopologyType::ReplicaSetNoPrimary,
        );
        assert_eq!(pick(&t, &read(ReadMode::Nearest), &[]), ["a:1", "b:1"]);
    }

    #[test]
    fn unknown_topology_selects_nothing_and_single_selects_known() {
        let mut t = topo(&[("a:1", ServerType::Standalone, 1)], TopologyType::Unknown);
        assert!(pick(&t, &Criteria::Write, &[]).is_empty());
        t.kind = TopologyType::Single;
        assert_eq!(pick(&t, &Criteria::Write, &[]), ["a:1"]);
        t.servers[0].kind = ServerType::Unknown;
        assert!(pick(&t, &Criteria::Write, &[]).is_empty());
    }

    #[test]
    fn incompatible_topologies_fail_selection() {
        let mut t = topo(&[("a:1", ServerType::Standalone, 1)], TopologyType::Single);
        t.compatibility_error = Some("too old".into());
        assert!(matches!(
            suitable(&t, &Criteria::Write, WINDOW, HEARTBEAT, &[]),
            Err(SelectionError::Incompatible(_))
        ));
    }

    #[test]
    fn deprioritized_mongos_is_avoided_when_another_is_suitable() {
        let mut t = topo(
            &[
                ("m:1", ServerType::Mongos, 1),
                ("m:2", ServerType::Mongos, 1),
            ],
            TopologyType::Sharded,
        );
        let r = read(ReadMode::Primary);
        assert_eq!(pick(&t, &r, &["m:1"]), ["m:2"]);
        assert_eq!(pick(&t, &Criteria::Write, &["m:2"]), ["m:1"]);
        // The other mongos is down: the deprioritized one is still selected.
        t.servers[1].kind = ServerType::Unknown;
        assert_eq!(pick(&t, &r, &["m:1"]), ["m:1"]);
    }

    #[test]
    fn deprioritized_mongos_is_selected_when_alone() {
        let t = topo(&[("m:1", ServerType::Mongos, 1)], TopologyType::Sharded);
        assert_eq!(pick(&t, &read(ReadMode::Nearest), &["m:1"]), ["m:1"]);
    }

    #[test]
    fn deprioritization_applies_before_the_latency_window() {
        // The fast mongos failed: the slow one is the only one left, so it is chosen
        // even though it lies outside the window the fast one anchored.
        let t = topo(
            &[
                ("fast:1", ServerType::Mongos, 1),
                ("slow:1", ServerType::Mongos, 100),
            ],
            TopologyType::Sharded,
        );
        assert_eq!(pick(&t, &Criteria::Write, &[]), ["fast:1"]);
        assert_eq!(pick(&t, &Criteria::Write, &["fast:1"]), ["slow:1"]);
    }

    #[test]
    fn preferred_modes_fall_back_past_deprioritized_members() {
        // primaryPreferred with the primary deprioritized: a secondary (spec note).
        let t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 1),
                ("s:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(
            pick(&t, &read(ReadMode::PrimaryPreferred), &["p:1"]),
            ["s:1"]
        );
        // secondaryPreferred with every secondary deprioritized: the primary.
        assert_eq!(
            pick(&t, &read(ReadMode::SecondaryPreferred), &["s:1"]),
            ["p:1"]
        );
        // primary mode: the deprioritized primary is still the only choice.
        assert_eq!(pick(&t, &Criteria::Write, &["p:1"]), ["p:1"]);
    }

    #[test]
    fn choose_prefers_the_less_busy_of_two() {
        let t = topo(
            &[
                ("a:1", ServerType::Mongos, 1),
                ("b:1", ServerType::Mongos, 1),
            ],
            TopologyType::Sharded,
        );
        let window: Vec<&ServerDescription> = t.servers.iter().collect();
        let busy = |a: &str| if a == "a:1" { 5 } else { 0 };
        for seed in 0..4 {
            let got = choose(&window, busy, |n| seed % n).unwrap();
            assert_eq!(got.address, "b:1");
        }
        assert!(choose(&[], busy, |_| 0).is_none());
    }

    #[test]
    fn read_mode_parses_case_insensitively() {
        assert_eq!(
            ReadMode::parse("secondaryPreferred"),
            Some(ReadMode::SecondaryPreferred)
        );
        assert_eq!(ReadMode::parse("bogus"), None);
    }
}

//! How the proxy presents itself: a standalone, a replica set whose members are its
//! listeners, or a sharded cluster whose mongoses are its listeners (all forwarding to the
//! one backend), and the `hello` each member answers.

use std::time::{Duration, Instant};

use bson::{doc, oid::ObjectId, Bson, DateTime, Document, Timestamp};

use crate::codes;

/// The deployment the proxy pretends to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Like nx-27017 (plus `helloOk`); every listener is the same standalone.
    Standalone,
    /// `members` data-bearing members (member 0 starts as primary, the others are secondaries)
    /// followed by `arbiters` arbiters; one listener each.
    ReplicaSet {
        name: String,
        members: usize,
        arbiters: usize,
    },
    /// `mongoses` mongos routers (hello `msg: "isdbgrid"`, no `setName`), one listener each,
    /// each with fail points of its own (a fail point configured through one mongos fires
    /// only there, as on a real cluster).
    Sharded { mongoses: usize },
    /// A load balancer in front of `mongoses` mongoses: one listener whose hello is a
    /// mongos's plus the `serviceId` of the mongos the connection reached (round robin
    /// by connection, as a load balancer spreads them), for drivers in load-balanced
    /// mode only (`load_balancer`).
    LoadBalanced { mongoses: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Standalone,
    Primary,
    Secondary,
    Arbiter,
    Mongos,
}

/// The server version the proxy reports, and the wire version that goes with it.
#[derive(Clone, Debug)]
pub struct Version {
    pub text: String,
    pub array: [i32; 4],
    pub max_wire: i32,
}

impl Version {
    pub fn parse(text: &str) -> Version {
        let mut array = [0i32; 4];
        for (slot, part) in array.iter_mut().zip(text.split('.')) {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            *slot = digits.parse().unwrap_or(0);
        }
        let max_wire = match (array[0], array[1]) {
            (4, 0) => 7,
            (4, 2) => 8,
            (4, 4) => 9,
            (5, 0) => 13,
            (5, m) => 13 + m.min(3),
            (6, m) => 17 + m.min(3),
            (7, m) => 21 + m.min(3),
            (8, m) => 25 + m.min(2),
            (major, _) if major > 8 => 27,
            _ => 21,
        };
        Version {
            text: text.to_string(),
            array,
            max_wire,
        }
    }
}

pub const MAX_BSON_OBJECT_SIZE: i32 = 16_777_216;
pub const MAX_MESSAGE_SIZE_BYTES: i32 = 48_000_000;
pub const MAX_WRITE_BATCH_SIZE: i32 = 100_000;

/// mongod 4.4 (wire 9) added `topologyVersion` and the awaitable hello.
pub const MIN_AWAITABLE_WIRE: i32 = 9;

/// One mongod's `topologyVersion`: its process id (chosen at start) and the counter of
/// changes to what its hello shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopologyVersion {
    pub process_id: ObjectId,
    pub counter: i64,
}

impl TopologyVersion {
    pub fn to_document(self) -> Document {
        doc! { "processId": self.process_id, "counter": self.counter }
    }
}

pub(crate) struct TopologyState {
    pub set_name: Option<String>,
    /// Every member is a mongos.
    pub sharded: bool,
    /// Behind a load balancer: the `serviceId` of each mongos behind it.
    pub service_ids: Vec<ObjectId>,
    /// `host:port` of each listener, in member order.
    pub hosts: Vec<String>,
    pub data_members: usize,
    pub primary: Option<usize>,
    pub term: i64,
    pub set_version: i32,
    /// Per mongod process (one for a standalone however many addresses it listens on,
    /// else one per member): see [`TopologyState::topology_version`].
    versions: Vec<TopologyVersion>,
    /// `replSetFreeze`: until when a member may not be elected by a step-down.
    frozen_until: Vec<Option<Instant>>,
}

/// What a `hello` request asked for.
pub(crate) struct HelloRequest {
    /// `isMaster`/`ismaster` answer `ismaster`; `hello` answers `isWritablePrimary`.
    pub legacy: bool,
    pub hello_ok: bool,
    pub connection_id: i32,
}

impl TopologyState {
    pub fn new(topology: &Topology, hosts: Vec<String>) -> TopologyState {
        let (set_name, data_members, primary) = match topology {
            Topology::Standalone => (None, hosts.len(), None),
            Topology::ReplicaSet { name, members, .. } => (Some(name.clone()), *members, Some(0)),
            Topology::Sharded { .. } | Topology::LoadBalanced { .. } => (None, hosts.len(), None),
        };
        let processes = match topology {
            Topology::Standalone => 1,
            _ => hosts.len().max(1),
        };
        TopologyState {
            versions: (0..processes)
                .map(|_| TopologyVersion {
                    process_id: ObjectId::new(),
                    counter: 0,
                })
                .collect(),
            frozen_until: vec![None; hosts.len()],
            set_name,
            sharded: matches!(
                topology,
                Topology::Sharded { .. } | Topology::LoadBalanced { .. }
            ),
            service_ids: match topology {
                Topology::LoadBalanced { mongoses } => {
                    (0..(*mongoses).max(1)).map(|_| ObjectId::new()).collect()
                }
                _ => Vec::new(),
            },
            hosts,
            data_members,
            primary,
            term: 1,
            set_version: 1,
        }
    }

    pub fn role(&self, member: usize) -> Role {
        match &self.set_name {
            None if self.sharded => Role::Mongos,
            None => Role::Standalone,
            Some(_) if member >= self.data_members => Role::Arbiter,
            Some(_) if self.primary == Some(member) => Role::Primary,
            Some(_) => Role::Secondary,
        }
    }

    /// Behind a load balancer: the `serviceId` of the mongos connection `conn` reached.
    pub fn service_id(&self, conn: u64) -> Option<ObjectId> {
        let n = self.service_ids.len() as u64;
        (n > 0).then(|| self.service_ids[(conn % n) as usize])
    }

    /// pv1 election ids: `7fffffff` then the term, so a later term compares greater.
    pub fn election_id(&self) -> ObjectId {
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
        bytes[4..].copy_from_slice(&self.term.to_be_bytes());
        ObjectId::from_bytes(bytes)
    }

    fn process(&self, member: usize) -> usize {
        member.min(self.versions.len() - 1)
    }

    /// `member`'s mongod's `topologyVersion`.
    pub fn topology_version(&self, member: usize) -> TopologyVersion {
        self.versions[self.process(member)]
    }

    /// What `member`'s hello shows of the set that an election can change: its role, the
    /// primary it names, and its election id when primary.
    fn view(&self, member: usize) -> (Role, Option<usize>, Option<i64>) {
        let role = self.role(member);
        (
            role,
            self.primary,
            (role == Role::Primary).then_some(self.term),
        )
    }

    /// Every mongod's hello changed (e.g. the presented version): every counter moves.
    pub fn bump_all(&mut self) {
        for v in &mut self.versions {
            v.counter += 1;
        }
    }

    /// Elects `target` (default: the next data member after the current primary that is
    /// not frozen by `replSetFreeze`) with a new term. A lone member re-elects itself.
    /// Answers the new primary. The counter of each member whose hello changed moves on:
    /// the old and new primaries', and every member's that names the primary.
    pub fn elect(&mut self, target: Option<usize>) -> Result<usize, String> {
        if self.set_name.is_none() {
            return Err("not running with --replSet".into());
        }
        let next = match target {
            Some(t) if t < self.data_members => t,
            Some(t) => return Err(format!("member {t} is not a data-bearing member")),
            None => {
                let now = Instant::now();
                let n = self.data_members;
                let start = self.primary.map_or(0, |p| p + 1);
                // All frozen: the next one anyway (the emulation always has a primary).
                (0..n)
                    .map(|i| (start + i) % n)
                    .find(|&m| self.frozen_until[m].is_none_or(|t| t <= now))
                    .unwrap_or(start % n)
            }
        };
        let before: Vec<_> = (0..self.hosts.len()).map(|m| self.view(m)).collect();
        self.primary = Some(next);
        self.term += 1;
        for (m, was) in before.into_iter().enumerate() {
            if self.view(m) != was {
                let p = self.process(m);
                self.versions[p].counter += 1;
            }
        }
        Ok(next)
    }

    /// mongod's `replSetFreeze` on `member`: 0 unfreezes; n seconds keep a secondary from
    /// being elected by a step-down for that long. Refused on a primary, as mongod does.
    pub fn freeze(&mut self, member: usize, secs: i64) -> Result<Document, (i32, String)> {
        match self.role(member) {
            Role::Standalone | Role::Mongos => {
                return Err((
                    codes::NO_REPLICATION_ENABLED,
                    "not running with --replSet".into(),
                ))
            }
            Role::Primary => {
                return Err((
                    codes::NOT_SECONDARY,
                    "cannot freeze node when primary or running for election. state: Primary"
                        .into(),
                ))
            }
            Role::Secondary | Role::Arbiter => {}
        }
        if secs <= 0 {
            self.frozen_until[member] = None;
            return Ok(doc! { "info": "unfreezing", "ok": 1.0 });
        }
        let until = Instant::now() + Duration::from_secs(secs.min(365 * 24 * 3600) as u64);
        self.frozen_until[member] = Some(until);
        Ok(match secs {
            1 => doc! { "warning": "you really want to freeze for only 1 second?", "ok": 1.0 },
            _ => doc! { "ok": 1.0 },
        })
    }

    /// mongod's `replSetStepDown` as seen from `member`.
    pub fn step_down(&mut self, member: usize) -> Result<usize, (i32, String)> {
        match self.role(member) {
            Role::Standalone | Role::Mongos => Err((
                codes::NO_REPLICATION_ENABLED,
                "not running with --replSet".into(),
            )),
            Role::Primary if self.data_members > 1 => {
                self.elect(None).map_err(|m| (codes::BAD_VALUE, m))
            }
            Role::Primary => Err((
                codes::EXCEEDED_TIME_LIMIT,
                "No electable secondaries caught up as of the step down deadline".into(),
            )),
            _ => Err((
                codes::NOT_WRITABLE_PRIMARY,
                "not primary so can't step down".into(),
            )),
        }
    }

    pub fn hello(&self, member: usize, req: &HelloRequest, version: &Version) -> Document {
        let role = self.role(member);
        let writable = matches!(role, Role::Standalone | Role::Primary | Role::Mongos);
        let mut d = Document::new();
        if req.hello_ok {
            d.insert("helloOk", true);
        }
        d.insert(
            if req.legacy {
                "ismaster"
            } else {
                "isWritablePrimary"
            },
            writable,
        );
        if let Some(name) = &self.set_name {
            let data: Vec<Bson> = self.hosts[..self.data_members]
                .iter()
                .map(|h| h.as_str().into())
                .collect();
            d.insert("hosts", data);
            if self.hosts.len() > self.data_members {
                let arbiters: Vec<Bson> = self.hosts[self.data_members..]
                    .iter()
                    .map(|h| h.as_str().into())
                    .collect();
                d.insert("arbiters", arbiters);
            }
            d.insert("setName", name.as_str());
            d.insert("setVersion", self.set_version);
            d.insert("secondary", role == Role::Secondary);
            if role == Role::Arbiter {
                d.insert("arbiterOnly", true);
            }
            if let Some(p) = self.primary {
                d.insert("primary", self.hosts[p].as_str());
            }
            d.insert("me", self.hosts[member].as_str());
            if role == Role::Primary {
                d.insert("electionId", self.election_id());
            }
            if role != Role::Arbiter {
                d.insert("lastWrite", self.last_write());
            }
        }
        if role == Role::Mongos {
            d.insert("msg", "isdbgrid");
        }
        if version.max_wire >= MIN_AWAITABLE_WIRE {
            d.insert(
                "topologyVersion",
                self.topology_version(member).to_document(),
            );
        }
        d.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE);
        d.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES);
        d.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE);
        d.insert("localTime", DateTime::now());
        d.insert("logicalSessionTimeoutMinutes", 30);
        d.insert("connectionId", req.connection_id);
        d.insert("minWireVersion", 0);
        d.insert("maxWireVersion", version.max_wire);
        d.insert("readOnly", false);
        d.insert("ok", 1.0);
        d
    }

    fn last_write(&self) -> Document {
        let now = DateTime::now();
        let secs = (now.timestamp_millis() / 1000).max(0) as u32;
        let op_time = doc! { "ts": Timestamp { time: secs, increment: 1 }, "t": self.term };
        doc! {
            "opTime": op_time.clone(),
            "lastWriteDate": now,
            "majorityOpTime": op_time,
            "majorityWriteDate": now,
        }
    }

    /// A minimal `replSetGetStatus`.
    pub fn status(&self, member: usize) -> Document {
        let Some(name) = &self.set_name else {
            return codes::error_doc(codes::NO_REPLICATION_ENABLED, "not running with --replSet");
        };
        let members: Vec<Bson> = self
            .hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let (state, state_str) = match self.role(i) {
                    Role::Primary => (1, "PRIMARY"),
                    Role::Arbiter => (7, "ARBITER"),
                    _ => (2, "SECONDARY"),
                };
                let mut m = doc! { "_id": i as i32, "name": host.as_str(), "health": 1.0,
                "state": state, "stateStr": state_str };
                if i == member {
                    m.insert("self", true);
                }
                m.into()
            })
            .collect();
        let my_state = match self.role(member) {
            Role::Primary => 1,
            Role::Arbiter => 7,
            _ => 2,
        };
        doc! { "set": name.as_str(), "date": DateTime::now(), "myState": my_state,
        "term": self.term, "members": members, "ok": 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_balancer_spreads_connections_over_its_mongoses() {
        let one = TopologyState::new(&Topology::LoadBalanced { mongoses: 1 }, vec!["a:1".into()]);
        assert_eq!(one.service_id(1), one.service_id(2));
        let two = TopologyState::new(&Topology::LoadBalanced { mongoses: 2 }, vec!["a:1".into()]);
        assert_ne!(two.service_id(1), two.service_id(2));
        assert_eq!(two.service_id(1), two.service_id(3));
        let standalone = TopologyState::new(&Topology::Standalone, vec!["a:1".into()]);
        assert_eq!(standalone.service_id(1), None);
    }

    #[test]
    fn versions() {
        let v = Version::parse("7.0.0");
        assert_eq!((v.array, v.max_wire), ([7, 0, 0, 0], 21));
        assert_eq!(Version::parse("8.0.4").max_wire, 25);
        assert_eq!(Version::parse("4.4.7").array, [4, 4, 7, 0]);
    }

    #[test]
    fn mongoses_say_isdbgrid_and_are_writable() {
        let t = TopologyState::new(
            &Topology::Sharded { mongoses: 2 },
            vec!["a:1".into(), "b:2".into()],
        );
        let req = HelloRequest {
            legacy: false,
            hello_ok: true,
            connection_id: 1,
        };
        let h = t.hello(1, &req, &Version::parse("7.0.0"));
        assert_eq!(t.role(1), Role::Mongos);
        assert_eq!(h.get_str("msg").ok(), Some("isdbgrid"));
        assert_eq!(h.get_bool("isWritablePrimary").ok(), Some(true));
        assert!(!h.contains_key("setName") && !h.contains_key("hosts"));
    }

    #[test]
    fn election_ids_grow() {
        let mut t = TopologyState::new(
            &Topology::ReplicaSet {
                name: "rs".into(),
                members: 2,
                arbiters: 0,
            },
            vec!["a:1".into(), "b:2".into()],
        );
        let before = t.election_id();
        assert_eq!(t.step_down(0), Ok(1));
        assert!(t.election_id() > before);
        assert_eq!(t.role(0), Role::Secondary);
    }
}

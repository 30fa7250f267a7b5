//! The server version each test sees: the newest the proxies can present that the file's
//! and the test's `runOnRequirements` allow (with the topology [`requirements::choose`]
//! picks at that version). The proxies then present it (hello's `maxWireVersion`,
//! `buildInfo`) to the connections the test's clients make.

use super::requirements::{self, Deployment, Topology};
use bson::Bson;

/// One release per wire version a 4.2+ driver meets, newest first. The patch levels meet
/// the spec tests' patch-level bounds (`minServerVersion` 4.4.7, 5.0.9, 7.0.5, 8.2.1).
pub const CANDIDATES: [[u64; 3]; 7] = [
    [8, 2, 1],
    [8, 0, 0],
    [7, 0, 5],
    [6, 0, 0],
    [5, 0, 9],
    [4, 4, 7],
    [4, 2, 0],
];

pub fn text(v: [u64; 3]) -> String {
    format!("{}.{}.{}", v[0], v[1], v[2])
}

/// The topology and version a test runs with; `Err` (beginning with
/// [`requirements::UNMET`]) says why no candidate version will do, as seen at the newest.
pub fn choose(
    file_reqs: Option<&Bson>,
    test_reqs: Option<&Bson>,
    d: &Deployment,
) -> Result<(Topology, [u64; 3]), String> {
    let at = |version: [u64; 3]| Deployment {
        version,
        ..d.clone()
    };
    for version in CANDIDATES {
        if let Ok(t) = requirements::choose(file_reqs, test_reqs, &at(version)) {
            return Ok((t, version));
        }
    }
    requirements::choose(file_reqs, test_reqs, &at(CANDIDATES[0])).map(|t| (t, CANDIDATES[0]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn deployment() -> Deployment {
        Deployment {
            version: [7, 0, 0],
            parameters: doc! { "enableTestCommands": true },
            auth: false,
        }
    }

    fn pick(file: Bson, test: Option<Bson>) -> Result<(Topology, String), String> {
        choose(Some(&file), test.as_ref(), &deployment()).map(|(t, v)| (t, text(v)))
    }

    #[test]
    fn the_newest_allowed_version_wins() {
        assert_eq!(pick(bson!([]), None).unwrap().1, "8.2.1");
        assert_eq!(
            pick(bson!([{"minServerVersion": "4.4"}]), None).unwrap().1,
            "8.2.1"
        );
        let old = bson!([{"maxServerVersion": "4.2.99"}]);
        assert_eq!(pick(old, None).unwrap().1, "4.2.0");
        let pre_82 = bson!([{"minServerVersion": "4.2", "maxServerVersion": "8.1.99"}]);
        assert_eq!(pick(pre_82, None).unwrap().1, "8.0.0");
        let seven = bson!([{"minServerVersion": "7.0.5", "maxServerVersion": "7.99"}]);
        assert_eq!(pick(seven, None).unwrap().1, "7.0.5");
        let band = bson!([{"minServerVersion": "4.4.7", "maxServerVersion": "4.4.99"}]);
        assert_eq!(pick(band, None).unwrap().1, "4.4.7");
    }

    #[test]
    fn file_and_test_bounds_combine_with_the_topology() {
        let file = bson!([{"minServerVersion": "4.2"}]);
        let test = bson!([{"maxServerVersion": "6.1.99", "topologies": ["single"]}]);
        assert_eq!(
            pick(file.clone(), Some(test)).unwrap(),
            (Topology::Single, "6.0.0".to_string())
        );
        // Any one requirement suffices: the newest version any of them allows.
        let either = bson!([{"maxServerVersion": "4.2.99"}, {"minServerVersion": "5.0", "topologies": ["replicaset"]}]);
        assert_eq!(
            pick(either, None).unwrap(),
            (Topology::ReplicaSet, "8.2.1".to_string())
        );
        // The proxy presents a sharded cluster too (two mongoses).
        let sharded = bson!([{"topologies": ["sharded"]}]);
        assert_eq!(
            pick(sharded, None).unwrap(),
            (Topology::Sharded, "8.2.1".to_string())
        );
        let impossible = bson!([{"minServerVersion": "9.0"}]);
        assert!(pick(impossible, None).unwrap_err().contains(">= 9.0"));
    }
}

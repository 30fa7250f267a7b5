//! Every write the soak made, whether the driver acknowledged it, and the check
//! afterwards: each acknowledged write is in the database exactly once (an acknowledged
//! delete: its document is gone); an unacknowledged one may or may not be.

use std::collections::BTreeMap;

/// An insertOne's document (`{op: n, kind: "ins"}`) as the soak knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doc {
    Acked,
    Unacked,
    /// Acknowledged, then deleted by an acknowledged deleteOne.
    Deleted,
    /// Acknowledged, then a deleteOne of it that failed: either way is fine.
    DeleteUnacked,
}

#[derive(Default)]
pub struct Ledger {
    /// op id of an insertOne → its document's state.
    inserts: BTreeMap<i64, Doc>,
    /// op id of an updateOne `$push` → acknowledged.
    pushes: BTreeMap<i64, bool>,
    /// Acknowledged inserts no deleteOne has targeted yet (deleteOne's candidates).
    deletable: Vec<i64>,
}

/// The verdict on the database's contents.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Acknowledged inserts and `$push`es not found.
    pub lost_writes: u64,
    /// Acknowledged deletes whose document is still there.
    pub lost_deletes: u64,
    /// Any write found more than once.
    pub duplicate_writes: u64,
    pub unacked_present: u64,
    pub unacked_absent: u64,
    /// Writes in the database the soak never made (or made under another op id).
    pub phantoms: u64,
    /// Up to ten examples, for the report.
    pub examples: Vec<String>,
}

impl Verdict {
    fn note(&mut self, what: String) {
        if self.examples.len() < 10 {
            self.examples.push(what);
        }
    }
}

impl Ledger {
    pub fn insert(&mut self, op: i64, acked: bool) {
        let state = if acked { Doc::Acked } else { Doc::Unacked };
        self.inserts.insert(op, state);
        if acked {
            self.deletable.push(op);
        }
    }

    pub fn push(&mut self, op: i64, acked: bool) {
        self.pushes.insert(op, acked);
    }

    /// An acknowledged insert for a deleteOne to remove (taken off the candidates).
    pub fn take_deletable(&mut self, pick: u64) -> Option<i64> {
        if self.deletable.is_empty() {
            return None;
        }
        let i = (pick % self.deletable.len() as u64) as usize;
        Some(self.deletable.swap_remove(i))
    }

    pub fn delete(&mut self, target: i64, acked: bool) {
        let state = if acked {
            Doc::Deleted
        } else {
            Doc::DeleteUnacked
        };
        self.inserts.insert(target, state);
    }

    pub fn acked_writes(&self) -> u64 {
        let inserts = self
            .inserts
            .values()
            .filter(|d| **d != Doc::Unacked)
            .count();
        let pushes = self.pushes.values().filter(|a| **a).count();
        (inserts + pushes) as u64
    }

    /// `docs`: how many `{kind: "ins"}` documents carry each op id; `pushed`: how many
    /// times each op id appears in the base documents' `ops` arrays.
    pub fn verify(&self, docs: &BTreeMap<i64, u64>, pushed: &BTreeMap<i64, u64>) -> Verdict {
        let mut v = Verdict::default();
        for (&op, &state) in &self.inserts {
            let n = docs.get(&op).copied().unwrap_or(0);
            if n > 1 {
                v.duplicate_writes += 1;
                v.note(format!("insertOne op {op} ({state:?}): {n} documents"));
                continue;
            }
            match (state, n) {
                (Doc::Acked, 0) => {
                    v.lost_writes += 1;
                    v.note(format!("insertOne op {op} acknowledged, not found"));
                }
                (Doc::Deleted, 1) => {
                    v.lost_deletes += 1;
                    v.note(format!("deleteOne of op {op} acknowledged, still there"));
                }
                (Doc::Unacked, 1) => v.unacked_present += 1,
                (Doc::Unacked, _) => v.unacked_absent += 1,
                _ => {}
            }
        }
        for (&op, &acked) in &self.pushes {
            let n = pushed.get(&op).copied().unwrap_or(0);
            match (acked, n) {
                (_, 2..) => {
                    v.duplicate_writes += 1;
                    v.note(format!(
                        "updateOne $push op {op} (acked: {acked}): {n} times"
                    ));
                }
                (true, 0) => {
                    v.lost_writes += 1;
                    v.note(format!("updateOne $push op {op} acknowledged, not found"));
                }
                (false, 1) => v.unacked_present += 1,
                (false, _) => v.unacked_absent += 1,
                _ => {}
            }
        }
        for op in docs.keys().filter(|op| !self.inserts.contains_key(op)) {
            v.phantoms += 1;
            v.note(format!("a document with op {op}, which no insertOne wrote"));
        }
        for op in pushed.keys().filter(|op| !self.pushes.contains_key(op)) {
            v.phantoms += 1;
            v.note(format!("op {op} pushed, which no updateOne did"));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(i64, u64)]) -> BTreeMap<i64, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn acknowledged_writes_must_be_there_exactly_once() {
        let mut l = Ledger::default();
        l.insert(1, true);
        l.insert(2, true);
        l.insert(3, true);
        l.insert(4, false);
        l.insert(5, false);
        l.push(10, true);
        l.push(11, true);
        l.push(12, false);
        let docs = counts(&[(1, 1), (2, 0), (3, 2), (4, 1)]);
        let pushed = counts(&[(10, 1), (11, 2), (12, 0), (99, 1)]);
        let v = l.verify(&docs, &pushed);
        assert_eq!(v.lost_writes, 1, "{v:?}"); // op 2
        assert_eq!(v.duplicate_writes, 2, "{v:?}"); // ops 3 and 11
        assert_eq!((v.unacked_present, v.unacked_absent), (1, 2)); // 4; 5 and 12
        assert_eq!(v.phantoms, 1); // 99
        assert_eq!(v.examples.len(), 4);
    }

    #[test]
    fn an_acknowledged_delete_must_remove_its_document() {
        let mut l = Ledger::default();
        l.insert(1, true);
        l.insert(2, true);
        l.insert(3, false);
        let a = l.take_deletable(0).unwrap();
        let b = l.take_deletable(0).unwrap();
        assert_eq!(l.take_deletable(0), None, "unacked inserts are not deleted");
        l.delete(a, true);
        l.delete(b, false);
        // `a` still there (lost delete); `b` may be either way.
        let docs = counts(&[(a, 1), (b, 1)]);
        let v = l.verify(&docs, &BTreeMap::new());
        assert_eq!(
            (v.lost_deletes, v.lost_writes, v.duplicate_writes),
            (1, 0, 0)
        );
        let v = l.verify(&counts(&[(b, 0)]), &BTreeMap::new());
        assert_eq!(
            v,
            Verdict {
                unacked_absent: 1,
                ..Verdict::default()
            }
        );
        assert_eq!(l.acked_writes(), 2);
    }
}

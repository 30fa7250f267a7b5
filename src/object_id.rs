//! ObjectIds for the documents the driver gives an `_id` (BSON spec's
//! ObjectId: 4-byte seconds since the epoch, 5 random bytes per process,
//! 3-byte counter from a random start). `bson::oid::ObjectId::new` reads the
//! wall clock for every id, a WASI call each; a batch here reads it once.
//! Sans I/O: the caller hands in the seconds and the process's random bytes
//! (`runtime::object_ids`).

use bson::oid::ObjectId;
use std::cell::Cell;

thread_local! {
    /// The process's random bytes and the next counter value, drawn once.
    static PROCESS: Cell<Option<([u8; 5], u32)>> = const { Cell::new(None) };
}

/// Ids that share one read of the clock: for one insert-many, bulk write
/// or GridFS flush.
pub struct ObjectIds {
    seconds: u32,
}

impl ObjectIds {
    /// Ids stamped with `seconds` (past 2106 it wraps, as the spec allows).
    /// `process_random` is asked once per process, for the first batch.
    pub fn at(seconds: u64, process_random: impl FnOnce() -> [u8; 8]) -> ObjectIds {
        PROCESS.with(|p| {
            if p.get().is_none() {
                let r = process_random();
                let mut random = [0u8; 5];
                random.copy_from_slice(&r[..5]);
                p.set(Some((random, u32::from_le_bytes([r[5], r[6], r[7], 0]))));
            }
        });
        ObjectIds {
            seconds: seconds as u32,
        }
    }

    /// The next id: this batch's seconds, the process's random bytes, and
    /// the process's counter (24 bits, wrapping).
    pub fn next(&self) -> ObjectId {
        let (random, counter) = PROCESS.with(|p| {
            // Set by `at`.
            let (random, counter) = p.get().unwrap_or_default();
            p.set(Some((random, counter.wrapping_add(1) & 0xFF_FFFF)));
            (random, counter)
        });
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&self.seconds.to_be_bytes());
        b[4..9].copy_from_slice(&random);
        b[9..].copy_from_slice(&counter.to_be_bytes()[1..]);
        ObjectId::from_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_shares_its_seconds_and_counts_up() {
        let ids = ObjectIds::at(0x6543_2100, || [7; 8]);
        let a = ids.next().bytes();
        let b = ids.next().bytes();
        assert_eq!(&a[..4], &[0x65, 0x43, 0x21, 0x00]);
        assert_eq!(a[..9], b[..9], "same seconds and process bytes");
        let count = |x: [u8; 12]| u32::from_be_bytes([0, x[9], x[10], x[11]]);
        assert_eq!(count(b), (count(a) + 1) & 0xFF_FFFF);
        // Another batch continues the same counter.
        let c = ObjectIds::at(0x6543_2101, || [8; 8]).next().bytes();
        assert_eq!(&c[..4], &[0x65, 0x43, 0x21, 0x01]);
        assert_eq!(count(c), (count(a) + 2) & 0xFF_FFFF);
        assert_eq!(a[4..9], c[4..9]);
    }

    #[test]
    fn the_counter_wraps_at_24_bits() {
        PROCESS.with(|p| p.set(Some(([1; 5], 0xFF_FFFF))));
        let ids = ObjectIds::at(1, || [9; 8]);
        assert_eq!(&ids.next().bytes()[9..], &[0xFF, 0xFF, 0xFF]);
        assert_eq!(&ids.next().bytes()[9..], &[0, 0, 0]);
    }
}

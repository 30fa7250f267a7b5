//! What the soak does next, drawn from one seeded PRNG so that a seed replays a run:
//! the operation, its timeoutMS and the fault injected into it.

/// splitmix64: tiny, seedable, good enough for choosing faults.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u64 - 1) as usize]
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut roll = self.range(0, total - 1);
        for (i, &w) in weights.iter().enumerate() {
            if roll < u64::from(w) {
                return i;
            }
            roll -= u64::from(w);
        }
        weights.len() - 1
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    InsertOne,
    UpdateOne,
    DeleteOne,
    /// find, then getMore through the cursor to its end.
    Find,
    FindOne,
    Count,
    /// aggregate, then getMore through the cursor to its end.
    Aggregate,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::InsertOne,
        OpKind::UpdateOne,
        OpKind::DeleteOne,
        OpKind::Find,
        OpKind::FindOne,
        OpKind::Count,
        OpKind::Aggregate,
    ];
    /// Writes 45%, reads 55%.
    const WEIGHTS: [u32; 7] = [20, 15, 10, 20, 15, 10, 10];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::InsertOne => "insertOne",
            OpKind::UpdateOne => "updateOne",
            OpKind::DeleteOne => "deleteOne",
            OpKind::Find => "find+getMore",
            OpKind::FindOne => "findOne",
            OpKind::Count => "count",
            OpKind::Aggregate => "aggregate+getMore",
        }
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            OpKind::InsertOne | OpKind::UpdateOne | OpKind::DeleteOne
        )
    }

    /// The server commands the operation sends, which a fail point may target.
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            OpKind::InsertOne => &["insert"],
            OpKind::UpdateOne => &["update"],
            OpKind::DeleteOne => &["delete"],
            OpKind::Find => &["find", "getMore"],
            OpKind::FindOne => &["find"],
            OpKind::Count => &["count"],
            OpKind::Aggregate => &["aggregate", "getMore"],
        }
    }
}

/// Retryable (reads and writes alike; the proxy labels them RetryableWriteError on a
/// retryable write): ShutdownInProgress, PrimarySteppedDown, InterruptedAtShutdown,
/// NotWritablePrimary, NotPrimaryNoSecondaryOk, HostUnreachable.
pub const RETRYABLE_CODES: [i32; 6] = [91, 189, 11600, 10107, 13435, 6];
/// Not retryable: BadValue, UnknownError, OperationFailed; on writes also DuplicateKey
/// and DocumentValidationFailure.
pub const NON_RETRYABLE_READ_CODES: [i32; 3] = [2, 8, 96];
pub const NON_RETRYABLE_WRITE_CODES: [i32; 4] = [2, 8, 11000, 121];

#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    None,
    /// blockConnection shorter than the operation's timeoutMS (or than 500 ms without one).
    BlockUnder {
        command: &'static str,
        ms: u64,
    },
    /// blockConnection longer than timeoutMS: the proxy answers MaxTimeMSExpired when the
    /// command's maxTimeMS passes, `late_ms` after it (`proxyReplyDelayMS`; 0: at once).
    BlockOver {
        command: &'static str,
        ms: u64,
        late_ms: u64,
    },
    /// The first `times` matching commands fail with a retryable code.
    Retryable {
        command: &'static str,
        code: i32,
        times: i64,
    },
    NonRetryable {
        command: &'static str,
        code: i32,
    },
    /// The first `times` matching commands are answered by closing the connection.
    CloseConnection {
        command: &'static str,
        times: i64,
    },
    /// The primary steps down (the next member is elected) just before the operation.
    StepDown,
}

impl Fault {
    /// The kinds, in the order the summary lists them.
    pub const KINDS: [&'static str; 8] = [
        "none",
        "block_under_timeout",
        "block_over_timeout",
        "block_over_late_reply",
        "retryable_error",
        "non_retryable_error",
        "close_connection",
        "step_down",
    ];

    pub fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::BlockUnder { .. } => "block_under_timeout",
            Fault::BlockOver { late_ms: 0, .. } => "block_over_timeout",
            Fault::BlockOver { .. } => "block_over_late_reply",
            Fault::Retryable { .. } => "retryable_error",
            Fault::NonRetryable { .. } => "non_retryable_error",
            Fault::CloseConnection { .. } => "close_connection",
            Fault::StepDown => "step_down",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Fault::None => "none".into(),
            Fault::BlockUnder { command, ms } => format!("block {command} {ms} ms"),
            Fault::BlockOver {
                command,
                ms,
                late_ms,
            } => format!("block {command} {ms} ms, code-50 reply {late_ms} ms late"),
            Fault::Retryable {
                command,
                code,
                times,
            } => format!("{command} fails with {code} x{times}"),
            Fault::NonRetryable { command, code } => format!("{command} fails with {code}"),
            Fault::CloseConnection { command, times } => {
                format!("{command} closes the connection x{times}")
            }
            Fault::StepDown => "step-down".into(),
        }
    }
}

/// One operation to run.
#[derive(Clone, Debug)]
pub struct Step {
    pub op: OpKind,
    /// None: no timeoutMS (the client has none either).
    pub timeout_ms: Option<u64>,
    pub fault: Fault,
    /// Operation parameters: which base document, how wide a range, the batch size.
    pub a: u64,
    pub b: u64,
    pub batch: u32,
}

/// Share of operations that get a fault.
const FAULT_RATE: f64 = 0.4;
/// Share of operations without timeoutMS.
const UNTIMED_RATE: f64 = 0.15;
/// Longest block for an operation without timeoutMS: it has no deadline to overrun.
const UNTIMED_BLOCK_MS: u64 = 500;

/// timeoutMS log-uniform in 50..=2000 ms: as many short deadlines as long ones.
pub fn timeout(rng: &mut Rng) -> Option<u64> {
    if rng.chance(UNTIMED_RATE) {
        return None;
    }
    Some((50.0 * 40f64.powf(rng.unit())).round() as u64)
}

pub fn fault(rng: &mut Rng, op: OpKind, timeout_ms: Option<u64>) -> Fault {
    if !rng.chance(FAULT_RATE) {
        return Fault::None;
    }
    let command = rng.pick(op.commands());
    // block under, block over, retryable, non-retryable, close, step-down
    let which = rng.weighted(&[20, 20, 25, 10, 15, 5]);
    match (which, timeout_ms) {
        (0, Some(t)) => Fault::BlockUnder {
            command,
            ms: rng.range(1, (t / 2).max(1)),
        },
        (0 | 1, None) => Fault::BlockUnder {
            command,
            ms: rng.range(1, UNTIMED_BLOCK_MS),
        },
        (1, Some(t)) => Fault::BlockOver {
            command,
            ms: t + rng.range(50, 2000),
            late_ms: match rng.chance(0.5) {
                true => rng.range(1, 200),
                false => 0,
            },
        },
        (2, _) => Fault::Retryable {
            command,
            code: rng.pick(&RETRYABLE_CODES),
            times: rng.range(1, 2) as i64,
        },
        (3, _) => Fault::NonRetryable {
            command,
            code: match op.is_write() {
                true => rng.pick(&NON_RETRYABLE_WRITE_CODES),
                false => rng.pick(&NON_RETRYABLE_READ_CODES),
            },
        },
        (4, _) => Fault::CloseConnection {
            command,
            times: rng.range(1, 2) as i64,
        },
        _ => Fault::StepDown,
    }
}

/// The next operation.
pub fn step(rng: &mut Rng, base_docs: u64) -> Step {
    let op = OpKind::ALL[rng.weighted(&OpKind::WEIGHTS)];
    let timeout_ms = timeout(rng);
    let fault = fault(rng, op, timeout_ms);
    Step {
        op,
        timeout_ms,
        fault,
        a: rng.range(0, base_docs - 1),
        b: rng.range(10, 60),
        batch: rng.range(3, 15) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_steps() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let (x, y) = (step(&mut a, 200), step(&mut b, 200));
            assert_eq!((x.op, x.timeout_ms, x.fault), (y.op, y.timeout_ms, y.fault));
        }
    }

    #[test]
    fn the_mix_has_every_op_and_fault_kind() {
        let mut rng = Rng::new(1);
        let mut ops = std::collections::BTreeSet::new();
        let mut kinds = std::collections::BTreeSet::new();
        let mut untimed = 0;
        for _ in 0..5000 {
            let s = step(&mut rng, 200);
            ops.insert(s.op);
            kinds.insert(s.fault.kind());
            untimed += s.timeout_ms.is_none() as u32;
            if let Some(t) = s.timeout_ms {
                assert!((50..=2000).contains(&t), "{t}");
            }
            match (&s.fault, s.timeout_ms) {
                (Fault::BlockUnder { ms, .. }, Some(t)) => assert!(*ms <= t / 2),
                (Fault::BlockOver { ms, .. }, Some(t)) => assert!(*ms > t),
                (Fault::BlockOver { .. }, None) => panic!("no deadline to overrun"),
                _ => {}
            }
            assert!(s.a < 200 && (10..=60).contains(&s.b) && (3..=15).contains(&s.batch));
        }
        assert_eq!(ops.len(), OpKind::ALL.len());
        assert_eq!(kinds.len(), Fault::KINDS.len());
        assert!((500..1000).contains(&untimed), "{untimed}");
    }

    #[test]
    fn weighted_follows_the_weights() {
        let mut rng = Rng::new(3);
        let mut hits = [0u32; 3];
        for _ in 0..10_000 {
            hits[rng.weighted(&[1, 0, 3])] += 1;
        }
        assert_eq!(hits[1], 0);
        assert!((2000..3000).contains(&hits[0]), "{hits:?}");
    }
}

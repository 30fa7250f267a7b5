//! The soak's figures: gathered per operation, printed as a table, written as JSON,
//! and judged (what makes the run fail).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::ledger::Verdict;
use crate::plan::{Fault, OpKind};

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum End {
    Ok,
    Timeout,
    Server,
    Network,
    ServerSelection,
    Other,
    Trap,
}

impl End {
    pub const ALL: [End; 7] = [
        End::Ok,
        End::Timeout,
        End::Server,
        End::Network,
        End::ServerSelection,
        End::Other,
        End::Trap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            End::Ok => "ok",
            End::Timeout => "timeout",
            End::Server => "server",
            End::Network => "network",
            End::ServerSelection => "selection",
            End::Other => "other",
            End::Trap => "trap",
        }
    }
}

/// The worst deadline overrun so far, with what caused it.
#[derive(Clone, Debug, Default)]
pub struct Worst {
    pub overshoot_ms: f64,
    pub what: String,
}

/// Memory after each operation: the guest's linear memory and the process' RSS.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub guest_bytes: usize,
    pub rss_kb: u64,
}

#[derive(Default)]
pub struct Figures {
    pub seed: u64,
    pub ops: u64,
    pub wall: Duration,
    pub tolerance_ms: u64,
    /// Per operation kind: how many ended each way, and their durations in ms.
    pub by_op: BTreeMap<OpKind, (BTreeMap<End, u64>, Vec<f64>)>,
    /// Per fault kind: how many ended each way.
    pub by_fault: BTreeMap<&'static str, BTreeMap<End, u64>>,
    pub timed_ops: u64,
    pub worst: Option<Worst>,
    pub violations: u64,
    pub untimed_ops: u64,
    pub slowest_untimed_ms: f64,
    /// Operations without timeoutMS that took longer than the hang limit.
    pub hung: u64,
    pub traps: u64,
    pub wrong_results: u64,
    pub acked_writes: u64,
    pub verdict: Verdict,
    pub connections_opened: u64,
    pub connections_closed: u64,
    /// Connections the proxy accepted during operations with each fault kind.
    pub opened_by_fault: BTreeMap<&'static str, u64>,
    pub retries: u64,
    pub drained: u64,
    pub drain_failed: u64,
    pub samples: Vec<Sample>,
    pub guest_peak_bytes: usize,
    pub guest_cap_denied: u64,
    pub vm_hwm_kb: u64,
    /// Problems worth a line each in the report (traps, violations, wrong results).
    pub incidents: Vec<String>,
}

/// An operation's memory stays bounded when its last quarter needs no more guest
/// memory than its first quarter, give or take this much (the allocator's slack).
const GUEST_GROWTH_SLACK: usize = 2 << 20;

pub fn mb(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

impl Figures {
    pub fn record(&mut self, op: OpKind, fault: &Fault, end: End, ms: f64) {
        self.ops += 1;
        let (ends, times) = self.by_op.entry(op).or_default();
        *ends.entry(end).or_default() += 1;
        times.push(ms);
        *self
            .by_fault
            .entry(fault.kind())
            .or_default()
            .entry(end)
            .or_default() += 1;
    }

    pub fn incident(&mut self, line: String) {
        eprintln!("soak: {line}");
        if self.incidents.len() < 50 {
            self.incidents.push(line);
        }
    }

    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        self.by_fault
            .iter()
            .filter(|(k, _)| **k != "none")
            .map(|(k, ends)| (*k, ends.values().sum()))
            .collect()
    }

    /// Max guest memory over the first and the last quarter of the operations.
    pub fn guest_quarters(&self) -> (usize, usize) {
        let n = self.samples.len();
        let q = (n / 4).max(1).min(n);
        let max = |s: &[Sample]| s.iter().map(|s| s.guest_bytes).max().unwrap_or(0);
        (max(&self.samples[..q]), max(&self.samples[n - q..]))
    }

    /// Mean RSS over the first and the last quarter, in MB.
    pub fn rss_quarters(&self) -> (f64, f64) {
        let n = self.samples.len();
        let q = (n / 4).max(1).min(n);
        let mean = |s: &[Sample]| {
            s.iter().map(|s| s.rss_kb as f64).sum::<f64>() / s.len().max(1) as f64 / 1024.0
        };
        (mean(&self.samples[..q]), mean(&self.samples[n - q..]))
    }

    pub fn memory_bounded(&self) -> bool {
        let (first, last) = self.guest_quarters();
        last <= first + GUEST_GROWTH_SLACK.max(first / 4) && self.guest_cap_denied == 0
    }

    /// Why the run fails; empty when it passes.
    pub fn failures(&self) -> Vec<String> {
        let v = &self.verdict;
        let mut out = Vec::new();
        let mut fail = |n: u64, what: &str| {
            if n > 0 {
                out.push(format!("{n} {what}"));
            }
        };
        fail(self.traps, "trap(s)");
        fail(v.lost_writes, "lost write(s)");
        fail(v.lost_deletes, "lost delete(s)");
        fail(v.duplicate_writes, "duplicate write(s)");
        fail(v.phantoms, "phantom write(s)");
        fail(
            self.violations,
            "deadline overshoot(s) beyond the tolerance",
        );
        fail(self.hung, "operation(s) without timeoutMS that hung");
        fail(self.wrong_results, "wrong read result(s)");
        if !self.memory_bounded() {
            let (first, last) = self.guest_quarters();
            out.push(format!(
                "guest memory grew from {:.1} MiB (first quarter) to {:.1} MiB (last quarter){}",
                mb(first as f64),
                mb(last as f64),
                match self.guest_cap_denied {
                    0 => String::new(),
                    n => format!(", {n} memory.grow refused at the cap"),
                }
            ));
        }
        out
    }

    pub fn print(&self) {
        let secs = self.wall.as_secs_f64();
        println!();
        println!(
            "soak: seed {}, {} operations in {:.1} s ({:.0} ops/s)",
            self.seed,
            self.ops,
            secs,
            self.ops as f64 / secs.max(0.001)
        );
        let header: String = End::ALL
            .iter()
            .map(|e| format!("{:>10}", e.name()))
            .collect();
        println!(
            "  {:<24}{header}{:>9}{:>9}",
            "operation", "p50 ms", "max ms"
        );
        for (op, (ends, times)) in &self.by_op {
            let row: String = End::ALL
                .iter()
                .map(|e| format!("{:>10}", ends.get(e).copied().unwrap_or(0)))
                .collect();
            let mut t = times.clone();
            t.sort_by(f64::total_cmp);
            let p50 = t.get(t.len() / 2).copied().unwrap_or(0.0);
            let max = t.last().copied().unwrap_or(0.0);
            println!("  {:<24}{row}{p50:>9.1}{max:>9.1}", op.name());
        }
        println!("  {:<24}{header}{:>10}", "fault", "opened");
        for kind in Fault::KINDS {
            let Some(ends) = self.by_fault.get(kind) else {
                continue;
            };
            let row: String = End::ALL
                .iter()
                .map(|e| format!("{:>10}", ends.get(e).copied().unwrap_or(0)))
                .collect();
            let opened = self.opened_by_fault.get(kind).copied().unwrap_or(0);
            println!("  {kind:<24}{row}{opened:>10}");
        }
        let worst = self.worst.clone().unwrap_or_default();
        println!(
            "  deadlines: {} operations with timeoutMS; worst overshoot {:.1} ms ({}); \
             tolerance {} ms: {} beyond it",
            self.timed_ops, worst.overshoot_ms, worst.what, self.tolerance_ms, self.violations
        );
        println!(
            "             {} without timeoutMS; slowest {:.1} ms; {} hung",
            self.untimed_ops, self.slowest_untimed_ms, self.hung
        );
        let v = &self.verdict;
        println!(
            "  writes: {} acknowledged: {} lost, {} duplicate, {} deletes lost, {} phantom; \
             unacknowledged: {} present, {} absent",
            self.acked_writes,
            v.lost_writes,
            v.duplicate_writes,
            v.lost_deletes,
            v.phantoms,
            v.unacked_present,
            v.unacked_absent
        );
        for e in &v.examples {
            println!("    {e}");
        }
        println!("  reads: {} wrong results", self.wrong_results);
        println!(
            "  connections opened {} (closed {}) at the proxy; retries {}; pending responses \
             drained {} (failed {})",
            self.connections_opened,
            self.connections_closed,
            self.retries,
            self.drained,
            self.drain_failed
        );
        let (g1, g4) = self.guest_quarters();
        let (r1, r4) = self.rss_quarters();
        println!(
            "  memory: guest linear memory peak {:.2} MiB (first quarter {:.2}, last quarter {:.2}: {}); \
             process peak RSS (VmHWM) {:.1} MB (mean RSS first quarter {:.1}, last quarter {:.1})",
            mb(self.guest_peak_bytes as f64),
            mb(g1 as f64),
            mb(g4 as f64),
            if self.memory_bounded() { "bounded" } else { "GROWING" },
            self.vm_hwm_kb as f64 / 1024.0,
            r1,
            r4
        );
        println!("  traps: {}", self.traps);
        let failures = self.failures();
        if failures.is_empty() {
            println!("soak: PASS");
        } else {
            println!("soak: FAIL: {}", failures.join("; "));
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let v = &self.verdict;
        let (g1, g4) = self.guest_quarters();
        let (r1, r4) = self.rss_quarters();
        let ends = |m: &BTreeMap<End, u64>| {
            m.iter()
                .map(|(e, n)| (e.name().to_string(), serde_json::json!(n)))
                .collect::<serde_json::Map<_, _>>()
        };
        let by_op: serde_json::Map<_, _> = self
            .by_op
            .iter()
            .map(|(op, (e, _))| (op.name().to_string(), ends(e).into()))
            .collect();
        let by_fault: serde_json::Map<_, _> = self
            .by_fault
            .iter()
            .map(|(k, e)| (k.to_string(), ends(e).into()))
            .collect();
        let worst = self.worst.clone().unwrap_or_default();
        serde_json::json!({
            "seed": self.seed,
            "ops": self.ops,
            "seconds": self.wall.as_secs_f64(),
            "faults": self.faults(),
            "worst_overshoot_ms": worst.overshoot_ms,
            "worst_overshoot": worst.what,
            "tolerance_ms": self.tolerance_ms,
            "overshoot_violations": self.violations,
            "timed_ops": self.timed_ops,
            "untimed_ops": self.untimed_ops,
            "slowest_untimed_ms": self.slowest_untimed_ms,
            "hung": self.hung,
            "traps": self.traps,
            "acknowledged_writes": self.acked_writes,
            "lost_writes": v.lost_writes + v.lost_deletes,
            "lost_deletes": v.lost_deletes,
            "duplicate_writes": v.duplicate_writes,
            "phantom_writes": v.phantoms,
            "unacknowledged_present": v.unacked_present,
            "unacknowledged_absent": v.unacked_absent,
            "wrong_results": self.wrong_results,
            "connections_opened": self.connections_opened,
            "connections_closed": self.connections_closed,
            "connections_opened_by_fault": self.opened_by_fault,
            "retries": self.retries,
            "pending_responses_drained": self.drained,
            "pending_response_drains_failed": self.drain_failed,
            "peak_rss_mb": self.vm_hwm_kb as f64 / 1024.0,
            "rss_mb_first_quarter": r1,
            "rss_mb_last_quarter": r4,
            "peak_guest_memory_mb": mb(self.guest_peak_bytes as f64),
            "guest_memory_mb_first_quarter": mb(g1 as f64),
            "guest_memory_mb_last_quarter": mb(g4 as f64),
            "memory_bounded": self.memory_bounded(),
            "by_operation": by_op,
            "by_fault": by_fault,
            "incidents": self.incidents,
            "failures": self.failures(),
            "pass": self.failures().is_empty(),
        })
    }
}

/// `VmRSS` and `VmHWM` of this process in kB (0 where there is no /proc).
pub fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_guest(sizes: &[usize]) -> Figures {
        Figures {
            samples: sizes
                .iter()
                .map(|&guest_bytes| Sample {
                    guest_bytes,
                    rss_kb: 1024,
                })
                .collect(),
            ..Figures::default()
        }
    }

    #[test]
    fn memory_that_levels_off_is_bounded_and_a_leak_is_not() {
        let mib = 1 << 20;
        let flat = with_guest(&[
            mib,
            2 * mib,
            2 * mib,
            2 * mib,
            2 * mib,
            2 * mib,
            2 * mib,
            2 * mib,
        ]);
        assert!(flat.memory_bounded());
        assert!(flat.failures().is_empty());
        let leak: Vec<usize> = (1..=40).map(|i| i * mib).collect();
        let leak = with_guest(&leak);
        assert!(!leak.memory_bounded());
        assert!(leak.failures()[0].contains("guest memory grew"));
        assert_eq!(with_guest(&[3 * mib]).guest_quarters(), (3 * mib, 3 * mib));
    }

    #[test]
    fn the_json_has_the_issue_fields() {
        let mut f = with_guest(&[1 << 20]);
        f.record(OpKind::FindOne, &Fault::StepDown, End::Ok, 3.0);
        f.traps = 1;
        let j = f.json();
        for key in [
            "ops",
            "faults",
            "worst_overshoot_ms",
            "traps",
            "lost_writes",
            "duplicate_writes",
            "connections_opened",
            "peak_rss_mb",
        ] {
            assert!(j.get(key).is_some(), "{key}");
        }
        assert_eq!(j["faults"]["step_down"], 1);
        assert_eq!(j["pass"], false);
    }
}

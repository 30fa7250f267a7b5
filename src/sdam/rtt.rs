//! Round-trip time samples per server. CSOT subtracts the minimum RTT from
//! the remaining time to compute maxTimeMS.

use std::collections::VecDeque;
use std::time::Duration;

const WINDOW: usize = 10;

#[derive(Debug, Clone, Default)]
pub struct RttStats {
    samples: VecDeque<Duration>,
    average: Option<Duration>,
}

impl RttStats {
    pub fn add(&mut self, sample: Duration) {
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        // Exponentially weighted average, alpha 0.2, for the latency window.
        self.average = Some(match self.average {
            None => sample,
            Some(avg) => avg.mul_f64(0.8) + sample.mul_f64(0.2),
        });
    }

    /// The minimum of the last 10 samples; zero until there are two (CSOT spec).
    pub fn min(&self) -> Duration {
        if self.samples.len() < 2 {
            return Duration::ZERO;
        }
        self.samples.iter().copied().min().unwrap_or(Duration::ZERO)
    }

    pub fn average(&self) -> Option<Duration> {
        self.average
    }

    /// The server became Unknown: its average RTT is cleared, and the next
    /// sample starts it again (Server Selection spec). The minimum's samples stay.
    pub fn forget_average(&mut self) {
        self.average = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn zero_until_two_samples() {
        let mut r = RttStats::default();
        assert_eq!(r.min(), Duration::ZERO);
        r.add(ms(5));
        assert_eq!(r.min(), Duration::ZERO);
        r.add(ms(7));
        assert_eq!(r.min(), ms(5));
    }

    #[test]
    fn minimum_of_the_last_ten() {
        let mut r = RttStats::default();
        r.add(ms(1));
        for v in 10..20 {
            r.add(ms(v));
        }
        assert_eq!(r.min(), ms(10), "the 1 ms sample fell out of the window");
    }

    #[test]
    fn average_is_weighted() {
        let mut r = RttStats::default();
        r.add(ms(10));
        r.add(ms(20));
        assert_eq!(r.average(), Some(ms(12)));
    }
}

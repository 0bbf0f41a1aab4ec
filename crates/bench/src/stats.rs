//! Latency samples and their summary: exact percentiles over every sample kept.

use std::time::Duration;

/// Latencies of one run, in nanoseconds.
#[derive(Default)]
pub struct Samples(Vec<u64>);

impl Samples {
    /// Room for `n` samples, so recording never allocates inside a timed loop.
    pub fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    /// Record one latency.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_nanos() as u64);
    }

    /// The `q` quantile (0..=1) in microseconds, nearest-rank; 0 without samples.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1] as f64 / 1000.0
    }

    /// Take every sample of `other` too.
    pub fn append(&mut self, mut other: Samples) {
        self.0.append(&mut other.0);
    }

    /// How many samples there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The mean in microseconds; 0 without samples.
    pub fn mean_us(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.iter().map(|&n| n as f64).sum::<f64>() / self.0.len() as f64 / 1000.0
    }

    /// Median in microseconds.
    pub fn p50_us(&mut self) -> f64 {
        self.quantile_us(0.5)
    }

    /// 99th percentile in microseconds.
    pub fn p99_us(&mut self) -> f64 {
        self.quantile_us(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut s = Samples::default();
        for us in 1..=100 {
            s.push(Duration::from_micros(us));
        }
        assert_eq!(s.p50_us(), 50.0);
        assert_eq!(s.p99_us(), 99.0);
        assert_eq!(s.quantile_us(1.0), 100.0);
        assert_eq!(s.mean_us(), 50.5);
        let mut more = Samples::default();
        more.push(Duration::from_micros(1000));
        s.append(more);
        assert_eq!(s.len(), 101);
        assert_eq!(s.quantile_us(1.0), 1000.0);
    }
}

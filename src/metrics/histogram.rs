//! A histogram whose observations take no lock: each is a few relaxed atomic adds. The
//! decision latency is observed once per decision by every session at once, and
//! `prometheus_client`'s own histogram takes a write lock per observation, which all of
//! them then queue on. The exposition is the crate's: this only keeps the numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Counts per bucket, their total and their sum. Cheap to clone: clones share the counts.
#[derive(Clone, Debug)]
pub struct AtomicHistogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Upper bounds, ascending, the last `f64::MAX` (the `+Inf` bucket).
    bounds: Box<[f64]>,
    /// Observations per bucket (not cumulative), as the encoder takes them.
    counts: Box<[AtomicU64]>,
    /// Every observation.
    count: AtomicU64,
    /// The sum of the observations, as `f64` bits.
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// A histogram with these upper bounds (ascending) and `+Inf`.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> AtomicHistogram {
        let bounds: Box<[f64]> = bounds.into_iter().chain([f64::MAX]).collect();
        let counts = bounds.iter().map(|_| AtomicU64::new(0)).collect();
        AtomicHistogram {
            inner: Arc::new(Inner {
                bounds,
                counts,
                count: AtomicU64::new(0),
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    /// Records one value. A scrape may see the bucket, the count and the sum of one
    /// observation a moment apart; each is exact once it is done.
    pub fn observe(&self, value: f64) {
        let inner = &*self.inner;
        let bucket = inner
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(inner.bounds.len() - 1);
        inner.counts[bucket].fetch_add(1, Ordering::Relaxed);
        inner.count.fetch_add(1, Ordering::Relaxed);
        let _ = inner
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.inner;
        let buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .zip(inner.counts.iter())
            .map(|(bound, count)| (*bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = inner.count.load(Ordering::Relaxed);
        let sum = f64::from_bits(inner.sum.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[test]
    fn encodes_as_the_crate_histogram_does() {
        let ours = AtomicHistogram::new([0.1, 1.0]);
        let theirs = prometheus_client::metrics::histogram::Histogram::new([0.1, 1.0]);
        for value in [0.05, 0.1, 0.5, 3.0] {
            ours.observe(value);
            theirs.observe(value);
        }
        let text = |register: &dyn Fn(&mut Registry)| {
            let mut registry = Registry::default();
            register(&mut registry);
            let mut out = String::new();
            encode(&mut out, &registry).unwrap();
            out
        };
        assert_eq!(
            text(&|r| r.register("latency", "help", ours.clone())),
            text(&|r| r.register("latency", "help", theirs.clone()))
        );
    }
}

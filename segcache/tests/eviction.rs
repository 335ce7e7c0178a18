//! Eviction under pressure, through the public API: every policy keeps the
//! heap bound and keeps serving under a 10x overfill, stats agree with what
//! `get` finds, and merge eviction beats FIFO on a skewed workload.

use segcache::{Error, Eviction, ManualClock, Segcache};
use std::time::Duration;

/// A small deterministic PRNG (xorshift64*), so tests need no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(alpha) over ranks 0..n by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, alpha: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for rank in 1..=n {
            sum += 1.0 / (rank as f64).powf(alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }
    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn value_for(key: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (key as usize * 31 + i) as u8).collect()
}

#[test]
fn every_policy_holds_the_heap_bound_under_10x_overfill() {
    let heap = 1 << 20;
    for policy in Eviction::ALL {
        let clock = ManualClock::new();
        let mut cache = Segcache::builder()
            .heap_size(heap)
            .segment_size(64 << 10)
            .hash_power(14)
            .eviction(policy)
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut rng = Rng(7);
        let ttls = [
            None,
            Some(Duration::from_secs(600)),
            Some(Duration::from_secs(86_400)),
        ];
        let mut written = 0usize;
        let mut keys = 0u64;
        let mut refused = 0;
        while written < 10 * heap {
            let len = 16 + (rng.next() % 300) as usize;
            let key = format!("key-{keys}");
            match cache.set(
                key.as_bytes(),
                value_for(keys, len),
                0,
                ttls[keys as usize % 3],
            ) {
                Ok(()) => {}
                Err(Error::OutOfMemory) if policy == Eviction::None => refused += 1,
                Err(e) => panic!("{policy:?}: {e}"),
            }
            written += len + key.len();
            keys += 1;
            // Reads of a random earlier key keep working and are never wrong.
            let probe = rng.next() % keys;
            if let Some(item) = cache.get(format!("key-{probe}").as_bytes()) {
                assert_eq!(item.value(), &value_for(probe, item.value().len())[..]);
            }
            let s = cache.stats();
            assert!(s.live_bytes <= s.heap_bytes, "{policy:?}: heap bound");
        }
        let s = cache.stats();
        assert_eq!(s.heap_bytes, heap as u64);
        assert_eq!(
            s.total_bytes,
            s.heap_bytes + s.hash_table_bytes + s.segment_header_bytes + s.admission_bytes
        );
        if policy == Eviction::None {
            assert!(refused > 0 && s.evictions == 0);
        } else {
            assert!(s.evictions > 0, "{policy:?}");
        }
        // Stats agree with what `get` finds: no TTL has passed, so every
        // item counted is readable, and nothing else is.
        let found = (0..keys)
            .filter(|k| cache.get(format!("key-{k}").as_bytes()).is_some())
            .count() as u64;
        assert_eq!(found, cache.stats().items, "{policy:?}");
        assert!(found > 1000, "{policy:?} holds only {found} items");
    }
}

/// Replays a Zipf(alpha) get-or-set workload and returns the hit ratio.
fn zipf_hit_ratio(policy: Eviction, alpha: f64) -> f64 {
    let clock = ManualClock::new();
    let mut cache = Segcache::builder()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .hash_power(16)
        .eviction(policy)
        .clock(clock.clone())
        .build()
        .unwrap();
    let keys = 200_000;
    let zipf = Zipf::new(keys, alpha);
    let mut rng = Rng(42);
    let (mut hits, mut requests) = (0u64, 0u64);
    for i in 0..1_500_000u64 {
        // 10k requests per second of simulated time.
        if i % 10_000 == 0 {
            clock.advance(Duration::from_secs(1));
        }
        let key = zipf.sample(&mut rng) as u64;
        let k = key.to_le_bytes();
        if i >= 300_000 {
            requests += 1;
        }
        if cache.get(k).is_some() {
            if i >= 300_000 {
                hits += 1;
            }
        } else {
            cache.set(k, value_for(key, 100), 0, None).unwrap();
        }
    }
    hits as f64 / requests as f64
}

#[test]
fn merge_beats_fifo_on_zipf() {
    let merge = zipf_hit_ratio(Eviction::Merge, 0.99);
    let fifo = zipf_hit_ratio(Eviction::Fifo, 0.99);
    eprintln!("zipf 0.99 hit ratio: merge {merge:.4} fifo {fifo:.4}");
    // Measured: merge 0.820, fifo 0.771. Merge was 0.791 while small-pool
    // evaluations filled their output room with unread items (a segment
    // of them skipped probation in every run), 0.797 before the small
    // pool's adaptation weighed main's ghosts by their rarity.
    assert!(merge > fifo + 0.03, "merge {merge:.4} vs fifo {fifo:.4}");
}

//! Criterion benches of segcache's core operations (issue 2): get hit, get
//! miss, set (overwrite of a resident key) and delete, 32-byte keys.
//!
//! Order per value size: get hit, get miss, delete, set, so the gets and
//! deletes run on the freshly filled cache (every key resident) and the
//! overwrite churn of the set run, which makes merge eviction drop some
//! unread live items, comes last.
//!
//! Resident keys: 1 M for 64 B and 256 B values; 64 Ki for 4 KiB values
//! (1 M x 4 KiB would be a 4+ GiB heap on a shared VM). The heap is ~2x the
//! resident items' bytes so overwrites run in steady state with merge
//! eviction reclaiming dead versions, and the hash table is at <= 50% load,
//! so every resident key stays resident. Key indices are pre-generated
//! (uniform), so RNG cost is outside the timed loop.
//!
//! Delete is timed with `iter_custom`: each batch of up to 4096 distinct
//! resident keys (walking a shuffled permutation) is deleted (timed) and put
//! back (not timed), so every timed delete finds its key.
//!
//! Run: `cargo bench -p segcache-bench --bench core`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use segcache_bench::throughput::{fill, Dist, KeySeq, Keys, OpCache, SegcacheOps};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn cases() -> [(usize, usize); 3] {
    [(64, 1_000_000), (256, 1_000_000), (4096, 65_536)]
}

fn core(c: &mut Criterion) {
    let mut g = c.benchmark_group("segcache");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20)
        .throughput(Throughput::Elements(1));
    for (value_len, n) in cases() {
        let keys = Keys::new(n);
        let value = vec![b'v'; value_len];
        let mut cache = SegcacheOps::for_items(n, value_len);
        fill(&mut cache, &keys, &value);
        assert_eq!(cache.held(), Some(n), "every resident key fits");
        let mut seq = KeySeq::new(n, 1 << 20, Dist::Uniform, 11);
        let label = |op: &str| BenchmarkId::new(op, format!("{value_len}B/{n}keys"));

        g.bench_function(label("get_hit"), |b| {
            b.iter(|| {
                let hit = cache.get(keys.key(seq.next()));
                debug_assert!(hit);
                black_box(hit)
            })
        });
        g.bench_function(label("get_miss"), |b| {
            b.iter(|| black_box(cache.get(keys.miss_key(seq.next()))))
        });
        // Deletes walk a shuffled permutation so a batch never repeats a key.
        let mut perm: Vec<usize> = (0..n).collect();
        perm.shuffle(&mut rand::rngs::StdRng::seed_from_u64(5));
        let mut at = 0usize;
        let (mut deletes, mut delete_misses) = (0u64, 0u64);
        g.bench_function(label("delete"), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters as usize;
                let mut batch = Vec::with_capacity(4096);
                while left > 0 {
                    batch.clear();
                    for _ in 0..left.min(4096) {
                        batch.push(perm[at]);
                        at = (at + 1) % n;
                    }
                    let start = Instant::now();
                    for &i in &batch {
                        let found = cache.delete(keys.key(i));
                        delete_misses += !black_box(found) as u64;
                    }
                    timed += start.elapsed();
                    for &i in &batch {
                        cache.set(keys.key(i), &value);
                    }
                    left -= batch.len();
                    deletes += batch.len() as u64;
                }
                timed
            })
        });
        eprintln!(
            "segcache {value_len} B: {delete_misses} of {deletes} timed deletes found no key"
        );
        g.bench_function(label("set"), |b| {
            b.iter(|| cache.set(keys.key(seq.next()), black_box(&value)))
        });
        // Overwrites leave dead versions; merge eviction reclaims them and
        // may also drop unread live items, so fewer than `n` can remain.
        let s = cache.inner().stats();
        eprintln!(
            "segcache {value_len} B x {n}: {} items left after the set run, {} evictions, {} merges",
            s.items, s.evictions, s.merges
        );
    }
    g.finish();
}

criterion_group!(benches, core);
criterion_main!(benches);

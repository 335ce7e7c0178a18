//! Criterion benches (issue 4): single-thread throughput of segcache against
//! quick_cache (unsync, and sync with a byte weighter), moka sync and lru.
//!
//! Cases: get hit, get miss, set (overwrite), mixed 80:20 and 90:10
//! get:set; 32-byte keys; 64 B and 256 B values; 1 M resident keys;
//! uniform and Zipf(0.99) key choice. Key-index sequences are generated
//! before timing (RNG cost outside the loop). Every cache is called through
//! the same `dyn OpCache` adapter (one indirect call per op for all of them;
//! see `segcache_bench::throughput` for the fairness rules).
//!
//! Time is bounded: 1 s warm-up, 2 s measurement, 20 samples per case; 100
//! cases plus filling 10 caches with 1 M keys comes to ~6-7 minutes. For a
//! quick table without criterion use
//! `cargo run --release -p segcache-bench -- throughput`.
//!
//! Filter like any criterion bench, e.g.
//! `cargo bench -p segcache-bench --bench peers -- get-hit/64B`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use segcache_bench::throughput::{fill, step, Contender, Dist, KeySeq, Keys, Op};
use std::hint::black_box;
use std::time::Duration;

const RESIDENT: usize = 1_000_000;

fn peers(c: &mut Criterion) {
    let keys = Keys::new(RESIDENT);
    let dists = [Dist::Uniform, Dist::Zipf(0.99)];
    let seqs: Vec<KeySeq> = dists
        .iter()
        .enumerate()
        .map(|(i, &d)| KeySeq::new(RESIDENT, 1 << 22, d, 7 + i as u64))
        .collect();
    for value_len in [64usize, 256] {
        let value = vec![b'v'; value_len];
        let mut caches: Vec<_> = Contender::ALL
            .iter()
            .map(|&k| {
                let mut cache = k.build(RESIDENT, value_len);
                fill(cache.as_mut(), &keys, &value);
                assert!(
                    cache.held().is_none_or(|n| n == RESIDENT),
                    "{} holds every key",
                    k.label()
                );
                (k, cache)
            })
            .collect();
        for op in Op::ALL {
            for (d, seq) in dists.iter().zip(&seqs) {
                let mut g =
                    c.benchmark_group(format!("peers/{}/{value_len}B/{}", op.label(), d.label()));
                g.measurement_time(Duration::from_secs(2))
                    .warm_up_time(Duration::from_secs(1))
                    .sample_size(20)
                    .throughput(Throughput::Elements(1));
                for (k, cache) in caches.iter_mut() {
                    let mut seq = seq.clone();
                    let mut n = 0u64;
                    g.bench_function(k.label(), |b| {
                        b.iter(|| {
                            n += 1;
                            black_box(step(cache.as_mut(), &keys, &value, &mut seq, op, n))
                        })
                    });
                }
                g.finish();
            }
        }
    }
}

criterion_group!(benches, peers);
criterion_main!(benches);

//! Concurrent throughput (issue 3): the ways to share one segcache between
//! threads, against moka and quick_cache's concurrent caches, in one run.
//!
//! Owns the `concurrent` subcommand's workload and runners. Workload: 1 M
//! resident 32-byte keys with 64-byte values, 90:10 get:set, uniform keys
//! from sequences generated before timing, the same total operation count
//! split over 1 or 2 client threads. Contenders:
//! - `&mut Segcache`: one thread, no sharing (the ceiling);
//! - `Mutex<Segcache>`: one lock around one cache;
//! - `ShardedCache`: one lock per shard;
//! - the storage thread, blocking (one request, one reply: reads with
//!   `StorageHandle::get_value_with`, which lends the value in place when
//!   the cache's token is free) and pipelined (a batch of requests
//!   submitted, then its replies collected);
//! - `moka::sync::Cache` and `quick_cache::sync::Cache` (`Arc<[u8]>` values);
//! - Pelikan's own crate (crates.io `segcache` 0.4.4, `Policy::Merge`),
//!   whose `get`/`insert` take `&self`.
//!
//! The storage-thread rows use one more thread than the others (the
//! storage thread itself); on a 2-core machine, 2 clients + 1 storage
//! thread oversubscribe the cores, and the table says so.

use segcache::ops::GetOpts;
use segcache::{Batch, Request, Segcache, ShardedCache, StorageConfig, Store, StoreMode};
use std::sync::Arc;
use std::time::Instant;

const KEY_LEN: usize = 32;
const VALUE: [u8; 64] = [7u8; 64];

fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [b'k'; KEY_LEN];
    k[..8].copy_from_slice(&i.to_le_bytes());
    k
}

/// One thread's pre-generated operations: (key index, is_set).
fn sequence(seed: u64, len: usize, keys: u64) -> Vec<(u64, bool)> {
    let mut r = seed | 1;
    (0..len)
        .map(|_| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            (r % keys, (r >> 32) % 10 == 0)
        })
        .collect()
}

/// Runs `work` on `threads` threads, each over its own sequence; returns
/// total operations per second.
fn timed<S: Sync>(
    shared: &S,
    seqs: &[Vec<(u64, bool)>],
    work: impl Fn(&S, &[(u64, bool)]) + Sync,
) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for seq in seqs {
            let work = &work;
            scope.spawn(move || work(shared, seq));
        }
    });
    let ops: usize = seqs.iter().map(Vec::len).sum();
    ops as f64 / start.elapsed().as_secs_f64()
}

fn builder(keys: u64) -> segcache::Builder {
    // Room for every key twice over, so nothing is evicted.
    Segcache::builder().heap_size((keys as usize * 101 * 2).max(64 << 20))
}

/// One table row: Mops/s per thread count (None: not applicable).
struct Row {
    name: String,
    mops: Vec<Option<f64>>,
}

/// One round of every contender at every thread count.
fn round(keys: u64, ops: usize, threads: &[usize], batches: &[usize], only: &[String]) -> Vec<Row> {
    let seqs_for = |n: usize| -> Vec<Vec<(u64, bool)>> {
        (0..n)
            .map(|t| sequence(0x9e37_79b9 + t as u64, ops / n, keys))
            .collect()
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut row = |name: &str, f: &mut dyn FnMut(usize) -> Option<f64>| {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            return;
        }
        let mops = threads.iter().map(|&n| f(n).map(|x| x / 1e6)).collect();
        rows.push(Row {
            name: name.into(),
            mops,
        });
    };

    row("segcache `&mut` (1 thread only)", &mut |n| {
        if n != 1 {
            return None;
        }
        let mut cache = builder(keys).build().unwrap();
        for i in 0..keys {
            cache.set(key(i), VALUE, 0, None).unwrap();
        }
        let seq = &seqs_for(1)[0];
        let start = Instant::now();
        let mut found = 0usize;
        for &(k, is_set) in seq {
            if is_set {
                cache.set(key(k), VALUE, 0, None).unwrap();
            } else {
                found += cache.get(key(k)).map_or(0, |item| item.value().len());
            }
        }
        assert!(found > 0);
        Some(seq.len() as f64 / start.elapsed().as_secs_f64())
    });

    row("segcache `Mutex<Segcache>`", &mut |n| {
        let cache = parking_lot::Mutex::new(builder(keys).build().unwrap());
        for i in 0..keys {
            cache.lock().set(key(i), VALUE, 0, None).unwrap();
        }
        Some(timed(&cache, &seqs_for(n), |c, seq| {
            for &(k, is_set) in seq {
                let mut c = c.lock();
                if is_set {
                    c.set(key(k), VALUE, 0, None).unwrap();
                } else {
                    std::hint::black_box(c.get(key(k)).map(|item| item.value().len()));
                }
            }
        }))
    });

    row("segcache `ShardedCache` (16 shards)", &mut |n| {
        let cache: ShardedCache = builder(keys).build_sharded(16).unwrap();
        for i in 0..keys {
            cache.set(key(i), VALUE, 0, None).unwrap();
        }
        Some(timed(&cache, &seqs_for(n), |c, seq| {
            for &(k, is_set) in seq {
                if is_set {
                    c.set(key(k), VALUE, 0, None).unwrap();
                } else {
                    std::hint::black_box(c.read_with(key(k), |item| item.map(|i| i.value().len())));
                }
            }
        }))
    });

    row("storage thread, blocking calls", &mut |n| {
        let (handle, thread) = builder(keys)
            .spawn_storage(StorageConfig::default())
            .unwrap();
        for i in 0..keys {
            handle.set(key(i), VALUE, 0, None).unwrap();
        }
        let mops = timed(&handle, &seqs_for(n), |h, seq| {
            for &(k, is_set) in seq {
                if is_set {
                    h.set(key(k), VALUE, 0, None).unwrap();
                } else {
                    // Lent in place when the token is free (a copy when
                    // it travels), as the other rows read.
                    std::hint::black_box(h.get_value_with(key(k), |v, _| v.len()).unwrap());
                }
            }
        });
        drop(handle);
        thread.join().unwrap();
        Some(mops)
    });

    for &batch in batches {
        row(
            &format!("storage thread, pipelined batch {batch}"),
            &mut |n| {
                let (handle, thread) = builder(keys)
                    .spawn_storage(StorageConfig {
                        queue_capacity: batch.max(1),
                        ..StorageConfig::default()
                    })
                    .unwrap();
                {
                    let mut client = handle.client();
                    for i in 0..keys {
                        client
                            .submit(Request::Store(Store::new(
                                StoreMode::Set,
                                key(i).to_vec(),
                                VALUE.to_vec(),
                            )))
                            .unwrap();
                    }
                    while client.recv().unwrap().is_some() {}
                }
                let mops = timed(&handle, &seqs_for(n), |h, seq| {
                    let mut client = h.client();
                    for chunk in seq.chunks(batch) {
                        for &(k, is_set) in chunk {
                            let key = key(k).to_vec();
                            let request = if is_set {
                                Request::Store(Store::new(StoreMode::Set, key, VALUE.to_vec()))
                            } else {
                                Request::Get {
                                    key,
                                    opts: GetOpts::default(),
                                }
                            };
                            client.submit(request).unwrap();
                        }
                        while let Some(reply) = client.recv().unwrap() {
                            std::hint::black_box(reply);
                        }
                    }
                });
                drop(handle);
                thread.join().unwrap();
                Some(mops)
            },
        );
    }

    // With combining (the default) a client that finds the storage thread
    // parked runs its batch itself; "hand-off only" makes the storage
    // thread run every request.
    for (combining, label) in [(true, ""), (false, ", hand-off only")] {
        for &size in batches {
            row(
                &format!("storage thread, `Batch` of {size}{label}"),
                &mut |n| {
                    let (handle, thread) = builder(keys)
                        .spawn_storage(StorageConfig {
                            combining,
                            ..StorageConfig::default()
                        })
                        .unwrap();
                    {
                        let mut client = handle.client();
                        let mut batch = Batch::new();
                        for chunk in (0..keys).collect::<Vec<_>>().chunks(1024) {
                            batch.clear();
                            for &i in chunk {
                                batch.set(key(i), VALUE, 0, None);
                            }
                            client.run(&mut batch).unwrap();
                        }
                    }
                    let mops = timed(&handle, &seqs_for(n), |h, seq| {
                        let mut client = h.client();
                        let mut batch = Batch::new();
                        for chunk in seq.chunks(size) {
                            batch.clear();
                            for &(k, is_set) in chunk {
                                if is_set {
                                    batch.set(key(k), VALUE, 0, None);
                                } else {
                                    batch.get(key(k));
                                }
                            }
                            client.run(&mut batch).unwrap();
                            // Read every hit's value, as the other contenders do.
                            let found: usize = batch
                                .responses()
                                .iter()
                                .map(|r| match r {
                                    segcache::Response::Get(Ok(Some(f))) => f.item.value().len(),
                                    _ => 0,
                                })
                                .sum();
                            assert!(found > 0 || chunk.iter().all(|&(_, is_set)| is_set));
                        }
                    });
                    drop(handle);
                    thread.join().unwrap();
                    Some(mops)
                },
            );
        }
    }

    row("moka `sync::Cache`", &mut |n| {
        let cache: moka::sync::Cache<[u8; KEY_LEN], Arc<[u8]>> = moka::sync::Cache::new(keys * 2);
        for i in 0..keys {
            cache.insert(key(i), Arc::from(&VALUE[..]));
        }
        cache.run_pending_tasks();
        Some(timed(&cache, &seqs_for(n), |c, seq| {
            for &(k, is_set) in seq {
                if is_set {
                    c.insert(key(k), Arc::from(&VALUE[..]));
                } else {
                    std::hint::black_box(c.get(&key(k)));
                }
            }
        }))
    });

    row("quick_cache `sync::Cache`", &mut |n| {
        let cache: quick_cache::sync::Cache<[u8; KEY_LEN], Arc<[u8]>> =
            quick_cache::sync::Cache::new(keys as usize * 2);
        for i in 0..keys {
            cache.insert(key(i), Arc::from(&VALUE[..]));
        }
        Some(timed(&cache, &seqs_for(n), |c, seq| {
            for &(k, is_set) in seq {
                if is_set {
                    c.insert(key(k), Arc::from(&VALUE[..]));
                } else {
                    std::hint::black_box(c.get(&key(k)));
                }
            }
        }))
    });

    row("Pelikan's crate (`segcache` 0.4.4, Merge)", &mut |n| {
        // Its get and insert take `&self` (it is lock-free).
        let cache = crate::throughput::pelikan_merge_for(keys as usize, VALUE.len());
        let zero = std::time::Duration::ZERO;
        for i in 0..keys {
            let _ = cache.insert(&key(i), &VALUE[..], None, zero);
        }
        Some(timed(&cache, &seqs_for(n), |c, seq| {
            for &(k, is_set) in seq {
                if is_set {
                    let _ = c.insert(&key(k), &VALUE[..], None, zero);
                } else if let Some(item) = c.get(&key(k)) {
                    if let pelikan_segcache::Value::Bytes(v) = item.value() {
                        std::hint::black_box(v.len());
                    }
                }
            }
        }))
    });

    rows
}

/// Runs `rounds` rounds (every contender in turn each round, so load on
/// the machine hits them alike) and returns a markdown table: per cell the
/// median Mops/s and, in brackets, the median ratio to the sharded handle
/// at that thread count (for the single-thread column: to `&mut`) with its
/// range over the rounds.
pub fn run(
    keys: u64,
    ops: usize,
    threads: &[usize],
    batches: &[usize],
    rounds: usize,
    only: &[String],
) -> Vec<String> {
    let all: Vec<Vec<Row>> = (0..rounds.max(1))
        .map(|_| round(keys, ops, threads, batches, only))
        .collect();
    let base_of = |rows: &[Row], t: usize| -> Option<f64> {
        let wanted = if threads[t] == 1 {
            "`&mut`"
        } else {
            "ShardedCache"
        };
        rows.iter().find(|r| r.name.contains(wanted))?.mops[t]
    };
    let median = |mut xs: Vec<f64>| -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let mut out = vec![
        format!(
            "| contender | {} |",
            threads
                .iter()
                .map(|n| if *n == 1 {
                    "1 thread Mops/s (x `&mut`, range)".to_string()
                } else {
                    format!("{n} threads Mops/s (x sharded, range)")
                })
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        format!("|---|{}", "---|".repeat(threads.len())),
    ];
    for (i, r) in all[0].iter().enumerate() {
        let cells: Vec<String> = (0..threads.len())
            .map(|t| {
                let speeds: Vec<f64> = all.iter().filter_map(|rows| rows[i].mops[t]).collect();
                if speeds.is_empty() {
                    return "n/a".into();
                }
                let ratios: Vec<f64> = all
                    .iter()
                    .filter_map(|rows| Some(rows[i].mops[t]? / base_of(rows, t)?))
                    .collect();
                let m = median(speeds);
                if ratios.is_empty() {
                    return format!("{m:.2}");
                }
                let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = ratios.iter().copied().fold(0.0, f64::max);
                format!("{m:.2} ({:.2}x, {lo:.2}-{hi:.2})", median(ratios))
            })
            .collect();
        out.push(format!("| {} | {} |", r.name, cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contender_runs_and_reports_a_positive_rate() {
        let table = run(2_000, 20_000, &[1, 2], &[8], 2, &[]);
        assert_eq!(
            table.len(),
            2 + 7 + 3,
            "header, rule, 7 contenders and 1 batch size (pipelined, Batch, Batch hand-off only)"
        );
        for line in &table[2..] {
            let cells: Vec<&str> = line
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            assert_eq!(cells.len(), 3, "{line}");
            for cell in &cells[1..] {
                if *cell != "n/a" {
                    let mops: f64 = cell.split_whitespace().next().unwrap().parse().unwrap();
                    assert!(mops > 0.0, "{line}");
                }
            }
        }
        assert!(
            table[2].contains("n/a"),
            "&mut has no 2-thread run: {}",
            table[2]
        );
    }

    #[test]
    fn sequences_mix_one_set_in_ten() {
        let seq = sequence(1, 100_000, 1000);
        let sets = seq.iter().filter(|(_, s)| *s).count();
        assert!((8_000..12_000).contains(&sets), "{sets}");
        assert!(seq.iter().all(|(k, _)| *k < 1000));
    }
}

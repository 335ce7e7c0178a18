//! `segcache-bench` CLI: a first look at segcache on a Twitter-like
//! workload (`demo`), miss ratio on the CloudPhysics trace (`trace`) and on
//! synthetic Twitter cluster workloads (`twitter`) at equal real memory,
//! per-item memory overhead (`memory` from the allocator's side,
//! `full-heap` from the cache's own accounting) and single-thread
//! operation throughput against peer caches (`throughput`), and the miss
//! ratio of a running memcache server (`server-replay`).
//!
//! Owns the process's counting `#[global_allocator]` and the markdown
//! reporting; the machinery lives in the library modules.

use clap::{Args, Parser, Subcommand};
use segcache_bench::alloc::{self, CountingAlloc};
use segcache_bench::sim::{self, Kind, ObjLru, ReplayStats, SimCache, Typical};
use segcache_bench::throughput::{self, Contender, Dist, KeySeq, Keys, Op};
use segcache_bench::{blocks, demo, fullheap, trace, twitter, wire};
use std::process::Command;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const MIB: f64 = (1u64 << 20) as f64;

#[derive(Parser)]
#[command(about = "Segcache evaluation suite: miss ratio and memory overhead vs peer caches")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How `trace` and `twitter` lay out the segment caches ([`sim::Layout`]).
#[derive(Args, Clone, Copy)]
struct LayoutArgs {
    /// Cut each segment cache's budget (the whole budget, with --shards)
    /// into N to 2N segments (at least 4 KiB, at most 1 MiB each) instead
    /// of the crate's default (`segcache::default_segment_size`: 256 to
    /// 512 of 16 KiB to 1 MiB).
    #[arg(long)]
    segments: Option<usize>,
    /// Split segcache into this many independent caches, each with its
    /// share of the budget, a key going to one by its hash (as
    /// `ShardedCache` does).
    #[arg(long, default_value_t = 1)]
    shards: usize,
}

impl From<LayoutArgs> for sim::Layout {
    fn from(a: LayoutArgs) -> Self {
        sim::Layout {
            segments: a.segments,
            shards: a.shards,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive a default 64 MiB segcache with one Twitter-like cluster as a
    /// look-aside cache, replay the same requests on a peer given the same
    /// memory, and print what happened.
    Demo {
        /// Cluster number from the Twitter stats table.
        #[arg(long, default_value_t = 52)]
        cluster: u32,
        #[arg(long, default_value_t = 2_000_000)]
        requests: u64,
        /// Simulated seconds per real second (default: the stream spans
        /// twice the cluster's most common TTL).
        #[arg(long)]
        time_scale: Option<f64>,
        /// Heap MiB (default: the builder's 64 MiB).
        #[arg(long)]
        heap_mib: Option<usize>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Peer cache replaying the same requests with the same memory
        /// (moka, quick_cache, lru), or "none".
        #[arg(long, default_value = "quick_cache")]
        peer: String,
    },
    /// Single-thread ops/s of segcache and peers (markdown table).
    Throughput {
        /// Resident keys (32 B each).
        #[arg(long, default_value_t = 1_000_000)]
        keys: usize,
        /// Timed operations per case.
        #[arg(long, default_value_t = 2_000_000)]
        ops: u64,
        /// Interleaved rounds (each case runs on every cache in turn, once
        /// per round); cells report the median and the ratios' range.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Only these cases (get-hit,get-miss,set,mixed-80:20,mixed-90:10).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Value sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "64,256")]
        values: Vec<usize>,
        /// Caches (segcache,segcache-lean,quick_cache-unsync,quick_cache-sync,moka-sync,lru).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "segcache,quick_cache-unsync,quick_cache-sync,moka-sync,lru"
        )]
        caches: Vec<String>,
    },
    /// Concurrent throughput: &mut, Mutex, ShardedCache, the storage thread
    /// (blocking and pipelined) and moka/quick_cache at 1 and 2 threads.
    Concurrent {
        /// Resident keys (32 B each, 64 B values).
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// Timed operations per cell (90:10 get:set), split over the threads.
        #[arg(long, default_value_t = 2_000_000)]
        ops: usize,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Pipelined batch sizes for the storage thread.
        #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
        batches: Vec<usize>,
        /// Rounds (every contender once per round); cells report medians.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Only the contenders whose name contains one of these (e.g.
        /// `&mut,Batch`); default: all.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// segcache bytes per item at a full heap (32 B keys, 64 B values) for
    /// several heap sizes and hash powers.
    FullHeap {
        /// `heap_MiB` (default table size) or `heap_MiB:hash_power` (the
        /// table's starting size; it grows while the heap has room).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "64,80,96,160,1024,64:16,64:17,88:17,168:18,1344:22"
        )]
        configs: Vec<String>,
        /// Write this many heaps' worth of items.
        #[arg(long, default_value_t = 3.0)]
        overfill: f64,
        #[arg(long, default_value_t = 1 << 20)]
        segment_size: usize,
    },
    /// Miss ratio on a block-I/O trace at several budgets: the CloudPhysics
    /// trace from the shared data directory, any `oracleGeneral` file, or a
    /// synthetic block trace.
    Trace {
        /// An `oracleGeneral` trace file (libCacheSim's binary format) to
        /// replay instead of the CloudPhysics trace.
        #[arg(long, conflicts_with = "synthetic")]
        file: Option<std::path::PathBuf>,
        /// Replay a synthetic block trace of this shape instead (512-byte
        /// blocks, 914,000 requests, seed 42).
        #[arg(long, value_enum)]
        synthetic: Option<blocks::Shape>,
        /// Memory budgets in MiB.
        #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024")]
        budgets_mib: Vec<u64>,
        /// Before the trace, write this many MiB of objects that are read
        /// once (`blocks::cold_prefix`), so the trace starts in a cache
        /// already full of cold objects, as in one that has run for a
        /// while; those requests are not counted.
        #[arg(long, default_value_t = 0)]
        fill_first_mib: u64,
        /// Caches to run (segcache,pelikan-merge,pelikan-s3fifo,quick_cache,moka,lru).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "segcache,pelikan-merge,pelikan-s3fifo,quick_cache,moka,lru"
        )]
        caches: Vec<String>,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Miss ratio on synthetic Twitter cluster workloads.
    Twitter {
        /// Cluster numbers from the stats table.
        #[arg(long, value_delimiter = ',', default_value = "52,22,25,11,18,19,6,7")]
        cluster: Vec<u32>,
        /// Requests per cluster.
        #[arg(long, default_value_t = 2_000_000)]
        requests: u64,
        /// Memory budget in MiB (default: a quarter of the stream's unique
        /// key+value bytes, at least 2 MiB).
        #[arg(long)]
        budget_mib: Option<f64>,
        /// Simulated seconds per real second of the cluster's request rate
        /// (1 = real rate; larger compresses time so TTLs expire sooner).
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        /// Instead of one --time-scale for all clusters, compress each
        /// cluster's time so its stream spans this many of its most common
        /// TTL (as the `demo` does with 2).
        #[arg(long)]
        ttl_spans: Option<f64>,
        /// Count only the reads after this share of each stream (0 to
        /// 1): the cache has then run through the rest, as one that has
        /// run for a while, instead of starting empty.
        #[arg(long, default_value_t = 0.0)]
        count_after: f64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "segcache,pelikan-merge,pelikan-s3fifo,quick_cache,moka,lru"
        )]
        caches: Vec<String>,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// One throughput case on one cache, once, untimed: for instruction
    /// counts under `valgrind --tool=callgrind --toggle-collect='*run_case*'`
    /// (immune to other load on the machine; divide `Ir` by `--ops`).
    #[command(hide = true)]
    Opcount {
        /// A `throughput --caches` name.
        #[arg(long)]
        cache: String,
        /// A `throughput --only` case, or `delete` (resident keys in
        /// order: every delete hits while `--ops` <= `--keys`).
        #[arg(long)]
        op: String,
        #[arg(long, default_value_t = 1_000_000)]
        keys: usize,
        #[arg(long, default_value_t = 100_000)]
        ops: u64,
        #[arg(long, default_value_t = 64)]
        value: usize,
        /// Zipf 0.99 key sequence instead of uniform.
        #[arg(long)]
        zipf: bool,
    },
    /// Replay one Twitter-like cluster to a running memcache server over
    /// TCP (look-aside, pipelined; `wire.rs`) and print one line of
    /// `name=value` counts: its miss ratio at the memory it was started
    /// with. Without --addr, print the stream's footprint only.
    ServerReplay {
        /// The server, e.g. 127.0.0.1:11211.
        #[arg(long)]
        addr: Option<String>,
        /// Cluster number from the stats table.
        #[arg(long)]
        cluster: u32,
        #[arg(long, default_value_t = 2_000_000)]
        requests: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Requests written per round trip.
        #[arg(long, default_value_t = 64)]
        window: usize,
    },
    /// Bytes of overhead per item beyond key+value (32 B keys, 64 B values).
    Memory {
        #[arg(long, default_value_t = 1_000_000)]
        items: u64,
        /// Measure one cache in this process (used internally: each cache is
        /// measured in a fresh child process so RSS is not polluted).
        #[arg(long, hide = true)]
        only: Option<String>,
    },
}

fn kinds(names: &[String]) -> Vec<Kind> {
    names
        .iter()
        .map(|n| Kind::parse(n).unwrap_or_else(|| panic!("unknown cache {n:?}")))
        .collect()
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Demo {
            cluster,
            requests,
            time_scale,
            heap_mib,
            seed,
            peer,
        } => match peer.as_str() {
            "none" => Ok(None),
            name => match Kind::parse(name) {
                Some(Kind::Segcache) | None => Err(format!(
                    "--peer {name:?}: expected moka, quick_cache, lru or none"
                )),
                Some(kind) => Ok(Some(kind)),
            },
        }
        .and_then(|peer| {
            run_demo(
                cluster,
                &demo::DemoConfig {
                    requests,
                    seed,
                    time_scale,
                    heap_size: heap_mib.map(|m| m << 20),
                    peer,
                },
            )
        }),
        Cmd::Throughput {
            keys,
            ops,
            rounds,
            values,
            caches,
            only,
        } => run_throughput(keys, ops, rounds, &values, &caches, &only),
        Cmd::Concurrent {
            keys,
            ops,
            threads,
            batches,
            rounds,
            only,
        } => {
            println!("```\ncargo run --release -p segcache-bench -- concurrent --keys {keys} --ops {ops} --rounds {rounds}\n```\n");
            for line in
                segcache_bench::concurrent::run(keys, ops, &threads, &batches, rounds, &only)
            {
                println!("{line}");
            }
            Ok(())
        }
        Cmd::FullHeap {
            configs,
            overfill,
            segment_size,
        } => run_full_heap(&configs, overfill, segment_size),
        Cmd::Trace {
            file,
            synthetic,
            budgets_mib,
            fill_first_mib,
            caches,
            layout,
        } => {
            let source = match (file, synthetic) {
                (Some(f), _) => TraceSource::File(f),
                (None, Some(s)) => TraceSource::Synthetic(s),
                (None, None) => TraceSource::File(trace::cloudphysics_path()),
            };
            run_trace(
                &source,
                &budgets_mib,
                fill_first_mib,
                &kinds(&caches),
                layout.into(),
            )
        }
        Cmd::ServerReplay {
            addr,
            cluster,
            requests,
            seed,
            window,
        } => run_server_replay(addr.as_deref(), cluster, requests, seed, window),
        Cmd::Twitter {
            cluster,
            requests,
            budget_mib,
            time_scale,
            ttl_spans,
            count_after,
            seed,
            caches,
            layout,
        } => run_twitter(
            &cluster,
            twitter::WorkloadConfig {
                requests,
                seed,
                time_scale,
            },
            ttl_spans,
            count_after,
            budget_mib,
            &kinds(&caches),
            layout.into(),
        ),
        Cmd::Opcount {
            cache,
            op,
            keys,
            ops,
            value,
            zipf,
        } => run_opcount(&cache, &op, keys, ops, value, zipf),
        Cmd::Memory { items, only } => match only {
            Some(k) => measure_one(Kind::parse(&k).expect("cache name"), items),
            None => run_memory(items),
        },
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run_demo(cluster: u32, cfg: &demo::DemoConfig) -> Result<(), String> {
    let stats = twitter::load_cluster(cluster).map_err(|e| e.to_string())?;
    let report = demo::run(stats, cfg)?;
    println!("{report}");
    Ok(())
}

fn run_throughput(
    n: usize,
    ops: u64,
    rounds: usize,
    values: &[usize],
    caches: &[String],
    only: &[String],
) -> Result<(), String> {
    let contenders: Vec<Contender> = caches
        .iter()
        .map(|c| Contender::parse(c).ok_or(format!("unknown cache {c:?}")))
        .collect::<Result<_, _>>()?;
    let cases: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| only.is_empty() || only.iter().any(|o| *o == op.label()))
        .collect();
    if cases.is_empty() {
        return Err(format!("no case matches {only:?}"));
    }
    let rounds = rounds.max(1);
    let keys = Keys::new(n);
    let dists = [Dist::Uniform, Dist::Zipf(0.99)];
    let seq_len = (ops as usize).clamp(1 << 16, 1 << 22);
    let seqs: Vec<KeySeq> = dists
        .iter()
        .enumerate()
        .map(|(i, &d)| KeySeq::new(n, seq_len, d, 7 + i as u64))
        .collect();
    let base = contenders
        .iter()
        .position(|&c| c == Contender::Segcache)
        .unwrap_or(0);
    let mut rows: Vec<String> = Vec::new();
    for &v in values {
        let value = vec![b'v'; v];
        // Every cache built and filled first, then each case runs on every
        // cache in turn, round after round, so load on the machine hits
        // them alike.
        let mut built: Vec<_> = contenders
            .iter()
            .map(|&c| {
                let mut cache = c.build(n, v);
                throughput::fill(cache.as_mut(), &keys, &value);
                match cache.held() {
                    Some(n) => eprintln!("{} {v} B: filled ({n} items held)", c.label()),
                    None => eprintln!("{} {v} B: filled", c.label()),
                }
                cache
            })
            .collect();
        for &op in &cases {
            for (d, seq) in dists.iter().zip(&seqs) {
                // mops[round][cache]
                let mut mops = vec![vec![0.0f64; built.len()]; rounds];
                for round in mops.iter_mut() {
                    for (i, cache) in built.iter_mut().enumerate() {
                        let mut seq = seq.clone();
                        throughput::run_case(cache.as_mut(), &keys, &value, &mut seq, op, ops / 10);
                        let r =
                            throughput::run_case(cache.as_mut(), &keys, &value, &mut seq, op, ops);
                        if op == Op::GetHit && r.hits != r.ops {
                            eprintln!(
                                "warning: {} {v} B {}: {} of {} get-hits missed",
                                contenders[i].label(),
                                d.label(),
                                r.ops - r.hits,
                                r.ops
                            );
                        }
                        round[i] = r.mops();
                    }
                }
                let mut line = format!("| {} | {v} B | {} |", op.label(), d.label());
                for i in 0..built.len() {
                    let speed = median(mops.iter().map(|r| r[i]).collect());
                    if i == base {
                        line += &format!(" {speed:.2} |");
                    } else {
                        let ratios: Vec<f64> = mops.iter().map(|r| r[i] / r[base]).collect();
                        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                        let hi = ratios.iter().copied().fold(0.0, f64::max);
                        line += &format!(
                            " {speed:.2} ({:.2}x, {lo:.2}-{hi:.2}) |",
                            median(ratios.clone())
                        );
                    }
                }
                eprintln!("{line}");
                rows.push(line);
            }
        }
        built.clear();
    }
    println!(
        "Single-thread throughput, Mops/s, median of {rounds} interleaved rounds; peers' cells: median ratio to segcache (x) and its range over the rounds. {n} resident 32 B keys, {ops} timed ops per cell.\n"
    );
    let mut header = "| op | value | keys |".to_string();
    for c in &contenders {
        header += &format!(" {} |", c.label());
    }
    println!("{header}");
    println!("|---|---|---|{}", "---|".repeat(contenders.len()));
    for line in rows {
        println!("{line}");
    }
    Ok(())
}

fn run_opcount(
    cache: &str,
    op: &str,
    n: usize,
    ops: u64,
    value_len: usize,
    zipf: bool,
) -> Result<(), String> {
    let contender = Contender::parse(cache).ok_or(format!("unknown cache {cache:?}"))?;
    let op = Op::ALL
        .into_iter()
        .chain([Op::Delete])
        .find(|o| o.label() == op)
        .ok_or(format!("unknown op {op:?}"))?;
    let keys = Keys::new(n);
    let value = vec![b'v'; value_len];
    let dist = if zipf {
        Dist::Zipf(0.99)
    } else {
        Dist::Uniform
    };
    let mut seq = KeySeq::new(n, (ops as usize).clamp(1 << 16, 1 << 22), dist, 7);
    let mut built = contender.build(n, value_len);
    throughput::fill(built.as_mut(), &keys, &value);
    let r = throughput::run_case(built.as_mut(), &keys, &value, &mut seq, op, ops);
    println!(
        "{} {} {}: {} ops, {} hits, {} items",
        contender.label(),
        op.label(),
        dist.label(),
        r.ops,
        r.hits,
        built.held().map_or("?".to_string(), |n| n.to_string())
    );
    Ok(())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

fn run_full_heap(configs: &[String], overfill: f64, segment_size: usize) -> Result<(), String> {
    println!(
        "segcache bytes per item at a full heap: {} B keys + {} B values, merge eviction, {overfill}x heap written, {} KiB segments\n",
        fullheap::KEY,
        fullheap::VALUE,
        segment_size >> 10
    );
    println!("| heap MiB | hash_power (start) | table MiB (end) | items held | table load | B/item all-in | overhead B/item | = item header | + table | + seg headers | + ghosts | + unused heap |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut best: Option<(f64, String)> = None;
    for c in configs {
        let (heap, hp) = match c.split_once(':') {
            None => (c.parse::<usize>().ok(), None),
            Some((h, p)) => (h.parse::<usize>().ok(), p.parse::<u8>().ok()),
        };
        let heap = heap
            .filter(|_| c.split_once(':').is_none_or(|_| hp.is_some()))
            .ok_or(format!(
                "bad config {c:?}; expected HEAP_MIB (default table) or HEAP_MIB:HASH_POWER"
            ))?;
        let r =
            fullheap::measure(heap << 20, segment_size, hp, overfill).map_err(|e| e.to_string())?;
        let hint = hp.map_or("default".to_string(), |p| p.to_string());
        println!(
            "| {heap} | {hint} | {:.1} | {} | {:.0}% | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} |",
            r.stats.hash_table_bytes as f64 / MIB,
            r.stats.items,
            100.0 * r.table_load(),
            r.per_item(),
            r.overhead(),
            r.item_header(),
            r.table_share(),
            r.header_share(),
            r.admission_share(),
            r.slack_share()
        );
        if best.as_ref().is_none_or(|b| r.overhead() < b.0) {
            best = Some((r.overhead(), format!("{heap} MiB heap, hash_power {hint}")));
        }
    }
    if let Some((o, name)) = best {
        println!("\nBest: {name}: {o:.1} B/item overhead (target <= 16).");
    }
    Ok(())
}

/// Build `kind` for `budget` bytes and replay with `f`, at equal real
/// memory where it counts, the end of the replay
/// ([`sim::within_budget`]); errors become a table cell.
fn measure(
    kind: Kind,
    budget: usize,
    typ: Typical,
    layout: sim::Layout,
    f: impl Fn(&mut dyn SimCache, usize) -> ReplayStats,
) -> Result<ReplayStats, String> {
    sim::within_budget(budget, !kind.is_segment_cache(), |build_for| {
        let base = alloc::live_bytes();
        let mut cache = sim::build(kind, build_for, typ, layout)?;
        Ok(f(cache.as_mut(), base))
    })
}

fn cell(r: &Result<ReplayStats, String>, baseline: Option<f64>) -> String {
    match r {
        Ok(s) => match baseline {
            Some(b) if b > 0.0 => format!("{:.4} ({:.2}x)", s.miss_ratio(), s.miss_ratio() / b),
            _ => format!("{:.4}", s.miss_ratio()),
        },
        Err(e) => format!("n/a ({e})"),
    }
}

fn mem_cell(r: &Result<ReplayStats, String>, budget: usize) -> String {
    match r {
        Ok(s) => format!("{:.4}", s.end_bytes as f64 / budget as f64),
        Err(_) => "n/a".into(),
    }
}

/// Where `trace` gets its requests.
enum TraceSource {
    File(std::path::PathBuf),
    Synthetic(blocks::Shape),
}

fn run_trace(
    source: &TraceSource,
    budgets_mib: &[u64],
    fill_first_mib: u64,
    kinds: &[Kind],
    layout: sim::Layout,
) -> Result<(), String> {
    let (t, name) = match source {
        TraceSource::File(path) => {
            let t = trace::read(path).map_err(|e| e.to_string())?;
            let name = if *path == trace::cloudphysics_path() {
                "CloudPhysics trace".to_string()
            } else {
                format!("Trace {}", path.display())
            };
            (t, name)
        }
        TraceSource::Synthetic(shape) => (
            blocks::generate(*shape, 42),
            format!("Synthetic block trace `{}`", shape.label()),
        ),
    };
    if t.is_empty() {
        return Err(format!("{name}: no requests"));
    }
    let mut sizes = std::collections::HashMap::new();
    for r in &t {
        sizes.insert(r.obj_id, r.obj_size as u64);
    }
    let mean = sizes.values().sum::<u64>() / sizes.len() as u64;
    let typ = Typical {
        key_len: 8,
        value_len: mean as usize,
    };
    println!(
        "{name}: {} requests, {} objects, mean object {} B\n",
        t.len(),
        sizes.len(),
        mean
    );
    let prefix = blocks::cold_prefix(&t, fill_first_mib << 20, 42);
    let uncounted = prefix.len();
    let t = if prefix.is_empty() {
        t
    } else {
        println!(
            "Replayed after {uncounted} requests of {fill_first_mib} MiB of objects read once (not counted)\n"
        );
        let mut all = prefix;
        all.extend_from_slice(&t);
        all
    };
    let mut header = "| budget MiB | obj-lru (object bytes only) |".to_string();
    for k in kinds {
        header += &format!(" {} |", k.label());
    }
    println!("{header}");
    println!("|{}", "---|".repeat(kinds.len() + 2));
    let mut mem_rows = Vec::new();
    for &mib in budgets_mib {
        let budget = (mib << 20) as usize;
        let mut lru = ObjLru::new(budget as u64);
        let reference = sim::replay_trace(&mut lru, &t, uncounted, 0);
        drop(lru);
        let results: Vec<_> = kinds
            .iter()
            .map(|&k| {
                measure(k, budget, typ, layout, |c, base| {
                    sim::replay_trace(c, &t, uncounted, base)
                })
            })
            .collect();
        let seg = results
            .iter()
            .zip(kinds)
            .find(|(_, k)| **k == Kind::Segcache)
            .and_then(|(r, _)| r.as_ref().ok())
            .map(|s| s.miss_ratio());
        let mut row = format!("| {mib} | {} |", cell(&Ok(reference), seg));
        let mut mrow = format!("| {mib} |");
        for r in &results {
            row += &format!(" {} |", cell(r, seg));
            mrow += &format!(" {} |", mem_cell(r, budget));
        }
        println!("{row}");
        mem_rows.push(mrow);
    }
    println!("\nMiss ratio; (x) = ratio to segcache's miss ratio.\n");
    print_mem_table(kinds, &mem_rows, "budget MiB");
    Ok(())
}

fn print_mem_table(kinds: &[Kind], rows: &[String], first: &str) {
    println!("Real allocated bytes at the end of the replay / budget:\n");
    let mut header = format!("| {first} |");
    for k in kinds {
        header += &format!(" {} |", k.label());
    }
    println!("{header}");
    println!("|{}", "---|".repeat(kinds.len() + 1));
    for r in rows {
        println!("{r}");
    }
    println!();
}

fn run_server_replay(
    addr: Option<&str>,
    cluster: u32,
    requests: u64,
    seed: u64,
    window: usize,
) -> Result<(), String> {
    let stats = twitter::load_cluster(cluster).map_err(|e| e.to_string())?;
    let cfg = twitter::WorkloadConfig {
        requests,
        seed,
        time_scale: 1.0,
    };
    let w = twitter::Workload::new(stats, cfg)?;
    let Some(addr) = addr else {
        println!(
            "cluster={cluster} unique_mib={:.1}",
            w.unique_bytes() as f64 / MIB
        );
        return Ok(());
    };
    let s = wire::replay(addr, w, window).map_err(|e| format!("{addr}: {e}"))?;
    println!(
        "cluster={cluster} requests={} reads={} misses={} miss_ratio={:.4} refused={} items={} secs={:.1}",
        s.requests,
        s.reads,
        s.misses,
        s.miss_ratio(),
        s.refused,
        s.items.map_or("-".to_string(), |n| n.to_string()),
        s.wall.as_secs_f64()
    );
    Ok(())
}

fn run_twitter(
    clusters: &[u32],
    cfg: twitter::WorkloadConfig,
    ttl_spans: Option<f64>,
    count_after: f64,
    budget_mib: Option<f64>,
    kinds: &[Kind],
    layout: sim::Layout,
) -> Result<(), String> {
    if !(0.0..1.0).contains(&count_after) {
        return Err(format!(
            "--count-after {count_after}: must be at least 0 and below 1"
        ));
    }
    let uncounted = (cfg.requests as f64 * count_after) as u64;
    let table = twitter::load_stats(&twitter::stats_path()).map_err(|e| e.to_string())?;
    let mut header =
        "| cluster | TTLs | simulated h | reads | unique MiB | budget MiB |".to_string();
    for k in kinds {
        header += &format!(" {} |", k.label());
    }
    let mut rows = Vec::new();
    let mut mem_rows = Vec::new();
    for &id in clusters {
        let stats = table
            .iter()
            .find(|c| c.cluster == id)
            .ok_or(format!("no cluster{id}"))?
            .clone();
        let mut cfg = cfg.clone();
        if let Some(spans) = ttl_spans {
            cfg.time_scale = demo::auto_time_scale(&stats, cfg.requests) * spans / 2.0;
        }
        let w = twitter::Workload::new(stats.clone(), cfg.clone())?;
        let unique = w.unique_bytes();
        let budget = match budget_mib {
            Some(m) => (m * MIB) as usize,
            None => ((unique / 4) as usize).max(2 << 20),
        };
        let typ = Typical {
            key_len: stats.key_size.unwrap().round() as usize,
            value_len: stats.value_size.unwrap().round().max(1.0) as usize,
        };
        let results: Vec<_> = kinds
            .iter()
            .map(|&k| {
                measure(k, budget, typ, layout, |c, base| {
                    sim::replay_workload(c, w.clone(), uncounted, base)
                })
            })
            .collect();
        let seg = results
            .iter()
            .zip(kinds)
            .find(|(_, k)| **k == Kind::Segcache)
            .and_then(|(r, _)| r.as_ref().ok())
            .map(|s| s.miss_ratio());
        let reads = results
            .iter()
            .find_map(|r| r.as_ref().ok())
            .map_or(0, |s| s.reads);
        let ttls: Vec<String> = stats.ttl_mix.iter().take(3).map(|t| fmt_ttl(t.0)).collect();
        let mut row = format!(
            "| {id} | {} | {:.1} | {reads} | {:.1} | {:.1} |",
            ttls.join(" "),
            w.duration_secs() / 3600.0,
            unique as f64 / MIB,
            budget as f64 / MIB
        );
        let mut mrow = format!("| {id} |");
        for r in &results {
            row += &format!(" {} |", cell(r, seg));
            mrow += &format!(" {} |", mem_cell(r, budget));
        }
        eprintln!("cluster{id}: done ({:.0} simulated s)", w.duration_secs());
        rows.push(row);
        mem_rows.push(mrow);
    }
    println!(
        "Synthetic Twitter workloads: {} requests per cluster, seed {}, {}\n",
        cfg.requests,
        cfg.seed,
        match ttl_spans {
            Some(n) => format!("each stream spanning {n}x its cluster's most common TTL"),
            None => format!("time scale {}", cfg.time_scale),
        }
    );
    if uncounted > 0 {
        println!("Reads counted after the first {uncounted} requests of each stream\n");
    }
    println!("{header}");
    println!("|{}", "---|".repeat(kinds.len() + 6));
    for r in rows {
        println!("{r}");
    }
    println!("\nMiss ratio over reads; (x) = ratio to segcache's miss ratio.\n");
    print_mem_table(kinds, &mem_rows, "cluster");
    Ok(())
}

fn fmt_ttl(s: u32) -> String {
    if s % 86400 == 0 {
        format!("{}d", s / 86400)
    } else if s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

const MEM_KEY: usize = 32;
const MEM_VALUE: usize = 64;

fn run_memory(items: u64) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("Memory overhead: {items} items of {MEM_KEY} B key + {MEM_VALUE} B value, one fresh process per cache\n");
    println!("| cache | items held | allocated MiB | alloc overhead B/item | RSS delta MiB | RSS overhead B/item |");
    println!("|---|---|---|---|---|---|");
    let kinds = [Kind::Segcache, Kind::Moka, Kind::QuickCache, Kind::Lru];
    for k in kinds {
        let out = Command::new(&exe)
            .args(["memory", "--items", &items.to_string(), "--only", k.label()])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("RESULT"));
        match line {
            Some(l) => {
                let f: Vec<f64> = l
                    .split_whitespace()
                    .skip(1)
                    .map(|v| v.parse().unwrap())
                    .collect();
                let (held, alloc_b, rss_b) = (f[0], f[1], f[2]);
                let payload = (MEM_KEY + MEM_VALUE) as f64;
                println!(
                    "| {} | {held} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    k.label(),
                    alloc_b / MIB,
                    alloc_b / held - payload,
                    rss_b / MIB,
                    rss_b / held - payload
                );
            }
            None => println!(
                "| {} | n/a: {} | | | | |",
                k.label(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("failed")
            ),
        }
    }
    println!(
        "\nOverhead = bytes per held item minus the {} payload bytes.",
        MEM_KEY + MEM_VALUE
    );
    Ok(())
}

fn mem_key(i: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&i.to_le_bytes());
    buf.resize(MEM_KEY, b'm');
}

/// Insert `items` items into an unconstrained instance of `kind` and print
/// `RESULT held alloc_bytes rss_bytes`.
fn measure_one(kind: Kind, items: u64) -> Result<(), String> {
    let mut key = Vec::with_capacity(MEM_KEY);
    let (held, alloc_b, rss_b) = match kind {
        Kind::Segcache => segcache_memory(items)?,
        _ => {
            let rss0 = alloc::rss_bytes();
            let a0 = alloc::live_bytes();
            let sizing = sim::Sizing {
                per_item: 0,
                capacity: u64::MAX / 4,
            };
            let mut c: Box<dyn SimCache> = match kind {
                Kind::Moka => Box::new(sim::MokaSim::new(sizing)),
                Kind::QuickCache => {
                    Box::new(sim::QuickSim::new(sizing, (MEM_KEY + MEM_VALUE) as u64))
                }
                _ => Box::new(sim::LruSim::new(sizing)),
            };
            for i in 0..items {
                mem_key(i, &mut key);
                c.set(&key, MEM_VALUE, None, 0);
            }
            c.settle();
            let a = alloc::live_bytes() - a0;
            let r = alloc::rss_bytes().saturating_sub(rss0);
            let held = (0..items)
                .filter(|&i| {
                    mem_key(i, &mut key);
                    c.get(&key, 0)
                })
                .count() as u64;
            (held, a, r)
        }
    };
    println!("RESULT {held} {alloc_b} {rss_b}");
    Ok(())
}

#[cfg(feature = "segcache-adapter")]
fn segcache_memory(items: u64) -> Result<(u64, usize, usize), String> {
    // Size the heap from the payload, growing it until every item is held;
    // the hash table gets one bucket per ~4 items.
    let mut key = Vec::with_capacity(MEM_KEY);
    let mut hp = 4u8;
    while (1u64 << hp) * 4 < items {
        hp += 1;
    }
    let mut heap_per_item = (MEM_KEY + MEM_VALUE + 8) as f64;
    loop {
        let seg = sim::SEGMENT_SIZE;
        let heap = (((items as f64 * heap_per_item) as usize / seg) + 2) * seg;
        let rss0 = alloc::rss_bytes();
        let a0 = alloc::live_bytes();
        let mut c = sim::SegcacheSim::with_params(heap, seg, hp, segcache::Eviction::Merge)
            .map_err(|e| format!("{e:?}"))?;
        for i in 0..items {
            mem_key(i, &mut key);
            c.set(&key, MEM_VALUE, None, 0);
        }
        // The heap is an anonymous mmap, outside the counting allocator.
        let a = alloc::live_bytes() - a0 + c.mapped_bytes();
        let r = alloc::rss_bytes().saturating_sub(rss0);
        let held = (0..items)
            .filter(|&i| {
                mem_key(i, &mut key);
                c.get(&key, 0)
            })
            .count() as u64;
        // The neighbourhood hash table may drop the odd key from a full
        // window even at low load; 99.9% held is "all of them" here (and
        // the table reports the count actually held).
        if held as f64 >= 0.999 * items as f64 || heap_per_item > 1024.0 {
            return Ok((held, a, r));
        }
        drop(c);
        heap_per_item *= 1.05;
    }
}

#[cfg(not(feature = "segcache-adapter"))]
fn segcache_memory(_items: u64) -> Result<(u64, usize, usize), String> {
    Err("built without the segcache-adapter feature".into())
}

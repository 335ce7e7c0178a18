//! `segcache-bench` CLI: a first look at segcache on a Twitter-like
//! workload (`demo`), miss ratio on the CloudPhysics trace (`trace`) and on
//! synthetic Twitter cluster workloads (`twitter`) at equal real memory,
//! per-item memory overhead (`memory` from the allocator's side,
//! `full-heap` from the cache's own accounting) and single-thread
//! operation throughput against peer caches (`throughput`), and the miss
//! ratio of a running memcache server (`server-replay`).
//!
//! Owns the process's counting `#[global_allocator]`, the command line and
//! the dispatch to a runner per subcommand (`run/`, which prints the
//! markdown tables); the machinery lives in the library modules.

mod run;

use clap::{Args, Parser, Subcommand};
use run::hit::{run_server_replay, run_trace, run_twitter, TraceSource, Ttls};
use run::memory::{measure_one, run_full_heap, run_memory};
use run::run_demo;
use run::speed::{run_concurrent, run_opcount, run_throughput};
use segcache_bench::alloc::CountingAlloc;
use segcache_bench::sim::{self, Kind};
use segcache_bench::{blocks, demo, trace, twitter};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

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
        /// Write every key without a TTL (the same keys, sizes and
        /// operations): overwrites then never wait for an expiry.
        #[arg(long, conflicts_with = "ttl_spans")]
        no_ttl: bool,
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
        } => run_concurrent(keys, ops, &threads, &batches, rounds, &only),
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
            no_ttl,
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
            match (ttl_spans, no_ttl) {
                (Some(spans), _) => Ttls::Spans(spans),
                (None, true) => Ttls::Never,
                (None, false) => Ttls::AsWritten,
            },
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

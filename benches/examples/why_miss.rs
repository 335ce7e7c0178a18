//! Diagnosis of segcache's misses on one Twitter-like cluster against
//! quick_cache at the same real-memory budget (as `segcache-bench twitter`
//! sizes them): both replay the same stream in lock step, and every read
//! that segcache misses while quick_cache hits is classified.
//!
//! ```text
//! cargo run --release -p segcache-bench --example why_miss -- 7 [ttl_spans]
//! ```

use quick_cache::Weighter;
use segcache_bench::alloc::{self, CountingAlloc};
use segcache_bench::sim::{self, Kind, SegcacheSim, SimCache, Typical};
use segcache_bench::{demo, twitter};
use std::collections::{HashMap, HashSet};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[derive(Clone)]
struct W(usize);
impl Weighter<Box<[u8]>, (u32, u64)> for W {
    fn weight(&self, k: &Box<[u8]>, v: &(u32, u64)) -> u64 {
        (k.len() + v.0 as usize + self.0) as u64
    }
}

#[derive(Default, Clone, Copy)]
struct KeyState {
    set_at: u64,
    ttl: u32,
    /// segcache hits since the last set (or fill).
    hits_since_set: u32,
    /// reads (any) since the last set.
    reads_since_set: u32,
}

const USAGE: &str = "usage: why_miss [CLUSTER (default 7)] [TTL_SPANS]\n\
    Replays a Twitter-like cluster through segcache and quick_cache in lock step\n\
    at one real-memory budget and classifies every read segcache misses while\n\
    quick_cache hits. TTL_SPANS: make the stream span that many times its most\n\
    common TTL (as `segcache-bench twitter --ttl-spans`); default: real rate.";

/// Parses `[CLUSTER] [TTL_SPANS]`; `Err` carries what to print and the
/// exit code (`--help` is not an error).
fn parse_args(args: &[String]) -> Result<(u32, Option<f64>), (String, i32)> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Err((USAGE.to_string(), 0));
    }
    if args.len() > 2 {
        return Err((format!("too many arguments\n{USAGE}"), 2));
    }
    let cluster = match args.first() {
        None => 7,
        Some(s) => s.parse().map_err(|_| {
            (
                format!("CLUSTER must be a cluster number, got {s:?}\n{USAGE}"),
                2,
            )
        })?,
    };
    let spans = match args.get(1) {
        None => None,
        Some(s) => match s.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Some(x),
            _ => {
                return Err((
                    format!("TTL_SPANS must be a positive number, got {s:?}\n{USAGE}"),
                    2,
                ))
            }
        },
    };
    Ok((cluster, spans))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cluster, spans) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err((text, code)) => {
            if code == 0 {
                println!("{text}");
            } else {
                eprintln!("why_miss: {text}");
            }
            std::process::exit(code);
        }
    };
    let stats = match twitter::load_cluster(cluster) {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!("why_miss: cluster {cluster}: {e}");
            std::process::exit(1);
        }
    };
    let mut cfg = twitter::WorkloadConfig::default();
    if let Some(s) = spans {
        cfg.time_scale = demo::auto_time_scale(&stats, cfg.requests) * s / 2.0;
    }
    let w = twitter::Workload::new(stats.clone(), cfg).unwrap();
    let key_space = w.key_space();
    let mut rank_of = HashMap::new();
    for r in 1..=key_space {
        rank_of.insert(twitter::Workload::rank_to_id(r), r);
    }
    let mut seen = HashSet::new();
    let mut unique = 0u64;
    let mut sizes = Vec::new();
    for r in w.clone() {
        if seen.insert(r.key_id) {
            unique += (r.key_len + r.value_len) as u64;
            sizes.push(r.key_len + r.value_len);
        }
    }
    sizes.sort_unstable();
    let budget = ((unique / 4) as usize).max(2 << 20);
    let typ = Typical {
        key_len: stats.key_size.unwrap().round() as usize,
        value_len: stats.value_size.unwrap().round().max(1.0) as usize,
    };
    let seg_size = sim::segment_size_for(budget, sim::SEGMENT_SIZE, typ, None);
    println!(
        "cluster {cluster}: budget {budget} B, key space {key_space}, unique keys {}, item size p10/p50/p90 {}/{}/{}, segment {seg_size} B",
        seen.len(),
        sizes[sizes.len() / 10],
        sizes[sizes.len() / 2],
        sizes[sizes.len() * 9 / 10]
    );
    let sizing = sim::calibrate(Kind::QuickCache, budget, typ);
    println!(
        "quick_cache: per-item overhead {} B, weight capacity {}",
        sizing.per_item, sizing.capacity
    );
    let mut qc = quick_cache::unsync::Cache::with_weighter(
        (sizing.capacity / (typ.key_len + typ.value_len + sizing.per_item) as u64) as usize,
        sizing.capacity,
        W(sizing.per_item),
    );
    let mut seg = SegcacheSim::for_budget(budget, seg_size, typ).unwrap();
    let s0 = seg.inner().stats();
    println!(
        "segcache: heap {} ({:.3} of budget), table {}, headers {}, admission {}",
        s0.heap_bytes,
        s0.heap_bytes as f64 / budget as f64,
        s0.hash_table_bytes,
        s0.segment_header_bytes,
        s0.admission_bytes
    );
    let mut keys: HashMap<u64, KeyState> = HashMap::new();
    let (mut reads, mut seg_miss, mut qc_miss) = (0u64, 0u64, 0u64);
    let mut only_seg = [0u64; 4]; // unread since set / read-proven / expired-window / first ever
    let mut only_qc = 0u64;
    let mut by_rank_seg = [0u64; 8];
    let mut by_rank_qc = [0u64; 8];
    let mut reads_by_rank = [0u64; 8];
    let rank_bin = |r: Option<&u64>| match r {
        None => 7,
        Some(&r) => ((64 - r.leading_zeros()) as usize / 2).min(6),
    };
    let mut key = Vec::new();
    let mut samples = Vec::new();
    let total = 2_000_000u64;
    for (i, r) in w.enumerate() {
        r.write_key(&mut key);
        let now = r.now_secs();
        let ttl = r.ttl_secs;
        match r.op.action() {
            twitter::Action::Read => {
                reads += 1;
                let bin = rank_bin(rank_of.get(&r.key_id));
                reads_by_rank[bin] += 1;
                let s_hit = seg.get(&key, now);
                let q_hit = match qc.get(key.as_slice()) {
                    Some(&(_, exp)) if exp > now => true,
                    Some(_) => {
                        qc.remove(key.as_slice());
                        false
                    }
                    None => false,
                };
                let st = keys.entry(r.key_id).or_default();
                let first = st.set_at == 0 && st.ttl == 0;
                st.reads_since_set += 1;
                if s_hit {
                    st.hits_since_set += 1;
                }
                if !s_hit {
                    seg_miss += 1;
                    by_rank_seg[bin] += 1;
                }
                if !q_hit {
                    qc_miss += 1;
                    by_rank_qc[bin] += 1;
                }
                if !s_hit && q_hit {
                    let early_window = (ttl / 16).max(1) as u64;
                    let class = if first {
                        3
                    } else if st.ttl > 0 && now + early_window >= st.set_at + st.ttl as u64 {
                        2
                    } else if st.hits_since_set == 0 {
                        0
                    } else {
                        1
                    };
                    only_seg[class] += 1;
                }
                if s_hit && !q_hit {
                    only_qc += 1;
                }
                if !s_hit || !q_hit {
                    if !s_hit {
                        seg.set(&key, r.value_len as usize, Some(ttl), now);
                    }
                    if !q_hit {
                        qc.insert(key.clone().into(), (r.value_len, now + ttl as u64));
                    }
                    if !s_hit {
                        *st = KeyState {
                            set_at: now,
                            ttl,
                            ..Default::default()
                        };
                    }
                }
            }
            twitter::Action::Write => {
                seg.set(&key, r.value_len as usize, Some(ttl), now);
                qc.insert(key.clone().into(), (r.value_len, now + ttl as u64));
                keys.insert(
                    r.key_id,
                    KeyState {
                        set_at: now,
                        ttl,
                        ..Default::default()
                    },
                );
            }
            twitter::Action::Delete => {
                seg.delete(&key);
                qc.remove(key.as_slice());
            }
        }
        if (i as u64 + 1) % (total / 8) == 0 {
            let s = seg.inner().stats();
            samples.push((
                i + 1,
                s.items,
                s.live_bytes,
                s.segments_used,
                s.heap_bytes,
                qc.len(),
                qc.weight(),
                s.evictions,
                s.expirations,
                s.merges,
            ));
        }
    }
    println!(
        "reads {reads}: segcache misses {seg_miss} ({:.4}), quick_cache {qc_miss} ({:.4})",
        seg_miss as f64 / reads as f64,
        qc_miss as f64 / reads as f64
    );
    println!(
        "segcache misses where quick_cache hit: {} = unread since its last set {} + read (hit) since set {} + in the early-expiry window {} + never seen (n/a) {}; quick_cache misses where segcache hit: {only_qc}",
        only_seg.iter().sum::<u64>(),
        only_seg[0],
        only_seg[1],
        only_seg[2],
        only_seg[3]
    );
    println!("\n| rank bin | reads | segcache miss | quick_cache miss |");
    println!("|---|---|---|---|");
    for b in 0..8 {
        let label = if b == 7 {
            "one-hit".to_string()
        } else {
            format!("< 4^{}", b + 1)
        };
        if reads_by_rank[b] > 0 {
            println!(
                "| {label} | {} | {:.4} | {:.4} |",
                reads_by_rank[b],
                by_rank_seg[b] as f64 / reads_by_rank[b] as f64,
                by_rank_qc[b] as f64 / reads_by_rank[b] as f64
            );
        }
    }
    println!("\n| request | seg items | seg live B / heap | seg segs used | qc items | qc weight / cap | seg evictions | expirations | merges |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, items, live, used, heap, qi, qw, ev, ex, m) in samples {
        println!(
            "| {i} | {items} | {:.3} | {used} | {qi} | {:.3} | {ev} | {ex} | {m} |",
            live as f64 / heap as f64,
            qw as f64 / sizing.capacity as f64
        );
    }
    let s = seg.inner().stats();
    println!(
        "end: segcache total {} ({:.3} of budget); bytes per item held: segcache {:.1} (budget/items), quick_cache {:.1}",
        s.total_bytes,
        s.total_bytes as f64 / budget as f64,
        budget as f64 / s.items as f64,
        budget as f64 / qc.len() as f64
    );
    let _ = alloc::live_bytes();
}

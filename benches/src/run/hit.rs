//! Runners of the miss-ratio subcommands (`trace`, `twitter`,
//! `server-replay`): every cache of the run replays the same requests at
//! equal real memory, and one table row per budget or cluster is printed,
//! each cell with its ratio to segcache's.

use super::MIB;
use segcache_bench::alloc;
use segcache_bench::sim::{self, Kind, ObjLru, ReplayStats, SimCache, Typical};
use segcache_bench::{blocks, demo, trace, twitter, wire};

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

/// segcache's miss ratio among a row's results (the baseline of the
/// row's ratios), if it ran and replayed.
fn segcache_miss_ratio(results: &[Result<ReplayStats, String>], kinds: &[Kind]) -> Option<f64> {
    results
        .iter()
        .zip(kinds)
        .find(|(_, k)| **k == Kind::Segcache)
        .and_then(|(r, _)| r.as_ref().ok())
        .map(|s| s.miss_ratio())
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
pub enum TraceSource {
    File(std::path::PathBuf),
    Synthetic(blocks::Shape),
}

/// `trace`: one row per budget, the object-LRU reference first, then
/// the real-allocation table.
pub fn run_trace(
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
        let seg = segcache_miss_ratio(&results, kinds);
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

/// `server-replay`: one Twitter-like stream sent to a running memcache
/// server (or, with no address, the stream's unique bytes).
pub fn run_server_replay(
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

/// The TTLs a `twitter` run writes its keys with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ttls {
    /// The cluster's TTL mix, on the run's time scale.
    AsWritten,
    /// The cluster's TTL mix, each stream's time compressed to span this
    /// many of its most common TTL.
    Spans(f64),
    /// None: every key is written without a TTL.
    Never,
}

impl Ttls {
    /// A cluster's statistics and the workload settings for this mode.
    fn apply(
        self,
        stats: &twitter::ClusterStats,
        cfg: &twitter::WorkloadConfig,
    ) -> (twitter::ClusterStats, twitter::WorkloadConfig) {
        let (mut stats, mut cfg) = (stats.clone(), cfg.clone());
        match self {
            Ttls::AsWritten => {}
            Ttls::Spans(spans) => {
                cfg.time_scale = demo::auto_time_scale(&stats, cfg.requests) * spans / 2.0;
            }
            Ttls::Never => stats.ttl_mix = vec![(0, 1.0)],
        }
        (stats, cfg)
    }
}

/// `twitter`: one row per cluster, its budget a quarter of its unique
/// bytes unless given, then the real-allocation table.
pub fn run_twitter(
    clusters: &[u32],
    cfg: twitter::WorkloadConfig,
    ttls: Ttls,
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
            .ok_or(format!("no cluster{id}"))?;
        let (stats, cfg) = ttls.apply(stats, &cfg);
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
        let seg = segcache_miss_ratio(&results, kinds);
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
        match ttls {
            Ttls::Spans(n) => format!("each stream spanning {n}x its cluster's most common TTL"),
            Ttls::Never => format!(
                "time scale {}, every key written without a TTL",
                cfg.time_scale
            ),
            Ttls::AsWritten => format!("time scale {}", cfg.time_scale),
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
    if s == 0 {
        "none".to_string()
    } else if s % 86400 == 0 {
        format!("{}d", s / 86400)
    } else if s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--no-ttl` keeps a stream's keys, sizes and operations and drops
    /// only its TTLs; `--ttl-spans` keeps the TTLs and stretches time.
    #[test]
    fn ttl_modes_change_only_ttls_or_time() {
        let stats = twitter::load_cluster(7).unwrap();
        let cfg = twitter::WorkloadConfig {
            requests: 5_000,
            ..Default::default()
        };
        let stream = |ttls: Ttls| {
            let (s, c) = ttls.apply(&stats, &cfg);
            let w = twitter::Workload::new(s, c).unwrap();
            let secs = w.duration_secs();
            (w.collect::<Vec<_>>(), secs)
        };
        let (written, secs) = stream(Ttls::AsWritten);
        let (never, never_secs) = stream(Ttls::Never);
        let (spans, spans_secs) = stream(Ttls::Spans(2.0));
        assert!(written.iter().all(|r| r.ttl_secs > 0));
        assert!(never.iter().all(|r| r.ttl_secs == 0));
        assert_eq!(never_secs, secs);
        assert!(spans_secs > 100.0 * secs, "{spans_secs} against {secs}");
        for ((a, b), c) in written.iter().zip(&never).zip(&spans) {
            assert_eq!((a.key_id, a.value_len, a.op), (b.key_id, b.value_len, b.op));
            assert_eq!((a.key_id, a.ttl_secs), (c.key_id, c.ttl_secs));
        }
    }
}

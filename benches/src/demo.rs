//! The `demo` subcommand's logic: one default-configured [`Segcache`]
//! serving one Twitter-like cluster as a look-aside cache.
//!
//! The stream comes from [`crate::twitter::Workload`]. It is generated
//! before the clock starts (so the timed loop is cache work plus key
//! formatting, not RNG), then replayed on a [`ManualClock`] set to each
//! request's simulated second, so TTLs really expire. Reads that miss are
//! followed by a set of the key (look-aside fill); writes set; deletes
//! delete. Every value starts with the 8-byte key id, so a hit that returns
//! another key's bytes, or the wrong length, is counted as corrupt.
//!
//! After the replay, expired segments are reclaimed ([`Segcache::expire`])
//! and every distinct key is looked up with [`Segcache::peek`] to count what
//! the cache really holds and the exact key+value bytes of those items.

use crate::twitter::{Action, ClusterStats, Request, Workload, WorkloadConfig};
use segcache::{ManualClock, Segcache};
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// Demo parameters.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    pub requests: u64,
    pub seed: u64,
    /// Simulated seconds per real second of the cluster's rate; `None`
    /// picks [`auto_time_scale`].
    pub time_scale: Option<f64>,
    /// Heap bytes (the builder's default is 64 MiB).
    pub heap_size: Option<usize>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            requests: 2_000_000,
            seed: 42,
            time_scale: None,
            heap_size: None,
        }
    }
}

/// Time compression that makes the stream span twice the cluster's most
/// common TTL, so the bulk of the items outlive their TTL at least once
/// during the run (at the real request rate 2 M requests last only a minute
/// or two of simulated time and no TTL of the default clusters expires).
pub fn auto_time_scale(stats: &ClusterStats, requests: u64) -> f64 {
    let ttl = stats
        .ttl_mix
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(3600, |t| t.0) as f64;
    let real_secs = requests as f64 / (stats.kqps.unwrap_or(1.0) * 1000.0);
    (2.0 * ttl / real_secs).max(1.0)
}

/// What the demo measured.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    pub cluster: u32,
    pub requests: u64,
    pub time_scale: f64,
    pub simulated_secs: u64,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub sets: u64,
    /// Sets the cache refused (e.g. a value larger than a segment).
    pub set_errors: u64,
    pub deletes: u64,
    /// Hits whose value was not the key's (must be 0).
    pub corrupt_hits: u64,
    /// Distinct keys in the stream.
    pub distinct_keys: u64,
    /// Distinct keys a lookup finds at the end.
    pub keys_found: u64,
    /// Key+value bytes of the keys found.
    pub payload_bytes: u64,
    pub stats: segcache::Stats,
    /// Wall time of the request loop only.
    pub elapsed: Duration,
}

impl DemoReport {
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.gets.max(1) as f64
    }

    /// All memory the cache allocated, per item held.
    pub fn bytes_per_item(&self) -> f64 {
        self.stats.total_bytes as f64 / self.stats.items.max(1) as f64
    }

    /// Mean key+value bytes of the items held.
    pub fn payload_per_item(&self) -> f64 {
        self.payload_bytes as f64 / self.keys_found.max(1) as f64
    }

    /// Bytes per item beyond key+value, all-in (heap slack included).
    pub fn overhead_per_item(&self) -> f64 {
        self.bytes_per_item() - self.payload_per_item()
    }

    /// Bytes per item beyond key+value counting only what the items use:
    /// their segment bytes plus the hash table and headers, spread evenly.
    pub fn live_overhead_per_item(&self) -> f64 {
        let s = &self.stats;
        let fixed = s.hash_table_bytes + s.segment_header_bytes;
        (s.live_bytes + fixed) as f64 / s.items.max(1) as f64 - self.payload_per_item()
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        writeln!(
            f,
            "segcache demo: Twitter-like cluster {} as a look-aside cache",
            self.cluster
        )?;
        writeln!(
            f,
            "  heap {:.0} MiB + hash table {:.1} MiB + segment headers {:.2} MiB = {:.1} MiB",
            mib(s.heap_bytes),
            mib(s.hash_table_bytes),
            mib(s.segment_header_bytes),
            mib(s.total_bytes)
        )?;
        writeln!(
            f,
            "  requests      {} ({} gets, {} sets, {} deletes) over {} simulated s (time scale {:.0})",
            self.requests, self.gets, self.sets, self.deletes, self.simulated_secs, self.time_scale
        )?;
        writeln!(
            f,
            "  hit ratio     {:.4} ({} hits, {} misses)",
            self.hit_ratio(),
            self.hits,
            self.misses
        )?;
        writeln!(
            f,
            "  items held    {} of {} distinct keys; live bytes {:.1} MiB ({:.0}% of heap)",
            s.items,
            self.distinct_keys,
            mib(s.live_bytes),
            100.0 * s.live_bytes as f64 / s.heap_bytes.max(1) as f64
        )?;
        let seg_bytes = s.heap_bytes / (s.segments_used + s.segments_free).max(1);
        writeln!(
            f,
            "  segments      {} of {} in use, live data fills {:.0}% of the used ones",
            s.segments_used,
            s.segments_used + s.segments_free,
            100.0 * s.live_bytes as f64 / (s.segments_used * seg_bytes).max(1) as f64
        )?;
        writeln!(
            f,
            "  bytes/item    {:.1} all-in (total_bytes / items); key+value {:.1}; overhead {:.1} B/item ({:.1} counting live bytes only)",
            self.bytes_per_item(),
            self.payload_per_item(),
            self.overhead_per_item(),
            self.live_overhead_per_item()
        )?;
        writeln!(
            f,
            "  evictions     {} items ({} segments), {} merges",
            s.evictions, s.evicted_segments, s.merges
        )?;
        writeln!(
            f,
            "  expirations   {} items ({} segments)",
            s.expirations, s.expired_segments
        )?;
        if self.set_errors > 0 || self.corrupt_hits > 0 {
            writeln!(
                f,
                "  errors        {} refused sets, {} corrupt hits",
                self.set_errors, self.corrupt_hits
            )?;
        }
        write!(
            f,
            "  elapsed       {:.2} s, {:.2} M requests/s (single thread, stream pre-generated)",
            self.elapsed.as_secs_f64(),
            self.ops_per_sec() / 1e6
        )
    }
}

/// Builds the value for a key: its 8-byte id, then filler, `len` bytes.
fn fill_value(buf: &mut Vec<u8>, key_id: u64, len: usize) {
    buf.clear();
    buf.extend_from_slice(&key_id.to_le_bytes());
    buf.resize(len.max(8), b'v');
}

/// Runs the demo for one cluster.
pub fn run(stats: ClusterStats, cfg: &DemoConfig) -> Result<DemoReport, String> {
    let cluster = stats.cluster;
    let time_scale = cfg
        .time_scale
        .unwrap_or_else(|| auto_time_scale(&stats, cfg.requests));
    let workload = Workload::new(
        stats,
        WorkloadConfig {
            requests: cfg.requests,
            seed: cfg.seed,
            time_scale,
        },
    )?;
    let reqs: Vec<Request> = workload.collect();

    let clock = ManualClock::new();
    let mut builder = Segcache::builder().clock(clock.clone());
    if let Some(h) = cfg.heap_size {
        builder = builder.heap_size(h);
    }
    let mut cache = builder.build().map_err(|e| e.to_string())?;

    let (mut gets, mut hits, mut misses, mut sets, mut set_errors, mut deletes, mut corrupt) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut key = Vec::with_capacity(256);
    let mut value = Vec::with_capacity(4096);
    let start = Instant::now();
    for r in &reqs {
        clock.set(r.now_secs().min(u32::MAX as u64) as u32);
        r.write_key(&mut key);
        let ttl = (r.ttl_secs > 0).then(|| Duration::from_secs(r.ttl_secs as u64));
        let mut store = false;
        match r.op.action() {
            Action::Read => {
                gets += 1;
                match cache.get(&key) {
                    Some(item) => {
                        hits += 1;
                        let v = item.value();
                        let want = (r.value_len as usize).max(8);
                        if v.len() != want || v[..8] != r.key_id.to_le_bytes() {
                            corrupt += 1;
                        }
                    }
                    None => {
                        misses += 1;
                        store = true;
                    }
                }
            }
            Action::Write => store = true,
            Action::Delete => {
                deletes += 1;
                cache.delete(&key);
            }
        }
        if store {
            sets += 1;
            fill_value(&mut value, r.key_id, r.value_len as usize);
            if cache.set(&key, &value, 0, ttl).is_err() {
                set_errors += 1;
            }
        }
    }
    let elapsed = start.elapsed();

    // Reclaim what expired, then see what the cache really holds.
    cache.expire();
    let mut distinct: HashMap<u64, (u32, u32)> = HashMap::new();
    for r in &reqs {
        distinct.insert(r.key_id, (r.key_len, r.value_len));
    }
    let (mut found, mut payload) = (0u64, 0u64);
    for (&id, &(key_len, value_len)) in &distinct {
        let r = Request {
            time_us: 0,
            op: crate::twitter::Op::Get,
            key_id: id,
            key_len,
            value_len,
            ttl_secs: 0,
        };
        r.write_key(&mut key);
        if let Some(item) = cache.peek(&key) {
            found += 1;
            payload += (item.key().len() + item.value().len()) as u64;
        }
    }
    Ok(DemoReport {
        cluster,
        requests: reqs.len() as u64,
        time_scale,
        simulated_secs: reqs.last().map_or(0, |r| r.now_secs()),
        gets,
        hits,
        misses,
        sets,
        set_errors,
        deletes,
        corrupt_hits: corrupt,
        distinct_keys: distinct.len() as u64,
        keys_found: found,
        payload_bytes: payload,
        stats: cache.stats(),
        elapsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::twitter::load_cluster;

    #[test]
    fn demo_numbers_are_consistent() {
        let stats = load_cluster(52).unwrap();
        let cfg = DemoConfig {
            requests: 60_000,
            ..Default::default()
        };
        let r = run(stats.clone(), &cfg).unwrap();
        let s = &r.stats;
        assert_eq!(r.requests, 60_000);
        assert_eq!(r.hits + r.misses, r.gets);
        // The cache's own counters agree with the loop's (peek counts
        // nothing).
        assert_eq!((s.hits, s.misses), (r.hits, r.misses));
        assert_eq!(r.corrupt_hits, 0);
        assert_eq!(r.set_errors, 0);
        // Cluster 52: ~95% reads, Zipf 1.21, so most gets hit.
        assert!(r.gets > 50_000 && r.hit_ratio() > 0.5, "{r}");
        // Everything the table points at is findable after expire().
        assert_eq!(s.items, r.keys_found);
        assert!(r.keys_found <= r.distinct_keys);
        // The stream spans twice the commonest TTL (1 day): items expired.
        assert!(r.simulated_secs > 2 * 86_400 - 10, "{}", r.simulated_secs);
        assert!(s.expirations > 0 && s.expired_segments > 0, "{s:?}");
        // Live bytes are the items' keys + values + headers (5 B, plus
        // alignment padding if the layout has any).
        assert!(s.live_bytes >= r.payload_bytes + 5 * s.items);
        assert!(s.live_bytes <= r.payload_bytes + 13 * s.items);
        assert!(s.total_bytes >= s.heap_bytes + s.hash_table_bytes);
        assert!(r.overhead_per_item() > 0.0);
        // The report prints the key numbers.
        let text = r.to_string();
        assert!(text.contains("cluster 52") && text.contains("hit ratio"));
    }

    #[test]
    fn a_small_heap_evicts_by_merging() {
        let stats = load_cluster(52).unwrap();
        // At the cluster's real rate: segments of one TTL bucket are close
        // in time, so their deadlines allow merging (`ttl::spread`).
        let cfg = DemoConfig {
            requests: 400_000,
            heap_size: Some(2 << 20),
            time_scale: Some(1.0),
            ..Default::default()
        };
        let r = run(stats, &cfg).unwrap();
        let s = &r.stats;
        assert!(s.evictions > 0 && s.merges > 0, "{s:?}");
        assert_eq!(r.corrupt_hits, 0);
        assert_eq!(s.items, r.keys_found);
        assert!(s.live_bytes <= s.heap_bytes);
    }

    #[test]
    fn auto_time_scale_spans_two_common_ttls() {
        let stats = load_cluster(52).unwrap();
        let ts = auto_time_scale(&stats, 2_000_000);
        let w = Workload::new(
            stats,
            WorkloadConfig {
                requests: 2_000_000,
                seed: 1,
                time_scale: ts,
            },
        )
        .unwrap();
        assert!((w.duration_secs() - 2.0 * 86_400.0).abs() < 1.0);
    }
}

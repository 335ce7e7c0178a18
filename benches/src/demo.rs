//! The `demo` subcommand's logic: a default-configured [`Segcache`] serving
//! one Twitter-like cluster as a look-aside cache, and one peer cache given
//! the same memory and the same requests, so the report can say in plain
//! words what the cache did and how that compares.
//!
//! The stream comes from [`crate::twitter::Workload`]. It is generated
//! before the clock starts (so the timed loop is cache work plus key
//! formatting, not RNG), then replayed on a [`ManualClock`] set to each
//! request's simulated second, so TTLs really expire. Reads that miss are
//! followed by a set of the key (a look-aside refill); writes set; deletes
//! delete. Every value starts with the 8-byte key id, so a hit that returns
//! another key's bytes, or the wrong length, is counted as corrupt.
//!
//! Each read miss is classified from the replay's own record of what was
//! stored: the key was never stored (a first request, or deleted), its TTL
//! had passed, or it was gone before its TTL (evicted, or expired a little
//! early: segcache may expire an item before its deadline, never after).
//!
//! After the replay, expired segments are reclaimed ([`Segcache::expire`])
//! and every distinct key is looked up with [`Segcache::peek`] to count what
//! the cache really holds and the exact key+value bytes of those items.
//! The peer ([`crate::sim`]'s quick_cache adapter) is calibrated with the
//! counting allocator to the same total bytes as segcache's heap, hash
//! table and segment headers, and replays the same requests.

use crate::alloc;
use crate::fullheap;
use crate::sim::{self, Kind, SimCache, Typical};
use crate::twitter::{Action, ClusterStats, Op, Request, Workload, WorkloadConfig};
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
    /// Replay the same requests against this peer at equal memory.
    pub peer: Option<Kind>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            requests: 2_000_000,
            seed: 42,
            time_scale: None,
            heap_size: None,
            peer: Some(Kind::QuickCache),
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

/// Why a read missed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Misses {
    /// The key had never been stored (its first request), or was deleted.
    pub never_stored: u64,
    /// The key's TTL had passed.
    pub expired: u64,
    /// The key was stored, unexpired, yet gone: evicted to make room, or
    /// expired a little before its deadline.
    pub gone_early: u64,
}

impl Misses {
    pub fn total(&self) -> u64 {
        self.never_stored + self.expired + self.gone_early
    }
}

/// The peer's run on the same requests with the same memory.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerReport {
    pub name: String,
    pub reads: u64,
    pub misses: u64,
    /// The bytes it was calibrated to (segcache's total).
    pub budget_bytes: u64,
    /// Its real allocated bytes at the end of the replay.
    pub end_bytes: u64,
}

impl PeerReport {
    pub fn hit_ratio(&self) -> f64 {
        1.0 - self.misses as f64 / self.reads.max(1) as f64
    }
}

/// What the demo measured.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    pub cluster: u32,
    pub requests: u64,
    pub time_scale: f64,
    pub simulated_secs: u64,
    /// The cluster's TTL mix as listed: `(seconds, fraction)`.
    pub ttl_mix: Vec<(u32, f64)>,
    /// Read requests (get/gets).
    pub gets: u64,
    pub hits: u64,
    pub misses: Misses,
    /// Write requests (set/add/cas/... all store the key).
    pub writes: u64,
    /// Sets the replay made after read misses (look-aside refills).
    pub refills: u64,
    /// Stores the cache refused (e.g. a value larger than a segment).
    pub set_errors: u64,
    pub deletes: u64,
    /// Hits whose value was not the key's (must be 0).
    pub corrupt_hits: u64,
    /// Distinct keys in the stream.
    pub distinct_keys: u64,
    /// Mean key+value bytes over the distinct keys of the stream.
    pub mean_payload: f64,
    /// Distinct keys a lookup finds at the end.
    pub keys_found: u64,
    /// Key+value bytes of the keys found.
    pub payload_bytes: u64,
    pub stats: segcache::Stats,
    /// A cache built the same way, filled past full with items of the held
    /// items' mean key+value size ([`FULL_OVERFILL`] times what its heap
    /// holds, `fullheap::fill`): the stats of that full heap, its table
    /// grown for the items.
    pub full: segcache::Stats,
    /// Wall time of the request loop only.
    pub elapsed: Duration,
    pub peer: Option<PeerReport>,
}

impl DemoReport {
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.gets.max(1) as f64
    }

    /// Mean key+value bytes of the items held.
    pub fn payload_per_item(&self) -> f64 {
        self.payload_bytes as f64 / self.keys_found.max(1) as f64
    }

    /// Heap bytes per item beyond its key and value: the item header and
    /// alignment padding.
    pub fn heap_overhead_per_item(&self) -> f64 {
        self.stats.live_bytes.saturating_sub(self.payload_bytes) as f64
            / self.stats.items.max(1) as f64
    }

    /// How many items of the held items' mean size a full heap stores
    /// (measured: [`DemoReport::full`]).
    pub fn full_heap_items(&self) -> u64 {
        self.full.items
    }

    /// All the cache's memory divided by [`Self::full_heap_items`]: what
    /// one cached item costs once the heap is full.
    pub fn full_heap_bytes_per_item(&self) -> f64 {
        self.full.total_bytes as f64 / self.full.items.max(1) as f64
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A TTL in the largest whole unit: `1d`, `12h`, `30m`, `45s`.
fn ttl_text(secs: u32) -> String {
    match secs {
        0 => "none".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let hours = self.simulated_secs as f64 / 3600.0;
        let ttls: Vec<String> = self
            .ttl_mix
            .iter()
            .map(|&(t, frac)| format!("{} {:.0}%", ttl_text(t), 100.0 * frac))
            .collect();
        writeln!(
            f,
            "segcache demo: {} requests shaped like Twitter's cluster {}, replayed as a look-aside cache",
            thousands(self.requests),
            self.cluster
        )?;
        writeln!(
            f,
            "  workload  {} distinct keys, key+value {:.0} B on average; TTLs {}",
            thousands(self.distinct_keys),
            self.mean_payload,
            ttls.join(", ")
        )?;
        writeln!(
            f,
            "            {hours:.0} h of the cluster's traffic, simulated {:.0}x faster than real time so that TTLs expire",
            self.time_scale
        )?;
        writeln!(
            f,
            "  cache     Segcache::builder().build(): {:.0} MiB heap for items + {:.1} MiB hash table and eviction state = {:.1} MiB in all",
            mib(s.heap_bytes),
            mib(s.hash_table_bytes + s.segment_header_bytes + s.admission_bytes),
            mib(s.total_bytes)
        )?;
        writeln!(
            f,
            "  reads     {}: {:.2}% hits. Misses: {} {}, {} after the TTL passed, {} {}",
            thousands(self.gets),
            100.0 * self.hit_ratio(),
            thousands(self.misses.never_stored),
            if self.deletes > 0 {
                "first requests or deleted"
            } else {
                "first requests"
            },
            thousands(self.misses.expired),
            thousands(self.misses.gone_early),
            if s.evictions == 0 {
                // Nothing was evicted: those items expired with their
                // segment, which may end a little before an item's TTL.
                "expired early with their segment"
            } else {
                "evicted (or expired early with their segment)"
            }
        )?;
        writeln!(
            f,
            "  writes    {} stores + {} refills after misses, {} deletes; {} items evicted to make room",
            thousands(self.writes),
            thousands(self.refills),
            thousands(self.deletes),
            thousands(s.evictions)
        )?;
        writeln!(
            f,
            "  held      {} items at the end ({} expired on the way), {:.1} MiB of the {:.0} MiB heap ({:.0}% full)",
            thousands(s.items),
            thousands(s.expirations),
            mib(s.live_bytes),
            mib(s.heap_bytes),
            pct(s.live_bytes, s.heap_bytes)
        )?;
        writeln!(
            f,
            "  per item  {:.0} B key+value + {:.1} B header in the heap; a full heap holds ~{} such items: {:.0} B of memory each, all in",
            self.payload_per_item(),
            self.heap_overhead_per_item(),
            thousands(self.full_heap_items()),
            self.full_heap_bytes_per_item()
        )?;
        if let Some(p) = &self.peer {
            writeln!(
                f,
                "  vs peer   {} capped at the same {:.1} MiB, same requests: {:.2}% hits (segcache {:.2}%); it used {:.1} MiB (it allocates as it fills, segcache up front)",
                p.name,
                mib(p.budget_bytes),
                100.0 * p.hit_ratio(),
                100.0 * self.hit_ratio(),
                mib(p.end_bytes)
            )?;
        }
        if self.set_errors > 0 || self.corrupt_hits > 0 {
            writeln!(
                f,
                "  ERRORS    {} refused stores, {} hits with the wrong value",
                self.set_errors, self.corrupt_hits
            )?;
        }
        write!(
            f,
            "  speed     {:.2} s for the {} requests on one thread ({:.1} M requests/s)",
            self.elapsed.as_secs_f64(),
            thousands(self.requests),
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

/// When a store made at `now` with `ttl_secs` stops being valid.
fn deadline(now: u64, ttl_secs: u32) -> u64 {
    if ttl_secs == 0 {
        u64::MAX
    } else {
        now + ttl_secs as u64
    }
}

/// Replays `reqs` against a peer (look-aside, as for segcache).
fn replay_peer(cache: &mut dyn SimCache, reqs: &[Request]) -> (u64, u64) {
    let (mut reads, mut misses) = (0, 0);
    let mut key = Vec::with_capacity(256);
    for r in reqs {
        r.write_key(&mut key);
        let now = r.now_secs();
        let ttl = Some(r.ttl_secs);
        match r.op.action() {
            Action::Read => {
                reads += 1;
                if !cache.get(&key, now) {
                    misses += 1;
                    cache.set(&key, r.value_len as usize, ttl, now);
                }
            }
            Action::Write => cache.set(&key, r.value_len as usize, ttl, now),
            Action::Delete => cache.delete(&key),
        }
    }
    cache.settle();
    (reads, misses)
}

/// How far past full [`DemoReport::full`]'s cache is written, as the
/// `full-heap` subcommand does by default: eviction has run for a while.
pub const FULL_OVERFILL: f64 = 3.0;

/// Runs the demo for one cluster.
pub fn run(stats: ClusterStats, cfg: &DemoConfig) -> Result<DemoReport, String> {
    let cluster = stats.cluster;
    let ttl_mix = stats.ttl_mix.clone();
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

    let (mut gets, mut hits, mut writes, mut refills, mut set_errors, mut deletes, mut corrupt) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut misses = Misses::default();
    // Per key: the deadline of its last successful store (absent: never
    // stored, or deleted since).
    let mut stored: HashMap<u64, u64> = HashMap::new();
    let mut key = Vec::with_capacity(256);
    let mut value = Vec::with_capacity(4096);
    let start = Instant::now();
    for r in &reqs {
        let now = r.now_secs();
        clock.set(now.min(u32::MAX as u64) as u32);
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
                        match stored.get(&r.key_id) {
                            None => misses.never_stored += 1,
                            Some(&until) if now >= until => misses.expired += 1,
                            Some(_) => misses.gone_early += 1,
                        }
                        refills += 1;
                        store = true;
                    }
                }
            }
            Action::Write => {
                writes += 1;
                store = true;
            }
            Action::Delete => {
                deletes += 1;
                cache.delete(&key);
                stored.remove(&r.key_id);
            }
        }
        if store {
            fill_value(&mut value, r.key_id, r.value_len as usize);
            if cache.set(&key, &value, 0, ttl).is_ok() {
                stored.insert(r.key_id, deadline(now, r.ttl_secs));
            } else {
                set_errors += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    drop(stored);

    // Reclaim what expired, then see what the cache really holds.
    cache.expire();
    let mut distinct: HashMap<u64, (u32, u32)> = HashMap::new();
    for r in &reqs {
        distinct.insert(r.key_id, (r.key_len, r.value_len));
    }
    let (mut found, mut payload, mut all_payload) = (0u64, 0u64, 0u64);
    for (&id, &(key_len, value_len)) in &distinct {
        let r = Request {
            time_us: 0,
            op: Op::Get,
            key_id: id,
            key_len,
            value_len,
            ttl_secs: 0,
        };
        r.write_key(&mut key);
        all_payload += (key.len() + (value_len as usize).max(8)) as u64;
        if let Some(item) = cache.peek(&key) {
            found += 1;
            payload += (item.key().len() + item.value().len()) as u64;
        }
    }
    let stats = cache.stats();
    drop(cache);
    let mut builder = Segcache::builder();
    if let Some(h) = cfg.heap_size {
        builder = builder.heap_size(h);
    }
    let mean = (payload / found.max(1)) as usize;
    let key_len = mean.clamp(8, 32);
    let (full, _) = fullheap::fill(
        builder,
        key_len,
        mean.saturating_sub(key_len),
        FULL_OVERFILL,
    )
    .map_err(|e| e.to_string())?;

    let peer = match cfg.peer {
        Some(kind) => {
            let n = distinct.len().max(1) as f64;
            let typical = Typical {
                key_len: (distinct.values().map(|d| d.0 as f64).sum::<f64>() / n) as usize,
                value_len: (distinct.values().map(|d| d.1 as f64).sum::<f64>() / n) as usize,
            };
            let budget = stats.total_bytes as usize;
            let base = alloc::live_bytes();
            let mut peer = sim::build(kind, budget, typical, sim::Layout::default())?;
            let (reads, misses) = replay_peer(peer.as_mut(), &reqs);
            let end_bytes = alloc::live_bytes().saturating_sub(base) + peer.mapped_bytes();
            Some(PeerReport {
                name: peer.name(),
                reads,
                misses,
                budget_bytes: budget as u64,
                end_bytes: end_bytes as u64,
            })
        }
        None => None,
    };

    Ok(DemoReport {
        cluster,
        requests: reqs.len() as u64,
        time_scale,
        simulated_secs: reqs.last().map_or(0, |r| r.now_secs()),
        ttl_mix,
        gets,
        hits,
        misses,
        writes,
        refills,
        set_errors,
        deletes,
        corrupt_hits: corrupt,
        distinct_keys: distinct.len() as u64,
        mean_payload: all_payload as f64 / distinct.len().max(1) as f64,
        keys_found: found,
        payload_bytes: payload,
        stats,
        full,
        elapsed,
        peer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::twitter::load_cluster;

    fn small(heap_size: Option<usize>, peer: Option<Kind>) -> DemoReport {
        let cfg = DemoConfig {
            requests: 60_000,
            heap_size,
            peer,
            ..Default::default()
        };
        run(load_cluster(52).unwrap(), &cfg).unwrap()
    }

    #[test]
    fn demo_numbers_add_up() {
        let r = small(None, None);
        let s = &r.stats;
        assert_eq!(r.requests, 60_000);
        // Every request is a read, a write or a delete, and every miss has
        // one cause.
        assert_eq!(r.gets + r.writes + r.deletes, r.requests);
        assert_eq!(r.hits + r.misses.total(), r.gets);
        assert_eq!(r.refills, r.misses.total());
        // The cache's own counters agree with the loop's (peek counts
        // nothing).
        assert_eq!((s.hits, s.misses), (r.hits, r.misses.total()));
        assert_eq!(r.corrupt_hits, 0);
        assert_eq!(r.set_errors, 0);
        // Cluster 52: ~95% reads, Zipf 1.21, so most gets hit; every
        // distinct key read before it was written misses once.
        assert!(r.gets > 50_000 && r.hit_ratio() > 0.5, "{r}");
        assert!(r.misses.never_stored > 0 && r.misses.never_stored <= r.distinct_keys);
        // The default heap is far larger than this stream: nothing evicted,
        // so every miss of a stored, unexpired key is an early expiry.
        assert_eq!(s.evictions, 0);
        // Everything the table points at is findable after expire().
        assert_eq!(s.items, r.keys_found);
        assert!(r.keys_found <= r.distinct_keys);
        // The stream spans twice the commonest TTL (1 day): items expired,
        // and reads found keys past their TTL.
        assert!(r.simulated_secs > 2 * 86_400 - 10, "{}", r.simulated_secs);
        assert!(s.expirations > 0 && r.misses.expired > 0, "{s:?}");
        // Live bytes are the items' keys + values + headers (3 B, 5 B for
        // values of 256 bytes or more, plus the client flags' 4 if any).
        let header = r.heap_overhead_per_item();
        assert!((3.0..=13.0).contains(&header), "{header}");
        assert!(s.total_bytes >= s.heap_bytes + s.hash_table_bytes);
        // A full heap holds about heap / (bytes per held item) items: all
        // but what merge eviction keeps free, and its memory is at least
        // the heap.
        let per = s.live_bytes as f64 / s.items as f64;
        let full = r.full_heap_items() as f64;
        let fits = s.heap_bytes as f64 / per;
        assert!(full > 0.85 * fits && full <= fits + 1.0, "{full} of {fits}");
        assert!(r.full.total_bytes >= s.heap_bytes);
        assert!(r.full_heap_bytes_per_item() > r.payload_per_item());
        // The report names what it measured.
        let text = r.to_string();
        for word in [
            "cluster 52",
            "hits",
            "first requests",
            "MiB heap",
            "per item",
        ] {
            assert!(text.contains(word), "{word:?} missing in\n{text}");
        }
    }

    #[test]
    fn a_small_heap_evicts_by_merging_and_misses_say_so() {
        // At the cluster's real rate: segments of one TTL bucket are close
        // in time, so their deadlines allow merging (`ttl::spread`).
        let cfg = DemoConfig {
            requests: 400_000,
            heap_size: Some(2 << 20),
            time_scale: Some(1.0),
            peer: None,
            ..Default::default()
        };
        let r = run(load_cluster(52).unwrap(), &cfg).unwrap();
        let s = &r.stats;
        assert!(s.evictions > 0 && s.merges > 0, "{s:?}");
        assert!(r.misses.gone_early > 0, "{:?}", r.misses);
        assert_eq!(r.corrupt_hits, 0);
        assert_eq!(s.items, r.keys_found);
        assert!(s.live_bytes <= s.heap_bytes);
    }

    #[test]
    fn the_peer_replays_the_same_reads_at_the_same_memory() {
        let r = small(Some(4 << 20), Some(Kind::Lru));
        let p = r.peer.as_ref().expect("peer report");
        assert_eq!(p.name, "lru");
        assert_eq!(p.reads, r.gets);
        assert_eq!(p.budget_bytes, r.stats.total_bytes);
        // Both caches see the same first requests; neither can beat that.
        assert!(p.misses >= r.misses.never_stored, "{p:?}");
        assert!(p.hit_ratio() > 0.0 && p.hit_ratio() < 1.0);
        assert!(r.to_string().contains("vs peer   lru"), "{r}");
    }

    #[test]
    fn numbers_print_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(2_000_000), "2,000,000");
        assert_eq!(ttl_text(86_400), "1d");
        assert_eq!(ttl_text(43_200), "12h");
        assert_eq!(ttl_text(90), "90s");
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

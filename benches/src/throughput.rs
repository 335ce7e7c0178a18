//! Single-thread operation throughput: segcache against peer caches on the
//! same keys, values and key sequences.
//!
//! Owns the [`OpCache`] adapter trait (get / set / delete with real value
//! bytes, no simulated time), one adapter per cache ([`Contender`]), the
//! pre-generated key material ([`Keys`], [`KeySeq`]) and [`run_case`], the
//! fixed-op-count runner behind the CLI's `throughput` table. The criterion
//! benches (`benches/peers.rs`, `benches/core.rs`) reuse the same adapters
//! and sequences so the two views agree.
//!
//! Fairness rules, so a reader can judge the numbers:
//! * Keys are 32 bytes, built once ([`Keys`]); a timed loop only indexes a
//!   pre-generated sequence of key indices, so RNG and key formatting cost
//!   are outside it.
//! * A get must be able to read the value: segcache lends a slice, the
//!   unsync peers lend a reference, the sync peers (which hand out clones)
//!   store `Arc<[u8]>` so a hit is a refcount bump, not a copy. Every hit's
//!   value length is passed through `black_box`.
//! * A set copies the value into the cache: segcache into a segment, the
//!   peers into a fresh heap allocation (that is how they store bytes).
//! * Every cache is sized so all resident keys fit (segcache: heap ~2x the
//!   live items so overwrites can merge-evict dead versions; peers: item or
//!   byte capacity 2x), so a get-hit run really hits.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Key length used by every throughput case.
pub const KEY_LEN: usize = 32;

/// A cache under a throughput test.
pub trait OpCache {
    /// Looks `key` up; true on a hit (the value's length is black-boxed).
    fn get(&mut self, key: &[u8]) -> bool;
    /// Stores a copy of `value` under `key`.
    fn set(&mut self, key: &[u8], value: &[u8]);
    /// Removes `key`; true if it was there.
    fn delete(&mut self, key: &[u8]) -> bool;
    /// Items currently held, if the cache can tell (Pelikan's crate counts
    /// items only in its `debug` build, which also checksums every item).
    fn held(&self) -> Option<usize>;
}

/// The caches the throughput comparison knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Segcache,
    /// segcache read through [`segcache::Segcache::get_value_with`] (value
    /// and flags only: the bindings' read).
    SegcacheLean,
    QuickUnsync,
    QuickSync,
    MokaSync,
    Lru,
    PelikanMerge,
}

impl Contender {
    /// Every contender, segcache first (the baseline for ratios).
    pub const ALL: [Contender; 7] = [
        Contender::Segcache,
        Contender::SegcacheLean,
        Contender::QuickUnsync,
        Contender::QuickSync,
        Contender::MokaSync,
        Contender::Lru,
        Contender::PelikanMerge,
    ];

    /// Display and command-line name.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Segcache => "segcache",
            Contender::SegcacheLean => "segcache-lean",
            Contender::QuickUnsync => "quick_cache-unsync",
            Contender::QuickSync => "quick_cache-sync",
            Contender::MokaSync => "moka-sync",
            Contender::Lru => "lru",
            Contender::PelikanMerge => "pelikan-merge",
        }
    }

    /// Parses a [`Contender::label`].
    pub fn parse(s: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.label() == s)
    }

    /// Builds an empty cache able to hold `items` items of `value_len`-byte
    /// values (32-byte keys) without evicting.
    pub fn build(self, items: usize, value_len: usize) -> Box<dyn OpCache> {
        match self {
            Contender::Segcache => Box::new(SegcacheOps::for_items(items, value_len)),
            Contender::SegcacheLean => {
                Box::new(SegcacheLeanOps(SegcacheOps::for_items(items, value_len)))
            }
            Contender::QuickUnsync => Box::new(QuickUnsyncOps::new(items, value_len)),
            Contender::QuickSync => Box::new(QuickSyncOps::new(items, value_len)),
            Contender::MokaSync => Box::new(MokaOps::new(items)),
            Contender::Lru => Box::new(LruOps::new(items)),
            Contender::PelikanMerge => Box::new(PelikanOps::new(items, value_len)),
        }
    }
}

// ------------------------------------------------------------- segcache

/// `segcache::Segcache` (default merge eviction, system clock).
pub struct SegcacheOps {
    cache: segcache::Segcache,
}

/// Smallest hash power whose buckets (7 slots each) keep the table at or
/// under ~50% load for `items`.
pub fn hash_power_for(items: usize) -> u8 {
    let mut hp = 4u8;
    while ((1usize << hp) * 7) < items * 2 {
        hp += 1;
    }
    hp
}

impl SegcacheOps {
    /// Heap of about twice the items' segment bytes (at least 64 segments
    /// of 1 MiB) and the default hash table for that heap (sized for 1 KiB
    /// items filling it; these smaller items make it grow, to ~87% load).
    pub fn for_items(items: usize, value_len: usize) -> SegcacheOps {
        let seg = 1usize << 20;
        let item = 5 + KEY_LEN + value_len;
        let heap = ((items * item * 2) / seg + 1).max(64) * seg;
        let cache = segcache::Segcache::builder()
            .heap_size(heap)
            .build()
            .expect("segcache config");
        SegcacheOps { cache }
    }

    /// Explicit heap and hash power.
    pub fn with(heap: usize, hash_power: u8) -> SegcacheOps {
        let cache = segcache::Segcache::builder()
            .heap_size(heap)
            .hash_power(hash_power)
            .build()
            .expect("segcache config");
        SegcacheOps { cache }
    }

    /// The inner cache (for stats).
    pub fn inner(&self) -> &segcache::Segcache {
        &self.cache
    }
}

impl OpCache for SegcacheOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(item) => {
                black_box(item.value().len());
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.cache.set(key, value, 0, None).expect("segcache set");
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.delete(key)
    }
    fn held(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}

/// [`SegcacheOps`] reading through `get_value_with` (value and client
/// flags only, the bindings' read) instead of `get`.
pub struct SegcacheLeanOps(pub SegcacheOps);

impl OpCache for SegcacheLeanOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        self.0
            .cache
            .get_value_with(key, |value, _| black_box(value.len()))
            .is_some()
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.0.set(key, value)
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.0.delete(key)
    }
    fn held(&self) -> Option<usize> {
        self.0.held()
    }
}

// ---------------------------------------------------------- quick_cache

/// Weighs an entry by its key and value bytes.
#[derive(Clone)]
pub struct Bytes;

impl quick_cache::Weighter<Box<[u8]>, Box<[u8]>> for Bytes {
    fn weight(&self, key: &Box<[u8]>, val: &Box<[u8]>) -> u64 {
        (key.len() + val.len()) as u64
    }
}

impl quick_cache::Weighter<Box<[u8]>, Arc<[u8]>> for Bytes {
    fn weight(&self, key: &Box<[u8]>, val: &Arc<[u8]>) -> u64 {
        (key.len() + val.len()) as u64
    }
}

/// `quick_cache::unsync::Cache` with a byte weighter, values `Box<[u8]>`.
pub struct QuickUnsyncOps {
    cache: quick_cache::unsync::Cache<Box<[u8]>, Box<[u8]>, Bytes>,
}

impl QuickUnsyncOps {
    /// Room for twice `items` items of `value_len` bytes.
    pub fn new(items: usize, value_len: usize) -> QuickUnsyncOps {
        let cap = (2 * items * (KEY_LEN + value_len)) as u64;
        QuickUnsyncOps {
            cache: quick_cache::unsync::Cache::with_weighter(2 * items, cap, Bytes),
        }
    }
}

impl OpCache for QuickUnsyncOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(v) => {
                black_box(v.len());
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.cache.insert(key.into(), value.into());
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.remove(key).is_some()
    }
    fn held(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}

/// `quick_cache::sync::Cache` with a byte weighter, values `Arc<[u8]>`.
pub struct QuickSyncOps {
    cache: quick_cache::sync::Cache<Box<[u8]>, Arc<[u8]>, Bytes>,
}

impl QuickSyncOps {
    /// Room for twice `items` items of `value_len` bytes.
    pub fn new(items: usize, value_len: usize) -> QuickSyncOps {
        let cap = (2 * items * (KEY_LEN + value_len)) as u64;
        QuickSyncOps {
            cache: quick_cache::sync::Cache::with_weighter(2 * items, cap, Bytes),
        }
    }
}

impl OpCache for QuickSyncOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(v) => {
                black_box(v.len());
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.cache.insert(key.into(), value.into());
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.remove(key).is_some()
    }
    fn held(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}

// ------------------------------------------------------------------ moka

/// `moka::sync::Cache` (item-count capacity), values `Arc<[u8]>`.
pub struct MokaOps {
    cache: moka::sync::Cache<Box<[u8]>, Arc<[u8]>>,
}

impl MokaOps {
    /// Room for twice `items` items.
    pub fn new(items: usize) -> MokaOps {
        MokaOps {
            cache: moka::sync::Cache::new(2 * items as u64),
        }
    }
}

impl OpCache for MokaOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(v) => {
                black_box(v.len());
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.cache.insert(key.into(), value.into());
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.remove(key).is_some()
    }
    fn held(&self) -> Option<usize> {
        self.cache.run_pending_tasks();
        Some(self.cache.entry_count() as usize)
    }
}

// ------------------------------------------------------ Pelikan segcache

/// Pelikan's own segment cache (crates.io `segcache` 0.4.4, renamed
/// `pelikan_segcache`), `Policy::Merge { max: 8, merge: 4, compact: 2 }`
/// (its defaults), 1 MiB segments, no TTL, overflow buckets allowed for
/// every bucket (`overflow_factor(1.0)`, as Pelikan's server configures it;
/// without them a bucket's eighth key fails to insert). Its `get` takes
/// `&self` and lends the value, like ours.
pub struct PelikanOps {
    cache: pelikan_segcache::Segcache,
}

impl PelikanOps {
    /// See [`pelikan_merge_for`].
    pub fn new(items: usize, value_len: usize) -> PelikanOps {
        PelikanOps {
            cache: pelikan_merge_for(items, value_len),
        }
    }
}

/// Pelikan's crate sized for `items` items of 32-byte keys and
/// `value_len`-byte values: the same heap rule as
/// [`SegcacheOps::for_items`] (about twice the items' bytes with Pelikan's
/// ~14-byte item header, in whole 1 MiB segments, at least 64), a table of
/// 8-slot buckets at or under ~50% load, its default merge policy. Shared
/// by the single-thread and the concurrent comparisons.
pub fn pelikan_merge_for(items: usize, value_len: usize) -> pelikan_segcache::Segcache {
    let seg = 1usize << 20;
    let item = 14 + KEY_LEN + value_len;
    let heap = ((items * item * 2) / seg + 1).max(64) * seg;
    let mut hash_power = 7u8;
    while (1usize << hash_power) < items * 2 {
        hash_power += 1;
    }
    pelikan_segcache::Segcache::builder()
        .heap_size(heap)
        .segment_size(seg as i32)
        .hash_power(hash_power)
        .overflow_factor(1.0)
        .eviction(pelikan_segcache::Policy::Merge {
            max: 8,
            merge: 4,
            compact: 2,
        })
        .build()
        .expect("pelikan segcache config")
}

impl OpCache for PelikanOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(item) => {
                if let pelikan_segcache::Value::Bytes(v) = item.value() {
                    black_box(v.len());
                }
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        // Its two-choice table can refuse a key even at a low load (1 of
        // 100 k keys at 38% here); the bench's hit check reports that.
        let _ = self.cache.insert(key, value, None, Duration::ZERO);
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.delete(key)
    }
    fn held(&self) -> Option<usize> {
        None
    }
}

// ------------------------------------------------------------------- lru

/// `lru::LruCache` (item-count capacity), values `Box<[u8]>`.
pub struct LruOps {
    cache: lru::LruCache<Box<[u8]>, Box<[u8]>>,
}

impl LruOps {
    /// Room for twice `items` items.
    pub fn new(items: usize) -> LruOps {
        let cap = std::num::NonZeroUsize::new(2 * items.max(1)).unwrap();
        LruOps {
            cache: lru::LruCache::new(cap),
        }
    }
}

impl OpCache for LruOps {
    #[inline]
    fn get(&mut self, key: &[u8]) -> bool {
        match self.cache.get(key) {
            Some(v) => {
                black_box(v.len());
                true
            }
            None => false,
        }
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.cache.put(key.into(), value.into());
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        self.cache.pop(key).is_some()
    }
    fn held(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}

// ------------------------------------------------------- key material

/// `2 * n` distinct 32-byte keys: indices `0..n` are the resident set,
/// `n..2n` are never inserted (get-miss keys).
pub struct Keys {
    bytes: Vec<u8>,
    resident: usize,
}

impl Keys {
    /// Builds the keys: `key:` + 16 hex digits of a scrambled index, padded.
    pub fn new(resident: usize) -> Keys {
        let mut bytes = Vec::with_capacity(2 * resident * KEY_LEN);
        for i in 0..2 * resident as u64 {
            let start = bytes.len();
            bytes.extend_from_slice(b"key:");
            bytes.extend_from_slice(format!("{:016x}", crate::twitter::mix64(i)).as_bytes());
            bytes.resize(start + KEY_LEN, b'.');
        }
        Keys { bytes, resident }
    }

    /// Number of resident keys.
    pub fn resident(&self) -> usize {
        self.resident
    }

    /// Resident key `i` (`i < resident`), or miss key `i - resident`.
    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        &self.bytes[i * KEY_LEN..(i + 1) * KEY_LEN]
    }

    /// Miss key `i` (never inserted).
    #[inline]
    pub fn miss_key(&self, i: usize) -> &[u8] {
        self.key(self.resident + i)
    }
}

/// How keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Uniform,
    /// Zipf with this exponent; popularity ranks are shuffled over the
    /// key indices so hot keys are not adjacent in insertion order.
    Zipf(f64),
}

impl Dist {
    /// Short label: `uniform`, `zipf0.99`.
    pub fn label(self) -> String {
        match self {
            Dist::Uniform => "uniform".into(),
            Dist::Zipf(a) => format!("zipf{a}"),
        }
    }
}

/// A pre-generated sequence of key indices in `0..n`, length a power of
/// two so the cursor wraps with a mask.
#[derive(Clone)]
pub struct KeySeq {
    idx: Vec<u32>,
    pos: usize,
}

impl KeySeq {
    /// `len` (rounded up to a power of two) indices in `0..n` drawn from
    /// `dist` with a fixed seed.
    pub fn new(n: usize, len: usize, dist: Dist, seed: u64) -> KeySeq {
        let len = len.next_power_of_two();
        let mut rng = StdRng::seed_from_u64(seed);
        let idx = match dist {
            Dist::Uniform => {
                let d = rand::distributions::Uniform::new(0, n as u32);
                (0..len).map(|_| d.sample(&mut rng)).collect()
            }
            Dist::Zipf(a) => {
                let mut perm: Vec<u32> = (0..n as u32).collect();
                perm.shuffle(&mut rng);
                let z = Zipf::new(n as u64, a).expect("zipf");
                (0..len)
                    .map(|_| {
                        let rank = (z.sample(&mut rng) as usize).clamp(1, n);
                        perm[rank - 1]
                    })
                    .collect()
            }
        };
        KeySeq { idx, pos: 0 }
    }

    /// The next index (wrapping).
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> usize {
        let i = self.idx[self.pos];
        self.pos = (self.pos + 1) & (self.idx.len() - 1);
        i as usize
    }

    /// All indices.
    pub fn indices(&self) -> &[u32] {
        &self.idx
    }
}

/// Inserts resident keys `0..keys.resident()` with `value`.
pub fn fill(cache: &mut dyn OpCache, keys: &Keys, value: &[u8]) {
    for i in 0..keys.resident() {
        cache.set(keys.key(i), value);
    }
}

/// The operation mix of a throughput case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    GetHit,
    GetMiss,
    Set,
    /// `gets` out of every 10 operations are gets of resident keys, the
    /// rest sets (overwrites) of resident keys, interleaved evenly.
    Mixed {
        gets: u32,
    },
    /// Deletes resident keys in index order (the `n`-th operation deletes
    /// key `n % resident`), so every delete of a run no longer than the
    /// resident count finds its key. Not a peers-table case: `opcount` only.
    Delete,
}

impl Op {
    /// The cases of the peers table, in order.
    pub const ALL: [Op; 5] = [
        Op::GetHit,
        Op::GetMiss,
        Op::Set,
        Op::Mixed { gets: 8 },
        Op::Mixed { gets: 9 },
    ];

    /// Short label: `get-hit`, `mixed-80:20`, ...
    pub fn label(self) -> String {
        match self {
            Op::GetHit => "get-hit".into(),
            Op::GetMiss => "get-miss".into(),
            Op::Set => "set".into(),
            Op::Mixed { gets } => format!("mixed-{}:{}", gets * 10, 100 - gets * 10),
            Op::Delete => "delete".into(),
        }
    }
}

/// Runs one operation of `op` with the next key of `seq`; returns whether
/// it was a get that hit or a delete that found its key (for sanity
/// checks).
#[inline]
pub fn step(
    cache: &mut dyn OpCache,
    keys: &Keys,
    value: &[u8],
    seq: &mut KeySeq,
    op: Op,
    n: u64,
) -> bool {
    let i = seq.next();
    match op {
        Op::GetHit => cache.get(keys.key(i)),
        Op::GetMiss => cache.get(keys.miss_key(i)),
        Op::Set => {
            cache.set(keys.key(i), value);
            false
        }
        Op::Mixed { gets } => {
            if (n % 10) < gets as u64 {
                cache.get(keys.key(i))
            } else {
                cache.set(keys.key(i), value);
                false
            }
        }
        Op::Delete => cache.delete(keys.key(n as usize % keys.resident())),
    }
}

/// Outcome of a fixed-count run.
#[derive(Debug, Clone, Copy)]
pub struct CaseResult {
    pub ops: u64,
    pub hits: u64,
    pub elapsed: Duration,
}

impl CaseResult {
    /// Millions of operations per second.
    pub fn mops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Runs `ops` operations of `op` on a filled cache and times them.
pub fn run_case(
    cache: &mut dyn OpCache,
    keys: &Keys,
    value: &[u8],
    seq: &mut KeySeq,
    op: Op,
    ops: u64,
) -> CaseResult {
    let mut hits = 0u64;
    let start = Instant::now();
    for n in 0..ops {
        hits += step(cache, keys, value, seq, op, n) as u64;
    }
    CaseResult {
        ops,
        hits,
        elapsed: start.elapsed(),
    }
}

// Concurrent (2-thread) throughput lives in `concurrent.rs`.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contender_holds_all_resident_keys_and_misses_the_rest() {
        let keys = Keys::new(5_000);
        let value = [7u8; 64];
        for c in Contender::ALL {
            let mut cache = c.build(keys.resident(), value.len());
            fill(cache.as_mut(), &keys, &value);
            if let Some(n) = cache.held() {
                assert_eq!(n, 5_000, "{}", c.label());
            }
            let mut seq = KeySeq::new(5_000, 4096, Dist::Zipf(0.99), 1);
            let r = run_case(cache.as_mut(), &keys, &value, &mut seq, Op::GetHit, 4096);
            assert_eq!(r.hits, 4096, "{} get-hit", c.label());
            let r = run_case(cache.as_mut(), &keys, &value, &mut seq, Op::GetMiss, 4096);
            assert_eq!(r.hits, 0, "{} get-miss", c.label());
            let r = run_case(
                cache.as_mut(),
                &keys,
                &value,
                &mut seq,
                Op::Mixed { gets: 8 },
                1000,
            );
            assert_eq!(r.hits, 800, "{} mixed: every get hits", c.label());
            assert!(cache.delete(keys.key(0)), "{}", c.label());
            assert!(!cache.get(keys.key(0)), "{}", c.label());
            assert!(!cache.delete(keys.key(0)), "{}", c.label());
            // The delete case: key 0 is gone already, the other 4,999 hit.
            let r = run_case(cache.as_mut(), &keys, &value, &mut seq, Op::Delete, 5_000);
            assert_eq!(r.hits, 4_999, "{} delete", c.label());
            if let Some(n) = cache.held() {
                assert_eq!(n, 0, "{} after deleting every key", c.label());
            }
        }
    }

    #[test]
    fn key_sequences_are_in_range_and_zipf_is_skewed() {
        let u = KeySeq::new(1000, 1 << 14, Dist::Uniform, 3);
        let z = KeySeq::new(1000, 1 << 14, Dist::Zipf(0.99), 3);
        assert_eq!(u.indices().len(), 1 << 14);
        assert!(u.indices().iter().chain(z.indices()).all(|&i| i < 1000));
        let top = |s: &KeySeq| {
            let mut c = vec![0u32; 1000];
            for &i in s.indices() {
                c[i as usize] += 1;
            }
            *c.iter().max().unwrap()
        };
        // Uniform: ~16 per key; Zipf(0.99) over 1000 keys: the top key
        // gets ~13% of requests.
        assert!(top(&u) < 60, "uniform max {}", top(&u));
        assert!(top(&z) > 1000, "zipf max {}", top(&z));
    }

    #[test]
    fn keys_are_distinct_and_sized() {
        let k = Keys::new(1000);
        let mut all: Vec<&[u8]> = (0..2000).map(|i| k.key(i)).collect();
        assert!(all.iter().all(|k| k.len() == KEY_LEN));
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 2000);
        assert_eq!(k.miss_key(0), k.key(1000));
    }
}

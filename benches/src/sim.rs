//! Miss-ratio simulation: the [`SimCache`] adapter trait, one adapter per
//! cache under test, equal-memory-budget calibration, and the replay loops
//! over the CloudPhysics trace and the synthetic Twitter workloads.
//!
//! Caches:
//! * [`SegcacheSim`] — the `segcache` crate on a [`segcache::ManualClock`]
//!   driven by simulated time (behind the default `segcache-adapter` feature).
//! * [`MokaSim`] — `moka::sync::Cache` with a byte weigher and per-entry TTL
//!   through moka's `Expiry` trait.
//! * [`QuickSim`] — `quick_cache::unsync::Cache` with a byte `Weighter`.
//! * [`LruSim`] — `lru::LruCache` (unbounded) plus a byte budget enforced by
//!   popping the LRU entry until the new entry fits.
//! * [`ObjLru`] / [`ObjFifo`] — reference policies that count only object
//!   (value) bytes, used to check the replay against libCacheSim's numbers.
//!
//! Peers store real value bytes, so everything a cache allocates is visible to
//! the counting allocator ([`crate::alloc`]). Equal budget: each peer's
//! weigher charges `key + value + per_item_overhead`, where the overhead (and
//! the cache's fixed cost) is measured by filling an instance with items of
//! the workload's typical size; the weight capacity is then corrected (up to three
//! rounds) so that a full, churned cache's real allocated bytes match the
//! budget.
//!
//! TTL: simulated time is far faster than wall time, so peers cannot use
//! their own (wall-clock) expiry to follow it. Every peer adapter therefore
//! checks the simulated expiry time lazily on `get` (an expired entry is
//! removed and counted as a miss); moka's `Expiry` is still installed with
//! the TTL as a wall-clock duration, so its timer-wheel bookkeeping is paid
//! in memory. Segcache follows simulated time natively and expires whole
//! segments proactively.

use crate::alloc;
use crate::trace::Record;
use crate::twitter::{Action, Workload};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cache as seen by the simulator. `now_secs` is simulated time.
pub trait SimCache {
    /// Display name.
    fn name(&self) -> String;
    /// Lookup; true on a hit.
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool;
    /// Store `value_len` bytes under `key`, expiring `ttl_secs` after `now_secs`.
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64);
    /// Remove `key`.
    fn delete(&mut self, key: &[u8]);
    /// Finish deferred internal work (e.g. moka's pending evictions) so that
    /// a memory measurement sees the settled state.
    fn settle(&mut self) {}
    /// Bytes the cache maps outside the global allocator (segcache's heap
    /// is an anonymous mmap), added to the counting allocator's figure.
    fn mapped_bytes(&self) -> usize {
        0
    }
}

/// Expiry instant in simulated seconds; `u64::MAX` means never.
fn expire_at(ttl_secs: Option<u32>, now_secs: u64) -> u64 {
    match ttl_secs {
        Some(t) if t > 0 => now_secs.saturating_add(t as u64),
        _ => u64::MAX,
    }
}

/// A stored value: real bytes plus simulated-time expiry.
#[derive(Debug)]
pub struct Val {
    data: Box<[u8]>,
    expire_at: u64,
    ttl_secs: u32,
}

impl Val {
    fn new(value_len: usize, ttl_secs: Option<u32>, now_secs: u64) -> Val {
        Val {
            data: vec![0u8; value_len].into_boxed_slice(),
            expire_at: expire_at(ttl_secs, now_secs),
            ttl_secs: ttl_secs.unwrap_or(0),
        }
    }
}

/// Per-entry cost model used by the byte-weighted peers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizing {
    /// Bytes charged per entry on top of key and value bytes.
    pub per_item: usize,
    /// Weight capacity handed to the cache.
    pub capacity: u64,
}

impl Sizing {
    fn weight(&self, key_len: usize, value_len: usize) -> u64 {
        (key_len + value_len + self.per_item) as u64
    }
}

// ---------------------------------------------------------------- moka

/// `moka::sync::Cache` adapter.
pub struct MokaSim {
    cache: moka::sync::Cache<Box<[u8]>, Arc<Val>>,
}

struct WallTtl;

// The key type is `Box<[u8]>`, so moka's `&K` is a `&Box<[u8]>`.
impl moka::Expiry<Box<[u8]>, Arc<Val>> for WallTtl {
    #[allow(clippy::borrowed_box)]
    fn expire_after_create(
        &self,
        _key: &Box<[u8]>,
        value: &Arc<Val>,
        _created_at: Instant,
    ) -> Option<Duration> {
        (value.ttl_secs > 0).then(|| Duration::from_secs(value.ttl_secs as u64))
    }

    #[allow(clippy::borrowed_box)]
    fn expire_after_update(
        &self,
        _key: &Box<[u8]>,
        value: &Arc<Val>,
        _updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        (value.ttl_secs > 0).then(|| Duration::from_secs(value.ttl_secs as u64))
    }
}

impl MokaSim {
    #[allow(clippy::borrowed_box)] // moka's weigher takes `&K`
    pub fn new(sizing: Sizing) -> MokaSim {
        let per_item = sizing.per_item;
        let cache = moka::sync::Cache::builder()
            .max_capacity(sizing.capacity)
            .weigher(move |k: &Box<[u8]>, v: &Arc<Val>| {
                (k.len() + v.data.len() + per_item).min(u32::MAX as usize) as u32
            })
            .expire_after(WallTtl)
            .build();
        MokaSim { cache }
    }
}

impl SimCache for MokaSim {
    fn name(&self) -> String {
        "moka".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.cache.invalidate(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        let v = Arc::new(Val::new(value_len, ttl_secs, now_secs));
        self.cache.insert(key.into(), v);
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.invalidate(key);
    }
    fn settle(&mut self) {
        self.cache.run_pending_tasks();
    }
}

// ---------------------------------------------------------- quick_cache

#[derive(Clone)]
struct ByteWeighter(usize);

impl quick_cache::Weighter<Box<[u8]>, Val> for ByteWeighter {
    fn weight(&self, key: &Box<[u8]>, val: &Val) -> u64 {
        (key.len() + val.data.len() + self.0) as u64
    }
}

/// `quick_cache::unsync::Cache` adapter.
pub struct QuickSim {
    cache: quick_cache::unsync::Cache<Box<[u8]>, Val, ByteWeighter>,
}

impl QuickSim {
    /// `typical_weight` sizes quick_cache's item-count estimate.
    pub fn new(sizing: Sizing, typical_weight: u64) -> QuickSim {
        let est = (sizing.capacity / typical_weight.max(1)).max(16) as usize;
        QuickSim {
            cache: quick_cache::unsync::Cache::with_weighter(
                est,
                sizing.capacity,
                ByteWeighter(sizing.per_item),
            ),
        }
    }
}

impl SimCache for QuickSim {
    fn name(&self) -> String {
        "quick_cache".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.cache.remove(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.cache
            .insert(key.into(), Val::new(value_len, ttl_secs, now_secs));
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.remove(key);
    }
}

// ------------------------------------------------------------------ lru

/// `lru::LruCache` adapter with a byte budget.
pub struct LruSim {
    cache: lru::LruCache<Box<[u8]>, Val>,
    sizing: Sizing,
    used: u64,
}

impl LruSim {
    pub fn new(sizing: Sizing) -> LruSim {
        LruSim {
            cache: lru::LruCache::unbounded(),
            sizing,
            used: 0,
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(v) = self.cache.pop(key) {
            self.used -= self.sizing.weight(key.len(), v.data.len());
        }
    }
}

impl SimCache for LruSim {
    fn name(&self) -> String {
        "lru".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.remove(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.remove(key);
        let w = self.sizing.weight(key.len(), value_len);
        if w > self.sizing.capacity {
            return;
        }
        while self.used + w > self.sizing.capacity {
            let (k, v) = self.cache.pop_lru().expect("used > 0 implies entries");
            self.used -= self.sizing.weight(k.len(), v.data.len());
        }
        self.cache
            .put(key.into(), Val::new(value_len, ttl_secs, now_secs));
        self.used += w;
    }
    fn delete(&mut self, key: &[u8]) {
        self.remove(key);
    }
}

// ------------------------------------------------------------- segcache

/// `segcache::Segcache` adapter on simulated time.
#[cfg(feature = "segcache-adapter")]
pub struct SegcacheSim {
    cache: segcache::Segcache,
    clock: segcache::ManualClock,
    label: String,
}

/// A value source for segcache sets: values are all zero bytes and this
/// static buffer is never allocated on the heap.
#[cfg(feature = "segcache-adapter")]
static ZEROS: [u8; 1 << 20] = [0u8; 1 << 20];

#[cfg(feature = "segcache-adapter")]
impl SegcacheSim {
    /// Build with explicit parameters.
    pub fn with_params(
        heap_size: usize,
        segment_size: usize,
        hash_power: u8,
        eviction: segcache::Eviction,
    ) -> Result<SegcacheSim, segcache::Error> {
        let clock = segcache::ManualClock::new();
        let cache = segcache::Segcache::builder()
            .heap_size(heap_size)
            .segment_size(segment_size as _)
            .hash_power(hash_power as _)
            .eviction(eviction)
            .clock(clock.clone())
            .build()?;
        Ok(SegcacheSim {
            cache,
            clock,
            label: "segcache".into(),
        })
    }

    /// All bytes the cache allocated (heap + hash table + segment headers)
    /// as reported by `stats()`.
    pub fn reported_bytes(&self) -> usize {
        self.cache.stats().total_bytes as usize
    }

    /// The inner cache.
    pub fn inner(&self) -> &segcache::Segcache {
        &self.cache
    }

    /// Build a cache whose total allocated bytes (heap, hash table, segment
    /// headers, per `stats().total_bytes`) come to about `budget` (at most
    /// one segment under it). The hash table is the smallest whose seven
    /// slots per bucket, at 90% load, hold a heap full of `typ`-sized items
    /// (and at least 1/128 of the budget); what it leaves goes to the heap,
    /// after the fixed cost (the TTL bucket array), the segment headers and
    /// the admission ghosts (1.125 bytes per typical item: about 0.55 per item
    /// held, with room for items smaller than typical) and merge eviction's
    /// scratch (fixed at build, read from the stats of a first build).
    /// Segments of `segment_size` bytes ([`segment_size_for`] gives the
    /// bench's choice).
    pub fn for_budget(
        budget: usize,
        segment_size: usize,
        typ: Typical,
    ) -> Result<SegcacheSim, String> {
        let err = |e: segcache::Error| format!("segcache build: {e:?}");
        // Probes: fixed cost, per-bucket and per-segment cost from stats().
        let probe = |segments: usize, hp: u8| {
            Self::with_params(
                segment_size * segments,
                segment_size,
                hp,
                segcache::Eviction::Merge,
            )
            .map(|p| p.cache.stats())
            .map_err(err)
        };
        let (a, b) = (probe(4, 10)?, probe(8, 11)?);
        let per_bucket = (b.hash_table_bytes - a.hash_table_bytes) as usize >> 10;
        let per_segment = (b.segment_header_bytes - a.segment_header_bytes) as usize / 4;
        let fixed = a.segment_header_bytes as usize - 4 * per_segment;
        // Item: 5-byte header + key + value, rounded as the heap packs it.
        let item = (typ.key_len + typ.value_len + 5).max(8);
        // Merge eviction's ghosts: about 0.55 bytes per item held (2-byte
        // entries, a quarter to three eighths as many as items), reserved at 1.125 per
        // typical item as sizes vary, plus a pool flag per segment.
        let per_segment = per_segment + 1 + segment_size * 9 / 8 / item;
        // `reserve`: bytes the cache allocates at build beyond the above
        // (merge eviction's fixed scratch, counted in `admission_bytes`).
        let heap_for = |hp: u8, reserve: usize| {
            let room = budget.saturating_sub(fixed + (per_bucket << hp) + reserve);
            (room / (segment_size + per_segment)).max(segcache::MIN_SEGMENTS) * segment_size
        };
        // Sizes vary around the mean (the block trace mixes 512 B and
        // 64 KiB objects), so the table never gets less than 1/64 of the
        // budget.
        let mut hp = segcache::MIN_HASH_POWER;
        while hp < 30
            && ((7usize << hp) * 9 / 10 < heap_for(hp, 0) / item
                || (per_bucket << (hp + 1)) <= budget / 64)
        {
            hp += 1;
        }
        // The merge scratch scales with the heap (at most 1/16 of it), so
        // the heap sized after the first build's scratch has a scratch no
        // larger: the second build fits.
        let build = |heap: usize| {
            Self::with_params(heap, segment_size, hp, segcache::Eviction::Merge).map_err(err)
        };
        let first = build(heap_for(hp, 0))?;
        let s = first.cache.stats();
        // Less the pool flags, already counted per segment.
        let reserve = (s.admission_bytes - s.segments_used - s.segments_free) as usize;
        drop(first);
        let mut sim = build(heap_for(hp, reserve))?;
        sim.label = "segcache".into();
        Ok(sim)
    }
}

/// The segment size for a budget: the crate's default for a heap of that
/// size ([`segcache::default_segment_size`]: 256 to 512 segments, 16 KiB
/// to 1 MiB), or with `segments` the power of two that cuts it into that
/// many to twice as many (4 KiB to 1 MiB); raised to four typical items
/// where that is larger (what the crate's docs tell a user with large
/// items to do), and at most `segment_size`. Pelikan's crate gets the same
/// size, and so does every shard of a sharded layout (as
/// `Builder::build_sharded` sizes segments for the whole heap).
pub fn segment_size_for(
    budget: usize,
    segment_size: usize,
    typ: Typical,
    segments: Option<usize>,
) -> usize {
    let by_heap = match segments {
        None => segcache::default_segment_size(budget),
        Some(n) => {
            let share = (budget / n.max(1)).max(1);
            (1usize << share.ilog2()).clamp(4 << 10, 1 << 20)
        }
    };
    let by_item = (4 * (typ.key_len + typ.value_len + 16)).next_power_of_two();
    by_heap.max(by_item).min(segment_size)
}

#[cfg(feature = "segcache-adapter")]
impl SimCache for SegcacheSim {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        self.clock.set(now_secs.min(u32::MAX as u64) as u32);
        self.cache.get(key).is_some()
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.clock.set(now_secs.min(u32::MAX as u64) as u32);
        if value_len > ZEROS.len() {
            return; // larger than any segment: cannot be stored
        }
        let ttl = ttl_secs
            .filter(|&t| t > 0)
            .map(|t| Duration::from_secs(t as u64));
        let _ = self.cache.set(key, &ZEROS[..value_len], 0, ttl);
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.delete(key);
    }
    fn mapped_bytes(&self) -> usize {
        self.cache.stats().heap_bytes as usize
    }
}

// ------------------------------------------------------ Pelikan segcache

/// Pelikan's own segment cache (crates.io `segcache` 0.4.4, pelikan-io/
/// cache-rs), renamed `pelikan_segcache` in this crate.
///
/// It runs on its own wall clock, which a replay cannot drive, so the item
/// is stored with its real TTL (which keeps Pelikan's TTL-bucket grouping;
/// no replay lasts as long as the shortest TTL in these workloads, 20 s, in
/// wall time) and the simulated deadline is written into the item (the
/// first four value bytes, or 4 bytes of optional data for values shorter
/// than that) and checked on `get`, as for the other peers.
pub struct PelikanSim {
    cache: pelikan_segcache::Segcache,
    label: &'static str,
    heap: usize,
    scratch: Vec<u8>,
}

/// Which of Pelikan's policies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PelikanPolicy {
    /// `Policy::Merge { max: 8, merge: 4, compact: 2 }` (Pelikan's defaults).
    Merge,
    /// `Policy::S3Fifo { admission_ratio: 0.1 }`.
    S3Fifo,
}

impl PelikanSim {
    /// Builds with explicit parameters; `hash_power` is Pelikan's (2^N
    /// item slots, 8 per 64-byte bucket).
    pub fn with_params(
        heap_size: usize,
        segment_size: usize,
        hash_power: u8,
        policy: PelikanPolicy,
    ) -> Result<PelikanSim, String> {
        let (p, label) = match policy {
            PelikanPolicy::Merge => (
                pelikan_segcache::Policy::Merge {
                    max: 8,
                    merge: 4,
                    compact: 2,
                },
                "pelikan-merge",
            ),
            PelikanPolicy::S3Fifo => (
                pelikan_segcache::Policy::S3Fifo {
                    admission_ratio: 0.1,
                },
                "pelikan-s3fifo",
            ),
        };
        let cache = pelikan_segcache::Segcache::builder()
            .heap_size(heap_size)
            .segment_size(segment_size as i32)
            .hash_power(hash_power.max(7))
            .eviction(p)
            .build()
            .map_err(|e| format!("pelikan segcache build: {e}"))?;
        Ok(PelikanSim {
            cache,
            label,
            heap: heap_size,
            scratch: Vec::new(),
        })
    }

    /// A cache whose real allocation (mapped heap plus everything it
    /// allocates) comes to about `budget`, in segments of `segment_size`
    /// bytes: the same table rule as [`SegcacheSim::for_budget`] (slots for
    /// the items a full budget holds at 90% load, at least 1/128 of the
    /// budget), the rest heap.
    pub fn for_budget(
        budget: usize,
        segment_size: usize,
        typ: Typical,
        policy: PelikanPolicy,
    ) -> Result<PelikanSim, String> {
        // Pelikan's item header is 12-16 bytes.
        let item = typ.key_len + typ.value_len + 14;
        let mut hp = 7u8;
        while hp < 30
            && ((1usize << hp) * 9 / 10 < budget / item || (8usize << (hp + 1)) <= budget / 64)
        {
            hp += 1;
        }
        // Measure what the table and headers cost at a one-segment heap...
        let base = alloc::live_bytes();
        let probe = Self::with_params(segment_size, segment_size, hp, policy)?;
        let fixed = alloc::live_bytes().saturating_sub(base);
        drop(probe);
        let base = alloc::live_bytes();
        let probe = Self::with_params(segment_size * 16, segment_size, hp, policy)?;
        let per_segment = alloc::live_bytes()
            .saturating_sub(base)
            .saturating_sub(fixed)
            / 15;
        drop(probe);
        // ...and give the rest to the heap.
        let room = budget.saturating_sub(fixed);
        let segments = (room / (segment_size + per_segment)).max(segcache::MIN_SEGMENTS);
        Self::with_params(segments * segment_size, segment_size, hp, policy)
    }
}

impl SimCache for PelikanSim {
    fn name(&self) -> String {
        self.label.into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        let Some(item) = self.cache.get(key) else {
            return false;
        };
        let deadline = match (item.optional(), item.value()) {
            (Some(o), _) if o.len() == 4 => u32::from_le_bytes(o.try_into().unwrap()),
            (_, pelikan_segcache::Value::Bytes(v)) if v.len() >= 4 => {
                u32::from_le_bytes(v[..4].try_into().unwrap())
            }
            _ => u32::MAX,
        };
        drop(item);
        if (deadline as u64) > now_secs {
            true
        } else {
            self.cache.delete(key);
            false
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        let deadline = expire_at(ttl_secs, now_secs).min(u32::MAX as u64) as u32;
        let ttl = Duration::from_secs(ttl_secs.unwrap_or(0) as u64);
        self.scratch.clear();
        self.scratch.resize(value_len, 0);
        let tag = deadline.to_le_bytes();
        let optional = if value_len >= 4 {
            self.scratch[..4].copy_from_slice(&tag);
            None
        } else {
            Some(&tag[..])
        };
        let _ = self.cache.insert(key, &self.scratch[..], optional, ttl);
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.delete(key);
    }
    fn mapped_bytes(&self) -> usize {
        self.heap
    }
}

// ------------------------------------------------- reference policies

const NIL: usize = usize::MAX;

struct Node {
    key: Box<[u8]>,
    size: u64,
    prev: usize,
    next: usize,
}

/// LRU that counts only object bytes (`value_len`), for checking the replay
/// against reference miss counts. Insertion rule: evict from the LRU end
/// until the object fits; an object larger than the cache is not inserted.
pub struct ObjLru {
    capacity: u64,
    used: u64,
    map: std::collections::HashMap<Box<[u8]>, usize>,
    nodes: Vec<Node>,
    free: Vec<usize>,
    head: usize, // most recent
    tail: usize, // least recent
}

impl ObjLru {
    pub fn new(capacity: u64) -> ObjLru {
        ObjLru {
            capacity,
            used: 0,
            map: Default::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.nodes[i].prev, self.nodes[i].next);
        if p == NIL {
            self.head = n;
        } else {
            self.nodes[p].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.nodes[n].prev = p;
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn remove_index(&mut self, i: usize) {
        self.unlink(i);
        let key = std::mem::take(&mut self.nodes[i].key);
        self.map.remove(&key);
        self.used -= self.nodes[i].size;
        self.free.push(i);
    }

    /// Objects currently cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Object bytes currently cached.
    pub fn used(&self) -> u64 {
        self.used
    }
}

impl SimCache for ObjLru {
    fn name(&self) -> String {
        "obj-lru".into()
    }
    fn get(&mut self, key: &[u8], _now_secs: u64) -> bool {
        match self.map.get(key) {
            Some(&i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, _ttl: Option<u32>, _now: u64) {
        self.delete(key);
        let size = value_len as u64;
        if size > self.capacity {
            return;
        }
        while self.used + size > self.capacity {
            let t = self.tail;
            self.remove_index(t);
        }
        let node = Node {
            key: key.into(),
            size,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.map.insert(key.into(), i);
        self.push_front(i);
        self.used += size;
    }
    fn delete(&mut self, key: &[u8]) {
        if let Some(&i) = self.map.get(key) {
            self.remove_index(i);
        }
    }
}

/// FIFO that counts only object bytes; same insertion rule as [`ObjLru`],
/// hits do not reorder.
pub struct ObjFifo {
    capacity: u64,
    used: u64,
    /// key -> (size, generation of its queue entry)
    map: std::collections::HashMap<Box<[u8]>, (u64, u64)>,
    queue: std::collections::VecDeque<(Box<[u8]>, u64)>,
    generation: u64,
}

impl ObjFifo {
    pub fn new(capacity: u64) -> ObjFifo {
        ObjFifo {
            capacity,
            used: 0,
            map: Default::default(),
            queue: Default::default(),
            generation: 0,
        }
    }
}

impl SimCache for ObjFifo {
    fn name(&self) -> String {
        "obj-fifo".into()
    }
    fn get(&mut self, key: &[u8], _now_secs: u64) -> bool {
        self.map.contains_key(key)
    }
    fn set(&mut self, key: &[u8], value_len: usize, _ttl: Option<u32>, _now: u64) {
        self.delete(key);
        let size = value_len as u64;
        if size > self.capacity {
            return;
        }
        while self.used + size > self.capacity {
            let (k, g) = self.queue.pop_front().expect("used > 0 implies entries");
            if let Some(&(s, live)) = self.map.get(&k) {
                if live == g {
                    self.map.remove(&k);
                    self.used -= s;
                }
            }
        }
        self.generation += 1;
        self.map.insert(key.into(), (size, self.generation));
        self.queue.push_back((key.into(), self.generation));
        self.used += size;
    }
    fn delete(&mut self, key: &[u8]) {
        if let Some((s, _)) = self.map.remove(key) {
            self.used -= s;
        }
    }
}

// ------------------------------------------------------- calibration

/// Caches the CLI knows how to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Segcache,
    PelikanMerge,
    PelikanS3Fifo,
    Moka,
    QuickCache,
    Lru,
}

impl Kind {
    /// segcache or Pelikan's crate: a heap of whole segments sized for the
    /// budget, not a peer sized by per-item weights ([`calibrate`]).
    pub fn is_segment_cache(self) -> bool {
        matches!(
            self,
            Kind::Segcache | Kind::PelikanMerge | Kind::PelikanS3Fifo
        )
    }

    /// Every cache, segcache first (the baseline for ratios).
    pub const ALL: [Kind; 6] = [
        Kind::Segcache,
        Kind::PelikanMerge,
        Kind::PelikanS3Fifo,
        Kind::QuickCache,
        Kind::Moka,
        Kind::Lru,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Segcache => "segcache",
            Kind::PelikanMerge => "pelikan-merge",
            Kind::PelikanS3Fifo => "pelikan-s3fifo",
            Kind::Moka => "moka",
            Kind::QuickCache => "quick_cache",
            Kind::Lru => "lru",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.label() == s)
    }
}

/// The items used to calibrate: `key_len`-byte keys (a counter padded) and
/// `value_len`-byte values.
#[derive(Debug, Clone, Copy)]
pub struct Typical {
    pub key_len: usize,
    pub value_len: usize,
}

fn typical_key(i: u64, key_len: usize, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&(i ^ 0xC0FF_EE00_0000_0000).to_le_bytes());
    buf.resize(key_len.max(8), b't');
}

fn build_peer(kind: Kind, sizing: Sizing, typ: Typical) -> Box<dyn SimCache> {
    let typical_weight = sizing.weight(typ.key_len, typ.value_len);
    match kind {
        Kind::Moka => Box::new(MokaSim::new(sizing)),
        Kind::QuickCache => Box::new(QuickSim::new(sizing, typical_weight)),
        Kind::Lru => Box::new(LruSim::new(sizing)),
        Kind::Segcache | Kind::PelikanMerge | Kind::PelikanS3Fifo => {
            unreachable!("segment caches are not weight-sized")
        }
    }
}

/// Insert `n` typical items (no TTL) and return live bytes afterwards.
fn fill(cache: &mut dyn SimCache, n: u64, typ: Typical) -> usize {
    let mut key = Vec::new();
    for i in 0..n {
        typical_key(i, typ.key_len, &mut key);
        cache.set(&key, typ.value_len, None, 0);
    }
    cache.settle();
    alloc::live_bytes()
}

/// Work out a peer's [`Sizing`] for `budget` real bytes with the counting
/// allocator. Without it (e.g. in unit tests) the weights are plain
/// key+value bytes and the capacity is the budget.
pub fn calibrate(kind: Kind, budget: usize, typ: Typical) -> Sizing {
    let item = (typ.key_len.max(8) + typ.value_len) as u64;
    let naive = Sizing {
        per_item: 0,
        capacity: budget as u64,
    };
    if !alloc::installed() || kind.is_segment_cache() {
        return naive;
    }
    // Step 1: per-item and fixed overhead at roughly the final item count.
    let n = (budget as u64 / item).clamp(64, 2_000_000);
    let unbounded = Sizing {
        per_item: 0,
        capacity: u64::MAX / 4,
    };
    let base = alloc::live_bytes();
    let mut c = build_peer(kind, unbounded, typ);
    let empty = alloc::live_bytes().saturating_sub(base);
    let full = fill(c.as_mut(), n, typ).saturating_sub(base);
    drop(c);
    let per_item = ((full.saturating_sub(empty)) as f64 / n as f64 - item as f64).max(0.0);
    let mut sizing = Sizing {
        per_item: per_item.round() as usize,
        capacity: budget.saturating_sub(empty) as u64,
    };
    // Step 2: fill a budget-sized instance well past capacity (the churn
    // matters: hash tables that never shrink grow under insert/evict
    // traffic) and scale the capacity by budget/real; repeat while off by
    // more than 2%, since some structures (e.g. moka's frequency sketch)
    // scale with the configured capacity.
    for _ in 0..3 {
        let per = sizing.weight(typ.key_len.max(8), typ.value_len);
        let over = (sizing.capacity / per.max(1)) * 3 + 16;
        let base = alloc::live_bytes();
        let mut c = build_peer(kind, sizing, typ);
        let real = fill(c.as_mut(), over, typ).saturating_sub(base);
        drop(c);
        if real == 0 {
            break;
        }
        let scale = budget as f64 / real as f64;
        sizing.capacity = (sizing.capacity as f64 * scale) as u64;
        if (scale - 1.0).abs() < 0.02 {
            break;
        }
    }
    sizing
}

/// A replay that ends holding more than this share of the budget is run
/// again with a smaller cache (see [`within_budget`]).
pub const OVER_BUDGET: f64 = 1.005;
/// A re-run that ends at or above this share of the budget is close
/// enough (see [`within_budget`]).
pub const NEAR_BUDGET: f64 = 0.99;
/// Most replays [`within_budget`] runs.
pub const MEASURE_RUNS: usize = 5;

/// Runs `replay(build_budget)` (build a cache for that many bytes, replay,
/// report) until the cache ends the replay within the budget (and, with
/// `grow`, close to it), and returns that run.
///
/// Equal real memory is checked where it counts, at the end of the
/// replay: a peer is sized by filling it with typical items
/// ([`calibrate`]), but the replay's own keys, sizes and churn can leave it
/// holding more (quick_cache 1.02x the budget with 512-byte blocks, up to
/// 1.25x on the Twitter-like clusters, Pelikan's S3Fifo up to 2x). A run
/// that ends above [`OVER_BUDGET`] x `budget` is followed by one built for
/// `build x budget / end bytes`; since a cache's bytes jump where its
/// tables double, then by bisection between the largest build that ended
/// within the budget and the smallest that did not, until a run ends
/// within [`NEAR_BUDGET`]..[`OVER_BUDGET`] of the budget or
/// [`MEASURE_RUNS`] replays ran. With `grow`, a run that ends below
/// [`NEAR_BUDGET`] is followed the same way by a larger build (a peer whose
/// calibration left it short: moka ended at 0.33x the budget on the
/// block trace at 1 MiB); without it (segment caches, whose unused room
/// is their own cost) a first run within the budget is final. Returns
/// the largest build's run that ended within the budget (the last run if
/// none did). A run that counted no bytes (no counting allocator) is
/// returned as it is. segcache counts its own bytes and never ends above
/// the budget.
pub fn within_budget(
    budget: usize,
    grow: bool,
    mut replay: impl FnMut(usize) -> Result<ReplayStats, String>,
) -> Result<ReplayStats, String> {
    let limit = (budget as f64 * OVER_BUDGET) as usize;
    let near = (budget as f64 * NEAR_BUDGET) as usize;
    let mut build_for = budget;
    // The largest build that ended within the limit (with its run), and
    // the smallest build that ended above it.
    let mut under: Option<(usize, ReplayStats)> = None;
    let mut over: Option<usize> = None;
    for run in 1..=MEASURE_RUNS {
        let stats = replay(build_for)?;
        let end = stats.end_bytes;
        if end == 0 || (run == 1 && (near..=limit).contains(&end)) {
            return Ok(stats);
        }
        if run == 1 && end < near && !grow {
            return Ok(stats);
        }
        if end <= limit {
            let close = end >= near;
            if under.as_ref().is_none_or(|(b, _)| build_for > *b) {
                under = Some((build_for, stats));
            }
            if close {
                break;
            }
        } else {
            over = Some(over.map_or(build_for, |o| o.min(build_for)));
            if run == MEASURE_RUNS && under.is_none() {
                return Ok(stats);
            }
        }
        build_for = match (&under, over) {
            (Some((lo, _)), Some(hi)) => (lo + hi) / 2,
            _ => (build_for as f64 * budget as f64 / end as f64) as usize,
        };
    }
    Ok(under.expect("a run ended within the budget").1)
}

/// The largest segment the bench gives a segment cache ([`segment_size_for`]
/// caps its choice here).
pub const SEGMENT_SIZE: usize = 1 << 20;

/// How the bench lays out segcache (and Pelikan's crate): segments per
/// heap ([`segment_size_for`]) and shards.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// `None`: the crate's default segment size.
    pub segments: Option<usize>,
    /// Independent caches with a share of the budget each ([`ShardedSim`]).
    pub shards: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            segments: None,
            shards: 1,
        }
    }
}

/// `shards` caches of a kind, each with its share of the budget; a key
/// goes to one by its hash, as in `segcache::ShardedCache`.
pub struct ShardedSim {
    shards: Vec<Box<dyn SimCache>>,
}

impl ShardedSim {
    fn shard(&mut self, key: &[u8]) -> &mut Box<dyn SimCache> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        let n = self.shards.len() as u64;
        &mut self.shards[(h.finish() % n) as usize]
    }
}

impl SimCache for ShardedSim {
    fn name(&self) -> String {
        self.shards[0].name()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        self.shard(key).get(key, now_secs)
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.shard(key).set(key, value_len, ttl_secs, now_secs)
    }
    fn delete(&mut self, key: &[u8]) {
        self.shard(key).delete(key)
    }
    fn settle(&mut self) {
        self.shards.iter_mut().for_each(|s| s.settle());
    }
    fn mapped_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.mapped_bytes()).sum()
    }
}

/// Build any cache for an equal real-memory `budget`; the segment caches
/// are laid out as `layout` says (other kinds ignore it).
pub fn build(
    kind: Kind,
    budget: usize,
    typ: Typical,
    layout: Layout,
) -> Result<Box<dyn SimCache>, String> {
    if !kind.is_segment_cache() {
        return Ok(build_peer(kind, calibrate(kind, budget, typ), typ));
    }
    let seg = segment_size_for(budget, SEGMENT_SIZE, typ, layout.segments);
    if layout.shards > 1 {
        let shards = (0..layout.shards)
            .map(|_| build_segment_cache(kind, budget / layout.shards, seg, typ))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Box::new(ShardedSim { shards }));
    }
    build_segment_cache(kind, budget, seg, typ)
}

/// segcache or Pelikan's crate for `budget`, in segments of `seg` bytes.
fn build_segment_cache(
    kind: Kind,
    budget: usize,
    seg: usize,
    typ: Typical,
) -> Result<Box<dyn SimCache>, String> {
    match kind {
        #[cfg(feature = "segcache-adapter")]
        Kind::Segcache => Ok(Box::new(SegcacheSim::for_budget(budget, seg, typ)?)),
        #[cfg(not(feature = "segcache-adapter"))]
        Kind::Segcache => Err("built without the segcache-adapter feature".into()),
        Kind::PelikanMerge => Ok(Box::new(PelikanSim::for_budget(
            budget,
            seg,
            typ,
            PelikanPolicy::Merge,
        )?)),
        Kind::PelikanS3Fifo => Ok(Box::new(PelikanSim::for_budget(
            budget,
            seg,
            typ,
            PelikanPolicy::S3Fifo,
        )?)),
        other => Err(format!("{other:?} is not a segment cache")),
    }
}

// ------------------------------------------------------------- replay

/// Outcome of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayStats {
    pub cache: String,
    /// Requests replayed (all operations).
    pub requests: u64,
    /// Lookups counted (the miss-ratio denominator: a replay may leave its
    /// first requests uncounted).
    pub reads: u64,
    pub misses: u64,
    /// Live allocated bytes attributable to the cache at the end (0 when the
    /// counting allocator is not installed).
    pub end_bytes: usize,
    pub wall: Duration,
}

impl ReplayStats {
    pub fn miss_ratio(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.misses as f64 / self.reads as f64
        }
    }
}

/// Replay an `oracleGeneral` trace: every request is a lookup of the 8-byte
/// object id; a miss inserts the object (`obj_size` value bytes, no TTL).
/// The first `uncounted` requests (a prefix that fills the cache, see
/// `blocks::cold_prefix`) are replayed alike but not counted.
/// `base_bytes` is the live-bytes reading taken before the cache was built.
pub fn replay_trace(
    cache: &mut dyn SimCache,
    trace: &[Record],
    uncounted: usize,
    base_bytes: usize,
) -> ReplayStats {
    let start = Instant::now();
    let mut misses = 0;
    for (i, r) in trace.iter().enumerate() {
        let key = r.key();
        let now = r.time as u64;
        if !cache.get(&key, now) {
            misses += (i >= uncounted) as u64;
            cache.set(&key, r.obj_size as usize, None, now);
        }
    }
    let counted = trace.len().saturating_sub(uncounted) as u64;
    let wall = start.elapsed();
    cache.settle();
    ReplayStats {
        cache: cache.name(),
        requests: trace.len() as u64,
        reads: counted,
        misses,
        end_bytes: alloc::live_bytes().saturating_sub(base_bytes) + cache.mapped_bytes(),
        wall,
    }
}

/// Replay a synthetic Twitter stream as a look-aside cache: reads that miss
/// are followed by a set of the key; writes set; deletes delete. Reads
/// among the first `uncounted` requests are replayed alike but not counted.
pub fn replay_workload(
    cache: &mut dyn SimCache,
    workload: Workload,
    uncounted: u64,
    base_bytes: usize,
) -> ReplayStats {
    let start = Instant::now();
    let (mut requests, mut reads, mut misses) = (0, 0, 0);
    let mut key = Vec::with_capacity(256);
    for r in workload {
        requests += 1;
        r.write_key(&mut key);
        let now = r.now_secs();
        let ttl = Some(r.ttl_secs);
        let counted = requests > uncounted;
        match r.op.action() {
            Action::Read => {
                reads += counted as u64;
                if !cache.get(&key, now) {
                    misses += counted as u64;
                    cache.set(&key, r.value_len as usize, ttl, now);
                }
            }
            Action::Write => cache.set(&key, r.value_len as usize, ttl, now),
            Action::Delete => cache.delete(&key),
        }
    }
    let wall = start.elapsed();
    cache.settle();
    ReplayStats {
        cache: cache.name(),
        requests,
        reads,
        misses,
        end_bytes: alloc::live_bytes().saturating_sub(base_bytes) + cache.mapped_bytes(),
        wall,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::read_cloudphysics;

    const MIB: u64 = 1 << 20;

    fn misses(mk: impl Fn(u64) -> Box<dyn SimCache>, mib: u64, trace: &[Record]) -> u64 {
        let mut c = mk(mib * MIB);
        replay_trace(c.as_mut(), trace, 0, 0).misses
    }

    /// A replay whose cache ends holding `end(build budget)` bytes; its
    /// `misses` field records the build budget, to tell runs apart.
    fn fake_replay<'a>(
        end: impl Fn(usize) -> usize + 'a,
        builds: &'a mut Vec<usize>,
    ) -> impl FnMut(usize) -> Result<ReplayStats, String> + 'a {
        move |build| {
            builds.push(build);
            Ok(ReplayStats {
                cache: "fake".into(),
                requests: 1,
                reads: 1,
                misses: build as u64,
                end_bytes: end(build),
                wall: Duration::ZERO,
            })
        }
    }

    #[test]
    fn a_cache_within_the_budget_is_replayed_once() {
        let mut builds = Vec::new();
        let s = within_budget(1000, true, fake_replay(|b| b * 995 / 1000, &mut builds)).unwrap();
        assert_eq!((builds, s.end_bytes), (vec![1000], 995));
        let mut builds = Vec::new();
        let s = within_budget(1000, false, fake_replay(|b| b * 8 / 10, &mut builds)).unwrap();
        assert_eq!((builds, s.end_bytes), (vec![1000], 800), "not grown");
        let mut builds = Vec::new();
        let s = within_budget(1000, true, fake_replay(|_| 0, &mut builds)).unwrap();
        assert_eq!((builds, s.end_bytes), (vec![1000], 0), "no allocator");
    }

    #[test]
    fn a_cache_over_the_budget_is_rebuilt_smaller_until_it_fits() {
        // Linear: one rebuild for budget / 1.25 lands on the budget.
        let mut builds = Vec::new();
        let s = within_budget(1000, false, fake_replay(|b| b * 5 / 4, &mut builds)).unwrap();
        assert_eq!(builds, vec![1000, 800]);
        assert_eq!(s.end_bytes, 1000);
        // A table that doubles past a build of 900: the first rebuild
        // undershoots (869), bisection climbs back towards the step, and
        // the largest build that ended within the budget is reported.
        let step = |b: usize| b + if b > 900 { 300 } else { 100 };
        let mut builds = Vec::new();
        let s = within_budget(1000, false, fake_replay(step, &mut builds)).unwrap();
        assert_eq!(builds, vec![1000, 769, 884, 942, 913]);
        assert_eq!((s.misses, s.end_bytes), (884, 984));
        assert!(s.end_bytes <= (1000.0 * OVER_BUDGET) as usize);
    }

    #[test]
    fn a_peer_left_short_is_rebuilt_larger_but_never_over() {
        // Linear: a cache at 0.5x is built for twice the budget.
        let mut builds = Vec::new();
        let s = within_budget(1000, true, fake_replay(|b| b / 2, &mut builds)).unwrap();
        assert_eq!((builds, s.end_bytes), (vec![1000, 2000], 1000));
        // A table that doubles past a build of 1100: growing overshoots,
        // bisection comes back under the limit.
        let step = |b: usize| b * 8 / 10 + if b > 1100 { 400 } else { 0 };
        let mut builds = Vec::new();
        let s = within_budget(1000, true, fake_replay(step, &mut builds)).unwrap();
        assert_eq!(builds, vec![1000, 1250, 1125, 1062, 1093]);
        assert_eq!((s.misses, s.end_bytes), (1093, 874));
    }

    #[test]
    fn a_cache_that_never_fits_reports_its_last_run() {
        let mut builds = Vec::new();
        let s = within_budget(1000, true, fake_replay(|_| 2000, &mut builds)).unwrap();
        assert_eq!(builds.len(), MEASURE_RUNS);
        assert_eq!(s.misses as usize, *builds.last().unwrap());
        let mut calls = 0;
        let err = within_budget(1000, true, |_| {
            calls += 1;
            Err::<ReplayStats, _>("build failed".to_string())
        });
        assert_eq!((err.unwrap_err().as_str(), calls), ("build failed", 1));
    }

    #[test]
    fn object_lru_reproduces_reference_miss_counts() {
        let t = read_cloudphysics().expect("cloudPhysics trace");
        let got: Vec<u64> = [128, 256, 512, 1024]
            .iter()
            .map(|&m| misses(|b| Box::new(ObjLru::new(b)), m, &t))
            .collect();
        assert_eq!(got, vec![93374, 89783, 81722, 71704]);
    }

    #[test]
    fn object_fifo_reproduces_reference_miss_counts() {
        let t = read_cloudphysics().expect("cloudPhysics trace");
        let got: Vec<u64> = [128, 256, 512, 1024]
            .iter()
            .map(|&m| misses(|b| Box::new(ObjFifo::new(b)), m, &t))
            .collect();
        assert_eq!(got, vec![93403, 89386, 84025, 72140]);
    }

    #[test]
    fn reference_policies_evict_in_order() {
        let mut lru = ObjLru::new(30);
        let mut fifo = ObjFifo::new(30);
        for c in [&mut lru as &mut dyn SimCache, &mut fifo] {
            c.set(b"a", 10, None, 0);
            c.set(b"b", 10, None, 0);
            c.set(b"c", 10, None, 0);
            assert!(c.get(b"a", 0)); // LRU: a becomes most recent
            c.set(b"d", 10, None, 0); // evicts b (LRU) / a (FIFO)
            c.set(b"huge", 31, None, 0); // larger than the cache: ignored
            assert!(!c.get(b"huge", 0));
            assert!(c.get(b"c", 0) && c.get(b"d", 0));
        }
        assert!(lru.get(b"a", 0) && !lru.get(b"b", 0));
        assert!(!fifo.get(b"a", 0) && fifo.get(b"b", 0));
        assert_eq!(lru.used(), 30);
        assert_eq!(lru.len(), 3);
    }

    #[test]
    fn an_uncounted_prefix_is_replayed_but_not_counted() {
        let rec = |id: u64| Record {
            time: 0,
            obj_id: id,
            obj_size: 10,
            next_access_vtime: -1,
        };
        // a b | a c a: the prefix inserts a and b; then a hits, c misses,
        // a hits again.
        let t = [rec(1), rec(2), rec(1), rec(3), rec(1)];
        let mut lru = ObjLru::new(100);
        let s = replay_trace(&mut lru, &t, 2, 0);
        assert_eq!((s.requests, s.reads, s.misses), (5, 3, 1));
        let mut cold = ObjLru::new(100);
        let s = replay_trace(&mut cold, &t[2..], 0, 0);
        assert_eq!(
            (s.reads, s.misses),
            (3, 2),
            "without the prefix a misses first"
        );
    }

    #[test]
    fn a_stream_counts_only_the_reads_after_its_uncounted_requests() {
        let c = crate::twitter::load_cluster(52).unwrap();
        let cfg = crate::twitter::WorkloadConfig {
            requests: 20_000,
            ..Default::default()
        };
        let w = Workload::new(c, cfg).unwrap();
        let first_reads = w
            .clone()
            .take(8_000)
            .filter(|r| r.op.action() == Action::Read)
            .count() as u64;
        let mut all = ObjLru::new(1 << 20);
        let whole = replay_workload(&mut all, w.clone(), 0, 0);
        let mut later = ObjLru::new(1 << 20);
        let tail = replay_workload(&mut later, w, 8_000, 0);
        assert_eq!(tail.requests, whole.requests, "every request is replayed");
        assert_eq!(tail.reads, whole.reads - first_reads);
        assert!(first_reads > 0 && tail.misses > 0);
        // The same cache state at every step: the misses counted are the
        // whole replay's less those among the first requests, and those
        // include the cold misses of the start.
        assert!(tail.misses < whole.misses);
        assert_eq!(all.used(), later.used(), "the same replay either way");
    }

    fn peers(capacity: u64) -> Vec<Box<dyn SimCache>> {
        let s = Sizing {
            per_item: 0,
            capacity,
        };
        vec![
            Box::new(MokaSim::new(s)),
            Box::new(QuickSim::new(s, 100)),
            Box::new(LruSim::new(s)),
        ]
    }

    #[test]
    fn peers_follow_simulated_ttl_and_delete() {
        for mut c in peers(1 << 20) {
            c.set(b"short", 10, Some(5), 100);
            c.set(b"forever", 10, None, 100);
            assert!(c.get(b"short", 104), "{}", c.name());
            assert!(!c.get(b"short", 105), "{} expired at 105", c.name());
            assert!(c.get(b"forever", 1_000_000), "{}", c.name());
            c.delete(b"forever");
            assert!(!c.get(b"forever", 1_000_000), "{}", c.name());
        }
    }

    #[cfg(feature = "segcache-adapter")]
    #[test]
    fn segcache_adapter_follows_simulated_ttl_and_budget() {
        let budget = 16 << 20;
        let typ = Typical {
            key_len: 16,
            value_len: 100,
        };
        let seg = segment_size_for(budget, SEGMENT_SIZE, typ, None);
        let mut c = SegcacheSim::for_budget(budget, seg, typ).unwrap();
        let total = c.reported_bytes();
        assert!(
            total <= budget && total > budget - (1 << 20) - (64 << 10),
            "{total} vs {budget}"
        );
        c.set(b"short", 10, Some(5), 100);
        c.set(b"forever", 10, None, 100);
        assert!(c.get(b"short", 104));
        assert!(!c.get(b"short", 105));
        assert!(c.get(b"forever", 1_000_000));
        c.delete(b"forever");
        assert!(!c.get(b"forever", 1_000_000));
    }

    #[test]
    fn peers_stay_within_weight_budget() {
        // 100 items of 1000+8 bytes into a 50_400-byte cache: at most 50 fit.
        for mut c in peers(50_400) {
            for i in 0u64..100 {
                c.set(&i.to_le_bytes(), 1000, None, 0);
            }
            c.settle();
            let held = (0u64..100).filter(|i| c.get(&i.to_le_bytes(), 0)).count();
            assert!((20..=50).contains(&held), "{} holds {held}", c.name());
        }
    }
}

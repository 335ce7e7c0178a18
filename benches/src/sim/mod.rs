//! Miss-ratio simulation: the [`SimCache`] adapter trait, one adapter per
//! cache under test, equal-memory-budget calibration, and the replay loops
//! over the CloudPhysics trace and the synthetic Twitter workloads.
//!
//! Caches:
//! * [`SegcacheSim`] — the `segcache` crate on a [`segcache::ManualClock`]
//!   driven by simulated time.
//! * [`PelikanSim`] — Pelikan's crate (crates.io `segcache` 0.4.4) in its
//!   Merge or S3Fifo policy.
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
//!
//! Files: this one holds the trait and what every adapter shares (the
//! stored value, the byte weight); `ours.rs`, `pelikan.rs`, `peers.rs`
//! and `reference.rs` the adapters; `calibrate.rs` the weighted peers'
//! sizing and the budget check; `layout.rs` how a replay gets its cache;
//! `replay.rs` the replay loops. No adapter replays, and no replay builds
//! a cache.

mod calibrate;
mod layout;
mod ours;
mod peers;
mod pelikan;
mod reference;
mod replay;
#[cfg(test)]
mod tests;

pub use calibrate::{
    calibrate, within_budget, Kind, Typical, MEASURE_RUNS, NEAR_BUDGET, OVER_BUDGET,
};
pub use layout::{build, segment_size_for, Layout, ShardedSim, SEGMENT_SIZE};
pub use ours::SegcacheSim;
pub use peers::{LruSim, MokaSim, QuickSim};
pub use pelikan::{PelikanPolicy, PelikanSim};
pub use reference::{ObjFifo, ObjLru};
pub use replay::{replay_trace, replay_workload, ReplayStats};

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
pub(crate) fn expire_at(ttl_secs: Option<u32>, now_secs: u64) -> u64 {
    match ttl_secs {
        Some(t) if t > 0 => now_secs.saturating_add(t as u64),
        _ => u64::MAX,
    }
}

/// A stored value: real bytes plus simulated-time expiry.
#[derive(Debug)]
pub struct Val {
    pub(crate) data: Box<[u8]>,
    pub(crate) expire_at: u64,
    pub(crate) ttl_secs: u32,
}

impl Val {
    pub(crate) fn new(value_len: usize, ttl_secs: Option<u32>, now_secs: u64) -> Val {
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
    pub(crate) fn weight(&self, key_len: usize, value_len: usize) -> u64 {
        (key_len + value_len + self.per_item) as u64
    }
}

//! The adapter for this project's `segcache` crate, on a
//! [`segcache::ManualClock`] driven by simulated time, and the segment size
//! the bench gives a segment cache for a budget. Owns how segcache is
//! built for a budget; never replays.

use super::{SimCache, Typical};
use std::time::Duration;

/// `segcache::Segcache` adapter on simulated time.
pub struct SegcacheSim {
    cache: segcache::Segcache,
    clock: segcache::ManualClock,
    label: String,
}

/// A value source for segcache sets: values are all zero bytes and this
/// static buffer is never allocated on the heap.
static ZEROS: [u8; 1 << 20] = [0u8; 1 << 20];

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
    /// Segments of `segment_size` bytes ([`segment_size_for`](super::segment_size_for) gives the
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
        // Item: header (3 bytes, 5 from 256-byte values) + key + value.
        let header = if typ.value_len < 256 { 3 } else { 5 };
        let item = (typ.key_len + typ.value_len + header).max(8);
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

//! The adapter for Pelikan's crate (crates.io `segcache` 0.4.4, renamed
//! `pelikan_segcache`), in its Merge and S3Fifo policies. Owns how it is
//! built for a budget and how the simulated deadline rides in its items;
//! never replays.

use super::{expire_at, SimCache, Typical};
use crate::alloc;
use std::time::Duration;

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
    /// bytes: the same table rule as [`SegcacheSim::for_budget`](super::SegcacheSim::for_budget) (slots for
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

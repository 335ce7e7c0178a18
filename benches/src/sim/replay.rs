//! The replay loops: the block trace and the Twitter-like streams through
//! any [`SimCache`], counting hits, misses and the bytes the cache holds at
//! the end. Never builds a cache.

use super::SimCache;
use crate::alloc;
use crate::trace::Record;
use crate::twitter::{Action, Workload};
use std::time::{Duration, Instant};

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

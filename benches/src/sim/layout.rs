//! How a replay gets its cache: a weighted peer sized by `calibrate.rs`,
//! or a segment cache (segcache, Pelikan's crate) in segments and shards
//! as [`Layout`] says. Never replays.

use super::calibrate::build_peer;
use super::{calibrate, Kind, PelikanPolicy, PelikanSim, SegcacheSim, SimCache, Typical};

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
        Kind::Segcache => Ok(Box::new(SegcacheSim::for_budget(budget, seg, typ)?)),
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

//! Configuration: the [`Builder`] and the [`Eviction`] policy names.
//!
//! Owns every tunable and its validation. A bad value is an
//! [`Error::InvalidConfig`] naming the setting, never a panic. Nothing here
//! allocates the cache's memory until [`Builder::build`] has checked it all.

use crate::cache::RestoreOutcome;
use crate::clock::{Clock, ManualClock};
use crate::hashtable::HashTable;
pub use crate::hashtable::MIN_HASH_POWER;
use crate::hashtable::{MAX_SEGMENTS, MAX_SEGMENT_SIZE, SLOTS, TARGET_LOAD};
use crate::memory::Heap;
use crate::persist;
use crate::segments::Segments;
use crate::ttl::TtlBuckets;
use crate::{Error, Segcache};
use std::path::PathBuf;
use std::str::FromStr;

/// Fewest segments a heap may have: eviction needs room to move.
pub const MIN_SEGMENTS: usize = 3;
/// Smallest segment size in bytes.
pub const MIN_SEGMENT_SIZE: usize = 1024;
/// Largest `hash_power`.
pub const MAX_HASH_POWER: u8 = 30;

/// How the cache makes room when every segment is in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// S3-FIFO on segments, inside TTL buckets (the default). New items go
    /// to *small* (probation) segments; when the small pool is over its
    /// share (5% of the heap at first, adapting between 5% and 50% to
    /// which pool's evicted keys come back), its oldest segments are
    /// evaluated: items read since they were written are packed into main
    /// segments in place, the others are evicted and their keys kept as
    /// ghosts (about 2 bytes each, in [`Stats::admission_bytes`]), as are
    /// the keys of items that expire after proving themselves (read since
    /// their last move, or in a main segment); a key written again while a
    /// ghost is promoted at its next evaluation.
    /// Otherwise up to 8 consecutive main segments are merged: items read
    /// since their last move stay, their access counts halved, and one
    /// segment is freed, unread items filling the room they leave (in a
    /// heap of fewer than 16 segments every segment they do not need is
    /// freed); the rest are evicted. Runs thinned out by deletes and overwrites are
    /// compacted first, evicting nothing. Merges never let an item expire
    /// earlier than its bucket's precision allows: segments of far-apart
    /// deadlines merge into one that keeps each group's deadline (up to
    /// sixteen groups).
    ///
    /// [`Stats::admission_bytes`]: crate::Stats::admission_bytes
    #[default]
    Merge,
    /// Never evict: writes fail with [`Error::OutOfMemory`] when full.
    None,
    /// Evict a random segment.
    Random,
    /// Evict the oldest segment of a random TTL bucket.
    RandomFifo,
    /// Evict the oldest segment.
    Fifo,
    /// Evict the segment closest to expiring.
    Cte,
    /// Evict the segment with the fewest live bytes.
    Util,
}

impl Eviction {
    /// Every policy, in documentation order.
    pub const ALL: [Eviction; 7] = [
        Eviction::Merge,
        Eviction::None,
        Eviction::Random,
        Eviction::RandomFifo,
        Eviction::Fifo,
        Eviction::Cte,
        Eviction::Util,
    ];

    /// The policy's configuration name (`"merge"`, `"random_fifo"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Eviction::Merge => "merge",
            Eviction::None => "none",
            Eviction::Random => "random",
            Eviction::RandomFifo => "random_fifo",
            Eviction::Fifo => "fifo",
            Eviction::Cte => "cte",
            Eviction::Util => "util",
        }
    }
}

impl FromStr for Eviction {
    type Err = Error;

    /// Parses a policy name, case-insensitively (`randomfifo` also works).
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.to_ascii_lowercase();
        let wanted = lower.replace('-', "_");
        Eviction::ALL
            .into_iter()
            .find(|e| e.name() == wanted || e.name().replace('_', "") == wanted)
            .ok_or_else(|| Error::InvalidConfig {
                field: "eviction",
                reason: format!(
                    "unknown policy {s:?}; expected one of merge, none, random, random_fifo, fifo, cte, util"
                ),
            })
    }
}

/// Settings for a [`Segcache`]; start from [`Segcache::builder`].
///
/// ```
/// use segcache::{Eviction, Segcache};
///
/// let cache = Segcache::builder()
///     .heap_size(16 << 20)
///     .segment_size(256 << 10)
///     .hash_power(16)
///     .eviction(Eviction::Merge)
///     .build()?;
/// assert_eq!(cache.stats().heap_bytes, 16 << 20);
///
/// // Bad settings are errors that name the setting.
/// let err = Segcache::builder().segment_size(4 << 20).build().unwrap_err();
/// assert!(err.to_string().contains("segment_size"));
/// # Ok::<(), segcache::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    heap_size: usize,
    segment_size: Option<usize>,
    hash_power: Option<u8>,
    eviction: Eviction,
    clock: Option<ManualClock>,
    datapool: Option<PathBuf>,
    restore: bool,
    prefault: bool,
    populate_ahead: bool,
    on_release: Option<crate::ReleaseFn>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            heap_size: 64 << 20,
            segment_size: None,
            hash_power: None,
            eviction: Eviction::Merge,
            clock: None,
            datapool: None,
            restore: false,
            prefault: false,
            populate_ahead: false,
            on_release: None,
        }
    }
}

impl Builder {
    /// Bytes of item storage (default 64 MiB), rounded down to whole
    /// segments. Item data never exceeds it; the hash table and segment
    /// headers come on top and are reported by [`Segcache::stats`].
    pub fn heap_size(mut self, bytes: usize) -> Self {
        self.heap_size = bytes;
        self
    }

    /// Bytes per segment: a multiple of 8 between 1 KiB and 2 MiB (the
    /// reach of the table's 21-bit offsets). The largest item must fit in
    /// one segment. By default [`default_segment_size`] of the heap: 256
    /// to 512 segments, 16 KiB to 1 MiB each, sized for the whole heap also
    /// for [`build_sharded`](Self::build_sharded), so the largest item does
    /// not depend on the shard count. Set it when items are large: to at
    /// least four typical items, or more than the largest item.
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = Some(bytes);
        self
    }

    /// The hash table starts with `2^hash_power` buckets of seven items
    /// each (3..=30), 64 bytes per bucket. By default it starts sized for
    /// 1 KiB items filling the heap. This is a hint, not a cap: when a
    /// key's neighbourhood of buckets is full while the heap has room for
    /// more items than the table holds, the table grows (incrementally, a
    /// few buckets moved per operation). Only when the heap is full too is
    /// the least-read item of the neighbourhood evicted (or, under
    /// [`Eviction::None`], the write fails with [`Error::HashTableFull`]).
    /// While it grows, the table it replaces lives until it is drained:
    /// for that moment both count (up to 1.9x the new table's bytes, in
    /// [`Stats::hash_table_bytes`](crate::Stats::hash_table_bytes)). A
    /// cache of items much smaller than 1 KiB grows its table three or
    /// four times while it fills; giving `hash_power` for their count
    /// sizes it once.
    pub fn hash_power(mut self, power: u8) -> Self {
        self.hash_power = Some(power);
        self
    }

    /// The eviction policy (default [`Eviction::Merge`]).
    pub fn eviction(mut self, policy: Eviction) -> Self {
        self.eviction = policy;
        self
    }

    /// Keeps segment data in a memory-mapped file at `path` (created or
    /// resized to the heap size) instead of anonymous memory: on tmpfs, a
    /// DAX filesystem or a disk. With [`restore`](Self::restore) and
    /// [`Segcache::save`], the cache survives a restart.
    pub fn datapool(mut self, path: impl Into<PathBuf>) -> Self {
        self.datapool = Some(path.into());
        self
    }

    /// On build, bring back the items of the last graceful shutdown
    /// ([`Segcache::save`]) if the datapool and its metadata are whole and
    /// were made with the same settings; otherwise start empty and say why
    /// in [`Segcache::restore_outcome`]. The metadata is consumed, so a
    /// crash after this start restarts empty rather than from stale data.
    pub fn restore(mut self, restore: bool) -> Self {
        self.restore = restore;
        self
    }

    /// Makes the whole heap resident at build (default off), as
    /// memcached's `-L` and Pelikan's `seg.prefault` do: the first fill of
    /// the cache then pays no page faults (otherwise a write into a fresh
    /// page, or huge page, waits for the kernel), and memory the machine
    /// cannot give is an error here ([`Error::InvalidConfig`] naming
    /// `prefault`) rather than a slowdown later. The process's resident
    /// size is the heap's from the start. With a datapool, the file's pages
    /// are brought in (their contents are kept).
    pub fn prefault(mut self, prefault: bool) -> Self {
        self.prefault = prefault;
        self
    }

    /// Makes the heap's pages resident a little ahead of the writes
    /// (default off): one background thread (`segcache-warm`, shared by
    /// every cache built with this option, gone once their heaps are
    /// resident or dropped) faults in the pages up to 8 MiB past the
    /// furthest segment used so far, so a write that reaches fresh memory
    /// finds it resident instead of waiting for the kernel. The wait it
    /// saves is the long one: the heap is advised to use 2 MiB huge pages,
    /// and the first write into one waits while all of it is zeroed
    /// (0.3 ms to 5 ms measured on a VM, a stall for every request behind
    /// it). Unlike [`prefault`](Self::prefault) the resident size still
    /// grows with use, at most 8 MiB ahead. Linux only (5.14 or later;
    /// elsewhere, or if the kernel refuses, writes fault as without it);
    /// no effect with `prefault` or a datapool.
    pub fn populate_ahead(mut self, populate_ahead: bool) -> Self {
        self.populate_ahead = populate_ahead;
        self
    }

    /// Lets the cache hold [`External`](crate::External) values (see
    /// [`Segcache::set_external`]): `release` is called once for each
    /// one the cache lets go of. Without it, external stores are refused.
    pub fn on_release(mut self, release: crate::ReleaseFn) -> Self {
        self.on_release = Some(release);
        self
    }

    /// Reads time from `clock` instead of the system's monotonic clock.
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    fn invalid(field: &'static str, reason: String) -> Error {
        Error::InvalidConfig { field, reason }
    }

    fn check_hash_power(power: u8) -> Result<u8, Error> {
        if (MIN_HASH_POWER..=MAX_HASH_POWER).contains(&power) {
            Ok(power)
        } else {
            Err(Self::invalid(
                "hash_power",
                format!("{power}; must be from {MIN_HASH_POWER} to {MAX_HASH_POWER}"),
            ))
        }
    }

    fn populate(heap: &mut Heap) -> Result<(), Error> {
        heap.populate().map_err(|e| {
            Self::invalid(
                "prefault",
                format!("cannot make the {} byte heap resident: {e}", heap.len()),
            )
        })
    }

    /// Checks every setting and allocates the cache.
    pub fn build(self) -> Result<Segcache, Error> {
        let release = self.on_release;
        let mut cache = self.build_storage()?;
        cache.externals.release = release;
        Ok(cache)
    }

    /// [`build`](Self::build) but for the release hook.
    fn build_storage(self) -> Result<Segcache, Error> {
        let seg = self
            .segment_size
            .unwrap_or_else(|| default_segment_size(self.heap_size));
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&seg) || seg % 8 != 0 {
            return Err(Self::invalid(
                "segment_size",
                format!(
                    "{seg} bytes; must be a multiple of 8 from {MIN_SEGMENT_SIZE} to {MAX_SEGMENT_SIZE} (the offset field's reach)"
                ),
            ));
        }
        let segments = self.heap_size / seg;
        if segments < MIN_SEGMENTS {
            return Err(Self::invalid(
                "heap_size",
                format!(
                    "{} bytes holds {segments} segments of {seg} bytes; at least {MIN_SEGMENTS} are needed",
                    self.heap_size
                ),
            ));
        }
        if segments > MAX_SEGMENTS {
            return Err(Self::invalid(
                "heap_size",
                format!("{segments} segments; at most {MAX_SEGMENTS} (raise segment_size)"),
            ));
        }
        let homes = match self.hash_power {
            Some(p) => 1usize << Self::check_hash_power(p)?,
            None => default_buckets(segments * seg),
        };
        let clock = match self.clock {
            Some(manual) => Clock::Manual(manual),
            None => Clock::system(),
        };
        let mut table = HashTable::try_new(homes).map_err(|e| Self::invalid("hash_power", e))?;
        let Some(path) = self.datapool else {
            if self.restore {
                return Err(Self::invalid(
                    "restore",
                    "needs a datapool to restore from".into(),
                ));
            }
            let mut heap = Heap::anon(seg * segments).map_err(|e| {
                Self::invalid(
                    "heap_size",
                    format!("cannot map {} bytes: {e}", seg * segments),
                )
            })?;
            if self.prefault {
                Self::populate(&mut heap)?;
            } else if self.populate_ahead {
                heap.populate_ahead();
            }
            let segs = Segments::with_heap(seg, segments, heap);
            return Ok(Segcache::new(segs, table, self.eviction, clock));
        };
        // A save cut short leaves its temporary snapshot: never valid, and
        // its space is better given to the heap.
        persist::remove_leftover_tmp(&path).map_err(|e| {
            Error::Persistence(format!(
                "cannot remove {}: {e}",
                persist::tmp_path(&path).display()
            ))
        })?;
        let mut heap = Heap::file(&path, seg * segments)
            .map_err(|e| Error::Persistence(format!("datapool {}: {e}", path.display())))?;
        if self.prefault {
            Self::populate(&mut heap)?;
        }
        let mut segs = Segments::with_heap(seg, segments, heap);
        let settings = persist::Settings {
            segment_size: seg as u64,
            segments: segments as u64,
        };
        let meta = persist::meta_path(&path);
        let restored = if !self.restore {
            Err(None)
        } else if !meta.exists() {
            Err(Some(format!(
                "no metadata at {} (first start, or the last run did not shut down gracefully)",
                meta.display()
            )))
        } else {
            persist::load(&meta, settings)
                .and_then(|snapshot| snapshot.restore(&mut segs, &mut table))
                .and_then(|parts| match std::fs::remove_file(&meta) {
                    Ok(()) => Ok(parts),
                    Err(e) => {
                        segs.release_all();
                        table.clear();
                        Err(format!("cannot consume {}: {e}", meta.display()))
                    }
                })
                .map_err(Some)
        };
        match restored {
            Ok(parts) => {
                let clock = clock.resume(parts.saved_now, parts.saved_wall);
                let mut cache = Segcache::assemble(
                    segs,
                    table,
                    TtlBuckets::from_buckets(parts.ttl),
                    parts.counters,
                    self.eviction,
                    clock,
                    RestoreOutcome::NotRequested,
                );
                // Items whose deadline passed while the cache was down.
                cache.expire();
                let items = cache.len() as u64;
                cache.set_restore_outcome(RestoreOutcome::Restored { items });
                Ok(cache)
            }
            Err(reason) => {
                // A stale snapshot must never meet a later heap.
                let _ = std::fs::remove_file(&meta);
                let mut cache = Segcache::new(segs, table, self.eviction, clock);
                if let Some(reason) = reason {
                    cache.set_restore_outcome(RestoreOutcome::Fresh { reason });
                }
                Ok(cache)
            }
        }
    }
}

impl Builder {
    /// Builds a [`ShardedCache`](crate::ShardedCache): `shards` independent
    /// caches (a power of two, at most 1024), each with `1/shards` of the
    /// heap and of the hash table (`hash_power` is checked first, then split;
    /// a shard never gets fewer than 2^MIN_HASH_POWER buckets), behind its
    /// own lock. With a datapool,
    /// shard `i` keeps its heap in `<datapool>.shard<i>`.
    pub fn build_sharded(self, shards: usize) -> Result<crate::ShardedCache, Error> {
        if !shards.is_power_of_two() || shards > 1024 {
            return Err(Self::invalid(
                "shards",
                format!("{shards}; must be a power of two from 1 to 1024"),
            ));
        }
        if let Some(power) = self.hash_power {
            Self::check_hash_power(power)?;
        }
        let bits = shards.trailing_zeros() as u8;
        // Segments sized for the whole heap: a shard's items are as large
        // as an unsharded cache's, whatever the shard count
        // (`default_shards` picks one that leaves each shard enough).
        let per_shard = Builder {
            heap_size: self.heap_size / shards,
            segment_size: Some(
                self.segment_size
                    .unwrap_or_else(|| default_segment_size(self.heap_size)),
            ),
            datapool: None,
            hash_power: self
                .hash_power
                .map(|p| p.saturating_sub(bits).max(MIN_HASH_POWER)),
            ..self.clone()
        };
        let caches = (0..shards)
            .map(|i| {
                let mut shard = per_shard.clone();
                if let Some(path) = &self.datapool {
                    let mut name = path.as_os_str().to_owned();
                    name.push(format!(".shard{i}"));
                    shard.datapool = Some(name.into());
                }
                shard.build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| match e {
                Error::InvalidConfig {
                    field: "heap_size",
                    reason,
                } => Self::invalid(
                    "heap_size",
                    format!("per shard ({shards} shards): {reason}"),
                ),
                other => other,
            })?;
        Ok(crate::ShardedCache::from_shards(caches))
    }
}

/// The segment size a heap of `heap` bytes gets when none is set: the
/// largest power of two that cuts it into at least 256 segments, between
/// 16 KiB and 1 MiB. A heap too small for 8 segments of 16 KiB gets the
/// power of two that gives it 8 (at least 4 KiB).
///
/// Why 256: merge eviction and TTL buckets choose among segments, and
/// with fewer the same memory holds fewer hits. On the bench's
/// Twitter-like clusters whose streams span two TTLs, heaps cut into 64
/// to 128 segments missed up to 1.24x as often as with 256 to 512
/// (cluster 7: 0.145 against 0.117, cluster 22: 0.508 against 0.448);
/// 512 to 1024 helped some clusters and cost others (BENCHMARKS.md §1i).
/// Why 16 KiB and 1 MiB: an item must fit in a segment, so a default
/// cache of a few MiB still takes values of several KiB, and 1 MiB holds
/// memcached's largest item.
pub fn default_segment_size(heap: usize) -> usize {
    let size = floor_pow2(heap / DEFAULT_SEGMENTS).clamp(16 << 10, 1 << 20);
    if heap / size >= 8 {
        size
    } else {
        floor_pow2(heap / 8).clamp(4 << 10, 16 << 10)
    }
}

/// The largest power of two at most `n` (1 for 0).
fn floor_pow2(n: usize) -> usize {
    1 << n.max(1).ilog2()
}

/// Segments [`default_segment_size`] cuts a heap into, at least: 256 to
/// 511, fewer where its 16 KiB floor binds (heaps under 4 MiB), more where
/// its 1 MiB cap does (heaps of 512 MiB and up).
pub const DEFAULT_SEGMENTS: usize = 256;

/// A default shard count for a heap of `heap` bytes (for bindings that
/// pick one): `most` rounded down to a power of two, halved while a shard
/// would get fewer than 8 segments of `segment_size`, or, without one,
/// fewer than [`DEFAULT_SEGMENTS`] of the heap's [`default_segment_size`]
/// (so heaps under 512 MiB get one shard, 1 GiB four). Fewer segments per
/// shard cost hits (BENCHMARKS.md §1i), fewer shards lock contention; the
/// largest item does not depend on the count.
pub fn default_shards(heap: usize, segment_size: Option<usize>, most: usize) -> usize {
    let (min_segments, segment) = match segment_size {
        Some(size) => (8, size.max(1)),
        None => (DEFAULT_SEGMENTS, default_segment_size(heap)),
    };
    let mut shards = floor_pow2(most);
    while shards > 1 && heap / shards / segment < min_segments {
        shards /= 2;
    }
    shards
}

/// The starting bucket count (any count, not only a power of two) that puts
/// 1 KiB items filling `heap` at [`TARGET_LOAD`] of the table's seven slots
/// per bucket. Smaller items make the table grow (incrementally, at most
/// doubling per step) to what their count needs; a table sized for them up
/// front (~100-byte items, ten times as many buckets) cost caches of larger
/// items a tenth of their heap in table bytes and, with the table too large
/// for the CPU's caches, a memory miss on every read (Python
/// `Cache(heap_size=...)` 1 KiB get hits at 2x the time).
fn default_buckets(heap: usize) -> usize {
    let buckets = (heap as f64 / (1024.0 * SLOTS as f64 * TARGET_LOAD)).ceil() as usize;
    buckets.clamp(1 << MIN_HASH_POWER, 1 << MAX_HASH_POWER)
}

/// A cache for unit tests: `heap` bytes in segments of `segment` bytes, a
/// table of 2^`hash_power` buckets, `eviction`, on `clock` (shared).
#[cfg(test)]
pub(crate) fn small_cache(
    heap: usize,
    segment: usize,
    hash_power: u8,
    eviction: Eviction,
    clock: &ManualClock,
) -> Segcache {
    Segcache::builder()
        .heap_size(heap)
        .segment_size(segment)
        .hash_power(hash_power)
        .eviction(eviction)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(err: Error) -> &'static str {
        match err {
            Error::InvalidConfig { field, .. } => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn prefault_makes_the_heap_resident_before_the_first_write() {
        use crate::memory::tests::resident_pages;
        let heap = 8 << 20;
        let lazy = Segcache::builder().heap_size(heap).build().unwrap();
        let pages = lazy.segs.heap().len() / 4096;
        assert!(resident_pages(lazy.segs.heap()) < pages / 2);
        let mut eager = Segcache::builder()
            .heap_size(heap)
            .prefault(true)
            .build()
            .unwrap();
        assert_eq!(resident_pages(eager.segs.heap()), pages);
        eager.set("k", "v", 0, None).unwrap();
        assert_eq!(eager.get("k").unwrap().value(), b"v");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pooled = Segcache::builder()
            .heap_size(heap)
            .datapool(&path)
            .prefault(true)
            .build()
            .unwrap();
        assert_eq!(resident_pages(pooled.segs.heap()), pages);
    }

    /// Polls `done` every 10 ms for at most 10 s; whether it held.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn within_seconds(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..1000 {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        done()
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn populate_ahead_keeps_the_pages_past_the_writes_resident() {
        use crate::memory::tests::resident_pages;
        use crate::warm::AHEAD;
        const PAGE: usize = 4096;
        let heap = 64 << 20;
        let mut cache = Segcache::builder()
            .heap_size(heap)
            .populate_ahead(true)
            .build()
            .unwrap();
        let seg = cache.segs.segment_size();
        // Built: nothing written, the first AHEAD bytes come in.
        assert_eq!(cache.segs.heap().used(), Some(0));
        let first = |c: &Segcache| resident_pages(&c.segs.heap()[..AHEAD]);
        assert!(
            within_seconds(|| first(&cache) == AHEAD / PAGE),
            "{} of {} pages",
            first(&cache),
            AHEAD / PAGE
        );
        // Past them (and the huge page a step may round up to), the heap
        // stays as lazy as without the option.
        let far = AHEAD + (4 << 20);
        assert_eq!(resident_pages(&cache.segs.heap()[far..]), 0);

        // Writes reach 24 MiB: the pages up to AHEAD past them follow.
        let value = [7u8; 1000];
        let mut i = 0u64;
        while cache.segs.heap().used().unwrap() < 24 << 20 && i < 100_000 {
            cache.set(i.to_le_bytes(), value, 0, None).unwrap();
            i += 1;
        }
        let used = cache.segs.heap().used().unwrap();
        assert!(
            used >= 24 << 20,
            "writes reach the heap's first {used} bytes"
        );
        assert_eq!(used % seg, 0, "a segment's end");
        let ahead = |c: &Segcache| resident_pages(&c.segs.heap()[used..used + AHEAD]);
        assert!(
            within_seconds(|| ahead(&cache) == AHEAD / PAGE),
            "{} of {} pages",
            ahead(&cache),
            AHEAD / PAGE
        );
        assert_eq!(resident_pages(&cache.segs.heap()[used + far..]), 0);
        assert_eq!(cache.get(0u64.to_le_bytes()).unwrap().value(), value);

        // A dropped cache's heap leaves the thread's list.
        let before = crate::warm::registered();
        assert!(before >= 1);
        drop(cache);
        assert!(within_seconds(|| crate::warm::registered() < before));
        // A prefaulted heap is never handed to it.
        let eager = Segcache::builder()
            .heap_size(8 << 20)
            .prefault(true)
            .populate_ahead(true)
            .build()
            .unwrap();
        assert_eq!(eager.segs.heap().used(), None);
    }

    #[test]
    fn bad_values_name_their_setting() {
        let b = Segcache::builder;
        assert_eq!(
            field(b().segment_size(4 << 20).build().unwrap_err()),
            "segment_size"
        );
        assert_eq!(
            field(b().segment_size(1000).build().unwrap_err()),
            "segment_size"
        );
        assert_eq!(
            field(b().segment_size(4097).build().unwrap_err()),
            "segment_size"
        );
        assert_eq!(
            field(
                b().heap_size(2 << 20)
                    .segment_size(1 << 20)
                    .build()
                    .unwrap_err()
            ),
            "heap_size"
        );
        assert_eq!(field(b().heap_size(0).build().unwrap_err()), "heap_size");
        assert_eq!(field(b().hash_power(0).build().unwrap_err()), "hash_power");
        assert_eq!(field(b().hash_power(2).build().unwrap_err()), "hash_power");
        assert_eq!(field(b().hash_power(31).build().unwrap_err()), "hash_power");
        assert_eq!(
            field(b().hash_power(31).build_sharded(8).unwrap_err()),
            "hash_power"
        );
        assert_eq!(
            field(b().hash_power(2).build_sharded(2).unwrap_err()),
            "hash_power"
        );
        assert_eq!(field("lru".parse::<Eviction>().unwrap_err()), "eviction");
        assert!(b()
            .segment_size(2 << 20)
            .heap_size(24 << 20)
            .build()
            .is_ok());
    }

    #[test]
    fn policy_names_round_trip() {
        for e in Eviction::ALL {
            assert_eq!(e.name().parse::<Eviction>().unwrap(), e);
            assert_eq!(e.name().to_uppercase().parse::<Eviction>().unwrap(), e);
        }
        assert_eq!(
            "randomfifo".parse::<Eviction>().unwrap(),
            Eviction::RandomFifo
        );
        assert_eq!(
            "random-fifo".parse::<Eviction>().unwrap(),
            Eviction::RandomFifo
        );
    }

    #[test]
    fn default_shards_keep_enough_segments_each() {
        // Automatic segment size: 256 segments of the heap's size per shard.
        assert_eq!(default_shards(1 << 20, None, 8), 1);
        assert_eq!(default_shards(64 << 20, None, 64), 1);
        assert_eq!(default_shards(256 << 20, None, 64), 1);
        assert_eq!(default_shards(512 << 20, None, 64), 2);
        assert_eq!(default_shards(1 << 30, None, 64), 4);
        assert_eq!(default_shards(16 << 30, None, 8), 8);
        // A size given: 8 segments per shard; `most` rounds down.
        assert_eq!(default_shards(16 << 20, Some(1 << 20), 8), 2);
        assert_eq!(default_shards(1 << 30, Some(1 << 20), 12), 8);
        assert_eq!(default_shards(8 << 10, Some(1 << 10), 8), 1);
        for heap in [4usize << 20, 8 << 20, 100 << 20, 1 << 30, 3 << 30] {
            let n = default_shards(heap, None, 1024);
            assert!(
                heap / n / default_segment_size(heap) >= DEFAULT_SEGMENTS,
                "{heap}"
            );
        }
    }

    #[test]
    fn default_segment_size_fits_small_heaps() {
        assert_eq!(default_segment_size(64 << 20), 256 << 10);
        assert_eq!(default_segment_size(1 << 30), 1 << 20);
        assert_eq!(default_segment_size(8 << 20), 32 << 10);
        assert_eq!(default_segment_size(1 << 20), 16 << 10);
        assert_eq!(default_segment_size(100_000), 8 << 10);
        assert_eq!(default_segment_size(20_000), 4 << 10);
        // From 4 MiB (256 segments of the smallest size) to 256 MiB (256 of
        // the largest), every heap gets 256 to 511 segments.
        for heap in (4usize << 20..=256 << 20).step_by(3 << 20) {
            let n = heap / default_segment_size(heap);
            assert!(
                (DEFAULT_SEGMENTS..2 * DEFAULT_SEGMENTS).contains(&n),
                "{heap}: {n}"
            );
        }
        // A 1 MiB cache in 8 shards still builds, each shard with 8 segments.
        let c = Segcache::builder()
            .heap_size(1 << 20)
            .build_sharded(8)
            .unwrap();
        assert_eq!(c.stats().heap_bytes, 1 << 20);
        assert_eq!(c.stats().segments_free, 64);
        let c = Segcache::builder().heap_size(1 << 20).build().unwrap();
        assert_eq!(c.stats().segments_free, 64);
        // Shards get the whole heap's segment size (the largest item does
        // not depend on the shard count): 4 x 64 of 256 KiB.
        let c = Segcache::builder()
            .heap_size(64 << 20)
            .build_sharded(4)
            .unwrap();
        assert_eq!(c.stats().segments_free, 256);
        let one = Segcache::builder().heap_size(64 << 20).build().unwrap();
        assert_eq!(c.max_value_len(8), one.max_value_len(8));
    }

    #[test]
    fn default_table_size_follows_the_heap() {
        // 64 MiB of 1 KiB items is 65,536 items: ~10.8k buckets.
        assert_eq!(default_buckets(64 << 20), 10_762);
        assert_eq!(default_buckets(1 << 30), 172_180);
        assert_eq!(default_buckets(4096), 1 << MIN_HASH_POWER);
        let c = Segcache::builder().heap_size(64 << 20).build().unwrap();
        assert_eq!(c.stats().hash_table_bytes, (10_762 + 7) * 64);
    }

    #[test]
    fn default_table_follows_the_items_held() {
        // Bytes of table per item held once `value_len`-byte values (8-byte
        // keys) filled a default 16 MiB cache twice over, and whether the
        // table grew.
        fn table_per_item(value_len: usize) -> (f64, bool) {
            let mut c = Segcache::builder().heap_size(16 << 20).build().unwrap();
            let start = c.stats().hash_table_bytes;
            let value = vec![7u8; value_len];
            let n = 2 * (16 << 20) / (value_len + 13);
            for i in 0..n as u64 {
                c.set(i.to_le_bytes(), &value, 0, None).unwrap();
            }
            let s = c.stats();
            assert!(s.items as usize > n / 3, "{value_len}: {} items", s.items);
            let per_item = s.hash_table_bytes as f64 / s.items as f64;
            (per_item, s.hash_table_bytes > start)
        }
        // 1 KiB values: the table it starts with holds them densely.
        let (kib, grew) = table_per_item(1024);
        assert!(!grew, "1 KiB values fit the starting table");
        assert!(
            kib < 64.0 / (7.0 * 0.80),
            "1 KiB values: {kib:.1} B of table per item"
        );
        // 100-byte values: it grows to as dense a table (~10.6 B per item
        // at 87%), not to a sparser one.
        let (small, grew) = table_per_item(100);
        assert!(grew, "100-byte values outgrow the starting table");
        assert!(
            (64.0 / (7.0 * 0.95)..64.0 / (7.0 * 0.80)).contains(&small),
            "100-byte values: {small:.1} B of table per item"
        );
    }
}

//! [`Stats`] and [`Expired`]: the cache's counters and memory as
//! reported to callers. Plain data; the counting is the cache's.

/// What one call to [`Segcache::expire`](crate::Segcache::expire) freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Segments freed.
    pub segments: usize,
    /// Items those segments still held.
    pub items: usize,
}

impl std::ops::AddAssign for Expired {
    fn add_assign(&mut self, other: Expired) {
        self.segments += other.segments;
        self.items += other.items;
    }
}

/// A snapshot of the cache's counters and memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Items the hash table points at (some may be expired but not yet
    /// reclaimed).
    pub items: u64,
    /// Bytes those items occupy in segments (headers and padding included).
    pub live_bytes: u64,
    /// Segments holding items (or taking writes).
    pub segments_used: u64,
    /// Segments on the free list.
    pub segments_free: u64,
    /// Free segments held back, their pages returned to the kernel, so
    /// that the heap in use plus [`external_bytes`](Self::external_bytes)
    /// stays within the heap's size.
    pub segments_withheld: u64,
    /// Reads that found a live item.
    pub hits: u64,
    /// Reads that found nothing.
    pub misses: u64,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Segments emptied to make room (by eviction or a merge).
    pub evicted_segments: u64,
    /// Items removed because their TTL passed (proactively or on access).
    pub expirations: u64,
    /// Whole segments freed because their deadline passed.
    pub expired_segments: u64,
    /// Merge-eviction passes.
    pub merges: u64,
    /// Bytes of segment storage (the bounded heap).
    pub heap_bytes: u64,
    /// Bytes of the hash table.
    pub hash_table_bytes: u64,
    /// Bytes of segment headers and TTL bucket lists.
    pub segment_header_bytes: u64,
    /// Merge eviction's admission state: ghost fingerprints of keys
    /// recently evicted unread and one pool flag per segment, plus its
    /// merge scratch (the live items of one merge run; allocated when the
    /// cache is built, never grown).
    pub admission_bytes: u64,
    /// Everything above together: all the memory the cache allocated.
    pub total_bytes: u64,
    /// Items whose value is [`External`](crate::External) (kept by the
    /// cache's owner, not in the heap).
    pub external_items: u64,
    /// Their weights' sum: bytes charged to the heap for them.
    pub external_bytes: u64,
}

impl std::ops::AddAssign<&Stats> for Stats {
    /// Sums two snapshots (the shards of a sharded cache).
    fn add_assign(&mut self, o: &Stats) {
        self.items += o.items;
        self.live_bytes += o.live_bytes;
        self.segments_used += o.segments_used;
        self.segments_free += o.segments_free;
        self.segments_withheld += o.segments_withheld;
        self.hits += o.hits;
        self.misses += o.misses;
        self.evictions += o.evictions;
        self.evicted_segments += o.evicted_segments;
        self.expirations += o.expirations;
        self.expired_segments += o.expired_segments;
        self.merges += o.merges;
        self.heap_bytes += o.heap_bytes;
        self.hash_table_bytes += o.hash_table_bytes;
        self.segment_header_bytes += o.segment_header_bytes;
        self.admission_bytes += o.admission_bytes;
        self.total_bytes += o.total_bytes;
        self.external_items += o.external_items;
        self.external_bytes += o.external_bytes;
    }
}

/// The cache's counters, in the order they are written: the read path's
/// first, then the write path's (laid out as declared, see [`Segcache`]'s
/// layout note).
///
/// [`Segcache`]: crate::Segcache
#[derive(Default)]
#[repr(C)]
pub(crate) struct Counters {
    pub hits: u64,
    pub misses: u64,
    pub items: u64,
    pub live_bytes: u64,
    pub evictions: u64,
    /// Segments emptied to make room (by eviction or a merge).
    pub evicted_segments: u64,
    pub expirations: u64,
    /// Whole segments freed because their deadline passed.
    pub expired_segments: u64,
    pub merges: u64,
}

//! Eviction: choosing which segment(s) to free when none is free.
//!
//! Owns the policies of [`Eviction`]. Merge eviction is S3-FIFO (SOSP'23)
//! at segment granularity, inside TTL buckets. New items are written to
//! *small* (probation) segments; the `admission` module keeps the pool
//! flags and the ghosts. When a segment is needed:
//!
//! 1. *Compaction*: if a run of up to [`MERGE_MAX`] consecutive sealed
//!    small segments, or [`COMPACT_MAX_MAIN`] main ones, of one pool has
//!    been thinned out (deletes, overwrites,
//!    segments sealed young) so that its live items fit in fewer segments
//!    at no more than 7/8 live (15/16 for main runs,
//!    [`MAIN_LIVE_BOUND`]), it is packed in place; nothing is evicted.
//!    A small run's deadlines must also lie within
//!    [`SMALL_COMPACTION_SPREAD`] (about 9.1 h) of each other.
//!    The oldest such run goes first unless another frees segments for
//!    far fewer bytes moved ([`COMPACTION_COST_SLACK`]).
//!    A run of more live items than the merge scratch holds is packed a
//!    window of segments at a time, with the same result.
//! 2. While the small pool is over its share of the segments in use, the
//!    oldest small segments (two consecutive ones of one TTL bucket) are
//!    *evaluated*: items read since they were
//!    written are packed into main segments in place (topping up the main
//!    segment just before them first), the others are evicted and
//!    remembered as ghosts. Nothing read is evicted unless the survivors
//!    fill every segment of the run, and nothing unread is kept: room the
//!    survivors leave is freed (filling it let a segment of unread items
//!    skip probation in every run). If nothing was read, only the run's
//!    oldest segment is evicted. While main holds less than its share, an
//!    unread item is promoted too if it is smaller than half the mean item
//!    held, or if it is at most twice the mean and its key probation
//!    dropped [`DROPS_TO_PROMOTE`](crate::admission::DROPS_TO_PROMOTE)
//!    times lately (`Admission::promotes_unread`). A rewrite counts as [`REWRITE_FREQ`]
//!    accesses (the write path sets them), so a key written again while
//!    cached is promoted and kept by its first main merge.
//! 3. Otherwise the main pool *merges*: from a TTL bucket's cursor, take
//!    up to [`MERGE_MAX`] main segments, keep every item read since its
//!    last move (if they do not fit in one segment fewer than the run, the
//!    most-read ones, by a frequency cutoff), halve the survivors' counts
//!    and evict the rest (CLOCK with decay, as in S3-FIFO's main queue).
//!    In a heap of [`FREE_ONE_SEGMENTS`] segments or more a main merge
//!    frees exactly one segment: the room the read items leave is filled
//!    with unread ones, in order, so main drops only its coldest segment's
//!    worth per merge and an item has a whole lap of the pool to be read.
//!    A run may join segments whose deadlines lie further apart than the
//!    bucket's precision: its outputs keep each item's deadline in
//!    deadline windows (`windows.rs`). A main segment that no run can
//!    hold (it and the next one would need more windows than a segment
//!    keeps, or lack the room for them) is judged alone:
//!    if anything in it was read, the counts halve and the hand moves on;
//!    else it is evicted whole.
//!
//! A segment this close to its deadline ([`NEAR_EXPIRY_SECS`]) is evicted
//! whole instead. The simple policies evict one whole segment. Nothing here
//! decides *when* to evict; the write path calls [`Segcache::evict`] when it
//! needs a segment.

use crate::builder::Eviction;
use crate::hashtable::{self, Location};
use crate::segments::{SegState, NONE};
use crate::segments::{SegmentHeader, Segments};
use crate::ttl::BUCKETS;
use crate::windows::{Window, Windows};
use crate::{Error, Segcache};

/// Most segments one merge pass reads.
pub(crate) const MERGE_MAX: usize = 8;
/// Most main segments one compaction reads. Dead versions of overwritten
/// items spread thinly over main (a rewrite goes to probation, its old
/// copy stays where it was): 8 segments at 87% live cannot pack into 7,
/// 24 at 92% can pack into 23. Runs of 12 at 7/8 live (the fourth round
/// of BENCHMARKS §1f) left cluster 7's main ~90% live; runs of 24 at up
/// to [`MAIN_LIVE_BOUND`] missed less on 9 of the 19 rows of §1 (up to
/// 0.0037) and more on one by 0.0002 (§1g, second look; 32: about the
/// same).
/// Small segments stay at [`MERGE_MAX`]: packing younger probation items
/// into older segments shortens their probation.
pub(crate) const COMPACT_MAX_MAIN: usize = 24;
const _: () = assert!(COMPACT_MAX_MAIN >= MERGE_MAX, "a merge's outputs fit");
/// The scratch's floor: a run of this many full segments of
/// [`SCRATCH_ITEM_BYTES`] items (see [`scratch_floor`]).
const SCRATCH_FLOOR_SEGMENTS: usize = 4;
/// From this many heap segments on, a main merge frees exactly one
/// segment, keeping unread items in the rest of its outputs (before: the
/// run was four segments' worth of live bytes, and every segment its read
/// items did not need was freed, dropping every unread item of the run).
/// Main then evicts only what one segment needs per merge, and a run of
/// [`MERGE_MAX`] drops about its coldest eighth: items get a longer lap of
/// the pool to be read again (CLOCK decays more slowly). On the 19 rows
/// of BENCHMARKS §1 this missed less on 8 (the block trace at 16 and
/// 4 MiB by 0.0020 / 0.0013, Twitter-like cluster 19 at 2 TTL spans by
/// 0.0015, cluster 7 there by 0.0010) and more on one (cluster 7 at real
/// rate, +0.0001), with merges copying about as many bytes (+1.4% on
/// cluster 7). In a heap of a few segments (the block trace at 1 MiB:
/// three) freeing one at a time missed 0.0036 more: there a merge frees
/// what its read items leave.
pub(crate) const FREE_ONE_SEGMENTS: usize = 16;
/// Average item size (bytes) down to which a run of
/// [`SCRATCH_RUN_SEGMENTS`] full segments fits the merge scratch (see
/// [`scratch_items`]).
const SCRATCH_ITEM_BYTES: usize = 64;
/// Full segments of [`SCRATCH_ITEM_BYTES`] items the merge scratch is
/// sized for at most (the main compaction runs of the fourth round of
/// BENCHMARKS §1f). Longer compaction runs of such items
/// ([`COMPACT_MAX_MAIN`]) are read a window at a time; sizing the
/// scratch for them cost 0.04 B per item at a full 1 GiB heap (§4a).
const SCRATCH_RUN_SEGMENTS: usize = 12;
/// Beyond [`scratch_floor`], the merge scratch takes at most this share
/// of the heap (1/512: 0.2 bytes per ~100-byte item held, BENCHMARKS §4a).
const SCRATCH_HEAP_SHARE: usize = 512;
/// Whatever the share, the scratch holds a run of
/// [`SCRATCH_FLOOR_SEGMENTS`] full segments of [`SCRATCH_ITEM_BYTES`] items, unless
/// that is more than 1/[`SCRATCH_FLOOR_SHARE`] of the heap (a heap of a
/// few segments).
const SCRATCH_FLOOR_SHARE: usize = 16;

/// Most live items one compaction of `segments` segments reads (main:
/// [`COMPACT_MAX_MAIN`], small: [`MERGE_MAX`], the scratch:
/// [`SCRATCH_RUN_SEGMENTS`]) of items averaging [`SCRATCH_ITEM_BYTES`]. A
/// run of more than the merge scratch holds is compacted a window of
/// segments at a time.
fn compaction_run_items(segments: usize, segment_size: usize) -> usize {
    segments.max(SCRATCH_RUN_SEGMENTS) * segment_size / SCRATCH_ITEM_BYTES
}

/// The scratch's least capacity, in live items (see [`scratch_items`]).
fn scratch_floor(segments: usize, segment_size: usize) -> usize {
    let run = SCRATCH_FLOOR_SEGMENTS * segment_size / SCRATCH_ITEM_BYTES;
    run.min(segments * segment_size / SCRATCH_FLOOR_SHARE / std::mem::size_of::<LiveItem>())
}

/// Capacity, in live items, of the merge scratch of a heap of `segments`
/// segments of `segment_size` bytes: enough for [`SCRATCH_RUN_SEGMENTS`]
/// segments of items averaging [`SCRATCH_ITEM_BYTES`], but at most
/// 1/[`SCRATCH_HEAP_SHARE`] of the heap's bytes beyond a floor of
/// [`SCRATCH_FLOOR_SEGMENTS`] such segments ([`scratch_floor`]). The scratch is
/// allocated once, when the cache is built, counted in
/// `Stats::admission_bytes`, and never grows (it may shrink once, when
/// runs of the cache's items cannot fill it: `size_drop_counts`): the run of an evaluation or
/// a main merge is cut to what it holds (a run of smaller items is
/// shorter); a compaction reads a longer one a window at a time
/// (`compact_in_windows`). At 1/16 of the heap instead of 1/512, with
/// compactions cut too, cluster 22 of BENCHMARKS §1 (~63-byte items)
/// missed 0.0065 more: its compactions, not its merges, need the long
/// runs. Before this
/// bound, runs of 12 segments of ~71-byte items grew an uncounted 55 KB
/// list that put a 6.2 MiB cache 0.08% over its memory budget
/// (BENCHMARKS §1f); with the bound at 1/16 of the heap and 20-byte
/// records, the scratch cost 1.5 bytes per item held at a full 64 MiB
/// heap of 256 KiB segments, 5.9% of a heap of 64 segments (§4a).
pub(crate) fn scratch_items(segments: usize, segment_size: usize) -> usize {
    let by_run = compaction_run_items(SCRATCH_RUN_SEGMENTS, segment_size);
    let by_heap = segments * segment_size / SCRATCH_HEAP_SHARE / std::mem::size_of::<LiveItem>();
    by_run
        .min(by_heap.max(scratch_floor(segments, segment_size)))
        .max(1)
}

/// A live item of a merge chain, found in pass 1, in one word: its
/// table entry's position (bucket, slot), its size and its access count.
/// Pass 2 reads the item's location from the entry and moves or clears
/// that entry with no second lookup; its chain position is implied
/// (records are in chain order); the hash the ghosts need is recomputed
/// from the key, for evicted items only. 8 bytes each (20 before: hash
/// bits, offset and chain position were stored too), in the cache's fixed
/// merge scratch ([`scratch_items`]).
///
/// Bits: 0..3 the slot (a bucket has seven), 3..10 the access count
/// (0..=127), 10..32 the size (at most a segment, at most 2 MiB), 32..64
/// the bucket (a table position: below 2^31, or the draining table's
/// flag, bit 31, with one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LiveItem(u64);
const _: () = assert!(std::mem::size_of::<LiveItem>() == 8);
const SLOT_BITS: u32 = 3;
const FREQ_BITS: u32 = 7;
const SIZE_BITS: u32 = 22;
const FREQ_SHIFT: u32 = SLOT_BITS;
const SIZE_SHIFT: u32 = FREQ_SHIFT + FREQ_BITS;
const BUCKET_SHIFT: u32 = SIZE_SHIFT + SIZE_BITS;
const _: () = assert!(BUCKET_SHIFT == 32, "the bucket takes the high word");
const _: () = assert!(
    hashtable::MAX_SEGMENT_SIZE < 1 << SIZE_BITS,
    "an item of a whole segment fits the size field"
);

impl LiveItem {
    #[inline]
    fn new(bucket: usize, slot: usize, size: usize, freq: u8) -> Self {
        debug_assert!(bucket <= u32::MAX as usize, "bucket {bucket}");
        debug_assert!(slot < 1 << SLOT_BITS, "slot {slot}");
        debug_assert!(size < 1 << SIZE_BITS, "size {size}");
        debug_assert!((freq as u32) < 1 << FREQ_BITS, "freq {freq}");
        LiveItem(
            (bucket as u64) << BUCKET_SHIFT
                | (size as u64) << SIZE_SHIFT
                | (freq as u64) << FREQ_SHIFT
                | slot as u64,
        )
    }

    /// The table position's bucket.
    #[inline]
    fn bucket(self) -> usize {
        (self.0 >> BUCKET_SHIFT) as usize
    }

    #[inline]
    fn slot(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }

    #[inline]
    fn size(self) -> usize {
        (self.0 >> SIZE_SHIFT) as usize & ((1 << SIZE_BITS) - 1)
    }

    #[inline]
    fn freq(self) -> u8 {
        (self.0 >> FREQ_SHIFT) as u8 & ((1 << FREQ_BITS) - 1) as u8
    }
}

/// Segments in one evaluation of the small pool: the oldest small one and
/// the next, or a main segment to top up and the oldest small one. Runs of
/// up to seven (a quarter of the pool) freed up to six segments at once
/// when little was read, room that held nothing until written again.
const EVALUATION_RUN: usize = 2;

/// Accesses that promote an item from the small pool to main.
pub(crate) const PROMOTE_FREQ: u8 = 1;

/// Accesses a rewritten key has at least (the write path sets them): a
/// rewrite counts as two, so the key's evaluation promotes it and, the
/// count halved by that move, it stays through its first main merge even
/// if not read. Rewritten keys starting unread (0) missed up to 0.006 more
/// on the Twitter-like rows of BENCHMARKS §1 (cluster 22); one access
/// instead of two, up to 0.0017 more on clusters 7 and 19 (§1f).
pub(crate) const REWRITE_FREQ: u8 = 2;
const _: () = assert!(
    REWRITE_FREQ / 2 >= PROMOTE_FREQ,
    "promoted, then kept by a main merge"
);

/// A segment this close to its deadline is evicted outright, not merged.
const NEAR_EXPIRY_SECS: u32 = 20;

/// Bytes of a segment that packing counts on filling: items do not split
/// across segments, so 1/32 is left for the ends.
fn usable(seg_size: usize) -> usize {
    seg_size - seg_size / 32
}

/// Whether compacting `n` segments holding `live` bytes frees at least one
/// and moves at most [`MAIN_LIVE_BOUND`]` - 1` bytes per byte freed in a
/// main run (15/16 live at most), seven in a small one (7/8).
fn compaction_frees(n: usize, live: usize, seg_size: usize, main: bool) -> bool {
    let bound = if main { MAIN_LIVE_BOUND } else { 8 };
    n >= 2
        && live.div_ceil(usable(seg_size)).max(1) < n
        && live * bound <= n * seg_size * (bound - 1)
}

/// A main run is compacted while at most `(MAIN_LIVE_BOUND - 1) /
/// MAIN_LIVE_BOUND` live (15/16). Overwritten items leave dead copies
/// spread evenly over main (a rewrite goes to probation): on cluster 7 of
/// BENCHMARKS §1 main segments sit near 90% live, which a 7/8 bound never
/// packs. With runs of [`COMPACT_MAX_MAIN`] = 24 the packing test binds
/// first (24 segments free one below ~93% live); 1/32 gave the same.
const MAIN_LIVE_BOUND: usize = 16;

/// How much costlier per segment freed (live bytes moved) than the
/// cheapest compactable run the oldest may be and still be compacted
/// first. Taking the oldest always (the policy the hit ratios of
/// BENCHMARKS §1 were tuned on) re-packed the same old, nearly full
/// segments each time they fell to 7/8 live while runs of rewritten hot
/// keys, mostly dead, waited: on Zipf overwrites of 1 M keys it moved ~3
/// items per set and a set cost ~1,800 instructions (BENCHMARKS §2).
/// Always the cheapest moved the Twitter-like rows' miss ratios by up to
/// 0.002 either way (any change to which runs are packed moves cluster
/// 7 by ~0.001); with this slack, at the real rate and at 2 TTL spans,
/// no row missed more than 0.00024 more and cluster 7 at 2 spans 0.0008
/// less.
const COMPACTION_COST_SLACK: usize = 4;

/// The widest gap, in seconds, between the deadlines of the small
/// segments a compaction packs together (`ttl::spread`, about TTL/16,
/// where that is narrower): an item in a packed small segment then goes
/// less than 2^15 s (about 9.1 h) early, unless its own segment was
/// already wider. Where nothing presses on the heap, items never read
/// stay in the small pool and its compactions pack them again and again:
/// at TTL/16, 30-day items went up to 45 h early (BENCHMARKS §1g, third
/// look: cluster 25 at 2 TTL spans 3 476 -> 3 443 misses, quick_cache
/// 3 438; no other row worse). Small segments are young, their deadlines
/// as close as the tail wrote them, so short runs cost little. Main runs
/// keep the full spread: main segments carry the wide ranges of the
/// merges that wrote them, and capping their compaction left dead copies
/// unpacked (cluster 52 at 2 spans +0.0018 with this cap on main runs
/// alone). Main merges and evaluations keep it too: there a run cut short
/// means segments evicted whole, read items included (the cap on
/// `ttl::spread` itself, for the tail and every merge, cut the hit ratio
/// of a 30-day stream overflowing a 64 MiB heap of 1 MiB segments from
/// 0.93 to 0.86).
const SMALL_COMPACTION_SPREAD: u32 = (1 << 15) - 1;

/// A run of segments chosen for compaction.
#[derive(Clone)]
struct CompactionRun {
    bucket: usize,
    /// The run is of the main pool.
    main: bool,
    /// Its segments, oldest first (the first `n`).
    run: [u32; COMPACT_MAX_MAIN],
    n: usize,
    /// Live bytes and items of the run.
    live: usize,
    items: usize,
}

impl CompactionRun {
    /// True if `slack` times this run's live bytes per segment freed is
    /// below `other`'s (cross-multiplied: no division).
    fn cost_below(&self, other: &CompactionRun, seg_size: usize, slack: usize) -> bool {
        let freed = |r: &CompactionRun| r.n - r.live.div_ceil(usable(seg_size)).max(1);
        slack * self.live * freed(other) < other.live * freed(self)
    }
}

/// What a merge pass keeps.
#[derive(Clone, Copy)]
struct Plan {
    /// Leading segments of the chain whose items all stay.
    forced: usize,
    /// Lowest access count that earns a place in the outputs (the rest
    /// only fill room left over).
    min_freq: usize,
    /// Whether the pass may free nothing (it still moves segments from
    /// small to main).
    may_keep_all: bool,
    /// Items evicted are remembered as ghosts of this pool (true: main).
    ghosts: Option<bool>,
    /// The outputs join the main pool.
    main: bool,
    /// Room left in the outputs is filled with the next-best items (a
    /// main merge, a compaction); an evaluation keeps only what was read
    /// and frees every segment it does not need.
    fill: bool,
    /// Free exactly one segment (a main merge in a heap of
    /// [`FREE_ONE_SEGMENTS`] or more): as many outputs as allowed, the
    /// room read items leave filled.
    frees_one: bool,
    /// An evaluation while main has room: unread items that
    /// `Admission::promotes_unread` picks (small ones, and ones dropped
    /// from probation often lately) are promoted as if read.
    promote_dropped: bool,
}

impl Segcache {
    /// Frees at least one segment according to the eviction policy (merge
    /// eviction may instead move segments from the small pool to main;
    /// the caller asks again).
    pub(crate) fn evict(&mut self, now: u32) -> Result<(), Error> {
        let victim = match self.eviction {
            Eviction::None => return Err(Error::OutOfMemory),
            Eviction::Merge => {
                if self.merge_evict(now) {
                    return Ok(());
                }
                self.pick_segment(|h| h.create_at as u64)
            }
            Eviction::Fifo => self.pick_segment(|h| h.create_at as u64),
            Eviction::Cte => self.pick_segment(|h| match h.expire_at {
                0 => u64::MAX,
                at => at as u64,
            }),
            Eviction::Util => self.pick_segment(|h| h.live_bytes as u64),
            Eviction::Random => self.random_segment(),
            Eviction::RandomFifo => self.random_segment().map(|id| {
                let bucket = self.segs.headers[id as usize].ttl_bucket as usize;
                self.ttl.buckets[bucket].head
            }),
        };
        let id = victim.ok_or(Error::OutOfMemory)?;
        self.evict_segment(id);
        Ok(())
    }

    /// Unlinks a segment's items as evictions and frees it. Under merge
    /// eviction its items are remembered as ghosts of its pool, as those
    /// of a merge are (a warm key evicted whole comes back warm).
    fn evict_segment(&mut self, id: u32) {
        if self.eviction == Eviction::Merge && self.segs.headers[id as usize].live_items > 0 {
            let main = self.admission.is_main(id);
            for (offset, item) in self.segs.item_offsets(id) {
                if item.is_unlinked() {
                    continue;
                }
                let hash = self.table.hash(item.key());
                if self
                    .table
                    .locate(hash, Location { seg: id, offset })
                    .is_some()
                {
                    self.admission.remember(hash, main);
                }
            }
        }
        let items = self.unlink_segment(id);
        self.retire_segment(id);
        self.counters.evictions += items as u64;
        self.counters.evicted_segments += 1;
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The in-use segment (sealed preferred over active) with the smallest
    /// `rank`.
    fn pick_segment(&self, rank: impl Fn(&crate::segments::SegmentHeader) -> u64) -> Option<u32> {
        let mut best: Option<(bool, u64, u32)> = None;
        for (id, h) in self.segs.headers.iter().enumerate() {
            if h.state == SegState::Free {
                continue;
            }
            let key = (h.state != SegState::Sealed, rank(h), id as u32);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        best.map(|(_, _, id)| id)
    }

    /// A uniformly random in-use segment, sealed ones preferred.
    fn random_segment(&mut self) -> Option<u32> {
        let n = self.segs.count();
        let start = (self.next_random() % n as u64) as usize;
        let mut fallback = None;
        for i in 0..n {
            let id = (start + i) % n;
            match self.segs.headers[id].state {
                SegState::Sealed => return Some(id as u32),
                SegState::Active if fallback.is_none() => fallback = Some(id as u32),
                _ => {}
            }
        }
        fallback
    }

    #[inline]
    fn sealed(&self, id: u32) -> bool {
        id != NONE && self.segs.headers[id as usize].state == SegState::Sealed
    }

    /// Merge-eviction steps until one frees a segment (an evaluation may
    /// only move segments to main). After a few steps that free nothing,
    /// or if no step is possible, the oldest small segments are evaluated
    /// with at least one freed, else the oldest small segment is evicted
    /// whole; false if there is none.
    fn merge_evict(&mut self, now: u32) -> bool {
        if !self.admission.drop_counts_sized() {
            self.size_drop_counts();
        }
        let free = self.segs.free_count();
        for _ in 0..4 {
            if !self.merge_step(now) {
                break;
            }
            if self.segs.free_count() > free {
                return true;
            }
        }
        if self.evaluate_small(now, true) && self.segs.free_count() > free {
            return true;
        }
        match self.oldest_small() {
            Some(id) => {
                let id = self.oldest_in_run(id);
                self.evict_segment(id);
                true
            }
            None => false,
        }
    }

    /// Gives the drop counts (`Admission::dropped_often`) their bytes, once,
    /// at the first eviction, out of the merge scratch: sized at build for
    /// runs of [`SCRATCH_ITEM_BYTES`]-byte items, it holds far more records
    /// than runs of large items can fill (a run of the block trace's
    /// ~41 KB objects: about 150 of 32 768). If the scratch holds twice
    /// what a run of [`SCRATCH_RUN_SEGMENTS`] segments of the items held so far
    /// needs, plus 1/[`DROP_COUNTS_HEAP_SHARE`] of the heap, it shrinks by
    /// that much and the drop counts take it; else there are none (a cache
    /// of small items, where they would cost 0.05 B per item and gained
    /// nothing). Memory never grows: the bytes move from one to the other.
    fn size_drop_counts(&mut self) {
        let seg_size = self.segs.segment_size();
        let average = (self.counters.live_bytes / self.counters.items.max(1)).max(1) as usize;
        let run = 2 * SCRATCH_RUN_SEGMENTS * seg_size / average;
        let record = std::mem::size_of::<LiveItem>();
        let records =
            (self.segs.count() * seg_size / crate::admission::DROP_COUNTS_HEAP_SHARE) / record;
        let capacity = self.merge_scratch.capacity();
        if records > 0
            && capacity >= run + records
            && self.merge_scratch.len() <= capacity - records
        {
            self.merge_scratch.shrink_to(capacity - records);
            debug_assert_eq!(self.merge_scratch.capacity(), capacity - records);
            self.admission.give_drop_counts(records * record);
        } else {
            self.admission.give_drop_counts(0);
        }
    }

    /// The oldest segment of the run of sealed small segments that ends
    /// at `id` in its TTL bucket's chain. Segments created in the same
    /// second tie on `create_at`; the chain order says which is oldest.
    fn oldest_in_run(&self, mut id: u32) -> u32 {
        loop {
            let prev = self.segs.headers[id as usize].prev;
            if !self.sealed(prev) || self.admission.is_main(prev) {
                return id;
            }
            id = prev;
        }
    }

    /// One merge-eviction step: a compaction, an evaluation of small
    /// segments or a main-pool merge; false if none is possible.
    fn merge_step(&mut self, now: u32) -> bool {
        if self.compact_any() {
            return true;
        }
        let small = self.small_count();
        self.admission.ghosts.fit(self.counters.items as usize);
        let small_bytes = (small * self.segs.segment_size()) as u64;
        // The small pool first while it is over its share, else main.
        let small_first = small_bytes > self.admission.small_target();
        if small_first && self.evaluate_small(now, false) {
            return true;
        }
        self.merge_main(now) || (!small_first && self.evaluate_small(now, false))
    }

    /// Segments in use in the small pool.
    fn small_count(&self) -> usize {
        self.segs.count() - self.segs.free_count() - self.admission.mains()
    }

    /// The oldest sealed small segment, exactly for heaps of up to 4096
    /// segments, else the oldest of 256 random ones.
    fn oldest_small(&mut self) -> Option<u32> {
        let n = self.segs.count();
        let mut best: Option<(u32, u32)> = None;
        let mut consider = |id: u32, this: &Self| {
            let h = &this.segs.headers[id as usize];
            if h.state == SegState::Sealed
                && !this.admission.is_main(id)
                && best.is_none_or(|b| (h.create_at, id) < b)
            {
                best = Some((h.create_at, id));
            }
        };
        if n <= 4096 {
            for id in 0..n as u32 {
                consider(id, self);
            }
        } else {
            for _ in 0..256 {
                let id = (self.next_random() % n as u64) as u32;
                consider(id, self);
            }
        }
        best.map(|(_, id)| id)
    }

    /// Evaluates the oldest small segments of one TTL bucket: read items
    /// move to the main pool, the rest are evicted as ghosts. If
    /// `must_free`, a segment is freed even if read items must go (the
    /// least read first).
    fn evaluate_small(&mut self, now: u32, must_free: bool) -> bool {
        let Some(first) = self.oldest_small() else {
            return false;
        };
        // The bucket's oldest small segment (they are usually contiguous).
        let first = self.oldest_in_run(first);
        let header = &self.segs.headers[first as usize];
        let bucket = header.ttl_bucket as usize;
        if near_expiry(header, now) {
            self.evict_segment(first);
            return true;
        }
        let mut chain = [NONE; MERGE_MAX];
        let mut len = 0;
        let seg_size = self.segs.segment_size();
        let prev = self.segs.headers[first as usize].prev;
        // Top up the main segment just before, if it has room and the two
        // segments' deadline windows fit one segment (else it would end
        // the run at one segment, and the pool could only be evicted
        // whole: main segments are old, their deadlines spread wide).
        let forced = if self.sealed(prev)
            && self.admission.is_main(prev)
            && (self.segs.headers[prev as usize].live_bytes as usize) < seg_size - seg_size / 8
            && self
                .widen(bucket, RunDeadlines::default(), prev)
                .and_then(|windows| self.widen(bucket, windows, first))
                .is_some()
        {
            chain[0] = prev;
            len = 1;
            1
        } else {
            0
        };
        let mut at = first;
        let mut range = RunDeadlines::default();
        if forced == 1 {
            range = self.widen(bucket, range, prev).unwrap_or_default();
        }
        let promote_dropped = !must_free
            && self
                .admission
                .main_has_room((self.admission.mains() * seg_size) as u64);
        let mut items: usize = chain[..len]
            .iter()
            .map(|&id| self.segs.headers[id as usize].live_items as usize)
            .sum();
        while len < EVALUATION_RUN
            && self.sealed(at)
            && !self.admission.is_main(at)
            && self.scratch_holds(items, at)
        {
            let Some(wider) = self.widen(bucket, range, at) else {
                break;
            };
            range = wider;
            chain[len] = at;
            items += self.segs.headers[at as usize].live_items as usize;
            len += 1;
            at = self.segs.headers[at as usize].next;
        }
        self.merge_chain(
            bucket,
            &chain[..len],
            Plan {
                forced,
                min_freq: PROMOTE_FREQ as usize,
                may_keep_all: !must_free,
                ghosts: Some(false),
                main: true,
                fill: false,
                frees_one: false,
                promote_dropped,
            },
        )
    }

    /// A main-pool merge in a TTL bucket chosen in proportion to its main
    /// segments; false if no bucket has two sealed main segments in a row.
    fn merge_main(&mut self, now: u32) -> bool {
        let n = self.segs.count();
        for _ in 0..8 {
            let seed = (self.next_random() % n as u64) as u32;
            if self.segs.headers[seed as usize].state == SegState::Free
                || !self.admission.is_main(seed)
            {
                continue;
            }
            let bucket = self.segs.headers[seed as usize].ttl_bucket as usize;
            if self.merge_bucket(bucket, now) {
                return true;
            }
        }
        (0..BUCKETS).any(|bucket| self.merge_bucket(bucket, now))
    }

    /// Packs a compactable run ([`compaction_run`](Self::compaction_run))
    /// into as few segments as its live items need, evicting nothing.
    /// Large items may not pack as the byte counts promise: a run found
    /// not to fit is skipped, and at most two are tried per call.
    fn compact_any(&mut self) -> bool {
        let seg_size = self.segs.segment_size();
        // A run of more live items than the scratch holds is compacted a
        // window at a time if its items are small (`compact_in_windows`).
        let capacity = self.merge_scratch.capacity();
        let mut failed = None;
        for _ in 0..2 {
            let Some(found) = self.compaction_run(failed) else {
                return false;
            };
            failed = Some((found.run[0], found.n));
            let CompactionRun {
                bucket,
                main,
                run,
                mut n,
                mut live,
                mut items,
            } = found;
            if items > capacity {
                if self.items_at_most(&run[..n], seg_size / 32)
                    && self.compact_in_windows(bucket, &run[..n], main, live)
                {
                    return true;
                }
                // Large items: only what the scratch holds, checked by
                // packing.
                while items > capacity {
                    n -= 1;
                    items -= self.segs.headers[run[n] as usize].live_items as usize;
                    live -= self.segs.headers[run[n] as usize].live_bytes as usize;
                }
            }
            let plan = Plan {
                forced: n,
                min_freq: 0,
                may_keep_all: false,
                ghosts: None,
                main,
                fill: true,
                frees_one: false,
                promote_dropped: false,
            };
            if compaction_frees(n, live, seg_size, main)
                && self.merge_chain(bucket, &run[..n], plan)
            {
                return true;
            }
        }
        false
    }

    /// The run to compact, if any, among the runs of up to [`MERGE_MAX`]
    /// consecutive sealed small segments ([`COMPACT_MAX_MAIN`] main ones)
    /// of one pool and TTL bucket, each as long as it can be from its
    /// first segment (deadline windows that fit one segment, and small runs'
    /// deadlines within [`SMALL_COMPACTION_SPREAD`]), that are at most 7/8 live (main: 15/16) and whose live bytes fit
    /// in fewer segments: the oldest (the first found from the buckets'
    /// heads), unless it moves more than [`COMPACTION_COST_SLACK`] times
    /// the live bytes per segment freed of the cheapest such run, which is
    /// then taken instead. `skip` (first segment, length) names a run
    /// already found not to pack. The 7/8 bound caps the copying at seven
    /// bytes moved per byte freed, fifteen in main (dead bytes left by overwrites are
    /// memory lost to every item; 3/4 left a sixth of the heap dead on
    /// overwrite-heavy workloads); fuller runs are left to eviction. Reads
    /// only segment headers.
    fn compaction_run(&self, skip: Option<(u32, usize)>) -> Option<CompactionRun> {
        let seg_size = self.segs.segment_size();
        let (mut oldest, mut cheapest): (Option<CompactionRun>, Option<CompactionRun>) =
            (None, None);
        for bucket in 0..BUCKETS {
            if self.ttl.buckets[bucket].segments < 2 {
                continue;
            }
            let mut start = self.ttl.buckets[bucket].head;
            while start != NONE {
                let main = self.admission.is_main(start);
                let limit = if main { COMPACT_MAX_MAIN } else { MERGE_MAX };
                let run_items = compaction_run_items(limit, seg_size);
                let mut found = CompactionRun {
                    bucket,
                    main,
                    run: [NONE; COMPACT_MAX_MAIN],
                    n: 0,
                    live: 0,
                    items: 0,
                };
                let mut at = start;
                let mut range = RunDeadlines::default();
                while found.n < limit
                    && self.sealed(at)
                    && self.admission.is_main(at) == main
                    && found.items + self.segs.headers[at as usize].live_items as usize <= run_items
                    && self.scratch_holds(0, at)
                {
                    let Some(wider) = self.widen(bucket, range, at) else {
                        break;
                    };
                    if found.n > 0 && !main && wider.windows.span() > SMALL_COMPACTION_SPREAD {
                        break;
                    }
                    range = wider;
                    found.run[found.n] = at;
                    found.live += self.segs.headers[at as usize].live_bytes as usize;
                    found.items += self.segs.headers[at as usize].live_items as usize;
                    found.n += 1;
                    at = self.segs.headers[at as usize].next;
                }
                if compaction_frees(found.n, found.live, seg_size, main)
                    && skip != Some((start, found.n))
                {
                    let cheaper = cheapest
                        .as_ref()
                        .is_none_or(|best| found.cost_below(best, seg_size, 1));
                    if cheaper {
                        cheapest = Some(found.clone());
                    }
                    oldest.get_or_insert(found);
                }
                start = self.segs.headers[start as usize].next;
            }
        }
        match (oldest, cheapest) {
            (Some(oldest), Some(cheapest))
                if cheapest.cost_below(&oldest, seg_size, COMPACTION_COST_SLACK) =>
            {
                Some(cheapest)
            }
            (oldest, _) => oldest,
        }
    }

    /// A main-pool merge in `bucket`, from its cursor (or its head). A
    /// main segment no run can hold (it and the next main segment would
    /// need more deadline windows than a segment keeps) is the CLOCK's
    /// victim on its own: if any of its items was read since it last
    /// moved, their counts halve and the hand moves on (a second chance);
    /// else it is evicted whole (its items remembered as main ghosts).
    /// Before, the merge fell back to the bucket's head, and such a
    /// segment stayed, its overwritten items dead, until it expired.
    fn merge_bucket(&mut self, bucket: usize, now: u32) -> bool {
        let head = self.ttl.buckets[bucket].head;
        let cursor = self.ttl.buckets[bucket].merge_cursor;
        for mut start in [cursor, head] {
            for _ in 0..self.ttl.buckets[bucket].segments {
                if !self.sealed(start) || !self.admission.is_main(start) {
                    break;
                }
                let start_header = &self.segs.headers[start as usize];
                let next = start_header.next;
                if near_expiry(start_header, now) {
                    // About to expire anyway: free it whole.
                    self.ttl.buckets[bucket].merge_cursor = next;
                    self.evict_segment(start);
                    return true;
                }
                let (chain, len, lone) = self.main_run(bucket, start);
                if len >= 2 {
                    let plan = Plan {
                        forced: 0,
                        min_freq: 1,
                        may_keep_all: false,
                        ghosts: Some(true),
                        main: true,
                        fill: true,
                        frees_one: self.segs.count() >= FREE_ONE_SEGMENTS,
                        promote_dropped: false,
                    };
                    if self.merge_chain(bucket, &chain[..len], plan) {
                        return true;
                    }
                } else if lone {
                    self.ttl.buckets[bucket].merge_cursor = next;
                    if self.age_segment(start) {
                        start = next;
                        continue;
                    }
                    self.evict_segment(start);
                    return true;
                }
                break;
            }
        }
        false
    }

    /// The run of up to [`MERGE_MAX`] sealed main segments of `bucket` from
    /// `start` whose deadline windows fit one segment ([`widen`](Self::widen))
    /// and whose items the scratch holds, its length, and whether it is
    /// `start` alone because the next main segment's do not fit with its own.
    fn main_run(&self, bucket: usize, start: u32) -> ([u32; MERGE_MAX], usize, bool) {
        let mut chain = [NONE; MERGE_MAX];
        let mut len = 0;
        let mut items = 0;
        let mut at = start;
        let mut range = RunDeadlines::default();
        while len < MERGE_MAX
            && self.sealed(at)
            && self.admission.is_main(at)
            && self.scratch_holds(items, at)
        {
            let Some(wider) = self.widen(bucket, range, at) else {
                return (chain, len, len == 1);
            };
            range = wider;
            chain[len] = at;
            items += self.segs.headers[at as usize].live_items as usize;
            len += 1;
            at = self.segs.headers[at as usize].next;
        }
        (chain, len, false)
    }

    /// Halves the access counts of segment `id`'s live items (a CLOCK hand
    /// passing them); true if any was read since its last move.
    fn age_segment(&mut self, id: u32) -> bool {
        let mut read = false;
        for (offset, item) in self.segs.item_offsets(id) {
            if item.is_unlinked() {
                continue;
            }
            let hash = self.table.hash(item.key());
            if let Some((bucket, slot, info)) =
                self.table.locate(hash, Location { seg: id, offset })
            {
                let freq = hashtable::frequency(info);
                if freq > 0 {
                    read = true;
                    self.table.set_frequency(bucket, slot, freq / 2);
                }
            }
        }
        read
    }

    /// The deadline windows a run of segments needs after adding `id`, or
    /// `None` if its items would need more than a segment keeps
    /// ([`MAX_WINDOWS`](crate::windows::MAX_WINDOWS)) or a segment of the
    /// run lacks the room for them at its end: the merge's outputs then
    /// keep every item's deadline within the bucket's precision
    /// (`ttl::spread`).
    fn widen(&self, bucket: usize, mut run: RunDeadlines, id: u32) -> Option<RunDeadlines> {
        if !run.windows.join(bucket, &self.segs.windows(id)) {
            return None;
        }
        run.fullest = run.fullest.max(self.segs.headers[id as usize].write_offset);
        let room = Segments::window_room(run.windows.as_slice().len());
        (run.fullest as usize + room <= self.segs.segment_size()).then_some(run)
    }

    /// Bytes each output of a merge of `chain` may fill with items: the
    /// segment, less the room its deadline windows take at its end if the
    /// chain's items need more than one (see `windows.rs`); `None` if some
    /// segment of the chain holds more than that (its items could then
    /// spill into an output not yet read; the run builders never build
    /// such a chain, see [`widen`](Self::widen)).
    fn output_room(&self, bucket: usize, chain: &[u32]) -> Option<usize> {
        let run = chain.iter().try_fold(RunDeadlines::default(), |run, &id| {
            self.widen(bucket, run, id)
        })?;
        Some(self.segs.segment_size() - Segments::window_room(run.windows.as_slice().len()))
    }

    /// Whether the merge scratch holds `items` live items plus those of
    /// segment `id` (see [`scratch_items`]).
    fn scratch_holds(&self, items: usize, id: u32) -> bool {
        items + self.segs.headers[id as usize].live_items as usize <= self.merge_scratch.capacity()
    }

    /// Packs the chain's kept items, in chain order, into its first
    /// segments (the outputs) and evicts the rest; frees the other
    /// segments. Packing in order never writes ahead of what is still to be
    /// read: an item is either copied into an earlier segment or moved
    /// forward within its own. Returns false, changing nothing, if the plan
    /// cannot free a segment and may not keep everything.
    fn merge_chain(&mut self, bucket: usize, chain: &[u32], plan: Plan) -> bool {
        let Some(seg_size) = self.output_room(bucket, chain) else {
            return false;
        };
        let usable = usable(seg_size);
        // Pass 1: the live items with their hashes and access counts, and
        // the bytes at each count.
        // The run builders cut runs to the scratch; one that still does
        // not fit changes nothing (the scratch never grows).
        let items: usize = chain
            .iter()
            .map(|&id| self.segs.headers[id as usize].live_items as usize)
            .sum();
        // An empty chain: its first segment alone held more live items
        // than the scratch (items under ~16 bytes); eviction then frees the
        // oldest segment whole.
        if chain.is_empty() || items > self.merge_scratch.capacity() {
            return false;
        }
        // The mean item held, for `Admission::promotes_unread`.
        let mean_size = (self.counters.live_bytes / self.counters.items.max(1)) as usize;
        let mut live = std::mem::take(&mut self.merge_scratch);
        live.clear();
        let mut histogram = [0usize; 128];
        let mut forced_bytes = 0usize;
        // Records of the forced segments (the first ones of the chain).
        let mut forced_items = 0usize;
        let mut largest = 0usize;
        for (index, &src) in chain.iter().enumerate() {
            // A segment the table no longer points into has nothing to
            // keep: its items' headers are not read.
            if self.segs.headers[src as usize].live_items == 0 {
                continue;
            }
            for (offset, item) in self.segs.item_offsets(src) {
                if item.is_unlinked() {
                    continue;
                }
                let hash = self.table.hash(item.key());
                let loc = Location { seg: src, offset };
                if let Some((bucket, slot, info)) = self.table.locate(hash, loc) {
                    debug_assert!(live.len() < live.capacity(), "the scratch never grows");
                    let mut freq = hashtable::frequency(info);
                    if plan.promote_dropped
                        && index >= plan.forced
                        && (freq as usize) < plan.min_freq
                        && self.admission.promotes_unread(hash, item.size(), mean_size)
                    {
                        // Judged as read (its count stays 0).
                        freq = plan.min_freq as u8;
                    }
                    if index < plan.forced {
                        forced_bytes += item.size();
                        forced_items += 1;
                    } else {
                        histogram[freq as usize] += item.size();
                    }
                    largest = largest.max(item.size());
                    live.push(LiveItem::new(bucket, slot, item.size(), freq));
                }
            }
        }
        // How many outputs: enough for the forced items and those read at
        // least `min_freq` times, at least one, at most one fewer than the
        // chain unless it may keep everything.
        let wanted: usize = forced_bytes + histogram[plan.min_freq..].iter().sum::<usize>();
        let max_outputs = if plan.may_keep_all {
            chain.len()
        } else {
            chain.len() - 1
        };
        let nothing_kept = wanted == 0 && !plan.fill;
        if nothing_kept && chain.len() > 1 {
            // Free only what is needed: the run's oldest segment goes, the
            // next ones wait for their own evaluation.
            self.merge_scratch = live;
            return self.merge_chain(bucket, &chain[..1], plan);
        }
        if !nothing_kept && (max_outputs == 0 || forced_bytes > max_outputs * seg_size) {
            self.merge_scratch = live;
            return false;
        }
        // Nothing to keep and no fill: the segment is freed.
        let mut outputs = if nothing_kept {
            0
        } else if plan.frees_one {
            max_outputs
        } else {
            wanted.div_ceil(usable).clamp(1, max_outputs)
        };
        // The lowest access count at which the survivors fit; items one
        // count below it fill whatever room is left, in order.
        let room = (outputs * seg_size).saturating_sub(forced_bytes);
        let mut cutoff = plan.min_freq;
        let mut kept_bytes: usize = histogram[cutoff..].iter().sum();
        while kept_bytes > room {
            kept_bytes -= histogram[cutoff];
            cutoff += 1;
        }
        let mut borderline_room = if plan.fill { room - kept_bytes } else { 0 };
        let mut slack_left = true;
        // Items do not split across segments: check that packing in order
        // really keeps every item it must (forced ones, those at or above
        // the cutoff); if not, no borderline items, then more outputs, then
        // a higher cutoff; give up if even the forced items do not fit.
        loop {
            let fits = pack(
                &live,
                forced_items,
                cutoff,
                borderline_room,
                outputs,
                seg_size,
                |_, _, _| {},
            );
            if fits {
                break;
            }
            if borderline_room > 0 && slack_left {
                // Packing in order leaves less than the largest item unused
                // at each output's end: fill only what then surely fits, so
                // that fillers do not push out items that must stay (with
                // no fill at all, a merge freeing one segment left the
                // room of its unread items empty).
                borderline_room = borderline_room.saturating_sub(outputs * largest);
                slack_left = false;
            } else if borderline_room > 0 {
                borderline_room = 0;
            } else if outputs < max_outputs {
                outputs += 1;
            } else if cutoff < 128 {
                cutoff += 1;
            } else {
                self.merge_scratch = live;
                return false;
            }
        }
        // Items in the output segments move: a new generation means no CAS
        // token of a moved or removed item can match a later item there.
        for &dst in &chain[..outputs] {
            self.segs.bump_generation(dst);
        }
        // Pass 2: pack survivors into the outputs, unlink the rest. Items
        // that sit back to back and land back to back move in one copy.
        let mut written = [(0usize, 0u32); COMPACT_MAX_MAIN];
        let mut windows = [Windows::default(); COMPACT_MAX_MAIN];
        let mut source = SourceWindows::default();
        // (The callback's `bucket` is a table position.)
        let ttl_bucket = bucket;
        let mut evicted = 0u64;
        let mut run = CopyRun::EMPTY;
        pack(
            &live,
            forced_items,
            cutoff,
            borderline_room,
            outputs,
            seg_size,
            |item, forced, to| {
                let (bucket, slot) = (item.bucket(), item.slot());
                let from = hashtable::location(self.table.info_at_slot(bucket, slot));
                debug_assert!(chain.contains(&from.seg), "a record of the chain");
                match to {
                    Some((out, write)) => {
                        debug_assert!(
                            chain[out..].contains(&from.seg),
                            "packing never runs ahead of reading"
                        );
                        let to = Location {
                            seg: chain[out],
                            offset: write as u32,
                        };
                        let size = item.size() as u32;
                        if from != to && !run.extend(from, to, size) {
                            run.flush(&mut self.segs);
                            run = CopyRun::start(from, to, size);
                        }
                        // Survivors of a selection age (their count halves);
                        // forced items (a compaction, a topped-up segment)
                        // were not judged and keep theirs: halving them on
                        // every compaction turned warm probation items cold
                        // before their evaluation.
                        if forced {
                            if from != to {
                                self.table.relocate(bucket, slot, to);
                            }
                        } else {
                            self.table.move_slot(bucket, slot, to);
                        }
                        written[out].0 += size as usize;
                        written[out].1 += 1;
                        let w = source.of(&self.segs, from);
                        windows[out].keep(ttl_bucket, w.at, w.last, written[out].0 as u32);
                    }
                    None => {
                        // Items are copied only to places before their own
                        // and in order: this one's bytes are still intact.
                        if let Some(from_main) = plan.ghosts {
                            let hash = self.table.hash(self.segs.item(from).key());
                            self.admission.remember(hash, from_main);
                        }
                        self.table.clear_at(bucket, slot);
                        evicted += 1;
                    }
                }
            },
        );
        run.flush(&mut self.segs);
        self.merge_scratch = live;
        self.finish_merge(bucket, chain, &written[..outputs], &windows, plan.main);
        self.counters.evictions += evicted;
        true
    }

    /// The end of a merge whose outputs, the first segments of `chain`,
    /// were written with `written` (bytes, items) each: their headers and
    /// pool, the other segments freed, the counters, the bucket's cursor.
    fn finish_merge(
        &mut self,
        bucket: usize,
        chain: &[u32],
        written: &[(usize, u32)],
        windows: &[Windows],
        main: bool,
    ) {
        let outputs = written.len();
        let after = match outputs {
            0 => self.segs.headers[chain[chain.len() - 1] as usize].next,
            n => chain[n - 1],
        };
        for (index, &src) in chain.iter().enumerate() {
            let header = &mut self.segs.headers[src as usize];
            self.counters.items -= header.live_items as u64;
            self.counters.live_bytes -= header.live_bytes as u64;
            if index < outputs {
                let (bytes, items) = written[index];
                header.write_offset = bytes as u32;
                header.live_bytes = bytes as u32;
                header.live_items = items;
                self.segs.set_windows(src, &windows[index]);
                self.counters.items += items as u64;
                self.counters.live_bytes += bytes as u64;
                self.admission.set_main(src, main);
            } else {
                header.live_items = 0;
                header.live_bytes = 0;
                self.retire_segment(src);
                self.counters.evicted_segments += 1;
            }
        }
        self.counters.merges += 1;
        self.ttl.buckets[bucket].merge_cursor = if outputs == 0 {
            after
        } else {
            self.segs.headers[after as usize].next
        };
    }

    /// Whether every item, live or dead, of the chain is at most `max`
    /// bytes (reads item headers only).
    fn items_at_most(&self, chain: &[u32], max: usize) -> bool {
        chain.iter().all(|&id| {
            self.segs
                .item_offsets(id)
                .all(|(_, item)| item.size() <= max)
        })
    }

    /// Compacts `chain`, whose live items (`live` bytes) outnumber the
    /// merge scratch, a window of segments at a time: the scratch holds the
    /// records of one window, whose items are packed, in order, after
    /// those of the windows before. The result is what one pass would
    /// give (the same outputs, each item at the same place, access counts
    /// kept): every item is at most 1/32 segment (the caller checked), so
    /// packing in order fills each output but the last past `usable`
    /// bytes and the `live.div_ceil(usable)` outputs hold everything.
    /// A window reads only segments nothing has been written to yet:
    /// items move only into earlier segments or forward in their own.
    /// Returns false, changing nothing, if the room the outputs keep for
    /// their deadline windows leaves no segment to free.
    fn compact_in_windows(
        &mut self,
        bucket: usize,
        chain: &[u32],
        main: bool,
        live: usize,
    ) -> bool {
        let Some(seg_size) = self.output_room(bucket, chain) else {
            return false;
        };
        // Items are at most 1/32 of a whole segment: each output but the
        // last is filled past this.
        let usable = seg_size - self.segs.segment_size() / 32;
        let outputs = live.div_ceil(usable).max(1);
        if outputs >= chain.len() {
            // The room the outputs keep for their deadline windows.
            return false;
        }
        for &dst in &chain[..outputs] {
            self.segs.bump_generation(dst);
        }
        let mut records = std::mem::take(&mut self.merge_scratch);
        let capacity = records.capacity();
        let mut written = [(0usize, 0u32); COMPACT_MAX_MAIN];
        let mut windows = [Windows::default(); COMPACT_MAX_MAIN];
        let mut source = SourceWindows::default();
        // (The callback's `bucket` is a table position.)
        let ttl_bucket = bucket;
        let (mut out, mut write) = (0usize, 0usize);
        let mut run = CopyRun::EMPTY;
        let mut next = 0;
        while next < chain.len() {
            // The next segments whose live items the scratch holds.
            records.clear();
            let mut items = 0;
            let start = next;
            while next < chain.len()
                && items + self.segs.headers[chain[next] as usize].live_items as usize <= capacity
            {
                items += self.segs.headers[chain[next] as usize].live_items as usize;
                next += 1;
            }
            assert!(next > start, "every segment of the run fits the scratch");
            for &src in &chain[start..next] {
                for (offset, item) in self.segs.item_offsets(src) {
                    if item.is_unlinked() {
                        continue;
                    }
                    let hash = self.table.hash(item.key());
                    let loc = Location { seg: src, offset };
                    if let Some((bucket, slot, info)) = self.table.locate(hash, loc) {
                        debug_assert!(records.len() < capacity, "the scratch never grows");
                        let freq = hashtable::frequency(info);
                        records.push(LiveItem::new(bucket, slot, item.size(), freq));
                    }
                }
            }
            for &item in &records {
                let size = item.size();
                if write + size > seg_size && out + 1 < outputs {
                    out += 1;
                    write = 0;
                }
                debug_assert!(write + size <= seg_size, "small items pack as counted");
                let (bucket, slot) = (item.bucket(), item.slot());
                let from = hashtable::location(self.table.info_at_slot(bucket, slot));
                let to = Location {
                    seg: chain[out],
                    offset: write as u32,
                };
                if from != to {
                    if !run.extend(from, to, size as u32) {
                        run.flush(&mut self.segs);
                        run = CopyRun::start(from, to, size as u32);
                    }
                    self.table.relocate(bucket, slot, to);
                }
                written[out].0 += size;
                written[out].1 += 1;
                write += size;
                let w = source.of(&self.segs, from);
                windows[out].keep(ttl_bucket, w.at, w.last, write as u32);
            }
        }
        run.flush(&mut self.segs);
        self.merge_scratch = records;
        self.finish_merge(bucket, chain, &written[..outputs], &windows, main);
        true
    }
}

/// True if a segment is this close to its deadline
/// ([`NEAR_EXPIRY_SECS`]) that merging it is not worth it: a `split`
/// segment by its latest window, whose items stay longest.
fn near_expiry(header: &SegmentHeader, now: u32) -> bool {
    let deadline = if header.is_split() {
        header.expire_last
    } else {
        header.expire_at
    };
    deadline != 0 && deadline <= now + NEAR_EXPIRY_SECS
}

/// What a run of segments needs to be merged into outputs that keep
/// every item's deadline: its items' deadline windows, and the most bytes
/// any of its segments holds. Outputs keep their windows in their last
/// bytes, so each segment of the run must have left that room free:
/// packing items in order into outputs no larger than any segment they
/// came from then never runs ahead of what is still to be read.
#[derive(Clone, Copy, Default)]
struct RunDeadlines {
    windows: Windows,
    fullest: u32,
}

/// The deadline windows of the segment a merge last read an item of:
/// items come in chain order, so the source changes once per segment.
#[derive(Default)]
struct SourceWindows {
    seg: Option<u32>,
    windows: Windows,
}

impl SourceWindows {
    /// The window of the item at `loc`, from its segment's windows as
    /// they were before the merge (outputs are rewritten only at its end).
    fn of(&mut self, segs: &Segments, loc: Location) -> Window {
        if self.seg != Some(loc.seg) {
            self.seg = Some(loc.seg);
            self.windows = segs.windows(loc.seg);
        }
        self.windows.window_at(loc.offset)
    }
}

/// Bytes a merge still has to move: `len` bytes from `from` to `to`, in
/// one segment each. Items are copied in chain order and never to a place
/// after their own, so a run may wait until the next item that does not
/// continue it (the copies in between read nothing it writes).
struct CopyRun {
    from: Option<Location>,
    to: Location,
    len: u32,
}

impl CopyRun {
    /// Nothing to move.
    const EMPTY: CopyRun = CopyRun {
        from: None,
        to: Location { seg: 0, offset: 0 },
        len: 0,
    };

    fn start(from: Location, to: Location, len: u32) -> CopyRun {
        CopyRun {
            from: Some(from),
            to,
            len,
        }
    }

    /// Takes `len` more bytes if they continue the run at both ends.
    #[inline]
    fn extend(&mut self, from: Location, to: Location, len: u32) -> bool {
        let Some(start) = self.from else {
            return false;
        };
        let continues =
            |a: Location, b: Location| a.seg == b.seg && a.offset + self.len == b.offset;
        if continues(start, from) && continues(self.to, to) {
            self.len += len;
            return true;
        }
        false
    }

    /// Copies the run (memmove: it may overlap itself) and empties it.
    fn flush(&mut self, segs: &mut crate::segments::Segments) {
        if let Some(from) = self.from.take() {
            segs.copy(from, self.to, self.len as usize);
        }
    }
}

/// Packs the chain's live items, in order, into `outputs` segments of
/// `seg_size` bytes: the first `forced` items (those of the forced
/// segments) and those read at least `cutoff` times must stay, items one
/// count below fill up to `borderline_room` bytes, the rest go. Calls
/// `place` with each item, whether it is forced, and its (output, offset),
/// or `None` if it goes; returns false (after placing what it could) if an
/// item that must stay did not fit.
fn pack(
    live: &[LiveItem],
    forced: usize,
    cutoff: usize,
    mut borderline_room: usize,
    outputs: usize,
    seg_size: usize,
    mut place: impl FnMut(LiveItem, bool, Option<(usize, usize)>),
) -> bool {
    let (mut out, mut write) = (0usize, 0usize);
    let mut all_kept = true;
    for (i, &item) in live.iter().enumerate() {
        let size = item.size();
        let is_forced = i < forced;
        let must = is_forced || item.freq() as usize >= cutoff;
        let borderline = !must && item.freq() as usize + 1 == cutoff && size <= borderline_room;
        if !(must || borderline) {
            place(item, is_forced, None);
            continue;
        }
        if write + size > seg_size && out + 1 < outputs {
            out += 1;
            write = 0;
        }
        if write + size <= seg_size {
            if borderline {
                borderline_room -= size;
            }
            place(item, is_forced, Some((out, write)));
            write += size;
        } else {
            all_kept &= !must;
            place(item, is_forced, None);
        }
    }
    all_kept
}

#[cfg(test)]
mod tests {
    use super::{
        pack, scratch_items, LiveItem, COMPACT_MAX_MAIN, FREE_ONE_SEGMENTS, MERGE_MAX, PROMOTE_FREQ,
    };
    use crate::builder::small_cache;
    use crate::hashtable::{self, Location};
    use crate::segments::SegState;
    use crate::segments::NONE;
    use crate::ttl::BUCKETS;
    use crate::windows::{Windows, MAX_WINDOWS};
    use crate::{Eviction, ManualClock, Segcache};
    use std::time::Duration;

    fn cache(policy: Eviction) -> Segcache {
        small_cache(256 << 10, 8 << 10, 10, policy, &ManualClock::new())
    }

    #[test]
    fn every_policy_but_none_keeps_serving_past_a_full_heap() {
        for policy in Eviction::ALL {
            if policy == Eviction::None {
                continue;
            }
            let mut c = cache(policy);
            let ttls = [
                None,
                Some(Duration::from_secs(3600)),
                Some(Duration::from_secs(60)),
            ];
            for i in 0..20_000u32 {
                let key = format!("key-{i}");
                c.set(key.as_bytes(), [i as u8; 90], 0, ttls[i as usize % 3])
                    .unwrap_or_else(|e| panic!("{policy:?}: {e}"));
                assert_eq!(c.get(key.as_bytes()).unwrap().value(), &[i as u8; 90][..]);
            }
            let s = c.stats();
            assert!(s.evictions > 0, "{policy:?}");
            assert!(s.live_bytes <= s.heap_bytes);
            c.check_invariants();
        }
    }

    #[test]
    fn overwrites_within_the_heap_are_compacted_not_evicted() {
        let clock = ManualClock::new();
        let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
        // 300 keys x ~91 bytes = ~27 KiB live in a 64 KiB heap, rewritten
        // ten times over: dead versions fill segments, compaction frees them.
        let mut rng = 1u64;
        for round in 0..7_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = rng % 300;
            c.set(format!("k{k:03}").as_bytes(), [round as u8; 80], 0, None)
                .unwrap();
        }
        for k in 0..300u64 {
            let key = format!("k{k:03}");
            assert!(c.contains(key.as_bytes()) || c.peek(key.as_bytes()).is_none());
        }
        let s = c.stats();
        assert!(s.merges > 10, "compactions ran: {}", s.merges);
        assert_eq!(s.evictions, 0, "nothing live had to go");
        assert!(s.evicted_segments > 10);
        c.check_invariants();
    }

    /// Compaction packs thinned-out small segments only while their
    /// deadlines lie within `SMALL_COMPACTION_SPREAD` (about 9.1 h): at
    /// TTL/16 (45 h for 30 days) items written ten hours apart were packed
    /// into one segment and went with the earliest, ten hours early.
    #[test]
    fn small_compaction_packs_thirty_day_items_only_within_its_spread() {
        let clock = ManualClock::new();
        clock.set(1_000);
        let t0 = clock.now();
        let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
        let ttl = 30 * 86_400u32;
        let hours = 96u32;
        // 20 items an hour (a segment spans about 2.3 hours of
        // deadlines, a run of eight small ones 18 hours), 2 of them kept:
        // 96 hours write 2.7 heaps, so thinned segments are compacted.
        for h in 0..hours {
            for i in 0..20u32 {
                let key = format!("h{h}:{i}");
                c.set(
                    key.as_bytes(),
                    [1u8; 80],
                    0,
                    Some(Duration::from_secs(ttl.into())),
                )
                .unwrap();
                clock.advance(Duration::from_secs(180));
            }
            for i in 2..20u32 {
                assert!(c.delete(format!("h{h}:{i}").as_bytes()));
            }
        }
        let s = c.stats();
        assert!(s.merges >= 2, "compactions ran: {}", s.merges);
        assert_eq!(s.evictions, 0, "nothing live had to go");
        c.check_invariants();
        // Every kept item is served until 2^15 s before its deadline and
        // not from its deadline on.
        clock.set(t0 + ttl - 2 * 3_600);
        for _ in 0..hours + 4 {
            let now = clock.now();
            for h in 0..hours {
                for i in 0..2u32 {
                    let deadline = t0 + h * 3_600 + i * 180 + ttl;
                    let served = c.get(format!("h{h}:{i}").as_bytes()).is_some();
                    if now >= deadline {
                        assert!(!served, "h{h}:{i} served past its deadline");
                    } else if deadline - now >= 1 << 15 {
                        assert!(served, "h{h}:{i} gone {} s early", deadline - now);
                    }
                }
            }
            clock.advance(Duration::from_secs(3_600));
        }
    }

    #[test]
    fn merge_keeps_read_items_and_drops_unread_ones() {
        let clock = ManualClock::new();
        let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
        // 16 segments of ~46 items. Every 20th of the first 400 keys is
        // read every second; the rest are written once and never read.
        let hot = |i: u32| i < 400 && i % 20 == 0;
        for i in 0..2_000u32 {
            clock.advance(Duration::from_secs(1));
            for h in (0..i.min(400)).filter(|&h| hot(h)) {
                assert!(
                    c.get(format!("k{h}").as_bytes()).is_some(),
                    "hot k{h} lost at {i}"
                );
            }
            c.set(format!("k{i}").as_bytes(), [1u8; 80], 0, None)
                .unwrap();
        }
        let cold_present = (0..1000u32)
            .filter(|&i| !hot(i) && c.contains(format!("k{i}").as_bytes()))
            .count();
        assert!(c.stats().merges > 0);
        // Unread items only fill room the survivors leave in a merged
        // segment, so most old cold keys are gone while every hot one stayed.
        assert!(
            cold_present < 980 / 4,
            "old cold keys mostly gone: {cold_present}/980"
        );
        c.check_invariants();
    }

    fn merge_cache(heap: usize, segment: usize, clock: &ManualClock) -> Segcache {
        small_cache(heap, segment, 12, Eviction::default(), clock)
    }

    /// Writes keys `k0000`, `k0001`… (80-byte values, no TTL) until
    /// `segments` segments are in use; how many keys were written.
    fn fill_segments(c: &mut Segcache, segments: u64) -> u32 {
        let mut keys = 0u32;
        while c.stats().segments_used < segments {
            c.set(format!("k{keys:04}"), [1u8; 80], 0, None).unwrap();
            keys += 1;
        }
        keys
    }

    /// Moves every segment in use to the main pool.
    fn all_main(c: &mut Segcache) {
        for id in 0..c.segs.count() as u32 {
            if c.segs.headers[id as usize].state != SegState::Free {
                c.admission.set_main(id, true);
            }
        }
    }

    /// Where a key's item is and its access count.
    fn entry(c: &Segcache, key: &str) -> Option<(Location, u8)> {
        let hash = c.table.hash(key.as_bytes());
        c.table
            .lookup(hash, |at| c.segs.item(at).key() == key.as_bytes())
            .map(|(_, _, info)| (hashtable::location(info), hashtable::frequency(info)))
    }

    #[test]
    fn compaction_moves_items_with_their_access_counts() {
        // Read keys interleaved with overwritten ones: compaction packs the
        // read ones over the dead versions, and must not age them (it
        // judges nothing; halving turned read probation items cold before
        // their evaluation).
        let clock = ManualClock::new();
        let mut c = merge_cache(64 << 10, 4 << 10, &clock);
        for k in 0..120u32 {
            c.set(format!("w{k:03}"), [1u8; 80], 0, None).unwrap();
            c.set(format!("o{}", k % 4), [2u8; 80], 0, None).unwrap();
        }
        clock.advance(Duration::from_secs(1));
        for k in 0..120u32 {
            assert!(c.get(format!("w{k:03}")).is_some());
        }
        let before: Vec<_> = (0..120u32)
            .map(|k| entry(&c, &format!("w{k:03}")).unwrap())
            .collect();
        assert!(before.iter().all(|&(_, f)| f == 1), "one access each");
        assert!(c.compact_any(), "half the bytes are dead: a run compacts");
        let after: Vec<_> = (0..120u32)
            .map(|k| entry(&c, &format!("w{k:03}")).unwrap())
            .collect();
        let moved = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b.0 != a.0)
            .count();
        assert!(moved > 20, "compaction moved read items: {moved}");
        assert!(
            after.iter().all(|&(_, f)| f == 1),
            "moved items keep their count"
        );
        assert_eq!(c.stats().evictions, 0);
        c.check_invariants();
    }

    #[test]
    fn main_runs_thinned_too_evenly_for_eight_segments_are_compacted() {
        // Overwritten items leave dead copies spread thinly over main: at
        // 7/8 live, eight segments cannot pack into seven, but twelve pack
        // into eleven. Compaction must find such a run and free a segment
        // without evicting anything.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let keys = fill_segments(&mut c, 14);
        all_main(&mut c);
        for k in (0..keys).step_by(8) {
            assert!(c.delete(format!("k{k:04}")));
        }
        let live = sealed_live_bytes(&c);
        let usable = super::usable(c.segs.segment_size());
        assert!(live.len() >= 12);
        assert!(
            live[..MERGE_MAX].iter().sum::<usize>() > (MERGE_MAX - 1) * usable,
            "eight segments do not fit in seven"
        );
        compacts_one_segment_away(&mut c, keys, 8);
    }

    #[test]
    fn main_runs_over_seven_eighths_live_are_compacted() {
        // One item in sixteen dead, spread evenly over main: no run of 12
        // packs into 11 and every run is over 7/8 live, but 24 segments
        // pack into 23 at under 15/16 live. Compaction must free a segment
        // without evicting anything.
        let clock = ManualClock::new();
        let mut c = merge_cache(2 << 20, 4 << 10, &clock);
        // ~210-byte items in a heap of 512 segments: the merge scratch
        // holds a run of 24.
        let mut keys = 0u32;
        while c.stats().segments_used < 26 {
            c.set(format!("k{keys:04}"), [1u8; 200], 0, None).unwrap();
            keys += 1;
        }
        all_main(&mut c);
        for k in (0..keys).step_by(16) {
            assert!(c.delete(format!("k{k:04}")));
        }
        let live = sealed_live_bytes(&c);
        let seg = c.segs.segment_size();
        let usable = super::usable(seg);
        assert!(live.len() >= COMPACT_MAX_MAIN);
        assert!(
            live[..12].iter().sum::<usize>() > 11 * usable,
            "twelve segments do not fit in eleven"
        );
        assert!(
            live[..COMPACT_MAX_MAIN].iter().sum::<usize>() * 8 > COMPACT_MAX_MAIN * seg * 7,
            "over 7/8 live"
        );
        compacts_one_segment_away(&mut c, keys, 16);
    }

    /// Live bytes of each sealed segment, in segment id order.
    fn sealed_live_bytes(c: &Segcache) -> Vec<usize> {
        (0..c.segs.count())
            .map(|id| &c.segs.headers[id])
            .filter(|h| h.state == SegState::Sealed)
            .map(|h| h.live_bytes as usize)
            .collect()
    }

    /// One compaction frees exactly one segment and evicts nothing: of
    /// keys `k0000..keys`, every `deleted_every`-th (deleted before) is
    /// still gone and every other one is still there.
    fn compacts_one_segment_away(c: &mut Segcache, keys: u32, deleted_every: u32) {
        let used = c.stats().segments_used;
        let items = c.stats().items;
        assert!(c.compact_any(), "a main run compacts");
        assert_eq!(c.stats().segments_used, used - 1);
        assert_eq!(c.stats().items, items);
        assert_eq!(c.stats().evictions, 0);
        for k in 0..keys {
            assert_eq!(
                c.contains(format!("k{k:04}").as_bytes()),
                k % deleted_every != 0,
                "key {k}"
            );
        }
        c.check_invariants();
    }

    /// A cache of `heap` bytes in 4 KiB segments whose sealed segments are
    /// all main, every fourth key read once; its keys.
    fn main_pool_a_quarter_read(heap: usize, clock: &ManualClock) -> (Segcache, u32) {
        let mut c = merge_cache(heap, 4 << 10, clock);
        let keys = fill_segments(&mut c, 11);
        all_main(&mut c);
        clock.advance(Duration::from_secs(1));
        for k in (0..keys).step_by(4) {
            assert!(c.get(format!("k{k:04}")).is_some());
        }
        (c, keys)
    }

    #[test]
    fn a_main_merge_frees_one_segment_and_keeps_unread_items_in_the_rest() {
        // A quarter of main was read: its read items need two of the run's
        // eight segments. The merge frees one segment only, keeping unread
        // items in the room the read ones leave (before, it freed every
        // segment the read items did not need: all unread items of the run
        // went at once).
        let clock = ManualClock::new();
        let (mut c, keys) = main_pool_a_quarter_read(128 << 10, &clock);
        assert!(c.segs.count() >= FREE_ONE_SEGMENTS);
        let per_segment = (0..c.segs.count())
            .map(|id| c.segs.headers[id].live_items)
            .max()
            .unwrap() as u64;
        let (used, items) = (c.stats().segments_used, c.stats().items);
        assert!(c.merge_main(0), "a main merge ran");
        assert_eq!(c.stats().segments_used, used - 1, "exactly one freed");
        let evicted = items - c.stats().items;
        // One segment's worth, plus at most an item per output: packing
        // in order may leave up to an item's room at each output's end.
        assert!(
            evicted > 0 && evicted <= per_segment + MERGE_MAX as u64,
            "one segment's worth of unread items went: {evicted} (a segment holds {per_segment})"
        );
        for k in (0..keys).step_by(4) {
            assert!(c.contains(format!("k{k:04}").as_bytes()), "read k{k} kept");
        }
        c.check_invariants();
        // In a heap of a few segments a merge frees what its read items
        // leave: there the small pool needs whole segments back.
        let (mut few, _) = main_pool_a_quarter_read(48 << 10, &clock);
        assert!(few.segs.count() < FREE_ONE_SEGMENTS);
        let used = few.stats().segments_used;
        assert!(few.merge_main(0));
        assert!(
            few.stats().segments_used + 1 < used,
            "more than one freed: {} of {used} left",
            few.stats().segments_used
        );
        few.check_invariants();
    }

    #[test]
    fn compaction_takes_a_far_cheaper_run_over_the_oldest() {
        // The oldest run is 5/6 live (8 segments pack into 7: one freed for
        // ~6.7 segments moved); a later run thinned by deletes is 1/4 live
        // (its last three pack into one: two freed for 3/4 moved). It is
        // more than COMPACTION_COST_SLACK times cheaper per segment freed,
        // so it is compacted and the oldest items stay where they are.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let keys = fill_segments(&mut c, 14);
        let bucket = crate::ttl::bucket_for(0);
        let mut chain = vec![];
        let mut id = c.ttl.buckets[bucket].head;
        while id != NONE {
            chain.push(id);
            id = c.segs.headers[id as usize].next;
        }
        assert_eq!(chain.len(), 14);
        let position = |c: &Segcache, k: u32| {
            let (at, _) = entry(c, &format!("k{k:04}")).unwrap();
            chain.iter().position(|&id| id == at.seg).unwrap()
        };
        let mut gone = vec![];
        for k in 0..keys {
            let p = position(&c, k);
            if (p < MERGE_MAX && k % 6 == 0) || ((MERGE_MAX..13).contains(&p) && k % 4 != 0) {
                assert!(c.delete(format!("k{k:04}")));
                gone.push(k);
            }
        }
        let oldest: Vec<_> = (0..keys)
            .filter(|k| !gone.contains(k) && position(&c, *k) < MERGE_MAX)
            .map(|k| (k, entry(&c, &format!("k{k:04}")).unwrap().0))
            .collect();
        let (used, items) = (c.stats().segments_used, c.stats().items);
        assert!(c.compact_any());
        // The oldest run would free one segment; a thinned one frees two
        // or more.
        assert!(
            c.stats().segments_used <= used - 2,
            "a thinned run was packed"
        );
        assert_eq!((c.stats().items, c.stats().evictions), (items, 0));
        for (k, at) in oldest {
            assert_eq!(
                entry(&c, &format!("k{k:04}")).unwrap().0,
                at,
                "key {k} moved"
            );
        }
        for k in 0..keys {
            assert_eq!(
                c.contains(format!("k{k:04}").as_bytes()),
                !gone.contains(&k)
            );
        }
        c.check_invariants();
    }

    #[test]
    fn small_segments_are_evaluated_even_after_a_main_segment_of_older_deadlines() {
        // A main segment whose deadlines are far from the small segments'
        // after it cannot be topped up with their items (TTL precision);
        // the evaluation must still run on the small segments alone and
        // free one, not stop at the main segment.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let ttl = Some(Duration::from_secs(160));
        for k in 0..60u32 {
            c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
        }
        all_main(&mut c);
        // 100 s later (deadlines 100 s apart, the bucket allows 9): new
        // segments, small, never read.
        clock.advance(Duration::from_secs(100));
        for k in 0..200u32 {
            c.set(format!("b{k}"), [1u8; 80], 0, ttl).unwrap();
        }
        let small = c.small_count();
        assert!(small >= 4, "small segments: {small}");
        let (free, evictions) = (c.segs.free_count(), c.stats().evictions);
        assert!(c.evaluate_small(100, false));
        assert!(c.segs.free_count() > free, "the evaluation freed a segment");
        assert!(c.stats().evictions > evictions, "unread items went");
        for k in 0..60u32 {
            assert!(c.contains(format!("a{k}")), "main items stay");
        }
        c.check_invariants();
    }

    #[test]
    fn a_main_segment_no_run_can_hold_gets_a_second_chance_then_goes() {
        // A main segment whose deadline windows and the next one's are
        // more than a segment keeps (TTL precision) cannot be merged: the
        // CLOCK hand halves its read items' counts and moves on, and
        // evicts it whole when nothing in it was read. Before, the merge
        // fell back to the bucket's head (the same segment) and gave up.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let ttl = Some(Duration::from_secs(1000));
        for k in 0..20u32 {
            c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
        }
        // 100 s later (the bucket allows ~60 s between deadlines).
        clock.advance(Duration::from_secs(100));
        let mut b = 0u32;
        while c.stats().segments_used < 5 {
            c.set(format!("b{b}"), [1u8; 80], 0, ttl).unwrap();
            b += 1;
        }
        clock.advance(Duration::from_secs(100));
        c.set("c", [1u8; 80], 0, ttl).unwrap();
        all_main(&mut c);
        let lone = entry(&c, "a0").unwrap().0.seg;
        let bucket = c.segs.headers[lone as usize].ttl_bucket as usize;
        assert_eq!(c.ttl.buckets[bucket].head, lone);
        // 100 s from the next segment's deadlines, it would join it as a
        // second window; as if merged from segments written 100 s apart,
        // its items are in as many windows as a segment keeps.
        let at = c.segs.headers[lone as usize].expire_at;
        let ends: Vec<u32> = c
            .segs
            .item_offsets(lone)
            .map(|(o, i)| o + i.size() as u32)
            .collect();
        assert!(ends.len() >= MAX_WINDOWS);
        let mut windows = Windows::default();
        for w in 0..MAX_WINDOWS {
            let deadline = at + 100 * w as u32;
            let end = ends[(w + 1) * ends.len() / MAX_WINDOWS - 1];
            assert!(windows.push(bucket, deadline, deadline, end));
        }
        assert_eq!(windows.as_slice().len(), MAX_WINDOWS);
        c.segs.set_windows(lone, &windows);
        assert!(c.main_run(bucket, lone).2, "no run holds it");
        c.ttl.buckets[bucket].merge_cursor = lone;
        assert!(c.get("a0").is_some());
        let now = clock.now();

        // Read: a second chance; the hand merges the next run instead.
        let evictions = c.stats().evictions;
        assert!(c.merge_bucket(bucket, now));
        assert!(c.stats().evictions > evictions, "the b run merged");
        assert_eq!(
            entry(&c, "a0"),
            Some((
                Location {
                    seg: lone,
                    offset: 0
                },
                0
            ))
        );
        assert!((0..20u32).all(|k| c.contains(format!("a{k}"))));

        // Nothing read since: evicted whole, remembered as main ghosts.
        c.ttl.buckets[bucket].merge_cursor = lone;
        let (free, evictions) = (c.segs.free_count(), c.stats().evictions);
        assert!(c.merge_bucket(bucket, now));
        assert_eq!(c.segs.free_count(), free + 1);
        assert_eq!(c.stats().evictions, evictions + 20);
        assert!((0..20u32).all(|k| !c.contains(format!("a{k}"))));
        c.set("a1", [1u8; 80], 0, ttl).unwrap();
        assert_eq!(entry(&c, "a1").unwrap().1, PROMOTE_FREQ, "back warm");
        c.check_invariants();
    }

    #[test]
    fn merging_across_deadline_windows_keeps_each_items_deadline() {
        // Two main segments whose deadlines lie 100 s apart (the bucket
        // allows ~60 s in one segment) merge into one, which keeps the two
        // windows: every item expires at its own deadline, not its new
        // neighbours', and the segment goes when the later window does.
        let clock = ManualClock::new();
        clock.set(1_000);
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let ttl = Some(Duration::from_secs(1000));
        for k in 0..20u32 {
            c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
        }
        clock.advance(Duration::from_secs(100));
        for k in 0..20u32 {
            c.set(format!("b{k}"), [1u8; 80], 0, ttl).unwrap();
        }
        clock.advance(Duration::from_secs(100));
        c.set("c", [1u8; 80], 0, ttl).unwrap();
        let (a, b) = (
            entry(&c, "a0").unwrap().0.seg,
            entry(&c, "b0").unwrap().0.seg,
        );
        assert_ne!(a, b);
        all_main(&mut c);
        for k in 0..20u32 {
            assert!(c.get(format!("a{k}")).is_some() && c.get(format!("b{k}")).is_some());
        }
        let bucket = c.segs.headers[a as usize].ttl_bucket as usize;
        let (chain, len, _) = c.main_run(bucket, a);
        assert_eq!(&chain[..len], [a, b], "one run across the two windows");
        c.ttl.buckets[bucket].merge_cursor = a;
        let used = c.stats().segments_used;
        assert!(c.merge_bucket(bucket, clock.now()));
        assert_eq!(
            c.stats().segments_used,
            used - 1,
            "the merge freed a segment"
        );
        assert_eq!(entry(&c, "b0").unwrap().0.seg, a);
        assert!(c.segs.headers[a as usize].is_split());
        assert_eq!(c.segs.windows(a).as_slice().len(), 2);
        c.check_invariants();
        // Each item reports its own time left.
        let left = |c: &mut Segcache, key: &str| c.get(key).map(|i| i.ttl().duration().unwrap());
        assert_eq!(left(&mut c, "a0"), Some(Duration::from_secs(800)));
        assert_eq!(left(&mut c, "b0"), Some(Duration::from_secs(900)));
        // At the first window's deadline its items go, the others stay;
        // the expiry walk reaps the first window's unread items.
        clock.set(2_000);
        assert!(c.get("a0").is_none());
        assert!(c.get("b0").is_some());
        let expired = c.expire();
        assert_eq!((expired.items, expired.segments), (19, 0));
        assert!((0..20u32).all(|k| c.contains(format!("b{k}"))));
        c.check_invariants();
        // The segment goes with its last window.
        clock.set(2_100);
        let expired = c.expire();
        assert_eq!((expired.items, expired.segments), (20, 1));
        assert!(c.get("b1").is_none());
        c.check_invariants();
    }

    #[test]
    fn keys_of_a_segment_evicted_whole_come_back_warm() {
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        for k in 0..100u32 {
            c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
        }
        let (at, _) = entry(&c, "k0").unwrap();
        let gone: Vec<u32> = (0..100u32)
            .filter(|k| entry(&c, &format!("k{k}")).unwrap().0.seg == at.seg)
            .collect();
        c.evict_segment(at.seg);
        assert!(gone.len() > 10 && gone.iter().all(|k| !c.contains(format!("k{k}"))));
        for k in &gone {
            c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
        }
        let warm = gone
            .iter()
            .filter(|k| entry(&c, &format!("k{k}")).unwrap().1 == super::PROMOTE_FREQ)
            .count();
        assert!(warm * 4 >= gone.len() * 3, "{warm}/{} warm", gone.len());
        let cold = entry(&c, "k99").unwrap().1;
        assert_eq!(cold, 0, "a key never evicted has no access");
        c.check_invariants();
    }

    #[test]
    fn an_overwrite_counts_as_an_access() {
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        c.set("once", [1u8; 80], 0, None).unwrap();
        c.set("twice", [1u8; 80], 0, None).unwrap();
        assert_eq!(
            entry(&c, "twice").unwrap().1,
            0,
            "a first write is no access"
        );
        c.set("twice", [2u8; 80], 0, None).unwrap();
        assert_eq!(entry(&c, "once").unwrap().1, 0);
        assert_eq!(
            entry(&c, "twice").unwrap().1,
            super::REWRITE_FREQ,
            "written again before its evaluation: promoted by it"
        );
        // Reads already counted are kept, not lowered.
        for _ in 0..3 {
            clock.advance(Duration::from_secs(1));
            c.get("twice").unwrap();
        }
        c.set("twice", [3u8; 80], 0, None).unwrap();
        assert_eq!(entry(&c, "twice").unwrap().1, super::REWRITE_FREQ + 3);
        c.check_invariants();
    }

    #[test]
    fn a_key_written_twice_but_never_read_passes_probation() {
        // Two keys written at the same time, one of them written again;
        // neither is read. Then a flood of keys written once: the oldest
        // small segments are evaluated, and only the rewritten key (its
        // rewrite counted as an access) moves to main.
        let clock = ManualClock::new();
        let mut c = merge_cache(256 << 10, 4 << 10, &clock);
        for k in 0..20u32 {
            c.set(format!("once{k}"), [1u8; 80], 0, None).unwrap();
            c.set(format!("twice{k}"), [1u8; 80], 0, None).unwrap();
        }
        for k in 0..20u32 {
            c.set(format!("twice{k}"), [2u8; 80], 0, None).unwrap();
        }
        for i in 0..4_000u32 {
            c.set(format!("flood{i}"), [3u8; 80], 0, None).unwrap();
        }
        let once = (0..20u32)
            .filter(|k| c.contains(format!("once{k}")))
            .count();
        let twice = (0..20u32)
            .filter(|k| c.contains(format!("twice{k}")))
            .count();
        assert!(c.stats().evictions > 0, "the flood was evicted");
        assert_eq!(once, 0, "unread keys left with probation");
        assert_eq!(twice, 20, "rewritten keys passed it");
        // In main, they still count as read once (the promotion halved
        // the rewrite's two accesses): a main merge, which keeps what was
        // read since the last move, keeps them too.
        for k in 0..20u32 {
            let (at, freq) = entry(&c, &format!("twice{k}")).unwrap();
            assert!(c.admission.is_main(at.seg), "twice{k} in main");
            assert!(
                freq >= super::PROMOTE_FREQ,
                "twice{k} still counts a read: {freq}"
            );
        }
        c.check_invariants();
    }

    #[test]
    fn a_scan_does_not_flush_the_hot_set() {
        // 300 hot keys (~30 KiB) read every round in a 256 KiB heap, while
        // a scan writes 20 000 keys that are never read again (~2 MiB,
        // eight times the heap). FIFO would have cycled the hot keys out
        // many times; the small pool filters the scan.
        let clock = ManualClock::new();
        let mut c = merge_cache(256 << 10, 8 << 10, &clock);
        for h in 0..300u32 {
            c.set(format!("hot{h}"), [7u8; 80], 0, None).unwrap();
        }
        let mut misses = 0;
        for i in 0..20_000u32 {
            if i % 50 == 0 {
                clock.advance(Duration::from_secs(1));
                for h in 0..300u32 {
                    let key = format!("hot{h}");
                    if c.get(&key).is_none() {
                        misses += 1;
                        c.set(&key, [7u8; 80], 0, None).unwrap();
                    }
                }
            }
            c.set(format!("scan{i}"), [1u8; 80], 0, None).unwrap();
        }
        let s = c.stats();
        assert!(s.evictions > 15_000, "the scan was evicted: {s:?}");
        assert!(
            misses < 300,
            "hot keys missed {misses} times over 400 rounds"
        );
        let hot = (0..300u32)
            .filter(|h| c.contains(format!("hot{h}")))
            .count();
        assert!(hot >= 295, "hot keys held at the end: {hot}/300");
        c.check_invariants();
    }

    #[test]
    fn an_evaluation_promotes_only_what_was_read() {
        // Probation keeps nothing unread: the items read move to main, the
        // rest of the run is evicted and its room freed, not filled with
        // unread items that would then skip probation (one segment in
        // every run did, half the evaluated items in runs of two).
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        for k in 0..600u32 {
            c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
        }
        clock.advance(Duration::from_secs(1));
        for k in 0..10u32 {
            assert!(c.get(format!("k{k}")).is_some());
        }
        let small = c.small_count();
        assert!(small >= 12, "small segments: {small}");
        let free = c.segs.free_count();
        assert!(c.evaluate_small(1, false));
        assert_eq!(
            c.admission.mains(),
            1,
            "one main segment for the read items"
        );
        let (at, _) = entry(&c, "k0").unwrap();
        assert!(c.admission.is_main(at.seg));
        let in_main = (0..600u32)
            .filter(|k| {
                entry(&c, &format!("k{k}")).is_some_and(|(l, _)| c.admission.is_main(l.seg))
            })
            .count();
        assert_eq!(in_main, 10, "only the read keys joined main");
        assert_eq!(c.segs.free_count(), free + 1, "the rest was freed");
        assert_eq!(c.stats().evictions as usize, 2 * 46 - 10);
        c.check_invariants();
    }

    #[test]
    fn an_evaluation_promotes_keys_dropped_often_while_main_has_room() {
        // A key probation dropped DROPS_TO_PROMOTE times lately is kept
        // unread by its evaluation while main holds less than its share;
        // one dropped a time fewer is evicted, and an evaluation that must
        // free a segment promotes nothing unread.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        for k in 0..600u32 {
            c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
        }
        c.admission.give_drop_counts(1024);
        let drop = |c: &mut Segcache, key: &str, times: u8| {
            let hash = c.table.hash(key.as_bytes());
            for _ in 0..times {
                c.admission.remember(hash, false);
            }
        };
        drop(&mut c, "k3", crate::admission::DROPS_TO_PROMOTE);
        drop(&mut c, "k4", crate::admission::DROPS_TO_PROMOTE - 1);
        let (oldest, _) = entry(&c, "k3").unwrap();
        assert_eq!(entry(&c, "k4").unwrap().0.seg, oldest.seg);
        assert!(c.admission.main_has_room(0));
        assert!(c.evaluate_small(1, false));
        let (at, freq) = entry(&c, "k3").expect("dropped often: kept");
        assert!(c.admission.is_main(at.seg) && freq == 0, "promoted unread");
        assert!(!c.contains("k4"), "one drop short: evicted");
        assert!(!c.contains("k5"), "never dropped: evicted");
        // Must free: the unread go whatever their past.
        let next = c.segs.headers[oldest.seg as usize].next;
        let victim = (0..600u32)
            .map(|k| format!("k{k}"))
            .find(|k| entry(&c, k).is_some_and(|(l, _)| l.seg == next))
            .unwrap();
        drop(&mut c, &victim, crate::admission::DROPS_TO_PROMOTE);
        let oldest_small = c.oldest_small().unwrap();
        assert_eq!(c.oldest_in_run(oldest_small), next);
        assert!(c.evaluate_small(1, true));
        assert!(
            !c.contains(&victim),
            "a forced evaluation keeps nothing unread"
        );
        c.check_invariants();
    }

    #[test]
    fn an_evaluation_promotes_small_unread_items_while_main_has_room() {
        // Items of 1/2 the mean or less are promoted unread while main has
        // room; larger unread ones are evicted, and so is an item of more
        // than twice the mean however often probation dropped it.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        c.admission.give_drop_counts(1024);
        for k in 0..200u32 {
            let len = match k {
                7 => 1_000,
                _ if k % 10 == 3 => 10,
                _ => 300,
            };
            c.set(format!("k{k}"), vec![1u8; len], 0, None).unwrap();
        }
        let stats = c.stats();
        assert_eq!(stats.evictions, 0);
        let hash = c.table.hash(b"k7");
        for _ in 0..crate::admission::DROPS_TO_PROMOTE {
            c.admission.remember(hash, false);
        }
        let (oldest, _) = entry(&c, "k0").unwrap();
        let run = [oldest.seg, c.segs.headers[oldest.seg as usize].next];
        let in_run: Vec<u32> = (0..200u32)
            .filter(|k| entry(&c, &format!("k{k}")).is_some_and(|(l, _)| run.contains(&l.seg)))
            .collect();
        assert!(in_run.contains(&3) && in_run.contains(&7) && in_run.contains(&13));
        assert!(c.admission.main_has_room(0));
        assert!(c.evaluate_small(1, false));
        for k in in_run {
            let key = format!("k{k}");
            if k % 10 == 3 {
                let (at, freq) = entry(&c, &key).expect("small: kept");
                assert!(
                    c.admission.is_main(at.seg) && freq == 0,
                    "{key} promoted unread"
                );
            } else {
                assert!(!c.contains(&key), "{key}: unread and not small, evicted");
            }
        }
        c.check_invariants();
        // In a heap of a few segments nothing small is promoted unread.
        let mut c = merge_cache(24 << 10, 4 << 10, &clock);
        for k in 0..40u32 {
            let len = if k % 10 == 3 { 10 } else { 300 };
            c.set(format!("k{k}"), vec![1u8; len], 0, None).unwrap();
        }
        assert!(c.segs.count() < 8 && c.contains("k3"));
        assert!(c.evaluate_small(1, false));
        assert!(!c.contains("k3"), "a heap of few segments: evicted");
        c.check_invariants();
    }

    #[test]
    fn drop_counts_take_only_room_the_merge_scratch_cannot_use() {
        // Large items: runs need a few hundred records of the scratch's
        // thousands; at the first eviction 1/2048 of the heap moves from
        // the scratch to the drop counts, and memory does not grow.
        let clock = ManualClock::new();
        let heap = 8 << 20;
        let mut c = small_cache(heap, 64 << 10, 10, Eviction::default(), &clock);
        let scratch = c.merge_scratch.capacity();
        let before = c.stats().admission_bytes - c.admission.ghosts.bytes() as u64;
        assert!(!c.admission.drop_counts_sized());
        for i in 0..4_000u32 {
            c.set(format!("big{i}"), vec![7u8; 4_000], 0, None).unwrap();
        }
        assert!(c.stats().evictions > 0);
        assert!(c.admission.drop_counts_sized());
        let records = heap / crate::admission::DROP_COUNTS_HEAP_SHARE / 8;
        assert_eq!(c.admission.drop_counts_bytes(), records * 8);
        assert_eq!(c.merge_scratch.capacity(), scratch - records);
        let after = c.stats().admission_bytes - c.admission.ghosts.bytes() as u64;
        assert_eq!(after, before, "bytes moved, none added");
        c.check_invariants();
        // Small items: the scratch is needed whole; no drop counts.
        let mut c = small_cache(1 << 20, 8 << 10, 12, Eviction::default(), &clock);
        let scratch = c.merge_scratch.capacity();
        for i in 0..40_000u32 {
            c.set(format!("key{i}"), [5u8; 60], 0, None).unwrap();
        }
        assert!(c.admission.drop_counts_sized());
        assert_eq!(c.admission.drop_counts_bytes(), 0);
        assert_eq!(c.merge_scratch.capacity(), scratch);
        c.check_invariants();
    }

    #[test]
    fn an_evaluation_with_nothing_read_frees_only_the_oldest_segment() {
        // Freeing both segments of the run would leave one empty until
        // written again (memory that holds nothing); the next one waits
        // for its own evaluation.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        for k in 0..600u32 {
            c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
        }
        let (oldest, _) = entry(&c, "k0").unwrap();
        let next = c.segs.headers[oldest.seg as usize].next;
        let in_next: Vec<u32> = (0..600u32)
            .filter(|k| entry(&c, &format!("k{k}")).unwrap().0.seg == next)
            .collect();
        assert!(in_next.len() > 40);
        let free = c.segs.free_count();
        assert!(c.evaluate_small(0, false));
        assert_eq!(c.segs.free_count(), free + 1, "one segment freed");
        assert!(!c.contains("k0"));
        assert!(
            in_next.iter().all(|k| c.contains(format!("k{k}"))),
            "the next segment is still on probation"
        );
        assert_eq!(c.admission.mains(), 0);
        c.check_invariants();
    }

    #[test]
    fn a_hot_set_of_nine_tenths_of_the_heap_stays() {
        // 4 250 hot keys of 111 B (90% of the heap's bytes) are read each
        // round while one-off keys trickle in: main must hold the hot set,
        // so probation may shrink to 5% of the heap. With S3-FIFO's 10%
        // floor a tenth of the heap stays with one-off keys and hot keys
        // cycle out of main (1 910 misses at 4 200 hot keys; none at 4 100).
        let clock = ManualClock::new();
        let mut c = merge_cache(512 << 10, 8 << 10, &clock);
        let hot = 4_250u32;
        for h in 0..hot {
            c.set(format!("h{h:05}"), [7u8; 100], 0, None).unwrap();
        }
        let mut misses = 0;
        let mut one_off = 0u32;
        for round in 0..60 {
            clock.advance(Duration::from_secs(1));
            for h in 0..hot {
                let key = format!("h{h:05}");
                if c.get(&key).is_none() {
                    if round >= 30 {
                        misses += 1;
                    }
                    c.set(&key, [7u8; 100], 0, None).unwrap();
                }
            }
            for _ in 0..200 {
                c.set(format!("o{one_off}"), [1u8; 100], 0, None).unwrap();
                one_off += 1;
            }
        }
        assert!(misses < 100, "hot misses in the last 30 rounds: {misses}");
        c.check_invariants();
    }

    #[test]
    fn a_key_back_from_the_ghosts_is_promoted() {
        // Keys written once and never read are dropped by their first
        // evaluation; written again soon after, they start warm and
        // survive the next one, while new unread keys do not.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let fill = |c: &mut Segcache, prefix: &str, n: u32| {
            for i in 0..n {
                c.set(format!("{prefix}{i}"), [3u8; 80], 0, None).unwrap();
            }
        };
        fill(&mut c, "a", 400);
        // Push the a-keys through their evaluation (but not so much traffic
        // that their ghosts, one per item held in a cache this small, are
        // pushed out).
        fill(&mut c, "b", 1_400);
        let a_left = (0..400u32).filter(|i| c.contains(format!("a{i}"))).count();
        assert!(
            a_left < 150,
            "unread keys were mostly evicted: {a_left}/400 left"
        );
        // Back again: ghosts. Then as much new unread traffic as before.
        fill(&mut c, "a", 400);
        fill(&mut c, "c", 1_500);
        let a_kept = (0..400u32).filter(|i| c.contains(format!("a{i}"))).count();
        let c_kept = (0..400u32).filter(|i| c.contains(format!("c{i}"))).count();
        assert!(
            a_kept > 300 && a_kept > 4 * c_kept.max(1),
            "readmitted keys promoted: {a_kept}/400 vs {c_kept}/400 of new ones"
        );
        c.check_invariants();
    }

    #[test]
    fn admission_memory_is_counted_and_follows_the_items() {
        let clock = ManualClock::new();
        let mut c = merge_cache(1 << 20, 8 << 10, &clock);
        let before = c.stats();
        assert_eq!(
            before.total_bytes,
            before.heap_bytes
                + before.hash_table_bytes
                + before.segment_header_bytes
                + before.admission_bytes
        );
        for i in 0..40_000u32 {
            c.set(format!("key{i}"), [5u8; 60], 0, None).unwrap();
        }
        let s = c.stats();
        assert!(s.evictions > 0);
        assert_eq!(
            s.total_bytes,
            s.heap_bytes + s.hash_table_bytes + s.segment_header_bytes + s.admission_bytes
        );
        // Ghosts: about 0.55 bytes per item held (a quarter to three
        // eighths of an entry of 2 bytes each), plus a flag per segment and
        // the merge scratch, fixed at build.
        let scratch = (c.merge_scratch.capacity() * std::mem::size_of::<LiveItem>()) as u64;
        let per_item = (s.admission_bytes - 128 - scratch) as f64 / s.items as f64;
        assert!(
            (0.45..=0.8).contains(&per_item),
            "admission bytes per item: {per_item:.2} ({s:?})"
        );
        c.check_invariants();
    }

    #[test]
    fn merge_records_round_trip_at_their_bit_limits() {
        // Every field at 0, 1 and its largest value, next to every other
        // field at its extremes: no field bleeds into another.
        let buckets = [
            0,
            1,
            (1 << 30) + 7,
            (1 << 31) - 1,
            1 << 31,
            u32::MAX as usize,
        ];
        let sizes = [
            0,
            1,
            5,
            hashtable::MAX_SEGMENT_SIZE - 1,
            hashtable::MAX_SEGMENT_SIZE,
            (1 << 22) - 1,
        ];
        for bucket in buckets {
            for slot in [0, 1, 6, 7] {
                for size in sizes {
                    for freq in [0u8, 1, 126, 127] {
                        let r = LiveItem::new(bucket, slot, size, freq);
                        assert_eq!(
                            (r.bucket(), r.slot(), r.size(), r.freq()),
                            (bucket, slot, size, freq)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_evaluation_keeps_what_was_read_and_remembers_what_it_evicted() {
        // The reference, read from the table before the evaluation: the
        // keys of the run's two segments read since written stay (with
        // their values), the others go and are remembered as ghosts of the
        // small pool under their own key's hash; nothing else changes.
        let clock = ManualClock::new();
        let mut c = merge_cache(128 << 10, 4 << 10, &clock);
        let value = |k: u32| [k as u8; 80];
        for k in 0..600u32 {
            c.set(format!("k{k}"), value(k), 0, None).unwrap();
        }
        clock.advance(Duration::from_secs(1));
        for k in (0..600u32).step_by(7) {
            assert!(c.get(format!("k{k}")).is_some());
        }
        let first = entry(&c, "k0").unwrap().0.seg;
        let run = [first, c.segs.headers[first as usize].next];
        let before: Vec<(u32, Location, u8)> = (0..600u32)
            .map(|k| {
                let (at, freq) = entry(&c, &format!("k{k}")).unwrap();
                (k, at, freq)
            })
            .collect();
        let in_run = before.iter().filter(|(_, at, _)| run.contains(&at.seg));
        let (read, unread): (Vec<&(u32, Location, u8)>, Vec<_>) =
            in_run.partition(|(_, _, f)| *f >= PROMOTE_FREQ);
        assert!(
            read.len() >= 10 && unread.len() >= 60,
            "{} / {}",
            read.len(),
            unread.len()
        );
        // As a merge step would, fit the ghosts to the items held first.
        c.admission.ghosts.fit(c.stats().items as usize);
        let evictions = c.stats().evictions;
        assert!(c.evaluate_small(1, false));
        assert_eq!(c.stats().evictions - evictions, unread.len() as u64);
        for &(k, at, _) in &before {
            let key = format!("k{k}");
            let kept = !run.contains(&at.seg) || read.iter().any(|r| r.0 == k);
            match c.get(&key) {
                Some(item) => {
                    assert!(kept, "{key} should have gone");
                    assert_eq!(item.value(), &value(k)[..], "{key}");
                }
                None => assert!(!kept, "{key} should have stayed"),
            }
        }
        let remembered = unread
            .iter()
            .filter(|(k, _, _)| {
                let hash = c.table.hash(format!("k{k}").as_bytes());
                c.admission.ghosts.take(hash) == Some(false)
            })
            .count();
        assert_eq!(remembered, unread.len(), "every evicted key is a ghost");
        c.check_invariants();
    }

    #[test]
    fn merges_while_the_table_drains_move_the_right_entries() {
        // A merge records table positions; while the table grows, those
        // of entries not yet drained name the old table (its flag bit).
        // Keys written from a table of 8 buckets until it drains a table
        // of over a thousand homes; then, with most of it still to drain,
        // a compaction and an evaluation run: every key reads back its
        // value (or is gone as it should be), the counters add up.
        let clock = ManualClock::new();
        let mut c = small_cache(1 << 20, 1 << 10, 3, Eviction::default(), &clock);
        let value = |k: u32| (k * 7).to_le_bytes().repeat(1 + k as usize % 5);
        let mut keys = 0u32;
        while !(c.table.is_growing() && c.table.slots() >= 7 * 2048) {
            c.set(format!("key{keys}"), value(keys), 0, None).unwrap();
            keys += 1;
            assert!(keys < 100_000, "the table grew");
        }
        // Thin the oldest segments out (compaction); read a few of their
        // keys (an evaluation keeps those, evicts the others).
        let deleted = |k: u32| k < 150 && k % 3 == 0;
        let read = |k: u32| k < 150 && k % 3 == 1;
        for k in (0..keys).filter(|&k| deleted(k)) {
            assert!(c.delete(format!("key{k}")));
        }
        clock.advance(Duration::from_secs(1));
        for k in (0..keys).filter(|&k| read(k)) {
            assert!(c.get(format!("key{k}")).is_some());
        }
        let (merges, evictions) = (c.stats().merges, c.stats().evictions);
        assert!(c.table.is_growing(), "still draining");
        assert!(c.compact_any(), "thinned segments compact");
        assert_eq!(c.stats().evictions, evictions);
        assert!(c.table.is_growing());
        assert!(c.evaluate_small(1, true), "an evaluation ran");
        assert!(c.stats().merges >= merges + 2);
        assert!(c.stats().evictions > evictions, "unread items went");
        assert!(c.table.is_growing(), "merged while draining");
        c.check_invariants();
        let mut evicted = 0;
        for k in 0..keys {
            match c.get(format!("key{k}")) {
                Some(item) => {
                    assert!(!deleted(k), "key{k} deleted");
                    assert_eq!(item.value(), &value(k)[..], "key{k}");
                }
                None => {
                    assert!(!read(k), "read key{k} kept");
                    evicted += !deleted(k) as u64;
                }
            }
        }
        assert_eq!(evicted, c.stats().evictions - evictions);
        c.check_invariants();
    }

    #[test]
    fn compaction_in_windows_gives_what_one_pass_gives() {
        // Two caches take the same writes, deletes and compactions of main
        // segments: one with the scratch it was built with (256 items,
        // about five of these segments), so runs of up to twelve are
        // compacted a window at a time; one with a scratch for whole runs.
        // Every key ends at the same place with the same count, every
        // segment with the same header.
        let clock = ManualClock::new();
        let build = || merge_cache(128 << 10, 4 << 10, &clock);
        let (mut windows, mut whole) = (build(), build());
        assert_eq!(windows.merge_scratch.capacity(), 256);
        whole.merge_scratch = Vec::with_capacity(12 * 4096 / 64);
        let mut keys = 0u32;
        let mut compactions = 0;
        for round in 0..8u32 {
            while windows.stats().segments_used < 26 {
                for c in [&mut windows, &mut whole] {
                    c.set(format!("k{keys:05}"), [keys as u8; 80], 0, None)
                        .unwrap();
                }
                keys += 1;
            }
            clock.advance(Duration::from_secs(1));
            for c in [&mut windows, &mut whole] {
                all_main(c);
                for k in 0..keys {
                    let key = format!("k{k:05}");
                    let mix = (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (32 + round);
                    match mix % 8 {
                        0 => {
                            c.delete(&key);
                        }
                        1 => {
                            c.get(&key);
                        }
                        _ => {}
                    }
                }
            }
            loop {
                let (a, b) = (windows.compact_any(), whole.compact_any());
                assert_eq!(a, b, "round {round}");
                if !a {
                    break;
                }
                compactions += 1;
            }
            let (a, b) = (windows.stats(), whole.stats());
            assert_eq!(
                (
                    a.merges,
                    a.items,
                    a.live_bytes,
                    a.evictions,
                    a.segments_used
                ),
                (
                    b.merges,
                    b.items,
                    b.live_bytes,
                    b.evictions,
                    b.segments_used
                ),
                "round {round}"
            );
            for k in 0..keys {
                let key = format!("k{k:05}");
                assert_eq!(entry(&windows, &key), entry(&whole, &key), "{key}");
            }
            for id in 0..windows.segs.count() {
                let (x, y) = (&windows.segs.headers[id], &whole.segs.headers[id]);
                assert_eq!(
                    (x.state, x.write_offset, x.live_items, x.live_bytes, x.next),
                    (y.state, y.write_offset, y.live_items, y.live_bytes, y.next),
                    "segment {id}, round {round}"
                );
                if x.state != SegState::Free {
                    let n = x.write_offset as usize;
                    assert!(
                        windows.segs.data(id as u32)[..n] == whole.segs.data(id as u32)[..n],
                        "segment {id} bytes, round {round}"
                    );
                }
            }
            windows.check_invariants();
            whole.check_invariants();
        }
        assert!(compactions > 10, "compactions: {compactions}");
    }

    #[test]
    fn packing_keeps_every_item_it_must_even_when_sizes_do_not_split() {
        // Three items of 0.6 segment each do not pack into two segments,
        // although their bytes would: the plan must see that and keep all.
        let item = |bucket: usize, size: usize, freq: u8| LiveItem::new(bucket, 1, size, freq);
        let live = [item(0, 600, 0), item(1, 600, 0), item(2, 600, 0)];
        assert!(!pack(&live, 3, 0, 0, 2, 1000, |_, _, _| {}));
        let mut placed = vec![];
        assert!(pack(&live, 3, 0, 0, 3, 1000, |it, forced, to| {
            assert!(forced);
            placed.push((it.bucket(), to))
        }));
        assert_eq!(
            placed,
            [(0, Some((0, 0))), (1, Some((1, 0))), (2, Some((2, 0)))]
        );
        // Not forced: the cutoff decides, borderline items fill what is left.
        let live = [
            item(0, 300, 5),
            item(0, 300, 0),
            item(1, 300, 4),
            item(1, 300, 3),
        ];
        let mut kept = vec![];
        assert!(pack(&live, 0, 4, 300, 1, 1000, |it, forced, to| {
            assert!(!forced);
            if to.is_some() {
                kept.push(it.freq())
            }
        }));
        assert_eq!(kept, [5, 4, 3], "count-0 item goes, count-3 fills the room");
    }

    /// The sum of `live_items` over the longest run of consecutive sealed
    /// main segments of one TTL bucket, capped at [`COMPACT_MAX_MAIN`]
    /// segments: what one compaction could read with no scratch bound.
    fn longest_main_run_items(c: &Segcache) -> usize {
        let mut best = 0;
        for bucket in 0..BUCKETS {
            let mut start = c.ttl.buckets[bucket].head;
            while start != NONE {
                let (mut at, mut n, mut items) = (start, 0, 0);
                while n < COMPACT_MAX_MAIN && c.sealed(at) && c.admission.is_main(at) {
                    items += c.segs.headers[at as usize].live_items as usize;
                    n += 1;
                    at = c.segs.headers[at as usize].next;
                }
                best = best.max(items);
                start = c.segs.headers[start as usize].next;
            }
        }
        best
    }

    #[test]
    fn merge_scratch_is_fixed_at_build_and_counted() {
        // 128 segments of 4 KiB: 1/512 of the heap is 128 items, under
        // the floor of 256 (4 segments of 64-byte items), while 12 main
        // segments of ~40-byte items hold up to 1200.
        let clock = ManualClock::new();
        let mut c = merge_cache(512 << 10, 4 << 10, &clock);
        let cap = scratch_items(128, 4 << 10);
        assert_eq!(cap, 256);
        // Full-heap sizes (BENCHMARKS §4a): 256 segments of 256 KiB, 1/512
        // of the heap (0.2 B per ~100-byte item); 4096 of them, 12 segments
        // of 64-byte items; 64 segments of 1 MiB (a default heap up to
        // 64 MiB), the floor; 3 segments, 1/16 of the heap.
        assert_eq!(scratch_items(256, 256 << 10), 16_384);
        assert_eq!(scratch_items(4096, 256 << 10), 12 * 4096);
        assert_eq!(scratch_items(64, 1 << 20), 4 * (1 << 20) / 64);
        assert_eq!(scratch_items(3, 4 << 10), 3 * 4096 / 16 / 8);
        assert_eq!(c.merge_scratch.capacity(), cap);
        let built = c.stats();
        assert!(built.admission_bytes as usize >= cap * std::mem::size_of::<LiveItem>());
        let ghosts_at_build = c.admission.ghosts.bytes();
        // Keys read once, then rewritten at random: promoted items go to
        // main, rewrites leave their old copies dead there, thin main
        // segments get compacted and merged.
        let mut rng = 7u64;
        let mut bound_mattered = false;
        for op in 0..200_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = format!("key-{:05}", rng % 20_000);
            if op % 3 == 0 {
                c.get(key.as_bytes());
            } else {
                c.set(key.as_bytes(), [op as u8; 24], 0, None).unwrap();
            }
            if op % 1000 == 0 {
                // What the cache accounts for stays what it was built with,
                // but for the ghosts' growth; the scratch never grows.
                assert_eq!(c.merge_scratch.capacity(), cap, "op {op}");
                let s = c.stats();
                let ghost_growth =
                    c.admission.ghosts.bytes() - ghosts_at_build.min(c.admission.ghosts.bytes());
                assert!(
                    s.total_bytes <= built.total_bytes + ghost_growth as u64,
                    "op {op}: {} > {} + {ghost_growth}",
                    s.total_bytes,
                    built.total_bytes
                );
                bound_mattered |= longest_main_run_items(&c) > cap;
            }
        }
        let s = c.stats();
        assert!(s.merges > 100, "merges ran: {}", s.merges);
        assert!(
            bound_mattered,
            "a run of main segments held more items than the scratch"
        );
        assert_eq!(c.merge_scratch.capacity(), cap);
        c.check_invariants();
    }
}

//! The merge scratch: how many live-item records a cache keeps for its
//! merge passes (sized once, at build, out of the heap's bytes), and the
//! one-word record itself ([`LiveItem`]).
//!
//! Must never: grow after build (the scratch is counted in the cache's
//! memory), or choose what to evict.

use super::*;

/// The scratch's floor: a run of this many full segments of
/// [`SCRATCH_ITEM_BYTES`] items (see [`scratch_floor`]).
const SCRATCH_FLOOR_SEGMENTS: usize = 4;
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
pub(super) fn compaction_run_items(segments: usize, segment_size: usize) -> usize {
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
    pub(super) fn new(bucket: usize, slot: usize, size: usize, freq: u8) -> Self {
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
    pub(super) fn bucket(self) -> usize {
        (self.0 >> BUCKET_SHIFT) as usize
    }

    #[inline]
    pub(super) fn slot(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }

    #[inline]
    pub(super) fn size(self) -> usize {
        (self.0 >> SIZE_SHIFT) as usize & ((1 << SIZE_BITS) - 1)
    }

    #[inline]
    pub(super) fn freq(self) -> u8 {
        (self.0 >> FREQ_SHIFT) as u8 & ((1 << FREQ_BITS) - 1) as u8
    }
}

impl Segcache {
    /// Gives the drop counts (`Admission::dropped_often`) their bytes, once,
    /// at the first eviction, out of the merge scratch: sized at build for
    /// runs of [`SCRATCH_ITEM_BYTES`]-byte items, it holds far more records
    /// than runs of large items can fill (a run of the block trace's
    /// ~41 KB objects: about 150 of 32 768). If the scratch holds twice
    /// what a run of [`SCRATCH_RUN_SEGMENTS`] segments of the items held so far
    /// needs, plus 1/[`DROP_COUNTS_HEAP_SHARE`](crate::admission::DROP_COUNTS_HEAP_SHARE) of the heap, it shrinks by
    /// that much and the drop counts take it; else there are none (a cache
    /// of small items, where they would cost 0.05 B per item and gained
    /// nothing). Memory never grows: the bytes move from one to the other.
    pub(super) fn size_drop_counts(&mut self) {
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
}

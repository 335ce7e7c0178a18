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
//!    [`MAIN_LIVE_BOUND`](runs::MAIN_LIVE_BOUND)), it is packed in place; nothing is evicted.
//!    A small run's deadlines must also lie within
//!    [`SMALL_SPREAD`](crate::ttl::SMALL_SPREAD) (about 9.1 h) of each other.
//!    The oldest such run goes first unless another frees segments for
//!    far fewer bytes moved ([`COMPACTION_COST_SLACK`](runs::COMPACTION_COST_SLACK)).
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
//!
//! The files: this one runs the policy (which step a needed segment
//! takes, the simple policies, the constants every step shares);
//! `runs.rs` chooses the segments of each step (compaction runs, the
//! small pool's evaluations, main merges); `merge.rs` is the merge pass
//! that moves a chosen chain's live items into its outputs and evicts the
//! rest; `scratch.rs` sizes the merge scratch and packs its records.

mod merge;
mod runs;
mod scratch;
#[cfg(test)]
mod tests;

use scratch::compaction_run_items;
pub(crate) use scratch::scratch_items;
pub(crate) use scratch::LiveItem;

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
/// to [`MAIN_LIVE_BOUND`](runs::MAIN_LIVE_BOUND) missed less on 9 of the 19 rows of §1 (up to
/// 0.0037) and more on one by 0.0002 (§1g, second look; 32: about the
/// same).
/// Small segments stay at [`MERGE_MAX`]: packing younger probation items
/// into older segments shortens their probation.
pub(crate) const COMPACT_MAX_MAIN: usize = 24;
const _: () = assert!(COMPACT_MAX_MAIN >= MERGE_MAX, "a merge's outputs fit");
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
        let items = self.unlink_segment(id, false);
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
}

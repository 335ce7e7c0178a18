//! Admission: which segments are on probation (the *small* pool, S3-FIFO's
//! small queue) and which hold items that proved themselves (the *main*
//! pool), plus the [`Ghosts`] of keys dropped from probation (and of keys
//! that expired after proving themselves, [`Admission::remember_expired`]).
//!
//! Every segment the write path opens starts small. Merge eviction (in
//! `eviction/`) evaluates the oldest small segments first, while the
//! small pool is over its target (from [`SMALL_PERCENT`] of the heap, then
//! adapted by the ghosts, see [`Admission::readmit`]): items read
//! since they were written move on to main segments, the rest are evicted
//! and remembered as ghosts. A write of a key found among the ghosts starts
//! with one access, so its next evaluation promotes it (a key dropped from
//! probation only while the adaptation wants the small pool above its
//! floor, see [`Admission::readmit`]). Main segments are
//! merged among themselves. While main holds less than its share, an
//! evaluation also promotes some unread items
//! ([`Admission::promotes_unread`]): those smaller than half the mean item
//! held (they cost little room for the hit they may bring), and those no
//! larger than twice the mean whose key probation dropped often lately
//! ([`Admission::dropped_often`], counted by a sketch that exists only
//! where the merge scratch has room to spare). This module only keeps the
//! flags, the count and the ghosts; it never moves items or frees segments.

use crate::ghost::{DropCounts, Ghosts};

/// The small pool's initial share of the heap, in percent (its floor).
pub(crate) const SMALL_PERCENT: u64 = MIN_SMALL_PERCENT;
/// Bounds of the small pool's share as it adapts. The floor is 5%, half
/// S3-FIFO's 10%: once evaluations keep nothing unread, 5% missed less on
/// 9 of the 19 rows of BENCHMARKS §1, as much on 9, more on one (+0.001);
/// 3% lost on Twitter-like cluster 7 (2% dropped warm keys of cluster 52
/// before their second access). Main can then hold a hot set of nine
/// tenths of the heap.
pub(crate) const MIN_SMALL_PERCENT: u64 = 5;
pub(crate) const MAX_SMALL_PERCENT: u64 = 50;
/// Bytes the small target moves per ghost hit, per byte of the item, in
/// a heap of up to [`SLOW_STEP_SEGMENTS`] segments.
const ADAPT_STEP: u64 = 1;
/// Per this many segments of the heap the step is divided by one more, up
/// to [`MAX_STEP_DIVISOR`]. The small pool is whole segments: in a heap of
/// a few (the block trace at 1 MiB: three), the target must cross a
/// segment on a single ghost hit or it never moves the pool (a step of
/// 1/16 there missed 0.0066 more); in a heap of hundreds, a whole item's
/// size per hit swung the target faster than the pool turns over. A
/// sixteenth from 256 segments on missed less on 6 of the 19 rows of
/// BENCHMARKS §1 (clusters 22 and 19 at real rate by 0.0016 / 0.0022,
/// the block trace at 512 MiB by 0.0030) and more on 2 (cluster 7 at real
/// rate by 0.0020, a row that moves by ±0.004 with any eviction
/// parameter; 22 at 2 TTL spans by 0.0001).
const SLOW_STEP_SEGMENTS: u64 = 16;
const MAX_STEP_DIVISOR: u64 = 16;
/// The drop counts take 1/this of the heap's bytes (0.05%), out of the
/// merge scratch's room (`eviction`'s `size_drop_counts`). Half as much
/// (halved after as many drops) gained less on the block trace; twice as
/// much cost Twitter-like cluster 19 at 2 TTL spans and the block trace at
/// 1 MiB (BENCHMARKS §1f, eighth round).
pub(crate) const DROP_COUNTS_HEAP_SHARE: usize = 2048;
/// Drops from probation after which an unread item is promoted by its
/// evaluation while main holds less than its share. Three promoted too
/// early on the block trace (256 MiB +0.017), five gained less.
pub(crate) const DROPS_TO_PROMOTE: u8 = 4;
/// While main has room, an unread item at most 1/this of the mean item
/// held is promoted by its evaluation: the miss ratio counts requests, not
/// bytes, and such an item holds its place for a fraction of a typical
/// item's room. On the block trace (objects up to 16 KiB: 44% of the
/// requests, 5% of the bytes; most others 60-68 KB) this took 128 MiB-1
/// GiB from 0.7906 / 0.7456 / 0.6633 / 0.5688 to 0.7520 / 0.6721 / 0.6086 /
/// 0.5263 (BENCHMARKS §1f, ninth round); 1/3 and 1/4 gained less, 1/1 cost
/// the Twitter-like rows (cluster 22 +0.04); at 1/2 none of them moved.
const SMALL_ITEM_SHARE: usize = 2;
/// Heaps of fewer segments promote no small item unread: in a heap of
/// three (the block trace at 1 MiB) it missed 0.007 more; four and eight
/// measured the same.
const SMALL_ITEM_SEGMENTS: usize = 8;
/// The drop counts promote only items up to this many times the mean item
/// held: promoting the block trace's largest objects dropped often took
/// the room main had for small ones (128 MiB 0.7520 -> 0.7833 with both
/// rules and no cap); no Twitter-like row moved with the cap.
const DROPPED_ITEM_MEANS: usize = 2;

pub(crate) struct Admission {
    /// Per segment id: true if the segment is in the main pool.
    main: Box<[bool]>,
    mains: usize,
    pub(crate) ghosts: Ghosts,
    /// The small pool's size as the ghosts want it: between 0 and
    /// [`MAX_SMALL_PERCENT`] of the heap (from [`MIN_SMALL_PERCENT`] in
    /// heaps of fewer than [`SLOW_STEP_SEGMENTS`] segments); the pool's
    /// target is this, but at least the floor ([`small_target`](Self::small_target)).
    wanted: u64,
    heap_bytes: u64,
    /// The adaptation step's divisor (see [`SLOW_STEP_SEGMENTS`]).
    step_divisor: u64,
    /// Keys recently remembered as ghosts of each pool (small, main),
    /// halved whenever their sum passes the ghosts' capacity: about how
    /// many ghosts of each pool the set holds.
    remembered: [u64; 2],
    /// How often keys were dropped from probation lately (none until
    /// [`give_drop_counts`](Self::give_drop_counts)).
    drops: DropCounts,
    /// The drop counts were sized (once, at the first eviction).
    drops_sized: bool,
}

impl Admission {
    /// Every one of `segments` segments small, no ghosts.
    pub(crate) fn new(segments: usize, heap_bytes: usize) -> Self {
        let heap_bytes = heap_bytes as u64;
        Admission {
            main: vec![false; segments].into_boxed_slice(),
            mains: 0,
            ghosts: Ghosts::with_capacity(64),
            wanted: heap_bytes * SMALL_PERCENT / 100,
            heap_bytes,
            step_divisor: (segments as u64 / SLOW_STEP_SEGMENTS).clamp(1, MAX_STEP_DIVISOR),
            remembered: [1, 1],
            drops: DropCounts::with_bytes(0),
            drops_sized: false,
        }
    }

    /// The heap the pools share, in bytes: less than the whole heap
    /// while segments are withheld for external values
    /// (`crate::external`). The small pool's wanted size stays within
    /// the new bounds.
    pub(crate) fn set_heap_bytes(&mut self, heap_bytes: usize) {
        self.heap_bytes = heap_bytes as u64;
        self.wanted = self.wanted.min(self.heap_bytes * MAX_SMALL_PERCENT / 100);
    }

    #[inline]
    pub(crate) fn is_main(&self, id: u32) -> bool {
        self.main[id as usize]
    }

    /// Segments in the main pool.
    pub(crate) fn mains(&self) -> usize {
        self.mains
    }

    /// Moves a segment into the main pool (or back to small).
    pub(crate) fn set_main(&mut self, id: u32, main: bool) {
        let flag = &mut self.main[id as usize];
        if *flag != main {
            *flag = main;
            if main {
                self.mains += 1;
            } else {
                self.mains -= 1;
            }
        }
    }

    /// A freed segment leaves its pool: the next use starts small.
    pub(crate) fn on_release(&mut self, id: u32) {
        self.set_main(id, false);
    }

    /// Every segment freed at once.
    pub(crate) fn clear(&mut self) {
        self.main.fill(false);
        self.mains = 0;
        self.ghosts.clear();
        self.drops.clear();
    }

    /// Remembers a key evicted from the small pool or from main (and
    /// counts probation's drops).
    #[inline]
    pub(crate) fn remember(&mut self, hash: u64, from_main: bool) {
        self.ghosts.insert(hash, from_main);
        if !from_main {
            self.drops.add(hash);
        }
        let r = &mut self.remembered;
        r[from_main as usize] += 1;
        if r[0] + r[1] > self.ghosts.capacity() as u64 {
            r[0] = r[0] / 2 + 1;
            r[1] = r[1] / 2 + 1;
        }
    }

    /// Remembers a key that expired after it had proved itself (it sat in
    /// a main segment, or was read since its last move). In a look-aside
    /// cache such a key is written again on its next miss; as a probation
    /// ghost it then starts warm as one dropped from probation does
    /// ([`readmit`](Self::readmit), the adaptation included), instead of
    /// proving itself in probation again. Not a drop: the drop counts and
    /// the pools' ghost shares do not move. On the Twitter-like clusters
    /// whose TTLs pass (BENCHMARKS §1f, fourteenth round) clusters 52, 22
    /// and 19 at 2 TTL spans missed 0.0006 / 0.0013 / 0.0014 less; no row
    /// of §1 missed more. As main ghosts (which shrink the small pool when
    /// they come back) cluster 22 missed 0.0047 more.
    #[inline]
    pub(crate) fn remember_expired(&mut self, hash: u64) {
        self.ghosts.insert(hash, false);
    }

    /// True if a newly written key of `size` bytes was recently evicted
    /// (and forgets it). A key evicted from the small pool and back says
    /// the small pool is too short: the wanted size grows; one evicted from
    /// main says main is too small: it shrinks. As in ARC, the step is the
    /// item's size times the other pool's share of the ghosts over this
    /// pool's (at least 1), divided by up to 16 in large heaps
    /// ([`SLOW_STEP_SEGMENTS`]): the target settles where a ghost of
    /// either pool is as likely to come back. (Unweighted, the small pool's
    /// ghosts, several times as many as main's, pushed the small pool to
    /// its cap on every workload with warm keys.) The pool's target is
    /// between [`MIN_SMALL_PERCENT`] and [`MAX_SMALL_PERCENT`] of the heap;
    /// the wanted size may sink below the floor, to 0 (`wanted`). A key
    /// back from probation is true only if the wanted size was above the
    /// floor.
    #[inline]
    pub(crate) fn readmit(&mut self, hash: u64, size: usize) -> bool {
        match self.ghosts.take(hash) {
            None => false,
            Some(from_main) => {
                let floor = self.floor();
                let above_floor = self.wanted > floor;
                let [small, main] = self.remembered;
                let weight = if from_main {
                    small / main
                } else {
                    main / small
                };
                let step = size as u64 * ADAPT_STEP * weight.max(1) / self.step_divisor;
                // Below the floor the pool stays at its floor, but the
                // evidence is kept: main's ghosts that pushed the wanted
                // size under it must be made up by probation's before
                // those start warm again. In a heap of a few segments, where
                // a step is a whole item, the wanted size stops at the
                // floor (any depth below it missed 0.0012-0.0018 more on the
                // block trace at 1 MiB, a heap of three: BENCHMARKS §1f,
                // eleventh round).
                let lowest = if self.main.len() as u64 >= SLOW_STEP_SEGMENTS {
                    0
                } else {
                    floor
                };
                self.wanted = if from_main {
                    self.wanted.saturating_sub(step)
                } else {
                    self.wanted + step
                }
                .clamp(lowest, self.heap_bytes * MAX_SMALL_PERCENT / 100);
                // A key back from main starts warm. S3-FIFO remembers
                // only probation's drops; readmitting main's too (as
                // quick_cache's ghosts do) missed less on 8 of the 19 rows
                // of BENCHMARKS §1 once evaluations keep nothing unread
                // (more on cluster 7 at real rate, +0.0015). A key back
                // from probation starts warm only while the wanted size is
                // above the floor: at or below it, main's ghosts have
                // pushed the pool as far as it goes, and promoting
                // probation's returning keys takes room from main's, which
                // the adaptation found worth more (BENCHMARKS §1f, tenth
                // round; the evidence below the floor, eleventh round).
                from_main || above_floor
            }
        }
    }

    /// The small target's floor, in bytes.
    fn floor(&self) -> u64 {
        self.heap_bytes * MIN_SMALL_PERCENT / 100
    }

    /// Whether the drop counts were sized yet.
    pub(crate) fn drop_counts_sized(&self) -> bool {
        self.drops_sized
    }

    /// Bytes of the drop counts.
    #[cfg(test)]
    pub(crate) fn drop_counts_bytes(&self) -> usize {
        self.drops.bytes()
    }

    /// Sizes the drop counts, once: `bytes` (0: none).
    pub(crate) fn give_drop_counts(&mut self, bytes: usize) {
        self.drops = DropCounts::with_bytes(bytes);
        self.drops_sized = true;
    }

    /// Whether main holds less than its share of the heap (all but the
    /// small target) with `main_bytes` in its segments.
    pub(crate) fn main_has_room(&self, main_bytes: u64) -> bool {
        main_bytes + self.small_target() < self.heap_bytes
    }

    /// True if an unread item of this key was dropped from probation at
    /// least [`DROPS_TO_PROMOTE`] times lately (a long memory: the ghosts
    /// forget a key after a quarter of the items held turn over). While
    /// main has room, its evaluation promotes it: on a trace whose reuse
    /// is one long gap (the block trace), such keys come back once more
    /// and find no room in probation; where keys that often dropped are
    /// rare (the Twitter-like rows) nothing changes.
    pub(crate) fn dropped_often(&self, hash: u64) -> bool {
        self.drops.count(hash) >= DROPS_TO_PROMOTE
    }

    /// Whether an evaluation, while main has room, promotes an unread
    /// item of this key and `size` bytes when the items held average
    /// `mean` bytes: one of at most 1/[`SMALL_ITEM_SHARE`] of the mean (in
    /// a heap of [`SMALL_ITEM_SEGMENTS`] segments or more), or one of at
    /// most [`DROPPED_ITEM_MEANS`] times the mean that probation dropped
    /// often lately ([`dropped_often`](Self::dropped_often)).
    pub(crate) fn promotes_unread(&self, hash: u64, size: usize, mean: usize) -> bool {
        (size * SMALL_ITEM_SHARE <= mean && self.main.len() >= SMALL_ITEM_SEGMENTS)
            || (size <= mean * DROPPED_ITEM_MEANS && self.dropped_often(hash))
    }

    /// Bytes the small pool may hold before its oldest segments are
    /// evaluated.
    pub(crate) fn small_target(&self) -> u64 {
        self.wanted.max(self.floor())
    }

    /// Bytes of the flags, the ghosts and the drop counts.
    pub(crate) fn bytes(&self) -> usize {
        self.main.len() + self.ghosts.bytes() + self.drops.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_count_follows_the_flags() {
        let mut a = Admission::new(8, 8 << 10);
        a.set_main(3, true);
        a.set_main(3, true);
        a.set_main(5, true);
        assert_eq!(a.mains(), 2);
        assert!(a.is_main(3) && !a.is_main(4));
        a.on_release(3);
        assert_eq!(a.mains(), 1);
        a.on_release(3);
        assert_eq!(a.mains(), 1, "releasing a small segment changes nothing");
        a.remember(0xdead_beef_0000_1234, false);
        a.clear();
        assert_eq!(a.mains(), 0);
        assert!(!a.readmit(0xdead_beef_0000_1234, 10));
        assert_eq!(a.bytes(), 8 + a.ghosts.bytes() + a.drops.bytes());
    }

    #[test]
    fn keys_dropped_from_probation_often_are_told_apart() {
        let heap = 64 << 20;
        let mut a = Admission::new(256, heap);
        assert_eq!(a.drops.bytes(), 0, "none until given");
        a.give_drop_counts(heap / DROP_COUNTS_HEAP_SHARE);
        let (often, rarely, from_main) = (0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 0x9999);
        for _ in 0..DROPS_TO_PROMOTE {
            a.remember(often, false);
            a.remember(from_main, true);
        }
        for _ in 1..DROPS_TO_PROMOTE {
            a.remember(rarely, false);
        }
        assert!(a.dropped_often(often));
        assert!(!a.dropped_often(rarely), "one drop short");
        assert!(!a.dropped_often(from_main), "main's drops are not counted");
        // Main's room: all of the heap but the small target.
        let share = heap as u64 - a.small_target();
        assert!(a.main_has_room(share - 1));
        assert!(!a.main_has_room(share));
        a.clear();
        assert!(!a.dropped_often(often));
    }

    #[test]
    fn adaptation_weighs_ghost_hits_by_the_other_pools_share() {
        fn mix(i: u64) -> u64 {
            // splitmix64
            let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        let heap = 1 << 30;
        let mut a = Admission::new(1024, heap);
        a.ghosts.fit(100_000);
        // Ten small-pool ghosts for every main-pool one.
        for i in 0..11_000u64 {
            a.remember(mix(i), i % 11 == 0);
        }
        a.wanted = heap as u64 * 30 / 100;
        let start = a.small_target();
        assert!(a.readmit(mix(1), 16_000), "a small-pool ghost starts warm");
        let grown = a.small_target() - start;
        assert_eq!(
            grown, 1000,
            "the common pool's ghost moves by its size, a sixteenth in a heap of 1024 segments"
        );
        assert!(a.readmit(mix(11), 16_000), "a main ghost starts warm too");
        let shrunk = start + grown - a.small_target();
        assert!(
            (9_000..=11_000).contains(&shrunk),
            "the rare pool's ghost weighs ten: {shrunk}"
        );
        // In a heap of a few segments a hit moves the target by the whole
        // item: the pool is whole segments, a sixteenth would never cross one.
        let mut few = Admission::new(4, 4 << 20);
        few.remember(mix(5), false);
        let before = few.small_target();
        assert!(
            !few.readmit(mix(5), 300_000),
            "at its floor: not warm (tenth round)"
        );
        assert_eq!(few.small_target() - before, 300_000);
        // The lower bound holds.
        for i in 0..1_000u64 {
            a.remember(mix(i + 1_000_000), true);
            a.readmit(mix(i + 1_000_000), 1 << 20);
        }
        assert_eq!(a.small_target(), heap as u64 * MIN_SMALL_PERCENT / 100);
    }

    #[test]
    fn probation_ghosts_start_warm_only_while_the_small_target_is_above_its_floor() {
        let heap = 64 << 20;
        let mut a = Admission::new(256, heap);
        let floor = heap as u64 * MIN_SMALL_PERCENT / 100;
        assert_eq!(a.small_target(), floor, "it starts at its floor");
        let (small, main) = (0x1234_5678_9abc_def0, 0x0fed_cba9_8765_4321);
        a.remember(small, false);
        a.remember(main, true);
        assert!(
            !a.readmit(small, 1_000),
            "a key back from probation does not while the target sits at its floor"
        );
        assert!(
            a.small_target() > floor,
            "but it still grows the small target"
        );
        a.remember(small, false);
        assert!(a.readmit(small, 1_000), "above the floor it starts warm");
        assert!(
            a.readmit(main, 1_000),
            "a key back from main starts warm wherever the target is"
        );
        a.remember(main, true);
        assert!(a.readmit(main, 1_000));
        assert_eq!(a.small_target(), floor, "back at its floor");
    }

    #[test]
    fn main_ghosts_that_push_the_wanted_size_below_the_floor_must_be_made_up() {
        fn key(i: u64) -> u64 {
            // Distinct top bits (the fingerprint) and middle bits (the bucket).
            (i + 1) << 49 | (i * 0x9e37_79b9) << 16
        }
        // A heap of 256 segments: evidence below the floor is kept.
        let heap = 64 << 20;
        let mut a = Admission::new(256, heap);
        let floor = heap as u64 * MIN_SMALL_PERCENT / 100;
        for i in 0..16 {
            a.remember(key(i), true);
            assert!(a.readmit(key(i), 4 << 20), "main's ghosts start warm");
        }
        assert_eq!(a.small_target(), floor, "the pool stays at its floor");
        for i in 100..102 {
            a.remember(key(i), false);
            assert!(
                !a.readmit(key(i), 1_000),
                "a probation ghost stays cold until main's are made up ({i})"
            );
        }
        assert_eq!(a.small_target(), floor);
        // Larger steps make up the deficit; then probation's keys start warm
        // again, and only once the pool's target is above its floor.
        let mut cold = 0;
        for i in 200..400 {
            a.remember(key(i), false);
            if a.readmit(key(i), 4 << 20) {
                break;
            }
            cold += 1;
        }
        assert!(
            cold > 1 && cold < 200,
            "cold before the gate opened: {cold}"
        );
        assert!(a.small_target() > floor);
        // A heap of a few segments stops at the floor: one probation ghost
        // back lifts it above, and the next starts warm.
        let mut few = Admission::new(8, 8 << 20);
        for i in 0..16 {
            few.remember(key(i), true);
            assert!(few.readmit(key(i), 1 << 20));
        }
        few.remember(key(100), false);
        assert!(!few.readmit(key(100), 1_000), "at its floor");
        few.remember(key(101), false);
        assert!(few.readmit(key(101), 1_000), "above it after one step");
    }
}

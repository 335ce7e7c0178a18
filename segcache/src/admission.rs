//! Admission: which segments are on probation (the *small* pool, S3-FIFO's
//! small queue) and which hold items that proved themselves (the *main*
//! pool), plus the [`Ghosts`] of keys dropped from probation.
//!
//! Every segment the write path opens starts small. Merge eviction (in
//! `eviction.rs`) evaluates the oldest small segments first, while the
//! small pool is over [`SMALL_PERCENT`] of the segments in use: items read
//! since they were written move on to main segments, the rest are evicted
//! and remembered as ghosts. A write of a key found among the ghosts starts
//! with one access, so its next evaluation promotes it. Main segments are
//! merged among themselves. This module only keeps the flags, the count
//! and the ghosts; it never moves items or frees segments.

use crate::ghost::Ghosts;

/// The small pool's initial share of the heap, in percent (S3-FIFO's 10%).
pub(crate) const SMALL_PERCENT: u64 = 10;
/// Bounds of the small pool's share as it adapts.
pub(crate) const MIN_SMALL_PERCENT: u64 = 2;
pub(crate) const MAX_SMALL_PERCENT: u64 = 50;
/// Bytes the small target moves per ghost hit, per byte of the item.
const ADAPT_STEP: u64 = 1;

pub(crate) struct Admission {
    /// Per segment id: true if the segment is in the main pool.
    main: Box<[bool]>,
    mains: usize,
    pub(crate) ghosts: Ghosts,
    small_target: u64,
    heap_bytes: u64,
}

impl Admission {
    /// Every one of `segments` segments small, no ghosts.
    pub(crate) fn new(segments: usize, heap_bytes: usize) -> Self {
        let heap_bytes = heap_bytes as u64;
        Admission {
            main: vec![false; segments].into_boxed_slice(),
            mains: 0,
            ghosts: Ghosts::with_capacity(64),
            small_target: heap_bytes * SMALL_PERCENT / 100,
            heap_bytes,
        }
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
    }

    /// True if a newly written key of `size` bytes was recently evicted
    /// (and forgets it). A key evicted from the small pool and back says
    /// the small pool is too short: its target grows by the item's size; one
    /// evicted from main says main is too small: the small target shrinks
    /// (ARC's adaptation, between [`MIN_SMALL_PERCENT`] and
    /// [`MAX_SMALL_PERCENT`] of the heap).
    #[inline]
    pub(crate) fn readmit(&mut self, hash: u64, size: usize) -> bool {
        match self.ghosts.take(hash) {
            None => false,
            Some(from_main) => {
                let step = size as u64 * ADAPT_STEP;
                self.small_target = if from_main {
                    self.small_target.saturating_sub(step)
                } else {
                    self.small_target + step
                }
                .clamp(
                    self.heap_bytes * MIN_SMALL_PERCENT / 100,
                    self.heap_bytes * MAX_SMALL_PERCENT / 100,
                );
                // Only a key back from probation starts warm: main's
                // ghosts steer the target, as S3-FIFO readmits none of them.
                !from_main
            }
        }
    }

    /// Bytes the small pool may hold before its oldest segments are
    /// evaluated.
    pub(crate) fn small_target(&self) -> u64 {
        self.small_target
    }

    /// Bytes of the flags and the ghosts.
    pub(crate) fn bytes(&self) -> usize {
        self.main.len() + self.ghosts.bytes()
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
        a.ghosts.insert(0xdead_beef_0000_1234, false);
        a.clear();
        assert_eq!(a.mains(), 0);
        assert!(!a.readmit(0xdead_beef_0000_1234, 10));
        assert_eq!(a.bytes(), 8 + a.ghosts.bytes());
    }
}

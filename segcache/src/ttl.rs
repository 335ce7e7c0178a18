//! TTL buckets: segments grouped by time-to-live, so whole segments expire
//! together, and the rule that keeps that precise.
//!
//! 959 buckets plus one for items that never expire (nothing expires that
//! one): one bucket per second for TTLs of 1 to 511 s, then 32 buckets per
//! doubling up to [`MAX_TTL`] (about 97 days), so a bucket's width is at
//! most 1/32 of its TTLs. Each bucket is a doubly linked list of segments
//! through the segment headers, oldest at the head; the tail takes writes.
//!
//! **Precision.** A segment expires with its earliest item. To bound how
//! early any item goes, a segment the tail writes only ever holds items
//! whose deadlines (in whole clock seconds) lie within [`spread`] of each
//! other; `spread` is `max(1 s, TTL/16) - 1 s` for the bucket's shortest
//! TTL. A segment eviction packs from several keeps the same bound per
//! deadline window (`windows.rs`): its items expire window by window. With the clock's
//! own 1 s granularity, no item is ever served after its deadline, and none
//! expires more than `max(1 s, TTL / 16)` before it.
//!
//! This module owns the lists, the TTL -> bucket mapping and the spread
//! rule; it never reads or frees item data.

use crate::segments::{SegmentHeader, NONE};

/// Longest TTL in seconds.
pub const MAX_TTL: u32 = (1 << 23) - 1;
/// TTLs below this get one bucket per second.
const LINEAR: u32 = 512;
/// Buckets per doubling above [`LINEAR`] (as a power of two).
const PER_DOUBLING_BITS: u32 = 5;
const LOG_START: usize = LINEAR as usize - 1;
/// Index of the bucket for items without a TTL.
pub(crate) const NEVER: usize = LOG_START + ((23 - 9) << PER_DOUBLING_BITS) as usize;
pub(crate) const BUCKETS: usize = NEVER + 1;

/// The bucket for a TTL in seconds; 0 means no TTL.
#[inline]
pub(crate) fn bucket_for(ttl: u32) -> usize {
    debug_assert!(ttl <= MAX_TTL);
    if ttl == 0 {
        NEVER
    } else if ttl < LINEAR {
        ttl as usize - 1
    } else {
        let k = 31 - ttl.leading_zeros(); // 9..=22
        let j = (ttl >> (k - PER_DOUBLING_BITS)) & ((1 << PER_DOUBLING_BITS) - 1);
        LOG_START + (((k - 9) << PER_DOUBLING_BITS) + j) as usize
    }
}

/// The shortest TTL a bucket holds.
#[inline]
fn lower(bucket: usize) -> u32 {
    debug_assert!(bucket < NEVER);
    if bucket < LOG_START {
        bucket as u32 + 1
    } else {
        let i = (bucket - LOG_START) as u32;
        let k = 9 + (i >> PER_DOUBLING_BITS);
        let j = i & ((1 << PER_DOUBLING_BITS) - 1);
        (1 << k) + (j << (k - PER_DOUBLING_BITS))
    }
}

/// The widest gap, in seconds, between two deadlines that the small
/// (probation) pool puts together after the tail wrote them, where
/// [`spread`] (about TTL/16) is wider: the small segments a compaction
/// packs, and an overwrite in place, which keeps the old version's
/// deadline for the new one. An item then goes less than 2^15 s (about
/// 9.1 h) early there, unless its own segment was already wider. Where
/// nothing presses on the heap, items never read stay in the small pool
/// and its compactions pack them again and again: at TTL/16, 30-day items
/// went up to 45 h early (BENCHMARKS §1g, third look: cluster 25 at 2 TTL
/// spans 3 476 -> 3 443 misses, quick_cache 3 438; no other row worse);
/// overwrites in place with a TTL at the full spread cost that row 6
/// misses, and 3 fewer than before them with this cap (§1f). Small
/// segments are young, their deadlines as close as the tail wrote them,
/// so the cap costs little. Main compaction runs keep the full spread:
/// main segments carry the wide ranges of the merges that wrote them, and
/// capping their compaction left dead copies unpacked (cluster 52 at 2
/// spans +0.0018 with this cap on main runs alone). Main merges and
/// evaluations keep it too: there a run cut short means segments evicted
/// whole, read items included (the cap on [`spread`] itself, for the tail
/// and every merge, cut the hit ratio of a 30-day stream overflowing a
/// 64 MiB heap of 1 MiB segments from 0.93 to 0.86).
pub(crate) const SMALL_SPREAD: u32 = (1 << 15) - 1;

/// The widest gap, in clock seconds, between the deadlines of two items in
/// one segment of this bucket: `max(1, lower / 16) - 1`. An item whose
/// segment expires at the earliest deadline therefore goes less than
/// `max(1 s, TTL / 16)` early, the clock's granularity included.
#[inline]
pub(crate) fn spread(bucket: usize) -> u32 {
    if bucket >= NEVER {
        return u32::MAX;
    }
    (lower(bucket) / 16).max(1) - 1
}

/// True if a segment whose item deadlines run from `first` to `last`
/// (clock seconds; 0 means no items yet) may take an item due at
/// `deadline` in this bucket.
#[inline]
pub(crate) fn fits_spread(bucket: usize, first: u32, last: u32, deadline: u32) -> bool {
    if first == 0 {
        return true;
    }
    deadline.max(last) - deadline.min(first) <= spread(bucket)
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct TtlBucket {
    pub head: u32,
    pub tail: u32,
    pub segments: u32,
    /// Where the next merge pass in this bucket starts.
    pub merge_cursor: u32,
}

pub(crate) struct TtlBuckets {
    /// A fixed-size array: a bucket index from [`bucket_for`] needs no
    /// bounds check.
    pub(crate) buckets: Box<[TtlBucket; BUCKETS]>,
}

impl TtlBuckets {
    pub(crate) fn new() -> Self {
        let empty = TtlBucket {
            head: NONE,
            tail: NONE,
            segments: 0,
            merge_cursor: NONE,
        };
        TtlBuckets {
            buckets: Box::new([empty; BUCKETS]),
        }
    }

    /// Bucket lists from a snapshot (which reads exactly [`BUCKETS`]).
    pub(crate) fn from_buckets(buckets: Vec<TtlBucket>) -> Self {
        TtlBuckets {
            buckets: buckets
                .into_boxed_slice()
                .try_into()
                .expect("a snapshot holds every TTL bucket"),
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }

    /// Appends segment `id` as the bucket's new tail.
    pub(crate) fn push_tail(&mut self, headers: &mut [SegmentHeader], bucket: usize, id: u32) {
        let b = &mut self.buckets[bucket];
        let h = &mut headers[id as usize];
        h.prev = b.tail;
        h.next = NONE;
        h.ttl_bucket = bucket as u16;
        if b.tail == NONE {
            b.head = id;
        } else {
            headers[b.tail as usize].next = id;
        }
        b.tail = id;
        b.segments += 1;
    }

    /// Unlinks segment `id` from its bucket.
    pub(crate) fn remove(&mut self, headers: &mut [SegmentHeader], id: u32) {
        let (bucket, prev, next) = {
            let h = &headers[id as usize];
            (h.ttl_bucket as usize, h.prev, h.next)
        };
        let b = &mut self.buckets[bucket];
        if prev == NONE {
            debug_assert_eq!(b.head, id);
            b.head = next;
        } else {
            headers[prev as usize].next = next;
        }
        if next == NONE {
            debug_assert_eq!(b.tail, id);
            b.tail = prev;
        } else {
            headers[next as usize].prev = prev;
        }
        if b.merge_cursor == id {
            b.merge_cursor = next;
        }
        b.segments -= 1;
        let h = &mut headers[id as usize];
        h.prev = NONE;
        h.next = NONE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segments::Segments;

    #[test]
    fn buckets_cover_the_range_without_gaps() {
        assert_eq!(bucket_for(0), NEVER);
        assert_eq!(bucket_for(1), 0);
        assert_eq!(bucket_for(2), 1);
        assert_eq!(bucket_for(511), 510);
        assert_eq!(bucket_for(512), LOG_START);
        assert_eq!(bucket_for(MAX_TTL), NEVER - 1);
        // Monotone, every bucket used, and each bucket's lower bound is its
        // smallest TTL.
        let mut last = 0;
        let mut seen = vec![false; NEVER];
        for ttl in 1..=MAX_TTL {
            let b = bucket_for(ttl);
            assert!(b >= last && b < NEVER, "ttl {ttl}");
            if !seen[b] {
                assert_eq!(lower(b), ttl, "bucket {b}");
                seen[b] = true;
            }
            last = b;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn buckets_are_narrow_enough_for_the_spread() {
        // A bucket's TTL width never exceeds its spread + 1 past 32 s, so
        // items of one bucket written in the same second share a segment.
        for b in 0..NEVER - 1 {
            let width = lower(b + 1) - lower(b);
            if lower(b) >= 32 {
                assert!(width <= spread(b) + 1, "bucket {b}");
            } else {
                assert_eq!(width, 1);
            }
        }
    }

    #[test]
    fn spread_follows_the_precision_bound() {
        assert_eq!(spread(bucket_for(1)), 0);
        assert_eq!(spread(bucket_for(31)), 0);
        assert_eq!(spread(bucket_for(32)), 1);
        assert_eq!(spread(bucket_for(3600)), 3584 / 16 - 1);
        assert_eq!(spread(NEVER), u32::MAX);
        for ttl in 1..=MAX_TTL {
            assert!(spread(bucket_for(ttl)) < (ttl / 16).max(1), "ttl {ttl}");
        }
        assert!(fits_spread(5, 0, 0, 100));
        assert!(fits_spread(bucket_for(5), 100, 100, 100));
        assert!(!fits_spread(bucket_for(5), 100, 100, 101));
        assert!(fits_spread(bucket_for(320), 100, 110, 119));
        assert!(!fits_spread(bucket_for(320), 100, 110, 120));
    }

    #[test]
    fn lists_link_and_unlink() {
        let mut segs = Segments::new(4096, 4);
        let mut ttl = TtlBuckets::new();
        let ids: Vec<u32> = (0..4).map(|_| segs.alloc(0, 3).unwrap()).collect();
        for &id in &ids {
            ttl.push_tail(&mut segs.headers, 3, id);
        }
        let walk = |segs: &Segments, ttl: &TtlBuckets| {
            let mut out = vec![];
            let mut at = ttl.buckets[3].head;
            while at != NONE {
                out.push(at);
                at = segs.headers[at as usize].next;
            }
            out
        };
        assert_eq!(walk(&segs, &ttl), ids);
        ttl.buckets[3].merge_cursor = ids[1];
        ttl.remove(&mut segs.headers, ids[1]);
        assert_eq!(ttl.buckets[3].merge_cursor, ids[2], "cursor moves on");
        ttl.remove(&mut segs.headers, ids[0]);
        ttl.remove(&mut segs.headers, ids[3]);
        assert_eq!(walk(&segs, &ttl), vec![ids[2]]);
        assert_eq!(ttl.buckets[3].tail, ids[2]);
        assert_eq!(ttl.buckets[3].segments, 1);
    }
}

//! TTL buckets: segments grouped by time-to-live, so whole segments expire
//! together.
//!
//! 1024 buckets in four tiers of 256 (8 s, 128 s, 2048 s and 32768 s
//! steps, reaching 8388607 s, about 97 days), plus one bucket for items
//! that never expire; nothing ever expires that one. Each bucket is a
//! doubly linked list of segments through the segment headers, oldest at
//! the head; the tail takes writes. This module owns the lists and the
//! TTL -> bucket mapping; it never reads or frees item data.

use crate::segments::{SegmentHeader, NONE};

/// Longest TTL in seconds.
pub const MAX_TTL: u32 = (1 << 23) - 1;
/// Index of the bucket for items without a TTL.
pub(crate) const NEVER: usize = 1024;
pub(crate) const BUCKETS: usize = NEVER + 1;

/// The bucket for a TTL in seconds; 0 means no TTL.
#[inline]
pub(crate) fn bucket_for(ttl: u32) -> usize {
    debug_assert!(ttl <= MAX_TTL);
    match ttl {
        0 => NEVER,
        1..=2047 => (ttl >> 3) as usize,
        2048..=32767 => 256 + (ttl >> 7) as usize,
        32768..=524287 => 512 + (ttl >> 11) as usize,
        _ => 768 + (ttl >> 15) as usize,
    }
}

/// The width of a bucket's TTL range in seconds.
#[inline]
fn step(bucket: usize) -> u32 {
    8 << (4 * (bucket / 256))
}

/// How long a bucket's tail may keep taking writes before a fresh segment
/// starts. A segment expires with its earliest item, so this bounds how
/// early a late-written item can expire: at most 1/16 of the TTL (between
/// 1 s and one step).
#[inline]
pub(crate) fn seal_age(bucket: usize) -> u32 {
    if bucket == NEVER {
        return u32::MAX;
    }
    let lower = (bucket % 256) as u32 * step(bucket);
    (lower / 16).clamp(1, step(bucket))
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
    pub(crate) buckets: Box<[TtlBucket]>,
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
            buckets: vec![empty; BUCKETS].into_boxed_slice(),
        }
    }

    /// Bucket lists from a snapshot.
    pub(crate) fn from_buckets(buckets: Vec<TtlBucket>) -> Self {
        debug_assert_eq!(buckets.len(), BUCKETS);
        TtlBuckets {
            buckets: buckets.into_boxed_slice(),
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
    fn tiers_cover_the_range_without_gaps() {
        assert_eq!(bucket_for(0), NEVER);
        assert_eq!(bucket_for(1), 0);
        assert_eq!(bucket_for(8), 1);
        assert_eq!(bucket_for(2047), 255);
        assert_eq!(bucket_for(2048), 272);
        assert_eq!(bucket_for(32767), 511);
        assert_eq!(bucket_for(32768), 528);
        assert_eq!(bucket_for(524287), 767);
        assert_eq!(bucket_for(524288), 784);
        assert_eq!(bucket_for(MAX_TTL), 1023);
        // Monotone: a longer TTL never maps to an earlier bucket.
        let mut last = 0;
        for ttl in (1..=MAX_TTL).step_by(97) {
            let b = bucket_for(ttl);
            assert!(b >= last && b < NEVER);
            last = b;
        }
    }

    #[test]
    fn seal_age_is_bounded_by_ttl_and_step() {
        assert_eq!(seal_age(bucket_for(5)), 1);
        assert_eq!(seal_age(bucket_for(100)), 6);
        assert_eq!(seal_age(bucket_for(300)), 8);
        assert_eq!(seal_age(bucket_for(3600)), 128);
        assert_eq!(seal_age(bucket_for(86_400)), 2048);
        assert_eq!(seal_age(NEVER), u32::MAX);
        for ttl in [1u32, 9, 60, 599, 2048, 40_000, 600_000, MAX_TTL] {
            assert!(seal_age(bucket_for(ttl)) <= ttl.max(16) / 16 + 8);
        }
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

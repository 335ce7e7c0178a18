//! Eviction: choosing which segment(s) to free when none is free.
//!
//! Owns the policies of [`Eviction`]. Merge eviction walks a TTL bucket
//! from a cursor over consecutive sealed segments. If some run of them has
//! been thinned out (deletes, overwrites, segments sealed young) so that its
//! live items fit in one segment fewer, it is *compacted*: packed in place,
//! one segment freed, nothing evicted. Otherwise it *merges*: it takes
//! segments until they hold [`MERGE_RATIO`] segments' worth of live bytes
//! (at most [`MERGE_MAX`]) and keeps their most-read items, one segment's
//! worth picked by a frequency cutoff over the whole run, in the first
//! segment; the rest are evicted and the other segments freed. The simple
//! policies evict one whole segment. Nothing here decides *when* to evict;
//! the write path calls [`Segcache::evict`] when it needs a segment.

use crate::builder::Eviction;
use crate::hashtable::{self, Location};
use crate::segments::{SegState, NONE};
use crate::ttl::{self, BUCKETS};
use crate::{Error, Segcache};

/// Most segments one merge pass reads.
pub(crate) const MERGE_MAX: usize = 8;
/// A merge reads about this many segments' worth of live bytes and keeps
/// one segment's worth.
pub(crate) const MERGE_RATIO: usize = 4;
/// A live item of a merge chain, found in pass 1: where it is in the chain
/// and in the table, so pass 2 needs no second lookup.
#[derive(Clone, Copy)]
pub(crate) struct LiveItem {
    /// Position of its segment in the chain.
    index: u8,
    slot: u8,
    freq: u8,
    offset: u32,
    bucket: u32,
}

/// A segment this close to its deadline is evicted outright, not merged.
const NEAR_EXPIRY_SECS: u32 = 20;

impl Segcache {
    /// Frees at least one segment according to the eviction policy.
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

    /// Unlinks a segment's items as evictions and frees it.
    fn evict_segment(&mut self, id: u32) {
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

    /// One merge pass: a compaction anywhere if one is possible, otherwise
    /// an evicting merge; false if no bucket has two sealed segments in a
    /// row.
    fn merge_evict(&mut self, now: u32) -> bool {
        if self.compact_any() {
            return true;
        }
        // Pick the bucket of a random in-use segment, so buckets are chosen
        // in proportion to their size; fall back to a scan.
        for _ in 0..8 {
            let seed = (self.next_random() % self.segs.count() as u64) as usize;
            if self.segs.headers[seed].state == SegState::Free {
                continue;
            }
            let bucket = self.segs.headers[seed].ttl_bucket as usize;
            if self.merge_bucket(bucket, now) {
                return true;
            }
        }
        (0..BUCKETS).any(|bucket| self.merge_bucket(bucket, now))
    }

    /// Looks in every bucket, oldest segments first, for a run of up to
    /// MERGE_MAX consecutive sealed segments that is at most 3/4 live and
    /// whose live bytes fit in fewer segments, and packs it into as few as
    /// they need, evicting nothing. The 3/4 bound caps the copying at three
    /// bytes moved per byte freed; fuller runs are left to eviction. Reads
    /// only segment headers until it finds one.
    fn compact_any(&mut self) -> bool {
        let seg_size = self.segs.segment_size();
        // Items do not split across segments: leave 1/32 for the ends.
        let usable = seg_size - seg_size / 32;
        for bucket in 0..BUCKETS {
            if self.ttl.buckets[bucket].segments < 2 {
                continue;
            }
            let mut start = self.ttl.buckets[bucket].head;
            while start != NONE {
                let mut run = [NONE; MERGE_MAX];
                let mut n = 0;
                let mut live = 0;
                let mut at = start;
                let mut range = (0, 0);
                while n < MERGE_MAX
                    && at != NONE
                    && self.segs.headers[at as usize].state == SegState::Sealed
                {
                    let Some(wider) = self.widen(bucket, range, at) else {
                        break;
                    };
                    range = wider;
                    run[n] = at;
                    live += self.segs.headers[at as usize].live_bytes as usize;
                    n += 1;
                    at = self.segs.headers[at as usize].next;
                }
                let outputs = live.div_ceil(usable).max(1);
                if n >= 2 && outputs < n && live * 4 <= n * seg_size * 3 {
                    self.merge_chain(bucket, &run[..n], outputs);
                    return true;
                }
                start = self.segs.headers[start as usize].next;
            }
        }
        false
    }

    /// An evicting merge in `bucket`, from its cursor (or its head): take
    /// segments until they hold MERGE_RATIO segments' worth of live bytes,
    /// keep the most-read one segment's worth.
    fn merge_bucket(&mut self, bucket: usize, now: u32) -> bool {
        let head = self.ttl.buckets[bucket].head;
        let cursor = self.ttl.buckets[bucket].merge_cursor;
        let seg_size = self.segs.segment_size();
        for start in [cursor, head] {
            if start == NONE {
                continue;
            }
            let start_header = &self.segs.headers[start as usize];
            if start_header.state != SegState::Sealed {
                continue;
            }
            if start_header.expire_at != 0 && start_header.expire_at <= now + NEAR_EXPIRY_SECS {
                // About to expire anyway: free it whole.
                self.ttl.buckets[bucket].merge_cursor = start_header.next;
                self.evict_segment(start);
                return true;
            }
            let mut chain = [NONE; MERGE_MAX];
            let mut len = 0;
            let mut total = 0;
            let mut at = start;
            let mut range = (0, 0);
            while at != NONE
                && len < MERGE_MAX
                && (len < 2 || total < MERGE_RATIO * seg_size)
                && self.segs.headers[at as usize].state == SegState::Sealed
            {
                let Some(wider) = self.widen(bucket, range, at) else {
                    break;
                };
                range = wider;
                chain[len] = at;
                total += self.segs.headers[at as usize].live_bytes as usize;
                len += 1;
                at = self.segs.headers[at as usize].next;
            }
            if len >= 2 {
                self.merge_chain(bucket, &chain[..len], 1);
                return true;
            }
        }
        false
    }

    /// The deadline range (earliest, latest; 0 = none yet) of a run of
    /// segments after adding `id`, or `None` if merging it would let an
    /// item expire earlier than the bucket's precision allows
    /// (`ttl::spread`): a merged segment expires with its earliest item.
    fn widen(&self, bucket: usize, (first, last): (u32, u32), id: u32) -> Option<(u32, u32)> {
        let h = &self.segs.headers[id as usize];
        if h.expire_at == 0 {
            return Some((first, last));
        }
        if first == 0 {
            return Some((h.expire_at, h.expire_last));
        }
        let range = (first.min(h.expire_at), last.max(h.expire_last));
        (range.1 - range.0 <= ttl::spread(bucket)).then_some(range)
    }

    /// Keeps the most-read `outputs` segments' worth of the chain's live
    /// items, packed in chain order into its first `outputs` segments;
    /// evicts the rest and frees the other segments. Packing in order never
    /// writes ahead of what is still to be read: an item is either copied
    /// into an earlier segment or moved forward within its own.
    fn merge_chain(&mut self, bucket: usize, chain: &[u32], outputs: usize) {
        debug_assert!(outputs >= 1 && outputs < chain.len());
        let seg_size = self.segs.segment_size();
        // Pass 1: the live items with their hashes and access counts, and
        // the bytes at each count.
        let mut live = std::mem::take(&mut self.merge_scratch);
        live.clear();
        let mut histogram = [0usize; 128];
        let mut live_bytes = 0usize;
        let (mut expire_at, mut expire_last) = (0u32, 0u32);
        for (index, &src) in chain.iter().enumerate() {
            for (offset, item) in self.segs.item_offsets(src) {
                let hash = self.table.hash(item.key());
                let loc = Location { seg: src, offset };
                if let Some((bucket, slot, info)) = self.table.locate(hash, loc) {
                    let freq = hashtable::frequency(info);
                    histogram[freq as usize] += item.size();
                    live_bytes += item.size();
                    live.push(LiveItem {
                        index: index as u8,
                        slot: slot as u8,
                        freq,
                        offset,
                        bucket: bucket as u32,
                    });
                }
            }
            let header = &self.segs.headers[src as usize];
            if header.expire_at != 0 && (expire_at == 0 || header.expire_at < expire_at) {
                expire_at = header.expire_at;
            }
            expire_last = expire_last.max(header.expire_last);
        }
        // The lowest access count at which the survivors fit; items one
        // count below it fill whatever room is left, in order.
        let room = outputs * seg_size;
        let mut cutoff = 0usize;
        let mut kept_bytes = live_bytes;
        while kept_bytes > room {
            kept_bytes -= histogram[cutoff];
            cutoff += 1;
        }
        let mut borderline_room = room - kept_bytes;
        // Items in the output segments move: a new generation means no CAS
        // token of a moved or removed item can match a later item there.
        for &dst in &chain[..outputs] {
            let h = &mut self.segs.headers[dst as usize];
            h.generation = h.generation.wrapping_add(1);
        }
        // Pass 2: pack survivors into the outputs, unlink the rest.
        let mut out = 0usize;
        let mut write = 0usize;
        let mut written = [(0usize, 0u32); MERGE_MAX];
        let mut evicted = 0u64;
        for &LiveItem {
            index,
            slot,
            freq,
            offset,
            bucket,
        } in &live
        {
            let (bucket, slot) = (bucket as usize, slot as usize);
            let from = Location {
                seg: chain[index as usize],
                offset,
            };
            let size = self.segs.item(from).size();
            let wanted = freq as usize >= cutoff
                || (freq as usize + 1 == cutoff && size <= borderline_room && {
                    borderline_room -= size;
                    true
                });
            if wanted && write + size > seg_size && out + 1 < outputs {
                out += 1;
                write = 0;
            }
            if wanted && write + size <= seg_size {
                debug_assert!(out <= index as usize, "packing never runs ahead of reading");
                let to = Location {
                    seg: chain[out],
                    offset: write as u32,
                };
                if from != to {
                    self.segs.copy(from, to, size);
                }
                self.table.move_slot(bucket, slot, to);
                write += size;
                written[out].0 += size;
                written[out].1 += 1;
            } else {
                self.table.clear_at(bucket, slot);
                evicted += 1;
            }
        }
        self.merge_scratch = live;
        for (index, &src) in chain.iter().enumerate() {
            let header = &mut self.segs.headers[src as usize];
            self.counters.items -= header.live_items as u64;
            self.counters.live_bytes -= header.live_bytes as u64;
            if index < outputs {
                let (bytes, items) = written[index];
                header.write_offset = bytes as u32;
                header.live_bytes = bytes as u32;
                header.live_items = items;
                header.expire_at = expire_at;
                header.expire_last = expire_last;
                self.counters.items += items as u64;
                self.counters.live_bytes += bytes as u64;
            } else {
                header.live_items = 0;
                header.live_bytes = 0;
                self.retire_segment(src);
                self.counters.evicted_segments += 1;
            }
        }
        self.counters.evictions += evicted;
        self.counters.merges += 1;
        self.ttl.buckets[bucket].merge_cursor = self.segs.headers[chain[outputs - 1] as usize].next;
    }
}

#[cfg(test)]
mod tests {
    use crate::{Eviction, ManualClock, Segcache};
    use std::time::Duration;

    fn cache(policy: Eviction) -> Segcache {
        Segcache::builder()
            .heap_size(256 << 10)
            .segment_size(8 << 10)
            .hash_power(10)
            .eviction(policy)
            .clock(ManualClock::new())
            .build()
            .unwrap()
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
        let mut c = Segcache::builder()
            .heap_size(64 << 10)
            .segment_size(4 << 10)
            .hash_power(8)
            .clock(clock.clone())
            .build()
            .unwrap();
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

    #[test]
    fn merge_keeps_read_items_and_drops_unread_ones() {
        let clock = ManualClock::new();
        let mut c = Segcache::builder()
            .heap_size(64 << 10)
            .segment_size(4 << 10)
            .hash_power(8)
            .clock(clock.clone())
            .build()
            .unwrap();
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
}

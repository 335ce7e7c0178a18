//! Eviction: choosing which segment(s) to free when none is free.
//!
//! Owns the policies of [`Eviction`]. Merge eviction walks a TTL bucket
//! from a cursor and takes consecutive sealed segments (up to [`MERGE_MAX`],
//! or until they hold [`MERGE_RATIO`] segments' worth of live bytes). It
//! keeps the chain's most-read items, one segment's worth picked by a
//! frequency cutoff over the whole chain, compacted into the chain's first
//! segment; the rest are evicted and the other segments freed. When deletes
//! and overwrites have thinned the chain out, everything fits and merging
//! only compacts. The simple
//! policies evict one whole segment. Nothing here decides *when* to evict;
//! the write path calls [`Segcache::evict`] when it needs a segment.

use crate::builder::Eviction;
use crate::hashtable::{self, Location};
use crate::segments::{SegState, NONE};
use crate::ttl::BUCKETS;
use crate::{Error, Segcache};

/// Most segments one merge pass reads.
pub(crate) const MERGE_MAX: usize = 8;
/// A merge reads about this many segments' worth of live bytes and keeps
/// one segment's worth.
pub(crate) const MERGE_RATIO: usize = 4;
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

    /// One merge pass; false if no bucket has two sealed segments in a row.
    fn merge_evict(&mut self, now: u32) -> bool {
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

    /// Merges a chain of the bucket starting at its cursor (or its head).
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
            // Take sealed segments until they hold MERGE_RATIO segments'
            // worth of live bytes (more when deletes thinned them out).
            let mut chain = [NONE; MERGE_MAX];
            let mut len = 0;
            let mut live = 0;
            let mut at = start;
            while at != NONE
                && len < MERGE_MAX
                && live < MERGE_RATIO * seg_size
                && self.segs.headers[at as usize].state == SegState::Sealed
            {
                chain[len] = at;
                live += self.segs.headers[at as usize].live_bytes as usize;
                len += 1;
                at = self.segs.headers[at as usize].next;
            }
            if len >= 2 {
                self.merge_chain(bucket, &chain[..len]);
                return true;
            }
        }
        false
    }

    /// Keeps the most-read segment's worth of the chain's live items,
    /// compacted into its first segment; evicts the rest and frees the other
    /// segments.
    fn merge_chain(&mut self, bucket: usize, chain: &[u32]) {
        let dst = chain[0];
        let seg_size = self.segs.segment_size();
        // Pass 1: the live items with their hashes and access counts, and
        // the bytes at each count.
        let mut live = std::mem::take(&mut self.merge_scratch);
        live.clear();
        let mut histogram = [0usize; 128];
        let mut live_bytes = 0usize;
        let mut expire_at = 0u32;
        for &src in chain {
            for (offset, item) in self.segs.item_offsets(src) {
                let hash = self.table.hash(item.key());
                if let Some(info) = self.table.info_at(hash, Location { seg: src, offset }) {
                    let freq = hashtable::frequency(info);
                    histogram[freq as usize] += item.size();
                    live_bytes += item.size();
                    live.push((src, offset, hash, freq));
                }
            }
            let deadline = self.segs.headers[src as usize].expire_at;
            if deadline != 0 && (expire_at == 0 || deadline < expire_at) {
                expire_at = deadline;
            }
        }
        // The lowest access count at which the survivors fit in one segment;
        // items one count below it fill whatever room is left, in order.
        let mut cutoff = 0usize;
        let mut kept_bytes = live_bytes;
        while kept_bytes > seg_size {
            kept_bytes -= histogram[cutoff];
            cutoff += 1;
        }
        let mut borderline_room = seg_size - kept_bytes;
        // Items in `dst` move: a new generation means no CAS token of a
        // moved or removed item can match an item written here later.
        let dst_header = &mut self.segs.headers[dst as usize];
        dst_header.generation = dst_header.generation.wrapping_add(1);
        // Pass 2: copy survivors forward into `dst` in chain order (so a
        // copy within `dst` never overwrites an item not yet visited).
        let mut write = 0usize;
        let mut kept_items = 0u32;
        let mut evicted = 0u64;
        for &(src, offset, hash, freq) in &live {
            let from = Location { seg: src, offset };
            let size = self.segs.item(from).size();
            let keep = freq as usize >= cutoff
                || (freq as usize + 1 == cutoff && size <= borderline_room && {
                    borderline_room -= size;
                    true
                });
            if keep {
                let to = Location {
                    seg: dst,
                    offset: write as u32,
                };
                if from != to {
                    self.segs.copy(from, to, size);
                }
                let moved = self.table.relocate(hash, from, to);
                debug_assert!(moved);
                write += size;
                kept_items += 1;
            } else {
                self.table.remove_at(hash, from);
                evicted += 1;
            }
        }
        debug_assert!(write <= seg_size);
        self.merge_scratch = live;
        for &src in chain {
            let header = &mut self.segs.headers[src as usize];
            self.counters.items -= header.live_items as u64;
            self.counters.live_bytes -= header.live_bytes as u64;
            header.live_items = 0;
            header.live_bytes = 0;
            if src != dst {
                self.retire_segment(src);
                self.counters.evicted_segments += 1;
            }
        }
        let header = &mut self.segs.headers[dst as usize];
        header.write_offset = write as u32;
        header.live_items = kept_items;
        header.live_bytes = write as u32;
        header.expire_at = expire_at;
        let next = header.next;
        self.counters.items += kept_items as u64;
        self.counters.live_bytes += write as u64;
        self.counters.evictions += evicted;
        self.counters.merges += 1;
        self.ttl.buckets[bucket].merge_cursor = next;
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
                c.set(key.as_bytes(), &[i as u8; 90], 0, ttls[i as usize % 3])
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
            c.set(format!("k{i}").as_bytes(), &[1u8; 80], 0, None)
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

//! The hash table: key -> (segment id, offset), one cache line per bucket.
//!
//! A bucket is eight `u64` slots, 64-byte aligned. Slot 0 of a primary
//! bucket is the *bucket info* (overflow chain length, a 16-bit timestamp
//! for the frequency counter); slots 1..=7 hold *item info*:
//!
//! ```text
//!  63        52 51     44 43                20 19              0
//! +------------+---------+--------------------+-----------------+
//! |  tag (12)  | freq (8)| segment id (24)    | offset/8 (20)   |
//! +------------+---------+--------------------+-----------------+
//! ```
//!
//! A full bucket chains to an overflow bucket taken from a preallocated
//! pool: the chain's last slot becomes the index of the next bucket, and an
//! overflow bucket uses all eight slots for item info (the last one for the
//! next link when it is not the end). Chains are bounded; an overflow
//! bucket that empties at the end of a chain goes back to the pool.
//!
//! The tag (top 12 bits of the hash, never zero) lets lookups skip most key
//! comparisons; an all-zero slot is empty. The table never reads item
//! bytes itself: callers pass a `matches` closure that compares keys.
//! It must never hold a pointer: locations are (segment id, offset).

use std::alloc::{alloc_zeroed, handle_alloc_error, Layout};

/// Where an item lives: segment id and byte offset inside the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub seg: u32,
    pub offset: u32,
}

/// Largest number of segments a 24-bit segment id can name.
pub(crate) const MAX_SEGMENTS: usize = 1 << 24;
/// Largest segment a 20-bit offset in 8-byte units can address.
pub(crate) const MAX_SEGMENT_SIZE: usize = (1 << 20) * 8;
/// Longest overflow chain a primary bucket may grow.
const MAX_CHAIN: u64 = 16;

const SLOTS: usize = 8;
const TAG_SHIFT: u32 = 52;
const FREQ_SHIFT: u32 = 44;
const SEG_SHIFT: u32 = 20;
const SEG_MASK: u64 = (1 << 24) - 1;
const OFFSET_MASK: u64 = (1 << 20) - 1;
const FREQ_MASK: u64 = 0xff << FREQ_SHIFT;
/// Frequency bit meaning "already counted during the bucket's current second".
const FREQ_COUNTED: u64 = 0x80;
const FREQ_MAX: u64 = 0x7f;
const CHAIN_MASK: u64 = 0xff;
const TIME_SHIFT: u32 = 8;
const TIME_MASK: u64 = 0xffff << TIME_SHIFT;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket([u64; SLOTS]);

/// The table is full: the key's chain is at its bound or the overflow pool
/// is empty.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

pub(crate) struct HashTable {
    /// Primary buckets first, then the overflow pool.
    buckets: Box<[Bucket]>,
    mask: u64,
    primary: usize,
    free_overflow: Vec<u32>,
    hasher: ahash::RandomState,
    rng: u64,
}

#[inline]
fn tag_of(hash: u64) -> u64 {
    let tag = hash >> TAG_SHIFT;
    if tag == 0 {
        1
    } else {
        tag
    }
}

#[inline]
fn pack(tag: u64, freq: u64, loc: Location) -> u64 {
    debug_assert!(loc.offset as usize % crate::item::ALIGN == 0);
    debug_assert!((loc.seg as u64) <= SEG_MASK);
    (tag << TAG_SHIFT)
        | (freq << FREQ_SHIFT)
        | ((loc.seg as u64) << SEG_SHIFT)
        | (loc.offset as u64 / crate::item::ALIGN as u64)
}

/// Decodes the location part of an item info slot.
#[inline]
pub(crate) fn location(info: u64) -> Location {
    Location {
        seg: ((info >> SEG_SHIFT) & SEG_MASK) as u32,
        offset: ((info & OFFSET_MASK) as u32) * crate::item::ALIGN as u32,
    }
}

/// The saturating access counter (0..=127) of an item info slot.
#[inline]
pub(crate) fn frequency(info: u64) -> u8 {
    ((info >> FREQ_SHIFT) & FREQ_MAX) as u8
}

#[inline]
fn same_location(info: u64, tag: u64, loc: Location) -> bool {
    info >> TAG_SHIFT == tag && location(info) == loc
}

fn zeroed_buckets(n: usize) -> Box<[Bucket]> {
    assert!(n > 0);
    let layout = Layout::array::<Bucket>(n).expect("bucket array size overflows");
    // SAFETY: `layout` has nonzero size (n > 0, Bucket is 64 bytes) and the
    // alignment of `Bucket`. An all-zero `Bucket` is valid (it is only
    // `u64`s), so the zeroed allocation holds `n` initialised buckets, and
    // `Box<[Bucket]>` frees it later with this same layout.
    unsafe {
        let ptr = alloc_zeroed(layout) as *mut Bucket;
        if ptr.is_null() {
            handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    }
}

impl HashTable {
    /// A table of `2^hash_power` primary buckets plus
    /// `overflow_factor * 2^hash_power` overflow buckets.
    pub(crate) fn new(hash_power: u8, overflow_factor: f64) -> Self {
        let primary = 1usize << hash_power;
        let overflow = (primary as f64 * overflow_factor) as usize;
        let mut table = HashTable {
            buckets: zeroed_buckets(primary + overflow),
            mask: primary as u64 - 1,
            primary,
            free_overflow: Vec::new(),
            hasher: ahash::RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ),
            rng: 0x9e37_79b9_7f4a_7c15,
        };
        table.reset_pool();
        table
    }

    fn reset_pool(&mut self) {
        self.free_overflow = (self.primary..self.buckets.len())
            .rev()
            .map(|b| b as u32)
            .collect();
    }

    /// Bytes the table occupies (primary buckets and the overflow pool).
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Empties the table.
    pub(crate) fn clear(&mut self) {
        self.buckets.fill(Bucket([0; SLOTS]));
        self.reset_pool();
    }

    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn primary_of(&self, hash: u64) -> usize {
        (hash & self.mask) as usize
    }

    /// First slot in the chain of `primary` whose nonzero item info
    /// satisfies `pred`.
    #[inline]
    fn find(&self, primary: usize, mut pred: impl FnMut(u64) -> bool) -> Option<(usize, usize)> {
        let mut bucket = primary;
        let mut links = self.buckets[primary].0[0] & CHAIN_MASK;
        let mut first = 1;
        loop {
            let slots = &self.buckets[bucket].0;
            let end = if links > 0 { SLOTS - 1 } else { SLOTS };
            for (i, &info) in slots.iter().enumerate().take(end).skip(first) {
                if info != 0 && pred(info) {
                    return Some((bucket, i));
                }
            }
            if links == 0 {
                return None;
            }
            links -= 1;
            bucket = slots[SLOTS - 1] as usize;
            first = 0;
        }
    }

    /// Finds the item info for a key. `matches` compares the key stored at a
    /// location with the wanted key.
    #[inline]
    pub(crate) fn lookup(
        &self,
        hash: u64,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<(usize, usize, u64)> {
        let tag = tag_of(hash);
        let primary = self.primary_of(hash);
        self.find(primary, |info| {
            info >> TAG_SHIFT == tag && matches(location(info))
        })
        .map(|(b, s)| (b, s, self.buckets[b].0[s]))
    }

    /// The item info at a known location, if the table points there.
    #[inline]
    pub(crate) fn info_at(&self, hash: u64, loc: Location) -> Option<u64> {
        let tag = tag_of(hash);
        self.find(self.primary_of(hash), |info| same_location(info, tag, loc))
            .map(|(b, s)| self.buckets[b].0[s])
    }

    /// Points the key at `loc`. Returns the item info it replaced, if the key
    /// was present (the access counter carries over to the new item).
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        loc: Location,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Result<Option<u64>, TableFull> {
        let tag = tag_of(hash);
        let primary = self.primary_of(hash);
        if let Some((b, s)) = self.find(primary, |info| {
            info >> TAG_SHIFT == tag && matches(location(info))
        }) {
            let old = self.buckets[b].0[s];
            let freq = (old >> FREQ_SHIFT) & FREQ_MAX;
            self.buckets[b].0[s] = pack(tag, freq, loc);
            return Ok(Some(old));
        }
        let info = pack(tag, 0, loc);
        // An empty slot anywhere in the chain.
        let mut bucket = primary;
        let mut links = self.buckets[primary].0[0] & CHAIN_MASK;
        let mut first = 1;
        loop {
            let end = if links > 0 { SLOTS - 1 } else { SLOTS };
            if let Some(s) = (first..end).find(|&s| self.buckets[bucket].0[s] == 0) {
                self.buckets[bucket].0[s] = info;
                return Ok(None);
            }
            if links == 0 {
                break;
            }
            links -= 1;
            bucket = self.buckets[bucket].0[SLOTS - 1] as usize;
            first = 0;
        }
        // Grow the chain: `bucket` is its last bucket and is full.
        let chain = self.buckets[primary].0[0] & CHAIN_MASK;
        if chain >= MAX_CHAIN {
            return Err(TableFull);
        }
        let next = self.free_overflow.pop().ok_or(TableFull)? as usize;
        debug_assert!(self.buckets[next].0.iter().all(|&s| s == 0));
        self.buckets[next].0[0] = self.buckets[bucket].0[SLOTS - 1];
        self.buckets[next].0[1] = info;
        self.buckets[bucket].0[SLOTS - 1] = next as u64;
        self.buckets[primary].0[0] += 1;
        Ok(None)
    }

    /// Removes the entry pointing at `loc` (no key comparison: a location
    /// names one item). Returns its item info if the table pointed there.
    pub(crate) fn remove_at(&mut self, hash: u64, loc: Location) -> Option<u64> {
        let tag = tag_of(hash);
        let primary = self.primary_of(hash);
        let (b, s) = self.find(primary, |info| same_location(info, tag, loc))?;
        Some(self.clear_slot(primary, b, s))
    }

    /// Moves the entry pointing at `from` to `to`, halving its access
    /// counter (merge survivors start to age). False if the table did not
    /// point at `from`.
    pub(crate) fn relocate(&mut self, hash: u64, from: Location, to: Location) -> bool {
        let tag = tag_of(hash);
        match self.find(self.primary_of(hash), |info| same_location(info, tag, from)) {
            Some((b, s)) => {
                let freq = ((self.buckets[b].0[s] >> FREQ_SHIFT) & FREQ_MAX) / 2;
                self.buckets[b].0[s] = pack(tag, freq, to);
                true
            }
            None => false,
        }
    }

    fn clear_slot(&mut self, primary: usize, bucket: usize, slot: usize) -> u64 {
        let old = std::mem::replace(&mut self.buckets[bucket].0[slot], 0);
        // Give back overflow buckets that are empty at the end of the chain.
        while self.buckets[primary].0[0] & CHAIN_MASK > 0 {
            let links = self.buckets[primary].0[0] & CHAIN_MASK;
            let mut prev = primary;
            for _ in 1..links {
                prev = self.buckets[prev].0[SLOTS - 1] as usize;
            }
            let last = self.buckets[prev].0[SLOTS - 1] as usize;
            if self.buckets[last].0.iter().any(|&s| s != 0) {
                break;
            }
            self.buckets[prev].0[SLOTS - 1] = 0;
            self.buckets[primary].0[0] -= 1;
            self.free_overflow.push(last as u32);
        }
        old
    }

    /// Counts an access to the item at (`bucket`, `slot`) found for `hash`:
    /// at most once per second per item, probabilistically past 16.
    #[inline]
    pub(crate) fn record_access(&mut self, hash: u64, bucket: usize, slot: usize, now: u32) {
        let primary = self.primary_of(hash);
        let stamp = (now as u64 & 0xffff) << TIME_SHIFT;
        if self.buckets[primary].0[0] & TIME_MASK != stamp {
            let chain_info = &mut self.buckets[primary].0[0];
            *chain_info = (*chain_info & !TIME_MASK) | stamp;
            self.for_each_item_slot(primary, |info| *info &= !(FREQ_COUNTED << FREQ_SHIFT));
        }
        let info = self.buckets[bucket].0[slot];
        let freq = (info & FREQ_MASK) >> FREQ_SHIFT;
        if freq & FREQ_COUNTED != 0 {
            return;
        }
        let count = freq & FREQ_MAX;
        let bump = count < 16 || {
            // xorshift64: cheap randomness for the probabilistic increment.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % count == 0
        };
        let count = if bump && count < FREQ_MAX {
            count + 1
        } else {
            count
        };
        self.buckets[bucket].0[slot] = (info & !FREQ_MASK) | ((FREQ_COUNTED | count) << FREQ_SHIFT);
    }

    fn for_each_item_slot(&mut self, primary: usize, mut f: impl FnMut(&mut u64)) {
        let mut bucket = primary;
        let mut links = self.buckets[primary].0[0] & CHAIN_MASK;
        let mut first = 1;
        loop {
            let end = if links > 0 { SLOTS - 1 } else { SLOTS };
            for s in first..end {
                let slot = &mut self.buckets[bucket].0[s];
                if *slot != 0 {
                    f(slot);
                }
            }
            if links == 0 {
                return;
            }
            links -= 1;
            bucket = self.buckets[bucket].0[SLOTS - 1] as usize;
            first = 0;
        }
    }

    /// Visits every item info in the table.
    #[cfg(test)]
    pub(crate) fn count_items(&mut self) -> usize {
        let mut n = 0;
        for primary in 0..self.primary {
            self.for_each_item_slot(primary, |_| n += 1);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A toy store: location -> key, so `matches` closures can compare keys.
    struct Keys(HashMap<(u32, u32), Vec<u8>>);

    fn loc(i: u32) -> Location {
        Location {
            seg: i % 1000,
            offset: (i / 1000) * 8,
        }
    }

    #[test]
    fn item_info_round_trips() {
        let l = Location {
            seg: (1 << 24) - 1,
            offset: ((1 << 20) - 1) * 8,
        };
        let info = pack(0xabc, 0x55, l);
        assert_eq!(location(info), l);
        assert_eq!(frequency(info), 0x55);
        assert_eq!(info >> TAG_SHIFT, 0xabc);
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn insert_lookup_remove_with_chains() {
        // 16 primary buckets and a pool of 64: room for chains to form.
        let mut table = HashTable::new(4, 4.0);
        let mut keys = Keys(HashMap::new());
        let n = 400u32;
        for i in 0..n {
            let key = format!("key-{i}").into_bytes();
            let hash = table.hash(&key);
            let l = loc(i);
            keys.0.insert((l.seg, l.offset), key.clone());
            let res = table.insert(hash, l, |at| keys.0.get(&(at.seg, at.offset)) == Some(&key));
            if res.is_err() {
                // Past capacity: every earlier key must still be there.
                assert!(i > 16 * 7);
                keys.0.remove(&(l.seg, l.offset));
                break;
            }
        }
        let stored = keys.0.len();
        assert!(
            stored > 16 * 7,
            "chains must extend past the primary buckets"
        );
        assert_eq!(table.count_items(), stored);
        for (&(seg, offset), key) in &keys.0 {
            let hash = table.hash(key);
            let found = table.lookup(hash, |at| keys.0.get(&(at.seg, at.offset)) == Some(key));
            assert_eq!(location(found.unwrap().2), Location { seg, offset });
        }
        // Remove everything; the overflow pool must come back whole.
        let all: Vec<_> = keys.0.iter().map(|(l, k)| (*l, k.clone())).collect();
        for ((seg, offset), key) in all {
            let hash = table.hash(&key);
            assert!(table.remove_at(hash, Location { seg, offset }).is_some());
            assert!(table.remove_at(hash, Location { seg, offset }).is_none());
        }
        assert_eq!(table.count_items(), 0);
        assert_eq!(table.free_overflow.len(), 64);
        assert!(table.buckets[..16].iter().all(|b| b.0[0] & CHAIN_MASK == 0));
    }

    #[test]
    fn insert_replaces_and_keeps_frequency() {
        let mut table = HashTable::new(4, 0.0);
        let key = b"k".to_vec();
        let hash = table.hash(&key);
        let a = Location { seg: 1, offset: 8 };
        let b = Location { seg: 2, offset: 16 };
        assert_eq!(table.insert(hash, a, |_| true), Ok(None));
        let (bucket, slot, _) = table.lookup(hash, |l| l == a).unwrap();
        table.record_access(hash, bucket, slot, 1);
        table.record_access(hash, bucket, slot, 1); // same second: no count
        table.record_access(hash, bucket, slot, 2);
        assert_eq!(frequency(table.info_at(hash, a).unwrap()), 2);
        let old = table.insert(hash, b, |l| l == a).unwrap().unwrap();
        assert_eq!(location(old), a);
        assert_eq!(frequency(table.info_at(hash, b).unwrap()), 2);
        assert!(table.info_at(hash, a).is_none());
        assert!(table.relocate(hash, b, a));
        assert_eq!(
            frequency(table.info_at(hash, a).unwrap()),
            1,
            "relocation halves"
        );
        assert!(!table.relocate(hash, b, a), "nothing points at b any more");
    }

    #[test]
    fn full_table_reports_full() {
        let mut table = HashTable::new(1, 0.0);
        let mut inserted = 0;
        for i in 0..100u32 {
            let key = i.to_le_bytes();
            let hash = table.hash(&key);
            if table.insert(hash, loc(i), |_| false).is_ok() {
                inserted += 1;
            }
        }
        assert_eq!(inserted, 14, "two primary buckets of seven slots, no pool");
    }

    #[test]
    fn frequency_saturates() {
        let mut table = HashTable::new(2, 0.0);
        let hash = table.hash(b"hot");
        let l = Location { seg: 0, offset: 0 };
        table.insert(hash, l, |_| false).unwrap();
        for now in 0..100_000u32 {
            let (b, s, _) = table.lookup(hash, |x| x == l).unwrap();
            table.record_access(hash, b, s, now);
        }
        let f = frequency(table.info_at(hash, l).unwrap());
        assert!(f > 16 && f <= 127, "got {f}");
    }
}

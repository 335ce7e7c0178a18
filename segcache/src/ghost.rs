//! Ghosts: fingerprints of keys that eviction dropped recently (or that
//! expired after proving themselves, remembered as probation's), with the
//! pool (small or main) each was dropped from; and [`DropCounts`], a long,
//! counted memory of probation's drops.
//!
//! A key that comes back soon after such an eviction was not a one-hit
//! wonder after all: the write path asks [`Ghosts::take`] and, on a match,
//! gives the new item one access so that the next admission pass promotes
//! it to the main pool (S3-FIFO's ghost queue, SOSP'23; `admission.rs`
//! decides, from the pool the key was dropped from). The set is
//! approximate by design: 16-bit fingerprints in 4-way buckets, first in
//! first out within a bucket, about two bytes per entry, one entry per
//! four items the cache holds (about 0.55 bytes per item). A false match
//! only promotes an item one pass early; a lost entry only costs a
//! promotion. This module never touches items, segments or the hash table.

/// Fingerprints per bucket.
const WAYS: usize = 4;

/// Items held per ghost kept (beyond [`ONE_PER_ITEM_UP_TO`] items). S3-FIFO
/// keeps as many ghosts as its main queue holds items; here a quarter as
/// many, about 0.55 bytes per item held instead of 2.3. With one per item
/// held, more keys came back warm after most of the cache had turned over
/// and gained nothing from it; one per three missed less than one per item
/// on most rows of BENCHMARKS §1, and once evaluations kept nothing unread
/// and main's ghosts came back warm too, one per four missed less again on
/// 9 rows (cluster 7 by 0.002) and more on 5 (by at most 0.002).
const GHOSTS_PER_ITEM: usize = 4;
/// Below this many items held, one ghost per item: a few KiB at most, and
/// in a cache this small a quarter of the items is too short a memory.
const ONE_PER_ITEM_UP_TO: usize = 1024;

pub(crate) struct Ghosts {
    /// `buckets * WAYS` fingerprints; 0 is an empty way, the newest entry of
    /// a bucket is at its way 0.
    slots: Box<[u16]>,
    buckets: usize,
}

/// The ghost came from the main pool (the fingerprint's low bit).
const FROM_MAIN: u16 = 1;

#[inline]
fn fingerprint(hash: u64) -> u16 {
    // The top 15 bits (1 if they are all 0, as 0 is an empty way), shifted
    // over the pool bit; the bucket comes from the middle bits.
    ((hash >> 49) as u16).max(1) << 1
}

impl Ghosts {
    /// An empty set with room for about `entries` fingerprints.
    pub(crate) fn with_capacity(entries: usize) -> Self {
        let buckets = entries.div_ceil(WAYS).max(1);
        Ghosts {
            slots: vec![0; buckets * WAYS].into_boxed_slice(),
            buckets,
        }
    }

    /// How many fingerprints fit.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets * WAYS
    }

    /// Bytes this set occupies.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// Keeps the capacity within [want, 1.5 x want], where want is a quarter
    /// of `items` (all of them up to [`ONE_PER_ITEM_UP_TO`], at least 64):
    /// re-sizing drops every fingerprint (they are hints; losing them once
    /// per resize costs a few promotions).
    pub(crate) fn fit(&mut self, items: usize) {
        let want = (items / GHOSTS_PER_ITEM)
            .max(items.min(ONE_PER_ITEM_UP_TO))
            .max(64);
        let cap = self.capacity();
        if cap < want || cap > want + want / 2 {
            *self = Ghosts::with_capacity(want + want / 8);
        }
    }

    /// Drops every fingerprint.
    pub(crate) fn clear(&mut self) {
        self.slots.fill(0);
    }

    #[inline]
    fn bucket(&self, hash: u64) -> usize {
        // Lemire's multiply-shift range reduction on bits 16..48.
        let mid = (hash >> 16) as u32 as u64;
        ((mid * self.buckets as u64) >> 32) as usize * WAYS
    }

    /// Remembers a key's hash and the pool it was evicted from, pushing out
    /// its bucket's oldest entry.
    pub(crate) fn insert(&mut self, hash: u64, from_main: bool) {
        let at = self.bucket(hash);
        let ways = &mut self.slots[at..at + WAYS];
        ways.copy_within(0..WAYS - 1, 1);
        ways[0] = fingerprint(hash) | if from_main { FROM_MAIN } else { 0 };
    }

    /// If the hash was remembered, forgets it and says whether it was
    /// evicted from the main pool.
    pub(crate) fn take(&mut self, hash: u64) -> Option<bool> {
        let at = self.bucket(hash);
        let fp = fingerprint(hash);
        let ways = &mut self.slots[at..at + WAYS];
        let i = ways.iter().position(|&w| w & !FROM_MAIN == fp)?;
        let from_main = ways[i] & FROM_MAIN != 0;
        ways.copy_within(i + 1.., i);
        ways[WAYS - 1] = 0;
        Some(from_main)
    }
}

/// A long, counted memory of keys dropped from probation: a count-min
/// sketch of two 4-bit counters per key (conservative increments: only
/// the smaller counter goes up), every counter halved after as many drops
/// as the sketch has bytes. For its memory it remembers drops far longer
/// than [`Ghosts`], as counts, not names: a key's count is never below its
/// drops since the last halving, and above them only by collisions.
pub(crate) struct DropCounts {
    /// Two counters per byte.
    nibbles: Box<[u8]>,
    /// Drops counted since the last halving.
    drops: usize,
}

/// Most a counter holds.
const DROP_COUNT_MAX: u8 = 15;

impl DropCounts {
    /// A sketch of `bytes` bytes (none at 0: it counts nothing).
    pub(crate) fn with_bytes(bytes: usize) -> Self {
        DropCounts {
            nibbles: vec![0; bytes].into_boxed_slice(),
            drops: 0,
        }
    }

    /// Bytes this sketch occupies.
    pub(crate) fn bytes(&self) -> usize {
        self.nibbles.len()
    }

    /// The key's two counters, among `2 * bytes`: multiply-shift on the
    /// two halves of a remix of the hash (the table, the ghosts and the
    /// shards use its raw bits).
    #[inline]
    fn positions(&self, hash: u64) -> [usize; 2] {
        let n = 2 * self.nibbles.len() as u64;
        let h = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        [
            ((h as u32 as u64 * n) >> 32) as usize,
            (((h >> 32) * n) >> 32) as usize,
        ]
    }

    #[inline]
    fn get(&self, at: usize) -> u8 {
        (self.nibbles[at / 2] >> (4 * (at % 2))) & 0xf
    }

    #[inline]
    fn set(&mut self, at: usize, value: u8) {
        let byte = &mut self.nibbles[at / 2];
        let shift = 4 * (at % 2);
        *byte = (*byte & !(0xf << shift)) | value << shift;
    }

    /// About how often the key was dropped lately.
    pub(crate) fn count(&self, hash: u64) -> u8 {
        if self.nibbles.is_empty() {
            return 0;
        }
        let [a, b] = self.positions(hash);
        self.get(a).min(self.get(b))
    }

    /// Counts one more drop of the key.
    pub(crate) fn add(&mut self, hash: u64) {
        if self.nibbles.is_empty() {
            return;
        }
        let [a, b] = self.positions(hash);
        let next = (self.get(a).min(self.get(b)) + 1).min(DROP_COUNT_MAX);
        for at in [a, b] {
            if self.get(at) < next {
                self.set(at, next);
            }
        }
        self.drops += 1;
        if self.drops >= self.nibbles.len() {
            self.drops = 0;
            for byte in self.nibbles.iter_mut() {
                // Both counters of the byte halved at once.
                *byte = (*byte >> 1) & 0x77;
            }
        }
    }

    /// Forgets every count.
    pub(crate) fn clear(&mut self) {
        self.nibbles.fill(0);
        self.drops = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(i: u64) -> u64 {
        // splitmix64
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn remembers_recent_keys_once() {
        let mut g = Ghosts::with_capacity(1000);
        for i in 0..500 {
            g.insert(mix(i), i % 3 == 0);
        }
        let found = (0..500)
            .filter(|&i| g.take(mix(i)) == Some(i % 3 == 0))
            .count();
        assert!(
            found >= 480,
            "recent ghosts found with their pool: {found}/500"
        );
        let again = (0..500).filter(|&i| g.take(mix(i)).is_some()).count();
        assert!(again <= 2, "a take forgets: {again}");
        let strangers = (10_000..20_000)
            .filter(|&i| g.take(mix(i)).is_some())
            .count();
        assert!(strangers < 10, "false matches: {strangers}/10000");
    }

    #[test]
    fn a_take_from_the_middle_keeps_the_order_of_the_rest() {
        // One bucket, newest first.
        let mut g = Ghosts::with_capacity(WAYS);
        assert_eq!(g.capacity(), WAYS);
        // Distinct fingerprints (the top bits); one bucket takes them all.
        let key = |fp: u64| fp << 49 | 0x1234;
        let keys: Vec<u64> = (1..=WAYS as u64).map(key).collect();
        for (i, &k) in keys.iter().enumerate() {
            g.insert(k, i % 2 == 1);
        }
        assert_eq!(g.take(keys[2]), Some(false));
        // The freed way goes to the next insert; nothing else is lost.
        g.insert(key(99), true);
        for (i, &k) in keys.iter().enumerate().filter(|&(i, _)| i != 2) {
            assert_eq!(g.take(k), Some(i % 2 == 1), "key {i}");
        }
        assert_eq!(g.take(key(99)), Some(true));
        // One insert more than the bucket holds pushes out the oldest.
        for &k in &keys {
            g.insert(k, false);
        }
        g.insert(key(99), false);
        assert_eq!(g.take(keys[0]), None, "the oldest made way");
        assert_eq!(g.take(key(99)), Some(false));
    }

    #[test]
    fn old_entries_make_way_for_new_ones() {
        let mut g = Ghosts::with_capacity(256);
        for i in 0..10_000 {
            g.insert(mix(i), false);
        }
        let old = (0..1000).filter(|&i| g.take(mix(i)).is_some()).count();
        let new = (9_800..10_000)
            .filter(|&i| g.take(mix(i)).is_some())
            .count();
        assert!(old < 30, "old ghosts mostly gone: {old}");
        assert!(new > 150, "newest ghosts kept: {new}/200");
    }

    #[test]
    fn fit_tracks_the_item_count() {
        let mut g = Ghosts::with_capacity(64);
        g.fit(30_000);
        assert!(g.capacity() >= 7_500 && g.capacity() <= 9_400);
        assert_eq!(g.bytes(), g.capacity() * 2);
        let cap = g.capacity();
        g.insert(mix(1), true);
        g.fit(27_000);
        assert_eq!(g.capacity(), cap, "small changes keep the set");
        assert_eq!(g.take(mix(1)), Some(true));
        g.fit(6_000);
        assert!(g.capacity() >= 1_500 && g.capacity() < 3_000);
        // A small cache keeps one ghost per item.
        g.fit(900);
        assert!(g.capacity() >= 900 && g.capacity() <= 1_200);
        g.fit(10);
        assert!(g.capacity() >= 64 && g.capacity() <= 96);
    }

    #[test]
    fn drop_counts_count_each_key_and_halve_with_age() {
        let mut d = DropCounts::with_bytes(4096);
        assert_eq!(d.bytes(), 4096);
        for round in 0..5u8 {
            for i in 0..200 {
                assert!(d.count(mix(i)) >= round, "never below the drops");
                d.add(mix(i));
            }
        }
        let exact = (0..200).filter(|&i| d.count(mix(i)) == 5).count();
        assert!(exact >= 195, "a sparse sketch counts exactly: {exact}/200");
        // 400 of 8192 counters are set: both of a stranger's, about 0.24%.
        let strangers = (1_000..11_000).filter(|&i| d.count(mix(i)) > 0).count();
        assert!(strangers < 60, "strangers counted: {strangers}/10000");
        // 1000 drops so far; 3096 more (of other keys) reach the halving.
        for i in 0..3_096 {
            d.add(mix(100_000 + i));
        }
        let halved = (0..200).filter(|&i| d.count(mix(i)) == 2).count();
        assert!(
            halved >= 195,
            "counts halved after 4096 drops: {halved}/200"
        );
        // Saturation at 15.
        for _ in 0..40 {
            d.add(mix(7));
        }
        assert_eq!(d.count(mix(7)), DROP_COUNT_MAX);
        d.clear();
        assert_eq!(d.count(mix(7)), 0);
        // A sketch of no bytes counts nothing.
        let mut none = DropCounts::with_bytes(0);
        none.add(mix(7));
        assert_eq!((none.count(mix(7)), none.bytes()), (0, 0));
    }
}

//! Values the cache does not copy: an [`External`] is a handle to memory
//! the cache's owner keeps (a Python object, a buffer of its own), stored
//! in the item in place of the value and charged to the heap by its
//! weight.
//!
//! Owns the handle's encoding, the release hook, the count of external
//! bytes held, and the heap's allowance for them: segments withheld from
//! writes, their pages given back to the kernel, so that the heap in use
//! plus the external weight stays within the heap's size. Must never read
//! or free what a handle points at (only the owner's [`ReleaseFn`] does),
//! nor release a handle twice: a handle is released exactly once, when
//! the table stops pointing at its item for any reason but a move
//! (merges, compaction and a touch's rewrite carry the value, and the
//! item's [`EXTERNAL`](crate::item::EXTERNAL) bit, to the new place).
//!
//! The release points, each an unlink that is not a move: an overwrite
//! (`cache/write.rs` `link`, or `overwrite_in_place` when a handle is
//! written over a handle), a delete (`cache/remove.rs`), every unlink
//! accounted by `Segcache::account_unlinked` (expired on a read, a table
//! victim, a growing table's drop, `unlink_item`), the walks that unlink
//! whole ranges (expiry and segment eviction, `unlink_between`; merge
//! eviction's drops, `eviction/merge.rs`), and [`Segcache::clear`] and
//! [`Drop`], which release what is still linked.

use crate::hashtable::{self, Location};
use crate::ops::Ttl;
use crate::{Error, Segcache};

/// A value kept outside the cache's heap: `handle` identifies it to its
/// owner (a pointer, an index), `weight` is the memory it takes, which
/// the cache charges to its heap as if the bytes were stored.
///
/// The item stores the handle and the weight ([`External::ENCODED_LEN`]
/// bytes) where an inline item stores its value. Storing an external
/// value hands one ownership of the handle to the cache; the cache gives
/// it back, exactly once, through the [`ReleaseFn`] of
/// [`Builder::on_release`](crate::Builder::on_release) when the item
/// leaves (overwritten, deleted, expired, evicted, cleared, or the cache
/// dropped). A failed store hands nothing over.
///
/// ```
/// use segcache::{External, Segcache};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// static RELEASED: AtomicU64 = AtomicU64::new(0);
/// fn release(value: External) {
///     RELEASED.fetch_add(value.handle, Ordering::Relaxed);
/// }
///
/// let mut cache = Segcache::builder().on_release(release).build()?;
/// cache.set_external("page", External { handle: 7, weight: 4096 }, 0, None)?;
/// let item = cache.get("page").unwrap();
/// assert_eq!(item.external(), Some(External { handle: 7, weight: 4096 }));
/// assert_eq!(cache.stats().external_bytes, 4096);
/// cache.set("page", "inline now", 0, None)?; // the overwrite releases handle 7
/// assert_eq!(RELEASED.load(Ordering::Relaxed), 7);
/// # Ok::<(), segcache::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct External {
    /// What the owner uses to find the value.
    pub handle: u64,
    /// Bytes the value takes in the owner's memory, charged to the heap.
    pub weight: u32,
}

impl External {
    /// Bytes an external value takes in its item: the handle (8, little
    /// endian) and the weight (4).
    pub const ENCODED_LEN: usize = 12;

    /// The bytes stored in the item in place of the value.
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..8].copy_from_slice(&self.handle.to_le_bytes());
        out[8..].copy_from_slice(&self.weight.to_le_bytes());
        out
    }

    /// The external value an item's value bytes encode, if they are
    /// [`ENCODED_LEN`](Self::ENCODED_LEN) long.
    pub fn decode(value: &[u8]) -> Option<External> {
        let bytes: &[u8; Self::ENCODED_LEN] = value.try_into().ok()?;
        let (handle, weight) = bytes.split_at(8);
        Some(External {
            handle: u64::from_le_bytes(handle.try_into().ok()?),
            weight: u32::from_le_bytes(weight.try_into().ok()?),
        })
    }
}

/// Gives an external value back to its owner: called once per value the
/// cache stops holding, from inside the operation that dropped it (on the
/// thread running it, under a [`ShardedCache`](crate::ShardedCache)'s
/// shard lock). It must not call into the cache.
pub type ReleaseFn = fn(External);

/// The cache's external values: the release hook and what is held.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Externals {
    /// The owner's release function; without one, external stores are
    /// refused.
    pub(crate) release: Option<ReleaseFn>,
    /// Items whose value is external.
    pub(crate) items: u64,
    /// Their weights' sum.
    pub(crate) bytes: u64,
}

impl Externals {
    /// Releases the external value whose encoding is `value` (an item the
    /// table has just stopped pointing at).
    #[inline]
    pub(crate) fn release(&mut self, value: &[u8]) {
        let Some(external) = External::decode(value) else {
            debug_assert!(false, "an external item with a {}-byte value", value.len());
            return;
        };
        debug_assert!(self.items > 0 && self.bytes >= external.weight as u64);
        self.items -= 1;
        self.bytes -= external.weight as u64;
        if let Some(release) = self.release {
            release(external);
        }
    }
}

impl Externals {
    /// Hands back the external value encoded in `value` that a successful
    /// store did not keep (its TTL had already passed): never counted.
    pub(crate) fn give_back(&self, value: &[u8]) {
        if let (Some(release), Some(external)) = (self.release, External::decode(value)) {
            release(external);
        }
    }
}

impl Segcache {
    /// Stores an [`External`] value under a key, replacing any existing
    /// item: the item holds the handle, and the value's weight is charged
    /// to the heap (segments are evicted, and held back, until the heap in
    /// use plus every external weight fits in it). On success the cache
    /// owns the handle until it releases it; on error nothing changed and
    /// the caller still owns it.
    ///
    /// Errors: [`Error::Unsupported`] without a release function
    /// ([`Builder::on_release`](crate::Builder::on_release)) or with a
    /// datapool (a handle means nothing to the next process);
    /// [`Error::ValueTooLarge`] for a weight over half the heap; else as
    /// [`set`](Self::set).
    pub fn set_external(
        &mut self,
        key: impl AsRef<[u8]>,
        value: External,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        self.set_external_hashed(
            key,
            crate::hashtable::hash_key(key),
            value,
            flags,
            ttl.into(),
        )
    }

    /// [`set_external`](Self::set_external) with the key's hash already
    /// computed: as [`set`](Self::set)'s direct path, a plain overwrite
    /// that then counts the weight, and makes room for it only if the
    /// withheld segments no longer cover the external bytes. Anything
    /// unusual (an error to report, a TTL already expired, a delayed
    /// flush) takes the general store, which reports as every store does.
    #[inline]
    pub(crate) fn set_external_hashed(
        &mut self,
        key: &[u8],
        hash: u64,
        value: External,
        flags: u32,
        ttl: Ttl,
    ) -> Result<(), Error> {
        let encoded = value.encode();
        let meta = crate::item::Meta {
            flags,
            external: true,
            ..crate::item::Meta::default()
        };
        let size = crate::item::item_size(key.len(), encoded.len(), &meta);
        let secs = match ttl {
            Ttl::Never => Some(0),
            Ttl::After(d) => Some(d.as_secs().saturating_add((d.subsec_nanos() > 0) as u64)),
            Ttl::Expired => None,
        };
        let plain = self.externals.release.is_some()
            && !self.has_datapool()
            && value.weight as usize <= self.max_external_weight()
            && self.eviction != crate::Eviction::None
            && !key.is_empty()
            && key.len() <= crate::MAX_KEY_LEN
            && size <= self.segs.segment_size()
            && !self.flush_pending();
        let Some(secs) = secs.filter(|&s| plain && s <= crate::MAX_TTL as u64) else {
            let store = crate::ops::Store {
                flags,
                ttl,
                external: true,
                ..crate::ops::Store::new(crate::ops::StoreMode::Set, key, &encoded[..])
            };
            return self.store_located(&store, hash).map(drop);
        };
        // A handle of the same size over an external item without a TTL:
        // written over the old handle, which is released there.
        if secs != 0
            || self
                .overwrite_in_place(key, hash, &encoded, &meta, size, 0, 0)
                .is_none()
        {
            let now = if secs == 0 { 0 } else { self.clock_now() };
            self.write_item(key, hash, &encoded, &meta, size, secs as u32, now)?;
        }
        self.externals.items += 1;
        self.externals.bytes += value.weight as u64;
        if !self.externals_fit() {
            self.fit_externals();
        }
        Ok(())
    }

    /// Checks an external store before anything changes: the cache takes
    /// external values, `value` encodes one, and its weight fits.
    pub(crate) fn check_external(&self, value: &[u8]) -> Result<External, Error> {
        if self.externals.release.is_none() {
            return Err(Error::Unsupported(
                "external values need a release function (Builder::on_release)",
            ));
        }
        if self.has_datapool() {
            return Err(Error::Unsupported(
                "external values cannot be kept in a datapool",
            ));
        }
        let external = External::decode(value).ok_or(Error::Unsupported(
            "an external store's value must be an External's 12-byte encoding",
        ))?;
        let max = self.max_external_weight();
        if external.weight as usize > max {
            return Err(Error::ValueTooLarge {
                len: external.weight as usize,
                max,
            });
        }
        if self.eviction == crate::Eviction::None {
            // Nothing can be evicted to make room: the weight must fit in
            // free segments now (an overwritten value's weight is not
            // counted back: refusing early changes nothing).
            let seg = self.segs.segment_size() as u64;
            let held = self.segs.withheld_count() as u64 + self.segs.free_count() as u64;
            if self.externals.bytes + external.weight as u64 > held.saturating_sub(1) * seg {
                return Err(Error::OutOfMemory);
            }
        }
        Ok(external)
    }

    /// The heaviest external value the cache takes: half its heap.
    pub fn max_external_weight(&self) -> usize {
        (self.segs.heap_bytes() / 2).min(u32::MAX as usize)
    }

    /// Counts a newly linked external value (its item at `loc`).
    pub(crate) fn count_external(&mut self, loc: Location) {
        let raw = self.segs.item(loc);
        debug_assert!(raw.is_external());
        let weight = External::decode(raw.value()).map_or(0, |e| e.weight);
        self.externals.items += 1;
        self.externals.bytes += weight as u64;
    }

    /// Releases the external value of the item at `loc`, which the table
    /// has just stopped pointing at.
    #[cold]
    #[inline(never)]
    pub(crate) fn release_external(&mut self, loc: Location) {
        let value = self.segs.item(loc).value();
        self.externals.release(value);
    }

    /// Segments the heap must hold back for the external bytes held:
    /// their weight in whole segments, at most all but
    /// [`MIN_SEGMENTS`](crate::MIN_SEGMENTS) (the rest of the weight is
    /// made to fit by evicting).
    pub(crate) fn withheld_wanted(&self) -> usize {
        let seg = self.segs.segment_size() as u64;
        let wanted = self.externals.bytes.div_ceil(seg) as usize;
        wanted.min(self.segs.count().saturating_sub(crate::MIN_SEGMENTS))
    }

    /// True while the external bytes fit the withheld segments.
    #[inline(always)]
    pub(crate) fn externals_fit(&self) -> bool {
        self.externals.bytes <= (self.segs.withheld_count() * self.segs.segment_size()) as u64
    }

    /// Brings the withheld segments to what the external bytes need:
    /// returns surplus ones to the free list, and holds back more, freeing
    /// segments by expiry or eviction where none is free. Evicting
    /// releases external values too, so it stops as soon as the rest fits.
    /// If nothing can be freed (no eviction policy), the heap stays over
    /// by what could not be withheld, until items leave.
    pub(crate) fn fit_externals(&mut self) {
        let now = self.clock_now();
        // Each round withholds a segment, or runs an eviction step (which
        // frees a segment, or moves small segments to main, at most once
        // per segment before one frees).
        for _ in 0..4 * self.segs.count() + 8 {
            let wanted = self.withheld_wanted();
            if self.segs.withheld_count() > wanted {
                while self.segs.withheld_count() > wanted && self.segs.unwithhold() {}
            }
            if self.externals_fit() {
                break;
            }
            if self.segs.withheld_count() < wanted && self.segs.withhold() {
                continue;
            }
            if self.expire_at(now).segments == 0 && self.evict(now).is_err() {
                break;
            }
        }
        self.pools_share_usable_heap();
    }

    /// Tells merge eviction's pools how much heap they share: the heap
    /// less its withheld segments.
    pub(crate) fn pools_share_usable_heap(&mut self) {
        let withheld = self.segs.withheld_count() * self.segs.segment_size();
        self.admission
            .set_heap_bytes(self.segs.heap_bytes() - withheld);
    }

    /// Releases every external value still linked (the table is about to
    /// be emptied, or the cache dropped).
    pub(crate) fn release_all_externals(&mut self) {
        if self.externals.items == 0 {
            return;
        }
        let Segcache {
            table,
            segs,
            externals,
            ..
        } = self;
        table.for_each_entry(|info| {
            let raw = segs.item(hashtable::location(info));
            if raw.is_external() {
                externals.release(raw.value());
            }
        });
        debug_assert_eq!(externals.items, 0);
    }
}

impl Drop for Segcache {
    fn drop(&mut self) {
        self.release_all_externals();
    }
}

#[cfg(test)]
mod tests {
    //! Every way an external value leaves the cache releases it exactly
    //! once, moves never do, and the heap gives up segments for the
    //! weight it holds.

    use super::*;
    use crate::ops::{DeleteOpts, GetOpts};
    use crate::{Eviction, ManualClock};
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};
    use std::time::Duration;

    thread_local! {
        /// What the release hook was given on this thread, in order.
        static RELEASED: RefCell<Vec<External>> = const { RefCell::new(Vec::new()) };
    }

    fn record(value: External) {
        RELEASED.with(|r| r.borrow_mut().push(value));
    }

    fn released() -> Vec<u64> {
        RELEASED.with(|r| r.borrow_mut().drain(..).map(|e| e.handle).collect())
    }

    fn ext(handle: u64, weight: u32) -> External {
        External { handle, weight }
    }

    fn cache(heap: usize, seg: usize, eviction: Eviction, clock: &ManualClock) -> Segcache {
        Segcache::builder()
            .heap_size(heap)
            .segment_size(seg)
            .eviction(eviction)
            .clock(clock.clone())
            .on_release(record)
            .build()
            .unwrap()
    }

    /// The handles of the external items the table points at, expired or
    /// not, with their weights.
    fn linked(c: &Segcache) -> HashMap<u64, u32> {
        let mut out = HashMap::new();
        c.table.for_each_entry(|info| {
            let raw = c.segs.item(hashtable::location(info));
            if raw.is_external() {
                let e = External::decode(raw.value()).unwrap();
                assert!(
                    out.insert(e.handle, e.weight).is_none(),
                    "a handle linked twice"
                );
            }
        });
        out
    }

    #[test]
    fn encoding_round_trips() {
        let e = ext(0xdead_beef_0123_4567, 0x89ab_cdef);
        assert_eq!(External::decode(&e.encode()), Some(e));
        assert_eq!(External::decode(&e.encode()[..11]), None);
    }

    #[test]
    fn every_exit_releases_once_and_moves_do_not() {
        let clock = ManualClock::new();
        let mut c = cache(1 << 20, 16 << 10, Eviction::Merge, &clock);
        released();
        c.set_external("a", ext(1, 100), 7, None).unwrap();
        let item = c.get("a").unwrap();
        assert_eq!((item.external(), item.flags()), (Some(ext(1, 100)), 7));
        assert_eq!(
            (c.stats().external_items, c.stats().external_bytes),
            (1, 100)
        );
        // Overwrite by another external value, then by bytes.
        c.set_external("a", ext(2, 50), 0, None).unwrap();
        assert_eq!(released(), [1]);
        c.set("a", "inline", 0, None).unwrap();
        assert_eq!(released(), [2]);
        assert_eq!(c.get("a").unwrap().external(), None);
        // Delete, both paths.
        c.set_external("b", ext(3, 10), 0, None).unwrap();
        assert!(c.delete("b"));
        c.set_external("b", ext(4, 10), 0, None).unwrap();
        c.delete_with("b", &DeleteOpts::default()).unwrap();
        assert_eq!(released(), [3, 4]);
        // Touches move the item (a new TTL bucket), invalidation rewrites
        // it: the handle stays, nothing is released.
        c.set_external("t", ext(5, 10), 0, Duration::from_secs(100))
            .unwrap();
        c.touch("t", Duration::from_secs(5000)).unwrap();
        c.touch("t", None).unwrap();
        let opts = GetOpts {
            touch: Some(Ttl::After(Duration::from_secs(30))),
            ..GetOpts::default()
        };
        c.read_reusing(b"t", crate::hashtable::hash_key(b"t"), &opts, &mut None)
            .unwrap()
            .unwrap();
        let stale = DeleteOpts {
            invalidate: true,
            ..DeleteOpts::default()
        };
        c.delete_with("t", &stale).unwrap();
        assert_eq!(released(), Vec::<u64>::new());
        assert_eq!(c.get("t").unwrap().external(), Some(ext(5, 10)));
        // Expiry: on a read, and by the walk.
        c.set_external("e1", ext(6, 10), 0, Duration::from_secs(10))
            .unwrap();
        c.set_external("e2", ext(7, 10), 0, Duration::from_secs(10))
            .unwrap();
        clock.advance(Duration::from_secs(31));
        assert!(c.get("e1").is_none());
        c.expire();
        let mut out = released();
        out.sort();
        assert_eq!(out, [5, 6, 7], "t expired too (30 s)");
        // A store whose TTL already passed keeps nothing, hands back at once.
        let encoded = ext(8, 1).encode();
        let store = crate::ops::Store {
            ttl: Ttl::Expired,
            external: true,
            ..crate::ops::Store::new(crate::StoreMode::Set, &b"x"[..], &encoded[..])
        };
        c.store(&store).unwrap();
        assert_eq!(released(), [8]);
        // Arithmetic and concatenation refuse an external value.
        c.set_external("n", ext(9, 10), 0, None).unwrap();
        assert_eq!(c.incr("n", 1), Err(Error::NotNumeric));
        assert!(matches!(c.append("n", "x"), Err(Error::Unsupported(_))));
        assert_eq!(c.get("n").unwrap().external(), Some(ext(9, 10)));
        // Clear, a delayed flush, and the cache dropped.
        c.clear();
        assert_eq!(released(), [9]);
        c.set_external("f", ext(10, 10), 0, None).unwrap();
        c.flush_after(Duration::from_secs(5));
        clock.advance(Duration::from_secs(6));
        assert!(c.get("f").is_none());
        assert_eq!(released(), [10]);
        c.set_external("d", ext(11, 10), 0, None).unwrap();
        assert_eq!(c.stats().external_bytes, 10);
        drop(c);
        assert_eq!(released(), [11]);
    }

    #[test]
    fn refusals_change_nothing_and_keep_ownership() {
        let clock = ManualClock::new();
        let mut plain = Segcache::builder().clock(clock.clone()).build().unwrap();
        assert!(matches!(
            plain.set_external("k", ext(1, 1), 0, None),
            Err(Error::Unsupported(_))
        ));
        let mut c = cache(1 << 20, 16 << 10, Eviction::Merge, &clock);
        c.set("k", "v", 0, None).unwrap();
        let max = c.max_external_weight();
        assert_eq!(max, 512 << 10);
        assert_eq!(
            c.set_external("k", ext(2, max as u32 + 1), 0, None),
            Err(Error::ValueTooLarge { len: max + 1, max })
        );
        let bad = crate::ops::Store {
            external: true,
            ..crate::ops::Store::new(crate::StoreMode::Set, &b"k"[..], &b"short"[..])
        };
        assert!(matches!(c.store(&bad), Err(Error::Unsupported(_))));
        assert_eq!(c.get("k").unwrap().value(), b"v");
        assert_eq!(released(), Vec::<u64>::new());
        let dir = tempfile::tempdir().unwrap();
        let mut pooled = Segcache::builder()
            .datapool(dir.path().join("pool"))
            .on_release(record)
            .build()
            .unwrap();
        assert!(matches!(
            pooled.set_external("k", ext(3, 1), 0, None),
            Err(Error::Unsupported(_))
        ));
        drop(pooled);
        assert_eq!(released(), Vec::<u64>::new());
    }

    /// Where the table points for `key`.
    fn place_of(c: &Segcache, key: &[u8]) -> Location {
        crate::cache::tests::entry_of(c, key).0
    }

    #[test]
    fn a_handle_over_a_handle_is_written_in_place_and_releases_the_old_one() {
        let clock = ManualClock::new();
        let mut c = cache(1 << 20, 16 << 10, Eviction::Merge, &clock);
        let used = |c: &Segcache| -> u32 { c.segs.headers.iter().map(|h| h.write_offset).sum() };
        c.set_external("k", ext(1, 100), 4, None).unwrap();
        released();
        let (at, before) = (place_of(&c, b"k"), used(&c));
        // Same key, same flags' size, no TTL: over the old handle, nothing
        // appended; the old handle released once, the new weight counted.
        c.set_external("k", ext(2, 300), 5, None).unwrap();
        assert_eq!(place_of(&c, b"k"), at, "written in place");
        assert_eq!(used(&c), before, "no log bytes taken");
        assert_eq!(released(), [1]);
        let item = c.get("k").unwrap();
        assert_eq!((item.external(), item.flags()), (Some(ext(2, 300)), 5));
        let stats = c.stats();
        assert_eq!((stats.external_items, stats.external_bytes), (1, 300));
        assert_eq!(stats.items, 1);
        // The same handle again (a shared object stored twice holds two
        // references): one is released, one stays linked.
        c.set_external("k", ext(2, 300), 5, None).unwrap();
        assert_eq!(released(), [2]);
        assert_eq!(linked(&c), HashMap::from([(2, 300)]));
        // Not in place: a TTL, a value in the heap over a handle (it must
        // release the handle), a handle over a value in the heap.
        c.set_external("k", ext(3, 10), 5, Duration::from_secs(60))
            .unwrap();
        assert_ne!(place_of(&c, b"k"), at);
        assert_eq!(released(), [2]);
        c.set_external("k", ext(4, 10), 5, None).unwrap();
        let at = place_of(&c, b"k");
        c.set("k", [7u8; External::ENCODED_LEN], 5, None).unwrap();
        assert_ne!(place_of(&c, b"k"), at);
        assert_eq!(released(), [3, 4]);
        assert_eq!(c.get("k").unwrap().external(), None);
        let at = place_of(&c, b"k");
        c.set_external("k", ext(5, 10), 5, None).unwrap();
        assert_ne!(place_of(&c, b"k"), at);
        assert_eq!(released(), Vec::<u64>::new());
        // A token out in the segment turns it off, as for values in the
        // heap; the handle is still released exactly once.
        let token = c.get("k").unwrap().cas();
        assert_ne!(token, 0);
        let at = place_of(&c, b"k");
        c.set_external("k", ext(6, 10), 5, None).unwrap();
        assert_ne!(place_of(&c, b"k"), at);
        assert_eq!(released(), [5]);
        assert_eq!(
            (c.stats().external_items, c.stats().external_bytes),
            (1, 10)
        );
        drop(c);
        assert_eq!(released(), [6]);
    }

    #[test]
    fn the_heap_withholds_segments_for_the_weight_and_takes_them_back() {
        let clock = ManualClock::new();
        let seg = 16 << 10;
        let mut c = cache(64 * seg, seg, Eviction::Merge, &clock);
        // 40 segments' worth of external weight in 1 KiB values.
        for i in 0..640u64 {
            c.set_external(format!("x{i}"), ext(i, 1024), 0, None)
                .unwrap();
        }
        let s = c.stats();
        assert_eq!(s.external_bytes, 640 * 1024);
        assert_eq!(s.segments_withheld, 40);
        assert!(s.segments_used + s.segments_free + s.segments_withheld == 64);
        // More than the heap can hold: older values are evicted (and
        // released) so that the heap in use plus the weight fits.
        for i in 640..2000u64 {
            c.set_external(format!("x{i}"), ext(i, 1024), 0, None)
                .unwrap();
            let s = c.stats();
            assert!(
                (s.segments_withheld * seg as u64) >= s.external_bytes,
                "{s:?}"
            );
        }
        let gone = released();
        assert!(gone.len() > 1000, "{}", gone.len());
        assert_eq!(
            linked(&c).len() + gone.len(),
            2000,
            "every handle is linked or released"
        );
        c.check_invariants();
        // Once the values are gone, inline writes that need the segments
        // take them back (and only then).
        for i in 0..2000u64 {
            c.delete(format!("x{i}"));
        }
        assert_eq!(c.stats().external_bytes, 0);
        let withheld = c.stats().segments_withheld;
        assert!(withheld > 0);
        for i in 0..6000u64 {
            c.set(format!("y{i}"), [7u8; 200], 0, None).unwrap();
        }
        let s = c.stats();
        assert_eq!(s.segments_withheld, 0, "{s:?}");
        assert!(s.segments_used > 60, "{s:?}");
        c.check_invariants();
        // A clear gives every withheld segment back at once.
        released();
        for i in 0..100u64 {
            c.set_external(format!("z{i}"), ext(10_000 + i, 4096), 0, None)
                .unwrap();
        }
        assert!(c.stats().segments_withheld >= 25);
        c.clear();
        let s = c.stats();
        assert_eq!((s.segments_withheld, s.segments_free), (0, 64), "{s:?}");
        assert_eq!(released().len(), 100);
        c.check_invariants();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn withheld_segments_give_their_pages_back() {
        let clock = ManualClock::new();
        let seg = 256 << 10;
        let mut c = cache(64 * seg, seg, Eviction::Merge, &clock);
        // Fill every segment with inline bytes: the whole heap resident.
        for i in 0..20_000u64 {
            c.set(format!("k{i}"), [1u8; 1000], 0, None).unwrap();
        }
        let resident = crate::memory::tests::resident_pages(c.segs.heap());
        assert!(resident * 4096 > 60 * seg, "{resident} pages");
        // Half the heap's weight in external values.
        for i in 0..32u64 {
            c.set_external(format!("x{i}"), ext(i, seg as u32), 0, None)
                .unwrap();
        }
        let s = c.stats();
        assert!(s.segments_withheld >= 32, "{s:?}");
        let resident = crate::memory::tests::resident_pages(c.segs.heap());
        assert!(
            resident * 4096 <= (64 - 31) * seg,
            "{resident} pages resident with {} segments withheld",
            s.segments_withheld
        );
    }

    /// One step of the property test.
    #[derive(Clone, Debug)]
    enum Op {
        SetExternal(u8, u32, u32),
        /// A store of an external value in another mode (the general
        /// path): add, replace, or a compare-and-swap on the current token.
        StoreExternal(u8, u32, u32, u8),
        Set(u8, usize, u32),
        Delete(u8),
        Invalidate(u8),
        Touch(u8, u32),
        GetTouch(u8, u32),
        Get(u8),
        Incr(u8),
        Advance(u32),
        Expire,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u8..40;
        let ttl = prop_oneof![Just(0u32), 1u32..30, 30u32..3000];
        prop_oneof![
            6 => (k.clone(), prop_oneof![1u32..2000, 2000u32..40_000], ttl.clone())
                .prop_map(|(k, w, t)| Op::SetExternal(k, w, t)),
            2 => (k.clone(), 1u32..20_000, ttl.clone(), 0u8..3)
                .prop_map(|(k, w, t, m)| Op::StoreExternal(k, w, t, m)),
            4 => (k.clone(), 0usize..3000, ttl.clone()).prop_map(|(k, n, t)| Op::Set(k, n, t)),
            2 => k.clone().prop_map(Op::Delete),
            1 => k.clone().prop_map(Op::Invalidate),
            2 => (k.clone(), ttl.clone()).prop_map(|(k, t)| Op::Touch(k, t)),
            1 => (k.clone(), ttl).prop_map(|(k, t)| Op::GetTouch(k, t)),
            3 => k.clone().prop_map(Op::Get),
            1 => k.prop_map(Op::Incr),
            2 => (0u32..50).prop_map(Op::Advance),
            1 => Just(Op::Expire),
            1 => Just(Op::Clear).prop_filter("rare", |_| true),
        ]
    }

    fn secs(t: u32) -> Ttl {
        if t == 0 {
            Ttl::Never
        } else {
            Ttl::After(Duration::from_secs(t as u64))
        }
    }

    fn run(ops: &[Op], eviction: Eviction) {
        let clock = ManualClock::new();
        let seg = 8 << 10;
        let mut c = cache(24 * seg, seg, eviction, &clock);
        released();
        let mut next = 0u64;
        let mut given: HashMap<u64, u32> = HashMap::new();
        let mut gone: HashSet<u64> = HashSet::new();
        for op in ops {
            let key = |k: &u8| format!("key{k}");
            let mut stored = None;
            match op {
                Op::SetExternal(k, w, t) => {
                    next += 1;
                    if c.set_external(key(k), ext(next, *w), 0, secs(*t)).is_ok() {
                        given.insert(next, *w);
                        stored = Some(next);
                    }
                }
                Op::StoreExternal(k, w, t, m) => {
                    next += 1;
                    let key = key(k);
                    let encoded = ext(next, *w).encode();
                    let cas = c.get(&key).map(|i| i.cas());
                    let mode = match m {
                        0 => crate::StoreMode::Add,
                        1 => crate::StoreMode::Replace,
                        _ => crate::StoreMode::Set,
                    };
                    let store = crate::ops::Store {
                        ttl: secs(*t),
                        cas: if *m == 2 { cas.or(Some(1)) } else { None },
                        external: true,
                        ..crate::ops::Store::new(mode, key.as_bytes(), &encoded[..])
                    };
                    if c.store(&store).is_ok() {
                        given.insert(next, *w);
                    }
                }
                Op::Set(k, n, t) => {
                    let _ = c.set(key(k), vec![3u8; *n], 0, secs(*t));
                }
                Op::Delete(k) => {
                    c.delete(key(k));
                }
                Op::Invalidate(k) => {
                    let opts = DeleteOpts {
                        invalidate: true,
                        ..DeleteOpts::default()
                    };
                    let _ = c.delete_with(key(k), &opts);
                }
                Op::Touch(k, t) => {
                    let _ = c.touch(key(k), secs(*t));
                }
                Op::GetTouch(k, t) => {
                    let opts = GetOpts {
                        touch: Some(secs(*t)),
                        ..GetOpts::default()
                    };
                    let k = key(k);
                    let hash = crate::hashtable::hash_key(k.as_bytes());
                    let _ = c.read_reusing(k.as_bytes(), hash, &opts, &mut None);
                }
                Op::Get(k) => {
                    if let Some(item) = c.get(key(k)) {
                        if let Some(e) = item.external() {
                            assert_eq!(given.get(&e.handle), Some(&e.weight));
                            assert!(!gone.contains(&e.handle), "a released handle read");
                        }
                    }
                }
                Op::Incr(k) => {
                    let _ = c.incr(key(k), 1);
                }
                Op::Advance(s) => clock.advance(Duration::from_secs(*s as u64)),
                Op::Expire => {
                    c.expire();
                }
                Op::Clear => c.clear(),
            }
            for h in released() {
                assert!(given.contains_key(&h), "released {h}, never stored");
                assert!(gone.insert(h), "released {h} twice");
            }
            let live = linked(&c);
            for (h, w) in &live {
                assert_eq!(given.get(h), Some(w));
                assert!(!gone.contains(h), "{h} linked after its release");
            }
            assert_eq!(live.len() + gone.len(), given.len(), "a handle leaked");
            let s = c.stats();
            assert_eq!(
                (s.external_items, s.external_bytes),
                (live.len() as u64, live.values().map(|&w| w as u64).sum())
            );
            if stored.is_some() && eviction != Eviction::None {
                assert!(
                    s.segments_withheld * seg as u64 >= s.external_bytes,
                    "the weight over the withheld segments: {s:?}"
                );
            }
        }
        c.check_invariants();
        drop(c);
        for h in released() {
            assert!(gone.insert(h), "released {h} twice");
        }
        assert_eq!(gone.len(), given.len(), "the drop released every handle");
    }

    proptest! {
        // 64 cases by default; PROPTEST_CASES overrides (3,000 passed).
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64),
            ..ProptestConfig::default()
        })]

        #[test]
        fn external_handles_are_released_exactly_once(
            ops in prop::collection::vec(op(), 1..300),
            policy in 0usize..Eviction::ALL.len(),
        ) {
            run(&ops, Eviction::ALL[policy]);
        }
    }
}

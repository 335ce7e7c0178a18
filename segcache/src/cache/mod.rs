//! [`Segcache`]: the operations, with memcache semantics, over the hash
//! table, segments and TTL buckets.
//!
//! Every write lands at a new location and the table is switched over
//! only once the item is complete, so a failed operation never loses or
//! corrupts the item it would replace. The operations are split by job:
//!
//! - this file: the cache's state, building and saving it, the lookups
//!   and unlinks every path shares, the request dispatch
//!   ([`Segcache::execute`]), iteration, [`Stats`] and the invariants;
//! - `read.rs`: the read path (look up, check the deadline, count the
//!   access);
//! - `write.rs`: the write path (reserve space in the tail segment of the
//!   item's TTL bucket, write the item, point the table at it) and the
//!   commands built on it (store modes, arithmetic, touch);
//! - `remove.rs`: delete, flush and proactive expiry;
//! - `view.rs`: [`Item`] and [`OwnedItem`], what reads hand out;
//! - `stats.rs`: [`Stats`] and [`Expired`], the counters as reported.
//!
//! Choosing what to evict lives in `eviction/`; none of these files
//! picks a victim.

mod read;
mod remove;
mod stats;
#[cfg(test)]
pub(crate) mod tests;
mod view;
mod write;

pub(crate) use stats::Counters;
pub use stats::{Expired, Stats};
use view::cas_token;
pub use view::{Item, OwnedItem};

use crate::admission::Admission;
use crate::builder::Eviction;
use crate::clock::Clock;
use crate::hashtable::{self, hash_key, HashTable, HomeProbe, Location, TableFull};
use crate::item::{self, Meta, MAX_KEY_LEN, MAX_VALUE_FIELD};
use crate::ops::{
    ArithOpts, DeleteOpts, Found, GetOpts, Listed, Request, Response, Store, StoreMode, Ttl, Walked,
};
use crate::persist;
use crate::segments::{SegState, SegmentHeader, Segments, NONE};
use crate::ttl::{self, TtlBuckets, NEVER};
use crate::{Builder, Error};
use std::time::Duration;

/// Hits on items without a deadline that share one reading of the clock
/// for their access stamps ([`Segcache::recent_now`]).
const RECENT_READS: u32 = 16;

/// A segment-structured cache. See the [crate documentation](crate).
///
/// Laid out as declared (`repr(C)`): the fields every operation writes
/// (the access-stamp countdown, the hit and miss counters, the live
/// bytes) come first, so that in a [`ShardedCache`](crate::ShardedCache)
/// shard they share the cache line of the shard's lock, and an operation
/// dirties one line of shard state, which two threads then pass between
/// them, instead of three.
#[repr(C)]
pub struct Segcache {
    /// Cache time as a hit last read it from the clock; up to
    /// [`RECENT_READS`] hits on items without a deadline reuse it for the
    /// access stamp instead of reading the clock (see `hit_probed`).
    recent: u32,
    /// Hits left before [`recent`](Self::recent) is read again.
    recent_left: u32,
    /// A delayed flush is pending or the table grows: reads take the
    /// general path ([`refresh_unsettled`](Self::refresh_unsettled) keeps
    /// it; one test on the read path instead of two).
    unsettled: bool,
    pub(crate) counters: Counters,
    /// A delayed flush: everything stored before this time goes.
    flush_at: Option<u32>,
    clock: Clock,
    pub(crate) table: HashTable,
    pub(crate) segs: Segments,
    pub(crate) ttl: TtlBuckets,
    pub(crate) eviction: Eviction,
    pub(crate) rng: u64,
    /// Scratch space for the live items of a merge chain.
    pub(crate) merge_scratch: Vec<crate::eviction::LiveItem>,
    /// Merge eviction's pools and ghosts.
    pub(crate) admission: Admission,
    /// Copy of a value being rewritten (append, touch...), reused.
    scratch: Vec<u8>,
    restore_outcome: RestoreOutcome,
    /// External values held and their release hook (`crate::external`).
    pub(crate) externals: crate::external::Externals,
}

/// What [`Builder::restore`](crate::Builder::restore) found at build time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// No restore was asked for: the cache started empty.
    NotRequested,
    /// The datapool and its metadata were whole and matched: every item
    /// came back (minus those that expired while the cache was down).
    Restored {
        /// Items served from the datapool.
        items: u64,
    },
    /// A restore was asked for but the cache started empty; `reason` says
    /// why (no metadata after a crash, changed settings, a checksum
    /// mismatch...). Nothing from the datapool is served.
    Fresh {
        /// Why the datapool's contents were not used.
        reason: String,
    },
}

impl std::fmt::Debug for Segcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segcache")
            .field("eviction", &self.eviction)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Whether the item at `at`, a location the table holds, has `key`; if
/// so, `size` gets its size, read from the header the compare just loaded
/// (the one-probe writes use it to account the bytes they unlink without
/// reading the item again).
#[inline(always)]
fn key_is_sized(segs: &Segments, at: Location, key: &[u8], size: &mut usize) -> bool {
    // SAFETY: `at` comes from the table, whose every location names a
    // whole item inside its segment.
    match unsafe { segs.size_if_key(at, key) } {
        Some(found) => {
            *size = found;
            true
        }
        None => false,
    }
}

/// Whether the item at `at`, a location the table holds, has `key`: the
/// key compare of every lookup.
#[inline(always)]
fn key_is(segs: &Segments, at: Location, key: &[u8]) -> bool {
    // SAFETY: as in `key_is_sized`.
    unsafe { segs.size_if_key(at, key) }.is_some()
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        Err(Error::EmptyKey)
    } else if key.len() > MAX_KEY_LEN {
        Err(Error::KeyTooLong { len: key.len() })
    } else {
        Ok(())
    }
}

/// The key a request is about (`None` for whole-cache requests).
#[inline]
pub(crate) fn request_key<B: AsRef<[u8]>>(request: &Request<B>) -> Option<&[u8]> {
    match request {
        Request::Get { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key.as_ref()),
        Request::Store(store) => Some(store.key.as_ref()),
        Request::Flush { .. }
        | Request::Expire
        | Request::Clear
        | Request::Stats
        | Request::Len
        | Request::Walk { .. } => None,
    }
}

/// TTL seconds as the write path takes them: `Some(0)` never, `None`
/// already expired.
#[inline]
fn live_secs(ttl: Ttl) -> Result<Option<u32>, Error> {
    Ok(match ttl.to_secs()? {
        None => Some(0),
        Some(0) => None,
        Some(s) => Some(s),
    })
}

impl Segcache {
    /// Starts configuring a cache.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// An empty cache over `segs` (all free) and an empty `table`.
    pub(crate) fn new(segs: Segments, table: HashTable, eviction: Eviction, clock: Clock) -> Self {
        Self::assemble(
            segs,
            table,
            TtlBuckets::new(),
            Counters::default(),
            eviction,
            clock,
            RestoreOutcome::NotRequested,
        )
    }

    pub(crate) fn assemble(
        segs: Segments,
        table: HashTable,
        ttl: TtlBuckets,
        counters: Counters,
        eviction: Eviction,
        clock: Clock,
        restore_outcome: RestoreOutcome,
    ) -> Self {
        let segments = segs.count();
        let heap_bytes = segs.heap_bytes();
        let segment_size = segs.segment_size();
        Segcache {
            table,
            segs,
            ttl,
            eviction,
            counters,
            rng: 0x2545_f491_4f6c_dd1d,
            merge_scratch: match eviction {
                Eviction::Merge => {
                    Vec::with_capacity(crate::eviction::scratch_items(segments, segment_size))
                }
                _ => Vec::new(),
            },
            admission: Admission::new(segments, heap_bytes),
            clock,
            flush_at: None,
            recent: 0,
            recent_left: 0,
            unsettled: false,
            scratch: Vec::new(),
            restore_outcome,
            externals: Default::default(),
        }
    }

    /// True while a delayed flush waits: the direct write paths then take
    /// the general one, which carries it out when due.
    #[inline(always)]
    pub(crate) fn flush_pending(&self) -> bool {
        self.flush_at.is_some()
    }

    /// The cache's clock now (no delayed flush carried out).
    #[inline]
    pub(crate) fn clock_now(&self) -> u32 {
        self.clock.now()
    }

    pub(crate) fn set_restore_outcome(&mut self, outcome: RestoreOutcome) {
        self.restore_outcome = outcome;
    }

    /// True when the heap lives in a datapool file.
    pub fn has_datapool(&self) -> bool {
        self.segs.heap().path().is_some()
    }

    /// What happened to the datapool's contents when the cache was built.
    pub fn restore_outcome(&self) -> &RestoreOutcome {
        &self.restore_outcome
    }

    /// Shuts the cache down gracefully for a warm restart: flushes the
    /// file-backed heap and writes the metadata snapshot beside it
    /// (`<datapool>.meta`). Taking `self` guarantees nothing changes after
    /// the snapshot. A delayed flush that is not yet due is dropped.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let pool = dir.path().join("cache.pool");
    /// let build = || {
    ///     segcache::Segcache::builder()
    ///         .heap_size(8 << 20)
    ///         .datapool(&pool)
    ///         .restore(true)
    ///         .build()
    /// };
    /// let mut cache = build()?;
    /// cache.set(b"k", b"survives", 0, None)?;
    /// cache.save()?;
    ///
    /// let mut cache = build()?;
    /// assert_eq!(cache.restore_outcome(), &segcache::RestoreOutcome::Restored { items: 1 });
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"survives");
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn save(mut self) -> Result<(), Error> {
        let now = self.now();
        // The snapshot holds one table: finish a growth in progress.
        self.grow_step(usize::MAX / 2);
        let Some(path) = self.segs.heap().path().map(|p| p.to_path_buf()) else {
            return Err(Error::Persistence(
                "no datapool: the heap is not in a file".into(),
            ));
        };
        let parts = persist::SaveParts {
            settings: persist::Settings {
                segment_size: self.segs.segment_size() as u64,
                segments: self.segs.count() as u64,
            },
            segs: &self.segs,
            ttl: &self.ttl.buckets[..],
            table: &self.table,
            counters: &self.counters,
            now,
            wall: self.clock.wall(),
        };
        persist::save(&path, parts)
            .map_err(|e| Error::Persistence(format!("saving {}: {e}", path.display())))
    }

    /// The current time, after carrying out a delayed flush that is due.
    #[inline]
    fn now(&mut self) -> u32 {
        let now = self.clock.now();
        if let Some(at) = self.flush_at {
            if now >= at {
                self.flush_at = None;
                self.clear();
            }
        }
        now
    }

    /// Finds a live item (bucket, slot, location) by its key and the key's
    /// hash: present in the table and not expired. An expired item found
    /// here is unlinked on the spot; a step of a growing table is drained
    /// first.
    #[inline]
    fn lookup_live(&mut self, key: &[u8], hash: u64, now: u32) -> Option<(usize, usize, Location)> {
        let (bucket, slot, loc) = self.find_hashed(key, hash)?;
        self.live_or_unlink(hash, loc, now)
            .then_some((bucket, slot, loc))
    }

    /// The key's entry (bucket, slot, location), expired or not; drains a
    /// step of a growing table first.
    #[inline]
    fn find_hashed(&mut self, key: &[u8], hash: u64) -> Option<(usize, usize, Location)> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return None;
        }
        if self.table.is_growing() {
            self.grow_step(hashtable::GROW_STEP_READ);
        }
        let segs = &self.segs;
        let (bucket, slot, info) = self.table.lookup(hash, |at| key_is(segs, at, key))?;
        Some((bucket, slot, hashtable::location(info)))
    }

    /// True if the item at `loc` is live at `now`; an expired one is
    /// unlinked on the spot.
    #[inline]
    fn live_or_unlink(&mut self, hash: u64, loc: Location, now: u32) -> bool {
        if self.segs.expired(loc, now) {
            self.table.remove_at(hash, loc);
            self.account_unlinked(loc);
            self.counters.expirations += 1;
            return false;
        }
        true
    }

    /// The CAS token of the item at `loc` (see [`Item::cas`]). Always
    /// inlined: a store's reply carries it, and out of line in a server
    /// build it cost ~85 instructions per request.
    #[inline(always)]
    fn cas_at(&self, loc: Location) -> u64 {
        cas_token(self.segs.item(loc), &self.segs, loc)
    }

    /// The item at `loc`, read at `now`.
    #[inline]
    fn item_view(&self, loc: Location, now: u32) -> Item<'_> {
        Item::new(self.segs.item(loc), &self.segs, loc, now)
    }

    /// Remaining TTL in seconds of the item at `loc` (0: no expiry).
    fn remaining_ttl(&self, loc: Location, now: u32) -> u32 {
        match self.segs.deadline(loc) {
            0 => 0,
            at => at.saturating_sub(now).max(1),
        }
    }

    /// Sets meta-protocol marks on the item at `loc`, in place; writes
    /// only if one is missing, so repeated reads do not dirty the line.
    #[inline]
    fn mark(&mut self, loc: Location, bits: u8) {
        self.segs.mark(loc, bits);
    }

    /// Unlinks the live item at `loc` whose entry a lookup just found at
    /// (`bucket`, `slot`), with the table unchanged since: the entry is
    /// cleared where it is, without searching for it again.
    fn unlink_found(&mut self, bucket: usize, slot: usize, loc: Location) {
        let info = self.table.clear_at(bucket, slot);
        debug_assert_eq!(hashtable::location(info), loc, "the entry moved");
        self.account_unlinked(loc);
    }

    /// Unlinks the live item at `loc` (the current item of the key whose
    /// hash is `hash`).
    fn unlink_item(&mut self, hash: u64, loc: Location) {
        if self.table.remove_at(hash, loc).is_some() {
            self.account_unlinked(loc);
        }
    }

    /// The home's first entry whose tag and check bits match `hash`, if
    /// its item's key is `key`: its slot, the entry and the item's size
    /// (the likeliest entry, compared inline by set and delete before
    /// any call to the table's search).
    #[inline(always)]
    fn first_match(
        &self,
        key: &[u8],
        hash: u64,
    ) -> Option<(hashtable::FirstCandidate, u64, usize)> {
        let (at, info) = self.table.first_candidate(hash)?;
        // SAFETY: `info` is an entry of the table, whose every location
        // names a whole item inside its segment.
        let size = unsafe { self.segs.size_if_key(hashtable::location(info), key) }?;
        Some((at, info, size))
    }

    /// Runs one [`Request`] as one step and answers it: the seam every
    /// other way in (storage thread, [`ShardedCache`](crate::ShardedCache),
    /// server, bindings) goes through.
    pub fn execute<B: AsRef<[u8]>>(&mut self, request: &Request<B>) -> Response {
        let hash = request_key(request).map_or(0, hash_key);
        self.execute_hashed(request, hash)
    }

    /// A [`Request::Store`]'s step, as [`execute`](Self::execute) runs it
    /// (the key's hash already computed): a plain set takes `set`'s short
    /// path (the same checks, errors and effects; no CAS token asked
    /// for), any other store the general one.
    #[inline(always)]
    pub(crate) fn run_store<B: AsRef<[u8]>>(
        &mut self,
        store: &Store<B>,
        hash: u64,
    ) -> Result<u64, Error> {
        if store.is_plain_set() {
            let (key, value) = (store.key.as_ref(), store.value.as_ref());
            self.set_hashed(key, hash, value, store.flags, store.ttl)
                .map(|()| 0)
        } else {
            self.store_hashed(store, hash)
        }
    }

    /// [`execute`](Self::execute) with the request key's hash already
    /// computed (anything for a request without a key).
    pub(crate) fn execute_hashed<B: AsRef<[u8]>>(
        &mut self,
        request: &Request<B>,
        hash: u64,
    ) -> Response {
        match request {
            // The short read (a `Batch`'s too): the same answer, marks and
            // counters as the general one, checked by the batch test
            // `plain_reads_in_a_batch_match_direct_execution`.
            Request::Get { key, opts } if *opts == GetOpts::default() => {
                let found = self.read_plain(key.as_ref(), hash);
                Response::Get(Ok(
                    found.map(|(view, marks)| Found::plain(view.copy_out(false), marks))
                ))
            }
            Request::Get { key, opts } => {
                Response::Get(self.read_reusing(key.as_ref(), hash, opts, &mut None))
            }
            Request::Store(store) => Response::Stored(self.run_store(store, hash)),
            Request::Delete { key, opts } => {
                Response::Deleted(self.delete_hashed(key.as_ref(), hash, opts))
            }
            Request::Arith { key, opts } => {
                Response::Number(self.arith_hashed(key.as_ref(), hash, opts))
            }
            Request::Touch { key, ttl } => {
                Response::Touched(self.touch_hashed(key.as_ref(), hash, *ttl))
            }
            Request::Flush { delay } => {
                if delay.is_zero() {
                    self.flush();
                } else {
                    self.flush_after(*delay);
                }
                Response::Done
            }
            Request::Expire => Response::Expired(self.expire()),
            Request::Clear => {
                self.clear();
                Response::Done
            }
            Request::Stats => Response::Stats(Box::new(self.stats())),
            Request::Len => Response::Len(self.len()),
            Request::Walk { segment } => Response::Walked(self.walk(*segment)),
        }
    }

    /// [`Request::Walk`]: the live items of segment `segment`.
    pub(crate) fn walk(&self, segment: u32) -> Walked {
        let now = self.clock.now();
        let segments = self.walk_segments(now);
        let items = self
            .segment_items(segment, segments, now)
            .map(|it| Listed {
                key: it.key().to_vec(),
                ttl: it.ttl(),
                cas: it.cas(),
                fetched: it.raw.marks() & item::FETCHED != 0,
                size: it.raw.size() as u32,
            })
            .collect();
        Walked { items, segments }
    }

    /// [`walk_segments`](Self::walk_segments) at the cache's present time.
    pub(crate) fn walk_segments_now(&self) -> u32 {
        self.walk_segments(self.clock.now())
    }

    /// How many segments a walk visits: none after a flush that has taken
    /// effect (nothing stored before it is live).
    fn walk_segments(&self, now: u32) -> u32 {
        let flushed = self.flush_at.is_some_and(|at| now >= at);
        if flushed {
            0
        } else {
            self.segs.count() as u32
        }
    }

    /// The live items of segment `id` (none if `id` is not below
    /// `segments`, from [`walk_segments`](Self::walk_segments)).
    fn segment_items(&self, id: u32, segments: u32, now: u32) -> impl Iterator<Item = Item<'_>> {
        let walked = id < segments && {
            let h = &self.segs.headers[id as usize];
            h.state != SegState::Free && h.live_items > 0 && (h.is_split() || !h.is_expired(now))
        };
        walked
            .then(|| self.segs.item_offsets(id))
            .into_iter()
            .flatten()
            .filter_map(move |(offset, raw)| {
                let loc = Location { seg: id, offset };
                if self.segs.expired(loc, now) {
                    return None;
                }
                let hash = self.table.hash(raw.key());
                self.table.locate(hash, loc)?;
                Some(self.item_view(loc, now))
            })
    }

    /// Every live item, segment by segment (no particular order; counts
    /// nothing). Items expired but not yet reclaimed are skipped.
    ///
    /// ```
    /// let mut cache = segcache::Segcache::builder().build()?;
    /// cache.set("a", "1", 0, None)?;
    /// cache.set("b", "2", 0, None)?;
    /// cache.set("a", "3", 0, None)?;
    /// let mut seen: Vec<_> = cache.iter().map(|i| (i.key().to_vec(), i.value().to_vec())).collect();
    /// seen.sort();
    /// assert_eq!(seen, [(b"a".to_vec(), b"3".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = Item<'_>> + '_ {
        let now = self.clock.now();
        let segments = self.walk_segments(now);
        (0..segments).flat_map(move |id| self.segment_items(id, segments, now))
    }

    /// Number of items held (including expired ones not yet reclaimed).
    pub fn len(&self) -> usize {
        self.counters.items as usize
    }

    /// True when no item is held.
    pub fn is_empty(&self) -> bool {
        self.counters.items == 0
    }

    /// Counters and memory use.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let heap = self.segs.heap_bytes() as u64;
        let table = self.table.bytes() as u64;
        let headers = (self.segs.header_bytes() + std::mem::size_of_val(&*self.ttl.buckets)) as u64;
        let free = self.segs.free_count() as u64;
        let admission = (self.admission.bytes()
            + self.merge_scratch.capacity() * std::mem::size_of::<crate::eviction::LiveItem>())
            as u64;
        Stats {
            items: c.items,
            live_bytes: c.live_bytes,
            segments_used: self.segs.count() as u64 - free - self.segs.withheld_count() as u64,
            segments_free: free,
            hits: c.hits,
            misses: c.misses,
            evictions: c.evictions,
            evicted_segments: c.evicted_segments,
            expirations: c.expirations,
            expired_segments: c.expired_segments,
            merges: c.merges,
            heap_bytes: heap,
            hash_table_bytes: table,
            segment_header_bytes: headers,
            admission_bytes: admission,
            total_bytes: heap + table + headers + admission,
            external_items: self.externals.items,
            external_bytes: self.externals.bytes,
            segments_withheld: self.segs.withheld_count() as u64,
        }
    }

    /// The largest value storable under a key of `key_len` bytes without
    /// client flags (with them, [`crate::max_value_len`]).
    pub fn max_value_len(&self, key_len: usize) -> usize {
        item::max_value_len(self.segs.segment_size(), key_len, 0)
    }

    /// Drains `homes` homes of a table being grown into its successor,
    /// counting the (rare) items dropped because their new window was full
    /// as evictions.
    fn grow_step(&mut self, homes: usize) {
        let segs = &self.segs;
        self.table
            .grow_step(homes, |at| hash_key(segs.item(at).key()));
        while let Some(info) = self.table.take_dropped() {
            self.account_unlinked(hashtable::location(info));
            self.counters.evictions += 1;
        }
        self.refresh_unsettled();
    }

    /// Sets [`unsettled`](Self::unsettled) from what it sums up: called
    /// wherever a delayed flush is set, by [`clear`](Self::clear) (which
    /// every flush carried out ends with), and after every drain step
    /// (after the one insert that can start a growth, and where a growth
    /// ends).
    #[inline]
    pub(crate) fn refresh_unsettled(&mut self) {
        self.unsettled = self.flush_at.is_some() || self.table.is_growing();
    }

    /// Updates segment and cache counters for an item the table no longer
    /// points at.
    #[inline]
    pub(crate) fn account_unlinked(&mut self, loc: Location) {
        let raw = self.segs.item(loc);
        let size = raw.size();
        if raw.is_external() {
            self.release_external(loc);
        }
        self.segs.headers[loc.seg as usize].uncount_item(size);
        self.counters.items -= 1;
        self.counters.live_bytes -= size as u64;
    }

    /// Unlinks every live item of a segment from the table; returns how
    /// many. `remember`: the expiry walk's ghosts (see `unlink_between`).
    pub(crate) fn unlink_segment(&mut self, id: u32, remember: bool) -> usize {
        let written = self.segs.headers[id as usize].write_offset;
        let unlinked = self.unlink_between(id, 0, written, remember);
        debug_assert_eq!(self.segs.headers[id as usize].live_items, 0);
        unlinked
    }

    /// Takes an emptied segment out of its TTL bucket and frees it.
    pub(crate) fn retire_segment(&mut self, id: u32) {
        self.admission.on_release(id);
        self.ttl.remove(&mut self.segs.headers, id);
        self.segs.release(id);
    }

    /// Checks internal invariants (tests and the fuzzer only): counters
    /// agree with the segments, the table and the TTL lists.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn check_invariants(&mut self) {
        let mut items = 0u64;
        let mut bytes = 0u64;
        let mut linked = 0usize;
        for bucket in 0..ttl::BUCKETS {
            let mut at = self.ttl.buckets[bucket].head;
            let mut n = 0;
            while at != NONE {
                let h = &self.segs.headers[at as usize];
                assert_eq!(h.ttl_bucket as usize, bucket);
                assert_ne!(h.state, SegState::Free);
                n += 1;
                at = h.next;
            }
            assert_eq!(n, self.ttl.buckets[bucket].segments);
            linked += n as usize;
        }
        assert_eq!(
            linked + self.segs.free_count() + self.segs.withheld_count(),
            self.segs.count()
        );
        for id in 0..self.segs.count() as u32 {
            let h = &self.segs.headers[id as usize];
            assert!(h.write_offset as usize <= self.segs.segment_size());
            if h.state != SegState::Free && h.expire_at != 0 {
                let spread = ttl::spread(h.ttl_bucket as usize);
                let windows = self.segs.windows(id);
                for w in windows.as_slice().iter().filter(|w| !w.is_reaped()) {
                    assert!(
                        w.last - w.at <= spread,
                        "segment {id}: deadlines {}..{} spread past {spread}",
                        w.at,
                        w.last
                    );
                }
                assert_eq!(
                    windows.bounds(),
                    (h.expire_at, h.expire_last),
                    "segment {id}"
                );
                if h.is_split() {
                    assert_eq!(h.state, SegState::Sealed, "segment {id}: only merges split");
                    let ends: Vec<u32> = windows.as_slice().iter().map(|w| w.end).collect();
                    assert!(
                        ends.windows(2).all(|p| p[0] < p[1]),
                        "segment {id}: {ends:?}"
                    );
                    assert_eq!(ends.last(), Some(&h.write_offset), "segment {id}");
                    assert!(
                        h.write_offset as usize + Segments::window_room(ends.len())
                            <= self.segs.segment_size(),
                        "segment {id}: items over its windows"
                    );
                }
            }
            if h.state == SegState::Free {
                assert_eq!((h.live_items, h.live_bytes), (0, 0));
                continue;
            }
            let (mut live, mut live_bytes) = (0u32, 0u32);
            for (offset, item) in self.segs.item_offsets(id) {
                let hash = self.table.hash(item.key());
                if self
                    .table
                    .info_at(hash, Location { seg: id, offset })
                    .is_some()
                {
                    assert!(
                        !item.is_unlinked(),
                        "segment {id}: a linked item marked unlinked"
                    );
                    let at = self.segs.windows(id).window_at(offset);
                    assert!(
                        !at.is_reaped(),
                        "segment {id}: a linked item in a reaped window"
                    );
                    live += 1;
                    live_bytes += item.size() as u32;
                }
            }
            assert_eq!(
                (live, live_bytes),
                (h.live_items, h.live_bytes),
                "segment {id}: {h:?} {:?}",
                self.segs.windows(id)
            );
            items += live as u64;
            bytes += live_bytes as u64;
        }
        assert_eq!(items, self.counters.items);
        assert_eq!(bytes, self.counters.live_bytes);
        assert_eq!(self.table.count_items() as u64, items);
    }
}

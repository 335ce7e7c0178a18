//! [`Segcache`]: the operations, with memcache semantics, over the hash
//! table, segments and TTL buckets.
//!
//! Owns the write path (reserve space in the tail segment of the item's TTL
//! bucket, write the item, point the hash table at it), the read path (look
//! up, check the segment's deadline, count the access), proactive expiry
//! and the counters behind [`Stats`]. Every write lands at a new location
//! and the table is switched over only once the item is complete, so a
//! failed operation never loses or corrupts the item it would replace.
//! Choosing what to evict lives in `eviction.rs`.

use crate::admission::Admission;
use crate::builder::Eviction;
use crate::clock::Clock;
use crate::hashtable::{self, hash_key, HashTable, HomeProbe, Location, TableFull};
use crate::item::{self, Meta, RawItem, MAX_KEY_LEN, MAX_VALUE_FIELD};
use crate::ops::{ArithOpts, DeleteOpts, Found, GetOpts, Request, Response, Store, StoreMode, Ttl};
use crate::persist;
use crate::segments::{SegState, SegmentHeader, Segments, NONE};
use crate::ttl::{self, TtlBuckets, NEVER};
use crate::{Builder, Error};
use std::time::Duration;

/// An item read from the cache, borrowed from its memory: no copy.
///
/// [`Segcache::get`] returns one; [`ShardedCache::read_with`](crate::ShardedCache::read_with)
/// lends one to a closure while the shard is locked. [`OwnedItem`] is the
/// copied form the other handles return.
///
/// Each accessor decodes its field from the item's bytes and its segment's
/// header when called, so a read pays only for what its caller looks at.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    raw: RawItem<'a>,
    /// The segments, for the item's header and deadline.
    segs: &'a Segments,
    loc: Location,
    /// Cache time of the read (for [`ttl`](Self::ttl)).
    now: u32,
}

impl<'a> Item<'a> {
    /// The item's key.
    #[inline]
    pub fn key(&self) -> &'a [u8] {
        self.raw.key()
    }

    /// The item's value, without a copy.
    #[inline]
    pub fn value(&self) -> &'a [u8] {
        self.raw.value()
    }

    /// Memcache client flags stored with the item (0 unless set).
    #[inline]
    pub fn flags(&self) -> u32 {
        self.raw.client_flags()
    }

    /// This version's compare-and-swap token: unique per item version,
    /// changed by every write to the key but kept by a touch (and, rarely,
    /// changed when eviction compacts the item's segment).
    #[inline]
    pub fn cas(&self) -> u64 {
        cas_token(
            self.raw,
            &self.segs.headers[self.loc.seg as usize],
            self.loc,
        )
    }

    /// Time left: [`Ttl::Never`] or [`Ttl::After`] (whole seconds).
    #[inline]
    pub fn ttl(&self) -> Ttl {
        match self.segs.deadline(self.loc) {
            0 => Ttl::Never,
            at => Ttl::After(Duration::from_secs(at.saturating_sub(self.now) as u64)),
        }
    }

    /// Copies the item out of the cache.
    pub fn to_owned(&self) -> OwnedItem {
        OwnedItem::from(*self)
    }
}

/// Makes `buf` a copy of `bytes`, in place when the lengths agree (a
/// reply buffer refilled with an item of the same size: no call to
/// `memcpy` for short keys and values).
#[inline(always)]
fn refill_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    if buf.len() == bytes.len() {
        item::copy_bytes(buf, bytes);
    } else {
        buf.clear();
        buf.extend_from_slice(bytes);
    }
}

/// An item copied out of the cache, for callers that cannot hold a borrow
/// (the storage thread's replies, [`ShardedCache::get`](crate::ShardedCache::get)).
/// Same accessors as [`Item`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedItem {
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    cas: u64,
    ttl: Ttl,
}

impl OwnedItem {
    /// Becomes a copy of `item`, in the buffers it already has.
    #[inline]
    fn refill(&mut self, item: Item<'_>) {
        refill_bytes(&mut self.key, item.key());
        refill_bytes(&mut self.value, item.value());
        (self.flags, self.cas, self.ttl) = (item.flags(), item.cas(), item.ttl());
    }

    /// The item's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The item's value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Takes the value out without copying it again.
    pub fn into_value(self) -> Vec<u8> {
        self.value
    }

    /// Memcache client flags.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The compare-and-swap token (see [`Item::cas`]).
    pub fn cas(&self) -> u64 {
        self.cas
    }

    /// Time left when the item was read.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }
}

impl std::fmt::Debug for Item<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Item")
            .field("key", &self.key())
            .field("value", &self.value())
            .field("flags", &self.flags())
            .field("cas", &self.cas())
            .field("ttl", &self.ttl())
            .finish()
    }
}

/// Items are equal when every accessor agrees.
impl PartialEq for Item<'_> {
    fn eq(&self, other: &Self) -> bool {
        (
            self.key(),
            self.value(),
            self.flags(),
            self.cas(),
            self.ttl(),
        ) == (
            other.key(),
            other.value(),
            other.flags(),
            other.cas(),
            other.ttl(),
        )
    }
}

impl Eq for Item<'_> {}

/// The CAS token of the item `raw` at `loc` in the segment with `header`:
/// the one it keeps, or one made of its segment's generation and its
/// location (`generation 23 | segment 20 | offset 21` bits), unique per
/// item version (across the shards of a sharded cache too: each shard's
/// generations are its own residue modulo the shard count).
#[inline]
fn cas_token(raw: RawItem<'_>, header: &SegmentHeader, loc: Location) -> u64 {
    if let Some(kept) = raw.kept_cas() {
        return kept;
    }
    ((header.generation as u64 & 0x7f_ffff) << 41) | ((loc.seg as u64) << 21) | loc.offset as u64
}

impl From<Item<'_>> for OwnedItem {
    fn from(item: Item<'_>) -> Self {
        OwnedItem {
            key: item.key().to_vec(),
            value: item.value().to_vec(),
            flags: item.flags(),
            cas: item.cas(),
            ttl: item.ttl(),
        }
    }
}

/// What one call to [`Segcache::expire`] freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Segments freed.
    pub segments: usize,
    /// Items those segments still held.
    pub items: usize,
}

impl std::ops::AddAssign for Expired {
    fn add_assign(&mut self, other: Expired) {
        self.segments += other.segments;
        self.items += other.items;
    }
}

/// A snapshot of the cache's counters and memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Items the hash table points at (some may be expired but not yet
    /// reclaimed).
    pub items: u64,
    /// Bytes those items occupy in segments (headers and padding included).
    pub live_bytes: u64,
    /// Segments holding items (or taking writes).
    pub segments_used: u64,
    /// Segments on the free list.
    pub segments_free: u64,
    /// Reads that found a live item.
    pub hits: u64,
    /// Reads that found nothing.
    pub misses: u64,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Segments emptied to make room (by eviction or a merge).
    pub evicted_segments: u64,
    /// Items removed because their TTL passed (proactively or on access).
    pub expirations: u64,
    /// Whole segments freed because their deadline passed.
    pub expired_segments: u64,
    /// Merge-eviction passes.
    pub merges: u64,
    /// Bytes of segment storage (the bounded heap).
    pub heap_bytes: u64,
    /// Bytes of the hash table.
    pub hash_table_bytes: u64,
    /// Bytes of segment headers and TTL bucket lists.
    pub segment_header_bytes: u64,
    /// Merge eviction's admission state: ghost fingerprints of keys
    /// recently evicted unread and one pool flag per segment, plus its
    /// merge scratch (the live items of one merge run; allocated when the
    /// cache is built, never grown).
    pub admission_bytes: u64,
    /// Everything above together: all the memory the cache allocated.
    pub total_bytes: u64,
}

impl std::ops::AddAssign<&Stats> for Stats {
    /// Sums two snapshots (the shards of a sharded cache).
    fn add_assign(&mut self, o: &Stats) {
        self.items += o.items;
        self.live_bytes += o.live_bytes;
        self.segments_used += o.segments_used;
        self.segments_free += o.segments_free;
        self.hits += o.hits;
        self.misses += o.misses;
        self.evictions += o.evictions;
        self.evicted_segments += o.evicted_segments;
        self.expirations += o.expirations;
        self.expired_segments += o.expired_segments;
        self.merges += o.merges;
        self.heap_bytes += o.heap_bytes;
        self.hash_table_bytes += o.hash_table_bytes;
        self.segment_header_bytes += o.segment_header_bytes;
        self.admission_bytes += o.admission_bytes;
        self.total_bytes += o.total_bytes;
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub items: u64,
    pub live_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Segments emptied to make room (by eviction or a merge).
    pub evicted_segments: u64,
    pub expirations: u64,
    /// Whole segments freed because their deadline passed.
    pub expired_segments: u64,
    pub merges: u64,
}

/// Hits on items without a deadline that share one reading of the clock
/// for their access stamps ([`Segcache::recent_now`]).
const RECENT_READS: u32 = 16;

/// A segment-structured cache. See the [crate documentation](crate).
pub struct Segcache {
    pub(crate) table: HashTable,
    pub(crate) segs: Segments,
    pub(crate) ttl: TtlBuckets,
    pub(crate) eviction: Eviction,
    pub(crate) counters: Counters,
    pub(crate) rng: u64,
    /// Scratch space for the live items of a merge chain.
    pub(crate) merge_scratch: Vec<crate::eviction::LiveItem>,
    /// Merge eviction's pools and ghosts.
    pub(crate) admission: Admission,
    clock: Clock,
    /// A delayed flush: everything stored before this time goes.
    flush_at: Option<u32>,
    /// Cache time as a hit last read it from the clock; up to
    /// [`RECENT_READS`] hits on items without a deadline reuse it for the
    /// access stamp instead of reading the clock (see `hit_probed`).
    recent: u32,
    /// Hits left before [`recent`](Self::recent) is read again.
    recent_left: u32,
    /// Copy of a value being rewritten (append, touch...), reused.
    scratch: Vec<u8>,
    restore_outcome: RestoreOutcome,
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

/// Reads a stored number as memcached's incr/decr do (`strtoull` and its
/// checks): white space and one sign may lead, then digits; the byte after
/// them must be white space or the end (what follows is not read). A `-`
/// is taken only when the wrapped result is not negative as an `i64`, so
/// `-0` is 0 and `-1` is refused. Values over `u64::MAX` are refused.
pub(crate) fn parse_counter(bytes: &[u8]) -> Option<u64> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c');
    let start = bytes.iter().position(|b| !is_space(b))?;
    let (negative, rest) = match &bytes[start..] {
        [b'-', tail @ ..] => (true, tail),
        [b'+', tail @ ..] => (false, tail),
        rest => (false, rest),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|b| !is_space(b)) {
        return None;
    }
    let n = rest[..digits].iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add((d - b'0') as u64)
    })?;
    if negative {
        let wrapped = n.wrapping_neg();
        return ((wrapped as i64) >= 0).then_some(wrapped);
    }
    Some(n)
}

/// Writes `n` in decimal into the end of `buf`; returns the digits.
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
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
        | Request::Len => None,
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
            scratch: Vec::new(),
            restore_outcome,
        }
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

    /// The CAS token of the item at `loc` (see [`Item::cas`]).
    #[inline]
    fn cas_at(&self, loc: Location) -> u64 {
        cas_token(
            self.segs.item(loc),
            &self.segs.headers[loc.seg as usize],
            loc,
        )
    }

    /// The item at `loc`, read at `now`.
    #[inline]
    fn item_view(&self, loc: Location, now: u32) -> Item<'_> {
        Item {
            raw: self.segs.item(loc),
            segs: &self.segs,
            loc,
            now,
        }
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

    /// Looks a key up. Counts a hit or a miss and, on a hit, an access for
    /// eviction's frequency counter. Never returns an expired item.
    ///
    /// ```
    /// use segcache::Ttl;
    /// let mut cache = segcache::Segcache::builder().build().unwrap();
    /// cache.set("greeting", "hello", 42, None).unwrap();
    /// let item = cache.get("greeting").unwrap();
    /// assert_eq!((item.value(), item.flags(), item.ttl()), (&b"hello"[..], 42, Ttl::Never));
    /// assert!(cache.get("nobody").is_none());
    /// ```
    #[inline(always)]
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Option<Item<'_>> {
        let key = key.as_ref();
        self.get_hashed(key, hash_key(key))
    }

    /// [`get`](Self::get) with the key's hash already computed (by a
    /// sharded cache, which hashes once to pick the shard).
    #[inline(always)]
    pub(crate) fn get_hashed(&mut self, key: &[u8], hash: u64) -> Option<Item<'_>> {
        if self.read_is_unsettled() {
            return self.get_unsettled(key, hash);
        }
        let probe = self.table.probe_home(hash);
        if probe.proves_absent() {
            self.counters.misses += 1;
            return None;
        }
        self.get_found(key, hash, probe)
    }

    /// The rest of [`get_hashed`](Self::get_hashed), once the tags did not
    /// rule the key out (out of line, so a miss stays short); the home's
    /// control word is not read again.
    #[inline(never)]
    fn get_found(&mut self, key: &[u8], hash: u64, probe: HomeProbe) -> Option<Item<'_>> {
        let (loc, now) = self.hit_probed(key, hash, probe)?;
        // SAFETY: `hit_probed` found `loc` in the table (whose locations
        // name whole items) and changed no segment since (a hit only bumps
        // the table's counter; an expired item returned `None`).
        let (raw, segs) = unsafe { self.segs.fetch_compared(loc) };
        Some(Item {
            raw,
            segs,
            loc,
            now,
        })
    }

    /// [`get_hashed`](Self::get_hashed) while a delayed flush is pending or
    /// the table grows.
    #[cold]
    #[inline(never)]
    fn get_unsettled(&mut self, key: &[u8], hash: u64) -> Option<Item<'_>> {
        let (loc, now) = self.hit_slow(key, hash)?;
        let (raw, segs, _) = self.segs.fetch(loc);
        Some(Item {
            raw,
            segs,
            loc,
            now,
        })
    }

    /// True while a read must take the general path: a delayed flush is
    /// pending (it runs first) or the table grows (a drain step is taken,
    /// and the key may be in either table).
    #[inline(always)]
    fn read_is_unsettled(&self) -> bool {
        self.flush_at.is_some() || self.table.is_growing()
    }

    /// Reads a key's value and client flags the cheapest way: lends them
    /// to `f` and returns its result, or `None` on a miss.
    ///
    /// Counts a hit or a miss and, on a hit, the access eviction's
    /// frequency counter needs, as [`get`](Self::get) does; unlike `get`
    /// it works out no CAS token and no TTL and sets no meta-protocol mark
    /// (a later memcache `mg ... h` does not see this read as a fetch).
    /// This is the read for bindings that only want the value.
    ///
    /// ```
    /// let mut cache = segcache::Segcache::builder().build()?;
    /// cache.set("k", "v", 7, None)?;
    /// assert_eq!(cache.get_value_with("k", |v, flags| (v.to_vec(), flags)), Some((b"v".to_vec(), 7)));
    /// assert_eq!(cache.get_value_with("absent", |v, _| v.len()), None);
    /// assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    /// # Ok::<(), segcache::Error>(())
    /// ```
    #[inline]
    pub fn get_value_with<R>(
        &mut self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Option<R> {
        let key = key.as_ref();
        self.get_value_hashed(key, hash_key(key), f)
    }

    /// [`get_value_with`](Self::get_value_with) with the key's hash
    /// already computed.
    #[inline]
    pub(crate) fn get_value_hashed<R>(
        &mut self,
        key: &[u8],
        hash: u64,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Option<R> {
        let loc = if self.read_is_unsettled() {
            self.hit_slow(key, hash)?.0
        } else {
            let probe = self.table.probe_home(hash);
            if probe.proves_absent() {
                self.counters.misses += 1;
                return None;
            }
            self.hit_probed(key, hash, probe)?.0
        };
        let raw = self.segs.item(loc);
        Some(f(raw.value(), raw.client_flags()))
    }

    /// A miss the table's tags prove with one load, counted: the fast
    /// exit of a read (not taken while a delayed flush is pending, which
    /// runs first, nor while the table grows).
    #[inline(always)]
    fn tags_say_miss(&mut self, hash: u64) -> bool {
        let absent = self.flush_at.is_none() && self.table.absent_by_tags(hash);
        self.counters.misses += absent as u64;
        absent
    }

    /// The counted part of every plain read: finds the key's live item,
    /// counts a hit (and the access, for eviction) or a miss, and returns
    /// the item's location and the time it was read at.
    ///
    /// The common case stays inline and short: no delayed flush pending,
    /// no table growing. A miss whose tags say no reads one control word
    /// and no clock; the clock is read once an entry is found.
    #[inline(always)]
    fn hit(&mut self, key: &[u8], hash: u64) -> Option<(Location, u32)> {
        if self.read_is_unsettled() {
            return self.hit_slow(key, hash);
        }
        let probe = self.table.probe_home(hash);
        self.hit_probed(key, hash, probe)
    }

    /// [`hit`](Self::hit) in a settled table (no flush pending, no growth)
    /// from a [`HashTable::probe_home`] of `hash`.
    #[inline(always)]
    fn hit_probed(&mut self, key: &[u8], hash: u64, probe: HomeProbe) -> Option<(Location, u32)> {
        debug_assert!(!self.read_is_unsettled());
        // An empty or over-long key matches no item (lengths are compared
        // first), so it needs no check of its own here.
        let segs = &self.segs;
        let Some((bucket, slot, info)) = self
            .table
            .lookup_probed(hash, probe, move |at| key_is(segs, at, key))
        else {
            self.counters.misses += 1;
            return None;
        };
        let loc = hashtable::location(info);
        // An item in a segment with a deadline is judged on a fresh
        // reading; one without needs the time only for the access stamp
        // (counted at most once per second), which tolerates a reading a
        // few hits old.
        // SAFETY: `loc` came from the table, which points only into
        // segments that exist.
        let expire_at = unsafe { self.segs.header_unchecked(loc.seg) }.expire_at;
        let now = if expire_at != 0 {
            let now = self.clock.now();
            if expire_at <= now && self.segs.expired(loc, now) {
                self.expired_on_read(hash, loc);
                return None;
            }
            now
        } else {
            self.recent_now()
        };
        self.counters.hits += 1;
        self.table.record_access_seen(bucket, slot, info, now);
        Some((loc, now))
    }

    /// Cache time for an access stamp: the system clock as read at most
    /// [`RECENT_READS`] hits ago (saves the clock read, ~30 instructions
    /// with the vDSO, on 15 hits of 16). A stale reading can only merge
    /// two reads of one item within those hits into one count, which the
    /// once-per-second rule does anyway at any rate above
    /// [`RECENT_READS`] hits per second; it never decides an expiry.
    #[inline(always)]
    fn recent_now(&mut self) -> u32 {
        if self.recent_left == 0 {
            return self.refresh_recent();
        }
        self.recent_left -= 1;
        self.recent
    }

    /// Reads the clock for [`recent_now`](Self::recent_now). A manual
    /// clock (tests, simulations) is read on every hit: its reading is a
    /// load, and its users count accesses second by second.
    #[inline(never)]
    fn refresh_recent(&mut self) -> u32 {
        self.recent = self.clock.now();
        self.recent_left = match self.clock {
            Clock::System { .. } => RECENT_READS - 1,
            Clock::Manual(_) => 0,
        };
        self.recent
    }

    /// A read that found the item at `loc` expired: unlinks it and counts
    /// the expiration and the miss.
    #[cold]
    #[inline(never)]
    fn expired_on_read(&mut self, hash: u64, loc: Location) {
        self.table.remove_at(hash, loc);
        self.account_unlinked(loc);
        self.counters.expirations += 1;
        self.counters.misses += 1;
    }

    /// [`hit`](Self::hit) while a delayed flush is pending or the table
    /// grows: the flush runs first, a drain step is taken, then the same
    /// lookup in whichever table holds the key.
    #[cold]
    #[inline(never)]
    fn hit_slow(&mut self, key: &[u8], hash: u64) -> Option<(Location, u32)> {
        // A miss needs no time: the clock is read once an entry is found,
        // unless a delayed flush is pending (then it goes first, as always).
        let pending = self.flush_at.is_some().then(|| self.now());
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            self.counters.misses += 1;
            return None;
        }
        if self.table.is_growing() {
            self.grow_step(hashtable::GROW_STEP_READ);
        }
        let segs = &self.segs;
        let Some((bucket, slot, info)) = self.table.lookup(hash, |at| key_is(segs, at, key)) else {
            self.counters.misses += 1;
            return None;
        };
        let loc = hashtable::location(info);
        let now = pending.unwrap_or_else(|| self.clock.now());
        if !self.live_or_unlink(hash, loc, now) {
            self.counters.misses += 1;
            return None;
        }
        self.counters.hits += 1;
        self.table.record_access_seen(bucket, slot, info, now);
        Some((loc, now))
    }

    /// Starts loading the hash-table lines a lookup of the key hashed to
    /// `hash` will read (the storage thread runs this a few requests ahead).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// Starts loading the item a lookup of the key hashed to `hash` will
    /// most likely compare, once the table lines [`prefetch`](Self::prefetch)
    /// asked for have arrived (the storage thread runs this a couple of
    /// requests ahead, after `prefetch` further ahead).
    #[inline]
    pub(crate) fn prefetch_item(&self, hash: u64) {
        if let Some(info) = self.table.home_candidate(hash) {
            self.segs.prefetch_item(hashtable::location(info));
        }
    }

    /// Looks a key up without counting a hit, a miss or an access.
    pub fn peek(&mut self, key: impl AsRef<[u8]>) -> Option<Item<'_>> {
        let key = key.as_ref();
        self.peek_hashed(key, hash_key(key))
    }

    /// [`peek`](Self::peek) with the key's hash already computed.
    pub(crate) fn peek_hashed(&mut self, key: &[u8], hash: u64) -> Option<Item<'_>> {
        let now = self.now();
        let (.., loc) = self.lookup_live(key, hash, now)?;
        Some(self.item_view(loc, now))
    }

    /// True if the key is present and not expired (counts nothing).
    pub fn contains(&mut self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        self.contains_hashed(key, hash_key(key))
    }

    /// [`contains`](Self::contains) with the key's hash already computed.
    pub(crate) fn contains_hashed(&mut self, key: &[u8], hash: u64) -> bool {
        let now = self.now();
        self.lookup_live(key, hash, now).is_some()
    }

    /// Returns the key's item, first storing `make()` under it with `ttl`
    /// if it is absent: the value is computed only on a miss. (From many
    /// threads, [`ShardedCache::get_or_insert_with`](crate::ShardedCache::get_or_insert_with)
    /// runs `make` once per key even when callers race.)
    ///
    /// ```
    /// let mut cache = segcache::Segcache::builder().build()?;
    /// let mut calls = 0;
    /// for _ in 0..3 {
    ///     let item = cache.get_or_insert_with("answer", None, || { calls += 1; "42" })?;
    ///     assert_eq!(item.value(), b"42");
    /// }
    /// assert_eq!(calls, 1);
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn get_or_insert_with<V: AsRef<[u8]>>(
        &mut self,
        key: impl AsRef<[u8]>,
        ttl: impl Into<Ttl>,
        make: impl FnOnce() -> V,
    ) -> Result<Item<'_>, Error> {
        let key = key.as_ref();
        self.get_or_insert_hashed(key, hash_key(key), ttl.into(), make)
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) with the key's
    /// hash already computed.
    pub(crate) fn get_or_insert_hashed<V: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        hash: u64,
        ttl: Ttl,
        make: impl FnOnce() -> V,
    ) -> Result<Item<'_>, Error> {
        check_key(key)?;
        let secs = live_secs(ttl)?.ok_or(Error::NotStored)?;
        let now = self.now();
        let loc = match self.lookup_live(key, hash, now) {
            Some((bucket, slot, loc)) => {
                self.counters.hits += 1;
                self.table.record_access(bucket, slot, now);
                self.mark(loc, item::FETCHED);
                loc
            }
            None => {
                self.counters.misses += 1;
                let value = make();
                self.write(
                    key,
                    hash,
                    [value.as_ref(), &[]],
                    &Meta::default(),
                    secs,
                    now,
                )?
            }
        };
        Ok(self.item_view(loc, now))
    }

    /// Stores a value under a key, replacing any existing item.
    /// `flags` are memcache client flags, returned by [`Item::flags`];
    /// `ttl` is a [`Ttl`], a `Duration` or an `Option<Duration>` (`None`
    /// and zero mean never).
    pub fn set(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        self.set_hashed(key, hash_key(key), value.as_ref(), flags, ttl.into())
    }

    /// [`set`](Self::set) with the key's hash already computed: the
    /// shortest write path (no condition to check, no CAS token to make).
    ///
    /// The common set runs inline: a key of 1 to [`MAX_KEY_LEN`] bytes, a
    /// TTL of never or a live number of seconds, an item that fits a
    /// segment, no delayed flush pending. Its checks are a few compares on
    /// lengths already in registers; anything else (an error to report, an
    /// expired TTL, a flush to carry out) takes
    /// [`set_general`](Self::set_general), which checks and reports as
    /// every store does. Always inline: `set` is this plus the hash.
    #[inline(always)]
    pub(crate) fn set_hashed(
        &mut self,
        key: &[u8],
        hash: u64,
        value: &[u8],
        flags: u32,
        ttl: Ttl,
    ) -> Result<(), Error> {
        let secs = match ttl {
            Ttl::Never => 0,
            // Rounded up to a whole second, as `Ttl::to_secs` does (a zero
            // duration means never: 0 here too).
            Ttl::After(d) => d.as_secs().saturating_add((d.subsec_nanos() > 0) as u64),
            Ttl::Expired => u64::MAX,
        };
        let meta = Meta {
            flags,
            ..Meta::default()
        };
        // The segment size is at most MAX_SEGMENT_SIZE, far below the
        // value field's limit: an item that fits a segment has a value
        // the header can describe.
        const _: () = assert!(hashtable::MAX_SEGMENT_SIZE <= MAX_VALUE_FIELD);
        let size = item::item_size(key.len(), value.len(), &meta);
        if secs > crate::MAX_TTL as u64
            || key.is_empty()
            || key.len() > MAX_KEY_LEN
            || size > self.segs.segment_size()
            || self.flush_at.is_some()
        {
            return self.set_general(key, hash, value, flags, ttl);
        }
        // Only a TTL needs the time: an item without one goes to the
        // never-expiring bucket, whose segments have no deadline to check
        // (`reserve` asserts it), and a new segment reads the clock itself.
        let now = if secs == 0 { 0 } else { self.clock.now() };
        self.write_sized(key, hash, [value, &[]], &meta, size, secs as u32, now)
            .map(drop)
    }

    /// [`set_hashed`](Self::set_hashed) off its inline path: checks the
    /// key, the TTL and the size (a clear error, nothing changed), carries
    /// out a due delayed flush, and stores with an already expired TTL by
    /// removing the old item.
    #[cold]
    #[inline(never)]
    fn set_general(
        &mut self,
        key: &[u8],
        hash: u64,
        value: &[u8],
        flags: u32,
        ttl: Ttl,
    ) -> Result<(), Error> {
        check_key(key)?;
        let Some(secs) = live_secs(ttl)? else {
            // Already expired: the general path unlinks the old item.
            let store = Store {
                flags,
                ttl,
                ..Store::new(StoreMode::Set, key, value)
            };
            return self.store_located(&store, hash).map(drop);
        };
        let meta = Meta {
            flags,
            ..Meta::default()
        };
        let now = self.now();
        self.write(key, hash, [value, &[]], &meta, secs, now)
            .map(drop)
    }

    /// Stores only if the key is absent, else [`Error::NotStored`].
    pub fn add(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        self.store_mode(
            StoreMode::Add,
            key.as_ref(),
            value.as_ref(),
            flags,
            ttl.into(),
            None,
        )
    }

    /// Stores only if the key is present, else [`Error::NotStored`].
    pub fn replace(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        self.store_mode(
            StoreMode::Replace,
            key.as_ref(),
            value.as_ref(),
            flags,
            ttl.into(),
            None,
        )
    }

    /// Stores only if the key's current version is `cas` (from
    /// [`Item::cas`]): [`Error::Exists`] if it changed since,
    /// [`Error::NotFound`] if it is gone.
    ///
    /// ```
    /// let mut cache = segcache::Segcache::builder().build().unwrap();
    /// cache.set("k", "1", 0, None).unwrap();
    /// let token = cache.get("k").unwrap().cas();
    /// cache.cas("k", "2", 0, None, token).unwrap();
    /// // The token is stale now.
    /// assert_eq!(cache.cas("k", "3", 0, None, token), Err(segcache::Error::Exists));
    /// ```
    pub fn cas(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
        cas: u64,
    ) -> Result<(), Error> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.store_mode(StoreMode::Set, key, value, flags, ttl.into(), Some(cas))
    }

    /// Appends `data` to an existing value (flags and TTL stay), else
    /// [`Error::NotStored`].
    pub fn append(&mut self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        let (key, data) = (key.as_ref(), data.as_ref());
        self.store_mode(StoreMode::Append, key, data, 0, Ttl::Never, None)
    }

    /// Prepends `data` to an existing value (flags and TTL stay), else
    /// [`Error::NotStored`].
    pub fn prepend(&mut self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        let (key, data) = (key.as_ref(), data.as_ref());
        self.store_mode(StoreMode::Prepend, key, data, 0, Ttl::Never, None)
    }

    fn store_mode(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Ttl,
        cas: Option<u64>,
    ) -> Result<(), Error> {
        let store = Store {
            flags,
            ttl,
            cas,
            ..Store::new(mode, key, value)
        };
        self.store_located(&store, hash_key(key)).map(drop)
    }

    /// Runs one store of any mode as one step and returns the new item's
    /// CAS token (0 if its TTL was [`Ttl::Expired`]). The condition (mode,
    /// compare-and-swap) is checked first; if it fails, or the store is
    /// refused, nothing changed.
    pub fn store<B: AsRef<[u8]>>(&mut self, store: &Store<B>) -> Result<u64, Error> {
        self.store_hashed(store, hash_key(store.key.as_ref()))
    }

    /// [`store`](Self::store) with the key's hash already computed.
    #[inline]
    pub(crate) fn store_hashed<B: AsRef<[u8]>>(
        &mut self,
        store: &Store<B>,
        hash: u64,
    ) -> Result<u64, Error> {
        let stored = self.store_located(store, hash)?;
        Ok(stored.map_or(0, |loc| self.cas_at(loc)))
    }

    /// Runs a store (the key's hash already computed); returns where the
    /// new item went (`None`: its TTL had already expired, nothing is
    /// left). The plain setters use this: they want no CAS token.
    pub(crate) fn store_located<B: AsRef<[u8]>>(
        &mut self,
        store: &Store<B>,
        hash: u64,
    ) -> Result<Option<Location>, Error> {
        let (key, value) = (store.key.as_ref(), store.value.as_ref());
        check_key(key)?;
        let concat = matches!(store.mode, StoreMode::Append | StoreMode::Prepend);
        // Some(0): never; None: already expired. Append and prepend keep
        // the item's own TTL.
        let secs = if concat {
            Some(0)
        } else {
            let secs = live_secs(store.ttl)?;
            let meta = Meta {
                flags: store.flags,
                ..Meta::default()
            };
            self.check_size(key.len(), value.len(), &meta)?;
            secs
        };
        let now = self.now();
        let plain = store.mode == StoreMode::Set && store.cas.is_none() && secs.is_some();
        let found = if plain {
            None
        } else {
            self.lookup_live(key, hash, now).map(|(.., loc)| loc)
        };
        match (store.mode, found) {
            (StoreMode::Add, Some(_)) => return Err(Error::NotStored),
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                return Err(Error::NotStored)
            }
            _ => {}
        }
        let mut marks = 0;
        let mut keep_ttl = None;
        // memcached: an add with a token is a plain add.
        if let (Some(token), false) = (store.cas, store.mode == StoreMode::Add) {
            let Some(loc) = found else {
                return Err(Error::NotFound);
            };
            if self.cas_at(loc) != token {
                if !store.invalidate {
                    return Err(Error::Exists);
                }
                // A stale write: stored, marked stale, the old TTL and win
                // token kept (memcached's `ms I`).
                marks = item::STALE | (self.segs.item(loc).marks() & item::WIN_SENT);
                keep_ttl = Some(self.remaining_ttl(loc, now));
            }
        }
        if concat {
            let loc = found.expect("append and prepend checked the item is there");
            let raw = self.segs.item(loc);
            let meta = Meta {
                flags: raw.client_flags(),
                cas: None,
                marks,
            };
            let ttl = self.remaining_ttl(loc, now);
            // Copy the old value out: making room may evict its segment.
            let mut old = std::mem::take(&mut self.scratch);
            old.clear();
            old.extend_from_slice(raw.value());
            let parts: [&[u8]; 2] = if store.mode == StoreMode::Prepend {
                [value, &old]
            } else {
                [&old, value]
            };
            let written = self.write(key, hash, parts, &meta, ttl, now);
            self.scratch = old;
            return written.map(Some);
        }
        let Some(ttl) = keep_ttl.or(secs) else {
            // Already expired: the store succeeds and leaves nothing readable.
            if let Some(loc) = found {
                self.unlink_item(hash, loc);
            }
            return Ok(None);
        };
        let meta = Meta {
            flags: store.flags,
            cas: None,
            marks,
        };
        self.write(key, hash, [value, &[]], &meta, ttl, now)
            .map(Some)
    }

    /// Adds `delta` to a decimal `u64` value, wrapping at 2^64; returns the
    /// new value. [`Error::NotFound`] if absent, [`Error::NotNumeric`] if the
    /// value is not a decimal number (read as memcached reads it: leading
    /// spaces, a `+` and trailing spaces are allowed).
    ///
    /// ```
    /// let mut cache = segcache::Segcache::builder().build().unwrap();
    /// cache.set("hits", "41", 0, None).unwrap();
    /// assert_eq!(cache.incr("hits", 1), Ok(42));
    /// assert_eq!(cache.decr("hits", 100), Ok(0), "decr floors at zero");
    /// ```
    pub fn incr(&mut self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key, &ArithOpts::new(true, delta))
            .map(|(v, _)| v)
    }

    /// Subtracts `delta` from a decimal `u64` value, stopping at 0.
    pub fn decr(&mut self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key, &ArithOpts::new(false, delta))
            .map(|(v, _)| v)
    }

    /// Runs an arithmetic update with all its options (memcache `ma`) as
    /// one step; returns the new value and the item's new CAS token.
    pub fn arith(&mut self, key: impl AsRef<[u8]>, opts: &ArithOpts) -> Result<(u64, u64), Error> {
        let key = key.as_ref();
        self.arith_hashed(key, hash_key(key), opts)
    }

    /// [`arith`](Self::arith) with the key's hash already computed.
    pub(crate) fn arith_hashed(
        &mut self,
        key: &[u8],
        hash: u64,
        opts: &ArithOpts,
    ) -> Result<(u64, u64), Error> {
        check_key(key)?;
        let new_ttl = opts.ttl.map(live_secs).transpose()?;
        let vivify = match opts.vivify {
            Some((initial, ttl)) => Some((initial, live_secs(ttl)?)),
            None => None,
        };
        let now = self.now();
        let Some((.., loc)) = self.lookup_live(key, hash, now) else {
            let Some((initial, secs)) = vivify else {
                return Err(Error::NotFound);
            };
            let mut digits = [0u8; 20];
            let text = format_u64(initial, &mut digits);
            return match secs {
                Some(ttl) => {
                    let loc = self.write(key, hash, [text, &[]], &Meta::default(), ttl, now)?;
                    Ok((initial, self.cas_at(loc)))
                }
                None => Ok((initial, 0)),
            };
        };
        // memcached's order: an empty value is refused before the token is
        // compared, the number is read after.
        if self.segs.item(loc).value().is_empty() {
            return Err(Error::NotNumeric);
        }
        if opts.cas.is_some_and(|token| token != self.cas_at(loc)) {
            return Err(Error::Exists);
        }
        let raw = self.segs.item(loc);
        let value = parse_counter(raw.value()).ok_or(Error::NotNumeric)?;
        let new = if opts.incr {
            value.wrapping_add(opts.delta)
        } else {
            value.saturating_sub(opts.delta)
        };
        let mut digits = [0u8; 20];
        let text = format_u64(new, &mut digits);
        // memcached updates in place when the digits fit the old value,
        // keeping the item's marks; a longer number is a new item.
        let meta = Meta {
            flags: raw.client_flags(),
            cas: None,
            marks: if text.len() <= raw.value().len() {
                raw.marks()
            } else {
                0
            },
        };
        let ttl = match new_ttl {
            None => self.remaining_ttl(loc, now),
            Some(Some(ttl)) => ttl,
            Some(None) => {
                self.unlink_item(hash, loc);
                return Ok((new, 0));
            }
        };
        let loc = self.write(key, hash, [text, &[]], &meta, ttl, now)?;
        Ok((new, self.cas_at(loc)))
    }

    /// Gives an existing item a new TTL (`None` or zero: never expires;
    /// [`Ttl::Expired`]: remove it). Its CAS token stays the same.
    /// [`Error::NotFound`] if absent.
    pub fn touch(&mut self, key: impl AsRef<[u8]>, ttl: impl Into<Ttl>) -> Result<(), Error> {
        let key = key.as_ref();
        self.touch_hashed(key, hash_key(key), ttl.into())
    }

    /// [`touch`](Self::touch) with the key's hash already computed.
    pub(crate) fn touch_hashed(&mut self, key: &[u8], hash: u64, ttl: Ttl) -> Result<(), Error> {
        check_key(key)?;
        let secs = live_secs(ttl)?;
        let now = self.now();
        let (.., loc) = self.lookup_live(key, hash, now).ok_or(Error::NotFound)?;
        self.retouch(key, hash, loc, secs, now).map(drop)
    }

    /// Gives the item at `loc` a new TTL (`Some(0)`: never, `None`: remove
    /// it), keeping its value, flags, marks and CAS token; returns where it
    /// is now. An item already in a segment that expires within the TTL's
    /// precision of the new deadline stays where it is.
    fn retouch(
        &mut self,
        key: &[u8],
        hash: u64,
        loc: Location,
        secs: Option<u32>,
        now: u32,
    ) -> Result<Option<Location>, Error> {
        let Some(ttl) = secs else {
            self.unlink_item(hash, loc);
            return Ok(None);
        };
        // A touch counts as a fetch (memcached's `h`).
        self.mark(loc, item::FETCHED);
        let bucket = ttl::bucket_for(ttl);
        let header = &mut self.segs.headers[loc.seg as usize];
        if header.ttl_bucket as usize == bucket {
            if ttl == 0 {
                return Ok(Some(loc));
            }
            let deadline = now.saturating_add(ttl);
            if !header.is_split()
                && header.expire_at != 0
                && deadline >= header.expire_at
                && ttl::fits_spread(bucket, header.expire_at, header.expire_last, deadline)
            {
                header.expire_last = header.expire_last.max(deadline);
                return Ok(Some(loc));
            }
        }
        let mut meta = self.segs.item(loc).meta();
        meta.cas = Some(self.cas_at(loc));
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        value.extend_from_slice(self.segs.item(loc).value());
        let written = self.write(key, hash, [&value, &[]], &meta, ttl, now);
        self.scratch = value;
        written.map(Some)
    }

    /// Reads an item with memcache's read options (`gat`, `mg` with `T`,
    /// `N`, `R`, `u`) as one step: a touch keeps the CAS token, a vivified
    /// miss creates an empty item and hands this caller the win token.
    pub fn read(&mut self, key: impl AsRef<[u8]>, opts: &GetOpts) -> Result<Option<Found>, Error> {
        let key = key.as_ref();
        self.read_reusing(key, hash_key(key), opts, &mut None)
    }

    /// [`read_reusing`](Self::read_reusing) with [`GetOpts::default`] (a
    /// plain `get`), the way [`get`](Self::get) reads: the same effects on
    /// the cache, through the short inline path. A hit is copied into a
    /// buffer taken from `free` (a new one if it is empty).
    #[inline(always)]
    pub(crate) fn read_plain(
        &mut self,
        key: &[u8],
        hash: u64,
        free: &mut Vec<OwnedItem>,
    ) -> Option<Found> {
        if self.tags_say_miss(hash) {
            return None;
        }
        let (loc, now) = self.hit(key, hash)?;
        let (raw, segs, marks) = self.segs.fetch(loc);
        let view = Item {
            raw,
            segs,
            loc,
            now,
        };
        let item = match free.pop() {
            Some(mut old) => {
                old.refill(view);
                old
            }
            None => view.to_owned(),
        };
        Some(Found {
            item,
            win: false,
            stale: marks & item::STALE != 0,
            won_before: marks & item::WIN_SENT != 0,
            hit_before: marks & item::FETCHED != 0,
            vivified: false,
        })
    }

    /// [`read`](Self::read) with the key's hash already computed, copying
    /// a hit into `reuse`'s buffers when given (taken out of it; a miss
    /// leaves it there: a [`Batch`](crate::Batch) keeps free reply buffers).
    pub(crate) fn read_reusing(
        &mut self,
        key: &[u8],
        hash: u64,
        opts: &GetOpts,
        reuse: &mut Option<OwnedItem>,
    ) -> Result<Option<Found>, Error> {
        let touch = opts.touch.map(live_secs).transpose()?;
        let vivify = opts.vivify.map(live_secs).transpose()?;
        let now = self.now();
        let Some((bucket, slot, mut loc)) = self.lookup_live(key, hash, now) else {
            if opts.bump {
                self.counters.misses += 1;
            }
            let Some(secs) = vivify else {
                return Ok(None);
            };
            check_key(key)?;
            let item = match secs {
                Some(ttl) => {
                    let meta = Meta {
                        marks: item::WIN_SENT,
                        ..Meta::default()
                    };
                    let loc = self.write(key, hash, [&[], &[]], &meta, ttl, now)?;
                    self.item_view(loc, now).to_owned()
                }
                None => OwnedItem {
                    key: key.to_vec(),
                    value: Vec::new(),
                    flags: 0,
                    cas: 0,
                    ttl: Ttl::Expired,
                },
            };
            return Ok(Some(Found {
                item,
                win: true,
                stale: false,
                won_before: false,
                hit_before: false,
                vivified: true,
            }));
        };
        if opts.bump {
            self.counters.hits += 1;
            self.table.record_access(bucket, slot, now);
        }
        let marks = self.segs.item(loc).marks();
        let (hit_before, stale, won_before) = (
            marks & item::FETCHED != 0,
            marks & item::STALE != 0,
            marks & item::WIN_SENT != 0,
        );
        // Seconds left as `recache` judges them (None: never expires).
        let left = match (opts.recache_after_touch, touch) {
            (true, Some(None)) => Some(0),
            (true, Some(Some(0))) => None,
            (true, Some(Some(ttl))) => Some(ttl),
            _ => Some(self.remaining_ttl(loc, now)).filter(|&s| s != 0),
        };
        let recache = opts
            .recache
            .is_some_and(|below| left.is_some_and(|left| left < below));
        let win = opts.win_tokens && !won_before && (stale || recache);
        let mut gone = false;
        if let Some(secs) = touch {
            match secs {
                None => gone = true,
                Some(_) => loc = self.retouch(key, hash, loc, secs, now)?.unwrap_or(loc),
            }
        }
        let mut add = if win { item::WIN_SENT } else { 0 };
        if opts.bump {
            add |= item::FETCHED;
        }
        self.mark(loc, add);
        let view = self.item_view(loc, now);
        let mut item = match reuse.take() {
            Some(mut old) => {
                old.refill(view);
                old
            }
            None => view.to_owned(),
        };
        if gone {
            item.ttl = Ttl::Expired;
            self.unlink_item(hash, loc);
        }
        Ok(Some(Found {
            item,
            win,
            stale,
            won_before,
            hit_before,
            vivified: false,
        }))
    }

    /// Removes a key; true if it was present (and not expired).
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        self.remove_hashed(key, hash_key(key))
    }

    /// [`delete`](Self::delete) with the key's hash already computed: one
    /// probe, the entry cleared where it was found, the item's size taken
    /// from the header the key compare read, and the clock read only if
    /// the item's segment has a deadline. A growing table or a pending
    /// delayed flush takes the general [`delete_hashed`](Self::delete_hashed).
    #[inline(always)]
    pub(crate) fn remove_hashed(&mut self, key: &[u8], hash: u64) -> bool {
        if self.table.is_growing() || self.flush_at.is_some() {
            return self
                .delete_hashed(key, hash, &DeleteOpts::default())
                .is_ok();
        }
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return false;
        }
        // The likeliest entry first, as `link` does; any other through the
        // table's search, out of line.
        let first = self.first_match(key, hash);
        let (info, size) = match first {
            Some((at, info, size)) => {
                self.table.remove_first(at);
                (info, size)
            }
            // An absent key the home's tags rule out returns here, without
            // the call.
            None if self.table.absent_by_tags(hash) => return false,
            None => match self.remove_searched(key, hash) {
                Some(found) => found,
                None => return false,
            },
        };
        let loc = hashtable::location(info);
        debug_assert_eq!(size, self.segs.item(loc).size());
        // SAFETY: the table held `loc` (a whole item) until `remove`
        // cleared it just now; nothing moved since.
        unsafe { self.segs.mark_unlinked(loc) };
        // SAFETY: `loc` came from the table, which points only into
        // segments that exist.
        let header = unsafe { self.segs.header_unchecked_mut(loc.seg) };
        header.uncount_item(size);
        let expire_at = header.expire_at;
        self.counters.items -= 1;
        self.counters.live_bytes -= size as u64;
        if expire_at != 0 && self.segs.expired(loc, self.clock.now()) {
            // Expired: unlinked as a read would, and not there to delete.
            self.counters.expirations += 1;
            return false;
        }
        true
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

    /// The entry of `key` removed from the table by a full search, with
    /// its item's size: [`remove_hashed`](Self::remove_hashed) when the
    /// first candidate is not the key (out of line, so the common delete
    /// keeps its state in registers).
    #[inline(never)]
    fn remove_searched(&mut self, key: &[u8], hash: u64) -> Option<(u64, usize)> {
        let segs = &self.segs;
        let mut size = 0;
        let info = self
            .table
            .remove(hash, |at| key_is_sized(segs, at, key, &mut size))?;
        Some((info, size))
    }

    /// Removes a key with memcache's delete options (`md` with `C`, `I`,
    /// `T`) as one step: [`Error::NotFound`] if absent, [`Error::Exists`]
    /// if the token does not match. With `invalidate` the item stays,
    /// marked stale, under a new CAS token.
    pub fn delete_with(&mut self, key: impl AsRef<[u8]>, opts: &DeleteOpts) -> Result<(), Error> {
        let key = key.as_ref();
        self.delete_hashed(key, hash_key(key), opts)
    }

    /// [`delete_with`](Self::delete_with) with the key's hash already
    /// computed.
    pub(crate) fn delete_hashed(
        &mut self,
        key: &[u8],
        hash: u64,
        opts: &DeleteOpts,
    ) -> Result<(), Error> {
        let new_ttl = opts.ttl.map(live_secs).transpose()?;
        let now = self.now();
        let (bucket, slot, loc) = self.lookup_live(key, hash, now).ok_or(Error::NotFound)?;
        if opts.cas.is_some_and(|token| token != self.cas_at(loc)) {
            return Err(Error::Exists);
        }
        if !opts.invalidate {
            self.unlink_found(bucket, slot, loc);
            return Ok(());
        }
        let ttl = match new_ttl {
            None => self.remaining_ttl(loc, now),
            Some(Some(ttl)) => ttl,
            Some(None) => {
                self.unlink_found(bucket, slot, loc);
                return Ok(());
            }
        };
        let raw = self.segs.item(loc);
        let meta = Meta {
            flags: raw.client_flags(),
            cas: None,
            marks: (raw.marks() | item::STALE) & !item::WIN_SENT,
        };
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        value.extend_from_slice(raw.value());
        let written = self.write(key, hash, [&value, &[]], &meta, ttl, now);
        self.scratch = value;
        written.map(drop)
    }

    /// Time left for a key: `None` if absent, else [`Ttl::Never`] or
    /// [`Ttl::After`].
    pub fn ttl(&mut self, key: impl AsRef<[u8]>) -> Option<Ttl> {
        let key = key.as_ref();
        self.ttl_hashed(key, hash_key(key))
    }

    /// [`ttl`](Self::ttl) with the key's hash already computed.
    pub(crate) fn ttl_hashed(&mut self, key: &[u8], hash: u64) -> Option<Ttl> {
        let now = self.now();
        let (.., loc) = self.lookup_live(key, hash, now)?;
        Some(self.item_view(loc, now).ttl())
    }

    /// Runs one [`Request`] as one step and answers it: the seam every
    /// other way in (storage thread, [`ShardedCache`](crate::ShardedCache),
    /// server, bindings) goes through.
    pub fn execute<B: AsRef<[u8]>>(&mut self, request: &Request<B>) -> Response {
        let hash = request_key(request).map_or(0, hash_key);
        self.execute_hashed(request, hash)
    }

    /// [`execute`](Self::execute) with the request key's hash already
    /// computed (anything for a request without a key).
    pub(crate) fn execute_hashed<B: AsRef<[u8]>>(
        &mut self,
        request: &Request<B>,
        hash: u64,
    ) -> Response {
        match request {
            Request::Get { key, opts } => {
                Response::Get(self.read_reusing(key.as_ref(), hash, opts, &mut None))
            }
            Request::Store(store) => Response::Stored(self.store_hashed(store, hash)),
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
        }
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
        let flushed = self.flush_at.is_some_and(|at| now >= at);
        let segments = if flushed { 0 } else { self.segs.count() as u32 };
        (0..segments)
            .filter(move |&id| {
                let h = &self.segs.headers[id as usize];
                h.state != SegState::Free
                    && h.live_items > 0
                    && (h.is_split() || !h.is_expired(now))
            })
            .flat_map(move |id| {
                self.segs.item_offsets(id).filter_map(move |(offset, raw)| {
                    let loc = Location { seg: id, offset };
                    if self.segs.expired(loc, now) {
                        return None;
                    }
                    let hash = self.table.hash(raw.key());
                    self.table.locate(hash, loc)?;
                    Some(self.item_view(loc, now))
                })
            })
    }

    /// Removes every item now, and cancels a pending delayed flush.
    pub fn flush(&mut self) {
        self.flush_at = None;
        self.clear();
    }

    /// Removes every item stored before `delay` from now, at that time
    /// (memcache's `flush_all <delay>`). A zero delay flushes now.
    pub fn flush_after(&mut self, delay: Duration) {
        let now = self.clock.now();
        let secs = u32::try_from(delay.as_secs()).unwrap_or(u32::MAX);
        self.flush_at = Some(now.saturating_add(secs));
        self.now();
    }

    /// Drops every item and returns every segment to the free list;
    /// counters other than items and bytes are kept.
    pub fn clear(&mut self) {
        self.table.clear();
        self.segs.release_all();
        self.admission.clear();
        self.ttl.clear();
        self.counters.items = 0;
        self.counters.live_bytes = 0;
    }

    /// Frees every segment whose deadline has passed, unlinking its items.
    /// Cheap when nothing is due: one look at the head of each TTL bucket.
    pub fn expire(&mut self) -> Expired {
        let now = self.now();
        self.expire_at(now)
    }

    pub(crate) fn expire_at(&mut self, now: u32) -> Expired {
        let mut freed = Expired::default();
        for bucket in 0..NEVER {
            let mut at = self.ttl.buckets[bucket].head;
            while at != NONE && self.segs.headers[at as usize].is_expired(now) {
                let next = self.segs.headers[at as usize].next;
                let whole = !self.segs.headers[at as usize].is_split();
                let items = if whole {
                    self.unlink_segment(at)
                } else {
                    self.reap_windows(at, now)
                };
                self.counters.expirations += items as u64;
                freed.items += items;
                if self.segs.headers[at as usize].live_items == 0 {
                    self.retire_segment(at);
                    self.counters.expired_segments += 1;
                    freed.segments += 1;
                }
                at = next;
            }
        }
        freed
    }

    /// Unlinks the items of the windows of `split` segment `id` whose
    /// deadline has passed at `now` and marks those windows reaped; the
    /// segment's deadline becomes that of its earliest window left.
    /// Returns how many items it unlinked.
    fn reap_windows(&mut self, id: u32, now: u32) -> usize {
        let mut windows = self.segs.windows(id);
        let mut start = 0;
        let mut unlinked = 0;
        for w in windows.as_mut_slice() {
            if !w.is_reaped() && w.at != 0 && w.at <= now {
                unlinked += self.unlink_between(id, start, w.end);
                w.reap();
            }
            start = w.end;
        }
        self.segs.set_windows(id, &windows);
        unlinked
    }

    /// Unlinks the live items of segment `id` from byte `start` up to
    /// `end` (item boundaries); returns how many. (They are not marked
    /// unlinked: a later walk finds them dead by probing the table.) The
    /// walk stops once the segment has no live item left.
    fn unlink_between(&mut self, id: u32, start: u32, end: u32) -> usize {
        let segs = &self.segs;
        let table = &mut self.table;
        let (mut unlinked, mut bytes) = (0usize, 0usize);
        let live = segs.headers[id as usize].live_items as usize;
        for (offset, item) in segs.item_offsets_between(id, start, end) {
            if unlinked == live {
                break;
            }
            if item.is_unlinked() {
                continue;
            }
            let hash = table.hash(item.key());
            if table
                .remove_at(hash, Location { seg: id, offset })
                .is_some()
            {
                unlinked += 1;
                bytes += item.size();
            }
        }
        let header = &mut self.segs.headers[id as usize];
        header.live_items -= unlinked as u32;
        header.live_bytes -= bytes as u32;
        self.counters.items -= unlinked as u64;
        self.counters.live_bytes -= bytes as u64;
        unlinked
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
            segments_used: self.segs.count() as u64 - free,
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
        }
    }

    /// The largest value storable under a key of `key_len` bytes without
    /// client flags.
    pub fn max_value_len(&self, key_len: usize) -> usize {
        let room = self.segs.segment_size() - item::HEADER_LEN - key_len;
        room.min(MAX_VALUE_FIELD)
    }

    /// The item's size, or [`Error::ValueTooLarge`] if it cannot fit in a
    /// segment.
    fn check_size(&self, key_len: usize, value_len: usize, meta: &Meta) -> Result<usize, Error> {
        let size = item::item_size(key_len, value_len, meta);
        if size > self.segs.segment_size() || value_len > MAX_VALUE_FIELD {
            let max = self.max_value_len(key_len + meta.optional_len());
            return Err(Error::ValueTooLarge {
                len: value_len,
                max,
            });
        }
        Ok(size)
    }

    /// Writes a new item (TTL in seconds, 0: never) and points the table at
    /// it; returns where it went. On error nothing changed: the old item
    /// (if any) is still readable.
    #[inline(never)]
    fn write(
        &mut self,
        key: &[u8],
        hash: u64,
        value: [&[u8]; 2],
        meta: &Meta,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        let size = self.check_size(key.len(), value[0].len() + value[1].len(), meta)?;
        self.write_sized(key, hash, value, meta, size, ttl, now)
    }

    /// [`write`](Self::write) of an item whose `size` is checked: reserve,
    /// copy in, link. Inline: `set`, the hottest write, takes this one
    /// directly.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_sized(
        &mut self,
        key: &[u8],
        hash: u64,
        value: [&[u8]; 2],
        meta: &Meta,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        debug_assert_eq!(hash, hash_key(key));
        debug_assert_eq!(
            Ok(size),
            self.check_size(key.len(), value[0].len() + value[1].len(), meta)
        );
        let loc = self.reserve(size, ttl, now)?;
        // Start loading the table lines `link` reads (the home's control
        // word and first slots) before the copy, so their misses overlap
        // it: a prefetch, whose address is known now, not a load of the
        // entry (an early load of the entry and of the old item's header
        // measured 0.8x: the copy then waits behind it). Here rather than
        // before `reserve`: as fast, 7 instructions fewer.
        self.table.prefetch(hash);
        // SAFETY: `reserve` just handed out `size` bytes at `loc`, and
        // `size` is this item's size (the caller checked it).
        unsafe { item::write_at(self.segs.reserved_ptr(loc, size), key, value, meta) };
        self.link(key, hash, loc, size, ttl, now)
    }

    /// Points the table at the item of `size` bytes just written at `loc`
    /// and counts it. An overwrite (the common write) is one probe that
    /// finds the old entry, rewrites it in place and takes the old item's
    /// size from the header the key compare read; a new key goes out of
    /// line ([`link_new`](Self::link_new)).
    #[inline(always)]
    fn link(
        &mut self,
        key: &[u8],
        hash: u64,
        loc: Location,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        // Merge eviction: a rewritten key starts with at least
        // REWRITE_FREQ accesses (its count carries over from the old
        // version), so its evaluation promotes it, as an updated entry of
        // quick_cache or S3-FIFO keeps its place (see
        // `eviction::REWRITE_FREQ`).
        let rewrite_floor = match self.eviction {
            Eviction::Merge => crate::eviction::REWRITE_FREQ,
            _ => 0,
        };
        // The likeliest entry first, its key compared inline; any other
        // through the table's search, out of line; a key the home's tags
        // rule out goes straight to `link_new`.
        let first = self.first_match(key, hash);
        let (old, old_size) = match first {
            Some((at, info, old_size)) => {
                self.table.replace_first(at, info, loc, rewrite_floor);
                (info, old_size)
            }
            None if self.table.absent_by_tags(hash) => {
                return self.link_new(hash, loc, size, ttl, now);
            }
            None => match self.replace_searched(key, hash, loc, rewrite_floor) {
                Some(found) => found,
                None => return self.link_new(hash, loc, size, ttl, now),
            },
        };
        let old = hashtable::location(old);
        debug_assert_eq!(old_size, self.segs.item(old).size());
        // SAFETY: the table held `old` (a whole item) until `replace`
        // repointed it just now; nothing moved since.
        unsafe { self.segs.mark_unlinked(old) };
        // SAFETY: `old` came from the table, which points only into
        // segments that exist.
        let old_header = unsafe { self.segs.header_unchecked_mut(old.seg) };
        old_header.uncount_item(old_size);
        self.count_deadline(loc, ttl, now);
        // One item out, one in: the item count stays.
        self.counters.live_bytes = self.counters.live_bytes + size as u64 - old_size as u64;
        if self.table.is_growing() {
            self.grow_step(hashtable::GROW_STEP_WRITE);
        }
        Ok(loc)
    }

    /// [`link`](Self::link) when the first candidate is not the key: the
    /// table's search repoints the key's entry, if any, at `loc` and
    /// returns its previous item info and the old item's size (out of
    /// line, so the common overwrite keeps its state in registers).
    #[inline(never)]
    fn replace_searched(
        &mut self,
        key: &[u8],
        hash: u64,
        loc: Location,
        rewrite_floor: u8,
    ) -> Option<(u64, usize)> {
        let segs = &self.segs;
        let mut old_size = 0;
        let old = self.table.replace(hash, loc, rewrite_floor, |at| {
            key_is_sized(segs, at, key, &mut old_size)
        })?;
        Some((old, old_size))
    }

    /// [`link`](Self::link) for a key the table does not hold: a new entry
    /// (which may evict another from a full window, start the table's
    /// growth, or fail with the space given back).
    #[inline(never)]
    fn link_new(
        &mut self,
        hash: u64,
        loc: Location,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        let segs = &self.segs;
        let may_evict = self.eviction != Eviction::None;
        let (items, live) = (self.counters.items, self.counters.live_bytes);
        let slots = self.table.slots();
        // Grow the table rather than drop items when the heap, at the
        // current average item size, holds more items than the table holds
        // well (9/10 of its slots): while the heap fills, and at a full heap
        // too (merge eviction keeps it full), so a workload that moves from
        // large items to small ones is bounded by heap bytes, not by a
        // table sized for the large ones.
        let grow = || {
            let projected =
                segs.heap_bytes() as u128 * (items as u128 + 1) / (live as u128 + size as u128);
            let projected = projected.min(usize::MAX as u128) as usize;
            (projected > slots / 10 * 9).then_some(projected)
        };
        let result = match self.table.insert_absent(hash, loc, may_evict, grow) {
            Ok(evicted) => {
                if self.eviction == Eviction::Merge && self.admission.readmit(hash, size) {
                    // Back from a ghost (evicted from either pool and
                    // written again): one access, so the next evaluation
                    // promotes it.
                    if let Some((bucket, slot, _)) = self.table.locate(hash, loc) {
                        self.table
                            .set_frequency(bucket, slot, crate::eviction::PROMOTE_FREQ);
                    }
                }
                if let Some(victim) = evicted {
                    self.account_unlinked(hashtable::location(victim));
                    self.counters.evictions += 1;
                }
                self.count_deadline(loc, ttl, now);
                self.counters.items += 1;
                self.counters.live_bytes += size as u64;
                Ok(loc)
            }
            Err(TableFull) => {
                // Give the reserved space back (it was the segment's last
                // write) with the count `reserve` made of it.
                let header = &mut self.segs.headers[loc.seg as usize];
                debug_assert_eq!(header.write_offset, loc.offset + size as u32);
                header.write_offset = loc.offset;
                header.uncount_item(size);
                Err(Error::HashTableFull)
            }
        };
        // Every write drains a few homes of a growing table (after the
        // accounting above, so a dropped item is always a counted one).
        if self.table.is_growing() {
            self.grow_step(hashtable::GROW_STEP_WRITE);
        }
        result
    }

    /// Counts the deadline of a linked item of TTL `ttl` (seconds, 0:
    /// never) in its segment's header; its bytes were counted there by
    /// [`reserve`](Self::reserve), the cache-wide counters are the caller's.
    #[inline(always)]
    fn count_deadline(&mut self, loc: Location, ttl: u32, now: u32) {
        if ttl != 0 {
            // SAFETY: `loc` is where `reserve` just put the item: a
            // segment that exists.
            let header = unsafe { self.segs.header_unchecked_mut(loc.seg) };
            let deadline = now.saturating_add(ttl);
            if header.expire_at == 0 || deadline < header.expire_at {
                header.expire_at = deadline;
            }
            header.expire_last = header.expire_last.max(deadline);
        }
    }

    /// Reserves `size` bytes at the tail of the TTL bucket for `ttl`. The
    /// common case, room in the bucket's open segment, is inline; starting
    /// a new segment goes out of line ([`reserve_slow`](Self::reserve_slow)).
    /// `now` is the time of the write; for `ttl` 0 it is not read (0 will
    /// do: never-expiring segments have no deadline).
    ///
    /// The item is counted in the segment's live bytes and items here,
    /// with the header at hand; a write that then fails gives both back
    /// with the space ([`link_new`](Self::link_new)).
    #[inline(always)]
    fn reserve(&mut self, size: usize, ttl: u32, now: u32) -> Result<Location, Error> {
        let bucket = ttl::bucket_for(ttl);
        let tail = self.ttl.buckets[bucket].tail;
        if tail != NONE {
            let segment_size = self.segs.segment_size();
            // SAFETY: a TTL bucket's tail is a segment that exists.
            let header = unsafe { self.segs.header_unchecked_mut(tail) };
            debug_assert!(
                ttl != 0 || header.expire_at == 0,
                "a deadline in the never bucket"
            );
            if Self::takes(header, bucket, segment_size, size, ttl, now) {
                let offset = header.write_offset;
                header.write_offset += size as u32;
                header.count_item(size);
                return Ok(Location { seg: tail, offset });
            }
        }
        self.reserve_slow(bucket, size)
    }

    /// True if the open segment `header` of TTL bucket `bucket` takes an
    /// item of `size` bytes and TTL `ttl` at `now`: still open, room left,
    /// not expired, and its items' deadlines stay close
    /// ([`ttl::fits_spread`]).
    #[inline(always)]
    fn takes(
        header: &SegmentHeader,
        bucket: usize,
        segment_size: usize,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> bool {
        let fits = header.write_offset as usize + size <= segment_size;
        let close = ttl == 0
            || ttl::fits_spread(
                bucket,
                header.expire_at,
                header.expire_last,
                now.saturating_add(ttl),
            );
        // A never-expiring segment has no deadline (`reserve` asserts it):
        // only a TTL needs the expiry test.
        header.state == SegState::Active && fits && close && (ttl == 0 || !header.is_expired(now))
    }

    /// [`reserve`](Self::reserve) when the bucket's tail cannot take the
    /// item: seals the tail and starts a new segment (evicting, if need
    /// be), at the clock's time (the caller's `now` may be 0 for a write
    /// without a TTL).
    #[cold]
    #[inline(never)]
    fn reserve_slow(&mut self, bucket: usize, size: usize) -> Result<Location, Error> {
        let now = self.clock.now();
        let tail = self.ttl.buckets[bucket].tail;
        if tail != NONE {
            let header = &mut self.segs.headers[tail as usize];
            if header.state == SegState::Active {
                header.state = SegState::Sealed;
            }
        }
        let id = self.alloc_segment(bucket, now)?;
        self.ttl.push_tail(&mut self.segs.headers, bucket, id);
        let header = &mut self.segs.headers[id as usize];
        header.write_offset = size as u32;
        header.live_bytes = size as u32;
        header.live_items = 1;
        Ok(Location { seg: id, offset: 0 })
    }

    /// A free segment: from the free list, else by expiring, else by evicting.
    fn alloc_segment(&mut self, bucket: usize, now: u32) -> Result<u32, Error> {
        for _ in 0..self.segs.count() + 2 {
            if let Some(id) = self.segs.alloc(now, bucket as u16) {
                return Ok(id);
            }
            if self.expire_at(now).segments == 0 {
                self.evict(now)?;
            }
        }
        Err(Error::OutOfMemory)
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
    }

    /// Updates segment and cache counters for an item the table no longer
    /// points at.
    #[inline]
    pub(crate) fn account_unlinked(&mut self, loc: Location) {
        let size = self.segs.item(loc).size();
        self.segs.headers[loc.seg as usize].uncount_item(size);
        self.counters.items -= 1;
        self.counters.live_bytes -= size as u64;
    }

    /// Unlinks every live item of a segment from the table; returns how many.
    pub(crate) fn unlink_segment(&mut self, id: u32) -> usize {
        let written = self.segs.headers[id as usize].write_offset;
        let unlinked = self.unlink_between(id, 0, written);
        debug_assert_eq!(self.segs.headers[id as usize].live_items, 0);
        unlinked
    }

    /// Takes an emptied segment out of its TTL bucket and frees it.
    pub(crate) fn retire_segment(&mut self, id: u32) {
        self.admission.on_release(id);
        self.ttl.remove(&mut self.segs.headers, id);
        self.segs.release(id);
    }

    /// Checks internal invariants (tests only): counters agree with the
    /// segments, the table and the TTL lists.
    #[cfg(test)]
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
        assert_eq!(linked + self.segs.free_count(), self.segs.count());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::small_cache;
    use crate::ManualClock;

    fn small(eviction: Eviction) -> (Segcache, ManualClock) {
        let clock = ManualClock::new();
        let cache = small_cache(64 << 10, 4 << 10, 8, eviction, &clock);
        (cache, clock)
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    /// Writes bursts of 1000 s items 100 s apart (the bucket allows ~60 s
    /// of deadlines per window), ten bursts at a time overflowing a heap of
    /// 64 segments, reading a third of each burst, so that merges split
    /// segments into deadline windows; returns each key's deadline.
    fn split_by_merges(c: &mut Segcache, clock: &ManualClock) -> Vec<(String, u32)> {
        let mut keys = Vec::new();
        for burst in 0..11u32 {
            for k in 0..2000u32 {
                let key = format!("{burst}:{k}");
                c.set(&key, [7u8; 60], 0, secs(1000)).unwrap();
                keys.push((key, clock.now() + 1000));
            }
            for (key, _) in keys.iter().rev().take(2000).step_by(3) {
                c.get(key);
            }
            c.check_invariants();
            clock.advance(Duration::from_secs(100));
            if burst % 8 == 7 {
                // Reads of every burst still held keep items across merges.
                for (key, _) in &keys {
                    c.get(key);
                }
            }
        }
        assert!(c.stats().merges > 0);
        keys
    }

    #[test]
    fn split_segments_survive_a_restart_with_their_windows() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new();
        clock.set(10_000);
        let build = || {
            Segcache::builder()
                .heap_size(1 << 20)
                .segment_size(16 << 10)
                .datapool(dir.path().join("pool"))
                .restore(true)
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let mut c = build();
        let keys = split_by_merges(&mut c, &clock);
        c.expire();
        let split: Vec<u32> = (0..c.segs.count() as u32)
            .filter(|&id| c.segs.headers[id as usize].is_split())
            .collect();
        assert!(!split.is_empty(), "merges split no segment");
        c.check_invariants();
        let windows: Vec<_> = split.iter().map(|&id| c.segs.windows(id)).collect();
        let ttls: Vec<_> = keys
            .iter()
            .map(|(k, _)| c.peek(k).map(|i| i.ttl()))
            .collect();
        c.save().unwrap();
        let mut c = build();
        assert!(matches!(
            c.restore_outcome(),
            RestoreOutcome::Restored { .. }
        ));
        for (&id, w) in split.iter().zip(&windows) {
            assert_eq!(&c.segs.windows(id), w, "segment {id}");
        }
        let after: Vec<_> = keys
            .iter()
            .map(|(k, _)| c.peek(k).map(|i| i.ttl()))
            .collect();
        assert_eq!(ttls, after);
        c.check_invariants();
        // Every item held expires within the bucket's precision of its own
        // deadline, never after it, windows or not.
        for step in 0..40 {
            let now = clock.now();
            for (key, deadline) in &keys {
                if let Some(item) = c.peek(key) {
                    assert!(now < *deadline, "{key} served {} s late", now - deadline);
                    let left = item.ttl().duration().unwrap().as_secs() as u32;
                    assert!(
                        left <= deadline - now,
                        "{key}: {left} s left, due in {}",
                        deadline - now
                    );
                    assert!(
                        left + 1000 / 16 > deadline - now,
                        "{key} {} s early",
                        deadline - now - left
                    );
                }
            }
            clock.advance(Duration::from_secs(25));
            if step % 4 == 0 {
                c.expire();
                c.check_invariants();
            }
        }
    }

    #[test]
    fn set_get_overwrite_delete() {
        let (mut c, _) = small(Eviction::Merge);
        c.set(b"a", b"1", 5, None).unwrap();
        c.set(b"b", b"2", 0, None).unwrap();
        c.set(b"a", b"11", 6, None).unwrap();
        let a = c.get(b"a").unwrap();
        assert_eq!((a.key(), a.value(), a.flags()), (&b"a"[..], &b"11"[..], 6));
        assert_eq!(c.len(), 2);
        assert!(c.delete(b"a"));
        assert!(!c.delete(b"a"));
        assert!(c.get(b"a").is_none());
        assert_eq!(c.get(b"b").unwrap().value(), b"2");
        let s = c.stats();
        assert_eq!((s.items, s.hits, s.misses), (1, 2, 1));
        c.check_invariants();
    }

    /// An overwrite and a delete mark the item they unlink, and nothing
    /// else; walks that skip marked items (compaction here) keep every
    /// live item and the counters right.
    #[test]
    fn overwrites_and_deletes_mark_what_they_unlink() {
        let (mut c, _) = small(Eviction::Merge);
        let at = |c: &Segcache, key: &[u8]| {
            let hash = hash_key(key);
            let (_, _, info) = c
                .table
                .lookup(hash, |at| c.segs.item(at).key() == key)
                .unwrap();
            hashtable::location(info)
        };
        c.set(b"a", b"1", 0, None).unwrap();
        c.set(b"b", b"2", 7, None).unwrap();
        let (a1, b) = (at(&c, b"a"), at(&c, b"b"));
        c.set(b"a", b"11", 0, None).unwrap();
        let a2 = at(&c, b"a");
        assert!(c.segs.item(a1).is_unlinked(), "the overwritten copy");
        assert!(!c.segs.item(a2).is_unlinked() && !c.segs.item(b).is_unlinked());
        assert_eq!(c.segs.item(a2).marks(), 0, "not a mark a rewrite carries");
        assert!(c.delete(b"b"));
        assert!(c.segs.item(b).is_unlinked(), "the deleted item");
        // Overwrite a working set many times over the heap: compaction
        // walks segments full of marked copies.
        for round in 0..40u32 {
            for k in 0..40u32 {
                c.set(format!("k{k}"), round.to_le_bytes().repeat(20), 0, None)
                    .unwrap();
            }
        }
        assert!(c.stats().merges > 0, "compaction ran");
        assert_eq!(c.stats().evictions, 0);
        for k in 0..40u32 {
            assert_eq!(
                c.get(format!("k{k}")).unwrap().value(),
                39u32.to_le_bytes().repeat(20)
            );
        }
        c.check_invariants();
    }

    /// Two keys whose entries share a home bucket, a tag and check bits:
    /// the write path's first candidate for the second is the first's
    /// entry, which must be told apart by the key, on overwrite and delete.
    #[test]
    fn writes_tell_apart_keys_whose_entries_look_alike() {
        // Eight homes: a look-alike is one key in ~65,000.
        let clock = ManualClock::new();
        let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::Merge, &clock);
        assert_eq!(c.table.homes(), 8);
        // Home, tag and check bits, as the table reads them.
        let looks = |key: &[u8]| c.table.entry_look(hash_key(key));
        let a = b"collide-0".to_vec();
        let b = (1..)
            .map(|i| format!("collide-{i}").into_bytes())
            .take(4_000_000)
            .find(|k| looks(k) == looks(&a))
            .expect("a look-alike key");
        c.set(&a, b"a1", 0, None).unwrap();
        c.set(&b, b"b1", 0, None).unwrap();
        c.set(&b, b"b2", 0, None).unwrap();
        assert_eq!(c.get(&a).unwrap().value(), b"a1");
        assert_eq!(c.get(&b).unwrap().value(), b"b2");
        assert!(c.delete(&b));
        assert_eq!(c.get(&a).unwrap().value(), b"a1");
        assert!(c.get(&b).is_none());
        // Absent, with a present look-alike: the search finds nothing.
        assert!(!c.delete(&b));
        assert_eq!(c.len(), 1);
        c.set(&b, b"b3", 0, None).unwrap();
        assert!(c.delete(&a));
        assert_eq!(c.get(&b).unwrap().value(), b"b3");
        assert_eq!(c.len(), 1);
        c.check_invariants();
    }

    /// The edges of `set`'s inline path and `delete`'s one-probe path:
    /// sub-second TTLs round up as `Ttl::to_secs` does, an out-of-range
    /// TTL or key is refused with the old item kept, an overwrite of
    /// another size (with flags, then without) leaves the byte count of
    /// the new item only, and a delete that finds an expired item reports
    /// it absent, unlinks it and counts an expiration.
    #[test]
    fn inline_set_and_delete_edges() {
        let (mut c, clock) = small(Eviction::Merge);
        let item_bytes = |key: usize, value: usize, flags: bool| {
            (item::HEADER_LEN + key + value + if flags { 4 } else { 0 }) as u64
        };
        c.set(b"k", [7u8; 40], 9, Duration::from_millis(1500))
            .unwrap();
        assert_eq!(c.stats().live_bytes, item_bytes(1, 40, true));
        assert_eq!(c.ttl(b"k"), Some(Ttl::After(Duration::from_secs(2))));
        c.set(b"k", [8u8; 3], 0, Duration::from_millis(1500))
            .unwrap();
        assert_eq!(
            (c.stats().items, c.stats().live_bytes),
            (1, item_bytes(1, 3, false))
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(c.get(b"k").unwrap().value(), [8u8; 3]);
        clock.advance(Duration::from_secs(1));
        assert!(c.get(b"k").is_none(), "1.5 s rounds up to 2 s, not more");
        c.check_invariants();

        c.set(b"k", b"v", 0, None).unwrap();
        let too_long = Duration::from_secs(crate::MAX_TTL as u64 + 1);
        assert!(matches!(
            c.set(b"k", b"w", 0, too_long),
            Err(Error::TtlOutOfRange { .. })
        ));
        assert!(matches!(c.set(b"", b"w", 0, None), Err(Error::EmptyKey)));
        assert!(matches!(
            c.set([b'x'; MAX_KEY_LEN + 1], b"w", 0, None),
            Err(Error::KeyTooLong { .. })
        ));
        let huge = vec![0u8; c.max_value_len(1) + 1];
        assert!(matches!(
            c.set(b"k", &huge, 0, None),
            Err(Error::ValueTooLarge { .. })
        ));
        assert_eq!(
            c.get(b"k").unwrap().value(),
            b"v",
            "a refused set keeps the old item"
        );
        c.check_invariants();

        c.set(b"gone", b"soon", 0, Duration::from_secs(5)).unwrap();
        let before = c.stats();
        clock.advance(Duration::from_secs(5));
        assert!(!c.delete(b"gone"), "an expired item is not there to delete");
        let after = c.stats();
        assert_eq!(after.items, before.items - 1, "but it is unlinked");
        assert_eq!(after.expirations, before.expirations + 1);
        assert!(c.delete(b"k"));
        assert_eq!((c.stats().items, c.stats().live_bytes), (0, 0));
        c.check_invariants();
    }

    #[test]
    fn lean_read_counts_like_get_but_leaves_no_mark() {
        let (mut c, clock) = small(Eviction::Merge);
        c.set("k", "value", 9, secs(100)).unwrap();
        c.set("plain", "p", 0, None).unwrap();
        // Move past the write's second so the access can be counted.
        clock.advance(Duration::from_secs(1));
        let got = c.get_value_with("k", |v, flags| (v.to_vec(), flags));
        assert_eq!(got, Some((b"value".to_vec(), 9)));
        assert_eq!(
            c.get_value_with("plain", |v, f| (v.to_vec(), f)),
            Some((b"p".to_vec(), 0))
        );
        assert_eq!(c.get_value_with("absent", |v, _| v.len()), None);
        assert_eq!((c.stats().hits, c.stats().misses), (2, 1));
        // Eviction sees the access: the slot's counter moved.
        let hash = hash_key(b"k");
        let (_, _, loc) = c.find_hashed(b"k", hash).unwrap();
        let (.., info) = c.table.locate(hash, loc).unwrap();
        assert_eq!(hashtable::frequency(info), 1);
        // No meta-protocol mark: a later `mg h` reports no earlier fetch,
        // and the CAS token is the one the write made.
        let cas = c.peek("k").unwrap().cas();
        let found = c.read("k", &GetOpts::default()).unwrap().unwrap();
        assert!(!found.hit_before);
        assert_eq!(found.item.cas(), cas);
        assert!(
            c.read("k", &GetOpts::default())
                .unwrap()
                .unwrap()
                .hit_before
        );
        // Never an expired item: past its deadline it is a miss, unlinked.
        clock.advance(Duration::from_secs(100));
        assert_eq!(c.get_value_with("k", |v, _| v.to_vec()), None);
        assert_eq!(c.stats().misses, 2);
        assert_eq!(c.len(), 1);
        c.check_invariants();
    }

    #[test]
    fn set_checks_like_store_and_an_expired_ttl_removes() {
        let (mut c, _) = small(Eviction::Merge);
        c.set("k", "v", 3, None).unwrap();
        assert_eq!(c.set("", "v", 0, None), Err(Error::EmptyKey));
        let long = [b'k'; MAX_KEY_LEN + 1];
        assert!(matches!(
            c.set(long, "v", 0, None),
            Err(Error::KeyTooLong { .. })
        ));
        let huge = vec![0u8; 1 << 20];
        assert!(matches!(
            c.set("k", &huge, 0, None),
            Err(Error::ValueTooLarge { .. })
        ));
        // A failed set changed nothing.
        assert_eq!(
            c.get_value_with("k", |v, f| (v.to_vec(), f)),
            Some((b"v".to_vec(), 3))
        );
        // Stored already expired: accepted, and nothing is left to read.
        c.set("k", "w", 0, Ttl::Expired).unwrap();
        assert!(c.get("k").is_none());
        assert_eq!(c.len(), 0);
        c.check_invariants();
    }

    #[test]
    fn add_replace_cas_semantics() {
        let (mut c, _) = small(Eviction::Merge);
        assert_eq!(c.replace(b"k", b"x", 0, None), Err(Error::NotStored));
        c.add(b"k", b"1", 0, None).unwrap();
        assert_eq!(c.add(b"k", b"2", 0, None), Err(Error::NotStored));
        assert_eq!(c.get(b"k").unwrap().value(), b"1");
        c.replace(b"k", b"3", 0, None).unwrap();
        let token = c.get(b"k").unwrap().cas();
        assert_eq!(c.cas(b"k", b"4", 0, None, token + 1), Err(Error::Exists));
        assert_eq!(c.cas(b"nope", b"4", 0, None, token), Err(Error::NotFound));
        c.cas(b"k", b"4", 0, None, token).unwrap();
        assert_eq!(c.cas(b"k", b"5", 0, None, token), Err(Error::Exists));
        assert_eq!(c.get(b"k").unwrap().value(), b"4");
    }

    #[test]
    fn cas_is_per_item_not_per_bucket() {
        // Eight buckets: keys share buckets, as in Pelikan's false conflicts.
        // Writing one key must not invalidate another's token.
        let clock = ManualClock::new();
        let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::default(), &clock);
        c.set(b"x", b"1", 0, None).unwrap();
        c.set(b"y", b"1", 0, None).unwrap();
        let tx = c.get(b"x").unwrap().cas();
        let ty = c.get(b"y").unwrap().cas();
        assert_ne!(tx, ty);
        c.set(b"y", b"2", 0, None).unwrap();
        c.cas(b"x", b"2", 0, None, tx).unwrap();
    }

    #[test]
    fn append_prepend_incr_decr_touch() {
        let (mut c, clock) = small(Eviction::Merge);
        assert_eq!(c.append(b"k", b"x"), Err(Error::NotStored));
        c.set(b"k", b"mid", 9, secs(100)).unwrap();
        c.append(b"k", b"-end").unwrap();
        c.prepend(b"k", b"start-").unwrap();
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.flags()), (&b"start-mid-end"[..], 9));
        assert!(item.ttl().duration().unwrap() <= Duration::from_secs(100));
        assert_eq!(c.incr(b"k", 1), Err(Error::NotNumeric));
        assert_eq!(c.incr(b"n", 1), Err(Error::NotFound));
        c.set(b"n", b"18446744073709551615", 0, None).unwrap();
        assert_eq!(c.incr(b"n", 2), Ok(1), "wraps at 2^64");
        assert_eq!(c.decr(b"n", 5), Ok(0), "floors at 0");
        assert_eq!(c.incr(b"n", 123), Ok(123));
        assert_eq!(c.get(b"n").unwrap().value(), b"123");
        c.set(b"big", b"99999999999999999999", 0, None).unwrap();
        assert_eq!(c.incr(b"big", 1), Err(Error::NotNumeric), "over u64");
        c.set(b"t", b"v", 0, secs(10)).unwrap();
        c.touch(b"t", secs(1000)).unwrap();
        clock.advance(Duration::from_secs(500));
        assert_eq!(c.get(b"t").unwrap().value(), b"v");
        c.touch(b"t", None).unwrap();
        assert_eq!(c.ttl(b"t"), Some(Ttl::Never));
        assert_eq!(c.touch(b"gone", secs(1)), Err(Error::NotFound));
        c.check_invariants();
    }

    #[test]
    fn items_expire_never_late_and_zero_means_never() {
        let (mut c, clock) = small(Eviction::Merge);
        c.set(b"short", b"v", 0, secs(10)).unwrap();
        c.set(b"forever", b"v", 0, None).unwrap();
        c.set(b"zero", b"v", 0, Some(Duration::ZERO)).unwrap();
        let left = c.ttl(b"short").unwrap().duration().unwrap();
        assert!(left <= Duration::from_secs(10) && left >= Duration::from_secs(9));
        clock.advance(Duration::from_secs(9));
        assert!(c.get(b"short").is_some());
        clock.advance(Duration::from_secs(1));
        assert!(c.get(b"short").is_none(), "at the deadline it is gone");
        clock.advance(Duration::from_secs(ttl::MAX_TTL as u64 * 3));
        assert_eq!(c.expire().items, 0);
        assert_eq!(c.get(b"forever").unwrap().value(), b"v");
        assert_eq!(c.get(b"zero").unwrap().ttl(), Ttl::Never);
        c.check_invariants();
    }

    #[test]
    fn expire_frees_whole_segments() {
        let (mut c, clock) = small(Eviction::Merge);
        for i in 0..200u32 {
            c.set(format!("k{i}").as_bytes(), [7u8; 40], 0, secs(60))
                .unwrap();
        }
        let used = c.stats().segments_used;
        assert!(used >= 2);
        assert_eq!(c.expire(), Expired::default());
        clock.advance(Duration::from_secs(60));
        let freed = c.expire();
        assert_eq!(freed.items, 200);
        assert_eq!(freed.segments as u64, used);
        let s = c.stats();
        assert_eq!((s.items, s.segments_used, s.expirations), (0, 0, 200));
        c.check_invariants();
    }

    #[test]
    fn delayed_flush_drops_only_older_items() {
        let (mut c, clock) = small(Eviction::Merge);
        c.set(b"old", b"v", 0, None).unwrap();
        c.flush_after(Duration::from_secs(5));
        assert!(c.get(b"old").is_some());
        clock.advance(Duration::from_secs(5));
        assert!(c.get(b"old").is_none());
        c.set(b"new", b"v", 0, None).unwrap();
        assert!(c.get(b"new").is_some());
        c.flush();
        assert!(c.is_empty());
    }

    #[test]
    fn bad_input_is_a_clear_error_and_keeps_the_old_value() {
        let (mut c, _) = small(Eviction::Merge);
        c.set(b"k", b"old", 0, None).unwrap();
        assert_eq!(c.set(b"", b"v", 0, None), Err(Error::EmptyKey));
        let long = [b'x'; 251];
        assert_eq!(
            c.set(long, b"v", 0, None),
            Err(Error::KeyTooLong { len: 251 })
        );
        assert!(c.set(&long[..250], b"v", 0, None).is_ok());
        let huge = vec![0u8; 5000];
        assert!(matches!(
            c.set(b"k", &huge, 0, None),
            Err(Error::ValueTooLarge { len: 5000, .. })
        ));
        assert!(matches!(
            c.replace(b"k", &huge, 0, None),
            Err(Error::ValueTooLarge { .. })
        ));
        assert!(matches!(
            c.append(b"k", &huge),
            Err(Error::ValueTooLarge { .. })
        ));
        assert_eq!(
            c.set(b"k", b"v", 0, secs(ttl::MAX_TTL as u64 + 1)),
            Err(Error::TtlOutOfRange {
                secs: ttl::MAX_TTL as u64 + 1
            })
        );
        assert_eq!(c.get(b"k").unwrap().value(), b"old");
        // The largest value the error reports as allowed really fits.
        let max = c.max_value_len(1);
        c.set(b"m", vec![1u8; max], 0, None).unwrap();
        let err = c.set(b"m", vec![1u8; max + 1], 0, None).unwrap_err();
        assert_eq!(err, Error::ValueTooLarge { len: max + 1, max });
        // The message names the setting that takes larger values.
        assert!(err.to_string().contains("segment_size"), "{err}");
        c.check_invariants();
    }

    /// `get` and the lean read on each of their paths: a settled table
    /// (the home probe, then the search from it), an expired item found
    /// there, a growing table and a pending delayed flush (the general
    /// path): the same answers, hits and misses counted once each.
    #[test]
    fn reads_answer_alike_settled_growing_and_with_a_flush_pending() {
        let clock = ManualClock::new();
        let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &clock);
        // Reads every key present and a few absent ones both ways; checks
        // the answers and that each read counted exactly one hit or miss.
        fn read_all(c: &mut Segcache, n: u32) {
            for i in 0..n + 20 {
                let key = format!("key{i}");
                let want = (i < n).then(|| format!("v{i}").into_bytes());
                let before = c.stats();
                let got = c.get(&key).map(|item| item.value().to_vec());
                assert_eq!(got, want, "{key}");
                let lean = c.get_value_with(&key, |v, _| v.to_vec());
                assert_eq!(lean, want, "{key}");
                let after = c.stats();
                let hits = 2 * (i < n) as u64;
                assert_eq!(
                    (after.hits - before.hits, after.misses - before.misses),
                    (hits, 2 - hits)
                );
            }
        }
        let mut n = 0;
        let mut grew_mid_read = false;
        while n < 1500 {
            c.set(format!("key{n}"), format!("v{n}"), 0, None).unwrap();
            n += 1;
            if c.table.is_growing() && !grew_mid_read {
                grew_mid_read = true;
                read_all(&mut c, n);
            }
        }
        assert!(grew_mid_read, "the table never grew");
        while c.table.is_growing() {
            c.get(b"key0").unwrap();
        }
        read_all(&mut c, n);
        // An item with a TTL, read after it expired: a miss and an
        // expiration, and it is gone.
        c.set(b"short", b"v", 0, secs(2)).unwrap();
        assert!(c.get(b"short").is_some());
        clock.advance(Duration::from_secs(3));
        let before = c.stats();
        assert!(c.get(b"short").is_none());
        assert!(c.get_value_with(b"short", |v, _| v.len()).is_none());
        let after = c.stats();
        assert_eq!(after.misses - before.misses, 2);
        assert_eq!(after.expirations - before.expirations, 1);
        assert_eq!(c.len(), n as usize);
        // A delayed flush pending: reads take the general path and still
        // find everything until it falls due, then nothing.
        c.flush_after(Duration::from_secs(10));
        read_all(&mut c, n);
        clock.advance(Duration::from_secs(10));
        assert!(c.get(b"key0").is_none());
        assert!(c.is_empty());
        c.check_invariants();
    }

    #[test]
    fn a_small_table_grows_while_the_heap_has_room() {
        // 8 buckets (56 slots + 49 spare) to start; 2000 items of ~13 bytes
        // fit the 64 KiB heap easily, so the table grows to hold them all.
        let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &ManualClock::new());
        let before = c.stats().hash_table_bytes;
        for i in 0..2000u32 {
            c.set(format!("key{i}").as_bytes(), b"v", 0, None).unwrap();
            if i % 250 == 0 {
                c.check_invariants();
            }
        }
        assert_eq!(c.len(), 2000);
        for i in 0..2000u32 {
            assert!(c.get(format!("key{i}").as_bytes()).is_some(), "key{i}");
        }
        let s = c.stats();
        assert_eq!((s.evictions, s.items), (0, 2000));
        assert!(
            s.hash_table_bytes > 10 * before,
            "{} -> {}",
            before,
            s.hash_table_bytes
        );
        c.check_invariants();
    }

    #[test]
    fn compaction_moves_runs_of_items_with_their_bytes_intact() {
        // Overwrites in a small heap: compaction packs segments whose live
        // items sit back to back (moved in runs). Every key present must
        // read back its latest value, byte for byte, with its flags.
        let mut c = Segcache::builder()
            .heap_size(64 << 10)
            .segment_size(4 << 10)
            .hash_power(8)
            .build()
            .unwrap();
        let mut latest: std::collections::HashMap<u64, (Vec<u8>, u32)> = Default::default();
        let mut rng = 7u64;
        for round in 0..6_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // A few hot keys rewritten often, the rest rarely: segments keep
            // long runs of live cold items between dead hot versions.
            let k = if rng % 4 == 0 { rng % 8 } else { rng % 250 };
            let len = 20 + (rng >> 40) as usize % 90;
            let value: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
            let flags = round;
            c.set(format!("key-{k}"), &value, flags, None).unwrap();
            latest.insert(k, (value, flags));
        }
        assert!(c.stats().merges > 10, "merges ran: {}", c.stats().merges);
        let mut present = 0;
        for (k, (value, flags)) in &latest {
            if let Some(item) = c.get(format!("key-{k}")) {
                assert_eq!(item.value(), &value[..], "key-{k}");
                assert_eq!(item.flags(), *flags, "key-{k}");
                present += 1;
            }
        }
        assert!(present > 200, "{present} of {} keys kept", latest.len());
        c.check_invariants();
    }

    #[test]
    fn table_grows_past_hash_power_for_small_items() {
        // The issue-14 reproduction: 1.5 M one-byte values in a 64 MiB heap
        // stopped at the default table's slots (917,504); the heap, not the
        // table, must decide what is kept.
        let mut c = Segcache::builder().heap_size(64 << 20).build().unwrap();
        let start = c.stats().hash_table_bytes;
        let n = 1_500_000u32;
        for i in 0..n {
            c.set(format!("k{i}").as_bytes(), b"x", 0, None).unwrap();
        }
        let s = c.stats();
        assert_eq!((s.items, s.evictions), (n as u64, 0));
        assert!(s.hash_table_bytes > start);
        for i in (0..n).step_by(7) {
            assert_eq!(c.get(format!("k{i}").as_bytes()).unwrap().value(), b"x");
        }
        c.check_invariants();
    }

    #[test]
    fn segments_of_more_tiny_items_than_the_merge_scratch_holds_are_evicted_whole() {
        // Items of 6-9 bytes (1-4 byte keys, empty values): an 8 KiB segment
        // holds ~1,000 of them, more than the merge scratch's records, so no
        // evaluation can read one; eviction frees such segments whole and
        // every write still succeeds.
        let mut c = small_cache(
            128 << 10,
            8 << 10,
            14,
            Eviction::default(),
            &ManualClock::new(),
        );
        assert!(c.merge_scratch.capacity() < (8 << 10) / 9);
        for i in 0..200_000u32 {
            let key = (i % 40_000).to_le_bytes();
            let len = 1 + (i % 4) as usize;
            c.set(&key[..len], b"", 0, None).unwrap();
            if i % 20_000 == 0 {
                c.check_invariants();
            }
        }
        assert!(c.stats().evictions > 0);
        assert!(c.len() > 5_000, "{} items", c.len());
        c.check_invariants();
    }

    #[test]
    fn a_full_heap_grows_its_table_when_items_turn_small() {
        // A heap first filled (and kept full by merge eviction) with ~900 B
        // items from a table of 8 buckets, then written with small items:
        // the heap holds ~20x more of those than the table has slots, so the
        // table grows instead of dropping entries from its full windows.
        let mut c = small_cache(
            256 << 10,
            8 << 10,
            3,
            Eviction::default(),
            &ManualClock::new(),
        );
        let big = vec![7u8; 900];
        for i in 0..2_000u32 {
            c.set(format!("big{i}").as_bytes(), &big, 0, None).unwrap();
        }
        assert_eq!(c.segs.free_count(), 0, "the heap is full");
        let slots = c.table.slots();
        let n = 40_000u32;
        for i in 0..n {
            c.set(format!("k{i}").as_bytes(), b"v", 0, None).unwrap();
        }
        let s = c.stats();
        // 8-12 B items: the heap's 256 KiB hold over 20k of them. Without
        // growth at a full heap the table kept its 8 buckets (343 slots)
        // and held ~300 items.
        assert!(
            c.table.slots() > 20 * slots,
            "{} -> {} slots",
            slots,
            c.table.slots()
        );
        assert!(
            s.items > 15_000,
            "{} items, {} live bytes",
            s.items,
            s.live_bytes
        );
        // Every counted item is a key that reads back.
        let small = (0..n)
            .filter(|i| c.get(format!("k{i}").as_bytes()).is_some())
            .count();
        let big = (0..2_000u32)
            .filter(|i| c.get(format!("big{i}").as_bytes()).is_some())
            .count();
        assert_eq!((small + big) as u64, s.items);
        // The newest keys stay: probation segments too small-itemed for an
        // evaluation are freed whole, oldest first (chain order, not the
        // creation second they all share on this clock).
        let newest = (n - 2_000..n)
            .filter(|i| c.get(format!("k{i}").as_bytes()).is_some())
            .count();
        assert!(newest > 1_900, "{newest} of the newest 2000 keys");
        c.check_invariants();
    }

    #[test]
    fn full_hash_table_gives_back_the_reserved_space() {
        let (mut c, _) = {
            let clock = ManualClock::new();
            let c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &clock);
            (c, clock)
        };
        c.table.growth_disabled = true;
        let mut stored = 0;
        let mut full = 0;
        for i in 0..200u32 {
            match c.set(format!("key{i}").as_bytes(), b"value", 0, None) {
                Ok(()) => stored += 1,
                Err(Error::HashTableFull) => full += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(stored + full, 200);
        assert!(
            full > 0 && stored > 50 && stored <= 105,
            "8 homes x 7 slots, 7 spare buckets: {stored}"
        );
        let s = c.stats();
        // Only the stored items' bytes were consumed.
        let used: u32 = c.segs.headers.iter().map(|h| h.write_offset).sum();
        assert_eq!(used as u64, s.live_bytes);
        c.check_invariants();
    }

    #[test]
    fn eviction_none_refuses_writes_when_full() {
        let (mut c, _) = small(Eviction::None);
        let mut i = 0u32;
        let err = loop {
            if let Err(e) = c.set(format!("k{i}").as_bytes(), [1u8; 100], 0, None) {
                break e;
            }
            i += 1;
        };
        assert_eq!(err, Error::OutOfMemory);
        assert!(c.get(b"k0").is_some(), "nothing was evicted");
        assert_eq!(c.stats().evictions, 0);
        c.check_invariants();
    }

    #[test]
    fn an_overwrite_that_finds_no_room_changes_nothing() {
        // The write path reads the key's table entry only after it has
        // reserved room and copied the item in; a reserve that fails must
        // leave the old item, the table and every count as they were.
        let (mut c, _) = small(Eviction::None);
        let mut n = 0u32;
        while c
            .set(format!("k{n}").as_bytes(), [1u8; 100], 7, None)
            .is_ok()
        {
            n += 1;
        }
        assert!(n > 10, "{n} items fit");
        let before = c.stats();
        let used: Vec<u32> = c.segs.headers.iter().map(|h| h.write_offset).collect();
        for i in [0, n / 2, n - 1] {
            let key = format!("k{i}");
            assert_eq!(
                c.set(key.as_bytes(), [2u8; 100], 9, None),
                Err(Error::OutOfMemory)
            );
            let item = c.get(key.as_bytes()).expect("the old item stays");
            assert_eq!((item.value(), item.flags()), (&[1u8; 100][..], 7));
        }
        let after = c.stats();
        assert_eq!(
            (after.items, after.live_bytes, after.evictions),
            (before.items, before.live_bytes, before.evictions)
        );
        let used_after: Vec<u32> = c.segs.headers.iter().map(|h| h.write_offset).collect();
        assert_eq!(used, used_after, "no bytes were taken");
        // The table still finds and removes the old items.
        assert!(c.delete(b"k0"));
        assert!(c.get(b"k0").is_none());
        c.check_invariants();
    }

    #[test]
    fn counters_parse_as_memcached_reads_them() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"000000000000000000042"), Some(42));
        assert_eq!(parse_counter(b"  5"), Some(5));
        assert_eq!(parse_counter(b"+5"), Some(5));
        assert_eq!(parse_counter(b"5 "), Some(5));
        assert_eq!(
            parse_counter(b"5 x"),
            Some(5),
            "only the next byte is checked"
        );
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"-18446744073709551615"), Some(1));
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b" "), None);
        assert_eq!(parse_counter(b"12a"), None);
        assert_eq!(parse_counter(b"++5"), None);
        assert_eq!(parse_counter(b"x5"), None);
    }
}

//! The write path of [`Segcache`]: reserve space in the tail segment of
//! the item's TTL bucket (evicting when the heap is full), copy the item
//! in, then point the table at it; and the commands built on it (store
//! modes, get-or-insert, incr/decr, touch).
//!
//! Must never: repoint the table before the new item is whole, or change
//! anything when a write fails (the old item stays readable).

use super::*;

/// An overwrite of an item in main is made in place only in a segment
/// opened in the newest 1/`RECENT_MAIN_SHARE` of its bucket's age
/// ([`Segcache::recently_promoted`]). Elsewhere in main, in place cost
/// hits at real rate (a rewritten key kept a place the next merges reach
/// first: cluster 22 +0.0075); in none of main, cluster 7 at 2 TTL spans
/// kept dead copies a recent segment could have saved. Measured on the
/// Twitter-like rows, seeds 42 and 1-3 (BENCHMARKS.md §1f, sixteenth
/// round): at 8, cluster 7 at 2 spans 0.0003-0.0010 fewer misses on all
/// four seeds, the other rows within ±0.0005; at 2 and 4 real-rate and
/// no-TTL rows lost up to 0.0027.
const RECENT_MAIN_SHARE: u64 = 8;

/// True if an item whose place in the log gives it `deadline` (0: none)
/// may be written over in place by a write of `ttl` seconds (0: none) at
/// `now`, keeping that deadline. Without a TTL: only an item without a
/// deadline. With one: the item must be live and its deadline at or
/// before the one asked for, earlier by no more than the precision every
/// item of that TTL is held to ([`ttl::spread`]: a segment expires with
/// its earliest item), and no more than the small pool's
/// [`ttl::SMALL_SPREAD`] (overwrites in place are made in probation
/// segments and in main segments promoted from it recently); a write
/// that would leave it to live longer than asked, or die earlier than
/// that, is appended as a new item.
#[inline(always)]
fn keeps_deadline(deadline: u32, ttl: u32, now: u32) -> bool {
    if ttl == 0 {
        return deadline == 0;
    }
    let wanted = now.saturating_add(ttl);
    let early = ttl::spread(ttl::bucket_for(ttl)).min(ttl::SMALL_SPREAD);
    deadline > now && deadline <= wanted && wanted - deadline <= early
}

/// Reads a stored number as memcached's incr/decr do (`strtoull` and its
/// checks): white space and one sign may lead, then digits; the byte after
/// them must be white space or the end (what follows is not read). A `-`
/// is taken only when the wrapped result is not negative as an `i64`, so
/// `-0` is 0 and `-1` is refused. Values over `u64::MAX` are refused.
pub(super) fn parse_counter(bytes: &[u8]) -> Option<u64> {
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
pub(super) fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
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

impl Segcache {
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
    ///
    /// An overwrite without a TTL, of an item without one and of the same
    /// size, is written over the old item (no log space taken, nothing
    /// left to reclaim) unless a CAS token of an item in the same segment
    /// has been handed out ([`Item::cas`], [`Item::to_owned`],
    /// `ShardedCache::gets`; a read, store or arithmetic update through
    /// [`execute`](Self::execute) that asks for one:
    /// [`GetOpts::token`](crate::ops::GetOpts::token), [`Store::token`],
    /// [`ArithOpts::token`]) since the segment was last emptied: such an
    /// overwrite is appended, so that each version has a token of its own.
    /// A restored cache counts every restored segment as having tokens
    /// out. A plain [`Store`] without a TTL does the same.
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
        if self
            .overwrite_in_place(key, hash, value, &meta, size, secs as u32, now)
            .is_some()
        {
            return Ok(());
        }
        self.write_sized(key, hash, [value, &[]], &meta, size, secs as u32, now)
            .map(drop)
    }

    /// Writes the new version of an item over the old one when the key's
    /// item is as large as the new one (`size`), keeps a deadline the new
    /// write of `ttl` seconds at `now` may have ([`keeps_deadline`]: none
    /// for a write without a TTL), lies in a segment of the small
    /// (probation) pool, of a cache without one, or in a main segment
    /// promoted recently ([`recently_promoted`](Self::recently_promoted)),
    /// holds its value where the new one will (both in the heap, or both
    /// external: `meta.external`) and is the table's first candidate for
    /// the key (so the table is not growing), and no CAS token naming a
    /// place in the item's segment has been handed out
    /// ([`Segments::tokens_out`](crate::segments::Segments::tokens_out)):
    /// the item's location if it did. An external old value is released
    /// here, as `link` releases an overwritten one; the caller counts the
    /// new one. Nothing moves, so nothing is left
    /// dead: the log append, the old copy's unlinking and the later
    /// reclaim of its bytes are all skipped (64-byte sets 1.2-1.5x as fast
    /// with a million keys, 2x with 100,000: BENCHMARKS.md §2). The item
    /// keeps its place in its probation segment, as an updated entry of
    /// S3-FIFO keeps its place in its queue; its access count is raised as
    /// a rewrite's is in the log (`eviction::REWRITE_FREQ`), so its
    /// evaluation promotes it, and its marks start clear, as a new item's
    /// do. An item in an older main segment goes to the log instead, to
    /// start a new trip through probation: kept in its old main place,
    /// which the next merges reach first, it cost the Twitter-like
    /// clusters 19 and 22 up to 0.012 of miss ratio (BENCHMARKS.md §1f).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // the write's own, as `write_sized` takes them
    pub(crate) fn overwrite_in_place(
        &mut self,
        key: &[u8],
        hash: u64,
        value: &[u8],
        meta: &Meta,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> Option<Location> {
        let (at, info, old_size) = self.first_match(key, hash)?;
        let old = hashtable::location(info);
        if old_size != size
            || self.segs.item(old).is_external() != meta.external
            || !keeps_deadline(self.segs.deadline(old), ttl, now)
            || (self.admission.is_main(old.seg) && !self.recently_promoted(old.seg, now))
            || self.segs.tokens_out(old.seg)
        {
            return None;
        }
        if meta.external {
            // The old handle leaves with the bytes about to be written over.
            self.release_external(old);
        }
        let rewrite_floor = self.rewrite_floor();
        // SAFETY: `old` came from the table, so it names a whole item of
        // `old_size` bytes inside its segment's written bytes (the table
        // points at nothing else), and `size == old_size`. No view of the
        // item can be alive (`&mut self`), and no token naming its
        // location was handed out (`tokens_out`), so no caller can tell
        // the new version from a copy written elsewhere, but by its value.
        unsafe { item::write_at(self.segs.reserved_ptr(old, size), key, [value, &[]], meta) };
        debug_assert_eq!(self.segs.item(old).size(), size);
        debug_assert_eq!(self.segs.item(old).value(), value);
        self.table.replace_first(at, info, old, rewrite_floor);
        Some(old)
    }

    /// True if main segment `seg` was opened in the newest
    /// 1/[`RECENT_MAIN_SHARE`] of its TTL bucket's age (the time since
    /// its oldest segment was opened): a probation segment promoted
    /// soon after the tail filled it, whose items are about as recent as
    /// a new trip through probation would make a rewritten one. Merges
    /// pack into their run's existing segments, so a segment that merges
    /// have kept for long is old here, however recent what they moved
    /// into it. `now` is the write's time, 0 for a write without a TTL,
    /// which has not read the clock: then it is read here (only for an
    /// overwrite of an item in main).
    #[inline(never)]
    fn recently_promoted(&self, seg: u32, now: u32) -> bool {
        let h = &self.segs.headers[seg as usize];
        // The segment is linked in its bucket, which therefore has a head.
        let head = self.ttl.buckets[h.ttl_bucket as usize].head;
        let Some(oldest) = self.segs.headers.get(head as usize) else {
            debug_assert!(
                false,
                "segment {seg} in bucket {} without a head",
                h.ttl_bucket
            );
            return false;
        };
        let oldest = oldest.create_at;
        let now = if now == 0 { self.clock.now() } else { now };
        let age = u64::from(now.saturating_sub(h.create_at));
        age * RECENT_MAIN_SHARE < u64::from(now.saturating_sub(oldest))
    }

    /// The fewest accesses a rewritten key's entry starts with. Merge
    /// eviction: [`REWRITE_FREQ`](crate::eviction::REWRITE_FREQ) (its
    /// count carries over from the old version, raised to this), so its
    /// evaluation promotes it, as an updated entry of quick_cache or
    /// S3-FIFO keeps its place; the other policies keep no counts.
    #[inline(always)]
    fn rewrite_floor(&self) -> u8 {
        match self.eviction {
            Eviction::Merge => crate::eviction::REWRITE_FREQ,
            _ => 0,
        }
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
    /// CAS token if the store asks for it ([`Store::token`]; else 0, as
    /// when its TTL was [`Ttl::Expired`]). The condition (mode,
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
        Ok(stored.map_or(0, |loc| self.token_if(store.token, loc)))
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
        if store.external {
            if concat {
                return Err(Error::Unsupported(
                    "append and prepend take bytes, not an external value",
                ));
            }
            self.check_external(value)?;
        }
        // Some(0): never; None: already expired. Append and prepend keep
        // the item's own TTL.
        let new_meta = Meta {
            flags: store.flags,
            external: store.external,
            ..Meta::default()
        };
        let (secs, size) = if concat {
            (Some(0), 0)
        } else {
            let secs = live_secs(store.ttl)?;
            (secs, self.check_size(key.len(), value.len(), &new_meta)?)
        };
        let plain = store.mode == StoreMode::Set && store.cas.is_none() && secs.is_some();
        let mut read_at = None;
        if let (true, Some(ttl), false, None) = (plain, secs, store.external, self.flush_at) {
            // Without a TTL no time is needed (as in `set_hashed`).
            let now = if ttl == 0 { 0 } else { self.now() };
            if let Some(loc) = self.overwrite_in_place(key, hash, value, &new_meta, size, ttl, now)
            {
                return Ok(Some(loc));
            }
            read_at = (ttl != 0).then_some(now);
        }
        // No flush is due in the branch above: its reading stands.
        let now = read_at.unwrap_or_else(|| self.now());
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
            if raw.is_external() {
                return Err(Error::Unsupported(
                    "append and prepend cannot extend an external value",
                ));
            }
            let meta = Meta {
                flags: raw.client_flags(),
                cas: None,
                marks,
                external: false,
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
            // Already expired: the store succeeds and leaves nothing
            // readable (an external value is handed back at once).
            if let Some(loc) = found {
                self.unlink_item(hash, loc);
            }
            if store.external {
                self.externals.give_back(value);
            }
            return Ok(None);
        };
        let meta = Meta { marks, ..new_meta };
        let loc = self.write(key, hash, [value, &[]], &meta, ttl, now)?;
        if !store.external {
            return Ok(Some(loc));
        }
        self.count_external(loc);
        if self.externals_fit() {
            return Ok(Some(loc));
        }
        self.fit_externals();
        // Making room for the weight may have moved the item (or, in a
        // heap too small for it, evicted it).
        Ok(self.find_hashed(key, hash).map(|(.., at)| at))
    }

    /// [`write_sized`](Self::write_sized) for the external direct path
    /// (`crate::external`), whose item size is checked.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn write_item(
        &mut self,
        key: &[u8],
        hash: u64,
        value: &[u8],
        meta: &Meta,
        size: usize,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        self.write_sized(key, hash, [value, &[]], meta, size, ttl, now)
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
    /// one step; returns the new value and the item's new CAS token if
    /// `opts` asks for it ([`ArithOpts::token`]; else 0).
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
                    Ok((initial, self.token_if(opts.token, loc)))
                }
                None => Ok((initial, 0)),
            };
        };
        // memcached's order: an empty value is refused before the token is
        // compared, the number is read after. An external value is a
        // handle, not digits.
        if self.segs.item(loc).value().is_empty() || self.segs.item(loc).is_external() {
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
            external: false,
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
        Ok((new, self.token_if(opts.token, loc)))
    }

    /// The CAS token of the item at `loc` if `wanted`, else 0 (no token
    /// made: see [`Store::token`]).
    #[inline(always)]
    fn token_if(&self, wanted: bool, loc: Location) -> u64 {
        if wanted {
            self.cas_at(loc)
        } else {
            0
        }
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
        // A touch counts as a fetch (memcached's `h`); the mark moves with
        // the item if `retouch` rewrites it.
        self.mark(loc, item::FETCHED);
        self.retouch(key, hash, loc, secs, now).map(drop)
    }

    /// Gives the item at `loc` a new TTL (`Some(0)`: never, `None`: remove
    /// it), keeping its value, flags, marks and CAS token; returns where it
    /// is now. An item already in a segment that expires within the TTL's
    /// precision of the new deadline stays where it is.
    pub(super) fn retouch(
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
        // The moved item keeps its token, which names its old place: only
        // if a token naming a place in that segment may be out.
        if self.segs.tokens_out(loc.seg) {
            meta.cas = Some(self.cas_at(loc));
        }
        self.rewrite(key, hash, loc, &meta, ttl, now).map(Some)
    }

    /// Writes the item at `loc` again, its value unchanged, with `meta`
    /// (whose `external` must be the item's) and `ttl`: a move, so an
    /// external value changes hands from the old copy to the new one and
    /// is never released. The old copy gives up the [`EXTERNAL`] bit
    /// before the write (which may evict or move it while making room);
    /// if the write fails, the copy the table still holds, wherever it is
    /// now, takes it back, and a value whose copy was evicted meanwhile
    /// is released.
    ///
    /// [`EXTERNAL`]: item::EXTERNAL
    pub(super) fn rewrite(
        &mut self,
        key: &[u8],
        hash: u64,
        loc: Location,
        meta: &Meta,
        ttl: u32,
        now: u32,
    ) -> Result<Location, Error> {
        debug_assert_eq!(meta.external, self.segs.item(loc).is_external());
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        value.extend_from_slice(self.segs.item(loc).value());
        if meta.external {
            self.segs.set_external(loc, false);
        }
        let written = self.write(key, hash, [&value, &[]], meta, ttl, now);
        if meta.external && written.is_err() {
            match self.find_hashed(key, hash) {
                Some((.., at)) => self.segs.set_external(at, true),
                None => self.externals.release(&value),
            }
        }
        self.scratch = value;
        written
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
    pub(super) fn write(
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
        let rewrite_floor = self.rewrite_floor();
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
        if unsafe { self.segs.mark_unlinked(old) } {
            self.release_external(old);
        }
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

    /// A free segment: from the free list, else one withheld for external
    /// values that no longer need it, else by expiring, else by evicting.
    fn alloc_segment(&mut self, bucket: usize, now: u32) -> Result<u32, Error> {
        for _ in 0..self.segs.count() + 2 {
            if let Some(id) = self.segs.alloc(now, bucket as u16) {
                return Ok(id);
            }
            if self.segs.withheld_count() > self.withheld_wanted() {
                self.segs.unwithhold();
                self.pools_share_usable_heap();
                continue;
            }
            if self.expire_at(now).segments == 0 {
                self.evict(now)?;
            }
        }
        Err(Error::OutOfMemory)
    }
}

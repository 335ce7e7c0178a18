//! The read path of [`Segcache`]: look a key up, check its deadline
//! (an expired item found here is unlinked on the spot), count the access
//! for eviction, and hand the item out borrowed or copied.
//!
//! Must never: serve an item past its deadline, or rewrite an item
//! itself: a read bumps the table's access counter and may set
//! meta-protocol marks in the item's header; a get-and-touch writes the
//! new version through the write path (`write.rs`).

use super::*;

impl Segcache {
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
        self.read_marked(key, hash).map(|(item, _)| item)
    }

    /// A plain read: `get`'s item and the marks it had before this read
    /// (which sets `fetched`). In a settled table the key compare places
    /// the value and reads the meta byte, so neither is decoded again.
    #[inline(always)]
    fn read_marked(&mut self, key: &[u8], hash: u64) -> Option<(Item<'_>, u8)> {
        if self.is_unsettled() {
            return self.read_unsettled(key, hash);
        }
        let probe = self.table.probe_home(hash);
        if probe.proves_absent() {
            self.counters.misses += 1;
            return None;
        }
        let (loc, now, span) = self.hit_probed_by(
            hash,
            probe,
            #[inline(always)]
            // SAFETY: `at` comes from the table, whose every location
            // names a whole item inside its segment.
            move |segs, at| unsafe { segs.value_span_if_key(at, key) },
        )?;
        // SAFETY: the compare found `loc`'s item and its value at `span`
        // just now, and a hit changes no segment (it only bumps the
        // table's counter; an expired item returned `None`).
        let (raw, segs, value) = unsafe { self.segs.fetch_spanned(loc, span) };
        let found = Item {
            raw,
            segs,
            loc,
            now,
            value,
        };
        Some((found, span.bits & item::MARKS))
    }

    /// [`read_marked`](Self::read_marked) while a delayed flush is pending
    /// or the table grows.
    #[cold]
    #[inline(never)]
    fn read_unsettled(&mut self, key: &[u8], hash: u64) -> Option<(Item<'_>, u8)> {
        let (loc, now) = self.hit_slow(key, hash)?;
        let (raw, segs, marks) = self.segs.fetch(loc);
        Some((Item::new(raw, segs, loc, now), marks))
    }

    /// True while a read (or a plain delete) must take the general path: a
    /// delayed flush is pending (it runs first) or the table grows (a
    /// drain step is taken, and the key may be in either table). One flag
    /// ([`refresh_unsettled`](Self::refresh_unsettled) keeps it), checked
    /// against both in debug builds.
    #[inline(always)]
    pub(super) fn is_unsettled(&self) -> bool {
        debug_assert_eq!(
            self.unsettled,
            self.flush_at.is_some() || self.table.is_growing(),
            "unsettled not refreshed"
        );
        self.unsettled
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
    #[inline(always)]
    pub(crate) fn get_value_hashed<R>(
        &mut self,
        key: &[u8],
        hash: u64,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Option<R> {
        if self.is_unsettled() {
            let (loc, _) = self.hit_slow(key, hash)?;
            let raw = self.segs.item(loc);
            return Some(f(raw.value(), raw.client_flags()));
        }
        let probe = self.table.probe_home(hash);
        if probe.proves_absent() {
            self.counters.misses += 1;
            return None;
        }
        let (_loc, _, span) = self.hit_probed_by(
            hash,
            probe,
            #[inline(always)]
            // SAFETY: `at` comes from the table, whose every location
            // names a whole item inside its segment.
            move |segs, at| unsafe { segs.value_span_if_key(at, key) },
        )?;
        // SAFETY: the compare found `span` just now, and a hit changes no
        // segment (it only bumps the table's counter; an expired item
        // returned `None`).
        let (value, flags) = unsafe { self.segs.value_at(span, key.len()) };
        debug_assert_eq!(
            (value, flags),
            (
                self.segs.item(_loc).value(),
                self.segs.item(_loc).client_flags()
            )
        );
        Some(f(value, flags))
    }

    /// The counted part of a plain read, in a settled table (no flush
    /// pending, no growth), from a [`HashTable::probe_home`] of `hash`:
    /// finds the key's live item, counts a hit (and the access, for
    /// eviction) or a miss, and returns the item's location, the time it
    /// was read at and what `compare` answered for it. `compare` matches
    /// exactly the items whose key is the one looked up (an empty or
    /// over-long key matches none: lengths are compared first, so such a
    /// key needs no check of its own here) and also answers what it read
    /// of the item it matched (a [`ValueSpan`](crate::item::ValueSpan)
    /// for the reads here). A miss whose tags say no reads one control
    /// word and no clock; the clock is read once an entry is found.
    #[inline(always)]
    fn hit_probed_by<T>(
        &mut self,
        hash: u64,
        probe: HomeProbe,
        mut compare: impl FnMut(&Segments, Location) -> Option<T>,
    ) -> Option<(Location, u32, T)> {
        debug_assert!(!self.is_unsettled());
        let segs = &self.segs;
        let Some((bucket, slot, info, learnt)) = self.table.lookup_probed(
            hash,
            probe,
            #[inline(always)]
            move |at| compare(segs, at),
        ) else {
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
        self.table.record_access_probed(bucket, slot, info, now);
        Some((loc, now, learnt))
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

    /// Reads an item with memcache's read options (`gat`, `mg` with `T`,
    /// `N`, `R`, `u`) as one step: a touch keeps the CAS token, a vivified
    /// miss creates an empty item and hands this caller the win token.
    pub fn read(&mut self, key: impl AsRef<[u8]>, opts: &GetOpts) -> Result<Option<Found>, Error> {
        let key = key.as_ref();
        self.read_reusing(key, hash_key(key), opts, &mut None)
    }

    /// [`read_reusing`](Self::read_reusing) with [`GetOpts::default`] (a
    /// plain `get`), the way [`get`](Self::get) reads: the same effects on
    /// the cache, through the short inline path. A hit is lent with the
    /// marks it had before this read, for the caller to copy (into a new
    /// reply, [`Found::plain`], or over an old one's buffers,
    /// [`Found::refill_plain`]).
    #[inline(always)]
    pub(crate) fn read_plain(&mut self, key: &[u8], hash: u64) -> Option<(Item<'_>, u8)> {
        self.read_marked(key, hash)
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
                    // As memcached: the read that creates the item counts
                    // as its first fetch, unless it asked for no bump.
                    let fetched = if opts.bump { item::FETCHED } else { 0 };
                    let meta = Meta {
                        marks: item::WIN_SENT | fetched,
                        ..Meta::default()
                    };
                    let loc = self.write(key, hash, [&[], &[]], &meta, ttl, now)?;
                    self.item_view(loc, now).copy_out(opts.token)
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
                old.refill(view, opts.token);
                old
            }
            None => view.copy_out(opts.token),
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
}

impl Found {
    /// A plain read's reply: `item` (a copy of the hit) and what the
    /// item's marks before the read say.
    #[inline]
    pub(crate) fn plain(item: OwnedItem, marks: u8) -> Found {
        let mut found = Found {
            item,
            win: false,
            stale: false,
            won_before: false,
            hit_before: false,
            vivified: false,
        };
        found.set_plain_marks(marks);
        found
    }

    /// Becomes the plain read's reply for `view` (read with `marks`),
    /// copying it into this reply's buffers.
    #[inline]
    pub(crate) fn refill_plain(&mut self, view: Item<'_>, marks: u8) {
        self.item.refill(view, false);
        self.set_plain_marks(marks);
    }

    /// A plain read wins nothing and creates nothing; the rest is the
    /// item's marks before the read.
    #[inline(always)]
    fn set_plain_marks(&mut self, marks: u8) {
        self.win = false;
        self.stale = marks & item::STALE != 0;
        self.won_before = marks & item::WIN_SENT != 0;
        self.hit_before = marks & item::FETCHED != 0;
        self.vivified = false;
    }
}

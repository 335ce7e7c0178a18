//! What takes items out of [`Segcache`] without eviction: delete, flush
//! (now or delayed), clear, and proactive expiry of segments whose
//! deadline passed (split segments window by window). Under merge
//! eviction the expiry walk leaves a ghost of each item that had proved
//! itself, so that the key starts warm when it is written again.
//!
//! Must never: pick eviction victims (that is `eviction/`), or unlink
//! a live item that no request asked to remove.

use super::*;

impl Segcache {
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
        if self.is_unsettled() {
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
        if unsafe { self.segs.mark_unlinked(loc) } {
            self.release_external(loc);
        }
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
            external: raw.is_external(),
        };
        self.rewrite(key, hash, loc, &meta, ttl, now).map(drop)
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
        self.refresh_unsettled();
        self.now();
    }

    /// Drops every item and returns every segment to the free list;
    /// counters other than items and bytes are kept.
    pub fn clear(&mut self) {
        self.release_all_externals();
        self.table.clear();
        self.segs.release_all();
        self.admission.clear();
        // No segment is withheld any more (no external value is left).
        self.pools_share_usable_heap();
        self.ttl.clear();
        self.counters.items = 0;
        self.counters.live_bytes = 0;
        self.refresh_unsettled();
    }

    /// Frees every segment whose deadline has passed, unlinking its items.
    /// Cheap when nothing is due: one look at the head of each TTL bucket.
    pub fn expire(&mut self) -> Expired {
        let now = self.now();
        self.expire_at(now)
    }

    pub(crate) fn expire_at(&mut self, now: u32) -> Expired {
        let mut freed = Expired::default();
        let remember = self.eviction == Eviction::Merge;
        for bucket in 0..NEVER {
            let mut at = self.ttl.buckets[bucket].head;
            while at != NONE && self.segs.headers[at as usize].is_expired(now) {
                let next = self.segs.headers[at as usize].next;
                let whole = !self.segs.headers[at as usize].is_split();
                let items = if whole {
                    self.unlink_segment(at, remember)
                } else {
                    self.reap_windows(at, now, remember)
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
    /// Returns how many items it unlinked; `remember` as for
    /// [`unlink_between`](Self::unlink_between).
    fn reap_windows(&mut self, id: u32, now: u32, remember: bool) -> usize {
        let mut windows = self.segs.windows(id);
        let mut start = 0;
        let mut unlinked = 0;
        for w in windows.as_mut_slice() {
            if !w.is_reaped() && w.at != 0 && w.at <= now {
                unlinked += self.unlink_between(id, start, w.end, remember);
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
    /// walk stops once the segment has no live item left. With `remember`
    /// (the expiry walk under merge eviction), each unlinked item that
    /// had proved itself (in a main segment, or read since its last move)
    /// leaves a ghost
    /// ([`Admission::remember_expired`](crate::admission::Admission::remember_expired)).
    pub(super) fn unlink_between(
        &mut self,
        id: u32,
        start: u32,
        end: u32,
        remember: bool,
    ) -> usize {
        let segs = &self.segs;
        let table = &mut self.table;
        let externals = &mut self.externals;
        let in_main = remember && self.admission.is_main(id);
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
            if let Some(info) = table.remove_at(hash, Location { seg: id, offset }) {
                unlinked += 1;
                bytes += item.size();
                if item.is_external() {
                    externals.release(item.value());
                }
                if remember && (in_main || hashtable::frequency(info) > 0) {
                    self.admission.remember_expired(hash);
                }
            }
        }
        let header = &mut self.segs.headers[id as usize];
        header.live_items -= unlinked as u32;
        header.live_bytes -= bytes as u32;
        self.counters.items -= unlinked as u64;
        self.counters.live_bytes -= bytes as u64;
        unlinked
    }
}

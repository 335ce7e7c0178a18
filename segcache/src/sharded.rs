//! [`ShardedCache`]: `&self` access from many threads, without a storage
//! thread.
//!
//! Keys are spread over N independent [`Segcache`] shards by bits of the key
//! hash that the hash table does not use (so every shard uses all of its
//! buckets); each shard has its own segments, TTL buckets and
//! `parking_lot` lock, so writes to different shards never contend. Every
//! operation takes exactly one shard lock, for as short as the operation
//! itself; nothing here holds two locks at once. [`Unlocked`] offers the
//! hot operations without the locks to a caller that already keeps every
//! other user out (the Python binding, under its interpreter's lock).

use crate::cache::{Expired, OwnedItem, RestoreOutcome, Stats};
use crate::flight::Flights;
use crate::hashtable::{hash_key, SHARD_SHIFT};
use crate::ops::{ArithOpts, Request, Response, Store, StoreMode, Ttl, Walked};
use crate::{Error, External, Item, Segcache};
use parking_lot::Mutex;
use std::time::Duration;

/// One shard, padded to its own cache lines so locks do not false-share.
#[repr(align(128))]
struct Shard(Mutex<Segcache>);

/// A thread-safe cache made of independently locked shards.
///
/// ```
/// use std::sync::Arc;
/// use segcache::Segcache;
///
/// let cache = Arc::new(Segcache::builder().heap_size(64 << 20).build_sharded(8)?);
/// let writers: Vec<_> = (0..4)
///     .map(|t| {
///         let cache = Arc::clone(&cache);
///         std::thread::spawn(move || {
///             for i in 0..1000 {
///                 cache.set(format!("{t}:{i}").as_bytes(), b"v", 0, None).unwrap();
///             }
///         })
///     })
///     .collect();
/// for w in writers {
///     w.join().unwrap();
/// }
/// assert_eq!(cache.len(), 4000);
/// assert_eq!(cache.get("3:999").unwrap().value(), b"v");
/// # Ok::<(), segcache::Error>(())
/// ```
pub struct ShardedCache {
    shards: Box<[Shard]>,
    mask: u64,
    flights: Flights,
}

/// [`ShardedCache`]'s hot operations without the shard locks, for a
/// caller that already keeps every other user out of the cache (see
/// [`ShardedCache::unlocked`]). Each method does exactly what the locking
/// method of the same name does.
pub struct Unlocked<'a> {
    cache: &'a ShardedCache,
}

impl std::fmt::Debug for ShardedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedCache")
            .field("shards", &self.shards.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl ShardedCache {
    pub(crate) fn from_shards(mut caches: Vec<Segcache>) -> Self {
        debug_assert!(caches.len().is_power_of_two());
        // One CAS lane per shard: a token names one item version across
        // the whole cache, as memcached's do, not only within its shard.
        let lanes = caches.len() as u32;
        for (lane, cache) in caches.iter_mut().enumerate() {
            cache.segs.set_cas_lane(lane as u32, lanes);
        }
        ShardedCache {
            mask: caches.len() as u64 - 1,
            shards: caches.into_iter().map(|c| Shard(Mutex::new(c))).collect(),
            flights: Flights::default(),
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard of a key hash, locked (quick_cache's `shard_for`: the
    /// caller hashes once and hands the hash down to the shard's table).
    #[inline]
    fn shard_for(&self, hash: u64) -> parking_lot::MutexGuard<'_, Segcache> {
        let i = ((hash >> SHARD_SHIFT) & self.mask) as usize;
        self.shards[i].0.lock()
    }

    /// The hot operations without the shard locks. A lock costs two atomic
    /// read-modify-writes an operation (a Python `c[k] = v` of 64 bytes
    /// took 13 ns less without them on a Xeon, 96 ns against 83:
    /// `bindings-python/BENCH.md`); a caller whose own exclusion already
    /// serialises every use of the cache need not pay them.
    ///
    /// # Safety
    /// - While the view is alive, nothing else uses this cache: no other
    ///   thread, whether through a view or the locking methods, and not
    ///   this thread through the locking methods (the view's own methods
    ///   take `&mut self`, so they cannot run inside one another).
    pub unsafe fn unlocked(&self) -> Unlocked<'_> {
        Unlocked { cache: self }
    }

    /// Runs one [`Request`] atomically on the key's shard (see
    /// [`Segcache::execute`]). Whole-cache requests (`Flush`, `Expire`,
    /// `Clear`, `Stats`, `Len`) visit every shard in turn.
    pub fn execute<B: AsRef<[u8]>>(&self, request: &Request<B>) -> Response {
        let key = match request {
            Request::Get { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => key.as_ref(),
            Request::Store(store) => store.key.as_ref(),
            Request::Flush { delay } => {
                self.each(|c| {
                    c.execute(&Request::<&[u8]>::Flush { delay: *delay });
                });
                return Response::Done;
            }
            Request::Expire => return Response::Expired(self.expire()),
            Request::Clear => {
                self.clear();
                return Response::Done;
            }
            Request::Stats => return Response::Stats(Box::new(self.stats())),
            Request::Len => return Response::Len(self.len()),
            Request::Walk { segment } => return Response::Walked(self.walk(*segment)),
        };
        let hash = hash_key(key);
        self.shard_for(hash).execute_hashed(request, hash)
    }

    /// Looks a key up and copies the item out, without its CAS token
    /// ([`OwnedItem::cas`] is 0: see [`gets`](Self::gets)).
    #[inline]
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<OwnedItem> {
        self.read_copy(key.as_ref(), false)
    }

    /// [`get`](Self::get) with the item's CAS token, for a later
    /// [`cas`](Self::cas) (memcache `gets`). Once a token is out, overwrites
    /// of the items in the item's segment are appended, not made in place.
    #[inline]
    pub fn gets(&self, key: impl AsRef<[u8]>) -> Option<OwnedItem> {
        self.read_copy(key.as_ref(), true)
    }

    /// [`get`](Self::get), with the token if `token`.
    #[inline(always)]
    fn read_copy(&self, key: &[u8], token: bool) -> Option<OwnedItem> {
        let hash = hash_key(key);
        self.shard_for(hash)
            .get_hashed(key, hash)
            .map(|it| it.copy_out(token))
    }

    /// Looks a key up (as [`Segcache::get`]: a hit or a miss is counted)
    /// and lends the borrowed item to `f` while the shard is locked: no
    /// copy. Keep `f` short; it blocks the shard.
    #[inline]
    pub fn read_with<R>(&self, key: impl AsRef<[u8]>, f: impl FnOnce(Option<Item<'_>>) -> R) -> R {
        let key = key.as_ref();
        let hash = hash_key(key);
        f(self.shard_for(hash).get_hashed(key, hash))
    }

    /// Lends the key's value and client flags to `f` while the shard is
    /// locked and returns its result, or `None` on a miss: the cheapest
    /// read (see [`Segcache::get_value_with`]). A hit or a miss is
    /// counted, and on a hit the access eviction needs; no CAS token, TTL
    /// or meta-protocol mark is worked out or set. Keep `f` short; it
    /// blocks the shard.
    ///
    /// ```
    /// let cache = segcache::Segcache::builder().build_sharded(4)?;
    /// cache.set("k", "value", 3, None)?;
    /// assert_eq!(cache.get_value_with("k", |v, flags| (v.len(), flags)), Some((5, 3)));
    /// assert_eq!(cache.get_value_with("absent", |v, _| v.to_vec()), None);
    /// # Ok::<(), segcache::Error>(())
    /// ```
    #[inline]
    pub fn get_value_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Option<R> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).get_value_hashed(key, hash, f)
    }

    /// As [`read_with`](Self::read_with), counting nothing (as
    /// [`Segcache::peek`]): no hit, miss or access for eviction.
    pub fn peek_with<R>(&self, key: impl AsRef<[u8]>, f: impl FnOnce(Option<Item<'_>>) -> R) -> R {
        let key = key.as_ref();
        let hash = hash_key(key);
        f(self.shard_for(hash).peek_hashed(key, hash))
    }

    /// Returns the key's item, storing `make()` under it with `ttl` first
    /// if it is absent. `make` runs at most once per key at a time: threads
    /// that miss the same key while it runs wait for its result instead of
    /// computing it again (other keys, even of the same shard, are not
    /// held up: `make` runs outside the shard's lock). If `make` panics,
    /// the next caller computes the value.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let cache = segcache::Segcache::builder().build_sharded(4)?;
    /// let calls = AtomicUsize::new(0);
    /// std::thread::scope(|s| {
    ///     for _ in 0..8 {
    ///         s.spawn(|| {
    ///             let item = cache
    ///                 .get_or_insert_with("k", None, || {
    ///                     calls.fetch_add(1, Ordering::SeqCst);
    ///                     std::thread::sleep(std::time::Duration::from_millis(20));
    ///                     "computed"
    ///                 })
    ///                 .unwrap();
    ///             assert_eq!(item.value(), b"computed");
    ///         });
    ///     }
    /// });
    /// assert_eq!(calls.load(Ordering::SeqCst), 1);
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn get_or_insert_with<V: AsRef<[u8]>>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: impl Into<Ttl>,
        make: impl FnOnce() -> V,
    ) -> Result<OwnedItem, Error> {
        let (key, ttl) = (key.as_ref(), ttl.into());
        let mut make = Some(make);
        loop {
            if let Some(item) = self.get(key) {
                return Ok(item);
            }
            let flight = self.flights.join(key);
            if !flight.leader {
                flight.wait();
                continue;
            }
            // A leader that finished just before this one joined.
            if let Some(item) = self.get(key) {
                return Ok(item);
            }
            // This thread computes; the guard releases waiters even on panic.
            let make = make.take().expect("a thread leads at most once");
            let value = make();
            let hash = hash_key(key);
            let item = self
                .shard_for(hash)
                .get_or_insert_hashed(key, hash, ttl, || value)
                .map(|it| it.copy_out(false));
            drop(flight);
            return item;
        }
    }

    /// See [`Segcache::contains`].
    #[inline]
    pub fn contains(&self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).contains_hashed(key, hash)
    }

    /// See [`Segcache::set`].
    #[inline]
    pub fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash)
            .set_hashed(key, hash, value.as_ref(), flags, ttl.into())
    }

    /// See [`Segcache::add`].
    pub fn add(
        &self,
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

    /// See [`Segcache::replace`].
    pub fn replace(
        &self,
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

    /// See [`Segcache::cas`].
    pub fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
        cas: u64,
    ) -> Result<(), Error> {
        self.store_mode(
            StoreMode::Set,
            key.as_ref(),
            value.as_ref(),
            flags,
            ttl.into(),
            Some(cas),
        )
    }

    /// See [`Segcache::max_external_weight`] (every shard's is the same).
    pub fn max_external_weight(&self) -> usize {
        self.shards[0].0.lock().max_external_weight()
    }

    /// See [`Segcache::set_external`].
    pub fn set_external(
        &self,
        key: impl AsRef<[u8]>,
        value: External,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash)
            .set_external_hashed(key, hash, value, flags, ttl.into())
    }

    /// See [`Segcache::store`].
    pub fn store<B: AsRef<[u8]>>(&self, store: &Store<B>) -> Result<u64, Error> {
        let hash = hash_key(store.key.as_ref());
        self.shard_for(hash).store_hashed(store, hash)
    }

    /// One store of `mode` on the key's shard, the key hashed once.
    fn store_mode(
        &self,
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
        let hash = hash_key(key);
        self.shard_for(hash).store_located(&store, hash).map(drop)
    }

    /// See [`Segcache::append`].
    pub fn append(&self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        self.store_mode(
            StoreMode::Append,
            key.as_ref(),
            data.as_ref(),
            0,
            Ttl::Never,
            None,
        )
    }

    /// See [`Segcache::prepend`].
    pub fn prepend(&self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        self.store_mode(
            StoreMode::Prepend,
            key.as_ref(),
            data.as_ref(),
            0,
            Ttl::Never,
            None,
        )
    }

    /// See [`Segcache::incr`].
    pub fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key.as_ref(), &ArithOpts::new(true, delta))
            .map(|(v, _)| v)
    }

    /// See [`Segcache::decr`].
    pub fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key.as_ref(), &ArithOpts::new(false, delta))
            .map(|(v, _)| v)
    }

    /// See [`Segcache::arith`].
    pub fn arith(&self, key: impl AsRef<[u8]>, opts: &ArithOpts) -> Result<(u64, u64), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).arith_hashed(key, hash, opts)
    }

    /// See [`Segcache::touch`].
    pub fn touch(&self, key: impl AsRef<[u8]>, ttl: impl Into<Ttl>) -> Result<(), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).touch_hashed(key, hash, ttl.into())
    }

    /// See [`Segcache::delete`].
    #[inline]
    pub fn delete(&self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).remove_hashed(key, hash)
    }

    /// Removes a key and lends its item to `f` first, in one step on the
    /// locked shard (a hit or a miss is counted, as by
    /// [`get`](Self::get)): no other thread's write can come between the
    /// read and the removal, and no CAS token is made. `None` if absent.
    pub fn take_with<R>(&self, key: impl AsRef<[u8]>, f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        let key = key.as_ref();
        let hash = hash_key(key);
        let mut shard = self.shard_for(hash);
        let taken = f(shard.get_hashed(key, hash)?);
        let removed = shard.remove_hashed(key, hash);
        debug_assert!(removed, "the key was just read under the same lock");
        Some(taken)
    }

    /// See [`Segcache::ttl`].
    pub fn ttl(&self, key: impl AsRef<[u8]>) -> Option<Ttl> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard_for(hash).ttl_hashed(key, hash)
    }

    /// Visits every live item, one shard (and one lock) at a time; items
    /// written meanwhile to shards not yet visited may be seen. `f` runs
    /// under the shard's lock: keep it short and do not call back into the
    /// cache from it (collect keys and act after).
    pub fn for_each(&self, mut f: impl FnMut(Item<'_>)) {
        self.each(|c| c.iter().for_each(&mut f));
    }

    /// Flushes every shard now.
    pub fn flush(&self) {
        self.each(|c| c.flush());
    }

    /// See [`Segcache::flush_after`]; applies to every shard.
    pub fn flush_after(&self, delay: Duration) {
        self.each(|c| c.flush_after(delay));
    }

    /// Proactively expires every shard; returns the total freed.
    pub fn expire(&self) -> Expired {
        let mut total = Expired::default();
        self.each(|c| total += c.expire());
        total
    }

    /// Drops every item in every shard.
    pub fn clear(&self) {
        self.each(|c| c.clear());
    }

    /// Counters and memory summed over the shards.
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        self.each(|c| total += &c.stats());
        total
    }

    /// Items held over all shards.
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.each(|c| n += c.len());
        n
    }

    /// True when no shard holds an item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest value storable under a key of `key_len` bytes.
    pub fn max_value_len(&self, key_len: usize) -> usize {
        self.shards[0].0.lock().max_value_len(key_len)
    }

    /// What each shard's restore found at build time.
    pub fn restore_outcomes(&self) -> Vec<RestoreOutcome> {
        let mut outcomes = Vec::with_capacity(self.shards.len());
        self.each(|c| outcomes.push(c.restore_outcome().clone()));
        outcomes
    }

    /// Saves every shard for a warm restart (see [`Segcache::save`]).
    /// Taking `self` means no thread can still be writing.
    pub fn save(self) -> Result<(), Error> {
        for shard in self.shards.into_vec() {
            shard.0.into_inner().save()?;
        }
        Ok(())
    }

    /// [`Request::Walk`] over the shards: index `segment` is segment
    /// `segment / n` of shard `segment % n`, for `n` shards.
    fn walk(&self, segment: u32) -> Walked {
        let n = self.shards.len() as u32;
        let mut most = 0;
        self.each(|c| most = most.max(c.walk_segments_now()));
        let items = self.shards[(segment % n) as usize]
            .0
            .lock()
            .walk(segment / n)
            .items;
        Walked {
            items,
            segments: most.saturating_mul(n),
        }
    }

    /// Runs `f` on each shard in turn, one lock at a time.
    fn each(&self, mut f: impl FnMut(&mut Segcache)) {
        for shard in self.shards.iter() {
            f(&mut shard.0.lock());
        }
    }
}

impl Unlocked<'_> {
    /// The shard of a key hash, without its lock.
    #[inline(always)]
    fn shard(&mut self, hash: u64) -> &mut Segcache {
        let i = ((hash >> SHARD_SHIFT) & self.cache.mask) as usize;
        let mutex = &self.cache.shards[i].0;
        debug_assert!(!mutex.is_locked(), "a shard in use beside an unlocked view");
        // SAFETY: `ShardedCache::unlocked`'s duty: nothing else uses the
        // cache while the view lives, so no guard of this shard and no
        // other reference into it exists; the reference returned borrows
        // the view mutably, so two cannot coexist either.
        unsafe { &mut *mutex.data_ptr() }
    }

    /// See [`ShardedCache::get_value_with`].
    #[inline]
    pub fn get_value_with<R>(
        &mut self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Option<R> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard(hash).get_value_hashed(key, hash, f)
    }

    /// See [`ShardedCache::set`].
    #[inline(always)]
    pub fn set(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard(hash)
            .set_hashed(key, hash, value.as_ref(), flags, ttl.into())
    }

    /// See [`ShardedCache::set_external`].
    #[inline]
    pub fn set_external(
        &mut self,
        key: impl AsRef<[u8]>,
        value: External,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard(hash)
            .set_external_hashed(key, hash, value, flags, ttl.into())
    }

    /// See [`ShardedCache::delete`].
    #[inline(always)]
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard(hash).remove_hashed(key, hash)
    }

    /// See [`ShardedCache::contains`].
    #[inline]
    pub fn contains(&mut self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        let hash = hash_key(key);
        self.shard(hash).contains_hashed(key, hash)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Error, External, ManualClock, Segcache};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_unlocked_view_does_what_the_locking_methods_do() {
        fn release(_: External) {}
        let build = || {
            Segcache::builder()
                .heap_size(8 << 20)
                .on_release(release)
                .build_sharded(4)
                .unwrap()
        };
        let (locked, free) = (build(), build());
        // SAFETY: `free` is used by this thread alone, and only through
        // this view until the view is dropped.
        let mut view = unsafe { free.unlocked() };
        for i in 0..2000u32 {
            let key = format!("k{}", i % 700);
            let external = External {
                handle: i as u64,
                weight: 10,
            };
            match i % 5 {
                0 => assert_eq!(locked.delete(&key), view.delete(&key)),
                1 => assert_eq!(
                    locked.set_external(&key, external, 3, None),
                    view.set_external(&key, external, 3, None)
                ),
                2 => assert_eq!(locked.contains(&key), view.contains(&key)),
                _ => assert_eq!(
                    locked.set(&key, i.to_le_bytes(), i, None),
                    view.set(&key, i.to_le_bytes(), i, None)
                ),
            }
            let read = |v: &[u8], f: u32| (v.to_vec(), f);
            assert_eq!(
                locked.get_value_with(&key, read),
                view.get_value_with(&key, read)
            );
        }
        // The view is done with: the locking methods may run again.
        assert_eq!(locked.stats(), free.stats());
    }

    #[test]
    fn shards_split_the_heap_and_share_the_clock() {
        let clock = ManualClock::new();
        let c = Segcache::builder()
            .heap_size(8 << 20)
            .segment_size(64 << 10)
            .hash_power(16)
            .clock(clock.clone())
            .build_sharded(4)
            .unwrap();
        let s = c.stats();
        assert_eq!(s.heap_bytes, 8 << 20);
        assert_eq!(
            s.hash_table_bytes,
            ((1 << 14) + 7) * 64 * 4,
            "2^14 buckets (+7 spare) x 4 shards"
        );
        for i in 0..1000u32 {
            c.set(i.to_le_bytes(), b"x", i, Some(Duration::from_secs(30)))
                .unwrap();
        }
        assert_eq!(c.len(), 1000);
        assert_eq!(c.get(7u32.to_le_bytes()).unwrap().flags(), 7);
        clock.advance(Duration::from_secs(30));
        assert_eq!(c.expire().items, 1000);
        assert!(c.is_empty());
    }

    #[test]
    fn keys_spread_evenly_and_every_shard_fills() {
        // Regression: a degenerate shard hash once sent every key to shard 0,
        // so a 4-shard cache evicted with three quarters of its heap free.
        let c = Segcache::builder()
            .heap_size(64 << 20)
            .segment_size(256 << 10)
            .build_sharded(4)
            .unwrap();
        for i in 0..400_000u64 {
            c.set(format!("k{i:09}").as_bytes(), [1u8; 100], 0, None)
                .unwrap();
        }
        let s = c.stats();
        assert_eq!(s.evictions, 0, "400k x ~115 B fit in 64 MiB");
        let per_shard: Vec<u64> = c.shards.iter().map(|s| s.0.lock().len() as u64).collect();
        for &n in &per_shard {
            assert!(
                (90_000..110_000).contains(&n),
                "uneven shards: {per_shard:?}"
            );
        }
    }

    #[test]
    fn read_with_counts_and_peek_with_does_not() {
        let c = Segcache::builder().build_sharded(2).unwrap();
        c.set("k", "v", 0, None).unwrap();
        assert_eq!(
            c.peek_with("k", |i| i.map(|i| i.value().to_vec())),
            Some(b"v".to_vec())
        );
        assert!(c.peek_with("absent", |i| i.is_none()));
        assert_eq!((c.stats().hits, c.stats().misses), (0, 0));
        assert!(c.read_with("k", |i| i.is_some()));
        assert!(c.read_with("absent", |i| i.is_none()));
        assert_eq!((c.stats().hits, c.stats().misses), (1, 1));
    }

    #[test]
    fn cas_tokens_name_one_item_version_across_all_shards() {
        // Each shard builds tokens from its own segments' generations and
        // locations; without a lane per shard, the first item of every
        // shard had the same token, and a token of one key could pass
        // `cas` on another key of another shard.
        let c = Segcache::builder().build_sharded(16).unwrap();
        let keys: Vec<String> = (0..2000).map(|i| format!("key{i}")).collect();
        for k in &keys {
            c.set(k, "v", 0, None).unwrap();
        }
        let tokens: Vec<u64> = keys
            .iter()
            .map(|k| c.read_with(k, |i| i.unwrap().cas()))
            .collect();
        let distinct: std::collections::HashSet<u64> = tokens.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            keys.len(),
            "CAS tokens repeat across shards"
        );
        for (i, k) in keys.iter().enumerate().skip(1) {
            assert_eq!(
                c.cas(k, "stolen", 0, None, tokens[i - 1]),
                Err(Error::Exists),
                "{k} took the token of {}",
                keys[i - 1]
            );
        }
        assert_eq!(c.cas(&keys[0], "mine", 0, None, tokens[0]), Ok(()));
        c.read_with(&keys[1], |i| assert_eq!(i.unwrap().value(), b"v"));
    }

    #[test]
    fn get_copies_no_token_and_gets_does() {
        // `get` makes no token, so the shard keeps writing same-size
        // overwrites in place (the item stays where it lay); `gets` hands
        // one out, which a `cas` takes and an overwrite (now appended)
        // makes stale.
        let c = Segcache::builder().build_sharded(4).unwrap();
        c.set("k", [1u8; 64], 0, None).unwrap();
        let at =
            |c: &crate::ShardedCache| c.read_with("k", |i| i.unwrap().value().as_ptr() as usize);
        let first = at(&c);
        assert_eq!(c.get("k").unwrap().cas(), 0);
        c.set("k", [2u8; 64], 0, None).unwrap();
        assert_eq!(at(&c), first, "in place");
        let token = c.gets("k").unwrap().cas();
        assert_eq!(token, c.read_with("k", |i| i.unwrap().cas()));
        c.cas("k", [3u8; 64], 0, None, token).unwrap();
        let token = c.gets("k").unwrap().cas();
        c.set("k", [4u8; 64], 0, None).unwrap();
        assert_ne!(at(&c), first, "a token is out: appended");
        assert_eq!(c.cas("k", [5u8; 64], 0, None, token), Err(Error::Exists));
        assert_eq!(c.get("k").unwrap().value(), [4u8; 64]);
    }

    #[test]
    fn take_with_reads_and_removes_in_one_step() {
        let c = Segcache::builder().build_sharded(4).unwrap();
        c.set("k", "value", 7, None).unwrap();
        let taken = c.take_with("k", |i| (i.value().to_vec(), i.flags()));
        assert_eq!(taken, Some((b"value".to_vec(), 7)));
        assert!(c.get("k").is_none(), "removed");
        assert_eq!(c.take_with("k", |_| unreachable!("absent")), None::<()>);
        assert_eq!((c.stats().hits, c.stats().misses), (1, 2));
        assert_eq!(c.stats().items, 0);
    }

    #[test]
    fn lean_read_counts_a_hit_or_a_miss_and_copies_nothing() {
        let c = Segcache::builder().build_sharded(4).unwrap();
        c.set("k", "value", 5, None).unwrap();
        let got = c.get_value_with("k", |v, flags| (v.as_ptr(), v.to_vec(), flags));
        let (ptr, value, flags) = got.unwrap();
        assert_eq!((value, flags), (b"value".to_vec(), 5));
        // The view is the item in the heap, not a copy.
        c.read_with("k", |i| assert_eq!(i.unwrap().value().as_ptr(), ptr));
        assert_eq!(c.get_value_with("absent", |v, _| v.len()), None);
        assert_eq!((c.stats().hits, c.stats().misses), (2, 1));
    }

    #[test]
    fn every_keyed_op_agrees_with_one_unsharded_cache() {
        // The sharded layer hashes each key once and hands the hash down;
        // a wrong hand-off would lose keys. Same ops, same answers.
        use crate::ops::{ArithOpts, DeleteOpts, GetOpts, Request, Store, StoreMode};
        let sharded = Segcache::builder().build_sharded(8).unwrap();
        let mut single = Segcache::builder().build().unwrap();
        let mut rng = 0x1234_5678_9abc_def1u64;
        for step in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = format!("key{}", rng % 300);
            let value = step.to_string();
            let request: Request<&[u8]> = match (rng >> 32) % 9 {
                0 => Request::Store(Store::new(StoreMode::Set, key.as_bytes(), value.as_bytes())),
                1 => Request::Store(Store::new(StoreMode::Add, key.as_bytes(), value.as_bytes())),
                2 => Request::Store(Store::new(StoreMode::Append, key.as_bytes(), b"1")),
                3 => Request::Delete {
                    key: key.as_bytes(),
                    opts: DeleteOpts::default(),
                },
                4 => Request::Arith {
                    key: key.as_bytes(),
                    opts: ArithOpts::new(true, 3),
                },
                5 => Request::Touch {
                    key: key.as_bytes(),
                    ttl: crate::Ttl::Never,
                },
                _ => Request::Get {
                    key: key.as_bytes(),
                    opts: GetOpts::default(),
                },
            };
            let want = single.execute(&request);
            assert_eq!(
                format!("{:?}", sharded.execute(&request)).replace(char::is_numeric, ""),
                format!("{want:?}").replace(char::is_numeric, ""),
                "step {step}"
            );
            let plain = single.get_value_with(&key, |v, f| (v.to_vec(), f));
            assert_eq!(sharded.get_value_with(&key, |v, f| (v.to_vec(), f)), plain);
            assert_eq!(sharded.contains(&key), plain.is_some());
            assert_eq!(sharded.ttl(&key), single.ttl(&key));
        }
        assert_eq!(sharded.len(), single.len());
        sharded.set("key1", "x", 0, None).unwrap();
        assert_eq!(sharded.incr("key1", 1), Err(Error::NotNumeric));
        assert!(sharded.delete("key1"));
        assert!(!sharded.delete("key1"));
    }

    #[test]
    fn bad_shard_counts_are_config_errors() {
        for n in [0, 3, 2048] {
            assert!(matches!(
                Segcache::builder().build_sharded(n),
                Err(Error::InvalidConfig {
                    field: "shards",
                    ..
                })
            ));
        }
        let err = Segcache::builder()
            .heap_size(4 << 20)
            .segment_size(1 << 20)
            .build_sharded(4)
            .unwrap_err();
        assert!(err.to_string().contains("per shard"), "{err}");
    }

    #[test]
    fn threads_hammering_one_cache_read_their_own_writes() {
        let c = Arc::new(
            Segcache::builder()
                .heap_size(32 << 20)
                .build_sharded(8)
                .unwrap(),
        );
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for i in 0..20_000u32 {
                        let key = [&[t][..], &(i % 500).to_le_bytes()].concat();
                        let value = i.to_le_bytes();
                        c.set(&key, value, 0, None).unwrap();
                        assert_eq!(c.get(&key).unwrap().value(), value);
                        if i % 7 == 0 {
                            assert!(c.delete(&key));
                        }
                        c.incr(b"shared", 1).ok();
                        c.read_with(b"shared", |item| {
                            if let Some(item) = item {
                                assert!(item.value().iter().all(u8::is_ascii_digit));
                            }
                        });
                    }
                })
            })
            .collect();
        c.set(b"shared", b"0", 0, None).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        let n: u64 = std::str::from_utf8(c.get(b"shared").unwrap().value())
            .unwrap()
            .parse()
            .unwrap();
        assert!(n <= 80_000);
    }
}

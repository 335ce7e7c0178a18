//! The Python class `segcache._segcache.Cache`: a [`ShardedCache`] holding
//! Python keys and values (see [`crate::key`] and [`crate::value`]).
//!
//! Owns the cache object, its mapping methods, the memcache-style methods,
//! `get_or_set` and the warm-restart lifecycle. The pure-Python subclass
//! `segcache.Cache` adds the `collections.abc.MutableMapping` views and
//! pickling on top.
//!
//! Lock order: a shard lock is taken either with the GIL held (and released
//! before anything that could wait for the GIL; under it the code only
//! builds `bytes`/`str`/`int` objects, which runs no Python code) or with
//! the GIL released. Serializers run before a write takes the shard lock
//! and after a read has dropped it. Each call also holds a read lock on the
//! cache so that `save()` can take it: see [`PyCache::cache`].

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use segcache::{Eviction, RestoreOutcome, Segcache, ShardedCache, Store, StoreMode, Ttl};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::PyManualClock;
use crate::convert::{
    bool_arg, buf, bytes_of, conditional, int_arg, seconds_arg, str_bytes, to_py_err, ttl_arg,
    type_name,
};
use crate::flight::{Flights, Role};
use crate::held::{self, detach};
use crate::key::{self, KeyBuf, KeyError};
use crate::recycle::Recycler;
use crate::value::{self, Serializer, FLAG_BYTES, FLAG_STR};
use crate::DETACH_AT;

/// Smallest `hash_power` the core accepts (it is not exported).
const MIN_HASH_POWER: u64 = 3;

/// The default shard count is at most this (and a power of two).
const MAX_DEFAULT_SHARDS: usize = 8;

/// The settings a cache was built with (for `copy`/pickle and `repr`).
struct Config {
    heap_size: usize,
    /// As given (`None`: the core's default for the heap size).
    segment_size: Option<usize>,
    hash_power: Option<u8>,
    eviction: Eviction,
    shards: usize,
    prefault: bool,
}

/// A memory-bounded, thread-safe cache of Python values with TTLs.
#[pyclass(frozen, subclass, module = "segcache", name = "Cache")]
pub struct PyCache {
    /// The cache; `None` once `save()` has taken it. Read with
    /// [`PyCache::cache`], never with `read()` (see there).
    inner: RwLock<Option<ShardedCache>>,
    /// Set by `save()` before it waits for the write lock.
    closing: AtomicBool,
    config: Config,
    datapool: Option<PathBuf>,
    restore_outcome: Vec<RestoreOutcome>,
    /// How values other than bytes, str and int are stored.
    pub serializer: Serializer,
    /// Keys whose `get_or_set` factory is running.
    flights: Flights,
    /// `popitem`'s keys still to try, and the next one's index.
    popitem_queue: parking_lot::Mutex<(KeySnapshot, usize)>,
    /// The `bytes` objects reads hand out, refilled once let go of.
    pub recycler: Recycler,
    /// The longest value held by reference (`crate::held`): 0 with a
    /// datapool (whose items must outlive the process), else what any
    /// key's item takes in a segment, so that holding a value never
    /// changes which values fit (longer ones are copied, or refused as
    /// too large, as before).
    pub held_max: usize,
}

/// Keys copied out of one shard, packed in one buffer.
#[derive(Default)]
pub struct KeySnapshot {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeySnapshot {
    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The `i`th key.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Every key, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// A read lock on an open cache, held for one operation.
type CacheRef<'a> = MappedRwLockReadGuard<'a, ShardedCache>;

/// The open cache for one short call holding the GIL throughout: a plain
/// reference where a GIL exists (see [`PyCache::cache_attached`]).
#[cfg(not(Py_GIL_DISABLED))]
pub(crate) type AttachedRef<'a> = &'a ShardedCache;
/// The open cache for one short call: on free-threaded CPython, the read
/// lock.
#[cfg(Py_GIL_DISABLED)]
pub(crate) type AttachedRef<'a> = CacheRef<'a>;

/// How a short attached call reaches the shards: without their locks
/// where the GIL already keeps every other user out (see
/// [`PyCache::access`]), else locked.
pub(crate) enum Access<'a> {
    /// This thread is the only user of the cache until it lets the GIL go.
    #[cfg(not(Py_GIL_DISABLED))]
    Alone(segcache::Unlocked<'a>),
    /// Others may use the cache meanwhile: each operation takes its lock.
    Shared(AttachedRef<'a>),
}

impl Access<'_> {
    /// See `ShardedCache::get_value_with`.
    #[inline(always)]
    pub fn get_value_with<R>(&mut self, key: &[u8], f: impl FnOnce(&[u8], u32) -> R) -> Option<R> {
        match self {
            #[cfg(not(Py_GIL_DISABLED))]
            Access::Alone(view) => view.get_value_with(key, f),
            Access::Shared(cache) => cache.get_value_with(key, f),
        }
    }

    /// See `ShardedCache::set`.
    #[inline(always)]
    pub fn set(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Ttl,
    ) -> Result<(), segcache::Error> {
        match self {
            #[cfg(not(Py_GIL_DISABLED))]
            Access::Alone(view) => view.set(key, value, flags, ttl),
            Access::Shared(cache) => cache.set(key, value, flags, ttl),
        }
    }

    /// See `ShardedCache::set_external`.
    #[inline(always)]
    pub fn set_external(
        &mut self,
        key: &[u8],
        value: segcache::External,
        flags: u32,
        ttl: Ttl,
    ) -> Result<(), segcache::Error> {
        match self {
            #[cfg(not(Py_GIL_DISABLED))]
            Access::Alone(view) => view.set_external(key, value, flags, ttl),
            Access::Shared(cache) => cache.set_external(key, value, flags, ttl),
        }
    }

    /// See `ShardedCache::delete`.
    #[inline(always)]
    pub fn delete(&mut self, key: &[u8]) -> bool {
        match self {
            #[cfg(not(Py_GIL_DISABLED))]
            Access::Alone(view) => view.delete(key),
            Access::Shared(cache) => cache.delete(key),
        }
    }

    /// See `ShardedCache::contains`.
    #[inline(always)]
    pub fn contains(&mut self, key: &[u8]) -> bool {
        match self {
            #[cfg(not(Py_GIL_DISABLED))]
            Access::Alone(view) => view.contains(key),
            Access::Shared(cache) => cache.contains(key),
        }
    }
}

fn closed_error() -> PyErr {
    PyRuntimeError::new_err(
        "this segcache.Cache is closed: save() shut it down (open a new \
         Cache(datapool=..., restore=True) to serve the saved items)",
    )
}

/// The default shard count: the machine's parallelism rounded up to a
/// power of two, at most [`MAX_DEFAULT_SHARDS`], fewer while a shard would
/// get too few segments (`segcache::default_shards`).
fn default_shards(heap_size: usize, segment_size: Option<usize>) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    segcache::default_shards(
        heap_size,
        segment_size,
        cpus.next_power_of_two().min(MAX_DEFAULT_SHARDS),
    )
}

/// A key for a read: `None` when it is too long to be stored (a miss).
#[inline(always)]
fn read_key<'a>(key: &'a Bound<'_, PyAny>, kb: &'a mut KeyBuf) -> PyResult<Option<&'a [u8]>> {
    match key::encode(key, false, kb) {
        Ok(k) => Ok(Some(k)),
        Err(KeyError::TooLong) => Ok(None),
        Err(e) => Err(e.into_py()),
    }
}

/// A key for a write: every problem raises.
#[inline(always)]
fn write_key<'a>(key: &'a Bound<'_, PyAny>, kb: &'a mut KeyBuf) -> PyResult<&'a [u8]> {
    key::encode(key, false, kb).map_err(KeyError::into_py)
}

impl PyCache {
    /// The open cache, read-locked for one operation, or the "closed"
    /// `RuntimeError` once `save()` has begun.
    ///
    /// `read_recursive` never waits for a *waiting* writer, only for one
    /// holding the lock, and `save()` holds it just long enough to take the
    /// cache out, with the GIL released and without running Python code.
    /// So a reader can neither deadlock against a save waiting for readers
    /// (which may need the GIL to finish), nor starve it (`closing` turns
    /// new calls away). Callers take the guard after converting their
    /// arguments and run no Python code while holding it.
    #[inline(always)]
    fn cache(&self) -> PyResult<CacheRef<'_>> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(closed_error());
        }
        RwLockReadGuard::try_map(self.inner.read_recursive(), Option::as_ref)
            .map_err(|_| closed_error())
    }

    /// The open cache for one short call that keeps the GIL from here to
    /// its last use of the reference, or the "closed" `RuntimeError`.
    ///
    /// With a GIL (every CPython but a free-threaded one) such a call needs
    /// no lock against `save()`: `save()` sets `closing` holding the GIL and
    /// takes the cache out later, so a call that holds the GIL throughout
    /// either saw `closing` here or ended before `save()` got the GIL.
    /// "Throughout": between this check and the last use, the caller must
    /// not detach, call Python code, allocate a GC-tracked object or drop
    /// a reference (each may run Python code, which may switch threads).
    /// Building `bytes`, `str` and `int` objects is fine, and so is dropping
    /// a `bytes` (`crate::recycle` does: it only frees memory). Calls that cannot
    /// promise this take [`cache`](Self::cache)'s read lock. On free-threaded
    /// CPython this is that read lock.
    #[inline(always)]
    fn cache_attached(&self, py: Python<'_>) -> PyResult<AttachedRef<'_>> {
        self.open_attached(py).ok_or_else(closed_error)
    }

    /// [`cache_attached`](Self::cache_attached) with `None` for a closed
    /// cache (no error built), for the hot paths (`crate::hot`); the same
    /// rules for the caller.
    #[inline(always)]
    pub(crate) fn open_attached(&self, _py: Python<'_>) -> Option<AttachedRef<'_>> {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            if self.closing.load(Ordering::Relaxed) {
                return None;
            }
            // SAFETY: the only writer is `save()`, which sets `closing`
            // under the GIL before it takes the lock to write (see above):
            // we hold the GIL and saw `closing` unset, so no write happens
            // until our caller lets the GIL go, after its last use.
            unsafe { &*self.inner.data_ptr() }.as_ref()
        }
        #[cfg(Py_GIL_DISABLED)]
        {
            self.cache().ok()
        }
    }

    /// The open cache for one short attached call, reached without the
    /// shard locks when this thread is its only user (`None`: closed). The
    /// caller's rules are [`cache_attached`](Self::cache_attached)'s: from
    /// here to its last use of the access it keeps the GIL, runs no Python
    /// code, allocates no GC-tracked object and drops nothing but a
    /// `bytes` or `str` (each of which could let another thread in).
    #[inline(always)]
    pub(crate) fn access(&self, py: Python<'_>) -> Option<Access<'_>> {
        let cache = self.open_attached(py)?;
        #[cfg(not(Py_GIL_DISABLED))]
        if held::nobody_detached() {
            // SAFETY: `unlocked`'s duty. This thread holds the GIL, and
            // keeps it until its last use of the view (the caller's rules
            // above); every other user of the cache either holds the GIL
            // too, so it is not running now, or runs inside
            // `held::detach`, of which there is none: the count is read
            // with the GIL held and only changes under it. And the
            // caller uses the cache only through this access meanwhile.
            return Some(Access::Alone(unsafe { cache.unlocked() }));
        }
        Some(Access::Shared(cache))
    }

    /// The value stored under an encoded key, or `None`.
    #[inline(never)]
    pub fn lookup<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.lookup_inline(py, key)
    }

    /// [`lookup`](Self::lookup), inlined into `get` and `c[k]` (one call
    /// frame less per read).
    #[inline(always)]
    fn lookup_inline<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        // Under the reference, `fetch` only builds bytes, str or int.
        let mut cache = self.access(py).ok_or_else(closed_error)?;
        let fetched = cache.get_value_with(key, |v, flags| {
            value::fetch_recycled(py, &self.recycler, v, flags)
        });
        fetched.map(|f| f.finish(&self.serializer)).transpose()
    }

    /// Stores `value` under an encoded key in `mode` (compared with `cas`
    /// if given); the outer error is the value's (type, serializer), the
    /// inner the cache's.
    #[inline(always)]
    pub fn store(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: &Bound<'_, PyAny>,
        ttl: Option<Duration>,
        mode: StoreMode,
        cas: Option<u64>,
    ) -> PyResult<Result<(), segcache::Error>> {
        // bytes and str, the common values, go straight from the object;
        // large ones are held by reference.
        if let Ok(b) = value.cast_exact::<PyBytes>() {
            let data = bytes_of(b);
            if (held::HELD_AT..=self.held_max).contains(&data.len()) {
                let weight = held::bytes_weight(data.len());
                return self.store_held(
                    py,
                    key,
                    value,
                    held::FLAG_HELD_BYTES,
                    weight,
                    ttl,
                    mode,
                    cas,
                );
            }
            return self.store_bytes(py, key, data, FLAG_BYTES, ttl, mode, cas);
        }
        if let Ok(s) = value.cast_exact::<PyString>() {
            if self.held_max > 0 {
                if let Some(ascii) = crate::convert::ascii_bytes(s) {
                    if (held::HELD_AT..=self.held_max).contains(&ascii.len()) {
                        let weight = held::str_weight(ascii.len());
                        return self.store_held(
                            py,
                            key,
                            value,
                            held::FLAG_HELD_STR,
                            weight,
                            ttl,
                            mode,
                            cas,
                        );
                    }
                }
            }
            return self.store_bytes(py, key, str_bytes(s)?, FLAG_STR, ttl, mode, cas);
        }
        self.store_other(py, key, value, ttl, mode, cas)
    }

    /// Stores `obj` (an exact `bytes` or `str`, or a serializer's output)
    /// held by reference, weighing `weight`: the cache takes a reference
    /// of its own, which it keeps if the store succeeds (and gives back
    /// through `held::release`).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn store_held(
        &self,
        py: Python<'_>,
        key: &[u8],
        obj: &Bound<'_, PyAny>,
        flags: u32,
        weight: u32,
        ttl: Option<Duration>,
        mode: StoreMode,
        cas: Option<u64>,
    ) -> PyResult<Result<(), segcache::Error>> {
        let ttl = Ttl::from(ttl);
        let external = held::external(obj.as_ptr(), weight);
        let encoded = external.encode();
        let store = Store {
            mode,
            key,
            value: &encoded[..],
            flags,
            ttl,
            cas,
            invalidate: false,
            external: true,
            token: false,
        };
        // The core's store runs no Python code; a release it makes drops
        // only a held `bytes` or `str` (allowed here: see `held`).
        let handed = obj.clone().into_ptr();
        let stored = if mode == StoreMode::Set && cas.is_none() {
            // The core's direct path for a plain set.
            self.access(py)
                .ok_or_else(closed_error)
                .map(|mut c| c.set_external(key, external, flags, ttl))
        } else {
            self.cache_attached(py).map(|c| c.store(&store).map(drop))
        };
        let stored = match stored {
            Ok(stored) => stored,
            Err(closed) => {
                // SAFETY: attached; the reference taken above.
                unsafe { pyo3::ffi::Py_DecRef(handed) };
                return Err(closed);
            }
        };
        if stored.is_err() {
            // Refused: the reference is ours again.
            // SAFETY: attached; `handed` is the reference taken above.
            unsafe { pyo3::ffi::Py_DecRef(handed) };
        }
        Ok(stored)
    }

    /// [`store`](Self::store) for values that need encoding.
    #[inline(never)]
    fn store_other(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: &Bound<'_, PyAny>,
        ttl: Option<Duration>,
        mode: StoreMode,
        cas: Option<u64>,
    ) -> PyResult<Result<(), segcache::Error>> {
        let v = value::encode(value, &self.serializer)?;
        if self.held_max > 0 {
            if let Some((obj, flags, weight)) = v.held(self.held_max) {
                return self.store_held(py, key, obj, flags, weight, ttl, mode, cas);
            }
        }
        self.store_bytes(py, key, &v, v.flags, ttl, mode, cas)
    }

    /// Stores encoded bytes with their flags.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn store_bytes(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Option<Duration>,
        mode: StoreMode,
        cas: Option<u64>,
    ) -> PyResult<Result<(), segcache::Error>> {
        let ttl = Ttl::from(ttl);
        /// The write itself (inlined at both call sites: a closure called
        /// from two places was kept out of line).
        #[inline(always)]
        fn write(
            cache: &ShardedCache,
            key: &[u8],
            value: &[u8],
            flags: u32,
            ttl: Ttl,
            mode: StoreMode,
            cas: Option<u64>,
        ) -> Result<(), segcache::Error> {
            if mode == StoreMode::Set && cas.is_none() {
                // The core's direct path for a plain set.
                return cache.set(key, value, flags, ttl);
            }
            let store = Store {
                mode,
                key,
                value,
                flags,
                ttl,
                cas,
                invalidate: false,
                external: false,
                token: false,
            };
            cache.store(&store).map(drop)
        }
        if value.len() >= DETACH_AT {
            let guard = self.cache()?;
            let cache: &ShardedCache = &guard;
            return Ok(detach(py, || {
                write(cache, key, value, flags, ttl, mode, cas)
            }));
        }
        // The core's write runs no Python code.
        if mode == StoreMode::Set && cas.is_none() {
            let mut cache = self.access(py).ok_or_else(closed_error)?;
            return Ok(cache.set(key, value, flags, ttl));
        }
        let cache = self.cache_attached(py)?;
        // A plain reference with a GIL, a guard on free-threaded builds.
        #[allow(clippy::needless_borrow)]
        Ok(write(&cache, key, value, flags, ttl, mode, cas))
    }

    /// Whether an encoded key is present.
    #[inline(always)]
    pub fn contains_encoded(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.access(py).ok_or_else(closed_error)?.contains(key))
    }

    /// Deletes an encoded key; `true` if it was present.
    #[inline(always)]
    pub fn remove(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.access(py).ok_or_else(closed_error)?.delete(key))
    }

    /// The encoded keys of the live items at this moment, copied out one
    /// shard lock at a time, with the GIL released.
    pub fn snapshot_keys(&self, py: Python<'_>) -> PyResult<KeySnapshot> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        Ok(detach(py, || {
            let mut keys = KeySnapshot::default();
            cache.for_each(|item| keys.push(item.key()));
            keys
        }))
    }

    /// `get_or_set` on an encoded key: the cached value, or `factory()`'s
    /// (stored with `ttl`), computed by one caller at a time per key.
    /// `on_miss` runs once per factory call (the decorator counts misses).
    pub fn get_or_compute<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        ttl: Option<Duration>,
        factory: impl Fn() -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        loop {
            if let Some(v) = self.lookup(py, key)? {
                return Ok(v);
            }
            match self.flights.join(key) {
                Role::Leader(leader) => {
                    // Another leader may have finished between the miss and
                    // the join: look again before computing.
                    if let Some(v) = self.lookup(py, key)? {
                        leader.finish(Some(v.clone().unbind()));
                        return Ok(v);
                    }
                    let v = factory()?;
                    self.store_quietly(py, key, &v, ttl)?;
                    leader.finish(Some(v.clone().unbind()));
                    return Ok(v);
                }
                Role::Follower(flight) => {
                    if let Some(v) = flight.wait(py)? {
                        return Ok(v.into_bound(py));
                    }
                }
            }
        }
    }

    /// Stores a computed value; a value too large or a full cache (under
    /// `eviction="none"`) leaves it uncached without an error.
    pub fn store_quietly(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: &Bound<'_, PyAny>,
        ttl: Option<Duration>,
    ) -> PyResult<()> {
        use segcache::Error as E;
        match self.store(py, key, value, ttl, StoreMode::Set, None)? {
            Ok(()) | Err(E::ValueTooLarge { .. } | E::HashTableFull | E::OutOfMemory) => Ok(()),
            Err(e) => Err(to_py_err(e, None)),
        }
    }

    fn set_impl(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        mode: StoreMode,
    ) -> PyResult<Result<(), segcache::Error>> {
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        let ttl = ttl_arg(ttl)?;
        self.store(py, k, value, ttl, mode, None)
    }

    /// `append` (`mode` Append) or `prepend` (Prepend).
    fn concat(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        mode: StoreMode,
    ) -> PyResult<bool> {
        let mut kb = KeyBuf::new();
        let (k, d) = (write_key(key, &mut kb)?, buf(data, "data")?);
        loop {
            let flags = self.cache()?.read_with(k, |item| item.map(|it| it.flags()));
            match flags {
                None => return Ok(false),
                Some(FLAG_BYTES | FLAG_STR) => {
                    let done = if mode == StoreMode::Append {
                        self.cache()?.append(k, &*d)
                    } else {
                        self.cache()?.prepend(k, &*d)
                    };
                    return conditional(done, key);
                }
                Some(held::FLAG_HELD_BYTES | held::FLAG_HELD_STR) => {
                    if let Some(done) = self.concat_held(py, k, key, &d, mode)? {
                        return Ok(done);
                    }
                }
                Some(_) => {
                    return Err(PyTypeError::new_err(
                        "append/prepend need a bytes or str value; this key holds another type",
                    ))
                }
            }
        }
    }

    /// [`concat`](Self::concat) on a value held by reference: the new
    /// value is built here and written in its place if the item is still
    /// the one read (compare-and-swap), with the TTL it had. `None`: the
    /// item changed meanwhile, try again.
    fn concat_held(
        &self,
        py: Python<'_>,
        k: &[u8],
        key: &Bound<'_, PyAny>,
        data: &[u8],
        mode: StoreMode,
    ) -> PyResult<Option<bool>> {
        let found = self.cache()?.read_with(k, |item| {
            item.map(|it| {
                let ttl = it.ttl().duration();
                (
                    value::fetch(py, it.value(), it.flags()),
                    it.flags(),
                    it.cas(),
                    ttl,
                )
            })
        });
        let Some((fetched, flags, cas, ttl)) = found else {
            return Ok(None);
        };
        if !held::is_held(flags) || flags == held::FLAG_HELD_SERIALIZED {
            return Ok(None);
        }
        let old = fetched.finish(&self.serializer)?;
        let old_bytes: &[u8] = match old.cast::<PyBytes>() {
            Ok(b) => b.as_bytes(),
            Err(_) => str_bytes(old.cast::<PyString>()?)?,
        };
        let joined = if mode == StoreMode::Append {
            [old_bytes, data].concat()
        } else {
            [data, old_bytes].concat()
        };
        // A str stays a str while it is UTF-8 (as a copied str value
        // reads back), else the bytes.
        let new = match (flags, std::str::from_utf8(&joined)) {
            (held::FLAG_HELD_STR, Ok(text)) => PyString::new(py, text).into_any(),
            _ => PyBytes::new(py, &joined).into_any(),
        };
        match self.store(py, k, &new, ttl, StoreMode::Set, Some(cas))? {
            Ok(()) => Ok(Some(true)),
            Err(segcache::Error::Exists) => Ok(None),
            Err(segcache::Error::NotFound) => Ok(Some(false)),
            Err(e) => Err(to_py_err(e, Some(key))),
        }
    }
}

#[pymethods]
impl PyCache {
    #[new]
    #[pyo3(signature = (heap_size=None, segment_size=None, hash_power=None, eviction=None, shards=None, datapool=None, restore=None, serializer=None, prefault=None, _clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        heap_size: Option<&Bound<'_, PyAny>>,
        segment_size: Option<&Bound<'_, PyAny>>,
        hash_power: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shards: Option<&Bound<'_, PyAny>>,
        datapool: Option<&Bound<'_, PyAny>>,
        restore: Option<&Bound<'_, PyAny>>,
        serializer: Option<&Bound<'_, PyAny>>,
        prefault: Option<&Bound<'_, PyAny>>,
        _clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        fn opt<'py>(o: Option<&Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
            o.filter(|o| !o.is_none()).cloned()
        }
        let heap_size = match opt(heap_size) {
            Some(o) => int_arg(&o, "heap_size", 1, usize::MAX as u64)? as usize,
            None => 64 << 20,
        };
        let segment_size = match opt(segment_size) {
            Some(o) => Some(int_arg(&o, "segment_size", 1, usize::MAX as u64)? as usize),
            None => None,
        };
        let mut builder = Segcache::builder()
            .heap_size(heap_size)
            .on_release(held::release);
        if let Some(seg) = segment_size {
            builder = builder.segment_size(seg);
        }
        let hash_power = match opt(hash_power) {
            Some(o) => Some(int_arg(
                &o,
                "hash_power",
                MIN_HASH_POWER,
                segcache::MAX_HASH_POWER as u64,
            )? as u8),
            None => None,
        };
        if let Some(p) = hash_power {
            builder = builder.hash_power(p);
        }
        let eviction = match opt(eviction) {
            Some(o) => {
                let name = o.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!("eviction must be a str, not {}", type_name(&o)))
                })?;
                name.to_cow()?
                    .parse::<Eviction>()
                    .map_err(|e| to_py_err(e, None))?
            }
            None => Eviction::Merge,
        };
        builder = builder.eviction(eviction);
        if let Some(o) = opt(_clock) {
            let clock = o.cast::<PyManualClock>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "_clock must be a segcache.ManualClock, not {}",
                    type_name(&o)
                ))
            })?;
            builder = builder.clock(clock.get().inner.clone());
        }
        let shards = match opt(shards) {
            Some(o) => int_arg(&o, "shards", 1, 1024)? as usize,
            None => default_shards(heap_size, segment_size),
        };
        let datapool = match opt(datapool) {
            Some(o) => Some(o.extract::<PathBuf>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "datapool must be a str or os.PathLike path, not {}",
                    type_name(&o)
                ))
            })?),
            None => None,
        };
        let restore = match opt(restore) {
            Some(o) => bool_arg(&o, "restore")?,
            None => false,
        };
        let prefault = match opt(prefault) {
            Some(o) => bool_arg(&o, "prefault")?,
            None => false,
        };
        builder = builder.prefault(prefault);
        let serializer = Serializer::new(py, serializer)?;
        if let Some(path) = &datapool {
            builder = builder.datapool(path);
        }
        builder = builder.restore(restore);
        // Mapping (and, on restore, checksumming) the datapool files can
        // take a while: let other threads run meanwhile.
        let inner = py
            .detach(|| builder.build_sharded(shards))
            .map_err(|e| to_py_err(e, None))?;
        Ok(PyCache {
            restore_outcome: inner.restore_outcomes(),
            config: Config {
                heap_size,
                segment_size,
                hash_power,
                eviction,
                shards: inner.shards(),
                prefault,
            },
            inner: RwLock::new(Some(inner)),
            closing: AtomicBool::new(false),
            serializer,
            flights: Flights::default(),
            popitem_queue: parking_lot::Mutex::new((KeySnapshot::default(), 0)),
            recycler: Recycler::new(),
            held_max: match datapool {
                Some(_) => 0,
                None => held::longest_held(
                    segment_size.unwrap_or_else(|| segcache::default_segment_size(heap_size)),
                ),
            },
            datapool,
        })
    }

    /// Saves the cache for a warm restart and closes it: waits for calls
    /// in progress on other threads, then flushes each shard's datapool
    /// file and writes its metadata beside it. Afterwards every method
    /// raises `RuntimeError`, whether or not the save succeeded.
    /// `ValueError` (and the cache stays open) without a datapool;
    /// `OSError` if a file cannot be written.
    fn save(&self, py: Python<'_>) -> PyResult<()> {
        if self.datapool.is_none() {
            drop(self.cache()?);
            return Err(PyValueError::new_err(
                "save() needs a datapool: create the cache with Cache(datapool=PATH)",
            ));
        }
        self.closing.store(true, Ordering::Relaxed);
        let cache = detach(py, || self.inner.write().take()).ok_or_else(closed_error)?;
        detach(py, || cache.save()).map_err(|e| to_py_err(e, None))
    }

    /// True once `save()` has closed the cache.
    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The datapool path given to the constructor (as a str), or None.
    #[getter]
    fn datapool(&self) -> Option<String> {
        self.datapool
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// What the constructor found in the datapool, one dict per shard:
    /// status ("not_requested", "restored" or "fresh"), items (the number
    /// restored, else 0) and reason (why a shard started fresh, else None).
    #[getter]
    fn restore_outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let dicts = self
            .restore_outcome
            .iter()
            .map(|o| {
                let (status, items, reason) = match o {
                    RestoreOutcome::NotRequested => ("not_requested", 0, None),
                    RestoreOutcome::Restored { items } => ("restored", *items, None),
                    RestoreOutcome::Fresh { reason } => ("fresh", 0, Some(reason.as_str())),
                };
                let d = PyDict::new(py);
                d.set_item("status", status)?;
                d.set_item("items", items)?;
                d.set_item("reason", reason)?;
                Ok(d)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, dicts)
    }

    /// The settings the cache was built with, as keyword arguments of the
    /// constructor (for copy and pickle; the datapool is left out).
    fn _config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("heap_size", self.config.heap_size)?;
        d.set_item("segment_size", self.config.segment_size)?;
        d.set_item("hash_power", self.config.hash_power)?;
        d.set_item("eviction", self.config.eviction.name())?;
        d.set_item("shards", self.config.shards)?;
        d.set_item("prefault", self.config.prefault)?;
        d.set_item(
            "serializer",
            self.serializer.given.as_ref().map(|s| s.bind(py)),
        )?;
        Ok(d)
    }

    /// The value stored under key, or default when it is missing.
    #[pyo3(signature = (key, default=None))]
    #[inline(always)]
    pub(crate) fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let found = match read_key(key, &mut KeyBuf::new())? {
            Some(k) => self.lookup_inline(py, k)?,
            None => None,
        };
        Ok(match found {
            Some(v) => v,
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        })
    }

    /// (value, cas_token) for key, or None when it is missing.
    fn gets<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut kb = KeyBuf::new();
        let Some(k) = read_key(key, &mut kb)? else {
            return Ok(None);
        };
        let found = self.cache()?.read_with(k, |item| {
            item.map(|it| (value::fetch(py, it.value(), it.flags()), it.cas()))
        });
        match found {
            None => Ok(None),
            Some((f, cas)) => {
                let v = f.finish(&self.serializer)?;
                Ok(Some((v, cas).into_pyobject(py)?))
            }
        }
    }

    /// Stores value under key, replacing any old value; ttl in seconds
    /// (None or 0: never expires).
    #[pyo3(signature = (key, value, ttl=None))]
    #[inline(always)]
    pub(crate) fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.set_impl(py, key, value, ttl, StoreMode::Set)?
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Stores only if key is missing; False if it is present.
    #[pyo3(signature = (key, value, ttl=None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        conditional(self.set_impl(py, key, value, ttl, StoreMode::Add)?, key)
    }

    /// Stores only if key is present; False if it is missing.
    #[pyo3(signature = (key, value, ttl=None))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        conditional(self.set_impl(py, key, value, ttl, StoreMode::Replace)?, key)
    }

    /// Stores only if key is still at the version cas_token (from gets);
    /// False if it changed since or is missing.
    #[pyo3(signature = (key, value, cas_token, ttl=None))]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas_token: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let token = int_arg(cas_token, "cas_token", 0, u64::MAX)?;
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        let ttl = ttl_arg(ttl)?;
        conditional(
            self.store(py, k, value, ttl, StoreMode::Set, Some(token))?,
            key,
        )
    }

    /// Appends data (bytes or str) to a bytes or str value (TTL stays);
    /// False if key is missing, TypeError if it holds another type.
    fn append(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.concat(py, key, data, StoreMode::Append)
    }

    /// Prepends data (bytes or str) to a bytes or str value (TTL stays);
    /// False if key is missing, TypeError if it holds another type.
    fn prepend(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.concat(py, key, data, StoreMode::Prepend)
    }

    /// Adds delta to a non-negative int value (or decimal bytes/str) and
    /// returns the new value (wrapping at 2**64). KeyError if missing,
    /// ValueError if not a number.
    #[pyo3(signature = (key, delta=None), text_signature = "($self, key, delta=1)")]
    fn incr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let d = delta.map_or(Ok(1), |d| int_arg(d, "delta", 0, u64::MAX))?;
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        self.cache()?
            .incr(k, d)
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Subtracts delta from a non-negative int value, stopping at 0, and
    /// returns the new value. KeyError if missing, ValueError if not a
    /// number.
    #[pyo3(signature = (key, delta=None), text_signature = "($self, key, delta=1)")]
    fn decr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let d = delta.map_or(Ok(1), |d| int_arg(d, "delta", 0, u64::MAX))?;
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        self.cache()?
            .decr(k, d)
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Gives key a new TTL (None or 0: never expires); False if it is
    /// missing.
    #[pyo3(signature = (key, ttl))]
    fn touch(&self, key: &Bound<'_, PyAny>, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let ttl = ttl_arg(ttl)?;
        let mut kb = KeyBuf::new();
        let Some(k) = read_key(key, &mut kb)? else {
            return Ok(false);
        };
        conditional(self.cache()?.touch(k, ttl), key)
    }

    /// Removes key; True if it was present.
    #[inline(always)]
    pub(crate) fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        match read_key(key, &mut KeyBuf::new())? {
            Some(k) => self.remove(py, k),
            None => Ok(false),
        }
    }

    /// Whole seconds until key expires, None if it never does; KeyError
    /// if it is missing.
    fn ttl(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let left = match read_key(key, &mut KeyBuf::new())? {
            Some(k) => self.cache()?.ttl(k),
            None => None,
        };
        match left {
            Some(left) => Ok(left.duration().map(|d| d.as_secs())),
            None => Err(PyKeyError::new_err((key.clone().unbind(),))),
        }
    }

    /// A dict of the keys that are present (the objects passed in) to
    /// their values; missing keys are left out.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for key in keys.try_iter()? {
            let key = key?;
            let found = match read_key(&key, &mut KeyBuf::new())? {
                Some(k) => self.lookup(py, k)?,
                None => None,
            };
            if let Some(v) = found {
                out.set_item(key, v)?;
            }
        }
        Ok(out)
    }

    /// Stores every key: value of mapping (a dict, or anything with
    /// items()), with one TTL. Keys and values are encoded first (so a bad
    /// key or value writes nothing); the writes then run with the GIL
    /// released. If one fails (a value too large), the pairs before it
    /// stay written.
    #[pyo3(signature = (mapping, ttl=None))]
    fn set_many(
        &self,
        py: Python<'_>,
        mapping: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ttl = ttl_arg(ttl)?;
        let items = match mapping.cast::<PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => mapping.call_method0("items")?,
        };
        let mut pairs = Vec::new();
        for pair in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            pairs.push((k, v));
        }
        let encoded = pairs
            .iter()
            .map(|(k, v)| {
                let key = write_key(k, &mut KeyBuf::new())?.to_vec();
                Ok((key, value::encode(v, &self.serializer)?))
            })
            .collect::<PyResult<Vec<_>>>()?;
        /// One write of the batch: bytes to copy, or a value to hold.
        enum Write<'a> {
            Copy(&'a [u8], u32),
            /// A reference the cache takes over if the write succeeds.
            Held(segcache::External, u32),
        }
        let writes: Vec<(&[u8], Write<'_>)> = encoded
            .iter()
            .zip(&pairs)
            .map(|((k, v), (_, obj))| {
                let held = value::held_of(obj, self.held_max)
                    .map(|(f, w)| (obj, f, w))
                    .or_else(|| v.held(self.held_max));
                let write = match held {
                    Some((source, flags, weight)) => {
                        let handed = source.clone().into_ptr();
                        Write::Held(held::external(handed, weight), flags)
                    }
                    None => Write::Copy(v, v.flags),
                };
                (&**k, write)
            })
            .collect();
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        let failed = detach(py, || {
            writes.iter().enumerate().find_map(|(i, (k, w))| {
                let written = match w {
                    Write::Copy(v, f) => cache.set(k, v, *f, ttl),
                    Write::Held(h, f) => cache.set_external(k, *h, *f, ttl),
                };
                written.err().map(|e| (i, e))
            })
        });
        drop(guard);
        // The references of the held values not written are ours again.
        let kept = failed.as_ref().map_or(writes.len(), |(i, _)| *i);
        for (_, w) in &writes[kept..] {
            if let Write::Held(h, _) = w {
                // SAFETY: attached; the reference taken for this write,
                // which the cache did not take over.
                unsafe { pyo3::ffi::Py_DecRef(h.handle as usize as *mut pyo3::ffi::PyObject) };
            }
        }
        match failed {
            None => Ok(()),
            Some((i, e)) => Err(to_py_err(e, Some(&pairs[i].0))),
        }
    }

    /// The value of key if present; else stores and returns factory()'s
    /// result (with ttl). Concurrent callers for one missing key run the
    /// factory once: the others wait and get its result. If the factory
    /// raises, its caller gets the exception and the next caller retries.
    #[pyo3(signature = (key, factory, ttl=None))]
    fn get_or_set<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        factory: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        let ttl = ttl_arg(ttl)?;
        if !factory.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "factory must be callable, not {}",
                type_name(factory)
            )));
        }
        self.get_or_compute(py, k, ttl, || factory.call0())
    }

    /// Keys whose get_or_set factory is running now.
    #[getter]
    fn _in_flight(&self) -> usize {
        self.flights.len()
    }

    /// Removes key and returns its value; default if it is missing
    /// (KeyError without a default). Atomic: a concurrent write of the
    /// same key is either returned and removed, or left in place.
    #[pyo3(signature = (key, *default))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if default.len() > 1 {
            return Err(PyTypeError::new_err(format!(
                "pop expected at most 2 arguments, got {}",
                default.len() + 1
            )));
        }
        let missing = || match default.len() {
            0 => Err(PyKeyError::new_err((key.clone().unbind(),))),
            _ => default.get_item(0),
        };
        let mut kb = KeyBuf::new();
        let Some(k) = read_key(key, &mut kb)? else {
            return missing();
        };
        match self.take(py, k)? {
            Some(v) => Ok(v),
            None => missing(),
        }
    }

    /// Removes and returns some (key, value) pair; KeyError when empty.
    fn popitem<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // Keys come from a snapshot kept between calls, so emptying a cache
        // with popitem() walks it once, not once per call. The mutex is
        // never held while waiting for the GIL or the shards.
        let mut refilled = false;
        loop {
            let next = {
                let mut queue = self.popitem_queue.lock();
                let (keys, pos) = &mut *queue;
                if *pos < keys.len() {
                    *pos += 1;
                    Some(keys.get(*pos - 1).to_vec())
                } else {
                    None
                }
            };
            match next {
                Some(k) => {
                    if let Some(v) = self.take(py, &k)? {
                        return (key::decode(py, &k)?, v).into_pyobject(py);
                    }
                }
                None if refilled => {
                    return Err(PyKeyError::new_err("popitem(): cache is empty"));
                }
                None => {
                    let keys = self.snapshot_keys(py)?;
                    *self.popitem_queue.lock() = (keys, 0);
                    refilled = true;
                }
            }
        }
    }

    /// The value of key if present; else stores default (with no TTL) and
    /// returns it. Atomic: concurrent callers all get the same value.
    #[pyo3(signature = (key, default=None))]
    fn setdefault<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        let default = default.unwrap_or_else(|| py.None().into_bound(py));
        loop {
            if let Some(v) = self.lookup(py, k)? {
                return Ok(v);
            }
            match self.store(py, k, &default, None, StoreMode::Add, None)? {
                Ok(()) => return Ok(default),
                Err(segcache::Error::NotStored) => continue,
                Err(e) => return Err(to_py_err(e, Some(key))),
            }
        }
    }

    /// Removes every item now, or (with delay seconds) every item stored
    /// before that time, when it comes.
    #[pyo3(signature = (delay=None))]
    fn flush(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let delay = match delay {
            Some(d) if !d.is_none() => seconds_arg(d, "delay")?,
            _ => Duration::ZERO,
        };
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        detach(py, || {
            if delay.is_zero() {
                cache.flush()
            } else {
                cache.flush_after(delay)
            }
        });
        Ok(())
    }

    /// Frees expired items now (the cache also does so as it goes);
    /// returns how many were freed.
    fn expire(&self, py: Python<'_>) -> PyResult<usize> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        Ok(detach(py, || cache.expire().items))
    }

    /// Drops every item; counters other than items and bytes are kept.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        detach(py, || cache.clear());
        Ok(())
    }

    /// Counters and memory, summed over the shards, as a dict of ints.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        let s = detach(py, || cache.stats());
        let d = PyDict::new(py);
        let fields: [(&str, u64); 19] = [
            ("items", s.items),
            ("live_bytes", s.live_bytes),
            ("segments_used", s.segments_used),
            ("segments_free", s.segments_free),
            ("hits", s.hits),
            ("misses", s.misses),
            ("evictions", s.evictions),
            ("evicted_segments", s.evicted_segments),
            ("expirations", s.expirations),
            ("expired_segments", s.expired_segments),
            ("merges", s.merges),
            ("heap_bytes", s.heap_bytes),
            ("hash_table_bytes", s.hash_table_bytes),
            ("segment_header_bytes", s.segment_header_bytes),
            ("admission_bytes", s.admission_bytes),
            ("total_bytes", s.total_bytes),
            ("held_items", s.external_items),
            ("held_bytes", s.external_bytes),
            ("segments_withheld", s.segments_withheld),
        ];
        for (name, value) in fields {
            d.set_item(name, value)?;
        }
        d.set_item("shards", self.config.shards)?;
        Ok(d)
    }

    /// The largest value (in bytes once encoded) storable under a key of
    /// key_len bytes.
    #[pyo3(signature = (key_len=None), text_signature = "($self, key_len=1)")]
    fn max_value_len(&self, key_len: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let n = key_len.map_or(Ok(1), |k| {
            int_arg(k, "key_len", 1, segcache::MAX_KEY_LEN as u64)
        })?;
        Ok(self.cache()?.max_value_len(n as usize))
    }

    /// Number of shards (independently locked parts of the cache).
    #[getter]
    fn shards(&self) -> usize {
        self.config.shards
    }

    /// The eviction policy's name.
    #[getter]
    fn eviction(&self) -> &'static str {
        self.config.eviction.name()
    }

    /// The serializer given to the constructor, or None (pickle).
    #[getter]
    fn serializer<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.serializer.given.as_ref().map(|s| s.bind(py).clone())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        Ok(detach(py, || cache.len()))
    }

    #[inline(always)]
    pub(crate) fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        match read_key(key, &mut KeyBuf::new())? {
            Some(k) => self.contains_encoded(py, k),
            None => Ok(false),
        }
    }

    #[inline(always)]
    pub(crate) fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.get_item(py, key)?
            .ok_or_else(|| PyKeyError::new_err((key.clone().unbind(),)))
    }

    #[inline(always)]
    pub(crate) fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut kb = KeyBuf::new();
        let k = write_key(key, &mut kb)?;
        self.store(py, k, value, None, StoreMode::Set, None)?
            .map_err(|e| to_py_err(e, Some(key)))
    }

    #[inline(always)]
    pub(crate) fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.delete(py, key)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err((key.clone().unbind(),)))
        }
    }

    /// An iterator over the live keys (see Cache.keys()).
    fn __iter__(slf: Bound<'_, Self>) -> crate::iter::CacheIter {
        crate::iter::CacheIter::new(slf, crate::iter::Kind::Keys)
    }

    /// An iterator over live (key, value) pairs.
    fn _iter_items(slf: Bound<'_, Self>) -> crate::iter::CacheIter {
        crate::iter::CacheIter::new(slf, crate::iter::Kind::Items)
    }

    /// An iterator over live values.
    fn _iter_values(slf: Bound<'_, Self>) -> crate::iter::CacheIter {
        crate::iter::CacheIter::new(slf, crate::iter::Kind::Values)
    }

    /// An iterator over live (key, value, ttl) triples (ttl: whole seconds
    /// left, or None), for copy and pickle.
    fn _iter_dump(slf: Bound<'_, Self>) -> crate::iter::CacheIter {
        crate::iter::CacheIter::new(slf, crate::iter::Kind::Dump)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let Ok(guard) = self.cache() else {
            return format!(
                "segcache.Cache(closed, shards={}, eviction={:?})",
                self.config.shards,
                self.config.eviction.name()
            );
        };
        let cache: &ShardedCache = &guard;
        let items = detach(py, || cache.len());
        drop(guard);
        format!(
            "segcache.Cache(items={items}, heap_size={}, shards={}, eviction={:?})",
            self.config.heap_size,
            self.config.shards,
            self.config.eviction.name()
        )
    }
}

impl PyCache {
    /// `c[key]`, with `None` for a missing key (the caller raises).
    #[inline(always)]
    pub(crate) fn get_item<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match read_key(key, &mut KeyBuf::new())? {
            Some(k) => self.lookup_inline(py, k),
            None => Ok(None),
        }
    }

    /// Removes an encoded key and returns its value, atomically.
    fn take<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        // Read and removed under one shard lock (a held value is fetched
        // while its handle is still valid); no CAS token is made, so the
        // shard's overwrites stay in place.
        let found = self
            .cache()?
            .take_with(key, |it| value::fetch(py, it.value(), it.flags()));
        found.map(|f| f.finish(&self.serializer)).transpose()
    }

    /// Reads an encoded key without counting a hit, a miss or an access
    /// (for iteration, copy and pickle): its value and whole seconds left
    /// (`None`: no expiry).
    pub fn peek<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
    ) -> PyResult<Option<(Bound<'py, PyAny>, Option<u64>)>> {
        // Decoded under the shard lock, where a held value's handle is
        // valid (`crate::held`).
        let found = self.cache()?.peek_with(key, |item| {
            item.map(|it| {
                let ttl = it.ttl().duration().map(|d| d.as_secs().max(1));
                (value::fetch(py, it.value(), it.flags()), ttl)
            })
        });
        let Some((fetched, ttl)) = found else {
            return Ok(None);
        };
        Ok(Some((fetched.finish(&self.serializer)?, ttl)))
    }
}

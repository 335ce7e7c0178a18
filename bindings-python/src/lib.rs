//! `segcache._segcache`: the native half of the `segcache` Python package.
//!
//! Wraps [`segcache::ShardedCache`] (thread-safe, `&self` methods) as the
//! Python class `Cache`, and [`segcache::ManualClock`] as `ManualClock` (a
//! test hook to move time without sleeping). The pure-Python half
//! (`python/segcache/__init__.py`) re-exports these and adds the `cached`
//! decorator; `_segcache.pyi` documents every signature.
//!
//! Conventions, kept in one place here:
//! - Keys and values are `bytes`, `bytearray`, `memoryview` or `str`
//!   (encoded as UTF-8, so `"a"` and `b"a"` are the same key); values come
//!   back as `bytes`. Anything else is a `TypeError` naming the argument.
//! - TTLs are `None`, `int`/`float` seconds or `datetime.timedelta`;
//!   `None` or `0` means "never expires", negative is a `ValueError`.
//!   The cache counts whole seconds: a fraction is dropped, and any
//!   positive TTL under one second counts as one second.
//! - Errors: bad input (oversized key or value, TTL out of range, empty
//!   key, non-numeric `incr`) is a `ValueError`; a missing key where a
//!   dict would raise is a `KeyError`; a full cache under
//!   `eviction="none"` is `CacheFullError` (a `MemoryError`). Conditional
//!   writes that do not apply (`add` on a present key, `replace`/`cas`/
//!   `append`/`touch` on a missing one, a stale CAS token) return `False`.
//! - The GIL is released around storage work that can take long: writes of
//!   values of at least `DETACH_AT` (16 KiB) bytes, bulk writes, `flush`,
//!   `expire`, `clear`, `stats` and `len` (which lock every shard). Small
//!   operations keep it: releasing and retaking it would cost more than the
//!   operation. Reads copy the value straight from the segment into the new
//!   `bytes` object under the shard lock, which needs the GIL.
//!
//! - Warm restart: `Cache(datapool=PATH, restore=True)` keeps shard `i`'s
//!   heap in `PATH.shard<i>` and brings back what the last `save()` wrote
//!   (`restore_outcome` says, per shard, whether it did and why not).
//!   `save()` takes the cache out of the object, so every later call raises
//!   `RuntimeError`; the datapool's I/O failures are `OSError`.
//!
//! Lock order: a shard lock is only ever taken either with the GIL held and
//! released before anything that could wait for the GIL, or with the GIL
//! released; no code path waits for the GIL while holding a shard lock, so
//! the two locks cannot deadlock. Each call also holds a read lock on the
//! cache (so that `save()` can take it); why that lock cannot deadlock
//! against the GIL either is explained at `PyCache::cache`.

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use pyo3::create_exception;
use pyo3::exceptions::{
    PyKeyError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyMemoryView, PyString, PyTuple, PyType,
};
use segcache::{Eviction, RestoreOutcome, Segcache, ShardedCache};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Writes of values at least this long release the GIL while the cache
/// copies them (and while it evicts to make room).
const DETACH_AT: usize = 16 << 10;

/// Smallest `hash_power` the core accepts (it is not exported). Checked
/// here because `build_sharded` lowers the power per shard and clamps it,
/// so the core alone would accept a too-small total.
const MIN_HASH_POWER: u64 = 3;

/// The default shard count is at most this (and a power of two).
const MAX_DEFAULT_SHARDS: usize = 8;

/// The default shard count keeps at least this many segments per shard, so
/// each shard's merge eviction has segments to merge.
const MIN_SEGMENTS_PER_SHARD: usize = 8;

create_exception!(
    segcache,
    CacheFullError,
    PyMemoryError,
    "The cache could not make room for a write: eviction is \"none\" and the heap (or the key's hash-table neighbourhood) is full."
);

// ---------------------------------------------------------------------------
// Argument conversion

/// Bytes borrowed from an immutable Python object (`bytes`, or a `str`'s
/// cached UTF-8), or copied out of a mutable one.
enum Buf<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Buf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Borrowed(b) => b,
            Buf::Owned(v) => v,
        }
    }
}

/// The UTF-8 bytes of a `str`, without a copy where the interpreter allows.
fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Buf<'a>> {
    // `PyUnicode_AsUTF8AndSize` is in the stable ABI from 3.10 on (and
    // exported, with the same signature, by every CPython 3): it returns the
    // string's cached UTF-8, owned by the string, with no allocation after
    // the first call. pyo3's abi3-py39 build only offers `to_cow`, which
    // encodes into a new object every time, so ask for it directly.
    if runtime_at_least_3_10(s.py()) {
        let mut len: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live `str`, we are attached to the interpreter,
        // and the returned buffer lives as long as `s`, which outlives 'a.
        let ptr = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut len) };
        if ptr.is_null() {
            return Err(PyErr::fetch(s.py()));
        }
        // SAFETY: CPython guarantees `len` bytes at `ptr`, immutable for the
        // lifetime of the string.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) };
        return Ok(Buf::Borrowed(bytes));
    }
    Ok(match s.to_cow()? {
        Cow::Borrowed(b) => Buf::Borrowed(b.as_bytes()),
        Cow::Owned(o) => Buf::Owned(o.into_bytes()),
    })
}

extern "C" {
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::os::raw::c_char;
}

fn runtime_at_least_3_10(py: Python<'_>) -> bool {
    static AT_LEAST: PyOnceLock<bool> = PyOnceLock::new();
    *AT_LEAST.get_or_init(py, || py.version_info() >= (3, 10))
}

/// Reads a key or value argument; `what` names it in the `TypeError`.
fn buf<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Buf<'a>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Buf::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return str_bytes(s);
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Buf::Owned(b.to_vec()));
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        let copy = obj.call_method0("tobytes")?;
        return Ok(Buf::Owned(copy.cast::<PyBytes>()?.as_bytes().to_vec()));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray, memoryview or str, not {}",
        type_name(obj)
    )))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// An `int` argument (not `bool`) within `min..=max`: `TypeError` or
/// `ValueError` naming it otherwise.
fn int_arg(obj: &Bound<'_, PyAny>, what: &str, min: u64, max: u64) -> PyResult<u64> {
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            type_name(obj)
        )));
    }
    let out_of_range =
        || PyValueError::new_err(format!("{what} must be from {min} to {max}, got {obj}"));
    let n: i128 = obj.extract().map_err(|_| out_of_range())?;
    if n < min as i128 || n > max as i128 {
        return Err(out_of_range());
    }
    Ok(n as u64)
}

fn timedelta_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    TIMEDELTA.import(py, "datetime", "timedelta")
}

/// Seconds from an `int`, `float` or `timedelta`, non-negative and finite.
fn seconds_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let secs: f64 = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be int or float seconds or a datetime.timedelta, not bool"
        )));
    } else if obj.is_instance_of::<PyInt>() {
        let n: i128 = obj
            .extract()
            .map_err(|_| PyValueError::new_err(format!("{what} is out of range: {obj}")))?;
        if n < 0 {
            return Err(PyValueError::new_err(format!(
                "{what} must not be negative, got {n}"
            )));
        }
        return Ok(Duration::from_secs(u64::try_from(n).unwrap_or(u64::MAX)));
    } else if obj.is_instance_of::<PyFloat>() {
        obj.extract()?
    } else if obj.is_instance(timedelta_type(obj.py())?)? {
        obj.call_method0("total_seconds")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be int or float seconds or a datetime.timedelta, not {}",
            type_name(obj)
        )));
    };
    if secs.is_nan() || secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must not be negative, got {secs}"
        )));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| PyValueError::new_err(format!("{what} is out of range: {secs}")))
}

/// A TTL argument: `None` (never expires) or seconds.
fn ttl_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => seconds_arg(o, "ttl").map(Some),
    }
}

fn flags_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    match obj {
        None => Ok(0),
        Some(o) => int_arg(o, "flags", 0, u32::MAX as u64).map(|f| f as u32),
    }
}

/// Maps a core error to the Python exception the module documents.
fn to_py_err(err: segcache::Error, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    use segcache::Error as E;
    match err {
        E::NotFound => match key {
            Some(k) => PyKeyError::new_err(k.clone().unbind()),
            None => PyKeyError::new_err("not found"),
        },
        E::HashTableFull | E::OutOfMemory => CacheFullError::new_err(err.to_string()),
        E::Persistence(_) => PyOSError::new_err(err.to_string()),
        E::Closed => PyRuntimeError::new_err(err.to_string()),
        _ => PyValueError::new_err(err.to_string()),
    }
}

/// `Ok(true)` for a write that applied, `Ok(false)` for one whose condition
/// did not hold, the mapped exception otherwise.
fn conditional(result: Result<(), segcache::Error>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
    use segcache::Error as E;
    match result {
        Ok(()) => Ok(true),
        Err(E::NotStored | E::Exists | E::NotFound) => Ok(false),
        Err(e) => Err(to_py_err(e, Some(key))),
    }
}

// ---------------------------------------------------------------------------
// ManualClock

/// A clock moved by hand, for tests: give it to `Cache(_clock=...)` and the
/// cache reads time from it instead of the system's monotonic clock, so TTL
/// expiry can be tested without sleeping. It starts at 0 and counts whole
/// seconds; it never goes backwards.
#[pyclass(frozen, module = "segcache", name = "ManualClock")]
struct PyManualClock {
    inner: segcache::ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    fn new() -> Self {
        PyManualClock {
            inner: segcache::ManualClock::new(),
        }
    }

    /// Moves the clock forward by `seconds` (int, float or timedelta;
    /// fractions of a second are dropped).
    fn advance(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance(seconds_arg(seconds, "seconds")?);
        Ok(())
    }

    /// Sets the clock to `seconds`; an earlier reading than now is ignored.
    fn set(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner
            .set(int_arg(seconds, "seconds", 0, u32::MAX as u64)? as u32);
        Ok(())
    }

    /// The current reading, in whole seconds since the clock was made.
    #[getter]
    fn now(&self) -> u32 {
        self.inner.now()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", self.inner.now())
    }
}

// ---------------------------------------------------------------------------
// Cache

/// A memory-bounded, thread-safe cache of byte strings with TTLs.
#[pyclass(frozen, module = "segcache", name = "Cache")]
struct PyCache {
    /// The cache; `None` once `save()` has taken it. Read with
    /// [`PyCache::cache`], never with `read()` (see there).
    inner: RwLock<Option<ShardedCache>>,
    /// Set by `save()` before it waits for the write lock: calls that start
    /// after it fail at once instead of queueing behind the save.
    closing: AtomicBool,
    eviction: Eviction,
    shards: usize,
    datapool: Option<PathBuf>,
    /// Per shard, what the build found in the datapool.
    restore_outcome: Vec<RestoreOutcome>,
}

/// A read lock on an open cache, held for one operation.
type CacheRef<'a> = MappedRwLockReadGuard<'a, ShardedCache>;

fn closed_error() -> PyErr {
    PyRuntimeError::new_err(
        "this segcache.Cache is closed: save() shut it down (open a new \
         Cache(datapool=..., restore=True) to serve the saved items)",
    )
}

/// The default shard count: the machine's parallelism rounded up to a
/// power of two, at most [`MAX_DEFAULT_SHARDS`], halved while a shard
/// would get fewer than [`MIN_SEGMENTS_PER_SHARD`] segments.
fn default_shards(heap_size: usize, segment_size: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut shards = cpus.next_power_of_two().min(MAX_DEFAULT_SHARDS);
    while shards > 1 && heap_size / shards / segment_size.max(1) < MIN_SEGMENTS_PER_SHARD {
        shards /= 2;
    }
    shards
}

/// One of the unconditional-or-conditional store methods of the core.
type StoreFn =
    fn(&ShardedCache, &[u8], &[u8], u32, Option<Duration>) -> Result<(), segcache::Error>;

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
    /// arguments and run no Python code while holding it, so a call cannot
    /// re-enter `save()` under its own guard.
    #[inline]
    fn cache(&self) -> PyResult<CacheRef<'_>> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(closed_error());
        }
        RwLockReadGuard::try_map(self.inner.read_recursive(), Option::as_ref)
            .map_err(|_| closed_error())
    }

    fn get_bytes<'py>(
        cache: &ShardedCache,
        py: Python<'py>,
        key: &[u8],
    ) -> Option<Bound<'py, PyBytes>> {
        // Holding the shard lock while allocating the bytes object is safe:
        // allocating a (non-GC) bytes object runs no Python code, and no
        // thread waits for the GIL while holding a shard lock.
        cache.get_with(key, |item| item.map(|it| PyBytes::new(py, it.value())))
    }

    fn set_impl(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        op: StoreFn,
    ) -> PyResult<Result<(), segcache::Error>> {
        let k = buf(key, "key")?;
        let v = buf(value, "value")?;
        let ttl = ttl_arg(ttl)?;
        let flags = flags_arg(flags)?;
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        Ok(if v.len() >= DETACH_AT {
            let (k, v) = (&*k, &*v);
            py.detach(|| op(cache, k, v, flags, ttl))
        } else {
            op(cache, &k, &v, flags, ttl)
        })
    }
}

#[pymethods]
impl PyCache {
    #[new]
    #[pyo3(signature = (heap_size=None, segment_size=None, hash_power=None, eviction=None, shards=None, datapool=None, restore=None, _clock=None))]
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
            Some(o) => int_arg(&o, "segment_size", 1, usize::MAX as u64)? as usize,
            None => 1 << 20,
        };
        let mut builder = Segcache::builder()
            .heap_size(heap_size)
            .segment_size(segment_size);
        if let Some(o) = opt(hash_power) {
            builder = builder.hash_power(int_arg(
                &o,
                "hash_power",
                MIN_HASH_POWER,
                segcache::MAX_HASH_POWER as u64,
            )? as u8);
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
            Some(o) => o.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
                PyTypeError::new_err(format!("restore must be a bool, not {}", type_name(&o)))
            })?,
            None => false,
        };
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
            shards: inner.shards(),
            inner: RwLock::new(Some(inner)),
            closing: AtomicBool::new(false),
            eviction,
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
        // The GIL is released while waiting: a call holding the read lock
        // may need it to finish.
        let cache = py
            .detach(|| self.inner.write().take())
            .ok_or_else(closed_error)?;
        py.detach(|| cache.save()).map_err(|e| to_py_err(e, None))
    }

    /// True once `save()` has closed the cache.
    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The datapool path given to the constructor (as a str), or `None`.
    #[getter]
    fn datapool(&self) -> Option<String> {
        self.datapool
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// What the constructor found in the datapool, one dict per shard:
    /// `status` ("not_requested", "restored" or "fresh"), `items` (the
    /// number restored, else 0) and `reason` (why a shard started fresh,
    /// else `None`).
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

    /// The value stored under `key`, or `default` when it is missing.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = buf(key, "key")?;
        let found = Self::get_bytes(&*self.cache()?, py, &k);
        Ok(match found {
            Some(v) => v.into_any(),
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        })
    }

    /// `(value, cas_token)` for `key`, or `None` when it is missing.
    fn gets<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let k = buf(key, "key")?;
        let found = self.cache()?.get_with(&k, |item| {
            item.map(|it| (PyBytes::new(py, it.value()), it.cas()))
        });
        found.map(|(v, cas)| (v, cas).into_pyobject(py)).transpose()
    }

    /// `(value, flags)` for `key`, or `None`: for the `cached` decorator.
    fn _get_flagged<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let k = buf(key, "key")?;
        let found = self.cache()?.get_with(&k, |item| {
            item.map(|it| (PyBytes::new(py, it.value()), it.flags()))
        });
        found.map(|(v, f)| (v, f).into_pyobject(py)).transpose()
    }

    /// The stored flags of `key` (0 unless set), or `None` when missing.
    fn flags(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        let k = buf(key, "key")?;
        Ok(self.cache()?.get_with(&k, |item| item.map(|it| it.flags())))
    }

    /// Stores `value` under `key`, replacing any old value.
    #[pyo3(signature = (key, value, ttl=None, flags=None))]
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.set_impl(py, key, value, ttl, flags, ShardedCache::set)?
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Stores only if `key` is missing; `False` if it is present.
    #[pyo3(signature = (key, value, ttl=None, flags=None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        conditional(
            self.set_impl(py, key, value, ttl, flags, ShardedCache::add)?,
            key,
        )
    }

    /// Stores only if `key` is present; `False` if it is missing.
    #[pyo3(signature = (key, value, ttl=None, flags=None))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        conditional(
            self.set_impl(py, key, value, ttl, flags, ShardedCache::replace)?,
            key,
        )
    }

    /// Stores only if `key` is still at the version `cas_token` (from
    /// `gets`); `False` if it changed since or is missing.
    #[pyo3(signature = (key, value, cas_token, ttl=None, flags=None))]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas_token: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let token = int_arg(cas_token, "cas_token", 0, u64::MAX)?;
        let k = buf(key, "key")?;
        let v = buf(value, "value")?;
        let ttl = ttl_arg(ttl)?;
        let flags = flags_arg(flags)?;
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        let result = if v.len() >= DETACH_AT {
            let (k, v) = (&*k, &*v);
            py.detach(|| cache.cas(k, v, flags, ttl, token))
        } else {
            cache.cas(&k, &v, flags, ttl, token)
        };
        conditional(result, key)
    }

    /// Appends `data` to the value of `key` (TTL and flags stay); `False`
    /// if it is missing.
    fn append(&self, key: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let (k, d) = (buf(key, "key")?, buf(data, "data")?);
        conditional(self.cache()?.append(&k, &d), key)
    }

    /// Prepends `data` to the value of `key` (TTL and flags stay); `False`
    /// if it is missing.
    fn prepend(&self, key: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let (k, d) = (buf(key, "key")?, buf(data, "data")?);
        conditional(self.cache()?.prepend(&k, &d), key)
    }

    /// Adds `delta` to a decimal value and returns the new value (wrapping
    /// at 2**64). `KeyError` if missing, `ValueError` if not a number.
    #[pyo3(signature = (key, delta=None))]
    fn incr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let d = delta.map_or(Ok(1), |d| int_arg(d, "delta", 0, u64::MAX))?;
        let k = buf(key, "key")?;
        self.cache()?
            .incr(&k, d)
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Subtracts `delta` from a decimal value, stopping at 0, and returns
    /// the new value. `KeyError` if missing, `ValueError` if not a number.
    #[pyo3(signature = (key, delta=None))]
    fn decr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let d = delta.map_or(Ok(1), |d| int_arg(d, "delta", 0, u64::MAX))?;
        let k = buf(key, "key")?;
        self.cache()?
            .decr(&k, d)
            .map_err(|e| to_py_err(e, Some(key)))
    }

    /// Gives `key` a new TTL (`None` or 0: never expires); `False` if it
    /// is missing.
    #[pyo3(signature = (key, ttl))]
    fn touch(&self, key: &Bound<'_, PyAny>, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let k = buf(key, "key")?;
        let ttl = ttl_arg(ttl)?;
        conditional(self.cache()?.touch(&k, ttl), key)
    }

    /// Removes `key`; `True` if it was present.
    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = buf(key, "key")?;
        Ok(self.cache()?.delete(&k))
    }

    /// Whole seconds until `key` expires, `None` if it never does;
    /// `KeyError` if it is missing.
    fn ttl(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let k = buf(key, "key")?;
        match self.cache()?.ttl(&k) {
            Some(left) => Ok(left.map(|d| d.as_secs())),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
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
            let k = buf(&key, "key")?;
            // The read lock is dropped before `set_item`, which may run
            // Python code (a str subclass's `__hash__`).
            let found = Self::get_bytes(&*self.cache()?, py, &k);
            if let Some(v) = found {
                out.set_item(key, v)?;
            }
        }
        Ok(out)
    }

    /// Stores every `key: value` of `mapping` (a dict, or anything with
    /// `items()`), with one TTL. Every pair is checked for types first;
    /// the writes then run with the GIL released. If one fails (say, a
    /// value too large), the pairs before it stay written.
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
        let bufs = pairs
            .iter()
            .map(|(k, v)| Ok((buf(k, "key")?, buf(v, "value")?)))
            .collect::<PyResult<Vec<_>>>()?;
        let slices: Vec<(&[u8], &[u8])> = bufs.iter().map(|(k, v)| (&**k, &**v)).collect();
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        let failed = py.detach(|| {
            slices
                .iter()
                .enumerate()
                .find_map(|(i, (k, v))| cache.set(k, v, 0, ttl).err().map(|e| (i, e)))
        });
        drop(guard);
        match failed {
            None => Ok(()),
            Some((i, e)) => Err(to_py_err(e, Some(&pairs[i].0))),
        }
    }

    /// Removes every item now, or (with `delay` seconds) every item stored
    /// before that time, when it comes.
    #[pyo3(signature = (delay=None))]
    fn flush(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let delay = match delay {
            Some(d) if !d.is_none() => seconds_arg(d, "delay")?,
            _ => Duration::ZERO,
        };
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        py.detach(|| {
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
        Ok(py.detach(|| cache.expire().items))
    }

    /// Drops every item; counters other than items and bytes are kept.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        py.detach(|| cache.clear());
        Ok(())
    }

    /// Counters and memory, summed over the shards, as a dict of ints.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        let s = py.detach(|| cache.stats());
        let d = PyDict::new(py);
        let fields: [(&str, u64); 15] = [
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
            ("total_bytes", s.total_bytes),
        ];
        for (name, value) in fields {
            d.set_item(name, value)?;
        }
        d.set_item("shards", self.shards)?;
        Ok(d)
    }

    /// The largest value storable under a key of `key_len` bytes.
    #[pyo3(signature = (key_len=None))]
    fn max_value_len(&self, key_len: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let n = key_len.map_or(Ok(1), |k| {
            int_arg(k, "key_len", 1, segcache::MAX_KEY_LEN as u64)
        })?;
        Ok(self.cache()?.max_value_len(n as usize))
    }

    /// Number of shards (independently locked parts of the cache).
    #[getter]
    fn shards(&self) -> usize {
        self.shards
    }

    /// The eviction policy's name.
    #[getter]
    fn eviction(&self) -> &'static str {
        self.eviction.name()
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let guard = self.cache()?;
        let cache: &ShardedCache = &guard;
        Ok(py.detach(|| cache.len()))
    }

    fn __bool__(&self) -> bool {
        // A cache object is always truthy (unlike an empty dict), so that
        // `if cache:` and `cache or default` mean "is there a cache".
        true
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = buf(key, "key")?;
        Ok(self.cache()?.contains(&k))
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = buf(key, "key")?;
        Self::get_bytes(&*self.cache()?, py, &k)
            .ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.set(py, key, value, None, None)
    }

    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = buf(key, "key")?;
        if self.cache()?.delete(&k) {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __iter__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(
            "segcache.Cache is not iterable: the cache does not enumerate its keys",
        ))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let Ok(guard) = self.cache() else {
            return format!(
                "segcache.Cache(closed, shards={}, eviction={:?})",
                self.shards,
                self.eviction.name()
            );
        };
        let cache: &ShardedCache = &guard;
        let (items, heap) = py.detach(|| {
            let s = cache.stats();
            (s.items, s.heap_bytes)
        });
        drop(guard);
        format!(
            "segcache.Cache(items={items}, heap_size={heap}, shards={}, eviction={:?})",
            self.shards,
            self.eviction.name()
        )
    }
}

/// The native module; `segcache/__init__.py` re-exports it. Every class is
/// `frozen` and backed by `Sync` Rust state, so the module declares that it
/// runs without the GIL on free-threaded CPython.
#[pymodule(gil_used = false)]
fn _segcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCache>()?;
    m.add_class::<PyManualClock>()?;
    m.add("CacheFullError", m.py().get_type::<CacheFullError>())?;
    m.add("MAX_KEY_LEN", segcache::MAX_KEY_LEN)?;
    m.add("MAX_TTL", segcache::MAX_TTL)?;
    m.add("DETACH_AT", DETACH_AT)?;
    Ok(())
}

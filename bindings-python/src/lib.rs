//! `segcache._segcache`: the native half of the `segcache` Python package.
//!
//! Wraps [`segcache::ShardedCache`] as the Python class `Cache`, a mapping
//! of Python keys to Python values with TTLs, bounded in memory. The pure
//! Python half (`python/segcache/__init__.py`) subclasses it into a
//! `collections.abc.MutableMapping` and wraps `CachedFunction` in the
//! `cached` decorator; `_segcache.pyi` documents every signature.
//!
//! Modules, one concept each:
//! - `convert`: argument checking (ints, seconds, TTLs) and error mapping;
//! - `layout`: direct reads of `str` and `bytes` contents where the
//!   running CPython's layout is verified at import;
//! - `key`: keys (str, bytes, int, float, bool, None, tuples) to bytes;
//! - `recycle`: refilling the `bytes` a read returned once its reader
//!   has let go of it, instead of allocating another;
//! - `value`: values to bytes and flags (bytes, str, int as themselves,
//!   the rest through a serializer, pickle by default), and back;
//! - `held`: large values held by reference instead of copied, their
//!   weight charged to the heap, and their release;
//! - `cache`: the `Cache` class;
//! - `hot`: the common case of the hot entry points (plain str key,
//!   bytes or ASCII str value) straight to the core;
//! - `fast`: fast-call entry points for `Cache.get`, `set` and `delete`;
//! - `slots`: `CacheSlots`, `Cache` with the mapping operators as plain
//!   C slots (the base of the Python mapping);
//! - `iter`: iteration over live items;
//! - `flight`: single-flight for `get_or_set` and the decorator;
//! - `cached`: the decorator's native wrapper (`CachedFunction`);
//! - `clock`: `ManualClock`, a test hook.
//!
//! The GIL is released around storage work that can take long (writes of
//! values of at least [`DETACH_AT`] bytes, bulk writes, `flush`, `expire`,
//! `clear`, `stats`, `len`, iteration snapshots) and while waiting for
//! another thread's `get_or_set`. Small operations keep it: releasing and
//! retaking it would cost more than the operation.

use pyo3::create_exception;
use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;

mod cache;
mod cached;
mod clock;
mod convert;
mod fast;
mod flight;
mod held;
mod hot;
mod iter;
mod key;
mod layout;
mod recycle;
mod slots;
mod value;

/// Writes of values at least this long release the GIL while the cache
/// copies them (and while it evicts to make room).
pub const DETACH_AT: usize = 16 << 10;

create_exception!(
    segcache,
    CacheFullError,
    PyMemoryError,
    "The cache could not make room for a write: eviction is \"none\" and the heap (or the key's hash-table neighbourhood) is full."
);

/// Which direct readers of object memory are in use, as
/// `(str, bytes)` (see the `layout` module); for tests.
#[pyfunction(name = "_direct_reads")]
fn direct_reads() -> (bool, bool) {
    layout::active()
}

/// Whether `cache` refills the `bytes` its reads returned once they are
/// let go of (see the `recycle` module); for tests.
#[pyfunction(name = "_recycling")]
fn recycling(cache: &Bound<'_, cache::PyCache>) -> bool {
    cache.get().recycler.on(cache.py())
}

/// References to held values released while their thread was detached
/// and not yet dropped (see the `held` module); for tests.
#[pyfunction(name = "_held_waiting")]
fn held_waiting() -> usize {
    held::waiting()
}

/// Defines `get`, `set` and `delete` on `cls` (a subclass of `Cache`) as
/// its own fast-call methods, so that CPython specialises calls of them
/// on its instances (see `fast::install_on_subclass`).
#[pyfunction(name = "_install_fast_methods")]
fn install_fast_methods(cls: &Bound<'_, pyo3::types::PyType>) -> PyResult<()> {
    fast::install_on_subclass(cls)
}

/// The native module; `segcache/__init__.py` re-exports it. Every class is
/// backed by `Sync` Rust state, so the module declares that it runs without
/// the GIL on free-threaded CPython.
#[pymodule(gil_used = false)]
fn _segcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    layout::probe(m.py())?;
    m.add_function(wrap_pyfunction!(direct_reads, m)?)?;
    m.add_function(wrap_pyfunction!(install_fast_methods, m)?)?;
    m.add_function(wrap_pyfunction!(recycling, m)?)?;
    m.add_function(wrap_pyfunction!(held_waiting, m)?)?;
    m.add_class::<cache::PyCache>()?;
    let cache_type = m.py().get_type::<cache::PyCache>();
    fast::install(&cache_type)?;
    m.add("CacheSlots", slots::make_type(&cache_type)?)?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<cached::CachedFunction>()?;
    m.add_class::<cached::BoundCachedMethod>()?;
    m.add_class::<iter::CacheIter>()?;
    m.add("CacheFullError", m.py().get_type::<CacheFullError>())?;
    m.add("MAX_KEY_LEN", segcache::MAX_KEY_LEN)?;
    m.add("MAX_TTL", segcache::MAX_TTL)?;
    m.add("DETACH_AT", DETACH_AT)?;
    m.add("HELD_AT", held::HELD_AT)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Whether this build has debug assertions on (cargo's dev profile, as
    // `memcheck.sh` builds it): the bench scripts refuse to time such a
    // build, and the packaging test checks that pip's wheel is not one.
    m.add("_DEBUG_ASSERTIONS", cfg!(debug_assertions))?;
    Ok(())
}

//! Iteration over a cache's live items, for `iter(cache)`, `keys()`,
//! `values()`, `items()`, `popitem()`, copy and pickle.
//!
//! Owns the iterator object only. On its first step it copies the keys of
//! the live items (one shard lock at a time, with the GIL released, packed
//! in one buffer), then yields them one by one, looking each value up as it
//! goes, so an item removed or expired meanwhile is skipped and nothing is
//! held locked between two steps. A key written after the snapshot is
//! missed; no key is yielded twice. Iterating counts no hits or misses
//! and does not make items look recently used to eviction.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::cache::{KeySnapshot, PyCache};
use crate::key;

/// What the iterator yields.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Keys.
    Keys,
    /// Values.
    Values,
    /// `(key, value)` pairs.
    Items,
    /// `(key, value, ttl)` triples (ttl: whole seconds left, or None).
    Dump,
}

/// An iterator over a cache's live items.
#[pyclass(module = "segcache", name = "CacheIterator")]
pub struct CacheIter {
    cache: Py<PyCache>,
    kind: Kind,
    started: bool,
    keys: KeySnapshot,
    next_key: usize,
}

impl CacheIter {
    /// Starts before the first shard.
    pub fn new(cache: Bound<'_, PyCache>, kind: Kind) -> Self {
        CacheIter {
            cache: cache.unbind(),
            kind,
            started: false,
            keys: KeySnapshot::default(),
            next_key: 0,
        }
    }
}

#[pymethods]
impl CacheIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let cache = self.cache.bind(py).get();
        loop {
            if !self.started {
                self.keys = cache.snapshot_keys(py)?;
                self.started = true;
            }
            if self.next_key == self.keys.len() {
                self.keys = KeySnapshot::default();
                return Ok(None);
            }
            let k = self.keys.get(self.next_key);
            self.next_key += 1;
            match self.kind {
                Kind::Keys => {
                    if cache.contains_encoded(py, k)? {
                        return key::decode(py, k).map(Some);
                    }
                }
                Kind::Values => {
                    if let Some((v, _)) = cache.peek(py, k)? {
                        return Ok(Some(v));
                    }
                }
                Kind::Items => {
                    if let Some((v, _)) = cache.peek(py, k)? {
                        let pair = PyTuple::new(py, [key::decode(py, k)?, v])?;
                        return Ok(Some(pair.into_any()));
                    }
                }
                Kind::Dump => {
                    if let Some((v, ttl)) = cache.peek(py, k)? {
                        let ttl = ttl.into_pyobject(py)?.into_any();
                        let triple = PyTuple::new(py, [key::decode(py, k)?, v, ttl])?;
                        return Ok(Some(triple.into_any()));
                    }
                }
            }
        }
    }
}

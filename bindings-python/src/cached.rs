//! `CachedFunction`: the native half of the `@segcache.cached` decorator.
//!
//! Owns the decorated call: building its key in Rust from the arguments,
//! the hit path, the single-flight miss path (through
//! [`PyCache::get_or_compute`]), method binding and the hit/miss counters.
//! Coroutine functions are handed to the Python helper
//! `segcache._async_call`, which uses the same key and store methods.
//!
//! A call's key is the tuple `(name, args)` or `(name, args, kwargs)`
//! (`name` the function's `module.qualname`, `kwargs` sorted `(keyword,
//! value)` pairs), or `(name, key(*args, **kwargs))` with a `key=`
//! function; for a method, `self` is left out of `args`. An encoding longer
//! than the cache takes is replaced by `(name, "#blake2b", digest)`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyTuple};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::cache::PyCache;
use crate::key::{self, KeyBuf, KeyError};

/// A function whose results are kept in a `segcache.Cache`.
#[pyclass(frozen, dict, module = "segcache", name = "CachedFunction")]
pub struct CachedFunction {
    cache: Py<PyCache>,
    func: Py<PyAny>,
    name: String,
    ttl: Option<Duration>,
    typed: bool,
    key_fn: Option<Py<PyAny>>,
    is_async: bool,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A `CachedFunction` bound to an instance (a decorated method).
#[pyclass(frozen, module = "segcache", name = "BoundCachedMethod")]
pub struct BoundCachedMethod {
    func: Py<CachedFunction>,
    obj: Py<PyAny>,
}

fn hashlib_blake2b(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static B2: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    B2.import(py, "hashlib", "blake2b")
}

fn async_call(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CALL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    CALL.import(py, "segcache", "_async_call")
}

impl CachedFunction {
    /// The encoded key of a call (`obj`: the bound instance, if any),
    /// built in `kb`.
    fn key_of<'a>(
        &self,
        py: Python<'_>,
        obj: Option<&Bound<'_, PyAny>>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
        kb: &'a mut KeyBuf,
    ) -> PyResult<&'a [u8]> {
        let built = match &self.key_fn {
            Some(f) => {
                let full = with_self(py, obj, args)?;
                let result = f.bind(py).call(full, kwargs)?;
                key::encode_named(kb, &self.name, &result, self.typed)
            }
            None => key::encode_call(kb, &self.name, args, kwargs, self.typed),
        };
        built.map_err(|e| match e {
            KeyError::Unsupported(t) => PyTypeError::new_err(format!(
                "@segcache.cached({}): cannot build a cache key from an argument of type {t}; \
                 arguments must be {}; pass key=lambda *args, **kwargs: ... to cached()",
                self.name,
                key::KEY_TYPES
            )),
            e => e.into_py(),
        })?;
        if !kb.too_long() {
            return Ok(kb.bytes());
        }
        let digest = hashlib_blake2b(py)?
            .call(
                (PyBytes::new(py, kb.bytes()),),
                Some(&[("digest_size", 20)].into_py_dict(py)?),
            )?
            .call_method0("digest")?;
        let hashed = PyTuple::new(
            py,
            [
                pyo3::types::PyString::new(py, "#blake2b").into_any(),
                digest,
            ],
        )?;
        kb.clear();
        key::encode_named(kb, &self.name, &hashed, false).map_err(KeyError::into_py)?;
        if kb.too_long() {
            return Err(PyValueError::new_err(format!(
                "@segcache.cached: the function name {:?} is too long for a cache key",
                self.name
            )));
        }
        Ok(kb.bytes())
    }

    fn call<'py>(
        &self,
        py: Python<'py>,
        obj: Option<&Bound<'py, PyAny>>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cache = self.cache.bind(py).get();
        let mut kb = KeyBuf::new();
        let k = self.key_of(py, obj, args, kwargs, &mut kb)?;
        if let Some(v) = cache.lookup(py, k)? {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(v);
        }
        let full = with_self(py, obj, args)?;
        let func = self.func.bind(py);
        // The key's borrowed parts are done with: own it past the factory.
        cache.get_or_compute(py, k, self.ttl, || {
            self.misses.fetch_add(1, Ordering::Relaxed);
            func.call(&full, kwargs)
        })
    }
}

/// `args` with `obj` in front, if any.
fn with_self<'py>(
    py: Python<'py>,
    obj: Option<&Bound<'py, PyAny>>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    match obj {
        None => Ok(args.clone()),
        Some(o) => {
            let all: Vec<_> = std::iter::once(o.clone()).chain(args.iter()).collect();
            PyTuple::new(py, all)
        }
    }
}

#[pymethods]
impl CachedFunction {
    #[new]
    #[pyo3(signature = (cache, func, name, ttl=None, key=None, typed=false, is_async=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        cache: Py<PyCache>,
        func: Bound<'_, PyAny>,
        name: String,
        ttl: Option<&Bound<'_, PyAny>>,
        key: Option<Bound<'_, PyAny>>,
        typed: bool,
        is_async: bool,
    ) -> PyResult<Self> {
        if !func.is_callable() {
            return Err(PyTypeError::new_err("cached() decorates a callable"));
        }
        let key_fn = key.filter(|k| !k.is_none());
        if let Some(k) = &key_fn {
            if !k.is_callable() {
                return Err(PyTypeError::new_err(
                    "key must be a callable returning a cache key",
                ));
            }
        }
        Ok(CachedFunction {
            cache,
            func: func.unbind(),
            name,
            ttl: crate::convert::ttl_arg(ttl)?,
            typed,
            key_fn: key_fn.map(Bound::unbind),
            is_async,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if this.is_async {
            return async_call(py)?.call1((slf, py.None(), args, kwargs));
        }
        this.call(py, None, args, kwargs)
    }

    fn __get__<'py>(
        slf: Bound<'py, Self>,
        obj: Option<Bound<'py, PyAny>>,
        _owner: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match obj.filter(|o| !o.is_none()) {
            None => Ok(slf.into_any()),
            Some(obj) => Ok(Bound::new(
                slf.py(),
                BoundCachedMethod {
                    func: slf.unbind(),
                    obj: obj.unbind(),
                },
            )?
            .into_any()),
        }
    }

    /// The cache the results are kept in.
    #[getter]
    fn cache(&self, py: Python<'_>) -> Py<PyCache> {
        self.cache.clone_ref(py)
    }

    /// The cache key a call with these arguments uses (a tuple).
    #[pyo3(signature = (*args, **kwargs))]
    fn cache_key<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut kb = KeyBuf::new();
        let k = self.key_of(py, None, args, kwargs, &mut kb)?;
        key::decode(py, k)
    }

    /// (encoded key, value or the miss sentinel), for `_async_call`.
    fn _lookup<'py>(
        &self,
        py: Python<'py>,
        obj: Option<Bound<'py, PyAny>>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        miss: Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyAny>)> {
        let obj = obj.filter(|o| !o.is_none());
        let mut kb = KeyBuf::new();
        let k = self.key_of(py, obj.as_ref(), args, kwargs, &mut kb)?;
        let cache = self.cache.bind(py).get();
        let found = cache.lookup(py, k)?;
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok((PyBytes::new(py, k), found.unwrap_or(miss)))
    }

    /// Looks an encoded key up again (`_async_call` after waiting).
    fn _peek<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyBytes>,
        miss: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cache = self.cache.bind(py).get();
        Ok(cache.lookup(py, key.as_bytes())?.unwrap_or(miss))
    }

    /// Stores a computed result under an encoded key (too large: not kept).
    fn _store(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyBytes>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let cache = self.cache.bind(py).get();
        cache.store_quietly(py, key.as_bytes(), value, self.ttl)
    }

    /// functools-style counters: CacheInfo(hits, misses, maxsize=None,
    /// currsize) where currsize counts this function's entries in the cache.
    fn cache_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cache = self.cache.bind(py).get();
        let entries = cache
            .snapshot_keys(py)?
            .iter()
            .filter(|k| key::is_call_of(k, &self.name))
            .count();
        let info = py.import("functools")?.getattr("_CacheInfo")?;
        info.call1((
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            py.None(),
            entries,
        ))
    }

    /// Removes this function's entries from the cache and zeroes the
    /// counters.
    fn cache_clear(&self, py: Python<'_>) -> PyResult<()> {
        let cache = self.cache.bind(py).get();
        for k in cache.snapshot_keys(py)?.iter() {
            if key::is_call_of(k, &self.name) {
                cache.remove(py, k)?;
            }
        }
        self.hits.store(0, Ordering::Relaxed);
        self.misses.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("<segcache.cached function {}>", self.name)
    }
}

#[pymethods]
impl BoundCachedMethod {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = self.func.bind(py).get();
        let obj = self.obj.bind(py);
        if f.is_async {
            return async_call(py)?.call1((self.func.bind(py), obj, args, kwargs));
        }
        f.call(py, Some(obj), args, kwargs)
    }

    /// The instance the method is bound to.
    #[getter]
    fn __self__(&self, py: Python<'_>) -> Py<PyAny> {
        self.obj.clone_ref(py)
    }

    /// The unbound cached function.
    #[getter]
    fn __func__(&self, py: Python<'_>) -> Py<CachedFunction> {
        self.func.clone_ref(py)
    }

    /// The cache key a call with these arguments uses (a tuple).
    #[pyo3(signature = (*args, **kwargs))]
    fn cache_key<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = self.func.bind(py).get();
        let mut kb = KeyBuf::new();
        let k = f.key_of(py, Some(self.obj.bind(py)), args, kwargs, &mut kb)?;
        key::decode(py, k)
    }

    fn cache_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.func.bind(py).call_method0("cache_info")
    }

    fn cache_clear(&self, py: Python<'_>) -> PyResult<()> {
        self.func.bind(py).call_method0("cache_clear").map(drop)
    }

    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.func.bind(py).getattr(name)
    }
}

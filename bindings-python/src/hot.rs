//! The common case of the hot entry points (`get`, `set`, `delete` and the
//! mapping operators): a plain `str` key, a `bytes` or plain `str` value
//! copied (under [`DETACH_AT`] bytes) or held by reference (from
//! [`held::HELD_AT`] bytes, see `crate::held`), an open cache. Straight
//! from the objects' memory (see `crate::layout`) to the core and back,
//! with no key buffer, no `PyResult` and no `Bound` in between.
//!
//! Owns that shortcut and nothing else. Each function returns `None`
//! when its case does not apply, before doing anything: the caller then
//! takes the general path (`crate::cache`), which handles every key and
//! value and raises every error. What a shortcut does is exactly what the
//! general path would do for the same arguments (the tests in
//! `tests/test_layout.py` and `tests/test_fastcall.py` check both paths
//! with the same cases); what it skips is the general path's bookkeeping
//! (~50 instructions per call).
//!
//! "Plain": an exact `str` that is compact ASCII (its characters are its
//! UTF-8, read without a C call), 1 to [`MAX_KEY_LEN`] bytes as a key;
//! an exact `bytes` as a value. Anything else (a `str` subclass, a
//! non-ASCII or too long `str`, an empty key, other types) goes the
//! general way.
//!
//! Must never: run Python code, build a GC-tracked object or drop a
//! reference between the `closing` check (`PyCache::open_attached`) and
//! the last use of the cache (see there), or raise anything but the
//! `KeyError` of a missing key (every other outcome that needs an
//! exception goes the general way).

use pyo3::ffi;
use pyo3::prelude::*;
use segcache::{Ttl, MAX_KEY_LEN};

use crate::cache::PyCache;
use crate::held;
use crate::layout;
use crate::value::{self, FLAG_BYTES, FLAG_STR};
use crate::DETACH_AT;

/// A plain key's bytes: an exact, compact ASCII `str` of 1 to
/// [`MAX_KEY_LEN`] bytes (its UTF-8, as `crate::key` encodes it).
///
/// # Safety
/// Attached; `key` a live object, alive for `'a`.
#[inline(always)]
unsafe fn plain_key<'a>(key: *mut ffi::PyObject) -> Option<&'a [u8]> {
    // SAFETY: attached, `key` live (the caller's contract); the type
    // check comes before the layout read, which needs a `str`.
    unsafe {
        if ffi::Py_TYPE(key) != std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
            return None;
        }
        let k = layout::ascii_str(key)?;
        (!k.is_empty() && k.len() <= MAX_KEY_LEN).then_some(k)
    }
}

/// What a plain value is stored as.
enum Plain<'a> {
    /// Its bytes, copied in, with their flags.
    Copy(&'a [u8], u32),
    /// The object itself, held by reference (`crate::held`): its flags
    /// and weight.
    Held(u32, u32),
}

/// A plain value: an exact `bytes` or an exact compact ASCII `str`, held
/// by reference from [`held::HELD_AT`] to `held_max` bytes (the cache's
/// `held_max`, 0 if it holds nothing), else copied if shorter than
/// [`DETACH_AT`] (longer copies release the GIL: the general path).
///
/// # Safety
/// Attached; `value` a live object, alive for `'a`.
#[inline(always)]
unsafe fn plain_value<'a>(value: *mut ffi::PyObject, held_max: usize) -> Option<Plain<'a>> {
    // SAFETY: as `plain_key`.
    unsafe {
        let ty = ffi::Py_TYPE(value);
        let (v, flags) = if ty == std::ptr::addr_of_mut!(ffi::PyBytes_Type) {
            (layout::bytes(value)?, FLAG_BYTES)
        } else if ty == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
            (layout::ascii_str(value)?, FLAG_STR)
        } else {
            return None;
        };
        if (held::HELD_AT..=held_max).contains(&v.len()) {
            return Some(if flags == FLAG_BYTES {
                Plain::Held(held::FLAG_HELD_BYTES, held::bytes_weight(v.len()))
            } else {
                Plain::Held(held::FLAG_HELD_STR, held::str_weight(v.len()))
            });
        }
        (v.len() < DETACH_AT).then_some(Plain::Copy(v, flags))
    }
}

/// `c.get(key)` / `c[key]`: the value's new reference, or `miss()`'s
/// result for a missing key; `None`: take the general path.
///
/// # Safety
/// Attached; `key` a live object borrowed for the call.
#[inline(always)]
pub unsafe fn get(
    c: &PyCache,
    py: Python<'_>,
    key: *mut ffi::PyObject,
    miss: impl FnOnce() -> *mut ffi::PyObject,
) -> Option<*mut ffi::PyObject> {
    // SAFETY: forwarded.
    let k = unsafe { plain_key(key) }?;
    let fetched = {
        let mut cache = c.access(py)?;
        // Under the reference, `fetch` only builds bytes, str or int. A
        // `bytes` value (the common case) is its object, or NULL with
        // the exception set, as the caller returns it: no `Fetched`.
        cache.get_value_with(k, |v, flags| {
            if flags == FLAG_BYTES {
                Ok(c.recycler.bytes(py, v))
            } else if flags == held::FLAG_HELD_BYTES {
                // SAFETY: attached; `v` is the linked item's value, read
                // under its shard's lock.
                Ok(unsafe { held::take_ref(v) })
            } else {
                Err(value::fetch(py, v, flags))
            }
        })
    };
    match fetched {
        None => Some(miss()),
        Some(Ok(obj)) => Some(obj),
        Some(Err(f)) => Some(other(c, f)),
    }
}

/// A fetched value other than `bytes`: its new reference, or NULL with
/// the exception set (out of line: the `bytes` read's frame stays small).
#[inline(never)]
fn other(c: &PyCache, f: value::Fetched<'_>) -> *mut ffi::PyObject {
    match f.into_ready() {
        Ok(obj) => obj,
        Err(f) => finish(c, f),
    }
}

/// A fetched value that needs the serializer (or failed to build): its
/// new reference, or NULL with the exception set.
#[cold]
#[inline(never)]
fn finish(c: &PyCache, f: value::Fetched<'_>) -> *mut ffi::PyObject {
    match f.finish(&c.serializer) {
        Ok(v) => v.into_ptr(),
        Err(e) => {
            crate::convert::restore_attached(e);
            std::ptr::null_mut()
        }
    }
}

/// `c[key] = value` / `c.set(key, value[, ttl])`: `ok` once written, or
/// `err` with the exception set as the general path would set it (with
/// `convert::to_py_err`); `None`: take the general path.
///
/// The outcome is the caller's return value itself (a C int or an object
/// pointer in a register): the core's `Result` is looked at only for its
/// discriminant on success, and its error moved only on the cold path.
///
/// # Safety
/// Attached; `key` and `value` live objects borrowed for the call.
#[inline(always)]
pub unsafe fn set<R>(
    c: &PyCache,
    py: Python<'_>,
    key: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
    ttl: Ttl,
    ok: R,
    err: R,
) -> Option<R> {
    // SAFETY: forwarded.
    let k = unsafe { plain_key(key) }?;
    // SAFETY: forwarded.
    let written = match unsafe { plain_value(value, c.held_max) }? {
        Plain::Copy(v, flags) => c.access(py)?.set(k, v, flags, ttl),
        // SAFETY: forwarded.
        Plain::Held(flags, weight) => unsafe { set_held(c, py, k, value, flags, weight, ttl) }?,
    };
    Some(if written.is_ok() {
        ok
    } else {
        // SAFETY: forwarded.
        unsafe { write_failed(py, key, written, err) }
    })
}

/// [`set`] of a value held by reference: the cache takes a reference of
/// its own, kept if the write succeeds; `None` for a closed cache.
///
/// # Safety
/// Attached; `value` a live object borrowed for the call.
#[inline(never)]
unsafe fn set_held(
    c: &PyCache,
    py: Python<'_>,
    k: &[u8],
    value: *mut ffi::PyObject,
    flags: u32,
    weight: u32,
    ttl: Ttl,
) -> Option<Result<(), segcache::Error>> {
    let mut cache = c.access(py)?;
    // SAFETY: attached; `value` is live (the caller's contract). The core
    // runs no Python code; a release it makes drops only a held `bytes`
    // or `str`, which the hot paths may do (see `crate::held`).
    unsafe { ffi::Py_IncRef(value) };
    let written = cache.set_external(k, held::external(value, weight), flags, ttl);
    if written.is_err() {
        // SAFETY: the reference taken above, which the cache refused.
        unsafe { ffi::Py_DecRef(value) };
    }
    Some(written)
}

/// Sets the exception for a failed write of `key` (`written` is an
/// error) and returns `err`.
///
/// # Safety
/// Attached; `key` a live object borrowed for the call.
#[cold]
#[inline(never)]
unsafe fn write_failed<R>(
    py: Python<'_>,
    key: *mut ffi::PyObject,
    written: Result<(), segcache::Error>,
    err: R,
) -> R {
    if let Err(e) = written {
        // SAFETY: forwarded.
        let key = unsafe { Borrowed::from_ptr(py, key) };
        crate::convert::restore_attached(crate::convert::to_py_err(e, Some(&key)));
    }
    err
}

/// `del c[key]` / `c.delete(key)`: whether the key was there; `None`:
/// take the general path.
///
/// # Safety
/// Attached; `key` a live object borrowed for the call.
#[inline(always)]
pub unsafe fn delete(c: &PyCache, py: Python<'_>, key: *mut ffi::PyObject) -> Option<bool> {
    // SAFETY: forwarded.
    let k = unsafe { plain_key(key) }?;
    Some(c.access(py)?.delete(k))
}

/// `key in c`; `None`: take the general path.
///
/// # Safety
/// Attached; `key` a live object borrowed for the call.
#[inline(always)]
pub unsafe fn contains(c: &PyCache, py: Python<'_>, key: *mut ffi::PyObject) -> Option<bool> {
    // SAFETY: forwarded.
    let k = unsafe { plain_key(key) }?;
    Some(c.access(py)?.contains(k))
}

/// A TTL given as an exact `int` of 0 (never) to `i64::MAX` seconds, as
/// `convert::ttl_arg` and the write read it; `None` for anything else (a
/// float, a timedelta, `None`, a negative or huge int, another type: the
/// general path converts it or raises).
///
/// # Safety
/// Attached; `ttl` a live object.
#[inline(always)]
pub unsafe fn int_ttl(ttl: *mut ffi::PyObject) -> Option<Ttl> {
    // SAFETY: attached; `ttl` is live; the call is made on an exact int.
    unsafe {
        if ffi::Py_TYPE(ttl) != std::ptr::addr_of_mut!(ffi::PyLong_Type) {
            return None;
        }
        let mut overflow: std::ffi::c_int = 0;
        let n = ffi::PyLong_AsLongLongAndOverflow(ttl, &mut overflow);
        // An exact int cannot fail; -1 and every negative value go the
        // general way, which raises.
        if overflow != 0 || n < 0 {
            return None;
        }
        Some(match n {
            0 => Ttl::Never,
            n => Ttl::After(std::time::Duration::from_secs(n as u64)),
        })
    }
}

//! Python arguments to Rust values: byte buffers, ints, seconds and TTLs,
//! and core errors to the Python exceptions the package documents.
//!
//! Owns argument checking and error mapping; never touches the cache.

use pyo3::exceptions::{PyKeyError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyMemoryView, PyString, PyType};
use std::time::Duration;

use crate::CacheFullError;

/// Bytes borrowed from an immutable Python object (`bytes`, or a `str`'s
/// cached UTF-8), or copied out of a mutable one.
pub enum Buf<'a> {
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

/// The UTF-8 bytes of a `str`, borrowed from the string (CPython caches
/// them in the object after the first call: no copy, no allocation); a
/// compact ASCII `str` read directly (see `crate::layout`).
#[inline(always)]
pub fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a [u8]> {
    // SAFETY: `s` is a live `str`, borrowed for 'a.
    if let Some(b) = unsafe { crate::layout::ascii_str(s.as_ptr()) } {
        return Ok(b);
    }
    str_bytes_api(s)
}

/// The characters of a `str` that is all ASCII (they are its UTF-8),
/// borrowed from it; `None` for any other `str`. Read directly where the
/// layout is verified (a compact ASCII `str`, see `crate::layout`); where
/// it is not (a free-threaded build, an unknown layout), through the C
/// API: the UTF-8 is ASCII when it has as many bytes as the string has
/// characters. Callers pass an exact `str` (compact in every CPython the
/// package supports), so both ways agree.
#[inline]
pub fn ascii_bytes<'a>(s: &'a Bound<'_, PyString>) -> Option<&'a [u8]> {
    // SAFETY: `s` is a live `str`, borrowed for 'a.
    if let Some(b) = unsafe { crate::layout::ascii_str(s.as_ptr()) } {
        return Some(b);
    }
    if crate::layout::active().0 {
        return None;
    }
    // SAFETY: `s` is a live `str` and we are attached (we hold a `Bound`).
    let chars = unsafe { pyo3::ffi::PyUnicode_GetLength(s.as_ptr()) };
    match str_bytes_api(s) {
        Ok(utf8) if chars >= 0 && utf8.len() == chars as usize => Some(utf8),
        Ok(_) => None,
        Err(e) => {
            discard(s.py(), e);
            None
        }
    }
}

/// [`str_bytes`] through the C API (any `str`, any layout).
#[inline(never)]
fn str_bytes_api<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a [u8]> {
    let mut len: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live `str` and we are attached to the interpreter.
    let ptr = unsafe { pyo3::ffi::PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut len) };
    if ptr.is_null() {
        return Err(PyErr::fetch(s.py()));
    }
    debug_assert!(len >= 0);
    // SAFETY: CPython guarantees `len` bytes at `ptr`, immutable and owned
    // by the string, which outlives 'a.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) })
}

/// The bytes of a `bytes` object, borrowed from it: read directly where
/// the layout is verified (see `crate::layout`), else one C call
/// (`PyBytes_AsStringAndSize`) where pyo3's `as_bytes` makes two.
#[inline(always)]
pub fn bytes_of<'a>(b: &'a Bound<'_, PyBytes>) -> &'a [u8] {
    // SAFETY: `b` is a live `bytes`, borrowed for 'a.
    if let Some(v) = unsafe { crate::layout::bytes(b.as_ptr()) } {
        return v;
    }
    bytes_of_api(b)
}

/// [`bytes_of`] through the C API.
#[inline(never)]
fn bytes_of_api<'a>(b: &'a Bound<'_, PyBytes>) -> &'a [u8] {
    let mut ptr: *mut std::ffi::c_char = std::ptr::null_mut();
    let mut len: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `b` is a live `bytes` (so the call cannot fail) and we are
    // attached to the interpreter.
    let rc = unsafe { pyo3::ffi::PyBytes_AsStringAndSize(b.as_ptr(), &mut ptr, &mut len) };
    debug_assert!(rc == 0 && !ptr.is_null() && len >= 0);
    // SAFETY: CPython guarantees `len` bytes at `ptr`, immutable and owned
    // by the object, which outlives 'a.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) }
}

/// Reads a key or value argument; `what` names it in the `TypeError`.
pub fn buf<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Buf<'a>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Buf::Borrowed(bytes_of(b)));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return str_bytes(s).map(Buf::Borrowed);
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

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The value of an `int` (or `bool`) that fits in an i64; `None` beyond,
/// without raising: pyo3's `extract::<i64>` would build an `OverflowError`
/// and drop it, and a `PyErr` dropped on the fast-call and slot paths
/// (where pyo3 counts the thread as detached) waits in pyo3's pool until
/// its next entry point, so a loop over big-int keys would pile them up.
#[inline]
pub fn small_int(obj: &Bound<'_, PyAny>) -> Option<i64> {
    debug_assert!(obj.is_instance_of::<PyInt>());
    let mut overflow: std::ffi::c_int = 0;
    // SAFETY: `obj` is a live int and we are attached.
    let n = unsafe { pyo3::ffi::PyLong_AsLongLongAndOverflow(obj.as_ptr(), &mut overflow) };
    if overflow != 0 {
        return None;
    }
    // SAFETY: attached. -1 may be the value or an error (not for an int).
    if n == -1 && unsafe { !pyo3::ffi::PyErr_Occurred().is_null() } {
        // SAFETY: attached; clears without building an exception object.
        unsafe { pyo3::ffi::PyErr_Clear() };
        return None;
    }
    Some(n)
}

/// Sets `e` as the current exception from the fast-call methods and the
/// slots, where pyo3 counts the thread as detached: inside
/// `Python::attach`, so that the references the error drops while it is
/// raised (a lazy error's type and message) are released at once instead
/// of waiting in pyo3's pool for its next entry point (a loop of failing
/// calls would pile them up). Errors only: with the GIL held, `attach`
/// costs a `PyGILState_Ensure`/`Release` pair.
#[cold]
pub fn restore_attached(e: PyErr) {
    Python::attach(|py| e.restore(py));
}

/// Drops a Python error directly: restored (see [`restore_attached`]),
/// then cleared by CPython. A `PyErr` dropped by Rust on the fast-call and
/// slot paths would wait in pyo3's pool instead.
#[cold]
pub fn discard(_py: Python<'_>, e: PyErr) {
    restore_attached(e);
    // SAFETY: attached; clears the error just set.
    unsafe { pyo3::ffi::PyErr_Clear() };
}

/// An int's value: i64 first (one C call), i128 beyond (slower under the
/// stable ABI); `None` beyond that.
#[inline]
fn int_value(obj: &Bound<'_, PyAny>) -> Option<i128> {
    match small_int(obj) {
        Some(n) => Some(n as i128),
        None => obj.extract::<i128>().map_err(|e| discard(obj.py(), e)).ok(),
    }
}

/// An `int` argument (not `bool`) within `min..=max`: `TypeError` or
/// `ValueError` naming it otherwise.
pub fn int_arg(obj: &Bound<'_, PyAny>, what: &str, min: u64, max: u64) -> PyResult<u64> {
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            type_name(obj)
        )));
    }
    let out_of_range =
        || PyValueError::new_err(format!("{what} must be from {min} to {max}, got {obj}"));
    let n = int_value(obj).ok_or_else(out_of_range)?;
    if n < min as i128 || n > max as i128 {
        return Err(out_of_range());
    }
    Ok(n as u64)
}

/// A `bool` argument: `TypeError` naming it otherwise.
pub fn bool_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    obj.cast::<PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a bool, not {}", type_name(obj))))
}

fn timedelta_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    TIMEDELTA.import(py, "datetime", "timedelta")
}

/// Seconds from an `int`, `float` or `timedelta`, non-negative and finite.
pub fn seconds_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let secs: f64 = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be int or float seconds or a datetime.timedelta, not bool"
        )));
    } else if obj.is_instance_of::<PyInt>() {
        let n = int_value(obj)
            .ok_or_else(|| PyValueError::new_err(format!("{what} is out of range: {obj}")))?;
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
pub fn ttl_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        // The common TTL, a plain non-negative int: one C call.
        Some(o) if o.is_exact_instance_of::<PyInt>() => match small_int(o) {
            Some(n) if n >= 0 => Ok(Some(Duration::from_secs(n as u64))),
            _ => seconds_arg(o, "ttl").map(Some),
        },
        Some(o) => seconds_arg(o, "ttl").map(Some),
    }
}

/// Maps a core error to the Python exception the module documents.
pub fn to_py_err(err: segcache::Error, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    use segcache::Error as E;
    match err {
        E::NotFound => match key {
            Some(k) => PyKeyError::new_err((k.clone().unbind(),)),
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
pub fn conditional(result: Result<(), segcache::Error>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
    use segcache::Error as E;
    match result {
        Ok(()) => Ok(true),
        Err(E::NotStored | E::Exists | E::NotFound) => Ok(false),
        Err(e) => Err(to_py_err(e, Some(key))),
    }
}

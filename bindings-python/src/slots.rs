//! The mapping operators' entry points: `c[k]`, `c[k] = v`, `del c[k]`
//! and `k in c` as plain C type slots, on `CacheSlots`, a native subclass
//! of `Cache` that `segcache.Cache` (the Python mapping) derives from.
//!
//! Owns that subclass and the calling convention of those four slots, and
//! nothing else: each slot calls the same `PyCache` dunder pyo3's slot
//! calls, so behaviour is identical. What it saves per operation is pyo3's
//! slot trampoline (its thread-local attach count through
//! `__tls_get_addr`, its deferred-decref pool check and panic trap, ~90
//! instructions of a `c[k] = v`). pyo3 has no way to give a `#[pyclass]`
//! its own slot functions, so the subclass is made with
//! `PyType_FromSpecWithBases` (stable ABI): no fields of its own (its
//! instances are `Cache` objects, allocated, initialised and freed by
//! pyo3's slots, inherited), only these slots. Python subclasses inherit
//! them, unless they define the dunder themselves.
//!
//! Must never: run Python code before the key is checked as pyo3 would,
//! let a panic cross into CPython, or drop a `Py<T>` (pyo3 counts this
//! thread as detached here, so the decref would wait in pyo3's pool until
//! the next pyo3 entry point: a loop of missing keys would pile them up).
//! Hence `KeyError` is raised through the C API, not `PyKeyError::new_err`
//! (which holds the key as a `Py<T>`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::cache::PyCache;
use crate::hot;

/// The subclass's docstring.
const DOC: &std::ffi::CStr = c"Cache with the mapping operators (c[k], c[k] = v, del c[k], k in c) as plain C slots; segcache.Cache derives from it.";

/// Makes `CacheSlots`, the subclass of `base` (pyo3's `Cache`) with the
/// mapping slots below.
pub fn make_type<'py>(base: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyType>> {
    let py = base.py();
    let slot = |slot: c_int, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
    // CPython keeps pointers into the spec's slots only while it builds
    // the type, but the docstring is copied: leak the lot anyway (once
    // per module initialisation), as static data would be.
    let slots = Box::leak(Box::new([
        slot(ffi::Py_mp_subscript, subscript as *mut c_void),
        slot(ffi::Py_mp_ass_subscript, ass_subscript as *mut c_void),
        slot(ffi::Py_sq_contains, contains as *mut c_void),
        slot(ffi::Py_tp_doc, DOC.as_ptr() as *mut c_void),
        slot(0, std::ptr::null_mut()),
    ]));
    let spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"segcache._segcache.CacheSlots".as_ptr(),
        // 0: the base's size and layout (the instance is a `Cache`).
        basicsize: 0,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    }));
    let bases = PyTuple::new(py, [base])?;
    // SAFETY: attached; `spec` and its slots live for the rest of the
    // process; `bases` is a tuple holding one type.
    unsafe {
        Ok(
            Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpecWithBases(spec, bases.as_ptr()))?
                .cast_into_unchecked::<PyType>(),
        )
    }
}

/// Runs `body` on the cache behind `slf`; a panic becomes `RuntimeError`
/// and `err`.
///
/// # Safety
/// Called by CPython as a slot of `CacheSlots`: attached, `slf` an
/// instance of it (hence of `Cache`), every pointer borrowed for the call.
#[inline(always)]
unsafe fn call<R>(
    slf: *mut ffi::PyObject,
    err: R,
    body: impl for<'py> FnOnce(&PyCache, Python<'py>) -> R,
) -> R {
    // SAFETY: CPython calls slots attached to the interpreter.
    let py = unsafe { Python::assume_attached() };
    let out = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: CPython calls a type's slots on its instances only (so
        // `slf` is not NULL: told to the compiler, which then drops
        // `from_ptr`'s NULL check), and `slf` is borrowed for the call, so
        // the cache outlives `body`.
        let cache = unsafe {
            std::hint::assert_unchecked(!slf.is_null());
            &*(Borrowed::from_ptr(py, slf)
                .cast_unchecked::<PyCache>()
                .get() as *const PyCache)
        };
        body(cache, py)
    }));
    match out {
        Ok(v) => v,
        Err(_) => raise(
            py,
            PyRuntimeError::new_err("segcache: internal error (a Rust panic) in a Cache operator"),
            err,
        ),
    }
}

/// Sets the exception and returns `err`.
#[cold]
fn raise<R>(_py: Python<'_>, e: PyErr, err: R) -> R {
    crate::convert::restore_attached(e);
    err
}

/// Sets `KeyError(key)` (the key wrapped in a 1-tuple, as `dict` does, so
/// that a tuple key is the one argument) and returns `err`.
///
/// # Safety
/// Attached; `key` a live object.
#[cold]
unsafe fn key_error<R>(key: *mut ffi::PyObject, err: R) -> R {
    // SAFETY: attached; PyTuple_SetItem steals the reference we add.
    unsafe {
        let args = ffi::PyTuple_New(1);
        if !args.is_null() {
            ffi::Py_IncRef(key);
            ffi::PyTuple_SetItem(args, 0, key);
            ffi::PyErr_SetObject(ffi::PyExc_KeyError, args);
            ffi::Py_DecRef(args);
        }
    }
    err
}

/// `c[key]`.
unsafe extern "C" fn subscript(
    slf: *mut ffi::PyObject,
    key: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython's slot contract (see `call`); `key` is borrowed.
    unsafe {
        call(slf, std::ptr::null_mut(), |c, py| {
            match hot::get(c, py, key, || key_error(key, std::ptr::null_mut())) {
                Some(r) => r,
                None => subscript_general(c, py, key),
            }
        })
    }
}

/// `c[key]` for what `hot::get` does not take (out of line: the hot
/// path's frame stays small).
///
/// # Safety
/// Attached; `key` a live object borrowed for the call.
#[inline(never)]
unsafe fn subscript_general(
    c: &PyCache,
    py: Python<'_>,
    key: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: forwarded.
    unsafe {
        match c.get_item(py, &Borrowed::from_ptr(py, key)) {
            Ok(Some(v)) => v.into_ptr(),
            Ok(None) => key_error(key, std::ptr::null_mut()),
            Err(e) => raise(py, e, std::ptr::null_mut()),
        }
    }
}

/// `c[key] = value`, or `del c[key]` when `value` is NULL.
unsafe extern "C" fn ass_subscript(
    slf: *mut ffi::PyObject,
    key: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
) -> c_int {
    // SAFETY: CPython's slot contract (see `call`); `key` and `value`
    // (when not NULL) are borrowed.
    unsafe {
        call(slf, -1, |c, py| {
            if value.is_null() {
                match hot::delete(c, py, key) {
                    Some(true) => 0,
                    Some(false) => key_error(key, -1),
                    None => ass_subscript_general(c, py, key, value),
                }
            } else {
                match hot::set(c, py, key, value, segcache::Ttl::Never, 0, -1) {
                    Some(r) => r,
                    None => ass_subscript_general(c, py, key, value),
                }
            }
        })
    }
}

/// `c[key] = value` / `del c[key]` for what `hot` does not take (out of
/// line: the hot path's frame stays small).
///
/// # Safety
/// Attached; `key` and `value` (when not NULL) live objects borrowed for
/// the call.
#[inline(never)]
unsafe fn ass_subscript_general(
    c: &PyCache,
    py: Python<'_>,
    key: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        let k = Borrowed::from_ptr(py, key);
        let done = if value.is_null() {
            match c.delete(py, &k) {
                Ok(true) => Ok(()),
                Ok(false) => return key_error(key, -1),
                Err(e) => Err(e),
            }
        } else {
            c.__setitem__(py, &k, &Borrowed::from_ptr(py, value))
        };
        match done {
            Ok(()) => 0,
            Err(e) => raise(py, e, -1),
        }
    }
}

/// `key in c`.
unsafe extern "C" fn contains(slf: *mut ffi::PyObject, key: *mut ffi::PyObject) -> c_int {
    // SAFETY: CPython's slot contract (see `call`); `key` is borrowed.
    unsafe {
        call(slf, -1, |c, py| {
            if let Some(b) = hot::contains(c, py, key) {
                return c_int::from(b);
            }
            match c.__contains__(py, &Borrowed::from_ptr(py, key)) {
                Ok(b) => c_int::from(b),
                Err(e) => raise(py, e, -1),
            }
        })
    }
}

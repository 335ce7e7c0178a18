//! The hot methods' entry points: `get`, `set` and `delete` of `Cache`,
//! as plain `METH_FASTCALL` C functions installed over the ones pyo3
//! generated.
//!
//! Owns the calling convention of these three methods and nothing else:
//! each entry point only binds its arguments (positional or by keyword)
//! and calls the same `PyCache` method pyo3's wrapper calls, so behaviour
//! is identical. What it saves per call is pyo3's trampoline (its
//! thread-local attach count, deferred-decref pool check and panic trap)
//! and its argument parser, about half of the binding's own instructions
//! per `get`. A call it cannot bind (unknown or repeated keywords, a wrong
//! count) is handed to the method pyo3 generated (kept aside at install
//! time), so error messages are pyo3's, unchanged.
//!
//! The mapping operators (`c[k]`, `c[k] = v`, `del c[k]`, `k in c`) are
//! type slots, not methods: a method descriptor under `__getitem__` would
//! make CPython dispatch the operators through its generic slot functions
//! (a method lookup per call). `crate::slots` gives them plain C slots.
//!
//! Must never: run Python code before its arguments are checked the way
//! pyo3 would check them, let a panic cross into CPython, or drop a
//! `Py<T>` or a `PyErr` (pyo3 counts this thread as detached here, so the
//! decref would wait in pyo3's pool until its next entry point): errors
//! are raised through `convert::restore_attached`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cache::PyCache;
use crate::hot;

/// One method this module replaces: its name, its parameters (after
/// self; each may be passed by keyword) and how many are required.
struct Method {
    name: &'static str,
    params: &'static [&'static CStr],
    required: usize,
}

/// The methods this module replaces, in [`SLOW`]'s order.
const METHODS: [Method; 3] = [
    Method {
        name: "get",
        params: &[c"key", c"default"],
        required: 1,
    },
    Method {
        name: "set",
        params: &[c"key", c"value", c"ttl"],
        required: 2,
    },
    Method {
        name: "delete",
        params: &[c"key"],
        required: 1,
    },
];

/// The most parameters a replaced method has.
const MAX_PARAMS: usize = 3;

/// The descriptors pyo3 generated for [`METHODS`] (strong references, kept
/// for the life of the process), for calls the fast path does not take.
static SLOW: [AtomicPtr<ffi::PyObject>; 3] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 3];

/// Each method's parameter names as interned `str`s (leaked: they live as
/// long as the process), in [`METHODS`]' order: CPython interns the
/// keyword names of a call written in code, so a pointer comparison
/// usually binds a keyword.
static NAMES: [[AtomicPtr<ffi::PyObject>; MAX_PARAMS]; 3] =
    [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_PARAMS] }; 3];

/// The method definitions [`install`] made, in [`METHODS`]' order (leaked:
/// they live as long as the process), for [`install_on_subclass`].
static DEFS: [AtomicPtr<ffi::PyMethodDef>; 3] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 3];

/// The entry points, in [`METHODS`]' order.
const ENTRIES: [ffi::PyCFunctionFastWithKeywords; 3] = [get, set, delete];

/// Replaces pyo3's descriptors for [`METHODS`] on `Cache` with fast-call
/// ones, keeping each one's docstring and text signature.
pub fn install(ty: &Bound<'_, PyType>) -> PyResult<()> {
    let py = ty.py();
    if !SLOW[0].load(Ordering::Acquire).is_null() {
        // Installed already (the module initialised again): the methods on
        // `ty` are ours, and must not become their own slow path.
        return Ok(());
    }
    for (i, method) in METHODS.iter().enumerate() {
        let name = method.name;
        debug_assert!(method.params.len() <= MAX_PARAMS);
        let original = ty.getattr(name)?;
        let doc: Option<String> = original.getattr("__doc__")?.extract()?;
        let sig: Option<String> = original.getattr("__text_signature__")?.extract()?;
        // CPython reads a text signature from a docstring that starts with
        // "name(...)\n--\n\n".
        let doc = match sig {
            Some(sig) => format!("{name}{sig}\n--\n\n{}", doc.unwrap_or_default()),
            None => doc.unwrap_or_default(),
        };
        let def = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: CString::new(name)?.into_raw(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: ENTRIES[i],
            },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: CString::new(doc)?.into_raw(),
        }));
        // SAFETY: `def` lives for the rest of the process (leaked), `ty` is
        // a live type object, and we are attached.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))?
        };
        for (j, param) in method.params.iter().enumerate() {
            // SAFETY: a NUL-terminated ASCII name; attached.
            let name = unsafe { ffi::PyUnicode_InternFromString(param.as_ptr()) };
            if name.is_null() {
                return Err(PyErr::fetch(py));
            }
            NAMES[i][j].store(name, Ordering::Release);
        }
        SLOW[i].store(original.unbind().into_ptr(), Ordering::Release);
        DEFS[i].store(def, Ordering::Release);
        ty.setattr(name, descr)?;
    }
    Ok(())
}

/// Puts the same fast-call methods on `sub`, a subclass of `Cache` (the
/// Python mapping `segcache.Cache`), as descriptors of `sub` itself.
///
/// CPython's specialised call of a method descriptor
/// (`PRECALL`/`CALL_METHOD_DESCRIPTOR_FAST_WITH_KEYWORDS`) applies only
/// when the instance's type *is* the descriptor's type: with the methods
/// defined on `Cache` only, every `c.get(k)` on a `segcache.Cache` fell
/// back to the generic call (~180 instructions more per call, measured on
/// 3.11). Instances of further subclasses still take the generic call.
pub fn install_on_subclass(sub: &Bound<'_, PyType>) -> PyResult<()> {
    let py = sub.py();
    let base = py.get_type::<PyCache>();
    if !sub.is_subclass(&base)? || sub.is(&base) {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "_install_fast_methods takes a subclass of segcache._segcache.Cache",
        ));
    }
    for (i, method) in METHODS.iter().enumerate() {
        let def = DEFS[i].load(Ordering::Acquire);
        if def.is_null() {
            return Err(PyRuntimeError::new_err(
                "segcache: fast methods not installed",
            ));
        }
        // SAFETY: `def` was leaked by `install` and lives for the rest of
        // the process; `sub` is a live type object, a subclass of `Cache`
        // (checked above: the entry points may take `slf` as a `Cache`);
        // attached.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(sub.as_type_ptr(), def))?
        };
        sub.setattr(method.name, descr)?;
    }
    Ok(())
}

/// Runs `body` on the cache behind `slf` and its bound arguments, or hands
/// a call it cannot bind to pyo3's method `SLOW[slow]`.
///
/// # Safety
/// CPython's fast-call contract: attached, `slf` an instance of `Cache`
/// (the method descriptor checked it), `args` holding `nargs` positional
/// then `len(kwnames)` keyword arguments, all borrowed.
#[inline(always)]
unsafe fn call(
    slow: usize,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    hot: impl for<'py> FnOnce(&PyCache, Python<'py>) -> Option<*mut ffi::PyObject>,
    body: impl for<'py> FnOnce(&PyCache, Python<'py>, &[Borrowed<'_, 'py, PyAny>]) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods attached to the interpreter.
    let py = unsafe { Python::assume_attached() };
    let out = catch_unwind(AssertUnwindSafe(|| {
        let method = &METHODS[slow];
        // The commonest call: the required arguments, positionally, as
        // `hot` reads them; it returns `None` to go the general way.
        if kwnames.is_null() && nargs == method.required as ffi::Py_ssize_t {
            // SAFETY: the descriptor checked `slf`'s type (so it is not
            // NULL: told to the compiler, which then drops `from_ptr`'s
            // NULL check); `slf` is borrowed for the call.
            let cache = unsafe {
                std::hint::assert_unchecked(!slf.is_null());
                &*(Borrowed::from_ptr(py, slf)
                    .cast_unchecked::<PyCache>()
                    .get() as *const PyCache)
            };
            if let Some(r) = hot(cache, py) {
                return r;
            }
        }
        // SAFETY: forwarded from our caller.
        unsafe { general(py, slow, slf, args, nargs, kwnames, body) }
    }));
    match out {
        Ok(v) => v,
        Err(_) => raise(
            py,
            PyRuntimeError::new_err("segcache: internal error (a Rust panic) in a Cache method"),
        ),
    }
}

/// [`call`]'s general path (out of line, so that the hot path's frame is
/// small): binds the arguments and runs `body`, or hands the call to
/// pyo3's method.
///
/// # Safety
/// As [`call`].
#[inline(never)]
unsafe fn general<'py>(
    py: Python<'py>,
    slow: usize,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    body: impl FnOnce(&PyCache, Python<'py>, &[Borrowed<'_, 'py, PyAny>]) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let method = &METHODS[slow];
    let mut bound = [std::ptr::null_mut(); MAX_PARAMS];
    let (args, n) = match usize::try_from(nargs) {
        // The common call: positional arguments only, as many as the
        // method takes.
        Ok(n) if kwnames.is_null() && (method.required..=method.params.len()).contains(&n) => {
            (args, n)
        }
        // SAFETY: forwarded from our caller.
        _ => match unsafe { bind(slow, args, nargs, kwnames, &mut bound) } {
            Some(n) => (bound.as_ptr(), n),
            // SAFETY: forwarded from our caller.
            None => {
                return ret(py, unsafe {
                    call_slow(py, slow, slf, args, nargs, kwnames)
                })
            }
        },
    };
    // SAFETY: the descriptor checked `slf`'s type; `args` holds `n`
    // (at most MAX_PARAMS) live objects that the caller keeps alive
    // for this call.
    let (cache, args) = unsafe {
        debug_assert!(!slf.is_null() && n <= MAX_PARAMS);
        let slf = Borrowed::from_ptr(py, slf);
        let arg = |i: usize| {
            if i < n {
                Borrowed::from_ptr(py, *args.add(i))
            } else {
                slf
            }
        };
        (
            slf.cast_unchecked::<PyCache>().get() as *const PyCache,
            [arg(0), arg(1), arg(2)],
        )
    };
    // SAFETY: `slf` is borrowed for the call, so the cache outlives it.
    body(unsafe { &*cache }, py, &args[..n])
}

/// Puts the arguments of a call with keywords to `METHODS[slow]` into
/// `bound` in parameter order and returns how many there are (a prefix of
/// the parameters, at least the required ones); `None` for anything else
/// (too many, unknown or repeated keywords, a gap), which pyo3's method
/// then reports.
///
/// # Safety
/// As [`call`].
#[inline(never)]
unsafe fn bind(
    slow: usize,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    bound: &mut [*mut ffi::PyObject; MAX_PARAMS],
) -> Option<usize> {
    let method = &METHODS[slow];
    let nargs = usize::try_from(nargs)
        .ok()
        .filter(|&n| n <= method.params.len())?;
    if kwnames.is_null() {
        return None;
    }
    // SAFETY: `args` holds `nargs` positional arguments, then one value
    // per name of `kwnames` (a tuple of str).
    unsafe {
        std::ptr::copy_nonoverlapping(args, bound.as_mut_ptr(), nargs);
        let nkw = usize::try_from(ffi::PyTuple_Size(kwnames)).ok()?;
        for k in 0..nkw {
            let name = ffi::PyTuple_GetItem(kwnames, k as ffi::Py_ssize_t);
            let interned = &NAMES[slow][..method.params.len()];
            let at = match interned
                .iter()
                .position(|p| p.load(Ordering::Relaxed) == name)
            {
                Some(at) => at,
                None => method
                    .params
                    .iter()
                    .position(|p| ffi::PyUnicode_CompareWithASCIIString(name, p.as_ptr()) == 0)?,
            };
            if !bound[at].is_null() {
                return None;
            }
            bound[at] = *args.add(nargs + k);
        }
    }
    let n = bound.iter().take_while(|p| !p.is_null()).count();
    let gap = bound[n..].iter().any(|p| !p.is_null());
    (n >= method.required && !gap).then_some(n)
}

/// A result as CPython takes it: a new reference, or NULL with the
/// exception set.
#[inline(always)]
fn ret(py: Python<'_>, r: PyResult<Bound<'_, PyAny>>) -> *mut ffi::PyObject {
    match r {
        Ok(v) => v.into_ptr(),
        Err(e) => raise(py, e),
    }
}

/// Sets the exception; NULL.
#[cold]
fn raise(_py: Python<'_>, e: PyErr) -> *mut ffi::PyObject {
    crate::convert::restore_attached(e);
    std::ptr::null_mut()
}

/// A new reference to `None`.
#[inline(always)]
fn none() -> *mut ffi::PyObject {
    // SAFETY: attached (every caller runs under `call`); None is immortal
    // or at least alive for the interpreter's life.
    unsafe {
        let none = ffi::Py_None();
        ffi::Py_IncRef(none);
        none
    }
}

/// `None`, borrowed (the caller takes a reference before returning it).
#[inline(always)]
fn none_ptr() -> *mut ffi::PyObject {
    // SAFETY: attached (every caller runs under `call`); a static object.
    unsafe { ffi::Py_None() }
}

/// A new reference to `True` or `False`.
#[inline(always)]
fn py_bool(b: bool) -> *mut ffi::PyObject {
    // SAFETY: as `none`.
    unsafe {
        let v = if b { ffi::Py_True() } else { ffi::Py_False() };
        ffi::Py_IncRef(v);
        v
    }
}

/// Calls pyo3's method: `SLOW[slow](slf, *args, **kwargs)`.
///
/// # Safety
/// As [`call`].
#[cold]
unsafe fn call_slow<'py>(
    py: Python<'py>,
    slow: usize,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: install() stored a strong reference before the method that
    // leads here existed; it is never released.
    let method = unsafe { Borrowed::from_ptr(py, SLOW[slow].load(Ordering::Acquire)) };
    let kwnames = (!kwnames.is_null())
        // SAFETY: a tuple of str, borrowed for the call.
        .then(|| unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() });
    let nkw = kwnames.as_ref().map_or(0, |k| k.len());
    // SAFETY: the caller's arguments, borrowed for the call.
    let all = unsafe { std::slice::from_raw_parts(args, nargs as usize + nkw) };
    // SAFETY: every pointer is a live object (above).
    let obj = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) };
    let positional: Vec<_> = std::iter::once(obj(slf))
        .chain(all[..nargs as usize].iter().map(|p| obj(*p)))
        .collect();
    let positional = PyTuple::new(py, positional)?;
    let kwargs = match kwnames {
        None => None,
        Some(names) => {
            let d = PyDict::new(py);
            for (name, value) in names.iter().zip(&all[nargs as usize..]) {
                d.set_item(name, obj(*value))?;
            }
            Some(d)
        }
    };
    method.call(positional, kwargs.as_ref())
}

/// Declares an entry point: `call` with the index into [`METHODS`].
macro_rules! entry {
    (
        $(#[$doc:meta])* $name:ident = $slow:expr,
        hot |$hc:ident, $hpy:ident, $args:ident| $hot:expr,
        |$cache:ident, $py:ident, $a:ident| $body:expr
    ) => {
        $(#[$doc])*
        unsafe extern "C" fn $name(
            slf: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            let $args = args;
            // SAFETY: CPython calls it as a fast-call method of `Cache`;
            // `hot` runs only with the method's required arguments in
            // `args` (see `call`).
            unsafe {
                call(
                    $slow,
                    slf,
                    args,
                    nargs,
                    kwnames,
                    |$hc, $hpy| $hot,
                    |$cache, $py, $a| $body,
                )
            }
        }
    };
}

entry!(
    /// `Cache.get(key, default=None)`.
    get = 0,
    hot |c, py, args| hot::get(c, py, *args, none),
    |c, py, a| ret(py, c.get(py, &a[0], a.get(1).map(|d| Bound::clone(d))))
);
entry!(
    /// `Cache.set(key, value, ttl=None)`.
    set = 1,
    hot |c, py, args| hot::set(c, py, *args, *args.add(1), segcache::Ttl::Never, none_ptr(), std::ptr::null_mut())
        .inspect(|&r| {
            if !r.is_null() {
                // `None`, attached (under `call`): a new reference.
                ffi::Py_IncRef(r);
            }
        }),
    |c, py, a| {
        // `set(k, v, ttl)` / `set(k, v, ttl=...)` with a plain int TTL:
        // the shortcut too, once bound.
        if let Some(ttl) = a.get(2).and_then(|t| hot::int_ttl(t.as_ptr())) {
            if let Some(r) = hot::set(c, py, a[0].as_ptr(), a[1].as_ptr(), ttl, none_ptr(), std::ptr::null_mut()) {
                if !r.is_null() {
                    // `None`, attached (under `call`): a new reference.
                    ffi::Py_IncRef(r);
                }
                return r;
            }
        }
        match c.set(py, &a[0], &a[1], a.get(2).map(|t| &**t)) {
            Ok(()) => none(),
            Err(e) => raise(py, e),
        }
    }
);
entry!(
    /// `Cache.delete(key)`.
    delete = 2,
    hot |c, py, args| hot::delete(c, py, *args).map(py_bool),
    |c, py, a| match c.delete(py, &a[0]) {
        Ok(b) => py_bool(b),
        Err(e) => raise(py, e),
    }
);

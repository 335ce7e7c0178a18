//! Values: Python objects to the bytes and flags the cache stores, and back.
//!
//! Owns the value encoding and the serializer; never touches the cache. The
//! item's 32-bit flags say how its bytes are to be read back:
//!
//! | flags | stored | comes back as |
//! |---|---|---|
//! | 0 | `bytes` (also `bytearray`, `memoryview`) | `bytes` |
//! | 1 | `str`, as UTF-8 | `str` |
//! | 2 | `int` (not `bool`), as decimal digits | `int` (so `incr`/`decr` work on it) |
//! | 3 | anything else, through the serializer's `dumps` | the serializer's `loads` |
//! | 4, 5, 6 | a `bytes`, a compact ASCII `str`, or the serializer's output, of at least [`HELD_AT`](crate::held::HELD_AT) bytes: a handle to the object itself (`crate::held`) | the object (4, 5), or the serializer's `loads` of it (6) |
//!
//! Decoding runs in two steps: [`fetch`] under the shard lock builds the
//! Python object straight from the cache's memory (one copy, no Python code
//! run), or takes a reference to a held one; [`Fetched::finish`] runs the
//! serializer after the lock is dropped.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyInt, PyMemoryView, PyString};

use crate::convert::{bytes_of, discard, small_int, str_bytes, type_name, Buf};
use crate::held::{self, FLAG_HELD_BYTES, FLAG_HELD_SERIALIZED, FLAG_HELD_STR};
use crate::recycle::Recycler;

/// The stored bytes are the value.
pub const FLAG_BYTES: u32 = 0;
/// The stored bytes are a `str`'s UTF-8.
pub const FLAG_STR: u32 = 1;
/// The stored bytes are an `int`'s decimal digits.
pub const FLAG_INT: u32 = 2;
/// The stored bytes are the serializer's `dumps` output.
pub const FLAG_SERIALIZED: u32 = 3;

/// How values other than `bytes`, `str` and `int` are stored.
pub struct Serializer {
    /// What the user passed (`None`: pickle), for `repr` and pickling.
    pub given: Option<Py<PyAny>>,
    dumps: Py<PyAny>,
    loads: Py<PyAny>,
    /// pickle's highest protocol, passed to `pickle.dumps`; `None` for a
    /// user serializer.
    protocol: Option<i32>,
}

impl Serializer {
    /// `pickle` (highest protocol) for `None`, else any object with
    /// `dumps(obj) -> bytes | str` and `loads(bytes) -> obj`.
    pub fn new(py: Python<'_>, given: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        match given.filter(|g| !g.is_none()) {
            None => {
                let pickle = py.import("pickle")?;
                Ok(Serializer {
                    given: None,
                    dumps: pickle.getattr("dumps")?.unbind(),
                    loads: pickle.getattr("loads")?.unbind(),
                    protocol: Some(pickle.getattr("HIGHEST_PROTOCOL")?.extract()?),
                })
            }
            Some(g) => {
                let dumps = g.getattr("dumps").ok().filter(|f| f.is_callable());
                let loads = g.getattr("loads").ok().filter(|f| f.is_callable());
                match (dumps, loads) {
                    (Some(dumps), Some(loads)) => Ok(Serializer {
                        given: Some(g.clone().unbind()),
                        dumps: dumps.unbind(),
                        loads: loads.unbind(),
                        protocol: None,
                    }),
                    _ => Err(PyTypeError::new_err(format!(
                        "serializer must have dumps() and loads(), like pickle or json; got {}",
                        type_name(g)
                    ))),
                }
            }
        }
    }

    fn dumps<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let dumps = self.dumps.bind(obj.py());
        match self.protocol {
            Some(p) => dumps.call1((obj, p)),
            None => dumps.call1((obj,)),
        }
    }
}

/// A value ready to store: its bytes and flags.
pub struct Encoded<'a, 'py> {
    data: Data<'a, 'py>,
    /// How to read the bytes back (one of the `FLAG_` constants).
    pub flags: u32,
}

enum Data<'a, 'py> {
    Buf(Buf<'a>),
    Digits([u8; 20], u8),
    Object(Bound<'py, PyBytes>),
}

impl std::ops::Deref for Encoded<'_, '_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.data {
            Data::Buf(b) => b,
            Data::Digits(d, n) => &d[20 - *n as usize..],
            Data::Object(o) => o.as_bytes(),
        }
    }
}

/// Digits of `n`, right-aligned in a 20-byte buffer (i64::MIN fits).
fn digits(n: i64) -> ([u8; 20], u8) {
    let mut buf = [0u8; 20];
    let mut i = 20;
    let neg = n < 0;
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    (buf, (20 - i) as u8)
}

/// `obj`'s flags and weight if it is a value to hold by reference
/// (`crate::held`): an exact `bytes`, or an exact compact ASCII `str`, of
/// [`HELD_AT`](held::HELD_AT) to `max` bytes.
#[inline]
pub fn held_of(obj: &Bound<'_, PyAny>, max: usize) -> Option<(u32, u32)> {
    if let Ok(b) = obj.cast_exact::<PyBytes>() {
        let len = bytes_of(b).len();
        return (held::HELD_AT..=max)
            .contains(&len)
            .then(|| (FLAG_HELD_BYTES, held::bytes_weight(len)));
    }
    if let Ok(s) = obj.cast_exact::<PyString>() {
        let len = crate::convert::ascii_bytes(s)?.len();
        return (held::HELD_AT..=max)
            .contains(&len)
            .then(|| (FLAG_HELD_STR, held::str_weight(len)));
    }
    None
}

impl<'py> Encoded<'_, 'py> {
    /// The `bytes` this encoding made (a serializer's output, a
    /// `memoryview`'s copy) if it is to be held by reference rather than
    /// copied ([`HELD_AT`](held::HELD_AT) to `max` bytes): the object, its
    /// flags and its weight.
    #[inline]
    pub fn held(&self, max: usize) -> Option<(&Bound<'py, PyAny>, u32, u32)> {
        let Data::Object(obj) = &self.data else {
            return None;
        };
        let len = obj.as_bytes().len();
        if !(held::HELD_AT..=max).contains(&len) || !obj.is_exact_instance_of::<PyBytes>() {
            return None;
        }
        let flags = match self.flags {
            FLAG_SERIALIZED => FLAG_HELD_SERIALIZED,
            FLAG_BYTES => FLAG_HELD_BYTES,
            _ => return None,
        };
        Some((obj.as_any(), flags, held::bytes_weight(len)))
    }
}

/// Encodes a value for storage; runs the serializer for other types.
#[inline]
pub fn encode<'a, 'py>(obj: &'a Bound<'py, PyAny>, ser: &Serializer) -> PyResult<Encoded<'a, 'py>> {
    if let Ok(b) = obj.cast_exact::<PyBytes>() {
        return Ok(Encoded {
            data: Data::Buf(Buf::Borrowed(bytes_of(b))),
            flags: FLAG_BYTES,
        });
    }
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return Ok(Encoded {
            data: Data::Buf(Buf::Borrowed(str_bytes(s)?)),
            flags: FLAG_STR,
        });
    }
    if obj.is_exact_instance_of::<PyInt>() {
        if let Some(n) = small_int(obj) {
            let (d, len) = digits(n);
            return Ok(Encoded {
                data: Data::Digits(d, len),
                flags: FLAG_INT,
            });
        }
        // Huge ints: their decimal form (Python may refuse very long ones;
        // those are pickled).
        match obj.str() {
            Ok(s) => {
                let text = s.to_cow()?.into_owned().into_bytes();
                return Ok(Encoded {
                    data: Data::Buf(Buf::Owned(text)),
                    flags: FLAG_INT,
                });
            }
            Err(e) => discard(obj.py(), e),
        }
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Encoded {
            data: Data::Buf(Buf::Owned(b.to_vec())),
            flags: FLAG_BYTES,
        });
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        let copy = obj.call_method0("tobytes")?.cast_into::<PyBytes>()?;
        return Ok(Encoded {
            data: Data::Object(copy),
            flags: FLAG_BYTES,
        });
    }
    let out = ser.dumps(obj)?;
    let out = if let Ok(s) = out.cast::<PyString>() {
        PyBytes::new(obj.py(), str_bytes(s)?)
    } else if let Ok(b) = out.cast::<PyBytes>() {
        b.clone()
    } else if let Ok(b) = out.cast::<PyByteArray>() {
        PyBytes::new(obj.py(), &b.to_vec())
    } else {
        return Err(PyTypeError::new_err(format!(
            "serializer.dumps() returned {}, not bytes or str",
            type_name(&out)
        )));
    };
    Ok(Encoded {
        data: Data::Object(out),
        flags: FLAG_SERIALIZED,
    })
}

/// A value read under the shard lock; [`Fetched::finish`] completes it.
/// An owned object pointer, NULL if Python could not build it (out of
/// memory: the exception is set), and what the object is.
pub struct Fetched<'py> {
    obj: *mut ffi::PyObject,
    kind: Kind,
    py: Python<'py>,
}

/// What a [`Fetched`] object is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The value itself.
    Ready,
    /// Serialized bytes, for the serializer's `loads`.
    Serialized,
    /// Decimal digits of an int beyond 64 bits, as bytes.
    BigInt,
}

impl Drop for Fetched<'_> {
    /// An unfinished value (a read retried): its reference, or its
    /// exception, goes.
    fn drop(&mut self) {
        if self.obj.is_null() {
            // SAFETY: attached (we hold `py`); the exception the C call
            // set goes, without a `PyErr` (see `convert::discard`).
            unsafe { ffi::PyErr_Clear() };
        } else {
            // SAFETY: an owned reference; attached (we hold `py`).
            unsafe { ffi::Py_DecRef(self.obj) };
        }
    }
}

/// A new `bytes` holding `data` (NULL with the exception set on failure).
#[inline(always)]
fn new_bytes(data: &[u8]) -> *mut ffi::PyObject {
    // SAFETY: `data` is valid for its length; the call copies it.
    unsafe { ffi::PyBytes_FromStringAndSize(data.as_ptr().cast(), data.len() as ffi::Py_ssize_t) }
}

/// [`fetch`], with a `bytes` value made by `recycler` (refilling an
/// object a reader has let go of, see `crate::recycle`): call it under
/// the shard lock, with the GIL held throughout (no detach) on a GIL
/// build.
#[inline(always)]
pub fn fetch_recycled<'py>(
    py: Python<'py>,
    recycler: &Recycler,
    data: &[u8],
    flags: u32,
) -> Fetched<'py> {
    if flags == FLAG_BYTES {
        return Fetched {
            obj: recycler.bytes(py, data),
            kind: Kind::Ready,
            py,
        };
    }
    fetch(py, data, flags)
}

/// Builds the Python value from the cache's bytes, straight from the
/// segment, or takes a reference to a held one: call it under the shard
/// lock, on the item the read found (never on a copy of its bytes made
/// earlier: a held value's handle is valid only while the item is
/// linked). Runs no Python code and builds only `bytes`, `str` and `int`
/// objects (none tracked by the garbage collector, so none can start a
/// collection): the caller may hold the cache without a lock (see
/// `PyCache::cache_attached`).
#[inline]
pub fn fetch<'py>(py: Python<'py>, data: &[u8], flags: u32) -> Fetched<'py> {
    if held::is_held(flags) {
        // SAFETY: attached (we hold `py`); `data` is a linked held item's
        // value, read under its shard's lock (this function's contract).
        let obj = unsafe { held::take_ref(data) };
        let kind = if flags == FLAG_HELD_SERIALIZED {
            Kind::Serialized
        } else {
            Kind::Ready
        };
        if obj.is_null() {
            return Fetched {
                obj: new_bytes(data),
                kind,
                py,
            };
        }
        return Fetched { obj, kind, py };
    }
    prefetch(data);
    let (obj, kind) = match flags {
        FLAG_BYTES => (new_bytes(data), Kind::Ready),
        // Not UTF-8 (bytes appended to a str value): the bytes (below).
        // Checked here, not by CPython, whose UnicodeDecodeError is an
        // object the garbage collector tracks.
        FLAG_STR if is_utf8(data) => (
            // SAFETY: `data` is valid for its length; the call copies it.
            unsafe {
                ffi::PyUnicode_FromStringAndSize(
                    data.as_ptr().cast(),
                    data.len() as ffi::Py_ssize_t,
                )
            },
            Kind::Ready,
        ),
        FLAG_INT => match parse_int(data) {
            // SAFETY: plain conversions (a new int, or NULL).
            Some(Ok(n)) => (unsafe { ffi::PyLong_FromLongLong(n) }, Kind::Ready),
            Some(Err(n)) => (unsafe { ffi::PyLong_FromUnsignedLongLong(n) }, Kind::Ready),
            None => (new_bytes(data), Kind::BigInt),
        },
        FLAG_SERIALIZED => (new_bytes(data), Kind::Serialized),
        _ => (new_bytes(data), Kind::Ready),
    };
    Fetched { obj, kind, py }
}

/// Whether `data` is UTF-8: an ASCII test first (bytes OR-ed 8 at a
/// time, which the compiler vectorises: ~20 instructions for 64 bytes,
/// against ~130 for `std::str::from_utf8`), the full check otherwise.
#[inline]
fn is_utf8(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(8);
    let mut acc = 0u64;
    for c in &mut chunks {
        acc |= u64::from_ne_bytes(c.try_into().expect("8 bytes"));
    }
    for &b in chunks.remainder() {
        acc |= u64::from(b);
    }
    acc & 0x8080_8080_8080_8080 == 0 || std::str::from_utf8(data).is_ok()
}

/// Values of at least this many bytes (and at most [`PREFETCH_MAX`]) have
/// their cache lines prefetched before they are copied out (before the
/// object that receives them is allocated, or before a refill's
/// `memcpy`: the loads then overlap that work and each other).
const PREFETCH_AT: usize = 256;
/// Longer values are not prefetched: their copy's own sequential loads
/// keep the hardware prefetcher streaming, and hundreds of prefetches in
/// a burst only fill the CPU's miss queues (16 KiB values: 0.85-0.96x
/// the speed with every line prefetched; 4 KiB: the same speed).
const PREFETCH_MAX: usize = 4 << 10;

/// Starts loading the cache lines of `data` if it is
/// [`PREFETCH_AT`]..=[`PREFETCH_MAX`] bytes long (x86-64; elsewhere a
/// no-op).
///
/// Why: a read copies the value out of a segment that is usually not in
/// the CPU cache, and the copy (`memcpy`) asks for its lines one after
/// the other; requested all at once they arrive together. The hint is
/// non-temporal: the segment's copy is read once, and need not displace
/// the hash table or the interpreter's data from the larger caches.
/// Measured on the timing bench's get hit (100,000 keys, 100 MB of
/// values; see BENCH.md): 1.13-1.3x faster for 512 B and 1 KiB values
/// with the prefetch before a refill's `memcpy` (the non-temporal hint
/// as fast as or faster than `T0`).
#[inline(always)]
pub(crate) fn prefetch(data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if (PREFETCH_AT..=PREFETCH_MAX).contains(&data.len()) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_NTA};
        // Four lines a turn (~1.5 instructions a line, against ~3 for
        // one a turn); the last turn may ask for up to three lines past
        // the end, the next item's, which costs nothing but bandwidth.
        let p = data.as_ptr();
        let mut at = 0;
        while at < data.len() {
            // SAFETY: a prefetch is only a hint: it never faults, whatever
            // the address (computed with `wrapping_add`: never dereferenced).
            unsafe {
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(at).cast());
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(at + 64).cast());
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(at + 128).cast());
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(at + 192).cast());
            }
            at += 256;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// An i64, or a u64 above i64 (`incr` goes up to 2**64-1), or `None`.
fn parse_int(data: &[u8]) -> Option<Result<i64, u64>> {
    let s = std::str::from_utf8(data).ok()?.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Some(Ok(n));
    }
    s.parse::<u64>().ok().map(Err)
}

fn int_type(py: Python<'_>) -> PyResult<&Bound<'_, pyo3::types::PyType>> {
    static INT: PyOnceLock<Py<pyo3::types::PyType>> = PyOnceLock::new();
    INT.import(py, "builtins", "int")
}

impl<'py> Fetched<'py> {
    /// The new reference of a value that needs no more work (`bytes`,
    /// `str`, a small `int`), or `self` back.
    #[inline(always)]
    pub fn into_ready(self) -> Result<*mut ffi::PyObject, Self> {
        if self.kind == Kind::Ready && !self.obj.is_null() {
            let obj = self.obj;
            std::mem::forget(self);
            return Ok(obj);
        }
        Err(self)
    }

    /// The value: runs the serializer if needed (call without the lock).
    #[inline(always)]
    pub fn finish(self, ser: &Serializer) -> PyResult<Bound<'py, PyAny>> {
        if self.kind == Kind::Ready && !self.obj.is_null() {
            let (py, obj) = (self.py, self.obj);
            std::mem::forget(self);
            // SAFETY: an owned, non-NULL reference, handed on.
            return Ok(unsafe { Bound::from_owned_ptr(py, obj) });
        }
        self.finish_other(ser)
    }

    /// [`finish`](Self::finish) for serialized values, big ints and errors.
    #[cold]
    #[inline(never)]
    fn finish_other(self, ser: &Serializer) -> PyResult<Bound<'py, PyAny>> {
        let (py, obj, kind) = (self.py, self.obj, self.kind);
        std::mem::forget(self);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: an owned, non-NULL reference, handed on.
        let obj = unsafe { Bound::from_owned_ptr(py, obj) };
        match kind {
            Kind::Ready => Ok(obj),
            Kind::Serialized => ser.loads.bind(py).call1((obj,)),
            Kind::BigInt => match int_type(py)?.call1((&obj,)) {
                Ok(n) => Ok(n),
                Err(e) => {
                    discard(py, e);
                    Ok(obj)
                }
            },
        }
    }
}

//! Direct reads of a `str`'s or a `bytes`' contents from the object's
//! memory, where the running CPython's layout has been verified.
//!
//! Owns the layout probe and the two readers, nothing else. Under the
//! stable ABI the contents are reached through C calls
//! (`PyUnicode_AsUTF8AndSize`, `PyBytes_AsStringAndSize`: ~27 and ~15
//! instructions per call, once or twice per operation). CPython's own
//! layouts are plain C structs that have not changed within a release:
//!
//! - every object starts with its reference count and type pointer: 16
//!   bytes with a GIL, 32 on a free-threaded build (which adds the owning
//!   thread, flags, a mutex, GC bits and a shared reference count): the
//!   offsets below are from the end of that head (`OB_HEAD`);
//! - a compact ASCII `str` (`PyASCIIObject`): length right after the
//!   head, a state word 16 bytes after it whose `compact` and `ascii` bits
//!   are bits 5 and 6 of its first byte with a GIL, bits 3 and 4 of its
//!   second byte on a free-threaded build (where the interning state is a
//!   byte of its own, changed atomically by other threads: the flags' byte
//!   is written only when the string is made), the characters (which are
//!   their UTF-8) right after the header, which is the head plus 32 bytes
//!   on 3.10-3.11 and plus 24 from 3.12;
//! - a `bytes` (`PyBytesObject`): size right after the head, its cached
//!   hash (-1 until computed) 8 bytes later, contents 16 bytes after the
//!   head, a NUL after them.
//!
//! [`probe`] runs at import: it asks the C API for the contents of a set
//! of objects and keeps a direct reader only if every answer matches what
//! the reader would compute (and, for `str`, the `ascii` bit is clear on
//! non-ASCII strings). [`refill_bytes`], the writer `crate::recycle` uses,
//! is allowed only with a GIL, where the `bytes` layout holds and the
//! cached hash is found where it writes it ([`bytes_writable`]). A layout
//! it does not recognise (a future CPython) leaves the C calls in place.
//! The readers need no GIL: what they read of a `str` or a `bytes` does
//! not change once the object is made.
//!
//! Must never: read past what the verified layout says is there, or be
//! used on an object of another type (callers check the exact type or a
//! subclass first: a `str` subclass instance is never compact, so it
//! takes the C call).

use pyo3::ffi;
use pyo3::prelude::*;
#[cfg(not(Py_GIL_DISABLED))]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where a compact ASCII `str`'s characters start, or 0: use the C API.
static ASCII_DATA: AtomicUsize = AtomicUsize::new(0);
/// Where a `bytes`' contents start, or 0: use the C API.
static BYTES_DATA: AtomicUsize = AtomicUsize::new(0);
/// Whether a `bytes`' cached hash was found at [`BYTES_HASH_AT`] (and the
/// contents at [`BYTES_HEADER`]): [`refill_bytes`] may be used.
#[cfg(not(Py_GIL_DISABLED))]
static BYTES_WRITABLE: AtomicBool = AtomicBool::new(false);

/// Size of the object head (`PyObject`): reference count and type pointer
/// (16 bytes), and on a free-threaded build the owning thread's id, flags,
/// mutex, GC bits and the local and shared counts before them (32).
const OB_HEAD: usize = if cfg!(Py_GIL_DISABLED) { 32 } else { 16 };
/// Byte offset of `ob_size` / `PyASCIIObject.length` (right after the head).
const LENGTH_AT: usize = OB_HEAD;
/// Byte offset of the byte of `PyASCIIObject.state` that holds `compact`
/// and `ascii`: the first byte with a GIL (after the 2-bit interning
/// state), the second on a free-threaded build (the first is the
/// interning state, a byte of its own).
const STATE_FLAGS_AT: usize = OB_HEAD + 16 + if cfg!(Py_GIL_DISABLED) { 1 } else { 0 };
/// `state.compact` and `state.ascii` in that byte.
const COMPACT_ASCII: u8 = if cfg!(Py_GIL_DISABLED) {
    (1 << 3) | (1 << 4)
} else {
    (1 << 5) | (1 << 6)
};
/// `sizeof(PyASCIIObject)`: with `wstr` (3.10, 3.11), without (3.12+).
const ASCII_HEADERS: [usize; 2] = [OB_HEAD + 32, OB_HEAD + 24];
/// `offsetof(PyBytesObject, ob_sval)`.
const BYTES_HEADER: usize = OB_HEAD + 16;
/// `offsetof(PyBytesObject, ob_shash)`.
#[cfg(not(Py_GIL_DISABLED))]
const BYTES_HASH_AT: usize = OB_HEAD + 8;

/// Which direct readers are in use: (`str`, `bytes`), for tests.
pub fn active() -> (bool, bool) {
    (
        ASCII_DATA.load(Ordering::Relaxed) != 0,
        BYTES_DATA.load(Ordering::Relaxed) != 0,
    )
}

/// A compact ASCII `str`'s characters (its UTF-8), read from the object;
/// `None` for any other `str`, or when the layout was not verified.
///
/// # Safety
/// `obj` is a live `str` (or subclass) and stays alive for `'a`.
#[inline(always)]
pub unsafe fn ascii_str<'a>(obj: *mut ffi::PyObject) -> Option<&'a [u8]> {
    let at = ASCII_DATA.load(Ordering::Relaxed);
    if at == 0 {
        return None;
    }
    // SAFETY: `probe` verified this layout for the running interpreter:
    // every `str` has the state flags at STATE_FLAGS_AT, and a compact
    // ASCII one
    // its length at LENGTH_AT and that many characters at `at`. `str`s
    // are immutable, and the object outlives 'a.
    unsafe {
        let base = obj.cast::<u8>();
        let flags = base.add(STATE_FLAGS_AT).read();
        if flags & COMPACT_ASCII != COMPACT_ASCII {
            return None;
        }
        let len = base.add(LENGTH_AT).cast::<isize>().read();
        debug_assert!(len >= 0);
        Some(std::slice::from_raw_parts(base.add(at), len as usize))
    }
}

/// A `bytes`' contents, read from the object; `None` when the layout was
/// not verified.
///
/// # Safety
/// `obj` is a live `bytes` (or subclass) and stays alive for `'a`.
#[inline(always)]
pub unsafe fn bytes<'a>(obj: *mut ffi::PyObject) -> Option<&'a [u8]> {
    let at = BYTES_DATA.load(Ordering::Relaxed);
    if at == 0 {
        return None;
    }
    // SAFETY: `probe` verified that a `bytes` holds its size at LENGTH_AT
    // and its contents at `at`; `bytes` are immutable and the object
    // outlives 'a.
    unsafe {
        let base = obj.cast::<u8>();
        let len = base.add(LENGTH_AT).cast::<isize>().read();
        debug_assert!(len >= 0);
        Some(std::slice::from_raw_parts(base.add(at), len as usize))
    }
}

/// Whether [`refill_bytes`] may be used (the `bytes` layout, its cached
/// hash included, was verified at import).
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
pub fn bytes_writable() -> bool {
    BYTES_WRITABLE.load(Ordering::Relaxed)
}

/// Makes `obj`, a `bytes` of at least `data.len()` bytes of contents when
/// it was made, hold `data`: its size, contents, the NUL after them, and
/// its cached hash reset to "not computed".
///
/// # Safety
/// [`bytes_writable`]; `obj` is an exact `bytes` made with room for at
/// least `data.len()` bytes of contents (and the NUL after them), not
/// one of CPython's shared singletons, and nothing else can see it while
/// it changes (see `crate::recycle`); attached.
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
pub unsafe fn refill_bytes(obj: *mut ffi::PyObject, data: &[u8]) {
    debug_assert!(bytes_writable());
    // SAFETY: the layout was verified (`bytes_writable`), the object has
    // room for `data` and the NUL (the caller's contract), and `data`
    // (the cache's memory) cannot overlap a Python object.
    unsafe {
        let base = obj.cast::<u8>();
        base.add(LENGTH_AT)
            .cast::<isize>()
            .write(data.len() as isize);
        base.add(BYTES_HASH_AT).cast::<isize>().write(-1);
        let sval = base.add(BYTES_HEADER);
        copy_short(data, sval);
        sval.add(data.len()).write(0);
    }
}

/// Copies `src` to `dst`: inline (two overlapping word moves) up to 64
/// bytes, where a call to `memcpy` costs more than the copy (~15
/// instructions with the call, against 4 to 6 here); above, `memcpy`
/// after a prefetch of a long value's lines (`value::prefetch`).
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes and does not overlap
/// `src`.
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
pub(crate) unsafe fn copy_short(src: &[u8], dst: *mut u8) {
    let n = src.len();
    let s = src.as_ptr();
    /// Copies the `N` bytes at `at` (the callers below keep `at + N <= n`).
    ///
    /// # Safety
    /// As `copy_short`, with `at + N <= src.len()`.
    #[inline(always)]
    unsafe fn word<const N: usize>(s: *const u8, dst: *mut u8, at: usize) {
        // SAFETY: `at + N` is within both buffers (the caller's contract);
        // unaligned reads and writes of a byte array.
        unsafe {
            let w = s.add(at).cast::<[u8; N]>().read_unaligned();
            dst.add(at).cast::<[u8; N]>().write_unaligned(w);
        }
    }
    // SAFETY: every branch stays within `n` bytes of both buffers (the
    // second word of each pair ends at `n`); the caller's contract.
    unsafe {
        if n > 64 {
            // A long value is usually not in the CPU cache: its lines
            // requested at once, not one by one as `memcpy` asks for them.
            crate::value::prefetch(src);
            std::ptr::copy_nonoverlapping(s, dst, n);
        } else if n > 32 {
            word::<32>(s, dst, 0);
            word::<32>(s, dst, n - 32);
        } else if n > 16 {
            word::<16>(s, dst, 0);
            word::<16>(s, dst, n - 16);
        } else if n >= 8 {
            word::<8>(s, dst, 0);
            word::<8>(s, dst, n - 8);
        } else if n >= 4 {
            word::<4>(s, dst, 0);
            word::<4>(s, dst, n - 4);
        } else if n > 0 {
            dst.write(*s);
            dst.add(n / 2).write(*s.add(n / 2));
            dst.add(n - 1).write(*s.add(n - 1));
        }
    }
}

/// Verifies the layouts above against the C API on sample objects and
/// turns on the readers that match. Call once at import, attached.
pub fn probe(py: Python<'_>) -> PyResult<()> {
    // Made at run time (not only literals: those may be interned or
    // statically allocated), of several lengths.
    let ascii: Vec<Bound<'_, PyAny>> = vec![
        pyo3::types::PyString::new(py, "k").into_any(),
        pyo3::types::PyString::new(py, "segcache:probe").into_any(),
        py.eval(c"'key:' + str(12345)", None, None)?,
        py.eval(c"'x' * 300", None, None)?,
        py.eval(c"''.join(['a', 'b'])", None, None)?,
    ];
    let other: Vec<Bound<'_, PyAny>> = vec![
        py.eval(c"'\\u00e9t\\u00e9'", None, None)?,
        py.eval(c"'\\u20ac' * 3", None, None)?,
        py.eval(c"'\\U0001F600x'", None, None)?,
        py.eval(c"'caf' + chr(233)", None, None)?,
    ];
    if let Some(at) = ASCII_HEADERS
        .into_iter()
        .find(|&at| ascii_layout_holds(&ascii, &other, at))
    {
        ASCII_DATA.store(at, Ordering::Relaxed);
    }
    let samples: Vec<Bound<'_, PyAny>> = vec![
        pyo3::types::PyBytes::new(py, b"").into_any(),
        pyo3::types::PyBytes::new(py, b"v").into_any(),
        pyo3::types::PyBytes::new(py, b"segcache:probe").into_any(),
        py.eval(c"b'\\x00\\xff' * 600", None, None)?,
    ];
    if samples.iter().all(bytes_layout_holds) {
        BYTES_DATA.store(BYTES_HEADER, Ordering::Relaxed);
        // The writer needs a GIL (`crate::recycle`).
        #[cfg(not(Py_GIL_DISABLED))]
        probe_bytes_writable(py)?;
    }
    Ok(())
}

/// Turns [`refill_bytes`] on if the cached hash of a `bytes` is found
/// where it writes it (the rest of the layout verified by the caller).
#[cfg(not(Py_GIL_DISABLED))]
fn probe_bytes_writable(py: Python<'_>) -> PyResult<()> {
    // Fresh objects (not the shared empty or one-byte ones, nor
    // constants, which the compiler hashes), hashed only here.
    let fresh: Vec<Bound<'_, PyAny>> = vec![
        py.eval(c"bytes(bytearray(b'segcache:probe'))", None, None)?,
        py.eval(c"bytes(bytearray(700)) + bytes(range(256))", None, None)?,
    ];
    if fresh.iter().all(bytes_hash_holds) {
        BYTES_WRITABLE.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// Whether a fresh `bytes` holds "not computed" (-1) at [`BYTES_HASH_AT`]
/// and, once hashed, its hash, and a NUL after its contents.
#[cfg(not(Py_GIL_DISABLED))]
fn bytes_hash_holds(b: &Bound<'_, PyAny>) -> bool {
    let base = b.as_ptr().cast::<u8>();
    // SAFETY: `b` is a `bytes` whose layout `bytes_layout_holds` checked:
    // its header is BYTES_HEADER bytes, its contents and a NUL follow.
    let read_hash = || unsafe { base.add(BYTES_HASH_AT).cast::<isize>().read() };
    // SAFETY: as above.
    let nul = unsafe {
        let len = base.add(LENGTH_AT).cast::<isize>().read() as usize;
        base.add(BYTES_HEADER + len).read()
    };
    let before = read_hash();
    let Ok(hash) = b.hash() else {
        return false;
    };
    let after = read_hash();
    nul == 0 && before == -1 && after == hash && hash != -1
}

/// Whether every `ascii` string is compact ASCII with its characters at
/// `at`, and no string of `other` claims to be ASCII.
fn ascii_layout_holds(ascii: &[Bound<'_, PyAny>], other: &[Bound<'_, PyAny>], at: usize) -> bool {
    let state = |s: &Bound<'_, PyAny>| {
        // SAFETY: every `str` of any CPython this builds for has its
        // head, length, hash and state word (the byte read is in it)
        // before its characters: inside the object.
        unsafe { s.as_ptr().cast::<u8>().add(STATE_FLAGS_AT).read() }
    };
    let api = |s: &Bound<'_, PyAny>| {
        let mut len: ffi::Py_ssize_t = 0;
        // SAFETY: a live `str`; attached.
        let p = unsafe { ffi::PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut len) };
        (p.cast::<u8>() as usize, len)
    };
    ascii.iter().all(|s| {
        let (p, len) = api(s);
        let base = s.as_ptr() as usize;
        // SAFETY: as `state`.
        let length = unsafe { (base as *const u8).add(LENGTH_AT).cast::<isize>().read() };
        p != 0 && state(s) & COMPACT_ASCII == COMPACT_ASCII && p == base + at && len == length
    }) && other.iter().all(|s| {
        let (p, _) = api(s);
        p != 0 && state(s) & COMPACT_ASCII != COMPACT_ASCII
    })
}

/// Whether a `bytes` holds its size and contents where [`bytes`] reads.
fn bytes_layout_holds(b: &Bound<'_, PyAny>) -> bool {
    let mut ptr: *mut std::ffi::c_char = std::ptr::null_mut();
    let mut len: ffi::Py_ssize_t = 0;
    // SAFETY: a live `bytes`; attached.
    let rc = unsafe { ffi::PyBytes_AsStringAndSize(b.as_ptr(), &mut ptr, &mut len) };
    let base = b.as_ptr() as usize;
    // SAFETY: a `bytes` is a variable-size object: its size follows the
    // head.
    let size = unsafe { (base as *const u8).add(LENGTH_AT).cast::<isize>().read() };
    rc == 0 && ptr as usize == base + BYTES_HEADER && len == size
}

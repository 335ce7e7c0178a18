//! Values held by reference: a `bytes`, a compact ASCII `str` or a
//! serializer's output of at least [`HELD_AT`] bytes is not copied into
//! the cache. The cache stores a [`segcache::External`] whose handle is
//! the object's address and whose weight is the object's memory, holding
//! one strong reference to it; a read returns the object itself (one
//! increment, no copy), and the core gives the reference back through
//! [`release`] when the item leaves. The heap is charged the object's
//! weight, so `heap_size` still bounds the memory of every value.
//!
//! Owns the held flags, the threshold, an object's weight, the release
//! function and the releases that wait for an attached thread. Never
//! touches the cache.
//!
//! Why it is sound:
//!
//! 1. Only immutable, exact types are held (`bytes`, a compact ASCII
//!    `str`, the `bytes` a serializer returns): what a reader gets back is
//!    the value stored, whoever else holds the object.
//! 2. The cache's reference keeps the object alive while the item is
//!    linked. A read takes its own reference (`Py_IncRef`) under the shard
//!    lock, where the item cannot be unlinked (every release runs inside a
//!    core operation, under the same lock): see `crate::value::fetch`,
//!    whose callers all decode under the lock.
//! 3. A reference is dropped only by a thread attached to the interpreter.
//!    The core releases values inside operations, on the thread running
//!    them; the binding runs every operation that can release either
//!    attached or through [`detach`], which marks the thread detached so
//!    that its releases wait in a queue, emptied by the next release on
//!    an attached thread or when [`detach`] returns. Dropping a `bytes` or
//!    a `str` runs no Python code (it only frees memory), so a release is
//!    allowed wherever the hot paths may drop a `bytes` (see
//!    `PyCache::cache_attached`).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use segcache::External;

/// A `bytes` held by reference.
pub const FLAG_HELD_BYTES: u32 = 4;
/// A compact ASCII `str` held by reference.
pub const FLAG_HELD_STR: u32 = 5;
/// The serializer's output (a `bytes`) held by reference.
pub const FLAG_HELD_SERIALIZED: u32 = 6;

/// Values of at least this many bytes are held by reference, not copied.
///
/// Why 1 KiB: a held value costs its object's header and the allocator's
/// rounding beside the value (49-64 bytes) against the 5-byte header and
/// 12-byte handle-free item of a copy: 6% more memory per entry at 1 KiB,
/// 12% at 512 bytes. Above it, a copy in and out costs more than the
/// object: a 1 KiB value copied out of a heap larger than the CPU's cache
/// takes 90-100 ns a read (BENCH.md), as long as the rest of the call.
pub const HELD_AT: usize = 1 << 10;

/// Whether a value of `flags` is held by reference.
#[inline(always)]
pub fn is_held(flags: u32) -> bool {
    (FLAG_HELD_BYTES..=FLAG_HELD_SERIALIZED).contains(&flags)
}

/// A free-threaded object header is 16 bytes longer.
const FT_EXTRA: usize = if cfg!(Py_GIL_DISABLED) { 16 } else { 0 };
/// `offsetof(PyBytesObject, ob_sval)`.
const BYTES_HEADER: usize = 32 + FT_EXTRA;
/// `sizeof(PyASCIIObject)`: 48 on 3.10-3.11 (with `wstr`), 40 after; the
/// larger, so a value is never charged less than it takes.
const ASCII_HEADER: usize = 48 + FT_EXTRA;
/// Bytes beside the data: the terminating NUL and the allocator's 8-byte
/// chunk header.
const AROUND: usize = 1 + 8;

/// The memory of an object of `header` bytes before `len` bytes of data:
/// its size as `sys.getsizeof` counts it, with the NUL and the
/// allocator's chunk header, rounded up to the allocator's 16 bytes.
#[inline(always)]
fn weight(header: usize, len: usize) -> u32 {
    u32::try_from((header + len + AROUND).next_multiple_of(16)).unwrap_or(u32::MAX)
}

/// The weight of a `bytes` of `len` bytes.
#[inline(always)]
pub fn bytes_weight(len: usize) -> u32 {
    weight(BYTES_HEADER, len)
}

/// The longest value held in a cache of `segment_size`-byte segments:
/// one that an item of any key and flags could take as a copy, so that
/// holding a value never changes which values fit.
pub fn longest_held(segment_size: usize) -> usize {
    segcache::max_value_len(segment_size, segcache::MAX_KEY_LEN, FLAG_HELD_SERIALIZED)
}

/// The weight of a compact ASCII `str` of `len` characters.
#[inline(always)]
pub fn str_weight(len: usize) -> u32 {
    weight(ASCII_HEADER, len)
}

/// The external value that holds `obj` (weighing `weight`).
#[inline(always)]
pub fn external(obj: *mut ffi::PyObject, weight: u32) -> External {
    External {
        handle: obj as usize as u64,
        weight,
    }
}

/// A new reference to the object a held item's value encodes.
///
/// # Safety
/// Attached; `data` is the value of a held item the cache still links,
/// read under its shard's lock (so the cache's reference keeps the object
/// alive until the increment).
#[inline(always)]
pub unsafe fn take_ref(data: &[u8]) -> *mut ffi::PyObject {
    let Some(held) = External::decode(data) else {
        debug_assert!(false, "a held item of {} bytes", data.len());
        return std::ptr::null_mut();
    };
    let obj = held.handle as usize as *mut ffi::PyObject;
    // SAFETY: attached, and the object is alive (the caller's contract).
    unsafe { ffi::Py_IncRef(obj) };
    obj
}

thread_local! {
    /// Set while this thread runs cache work detached ([`detach`]).
    static DETACHED: Cell<bool> = const { Cell::new(false) };
}

/// Calls of [`detach`] under way, counted from before the thread leaves
/// the interpreter to after it is back, so that it only changes while the
/// changing thread is attached. While it is 0, no thread uses a cache
/// detached: every release is made on an attached thread ([`release`]
/// then skips its thread-local lookup, a call through `__tls_get_addr` in
/// a shared object), and, with a GIL, a thread holding it is the only one
/// using any cache ([`nobody_detached`]).
static DETACHED_CALLS: AtomicUsize = AtomicUsize::new(0);

/// True if no thread is inside [`detach`]. Read on an attached thread of
/// a GIL build, it stays true until this thread lets the GIL go: only a
/// thread holding the GIL enters [`detach`], and it counts itself in
/// first.
#[inline(always)]
pub fn nobody_detached() -> bool {
    DETACHED_CALLS.load(Ordering::Acquire) == 0
}

/// Releases made on detached threads, waiting for an attached one.
static WAITING: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());
/// Whether [`WAITING`] may hold anything (checked without the lock).
static ANY_WAITING: AtomicBool = AtomicBool::new(false);

/// The cache's release function (`Builder::on_release`): drops the
/// cache's reference to a held object, at once on an attached thread,
/// else once one is.
pub fn release(held: External) {
    let obj = held.handle as usize;
    if !nobody_detached() && DETACHED.with(Cell::get) {
        WAITING.lock().push(obj);
        ANY_WAITING.store(true, Ordering::Release);
        return;
    }
    // SAFETY: this thread is attached (every cache operation runs
    // attached unless inside `detach`, which set DETACHED); the reference
    // is the cache's own, given back exactly once by the core.
    unsafe { ffi::Py_DecRef(obj as *mut ffi::PyObject) };
    if ANY_WAITING.load(Ordering::Relaxed) {
        drop_waiting();
    }
}

/// Drops the references released while detached.
#[cold]
#[inline(never)]
fn drop_waiting() {
    let waiting = {
        let mut w = WAITING.lock();
        ANY_WAITING.store(false, Ordering::Relaxed);
        std::mem::take(&mut *w)
    };
    for obj in waiting {
        // SAFETY: attached (callers are); each was the cache's reference.
        unsafe { ffi::Py_DecRef(obj as *mut ffi::PyObject) };
    }
}

/// Runs cache work `f` with the thread detached from the interpreter
/// (other Python threads run meanwhile); the held values it releases are
/// dropped once it returns. Every use of a cache without the GIL goes
/// through here (see [`DETACHED_CALLS`]).
pub fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    /// Counts the call out once the thread is attached again, even if `f`
    /// panics (pyo3 carries the panic back to the attached thread).
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DETACHED_CALLS.fetch_sub(1, Ordering::AcqRel);
        }
    }
    DETACHED_CALLS.fetch_add(1, Ordering::AcqRel);
    let counted = Counted;
    let out = py.detach(|| {
        DETACHED.with(|d| d.set(true));
        // Reset even if `f` panics.
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                DETACHED.with(|d| d.set(false));
            }
        }
        let _reset = Reset;
        f()
    });
    drop(counted);
    if ANY_WAITING.load(Ordering::Acquire) {
        drop_waiting();
    }
    out
}

/// References released while detached and not yet dropped (tests).
pub fn waiting() -> usize {
    WAITING.lock().len()
}

//! Recycling of the `bytes` objects that reads return: a cache keeps a
//! reference to the last few `bytes` values it handed out and, once the
//! reader has let go of one, refills it with the next value read instead
//! of allocating a new object.
//!
//! Owns each cache's few kept `bytes` and nothing else. Why: a read must
//! return a new `bytes` (the value lives in the cache's segments, not in
//! a Python object), and allocating and freeing it is a large part of a
//! read: ~65 instructions of a 64-byte hit (pymalloc), ~475 of a 1 KiB
//! one (CPython hands objects over 512 bytes to the system `malloc`, past
//! glibc's per-thread cache at ~1 KiB). A loop of reads whose results are
//! used and dropped (the common case) then allocates nothing.
//!
//! Why it is sound (GIL builds only; free-threaded builds compile this
//! out, as their reference counts are split between threads):
//!
//! 1. A kept object is an exact `bytes` this module made with
//!    `PyBytes_FromStringAndSize` of at least [`MIN_LEN`] bytes (never
//!    CPython's shared empty or one-byte objects), so it is a private
//!    allocation whose layout `crate::layout` verified at import
//!    (`layout::bytes_writable`: size, cached hash, contents, NUL).
//! 2. The recycler holds one strong reference to each kept object. A
//!    reference count of exactly 1 therefore means no one else holds one:
//!    no variable, container, frame, `memoryview` or buffer export (every
//!    `Py_buffer` holds a reference to its object). A borrowed reference
//!    is only valid while some strong reference keeps the object alive,
//!    so none can be in legitimate use either. Nothing can observe the
//!    object: refilling it is indistinguishable from freeing it and
//!    allocating a new one at the same address, which CPython's allocator
//!    does all the time.
//! 3. The count is read, the object refilled and a reference handed out
//!    with the GIL held throughout and no Python code run in between
//!    (refilling is plain stores; dropping a replaced `bytes` only frees
//!    memory: `bytes` has no finalizer and is not tracked by the garbage
//!    collector), so no other thread can take a reference meanwhile. The
//!    recycler's own state is touched only there, hence only under the
//!    GIL (the `Sync` claim below).
//! 4. A refilled object gets its new size, contents, the NUL after them
//!    and its cached hash reset to "not computed", i.e. exactly the state
//!    `PyBytes_FromStringAndSize` gives a new object. It is only refilled
//!    with a value that fits the room it was made with ([`fits`]), so no
//!    write goes past its allocation.
//!
//! Cost: up to [`SLOTS`] objects of at most [`MAX_LEN`] bytes stay alive
//! per cache (64 KiB at most); a value a reader keeps carries the extra
//! room of the object it was refilled into (at most 1/8 of its length).
//! Observable difference: `sys.getrefcount` of a result is one higher
//! while the recycler keeps it. Readers that keep every value leave
//! nothing to refill: after [`MISSES_TO_PAUSE`] such reads in a row the
//! recycler steps aside for [`PAUSE`] reads, so that they pay almost
//! nothing for it.
//!
//! Must never: refill an object whose count is not exactly 1, refill
//! without the GIL, keep anything but the `bytes` it made itself, or run
//! Python code.

use pyo3::ffi;
use pyo3::prelude::*;

/// How many `bytes` a cache keeps.
#[cfg(not(Py_GIL_DISABLED))]
const SLOTS: usize = 4;
/// Only values at least this long are recycled (shorter ones may be
/// CPython's shared objects).
#[cfg(not(Py_GIL_DISABLED))]
const MIN_LEN: usize = 2;
/// Only values at most this long are recycled (bounds what a cache keeps
/// alive: [`SLOTS`] x this).
#[cfg(not(Py_GIL_DISABLED))]
const MAX_LEN: usize = 16 << 10;

/// Whether a kept object with room for `cap` bytes may hold `len` bytes:
/// they fit, and at most 1/8 of the room goes unused (a reader who keeps
/// the value keeps that room too).
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
fn fits(cap: usize, len: usize) -> bool {
    // One comparison: below `len`, the difference wraps to a huge number.
    cap.wrapping_sub(len) <= len / 8
}

/// One kept object: an owned reference (NULL: empty) and the contents'
/// room it was made with (0: empty).
#[cfg(not(Py_GIL_DISABLED))]
#[derive(Clone, Copy)]
struct Slot {
    obj: *mut ffi::PyObject,
    cap: usize,
}

/// Reads in a row that found no kept object to refill before recycling
/// pauses (readers are keeping their values, or the sizes do not fit).
#[cfg(not(Py_GIL_DISABLED))]
const MISSES_TO_PAUSE: u32 = SLOTS as u32;
/// Reads that skip recycling during a pause (each then costs what it
/// would without recycling, plus one branch): a reader keeping every
/// value pays a failed search and a replaced slot only on 1 read in 17.
#[cfg(not(Py_GIL_DISABLED))]
const PAUSE: u32 = 64;

/// The kept objects and where the next new one goes.
#[cfg(not(Py_GIL_DISABLED))]
struct Kept {
    slots: [Slot; SLOTS],
    next: usize,
    /// Misses in a row (see [`MISSES_TO_PAUSE`]).
    misses: u32,
    /// Reads left in the current pause.
    paused: u32,
    /// Whether recycling is on (the layout was verified at import).
    on: bool,
}

/// A cache's recycled `bytes` (see the module documentation).
pub struct Recycler {
    #[cfg(not(Py_GIL_DISABLED))]
    kept: std::cell::UnsafeCell<Kept>,
}

// SAFETY: `kept` (and the objects it holds) is read and written only by
// `bytes` and `Drop`, both with the GIL held (a `Python` token on a GIL
// build, or CPython's deallocation of the cache), so never by two threads
// at once. Free-threaded builds have no state at all.
unsafe impl Sync for Recycler {}
// SAFETY: as above: the raw pointers are only used under the GIL.
unsafe impl Send for Recycler {}

impl Recycler {
    /// An empty recycler, on if `crate::layout` verified the `bytes`
    /// layout it writes (never on free-threaded builds).
    pub fn new() -> Self {
        Recycler {
            #[cfg(not(Py_GIL_DISABLED))]
            kept: std::cell::UnsafeCell::new(Kept {
                slots: [Slot {
                    obj: std::ptr::null_mut(),
                    cap: 0,
                }; SLOTS],
                next: 0,
                misses: 0,
                paused: 0,
                on: crate::layout::bytes_writable(),
            }),
        }
    }

    /// Whether this recycler refills objects (for tests).
    pub fn on(&self, _py: Python<'_>) -> bool {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            // SAFETY: attached with the GIL (a GIL build): see `Sync`.
            unsafe { (*self.kept.get()).on }
        }
        #[cfg(Py_GIL_DISABLED)]
        false
    }

    /// A new reference to a `bytes` holding `data`: a kept object no one
    /// else holds, refilled, or a new object (kept if it may be recycled);
    /// NULL with the exception set if Python cannot allocate it.
    #[inline(always)]
    pub fn bytes(&self, _py: Python<'_>, data: &[u8]) -> *mut ffi::PyObject {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            let len = data.len();
            // SAFETY: attached on a GIL build, so we hold the GIL: no other
            // thread touches `kept` (see `Sync`), and no Python code runs
            // until we return (see the module documentation, point 3).
            let kept = unsafe { &mut *self.kept.get() };
            if kept.on && (MIN_LEN..=MAX_LEN).contains(&len) {
                if kept.paused != 0 {
                    kept.paused -= 1;
                    return new_bytes(data);
                }
                for slot in &kept.slots {
                    // An empty slot has `cap` 0: it never fits (len >= 2),
                    // so its NULL is never read.
                    // SAFETY: a kept object, alive (we hold a reference).
                    if fits(slot.cap, len) && unsafe { ffi::Py_REFCNT(slot.obj) } == 1 {
                        // SAFETY: point 1 to 4 of the module documentation:
                        // our own exact `bytes` with room for `cap >= len`
                        // bytes, no reference but ours, the GIL held.
                        unsafe {
                            crate::layout::refill_bytes(slot.obj, data);
                            second_reference(slot.obj);
                        }
                        kept.misses = 0;
                        return slot.obj;
                    }
                }
                return keep(kept, data);
            }
        }
        new_bytes(data)
    }
}

/// Takes a second reference to `obj`, a kept object whose only reference
/// is the recycler's: its count goes from 1 to 2 in place.
///
/// The increment the stable ABI's own `Py_INCREF` of CPython 3.10 (the ABI
/// this extension is built for) compiles to in every abi3 C extension:
/// `ob_refcnt`, the first word of every object, plus one. Later CPythons
/// keep that increment valid for abi3 extensions; the one case it would
/// not handle, an immortal object, cannot be a kept object (a `bytes` of
/// at least [`MIN_LEN`] bytes made by `PyBytes_FromStringAndSize`). pyo3's
/// `Py_IncRef` is a call into libpython instead (~5 instructions more per
/// refilled read).
///
/// # Safety
/// The GIL held; `obj` a kept object whose reference count is 1.
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
unsafe fn second_reference(obj: *mut ffi::PyObject) {
    // SAFETY: the caller's contract: a live object of ours, a count of 1
    // (so not immortal: its count word is a plain count), the GIL held.
    unsafe {
        debug_assert_eq!(ffi::Py_REFCNT(obj), 1);
        *obj.cast::<ffi::Py_ssize_t>() += 1;
        debug_assert_eq!(ffi::Py_REFCNT(obj), 2);
    }
}

/// A new `bytes` holding `data` (NULL with the exception set on failure),
/// a long value's lines prefetched first so that the allocation overlaps
/// their loads (see `value::prefetch`).
#[inline(always)]
fn new_bytes(data: &[u8]) -> *mut ffi::PyObject {
    crate::value::prefetch(data);
    // SAFETY: `data` is valid for its length; the call copies it.
    unsafe { ffi::PyBytes_FromStringAndSize(data.as_ptr().cast(), data.len() as ffi::Py_ssize_t) }
}

/// A new `bytes` holding `data`, kept in the next slot (round robin) in
/// place of the object there, after a read found nothing to refill
/// (counted towards a pause); `data` is at least [`MIN_LEN`] long.
#[cfg(not(Py_GIL_DISABLED))]
#[inline(never)]
fn keep(kept: &mut Kept, data: &[u8]) -> *mut ffi::PyObject {
    debug_assert!(data.len() >= MIN_LEN);
    kept.misses += 1;
    if kept.misses >= MISSES_TO_PAUSE {
        kept.misses = 0;
        kept.paused = PAUSE;
    }
    let obj = new_bytes(data);
    if obj.is_null() {
        return obj;
    }
    let slot = &mut kept.slots[kept.next];
    kept.next = (kept.next + 1) % SLOTS;
    let old = std::mem::replace(
        slot,
        Slot {
            obj,
            cap: data.len(),
        },
    );
    // SAFETY: GIL held (our caller's contract). `obj` is a new `bytes`
    // of `data.len() >= 2` bytes, hence not a shared singleton: one
    // reference for the slot, one for the caller. `old` is a reference
    // the slot owned: dropping it runs no Python code (a `bytes`).
    unsafe {
        debug_assert!(ffi::PyBytes_CheckExact(obj) != 0);
        ffi::Py_IncRef(obj);
        if !old.obj.is_null() {
            ffi::Py_DecRef(old.obj);
        }
    }
    obj
}

impl Drop for Recycler {
    /// Lets go of the kept objects (the cache is deallocated, attached).
    fn drop(&mut self) {
        #[cfg(not(Py_GIL_DISABLED))]
        for slot in &mut self.kept.get_mut().slots {
            if !slot.obj.is_null() {
                // SAFETY: an owned reference; pyo3 drops a `#[pyclass]`'s
                // contents in its deallocation, attached to the interpreter.
                unsafe { ffi::Py_DecRef(slot.obj) };
                slot.obj = std::ptr::null_mut();
            }
        }
    }
}

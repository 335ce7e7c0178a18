//! Counting global allocator for the bench binary.
//!
//! Owns the process-wide byte accounting used for "equal memory budget"
//! calibration and the `memory` subcommand: every allocation made through the
//! Rust global allocator is added to a live-bytes counter (requested sizes, not
//! allocator slack), and the peak is tracked too. Installed as the
//! `#[global_allocator]` only in the binary (`main.rs`); the library half of
//! the crate just reads the counters, which stay at zero when this allocator
//! is not installed (e.g. in unit tests).
//!
//! The speed subcommands turn the counting off ([`stop_counting`]) before
//! they build anything: its shared counters add atomic read-modify-writes
//! (contended ones, with two threads) to every allocation and free, a cost
//! no deployment pays, which would weigh on whichever contender allocates
//! per operation (owned keys, values and replies).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// A `System` wrapper that counts live and peak requested bytes.
pub struct CountingAlloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(true);

/// Stops the counting for the rest of the process (the speed subcommands,
/// which read no counter): allocations then cost what `System`'s do, plus
/// one relaxed load. The counters are meaningless from then on.
pub fn stop_counting() {
    COUNTING.store(false, Ordering::Relaxed);
}

#[inline]
fn add(n: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    let now = LIVE.fetch_add(n as isize, Ordering::Relaxed) + n as isize;
    if now > 0 {
        PEAK.fetch_max(now as usize, Ordering::Relaxed);
    }
    INSTALLED.store(1, Ordering::Relaxed);
}

#[inline]
fn sub(n: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    LIVE.fetch_sub(n as isize, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the same arguments; the
// counters are side bookkeeping only.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            sub(layout.size());
            add(new_size);
        }
        p
    }
}

/// Bytes currently allocated through the counting allocator.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed).max(0) as usize
}

/// Highest value `live_bytes` has reached since the last [`reset_peak`].
pub fn peak_bytes() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Restart peak tracking from the current live value.
pub fn reset_peak() {
    PEAK.store(live_bytes(), Ordering::Relaxed);
}

/// Whether the counting allocator is the process's global allocator (it has
/// seen at least one allocation).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed) != 0
}

/// Resident set size of this process in bytes, from `/proc/self/statm`
/// (0 where that file is unavailable).
pub fn rss_bytes() -> usize {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let resident: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    resident * page_size()
}

fn page_size() -> usize {
    // Linux on the supported targets uses 4 KiB base pages; statm counts those.
    4096
}

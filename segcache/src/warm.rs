//! Making a heap's fresh pages resident ahead of the writes that will
//! reach them, on one background thread shared by every cache that asks
//! for it (`Builder::populate_ahead`).
//!
//! Owns the [`Frontier`] a heap shares with its [`Warmer`], the warmers'
//! registry and the thread that serves it. A heap's segments are first
//! used in ascending order (the free list hands out the lowest id first),
//! so "used so far" is one number, the frontier; the thread keeps the
//! pages up to [`AHEAD`] bytes past it resident (in the idle scheduling
//! class, so it only uses cores nothing else wants), with
//! `MADV_POPULATE_WRITE`, in steps of one 2 MiB huge page. Where the
//! kernel backs the heap with huge pages, a write reaching a fresh one
//! otherwise waits while the whole 2 MiB is zeroed (0.3-5 ms measured on
//! a VM, the server's p999 at 20k req/s doubled by it); here the thread
//! waits instead. The resident set still grows with use, as with lazy
//! faulting, at most [`AHEAD`] bytes past it.
//!
//! Must never read or write a heap's bytes, nor make a heap's drop wait:
//! a heap that is dropped closes its frontier, and if a step is running
//! on it that moment, its mapping is handed to the thread and unmapped
//! after the step (so no step runs on unmapped memory); its warmer is
//! then forgotten.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How far past the frontier the pages are made resident.
pub(crate) const AHEAD: usize = 8 << 20;

/// One step: a huge page, so every call covers whole huge pages.
const STEP: usize = 2 << 20;

/// The thread's pause after a pass that did some work, and its longest
/// pause when passes find nothing to do (doubling in between).
const MIN_PAUSE: Duration = Duration::from_millis(2);
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What a heap shares with its warmer.
#[derive(Debug, Default)]
pub(crate) struct Frontier {
    /// Bytes from the heap's start used so far (a hint: relaxed).
    used: AtomicUsize,
    /// True from the heap's drop on; a step runs only while it holds
    /// `stepping` and finds this false.
    closed: AtomicBool,
    /// Held for each step (one `madvise` call), so the heap's drop knows
    /// whether one runs; never held for anything else.
    stepping: Mutex<()>,
}

impl Frontier {
    /// Notes that the heap's first `end` bytes have been used.
    #[inline]
    pub(crate) fn note_used(&self, end: usize) {
        self.used.fetch_max(end, Ordering::Relaxed);
    }

    /// Bytes from the heap's start used so far.
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Called by the heap's drop with its mapping: no step starts after
    /// this. Returns the mapping to unmap now, or, when a step is running
    /// on it this moment, hands it to the thread, which unmaps it after
    /// that step (the heap's drop never waits on the thread: it runs in
    /// the idle class and may wait long for a core).
    pub(crate) fn close(&self, map: memmap2::MmapMut) -> Option<memmap2::MmapMut> {
        self.closed.store(true, Ordering::SeqCst);
        let idle = match self.stepping.try_lock() {
            Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => true,
            Err(std::sync::TryLockError::WouldBlock) => false,
        };
        if idle {
            // No step holds the lock, and any step after it sees `closed`.
            return Some(map);
        }
        orphan(map);
        None
    }
}

/// Makes one heap's pages resident ahead of its frontier.
#[derive(Debug)]
pub(crate) struct Warmer {
    frontier: Arc<Frontier>,
    /// The heap's address and length (never dereferenced here).
    base: usize,
    len: usize,
    /// Bytes from the start made resident so far.
    populated: usize,
}

/// What a [`Warmer::warm`] call found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Warmth {
    /// Made more pages resident.
    Progress,
    /// Already far enough ahead.
    Idle,
    /// Nothing left to do: the whole heap is resident, the heap is gone,
    /// or the kernel refused (the writes then fault as without a warmer).
    Done,
}

impl Warmer {
    /// A warmer of the `len` bytes at `base`, which `frontier`'s heap
    /// maps until it calls [`Frontier::close`].
    pub(crate) fn new(frontier: Arc<Frontier>, base: usize, len: usize) -> Self {
        Warmer {
            frontier,
            base,
            len,
            populated: 0,
        }
    }

    /// Makes the pages up to `ahead` bytes past the frontier resident.
    pub(crate) fn warm(&mut self, ahead: usize) -> Warmth {
        if self.frontier.closed.load(Ordering::SeqCst) {
            // The heap is gone (its drop closed the frontier).
            return Warmth::Done;
        }
        let want = self
            .frontier
            .used
            .load(Ordering::Relaxed)
            .saturating_add(ahead)
            .min(self.len);
        let mut progressed = false;
        while self.populated < want {
            // Up to the next huge-page boundary of the address.
            let at = self.base + self.populated;
            let end = ((at / STEP + 1) * STEP - self.base).min(self.len);
            let step = lock(&self.frontier.stepping);
            if self.frontier.closed.load(Ordering::SeqCst) || !populate(at, end - self.populated) {
                return Warmth::Done;
            }
            drop(step);
            self.populated = end;
            progressed = true;
        }
        if self.populated >= self.len {
            Warmth::Done
        } else if progressed {
            Warmth::Progress
        } else {
            Warmth::Idle
        }
    }
}

/// Faults `[at, at + len)` in as a write would; false if the kernel
/// refused (a kernel before 5.14, or memory it cannot give).
fn populate(at: usize, len: usize) -> bool {
    debug_assert_eq!(at % 4096, 0, "madvise needs a page-aligned start");
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: the caller holds the range's heap's `stepping` lock and
        // found it not `closed` after taking it, so the heap still maps
        // the whole range (it is inside `[base, base + len)`), and it is
        // not unmapped before the call returns: a drop that closes the
        // heap meanwhile finds the lock taken and hands the mapping to
        // this thread instead of unmapping it (`Frontier::close`), and this
        // thread unmaps it only after the call. `at` is page-aligned:
        // the heap's base is (mmap's result) and every step ends on a
        // huge-page boundary. MADV_POPULATE_WRITE only faults pages in as
        // a write would, never changing a byte, so the heap's owner, which
        // may be writing these pages meanwhile, sees nothing change.
        unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) == 0 }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        let _ = (at, len);
        false
    }
}

/// Every registered warmer, and whether the thread runs.
struct Registry {
    warmers: Vec<Warmer>,
    /// Mappings of heaps dropped during a step, unmapped after the pass.
    orphans: Vec<memmap2::MmapMut>,
    /// How many the thread has taken out for its current pass.
    working: usize,
    running: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    warmers: Vec::new(),
    orphans: Vec::new(),
    working: 0,
    running: false,
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here panics while holding a lock; a poisoned one is still
    // consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands a dropped heap's mapping to the thread, which unmaps it after
/// its current pass; unmapped here if the thread is gone (then no step
/// runs).
fn orphan(map: memmap2::MmapMut) {
    let mut reg = lock(&REGISTRY);
    if reg.running {
        reg.orphans.push(map);
    } else {
        drop(reg);
        drop(map);
    }
}

/// Hands `warmer` to the background thread, starting it if it is not
/// running. If the thread cannot start, the heap simply faults as without
/// a warmer.
pub(crate) fn register(warmer: Warmer) {
    let mut reg = lock(&REGISTRY);
    reg.warmers.push(warmer);
    if reg.running {
        return;
    }
    let started = std::thread::Builder::new()
        .name("segcache-warm".into())
        .spawn(serve);
    match started {
        Ok(_) => reg.running = true,
        Err(_) => reg.warmers.clear(),
    }
}

/// The thread: passes over every warmer, pausing longer while there is
/// nothing to do, until no warmer is left.
fn serve() {
    idle_priority();
    let mut pause = MIN_PAUSE;
    loop {
        // Out of the registry while they work: this thread runs in the
        // idle class and may wait long for a core, and a cache being
        // built must not wait on it to register.
        let mut warmers = {
            let mut reg = lock(&REGISTRY);
            reg.working = reg.warmers.len();
            std::mem::take(&mut reg.warmers)
        };
        let mut progressed = false;
        warmers.retain_mut(|w| match w.warm(AHEAD) {
            Warmth::Progress => {
                progressed = true;
                true
            }
            Warmth::Idle => true,
            Warmth::Done => false,
        });
        let mut reg = lock(&REGISTRY);
        // Registered meanwhile: after these.
        warmers.append(&mut reg.warmers);
        reg.warmers = warmers;
        reg.working = 0;
        // Every step of the pass is over: unmapped outside the lock.
        let orphans = std::mem::take(&mut reg.orphans);
        let done = reg.warmers.is_empty();
        if done {
            reg.running = false;
        }
        drop(reg);
        drop(orphans);
        if done {
            return;
        }
        pause = if progressed {
            MIN_PAUSE
        } else {
            (pause * 2).min(MAX_PAUSE)
        };
        std::thread::sleep(pause);
    }
}

/// Puts the calling thread in the idle scheduling class (Linux's
/// `SCHED_IDLE`): it runs only where a core has nothing else to run, and
/// gives way at once when anything else wakes, so zeroing pages ahead
/// never delays the cache's own threads or its clients. Where the class
/// is refused the thread keeps its priority.
fn idle_priority() {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call; pid 0 is
        // the calling thread, whose scheduling class is all that changes.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}

/// Warmers the thread still serves (tests).
#[cfg(all(test, target_os = "linux", not(miri)))]
pub(crate) fn registered() -> usize {
    let reg = lock(&REGISTRY);
    reg.warmers.len() + reg.working
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use super::*;
    use crate::memory::tests::resident_pages;
    use crate::memory::Heap;

    const PAGE: usize = 4096;

    #[test]
    fn a_warmer_stays_ahead_of_the_frontier_and_stops_at_the_heap_end_or_its_drop() {
        const LEN: usize = 32 << 20;
        let heap = Heap::anon(LEN).unwrap();
        let frontier = Arc::new(Frontier::default());
        let mut warmer = Warmer::new(frontier.clone(), heap.as_ptr() as usize, LEN);
        // The heap's base need not be 2 MiB-aligned: the first step ends at
        // the first huge-page boundary, so the warmed prefix is 6-8 MiB.
        assert_eq!(warmer.warm(6 << 20), Warmth::Progress);
        let warmed = warmer.populated;
        assert!((6 << 20..=8 << 20).contains(&warmed), "{warmed}");
        assert_eq!(resident_pages(&heap[..warmed]), warmed / PAGE);
        assert_eq!(resident_pages(&heap[warmed..]), 0, "nothing past it");
        assert_eq!(warmer.warm(6 << 20), Warmth::Idle, "already ahead");
        // Writes reach 20 MiB: the pages up to 26 MiB follow.
        frontier.note_used(20 << 20);
        frontier.note_used(4 << 20); // an older note never moves it back
        assert_eq!(warmer.warm(6 << 20), Warmth::Progress);
        assert!(warmer.populated >= 26 << 20);
        assert_eq!(
            resident_pages(&heap[..26 << 20]),
            (26 << 20) / PAGE,
            "the pages nobody wrote were faulted in"
        );
        assert!(heap.iter().all(|&b| b == 0), "and read as zeros still");
        // Past the end: done once the whole heap is resident.
        frontier.note_used(LEN);
        assert_eq!(warmer.warm(6 << 20), Warmth::Done);
        assert_eq!(resident_pages(&heap), LEN / PAGE);

        // A closed heap is never warmed again.
        let heap = Heap::anon(LEN).unwrap();
        let frontier = Arc::new(Frontier::default());
        let mut warmer = Warmer::new(frontier.clone(), heap.as_ptr() as usize, LEN);
        let spare = memmap2::MmapMut::map_anon(4096).unwrap();
        assert!(frontier.close(spare).is_some(), "no step: unmapped now");
        assert_eq!(warmer.warm(6 << 20), Warmth::Done);
        assert_eq!(resident_pages(&heap), 0);
    }

    #[test]
    fn a_heap_closed_during_a_step_is_unmapped_by_the_thread_not_waited_for() {
        let frontier = Frontier::default();
        let map = memmap2::MmapMut::map_anon(4096).unwrap();
        // A step holds the lock: the drop hands the mapping over, at once.
        let step = lock(&frontier.stepping);
        assert!(frontier.close(map).is_none());
        drop(step);
        // And a step that starts after finds the heap closed.
        assert!(frontier.closed.load(Ordering::SeqCst));
        let reg = lock(&REGISTRY);
        assert!(reg.orphans.len() <= usize::from(reg.running));
    }
}

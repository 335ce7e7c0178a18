//! A client that refills and reruns one `Batch` on the storage thread
//! allocates nothing per request in steady state, on either side of the
//! queue, even when hits and misses change places from round to round:
//! the whole test binary runs under a counting allocator.

use segcache::{Batch, Response, Segcache, StorageConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only
// counts allocations and reallocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Fills round `r`: 16 reads whose hits and misses move around with `r`,
/// and 4 sets. Keys are formatted into a fixed buffer (no allocation).
fn fill(batch: &mut Batch, r: u64) {
    batch.clear();
    let mut key = *b"key-00";
    for i in 0..16u64 {
        // Keys 0..40 exist; 40..64 never do.
        let k = (r * 7 + i * 5) % 64;
        key[4] = b'0' + (k / 10) as u8;
        key[5] = b'0' + (k % 10) as u8;
        batch.get(key);
    }
    for i in 0..4u64 {
        let k = (r + i * 11) % 40;
        key[4] = b'0' + (k / 10) as u8;
        key[5] = b'0' + (k % 10) as u8;
        batch.set(key, [b'v'; 200], 0, None);
    }
}

#[test]
fn rerunning_a_batch_allocates_nothing_per_request() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let woken = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&woken);
    let mut client = handle.client_with_notify(move || flag.store(true, Relaxed));
    let mut batch = Batch::new();
    for r in 0..40u64 {
        batch.clear();
        let mut key = *b"key-00";
        key[4] = b'0' + (r / 10) as u8;
        key[5] = b'0' + (r % 10) as u8;
        batch.set(key, [b'v'; 200], 0, None);
        client.run(&mut batch).unwrap();
    }
    let mut hits = 0u64;
    let mut run = |batch: &mut Batch, r: u64, hits: &mut u64| {
        fill(batch, r);
        assert!(client.submit_batch(batch).unwrap());
        // Bounded: the storage thread answers; no timing is asserted.
        let mut polls = 0u64;
        while !client.try_complete(batch).unwrap() {
            polls += 1;
            assert!(polls < 1 << 40, "never answered");
            std::hint::spin_loop();
        }
        *hits += batch
            .responses()
            .iter()
            .filter(|r| matches!(r, Response::Get(Ok(Some(_)))))
            .count() as u64;
    };
    // Warm-up: the arena, the replies and the free list reach their size.
    for r in 0..200 {
        run(&mut batch, r, &mut hits);
    }
    hits = 0;
    let before = ALLOCATIONS.load(Relaxed);
    const ROUNDS: u64 = 500;
    for r in 200..200 + ROUNDS {
        run(&mut batch, r, &mut hits);
    }
    let allocations = ALLOCATIONS.load(Relaxed) - before;
    // Hits and misses really moved around (the case a per-position reuse
    // paid an allocation for).
    assert!(hits > ROUNDS * 4 && hits < ROUNDS * 16, "{hits} hits");
    // 20 requests a round; a once-a-second expiry may land in the window.
    assert!(
        allocations <= 8,
        "{allocations} allocations for {} requests",
        ROUNDS * 20
    );
    drop((client, handle));
    thread.join().unwrap();
    drop(woken);
}

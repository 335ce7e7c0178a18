//! Requests to the operating system about the cache's large allocations.
//!
//! Owns one thing today: asking for transparent huge pages on the heap and
//! the hash table, which are touched at random and otherwise pay a TLB miss
//! on most lookups. Advice only: it never changes what the memory holds,
//! and where the OS refuses (or is not Linux) nothing happens.

/// Advises the kernel to back `memory` with huge pages where it can.
pub(crate) fn advise_huge_pages(memory: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = memory.as_ptr() as usize;
        let aligned = start.next_multiple_of(PAGE);
        let end = start + memory.len();
        if end <= aligned + PAGE {
            return;
        }
        // SAFETY: [aligned, end) lies inside `memory`, which this process
        // owns for as long as the call lasts; `aligned` is page-aligned as
        // madvise requires. MADV_HUGEPAGE is advisory: it never changes the
        // contents or validity of the range, and its failure is harmless.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = memory;
}

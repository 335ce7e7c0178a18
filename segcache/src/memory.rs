//! The cache's large allocations and requests to the operating system
//! about them.
//!
//! Owns the [`Heap`]: segment storage either in anonymous memory or in a
//! memory-mapped file (the datapool, for warm restart), and the advice to
//! back random-access memory with huge pages. The heap is addressed by
//! offset only, so a file can be mapped at any address on the next start.
//! Nothing here interprets the bytes.

use std::fs::OpenOptions;
use std::io;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::warm::{self, Frontier, Warmer};

/// Segment storage: anonymous memory, or a file mapped shared (one map
/// either way, so reaching the bytes costs no branch).
pub(crate) struct Heap {
    /// Dropped by hand ([`Heap`]'s drop: it may go to the warming thread).
    map: ManuallyDrop<memmap2::MmapMut>,
    /// The datapool file, when the heap lives in one.
    path: Option<PathBuf>,
    /// Shared with the background thread that makes pages resident ahead
    /// of use, when it serves this heap ([`Heap::populate_ahead`]).
    ahead: Option<Arc<Frontier>>,
}

impl Heap {
    /// Zeroed anonymous memory; pages become resident as they are written.
    /// An error, not an abort, if the OS refuses the mapping.
    pub(crate) fn anon(len: usize) -> io::Result<Heap> {
        let map = memmap2::MmapMut::map_anon(len)?;
        advise_huge_pages(&map);
        Ok(Heap {
            map: ManuallyDrop::new(map),
            path: None,
            ahead: None,
        })
    }

    /// Maps `path` (created, and sized to `len`, if need be) as the heap.
    /// Its contents are kept: a restore may want them.
    ///
    /// The file's blocks are reserved up front ([`reserve`]), so a
    /// filesystem that cannot hold the heap is an error here, never a
    /// SIGBUS on some later write into a sparse page. A failed reservation
    /// leaves the filesystem as it was: a file this call created is
    /// removed, an existing one gets its old length back.
    pub(crate) fn file(path: &Path, len: usize) -> io::Result<Heap> {
        let (file, created) = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (OpenOptions::new().read(true).write(true).open(path)?, false)
            }
            Err(e) => return Err(e),
        };
        let old_len = file.metadata()?.len();
        // Refuse early what cannot fit, rather than fill the filesystem
        // for a moment (others write there too).
        let shortage = match (free_bytes(&file), allocated_bytes(&file)) {
            (Some(free), Some(held)) if free.saturating_add(held) < len as u64 => {
                Some(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => None,
        };
        if let Some(e) = shortage.map_or_else(|| reserve(&file, len as u64).err(), Some) {
            if created {
                let _ = std::fs::remove_file(path);
            } else {
                let _ = file.set_len(old_len);
            }
            let free = free_bytes(&file)
                .map(|n| format!("{n} bytes free"))
                .unwrap_or_else(|| "free space unknown".into());
            return Err(io::Error::new(
                e.kind(),
                format!("cannot reserve {len} bytes for the heap ({free} on its filesystem): {e}"),
            ));
        }
        if old_len > len as u64 {
            file.set_len(len as u64)?;
        }
        // SAFETY: the mapping is shared with the file, which another process
        // could change under us; the cache treats heap bytes as untrusted
        // data (lengths are bounds-checked on every read, and a restore
        // verifies a checksum of every live byte before use), so a change
        // can corrupt values but not memory safety. The map lives as long as
        // the Heap, and nothing else in this process maps the file.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file)? };
        Ok(Heap {
            map: ManuallyDrop::new(map),
            path: Some(path.to_path_buf()),
            ahead: None,
        })
    }

    /// Writes a file-backed heap's dirty pages to the file.
    pub(crate) fn flush(&self) -> io::Result<()> {
        match self.path {
            None => Ok(()),
            Some(_) => self.map.flush(),
        }
    }

    /// The datapool file, if the heap lives in one.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Gives the whole pages of `range` back to the kernel (anonymous
    /// memory only: a datapool's pages are its file's). Their contents are
    /// lost (they read as zeros, and become resident again when written).
    /// Advisory: a refusal leaves the pages resident, nothing else.
    pub(crate) fn discard(&mut self, range: std::ops::Range<usize>) {
        debug_assert!(range.start <= range.end && range.end <= self.map.len());
        // (Miri cannot run madvise; the caller reads nothing it discarded.)
        #[cfg(all(target_os = "linux", not(miri)))]
        if self.path.is_none() {
            let base = self.map.as_mut_ptr() as usize;
            let start = (base + range.start).next_multiple_of(PAGE);
            let end = (base + range.end) / PAGE * PAGE;
            if end > start {
                // SAFETY: [start, end) lies inside this heap's anonymous
                // mapping, which `&mut self` keeps alive and unshared for
                // the call; both ends are page-aligned, as madvise
                // requires. MADV_DONTNEED on private anonymous memory only
                // makes the pages read as zeros from now on.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = range;
    }
}

impl Heap {
    /// Makes every page of the heap resident now, so that no write into it
    /// later waits on a page fault (the first fill of a fresh heap would
    /// otherwise fault once per page, or per huge page). Contents are
    /// unchanged. Uses `MADV_POPULATE_WRITE` (Linux 5.14+); where the
    /// kernel lacks it, or elsewhere, each page is touched by rewriting one
    /// of its bytes. An error if the kernel cannot back the range.
    pub(crate) fn populate(&mut self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            let (start, len) = (self.map.as_mut_ptr() as usize, self.map.len());
            debug_assert_eq!(start % PAGE, 0, "mmap returns page-aligned memory");
            if len == 0 {
                return Ok(());
            }
            // SAFETY: [start, start + len) is exactly this heap's mapping,
            // which `&mut self` keeps alive and unshared for the call, and
            // `start` is page-aligned (mmap's result, checked above).
            // MADV_POPULATE_WRITE only faults pages in as a write would,
            // without changing their contents.
            let rc = unsafe {
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE)
            };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            // EINVAL: a kernel older than 5.14 (the advice is unknown).
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(err);
            }
        }
        touch_pages(&mut self.map);
        Ok(())
    }
}

impl Heap {
    /// Hands an anonymous heap to the background thread that makes its
    /// pages resident a little ahead of the writes (`crate::warm`), which
    /// [`Heap::note_used`] then keeps informed. A datapool's heap is left
    /// alone (its pages are its file's).
    pub(crate) fn populate_ahead(&mut self) {
        if self.path.is_some() || self.ahead.is_some() || self.map.is_empty() {
            return;
        }
        let frontier = Arc::new(Frontier::default());
        let base = self.map.as_mut_ptr() as usize;
        warm::register(Warmer::new(frontier.clone(), base, self.map.len()));
        self.ahead = Some(frontier);
    }

    /// Bytes from the start the writes have reached, as the background
    /// thread sees it (tests).
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) fn used(&self) -> Option<usize> {
        self.ahead.as_ref().map(|f| f.used())
    }

    /// Notes that writes have reached the heap's first `end` bytes.
    #[inline]
    pub(crate) fn note_used(&self, end: usize) {
        if let Some(frontier) = &self.ahead {
            frontier.note_used(end);
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once, and nothing uses `map` after it.
        let map = unsafe { ManuallyDrop::take(&mut self.map) };
        // With a warmer: unmapped now unless a warming step is running on
        // it this moment (then the warming thread unmaps it after).
        let map = match &self.ahead {
            Some(frontier) => frontier.close(map),
            None => Some(map),
        };
        drop(map);
    }
}

/// Write-faults every page of `memory` in by rewriting one byte of each
/// with its own value.
fn touch_pages(memory: &mut [u8]) {
    for at in (0..memory.len()).step_by(PAGE) {
        let byte = &mut memory[at];
        // A volatile rewrite: the write fault is the point, and the
        // compiler may not drop a store of the value just loaded.
        // SAFETY: `byte` is a valid, exclusive reference, so reading and
        // writing through it is sound.
        unsafe { std::ptr::write_volatile(byte, std::ptr::read_volatile(byte)) };
    }
}

/// The base page size assumed for advice and touching (every Linux
/// architecture this crate targets has 4 KiB base pages or a multiple).
const PAGE: usize = 4096;

impl Deref for Heap {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl DerefMut for Heap {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

/// Allocates the blocks of `file`'s first `len` bytes (extending it to
/// `len` if shorter) without changing any byte already there. Filesystems
/// that cannot reserve space are left sparse, as before.
fn reserve(file: &std::fs::File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "heap too large"))?;
        // SAFETY: the descriptor belongs to `file`, open for writing for the
        // whole call; posix_fallocate only allocates blocks and, past the
        // end, extends the file with zeros: no memory of ours is touched.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        match rc {
            0 => Ok(()),
            libc::EOPNOTSUPP | libc::ENOSYS => file.set_len(len as u64),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        if file.metadata()?.len() < len {
            file.set_len(len)?;
        }
        Ok(())
    }
}

/// Bytes of disk `file` already holds.
fn allocated_bytes(file: &std::fs::File) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        file.metadata().ok().map(|m| m.blocks() * 512)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// Bytes an unprivileged writer may still allocate on `file`'s filesystem.
fn free_bytes(file: &std::fs::File) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: all-zero is a valid `statvfs` (plain integers), which
        // fstatvfs overwrites; the descriptor is open for the whole call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid, writable statvfs for the call's duration.
        let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) };
        (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Advises the kernel to back `memory` with huge pages where it can.
pub(crate) fn advise_huge_pages(memory: &[u8]) {
    // (Miri cannot run madvise; the advice changes nothing it checks.)
    #[cfg(all(target_os = "linux", not(miri)))]
    {
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
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = memory;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn file_heap_keeps_its_bytes_across_maps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        {
            let mut heap = Heap::file(&path, 8192).unwrap();
            heap[100..105].copy_from_slice(b"hello");
            heap.flush().unwrap();
            assert_eq!(heap.path(), Some(path.as_path()));
        }
        let heap = Heap::file(&path, 8192).unwrap();
        assert_eq!(&heap[100..105], b"hello");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
        assert!(Heap::file(&dir.path().join("missing/dir/pool"), 8192).is_err());
        let anon = Heap::anon(4096).unwrap();
        assert!(anon.iter().all(|&b| b == 0) && anon.path().is_none());
    }

    /// Pages of `memory` the kernel reports resident (`mincore`).
    #[cfg(target_os = "linux")]
    pub(crate) fn resident_pages(memory: &[u8]) -> usize {
        let start = memory.as_ptr() as usize;
        assert_eq!(start % PAGE, 0);
        let mut vec = vec![0u8; memory.len().div_ceil(PAGE)];
        // SAFETY: the range is `memory` (live for the call), page-aligned
        // as asserted; `vec` has one byte per page of it, as mincore writes.
        let rc =
            unsafe { libc::mincore(start as *mut libc::c_void, memory.len(), vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        vec.iter().filter(|&&v| v & 1 == 1).count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn populate_makes_every_page_resident_and_keeps_the_bytes() {
        // Big enough that the one huge page a write may fault in is a
        // small part of it.
        const LEN: usize = 16 << 20;
        let mut heap = Heap::anon(LEN).unwrap();
        heap[5000] = 7;
        let before = resident_pages(&heap);
        assert!(
            before < LEN / PAGE / 2,
            "a fresh heap is not resident ({before} pages)"
        );
        heap.populate().unwrap();
        assert_eq!(resident_pages(&heap), LEN / PAGE);
        assert_eq!(heap[5000], 7);
        assert_eq!(heap.iter().map(|&b| b as usize).sum::<usize>(), 7);

        // The fallback for kernels without MADV_POPULATE_WRITE.
        let mut touched = Heap::anon(LEN).unwrap();
        touched[PAGE + 1] = 9;
        touch_pages(&mut touched);
        assert_eq!(resident_pages(&touched), LEN / PAGE);
        assert_eq!(touched[PAGE + 1], 9);

        // A file heap keeps what it holds.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let mut file = Heap::file(&path, 1 << 20).unwrap();
        file[100..105].copy_from_slice(b"hello");
        file.populate().unwrap();
        assert_eq!(&file[100..105], b"hello");
        assert_eq!(resident_pages(&file), (1 << 20) / PAGE);
    }
}

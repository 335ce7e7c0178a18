//! The per-thread message behind `segcache_last_error()`: why the last
//! failing `segcache_new` or `segcache_save` on this thread failed, in
//! words that name the setting (`"invalid heap_size: ..."`).
//!
//! Owns only the thread-local string. It is written on failure paths only,
//! never by the cache operations (a miss must not allocate), and never
//! read back by the library itself.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error (interior NULs dropped).
pub(crate) fn set(message: impl std::fmt::Display) {
    let mut bytes = message.to_string().into_bytes();
    bytes.retain(|&b| b != 0);
    let message = CString::new(bytes).unwrap_or_default();
    // `try_with`: during thread teardown there is nowhere to store it.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = message);
}

/// Why the last failing `segcache_new` or `segcache_save` on the calling
/// thread failed: a NUL-terminated English message that names the setting
/// for `SEGCACHE_INVALID_CONFIG` (for example "invalid segment_size: ...")
/// and the file for `SEGCACHE_PERSISTENCE`. The empty string when neither
/// has failed on this thread. Successful calls leave the message alone.
/// The string belongs to the library and stays valid until the next
/// failing `segcache_new` or `segcache_save` on the same thread, or until
/// the thread exits; do not free it.
#[no_mangle]
pub extern "C" fn segcache_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: a NUL-terminated string owned by this thread's slot.
        unsafe { CStr::from_ptr(segcache_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn messages_are_per_thread_and_survive_interior_nuls() {
        assert_eq!(last(), "");
        set("invalid heap_size: zero\0bytes");
        assert_eq!(last(), "invalid heap_size: zerobytes");
        std::thread::spawn(|| assert_eq!(last(), ""))
            .join()
            .unwrap();
        assert_eq!(last(), "invalid heap_size: zerobytes");
    }
}

//! Status codes, their messages, and the checks every entry point shares.
//!
//! Owns the mapping from [`segcache_core::Error`] to [`segcache_status_t`],
//! the panic guard ([`guard`]) that keeps unwinding out of C, and the
//! conversions of C arguments (handle, key, value, TTL) into Rust values,
//! each of which rejects NULL pointers and bad lengths with a status.

use crate::{segcache_t, SEGCACHE_MAX_KEY_LEN, SEGCACHE_MAX_TTL};
use segcache_core::{Error, ShardedCache};
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The result of every operation. `SEGCACHE_OK` is zero; every other value
/// is an error or a miss, described by `segcache_strerror`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum segcache_status_t {
    /// Success.
    SEGCACHE_OK = 0,
    /// The key is not in the cache (or has expired).
    SEGCACHE_NOT_FOUND = 1,
    /// `add` found the key, or `replace`/`append`/`prepend` did not.
    SEGCACHE_NOT_STORED = 2,
    /// `cas` found the key at another version.
    SEGCACHE_EXISTS = 3,
    /// `incr`/`decr` on a value that is not a decimal unsigned 64-bit number.
    SEGCACHE_NOT_NUMERIC = 4,
    /// `segcache_get`: the caller's buffer is smaller than the value; the
    /// needed length was stored in `*value_len`.
    SEGCACHE_BUFFER_TOO_SMALL = 5,
    /// The key is zero bytes long.
    SEGCACHE_EMPTY_KEY = 6,
    /// The key is longer than `SEGCACHE_MAX_KEY_LEN` bytes.
    SEGCACHE_KEY_TOO_LONG = 7,
    /// The item does not fit in one segment (see `segcache_max_value_len`).
    SEGCACHE_VALUE_TOO_LARGE = 8,
    /// The TTL is negative or above `SEGCACHE_MAX_TTL` seconds.
    SEGCACHE_TTL_OUT_OF_RANGE = 9,
    /// The key's hash-table neighbourhood is full and nothing could be
    /// evicted from it (eviction "none"); raise `hash_power`.
    SEGCACHE_HASH_TABLE_FULL = 10,
    /// No segment could be freed (eviction "none", or nothing evictable).
    SEGCACHE_OUT_OF_MEMORY = 11,
    /// `segcache_new`: a configuration value is out of range.
    SEGCACHE_INVALID_CONFIG = 12,
    /// A NULL handle or required pointer, a NULL key or value with a nonzero
    /// length, or a length above `PTRDIFF_MAX`.
    SEGCACHE_INVALID_ARGUMENT = 13,
    /// A bug: the library panicked. The operation may have been partly
    /// done; free the handle rather than keep using it.
    SEGCACHE_PANIC = 14,
    /// An error this version of the bindings does not know how to name.
    SEGCACHE_INTERNAL = 15,
    /// The datapool file or its metadata could not be opened, read or
    /// written (`segcache_new` with a datapool, `segcache_save`).
    SEGCACHE_PERSISTENCE = 16,
}

use segcache_status_t::*;

/// A static, NUL-terminated English description of a status. Any value,
/// even one outside `segcache_status_t`, gets a message (unknown values:
/// "unknown status"); the string must not be freed.
#[no_mangle]
pub extern "C" fn segcache_strerror(status: i32) -> *const c_char {
    let msg: &'static [u8] = match status {
        0 => b"ok\0",
        1 => b"not found\0",
        2 => b"not stored\0",
        3 => b"item exists at another version\0",
        4 => b"value is not a decimal unsigned 64-bit number\0",
        5 => b"buffer too small for the value\0",
        6 => b"key is empty\0",
        7 => b"key is longer than SEGCACHE_MAX_KEY_LEN bytes\0",
        8 => b"value is too large for one segment\0",
        9 => b"ttl is negative or above SEGCACHE_MAX_TTL seconds\0",
        10 => b"hash table is full\0",
        11 => b"out of memory: no segment could be freed\0",
        12 => b"invalid configuration\0",
        13 => b"invalid argument (NULL pointer or bad length)\0",
        14 => b"internal panic in the cache library\0",
        15 => b"internal error\0",
        16 => b"datapool or its metadata could not be read or written\0",
        _ => b"unknown status\0",
    };
    msg.as_ptr().cast()
}

impl From<Error> for segcache_status_t {
    fn from(e: Error) -> Self {
        match e {
            Error::EmptyKey => SEGCACHE_EMPTY_KEY,
            Error::KeyTooLong { .. } => SEGCACHE_KEY_TOO_LONG,
            Error::ValueTooLarge { .. } => SEGCACHE_VALUE_TOO_LARGE,
            Error::TtlOutOfRange { .. } => SEGCACHE_TTL_OUT_OF_RANGE,
            Error::HashTableFull => SEGCACHE_HASH_TABLE_FULL,
            Error::OutOfMemory => SEGCACHE_OUT_OF_MEMORY,
            Error::NotStored => SEGCACHE_NOT_STORED,
            Error::Exists => SEGCACHE_EXISTS,
            Error::NotFound => SEGCACHE_NOT_FOUND,
            Error::NotNumeric => SEGCACHE_NOT_NUMERIC,
            Error::InvalidConfig { .. } => SEGCACHE_INVALID_CONFIG,
            Error::Persistence(_) => SEGCACHE_PERSISTENCE,
            _ => SEGCACHE_INTERNAL,
        }
    }
}

/// The result type of the entry points' bodies.
pub(crate) type Status<T = ()> = Result<T, segcache_status_t>;

/// Runs `f`, turning a panic into `Err(SEGCACHE_PANIC)`.
pub(crate) fn catch<T>(f: impl FnOnce() -> Status<T>) -> Status<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            // Dropping the payload runs arbitrary Drop code: guard it too.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err(SEGCACHE_PANIC)
        }
    }
}

/// Runs an entry point's body: its status, `SEGCACHE_PANIC` if it panicked.
pub(crate) fn guard(f: impl FnOnce() -> Status) -> segcache_status_t {
    match catch(f) {
        Ok(()) => SEGCACHE_OK,
        Err(status) => status,
    }
}

/// The cache behind a handle; NULL is `SEGCACHE_INVALID_ARGUMENT`.
///
/// # Safety
/// `c` is NULL or a live handle from `segcache_new`.
pub(crate) unsafe fn cache<'a>(c: *const segcache_t) -> Status<&'a ShardedCache> {
    // SAFETY: the caller promises `c` is NULL or a live handle; `as_ref`
    // handles NULL, and a live handle is a valid, shared-only `segcache_t`.
    match unsafe { c.as_ref() } {
        Some(handle) => Ok(&handle.inner),
        None => Err(SEGCACHE_INVALID_ARGUMENT),
    }
}

/// A key from pointer and length: a zero length is `SEGCACHE_EMPTY_KEY`
/// (whatever the pointer), NULL with a nonzero length is
/// `SEGCACHE_INVALID_ARGUMENT`, and more than `SEGCACHE_MAX_KEY_LEN` bytes
/// is `SEGCACHE_KEY_TOO_LONG` (checked before the memory is touched).
///
/// # Safety
/// A non-NULL `ptr` with `len <= SEGCACHE_MAX_KEY_LEN` points to `len`
/// readable bytes that stay unchanged for `'a`.
pub(crate) unsafe fn key<'a>(ptr: *const u8, len: usize) -> Status<&'a [u8]> {
    if len == 0 {
        Err(SEGCACHE_EMPTY_KEY)
    } else if ptr.is_null() {
        Err(SEGCACHE_INVALID_ARGUMENT)
    } else if len > SEGCACHE_MAX_KEY_LEN {
        Err(SEGCACHE_KEY_TOO_LONG)
    } else {
        // SAFETY: non-NULL, at most 250 bytes (far below isize::MAX), and
        // readable for `len` bytes by the caller's promise.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// A value (or append/prepend data) from pointer and length: a zero length
/// is the empty value whatever the pointer; NULL with a nonzero length, or
/// a length above `isize::MAX`, is `SEGCACHE_INVALID_ARGUMENT`.
///
/// # Safety
/// A non-NULL `ptr` with `len <= isize::MAX` points to `len` readable bytes
/// that stay unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Status<&'a [u8]> {
    if len == 0 {
        Ok(&[])
    } else if ptr.is_null() || len > isize::MAX as usize {
        Err(SEGCACHE_INVALID_ARGUMENT)
    } else {
        // SAFETY: non-NULL, `len` within isize::MAX, and readable for `len`
        // bytes by the caller's promise.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// A TTL in seconds: 0 is "never expires"; negative or above
/// `SEGCACHE_MAX_TTL` is `SEGCACHE_TTL_OUT_OF_RANGE`.
pub(crate) fn ttl(secs: i64) -> Status<Option<Duration>> {
    match secs {
        0 => Ok(None),
        1..=SEGCACHE_MAX_TTL => Ok(Some(Duration::from_secs(secs as u64))),
        _ => Err(SEGCACHE_TTL_OUT_OF_RANGE),
    }
}

/// Stores `value` through an optional out pointer (NULL: ignored).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-NULL and, by the caller's promise, writable.
        unsafe { out.write(value) };
    }
}

/// Stores `value` through a required out pointer (NULL:
/// `SEGCACHE_INVALID_ARGUMENT`).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put_required<T>(out: *mut T, value: T) -> Status {
    if out.is_null() {
        return Err(SEGCACHE_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL and, by the caller's promise, writable.
    unsafe { out.write(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn a_panic_becomes_a_status() {
        let status = guard(|| panic!("boom"));
        assert_eq!(status, SEGCACHE_PANIC);
        assert_eq!(guard(|| Err(SEGCACHE_EXISTS)), SEGCACHE_EXISTS);
        assert_eq!(guard(|| Ok(())), SEGCACHE_OK);
    }

    #[test]
    fn every_status_has_its_own_message() {
        let mut seen = std::collections::HashSet::new();
        for code in 0..=16 {
            // SAFETY: segcache_strerror returns static NUL-terminated strings.
            let msg = unsafe { CStr::from_ptr(segcache_strerror(code)) };
            assert!(seen.insert(msg.to_owned()), "duplicate message for {code}");
            assert_ne!(msg.to_bytes(), b"unknown status", "code {code}");
        }
        for code in [-1, 17, i32::MAX, i32::MIN] {
            // SAFETY: as above.
            let msg = unsafe { CStr::from_ptr(segcache_strerror(code)) };
            assert_eq!(msg.to_bytes(), b"unknown status");
        }
        assert_eq!(
            SEGCACHE_PERSISTENCE as i32, 16,
            "the table above stops at 16"
        );
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(ttl(0), Ok(None));
        assert_eq!(ttl(1), Ok(Some(Duration::from_secs(1))));
        assert_eq!(
            ttl(SEGCACHE_MAX_TTL),
            Ok(Some(Duration::from_secs(SEGCACHE_MAX_TTL as u64)))
        );
        for bad in [-1, i64::MIN, SEGCACHE_MAX_TTL + 1, i64::MAX] {
            assert_eq!(ttl(bad), Err(SEGCACHE_TTL_OUT_OF_RANGE), "{bad}");
        }
    }

    #[test]
    fn key_and_value_checks() {
        let k = [b'k'; 251];
        // SAFETY: every non-NULL pointer below is valid for its length.
        unsafe {
            assert_eq!(key(std::ptr::null(), 0), Err(SEGCACHE_EMPTY_KEY));
            assert_eq!(key(std::ptr::null(), 3), Err(SEGCACHE_INVALID_ARGUMENT));
            assert_eq!(key(k.as_ptr(), 251), Err(SEGCACHE_KEY_TOO_LONG));
            assert_eq!(key(k.as_ptr(), 250).map(<[u8]>::len), Ok(250));
            assert_eq!(bytes(std::ptr::null(), 0), Ok(&[][..]));
            assert_eq!(bytes(std::ptr::null(), 1), Err(SEGCACHE_INVALID_ARGUMENT));
            assert_eq!(
                bytes(k.as_ptr(), usize::MAX),
                Err(SEGCACHE_INVALID_ARGUMENT)
            );
        }
    }

    #[test]
    fn errors_map_to_their_statuses() {
        assert_eq!(
            segcache_status_t::from(Error::KeyTooLong { len: 300 }),
            SEGCACHE_KEY_TOO_LONG
        );
        assert_eq!(
            segcache_status_t::from(Error::ValueTooLarge { len: 9, max: 1 }),
            SEGCACHE_VALUE_TOO_LARGE
        );
        assert_eq!(
            segcache_status_t::from(Error::HashTableFull),
            SEGCACHE_HASH_TABLE_FULL
        );
        assert_eq!(
            segcache_status_t::from(Error::OutOfMemory),
            SEGCACHE_OUT_OF_MEMORY
        );
        assert_eq!(segcache_status_t::from(Error::Closed), SEGCACHE_INTERNAL);
    }
}

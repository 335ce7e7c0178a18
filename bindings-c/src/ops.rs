//! The cache operations: stores, reads, arithmetic, expiry and stats.
//!
//! Each function checks its handle, key, value and out pointers through
//! the helpers in `status`, runs one `ShardedCache` call inside the panic
//! guard, and returns a `segcache_status_t`. Every store (set, add,
//! replace, cas, append, prepend, `segcache_store`) is one core `Store`
//! whose mode comes from the C store mode through `store_mode`. Out pointers documented as
//! optional may be NULL; required ones give `SEGCACHE_INVALID_ARGUMENT`.

use crate::status::{self, bytes, cache, guard, put, put_required, segcache_status_t, Status};
use crate::{segcache_t, SEGCACHE_MAX_KEY_LEN, SEGCACHE_TTL_NEVER};
use segcache_core::{Store, StoreMode, Ttl};
use std::ffi::c_void;
use std::ptr::null_mut;

use segcache_status_t::*;

/// How a store treats the existing item, for `segcache_store`: one of the
/// `SEGCACHE_STORE_*` constants (memcache's set, add, replace, append,
/// prepend). A plain integer type so that any value a C caller passes is
/// defined behaviour; unknown values are `SEGCACHE_INVALID_ARGUMENT`.
pub type segcache_store_mode_t = u32;

/// Store whatever is there (memcache `set`).
pub const SEGCACHE_STORE_SET: segcache_store_mode_t = 0;
/// Store only if the key is absent, else `SEGCACHE_NOT_STORED` (`add`).
pub const SEGCACHE_STORE_ADD: segcache_store_mode_t = 1;
/// Store only if the key is present, else `SEGCACHE_NOT_STORED`
/// (`replace`).
pub const SEGCACHE_STORE_REPLACE: segcache_store_mode_t = 2;
/// Add the data after the present value, else `SEGCACHE_NOT_STORED`
/// (`append`); the item keeps its flags and TTL.
pub const SEGCACHE_STORE_APPEND: segcache_store_mode_t = 3;
/// Put the data before the present value, else `SEGCACHE_NOT_STORED`
/// (`prepend`); the item keeps its flags and TTL.
pub const SEGCACHE_STORE_PREPEND: segcache_store_mode_t = 4;

/// The one mapping from the C store modes to the core's [`StoreMode`].
fn store_mode(mode: segcache_store_mode_t) -> Status<StoreMode> {
    Ok(match mode {
        SEGCACHE_STORE_SET => StoreMode::Set,
        SEGCACHE_STORE_ADD => StoreMode::Add,
        SEGCACHE_STORE_REPLACE => StoreMode::Replace,
        SEGCACHE_STORE_APPEND => StoreMode::Append,
        SEGCACHE_STORE_PREPEND => StoreMode::Prepend,
        _ => return Err(SEGCACHE_INVALID_ARGUMENT),
    })
}

/// The body of every store entry point: one core [`Store`], run as one
/// atomic step.
///
/// # Safety
/// As for `segcache_store`.
#[allow(clippy::too_many_arguments)]
unsafe fn store(
    c: *const segcache_t,
    mode: segcache_store_mode_t,
    key_ptr: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl_secs: i64,
    cas: Option<u64>,
    new_cas: *mut u64,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises for the handle, key and value are
        // exactly those of `cache`, `key` and `bytes`.
        let (cache, key, value) = unsafe {
            (
                cache(c)?,
                status::key(key_ptr, key_len)?,
                bytes(value, value_len)?,
            )
        };
        let store = Store {
            cas,
            flags,
            ttl: Ttl::from(status::ttl(ttl_secs)?),
            // Made only when asked for (see `segcache_get`).
            token: !new_cas.is_null(),
            ..Store::new(store_mode(mode)?, key, value)
        };
        let token = cache.store(&store)?;
        // SAFETY: `new_cas` is NULL or writable by the caller's promise.
        unsafe { put(new_cas, token) };
        Ok(())
    })
}

/// `store` without a CAS check and without the new token: the plain store
/// modes' entry points.
///
/// # Safety
/// As for `store`.
#[allow(clippy::too_many_arguments)]
unsafe fn store_plain(
    c: *const segcache_t,
    mode: segcache_store_mode_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl_secs: i64,
) -> segcache_status_t {
    // SAFETY: the caller keeps `store`'s contract; no CAS, no token out.
    unsafe {
        store(
            c,
            mode,
            key,
            key_len,
            value,
            value_len,
            flags,
            ttl_secs,
            None,
            null_mut(),
        )
    }
}

/// Stores `value` under `key` as `mode` says (`SEGCACHE_STORE_SET`, `_ADD`,
/// `_REPLACE`, `_APPEND`, `_PREPEND`); an unknown mode is
/// `SEGCACHE_INVALID_ARGUMENT`. `flags` and `ttl` are as for
/// `segcache_set` (append and prepend ignore them: the item keeps its
/// own). With a non-NULL `cas`, the store happens only if the item's
/// current CAS token is `*cas`: `SEGCACHE_EXISTS` if it changed since,
/// `SEGCACHE_NOT_FOUND` if it is gone. On success the stored item's new
/// CAS token goes to `*new_cas` (optional). The whole store is one atomic
/// step; on any error the old item, if any, is unchanged.
///
/// # Safety
/// `c` is NULL or a live handle; `key` is NULL or readable for `key_len`
/// bytes (when `key_len <= SEGCACHE_MAX_KEY_LEN`); `value` is NULL or
/// readable for `value_len` bytes; `cas` is NULL or readable; `new_cas`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_store(
    c: *mut segcache_t,
    mode: segcache_store_mode_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: i64,
    cas: *const u64,
    new_cas: *mut u64,
) -> segcache_status_t {
    // SAFETY: `cas` is NULL (handled by `as_ref`) or readable.
    let cas = unsafe { cas.as_ref() }.copied();
    // SAFETY: same contract as `store`.
    unsafe {
        store(
            c, mode, key, key_len, value, value_len, flags, ttl, cas, new_cas,
        )
    }
}

/// Stores `value` under `key`, replacing any existing item. `flags` are
/// opaque client flags returned by the get functions. `ttl` is in seconds:
/// 0 never expires; 1 to `SEGCACHE_MAX_TTL` expire that many seconds from
/// now (or a little earlier, never later); negative or larger values are
/// `SEGCACHE_TTL_OUT_OF_RANGE` (there is no memcache-style absolute time).
/// A value that does not fit is `SEGCACHE_VALUE_TOO_LARGE`. On any error
/// the old item, if any, is unchanged. (`segcache_store` with
/// `SEGCACHE_STORE_SET`.)
///
/// # Safety
/// `c` is NULL or a live handle; `key` is NULL or readable for `key_len`
/// bytes (when `key_len <= SEGCACHE_MAX_KEY_LEN`); `value` is NULL or
/// readable for `value_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_set(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: i64,
) -> segcache_status_t {
    // SAFETY: same contract as `store`.
    unsafe {
        store_plain(
            c,
            SEGCACHE_STORE_SET,
            key,
            key_len,
            value,
            value_len,
            flags,
            ttl,
        )
    }
}

/// Like `segcache_set`, but only if the key is absent:
/// `SEGCACHE_NOT_STORED` if it is present.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_add(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: i64,
) -> segcache_status_t {
    // SAFETY: same contract as `store`.
    unsafe {
        store_plain(
            c,
            SEGCACHE_STORE_ADD,
            key,
            key_len,
            value,
            value_len,
            flags,
            ttl,
        )
    }
}

/// Like `segcache_set`, but only if the key is present:
/// `SEGCACHE_NOT_STORED` if it is absent.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_replace(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: i64,
) -> segcache_status_t {
    // SAFETY: same contract as `store`.
    unsafe {
        store_plain(
            c,
            SEGCACHE_STORE_REPLACE,
            key,
            key_len,
            value,
            value_len,
            flags,
            ttl,
        )
    }
}

/// Like `segcache_set`, but only if the key's current version is `cas` (a
/// token from `segcache_get` or `segcache_get_with`): `SEGCACHE_EXISTS` if
/// the item changed since, `SEGCACHE_NOT_FOUND` if it is gone.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_cas(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: i64,
    cas: u64,
) -> segcache_status_t {
    let (mode, cas) = (SEGCACHE_STORE_SET, Some(cas));
    // SAFETY: same contract as `store`.
    unsafe {
        store(
            c,
            mode,
            key,
            key_len,
            value,
            value_len,
            flags,
            ttl,
            cas,
            null_mut(),
        )
    }
}

/// Appends `data` to the value of an existing key (its flags and TTL stay):
/// `SEGCACHE_NOT_STORED` if the key is absent.
///
/// # Safety
/// As for `segcache_set`, with `data`/`data_len` for the value.
#[no_mangle]
pub unsafe extern "C" fn segcache_append(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    data: *const u8,
    data_len: usize,
) -> segcache_status_t {
    // SAFETY: same contract as `store`.
    unsafe { store_plain(c, SEGCACHE_STORE_APPEND, key, key_len, data, data_len, 0, 0) }
}

/// Prepends `data` to the value of an existing key (its flags and TTL
/// stay): `SEGCACHE_NOT_STORED` if the key is absent.
///
/// # Safety
/// As for `segcache_append`.
#[no_mangle]
pub unsafe extern "C" fn segcache_prepend(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    data: *const u8,
    data_len: usize,
) -> segcache_status_t {
    // SAFETY: same contract as `store`.
    unsafe {
        store_plain(
            c,
            SEGCACHE_STORE_PREPEND,
            key,
            key_len,
            data,
            data_len,
            0,
            0,
        )
    }
}

/// The body shared by incr and decr.
///
/// # Safety
/// As for `segcache_incr`.
unsafe fn arith(
    up: bool,
    c: *const segcache_t,
    key_ptr: *const u8,
    key_len: usize,
    delta: u64,
    new_value: *mut u64,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key_ptr, key_len)?) };
        let n = if up {
            cache.incr(key, delta)
        } else {
            cache.decr(key, delta)
        }?;
        // SAFETY: `new_value` is NULL or writable by the caller's promise.
        unsafe { put(new_value, n) };
        Ok(())
    })
}

/// Adds `delta` to a value holding a decimal unsigned 64-bit number,
/// wrapping at 2^64, and stores the result in `*new_value` (optional).
/// `SEGCACHE_NOT_FOUND` if absent, `SEGCACHE_NOT_NUMERIC` if the value is
/// not such a number.
///
/// # Safety
/// `c` and `key` as for `segcache_set`; `new_value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_incr(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    delta: u64,
    new_value: *mut u64,
) -> segcache_status_t {
    // SAFETY: same contract as `arith`.
    unsafe { arith(true, c, key, key_len, delta, new_value) }
}

/// Subtracts `delta`, stopping at 0; otherwise as `segcache_incr`.
///
/// # Safety
/// As for `segcache_incr`.
#[no_mangle]
pub unsafe extern "C" fn segcache_decr(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    delta: u64,
    new_value: *mut u64,
) -> segcache_status_t {
    // SAFETY: same contract as `arith`.
    unsafe { arith(false, c, key, key_len, delta, new_value) }
}

/// Gives an existing item a new TTL (seconds, as for `segcache_set`; 0:
/// never expires). `SEGCACHE_NOT_FOUND` if absent.
///
/// # Safety
/// `c` and `key` as for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_touch(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: i64,
) -> segcache_status_t {
    let ttl_secs = ttl;
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        cache.touch(key, status::ttl(ttl_secs)?)?;
        Ok(())
    })
}

/// Removes a key: `SEGCACHE_OK` if it was present, else
/// `SEGCACHE_NOT_FOUND`.
///
/// # Safety
/// `c` and `key` as for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_delete(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        if cache.delete(key) {
            Ok(())
        } else {
            Err(SEGCACHE_NOT_FOUND)
        }
    })
}

/// `SEGCACHE_OK` if the key is present and not expired, else
/// `SEGCACHE_NOT_FOUND`. Counts neither a hit nor a miss.
///
/// # Safety
/// `c` and `key` as for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_contains(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        if cache.contains(key) {
            Ok(())
        } else {
            Err(SEGCACHE_NOT_FOUND)
        }
    })
}

/// Looks a key up and copies its value into `buf` (`buf_len` bytes; `buf`
/// may be NULL when `buf_len` is 0). On `SEGCACHE_OK` the value's length,
/// flags and CAS token are stored through `value_len`, `flags` and `cas`
/// (each optional). If the value is longer than `buf_len`, nothing is
/// copied, the status is `SEGCACHE_BUFFER_TOO_SMALL`, and the needed length
/// (and flags and token) are stored all the same: call again with a buffer
/// that large. `SEGCACHE_NOT_FOUND` if absent; the out values are then left
/// alone. No memory is allocated.
///
/// # Safety
/// `c` and `key` as for `segcache_set`; `buf` is NULL or writable for
/// `buf_len` bytes; `value_len`, `flags`, `cas` are each NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_get(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
    flags: *mut u32,
    cas: *mut u64,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        if buf.is_null() && buf_len > 0 {
            return Err(SEGCACHE_INVALID_ARGUMENT);
        }
        cache.read_with(key, |item| {
            let item = item.ok_or(SEGCACHE_NOT_FOUND)?;
            let value = item.value();
            // SAFETY: each out pointer is NULL or writable (caller's promise).
            unsafe {
                put(value_len, value.len());
                put(flags, item.flags());
                // Made only when asked for: a token handed out turns the
                // core's same-size overwrites in place off for the item's
                // segment (`Segcache::set`).
                if !cas.is_null() {
                    put(cas, item.cas());
                }
            }
            if value.len() > buf_len {
                return Err(SEGCACHE_BUFFER_TOO_SMALL);
            }
            if !value.is_empty() {
                // SAFETY: `value` is readable for its length while the shard
                // is locked (inside `get_with`); `buf` is non-NULL (checked
                // above, since buf_len >= value.len() > 0) and writable for
                // `buf_len >= value.len()` bytes; the cache's memory and the
                // caller's buffer do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), buf, value.len()) };
            }
            Ok(())
        })
    })
}

/// The callback of `segcache_get_with`: the value (`value_len` bytes at
/// `value`; not NUL-terminated, and possibly a non-NULL pointer with length
/// 0), its flags, its CAS token, and the caller's `user_data`. Handing out
/// the token means the cache appends later overwrites of the items in the
/// same segment instead of writing same-size ones in place
/// (`segcache_set`); use `segcache_get_value_with` (or `segcache_get`
/// without a `cas` pointer) where that matters.
pub type segcache_get_cb = Option<
    unsafe extern "C" fn(
        value: *const u8,
        value_len: usize,
        flags: u32,
        cas: u64,
        user_data: *mut c_void,
    ),
>;

/// Looks a key up and, if present, calls `callback` once with the value in
/// the cache's own memory: no copy. The value is valid only until the
/// callback returns; copy what you need to keep. The key's shard stays
/// locked during the call, so keep the callback short, and do NOT call any
/// segcache function on the same handle from inside it: it may deadlock
/// on the shard lock. The callback must not unwind (C++ exceptions) or
/// longjmp out. Returns `SEGCACHE_NOT_FOUND` (without calling) if the key
/// is absent, `SEGCACHE_INVALID_ARGUMENT` if `callback` is NULL.
///
/// # Safety
/// `c` and `key` as for `segcache_set`; `callback` is NULL or a function
/// with the `segcache_get_cb` signature, obeying the rules above.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_with(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    callback: segcache_get_cb,
    user_data: *mut c_void,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        let callback = callback.ok_or(SEGCACHE_INVALID_ARGUMENT)?;
        cache.read_with(key, |item| {
            let item = item.ok_or(SEGCACHE_NOT_FOUND)?;
            let value = item.value();
            // SAFETY: `value` stays valid and unchanged until the callback
            // returns (the shard is locked for the whole of `get_with`);
            // the callback's contract is the caller's promise.
            unsafe {
                callback(
                    value.as_ptr(),
                    value.len(),
                    item.flags(),
                    item.cas(),
                    user_data,
                )
            };
            Ok(())
        })
    })
}

/// The callback of `segcache_get_value_with`: the value (`value_len` bytes
/// at `value`; not NUL-terminated, and possibly a non-NULL pointer with
/// length 0), its flags and the caller's `user_data`.
pub type segcache_value_cb = Option<
    unsafe extern "C" fn(value: *const u8, value_len: usize, flags: u32, user_data: *mut c_void),
>;

/// `segcache_get_with` without the CAS token: `callback` gets the value
/// and its flags only, so no token is made and later same-size overwrites
/// of the items beside it stay in place (`segcache_set`). The zero-copy
/// read for callers who never `segcache_cas`; the same rules for the
/// callback as `segcache_get_with`'s. Returns `SEGCACHE_NOT_FOUND`
/// (without calling) if the key is absent, `SEGCACHE_INVALID_ARGUMENT` if
/// `callback` is NULL.
///
/// # Safety
/// `c` and `key` as for `segcache_set`; `callback` is NULL or a function
/// with the `segcache_value_cb` signature, obeying `segcache_get_with`'s
/// rules.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_value_with(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    callback: segcache_value_cb,
    user_data: *mut c_void,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        let callback = callback.ok_or(SEGCACHE_INVALID_ARGUMENT)?;
        cache
            .get_value_with(key, |value, flags| {
                // SAFETY: `value` stays valid and unchanged until the
                // callback returns (the shard is locked for the whole
                // call); the callback's contract is the caller's promise.
                unsafe { callback(value.as_ptr(), value.len(), flags, user_data) }
            })
            .ok_or(SEGCACHE_NOT_FOUND)
    })
}

/// Stores in `*ttl` (optional) the seconds left before the key expires
/// (rounded down), or `SEGCACHE_TTL_NEVER` (-1) if it never does.
/// `SEGCACHE_NOT_FOUND` if absent.
///
/// # Safety
/// `c` and `key` as for `segcache_set`; `ttl` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_ttl(
    c: *mut segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: *mut i64,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and `key`.
        let (cache, key) = unsafe { (cache(c)?, status::key(key, key_len)?) };
        let left = cache.ttl(key).ok_or(SEGCACHE_NOT_FOUND)?;
        let secs = left.duration().map_or(SEGCACHE_TTL_NEVER, |d| {
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
        });
        // SAFETY: `ttl` is NULL or writable by the caller's promise.
        unsafe { put(ttl, secs) };
        Ok(())
    })
}

/// Removes every item now (and cancels a pending `segcache_flush_after`).
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_flush(c: *mut segcache_t) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        unsafe { cache(c) }?.flush();
        Ok(())
    })
}

/// Removes every item stored before `delay` seconds from now, at that time
/// (memcache's `flush_all <delay>`); 0 flushes now. Delays beyond the
/// clock's range are clamped.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_flush_after(c: *mut segcache_t, delay: u64) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        unsafe { cache(c) }?.flush_after(std::time::Duration::from_secs(delay));
        Ok(())
    })
}

/// Frees every segment whose items have all expired, now, instead of
/// waiting for writes to reclaim them. Stores the numbers of items and
/// segments freed in `*items` and `*segments` (each optional).
///
/// # Safety
/// `c` is NULL or a live handle; `items`, `segments` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_expire(
    c: *mut segcache_t,
    items: *mut u64,
    segments: *mut u64,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        let freed = unsafe { cache(c) }?.expire();
        // SAFETY: NULL or writable by the caller's promise.
        unsafe {
            put(items, freed.items as u64);
            put(segments, freed.segments as u64);
        }
        Ok(())
    })
}

/// Drops every item; unlike `segcache_flush`, a pending delayed flush stays
/// scheduled. Counters other than items and bytes are kept.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_clear(c: *mut segcache_t) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        unsafe { cache(c) }?.clear();
        Ok(())
    })
}

/// Stores in `*len` (required) the number of items held, including expired
/// ones not yet reclaimed.
///
/// # Safety
/// `c` is NULL or a live handle; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_len(c: *mut segcache_t, len: *mut usize) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promises are those of `cache` and
        // `put_required`.
        unsafe { put_required(len, cache(c)?.len()) }
    })
}

/// Stores in `*max` (required) the largest value storable under a key of
/// `key_len` bytes with flags 0 (nonzero flags take 4 bytes more).
/// `SEGCACHE_KEY_TOO_LONG` if `key_len` is above `SEGCACHE_MAX_KEY_LEN`.
///
/// # Safety
/// `c` is NULL or a live handle; `max` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_max_value_len(
    c: *mut segcache_t,
    key_len: usize,
    max: *mut usize,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        let cache = unsafe { cache(c) }?;
        if key_len > SEGCACHE_MAX_KEY_LEN {
            return Err(SEGCACHE_KEY_TOO_LONG);
        }
        // SAFETY: `max` is NULL or writable by the caller's promise.
        unsafe { put_required(max, cache.max_value_len(key_len)) }
    })
}

/// A snapshot of the counters and memory use, summed over the shards.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct segcache_stats_t {
    /// Items held (some may be expired but not yet reclaimed).
    pub items: u64,
    /// Bytes those items occupy in segments.
    pub live_bytes: u64,
    pub segments_used: u64,
    pub segments_free: u64,
    /// Successful and failed lookups by the get functions.
    pub hits: u64,
    pub misses: u64,
    /// Items evicted to make room, and the segments they were in.
    pub evictions: u64,
    pub evicted_segments: u64,
    /// Items removed because their TTL passed, and their segments.
    pub expirations: u64,
    pub expired_segments: u64,
    /// Merge-eviction passes.
    pub merges: u64,
    /// Bytes of segment storage (the bounded heap).
    pub heap_bytes: u64,
    pub hash_table_bytes: u64,
    pub segment_header_bytes: u64,
    /// Eviction's admission state (ghost fingerprints of evicted keys).
    pub admission_bytes: u64,
    /// All the memory the cache allocated: the four above together.
    pub total_bytes: u64,
    /// Number of shards.
    pub shards: u64,
}

/// Fills `*stats` (required) with a snapshot of the counters.
///
/// # Safety
/// `c` is NULL or a live handle; `stats` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_stats(
    c: *mut segcache_t,
    stats: *mut segcache_stats_t,
) -> segcache_status_t {
    guard(|| {
        // SAFETY: the caller's promise is that of `cache`.
        let cache = unsafe { cache(c) }?;
        if stats.is_null() {
            return Err(SEGCACHE_INVALID_ARGUMENT);
        }
        let s = cache.stats();
        let out = segcache_stats_t {
            items: s.items,
            live_bytes: s.live_bytes,
            segments_used: s.segments_used,
            segments_free: s.segments_free,
            hits: s.hits,
            misses: s.misses,
            evictions: s.evictions,
            evicted_segments: s.evicted_segments,
            expirations: s.expirations,
            expired_segments: s.expired_segments,
            merges: s.merges,
            heap_bytes: s.heap_bytes,
            hash_table_bytes: s.hash_table_bytes,
            segment_header_bytes: s.segment_header_bytes,
            admission_bytes: s.admission_bytes,
            total_bytes: s.total_bytes,
            shards: cache.shards() as u64,
        };
        // SAFETY: non-NULL (checked) and writable by the caller's promise.
        unsafe { put_required(stats, out) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{segcache_config_default, segcache_free, segcache_new};

    fn with_cache(f: impl FnOnce(*mut segcache_t)) {
        let cfg = segcache_config_default();
        // SAFETY: a valid config; NULL err is allowed.
        let c = unsafe { segcache_new(&cfg, std::ptr::null_mut()) };
        assert!(!c.is_null());
        f(c);
        // SAFETY: `c` is live and freed once.
        unsafe { segcache_free(c) };
    }

    unsafe extern "C" fn collect(
        value: *const u8,
        len: usize,
        flags: u32,
        _cas: u64,
        user: *mut c_void,
    ) {
        // SAFETY: `user` is the `(Vec<u8>, u32)` passed below, and `value` is
        // readable for `len` bytes during the callback.
        unsafe {
            let out = &mut *user.cast::<(Vec<u8>, u32)>();
            out.0 = std::slice::from_raw_parts(value, len).to_vec();
            out.1 = flags;
        }
    }

    #[test]
    fn get_copies_or_reports_the_needed_length() {
        with_cache(|c| {
            let (k, v) = (b"key", b"0123456789");
            // SAFETY: all pointers are valid for their lengths.
            unsafe {
                assert_eq!(
                    segcache_set(c, k.as_ptr(), 3, v.as_ptr(), 10, 7, 0),
                    SEGCACHE_OK
                );
                let mut buf = [0u8; 4];
                let (mut len, mut flags, mut cas) = (0usize, 0u32, 0u64);
                assert_eq!(
                    segcache_get(
                        c,
                        k.as_ptr(),
                        3,
                        buf.as_mut_ptr(),
                        4,
                        &mut len,
                        &mut flags,
                        &mut cas
                    ),
                    SEGCACHE_BUFFER_TOO_SMALL
                );
                assert_eq!((len, flags, buf), (10, 7, [0; 4]));
                let mut big = [0u8; 10];
                assert_eq!(
                    segcache_get(
                        c,
                        k.as_ptr(),
                        3,
                        big.as_mut_ptr(),
                        10,
                        &mut len,
                        &mut flags,
                        &mut cas
                    ),
                    SEGCACHE_OK
                );
                assert_eq!(&big, v);
                let mut seen = (Vec::new(), 0u32);
                let user = (&mut seen as *mut (Vec<u8>, u32)).cast();
                assert_eq!(
                    segcache_get_with(c, k.as_ptr(), 3, Some(collect), user),
                    SEGCACHE_OK
                );
                assert_eq!((seen.0.as_slice(), seen.1), (&v[..], 7));
                assert_eq!(
                    segcache_get_with(c, b"nope".as_ptr(), 4, Some(collect), user),
                    SEGCACHE_NOT_FOUND
                );
                assert_eq!(
                    segcache_get_with(c, k.as_ptr(), 3, None, user),
                    SEGCACHE_INVALID_ARGUMENT
                );
            }
        });
    }

    #[test]
    fn every_c_store_mode_maps_to_its_core_mode() {
        let modes = [
            (SEGCACHE_STORE_SET, StoreMode::Set),
            (SEGCACHE_STORE_ADD, StoreMode::Add),
            (SEGCACHE_STORE_REPLACE, StoreMode::Replace),
            (SEGCACHE_STORE_APPEND, StoreMode::Append),
            (SEGCACHE_STORE_PREPEND, StoreMode::Prepend),
        ];
        for (c, core) in modes {
            assert_eq!(store_mode(c), Ok(core));
        }
        for bad in [5, 6, u32::MAX] {
            assert_eq!(store_mode(bad), Err(SEGCACHE_INVALID_ARGUMENT));
        }
    }

    #[test]
    fn segcache_store_runs_each_mode_with_an_optional_compare() {
        with_cache(|c| {
            let k = b"s";
            let mut token = 0u64;
            // SAFETY: all pointers are valid for their lengths.
            unsafe {
                let store = |mode, v: &[u8], cas: Option<&u64>, out: *mut u64| {
                    let cas = cas.map_or(std::ptr::null(), |t| t as *const u64);
                    segcache_store(c, mode, k.as_ptr(), 1, v.as_ptr(), v.len(), 3, 0, cas, out)
                };
                let null = std::ptr::null_mut();
                assert_eq!(
                    store(SEGCACHE_STORE_REPLACE, b"x", None, null),
                    SEGCACHE_NOT_STORED
                );
                assert_eq!(
                    store(SEGCACHE_STORE_APPEND, b"x", None, null),
                    SEGCACHE_NOT_STORED
                );
                assert_eq!(
                    store(SEGCACHE_STORE_ADD, b"b", None, &mut token),
                    SEGCACHE_OK
                );
                assert_eq!(
                    store(SEGCACHE_STORE_ADD, b"x", None, null),
                    SEGCACHE_NOT_STORED
                );
                assert_eq!(store(SEGCACHE_STORE_APPEND, b"c", None, null), SEGCACHE_OK);
                assert_eq!(store(SEGCACHE_STORE_PREPEND, b"a", None, null), SEGCACHE_OK);
                let mut buf = [0u8; 8];
                let (mut len, mut cas) = (0usize, 0u64);
                let get = |buf: &mut [u8; 8], len: &mut usize, cas: &mut u64| {
                    segcache_get(c, k.as_ptr(), 1, buf.as_mut_ptr(), 8, len, null_mut(), cas)
                };
                assert_eq!(get(&mut buf, &mut len, &mut cas), SEGCACHE_OK);
                assert_eq!(&buf[..len], b"abc");
                assert_ne!(cas, token, "append and prepend make a new version");
                // A stale token is refused and changes nothing; the current
                // one stores and hands back the new token.
                assert_eq!(
                    store(SEGCACHE_STORE_SET, b"z", Some(&token), null),
                    SEGCACHE_EXISTS
                );
                let mut fresh = 0u64;
                assert_eq!(
                    store(SEGCACHE_STORE_SET, b"d", Some(&cas), &mut fresh),
                    SEGCACHE_OK
                );
                let mut now = 0u64;
                assert_eq!(get(&mut buf, &mut len, &mut now), SEGCACHE_OK);
                assert_eq!((&buf[..len], now), (&b"d"[..], fresh));
                assert_eq!(store(7, b"x", None, null), SEGCACHE_INVALID_ARGUMENT);
                assert_eq!(get(&mut buf, &mut len, &mut now), SEGCACHE_OK);
                assert_eq!(&buf[..len], b"d");
            }
        });
    }

    #[test]
    fn stores_report_their_memcache_statuses() {
        with_cache(|c| {
            let k = b"n";
            // SAFETY: all pointers are valid for their lengths.
            unsafe {
                let set = |v: &[u8]| segcache_set(c, k.as_ptr(), 1, v.as_ptr(), v.len(), 0, 0);
                assert_eq!(set(b"5"), SEGCACHE_OK);
                assert_eq!(
                    segcache_add(c, k.as_ptr(), 1, b"6".as_ptr(), 1, 0, 0),
                    SEGCACHE_NOT_STORED
                );
                let mut n = 0;
                assert_eq!(segcache_incr(c, k.as_ptr(), 1, 10, &mut n), SEGCACHE_OK);
                assert_eq!(n, 15);
                assert_eq!(set(b"x"), SEGCACHE_OK);
                assert_eq!(
                    segcache_decr(c, k.as_ptr(), 1, 1, &mut n),
                    SEGCACHE_NOT_NUMERIC
                );
                assert_eq!(
                    segcache_touch(c, k.as_ptr(), 1, -5),
                    SEGCACHE_TTL_OUT_OF_RANGE
                );
                assert_eq!(segcache_delete(c, k.as_ptr(), 1), SEGCACHE_OK);
                assert_eq!(segcache_delete(c, k.as_ptr(), 1), SEGCACHE_NOT_FOUND);
                assert_eq!(
                    segcache_delete(std::ptr::null_mut(), k.as_ptr(), 1),
                    SEGCACHE_INVALID_ARGUMENT
                );
            }
        });
    }
}

//! The configuration struct and the handle's constructor and destructor.
//!
//! `segcache_config_t` mirrors the core crate's `Builder` settings plus a
//! shard count; zero means "choose for me" for `hash_power` and `shards`,
//! and a NULL `eviction` means "merge". Every bad value is
//! `SEGCACHE_INVALID_CONFIG` from `segcache_new`, never a crash, and
//! `segcache_last_error()` then names the field.

use crate::last_error;
use crate::segcache_t;
use crate::status::{catch, put, segcache_status_t};
use segcache_core::{
    default_shards, Error, Eviction, RestoreOutcome, Segcache, ShardedCache, MAX_HASH_POWER,
};
use std::ffi::{c_char, CStr};

use segcache_status_t::*;

/// Settings for `segcache_new`. Start from `segcache_config_default()` and
/// change the fields you care about, so that fields added in later versions
/// keep their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct segcache_config_t {
    /// Bytes of item storage, split evenly over the shards (default 64 MiB).
    /// Each shard needs at least 3 segments. It is allocated up front.
    pub heap_size: usize,
    /// Bytes per segment: a multiple of 8 from 1024 to 2 MiB. The largest
    /// item (header, key and value) must fit in one. 0 (the default) picks
    /// the core's default for the heap: 256 to 512 segments of 16 KiB to
    /// 1 MiB (more segments, more hits for the same memory), whatever the
    /// shard count.
    pub segment_size: usize,
    /// The hash table has 2^hash_power buckets of 7 items, over all shards
    /// (3 to 30); 0 (the default) sizes it for 1 KiB items filling the
    /// heap and grows it for smaller ones.
    pub hash_power: u32,
    /// Number of independently locked shards: a power of two up to 1024;
    /// 0 (the default) picks one from the number of CPUs, keeping at least
    /// 8 segments per shard of a `segment_size` given, or with the
    /// automatic size 256 per shard (one shard for heaps under 512 MiB:
    /// set it for more concurrency, at some cost in hits).
    pub shards: usize,
    /// Eviction policy name, NUL-terminated: "merge" (the default, also
    /// when NULL), "none", "random", "random_fifo", "fifo", "cte" or
    /// "util" (case-insensitive). The string is only read by
    /// `segcache_new`.
    pub eviction: *const c_char,
    /// NUL-terminated path of a file to keep the heap in (each shard `i`
    /// uses `<datapool>.shard<i>`), for warm restarts; NULL (the default)
    /// keeps it in anonymous memory. Only read by `segcache_new`.
    pub datapool: *const c_char,
    /// With a datapool: bring back the items of the last `segcache_save`
    /// if its files are whole and match these settings, else start empty
    /// (see `segcache_restore_outcome`). Default false.
    pub restore: bool,
    /// Make the whole heap resident in `segcache_new` (default false), as
    /// memcached's `-L` does: the first fill then pays no page faults, and
    /// memory the machine cannot give is `SEGCACHE_INVALID_CONFIG` naming
    /// `prefault` there rather than a slowdown later. With a datapool the
    /// file's pages are brought in, their contents kept.
    pub prefault: bool,
}

/// The default configuration: 64 MiB heap, automatic segment size, hash
/// table size and shard count, merge eviction.
#[no_mangle]
pub extern "C" fn segcache_config_default() -> segcache_config_t {
    segcache_config_t {
        heap_size: 64 << 20,
        segment_size: 0,
        hash_power: 0,
        shards: 0,
        eviction: std::ptr::null(),
        datapool: std::ptr::null(),
        restore: false,
        prefault: false,
    }
}

/// Smallest `hash_power` (the core crate's, which it does not export).
const MIN_HASH_POWER: u8 = 3;

/// The shard count chosen for `shards == 0`: four per CPU rounded up to a
/// power of two (at most 64), fewer while a shard would get too few
/// segments ([`default_shards`]).
fn auto_shards(heap_size: usize, segment_size: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let given = (segment_size != 0).then_some(segment_size);
    default_shards(heap_size, given, (cpus * 4).next_power_of_two().min(64))
}

/// A configuration error naming the C field.
fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

/// A NUL-terminated UTF-8 setting, or an error naming `field`.
///
/// # Safety
/// `ptr` is non-NULL and NUL-terminated.
unsafe fn utf8<'a>(field: &'static str, ptr: *const c_char) -> Result<&'a str, Error> {
    // SAFETY: non-NULL and NUL-terminated by the caller's promise.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map_err(|_| invalid(field, "not UTF-8"))
}

/// Builds the cache a configuration describes. Every error is
/// `Error::InvalidConfig` naming the C field, or the core's own error
/// (which names the same fields: the struct mirrors the builder).
///
/// # Safety
/// `cfg.eviction` and `cfg.datapool` are NULL or NUL-terminated strings.
unsafe fn build(cfg: &segcache_config_t) -> Result<ShardedCache, Error> {
    let mut builder = Segcache::builder()
        .heap_size(cfg.heap_size)
        .prefault(cfg.prefault);
    if cfg.segment_size != 0 {
        builder = builder.segment_size(cfg.segment_size);
    }
    if cfg.hash_power != 0 {
        // Checked here: `build_sharded` clamps a too-small power per shard
        // and subtracts the shard bits from a too-large one, so it would
        // accept values outside the documented range.
        let power = u8::try_from(cfg.hash_power)
            .ok()
            .filter(|p| (MIN_HASH_POWER..=MAX_HASH_POWER).contains(p))
            .ok_or_else(|| {
                invalid(
                    "hash_power",
                    format!(
                        "{} is outside {MIN_HASH_POWER}..={MAX_HASH_POWER} (0 picks one)",
                        cfg.hash_power
                    ),
                )
            })?;
        builder = builder.hash_power(power);
    }
    if !cfg.eviction.is_null() {
        // SAFETY: non-NULL, and NUL-terminated by the caller's promise.
        let name = unsafe { utf8("eviction", cfg.eviction) }?;
        builder = builder.eviction(name.parse::<Eviction>()?);
    }
    if !cfg.datapool.is_null() {
        // SAFETY: non-NULL, and NUL-terminated by the caller's promise.
        let path = unsafe { utf8("datapool", cfg.datapool) }?;
        builder = builder.datapool(path).restore(cfg.restore);
    } else if cfg.restore {
        return Err(invalid("restore", "needs a datapool to restore from"));
    }
    let shards = match cfg.shards {
        0 => auto_shards(cfg.heap_size, cfg.segment_size),
        n => n,
    };
    builder.build_sharded(shards)
}

/// Creates a cache. Returns NULL when `cfg` is NULL
/// (`SEGCACHE_INVALID_ARGUMENT`) or a setting is out of range
/// (`SEGCACHE_INVALID_CONFIG`; `segcache_last_error()` then names the
/// field and says why); the status is stored in `*err` when `err` is not
/// NULL (`SEGCACHE_OK` on success). Release the handle with
/// `segcache_free`.
///
/// # Safety
/// `cfg` is NULL or points to a `segcache_config_t` whose `eviction` and
/// `datapool` are NULL or NUL-terminated strings; `err` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_new(
    cfg: *const segcache_config_t,
    err: *mut segcache_status_t,
) -> *mut segcache_t {
    let result = catch(|| {
        // SAFETY: `cfg` is NULL (handled by `as_ref`) or a valid config.
        let Some(cfg) = (unsafe { cfg.as_ref() }) else {
            last_error::set("segcache_new: cfg is NULL");
            return Err(SEGCACHE_INVALID_ARGUMENT);
        };
        // SAFETY: the caller promises the strings are NULL or C strings.
        match unsafe { build(cfg) } {
            Ok(inner) => Ok(Box::into_raw(Box::new(segcache_t { inner }))),
            Err(e) => {
                last_error::set(&e);
                Err(e.into())
            }
        }
    });
    let (handle, status) = match result {
        Ok(handle) => (handle, SEGCACHE_OK),
        Err(status) => {
            if status == SEGCACHE_PANIC {
                last_error::set("segcache_new: internal panic");
            }
            (std::ptr::null_mut(), status)
        }
    };
    // SAFETY: `err` is NULL or writable by the caller's promise.
    unsafe { put(err, status) };
    handle
}

/// Releases a cache and all its memory. NULL is ignored. The handle must
/// not be used afterwards, and no other thread may be using it.
///
/// # Safety
/// `c` is NULL or a handle from `segcache_new` not yet freed, which no
/// other thread is using.
#[no_mangle]
pub unsafe extern "C" fn segcache_free(c: *mut segcache_t) {
    if c.is_null() {
        return;
    }
    let _ = catch(|| {
        // SAFETY: a live handle came from `Box::into_raw` in `segcache_new`
        // and, by the caller's promise, is freed once and used by no one.
        drop(unsafe { Box::from_raw(c) });
        Ok(())
    });
}

/// Saves a cache for a warm restart and releases it: flushes each shard's
/// datapool file and writes its metadata beside it. The handle is consumed
/// (freed) whether or not the save succeeds; no other thread may be using
/// it. `SEGCACHE_INVALID_ARGUMENT` for NULL, `SEGCACHE_PERSISTENCE` when
/// the cache has no datapool or a file cannot be written.
///
/// # Safety
/// `c` is NULL or a handle from `segcache_new` not yet freed, which no
/// other thread is using.
#[no_mangle]
pub unsafe extern "C" fn segcache_save(c: *mut segcache_t) -> segcache_status_t {
    if c.is_null() {
        return SEGCACHE_INVALID_ARGUMENT;
    }
    let result = catch(|| {
        // SAFETY: a live handle came from `Box::into_raw` in `segcache_new`
        // and, by the caller's promise, is consumed once and used by no one.
        let handle = unsafe { Box::from_raw(c) };
        handle.inner.save().map_err(|e| {
            last_error::set(&e);
            segcache_status_t::from(e)
        })
    });
    match result {
        Ok(()) => SEGCACHE_OK,
        Err(status) => status,
    }
}

/// What `segcache_new` found in the datapool: `*outcome` is 0 when no
/// restore was asked for, 1 when every shard was restored, 2 when the cache
/// started empty (no metadata, a crash, changed settings or a checksum
/// mismatch); `*items` is the number of items restored. Either pointer may
/// be NULL.
///
/// # Safety
/// `c` is NULL or a live handle; `outcome` and `items` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_restore_outcome(
    c: *const segcache_t,
    outcome: *mut i32,
    items: *mut u64,
) -> segcache_status_t {
    let result = catch(|| {
        // SAFETY: `c` is NULL (handled by `as_ref`) or a live handle.
        let c = unsafe { c.as_ref() }.ok_or(SEGCACHE_INVALID_ARGUMENT)?;
        let outcomes = c.inner.restore_outcomes();
        let mut restored = 0u64;
        let mut kind = 1;
        for o in &outcomes {
            match o {
                RestoreOutcome::NotRequested => kind = 0,
                RestoreOutcome::Restored { items } => restored += items,
                RestoreOutcome::Fresh { .. } => kind = kind.max(2),
            }
        }
        if kind == 0 {
            restored = 0;
        }
        // SAFETY: NULL or writable by the caller's promise.
        unsafe {
            put(outcome, kind);
            put(items, restored);
        }
        Ok(())
    });
    match result {
        Ok(()) => SEGCACHE_OK,
        Err(status) => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segcache_last_error;

    #[test]
    fn automatic_shards_keep_enough_segments_each() {
        // Automatic segment size: 256 segments per shard, whatever the
        // machine (four shards or more to start from: one per CPU x 4);
        // a size given keeps 8 segments per shard.
        assert_eq!(auto_shards(1 << 20, 0), 1);
        assert_eq!(auto_shards(64 << 20, 0), 1);
        assert_eq!(auto_shards(1 << 30, 0), 4);
        assert_eq!(auto_shards(16 << 20, 1 << 20), 2);
    }

    fn new(cfg: &segcache_config_t) -> Result<*mut segcache_t, segcache_status_t> {
        let mut err = SEGCACHE_PANIC;
        // SAFETY: `cfg` is a valid config and `err` a local.
        let c = unsafe { segcache_new(cfg, &mut err) };
        if c.is_null() {
            Err(err)
        } else {
            assert_eq!(err, SEGCACHE_OK);
            Ok(c)
        }
    }

    #[test]
    fn defaults_build_and_bad_values_are_config_errors() {
        let c = new(&segcache_config_default()).unwrap();
        // SAFETY: `c` is a live handle, freed once.
        unsafe { segcache_free(c) };
        let d = segcache_config_default;
        let bad = [
            (
                "heap_size",
                segcache_config_t {
                    heap_size: 0,
                    ..d()
                },
            ),
            (
                "segment_size",
                segcache_config_t {
                    segment_size: 1000,
                    ..d()
                },
            ),
            (
                "hash_power",
                segcache_config_t {
                    hash_power: 2,
                    shards: 1,
                    ..d()
                },
            ),
            (
                "hash_power",
                segcache_config_t {
                    hash_power: 31,
                    shards: 8,
                    ..d()
                },
            ),
            (
                "hash_power",
                segcache_config_t {
                    hash_power: 256 + 16,
                    ..d()
                },
            ),
            ("shards", segcache_config_t { shards: 3, ..d() }),
            (
                "eviction",
                segcache_config_t {
                    eviction: c"lru".as_ptr(),
                    ..d()
                },
            ),
            (
                "eviction",
                segcache_config_t {
                    eviction: c"\xff".as_ptr(),
                    ..d()
                },
            ),
            (
                "restore",
                segcache_config_t {
                    restore: true,
                    ..d()
                },
            ),
        ];
        for (field, cfg) in &bad {
            assert_eq!(new(cfg), Err(SEGCACHE_INVALID_CONFIG), "{cfg:?}");
            // SAFETY: a NUL-terminated string owned by this thread.
            let msg = unsafe { CStr::from_ptr(segcache_last_error()) };
            let msg = msg.to_str().unwrap();
            assert!(
                msg.starts_with(&format!("invalid {field}: ")),
                "{field}: {msg}"
            );
        }
        // SAFETY: NULL config and NULL err are both allowed.
        assert!(unsafe { segcache_new(std::ptr::null(), std::ptr::null_mut()) }.is_null());
    }

    #[test]
    fn auto_shards_keep_eight_segments_per_shard() {
        assert_eq!(auto_shards(8 << 20, 1 << 20), 1);
        assert_eq!(auto_shards(3 << 20, 1 << 20), 1);
        let n = auto_shards(1 << 30, 1 << 20);
        assert!(n.is_power_of_two() && (4..=64).contains(&n), "{n}");
        assert_eq!(auto_shards(0, 0), 1);
    }
}

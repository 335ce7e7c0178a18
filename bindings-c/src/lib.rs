//! C bindings for `segcache`: `libsegcache.so`, `libsegcache.a` and the
//! cbindgen-generated `include/segcache.h`.
//!
//! The handle `segcache_t` wraps a [`segcache_core::ShardedCache`], so one
//! handle may be shared by any number of threads. Every entry point:
//! - returns a [`segcache_status_t`] (except the constructor, destructor,
//!   `segcache_config_default` and `segcache_strerror`);
//! - checks its pointers and lengths first, so a NULL handle, a NULL key or
//!   value with a nonzero length, or an out-of-range length is an error
//!   status, never a crash;
//! - runs inside `std::panic::catch_unwind`, so a Rust panic becomes
//!   `SEGCACHE_PANIC` instead of unwinding into C.
//!
//! Layout: `status` (the status codes, error mapping, panic guard and
//! argument checks), `config` (the configuration struct, constructor and
//! destructor), `last_error` (the per-thread message naming what was
//! wrong), `ops` (the cache operations). The header is regenerated with
//! `SEGCACHE_BLESS=1 cargo test -p segcache-c --test header`; that test
//! fails when the checked-in copy is stale.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

mod config;
mod last_error;
mod ops;
mod status;

pub use config::{
    segcache_config_default, segcache_config_t, segcache_free, segcache_new,
    segcache_restore_outcome, segcache_save,
};
pub use last_error::segcache_last_error;
pub use ops::*;
pub use status::{segcache_status_t, segcache_strerror};

/// The longest key accepted, in bytes.
pub const SEGCACHE_MAX_KEY_LEN: usize = 250;

/// The longest TTL accepted, in seconds (about 97 days).
pub const SEGCACHE_MAX_TTL: i64 = 8_388_607;

/// What `segcache_ttl` reports for an item that never expires.
pub const SEGCACHE_TTL_NEVER: i64 = -1;

/// The opaque cache handle: create with `segcache_new`, release with
/// `segcache_free`. Safe to share between threads.
pub struct segcache_t {
    pub(crate) inner: segcache_core::ShardedCache,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_constants_match_the_core_crate() {
        assert_eq!(SEGCACHE_MAX_KEY_LEN, segcache_core::MAX_KEY_LEN);
        assert_eq!(SEGCACHE_MAX_TTL, i64::from(segcache_core::MAX_TTL));
    }
}

//! Segcache: a segment-structured in-memory cache for small objects.
//!
//! This crate implements the design of Twitter's Pelikan Segcache (Yang,
//! Yue and Rashmi, NSDI'21): items are appended to fixed-size
//! **segments**; segments are grouped by TTL so **expired items are freed a
//! whole segment at a time**, with no scanning; and when the heap is full,
//! **merge eviction** compacts a few segments of one TTL group into one,
//! keeping the items that were read.
//!
//! ```
//! use std::time::Duration;
//! use segcache::{Segcache, Ttl};
//!
//! let mut cache = Segcache::builder().heap_size(64 << 20).build()?;
//! cache.set("user:42", r#"{"name":"Ada"}"#, 0, Duration::from_secs(300))?;
//! if let Some(item) = cache.get("user:42") {
//!     assert_eq!(item.value(), br#"{"name":"Ada"}"#);
//!     assert!(matches!(item.ttl(), Ttl::After(left) if left <= Duration::from_secs(300)));
//! }
//! let item = cache.get_or_insert_with("user:7", None, || "computed on a miss")?;
//! assert_eq!(item.value(), b"computed on a miss");
//! assert!(cache.delete("user:42"));
//! # Ok::<(), segcache::Error>(())
//! ```
//!
//! Keys and values are anything that is `AsRef<[u8]>` (`&str`, `String`,
//! `&[u8]`, `Vec<u8>`, byte arrays); the cache stores bytes and hands back
//! bytes. TTLs are a [`Ttl`] or anything that converts to one (`Duration`,
//! `Option<Duration>`; `None` and zero mean "never").
//!
//! # Three ways to share a cache
//!
//! | you want | use | reads return |
//! | --- | --- | --- |
//! | one thread, no locks | [`Segcache`] (`&mut self`) | [`Item`], borrowed: no copy |
//! | many threads, no extra thread | [`ShardedCache`] from [`Builder::build_sharded`] (`&self`, one lock per shard) | [`OwnedItem`], or a borrowed [`Item`] inside [`ShardedCache::read_with`] |
//! | one owner at a time running every request in order, as Pelikan's workers send theirs to its storage thread | [`storage`]: [`Builder::spawn_storage`] gives a blocking [`StorageHandle`] and pipelining [`storage::Client`]s; a client that finds the storage thread asleep runs its requests itself (combining), a single request right where it is made | [`OwnedItem`], or the value lent to [`StorageHandle::get_value_with`] |
//!
//! All three speak one vocabulary: a [`Request`] (a [`Store`] with a
//! [`StoreMode`], a read with [`ops::GetOpts`], ...) runs as one atomic
//! step through [`Segcache::execute`], [`ShardedCache::execute`] or the
//! storage thread, and the typed methods (`set`, `add`, `cas`, `incr`,
//! `touch`...) are shorthands for it. Memcache semantics throughout.
//!
//! ```
//! use segcache::{Segcache, StorageConfig};
//! use std::sync::Arc;
//!
//! // Many threads, one lock per shard.
//! let shared = Arc::new(Segcache::builder().heap_size(32 << 20).build_sharded(4)?);
//! let worker = { let c = Arc::clone(&shared); std::thread::spawn(move || c.set("k", "v", 0, None)) };
//! worker.join().unwrap()?;
//! assert_eq!(shared.get("k").unwrap().value(), b"v");
//!
//! // A storage thread that owns the cache.
//! let (handle, thread) = Segcache::builder().spawn_storage(StorageConfig::default())?;
//! handle.set("k", "v", 0, None)?;
//! assert_eq!(handle.get("k")?.unwrap().value(), b"v");
//! handle.shutdown();
//! thread.join().unwrap();
//! # Ok::<(), segcache::Error>(())
//! ```
//!
//! # Memory
//! `heap_size` bounds the item bytes exactly. Each item costs, in its
//! segment, a header + key + value (the header is 3 bytes for a value
//! under 256 bytes, 5 for a longer one; + 4 bytes if its client flags
//! are nonzero, + 8 if a touch had to move it and keep its CAS token), and
//! one 8-byte hash-table slot; the table is buckets of 64 bytes (7 slots
//! each), sized at build for 1 KiB items filling the heap and grown
//! incrementally while the heap has room for more items than it holds.
//! Merge eviction's admission ghosts (fingerprints of recently evicted
//! keys, one per four items held) add about 0.55 bytes per item, and its
//! merge scratch (8 bytes for each live item one merge reads at once,
//! reserved at build: 1/512 of the heap, at least half a segment, at most
//! 1.5 segments) about 0.2 bytes per ~100-byte item in a heap of 256
//! segments or more. At a full heap that is about
//! `header + key + value + 64 / (7 × load) + 0.55` bytes per item plus
//! the scratch's share, with the table ~87 % loaded: ~14.1 bytes of
//! overhead per item under 256-byte values, plus the scratch and under 1
//! byte of heap not yet reclaimed (measured with 256 KiB segments, 32-byte
//! keys and 64-byte values: 14.2 B per item at a 1 GiB heap, 14.8 B at
//! 64 MiB). Segment headers
//! add 44 bytes per segment. [`Segcache::stats`] reports every byte
//! allocated.
//!
//! The heap is reserved at build and becomes resident as writes first
//! reach it, in 2 MiB huge pages where the kernel allows (fewer TLB
//! misses on reads); the first write into each waits while the kernel
//! zeroes it (up to milliseconds on a VM). [`Builder::prefault`] makes
//! the whole heap resident at build instead, and
//! [`Builder::populate_ahead`] has a background thread keep it resident
//! 8 MiB ahead of the writes (the server turns it on).
//!
//! [`External`] values (a handle to memory the owner keeps, with its
//! weight; [`Segcache::set_external`]) are not copied: the item holds the
//! 12-byte handle, and the heap gives up whole segments (their pages
//! returned to the kernel) so that segments in use plus every external
//! weight stay within `heap_size`. The Python package keeps its values of
//! 1 KiB and more this way.
//!
//! # Guarantees
//! - Item data never exceeds `heap_size` (nor does item data plus the
//!   weight of [`External`] values, to within one segment).
//! - An item is never served after its deadline, and never expires more
//!   than `max(1 s, TTL / 16)` before it, both on the cache's clock (see
//!   [`Ttl`]: the system clock is the kernel's coarse one). No TTL means it
//!   never expires (it can still be evicted).
//! - A failed operation changes nothing: a rejected write or a failed
//!   condition (`add` on a present key, a stale CAS) leaves the old value
//!   readable.
//! - CAS tokens are per item version: two keys never conflict, and a touch
//!   keeps the token.
//!
//! # Compared with quick_cache and moka
//! - **Segcache** has TTLs as a first-class, per-item feature that costs
//!   nothing to expire (whole segments), memcache semantics (flags, CAS,
//!   add/replace/append, incr/decr, stale-while-revalidate win tokens),
//!   a heap bounded in bytes with 14-15 B of overhead per small item, a storage-
//!   thread mode and a warm restart from a file-backed heap. It stores
//!   bytes, not Rust values.
//! - **quick_cache** stores any `K: Hash + Eq`, `V: Clone` with a weigher,
//!   uses CLOCK-Pro-style admission, and has no per-item TTL; per-item
//!   overhead is several times ours for small items.
//! - **moka** stores any Rust types, has TinyLFU admission, per-item TTL
//!   and TTI with expiry listeners, an async cache and eviction
//!   notifications, at the highest per-item overhead of the three.
//!
//! # Layout
//! One module per concept: `item` (the 3- or 5-byte header layout), `hashtable`,
//! `segments` (heap and segment headers), `ttl` (TTL buckets and their
//! precision rule), `windows` (the deadline windows a merged segment keeps
//! so each item expires on its own), `eviction` (merge eviction and the
//! simple policies), `admission` (merge eviction's small and main pools)
//! and `ghost` (keys recently evicted, or expired after proving
//! themselves), `external` (values kept outside the heap, their release
//! and their share of it), `cache` (the operations), [`ops`] (the operation
//! vocabulary), `sharded`, [`storage`] (the storage thread), `batch`
//! ([`Batch`]: the storage thread's request arena), `flight` (single-flight
//! for `get_or_insert_with`), `builder`, `clock`, `persist` (warm restart),
//! `memory` (the heap's mapping) and `warm` (making it resident ahead of
//! the writes).

#![warn(missing_docs)]

mod admission;
mod batch;
mod builder;
mod cache;
mod clock;
mod error;
mod eviction;
mod external;
mod flight;
mod ghost;
mod hashtable;
mod item;
mod memory;
pub mod ops;
mod persist;
mod segments;
mod sharded;
pub mod storage;
mod ttl;
mod warm;
mod windows;

#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod model;
#[cfg(test)]
mod model_tests;

/// The README's Rust example, compiled and run as a doctest.
#[cfg(doctest)]
// The path comes from the manifest's `readme` key: `../README.md` in the
// workspace, `README.md` in the packaged crate (cargo copies it there).
#[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", env!("CARGO_PKG_README")))]
pub struct ReadmeDoctests;

pub use batch::Batch;
pub use builder::{
    default_segment_size, default_shards, Builder, Eviction, DEFAULT_SEGMENTS, MAX_HASH_POWER,
    MIN_HASH_POWER, MIN_SEGMENTS, MIN_SEGMENT_SIZE,
};
pub use cache::{Expired, Item, OwnedItem, RestoreOutcome, Segcache, Stats};
pub use clock::ManualClock;
pub use error::Error;
pub use external::{External, ReleaseFn};
pub use item::{max_value_len, MAX_KEY_LEN};
pub use ops::{Request, Response, Store, StoreMode, Ttl};
pub use sharded::{ShardedCache, Unlocked};
pub use storage::{StorageConfig, StorageCounters, StorageHandle};
pub use ttl::MAX_TTL;

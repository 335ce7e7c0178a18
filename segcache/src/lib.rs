//! Segcache: a segment-structured in-memory cache for small objects.
//!
//! This crate implements the design of Twitter's Pelikan Segcache (Yang,
//! Yue and Rashmi, NSDI'21): items live in fixed-size, append-only
//! **segments**; segments are grouped by TTL so **expired items are freed a
//! whole segment at a time**, with no scanning; and when the heap is full,
//! **merge eviction** compacts a few segments of one TTL group into one,
//! keeping the items that were read. Per-item metadata is a 5-byte header
//! plus an 8-byte hash-table slot; items are packed without padding.
//!
//! ```
//! use std::time::Duration;
//! use segcache::Segcache;
//!
//! let mut cache = Segcache::builder().heap_size(64 << 20).build()?;
//! cache.set(b"user:42", b"{\"name\":\"Ada\"}", 0, Some(Duration::from_secs(300)))?;
//! if let Some(item) = cache.get(b"user:42") {
//!     assert_eq!(item.value(), b"{\"name\":\"Ada\"}");
//!     assert!(item.ttl().unwrap() <= Duration::from_secs(300));
//! }
//! assert!(cache.delete(b"user:42"));
//! # Ok::<(), segcache::Error>(())
//! ```
//!
//! # Guarantees
//! - Item data never exceeds `heap_size`; the hash table and segment
//!   headers are sized once at build and reported by [`Segcache::stats`].
//! - An item expires at its deadline or a little before (its segment's
//!   earliest deadline), never after, and [`Segcache::get`] never returns
//!   an expired item. No TTL means it never expires.
//! - A failed operation changes nothing: a rejected write leaves the old
//!   value readable.
//! - CAS tokens are per item version: two keys never conflict.
//!
//! # Layout
//! One module per concept: `item` (the 5-byte header layout), `hashtable`,
//! `segments` (heap and segment headers), `ttl` (TTL buckets), `eviction`,
//! `cache` (the operations), `builder` (configuration), `clock`.

mod admission;
mod builder;
mod cache;
mod clock;
mod error;
mod eviction;
mod ghost;
mod hashtable;
mod item;
mod memory;
mod persist;
mod segments;
mod sharded;
mod storage;
mod ttl;

#[cfg(test)]
mod model_tests;

/// The README's Rust example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub use builder::{
    Builder, Eviction, MAX_HASH_POWER, MIN_HASH_POWER, MIN_SEGMENTS, MIN_SEGMENT_SIZE,
};
pub use cache::{Expired, Item, OwnedItem, RestoreOutcome, Segcache, Stats};
pub use clock::ManualClock;
pub use error::Error;
pub use item::MAX_KEY_LEN;
pub use sharded::ShardedCache;
pub use storage::{
    Client, Request, Response, StorageConfig, StorageHandle, StorageThread, TrySubmitError,
};
pub use ttl::MAX_TTL;

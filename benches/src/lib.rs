//! Evaluation suite for `segcache`: workloads (the CloudPhysics trace,
//! synthetic block traces and synthetic Twitter cluster streams), a
//! miss-ratio simulator with adapters for segcache and peer caches, a
//! counting allocator for equal-memory comparisons, single-thread
//! throughput adapters, the full-heap bytes per item measurement, the
//! `demo` run and a look-aside client that replays a cluster's stream to
//! a running memcache server (`wire`). The CLI lives in `main.rs`; the
//! criterion benches in `benches/`.

pub mod alloc;
pub mod blocks;
pub mod concurrent;
pub mod demo;
pub mod fullheap;
pub mod sim;
pub mod throughput;
pub mod trace;
pub mod twitter;
pub mod wire;

// Unit tests get the counting allocator too, so calibration is exercised.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: alloc::CountingAlloc = alloc::CountingAlloc;

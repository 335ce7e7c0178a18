//! Evaluation suite for `segcache`: workloads (the CloudPhysics trace and
//! synthetic Twitter cluster streams), a miss-ratio simulator with adapters
//! for segcache and peer caches, and a counting allocator for equal-memory
//! comparisons. The CLI lives in `main.rs`.

pub mod alloc;
pub mod sim;
pub mod trace;
pub mod twitter;

// Unit tests get the counting allocator too, so calibration is exercised.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: alloc::CountingAlloc = alloc::CountingAlloc;

//! The core against its model (`segcache/src/model.rs`): operations read
//! from the fuzzer's bytes, applied to a `Segcache` on a manual clock and
//! to a `HashMap` with deadlines; any disagreement, broken invariant or
//! panic is a crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segcache::model::fuzz(data));

//! The server's executor on arbitrary client bytes
//! (`examples/server/src/executor/fuzz.rs`): parse, dispatch and render
//! as a worker does, over a small inline or sharded cache; a panic, a
//! storage response left unrendered or a reply cut short is a crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segcache_server::executor::fuzz::fuzz(data));

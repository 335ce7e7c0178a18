//! The executor on arbitrary client bytes, for the fuzz target
//! `fuzz/fuzz_targets/executor.rs` (compiled only for it, `cfg(fuzzing)`,
//! and for this file's tests, which replay what the fuzzer found and
//! seeded random inputs on the stable toolchain).
//!
//! Owns nothing the server uses: it plays one worker with one connection,
//! without sockets or the budget. The bytes are parsed, dispatched and
//! rendered as the worker's loop does (`crate::worker`), in batches of a
//! size the first byte picks, over an inline cache or a sharded one,
//! small enough to evict, in the text or the binary protocol. What must
//! hold: no panic, every storage response is consumed by exactly the
//! action that asked for it, and the text replies end in `\r\n`.

use super::render::render;
use super::{Batch, Pipe, Settings, Then};
use crate::backend::{Backend, OwnedCache, StatsPort};
use crate::metrics::{Metrics, WorkerStats};
use crate::protocol::binary::parse_binary;
use crate::protocol::{parse, ParseError};
use segcache::{Request, Response, Segcache};
use std::sync::Arc;
use std::time::Instant;

/// Runs `data` through the executor; panics when a rule above breaks.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let [shape, input @ ..] = data else { return };
    let segment_size = 4 << 10;
    let heap = if shape & 1 == 0 { 64 << 10 } else { 1 << 20 };
    let builder = Segcache::builder()
        .heap_size(heap)
        .segment_size(segment_size);
    let walk = |r: Response| match r {
        Response::Walked(w) => w.segments,
        _ => 0,
    };
    let past_the_last = Request::<&[u8]>::Walk { segment: u32::MAX };
    let (mut backend, walk_segments) = if shape & 2 == 0 {
        let mut cache = builder.build().expect("a valid cache");
        let segments = walk(cache.execute(&past_the_last));
        let poll = mio::Poll::new().expect("a poll");
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).expect("a waker");
        let port = Arc::new(StatsPort::new(Arc::new(waker)));
        (Backend::inline(OwnedCache::new(cache), port), segments)
    } else {
        let cache = builder.build_sharded(2).expect("a valid cache");
        let segments = walk(cache.execute(&past_the_last));
        (Backend::shared(Arc::new(cache), true), segments)
    };
    let settings = Settings {
        heap_size: heap,
        max_connections: 16,
        port: 0,
        workers: 1,
        // Small enough that the fuzzer's values reach it.
        max_value: if shape & 4 == 0 { 1 << 20 } else { 300 },
        segment_size,
        walk_segments,
        flush_enabled: shape & 8 == 0,
        shutdown_enabled: true,
        unix_socket: None,
        tls: None,
    };
    let batch_max = if shape & 16 == 0 { 1 } else { 64 };
    // The binary protocol: the bytes are packets (the worker picks it by
    // the first byte; here the shape does, so both see every input).
    let binary = shape & 32 != 0;
    let limit = settings.value_limit();
    let metrics = Metrics::new(1, 16, heap, settings.max_value);
    let stats = WorkerStats::default();
    let mut batch = Batch::default();
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(avail) = input.get(pos..).filter(|a| !a.is_empty()) {
        let mut pipe = Pipe {
            backend: &mut backend,
            batch: &mut batch,
            stats: &stats,
            now_unix: 1_800_000_000,
            read_at: Instant::now(),
            settings: &settings,
        };
        if binary {
            match parse_binary(avail, limit) {
                Ok((req, used)) => {
                    pos += used;
                    if pipe.dispatch_binary(0, &req) != Then::Continue {
                        break;
                    }
                }
                Err(e) => match pipe.binary_refused(0, &e, avail) {
                    Some((swallow, false)) => pos += swallow,
                    _ => break,
                },
            }
        } else {
            match parse(avail, limit) {
                Ok((cmd, used)) => {
                    pos += used;
                    if pipe.dispatch(0, cmd) != Then::Continue {
                        break;
                    }
                }
                Err(ParseError::Incomplete) => break,
                Err(e) => {
                    pipe.parse_error(0, &e, avail);
                    match e.consumed() {
                        Some(used) if !e.closes_connection() => pos += used,
                        _ => break,
                    }
                }
            }
        }
        if batch.submitted >= batch_max {
            collect(&mut backend, &mut batch, &mut out, &stats, &metrics);
        }
    }
    collect(&mut backend, &mut batch, &mut out, &stats, &metrics);
    assert!(
        binary || out.is_empty() || out.ends_with(b"\r\n"),
        "a reply cut short: {:?} after {:?}",
        String::from_utf8_lossy(&out[out.len().saturating_sub(200)..]),
        String::from_utf8_lossy(input)
    );
}

/// Answers the batch as the worker's `collect` does, into `out`.
fn collect(
    backend: &mut Backend,
    batch: &mut Batch,
    out: &mut Vec<u8>,
    stats: &WorkerStats,
    metrics: &Metrics,
) {
    if backend.start() {
        backend.wait();
    }
    let mut replies = backend.replies().iter();
    for action in batch.actions.drain(..) {
        render(action.kind, &batch.arena, &mut replies, out, stats, metrics);
    }
    assert!(
        replies.next().is_none(),
        "a storage response nobody rendered"
    );
    backend.clear();
    batch.arena.clear();
    batch.submitted = 0;
    batch.requests = 0;
}

#[cfg(test)]
mod tests {
    use super::fuzz;

    /// Found by the fuzzer: a key dump dispatched without the worker's
    /// budget (which slices it) walked segments up to `u32::MAX`; the
    /// executor now walks only segments that exist. Every shape.
    #[test]
    fn a_dump_not_sliced_by_the_budget_ends() {
        for shape in 0..64u8 {
            let mut input = vec![shape];
            input.extend_from_slice(b"set k 0 0 1\r\nv\r\nlru_crawler metadump all\r\nmn\r\n");
            fuzz(&input);
        }
    }

    /// Seeded random inputs in every shape: text commands stitched from
    /// real ones and noise, and binary packets with random fields.
    #[test]
    fn random_inputs_in_every_shape() {
        const PIECES: [&[u8]; 14] = [
            b"set k 0 0 1\r\nv\r\n",
            b"get k j\r\n",
            b"gets k\r\n",
            b"incr n 5\r\n",
            b"ms k 2 T10 c\r\nhi\r\n",
            b"mg k v t c f s k\r\n",
            b"ma n N0 J7 v\r\n",
            b"md k I\r\n",
            b"stats\r\n",
            b"stats reset\r\n",
            b"flush_all\r\n",
            b"lru_crawler metadump all\r\n",
            b"set big 0 0 900\r\n",
            b"\x80\x01\x00\x01\x08\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00kv",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..512u64 {
            let mut input = vec![case as u8];
            for _ in 0..next() % 40 {
                match next() % 4 {
                    0 => input.extend((0..next() % 24).map(|_| next() as u8)),
                    _ => input.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize]),
                }
            }
            fuzz(&input);
        }
    }
}

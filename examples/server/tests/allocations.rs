//! The server serves gets, sets and misses without allocating per request
//! once its buffers have grown, both with a worker that owns the cache (one
//! worker), with workers sending batches to the storage thread (where
//! hits and misses change places in the batch from round to round) and
//! with workers sharing a sharded cache: the
//! server runs in this process under a counting allocator, and the client
//! side of the measured loop allocates nothing itself (fixed requests, a
//! fixed read buffer), so every allocation counted is the server's. The
//! tests take turns (one counter for the process).

use clap::Parser;
use segcache_server::config::{Cli, Config};
use segcache_server::server::Server;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// One measured server at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: forwards every call to the system allocator unchanged; only
// counts allocations and reallocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Sends `req` and reads until the reply ends with `end`, into `buf`.
fn call(stream: &mut TcpStream, buf: &mut [u8], req: &[u8], end: &[u8]) {
    stream.write_all(req).expect("send");
    let mut have = 0;
    while !buf[..have].ends_with(end) {
        let n = stream.read(&mut buf[have..]).expect("read");
        assert!(n > 0, "server closed");
        have += n;
    }
}

/// One round of the workload: 2 sets, 6 hits, 2 misses, one multi-get.
fn round(stream: &mut TcpStream, buf: &mut [u8]) {
    const SET: &[(&[u8], &[u8])] = &[
        (b"set alpha 1 0 64\r\n", b"STORED\r\n"),
        (b"set beta 2 0 256\r\n", b"STORED\r\n"),
    ];
    let small = [b'a'; 64];
    let large = [b'b'; 256];
    for ((head, reply), value) in SET.iter().zip([&small[..], &large[..]]) {
        let mut req = [0u8; 512];
        let mut n = 0;
        for part in [*head, value, b"\r\n"] {
            req[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        call(stream, buf, &req[..n], reply);
    }
    for _ in 0..3 {
        call(stream, buf, b"get alpha\r\n", b"END\r\n");
        call(stream, buf, b"gets beta\r\n", b"END\r\n");
    }
    call(stream, buf, b"get nobody\r\n", b"END\r\n");
    call(stream, buf, b"delete nobody\r\n", b"NOT_FOUND\r\n");
    call(stream, buf, b"get alpha beta nobody\r\n", b"END\r\n");
}

/// Checks that a server with `workers` workers makes at most `most`
/// allocations over 300 rounds of 13 requests, after a warm-up. Asserts
/// in its turn: a failure's report allocates, and must not land in
/// another test's window.
fn check_allocations(shape: &[&str], most: u64) {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cli = Cli::parse_from(
        [
            &[
                "segcache-server",
                "--port",
                "0",
                "--admin-port",
                "0",
                "--heap-size",
                "16MiB",
            ][..],
            shape,
        ]
        .concat(),
    );
    let config = Config::load(&cli).expect("config");
    let server = Server::start(&config).expect("start");
    let addr = server.listen_addr;
    let stop = server.shutdown_trigger();
    let runner = std::thread::spawn(move || server.run());

    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 4096];
    // Warm-up: the connection's buffers, the batch and the cache's
    // segments grow to their working size.
    for _ in 0..200 {
        round(&mut stream, &mut buf);
    }
    let before = ALLOCATIONS.load(Relaxed);
    const ROUNDS: u64 = 300;
    for _ in 0..ROUNDS {
        round(&mut stream, &mut buf);
    }
    let allocations = ALLOCATIONS.load(Relaxed) - before;
    drop(stream);
    stop();
    runner.join().unwrap().expect("clean shutdown");
    assert!(
        allocations <= most,
        "{shape:?}: {allocations} allocations for {} requests",
        ROUNDS * 13
    );
}

// 13 requests a round, 3900 in all: a handful of background allocations
// (a second's expiry or timer tick) may land in the window.

#[test]
fn the_inline_worker_allocates_nothing_per_request() {
    check_allocations(&["--workers", "1"], 16);
}

#[test]
fn workers_and_the_storage_thread_allocate_nothing_per_request() {
    // One request per round trip: the batch's only read alternates hit and
    // miss, which cost an allocation per hit when a reply buffer was
    // reused only by the same position.
    check_allocations(&["--workers", "2"], 16);
}

#[test]
fn workers_sharing_a_cache_allocate_nothing_per_request() {
    // 8 shards of 8 segments of 256 KiB (`default_shards` with an
    // explicit segment size).
    check_allocations(
        &[
            "--workers",
            "2",
            "--shared-cache",
            "--segment-size",
            "256KiB",
        ],
        16,
    );
}

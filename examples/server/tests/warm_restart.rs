//! Warm restart through the server: with `--datapool`, SIGTERM saves the
//! cache and the next start serves every key again (values and flags); a
//! SIGKILL saves nothing and the next start is empty; a datapool path that
//! cannot be used stops start-up with exit 2 naming the key, and a save that
//! fails on SIGTERM makes the server exit 1.

mod common;
use common::{scratch_pool, Server, BIN};
use std::process::{Command, Stdio};

#[test]
fn sigterm_saves_and_sigkill_does_not() {
    saves_on_sigterm_only(&["--workers", "2"], "pool.meta");
}

/// One worker owns the cache (no storage thread) and saves it itself.
#[test]
fn sigterm_saves_and_sigkill_does_not_with_the_cache_inline() {
    saves_on_sigterm_only(&["--workers", "1"], "pool.meta");
}

/// Several workers sharing a cache of 8 shards (16 MiB of 256 KiB
/// segments, 8 per shard with an explicit segment size): one heap file
/// and one snapshot per shard.
const SHARED: &[&str] = &[
    "--workers",
    "2",
    "--shared-cache",
    "--segment-size",
    "256KiB",
];

#[test]
fn sigterm_saves_and_sigkill_does_not_with_a_shared_cache() {
    saves_on_sigterm_only(SHARED, "pool.shard3.meta");
}

/// `shape`: the worker flags; `meta`: a snapshot file the save writes.
fn saves_on_sigterm_only(shape: &[&str], meta: &str) {
    let (dir, pool_arg) = scratch_pool(&format!("segcache-server-warm-{}", shape.concat()));
    let args = [
        &["--heap-size", "16MiB", "--datapool", pool_arg.as_str()],
        shape,
    ]
    .concat();

    let mut server = Server::start(&args);
    let mut conn = server.connect();
    for i in 0..300u32 {
        let req = format!("set key{i} {i} 0 6\r\nval{:03}\r\n", i % 1000);
        conn.expect(req.as_bytes(), b"STORED\r\n");
    }
    drop(conn);
    assert_eq!(server.signal_and_wait("TERM"), Some(0), "graceful exit");
    assert!(dir.join(meta).exists(), "snapshot written on SIGTERM");

    let mut server = Server::start(&args);
    let mut conn = server.connect();
    for i in 0..300u32 {
        let req = format!("get key{i}\r\n");
        let want = format!("VALUE key{i} {i} 6\r\nval{:03}\r\nEND\r\n", i % 1000);
        conn.expect(req.as_bytes(), want.as_bytes());
    }
    drop(conn);
    // Killed: no snapshot, and the one consumed at start is gone.
    assert_eq!(server.signal_and_wait("KILL"), None);
    assert!(!dir.join(meta).exists());
    let server = Server::start(&args);
    let mut conn = server.connect();
    conn.expect(b"get key1\r\n", b"END\r\n");
    drop(conn);
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// With `--enable-shutdown`, a client's `shutdown` is SIGTERM's graceful
/// stop: the replies to what came before it are written, the datapool is
/// saved, the server exits 0 and the next start restores the items; in
/// every server shape.
#[test]
fn a_client_shutdown_saves_and_exits_like_sigterm() {
    for shape in [
        &["--workers", "1"][..],
        &["--workers", "2"],
        &["--workers", "2", "--shared-cache"],
    ] {
        let (dir, pool_arg) = scratch_pool(&format!("segcache-server-shutdown-{}", shape.concat()));
        let args = [
            &["--heap-size", "16MiB", "--datapool", pool_arg.as_str()][..],
            shape,
        ]
        .concat();
        let mut server = Server::start(&[&args[..], &["--enable-shutdown"]].concat());
        let mut conn = server.connect();
        let mut req = Vec::new();
        for i in 0..300u32 {
            req.extend_from_slice(
                format!("set key{i} {i} 0 6\r\nval{:03}\r\n", i % 1000).as_bytes(),
            );
        }
        req.extend_from_slice(b"get key7\r\nshutdown now\r\nshutdown\r\nget key8\r\n");
        conn.send(&req);
        let mut want = b"STORED\r\n".repeat(300);
        want.extend_from_slice(b"VALUE key7 7 6\r\nval007\r\nEND\r\n");
        // As memcached with -A: a mode it does not know is refused.
        want.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
        assert_eq!(
            conn.read_n(want.len() + 1),
            want,
            "{shape:?}: replies before it, none after"
        );
        assert!(conn.closed(), "{shape:?}: the connection closes");
        assert_eq!(server.wait_exit(), Some(0), "{shape:?}: graceful exit");

        let server = Server::start(&args);
        let mut conn = server.connect();
        conn.expect(
            b"get key299\r\n",
            b"VALUE key299 299 6\r\nval299\r\nEND\r\n",
        );
        // Not enabled here: refused as memcached refuses it without -A.
        conn.expect(b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n");
        conn.expect(b"get key1\r\n", b"VALUE key1 1 6\r\nval001\r\nEND\r\n");
        drop(conn);
        drop(server);
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn an_unusable_datapool_path_is_a_config_error() {
    let out = Command::new(BIN)
        .args([
            "--port",
            "0",
            "--admin-port",
            "0",
            "--datapool",
            "/nonexistent-dir/x/pool",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run segcache-server");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("seg.datapool (--datapool)"), "{stderr}");
}

#[test]
fn a_save_that_fails_on_sigterm_exits_nonzero() {
    failed_save_exits_nonzero(&["--workers", "2"], "pool.meta");
}

#[test]
fn a_save_that_fails_on_sigterm_exits_nonzero_with_the_cache_inline() {
    failed_save_exits_nonzero(&["--workers", "1"], "pool.meta");
}

#[test]
fn a_save_that_fails_on_sigterm_exits_nonzero_with_a_shared_cache() {
    failed_save_exits_nonzero(SHARED, "pool.shard1.meta");
}

fn failed_save_exits_nonzero(shape: &[&str], meta: &str) {
    let (dir, pool_arg) = scratch_pool(&format!("segcache-server-warm-fail-{}", shape.concat()));
    let mut server = Server::start(
        &[
            &["--heap-size", "16MiB", "--datapool", pool_arg.as_str()],
            shape,
        ]
        .concat(),
    );
    let mut conn = server.connect();
    conn.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    drop(conn);
    // A directory where the snapshot goes: the save fails,
    // and the server must say so with its exit code.
    std::fs::create_dir(dir.join(meta)).unwrap();
    assert_eq!(
        server.signal_and_wait("TERM"),
        Some(1),
        "failed save exits 1"
    );
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// A start that fails after the cache restored its snapshot (the port is
/// taken) saves the cache again on its way out: the snapshot is consumed
/// at start, and the next start must still find the items. With the
/// cache inline (one worker), the failed start drops the cache in place.
#[test]
fn a_start_that_fails_after_restoring_keeps_the_snapshot_with_the_cache_inline() {
    let (dir, pool_arg) = scratch_pool("segcache-server-warm-failstart");
    let args = [
        "--heap-size",
        "16MiB",
        "--datapool",
        pool_arg.as_str(),
        "--workers",
        "1",
    ];
    let mut server = Server::start(&args);
    let mut conn = server.connect();
    conn.expect(b"set kept 7 0 4\r\nsafe\r\n", b"STORED\r\n");
    drop(conn);
    assert_eq!(server.signal_and_wait("TERM"), Some(0));

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut failed = Command::new(BIN)
        .args(["--port", &port, "--admin-port", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run segcache-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = failed.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "did not exit");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1), "a taken port fails the start");
    drop(taken);

    let server = Server::start(&args);
    let mut conn = server.connect();
    conn.expect(b"get kept\r\n", b"VALUE kept 7 4\r\nsafe\r\nEND\r\n");
    drop(conn);
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

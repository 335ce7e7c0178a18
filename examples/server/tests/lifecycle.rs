//! Start-up and shutdown: config errors (file and flag) exit 2 naming the
//! key; a config file is honoured; the admin port serves `stats` and
//! Prometheus `/metrics`; SIGTERM with requests in flight exits 0 after
//! answering them; expired items are reclaimed unread. Each with the
//! storage thread (2 workers) and with the cache inline (1 worker).

mod common;
use common::{stat, Conn, Server, BIN};
use std::process::{Command, Stdio};
use std::time::Duration;

fn run_expect_fail(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr);
    (code, stderr)
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("segcache-server-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn bad_values_in_the_file_exit_2_naming_the_key() {
    for (name, text, key) in [
        ("port.toml", "[server]\nport = 70000\n", "server.port"),
        (
            "heap.toml",
            "[seg]\nheap_size = \"lots\"\n",
            "seg.heap_size",
        ),
        ("unknown.toml", "[seg]\nbogus = 1\n", "bogus"),
        ("evict.toml", "[seg]\neviction = \"lru\"\n", "seg.eviction"),
        ("threads.toml", "[worker]\nthreads = 0\n", "worker.threads"),
        (
            "segsize.toml",
            "[seg]\nsegment_size = \"64MiB\"\n",
            "seg.segment_size",
        ),
    ] {
        let path = temp_file(name, text);
        // No port flags: a flag would override the file's value.
        let (code, stderr) = run_expect_fail(&[path.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(key), "{name}: {stderr:?} should name {key}");
    }
    let (code, stderr) = run_expect_fail(&["/nonexistent/segcache.toml"]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, key) in [
        (&["--port", "notaport"][..], "--port"),
        (&["--heap-size", "12XB"][..], "--heap-size"),
        (&["--workers", "0", "--port", "0"][..], "--workers"),
        (&["--eviction", "lru", "--port", "0"][..], "--eviction"),
        (&["--pin", "3-1", "--port", "0"][..], "--pin"),
        (&["--no-such-flag"][..], "--no-such-flag"),
        (
            &["--segment-size", "100", "--port", "0", "--admin-port", "0"][..],
            "--segment-size",
        ),
    ] {
        let (code, stderr) = run_expect_fail(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(key),
            "{args:?}: {stderr:?} should name {key}"
        );
    }
}

#[test]
fn config_file_is_used_and_flags_override_it() {
    let path = temp_file(
        "good.toml",
        "[server]\nhost = \"127.0.0.1\"\nport = 1\nmax_connections = 5\nenable_shutdown = true\n\
         [worker]\nthreads = 3\n[seg]\nheap_size = \"8MiB\"\nsegment_size = \"256KiB\"\n\
         eviction = \"fifo\"\n[admin]\nport = 0\n",
    );
    let server = Server::start_args(&[path.to_str().unwrap(), "--port", "0"]);
    let mut c = server.connect();
    assert_eq!(common::stat(&mut c, "threads").as_deref(), Some("3"));
    assert_eq!(
        common::stat(&mut c, "max_connections").as_deref(),
        Some("5")
    );
    assert_eq!(
        common::stat(&mut c, "limit_maxbytes").as_deref(),
        Some("8388608")
    );
    // `enable_shutdown` took: `stats settings` says so, and a mode it does
    // not know is refused as memcached -A refuses it (not as a disabled
    // shutdown).
    c.send(b"stats settings\r\n");
    let settings = String::from_utf8(c.read_until_end(b"END\r\n")).unwrap();
    assert!(
        settings.contains("STAT shutdown_command yes\r\n"),
        "{settings}"
    );
    c.expect(
        b"shutdown now\r\n",
        b"CLIENT_ERROR invalid shutdown mode\r\n",
    );
}

#[test]
fn admin_stats_and_metrics() {
    admin_reports(&["--workers", "2"]);
}

/// The admin port asks the worker that owns the cache for its stats.
#[test]
fn admin_stats_and_metrics_with_the_cache_inline() {
    admin_reports(&["--workers", "1"]);
}

/// The admin port reads the shared cache's stats itself.
#[test]
fn admin_stats_and_metrics_with_a_shared_cache() {
    admin_reports(&["--workers", "2", "--shared-cache"]);
}

fn admin_reports(args: &[&str]) {
    let server = Server::start(args);
    let mut c = server.connect();
    c.expect(
        b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\n",
        b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nEND\r\n",
    );
    let mut admin = Conn::new(server.admin);
    admin.send(b"stats\r\n");
    let text = String::from_utf8(admin.read_until_end(b"END\r\n")).unwrap();
    assert!(text.contains("STAT get_hits 1\r\n"), "{text}");
    assert!(text.contains("STAT curr_items 1\r\n"), "{text}");
    admin.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    admin.expect(b"nonsense\r\n", b"ERROR\r\n");

    let mut http = Conn::new(server.admin);
    http.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut http.stream, &mut body);
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
    for needle in [
        "segcache_commands_total{command=\"get\"} 2",
        "segcache_commands_total{command=\"set\"} 1",
        "segcache_get_hits_total 1",
        "segcache_get_misses_total 1",
        "segcache_evictions_total 0",
        "segcache_expirations_total 0",
        "segcache_connections_current 1",
        "segcache_connections_total 1",
        "segcache_connections_refused_total 0",
        "segcache_request_latency_seconds{quantile=\"0.99\"}",
        "segcache_request_latency_seconds_count ",
        "segcache_items 1",
    ] {
        assert!(body.contains(needle), "missing {needle:?} in\n{body}");
    }

    // `stats reset` (either port): `stats` counts from it, gauges stay,
    // and Prometheus's counters stay monotonic.
    admin.expect(b"stats reset\r\n", b"RESET\r\n");
    admin.send(b"stats\r\n");
    let text = String::from_utf8(admin.read_until_end(b"END\r\n")).unwrap();
    for line in [
        "get_hits 0",
        "get_misses 0",
        "cmd_get 0",
        "total_items 0",
        "curr_items 1",
    ] {
        assert!(text.contains(&format!("STAT {line}\r\n")), "{line}: {text}");
    }
    c.expect(b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n");
    assert_eq!(stat(&mut c, "get_hits").as_deref(), Some("1"));
    c.expect(b"stats reset\r\n", b"RESET\r\n");
    assert_eq!(stat(&mut c, "get_hits").as_deref(), Some("0"));
    let mut http = Conn::new(server.admin);
    http.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut http.stream, &mut body);
    let body = String::from_utf8(body).unwrap();
    assert!(body.contains("segcache_get_hits_total 2\n"), "{body}");

    let mut http = Conn::new(server.admin);
    http.send(b"GET /nope HTTP/1.1\r\n\r\n");
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut http.stream, &mut body);
    assert!(body.starts_with(b"HTTP/1.1 404"));
}

#[test]
fn sigterm_with_requests_in_flight_exits_0() {
    sigterm_under_load(&["--workers", "2"]);
}

#[test]
fn sigterm_with_requests_in_flight_exits_0_with_the_cache_inline() {
    sigterm_under_load(&["--workers", "1"]);
}

#[test]
fn sigterm_with_requests_in_flight_exits_0_with_a_shared_cache() {
    sigterm_under_load(&["--workers", "2", "--shared-cache"]);
}

fn sigterm_under_load(args: &[&str]) {
    let mut server = Server::start(args);
    let addr = server.addr;
    // Several clients keep pipelining while the signal arrives.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for t in 0..4 {
        let stop = stop.clone();
        clients.push(std::thread::spawn(move || {
            let mut c = Conn::new(addr);
            c.stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut answered = 0;
            for i in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let req = format!("set k{t}-{i} 0 0 1\r\nx\r\nget k{t}-{i}\r\n");
                if std::io::Write::write_all(&mut c.stream, req.as_bytes()).is_err() {
                    break;
                }
                let reply = c.read_until_end(b"END\r\n");
                if reply.is_empty() {
                    break;
                }
                // Every reply that arrives is complete and right.
                assert_eq!(
                    reply,
                    format!("STORED\r\nVALUE k{t}-{i} 0 1\r\nx\r\nEND\r\n").as_bytes()
                );
                answered += 1;
            }
            answered
        }));
    }
    // A pipelined burst whose replies are still being produced at SIGTERM.
    let mut burst = Conn::new(addr);
    let n = 20_000;
    burst.send(&b"set burst 0 0 1\r\nx\r\n".repeat(n));
    std::thread::sleep(Duration::from_millis(300));
    let code = server.signal_and_wait("TERM");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(code, Some(0), "graceful shutdown exits 0");
    let replies = burst.read_n(n * 8);
    assert_eq!(
        replies.len(),
        n * 8,
        "every request read before SIGTERM is answered"
    );
    assert!(replies.chunks(8).all(|r| r == b"STORED\r\n"));
    for c in clients {
        assert!(c.join().unwrap() > 0);
    }
}

#[test]
fn sigint_idle_exits_0() {
    let mut server = Server::start(&[]);
    let _idle = server.connect();
    assert_eq!(server.signal_and_wait("INT"), Some(0));
}

/// Expired segments are reclaimed in the background (by the storage
/// thread, or by the one worker that owns the cache) although nobody
/// reads the items again.
fn expired_items_are_reclaimed_unread(args: &[&str]) {
    let server = Server::start(args);
    let mut c = server.connect();
    for i in 0..100 {
        c.expect(
            format!("set gone{i} 0 1 5\r\nvalue\r\n").as_bytes(),
            b"STORED\r\n",
        );
    }
    let mut admin = Conn::new(server.admin);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let expired = loop {
        let n: u64 = common::stat(&mut admin, "expirations")
            .expect("expirations stat")
            .parse()
            .unwrap();
        if n > 0 || std::time::Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(expired, 100, "every item expired without being read");
    assert_eq!(common::stat(&mut admin, "curr_items").as_deref(), Some("0"));
}

#[test]
fn expired_items_are_reclaimed_unread_by_the_storage_thread() {
    expired_items_are_reclaimed_unread(&["--workers", "2"]);
}

#[test]
fn expired_items_are_reclaimed_unread_with_the_cache_inline() {
    expired_items_are_reclaimed_unread(&["--workers", "1"]);
}

#[test]
fn expired_items_are_reclaimed_unread_with_a_shared_cache() {
    expired_items_are_reclaimed_unread(&["--workers", "2", "--shared-cache"]);
}

//! What an operator relies on: the listen backlog holds a burst of
//! connects, the admin port answers `/metrics` with 100 idle admin clients
//! connected, SIGHUP/SIGUSR1/SIGUSR2 never cost the cache, and the datapool
//! on a filesystem too small for it is a clear start-up error (exit 2, the
//! path and both sizes named) rather than a SIGBUS later, while a save that
//! does not fit says why and leaves no temporary file behind;
//! `--idle-timeout` closes silent and stalled clients only; a shutdown
//! does not wait forever for a client that never reads.

mod common;
use common::{scratch_pool, Conn, Server, BIN};
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kill(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -s {sig} {pid}");
}

/// Opens `n` connections at once to a server that is not accepting and
/// counts those the kernel completes within `wait`.
fn connects_completed(addr: std::net::SocketAddr, n: usize, wait: Duration) -> usize {
    let mut poll = Poll::new().unwrap();
    let mut streams = Vec::new();
    for i in 0..n {
        let mut s = MioStream::connect(addr).expect("connect");
        poll.registry()
            .register(&mut s, Token(i), Interest::WRITABLE)
            .unwrap();
        streams.push(s);
    }
    let mut done = vec![false; n];
    let mut events = Events::with_capacity(1024);
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && done.iter().any(|d| !d) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        for e in events.iter() {
            let s = &streams[e.token().0];
            if s.take_error().ok().flatten().is_none() && s.peer_addr().is_ok() {
                done[e.token().0] = true;
            }
        }
    }
    done.iter().filter(|d| **d).count()
}

#[test]
fn the_listen_backlog_holds_a_burst_of_connects() {
    // While the server is stopped nothing is accepted: the kernel completes
    // only as many connects as the backlog holds (plus one).
    for (args, burst, want_all) in [
        (&[][..], 600usize, true),
        (&["--backlog", "32"][..], 200, false),
    ] {
        let server = Server::start(args);
        kill(server.pid(), "STOP");
        let completed = connects_completed(server.addr, burst, Duration::from_secs(3));
        kill(server.pid(), "CONT");
        if want_all {
            assert_eq!(completed, burst, "default backlog (1024) with {args:?}");
        } else {
            assert!(
                (1..=40).contains(&completed),
                "--backlog 32 completed {completed} of {burst}"
            );
        }
        // The server is fine afterwards.
        let mut conn = server.connect();
        conn.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    }
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn the_admin_port_answers_with_100_idle_admin_clients() {
    let server = Server::start(&[]);
    let idle: Vec<std::net::TcpStream> = (0..100)
        .map(|_| {
            std::net::TcpStream::connect_timeout(&server.admin, Duration::from_secs(5))
                .expect("idle admin connection")
        })
        .collect();
    // Half-written requests hold no thread either.
    let mut partial: Vec<std::net::TcpStream> = (0..20)
        .map(|_| std::net::TcpStream::connect(server.admin).unwrap())
        .collect();
    for s in &mut partial {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
    }
    for _ in 0..3 {
        let reply = http_get(server.admin, "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
        assert!(reply.contains("segcache_"), "{reply:?}");
    }
    assert!(http_get(server.admin, "/nope").starts_with("HTTP/1.1 404"));
    let mut text = Conn::new(server.admin);
    text.send(b"version\r\nstats\r\n");
    let reply = String::from_utf8(text.read_until_end(b"END\r\n")).unwrap();
    assert!(reply.starts_with("VERSION "), "{reply}");
    assert!(reply.contains("STAT curr_connections "), "{reply}");
    text.expect(b"bogus\r\n", b"ERROR\r\n");
    // A line longer than the admin port accepts closes only that client.
    let mut long = Conn::new(server.admin);
    long.send(&vec![b'x'; 20_000]);
    assert!(long.closed());
    assert!(http_get(server.admin, "/metrics").starts_with("HTTP/1.1 200 OK"));
    drop(idle);
}

#[test]
fn hup_and_usr_signals_keep_the_cache_and_the_connections() {
    let (dir, pool_arg) = scratch_pool("segcache-ops-signals");
    let args = ["--heap-size", "8MiB", "--datapool", pool_arg.as_str()];
    let mut server = Server::start(&args);
    let mut conn = server.connect();
    conn.expect(b"set k 5 0 3\r\nabc\r\n", b"STORED\r\n");
    for sig in ["HUP", "USR1", "USR2", "HUP"] {
        kill(server.pid(), sig);
        std::thread::sleep(Duration::from_millis(100));
        assert!(server.alive(), "SIG{sig} ended the server");
        conn.expect(b"get k\r\n", b"VALUE k 5 3\r\nabc\r\nEND\r\n");
    }
    drop(conn);
    assert_eq!(server.signal_and_wait("TERM"), Some(0));
    let server = Server::start(&args);
    server
        .connect()
        .expect(b"get k\r\n", b"VALUE k 5 3\r\nabc\r\nEND\r\n");
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_leftover_temporary_snapshot_is_removed_at_start() {
    let dir = std::env::temp_dir().join(format!("segcache-ops-tmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("pool");
    let tmp = dir.join("pool.meta.tmp");
    std::fs::write(&tmp, vec![1u8; 1 << 20]).unwrap();
    let server = Server::start(&["--heap-size", "4MiB", "--datapool", pool.to_str().unwrap()]);
    assert!(!tmp.exists(), "leftover {} still there", tmp.display());
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// A 20 MiB tmpfs, unmounted on drop; `None` where mounting is not allowed.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount() -> Option<SmallFs> {
        let dir = std::env::temp_dir().join(format!("segcache-ops-tmpfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=20m", "tmpfs"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallFs(dir))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_datapool_on_a_small_filesystem_fails_clearly_and_leaves_it_as_found() {
    let Some(fs) = SmallFs::mount() else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
        return;
    };
    let pool = fs.0.join("pool");
    let pool_arg = pool.to_str().unwrap();

    // A 64 MiB heap on 20 MiB: refused at start, naming path and sizes.
    let out = Command::new(BIN)
        .args(["--port", "0", "--admin-port", "0"])
        .args(["--heap-size", "64MiB", "--datapool", pool_arg])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(pool_arg), "{stderr}");
    assert!(stderr.contains("67108864 bytes"), "{stderr}");
    assert!(stderr.contains("20971520 bytes free"), "{stderr}");
    assert!(names(&fs.0).is_empty(), "left {:?}", names(&fs.0));

    // A 16 MiB heap fits, and filling it never faults; its 8 MiB snapshot
    // (hash power 17) does not: SIGTERM says why, exits 1, leaves no
    // temporary file.
    let log = std::env::temp_dir().join(format!("segcache-ops-log-{}", std::process::id()));
    let mut child = Command::new(BIN)
        .args(["--port", "0", "--admin-port", "0", "--heap-size", "16MiB"])
        .args(["--max-value", "1MiB"]) // 1 MiB segments: 100 KB values fit
        .args(["--hash-power", "17", "--datapool", pool_arg])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .split_whitespace()
        .nth(2)
        .expect(&line)
        .parse()
        .unwrap();
    let mut conn = Conn::new(addr);
    let value = vec![b'v'; 100_000];
    for i in 0..400 {
        let mut req = format!("set key{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        conn.expect(&req, b"STORED\r\n");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "writing 40 MB through a 16 MiB datapool"
    );
    drop(conn);
    kill(child.id(), "TERM");
    let code = {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("no exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).ok();
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("pool.meta"), "{stderr}");
    assert_eq!(code, Some(1), "a failed save exits 1");
    assert_eq!(names(&fs.0), ["pool"]);
    drop(fs);
}

#[test]
fn idle_timeout_closes_silent_clients_only() {
    let server = Server::start(&["--idle-timeout", "1"]);
    let mut silent = server.connect();
    let mut stalled = server.connect();
    stalled.send(b"set k 0 0 10\r\nabc");
    let mut talker = server.connect();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        talker.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(silent.closed(), "a silent client outlived --idle-timeout");
    assert!(stalled.closed(), "a client stalled mid-value outlived it");
    let kicks = common::stat(&mut talker, "idle_kicks").unwrap();
    assert_eq!(kicks, "2");

    // Off by default.
    let server = Server::start(&[]);
    let mut quiet = server.connect();
    std::thread::sleep(Duration::from_millis(2500));
    quiet.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
}

#[test]
fn shutdown_does_not_wait_forever_for_a_client_that_never_reads() {
    let mut server = Server::start(&["--max-value", "1MiB"]);
    let mut conn = server.connect();
    let mut req = b"set big 0 0 500000\r\n".to_vec();
    req.extend_from_slice(&vec![b'v'; 500_000]);
    req.extend_from_slice(b"\r\n");
    conn.expect(&req, b"STORED\r\n");
    // 100 MB of replies to a client that reads none of them.
    let mut line = b"get".to_vec();
    for _ in 0..200 {
        line.extend_from_slice(b" big");
    }
    line.extend_from_slice(b"\r\n");
    conn.send(&line);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.signal_and_wait("TERM"),
        Some(0),
        "graceful exit despite the reply nobody reads"
    );
    // What arrived is a cut reply: less than was asked for.
    conn.stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut got = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    while let Ok(n) = conn.stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(got < 200 * 500_000, "{got} bytes: the reply was not cut");
}

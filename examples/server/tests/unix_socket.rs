//! `--unix-socket`, memcached's `-s`: the same protocol on a Unix domain
//! socket beside TCP, in every server shape; the socket file's permissions
//! (`--unix-mask`), a stale socket file replaced and any other file left
//! alone, the connection limit, and the file removed at shutdown.

mod common;
use common::{scratch_pool, Conn, Server};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Sends `req` on a new connection to the socket at `path` and reads until
/// the reply ends with `end` (bounded).
fn unix_exchange(path: &Path, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(path).expect("connect to the unix socket");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A refused connection may be closed before the request is written
    // (EPIPE); its refusal is still there to read.
    let _ = s.write_all(req);
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reply.ends_with(end) && Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
    }
    reply
}

#[test]
fn a_unix_socket_serves_as_tcp_does_in_every_shape() {
    for shape in [
        &["--workers", "2"][..],
        &["--workers", "1"],
        &["--workers", "2", "--shared-cache"],
    ] {
        let (dir, _) = scratch_pool(&format!("segcache-unix-{}", shape.concat()));
        let path = dir.join("cache.sock");
        let path_arg = path.to_str().unwrap();
        let mut server = Server::start(&[shape, &["--unix-socket", path_arg]].concat());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{shape:?}: only the server's user by default");
        // Pipelined commands of every kind, answered in order.
        let mut req = Vec::new();
        for i in 0..500 {
            req.extend_from_slice(format!("set k{i} {i} 0 5\r\nvalue\r\n").as_bytes());
        }
        req.extend_from_slice(b"get k7 k499\r\nmg k3 v f\r\nincr nope 1\r\nmn\r\n");
        let mut want = b"STORED\r\n".repeat(500);
        want.extend_from_slice(
            b"VALUE k7 7 5\r\nvalue\r\nVALUE k499 499 5\r\nvalue\r\nEND\r\nVA 5 f3\r\nvalue\r\nNOT_FOUND\r\nMN\r\n",
        );
        assert_eq!(unix_exchange(&path, &req, b"MN\r\n"), want, "{shape:?}");
        // The same cache over TCP, and both counted as connections.
        let mut tcp = Conn::new(server.addr);
        tcp.expect(b"get k1\r\n", b"VALUE k1 1 5\r\nvalue\r\nEND\r\n");
        let mut held = UnixStream::connect(&path).unwrap();
        held.write_all(b"mn\r\n").unwrap();
        let mut mn = [0u8; 4];
        held.read_exact(&mut mn).unwrap();
        // (The exchange's closed connection is counted gone once its
        // worker reads the EOF.)
        assert_eq!(
            common::stat_settles(&mut tcp, "curr_connections", "2").as_deref(),
            Some("2")
        );
        // SIGTERM: graceful, and the socket file is gone.
        drop((tcp, held));
        assert_eq!(server.signal_and_wait("TERM"), Some(0), "{shape:?}");
        assert!(!path.exists(), "{shape:?}: socket file removed at shutdown");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn permissions_stale_sockets_and_other_files() {
    let (dir, _) = scratch_pool("segcache-unix-files");
    let path = dir.join("cache.sock");
    let path_arg = path.to_str().unwrap().to_string();
    // A socket file left by a run that did not stop cleanly is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = Server::start(&["--unix-socket", &path_arg, "--unix-mask", "770"]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o770);
    assert_eq!(unix_exchange(&path, b"mn\r\n", b"MN\r\n"), b"MN\r\n");
    // `stats settings` names them, as memcached's does.
    let settings = unix_exchange(&path, b"stats settings\r\n", b"END\r\n");
    let want = format!("STAT domain_socket {path_arg}\r\nSTAT umask 770\r\n");
    assert!(
        String::from_utf8_lossy(&settings).contains(&want),
        "{settings:?}"
    );
    drop(server);

    // Anything else at the path stops start-up, naming the setting, and
    // stays as it was.
    std::fs::remove_file(&path).ok();
    std::fs::write(&path, b"not a socket").unwrap();
    let run = common::start_fails;
    let (code, err) = run(&["--unix-socket", &path_arg]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("server.unix_socket (--unix-socket)"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    // Bad masks and paths are refused before anything starts.
    let (code, err) = run(&["--unix-socket", &path_arg, "--unix-mask", "9"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("server.unix_mask (--unix-mask)"), "{err}");
    let long = format!("/tmp/{}", "x".repeat(120));
    let (code, err) = run(&["--unix-socket", &long]);
    assert_eq!(code, Some(2), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--max-connections` counts both kinds: past it a Unix client is
/// refused as a TCP one is.
#[test]
fn the_connection_limit_counts_unix_clients() {
    let (dir, _) = scratch_pool("segcache-unix-limit");
    let path = dir.join("cache.sock");
    let server = Server::start(&[
        "--unix-socket",
        path.to_str().unwrap(),
        "--max-connections",
        "1",
    ]);
    let mut tcp = Conn::new(server.addr);
    tcp.expect(b"mn\r\n", b"MN\r\n");
    assert_eq!(
        unix_exchange(&path, b"mn\r\n", b"\r\n"),
        b"SERVER_ERROR too many open connections\r\n"
    );
    drop(tcp);
    // Once the TCP client is gone (the server notices within a round),
    // a Unix client gets in.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = unix_exchange(&path, b"mn\r\n", b"\r\n");
        if reply == b"MN\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "never admitted: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&dir).ok();
}

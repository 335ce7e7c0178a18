//! Hostile and broken clients: garbage, a 10 MB line without a newline, a
//! client sending one byte at a time, a client vanishing mid-value, too
//! large values, a thousand connections, the connection limit. After each,
//! the server is up and other clients are served normally.

mod common;
use common::{stat, Conn, Server};
use std::io::Write;
use std::time::Duration;

fn healthy(server: &Server) {
    let mut c = server.connect();
    c.expect(b"set health 0 0 2\r\nok\r\n", b"STORED\r\n");
    c.expect(b"get health\r\n", b"VALUE health 0 2\r\nok\r\nEND\r\n");
}

#[test]
fn garbage_bytes_get_errors_not_crashes() {
    let mut server = Server::start(&[]);
    let mut bystander = server.connect();
    bystander.expect(b"set b 0 0 1\r\nx\r\n", b"STORED\r\n");
    let mut c = server.connect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut junk = Vec::with_capacity(64 * 1024);
    for _ in 0..64 * 1024 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        junk.push(seed as u8);
    }
    let _ = c.stream.write_all(&junk);
    let _ = c.stream.write_all(b"\r\n");
    drop(c);
    // Control bytes, NULs, lone \r, binary-protocol magic.
    let mut c = server.connect();
    let _ = c
        .stream
        .write_all(b"\x80\x00\x00\x00\r\n\0\0\0\r\r\r\n\xff\xfe get\r\n");
    drop(c);
    assert!(server.alive());
    bystander.expect(b"get b\r\n", b"VALUE b 0 1\r\nx\r\nEND\r\n");
    healthy(&server);
}

#[test]
fn ten_megabyte_line_is_refused_and_closed() {
    let mut server = Server::start(&[]);
    let mut c = server.connect();
    let line = vec![b'a'; 10 << 20];
    // The server closes early; the rest of the write may fail.
    let _ = c.stream.write_all(&line);
    let reply = c.read_until_end(b"\r\n");
    assert_eq!(reply, b"CLIENT_ERROR line too long\r\n");
    assert!(c.closed());
    // A long multiget line is also capped (at 1 MiB).
    let mut c = server.connect();
    let mut get = b"get ".to_vec();
    get.extend_from_slice(&b"k ".repeat(5 << 20));
    let _ = c.stream.write_all(&get);
    assert_eq!(c.read_until_end(b"\r\n"), b"CLIENT_ERROR line too long\r\n");
    assert!(c.closed());
    assert!(server.alive());
    healthy(&server);
}

#[test]
fn one_byte_at_a_time() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let req = b"set slow 0 0 5\r\nhello\r\nget slow\r\n";
    for b in req {
        c.send(&[*b]);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        c.read_until_end(b"END\r\n"),
        b"STORED\r\nVALUE slow 0 5\r\nhello\r\nEND\r\n"
    );
}

#[test]
fn disconnect_mid_value() {
    let mut server = Server::start(&[]);
    for _ in 0..20 {
        let mut c = server.connect();
        c.send(b"set half 0 0 1000\r\n");
        c.send(&[b'x'; 300]);
        drop(c);
    }
    let mut c = server.connect();
    c.send(b"get half\r\n");
    assert_eq!(
        c.read_until_end(b"END\r\n"),
        b"END\r\n",
        "nothing half-stored"
    );
    assert!(server.alive());
    healthy(&server);
}

#[test]
fn too_large_value_then_normal_command() {
    let server = Server::start(&["--max-value", "1MiB"]);
    let mut c = server.connect();
    c.expect(b"set big 0 0 1\r\nx\r\n", b"STORED\r\n");
    let size = 2 << 20;
    c.send(format!("set big 0 0 {size}\r\n").as_bytes());
    // The server answers as soon as it sees the line, then swallows.
    c.send(&vec![b'v'; size]);
    c.send(b"\r\nget big\r\nset after 0 0 2\r\nok\r\nget after\r\n");
    assert_eq!(
        c.read_until_end(b"ok\r\nEND\r\n"),
        b"SERVER_ERROR object too large for cache\r\nEND\r\nSTORED\r\nVALUE after 0 2\r\nok\r\nEND\r\n",
        "the old value is gone and the connection still works"
    );
    // A value within max_value but too large for a segment with its key.
    let server = Server::start(&["--segment-size", "64KiB", "--heap-size", "1MiB"]);
    let mut c = server.connect();
    let mut req = b"set seg 0 0 65536\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'z', 65536));
    req.extend_from_slice(b"\r\nversion\r\n");
    c.send(&req);
    assert_eq!(
        c.read_until_end(b"VERSION 0.1.0\r\n"),
        b"SERVER_ERROR object too large for cache\r\nVERSION 0.1.0\r\n"
    );
}

/// The default largest value follows the segments, which follow the heap
/// (256 KiB at the default 64 MiB); `--max-value 1MiB` buys memcached's
/// 1 MiB values with segments that hold them.
#[test]
fn default_largest_value_follows_the_heap() {
    let set = |server: &Server, size: usize| {
        let mut c = server.connect();
        let mut req = format!("set v 0 0 {size}\r\n").into_bytes();
        req.extend(std::iter::repeat_n(b'v', size));
        req.extend_from_slice(b"\r\nversion\r\n");
        c.send(&req);
        c.read_until_end(b"VERSION 0.1.0\r\n")
    };
    let default = Server::start(&[]);
    assert_eq!(set(&default, 200_000), b"STORED\r\nVERSION 0.1.0\r\n");
    assert_eq!(
        set(&default, 300_000),
        b"SERVER_ERROR object too large for cache\r\nVERSION 0.1.0\r\n"
    );
    let mut admin = Conn::new(default.admin);
    assert_eq!(stat(&mut admin, "item_size_max").as_deref(), Some("262144"));
    let large = Server::start(&["--max-value", "1MiB"]);
    assert_eq!(set(&large, 1_000_000), b"STORED\r\nVERSION 0.1.0\r\n");
    // A large heap gets 1 MiB segments, hence 1 MiB values, by default.
    let big_heap = Server::start(&["--heap-size", "256MiB"]);
    assert_eq!(set(&big_heap, 1_000_000), b"STORED\r\nVERSION 0.1.0\r\n");
}

#[test]
fn a_thousand_connections() {
    // Raise the soft fd limit of this process if it is low.
    unsafe_raise_nofile(4096);
    // The server inherits the raised limit from this process.
    let server = Server::start(&["--max-connections", "2000"]);
    let mut conns: Vec<Conn> = (0..1000).map(|_| server.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(format!("set c{i} 0 0 {}\r\n{i}\r\n", i.to_string().len()).as_bytes());
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.read_until_end(b"\r\n"), b"STORED\r\n", "conn {i}");
    }
    for (i, c) in conns.iter_mut().enumerate().rev() {
        c.send(format!("get c{i}\r\n").as_bytes());
    }
    for (i, c) in conns.iter_mut().enumerate().rev() {
        let want = format!("VALUE c{i} 0 {}\r\n{i}\r\nEND\r\n", i.to_string().len());
        assert_eq!(c.read_until_end(b"END\r\n"), want.as_bytes());
    }
    let mut probe = server.connect();
    assert_eq!(
        stat(&mut probe, "curr_connections").as_deref(),
        Some("1001")
    );
    drop(conns);
    healthy(&server);
}

#[test]
fn connection_limit_refuses_clearly() {
    let server = Server::start(&["--max-connections", "3"]);
    let mut held: Vec<Conn> = (0..3).map(|_| server.connect()).collect();
    for c in &mut held {
        c.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    }
    let mut extra = server.connect();
    assert_eq!(
        extra.read_until_end(b"\r\n"),
        b"SERVER_ERROR too many open connections\r\n"
    );
    assert!(extra.closed());
    // Existing clients are unaffected; a slot frees when one leaves.
    held[0].expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    held.pop();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = server.connect();
        c.send(b"version\r\n");
        let reply = c.read_until_end(b"\r\n");
        if reply == b"VERSION 0.1.0\r\n" {
            break;
        }
        assert_eq!(reply, b"SERVER_ERROR too many open connections\r\n");
        assert!(std::time::Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut admin = Conn::new(server.admin);
    admin.send(b"stats\r\n");
    let text = String::from_utf8(admin.read_until_end(b"END\r\n")).unwrap();
    let refused: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("STAT rejected_connections "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 1);
}

#[test]
fn unread_replies_do_not_grow_without_bound() {
    // A client that pipelines gets and never reads: the server stops
    // reading it, and others are served meanwhile.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let value = vec![b'v'; 100_000];
    let mut req = b"set fat 0 0 100000\r\n".to_vec();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    c.expect(&req, b"STORED\r\n");
    let mut hog = server.connect();
    hog.stream.set_nonblocking(true).unwrap();
    let gets = b"get fat\r\n".repeat(10_000);
    let mut sent = 0;
    for _ in 0..200 {
        match hog.stream.write(&gets[sent..]) {
            Ok(n) => sent += n,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        if sent == gets.len() {
            break;
        }
    }
    healthy(&server);
}

/// Raises this process's soft open-file limit to `want` (or the hard
/// limit); the server raises nothing, so the test also gives it a limit
/// check through `--max-connections`.
fn unsafe_raise_nofile(want: u64) {
    // SAFETY: getrlimit/setrlimit write and read a struct we own.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && (rl.rlim_cur as u64) < want {
            rl.rlim_cur = (want as libc::rlim_t).min(rl.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

//! Regression tests for issue 11 (memcache semantics executed atomically):
//! each reproduction from the issue, byte for byte as memcached 1.6.18
//! answers it, against the real `segcache-server` binary.

mod common;

use common::{Conn, Server};
use std::time::{Duration, Instant};

fn server() -> Server {
    Server::start(&["--workers", "2"])
}

/// The CAS token of `key` from `gets`.
fn cas_of(c: &mut Conn, key: &str) -> u64 {
    c.send(format!("gets {key}\r\n").as_bytes());
    let reply = String::from_utf8(c.read_until_end(b"END\r\n")).unwrap();
    let first = reply.lines().next().unwrap();
    first
        .split(' ')
        .nth(4)
        .unwrap_or_else(|| panic!("no cas in {reply:?}"))
        .parse()
        .unwrap()
}

// 1. A failed conditional store with an expired exptime loses nothing.
#[test]
fn failed_conditional_store_with_expired_exptime_keeps_the_item() {
    let srv = server();
    let mut c = srv.connect();
    let past = "1000000000"; // an absolute time in the past
    for (i, (cmd, reply)) in [
        ("add k 0 -1 1\r\nw\r\n".to_string(), &b"NOT_STORED\r\n"[..]),
        (format!("add k 0 {past} 1\r\nw\r\n"), b"NOT_STORED\r\n"),
        ("cas k 0 -1 1 999999\r\nw\r\n".to_string(), b"EXISTS\r\n"),
        (format!("cas k 0 {past} 1 999999\r\nw\r\n"), b"EXISTS\r\n"),
        ("ms k 1 C999999 T-1\r\nw\r\n".to_string(), b"EX\r\n"),
        ("ms k 1 ME T-1\r\nw\r\n".to_string(), b"NS\r\n"),
        ("add k 0 -1 1 noreply\r\nw\r\n".to_string(), b""),
        ("cas k 0 -1 1 999999 noreply\r\nw\r\n".to_string(), b""),
    ]
    .into_iter()
    .enumerate()
    {
        c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
        c.expect(cmd.as_bytes(), reply);
        let want = "VALUE k 0 1\r\nv\r\nEND\r\n";
        let got = c.roundtrip(b"get k\r\n", want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            want,
            "case {i}: {cmd:?} lost the item"
        );
    }
    // A store that passes its condition with an expired exptime removes
    // the old item (memcached stores it already expired).
    c.expect(b"set k 0 -1 1\r\nw\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"END\r\n");
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    let cas = cas_of(&mut c, "k");
    c.expect(
        format!("cas k 0 -1 1 {cas}\r\nw\r\n").as_bytes(),
        b"STORED\r\n",
    );
    c.expect(b"get k\r\n", b"END\r\n");
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    c.expect(b"replace k 0 -1 1\r\nw\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"END\r\n");
}

// 2. `set k 0 -1` is one atomic step: a reader never sees the value.
#[test]
fn expired_set_is_never_visible_to_other_connections() {
    let srv = server();
    let addr = srv.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Conn::new(addr);
                let (mut hits, mut gets) = (0u64, 0u64);
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline
                {
                    c.send(b"get k\r\nget k\r\nget k\r\nget k\r\n");
                    let mut got = Vec::new();
                    while got.windows(5).filter(|w| w == b"END\r\n").count() < 4 {
                        let more = c.read_until_end(b"END\r\n");
                        assert!(!more.is_empty(), "reader timed out");
                        got.extend_from_slice(&more);
                    }
                    gets += 4;
                    hits += got.windows(6).filter(|w| w == b"VALUE ").count() as u64;
                }
                (hits, gets)
            })
        })
        .collect();
    let mut w = Conn::new(addr);
    for _ in 0..2000 {
        w.send(b"set k 0 -1 1\r\nx\r\nset k 0 -1 1 noreply\r\ny\r\n");
        w.expect(b"", b"STORED\r\n");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for r in readers {
        let (hits, gets) = r.join().unwrap();
        assert_eq!(
            hits, 0,
            "{hits} of {gets} gets saw an already-expired value"
        );
        total += gets;
    }
    assert!(total > 0);
}

// 3. touch, gat and gats keep the CAS token.
#[test]
fn touch_and_gat_keep_the_cas_token() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    let cas = cas_of(&mut c, "k");
    c.expect(b"touch k 0\r\n", b"TOUCHED\r\n");
    c.expect(b"gat 100 k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
    c.expect(
        b"gats 0 k\r\n",
        format!("VALUE k 0 1 {cas}\r\nv\r\nEND\r\n").as_bytes(),
    );
    c.expect(b"mg k T50\r\n", b"HD\r\n");
    assert_eq!(cas_of(&mut c, "k"), cas);
    c.expect(
        format!("cas k 0 0 1 {cas}\r\nw\r\n").as_bytes(),
        b"STORED\r\n",
    );
    // gat with an expired exptime returns the item, then it is gone.
    c.expect(b"gat -1 k\r\n", b"VALUE k 0 1\r\nw\r\nEND\r\n");
    c.expect(b"get k\r\n", b"END\r\n");
}

// 4. incr/decr read numbers as memcached's strtoull.
#[test]
fn incr_parses_numbers_as_strtoull() {
    let srv = server();
    let mut c = srv.connect();
    for value in ["  5", "+5", "5 ", "000000000000000000005"] {
        c.expect(
            format!("set n 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"STORED\r\n",
        );
        c.expect(b"incr n 1\r\n", b"6\r\n");
    }
    c.expect(b"incr n +1\r\n", b"7\r\n");
    c.expect(b"incr n 01\r\n", b"8\r\n");
    c.expect(b"decr n +10\r\n", b"0\r\n");
    c.expect(
        b"incr n -1\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.expect(b"set n 0 0 2\r\n5x\r\n", b"STORED\r\n");
    c.expect(
        b"incr n 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
}

// 5. Items are not expired early (the core's TTL buckets).
#[test]
fn short_ttls_are_not_cut_by_a_neighbour() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(b"set a 0 2 1\r\na\r\n", b"STORED\r\n");
    c.expect(b"set b 0 6 1\r\nb\r\n", b"STORED\r\n");
    std::thread::sleep(Duration::from_millis(2800));
    c.expect(b"get b\r\n", b"VALUE b 0 1\r\nb\r\nEND\r\n");
}

/// y1 and y2 share a TTL bucket (and a segment), so y2 reports y1's
/// deadline: 1,880 s early, within the documented precision of
/// max(1 s, TTL/16) = 5,243 s for this TTL (memcached keeps a deadline
/// per item and answers t83900; a deadline per segment is what makes
/// expiry free). The short-TTL case, where the old 8 s buckets broke the
/// bound, is `short_ttls_are_not_cut_by_a_neighbour` above; the core tests
/// the bound over the whole TTL range.
#[test]
fn long_ttls_report_their_own_deadline() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(b"set y1 0 82020 1\r\na\r\n", b"STORED\r\n");
    c.expect(b"set y2 0 83900 1\r\nb\r\n", b"STORED\r\n");
    c.send(b"mg y2 t\r\n");
    let reply = String::from_utf8(c.read_until_end(b"\r\n")).unwrap();
    let t: i64 = reply
        .trim_end()
        .strip_prefix("HD t")
        .unwrap_or_else(|| panic!("{reply:?}"))
        .parse()
        .unwrap();
    assert!(
        (83900 - 83900 / 16..=83900).contains(&t),
        "mg y2 t: {reply:?}"
    );
}

// 6. Meta protocol.
#[test]
fn rejected_ms_swallows_its_data_block() {
    let srv = server();
    let mut c = srv.connect();
    // The value "version" must not run as a command.
    c.expect(
        b"ms k 7 T\r\nversion\r\nmn\r\n",
        b"CLIENT_ERROR bad token in command line format\r\nMN\r\n",
    );
    for (line, reply) in [
        (
            &b"ms k 1 T1 T2\r\nx\r\n"[..],
            &b"CLIENT_ERROR duplicate flag\r\n"[..],
        ),
        (
            b"ms k 1 MZ\r\nx\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        (
            b"ms k 1 C\r\nx\r\n",
            b"CLIENT_ERROR bad token in command line format\r\n",
        ),
        (b"ms k 1 Z\r\nx\r\n", b"CLIENT_ERROR invalid flag\r\n"),
    ] {
        let mut sent = line.to_vec();
        sent.extend_from_slice(b"mn\r\n");
        let mut want = reply.to_vec();
        want.extend_from_slice(b"MN\r\n");
        c.expect(&sent, &want);
    }
    // A bad length cannot be swallowed: the data line runs (as memcached).
    c.expect(
        b"ms k bad\r\nx\r\nmn\r\n",
        b"CLIENT_ERROR bad command line format\r\nERROR\r\nMN\r\n",
    );
    c.expect(b"mg k\r\n", b"EN\r\n");
}

#[test]
fn q_hides_only_what_memcached_hides() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(b"ms k 1 q\r\nx\r\nmn\r\n", b"MN\r\n");
    // mg: a hit is shown, a miss hidden.
    c.expect(b"mg k q\r\nmg nope q\r\nmn\r\n", b"HD\r\nMN\r\n");
    c.expect(b"mg k q v\r\nmn\r\n", b"VA 1\r\nx\r\nMN\r\n");
    // md, ma: success hidden, NF shown.
    c.expect(b"md k q\r\nmd k q\r\nmn\r\n", b"NF\r\nMN\r\n");
    c.expect(b"ma nope q\r\nmn\r\n", b"NF\r\nMN\r\n");
    c.expect(b"ms n 1\r\n5\r\n", b"HD\r\n");
    c.expect(b"ma n q v\r\nmn\r\n", b"MN\r\n");
    c.expect(b"mg n v\r\n", b"VA 1\r\n6\r\n");
}

#[test]
fn unknown_meta_flags_are_refused() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(b"mg k X\r\n", b"CLIENT_ERROR invalid flag\r\n");
    c.expect(b"mg k E5\r\n", b"CLIENT_ERROR invalid flag\r\n");
    c.expect(b"md k X\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n");
    c.expect(b"ma k X\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n");
}

#[test]
fn base64_keys_and_me() {
    let srv = server();
    let mut c = srv.connect();
    // "azM=" is "k3".
    c.expect(b"ms azM= 1 b k\r\nx\r\n", b"HD kazM= b\r\n");
    c.expect(b"get k3\r\n", b"VALUE k3 0 1\r\nx\r\nEND\r\n");
    c.expect(b"mg azM= b v k\r\n", b"VA 1 kazM= b\r\nx\r\n");
    c.expect(b"mg !!!! b v\r\n", b"CLIENT_ERROR error decoding key\r\n");
    c.expect(b"me nope\r\n", b"EN\r\n");
    // (memcached remembers a base64 key per item and `me` prints it
    // encoded; this server does not, so the item is stored plainly here.)
    c.expect(b"set k3 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.send(b"me k3\r\n");
    let reply = String::from_utf8(c.read_until_end(b"\r\n")).unwrap();
    assert!(reply.starts_with("ME k3 exp=-1 la="), "{reply:?}");
    assert!(
        reply.contains(" cas=") && reply.contains(" size="),
        "{reply:?}"
    );
}

#[test]
fn meta_vivify_recache_stale_and_hit_flags() {
    let srv = server();
    let mut c = srv.connect();
    // N: the first miss wins (W) an empty item, the next one sees Z.
    c.expect(b"mg viv N30 s\r\n", b"HD s0 W\r\n");
    c.expect(b"mg viv N30 s\r\n", b"HD s0 Z\r\n");
    c.expect(b"ms viv 1 T30\r\nx\r\n", b"HD\r\n");
    c.expect(b"mg viv v\r\n", b"VA 1\r\nx\r\n");
    // R: less than 60 s left wins a recache token once.
    c.expect(b"mg viv R60\r\n", b"HD W\r\n");
    c.expect(b"mg viv R60\r\n", b"HD Z\r\n");
    // md I: marked stale (X), the next reader wins.
    c.expect(b"md viv I T30\r\n", b"HD\r\n");
    c.expect(b"mg viv v\r\n", b"VA 1 X W\r\nx\r\n");
    c.expect(b"mg viv v\r\n", b"VA 1 Z X\r\nx\r\n");
    // ma N/J vivifies, M and D steer, C compares.
    c.expect(b"ma cnt N0 J10 v\r\n", b"VA 2\r\n10\r\n");
    c.expect(b"ma cnt v\r\n", b"VA 2\r\n11\r\n");
    c.expect(b"ma cnt MD D100 v\r\n", b"VA 1\r\n0\r\n");
    c.expect(b"ma cnt C1 v\r\n", b"EX\r\n");
    // h: whether the item was fetched before; u: no bump.
    c.expect(b"ms hl 1\r\nx\r\n", b"HD\r\n");
    c.expect(b"mg hl h u\r\n", b"HD h0\r\n");
    c.expect(b"mg hl h\r\n", b"HD h0\r\n");
    c.expect(b"mg hl h\r\n", b"HD h1\r\n");
}

// 7. Smaller ones.
#[test]
fn http_request_line_closes_the_connection() {
    let srv = server();
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.0\r\nversion\r\n");
    assert!(c.closed());
    let mut c = srv.connect();
    c.send(b"POST /x HTTP/1.1\r\n");
    assert!(c.closed());
}

#[test]
fn flush_all_wording_and_refusal() {
    let srv = server();
    let mut c = srv.connect();
    c.expect(
        b"flush_all invalid\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.expect(b"flush_all -1\r\n", b"OK\r\n");
    let srv = Server::start(&["--workers", "1", "--disable-flush-all"]);
    let mut c = srv.connect();
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    c.expect(b"flush_all\r\n", b"CLIENT_ERROR flush_all not allowed\r\n");
    c.expect(b"flush_all noreply\r\nmn\r\n", b"MN\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
}

#[test]
fn stats_sub_commands_and_cache_memlimit() {
    let srv = server();
    let mut c = srv.connect();
    c.send(b"stats settings\r\n");
    let reply = String::from_utf8(c.read_until_end(b"END\r\n")).unwrap();
    assert!(reply.contains("STAT maxbytes 67108864\r\n"), "{reply}");
    assert!(reply.contains("STAT cas_enabled yes\r\n"), "{reply}");
    // As memcached without -A, and without -s.
    assert!(reply.contains("STAT shutdown_command no\r\n"), "{reply}");
    assert!(
        reply.contains("STAT domain_socket NULL\r\nSTAT umask 700\r\n"),
        "{reply}"
    );
    for sub in ["items", "slabs", "conns", "cachedump 1 1"] {
        c.expect(format!("stats {sub}\r\n").as_bytes(), b"END\r\n");
    }
    c.expect(b"stats nonsense\r\n", b"ERROR\r\n");
    c.expect(b"cache_memlimit 50\r\n", b"OK\r\n");
    c.expect(
        b"cache_memlimit 7\r\n",
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
    );
    c.expect(b"cache_memlimit x\r\n", b"ERROR\r\n");
}

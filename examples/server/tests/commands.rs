//! Every command's exact reply bytes over a raw socket, against the real
//! server binary: classic commands, noreply, errors, meta commands,
//! pipelining, and the data port's `stats`.

mod common;
use common::memcached::Memcached;
use common::{stat, Conn, Server};
use std::collections::HashMap;

fn cas_of(reply: &[u8]) -> u64 {
    // "VALUE k f n cas\r\n..."
    let line = reply.split(|&b| b == b'\r').next().unwrap();
    let text = std::str::from_utf8(line).unwrap();
    text.split(' ').nth(4).unwrap().parse().unwrap()
}

#[test]
fn classic_commands_exact_replies() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.expect(b"set k 7 0 5\r\nhello\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"VALUE k 7 5\r\nhello\r\nEND\r\n");
    c.expect(b"get nope\r\n", b"END\r\n");
    c.expect(
        b"get k nope k\r\n",
        b"VALUE k 7 5\r\nhello\r\nVALUE k 7 5\r\nhello\r\nEND\r\n",
    );
    c.send(b"gets k\r\n");
    let reply = c.read_until_end(b"END\r\n");
    assert!(reply.starts_with(b"VALUE k 7 5 "), "{reply:?}");
    assert!(reply.ends_with(b"\r\nhello\r\nEND\r\n"));
    let cas = cas_of(&reply);
    c.expect(
        format!("cas k 1 0 2 {}\r\nhi\r\n", cas + 1).as_bytes(),
        b"EXISTS\r\n",
    );
    c.expect(
        format!("cas k 1 0 2 {cas}\r\nhi\r\n").as_bytes(),
        b"STORED\r\n",
    );
    c.expect(
        format!("cas k 1 0 2 {cas}\r\nho\r\n").as_bytes(),
        b"EXISTS\r\n",
    );
    c.expect(b"cas missing 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n");
    c.expect(b"get k\r\n", b"VALUE k 1 2\r\nhi\r\nEND\r\n");
    c.expect(b"add k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"add a 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b"replace b 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"replace a 3 0 1\r\ny\r\n", b"STORED\r\n");
    c.expect(b"append a 0 0 2\r\nzz\r\n", b"STORED\r\n");
    c.expect(b"prepend a 0 0 2\r\nww\r\n", b"STORED\r\n");
    c.expect(b"append nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"prepend nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"get a\r\n", b"VALUE a 3 5\r\nwwyzz\r\nEND\r\n");
    c.expect(b"set n 0 0 2\r\n10\r\n", b"STORED\r\n");
    c.expect(b"incr n 5\r\n", b"15\r\n");
    c.expect(b"decr n 100\r\n", b"0\r\n");
    c.expect(
        b"incr n 18446744073709551615\r\n",
        b"18446744073709551615\r\n",
    );
    c.expect(b"incr n 1\r\n", b"0\r\n");
    c.expect(b"incr nope 1\r\n", b"NOT_FOUND\r\n");
    c.expect(b"decr nope 1\r\n", b"NOT_FOUND\r\n");
    c.expect(
        b"incr a 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.expect(
        b"incr n x\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.expect(b"touch a 100\r\n", b"TOUCHED\r\n");
    c.expect(b"touch nope 100\r\n", b"NOT_FOUND\r\n");
    c.expect(b"gat 0 a\r\n", b"VALUE a 3 5\r\nwwyzz\r\nEND\r\n");
    c.send(b"gats 100 a nope\r\n");
    let reply = c.read_until_end(b"END\r\n");
    assert!(reply.starts_with(b"VALUE a 3 5 ") && reply.ends_with(b"\r\nwwyzz\r\nEND\r\n"));
    c.expect(b"gat 100 nope\r\n", b"END\r\n");
    c.expect(b"delete a\r\n", b"DELETED\r\n");
    c.expect(b"delete a\r\n", b"NOT_FOUND\r\n");
    c.expect(b"delete k 0\r\n", b"DELETED\r\n");
    c.expect(
        b"delete k 5\r\n",
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
    );
    c.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    // As memccapable requires (memcached 1.6.18 would answer VERSION).
    c.expect(b"version foo bar\r\n", b"ERROR\r\n");
    c.expect(b"quit now\r\n", b"ERROR\r\n");
    c.expect(b"verbosity 1\r\n", b"OK\r\n");
    c.expect(b"flush_all\r\n", b"OK\r\n");
    c.expect(b"get n\r\n", b"END\r\n");
    c.expect(b"flush_all 0\r\n", b"OK\r\n");
    c.expect(b"bogus\r\n", b"ERROR\r\n");
    c.expect(b"get\r\n", b"ERROR\r\n");
    c.expect(b"set k 0 0\r\n", b"ERROR\r\n");
    c.expect(
        b"set k abc 0 1\r\nx\r\n",
        b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nxyz\r\n",
        // The rest of the bad chunk ("\r\n") is read as an (empty) command.
        b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    );
    c.expect(b"stats nonsense\r\n", b"ERROR\r\n");
    let long_key = "x".repeat(251);
    c.expect(
        format!("get {long_key}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    );
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.send(b"quit\r\n");
    assert!(c.closed(), "quit closes the connection");
}

#[test]
fn expiry_rules() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    // Negative exptime: stored, and gone at once.
    c.expect(b"set e 0 -1 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b"get e\r\n", b"END\r\n");
    // An absolute time in the past is expired too; one in the future is not.
    c.expect(b"set p 0 1000000000 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b"get p\r\n", b"END\r\n");
    let future = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    c.expect(
        format!("set f 0 {future} 1\r\nx\r\n").as_bytes(),
        b"STORED\r\n",
    );
    c.expect(b"get f\r\n", b"VALUE f 0 1\r\nx\r\nEND\r\n");
    c.send(b"mg f t\r\n");
    let reply = String::from_utf8(c.read_until_end(b"\r\n")).unwrap();
    let ttl: u64 = reply.trim().strip_prefix("HD t").unwrap().parse().unwrap();
    assert!((3500..=3600).contains(&ttl), "{reply}");
    // touch with a negative exptime expires the item.
    c.expect(b"touch f -1\r\n", b"TOUCHED\r\n");
    c.expect(b"get f\r\n", b"END\r\n");
    // gat with a negative exptime returns the item once.
    c.expect(b"set g 0 0 1\r\ny\r\n", b"STORED\r\n");
    c.expect(b"gat -1 g\r\n", b"VALUE g 0 1\r\ny\r\nEND\r\n");
    c.expect(b"get g\r\n", b"END\r\n");
}

#[test]
fn noreply_everywhere() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.send(
        b"set a 0 0 1 noreply\r\n1\r\n\
          add b 0 0 1 noreply\r\n2\r\n\
          add b 0 0 1 noreply\r\n9\r\n\
          replace b 0 0 1 noreply\r\n3\r\n\
          append b 0 0 1 noreply\r\n4\r\n\
          prepend b 0 0 1 noreply\r\n5\r\n\
          incr a 10 noreply\r\n\
          decr a 1 noreply\r\n\
          touch a 100 noreply\r\n\
          cas a 0 0 1 1 noreply\r\nx\r\n\
          delete nope noreply\r\n\
          set c 0 0 1 noreply\r\n1\r\n\
          delete c noreply\r\n\
          verbosity 1 noreply\r\n\
          incr b 1 noreply\r\n\
          get a b c\r\n",
    );
    assert_eq!(
        c.read_until_end(b"END\r\n"),
        b"VALUE a 0 2\r\n10\r\nVALUE b 0 3\r\n535\r\nEND\r\n"
    );
    c.send(b"flush_all noreply\r\nget a\r\n");
    assert_eq!(c.read_until_end(b"END\r\n"), b"END\r\n");
}

#[test]
fn pipelined_replies_in_order() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for i in 0..2000 {
        req.extend_from_slice(
            format!("set k{i} 0 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
        );
        expected.extend_from_slice(b"STORED\r\n");
        req.extend_from_slice(format!("get k{i}\r\nversion\r\n").as_bytes());
        expected.extend_from_slice(
            format!(
                "VALUE k{i} 0 {}\r\nv{i}\r\nEND\r\nVERSION 0.1.0\r\n",
                format!("v{i}").len()
            )
            .as_bytes(),
        );
    }
    c.send(&req);
    let got = c.read_n(expected.len());
    assert!(got == expected, "pipelined replies differ");
}

#[test]
fn meta_commands() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.expect(b"mn\r\n", b"MN\r\n");
    c.expect(b"ms m 2 F5 T0\r\nhi\r\n", b"HD\r\n");
    c.expect(b"ms m 2 q\r\nhi\r\nmn\r\n", b"MN\r\n");
    c.expect(b"ms m 2 F5 Oab k\r\nhi\r\n", b"HD Oab km\r\n");
    c.expect(b"mg m v f\r\n", b"VA 2 f5\r\nhi\r\n");
    c.expect(b"mg m\r\n", b"HD\r\n");
    c.expect(b"mg m s t k O1\r\n", b"HD s2 t-1 km O1\r\n");
    c.expect(b"mg nope v\r\n", b"EN\r\n");
    c.expect(b"mg nope v q\r\nmn\r\n", b"MN\r\n");
    c.expect(b"mg nope v k Oz\r\n", b"EN knope Oz\r\n");
    c.send(b"mg m c\r\n");
    let reply = String::from_utf8(c.read_until_end(b"\r\n")).unwrap();
    let cas: u64 = reply.trim().strip_prefix("HD c").unwrap().parse().unwrap();
    c.expect(
        format!("ms m 1 C{}\r\nx\r\n", cas + 1).as_bytes(),
        b"EX\r\n",
    );
    c.expect(format!("ms m 1 C{cas}\r\nx\r\n").as_bytes(), b"HD\r\n");
    c.expect(b"ms nope 1 C1\r\nx\r\n", b"NF\r\n");
    c.expect(b"ms m 1 ME\r\ny\r\n", b"NS\r\n");
    c.expect(b"ms m 1 MA\r\ny\r\n", b"HD\r\n");
    c.expect(b"ms m 1 MP\r\nw\r\n", b"HD\r\n");
    c.expect(b"ms new 1 MR\r\nw\r\n", b"NS\r\n");
    c.expect(b"mg m v\r\n", b"VA 3\r\nwxy\r\n");
    // A rejected ms swallows its data block, as memcached.
    c.expect(
        b"ms m 1 MZ\r\ny\r\n",
        b"CLIENT_ERROR invalid mode for ms M token\r\n",
    );
    c.expect(b"ma cnt\r\n", b"NF\r\n");
    c.expect(b"ms cnt 1\r\n5\r\n", b"HD\r\n");
    c.expect(b"ma cnt\r\n", b"HD\r\n");
    c.expect(b"ma cnt v D10\r\n", b"VA 2\r\n16\r\n");
    c.expect(b"ma cnt v MD D100 Ox\r\n", b"VA 1 Ox\r\n0\r\n");
    c.expect(
        b"ma m\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.expect(b"md cnt\r\n", b"HD\r\n");
    c.expect(b"md cnt\r\n", b"NF\r\n");
    // `q` hides success only: memcached shows NF on md (issue 11).
    c.expect(b"md cnt q\r\nmn\r\n", b"NF\r\nMN\r\n");
    c.expect(b"md m k Oq\r\n", b"HD km Oq\r\n");
    // Touch through mg T, expire through mg T-1.
    c.expect(b"ms t 1\r\nx\r\n", b"HD\r\n");
    c.send(b"mg t T100 t v\r\n");
    let reply = String::from_utf8(c.read_until_end(b"x\r\n")).unwrap();
    assert!(reply.starts_with("VA 1 t"), "{reply}");
    c.expect(b"mg t T-1 v\r\n", b"VA 1\r\nx\r\n");
    c.expect(b"mg t v\r\n", b"EN\r\n");
    // Vivify on a miss: an empty item and the win token (memcached 1.6.18).
    c.expect(b"mg t N30 v\r\n", b"VA 0 W\r\n\r\n");
    // Letters memcached does not know are refused, not ignored.
    c.expect(b"mg t x v\r\n", b"CLIENT_ERROR invalid flag\r\n");
    c.expect(b"mg t v v\r\n", b"CLIENT_ERROR duplicate flag\r\n");
}

/// The `STAT` blocks of a reply, in order, as field -> value maps; and
/// where each `RESET` line came among them (its index in the blocks).
fn stat_blocks(reply: &str) -> (Vec<HashMap<String, String>>, Vec<usize>) {
    let (mut blocks, mut resets, mut open) = (Vec::new(), Vec::new(), None);
    for line in reply.split("\r\n") {
        let mut w = line.split(' ');
        match w.next() {
            Some("STAT") => {
                let (k, v) = (w.next().unwrap(), w.next().unwrap_or(""));
                let block: &mut HashMap<_, _> = open.get_or_insert_with(HashMap::new);
                block.insert(k.to_string(), v.to_string());
            }
            Some("END") => blocks.extend(open.take()),
            Some("RESET") => resets.push(blocks.len()),
            _ => {}
        }
    }
    (blocks, resets)
}

/// `stats reset` against memcached itself: one pipelined stream sent to
/// both; each `stats` must report what memcached's does for the counters
/// both servers keep, counting from the reset (and only the commands
/// before the `stats` in the stream). Gauges are not reset.
#[test]
fn stats_reset_counts_from_the_reset_as_memcached_does() {
    let Some(mc) = Memcached::start(&[]) else {
        return;
    };
    let ours = Server::start(&[]);
    let stream: &[u8] = b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\ndelete b\r\n\
        touch a 100\r\ntouch b 100\r\nstats\r\nstats reset\r\nstats\r\n\
        get a\r\ngets b\r\nset c 0 0 1\r\n1\r\nincr c 5\r\ndecr nope 1\r\n\
        cas c 0 0 1 999\r\n2\r\ncas d 0 0 1 1\r\n3\r\ndelete a\r\nstats\r\n\
        stats reset\r\nget c\r\nstats\r\nmn\r\n";
    let run = |addr| {
        let mut c = Conn::new(addr);
        c.send(stream);
        String::from_utf8(c.read_until_end(b"MN\r\n")).unwrap()
    };
    let (want, want_resets) = stat_blocks(&run(mc.addr));
    let (got, got_resets) = stat_blocks(&run(ours.addr));
    assert_eq!(want.len(), 4, "memcached's reply");
    assert_eq!(got.len(), 4, "our reply");
    assert_eq!(got_resets, want_resets, "where RESET came");
    let counters = [
        "cmd_get",
        "cmd_set",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "curr_items",
        "total_items",
        "evictions",
    ];
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        // Connections made before the stream (each server's start-up
        // probe) differ; from a reset on, both count none.
        let fields = counters
            .iter()
            .chain((i > 0).then_some(&"total_connections"));
        for field in fields {
            assert_eq!(g.get(*field), w.get(*field), "{field} in stats reply {i}");
        }
    }
    // The reset zeroed the counters, not the gauges.
    assert_eq!(got[1]["cmd_get"], "0");
    assert_eq!(got[1]["curr_items"], "1");
    assert_ne!(got[2]["get_hits"], "0");
}

/// A value the parser takes (it is within `item_size_max`) that still
/// cannot fit one segment under its key and flags is refused as an
/// oversized one is: `set` and `ms` unlink the key's old item, as memcached
/// does after any refused set (no stale value outlives the failed
/// overwrite); `add`, `cas`, `append` keep it.
#[test]
fn a_value_too_large_for_its_key_is_refused_as_an_oversized_one() {
    const SEGMENT: usize = 64 << 10;
    let server = Server::start(&["--heap-size", "16MiB", "--segment-size", "64KiB"]);
    let mut c = server.connect();
    let store = |cmd: &str, len: usize| {
        let mut req = format!("{cmd} {len}\r\n").into_bytes();
        req.resize(req.len() + len, b'v');
        req.extend_from_slice(b"\r\n");
        req
    };
    const REFUSED: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
    // An item whose value is 256 bytes or more is a 5-byte header, the
    // flags (4 bytes, when not 0), the key and the value; the largest value
    // for key "k" fits, one more does not.
    let largest = SEGMENT - 5 - 1;
    assert_eq!(segcache::max_value_len(SEGMENT, 1, 0), largest);
    c.expect(&store("set k 0 0", largest), b"STORED\r\n");
    c.expect(b"mg k s\r\n", format!("HD s{largest}\r\n").as_bytes());
    c.expect(&store("set k 0 0", largest + 1), REFUSED);
    c.expect(b"mg k s\r\n", b"EN\r\n");
    // With flags, 4 bytes less; `ms` unlinks in any mode, and says so
    // even with `q`.
    c.expect(b"set k 0 0 3\r\nold\r\n", b"STORED\r\n");
    c.expect(&store("set k 1 0", largest - 4 + 1), REFUSED);
    c.expect(b"get k\r\n", b"END\r\n");
    for ms in ["ms k S{} F1", "ms k S{} F1 MA q", "ms k S{} F1 ME"] {
        c.expect(b"set k 0 0 3\r\nold\r\n", b"STORED\r\n");
        let len = largest - 4 + 1;
        let mut req = ms.replace("S{}", &len.to_string()).into_bytes();
        req.extend_from_slice(b"\r\n");
        req.resize(req.len() + len, b'v');
        req.extend_from_slice(b"\r\n");
        c.expect(&req, REFUSED);
        c.expect(b"mg k v\r\n", b"EN\r\n");
    }
    c.expect(&store("set k 1 0", largest - 4), b"STORED\r\n");
    // memcached unlinks after a refused `set` only: `cas`, `add`, `replace`
    // and `append` leave the item as it was (a failed operation changes
    // nothing), and `noreply` refuses silently but still unlinks.
    c.expect(b"set k 0 0 3\r\nold\r\n", b"STORED\r\n");
    for cmd in [
        "cas k 0 0 {} 1",
        "add k 0 0 {}",
        "replace k 0 0 {}",
        "append k 0 0 {}",
    ] {
        let (head, tail) = cmd.split_once(" {}").unwrap();
        let mut req = store(head, largest + 1);
        if !tail.is_empty() {
            let at = req.iter().position(|&b| b == b'\r').unwrap();
            req.splice(at..at, tail.bytes());
        }
        c.expect(&req, REFUSED);
        c.expect(b"get k\r\n", b"VALUE k 0 3\r\nold\r\nEND\r\n");
    }
    let mut quiet = store("set k 0 0", largest + 1);
    let at = quiet.iter().position(|&b| b == b'\r').unwrap();
    quiet.splice(at..at, *b" noreply");
    c.send(&quiet);
    c.expect(b"get k\r\n", b"END\r\n");
    assert_eq!(stat(&mut c, "too_large").as_deref(), Some("10"));
}

/// `shutdown` without `--enable-shutdown` is refused word for word as
/// memcached refuses it without `-A`, whatever its arguments.
#[test]
fn shutdown_is_refused_as_memcached_refuses_it() {
    let Some(mc) = Memcached::start(&[]) else {
        return;
    };
    let ours = Server::start(&[]);
    let stream: &[u8] = b"shutdown\r\nshutdown graceful\r\nshutdown now please\r\nmn\r\n";
    let reply = |addr| {
        let mut c = Conn::new(addr);
        c.send(stream);
        c.read_until_end(b"MN\r\n")
    };
    let want = reply(mc.addr);
    assert!(
        want.starts_with(b"ERROR: shutdown not enabled\r\n"),
        "{want:?}"
    );
    assert_eq!(String::from_utf8(reply(ours.addr)), String::from_utf8(want));
}

#[test]
fn data_port_stats() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.expect(b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n");
    c.expect(b"get b\r\n", b"END\r\n");
    c.send(b"stats\r\n");
    let reply = String::from_utf8(c.read_until_end(b"END\r\n")).unwrap();
    for field in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "curr_items",
        "bytes",
        "limit_maxbytes",
        "evictions",
        "expirations",
        "threads",
    ] {
        assert!(
            reply.contains(&format!("STAT {field} ")),
            "missing {field} in {reply}"
        );
    }
    assert_eq!(stat(&mut c, "get_hits").as_deref(), Some("1"));
    assert_eq!(stat(&mut c, "get_misses").as_deref(), Some("1"));
    assert_eq!(stat(&mut c, "cmd_set").as_deref(), Some("1"));
    assert_eq!(stat(&mut c, "curr_items").as_deref(), Some("1"));
    assert_eq!(stat(&mut c, "curr_connections").as_deref(), Some("1"));
    assert_eq!(stat(&mut c, "threads").as_deref(), Some("2"));
    assert_eq!(stat(&mut c, "limit_maxbytes").as_deref(), Some("67108864"));
}

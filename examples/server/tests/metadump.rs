//! `lru_crawler metadump`, the key dump operators and `memcached-tool
//! keys|dump` use: the same listing as memcached's for the same writes, a
//! large cache answered a slice of segments at a time in order (every
//! server shape), pipelined commands after it answered after it.

mod common;
use common::memcached::Memcached;
use common::{Conn, Server};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// The server shapes: storage thread, one worker owning the cache, and
/// workers sharing a sharded cache.
const SHAPES: [&[&str]; 3] = [
    &["--workers", "2"],
    &["--workers", "1"],
    &["--workers", "2", "--shared-cache"],
];

/// The dump's lines as key -> (exp, fetch), and what came after `END`.
fn dump(addr: SocketAddr, then: &[u8], end: &[u8]) -> (BTreeMap<String, (i64, String)>, Vec<u8>) {
    let mut req = b"lru_crawler metadump all\r\n".to_vec();
    req.extend_from_slice(then);
    // memcached answers BUSY while its own crawler runs (it starts one on
    // its own now and then): ask again, a bounded number of times.
    let mut reply = Vec::new();
    for _ in 0..50 {
        let mut c = Conn::new(addr);
        c.send(&req);
        reply =
            c.read_until(|r| r.ends_with(end) || (r.starts_with(b"BUSY") && r.ends_with(b"\r\n")));
        if !reply.starts_with(b"BUSY") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let at = reply
        .windows(5)
        .position(|w| w == b"END\r\n")
        .unwrap_or_else(|| panic!("no END in {} bytes", reply.len()));
    let mut lines = BTreeMap::new();
    for line in std::str::from_utf8(&reply[..at]).unwrap().lines() {
        let fields: BTreeMap<&str, &str> = line
            .split(' ')
            .map(|f| {
                f.split_once('=')
                    .unwrap_or_else(|| panic!("field {f:?} in {line:?}"))
            })
            .collect();
        for name in ["key", "exp", "la", "cas", "fetch", "cls", "size"] {
            assert!(fields.contains_key(name), "{name} missing in {line:?}");
        }
        let key = fields["key"].to_string();
        let was = lines.insert(
            key.clone(),
            (fields["exp"].parse().unwrap(), fields["fetch"].into()),
        );
        assert!(was.is_none(), "{key} listed twice");
    }
    (lines, reply[at + 5..].to_vec())
}

#[test]
fn the_dump_lists_what_memcached_lists() {
    let Some(mc) = Memcached::start(&[]) else {
        return;
    };
    let ours = Server::start(&[]);
    // Keys memcached's URI encoding changes, TTLs, flags, reads, an
    // overwrite, a delete and an expired store.
    let writes: &[u8] = b"set plain 0 0 1\r\na\r\nset a%b 3 100 2\r\nbb\r\n\
        set \xc3\xa9t~_.-Z9 0 0 1\r\nc\r\nset gone 0 0 1\r\nd\r\ndelete gone\r\n\
        set again 0 0 1\r\ne\r\nset again 0 500 2\r\nee\r\nset past 0 -1 1\r\nf\r\n\
        get plain a%b\r\ntouch again 1000\r\nmn\r\n";
    for addr in [mc.addr, ours.addr] {
        let mut c = Conn::new(addr);
        c.send(writes);
        c.read_until_end(b"MN\r\n");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (want, _) = dump(mc.addr, b"", b"END\r\n");
    let (got, _) = dump(ours.addr, b"", b"END\r\n");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (key, (exp, fetch)) in &want {
        let (our_exp, our_fetch) = &got[key];
        assert_eq!(our_fetch, fetch, "fetch of {key}");
        if *exp == -1 {
            assert_eq!(*our_exp, -1, "exp of {key}");
        } else {
            // Absolute deadlines: the same within the core's TTL precision.
            assert!(
                (our_exp - exp).abs() <= 2 + (exp - now) / 16,
                "exp of {key}: {our_exp} vs {exp}"
            );
        }
    }
}

/// memcached's own tool, `memcached-tool HOST:PORT dump`, reads the key
/// dump and then every value: its output from both servers is the same.
#[test]
fn memcached_tool_dumps_the_same_contents() {
    let tool = "/usr/share/memcached/scripts/memcached-tool";
    if !std::path::Path::new(tool).exists() {
        eprintln!("SKIPPED: {tool} is not installed (apt-get install memcached)");
        return;
    }
    let Some(mc) = Memcached::start(&[]) else {
        return;
    };
    let ours = Server::start(&[]);
    for addr in [mc.addr, ours.addr] {
        let mut c = Conn::new(addr);
        c.send(b"set k1 5 0 2\r\nv1\r\nset k2 0 0 3\r\nv22\r\nset k%3 9 0 0\r\n\r\nmn\r\n");
        c.read_until_end(b"MN\r\n");
    }
    let run = |addr: SocketAddr| {
        let out = std::process::Command::new("timeout")
            .args(["20", "perl", tool, &addr.to_string(), "dump"])
            .output()
            .ok()
            .filter(|out| out.status.success())?;
        let mut records: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split("add ")
            .filter(|r| !r.is_empty())
            .map(String::from)
            .collect();
        records.sort();
        Some(records)
    };
    let Some(want) = run(mc.addr) else {
        eprintln!("SKIPPED: memcached-tool does not run here (perl?)");
        return;
    };
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(
        run(ours.addr).as_ref(),
        Some(&want),
        "memcached-tool on our server"
    );
}

/// A dump of many segments, through a small per-connection output limit,
/// comes a slice at a time: every key once, then `END`, then the replies
/// to what was pipelined after it.
#[test]
fn a_large_dump_comes_in_slices_and_in_order() {
    const KEYS: usize = 60_000;
    for shape in SHAPES {
        let args = [
            shape,
            &[
                "--heap-size",
                "16MiB",
                "--segment-size",
                "32KiB",
                "--max-conn-output",
                "64KiB",
            ],
        ]
        .concat();
        let server = Server::start(&args);
        let mut c = Conn::new(server.addr);
        let mut writes = Vec::new();
        for i in 0..KEYS {
            writes.extend_from_slice(format!("set key:{i} 0 0 8 noreply\r\n{i:08}\r\n").as_bytes());
        }
        writes.extend_from_slice(b"mn\r\n");
        c.send(&writes);
        c.read_until_end(b"MN\r\n");
        let (lines, after) = dump(server.addr, b"get key:7\r\nmn\r\n", b"MN\r\n");
        assert_eq!(lines.len(), KEYS, "{shape:?}");
        assert!(
            lines.contains_key("key%3A0") && lines.contains_key(&format!("key%3A{}", KEYS - 1))
        );
        assert_eq!(
            after, b"VALUE key:7 0 8\r\n00000007\r\nEND\r\nMN\r\n",
            "{shape:?}"
        );
    }
}

#[test]
fn class_ids_and_other_crawler_commands() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    // Every item is in class 1: a list naming it lists everything.
    c.send(b"lru_crawler metadump 1,2\r\n");
    let one = c.read_until_end(b"END\r\n");
    assert!(one.starts_with(b"key=k exp=-1 la=0 cas="), "{one:?}");
    c.expect(
        b"lru_crawler metadump hash\r\nmn\r\n",
        &[&one[..], b"MN\r\n"].concat(),
    );
    // A crawl reclaims what has expired (segments expire whole on their
    // own too); the item stays.
    c.expect(b"lru_crawler crawl all\r\n", b"OK\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
    c.expect(
        b"lru_crawler metadump 2\r\n",
        b"BADCLASS invalid class id\r\n",
    );
    c.expect(
        b"lru_crawler crawl hash\r\n",
        b"BADCLASS invalid class id\r\n",
    );
}

/// Refused crawler commands are refused word for word as memcached
/// refuses them: classes it does not have, and malformed lines.
#[test]
fn crawler_replies_match_memcached() {
    let Some(mc) = Memcached::start(&[]) else {
        return;
    };
    let ours = Server::start(&[]);
    // One at a time (memcached refuses a dump pipelined behind other
    // commands), and no crawl or dump that runs (memcached's crawler is
    // asynchronous and answers BUSY to the next one while it works).
    let lines = [
        "lru_crawler crawl 99",
        "lru_crawler crawl x",
        "lru_crawler crawl",
        "lru_crawler metadump",
        "lru_crawler metadump 99",
        "lru_crawler metadump foo",
        "lru_crawler metadump all extra",
        "lru_crawler",
    ];
    let replies = |addr| {
        let mut c = Conn::new(addr);
        lines
            .iter()
            .map(|line| {
                c.send(format!("{line}\r\n").as_bytes());
                String::from_utf8(c.read_until_end(b"\r\n")).unwrap()
            })
            .collect::<Vec<_>>()
    };
    let want = replies(mc.addr);
    assert_eq!(want[0], "BADCLASS invalid class id\r\n");
    assert_eq!(replies(ours.addr), want);
}

/// A dump nobody reads stops where the connection's output limit is: the
/// server holds about `--max-conn-output` for it, not the whole listing,
/// and answers other clients meanwhile.
#[test]
fn a_dump_nobody_reads_holds_about_the_output_limit() {
    use std::io::Write;
    const KEYS: usize = 400_000;
    let server = Server::start(&["--heap-size", "64MiB", "--max-conn-output", "1MiB"]);
    let mut c = server.connect();
    let mut writes = Vec::new();
    for i in 0..KEYS {
        writes
            .extend_from_slice(format!("set key:{i:07} 0 0 2 noreply\r\nab\r\nmn\r\n").as_bytes());
    }
    c.send(&writes);
    for _ in 0..KEYS {
        c.read_n(4);
    }
    let before = common::rss(server.pid());
    // About 64 bytes of listing per item: 25 MB if it were all buffered.
    let mut stalled = common::stubborn(server.addr);
    stalled.write_all(b"lru_crawler metadump all\r\n").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    c.expect(
        b"get key:0000007\r\n",
        b"VALUE key:0000007 0 2\r\nab\r\nEND\r\n",
    );
    let grown = common::rss(server.pid()).saturating_sub(before);
    assert!(
        grown < 12 << 20,
        "RSS grew {grown} bytes for a stalled dump"
    );
    drop(stalled);
}

/// Writes that evict and overwrite while a dump walks the cache: the dump
/// still ends with `END` and well-formed lines (an item moved meanwhile
/// may be listed twice or missed, as with memcached's crawler), in every
/// server shape.
#[test]
fn a_dump_during_eviction_churn_ends_well_formed() {
    for shape in SHAPES {
        let args = [
            shape,
            &[
                "--heap-size",
                "4MiB",
                "--segment-size",
                "16KiB",
                "--max-conn-output",
                "64KiB",
            ],
        ]
        .concat();
        let server = Server::start(&args);
        let addr = server.addr;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Conn::new(addr);
                let mut round = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && round < 200 {
                    let mut writes = Vec::new();
                    for i in 0..2000u64 {
                        let key = (round * 2000 + i) % 150_000;
                        writes
                            .extend_from_slice(format!("set k{key} 0 0 40 noreply\r\n").as_bytes());
                        writes.extend_from_slice(&[b'v'; 40]);
                        writes.extend_from_slice(b"\r\n");
                    }
                    writes.extend_from_slice(b"mn\r\n");
                    c.send(&writes);
                    c.read_until_end(b"MN\r\n");
                    round += 1;
                }
            })
        };
        for _ in 0..5 {
            let mut c = Conn::new(addr);
            c.send(b"lru_crawler metadump all\r\nmn\r\n");
            let reply = c.read_until_end(b"END\r\nMN\r\n");
            assert!(reply.ends_with(b"END\r\nMN\r\n"), "{shape:?}: no END");
            let body = &reply[..reply.len() - 9];
            for line in std::str::from_utf8(body).unwrap().lines() {
                assert!(
                    line.starts_with("key=k") && line.contains(" cls=1 size="),
                    "{line:?}"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        let mut c = Conn::new(addr);
        c.expect(b"set after 0 0 1\r\nx\r\n", b"STORED\r\n");
    }
}

/// A small `--max-value` allows a buffer budget smaller than a segment:
/// the dump still comes whole, in smaller slices.
#[test]
fn a_dump_fits_a_budget_smaller_than_a_segment() {
    let server = Server::start(&[
        "--workers",
        "2",
        "--max-value",
        "1KiB",
        "--max-buffered",
        "1MiB",
        "--segment-size",
        "1MiB",
        "--heap-size",
        "64MiB",
    ]);
    let mut c = Conn::new(server.addr);
    let mut writes = Vec::new();
    for i in 0..20_000 {
        writes.extend_from_slice(format!("set key:{i} 0 0 2 noreply\r\nab\r\n").as_bytes());
    }
    writes.extend_from_slice(b"mn\r\n");
    c.send(&writes);
    c.read_until_end(b"MN\r\n");
    let (lines, after) = dump(server.addr, b"mn\r\n", b"MN\r\n");
    assert_eq!(lines.len(), 20_000);
    assert_eq!(after, b"MN\r\n");
}

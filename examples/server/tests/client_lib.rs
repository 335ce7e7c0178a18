//! The server driven by a real memcache client library (the `memcache`
//! crate, ASCII protocol): set/get/gets/cas/delete/incr/touch/flush and the
//! rest of its API, over several connections of its pool.

mod common;
use common::Server;
use std::time::Duration;

fn client(server: &Server) -> memcache::Client {
    let url = format!(
        "memcache://{}?protocol=ascii&timeout=10&tcp_nodelay=true",
        server.addr
    );
    let c = memcache::Client::connect(url).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

#[test]
fn memcache_crate_round_trips() {
    let server = Server::start(&[]);
    let c = client(&server);
    assert!(!c.version().unwrap().is_empty());

    c.set("greeting", "hello", 0).unwrap();
    assert_eq!(
        c.get::<String>("greeting").unwrap().as_deref(),
        Some("hello")
    );
    assert_eq!(c.get::<String>("missing").unwrap(), None);

    // gets with cas tokens, then cas: the stale token loses.
    let got: std::collections::HashMap<String, (Vec<u8>, u32, Option<u64>)> =
        c.gets(&["greeting", "missing"]).unwrap();
    assert_eq!(got.len(), 1);
    let (value, _flags, cas) = &got["greeting"];
    assert_eq!(value, b"hello");
    let cas = cas.expect("gets returns a cas token");
    assert!(c.cas("greeting", "bonjour", 0, cas).unwrap());
    assert!(!c.cas("greeting", "hola", 0, cas).unwrap());
    assert_eq!(
        c.get::<String>("greeting").unwrap().as_deref(),
        Some("bonjour")
    );

    // add / replace / append / prepend
    // (The crate reports NOT_STORED as Ok for add/replace: check values.)
    c.add("fresh", "1", 0).unwrap();
    c.add("fresh", "2", 0).unwrap();
    assert_eq!(c.get::<String>("fresh").unwrap().as_deref(), Some("1"));
    c.replace("fresh", "3", 0).unwrap();
    c.replace("nobody", "3", 0).unwrap();
    assert_eq!(c.get::<String>("nobody").unwrap(), None);
    c.append("fresh", "4").unwrap();
    c.prepend("fresh", "2").unwrap();
    assert_eq!(c.get::<String>("fresh").unwrap().as_deref(), Some("234"));

    // incr / decr
    c.set("counter", 41u64, 0).unwrap();
    assert_eq!(c.increment("counter", 1).unwrap(), 42);
    assert_eq!(c.decrement("counter", 50).unwrap(), 0);
    assert!(c.increment("nocounter", 1).is_err());

    // touch / delete
    assert!(c.touch("counter", 100).unwrap());
    assert!(!c.touch("nobody", 100).unwrap());
    assert!(c.delete("counter").unwrap());
    assert!(!c.delete("counter").unwrap());

    // Binary-safe values and flags survive.
    let blob: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    c.set("blob", &blob[..], 0).unwrap();
    assert_eq!(
        c.get::<Vec<u8>>("blob").unwrap().as_deref(),
        Some(&blob[..])
    );

    // flush
    c.flush().unwrap();
    assert_eq!(c.get::<String>("greeting").unwrap(), None);
    assert_eq!(c.get::<String>("fresh").unwrap(), None);
    // (Not `stats()`: memcache 0.17's ASCII stats parser stops at the first
    // line whatever the server says; `tests/commands.rs` covers stats.)
}

#[test]
fn memcache_crate_many_threads() {
    let server = Server::start(&[]);
    let url = format!("memcache://{}?protocol=ascii&timeout=10", server.addr);
    std::thread::scope(|s| {
        for t in 0..4 {
            let url = url.clone();
            s.spawn(move || {
                let c = memcache::Client::connect(url).expect("connect");
                for i in 0..200 {
                    let key = format!("t{t}-{i}");
                    c.set(&key, i as u64, 0).unwrap();
                    assert_eq!(c.get::<u64>(&key).unwrap(), Some(i as u64));
                }
            });
        }
    });
}

//! Memcache semantics of the operation vocabulary, each run as one step:
//! the regressions of failed conditional stores, CAS tokens kept by
//! touches, meta-protocol win tokens and stale items, and the TTL
//! precision bound over the whole TTL range.

use segcache::ops::{ArithOpts, DeleteOpts, GetOpts};
use segcache::{Error, ManualClock, Request, Response, Segcache, Store, StoreMode, Ttl};
use std::time::Duration;

fn cache() -> (Segcache, ManualClock) {
    let clock = ManualClock::new();
    let cache = Segcache::builder()
        .heap_size(8 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .build()
        .unwrap();
    (cache, clock)
}

fn store(mode: StoreMode, key: &str, value: &str, ttl: Ttl, cas: Option<u64>) -> Request<Vec<u8>> {
    Request::Store(Store {
        ttl,
        cas,
        ..Store::new(mode, key.into(), value.into())
    })
}

fn value(c: &mut Segcache, key: &str) -> Option<Vec<u8>> {
    c.get(key).map(|i| i.value().to_vec())
}

#[test]
fn a_failed_conditional_store_with_an_expired_ttl_loses_nothing() {
    let (mut c, _) = cache();
    c.set("k", "v", 0, None).unwrap();
    let stale = c.get("k").unwrap().cas() ^ 1;
    for (request, error) in [
        (
            store(StoreMode::Add, "k", "w", Ttl::Expired, None),
            Error::NotStored,
        ),
        (
            store(StoreMode::Set, "k", "w", Ttl::Expired, Some(stale)),
            Error::Exists,
        ),
        (
            store(StoreMode::Replace, "absent", "w", Ttl::Expired, None),
            Error::NotStored,
        ),
        (
            store(StoreMode::Set, "absent", "w", Ttl::Expired, Some(7)),
            Error::NotFound,
        ),
    ] {
        assert_eq!(c.execute(&request), Response::Stored(Err(error)));
        assert_eq!(
            value(&mut c, "k").as_deref(),
            Some(&b"v"[..]),
            "{request:?}"
        );
    }
    assert!(value(&mut c, "absent").is_none());
}

#[test]
fn a_successful_store_with_an_expired_ttl_removes_the_item_in_one_step() {
    let (mut c, _) = cache();
    c.set("k", "v", 0, None).unwrap();
    let token = c.get("k").unwrap().cas();
    let r = c.execute(&store(StoreMode::Set, "k", "w", Ttl::Expired, Some(token)));
    assert_eq!(r, Response::Stored(Ok(0)));
    assert!(value(&mut c, "k").is_none());
    c.set("k", "v", 0, None).unwrap();
    assert_eq!(
        c.execute(&store(StoreMode::Set, "k", "w", Ttl::Expired, None)),
        Response::Stored(Ok(0))
    );
    assert!(value(&mut c, "k").is_none());
    // add of an absent key with an expired TTL succeeds and stores nothing.
    let r = c.execute(&store(StoreMode::Add, "n", "w", Ttl::Expired, None));
    assert_eq!(r, Response::Stored(Ok(0)));
    assert!(value(&mut c, "n").is_none());
}

#[test]
fn append_and_prepend_keep_flags_and_ttl_and_honour_cas() {
    let (mut c, _) = cache();
    c.set("k", "mid", 7, Duration::from_secs(500)).unwrap();
    let token = c.get("k").unwrap().cas();
    let append = Request::Store(Store {
        flags: 99,
        ttl: Ttl::Expired,
        cas: Some(token ^ 1),
        ..Store::new(StoreMode::Append, &b"k"[..], &b"-end"[..])
    });
    assert_eq!(c.execute(&append), Response::Stored(Err(Error::Exists)));
    let append = Request::Store(Store {
        flags: 99,
        ttl: Ttl::Expired,
        cas: Some(token),
        ..Store::new(StoreMode::Append, &b"k"[..], &b"-end"[..])
    });
    assert!(matches!(c.execute(&append), Response::Stored(Ok(t)) if t != token));
    let item = c.get("k").unwrap();
    assert_eq!((item.value(), item.flags()), (&b"mid-end"[..], 7));
    assert!(matches!(item.ttl(), Ttl::After(d) if d > Duration::from_secs(400)));
}

#[test]
fn touch_and_gat_keep_the_cas_token() {
    let (mut c, clock) = cache();
    c.set("k", "v", 3, Duration::from_secs(10)).unwrap();
    let token = c.get("k").unwrap().cas();
    c.touch("k", Duration::from_secs(100_000)).unwrap();
    assert_eq!(c.get("k").unwrap().cas(), token, "touch");
    let gat = Request::Get {
        key: &b"k"[..],
        opts: GetOpts {
            touch: Some(Ttl::secs(2000)),
            token: true,
            ..GetOpts::default()
        },
    };
    let Response::Get(Ok(Some(found))) = c.execute(&gat) else {
        panic!("gat missed")
    };
    assert_eq!((found.item.cas(), found.item.flags()), (token, 3));
    clock.advance(Duration::from_secs(1900));
    let item = c.get("k").unwrap();
    assert_eq!((item.value(), item.cas()), (&b"v"[..], token));
    c.cas("k", "w", 0, None, token).unwrap();
    assert_eq!(value(&mut c, "k").as_deref(), Some(&b"w"[..]));
}

#[test]
fn touch_with_an_expired_ttl_removes_and_gat_still_returns_the_value() {
    let (mut c, _) = cache();
    c.set("k", "v", 0, None).unwrap();
    let gat = Request::Get {
        key: &b"k"[..],
        opts: GetOpts {
            touch: Some(Ttl::Expired),
            ..GetOpts::default()
        },
    };
    let Response::Get(Ok(Some(found))) = c.execute(&gat) else {
        panic!("gat missed")
    };
    assert_eq!(found.item.value(), b"v");
    assert!(c.get("k").is_none());
    c.set("k", "v", 0, None).unwrap();
    c.touch("k", Ttl::Expired).unwrap();
    assert!(c.get("k").is_none());
    assert_eq!(c.touch("k", None), Err(Error::NotFound));
}

#[test]
fn incr_reads_numbers_as_memcached_does() {
    let (mut c, _) = cache();
    for (stored, want) in [
        ("  5", 6),
        ("+5", 6),
        ("5 ", 6),
        ("000000000000000000042", 43),
    ] {
        c.set("n", stored, 0, None).unwrap();
        assert_eq!(c.incr("n", 1), Ok(want), "{stored:?}");
        assert_eq!(value(&mut c, "n"), Some(want.to_string().into_bytes()));
    }
    c.set("n", "x5", 0, None).unwrap();
    assert_eq!(c.incr("n", 1), Err(Error::NotNumeric));
    assert_eq!(value(&mut c, "n").as_deref(), Some(&b"x5"[..]));
}

#[test]
fn arith_refuses_an_empty_value_before_comparing_the_token() {
    // memcached's order (do_add_delta): an empty value is non-numeric
    // before a token is compared; any other value has its token compared
    // first and is read as a number after.
    let (mut c, _) = cache();
    c.set("empty", "", 0, None).unwrap();
    c.set("text", "x5", 0, None).unwrap();
    c.set("n", "5", 0, None).unwrap();
    let stale = |c: &mut Segcache, key: &str| ArithOpts {
        cas: Some(c.get(key).unwrap().cas() ^ 1),
        ..ArithOpts::new(true, 1)
    };
    let opts = stale(&mut c, "empty");
    assert_eq!(c.arith("empty", &opts), Err(Error::NotNumeric));
    let opts = stale(&mut c, "text");
    assert_eq!(c.arith("text", &opts), Err(Error::Exists));
    let opts = stale(&mut c, "n");
    assert_eq!(c.arith("n", &opts), Err(Error::Exists));
    // Nothing changed.
    assert_eq!(value(&mut c, "empty").as_deref(), Some(&b""[..]));
    assert_eq!(value(&mut c, "text").as_deref(), Some(&b"x5"[..]));
    assert_eq!(value(&mut c, "n").as_deref(), Some(&b"5"[..]));
}

#[test]
fn arith_vivifies_compares_and_sets_the_ttl() {
    let (mut c, _) = cache();
    let vivify = ArithOpts {
        vivify: Some((10, Ttl::secs(100))),
        token: true,
        ..ArithOpts::new(true, 5)
    };
    let (v, token) = c.arith("n", &vivify).unwrap();
    assert_eq!(v, 10, "created with the initial value, no delta");
    assert_eq!(c.get("n").unwrap().cas(), token);
    let stale = ArithOpts {
        cas: Some(token ^ 1),
        ..ArithOpts::new(true, 5)
    };
    assert_eq!(c.arith("n", &stale), Err(Error::Exists));
    let ok = ArithOpts {
        cas: Some(token),
        ttl: Some(Ttl::Never),
        ..ArithOpts::new(false, 3)
    };
    assert_eq!(c.arith("n", &ok).map(|(v, _)| v), Ok(7));
    assert_eq!(c.ttl("n"), Some(Ttl::Never));
    assert_eq!(
        c.arith("absent", &ArithOpts::new(true, 1)),
        Err(Error::NotFound)
    );
    // Without `token` the answer carries none.
    assert_eq!(c.arith("n", &ArithOpts::new(true, 1)), Ok((8, 0)));
}

#[test]
fn win_tokens_vivify_and_stale_items_follow_the_meta_protocol() {
    let (mut c, _) = cache();
    let mg = |opts: GetOpts| Request::Get {
        key: b"k".to_vec(),
        opts,
    };
    // `mg ... c`: the answers carry CAS tokens.
    let meta = GetOpts {
        win_tokens: true,
        token: true,
        ..GetOpts::default()
    };
    let vivify = GetOpts {
        vivify: Some(Ttl::secs(30)),
        ..meta
    };
    // First miss wins and creates an empty item; the next reader sees Z.
    let Response::Get(Ok(Some(first))) = c.execute(&mg(vivify)) else {
        panic!()
    };
    assert!(first.win && first.vivified && first.item.value().is_empty());
    let Response::Get(Ok(Some(second))) = c.execute(&mg(vivify)) else {
        panic!()
    };
    assert!(!second.win && second.won_before && !second.vivified);
    // The winner stores; a plain set clears the marks.
    c.set("k", "fresh", 0, Duration::from_secs(60)).unwrap();
    let Response::Get(Ok(Some(plain))) = c.execute(&mg(meta)) else {
        panic!()
    };
    assert!(!plain.win && !plain.won_before && !plain.stale && !plain.hit_before);
    let Response::Get(Ok(Some(again))) = c.execute(&mg(meta)) else {
        panic!()
    };
    assert!(again.hit_before);
    // Recache: win once the TTL left drops below the threshold.
    let recache = GetOpts {
        recache: Some(120),
        ..meta
    };
    let Response::Get(Ok(Some(r1))) = c.execute(&mg(recache)) else {
        panic!()
    };
    let Response::Get(Ok(Some(r2))) = c.execute(&mg(recache)) else {
        panic!()
    };
    assert!(r1.win && !r2.win && r2.won_before);
    // Invalidate: stale, new token, next reader wins.
    let token = c.get("k").unwrap().cas();
    let md = DeleteOpts {
        invalidate: true,
        ..DeleteOpts::default()
    };
    c.delete_with("k", &md).unwrap();
    // A classic read neither takes nor gives the token.
    let Response::Get(Ok(Some(classic))) = c.execute(&mg(GetOpts::default())) else {
        panic!()
    };
    assert!(classic.stale && !classic.win);
    let Response::Get(Ok(Some(s1))) = c.execute(&mg(meta)) else {
        panic!()
    };
    assert!(s1.stale && s1.win && s1.item.cas() != token);
    assert_eq!(s1.item.value(), b"fresh", "stale data is still served");
    let Response::Get(Ok(Some(s2))) = c.execute(&mg(meta)) else {
        panic!()
    };
    assert!(s2.stale && !s2.win && s2.won_before);
    // A stale-token store with invalidate is accepted and stays stale.
    let ms = Request::Store(Store {
        cas: Some(token),
        invalidate: true,
        ..Store::new(StoreMode::Set, b"k".to_vec(), b"late".to_vec())
    });
    assert!(matches!(c.execute(&ms), Response::Stored(Ok(_))));
    let Response::Get(Ok(Some(s3))) = c.execute(&mg(meta)) else {
        panic!()
    };
    assert!(s3.stale && s3.won_before && s3.item.value() == b"late");
}

#[test]
fn a_vivifying_read_counts_as_the_items_first_fetch_unless_it_does_not_bump() {
    // memcached: after `mg k N30` the next `mg k h` says h1; after
    // `mg k u N30` (no bump) it says h0.
    let (mut c, _) = cache();
    for (key, bump) in [("bumped", true), ("quiet", false)] {
        let read = |opts: GetOpts| Request::Get {
            key: key.as_bytes().to_vec(),
            opts,
        };
        let vivify = GetOpts {
            vivify: Some(Ttl::secs(30)),
            win_tokens: true,
            bump,
            ..GetOpts::default()
        };
        let Response::Get(Ok(Some(created))) = c.execute(&read(vivify)) else {
            panic!()
        };
        assert!(created.vivified && !created.hit_before);
        let Response::Get(Ok(Some(next))) = c.execute(&read(GetOpts::default())) else {
            panic!()
        };
        assert_eq!(next.hit_before, bump, "{key}");
    }
}

#[test]
fn a_touch_counts_as_a_fetch_unless_the_read_does_not_bump() {
    // memcached: `touch`, `gat` and `mg T` mark the item fetched (the next
    // `mg h` says h1); `mg u T` (no bump) touches without marking it.
    let (mut c, _) = cache();
    let hit_before = |c: &mut Segcache, key: &str| {
        let Response::Get(Ok(Some(found))) = c.execute(&Request::Get {
            key: key.as_bytes().to_vec(),
            opts: GetOpts::default(),
        }) else {
            panic!()
        };
        found.hit_before
    };
    let touch_read = |bump: bool| GetOpts {
        touch: Some(Ttl::secs(30)),
        bump,
        ..GetOpts::default()
    };
    for (key, bump) in [("read", true), ("quiet", false)] {
        c.set(key, "v", 0, Duration::from_secs(100)).unwrap();
        let request = Request::Get {
            key: key.as_bytes().to_vec(),
            opts: touch_read(bump),
        };
        assert!(matches!(c.execute(&request), Response::Get(Ok(Some(_)))));
        assert_eq!(c.ttl(key), Some(Ttl::After(Duration::from_secs(30))));
        assert_eq!(hit_before(&mut c, key), bump, "{key}");
    }
    c.set("touched", "v", 0, Duration::from_secs(100)).unwrap();
    c.touch("touched", Duration::from_secs(30)).unwrap();
    assert!(hit_before(&mut c, "touched"));
}

#[test]
fn delete_with_a_token_compares() {
    let (mut c, _) = cache();
    c.set("k", "v", 0, None).unwrap();
    let token = c.get("k").unwrap().cas();
    let wrong = DeleteOpts {
        cas: Some(token ^ 1),
        ..DeleteOpts::default()
    };
    assert_eq!(c.delete_with("k", &wrong), Err(Error::Exists));
    let right = DeleteOpts {
        cas: Some(token),
        ..DeleteOpts::default()
    };
    assert_eq!(c.delete_with("k", &right), Ok(()));
    assert_eq!(c.delete_with("k", &right), Err(Error::NotFound));
}

/// Issue 11's reproductions: an item must not die with a shorter-lived
/// neighbour, nor take a neighbour's deadline.
#[test]
fn items_with_different_ttls_do_not_share_a_deadline() {
    let (mut c, clock) = cache();
    c.set("a", "1", 0, Duration::from_secs(2)).unwrap();
    c.set("b", "1", 0, Duration::from_secs(6)).unwrap();
    clock.advance(Duration::from_secs(3));
    assert!(c.get("a").is_none());
    assert!(c.get("b").is_some(), "b lives 6 s");
    c.set("y1", "1", 0, Duration::from_secs(82020)).unwrap();
    c.set("y2", "1", 0, Duration::from_secs(83900)).unwrap();
    let Some(Ttl::After(left)) = c.ttl("y2") else {
        panic!()
    };
    assert!(left.as_secs() > 83900 - 83900 / 16, "{left:?}");
}

/// The documented bound, over the whole TTL range: never late, never more
/// than max(1 s, TTL/16) early, for items written at different times into
/// the same TTL buckets (so they share segments). The heap is large enough
/// that nothing is evicted, so a missing item has expired. (Merges under
/// memory pressure keep the same bound: `check_invariants` checks every
/// segment's deadline spread in the model tests' lossy runs.)
#[test]
fn no_item_expires_late_or_earlier_than_the_bound() {
    let clock = ManualClock::new();
    let mut c = Segcache::builder()
        .heap_size(64 << 20)
        .segment_size(4 << 10)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut live: Vec<(String, u64, u64)> = Vec::new(); // key, deadline, ttl
    let mut now = 0u64;
    let mut checked = 0;
    for round in 0..4000u64 {
        // TTLs spread log-uniformly over 1 s .. MAX_TTL.
        let bits = 1 + next() % 23;
        let ttl = (1 + next() % (1 << bits)).min(segcache::MAX_TTL as u64);
        let key = format!("k{round}");
        c.set(&key, [7u8; 40], 0, Duration::from_secs(ttl)).unwrap();
        live.push((key, now + ttl, ttl));
        let step = match next() % 10 {
            0 => next() % 5000,
            1..=3 => next() % 4,
            _ => 0,
        };
        clock.advance(Duration::from_secs(step));
        now += step;
        live.retain(|(key, deadline, ttl)| {
            let present = c.peek(key).is_some();
            if now >= *deadline {
                assert!(!present, "{key} served {} s late", now - deadline);
                checked += 1;
                return false;
            }
            if !present {
                let early = deadline - now;
                assert!(
                    early < (ttl / 16).max(1),
                    "{key} (ttl {ttl}) went {early} s early"
                );
                checked += 1;
                return false;
            }
            true
        });
    }
    assert!(
        checked > 1000,
        "items were checked at their expiry: {checked}"
    );
    assert_eq!(c.stats().evictions, 0);
}

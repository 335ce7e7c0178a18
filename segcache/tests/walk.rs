//! `Request::Walk`, the step-by-step listing of live items, through every
//! handle that executes requests: a cache, a sharded cache and the storage
//! thread. Walking indexes `0..segments` must list exactly the live keys,
//! each once, with their metadata, whatever was overwritten, deleted,
//! evicted or expired before.

use segcache::ops::{Listed, Walked};
use segcache::{ManualClock, Request, Response, Segcache, ShardedCache, StorageConfig, Ttl};
use std::collections::BTreeMap;
use std::time::Duration;

/// Every segment's listing, by walking indexes until the count the
/// responses give.
fn walk_all(mut step: impl FnMut(u32) -> Walked) -> Vec<Listed> {
    let mut all = Vec::new();
    let mut segment = 0;
    loop {
        let walked = step(segment);
        all.extend(walked.items);
        segment += 1;
        if segment >= walked.segments {
            return all;
        }
    }
}

fn walked(response: Response) -> Walked {
    match response {
        Response::Walked(w) => w,
        other => panic!("not a walk: {other:?}"),
    }
}

/// Writes 3,000 keys (some with a TTL), overwrites, deletes and reads some,
/// through `execute`; returns what must be live afterwards, with whether
/// each was read since its last write.
fn churn(mut execute: impl FnMut(Request) -> Response) -> BTreeMap<Vec<u8>, bool> {
    let mut live = BTreeMap::new();
    for i in 0..3000u32 {
        let key = format!("key:{i}").into_bytes();
        let mut store = segcache::Store::new(
            segcache::StoreMode::Set,
            key.clone(),
            vec![b'v'; (i % 50) as usize],
        );
        store.ttl = if i % 3 == 0 {
            Ttl::After(Duration::from_secs(100))
        } else {
            Ttl::Never
        };
        assert!(matches!(
            execute(Request::Store(store)),
            Response::Stored(Ok(_))
        ));
        live.insert(key, false);
    }
    for i in (0..3000u32).step_by(7) {
        let key = format!("key:{i}").into_bytes();
        let store = segcache::Store::new(segcache::StoreMode::Set, key.clone(), b"new".to_vec());
        assert!(matches!(
            execute(Request::Store(store)),
            Response::Stored(Ok(_))
        ));
        live.insert(key, false);
    }
    for i in (0..3000u32).step_by(11) {
        let key = format!("key:{i}").into_bytes();
        assert!(matches!(
            execute(Request::Delete {
                key: key.clone(),
                opts: Default::default()
            }),
            Response::Deleted(Ok(()))
        ));
        live.remove(&key);
    }
    for i in (1..3000u32).step_by(5) {
        let key = format!("key:{i}").into_bytes();
        let hit = matches!(
            execute(Request::Get {
                key: key.clone(),
                opts: Default::default()
            }),
            Response::Get(Ok(Some(_)))
        );
        assert_eq!(hit, live.contains_key(&key));
        if let Some(read) = live.get_mut(&key) {
            *read = true;
        }
    }
    live
}

/// The listing holds each live key once, with its fetched mark, TTL, CAS
/// token and size as reads report them.
fn check(listed: &[Listed], live: &BTreeMap<Vec<u8>, bool>) {
    let mut seen = BTreeMap::new();
    for l in listed {
        assert!(
            seen.insert(l.key.clone(), l).is_none(),
            "listed twice: {:?}",
            l.key
        );
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        live.keys().collect::<Vec<_>>(),
        "listed keys"
    );
    for (key, l) in &seen {
        assert_eq!(l.fetched, live[key], "fetched mark of {key:?}");
        let i: u32 = std::str::from_utf8(&key[4..]).unwrap().parse().unwrap();
        let value_len = if i % 7 == 0 { 3 } else { (i % 50) as usize };
        // The item's bytes: a 3-byte header (values under 256 bytes), the
        // key, the value.
        assert_eq!(
            l.size as usize,
            3 + key.len() + value_len,
            "size of {key:?}"
        );
        let expiring = i % 3 == 0 && i % 7 != 0;
        match l.ttl {
            Ttl::Never => assert!(!expiring, "{key:?} lost its TTL"),
            Ttl::After(d) => assert!(expiring && d <= Duration::from_secs(100), "{key:?}: {d:?}"),
            Ttl::Expired => panic!("an expired item listed"),
        }
    }
}

#[test]
fn a_walk_lists_every_live_item_once_with_its_metadata() {
    let clock = ManualClock::new();
    let mut cache = Segcache::builder()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .build()
        .unwrap();
    let live = churn(|r| cache.execute(&r));
    let listed = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    check(&listed, &live);
    // The CAS tokens are the ones a read reports.
    for l in &listed {
        assert_eq!(cache.get(&l.key).unwrap().cas(), l.cas);
    }
    // Walking counted nothing and marked nothing.
    let again = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert_eq!(again.len(), listed.len());

    // Past their TTL the expiring items are no longer listed.
    clock.advance(Duration::from_secs(101));
    let after = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert!(after.iter().all(|l| l.ttl == Ttl::Never));
    let never = live
        .keys()
        .filter(|k| {
            let i: u32 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
            !(i % 3 == 0 && i % 7 != 0)
        })
        .count();
    assert_eq!(after.len(), never);

    // After a flush, nothing: a delayed one once its time comes (the
    // items are still in their segments then), and one for now.
    cache.execute(&Request::<&[u8]>::Flush {
        delay: Duration::from_secs(10),
    });
    let before = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert_eq!(before.len(), never);
    clock.advance(Duration::from_secs(10));
    let flushed = walked(cache.execute(&Request::<&[u8]>::Walk { segment: 0 }));
    assert_eq!((flushed.items.len(), flushed.segments), (0, 0));
    cache.set("after", "flush", 0, None).unwrap();
    cache.execute(&Request::<&[u8]>::Flush {
        delay: Duration::ZERO,
    });
    let now = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert!(now.is_empty());
    cache.set("later", "1", 0, None).unwrap();
    let later = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].key, b"later");
}

#[test]
fn a_walk_past_eviction_lists_only_what_is_still_held() {
    let mut cache = Segcache::builder()
        .heap_size(1 << 20)
        .segment_size(16 << 10)
        .build()
        .unwrap();
    for i in 0..50_000u32 {
        cache.set(format!("k{i}"), [b'x'; 64], 0, None).unwrap();
    }
    assert!(cache.stats().evictions > 0);
    let listed = walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s })));
    assert_eq!(listed.len(), cache.len());
    for l in &listed {
        assert!(
            cache.get(&l.key).is_some(),
            "listed but not held: {:?}",
            l.key
        );
    }
}

#[test]
fn a_sharded_cache_walks_its_shards_interleaved() {
    let cache: ShardedCache = Segcache::builder()
        .heap_size(8 << 20)
        .segment_size(64 << 10)
        .build_sharded(4)
        .unwrap();
    let live = churn(|r| cache.execute(&r));
    let first = walked(cache.execute(&Request::<&[u8]>::Walk { segment: 0 }));
    assert_eq!(first.segments % 4, 0, "every shard's segments are walked");
    check(
        &walk_all(|s| walked(cache.execute(&Request::<&[u8]>::Walk { segment: s }))),
        &live,
    );
}

#[test]
fn the_storage_thread_walks_on_request() {
    let (handle, thread) = Segcache::builder()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let live = churn(|r| handle.call(r).unwrap());
    check(
        &walk_all(|s| walked(handle.call(Request::Walk { segment: s }).unwrap())),
        &live,
    );
    handle.shutdown();
    thread.join().unwrap();
}

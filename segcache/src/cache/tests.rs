use super::write::parse_counter;
use super::*;
use crate::builder::small_cache;
use crate::ManualClock;

fn small(eviction: Eviction) -> (Segcache, ManualClock) {
    let clock = ManualClock::new();
    let cache = small_cache(64 << 10, 4 << 10, 8, eviction, &clock);
    (cache, clock)
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

/// Writes bursts of 1000 s items 100 s apart (the bucket allows ~60 s
/// of deadlines per window), ten bursts at a time overflowing a heap of
/// 64 segments, reading a third of each burst, so that merges split
/// segments into deadline windows; returns each key's deadline.
fn split_by_merges(c: &mut Segcache, clock: &ManualClock) -> Vec<(String, u32)> {
    let mut keys = Vec::new();
    for burst in 0..11u32 {
        for k in 0..2000u32 {
            let key = format!("{burst}:{k}");
            c.set(&key, [7u8; 60], 0, secs(1000)).unwrap();
            keys.push((key, clock.now() + 1000));
        }
        for (key, _) in keys.iter().rev().take(2000).step_by(3) {
            c.get(key);
        }
        c.check_invariants();
        clock.advance(Duration::from_secs(100));
        if burst % 8 == 7 {
            // Reads of every burst still held keep items across merges.
            for (key, _) in &keys {
                c.get(key);
            }
        }
    }
    assert!(c.stats().merges > 0);
    keys
}

#[test]
fn split_segments_survive_a_restart_with_their_windows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    clock.set(10_000);
    let build = || {
        Segcache::builder()
            .heap_size(1 << 20)
            .segment_size(16 << 10)
            .datapool(dir.path().join("pool"))
            .restore(true)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let mut c = build();
    let keys = split_by_merges(&mut c, &clock);
    c.expire();
    let split: Vec<u32> = (0..c.segs.count() as u32)
        .filter(|&id| c.segs.headers[id as usize].is_split())
        .collect();
    assert!(!split.is_empty(), "merges split no segment");
    c.check_invariants();
    let windows: Vec<_> = split.iter().map(|&id| c.segs.windows(id)).collect();
    let ttls: Vec<_> = keys
        .iter()
        .map(|(k, _)| c.peek(k).map(|i| i.ttl()))
        .collect();
    c.save().unwrap();
    let mut c = build();
    assert!(matches!(
        c.restore_outcome(),
        RestoreOutcome::Restored { .. }
    ));
    for (&id, w) in split.iter().zip(&windows) {
        assert_eq!(&c.segs.windows(id), w, "segment {id}");
    }
    let after: Vec<_> = keys
        .iter()
        .map(|(k, _)| c.peek(k).map(|i| i.ttl()))
        .collect();
    assert_eq!(ttls, after);
    c.check_invariants();
    // Every item held expires within the bucket's precision of its own
    // deadline, never after it, windows or not.
    for step in 0..40 {
        let now = clock.now();
        for (key, deadline) in &keys {
            if let Some(item) = c.peek(key) {
                assert!(now < *deadline, "{key} served {} s late", now - deadline);
                let left = item.ttl().duration().unwrap().as_secs() as u32;
                assert!(
                    left <= deadline - now,
                    "{key}: {left} s left, due in {}",
                    deadline - now
                );
                assert!(
                    left + 1000 / 16 > deadline - now,
                    "{key} {} s early",
                    deadline - now - left
                );
            }
        }
        clock.advance(Duration::from_secs(25));
        if step % 4 == 0 {
            c.expire();
            c.check_invariants();
        }
    }
}

#[test]
fn set_get_overwrite_delete() {
    let (mut c, _) = small(Eviction::Merge);
    c.set(b"a", b"1", 5, None).unwrap();
    c.set(b"b", b"2", 0, None).unwrap();
    c.set(b"a", b"11", 6, None).unwrap();
    let a = c.get(b"a").unwrap();
    assert_eq!((a.key(), a.value(), a.flags()), (&b"a"[..], &b"11"[..], 6));
    assert_eq!(c.len(), 2);
    assert!(c.delete(b"a"));
    assert!(!c.delete(b"a"));
    assert!(c.get(b"a").is_none());
    assert_eq!(c.get(b"b").unwrap().value(), b"2");
    let s = c.stats();
    assert_eq!((s.items, s.hits, s.misses), (1, 2, 1));
    c.check_invariants();
}

/// An overwrite and a delete mark the item they unlink, and nothing
/// else; walks that skip marked items (compaction here) keep every
/// live item and the counters right.
#[test]
fn overwrites_and_deletes_mark_what_they_unlink() {
    let (mut c, _) = small(Eviction::Merge);
    // Every overwrite here changes the item's size, so it goes to the log
    // (one of the same size is made in place and leaves nothing to mark).
    let at = |c: &Segcache, key: &[u8]| {
        let hash = hash_key(key);
        let (_, _, info) = c
            .table
            .lookup(hash, |at| c.segs.item(at).key() == key)
            .unwrap();
        hashtable::location(info)
    };
    c.set(b"a", b"1", 0, None).unwrap();
    c.set(b"b", b"2", 7, None).unwrap();
    let (a1, b) = (at(&c, b"a"), at(&c, b"b"));
    c.set(b"a", b"11", 0, None).unwrap();
    let a2 = at(&c, b"a");
    assert!(c.segs.item(a1).is_unlinked(), "the overwritten copy");
    assert!(!c.segs.item(a2).is_unlinked() && !c.segs.item(b).is_unlinked());
    assert_eq!(c.segs.item(a2).marks(), 0, "not a mark a rewrite carries");
    assert!(c.delete(b"b"));
    assert!(c.segs.item(b).is_unlinked(), "the deleted item");
    // Overwrite a working set many times over the heap: compaction
    // walks segments full of marked copies.
    let value = |round: u32| round.to_le_bytes().repeat(20 + round as usize % 2);
    for round in 0..40u32 {
        for k in 0..40u32 {
            c.set(format!("k{k}"), value(round), 0, None).unwrap();
        }
    }
    assert!(c.stats().merges > 0, "compaction ran");
    assert_eq!(c.stats().evictions, 0);
    for k in 0..40u32 {
        assert_eq!(c.get(format!("k{k}")).unwrap().value(), value(39));
    }
    c.check_invariants();
}

/// Two keys whose entries share a home bucket, a tag and check bits:
/// the write path's first candidate for the second is the first's
/// entry, which must be told apart by the key, on overwrite and delete.
#[test]
fn writes_tell_apart_keys_whose_entries_look_alike() {
    // Eight homes: a look-alike is one key in ~65,000.
    let clock = ManualClock::new();
    let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::Merge, &clock);
    assert_eq!(c.table.homes(), 8);
    // Home, tag and check bits, as the table reads them.
    let looks = |key: &[u8]| c.table.entry_look(hash_key(key));
    let a = b"collide-0".to_vec();
    let b = (1..)
        .map(|i| format!("collide-{i}").into_bytes())
        .take(4_000_000)
        .find(|k| looks(k) == looks(&a))
        .expect("a look-alike key");
    c.set(&a, b"a1", 0, None).unwrap();
    c.set(&b, b"b1", 0, None).unwrap();
    c.set(&b, b"b2", 0, None).unwrap();
    assert_eq!(c.get(&a).unwrap().value(), b"a1");
    assert_eq!(c.get(&b).unwrap().value(), b"b2");
    assert!(c.delete(&b));
    assert_eq!(c.get(&a).unwrap().value(), b"a1");
    assert!(c.get(&b).is_none());
    // Absent, with a present look-alike: the search finds nothing.
    assert!(!c.delete(&b));
    assert_eq!(c.len(), 1);
    c.set(&b, b"b3", 0, None).unwrap();
    assert!(c.delete(&a));
    assert_eq!(c.get(&b).unwrap().value(), b"b3");
    assert_eq!(c.len(), 1);
    c.check_invariants();
}

/// The edges of `set`'s inline path and `delete`'s one-probe path:
/// sub-second TTLs round up as `Ttl::to_secs` does, an out-of-range
/// TTL or key is refused with the old item kept, an overwrite of
/// another size (with flags, then without) leaves the byte count of
/// the new item only, and a delete that finds an expired item reports
/// it absent, unlinks it and counts an expiration.
#[test]
fn inline_set_and_delete_edges() {
    let (mut c, clock) = small(Eviction::Merge);
    let item_bytes = |key: usize, value: usize, flags: bool| {
        (item::header_len(value) + key + value + if flags { 4 } else { 0 }) as u64
    };
    c.set(b"k", [7u8; 40], 9, Duration::from_millis(1500))
        .unwrap();
    assert_eq!(c.stats().live_bytes, item_bytes(1, 40, true));
    assert_eq!(c.ttl(b"k"), Some(Ttl::After(Duration::from_secs(2))));
    c.set(b"k", [8u8; 3], 0, Duration::from_millis(1500))
        .unwrap();
    assert_eq!(
        (c.stats().items, c.stats().live_bytes),
        (1, item_bytes(1, 3, false))
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(c.get(b"k").unwrap().value(), [8u8; 3]);
    clock.advance(Duration::from_secs(1));
    assert!(c.get(b"k").is_none(), "1.5 s rounds up to 2 s, not more");
    c.check_invariants();

    c.set(b"k", b"v", 0, None).unwrap();
    let too_long = Duration::from_secs(crate::MAX_TTL as u64 + 1);
    assert!(matches!(
        c.set(b"k", b"w", 0, too_long),
        Err(Error::TtlOutOfRange { .. })
    ));
    assert!(matches!(c.set(b"", b"w", 0, None), Err(Error::EmptyKey)));
    assert!(matches!(
        c.set([b'x'; MAX_KEY_LEN + 1], b"w", 0, None),
        Err(Error::KeyTooLong { .. })
    ));
    let huge = vec![0u8; c.max_value_len(1) + 1];
    assert!(matches!(
        c.set(b"k", &huge, 0, None),
        Err(Error::ValueTooLarge { .. })
    ));
    assert_eq!(
        c.get(b"k").unwrap().value(),
        b"v",
        "a refused set keeps the old item"
    );
    c.check_invariants();

    c.set(b"gone", b"soon", 0, Duration::from_secs(5)).unwrap();
    let before = c.stats();
    clock.advance(Duration::from_secs(5));
    assert!(!c.delete(b"gone"), "an expired item is not there to delete");
    let after = c.stats();
    assert_eq!(after.items, before.items - 1, "but it is unlinked");
    assert_eq!(after.expirations, before.expirations + 1);
    assert!(c.delete(b"k"));
    assert_eq!((c.stats().items, c.stats().live_bytes), (0, 0));
    c.check_invariants();
}

#[test]
fn get_hands_out_the_value_and_marks_the_item_fetched() {
    let (mut c, _clock) = small(Eviction::Merge);
    let hit_before = |c: &mut Segcache, key: &str| {
        let found = c.read(key, &GetOpts::default()).unwrap().unwrap();
        found.hit_before
    };
    // Short values, a value of 256 bytes (a long header) and flags.
    let long = vec![b'x'; 300];
    c.set("short", "value", 9, secs(100)).unwrap();
    c.set("long", &long, 0, None).unwrap();
    c.set("unread", "u", 0, None).unwrap();
    // Read with the table settled, then while a delayed flush is pending
    // (the general path): each read gives the value and flags in place
    // and marks the item, so the next meta read says it was fetched.
    for pending in [false, true] {
        if pending {
            c.set("short", "value", 9, secs(100)).unwrap();
            c.set("long", &long, 0, None).unwrap();
            c.flush_after(Duration::from_secs(3600));
            assert!(c.flush_pending());
        }
        let item = c.get("short").unwrap();
        assert_eq!((item.value(), item.flags()), (&b"value"[..], 9));
        let item = c.get("long").unwrap();
        assert_eq!((item.value(), item.key()), (&long[..], &b"long"[..]));
        // A second `get` finds the mark set and reads the same.
        assert_eq!(c.get("long").unwrap().value(), &long[..]);
        assert!(hit_before(&mut c, "short"), "pending flush: {pending}");
        assert!(hit_before(&mut c, "long"), "pending flush: {pending}");
    }
    assert!(!hit_before(&mut c, "unread"));
    // A rewrite starts unfetched; the lean read leaves it so.
    c.set("short", "other", 1, None).unwrap();
    assert_eq!(
        c.get_value_with("short", |v, f| (v.to_vec(), f)),
        Some((b"other".to_vec(), 1))
    );
    assert!(!hit_before(&mut c, "short"));
}

#[test]
fn lean_read_counts_like_get_but_leaves_no_mark() {
    let (mut c, clock) = small(Eviction::Merge);
    c.set("k", "value", 9, secs(100)).unwrap();
    c.set("plain", "p", 0, None).unwrap();
    // Move past the write's second so the access can be counted.
    clock.advance(Duration::from_secs(1));
    let got = c.get_value_with("k", |v, flags| (v.to_vec(), flags));
    assert_eq!(got, Some((b"value".to_vec(), 9)));
    assert_eq!(
        c.get_value_with("plain", |v, f| (v.to_vec(), f)),
        Some((b"p".to_vec(), 0))
    );
    assert_eq!(c.get_value_with("absent", |v, _| v.len()), None);
    assert_eq!((c.stats().hits, c.stats().misses), (2, 1));
    // Eviction sees the access: the slot's counter moved.
    let hash = hash_key(b"k");
    let (_, _, loc) = c.find_hashed(b"k", hash).unwrap();
    let (.., info) = c.table.locate(hash, loc).unwrap();
    assert_eq!(hashtable::frequency(info), 1);
    // No meta-protocol mark: a later `mg h` reports no earlier fetch,
    // and the CAS token is the one the write made.
    let cas = c.peek("k").unwrap().cas();
    let asked = GetOpts {
        token: true,
        ..GetOpts::default()
    };
    let found = c.read("k", &asked).unwrap().unwrap();
    assert!(!found.hit_before);
    assert_eq!(found.item.cas(), cas);
    assert!(
        c.read("k", &GetOpts::default())
            .unwrap()
            .unwrap()
            .hit_before
    );
    // Never an expired item: past its deadline it is a miss, unlinked.
    clock.advance(Duration::from_secs(100));
    assert_eq!(c.get_value_with("k", |v, _| v.to_vec()), None);
    assert_eq!(c.stats().misses, 2);
    assert_eq!(c.len(), 1);
    c.check_invariants();
}

#[test]
fn set_checks_like_store_and_an_expired_ttl_removes() {
    let (mut c, _) = small(Eviction::Merge);
    c.set("k", "v", 3, None).unwrap();
    assert_eq!(c.set("", "v", 0, None), Err(Error::EmptyKey));
    let long = [b'k'; MAX_KEY_LEN + 1];
    assert!(matches!(
        c.set(long, "v", 0, None),
        Err(Error::KeyTooLong { .. })
    ));
    let huge = vec![0u8; 1 << 20];
    assert!(matches!(
        c.set("k", &huge, 0, None),
        Err(Error::ValueTooLarge { .. })
    ));
    // A failed set changed nothing.
    assert_eq!(
        c.get_value_with("k", |v, f| (v.to_vec(), f)),
        Some((b"v".to_vec(), 3))
    );
    // Stored already expired: accepted, and nothing is left to read.
    c.set("k", "w", 0, Ttl::Expired).unwrap();
    assert!(c.get("k").is_none());
    assert_eq!(c.len(), 0);
    c.check_invariants();
}

#[test]
fn add_replace_cas_semantics() {
    let (mut c, _) = small(Eviction::Merge);
    assert_eq!(c.replace(b"k", b"x", 0, None), Err(Error::NotStored));
    c.add(b"k", b"1", 0, None).unwrap();
    assert_eq!(c.add(b"k", b"2", 0, None), Err(Error::NotStored));
    assert_eq!(c.get(b"k").unwrap().value(), b"1");
    c.replace(b"k", b"3", 0, None).unwrap();
    let token = c.get(b"k").unwrap().cas();
    assert_eq!(c.cas(b"k", b"4", 0, None, token + 1), Err(Error::Exists));
    assert_eq!(c.cas(b"nope", b"4", 0, None, token), Err(Error::NotFound));
    c.cas(b"k", b"4", 0, None, token).unwrap();
    assert_eq!(c.cas(b"k", b"5", 0, None, token), Err(Error::Exists));
    assert_eq!(c.get(b"k").unwrap().value(), b"4");
}

#[test]
fn cas_is_per_item_not_per_bucket() {
    // Eight buckets: keys share buckets, as in Pelikan's false conflicts.
    // Writing one key must not invalidate another's token.
    let clock = ManualClock::new();
    let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::default(), &clock);
    c.set(b"x", b"1", 0, None).unwrap();
    c.set(b"y", b"1", 0, None).unwrap();
    let tx = c.get(b"x").unwrap().cas();
    let ty = c.get(b"y").unwrap().cas();
    assert_ne!(tx, ty);
    c.set(b"y", b"2", 0, None).unwrap();
    c.cas(b"x", b"2", 0, None, tx).unwrap();
}

#[test]
fn append_prepend_incr_decr_touch() {
    let (mut c, clock) = small(Eviction::Merge);
    assert_eq!(c.append(b"k", b"x"), Err(Error::NotStored));
    c.set(b"k", b"mid", 9, secs(100)).unwrap();
    c.append(b"k", b"-end").unwrap();
    c.prepend(b"k", b"start-").unwrap();
    let item = c.get(b"k").unwrap();
    assert_eq!((item.value(), item.flags()), (&b"start-mid-end"[..], 9));
    assert!(item.ttl().duration().unwrap() <= Duration::from_secs(100));
    assert_eq!(c.incr(b"k", 1), Err(Error::NotNumeric));
    assert_eq!(c.incr(b"n", 1), Err(Error::NotFound));
    c.set(b"n", b"18446744073709551615", 0, None).unwrap();
    assert_eq!(c.incr(b"n", 2), Ok(1), "wraps at 2^64");
    assert_eq!(c.decr(b"n", 5), Ok(0), "floors at 0");
    assert_eq!(c.incr(b"n", 123), Ok(123));
    assert_eq!(c.get(b"n").unwrap().value(), b"123");
    c.set(b"big", b"99999999999999999999", 0, None).unwrap();
    assert_eq!(c.incr(b"big", 1), Err(Error::NotNumeric), "over u64");
    c.set(b"t", b"v", 0, secs(10)).unwrap();
    c.touch(b"t", secs(1000)).unwrap();
    clock.advance(Duration::from_secs(500));
    assert_eq!(c.get(b"t").unwrap().value(), b"v");
    c.touch(b"t", None).unwrap();
    assert_eq!(c.ttl(b"t"), Some(Ttl::Never));
    assert_eq!(c.touch(b"gone", secs(1)), Err(Error::NotFound));
    c.check_invariants();
}

#[test]
fn items_expire_never_late_and_zero_means_never() {
    let (mut c, clock) = small(Eviction::Merge);
    c.set(b"short", b"v", 0, secs(10)).unwrap();
    c.set(b"forever", b"v", 0, None).unwrap();
    c.set(b"zero", b"v", 0, Some(Duration::ZERO)).unwrap();
    let left = c.ttl(b"short").unwrap().duration().unwrap();
    assert!(left <= Duration::from_secs(10) && left >= Duration::from_secs(9));
    clock.advance(Duration::from_secs(9));
    assert!(c.get(b"short").is_some());
    clock.advance(Duration::from_secs(1));
    assert!(c.get(b"short").is_none(), "at the deadline it is gone");
    clock.advance(Duration::from_secs(ttl::MAX_TTL as u64 * 3));
    assert_eq!(c.expire().items, 0);
    assert_eq!(c.get(b"forever").unwrap().value(), b"v");
    assert_eq!(c.get(b"zero").unwrap().ttl(), Ttl::Never);
    c.check_invariants();
}

#[test]
fn expire_frees_whole_segments() {
    let (mut c, clock) = small(Eviction::Merge);
    for i in 0..200u32 {
        c.set(format!("k{i}").as_bytes(), [7u8; 40], 0, secs(60))
            .unwrap();
    }
    let used = c.stats().segments_used;
    assert!(used >= 2);
    assert_eq!(c.expire(), Expired::default());
    clock.advance(Duration::from_secs(60));
    let freed = c.expire();
    assert_eq!(freed.items, 200);
    assert_eq!(freed.segments as u64, used);
    let s = c.stats();
    assert_eq!((s.items, s.segments_used, s.expirations), (0, 0, 200));
    c.check_invariants();
}

#[test]
fn delayed_flush_drops_only_older_items() {
    let (mut c, clock) = small(Eviction::Merge);
    c.set(b"old", b"v", 0, None).unwrap();
    c.flush_after(Duration::from_secs(5));
    assert!(c.get(b"old").is_some());
    clock.advance(Duration::from_secs(5));
    assert!(c.get(b"old").is_none());
    c.set(b"new", b"v", 0, None).unwrap();
    assert!(c.get(b"new").is_some());
    c.flush();
    assert!(c.is_empty());
}

#[test]
fn bad_input_is_a_clear_error_and_keeps_the_old_value() {
    let (mut c, _) = small(Eviction::Merge);
    c.set(b"k", b"old", 0, None).unwrap();
    assert_eq!(c.set(b"", b"v", 0, None), Err(Error::EmptyKey));
    let long = [b'x'; 251];
    assert_eq!(
        c.set(long, b"v", 0, None),
        Err(Error::KeyTooLong { len: 251 })
    );
    assert!(c.set(&long[..250], b"v", 0, None).is_ok());
    let huge = vec![0u8; 5000];
    assert!(matches!(
        c.set(b"k", &huge, 0, None),
        Err(Error::ValueTooLarge { len: 5000, .. })
    ));
    assert!(matches!(
        c.replace(b"k", &huge, 0, None),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        c.append(b"k", &huge),
        Err(Error::ValueTooLarge { .. })
    ));
    assert_eq!(
        c.set(b"k", b"v", 0, secs(ttl::MAX_TTL as u64 + 1)),
        Err(Error::TtlOutOfRange {
            secs: ttl::MAX_TTL as u64 + 1
        })
    );
    assert_eq!(c.get(b"k").unwrap().value(), b"old");
    // The largest value the error reports as allowed really fits.
    let max = c.max_value_len(1);
    c.set(b"m", vec![1u8; max], 0, None).unwrap();
    let err = c.set(b"m", vec![1u8; max + 1], 0, None).unwrap_err();
    assert_eq!(err, Error::ValueTooLarge { len: max + 1, max });
    // The message names the setting that takes larger values.
    assert!(err.to_string().contains("segment_size"), "{err}");
    c.check_invariants();
}

/// `get` and the lean read on each of their paths: a settled table
/// (the home probe, then the search from it), an expired item found
/// there, a growing table and a pending delayed flush (the general
/// path): the same answers, hits and misses counted once each.
#[test]
fn reads_answer_alike_settled_growing_and_with_a_flush_pending() {
    let clock = ManualClock::new();
    let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &clock);
    // Reads every key present and a few absent ones both ways; checks
    // the answers and that each read counted exactly one hit or miss.
    fn read_all(c: &mut Segcache, n: u32) {
        for i in 0..n + 20 {
            let key = format!("key{i}");
            let want = (i < n).then(|| format!("v{i}").into_bytes());
            let before = c.stats();
            let got = c.get(&key).map(|item| item.value().to_vec());
            assert_eq!(got, want, "{key}");
            let lean = c.get_value_with(&key, |v, _| v.to_vec());
            assert_eq!(lean, want, "{key}");
            let after = c.stats();
            let hits = 2 * (i < n) as u64;
            assert_eq!(
                (after.hits - before.hits, after.misses - before.misses),
                (hits, 2 - hits)
            );
        }
    }
    let mut n = 0;
    let mut grew_mid_read = false;
    while n < 1500 {
        c.set(format!("key{n}"), format!("v{n}"), 0, None).unwrap();
        n += 1;
        if c.table.is_growing() && !grew_mid_read {
            grew_mid_read = true;
            read_all(&mut c, n);
        }
    }
    assert!(grew_mid_read, "the table never grew");
    while c.table.is_growing() {
        c.get(b"key0").unwrap();
    }
    read_all(&mut c, n);
    // An item with a TTL, read after it expired: a miss and an
    // expiration, and it is gone.
    c.set(b"short", b"v", 0, secs(2)).unwrap();
    assert!(c.get(b"short").is_some());
    clock.advance(Duration::from_secs(3));
    let before = c.stats();
    assert!(c.get(b"short").is_none());
    assert!(c.get_value_with(b"short", |v, _| v.len()).is_none());
    let after = c.stats();
    assert_eq!(after.misses - before.misses, 2);
    assert_eq!(after.expirations - before.expirations, 1);
    assert_eq!(c.len(), n as usize);
    // A delayed flush pending: reads take the general path and still
    // find everything until it falls due, then nothing.
    c.flush_after(Duration::from_secs(10));
    read_all(&mut c, n);
    clock.advance(Duration::from_secs(10));
    assert!(c.get(b"key0").is_none());
    assert!(c.is_empty());
    c.check_invariants();
}

#[test]
fn a_small_table_grows_while_the_heap_has_room() {
    // 8 buckets (56 slots + 49 spare) to start; 2000 items of ~13 bytes
    // fit the 64 KiB heap easily, so the table grows to hold them all.
    let mut c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &ManualClock::new());
    let before = c.stats().hash_table_bytes;
    for i in 0..2000u32 {
        c.set(format!("key{i}").as_bytes(), b"v", 0, None).unwrap();
        if i % 250 == 0 {
            c.check_invariants();
        }
    }
    assert_eq!(c.len(), 2000);
    for i in 0..2000u32 {
        assert!(c.get(format!("key{i}").as_bytes()).is_some(), "key{i}");
    }
    let s = c.stats();
    assert_eq!((s.evictions, s.items), (0, 2000));
    assert!(
        s.hash_table_bytes > 10 * before,
        "{} -> {}",
        before,
        s.hash_table_bytes
    );
    c.check_invariants();
}

#[test]
fn compaction_moves_runs_of_items_with_their_bytes_intact() {
    // Overwrites in a small heap: compaction packs segments whose live
    // items sit back to back (moved in runs). Every key present must
    // read back its latest value, byte for byte, with its flags.
    let mut c = Segcache::builder()
        .heap_size(64 << 10)
        .segment_size(4 << 10)
        .hash_power(8)
        .build()
        .unwrap();
    let mut latest: std::collections::HashMap<u64, (Vec<u8>, u32)> = Default::default();
    let mut rng = 7u64;
    for round in 0..6_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // A few hot keys rewritten often, the rest rarely: segments keep
        // long runs of live cold items between dead hot versions.
        let k = if rng % 4 == 0 { rng % 8 } else { rng % 250 };
        let len = 20 + (rng >> 40) as usize % 90;
        let value: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
        let flags = round;
        c.set(format!("key-{k}"), &value, flags, None).unwrap();
        latest.insert(k, (value, flags));
    }
    assert!(c.stats().merges > 10, "merges ran: {}", c.stats().merges);
    let mut present = 0;
    for (k, (value, flags)) in &latest {
        if let Some(item) = c.get(format!("key-{k}")) {
            assert_eq!(item.value(), &value[..], "key-{k}");
            assert_eq!(item.flags(), *flags, "key-{k}");
            present += 1;
        }
    }
    assert!(present > 200, "{present} of {} keys kept", latest.len());
    c.check_invariants();
}

#[test]
fn table_grows_past_hash_power_for_small_items() {
    // The issue-14 reproduction: 1.5 M one-byte values in a 64 MiB heap
    // stopped at the default table's slots (917,504); the heap, not the
    // table, must decide what is kept.
    let mut c = Segcache::builder().heap_size(64 << 20).build().unwrap();
    let start = c.stats().hash_table_bytes;
    let n = 1_500_000u32;
    for i in 0..n {
        c.set(format!("k{i}").as_bytes(), b"x", 0, None).unwrap();
    }
    let s = c.stats();
    assert_eq!((s.items, s.evictions), (n as u64, 0));
    assert!(s.hash_table_bytes > start);
    for i in (0..n).step_by(7) {
        assert_eq!(c.get(format!("k{i}").as_bytes()).unwrap().value(), b"x");
    }
    c.check_invariants();
}

#[test]
fn segments_of_more_tiny_items_than_the_merge_scratch_holds_are_evicted_whole() {
    // Items of 6-9 bytes (1-4 byte keys, empty values): an 8 KiB segment
    // holds ~1,000 of them, more than the merge scratch's records, so no
    // evaluation can read one; eviction frees such segments whole and
    // every write still succeeds.
    let mut c = small_cache(
        128 << 10,
        8 << 10,
        14,
        Eviction::default(),
        &ManualClock::new(),
    );
    assert!(c.merge_scratch.capacity() < (8 << 10) / 9);
    for i in 0..200_000u32 {
        let key = (i % 40_000).to_le_bytes();
        let len = 1 + (i % 4) as usize;
        c.set(&key[..len], b"", 0, None).unwrap();
        if i % 20_000 == 0 {
            c.check_invariants();
        }
    }
    assert!(c.stats().evictions > 0);
    assert!(c.len() > 5_000, "{} items", c.len());
    c.check_invariants();
}

#[test]
fn a_full_heap_grows_its_table_when_items_turn_small() {
    // A heap first filled (and kept full by merge eviction) with ~900 B
    // items from a table of 8 buckets, then written with small items:
    // the heap holds ~20x more of those than the table has slots, so the
    // table grows instead of dropping entries from its full windows.
    let mut c = small_cache(
        256 << 10,
        8 << 10,
        3,
        Eviction::default(),
        &ManualClock::new(),
    );
    let big = vec![7u8; 900];
    for i in 0..2_000u32 {
        c.set(format!("big{i}").as_bytes(), &big, 0, None).unwrap();
    }
    assert_eq!(c.segs.free_count(), 0, "the heap is full");
    let slots = c.table.slots();
    let n = 40_000u32;
    for i in 0..n {
        c.set(format!("k{i}").as_bytes(), b"v", 0, None).unwrap();
    }
    let s = c.stats();
    // 8-12 B items: the heap's 256 KiB hold over 20k of them. Without
    // growth at a full heap the table kept its 8 buckets (343 slots)
    // and held ~300 items.
    assert!(
        c.table.slots() > 20 * slots,
        "{} -> {} slots",
        slots,
        c.table.slots()
    );
    assert!(
        s.items > 15_000,
        "{} items, {} live bytes",
        s.items,
        s.live_bytes
    );
    // Every counted item is a key that reads back.
    let small = (0..n)
        .filter(|i| c.get(format!("k{i}").as_bytes()).is_some())
        .count();
    let big = (0..2_000u32)
        .filter(|i| c.get(format!("big{i}").as_bytes()).is_some())
        .count();
    assert_eq!((small + big) as u64, s.items);
    // The newest keys stay: probation segments too small-itemed for an
    // evaluation are freed whole, oldest first (chain order, not the
    // creation second they all share on this clock).
    let newest = (n - 2_000..n)
        .filter(|i| c.get(format!("k{i}").as_bytes()).is_some())
        .count();
    assert!(newest > 1_900, "{newest} of the newest 2000 keys");
    c.check_invariants();
}

#[test]
fn full_hash_table_gives_back_the_reserved_space() {
    let (mut c, _) = {
        let clock = ManualClock::new();
        let c = small_cache(64 << 10, 4 << 10, 3, Eviction::None, &clock);
        (c, clock)
    };
    c.table.growth_disabled = true;
    let mut stored = 0;
    let mut full = 0;
    for i in 0..200u32 {
        match c.set(format!("key{i}").as_bytes(), b"value", 0, None) {
            Ok(()) => stored += 1,
            Err(Error::HashTableFull) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(stored + full, 200);
    assert!(
        full > 0 && stored > 50 && stored <= 105,
        "8 homes x 7 slots, 7 spare buckets: {stored}"
    );
    let s = c.stats();
    // Only the stored items' bytes were consumed.
    let used: u32 = c.segs.headers.iter().map(|h| h.write_offset).sum();
    assert_eq!(used as u64, s.live_bytes);
    c.check_invariants();
}

#[test]
fn eviction_none_refuses_writes_when_full() {
    let (mut c, _) = small(Eviction::None);
    let mut i = 0u32;
    let err = loop {
        if let Err(e) = c.set(format!("k{i}").as_bytes(), [1u8; 100], 0, None) {
            break e;
        }
        i += 1;
    };
    assert_eq!(err, Error::OutOfMemory);
    assert!(c.get(b"k0").is_some(), "nothing was evicted");
    assert_eq!(c.stats().evictions, 0);
    c.check_invariants();
}

/// Where the table points `key`, and the key's access count.
pub(crate) fn entry_of(c: &Segcache, key: &[u8]) -> (Location, u8) {
    let (_, _, info) = c
        .table
        .lookup(hash_key(key), |at| c.segs.item(at).key() == key)
        .expect("the key is in the table");
    (hashtable::location(info), hashtable::frequency(info))
}

#[test]
fn same_size_overwrites_are_made_in_place_until_a_cas_token_is_out() {
    let (mut c, clock) = small(Eviction::Merge);
    c.set(b"k", [1u8; 64], 3, None).unwrap();
    c.set(b"other", [9u8; 64], 0, None).unwrap();
    let (first, _) = entry_of(&c, b"k");
    let used = |c: &Segcache| -> u32 { c.segs.headers.iter().map(|h| h.write_offset).sum() };
    let (before, stats) = (used(&c), c.stats());
    // Same size, no TTL, no token out: over the old bytes, nothing
    // appended, every count as it was; the new flags and value read back
    // and the rewrite counts as REWRITE_FREQ accesses, as in the log.
    c.set(b"k", [2u8; 64], 5, None).unwrap();
    let (at, freq) = entry_of(&c, b"k");
    assert_eq!(at, first, "written in place");
    assert_eq!(freq, crate::eviction::REWRITE_FREQ);
    assert_eq!(used(&c), before, "no log bytes taken");
    let now = c.stats();
    assert_eq!((now.items, now.live_bytes), (stats.items, stats.live_bytes));
    let item = c.get(b"k").unwrap();
    assert_eq!((item.value(), item.flags()), (&[2u8; 64][..], 5));
    assert_eq!(c.get(b"other").unwrap().value(), [9u8; 64]);
    // Flags of the same total size (none, four more value bytes): the
    // item is laid out anew in the same bytes.
    c.set(b"k", [4u8; 68], 0, None).unwrap();
    assert_eq!(entry_of(&c, b"k").0, first);
    let item = c.get(b"k").unwrap();
    assert_eq!((item.value(), item.flags()), (&[4u8; 68][..], 0));
    // Another size, or a TTL: the log.
    c.set(b"k", [5u8; 65], 0, None).unwrap();
    let moved = entry_of(&c, b"k").0;
    assert_ne!(moved, first, "a new size goes to the log");
    c.set(b"t", [1u8; 64], 0, secs(100)).unwrap();
    let timed = entry_of(&c, b"t").0;
    c.set(b"t", [2u8; 64], 0, None).unwrap();
    assert_ne!(
        entry_of(&c, b"t").0,
        timed,
        "an item with a TTL, written without one, goes to the log"
    );
    c.set(b"t", [3u8; 64], 0, None).unwrap();
    let untimed = entry_of(&c, b"t").0;
    c.set(b"t", [3u8; 64], 0, None).unwrap();
    assert_eq!(entry_of(&c, b"t").0, untimed);
    // Once a token is out, every overwrite moves, so the token goes stale.
    let token = c.get(b"k").unwrap().cas();
    c.set(b"k", [6u8; 65], 0, None).unwrap();
    assert_ne!(entry_of(&c, b"k").0, moved, "a token is out: the log");
    assert_eq!(c.cas(b"k", [7u8; 65], 0, None, token), Err(Error::Exists));
    assert_eq!(c.get(b"k").unwrap().value(), [6u8; 65]);
    clock.advance(Duration::from_secs(1));
    c.check_invariants();
}

/// An item with a TTL keeps its deadline when written over in place, so
/// a rewrite with a TTL is made in place only when that deadline is at or
/// before the one asked for by no more than the precision every item of
/// that TTL has (`ttl::spread`: 223 s for an hour); any other goes to the
/// log with a deadline of its own.
#[test]
fn overwrites_with_a_ttl_are_in_place_within_the_ttl_precision() {
    let (mut c, clock) = small(Eviction::Merge);
    let hour = 3600;
    let spread = crate::ttl::spread(crate::ttl::bucket_for(hour));
    assert_eq!(spread, 223);
    let remaining_of = |c: &mut Segcache, key: &[u8]| match c.ttl(key) {
        Some(Ttl::After(d)) => d.as_secs(),
        other => panic!("{other:?}"),
    };
    let remaining = |c: &mut Segcache| remaining_of(c, b"t");
    c.set(b"t", [1u8; 64], 0, secs(hour as u64)).unwrap();
    let first = entry_of(&c, b"t").0;
    let used = |c: &Segcache| -> u32 { c.segs.headers.iter().map(|h| h.write_offset).sum() };
    let before = used(&c);
    // 100 s later the old deadline is 100 s early for the new write:
    // within the precision, so in place, and the item keeps it.
    clock.advance(Duration::from_secs(100));
    c.set(b"t", [2u8; 64], 0, secs(hour as u64)).unwrap();
    assert_eq!(entry_of(&c, b"t").0, first, "in place");
    assert_eq!(used(&c), before, "no log bytes taken");
    assert_eq!(remaining(&mut c), hour as u64 - 100);
    assert_eq!(c.get(b"t").unwrap().value(), [2u8; 64]);
    // 300 s after the first write it would be 300 s early: the log, with
    // a deadline as precise as any new item's.
    clock.advance(Duration::from_secs(200));
    c.set(b"t", [3u8; 64], 0, secs(hour as u64)).unwrap();
    let second = entry_of(&c, b"t").0;
    assert_ne!(second, first, "too early: the log");
    let left = remaining(&mut c);
    assert!(
        (hour as u64 - spread as u64..=hour as u64).contains(&left),
        "{left}"
    );
    // A shorter TTL: in place it would outlive what was asked.
    c.set(b"t", [4u8; 64], 0, secs(60)).unwrap();
    let third = entry_of(&c, b"t").0;
    assert_ne!(third, second, "a shorter TTL: the log");
    assert!(remaining(&mut c) <= 60);
    // Once expired, a rewrite is a new item, never the old one revived.
    clock.advance(Duration::from_secs(61));
    assert!(c.get(b"t").is_none());
    c.set(b"u", [1u8; 64], 0, secs(10)).unwrap();
    clock.advance(Duration::from_secs(10));
    c.set(b"u", [2u8; 64], 0, secs(10)).unwrap();
    assert_eq!(c.get(b"u").unwrap().value(), [2u8; 64]);
    assert_eq!(remaining_of(&mut c, b"u"), 10, "expired: a new deadline");
    // The general store (`execute` with a compare-free set) decides alike.
    c.set(b"v", [1u8; 64], 0, secs(hour as u64)).unwrap();
    let v = entry_of(&c, b"v").0;
    clock.advance(Duration::from_secs(5));
    let store = Store {
        ttl: Ttl::After(Duration::from_secs(hour as u64)),
        ..Store::new(StoreMode::Set, &b"v"[..], &[9u8; 64][..])
    };
    c.store(&store).unwrap();
    assert_eq!(entry_of(&c, b"v").0, v, "the general store: in place");
    assert_eq!(c.get(b"v").unwrap().value(), [9u8; 64]);
    c.check_invariants();
}

#[test]
fn a_token_made_by_a_store_or_a_view_turns_overwrites_in_place_off() {
    for make in 0..3 {
        let (mut c, _) = small(Eviction::Merge);
        c.set(b"k", [1u8; 64], 0, None).unwrap();
        match make {
            0 => drop(c.get(b"k").unwrap().to_owned()),
            1 => {
                let store = Store {
                    token: true,
                    ..Store::new(StoreMode::Set, &b"j"[..], &b"v"[..])
                };
                assert_ne!(c.store(&store).unwrap(), 0, "the token asked for");
            }
            _ => drop(c.get(b"k").unwrap().cas()),
        }
        let at = entry_of(&c, b"k").0;
        c.set(b"k", [2u8; 64], 0, None).unwrap();
        assert_ne!(entry_of(&c, b"k").0, at, "way {make}");
        assert_eq!(c.get(b"k").unwrap().value(), [2u8; 64]);
        c.check_invariants();
    }
}

#[test]
fn a_token_stops_overwrites_in_place_in_its_own_segment_only_and_until_it_is_emptied() {
    // 4 KiB segments: "a" and "b" lie in different ones.
    let (mut c, _) = small(Eviction::Merge);
    c.set(b"a", [1u8; 64], 0, None).unwrap();
    for n in 0.. {
        let k = format!("f{n}");
        c.set(&k, [0u8; 200], 0, None).unwrap();
        if entry_of(&c, k.as_bytes()).0.seg != entry_of(&c, b"a").0.seg {
            break;
        }
        assert!(n < 100, "4 KiB segments fill up");
    }
    c.set(b"b", [1u8; 64], 0, None).unwrap();
    let (a, b) = (entry_of(&c, b"a").0, entry_of(&c, b"b").0);
    assert_ne!(a.seg, b.seg);
    let token = c.get(b"a").unwrap().cas();
    // "b"'s segment has no token out: in place.
    c.set(b"b", [2u8; 64], 0, None).unwrap();
    assert_eq!(entry_of(&c, b"b").0, b, "another segment: in place");
    // "a"'s has: appended, and the token goes stale.
    c.set(b"a", [2u8; 64], 0, None).unwrap();
    let moved = entry_of(&c, b"a").0;
    assert_ne!(moved, a, "its own segment: the log");
    assert_eq!(c.cas(b"a", [3u8; 64], 0, None, token), Err(Error::Exists));
    // Once "a"'s old segment is emptied and reused (a new generation),
    // nothing names a place in it: items written there overwrite in place.
    c.flush();
    c.set(b"c", [1u8; 64], 0, None).unwrap();
    let at = entry_of(&c, b"c").0;
    assert_eq!(at.seg, a.seg, "the emptied segment is the first reused");
    c.set(b"c", [2u8; 64], 0, None).unwrap();
    assert_eq!(entry_of(&c, b"c").0, at, "a new generation: in place");
    assert_eq!(c.get(b"c").unwrap().value(), [2u8; 64]);
    c.check_invariants();
}

#[test]
fn stores_that_ask_for_no_token_keep_overwrites_in_place() {
    // A store (what the storage thread and the server run) asks for no
    // token unless it says so: its answer's token is 0, and a plain set
    // of the same size is made in place as `set` makes it.
    let (mut c, _) = small(Eviction::Merge);
    c.set(b"k", [1u8; 64], 0, None).unwrap();
    c.set(b"other", [1u8; 8], 0, None).unwrap();
    let at = entry_of(&c, b"k").0;
    let store = Store::new(StoreMode::Set, &b"k"[..], &[2u8; 64][..]);
    assert_eq!(c.store(&store), Ok(0));
    let add = Store::new(StoreMode::Add, &b"new"[..], &b"v"[..]);
    assert_eq!(c.store(&add), Ok(0));
    let replace = Store::new(StoreMode::Replace, &b"other"[..], &[3u8; 8][..]);
    assert_eq!(c.store(&replace), Ok(0));
    let r = c.execute(&Request::Store(Store::new(
        StoreMode::Set,
        &b"k"[..],
        &[3u8; 64][..],
    )));
    assert!(matches!(r, Response::Stored(Ok(0))));
    assert_eq!(entry_of(&c, b"k").0, at, "still in place");
    assert_eq!(c.get(b"k").unwrap().value(), [3u8; 64]);
    assert_eq!(c.get(b"other").unwrap().value(), [3u8; 8]);
    c.check_invariants();
}

#[test]
fn reads_that_ask_for_no_token_keep_overwrites_in_place() {
    // A read through `execute` (the storage thread's, a sharded cache's,
    // the server's) copies the item out without its token unless it asks:
    // the answer's token is 0 and overwrites stay in place. A read that
    // asks gets the token a borrowed view gives, and from then on the
    // shard appends, so that token goes stale at the next overwrite.
    let (mut c, _) = small(Eviction::Merge);
    c.set(b"k", [1u8; 64], 0, None).unwrap();
    let at = entry_of(&c, b"k").0;
    let get = |opts: GetOpts| Request::Get {
        key: &b"k"[..],
        opts,
    };
    let found = |r: Response| match r {
        Response::Get(Ok(Some(found))) => found.item,
        other => panic!("not a hit: {other:?}"),
    };
    let plain = found(c.execute(&get(GetOpts::default())));
    assert_eq!((plain.value(), plain.cas()), (&[1u8; 64][..], 0));
    let touched = GetOpts {
        touch: Some(Ttl::Never),
        ..GetOpts::default()
    };
    assert_eq!(found(c.execute(&get(touched))).cas(), 0, "a gat");
    let mut batch = crate::Batch::new();
    batch.get(b"k");
    batch.execute(&mut c);
    let batched = &batch.responses()[0];
    assert!(matches!(batched, Response::Get(Ok(Some(f))) if f.item.cas() == 0));
    c.set(b"k", [2u8; 64], 0, None).unwrap();
    assert_eq!(entry_of(&c, b"k").0, at, "no token out: in place");
    let asked = GetOpts {
        token: true,
        ..GetOpts::default()
    };
    let token = found(c.execute(&get(asked))).cas();
    assert_eq!(token, c.peek(b"k").unwrap().cas(), "the view's token");
    c.set(b"k", [3u8; 64], 0, None).unwrap();
    assert_ne!(entry_of(&c, b"k").0, at, "a token is out: the log");
    assert_eq!(c.cas(b"k", [4u8; 64], 0, None, token), Err(Error::Exists));
    assert_eq!(c.get(b"k").unwrap().value(), [3u8; 64]);
    c.check_invariants();
}

#[test]
fn a_full_heap_without_eviction_still_takes_same_size_overwrites() {
    // No room for a new version: one of the same size goes in place.
    let (mut c, _) = small(Eviction::None);
    let mut n = 0u32;
    while c.set(format!("k{n}"), [1u8; 100], 7, None).is_ok() {
        n += 1;
    }
    let stats = c.stats();
    c.set(b"k0", [2u8; 100], 7, None).unwrap();
    assert_eq!(c.get(b"k0").unwrap().value(), [2u8; 100]);
    assert_eq!(c.stats().items, stats.items);
    assert_eq!(c.get(format!("k{}", n - 1)).unwrap().value(), [1u8; 100]);
    c.check_invariants();
}

#[test]
fn an_overwrite_that_finds_no_room_changes_nothing() {
    // The write path reads the key's table entry only after it has
    // reserved room and copied the item in; a reserve that fails must
    // leave the old item, the table and every count as they were.
    let (mut c, _) = small(Eviction::None);
    let mut n = 0u32;
    while c
        .set(format!("k{n}").as_bytes(), [1u8; 100], 7, None)
        .is_ok()
    {
        n += 1;
    }
    assert!(n > 10, "{n} items fit");
    let before = c.stats();
    let used: Vec<u32> = c.segs.headers.iter().map(|h| h.write_offset).collect();
    for i in [0, n / 2, n - 1] {
        let key = format!("k{i}");
        // One byte longer: the new version needs room in the log (one of
        // the same size would be written in place and stored).
        assert_eq!(
            c.set(key.as_bytes(), [2u8; 101], 9, None),
            Err(Error::OutOfMemory)
        );
        let item = c.get(key.as_bytes()).expect("the old item stays");
        assert_eq!((item.value(), item.flags()), (&[1u8; 100][..], 7));
    }
    let after = c.stats();
    assert_eq!(
        (after.items, after.live_bytes, after.evictions),
        (before.items, before.live_bytes, before.evictions)
    );
    let used_after: Vec<u32> = c.segs.headers.iter().map(|h| h.write_offset).collect();
    assert_eq!(used, used_after, "no bytes were taken");
    // The table still finds and removes the old items.
    assert!(c.delete(b"k0"));
    assert!(c.get(b"k0").is_none());
    c.check_invariants();
}

#[test]
fn counters_parse_as_memcached_reads_them() {
    assert_eq!(parse_counter(b"0"), Some(0));
    assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_counter(b"18446744073709551616"), None);
    assert_eq!(parse_counter(b"000000000000000000042"), Some(42));
    assert_eq!(parse_counter(b"  5"), Some(5));
    assert_eq!(parse_counter(b"+5"), Some(5));
    assert_eq!(parse_counter(b"5 "), Some(5));
    assert_eq!(
        parse_counter(b"5 x"),
        Some(5),
        "only the next byte is checked"
    );
    assert_eq!(parse_counter(b"-0"), Some(0));
    assert_eq!(parse_counter(b"-1"), None);
    assert_eq!(parse_counter(b"-18446744073709551615"), Some(1));
    assert_eq!(parse_counter(b""), None);
    assert_eq!(parse_counter(b" "), None);
    assert_eq!(parse_counter(b"12a"), None);
    assert_eq!(parse_counter(b"++5"), None);
    assert_eq!(parse_counter(b"x5"), None);
}

/// `execute` runs a plain set (no compare, no token, no external value)
/// through `set`'s short path; every other store, and the plain set
/// before this arm existed, through the general store. Both ways, step by
/// step on twin caches, the same answer, the same counters and the same
/// item: new keys, overwrites in place and not (another size, a TTL),
/// an already expired TTL, refused input, a delayed flush pending and
/// due, and evictions in a heap that fills.
#[test]
fn a_plain_set_through_execute_matches_the_general_store() {
    let clock = ManualClock::new();
    let twin = || small_cache(64 << 10, 4 << 10, 8, Eviction::Merge, &clock);
    let (mut short, mut general) = (twin(), twin());
    let long_key = vec![b'k'; MAX_KEY_LEN + 1];
    let huge = vec![b'v'; 8 << 10];
    let mut script: Vec<(Vec<u8>, Vec<u8>, Ttl)> = Vec::new();
    for round in 0..3u8 {
        for i in 0..400u32 {
            let key = format!("key{}", i % 250).into_bytes();
            let value = vec![round; 20 + (i as usize % 3) * (round as usize)];
            let ttl = match i % 7 {
                0 => Ttl::After(Duration::from_secs(30)),
                1 => Ttl::Expired,
                _ => Ttl::Never,
            };
            script.push((key, value, ttl));
        }
        script.push((Vec::new(), b"v".to_vec(), Ttl::Never));
        script.push((long_key.clone(), b"v".to_vec(), Ttl::Never));
        script.push((b"big".to_vec(), huge.clone(), Ttl::Never));
        script.push((
            b"far".to_vec(),
            b"v".to_vec(),
            Ttl::After(Duration::from_secs(u64::from(crate::MAX_TTL) + 1)),
        ));
    }
    for (step, (key, value, ttl)) in script.iter().enumerate() {
        if step == 900 {
            short.flush_after(Duration::from_secs(5));
            general.flush_after(Duration::from_secs(5));
        }
        if step % 50 == 0 {
            clock.advance(Duration::from_secs(2));
        }
        let store = Store {
            ttl: *ttl,
            ..Store::new(StoreMode::Set, &key[..], &value[..])
        };
        assert!(store.is_plain_set());
        let answer = short.execute(&Request::Store(store.clone()));
        let want = general.store_hashed(&store, hash_key(key));
        assert_eq!(answer, Response::Stored(want), "step {step}");
        assert_eq!(short.stats(), general.stats(), "step {step}");
        let read = |c: &mut Segcache| c.get(key).map(|it| (it.value().to_vec(), it.ttl()));
        assert_eq!(read(&mut short), read(&mut general), "step {step}");
    }
    assert!(
        short.stats().evictions > 0 || short.stats().merges > 0,
        "the heap never filled"
    );
    short.check_invariants();
    general.check_invariants();
}

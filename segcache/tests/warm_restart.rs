//! Warm restart through the public API: fill, save, restore, verify; and
//! every way a restore must refuse (truncated or tampered metadata, a
//! tampered heap, changed settings, no graceful shutdown), starting empty
//! and saying why, never serving corrupted data.

use segcache::{Error, ManualClock, RestoreOutcome, Segcache, StorageConfig};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

fn builder(pool: &Path, clock: &ManualClock) -> segcache::Builder {
    Segcache::builder()
        .heap_size(8 << 20)
        .segment_size(256 << 10)
        .hash_power(14)
        .datapool(pool)
        .restore(true)
        .clock(clock.clone())
}

/// Fills a cache with varied items; returns what `get` finds for each key.
fn fill(cache: &mut Segcache) -> HashMap<Vec<u8>, (Vec<u8>, u32, u64)> {
    let ttls = [
        None,
        Some(Duration::from_secs(3600)),
        Some(Duration::from_secs(50)),
    ];
    for i in 0..30_000u32 {
        let key = format!("key:{i}").into_bytes();
        let value = vec![(i % 251) as u8; 20 + (i as usize % 300)];
        cache
            .set(&key, &value, i % 7, ttls[i as usize % 3])
            .unwrap();
    }
    for i in (0..30_000u32).step_by(5) {
        cache.delete(format!("key:{i}").as_bytes());
    }
    (0..30_000u32)
        .filter_map(|i| {
            let key = format!("key:{i}").into_bytes();
            let item = cache.peek(&key)?;
            let found = (item.value().to_vec(), item.flags(), item.cas());
            Some((key, found))
        })
        .collect()
}

fn fresh_reason(cache: &Segcache) -> String {
    match cache.restore_outcome() {
        RestoreOutcome::Fresh { reason } => reason.clone(),
        other => panic!("expected a fresh start, got {other:?}"),
    }
}

#[test]
fn every_item_comes_back_with_its_cas_and_ttl_counting_while_down() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert!(fresh_reason(&cache).contains("no metadata"));
    let before = fill(&mut cache);
    assert!(
        before.len() > 10_000,
        "evictions kept {} items",
        before.len()
    );
    let stats = cache.stats();
    cache.save().unwrap();

    // Down for 20 s of clock time: nothing has expired yet.
    clock.advance(Duration::from_secs(20));
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert_eq!(
        cache.restore_outcome(),
        &RestoreOutcome::Restored { items: stats.items }
    );
    for (key, (value, flags, cas)) in &before {
        let item = cache.get(key).unwrap_or_else(|| panic!("{key:?} lost"));
        assert_eq!(
            (item.value(), item.flags(), item.cas()),
            (&value[..], *flags, *cas)
        );
        if let Some(ttl) = item.ttl().duration() {
            assert!(
                ttl <= Duration::from_secs(3600 - 20),
                "TTL kept counting while down"
            );
        }
    }
    // CAS tokens from before the restart still work, once.
    let (key, (_, _, token)) = before.iter().next().unwrap();
    cache.cas(key, b"new", 0, None, *token).unwrap();
    assert_eq!(
        cache.cas(key, b"newer", 0, None, *token),
        Err(Error::Exists)
    );
    // Writes after a restore work and survive the next restart too.
    cache.set(b"after", b"restore", 0, None).unwrap();
    cache.save().unwrap();

    // Down past the 50 s TTLs: those items are gone on restore.
    clock.advance(Duration::from_secs(40));
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert_eq!(cache.get(b"after").unwrap().value(), b"restore");
    let rewritten = before.keys().next().unwrap();
    assert_eq!(cache.get(rewritten).unwrap().value(), b"new");
    for (key, (value, _, _)) in before.iter().filter(|(k, _)| *k != rewritten) {
        let i: u32 = std::str::from_utf8(&key[4..]).unwrap().parse().unwrap();
        match cache.get(key) {
            Some(_) if i % 3 == 2 => panic!("{key:?} should have expired while down"),
            Some(item) => assert_eq!(item.value(), &value[..]),
            None if i % 3 == 2 => {}
            None => panic!("{key:?} lost"),
        }
    }
}

#[test]
fn a_crash_restarts_empty_and_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let mut cache = builder(&pool, &clock).build().unwrap();
    fill(&mut cache);
    cache.save().unwrap();
    // Restored, then "killed": no save. The metadata was consumed at start.
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert!(matches!(
        cache.restore_outcome(),
        RestoreOutcome::Restored { .. }
    ));
    cache.set(b"written after restore", b"x", 0, None).unwrap();
    drop(cache);
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert!(fresh_reason(&cache).contains("did not shut down gracefully"));
    assert!(cache.is_empty());
    assert!(cache.get(b"key:1").is_none());
    cache.set(b"k", b"v", 0, None).unwrap();
    assert_eq!(cache.get(b"k").unwrap().value(), b"v");
}

#[test]
fn truncated_or_tampered_metadata_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let meta = dir.path().join("pool.meta");
    let clock = ManualClock::new();
    type Damage = (&'static str, fn(&Path));
    let damages: [Damage; 3] = [
        ("truncated", |m| {
            let bytes = std::fs::read(m).unwrap();
            std::fs::write(m, &bytes[..bytes.len() / 2]).unwrap();
        }),
        ("one byte flipped", |m| {
            let mut bytes = std::fs::read(m).unwrap();
            let at = bytes.len() / 3;
            bytes[at] ^= 0x40;
            std::fs::write(m, bytes).unwrap();
        }),
        ("not metadata", |m| std::fs::write(m, b"hello").unwrap()),
    ];
    for (what, damage) in damages {
        let mut cache = builder(&pool, &clock).build().unwrap();
        fill(&mut cache);
        cache.save().unwrap();
        damage(&meta);
        let cache = builder(&pool, &clock).build().unwrap();
        let reason = fresh_reason(&cache);
        assert!(
            reason.contains("checksum") || reason.contains("not a segcache"),
            "{what}: {reason}"
        );
        assert!(cache.is_empty(), "{what}");
        assert!(!meta.exists(), "{what}: the bad snapshot is removed");
    }
}

#[test]
fn a_tampered_heap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let mut cache = builder(&pool, &clock).build().unwrap();
    fill(&mut cache);
    cache.save().unwrap();
    let mut heap = std::fs::read(&pool).unwrap();
    heap[1000] ^= 1;
    std::fs::write(&pool, heap).unwrap();
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert!(fresh_reason(&cache).contains("heap file does not match"));
    assert!(cache.is_empty() && cache.get(b"key:1").is_none());
}

#[test]
fn changed_settings_start_empty() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    for change in [
        |b: segcache::Builder| b.segment_size(128 << 10),
        |b: segcache::Builder| b.heap_size(16 << 20),
    ] {
        let mut cache = builder(&pool, &clock).build().unwrap();
        fill(&mut cache);
        cache.save().unwrap();
        let cache = change(builder(&pool, &clock)).build().unwrap();
        assert!(
            fresh_reason(&cache).contains("settings changed"),
            "{:?}",
            cache.restore_outcome()
        );
        assert!(cache.is_empty());
    }
}

#[test]
fn a_table_that_grew_restarts_warm_whatever_the_hint() {
    // A tiny starting table grows while `fill` runs (and may be mid-drain
    // at the save); the snapshot holds the grown table, and the table's
    // size hint is not a setting: a restart with another hint restores.
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let mut cache = builder(&pool, &clock).hash_power(3).build().unwrap();
    let small = Segcache::builder().hash_power(3).build().unwrap();
    let before = fill(&mut cache);
    let stats = cache.stats();
    assert!(stats.hash_table_bytes > 100 * small.stats().hash_table_bytes);
    cache.save().unwrap();
    let mut cache = builder(&pool, &clock).hash_power(20).build().unwrap();
    assert_eq!(
        cache.restore_outcome(),
        &RestoreOutcome::Restored { items: stats.items }
    );
    for (key, (value, flags, cas)) in &before {
        let item = cache.get(key).unwrap_or_else(|| panic!("{key:?} lost"));
        assert_eq!(
            (item.value(), item.flags(), item.cas()),
            (&value[..], *flags, *cas)
        );
    }
    // It keeps growing after the restart.
    for i in 0..20_000u32 {
        cache
            .set(format!("more:{i}").as_bytes(), b"v", 0, None)
            .unwrap();
    }
    assert_eq!(cache.get(b"more:7").unwrap().value(), b"v");
}

#[test]
fn restore_needs_a_datapool_and_save_needs_one_too() {
    let err = Segcache::builder().restore(true).build().unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidConfig {
            field: "restore",
            ..
        }
    ));
    let err = Segcache::builder().build().unwrap().save().unwrap_err();
    assert!(matches!(err, Error::Persistence(_)));
    let err = Segcache::builder()
        .datapool("/nonexistent-dir/x/pool")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Persistence(_)), "{err}");
    let cache = Segcache::builder().build().unwrap();
    assert_eq!(cache.restore_outcome(), &RestoreOutcome::NotRequested);
}

#[test]
fn storage_thread_and_sharded_cache_restart_warm() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let (handle, thread) = builder(&pool, &clock)
        .spawn_storage(StorageConfig::default())
        .unwrap();
    for i in 0..1000u32 {
        handle
            .set(i.to_le_bytes(), b"from the storage thread", 0, None)
            .unwrap();
    }
    drop(handle);
    thread.join().unwrap();
    let (handle, thread) = builder(&pool, &clock)
        .spawn_storage(StorageConfig::default())
        .unwrap();
    assert_eq!(
        handle.restore_outcome(),
        &RestoreOutcome::Restored { items: 1000 }
    );
    assert_eq!(handle.len().unwrap(), 1000);
    assert_eq!(
        handle.get(7u32.to_le_bytes()).unwrap().unwrap().value(),
        b"from the storage thread"
    );
    drop(handle);
    thread.join().unwrap();

    let sharded = || {
        Segcache::builder()
            .heap_size(16 << 20)
            .segment_size(256 << 10)
            .datapool(dir.path().join("sharded"))
            .restore(true)
            .clock(clock.clone())
            .build_sharded(4)
            .unwrap()
    };
    let cache = sharded();
    for i in 0..1000u32 {
        cache.set(i.to_le_bytes(), b"sharded", 0, None).unwrap();
    }
    cache.save().unwrap();
    assert!(dir.path().join("sharded.shard3.meta").exists());
    let cache = sharded();
    assert_eq!(cache.len(), 1000);
    assert!(cache
        .restore_outcomes()
        .iter()
        .all(|o| matches!(o, RestoreOutcome::Restored { .. })));
}

#[test]
fn a_token_held_across_a_restart_goes_stale_at_a_same_size_overwrite() {
    // The restored cache cannot know which tokens its clients hold, so
    // it writes no overwrite in place over an item restored with it.
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let clock = ManualClock::new();
    let mut cache = builder(&pool, &clock).build().unwrap();
    cache.set(b"k", [1u8; 64], 0, None).unwrap();
    let token = cache.peek(b"k").unwrap().cas();
    cache.save().unwrap();
    let mut cache = builder(&pool, &clock).build().unwrap();
    assert_eq!(
        cache.restore_outcome(),
        &RestoreOutcome::Restored { items: 1 }
    );
    cache.set(b"k", [2u8; 64], 0, None).unwrap();
    assert_eq!(
        cache.cas(b"k", [3u8; 64], 0, None, token),
        Err(Error::Exists),
        "the old version's token matched the new version"
    );
    assert_eq!(cache.get(b"k").unwrap().value(), [2u8; 64]);
}

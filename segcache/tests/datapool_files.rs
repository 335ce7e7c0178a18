//! The datapool's files on disk: the heap file's blocks are reserved when
//! the cache is built (a filesystem that cannot hold the heap is an error
//! then, never a SIGBUS later), a temporary snapshot left by an
//! interrupted save is removed at the next build, and a failed save
//! removes its temporary file and says why.

use segcache::{Error, Segcache};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn builder(pool: &Path, heap: usize) -> segcache::Builder {
    Segcache::builder()
        .heap_size(heap)
        .segment_size(256 << 10)
        .hash_power(12)
        .datapool(pool)
        .restore(true)
}

#[test]
fn the_heap_file_is_allocated_not_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let cache = builder(&pool, 4 << 20).build().unwrap();
    let meta = std::fs::metadata(&pool).unwrap();
    assert_eq!(meta.len(), 4 << 20);
    assert!(
        meta.blocks() * 512 >= 4 << 20,
        "{} bytes allocated for a 4 MiB heap",
        meta.blocks() * 512
    );
    drop(cache);
    // A sparse file from an older build is filled in on the next start.
    std::fs::remove_file(&pool).unwrap();
    std::fs::File::create(&pool)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let _cache = builder(&pool, 4 << 20).build().unwrap();
    assert!(std::fs::metadata(&pool).unwrap().blocks() * 512 >= 4 << 20);
}

#[test]
fn a_heap_the_filesystem_cannot_hold_is_an_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    // 2 TiB, the largest heap: more than a test machine's disk holds.
    let heap = 1usize << 41;
    let err = match builder(&pool, heap).segment_size(2 << 20).build() {
        Err(e) => e,
        Ok(_) => panic!("a {heap}-byte datapool was accepted"),
    };
    let Error::Persistence(reason) = &err else {
        panic!("{err:?}");
    };
    assert!(reason.contains(&pool.display().to_string()), "{reason}");
    assert!(reason.contains(&heap.to_string()), "{reason}");
    assert!(reason.contains("free"), "{reason}");
    assert!(!pool.exists(), "the file a failed start created is removed");
}

#[test]
fn a_leftover_temporary_snapshot_is_removed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let tmp = dir.path().join("pool.meta.tmp");
    std::fs::write(&tmp, vec![7u8; 100_000]).unwrap();
    let _cache = builder(&pool, 1 << 20).build().unwrap();
    assert!(!tmp.exists());
}

#[test]
fn a_failed_save_says_why_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mut cache = builder(&pool, 1 << 20).build().unwrap();
    cache.set(b"k", b"v", 0, None).unwrap();
    // The snapshot's place is taken by a directory: the rename fails.
    std::fs::create_dir(dir.path().join("pool.meta")).unwrap();
    let err = cache.save().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("pool.meta"), "{text}");
    assert!(text.contains("byte snapshot"), "{text}");
    assert!(!dir.path().join("pool.meta.tmp").exists());
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["pool", "pool.meta"]);
}

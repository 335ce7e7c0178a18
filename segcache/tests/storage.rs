//! Storage-thread mode through its public API: many threads, pipelining,
//! backpressure, shutdown with requests in flight, client panics, expiry
//! and pinning. Every test is bounded by a timeout so none can hang.

use segcache::ops::{ArithOpts, GetOpts};
use segcache::storage::TrySubmitError;
use segcache::{Error, ManualClock, Request, Response, Segcache, StorageConfig, Store, StoreMode};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it takes longer than `secs`.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("timed out (or the test thread panicked)")
}

fn config(capacity: usize) -> StorageConfig {
    StorageConfig {
        queue_capacity: capacity,
        ..StorageConfig::default()
    }
}

#[test]
fn threads_read_back_their_last_acknowledged_write() {
    within(60, || {
        let (handle, thread) = Segcache::builder()
            .heap_size(16 << 20)
            .spawn_storage(config(64))
            .unwrap();
        let workers: Vec<_> = (0..4u32)
            .map(|t| {
                let handle = handle.clone();
                std::thread::spawn(move || {
                    let mut client = handle.client();
                    let mut last = std::collections::HashMap::new();
                    for i in 0..5_000u32 {
                        let key = format!("{t}:{}", i % 97).into_bytes();
                        let value = format!("{t}-{i}").into_bytes();
                        if i % 3 == 0 {
                            // Blocking API.
                            handle.set(&key, &value, t, None).unwrap();
                        } else {
                            // Pipelined API.
                            client
                                .submit(Request::Store(Store {
                                    flags: t,
                                    ..Store::new(StoreMode::Set, key.clone(), value.clone())
                                }))
                                .unwrap();
                            if i % 10 == 0 {
                                while let Some(reply) = client.recv().unwrap() {
                                    assert!(matches!(reply, Response::Stored(Ok(_))));
                                }
                            }
                        }
                        last.insert(key, value);
                        // The shared key only ever holds a value some thread wrote.
                        handle
                            .set(b"shared", format!("{t}-{i}").as_bytes(), 0, None)
                            .unwrap();
                    }
                    while let Some(reply) = client.recv().unwrap() {
                        assert!(matches!(reply, Response::Stored(Ok(_))));
                    }
                    for (key, value) in last {
                        let item = handle.get(&key).unwrap().expect("own key present");
                        assert_eq!((item.value(), item.flags()), (&value[..], t));
                    }
                    let shared = handle.get(b"shared").unwrap().unwrap().into_value();
                    let text = String::from_utf8(shared).unwrap();
                    let (who, i) = text.split_once('-').unwrap();
                    assert!(who.parse::<u32>().unwrap() < 4 && i.parse::<u32>().unwrap() < 5_000);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(handle.len().unwrap(), 4 * 97 + 1);
        drop(handle);
        let stats = thread.join().unwrap();
        assert_eq!(stats.items, 4 * 97 + 1);
    });
}

#[test]
fn full_queue_hands_the_request_back_and_submit_makes_room() {
    within(30, || {
        let (handle, thread) = Segcache::builder().spawn_storage(config(4)).unwrap();
        let mut client = handle.client();
        for i in 0..4u8 {
            client
                .try_submit(Request::Arith {
                    key: vec![i],
                    opts: ArithOpts::new(true, 1),
                })
                .unwrap();
        }
        let fifth = Request::Get {
            key: b"x".to_vec(),
            opts: GetOpts::default(),
        };
        assert_eq!(
            client.try_submit(fifth.clone()),
            Err(TrySubmitError::Full(fifth.clone()))
        );
        // Blocking submit waits for one reply, keeps it, then submits.
        client.submit(fifth).unwrap();
        assert_eq!(client.in_flight(), 5);
        for _ in 0..4 {
            assert_eq!(
                client.recv().unwrap(),
                Some(Response::Number(Err(Error::NotFound)))
            );
        }
        assert_eq!(client.recv().unwrap(), Some(Response::Get(Ok(None))));
        assert_eq!(client.recv().unwrap(), None, "nothing in flight");
        drop(client);
        drop(handle);
        thread.join().unwrap();
    });
}

#[test]
fn shutdown_answers_every_accepted_request_and_refuses_the_rest() {
    within(60, || {
        let (handle, thread) = Segcache::builder().spawn_storage(config(256)).unwrap();
        let clients: Vec<_> = (0..3)
            .map(|t| {
                let handle = handle.clone();
                std::thread::spawn(move || {
                    let mut client = handle.client();
                    let (mut accepted, mut answered) = (0u64, 0u64);
                    for i in 0..200_000u32 {
                        let key = format!("{t}:{i}").into_bytes();
                        let req = Request::Store(Store::new(StoreMode::Set, key, b"v".to_vec()));
                        match client.submit(req) {
                            Ok(()) => accepted += 1,
                            Err(Error::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    while let Some(reply) = client.recv().unwrap() {
                        assert!(matches!(reply, Response::Stored(Ok(_))));
                        answered += 1;
                    }
                    assert_eq!(accepted, answered, "every accepted request was answered");
                    accepted
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        handle.shutdown();
        let accepted: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
        assert!(handle.set(b"late", b"v", 0, None) == Err(Error::Closed));
        // Stopped only once the thread has returned (it may still be
        // leaving its loop after the last reply went out).
        let stats = thread.join().unwrap();
        assert!(handle.is_stopped());
        assert_eq!(stats.items, accepted, "every accepted set landed");
    });
}

#[test]
fn dropping_every_handle_stops_the_thread() {
    within(30, || {
        let (handle, thread) = Segcache::builder().spawn_storage(config(8)).unwrap();
        let client = handle.client();
        let other = handle.clone();
        drop(handle);
        other.set(b"k", b"v", 0, None).unwrap();
        drop(other);
        drop(client);
        thread.join().unwrap();
    });
}

#[test]
fn a_panicking_client_does_not_take_the_storage_thread_down() {
    within(30, || {
        let (handle, thread) = Segcache::builder().spawn_storage(config(8)).unwrap();
        let h = handle.clone();
        let crashed = std::thread::spawn(move || {
            let mut client = h.client();
            for i in 0..8u8 {
                client
                    .submit(Request::Get {
                        key: vec![i],
                        opts: GetOpts::default(),
                    })
                    .unwrap();
            }
            panic!("client thread fails with requests in flight");
        })
        .join();
        assert!(crashed.is_err());
        for i in 0..100u32 {
            handle.set(i.to_le_bytes(), b"v", 0, None).unwrap();
        }
        assert_eq!(handle.len().unwrap(), 100);
        drop(handle);
        assert_eq!(thread.join().unwrap().items, 100);
    });
}

#[test]
fn the_storage_thread_expires_on_its_own() {
    within(30, || {
        let clock = ManualClock::new();
        let (handle, thread) = Segcache::builder()
            .clock(clock.clone())
            .spawn_storage(StorageConfig {
                expire_interval: Duration::from_millis(20),
                ..StorageConfig::default()
            })
            .unwrap();
        for i in 0..100u32 {
            handle
                .set(i.to_le_bytes(), b"v", 0, Some(Duration::from_secs(5)))
                .unwrap();
        }
        clock.advance(Duration::from_secs(5));
        // No request touches the items: only the thread's own expire() can
        // reclaim them. Poll stats (which never expires anything itself).
        let mut expired = 0;
        for _ in 0..500 {
            expired = handle.stats().unwrap().expirations;
            if expired == 100 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(expired, 100);
        drop(handle);
        thread.join().unwrap();
    });
}

#[test]
fn pinning_to_a_missing_core_still_serves() {
    within(30, || {
        for core in [0, 100_000] {
            let (handle, thread) = Segcache::builder()
                .spawn_storage(StorageConfig {
                    pin_core: Some(core),
                    ..StorageConfig::default()
                })
                .unwrap();
            handle.set(b"k", b"v", 0, None).unwrap();
            assert_eq!(handle.get(b"k").unwrap().unwrap().value(), b"v");
            drop(handle);
            thread.join().unwrap();
        }
    });
}

#[test]
fn bad_storage_config_is_an_error() {
    let err = Segcache::builder().spawn_storage(config(0)).unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidConfig {
            field: "queue_capacity",
            ..
        }
    ));
    let err = Segcache::builder()
        .hash_power(0)
        .spawn_storage(config(1))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidConfig {
            field: "hash_power",
            ..
        }
    ));
}

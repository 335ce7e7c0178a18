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

/// One step of a client's private model: the request and the reply a
/// cache holding only this thread's keys must give.
enum Expect {
    Stored,
    NotStored,
    Hit(Vec<u8>),
    Miss,
    Deleted,
    NotFound,
    Number(u64),
}

/// A tiny deterministic generator (xorshift), one per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A random request on one of this thread's keys, applied to `model`,
/// with the reply it must get. Values are decimal numbers, so `incr`
/// always applies to a present key.
fn step(
    t: u32,
    rng: &mut Rng,
    model: &mut std::collections::HashMap<Vec<u8>, Vec<u8>>,
) -> (Request, Expect) {
    let key = format!("t{t}k{}", rng.below(6)).into_bytes();
    let value = rng.below(1000).to_string().into_bytes();
    let present = model.get(&key).cloned();
    match rng.below(6) {
        0 => {
            model.insert(key.clone(), value.clone());
            let store = Store::new(StoreMode::Set, key, value);
            (Request::Store(store), Expect::Stored)
        }
        1 => {
            let expect = if present.is_some() {
                Expect::NotStored
            } else {
                model.insert(key.clone(), value.clone());
                Expect::Stored
            };
            (
                Request::Store(Store::new(StoreMode::Add, key, value)),
                expect,
            )
        }
        2 => {
            let expect = match present {
                Some(mut old) if old.len() < 12 => {
                    old.extend_from_slice(b"7");
                    model.insert(key.clone(), old);
                    Expect::Stored
                }
                Some(_) => {
                    // Long enough: start the number over instead.
                    model.insert(key.clone(), value.clone());
                    let store = Store::new(StoreMode::Set, key, value);
                    return (Request::Store(store), Expect::Stored);
                }
                None => Expect::NotStored,
            };
            (
                Request::Store(Store::new(StoreMode::Append, key, b"7".to_vec())),
                expect,
            )
        }
        3 => {
            let expect = match model.remove(&key) {
                Some(_) => Expect::Deleted,
                None => Expect::NotFound,
            };
            let opts = Default::default();
            (Request::Delete { key, opts }, expect)
        }
        4 => {
            let delta = rng.below(50);
            let expect = match present {
                Some(old) => {
                    let new = std::str::from_utf8(&old).unwrap().parse::<u64>().unwrap() + delta;
                    model.insert(key.clone(), new.to_string().into_bytes());
                    Expect::Number(new)
                }
                None => Expect::NotFound,
            };
            let opts = ArithOpts::new(true, delta);
            (Request::Arith { key, opts }, expect)
        }
        _ => {
            let expect = match present {
                Some(v) => Expect::Hit(v),
                None => Expect::Miss,
            };
            let opts = GetOpts::default();
            (Request::Get { key, opts }, expect)
        }
    }
}

fn check(expect: &Expect, got: &Response, context: &str) {
    let ok = match (expect, got) {
        (Expect::Stored, Response::Stored(Ok(_))) => true,
        (Expect::NotStored, Response::Stored(Err(Error::NotStored))) => true,
        (Expect::Hit(v), Response::Get(Ok(Some(found)))) => found.item.value() == &v[..],
        (Expect::Miss, Response::Get(Ok(None))) => true,
        (Expect::Deleted, Response::Deleted(Ok(()))) => true,
        (Expect::NotFound, Response::Deleted(Err(Error::NotFound))) => true,
        (Expect::NotFound, Response::Number(Err(Error::NotFound))) => true,
        (Expect::Number(n), Response::Number(Ok((got, _)))) => got == n,
        _ => false,
    };
    assert!(ok, "{context}: got {got:?}");
}

/// Several threads, each owning its keys, send random requests through
/// every way in (blocking calls, pipelined submits, `Batch`es run blocking
/// and submitted from a loop) while the storage thread and the clients
/// themselves (combining) take turns on the cache: every reply matches
/// the thread's private model, and every request is counted as run
/// exactly once, by one side or the other.
#[test]
fn every_reply_matches_each_clients_own_model_whoever_runs_it() {
    model_check(true);
}

/// With combining off, the same traffic is run by the storage thread
/// alone: no client ever takes the cache.
#[test]
fn with_combining_off_only_the_storage_thread_runs_requests() {
    model_check(false);
}

fn model_check(combining: bool) {
    within(120, move || {
        // The storage thread wakes every millisecond (for expiry) and
        // serves while it is awake, so both sides take turns.
        let (handle, thread) = Segcache::builder()
            .heap_size(8 << 20)
            .spawn_storage(StorageConfig {
                expire_interval: Duration::from_millis(1),
                combining,
                ..config(16)
            })
            .unwrap();
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let handle = handle.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((u64::from(t) + 1) * 7919));
                    let mut model = std::collections::HashMap::new();
                    let mut client = handle.client();
                    let mut batch = segcache::Batch::new();
                    let mut jobs = 0u64;
                    // At least 1500 rounds, and on until both sides have run
                    // requests (bounded).
                    for round in 0..200_000u32 {
                        let c = handle.counters();
                        if round >= 1500 && c.storage_jobs > 0 && (c.client_jobs > 0 || !combining)
                        {
                            break;
                        }
                        let n = 1 + rng.below(8) as usize;
                        let steps: Vec<_> = (0..n).map(|_| step(t, &mut rng, &mut model)).collect();
                        let context = format!("thread {t} round {round}");
                        match rng.below(4) {
                            0 => {
                                for (request, expect) in steps {
                                    check(&expect, &handle.call(request).unwrap(), &context);
                                    jobs += 1;
                                }
                            }
                            1 => {
                                let mut expects = Vec::new();
                                for (request, expect) in steps {
                                    client.submit(request).unwrap();
                                    expects.push(expect);
                                    jobs += 1;
                                }
                                for expect in &expects {
                                    let reply = client.recv().unwrap().expect("a reply");
                                    check(expect, &reply, &context);
                                }
                                assert_eq!(client.recv().unwrap(), None);
                            }
                            mode => {
                                batch.clear();
                                for (request, _) in &steps {
                                    batch.push(request);
                                }
                                if mode == 2 {
                                    client.run(&mut batch).unwrap();
                                } else {
                                    assert!(client.submit_batch(&mut batch).unwrap());
                                    while !client.try_complete(&mut batch).unwrap() {
                                        std::thread::yield_now();
                                    }
                                }
                                jobs += 1;
                                assert_eq!(batch.responses().len(), steps.len());
                                for ((_, expect), got) in steps.iter().zip(batch.responses()) {
                                    check(expect, got, &context);
                                }
                            }
                        }
                    }
                    for (i, (key, value)) in model.iter().enumerate() {
                        let got = if i % 2 == 0 {
                            handle.get(key).unwrap().map(|item| item.into_value())
                        } else {
                            // Lent in place, or a queued read's copy.
                            handle.get_value_with(key, |v, _| v.to_vec()).unwrap()
                        };
                        assert_eq!(got.as_deref(), Some(&value[..]), "own key present");
                        jobs += 1;
                    }
                    jobs
                })
            })
            .collect();
        let jobs: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let counters = handle.counters();
        assert!(counters.storage_jobs > 0);
        if combining {
            assert!(counters.client_jobs > 0, "{counters:?}");
        } else {
            assert_eq!(counters.client_jobs, 0, "{counters:?}");
            assert_eq!(counters.client_turns, 0, "{counters:?}");
        }
        assert_eq!(
            counters.storage_jobs + counters.client_jobs,
            jobs,
            "every request ran exactly once: {counters:?}"
        );
        drop(handle);
        thread.join().unwrap();
    });
}

/// The point of combining: a client that finds the storage thread parked
/// runs its own request (the counters say who ran it) instead of waking
/// it. The sleeps only give the storage thread the chance to park; the
/// assertion is on the counters.
#[test]
fn a_client_runs_its_request_itself_while_the_storage_thread_sleeps() {
    within(60, || {
        let (handle, thread) = Segcache::builder().spawn_storage(config(8)).unwrap();
        let (mut combined, mut last) = (0, 0);
        for i in 0..200u32 {
            last = i;
            std::thread::sleep(Duration::from_millis(2));
            let before = handle.counters();
            handle.set(b"k", i.to_string(), 0, None).unwrap();
            let after = handle.counters();
            assert_eq!(
                after.storage_jobs + after.client_jobs,
                before.storage_jobs + before.client_jobs + 1
            );
            if after.client_jobs == before.client_jobs + 1 {
                assert!(after.client_turns > before.client_turns);
                combined += 1;
                if combined == 5 {
                    break;
                }
            }
        }
        assert_eq!(
            combined,
            5,
            "no call ran on its caller: {:?}",
            handle.counters()
        );
        let value = handle.get(b"k").unwrap().unwrap().into_value();
        assert_eq!(value, last.to_string().into_bytes());
        drop(handle);
        thread.join().unwrap();
    });
}

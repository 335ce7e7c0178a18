use super::*;
use std::sync::mpsc;

/// A storage thread and a client whose notifications arrive on `woken`.
fn notified(capacity: usize) -> (StorageHandle, StorageThread, Client, mpsc::Receiver<()>) {
    let config = StorageConfig {
        queue_capacity: capacity,
        ..StorageConfig::default()
    };
    let (handle, thread) = Segcache::builder().spawn_storage(config).unwrap();
    let (tx, woken) = mpsc::sync_channel(64);
    let client = handle.client_with_notify(move || {
        let _ = tx.try_send(());
    });
    (handle, thread, client, woken)
}

/// Waits (bounded) for a notification.
fn wait(woken: &mpsc::Receiver<()>) {
    woken
        .recv_timeout(Duration::from_secs(30))
        .expect("the storage thread never notified");
}

#[test]
fn a_submitted_batch_notifies_and_comes_back_without_blocking() {
    let (handle, thread, mut client, woken) = notified(8);
    let mut batch = Batch::new();
    for round in 0..50u32 {
        batch.clear();
        batch.set(format!("k{}", round % 7), round.to_string(), 0, None);
        batch.get(format!("k{}", round % 7));
        batch.get("absent");
        assert_eq!(client.submit_batch(&mut batch), Ok(true));
        // The batch is out: the caller's is empty meanwhile.
        assert!(batch.is_empty());
        while !client.try_complete(&mut batch).unwrap() {
            wait(&woken);
        }
        assert_eq!(batch.len(), 3);
        let responses = batch.responses();
        assert!(matches!(responses[0], Response::Stored(Ok(_))));
        assert!(
            matches!(&responses[1], Response::Get(Ok(Some(f))) if f.item.value() == round.to_string().as_bytes()),
            "{:?}",
            responses[1]
        );
        assert_eq!(responses[2], Response::Get(Ok(None)));
        // Nothing out: completes at once, the batch untouched.
        assert_eq!(client.try_complete(&mut batch), Ok(true));
        assert_eq!(batch.len(), 3);
    }
    drop((client, handle));
    thread.join().unwrap();
}

#[test]
fn one_batch_out_at_a_time_and_blocking_calls_keep_it() {
    let (handle, thread, mut client, woken) = notified(8);
    client
        .submit(Request::Store(Store::new(
            StoreMode::Set,
            b"a".to_vec(),
            b"1".to_vec(),
        )))
        .unwrap();
    let mut batch = Batch::new();
    batch.get("a");
    assert_eq!(client.submit_batch(&mut batch), Ok(true));
    // A second batch is refused, untouched, while the first is out.
    let mut second = Batch::new();
    second.get("a");
    assert_eq!(client.submit_batch(&mut second), Ok(false));
    assert!(matches!(
        client.run(&mut second),
        Err(Error::InvalidConfig { field: "batch", .. })
    ));
    assert_eq!(second.len(), 1);
    // A blocking recv answers the single request and keeps the batch.
    assert!(matches!(client.recv(), Ok(Some(Response::Stored(Ok(_))))));
    assert_eq!(client.recv(), Ok(None));
    while !client.try_complete(&mut batch).unwrap() {
        wait(&woken);
    }
    assert!(matches!(
        &batch.responses()[0],
        Response::Get(Ok(Some(f))) if f.item.value() == b"1"
    ));
    // Back: the blocking run works again.
    client.run(&mut second).unwrap();
    assert!(matches!(&second.responses()[0], Response::Get(Ok(Some(_)))));
    drop((client, handle));
    thread.join().unwrap();
}

#[test]
fn a_full_queue_refuses_a_batch_until_replies_are_collected() {
    let (handle, thread, mut client, _woken) = notified(2);
    for _ in 0..2 {
        client.submit(Request::Len).unwrap();
    }
    let mut batch = Batch::new();
    batch.get("k");
    assert_eq!(client.submit_batch(&mut batch), Ok(false));
    assert_eq!(batch.len(), 1);
    assert!(matches!(client.recv(), Ok(Some(Response::Len(0)))));
    assert_eq!(client.submit_batch(&mut batch), Ok(true));
    client.run(&mut Batch::new()).unwrap_err();
    drop((client, handle));
    thread.join().unwrap();
}

/// CPU time (user + system, clock ticks) used so far by this process's
/// thread named `name`.
#[cfg(target_os = "linux")]
fn thread_ticks(name: &str) -> u64 {
    for entry in std::fs::read_dir("/proc/self/task").expect("list threads") {
        let dir = entry.expect("thread entry").path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).expect("thread stat");
        // Fields after the parenthesised name; utime and stime are the
        // 14th and 15th of the line, so the 12th and 13th here.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .collect();
        return fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    panic!("no thread named {name}");
}

/// The storage thread polls for work a little after it runs dry (and a
/// blocking client yields a while before parking): after a burst of
/// large batches and blocking calls it must still go to sleep. A
/// resource check, not a timing one: the bound is a tenth of a core
/// over the window, where a thread left polling would use all of it.
#[cfg(target_os = "linux")]
#[test]
fn the_storage_thread_sleeps_after_a_burst() {
    const NAME: &str = "sc-idle-probe";
    let config = StorageConfig {
        name: NAME.into(),
        ..StorageConfig::default()
    };
    let (handle, thread) = Segcache::builder().spawn_storage(config).unwrap();
    let mut client = handle.client();
    let mut batch = Batch::new();
    for round in 0..200u32 {
        batch.clear();
        for i in 0..256u32 {
            let key = format!("k{}", (round * 256 + i) % 5000);
            if i % 10 == 0 {
                batch.set(&key, "value", 0, None);
            } else {
                batch.get(&key);
            }
        }
        client.run(&mut batch).unwrap();
        handle.set("blocking", round.to_string(), 0, None).unwrap();
    }
    thread::sleep(Duration::from_millis(300));
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(hz > 0);
    let window = Duration::from_secs(2);
    let before = thread_ticks(NAME);
    thread::sleep(window);
    let used = thread_ticks(NAME) - before;
    let bound = window.as_secs() * hz as u64 / 10;
    assert!(
        used <= bound,
        "an idle storage thread used {used} ticks in {window:?}"
    );
    // Still serving after the quiet time.
    assert_eq!(handle.get("blocking").unwrap().unwrap().value(), b"199");
    drop((client, handle));
    thread.join().unwrap();
}

/// Waits (bounded: 30 s, then fails saying `what` never happened) until
/// `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Takes the token from the test thread, waiting (bounded) until the
/// storage thread has taken its first turn (it starts by taking the token)
/// and released it.
fn hold_token(handle: &StorageHandle) -> Turn<'_> {
    wait_until("the storage thread never started", || {
        handle.counters().storage_turns > 0
    });
    let mut turn = None;
    wait_until("the token was never free", || {
        turn = Turn::try_take(&handle.shared, CLIENT);
        turn.is_some()
    });
    turn.expect("taken")
}

/// A request pushed while someone else holds the token is left to the
/// holder: it is not run by its client, and the holder's release finds
/// it pending; the next turn (here the client's own next push) runs it
/// before the later one, in order.
#[test]
fn a_request_pushed_while_the_token_is_held_waits_for_the_holder() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let mut client = handle.client();
    let turn = hold_token(&handle);
    let before = handle.counters();
    client
        .try_submit(Request::Store(Store::new(
            StoreMode::Set,
            b"k".to_vec(),
            b"1".to_vec(),
        )))
        .unwrap();
    assert!(client.channel.replies.is_empty(), "ran without the token");
    assert!(handle.shared.pending.load(SeqCst));
    assert_eq!(handle.counters(), before);
    drop(turn);
    // The next push takes the free token and runs both, in order.
    client
        .try_submit(Request::Get {
            key: b"k".to_vec(),
            opts: GetOpts::default(),
        })
        .unwrap();
    assert!(matches!(client.recv(), Ok(Some(Response::Stored(Ok(_))))));
    assert!(matches!(
        client.recv(),
        Ok(Some(Response::Get(Ok(Some(f))))) if f.item.value() == b"1"
    ));
    drop((client, handle));
    thread.join().unwrap();
}

/// A blocking call that finds the token free runs its request at once on
/// its own thread, with no queue: no pooled channel is made. Requests
/// other clients pushed while the token was taken, left waiting, run
/// before it (here a set the call's read then sees), and their replies
/// are there when it returns.
#[test]
fn a_blocking_call_that_finds_the_token_free_runs_at_once_after_what_waited() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let mut client = handle.client();
    let turn = hold_token(&handle);
    client
        .try_submit(Request::Store(Store::new(
            StoreMode::Set,
            b"k".to_vec(),
            b"1".to_vec(),
        )))
        .unwrap();
    drop(turn);
    assert_eq!(handle.get("k").unwrap().unwrap().value(), b"1");
    assert!(
        !client.channel.replies.is_empty(),
        "the waiting set was left"
    );
    assert!(matches!(client.recv(), Ok(Some(Response::Stored(Ok(_))))));
    handle.set("k", "2", 0, None).unwrap();
    assert_eq!(handle.get("k").unwrap().unwrap().value(), b"2");
    assert!(
        handle.shared.pool.lock().is_empty(),
        "a blocking call queued"
    );
    assert_eq!(handle.shared.channels.lock().len(), 1, "only the client's");
    drop((client, handle));
    thread.join().unwrap();
}

/// A pipelined request that finds the token free runs at once, but never
/// before the client's own requests still queued: with more of them
/// waiting than one pass serves, it joins the queue behind them, and
/// every reply comes back in submission order.
#[test]
fn a_pipelined_request_never_overtakes_its_clients_queued_ones() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig {
            queue_capacity: 2 * BATCH,
            ..StorageConfig::default()
        })
        .unwrap();
    let mut client = handle.client();
    let n = BATCH + 44;
    let turn = hold_token(&handle);
    for i in 0..n {
        let store = Store::new(StoreMode::Set, b"k".to_vec(), i.to_string().into_bytes());
        client.try_submit(Request::Store(store)).unwrap();
    }
    assert_eq!(client.channel.requests.len(), n, "ran without the token");
    drop(turn);
    let get = Request::Get {
        key: b"k".to_vec(),
        opts: GetOpts::default(),
    };
    client.try_submit(get).unwrap();
    for _ in 0..n {
        assert!(matches!(client.recv(), Ok(Some(Response::Stored(Ok(_))))));
    }
    let last = (n - 1).to_string();
    assert!(matches!(
        client.recv(),
        Ok(Some(Response::Get(Ok(Some(f))))) if f.item.value() == last.as_bytes()
    ));
    assert!(client.channel.requests.is_empty());
    drop((client, handle));
    thread.join().unwrap();
}

/// `get_value_with` lends the value where it lies when the token is free
/// (no request travels: no pooled channel is made), and falls back to a
/// queued plain read, lending the copy, when someone holds the token.
#[test]
fn get_value_with_lends_in_place_or_reads_through_the_queue() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    // Once the storage thread has given the token up (it parks, waking
    // once a second), the calls below find it free.
    drop(hold_token(&handle));
    handle.set("k", "value", 7, None).unwrap();
    let here = handle.get_value_with("k", |v, flags| (v.to_vec(), flags));
    assert_eq!(here, Ok(Some((b"value".to_vec(), 7))));
    assert_eq!(handle.get_value_with("absent", |v, _| v.len()), Ok(None));
    assert!(handle.shared.pool.lock().is_empty(), "a read was queued");
    let hits = handle.stats().unwrap().hits;
    let mut turn = hold_token(&handle);
    let reader = {
        let handle = handle.clone();
        thread::spawn(move || handle.get_value_with("k", |v, flags| (v.to_vec(), flags)))
    };
    wait_until("the read never queued", || {
        handle.shared.pending.load(SeqCst)
    });
    assert_eq!(turn.drain(None), 1);
    drop(turn);
    assert_eq!(reader.join().unwrap(), Ok(Some((b"value".to_vec(), 7))));
    assert_eq!(handle.shared.pool.lock().len(), 1, "the read was queued");
    assert_eq!(handle.stats().unwrap().hits, hits + 1, "counted once");
    drop(handle);
    thread.join().unwrap();
}

/// A panic in `get_value_with`'s closure, run while the caller holds the
/// cache's token, is the caller's: it reaches the caller, and the service
/// goes on (a panic that retired the token would stop it).
#[test]
fn a_panic_in_get_value_withs_closure_leaves_the_service_running() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    drop(hold_token(&handle));
    handle.set("k", "v", 0, None).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handle.get_value_with("k", |_, _| -> usize { panic!("the caller's bug") })
    }));
    assert!(caught.is_err());
    assert!(!handle.is_stopped());
    // Not retired. (Free, or the storage thread's: it takes the token on
    // its own, e.g. for its expiry pass every second, which a slow run
    // such as Miri's reaches.)
    assert_ne!(handle.shared.token.load(SeqCst), GONE);
    handle.set("k", "w", 0, None).unwrap();
    assert_eq!(handle.get("k").unwrap().unwrap().value(), b"w");
    drop(handle);
    assert_eq!(thread.join().unwrap().items, 1);
}

/// A blocking call that finds the token taken hands its request over on
/// a pooled channel, and the holder runs it.
#[test]
fn a_blocking_call_that_finds_the_token_taken_is_left_to_the_holder() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let mut turn = hold_token(&handle);
    let caller = {
        let handle = handle.clone();
        thread::spawn(move || handle.set("k", "v", 0, None))
    };
    wait_until("the call never queued", || {
        handle.shared.pending.load(SeqCst)
    });
    assert_eq!(turn.drain(None), 1);
    assert_eq!(turn.cache().get(b"k").unwrap().value(), b"v");
    drop(turn);
    assert_eq!(caller.join().unwrap(), Ok(()));
    assert_eq!(handle.shared.pool.lock().len(), 1, "its channel is pooled");
    drop(handle);
    thread.join().unwrap();
}

/// After shutdown a blocking call is refused, whoever holds the token,
/// and changes nothing.
#[test]
fn a_blocking_call_after_shutdown_is_refused_and_changes_nothing() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    handle.set("k", "v", 0, None).unwrap();
    handle.shutdown();
    assert_eq!(handle.set("k2", "v", 0, None), Err(Error::Closed));
    assert_eq!(handle.delete("k"), Err(Error::Closed));
    assert_eq!(thread.join().unwrap().items, 1);
}

/// The storage thread waits for a client's turn to end before it
/// touches the cache (here: to stop and hand the cache back).
#[test]
fn the_storage_thread_waits_for_a_clients_turn_to_end() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    handle.set("k", "v", 0, None).unwrap();
    let turn = hold_token(&handle);
    handle.shutdown();
    wait_until("the storage thread never asked", || {
        handle.shared.storage_waits.load(SeqCst)
    });
    assert!(
        !handle.is_stopped(),
        "stopped while a client held the cache"
    );
    drop(turn);
    assert_eq!(thread.join().unwrap().items, 1);
    assert!(handle.is_stopped());
}

/// A panic while a client holds the token (here a notify callback,
/// called for another client's answered batch) retires the token:
/// nobody runs on the cache again, waiting clients fail with `Closed`,
/// and `join` reports it.
#[test]
fn a_panic_while_a_client_holds_the_cache_stops_the_service() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    let mut doomed = handle.client_with_notify(|| panic!("notify fails"));
    let turn = hold_token(&handle);
    let mut batch = Batch::new();
    batch.set("k", "v", 0, None);
    assert_eq!(doomed.submit_batch(&mut batch), Ok(true));
    // The holder runs the queued batch and calls its notify, which
    // panics on the holder's thread.
    let shared = Arc::clone(&handle.shared);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut turn = turn;
        turn.drain(None);
    }));
    assert!(ran.is_err());
    assert_eq!(shared.token.load(SeqCst), GONE);
    assert!(handle.is_stopped());
    assert_eq!(handle.set("k2", "v", 0, None), Err(Error::Closed));
    let err = thread.join().unwrap_err();
    assert!(err.contains("panicked while it held the cache"), "{err}");
    drop((doomed, handle));
}

#[test]
fn stopping_notifies_and_a_stopped_thread_refuses_batches() {
    let (handle, thread, mut client, woken) = notified(4);
    let mut batch = Batch::new();
    batch.set("k", "v", 0, None);
    assert_eq!(client.submit_batch(&mut batch), Ok(true));
    handle.shutdown();
    // Accepted before the shutdown: answered, and we are told.
    while !client.try_complete(&mut batch).unwrap() {
        wait(&woken);
    }
    assert!(matches!(batch.responses()[0], Response::Stored(Ok(_))));
    wait_until("the thread never stopped", || handle.is_stopped());
    batch.clear();
    batch.get("k");
    assert_eq!(client.submit_batch(&mut batch), Err(Error::Closed));
    assert_eq!(batch.len(), 1, "a refused batch is given back untouched");
    drop((client, handle));
    thread.join().unwrap();
}

#[test]
fn the_handles_get_makes_no_token_and_gets_hands_one_out() {
    let (handle, thread) = Segcache::builder()
        .spawn_storage(StorageConfig::default())
        .unwrap();
    handle.set("k", "v1", 0, None).unwrap();
    assert_eq!(handle.get("k").unwrap().unwrap().cas(), 0);
    let token = handle.gets("k").unwrap().unwrap().cas();
    handle.cas("k", "v2", 0, None, token).unwrap();
    assert_eq!(
        handle.cas("k", "v3", 0, None, token),
        Err(Error::Exists),
        "the token named the version the first cas replaced"
    );
    assert_eq!(handle.get("k").unwrap().unwrap().value(), b"v2");
    handle.shutdown();
    thread.join().unwrap();
}

/// Every store shorthand of the handle, and its delete, answers as the
/// same call on a cache of one's own, run here (combining) or handed to
/// the storage thread (combining off), failures included, and leaves the
/// same values.
#[test]
fn the_handles_stores_and_deletes_answer_as_the_cache_does_here_and_queued() {
    for combining in [true, false] {
        let (handle, thread) = Segcache::builder()
            .spawn_storage(StorageConfig {
                combining,
                ..StorageConfig::default()
            })
            .unwrap();
        let mut own = Segcache::builder().build().unwrap();
        let too_large = vec![b'x'; own.max_value_len(1) + 1];
        let key_too_long = vec![b'k'; 251];
        let steps: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            ("set", b"a".to_vec(), b"1".to_vec()),
            ("add", b"a".to_vec(), b"2".to_vec()),
            ("add", b"b".to_vec(), b"3".to_vec()),
            ("replace", b"c".to_vec(), b"4".to_vec()),
            ("replace", b"b".to_vec(), b"5".to_vec()),
            ("append", b"b".to_vec(), b"6".to_vec()),
            ("prepend", b"b".to_vec(), b"7".to_vec()),
            ("append", b"c".to_vec(), b"8".to_vec()),
            ("set", Vec::new(), b"9".to_vec()),
            ("set", key_too_long, b"10".to_vec()),
            ("set", b"d".to_vec(), too_large),
            ("set", b"a".to_vec(), b"11".to_vec()),
        ];
        for (op, key, value) in &steps {
            let (theirs, ours) = match *op {
                "set" => (
                    handle.set(key, value, 3, None),
                    own.set(key, value, 3, None),
                ),
                "add" => (
                    handle.add(key, value, 3, None),
                    own.add(key, value, 3, None),
                ),
                "replace" => (
                    handle.replace(key, value, 3, None),
                    own.replace(key, value, 3, None),
                ),
                "append" => (handle.append(key, value), own.append(key, value)),
                _ => (handle.prepend(key, value), own.prepend(key, value)),
            };
            assert_eq!(theirs, ours, "{op} {key:?} (combining {combining})");
        }
        // Both ways taken: run by the caller, or every one by the thread.
        let ran_here = handle.counters().client_jobs;
        if combining {
            assert!(ran_here >= steps.len() as u64, "{ran_here} run here");
        } else {
            assert_eq!(ran_here, 0);
        }
        // CAS: a stale token is refused, the current one accepted.
        let token = own.get("a").unwrap().cas();
        let theirs = handle.gets("a").unwrap().unwrap().cas();
        assert_eq!(
            handle.cas("a", "12", 0, None, theirs.wrapping_add(1)),
            Err(Error::Exists)
        );
        assert_eq!(
            own.cas("a", "12", 0, None, token.wrapping_add(1)),
            Err(Error::Exists)
        );
        handle.cas("a", "12", 0, None, theirs).unwrap();
        own.cas("a", "12", 0, None, token).unwrap();
        // Deletes: a hit, a miss, a bad key.
        for key in [&b"b"[..], b"c", b"b", b""] {
            assert_eq!(handle.delete(key), Ok(own.delete(key)), "delete {key:?}");
        }
        for key in ["a", "b", "c", "d"] {
            let theirs = handle
                .get(key)
                .unwrap()
                .map(|i| (i.value().to_vec(), i.flags()));
            let ours = own.get(key).map(|i| (i.value().to_vec(), i.flags()));
            assert_eq!(theirs, ours, "{key} (combining {combining})");
        }
        handle.shutdown();
        thread.join().unwrap();
    }
}

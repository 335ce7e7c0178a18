//! The storage thread: spawned by [`Builder::spawn_storage`], it holds
//! the token while there is work, polls a little before it parks, runs
//! [`Segcache::expire`] at least once a second, and on shutdown answers
//! everything accepted and saves the datapool.
//!
//! Must never: park holding the token, or stop before every accepted
//! request is answered.

use super::*;

/// The storage thread itself, to wait for its end.
#[derive(Debug)]
pub struct StorageThread {
    join: JoinHandle<Result<Stats, Error>>,
}

impl StorageThread {
    /// Waits until the thread has answered every accepted request and
    /// exited (saving the cache first when it has a datapool). Returns the
    /// cache's final stats, or why the thread failed: a panic message, or
    /// the save's error.
    pub fn join(self) -> Result<Stats, String> {
        match self.join.join() {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(panic) => Err(panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "storage thread panicked".into())),
        }
    }
}

impl Builder {
    /// Builds a cache and spawns a storage thread that owns it.
    ///
    /// ```
    /// use segcache::{Segcache, StorageConfig};
    ///
    /// let (handle, thread) = Segcache::builder().spawn_storage(StorageConfig::default())?;
    /// handle.set(b"k", b"v", 0, None)?;
    /// assert_eq!(handle.get(b"k")?.unwrap().value(), b"v");
    ///
    /// // Pipelined: submit many, then collect the replies in order.
    /// let mut client = handle.client();
    /// for i in 0..100u32 {
    ///     let key = i.to_le_bytes().to_vec();
    ///     client.submit(segcache::Request::Get { key, opts: Default::default() })?;
    /// }
    /// let mut replies = 0;
    /// while let Some(_reply) = client.recv()? {
    ///     replies += 1;
    /// }
    /// assert_eq!(replies, 100);
    ///
    /// handle.shutdown();
    /// thread.join().unwrap();
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn spawn_storage(
        self,
        config: StorageConfig,
    ) -> Result<(StorageHandle, StorageThread), Error> {
        if config.queue_capacity == 0 {
            return Err(Error::InvalidConfig {
                field: "queue_capacity",
                reason: "must be at least 1".into(),
            });
        }
        if config.expire_interval.is_zero() {
            return Err(Error::InvalidConfig {
                field: "expire_interval",
                reason: "must be positive".into(),
            });
        }
        let cache = self.build()?;
        let restore_outcome = cache.restore_outcome().clone();
        let shared = Arc::new(Shared {
            channels: Mutex::new(Vec::new()),
            channels_changed: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            token: AtomicU8::new(FREE),
            storage_waits: AtomicBool::new(false),
            owned: UnsafeCell::new(Owned {
                cache: Some(cache),
                channels: Vec::new(),
            }),
            counters: Counters::default(),
            submitting: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            users: AtomicUsize::new(1),
            pool: Mutex::new(Vec::new()),
            capacity: config.queue_capacity,
            combining: config.combining,
            storage: Mutex::new(None),
            restore_outcome,
        });
        let thread_shared = Arc::clone(&shared);
        let join = thread::Builder::new()
            .name(config.name.clone())
            .spawn(move || run(&thread_shared, &config))
            .map_err(|e| Error::InvalidConfig {
                field: "name",
                reason: format!("cannot spawn the storage thread: {e}"),
            })?;
        *shared.storage.lock() = Some(join.thread().clone());
        Ok((StorageHandle { shared }, StorageThread { join }))
    }
}

/// Marks the thread stopped and wakes every waiting client, however the
/// storage loop ends (normally or by a panic).
struct StopGuard<'a>(&'a Shared);

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

fn pin(core: usize) {
    let known = core_affinity::get_core_ids().is_some_and(|ids| ids.iter().any(|c| c.id == core));
    if !known || !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("segcache: could not pin the storage thread to core {core}; running unpinned");
    }
}

/// The storage thread's loop. On shutdown a cache with a datapool is saved
/// for a warm restart.
fn run(shared: &Shared, config: &StorageConfig) -> Result<Stats, Error> {
    let Some(cache) = serve(shared, config) else {
        panic!("a client thread panicked while it held the cache; the cache was abandoned");
    };
    let stats = cache.stats();
    if cache.has_datapool() {
        cache.save()?;
    }
    Ok(stats)
}

/// Takes the token for the storage thread, waiting for a client's turn to
/// end; `None` if it was retired (a client panicked holding it).
fn storage_turn(shared: &Shared) -> Option<Turn<'_>> {
    let turn = loop {
        if let Some(turn) = Turn::try_take(shared, STORAGE) {
            break turn;
        }
        if shared.token.load(SeqCst) == GONE {
            return None;
        }
        // Say we wait, then try again: a client releasing after our try
        // sees the flag (both sides store, then load, all `SeqCst`: see
        // the module doc) and unparks us; the timeout only bounds a lost
        // wake-up.
        shared.storage_waits.store(true, SeqCst);
        if let Some(turn) = Turn::try_take(shared, STORAGE) {
            break turn;
        }
        thread::park_timeout(Duration::from_millis(1));
    };
    shared.storage_waits.store(false, SeqCst);
    shared.counters.storage_turns.fetch_add(1, Relaxed);
    Some(turn)
}

/// Serves until shutdown, then returns the cache (`None`: a client
/// panicked holding it).
fn serve(shared: &Shared, config: &StorageConfig) -> Option<Segcache> {
    let _guard = StopGuard(shared);
    if let Some(core) = config.pin_core {
        pin(core);
    }
    let interval = config.expire_interval.min(Duration::from_secs(1));
    let mut next_expire = Instant::now() + interval;
    // Time spent serving since the thread last ran dry.
    let mut busy = Duration::ZERO;
    let mut turn = storage_turn(shared)?;
    loop {
        shared.pending.swap(false, SeqCst);
        let start = Instant::now();
        let served = turn.drain(None);
        shared
            .counters
            .storage_jobs
            .fetch_add(served as u64, Relaxed);
        let now = Instant::now();
        if now >= next_expire {
            if let Some(cache) = turn.owned().cache.as_mut() {
                cache.expire();
            }
            next_expire = now + interval;
        }
        if served > 0 {
            busy += now - start;
            continue;
        }
        if !busy.is_zero() {
            // Ran dry: look for more work a little before parking, for at
            // most a quarter of the time just spent serving.
            let budget = (busy / 4).min(MAX_IDLE_POLL);
            busy = Duration::ZERO;
            if poll_pending(shared, now + budget) {
                continue;
            }
        }
        if shared.shutdown.load(SeqCst) {
            // No new request can be accepted now; answer the ones that got in.
            while shared.submitting.load(SeqCst) != 0 {
                std::hint::spin_loop();
            }
            shared.channels_changed.store(true, SeqCst);
            loop {
                let served = turn.drain(None);
                shared
                    .counters
                    .storage_jobs
                    .fetch_add(served as u64, Relaxed);
                if served == 0 {
                    break;
                }
            }
            let cache = turn.owned().cache.take();
            turn.retire();
            return cache;
        }
        // Park: give the token up first, so that clients run their own
        // requests meanwhile. Work that arrived before our release and
        // whose pusher found the token taken is ours: take it back.
        drop(turn);
        if shared.pending.load(SeqCst) {
            if let Some(again) = Turn::try_take(shared, STORAGE) {
                shared.counters.storage_turns.fetch_add(1, Relaxed);
                turn = again;
                continue;
            }
            // A client holds it now, and serves what is queued.
        }
        thread::park_timeout(next_expire.saturating_duration_since(Instant::now()));
        turn = storage_turn(shared)?;
    }
}

/// Longest the storage thread looks for new work before parking.
const MAX_IDLE_POLL: Duration = Duration::from_micros(50);

/// Polls `pending` until `deadline`; true if a client pushed meanwhile.
fn poll_pending(shared: &Shared, deadline: Instant) -> bool {
    loop {
        for _ in 0..32 {
            if shared.pending.load(SeqCst) {
                return true;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= deadline {
            return false;
        }
        // Leave the core to a client that shares it.
        thread::yield_now();
    }
}

//! Storage-thread mode: one owner at a time runs every request on a
//! [`Segcache`], in order; any number of threads talk to it through
//! bounded queues, as Pelikan's workers talk to its storage thread.
//!
//! Each client has its own pair of `crossbeam_queue::ArrayQueue`s (requests
//! in, replies out, equal capacity). A client never has more requests in
//! flight than that capacity, so there is always room for a reply and
//! nothing is ever dropped.
//!
//! # Who runs the requests: delegation with combining
//! The cache (with the list of channels to serve) lives in a cell that
//! only the holder of the **token** may touch. The token is one atomic
//! state: `FREE`, `STORAGE` (the storage thread holds it), `CLIENT` (a
//! client thread holds it) or `GONE` (retired: the storage thread stopped,
//! or a holder panicked mid-request). Whoever holds it drains every
//! client's queue (at most `BATCH` requests per queue per pass) and wakes
//! the clients it answered; nobody else reads or writes the cache, so there
//! is never a moment with two executors, and each client's requests run in
//! the order they were submitted.
//!
//! * The storage thread holds the token while it is awake: serving, and
//!   for a short while after it runs dry it keeps looking for work (a
//!   quarter of the time it just spent serving, at most 50 µs). It
//!   releases the token before it parks, and takes it back whenever it
//!   wakes for its own duties: [`Segcache::expire`] at least once a
//!   second, shutdown (answer everything accepted, save the datapool).
//! * A client pushes its request (or whole [`Batch`]), sets the shared
//!   `pending` flag, and tries to take the token. If the storage thread
//!   is parked the token is free: the client runs its own request and
//!   whatever other clients queued meanwhile (flat combining), releases
//!   the token, and the storage thread sleeps on: no futex wake, no park,
//!   no cross-thread reply at low rates. If the token is taken, the client
//!   leaves its request to the holder, exactly as it handed it off before:
//!   at high rates the storage thread is awake and serves.
//! * A client's turn is bounded (`COMBINE_PASSES` passes that found
//!   work); if requests keep coming after that, it wakes the storage thread
//!   and leaves the rest to it, so a worker is never kept from its own
//!   event loop for long, and a busy storage thread takes over. While
//!   the storage thread waits for the token, clients leave their requests
//!   to it (it is next, and drains every queue first), so they never
//!   starve it of its duties.
//! * [`StorageConfig::combining`] set to false turns combining off: every
//!   request is handed to the storage thread (woken if it parked), and
//!   client threads never touch the cache.
//!
//! Why no request is stranded (every step is `SeqCst`; the loom-style
//! argument for each interleaving): a pusher does *push; swap `pending` to
//! true; fence; try the token*, a holder that gives the token up does
//! *store `FREE`; fence; load `pending`*, and a holder starting a pass does
//! *swap `pending` to false; drain*. The two fences are totally ordered:
//! if the pusher's comes first, the releaser's load sees `pending` set (or
//! a later holder cleared it, and that holder drains the request) and the
//! releaser takes the token back or, if someone else already has, leaves
//! it to them; if the releaser's comes first, the pusher's try sees `FREE`
//! (or a newer holder, who cleared `pending` after our swap and drains our
//! request, or will see `pending` when it releases). A holder's swap that
//! reads a pusher's `true` synchronizes with that push (the swaps are
//! read-modify-writes, so every pusher's store heads a release sequence
//! the later swaps continue), so the drain that follows sees the request.
//! The storage thread waiting for the token to do its duties says so
//! (`storage_waits`, then fence, then try again); a releasing client loads
//! that flag after its fence and unparks it. The cell's accesses are
//! ordered by the token's successful compare-exchange (acquire) and its
//! release store; `Turn` is the only way to the cell and debug-asserts
//! that the token names its holder.
//!
//! # Waiting for replies
//! A blocking call ([`Client::recv`], [`Client::run`], the
//! [`StorageHandle`] methods) spins, yields its core for up to 200 µs,
//! then parks until the request's executor unparks it (usually it ran the
//! request itself and finds the reply at once). A client with an event
//! loop of its own instead submits a [`Batch`] with
//! [`Client::submit_batch`], goes on with its loop, and is told through
//! the callback it registered ([`StorageHandle::client_with_notify`],
//! e.g. a `mio::Waker`) when replies arrived; [`Client::try_complete`]
//! then takes the batch back without ever blocking. The callback runs on
//! whichever thread ran the batch (the storage thread, or another client
//! combining; never for a client's own requests on its own thread), at
//! most once per drain of that client's queue and only while the client
//! is waiting for something. It must only wake the client, never block
//! or call back into this module (the caller holds the token).
//!
//! [`StorageHandle::counters`] counts the requests each side ran, so a
//! caller can see which path its requests took.
//!
//! Shutdown (explicit, or when the last handle and client are dropped):
//! new submissions are refused with [`Error::Closed`], every request already
//! accepted is answered, then the storage thread retires the token, saves
//! the cache if it has a datapool and exits, and [`StorageThread::join`]
//! reports how it ended. This module must never let a client's failure (a
//! panic, a dropped client with requests in flight) reach the cache: a
//! panic while a client holds the token (a bug in the cache, or a notify
//! callback that panics) retires the token, fails every waiting client
//! with [`Error::Closed`] and makes `join` report it, rather than let
//! anyone run on a cache left half-way through a request.

use crate::batch::Batch;
use crate::cache::{Expired, OwnedItem, RestoreOutcome, Stats};
use crate::ops::{ArithOpts, DeleteOpts, GetOpts, Request, Response, Store, StoreMode, Ttl};
use crate::{Builder, Error, Segcache};
use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{
    fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::Arc;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Settings of the storage thread.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// Requests one client may have in flight (default 1024).
    pub queue_capacity: usize,
    /// How often the thread runs [`Segcache::expire`] (default and at most
    /// 1 s).
    pub expire_interval: Duration,
    /// Pin the storage thread to this core. Where the OS refuses, the
    /// thread logs a line on stderr and runs unpinned.
    pub pin_core: Option<usize>,
    /// Thread name (default "segcache-storage").
    pub name: String,
    /// Whether a client that finds the storage thread parked runs the
    /// requests itself instead of waking it (default true; see the module
    /// doc). False hands every request to the storage thread: the client
    /// threads never touch the cache, at the price of a wake-up whenever
    /// the storage thread had parked.
    pub combining: bool,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            queue_capacity: 1024,
            expire_interval: Duration::from_secs(1),
            pin_core: None,
            name: "segcache-storage".into(),
            combining: true,
        }
    }
}

/// Most requests taken from one client before moving to the next.
const BATCH: usize = 256;

/// What a client sends: one request, or a whole [`Batch`] (one message,
/// its buffers moved, not copied).
enum Job {
    One(Request),
    Batch(Box<Batch>),
}

/// What comes back: one response, or the batch with its responses.
enum Done {
    One(Response),
    Batch(Box<Batch>),
}

impl Done {
    /// The response of a single request (batches are collected by
    /// by a [`Client`], never on a channel of the blocking calls).
    fn one(self) -> Response {
        match self {
            Done::One(response) => response,
            Done::Batch(_) => unreachable!("a batch reply on a channel of the blocking calls"),
        }
    }
}

/// How a client with an event loop is told its replies arrived (see
/// [`StorageHandle::client_with_notify`]).
type Notify = Box<dyn Fn() + Send + Sync>;

/// One client's queues.
struct Channel {
    requests: ArrayQueue<Job>,
    replies: ArrayQueue<Done>,
    /// The client waits for a reply (parked, or in its own event loop);
    /// the token's holder clears it when it wakes the client.
    waiting: AtomicBool,
    waiter: Mutex<Option<Thread>>,
    /// Called (by the token's holder) to wake a client with an event loop.
    notify: Option<Notify>,
    /// The client is gone; the channel can be dropped once drained.
    closed: AtomicBool,
}

impl Channel {
    fn new(capacity: usize, notify: Option<Notify>) -> Self {
        Channel {
            requests: ArrayQueue::new(capacity),
            replies: ArrayQueue::new(capacity),
            waiting: AtomicBool::new(false),
            waiter: Mutex::new(None),
            notify,
            closed: AtomicBool::new(false),
        }
    }

    /// Wakes the client if it waits (storage side, after pushing replies):
    /// unparks it, and calls its notify callback.
    fn wake(&self) {
        fence(SeqCst);
        if self.waiting.load(SeqCst) && self.waiting.swap(false, SeqCst) {
            if let Some(t) = self.waiter.lock().as_ref() {
                t.unpark();
            }
            if let Some(notify) = &self.notify {
                notify();
            }
        }
    }
}

/// Token states (see the module doc).
const FREE: u8 = 0;
/// The storage thread holds the token.
const STORAGE: u8 = 1;
/// A client thread holds the token, combining.
const CLIENT: u8 = 2;
/// Retired: nobody touches the cache again.
const GONE: u8 = 3;

/// Most passes with work a client makes in one turn before it leaves the
/// rest to the storage thread.
const COMBINE_PASSES: u32 = 4;

/// What the token guards.
struct Owned {
    /// Taken by the storage thread when it stops (to save it).
    cache: Option<Segcache>,
    /// The holder's copy of the registry of channels to serve.
    channels: Vec<Arc<Channel>>,
}

/// How many requests (a [`Batch`] counts as one) each side ran, and how
/// often a client took the token; see [`StorageHandle::counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageCounters {
    /// Requests run by the storage thread.
    pub storage_jobs: u64,
    /// Requests run by client threads holding the token (their own and
    /// other clients', combined).
    pub client_jobs: u64,
    /// Turns a client thread took the token (found it free).
    pub client_turns: u64,
    /// Times the storage thread took the token (it woke, or kept it
    /// through a release because work had arrived).
    pub storage_turns: u64,
}

#[derive(Default)]
struct Counters {
    storage_jobs: AtomicU64,
    client_jobs: AtomicU64,
    client_turns: AtomicU64,
    storage_turns: AtomicU64,
}

struct Shared {
    channels: Mutex<Vec<Arc<Channel>>>,
    channels_changed: AtomicBool,
    /// Swapped to true by clients after pushing; swapped to false by the
    /// token's holder before each pass over the queues.
    pending: AtomicBool,
    /// Who may touch `owned`: `FREE`, `STORAGE`, `CLIENT` or `GONE`.
    token: AtomicU8,
    /// The storage thread waits for the token: a releasing client unparks
    /// it (and leaves pending work to it).
    storage_waits: AtomicBool,
    /// The cache; only the token's holder touches it (through [`Turn`]).
    owned: UnsafeCell<Owned>,
    counters: Counters,
    /// Submissions between their shutdown check and their push.
    submitting: AtomicUsize,
    shutdown: AtomicBool,
    stopped: AtomicBool,
    /// Live `StorageHandle`s and `Client`s; the last one out shuts down.
    users: AtomicUsize,
    /// Idle channels for the blocking calls of `StorageHandle`.
    pool: Mutex<Vec<Arc<Channel>>>,
    capacity: usize,
    /// [`StorageConfig::combining`].
    combining: bool,
    storage: Mutex<Option<Thread>>,
    /// What the cache's build found in its datapool.
    restore_outcome: RestoreOutcome,
}

// SAFETY: every field but `owned` is `Sync` by itself. `owned` holds a
// `Segcache` (which is `Send`) and channel handles, and is only ever
// touched through a `Turn`, i.e. by the one thread whose compare-exchange
// took the token from `FREE`; the next holder's exchange (acquire) reads
// the previous holder's release store, so the accesses never overlap and
// each sees the last one's writes.
unsafe impl Sync for Shared {}

/// The token, held: the only way to the cache. Dropping it gives the token
/// back (or, if the holder is unwinding from a panic it hit while holding
/// it, retires it and stops the storage service).
struct Turn<'a> {
    shared: &'a Shared,
    holder: u8,
    /// The thread was already unwinding when it took the token (a `Drop`
    /// running a storage call): dropping is then an ordinary release.
    unwinding_before: bool,
}

impl<'a> Turn<'a> {
    /// Takes the token if it is free.
    fn try_take(shared: &'a Shared, holder: u8) -> Option<Self> {
        shared
            .token
            .compare_exchange(FREE, holder, SeqCst, SeqCst)
            .ok()
            .map(|_| Turn {
                shared,
                holder,
                unwinding_before: thread::panicking(),
            })
    }

    fn owned(&mut self) -> &mut Owned {
        debug_assert_eq!(
            self.shared.token.load(SeqCst),
            self.holder,
            "the cache touched without the token"
        );
        // SAFETY: the token is ours: our compare-exchange moved it from
        // FREE to `holder`, and only a `Turn`'s drop or `retire` moves it
        // on, so no other thread reaches `owned` until this `Turn` is
        // gone; the `&mut self` borrow ends before that.
        unsafe { &mut *self.shared.owned.get() }
    }

    /// Serves up to `BATCH` requests of every channel; returns how many.
    /// `own` is the channel of the client running this turn on its own
    /// thread: it is not woken (it looks for its replies itself).
    fn drain(&mut self, own: Option<&Channel>) -> usize {
        let shared = self.shared;
        let owned = self.owned();
        if shared.channels_changed.swap(false, SeqCst) {
            let mut registry = shared.channels.lock();
            registry.retain(|c| !(c.closed.load(SeqCst) && c.requests.is_empty()));
            owned.channels.clone_from(&registry);
        }
        let cache = owned
            .cache
            .as_mut()
            .expect("the cache stays until the token is retired");
        drain(cache, &owned.channels, own)
    }

    /// Keeps the token forever (the storage thread, stopping): nobody may
    /// touch the cache after this.
    fn retire(self) {
        self.shared.token.store(GONE, SeqCst);
        std::mem::forget(self);
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if thread::panicking() && !self.unwinding_before {
            // The cache may be half-way through a request: nobody runs on
            // it again. The storage thread, woken, finds the token retired,
            // stops and wakes every waiting client (they fail with
            // `Closed`); no client callback runs here, mid-unwind.
            self.shared.token.store(GONE, SeqCst);
            self.shared.shutdown.store(true, SeqCst);
            self.shared.stopped.store(true, SeqCst);
            self.shared.unpark_storage();
            return;
        }
        self.shared.token.store(FREE, SeqCst);
        fence(SeqCst);
        if self.holder == CLIENT && self.shared.storage_waits.load(SeqCst) {
            self.shared.unpark_storage();
        }
    }
}

impl Shared {
    fn counters(&self) -> StorageCounters {
        let c = &self.counters;
        StorageCounters {
            storage_jobs: c.storage_jobs.load(Relaxed),
            client_jobs: c.client_jobs.load(Relaxed),
            client_turns: c.client_turns.load(Relaxed),
            storage_turns: c.storage_turns.load(Relaxed),
        }
    }

    fn register(&self, notify: Option<Notify>) -> Arc<Channel> {
        let channel = Arc::new(Channel::new(self.capacity, notify));
        self.channels.lock().push(Arc::clone(&channel));
        self.channels_changed.store(true, SeqCst);
        channel
    }

    fn unpark_storage(&self) {
        if let Some(t) = self.storage.lock().as_ref() {
            t.unpark();
        }
    }

    fn request_shutdown(&self) {
        self.shutdown.store(true, SeqCst);
        self.pending.swap(true, SeqCst);
        self.unpark_storage();
    }

    /// Marks the service stopped and wakes every waiting client (a notify
    /// callback that panics does not keep the others from being woken).
    fn stop(&self) {
        self.shutdown.store(true, SeqCst);
        self.stopped.store(true, SeqCst);
        for channel in self.channels.lock().iter() {
            channel.waiting.store(true, SeqCst);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| channel.wake()));
        }
    }

    /// Pushes a job unless shut down, then runs it (and what others queued)
    /// if the token is free. The caller guarantees room.
    fn push(&self, channel: &Channel, request: Job) -> Result<(), Job> {
        self.submitting.fetch_add(1, SeqCst);
        if self.shutdown.load(SeqCst) {
            self.submitting.fetch_sub(1, SeqCst);
            return Err(request);
        }
        let pushed = channel.requests.push(request);
        self.submitting.fetch_sub(1, SeqCst);
        debug_assert!(pushed.is_ok(), "in-flight bound guarantees room");
        pushed?;
        if self.combining {
            self.pending.swap(true, SeqCst);
            self.combine(channel);
        } else if !self.pending.swap(true, SeqCst) {
            // The storage thread clears `pending` before each pass and
            // checks it after giving the token up, before it parks: only a
            // push that finds it clear may have to wake it.
            self.unpark_storage();
        }
        Ok(())
    }

    /// A client's turn (see the module doc): if the token is free, take it
    /// and serve every queue until a pass finds nothing (at most
    /// `COMBINE_PASSES` passes with work), give it back, and take it again
    /// if work arrived meanwhile whose pusher found it taken. Past the
    /// bound, or when the storage thread waits for the token, the rest is
    /// left to the storage thread (woken).
    fn combine(&self, own: &Channel) {
        // Our `pending` swap before our look at the token (see the module
        // doc: this fence pairs with the releaser's).
        fence(SeqCst);
        let mut passes = 0;
        loop {
            if self.token.load(SeqCst) != FREE || self.storage_waits.load(SeqCst) {
                // The holder sees `pending` when it gives the token up; a
                // storage thread waiting for the token (woken by the last
                // release, or within a millisecond) takes it next and
                // drains every queue first: clients do not starve it.
                return;
            }
            let Some(mut turn) = Turn::try_take(self, CLIENT) else {
                return;
            };
            self.counters.client_turns.fetch_add(1, Relaxed);
            loop {
                self.pending.swap(false, SeqCst);
                let served = turn.drain(Some(own));
                if served == 0 {
                    break;
                }
                self.counters.client_jobs.fetch_add(served as u64, Relaxed);
                passes += 1;
                if passes >= COMBINE_PASSES {
                    // A queue may still hold work nobody flagged (more
                    // than `BATCH` in it): flag it for whoever is next.
                    self.pending.swap(true, SeqCst);
                    break;
                }
            }
            drop(turn);
            fence(SeqCst);
            if !self.pending.load(SeqCst) {
                return;
            }
            if passes >= COMBINE_PASSES || self.storage_waits.load(SeqCst) {
                // Busy: the storage thread takes over.
                self.unpark_storage();
                return;
            }
        }
    }

    /// Waits for the next reply on a channel with a request in flight:
    /// spins, then yields the core for up to [`CLIENT_SPIN`], then parks
    /// until the request's executor unparks it.
    fn wait_reply(&self, channel: &Channel) -> Result<Done, Error> {
        let mut spins = 0u32;
        let mut yielding_since: Option<Instant> = None;
        loop {
            if let Some(reply) = channel.replies.pop() {
                return Ok(reply);
            }
            if self.stopped.load(SeqCst) {
                // Everything accepted was answered before `stopped` was set.
                return channel.replies.pop().ok_or(Error::Closed);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            // A batch of a few hundred requests takes tens of microseconds;
            // sleeping through it would add two wake-ups (ours and, as the
            // storage thread runs dry meanwhile, its own) to every round.
            if yielding_since.get_or_insert_with(Instant::now).elapsed() < CLIENT_SPIN {
                thread::yield_now();
                continue;
            }
            *channel.waiter.lock() = Some(thread::current());
            channel.waiting.store(true, SeqCst);
            fence(SeqCst);
            if channel.replies.is_empty() && !self.stopped.load(SeqCst) {
                // The timeout only bounds a lost wake-up; replies unpark us.
                thread::park_timeout(Duration::from_millis(100));
            }
            channel.waiting.store(false, SeqCst);
        }
    }
}

/// Why [`Client::try_submit`] did not take a request; the request comes
/// back to the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySubmitError {
    /// The client already has `queue_capacity` requests in flight: collect
    /// replies with [`Client::recv`] first.
    Full(Request),
    /// The storage thread has stopped.
    Closed(Request),
}

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
        // sees the flag (both sides fence between their store and their
        // load) and unparks us; the timeout only bounds a lost wake-up.
        shared.storage_waits.store(true, SeqCst);
        fence(SeqCst);
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
        fence(SeqCst);
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

/// Longest a blocking call yields the core, looking for its reply, before
/// it parks.
const CLIENT_SPIN: Duration = Duration::from_micros(200);

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

/// Serves up to `BATCH` requests per channel; returns how many. `own`
/// (the channel of a client running this on its own thread) is not woken.
fn drain(cache: &mut Segcache, channels: &[Arc<Channel>], own: Option<&Channel>) -> usize {
    let mut served = 0;
    for channel in channels {
        let mut n = 0;
        while n < BATCH {
            let Some(job) = channel.requests.pop() else {
                break;
            };
            let reply = match job {
                Job::One(request) => Done::One(cache.execute(&request)),
                Job::Batch(mut batch) => {
                    batch.execute(cache);
                    Done::Batch(batch)
                }
            };
            // Room is guaranteed: replies waiting <= requests in flight
            // <= capacity.
            let pushed = channel.replies.push(reply);
            debug_assert!(pushed.is_ok());
            n += 1;
        }
        if n > 0 {
            if own.is_some_and(|own| std::ptr::eq(own, &**channel)) {
                // Its client is this thread, awake, and looks for the
                // replies once its push returns; it re-arms before it
                // sleeps.
                channel.waiting.store(false, SeqCst);
            } else {
                channel.wake();
            }
        }
        served += n;
    }
    served
}

/// A pipelining client of the storage thread: submit many requests, then
/// collect the replies in order. One per worker thread (`Send`, not
/// shared); get one from [`StorageHandle::client`].
pub struct Client {
    shared: Arc<Shared>,
    channel: Arc<Channel>,
    in_flight: usize,
    /// Replies collected early, while making room for a blocking submit.
    early: VecDeque<Response>,
    /// The box a [`Batch`] travels in, kept between runs.
    spare: Option<Box<Batch>>,
    /// A batch is on the storage thread (submitted, not yet taken back).
    batch_out: bool,
    /// The answered batch, collected by a blocking call before
    /// `try_complete` took it back.
    back: Option<Box<Batch>>,
}

impl Client {
    /// See [`StorageHandle::counters`].
    pub fn counters(&self) -> StorageCounters {
        self.shared.counters()
    }

    /// Requests submitted whose replies have not been taken by `recv`.
    pub fn in_flight(&self) -> usize {
        self.in_flight + self.early.len()
    }

    /// Submits a request without waiting. When `queue_capacity` requests
    /// are already in flight, the request comes back as
    /// [`TrySubmitError::Full`].
    pub fn try_submit(&mut self, request: Request) -> Result<(), TrySubmitError> {
        if self.in_flight == self.shared.capacity {
            return Err(TrySubmitError::Full(request));
        }
        self.shared
            .push(&self.channel, Job::One(request))
            .map_err(|job| match job {
                Job::One(request) => TrySubmitError::Closed(request),
                Job::Batch(_) => unreachable!("a request was pushed"),
            })?;
        self.in_flight += 1;
        Ok(())
    }

    /// Submits a request; when the queue is full, first waits for a reply
    /// (kept for `recv`) to make room. [`Error::Closed`] if the storage
    /// thread has stopped.
    pub fn submit(&mut self, request: Request) -> Result<(), Error> {
        if self.in_flight == self.shared.capacity {
            let done = self.shared.wait_reply(&self.channel)?;
            self.file(done);
        }
        match self.try_submit(request) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Closed),
        }
    }

    /// The reply to the oldest request not yet collected, waiting for it if
    /// need be; `None` when nothing is in flight.
    pub fn recv(&mut self) -> Result<Option<Response>, Error> {
        loop {
            if let Some(reply) = self.early.pop_front() {
                return Ok(Some(reply));
            }
            if self.in_flight == 0 {
                return Ok(None);
            }
            // A batch out is kept for `try_complete`.
            let done = self.shared.wait_reply(&self.channel)?;
            self.file(done);
        }
    }

    /// Sends every request of `batch` to the storage thread as one message
    /// (after the requests submitted before it) without waiting for another
    /// thread (if the storage thread sleeps, the batch runs right here,
    /// holding the cache's token, before this returns): `batch`
    /// is left empty (with spare buffers) until
    /// [`try_complete`](Self::try_complete) hands it back answered.
    /// Keys and values travel in the batch's arena and read replies reuse
    /// buffers of earlier runs, so refilling and rerunning one `Batch`
    /// allocates nothing in steady state.
    ///
    /// `Ok(false)` (and `batch` untouched) when it cannot be taken now:
    /// another batch is still out, or `queue_capacity` requests are in
    /// flight (collect replies first). [`Error::Closed`] (and `batch`
    /// untouched) if the storage thread has stopped.
    pub fn submit_batch(&mut self, batch: &mut Batch) -> Result<bool, Error> {
        if self.batch_out || self.in_flight == self.shared.capacity {
            return Ok(false);
        }
        let mut boxed = self.spare.take().unwrap_or_default();
        std::mem::swap(&mut *boxed, batch);
        // Armed before the push: whoever runs it wakes us once it is
        // answered, however soon that is (not if that is this thread).
        self.channel.waiting.store(true, SeqCst);
        if let Err(job) = self.shared.push(&self.channel, Job::Batch(boxed)) {
            if let Job::Batch(mut boxed) = job {
                std::mem::swap(&mut *boxed, batch);
                self.spare = Some(boxed);
            }
            return Err(Error::Closed);
        }
        self.in_flight += 1;
        self.batch_out = true;
        Ok(true)
    }

    /// Takes back the batch sent by [`submit_batch`](Self::submit_batch)
    /// if the storage thread has answered it, without blocking: `Ok(true)`
    /// and its responses are in [`Batch::responses`] (also `Ok(true)` when
    /// no batch was out). `Ok(false)`: not yet; the client's notify
    /// callback (see [`StorageHandle::client_with_notify`]) will be called
    /// once replies arrive, so an event loop can sleep until then.
    /// Replies to single requests that came first are kept for
    /// [`recv`](Self::recv). [`Error::Closed`] if the storage thread
    /// stopped without answering it (it failed); `batch` is then empty.
    pub fn try_complete(&mut self, batch: &mut Batch) -> Result<bool, Error> {
        let mut armed = false;
        while self.batch_out {
            if self.take_back(batch) {
                return Ok(true);
            }
            while let Some(done) = self.channel.replies.pop() {
                self.file(done);
                if self.take_back(batch) {
                    return Ok(true);
                }
            }
            if self.shared.stopped.load(SeqCst) {
                // Everything accepted was answered before `stopped` was set.
                if !self.channel.replies.is_empty() {
                    continue;
                }
                self.batch_out = false;
                return Err(Error::Closed);
            }
            if armed {
                return Ok(false);
            }
            // Ask to be woken, then look once more: a reply pushed before
            // the flag was seen would wake no one.
            self.channel.waiting.store(true, SeqCst);
            fence(SeqCst);
            armed = true;
        }
        Ok(true)
    }

    /// Files one reply taken from the queue: a single one for `recv`, the
    /// batch for `take_back`.
    fn file(&mut self, done: Done) {
        self.in_flight -= 1;
        match done {
            Done::One(reply) => self.early.push_back(reply),
            Done::Batch(boxed) => self.back = Some(boxed),
        }
    }

    /// Moves the answered batch, if it came back, into `batch`.
    fn take_back(&mut self, batch: &mut Batch) -> bool {
        let Some(mut boxed) = self.back.take() else {
            return false;
        };
        std::mem::swap(&mut *boxed, batch);
        self.spare = Some(boxed);
        self.batch_out = false;
        true
    }

    /// Runs `batch` on the storage thread (or right here, if it sleeps)
    /// and waits for it (blocking: see
    /// [`submit_batch`](Self::submit_batch) and
    /// [`try_complete`](Self::try_complete) for an event loop): its
    /// responses are then in [`Batch::responses`]. When the queue is full
    /// it first waits for a reply (kept for [`recv`](Self::recv)) to make
    /// room. A batch still out from `submit_batch` is an
    /// [`Error::InvalidConfig`] (`batch` untouched).
    pub fn run(&mut self, batch: &mut Batch) -> Result<(), Error> {
        if self.batch_out {
            return Err(Error::InvalidConfig {
                field: "batch",
                reason: "a batch from submit_batch is still out: take it back first".into(),
            });
        }
        if self.in_flight == self.shared.capacity {
            let done = self.shared.wait_reply(&self.channel)?;
            self.file(done);
        }
        let submitted = self.submit_batch(batch)?;
        debug_assert!(submitted, "room was made above");
        while !self.take_back(batch) {
            let done = self.shared.wait_reply(&self.channel)?;
            self.file(done);
        }
        Ok(())
    }

    /// Submits one request and waits for its reply (replies to earlier
    /// requests are collected first and dropped).
    pub fn call(&mut self, request: Request) -> Result<Response, Error> {
        while self.in_flight() > 0 {
            self.recv()?;
        }
        self.submit(request)?;
        self.recv()?.ok_or(Error::Closed)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.channel.closed.store(true, SeqCst);
        self.shared.channels_changed.store(true, SeqCst);
        if self.shared.users.fetch_sub(1, SeqCst) == 1 {
            self.shared.request_shutdown();
        }
    }
}

/// A handle to the storage thread: `Clone + Send + Sync`, with a blocking
/// method for every operation of [`Segcache`]. Dropping the last handle
/// (and the last [`Client`]) shuts the thread down.
pub struct StorageHandle {
    shared: Arc<Shared>,
}

impl Clone for StorageHandle {
    fn clone(&self) -> Self {
        self.shared.users.fetch_add(1, SeqCst);
        StorageHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for StorageHandle {
    fn drop(&mut self) {
        if self.shared.users.fetch_sub(1, SeqCst) == 1 {
            self.shared.request_shutdown();
        }
    }
}

impl std::fmt::Debug for StorageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageHandle")
            .field("stopped", &self.shared.stopped.load(SeqCst))
            .finish_non_exhaustive()
    }
}

macro_rules! expect_reply {
    ($reply:expr, $variant:ident) => {
        match $reply {
            Response::$variant(v) => v,
            other => unreachable!("storage thread answered {other:?}"),
        }
    };
}

impl StorageHandle {
    /// A new pipelining client with its own queues.
    pub fn client(&self) -> Client {
        self.new_client(None)
    }

    /// A new client for an event loop: `notify` is called by whichever
    /// thread ran its requests (the storage thread, or another client
    /// combining; not this client's own thread) when replies arrive while
    /// the client waits for them (a batch from [`Client::submit_batch`]
    /// not yet taken back by [`Client::try_complete`]), and when the
    /// thread stops. It runs while that thread holds the cache, so it
    /// should only wake the loop (e.g. `mio::Waker::wake`): never block,
    /// never call into this client or handle.
    ///
    /// ```
    /// use segcache::{Batch, Segcache, StorageConfig};
    /// use std::sync::mpsc;
    ///
    /// let (handle, thread) = Segcache::builder().spawn_storage(StorageConfig::default())?;
    /// let (tx, woken) = mpsc::sync_channel(1);
    /// let mut client = handle.client_with_notify(move || {
    ///     let _ = tx.try_send(());
    /// });
    /// let mut batch = Batch::new();
    /// batch.set("k", "v", 0, None);
    /// batch.get("k");
    /// assert!(client.submit_batch(&mut batch)?);
    /// // ... the loop goes on with other work, then sleeps until woken:
    /// while !client.try_complete(&mut batch)? {
    ///     woken.recv().unwrap();
    /// }
    /// assert_eq!(batch.responses().len(), 2);
    /// drop((client, handle));
    /// thread.join().unwrap();
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn client_with_notify(&self, notify: impl Fn() + Send + Sync + 'static) -> Client {
        self.new_client(Some(Box::new(notify)))
    }

    fn new_client(&self, notify: Option<Notify>) -> Client {
        self.shared.users.fetch_add(1, SeqCst);
        Client {
            channel: self.shared.register(notify),
            shared: Arc::clone(&self.shared),
            in_flight: 0,
            early: VecDeque::new(),
            spare: None,
            batch_out: false,
            back: None,
        }
    }

    /// Asks the thread to stop: requests already accepted are answered,
    /// later ones fail with [`Error::Closed`].
    pub fn shutdown(&self) {
        self.shared.request_shutdown();
    }

    /// What the cache found in its datapool when it was built (see
    /// [`Builder::restore`](crate::Builder::restore)).
    pub fn restore_outcome(&self) -> &RestoreOutcome {
        &self.shared.restore_outcome
    }

    /// How many requests the storage thread ran and how many client
    /// threads ran while it was parked (see the module doc), so far.
    pub fn counters(&self) -> StorageCounters {
        self.shared.counters()
    }

    /// True once the storage thread has stopped.
    pub fn is_stopped(&self) -> bool {
        self.shared.stopped.load(SeqCst)
    }

    /// One request, one reply, on a pooled channel.
    pub fn call(&self, request: Request) -> Result<Response, Error> {
        let channel = self
            .shared
            .pool
            .lock()
            .pop()
            .unwrap_or_else(|| self.shared.register(None));
        let result = self
            .shared
            .push(&channel, Job::One(request))
            .map_err(|_| Error::Closed)
            .and_then(|()| self.shared.wait_reply(&channel).map(Done::one));
        if result.is_ok() {
            self.shared.pool.lock().push(channel);
        } else {
            channel.closed.store(true, SeqCst);
        }
        result
    }

    /// See [`Segcache::get`]; the item is copied out.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<OwnedItem>, Error> {
        self.read(key, GetOpts::default())
    }

    fn read(&self, key: impl AsRef<[u8]>, opts: GetOpts) -> Result<Option<OwnedItem>, Error> {
        let key = key.as_ref().to_vec();
        let found = expect_reply!(self.call(Request::Get { key, opts })?, Get)?;
        Ok(found.map(|f| f.item))
    }

    fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Ttl,
        cas: Option<u64>,
    ) -> Result<(), Error> {
        let store = Store {
            flags,
            ttl,
            cas,
            ..Store::new(mode, key.to_vec(), value.to_vec())
        };
        expect_reply!(self.call(Request::Store(store))?, Stored).map(drop)
    }

    /// See [`Segcache::set`].
    pub fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.store(StoreMode::Set, key, value, flags, ttl.into(), None)
    }

    /// See [`Segcache::add`].
    pub fn add(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.store(StoreMode::Add, key, value, flags, ttl.into(), None)
    }

    /// See [`Segcache::replace`].
    pub fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) -> Result<(), Error> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.store(StoreMode::Replace, key, value, flags, ttl.into(), None)
    }

    /// See [`Segcache::cas`].
    pub fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
        cas: u64,
    ) -> Result<(), Error> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.store(StoreMode::Set, key, value, flags, ttl.into(), Some(cas))
    }

    /// See [`Segcache::append`].
    pub fn append(&self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        let (key, data) = (key.as_ref(), data.as_ref());
        self.store(StoreMode::Append, key, data, 0, Ttl::Never, None)
    }

    /// See [`Segcache::prepend`].
    pub fn prepend(&self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<(), Error> {
        let (key, data) = (key.as_ref(), data.as_ref());
        self.store(StoreMode::Prepend, key, data, 0, Ttl::Never, None)
    }

    fn arith(&self, key: &[u8], opts: ArithOpts) -> Result<u64, Error> {
        let key = key.to_vec();
        expect_reply!(self.call(Request::Arith { key, opts })?, Number).map(|(v, _)| v)
    }

    /// See [`Segcache::incr`].
    pub fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key.as_ref(), ArithOpts::new(true, delta))
    }

    /// See [`Segcache::decr`].
    pub fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<u64, Error> {
        self.arith(key.as_ref(), ArithOpts::new(false, delta))
    }

    /// See [`Segcache::touch`].
    pub fn touch(&self, key: impl AsRef<[u8]>, ttl: impl Into<Ttl>) -> Result<(), Error> {
        let (key, ttl) = (key.as_ref().to_vec(), ttl.into());
        expect_reply!(self.call(Request::Touch { key, ttl })?, Touched)
    }

    /// See [`Segcache::delete`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        let (key, opts) = (key.as_ref().to_vec(), DeleteOpts::default());
        match expect_reply!(self.call(Request::Delete { key, opts })?, Deleted) {
            Ok(()) => Ok(true),
            Err(Error::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// See [`Segcache::ttl`].
    pub fn ttl(&self, key: impl AsRef<[u8]>) -> Result<Option<Ttl>, Error> {
        let opts = GetOpts {
            bump: false,
            ..GetOpts::default()
        };
        Ok(self.read(key, opts)?.map(|item| item.ttl()))
    }

    /// See [`Segcache::flush`].
    pub fn flush(&self) -> Result<(), Error> {
        self.flush_after(Duration::ZERO)
    }

    /// See [`Segcache::flush_after`].
    pub fn flush_after(&self, delay: Duration) -> Result<(), Error> {
        self.call(Request::Flush { delay }).map(drop)
    }

    /// See [`Segcache::expire`].
    pub fn expire(&self) -> Result<Expired, Error> {
        Ok(expect_reply!(self.call(Request::Expire)?, Expired))
    }

    /// See [`Segcache::clear`].
    pub fn clear(&self) -> Result<(), Error> {
        self.call(Request::Clear).map(drop)
    }

    /// See [`Segcache::stats`].
    pub fn stats(&self) -> Result<Stats, Error> {
        Ok(*expect_reply!(self.call(Request::Stats)?, Stats))
    }

    /// See [`Segcache::len`].
    pub fn len(&self) -> Result<usize, Error> {
        Ok(expect_reply!(self.call(Request::Len)?, Len))
    }

    /// See [`Segcache::is_empty`].
    pub fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests {
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

    /// Takes the token from the test thread, waiting (bounded) until the
    /// storage thread has released it.
    fn hold_token(handle: &StorageHandle) -> Turn<'_> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(turn) = Turn::try_take(&handle.shared, CLIENT) {
                return turn;
            }
            assert!(Instant::now() < deadline, "the token was never free");
            thread::sleep(Duration::from_millis(1));
        }
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while !handle.shared.storage_waits.load(SeqCst) {
            assert!(Instant::now() < deadline, "the storage thread never asked");
            thread::sleep(Duration::from_millis(1));
        }
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while !handle.is_stopped() {
            assert!(Instant::now() < deadline, "the thread never stopped");
            thread::sleep(Duration::from_millis(1));
        }
        batch.clear();
        batch.get("k");
        assert_eq!(client.submit_batch(&mut batch), Err(Error::Closed));
        assert_eq!(batch.len(), 1, "a refused batch is given back untouched");
        drop((client, handle));
        thread.join().unwrap();
    }
}

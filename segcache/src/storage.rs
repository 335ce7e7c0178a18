//! Storage-thread mode: one thread owns a [`Segcache`]; any number of
//! threads talk to it through bounded queues, as Pelikan's workers talk to
//! its storage thread.
//!
//! Each client has its own pair of `crossbeam_queue::ArrayQueue`s (requests
//! in, replies out, equal capacity). A client never has more requests in
//! flight than that capacity, so the storage thread always has room for a
//! reply and nothing is ever dropped. The storage thread drains every
//! client's queue in batches; a client wakes it only when the shared
//! `pending` flag was clear, so a busy thread sees no wake-up syscalls and
//! an idle one sleeps until a request or its next `expire()` (at least
//! once per second) is due.
//!
//! Shutdown (explicit, or when the last handle and client are dropped):
//! new submissions are refused with [`Error::Closed`], every request already
//! accepted is answered, then the thread exits and
//! [`StorageThread::join`] reports how it ended. This module must never
//! let a client's failure (a panic, a dropped client with requests in
//! flight) reach the storage thread.

use crate::batch::Batch;
use crate::cache::{Expired, OwnedItem, RestoreOutcome, Stats};
use crate::ops::{ArithOpts, DeleteOpts, GetOpts, Request, Response, Store, StoreMode, Ttl};
use crate::{Builder, Error, Segcache};
use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};
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
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            queue_capacity: 1024,
            expire_interval: Duration::from_secs(1),
            pin_core: None,
            name: "segcache-storage".into(),
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
    /// [`Client::run`] alone, which never leaves one for anyone else).
    fn one(self) -> Response {
        match self {
            Done::One(response) => response,
            Done::Batch(_) => unreachable!("a batch reply outside Client::run"),
        }
    }
}

/// One client's queues.
struct Channel {
    requests: ArrayQueue<Job>,
    replies: ArrayQueue<Done>,
    /// The client is parked waiting for a reply.
    waiting: AtomicBool,
    waiter: Mutex<Option<Thread>>,
    /// The client is gone; the channel can be dropped once drained.
    closed: AtomicBool,
}

impl Channel {
    fn new(capacity: usize) -> Self {
        Channel {
            requests: ArrayQueue::new(capacity),
            replies: ArrayQueue::new(capacity),
            waiting: AtomicBool::new(false),
            waiter: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// Wakes the client if it parked (storage side, after pushing replies).
    fn wake(&self) {
        fence(SeqCst);
        if self.waiting.load(SeqCst) {
            if let Some(t) = self.waiter.lock().as_ref() {
                t.unpark();
            }
        }
    }
}

struct Shared {
    channels: Mutex<Vec<Arc<Channel>>>,
    channels_changed: AtomicBool,
    /// Set by clients after pushing; cleared by the storage thread before
    /// draining. A client wakes the thread only when it flips this.
    pending: AtomicBool,
    /// Submissions between their shutdown check and their push.
    submitting: AtomicUsize,
    shutdown: AtomicBool,
    stopped: AtomicBool,
    /// Live `StorageHandle`s and `Client`s; the last one out shuts down.
    users: AtomicUsize,
    /// Idle channels for the blocking calls of `StorageHandle`.
    pool: Mutex<Vec<Arc<Channel>>>,
    capacity: usize,
    storage: Mutex<Option<Thread>>,
    /// What the cache's build found in its datapool.
    restore_outcome: RestoreOutcome,
}

impl Shared {
    fn register(&self) -> Arc<Channel> {
        let channel = Arc::new(Channel::new(self.capacity));
        self.channels.lock().push(Arc::clone(&channel));
        self.channels_changed.store(true, SeqCst);
        channel
    }

    fn wake_storage(&self) {
        if !self.pending.swap(true, SeqCst) {
            if let Some(t) = self.storage.lock().as_ref() {
                t.unpark();
            }
        }
    }

    fn request_shutdown(&self) {
        self.shutdown.store(true, SeqCst);
        self.pending.store(true, SeqCst);
        if let Some(t) = self.storage.lock().as_ref() {
            t.unpark();
        }
    }

    /// Pushes a job unless shut down. The caller guarantees room.
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
        self.wake_storage();
        Ok(())
    }

    /// Waits for the next reply on a channel with a request in flight.
    fn wait_reply(&self, channel: &Channel) -> Result<Done, Error> {
        let mut spins = 0u32;
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
            if spins < 128 {
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
            submitting: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            users: AtomicUsize::new(1),
            pool: Mutex::new(Vec::new()),
            capacity: config.queue_capacity,
            storage: Mutex::new(None),
            restore_outcome,
        });
        let thread_shared = Arc::clone(&shared);
        let join = thread::Builder::new()
            .name(config.name.clone())
            .spawn(move || run(cache, &thread_shared, &config))
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
        self.0.shutdown.store(true, SeqCst);
        self.0.stopped.store(true, SeqCst);
        for channel in self.0.channels.lock().iter() {
            channel.waiting.store(true, SeqCst);
            channel.wake();
        }
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
fn run(mut cache: Segcache, shared: &Shared, config: &StorageConfig) -> Result<Stats, Error> {
    serve(&mut cache, shared, config);
    let stats = cache.stats();
    if cache.has_datapool() {
        cache.save()?;
    }
    Ok(stats)
}

fn serve(cache: &mut Segcache, shared: &Shared, config: &StorageConfig) {
    let _guard = StopGuard(shared);
    if let Some(core) = config.pin_core {
        pin(core);
    }
    let interval = config.expire_interval.min(Duration::from_secs(1));
    let mut next_expire = Instant::now() + interval;
    let mut channels: Vec<Arc<Channel>> = Vec::new();
    loop {
        shared.pending.store(false, SeqCst);
        if shared.channels_changed.swap(false, SeqCst) {
            let mut registry = shared.channels.lock();
            registry.retain(|c| !(c.closed.load(SeqCst) && c.requests.is_empty()));
            channels.clone_from(&registry);
        }
        let served = drain(cache, &channels);
        let now = Instant::now();
        if now >= next_expire {
            cache.expire();
            next_expire = now + interval;
        }
        if served > 0 {
            continue;
        }
        if shared.shutdown.load(SeqCst) {
            // No new request can be accepted now; answer the ones that got in.
            while shared.submitting.load(SeqCst) != 0 {
                std::hint::spin_loop();
            }
            channels.clone_from(&shared.channels.lock());
            while drain(cache, &channels) > 0 {}
            return;
        }
        thread::park_timeout(next_expire.saturating_duration_since(now));
    }
}

/// Serves up to `BATCH` requests per channel; returns how many.
fn drain(cache: &mut Segcache, channels: &[Arc<Channel>]) -> usize {
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
            channel.wake();
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
}

impl Client {
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
            let reply = self.shared.wait_reply(&self.channel)?.one();
            self.in_flight -= 1;
            self.early.push_back(reply);
        }
        match self.try_submit(request) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Closed),
        }
    }

    /// The reply to the oldest request not yet collected, waiting for it if
    /// need be; `None` when nothing is in flight.
    pub fn recv(&mut self) -> Result<Option<Response>, Error> {
        if let Some(reply) = self.early.pop_front() {
            return Ok(Some(reply));
        }
        if self.in_flight == 0 {
            return Ok(None);
        }
        let reply = self.shared.wait_reply(&self.channel)?.one();
        self.in_flight -= 1;
        Ok(Some(reply))
    }

    /// Runs every request of `batch` on the storage thread as one message
    /// (after the requests submitted before it) and waits for it: its
    /// responses are then in [`Batch::responses`]. Keys and values travel
    /// in the batch's arena and read replies reuse the last run's buffers,
    /// so refilling and rerunning one `Batch` allocates nothing in steady
    /// state. Replies to earlier requests stay queued for [`recv`](Self::recv).
    pub fn run(&mut self, batch: &mut Batch) -> Result<(), Error> {
        if self.in_flight == self.shared.capacity {
            let reply = self.shared.wait_reply(&self.channel)?.one();
            self.in_flight -= 1;
            self.early.push_back(reply);
        }
        let mut boxed = self.spare.take().unwrap_or_default();
        std::mem::swap(&mut *boxed, batch);
        if let Err(job) = self.shared.push(&self.channel, Job::Batch(boxed)) {
            if let Job::Batch(mut boxed) = job {
                std::mem::swap(&mut *boxed, batch);
                self.spare = Some(boxed);
            }
            return Err(Error::Closed);
        }
        self.in_flight += 1;
        loop {
            let done = self.shared.wait_reply(&self.channel)?;
            self.in_flight -= 1;
            match done {
                Done::One(reply) => self.early.push_back(reply),
                Done::Batch(mut boxed) => {
                    std::mem::swap(&mut *boxed, batch);
                    self.spare = Some(boxed);
                    return Ok(());
                }
            }
        }
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
        self.shared.users.fetch_add(1, SeqCst);
        Client {
            channel: self.shared.register(),
            shared: Arc::clone(&self.shared),
            in_flight: 0,
            early: VecDeque::new(),
            spare: None,
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
            .unwrap_or_else(|| self.shared.register());
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

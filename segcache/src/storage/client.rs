//! The client side: [`Client`] submits requests and whole batches
//! (pipelined, or from an event loop without blocking) and takes a turn
//! with the token when it is free; [`StorageHandle`] wraps one for
//! blocking calls, one per cache operation.
//!
//! Must never: submit more requests than its reply queue holds, or block
//! on a path documented as non-blocking.

use super::*;
use crate::hashtable::hash_key;

/// A pipelining client of the storage thread: submit many requests, then
/// collect the replies in order. One per worker thread (`Send`, not
/// shared); get one from [`StorageHandle::client`].
pub struct Client {
    shared: Arc<Shared>,
    pub(super) channel: Arc<Channel>,
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
        let run = |cache: &mut Segcache| cache.execute(&request);
        if let Some(result) = self.shared.run_here(Some(&self.channel), run) {
            let Ok(response) = result else {
                return Err(TrySubmitError::Closed(request));
            };
            // After every earlier reply (our queue was empty), with room:
            // replies waiting <= requests in flight < capacity.
            let pushed = self.channel.replies.push(Done::One(response));
            debug_assert!(pushed.is_ok(), "in-flight bound guarantees room");
            self.in_flight += 1;
            return Ok(());
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
        if let Some(result) = self.shared.run_here(None, |cache| cache.execute(&request)) {
            return result;
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

/// How long a blocking call waits for a token another client holds (its
/// turn is short), in spin-loop pauses, before it queues its request
/// instead: a few tens of microseconds.
const PAUSES_FOR_TOKEN: u32 = 512;

/// The longest wait between two looks at a client-held token, in pauses.
/// The waits double up to it (as a lock's spinning does): a client that
/// looks less often leaves the holder's line alone, and the holder runs
/// a few calls in a row, which with two threads calling nearly doubles
/// the calls served (2.5 -> 3.5-3.9 Mops/s in a scratch loop; a
/// `Mutex<Segcache>` 3.2-4.5 there).
const MAX_BACKOFF: u32 = 64;

/// A handle to the storage thread: `Clone + Send + Sync`, with a blocking
/// method for every operation of [`Segcache`]. Dropping the last handle
/// (and the last [`Client`]) shuts the thread down.
pub struct StorageHandle {
    pub(super) shared: Arc<Shared>,
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

    /// One request, one reply: run right here if the cache's token is free
    /// (see the module doc), else on a pooled channel.
    pub fn call(&self, request: Request) -> Result<Response, Error> {
        if let Some(result) = self.run_here(|cache| cache.execute(&request)) {
            return result;
        }
        self.call_queued(request)
    }

    /// Runs `run` on the cache on this thread if the token is free, or
    /// soon free (another client's turn is short: it tries again a little
    /// while a client holds it); `None`: queue the request instead. The
    /// first try is inlined into the caller; the tries after it are not.
    #[inline(always)]
    fn run_here<R>(&self, mut run: impl FnMut(&mut Segcache) -> R) -> Option<Result<R, Error>> {
        if let Some(result) = self.shared.run_here(None, &mut run) {
            return Some(result);
        }
        self.run_here_again(run)
    }

    /// [`run_here`](Self::run_here) after its first try found the token
    /// taken.
    #[cold]
    #[inline(never)]
    fn run_here_again<R>(
        &self,
        mut run: impl FnMut(&mut Segcache) -> R,
    ) -> Option<Result<R, Error>> {
        let shared = &self.shared;
        let (mut paused, mut backoff) = (0, 1);
        loop {
            // Worth another try only while clients take turns (not when
            // the storage thread holds the token, or waits for it), and
            // only once the token looks free: waiting on loads leaves the
            // holder's line alone until it lets go.
            loop {
                let token = shared.token.load(SeqCst);
                if paused > PAUSES_FOR_TOKEN
                    || !shared.combining
                    || shared.storage_waits.load(SeqCst)
                    || !(token == CLIENT || token == FREE)
                {
                    return None;
                }
                if token == FREE {
                    break;
                }
                for _ in 0..backoff {
                    std::hint::spin_loop();
                }
                paused += backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            if let Some(result) = shared.run_here(None, &mut run) {
                return Some(result);
            }
        }
    }

    /// [`call`](Self::call) with borrowed bytes: they are copied only if
    /// the request has to travel on a queue.
    #[inline]
    fn call_ref(&self, request: Request<&[u8]>) -> Result<Response, Error> {
        if let Some(result) = self.run_here(|cache| cache.execute(&request)) {
            return result;
        }
        self.call_queued(request.map_bytes(|bytes| bytes.to_vec()))
    }

    /// One request, one reply, on a pooled channel.
    fn call_queued(&self, request: Request) -> Result<Response, Error> {
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

    /// See [`Segcache::get`]; the item is copied out without its CAS
    /// token ([`OwnedItem::cas`] is 0: see [`gets`](Self::gets)).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<OwnedItem>, Error> {
        self.read(key, GetOpts::default())
    }

    /// [`get`](Self::get) with the item's CAS token, for a later
    /// [`cas`](Self::cas) (memcache `gets`). Once a token is out, overwrites
    /// of the items in the item's segment are appended, not made in place.
    pub fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<OwnedItem>, Error> {
        let opts = GetOpts {
            token: true,
            ..GetOpts::default()
        };
        self.read(key, opts)
    }

    /// See [`Segcache::get_value_with`]: lends the value and its client
    /// flags to `f`, or `Ok(None)` on a miss. When the cache's token is
    /// free (see the module doc) the value is lent where it lies, with no
    /// copy; when the storage thread or another client holds it, the read
    /// travels as a plain [`get`](Self::get) and `f` sees the copy. Keep
    /// `f` short: the cache may be held for it, and never call this
    /// handle (or any client of the same thread) from inside it: the
    /// inner call would wait for the cache `f` holds. A panic in `f`
    /// reaches the caller after the cache is let go; the service goes on.
    ///
    /// ```
    /// use segcache::{Segcache, StorageConfig};
    ///
    /// let (handle, thread) = Segcache::builder().spawn_storage(StorageConfig::default())?;
    /// handle.set("k", "value", 3, None)?;
    /// assert_eq!(handle.get_value_with("k", |v, flags| (v.len(), flags))?, Some((5, 3)));
    /// assert_eq!(handle.get_value_with("absent", |v, _| v.to_vec())?, None);
    /// drop(handle);
    /// thread.join().unwrap();
    /// # Ok::<(), segcache::Error>(())
    /// ```
    pub fn get_value_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8], u32) -> R,
    ) -> Result<Option<R>, Error> {
        let key = key.as_ref();
        let mut f = Some(f);
        let here = self.run_here(|cache| {
            let f = f.take().expect("a read runs once");
            // A panic in `f` is the caller's, not the cache's (which is
            // whole while it lends the value): caught here, it does not
            // retire the token (that stops the service); it resumes once
            // the token is given back.
            cache.get_value_with(key, |value, flags| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(value, flags)))
            })
        });
        if let Some(result) = here {
            return match result? {
                None => Ok(None),
                Some(Ok(r)) => Ok(Some(r)),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
            };
        }
        let f = f.take().expect("the read did not run here");
        Ok(self
            .read(key, GetOpts::default())?
            .map(|item| f(item.value(), item.flags())))
    }

    fn read(&self, key: impl AsRef<[u8]>, opts: GetOpts) -> Result<Option<OwnedItem>, Error> {
        let key = key.as_ref();
        let found = expect_reply!(self.call_ref(Request::Get { key, opts })?, Get)?;
        Ok(found.map(|f| f.item))
    }

    #[inline]
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
            ..Store::new(mode, key, value)
        };
        // Run here, the step `execute` would take, with no request or
        // response built around it; queued, the request as any other.
        let hash = hash_key(key);
        if let Some(result) = self.run_here(|cache| cache.run_store(&store, hash)) {
            return result?.map(drop);
        }
        let request = Request::Store(store).map_bytes(|bytes| bytes.to_vec());
        expect_reply!(self.call_queued(request)?, Stored).map(drop)
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
        expect_reply!(self.call_ref(Request::Arith { key, opts })?, Number).map(|(v, _)| v)
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
        let (key, ttl) = (key.as_ref(), ttl.into());
        expect_reply!(self.call_ref(Request::Touch { key, ttl })?, Touched)
    }

    /// See [`Segcache::delete`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        let key = key.as_ref();
        // Run here, `Segcache::delete` itself (no request or response
        // built around it, as a store); queued, the request.
        let hash = hash_key(key);
        if let Some(deleted) = self.run_here(|cache| cache.remove_hashed(key, hash)) {
            return deleted;
        }
        let request = Request::Delete {
            key: key.to_vec(),
            opts: DeleteOpts::default(),
        };
        match expect_reply!(self.call_queued(request)?, Deleted) {
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

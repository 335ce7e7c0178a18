//! The token and what its holder does: each client's pair of queues
//! ([`Channel`]), the shared state ([`Shared`]) whose token guards the
//! cache, a holder's [`Turn`], and [`drain`], the pass over every queue
//! that whoever holds the token runs.
//!
//! Must never: let two threads reach the cache at once (only a [`Turn`]
//! opens it), or drop a reply (a client never has more requests in
//! flight than its reply queue holds).

use super::*;

/// One client's queues.
pub(super) struct Channel {
    pub(super) requests: ArrayQueue<Job>,
    pub(super) replies: ArrayQueue<Done>,
    /// The client waits for a reply (parked, or in its own event loop);
    /// the token's holder clears it when it wakes the client.
    pub(super) waiting: AtomicBool,
    waiter: Mutex<Option<Thread>>,
    /// Called (by the token's holder) to wake a client with an event loop.
    notify: Option<Notify>,
    /// The client is gone; the channel can be dropped once drained.
    pub(super) closed: AtomicBool,
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
pub(super) const FREE: u8 = 0;
/// The storage thread holds the token.
pub(super) const STORAGE: u8 = 1;
/// A client thread holds the token, combining.
pub(super) const CLIENT: u8 = 2;
/// Retired: nobody touches the cache again.
pub(super) const GONE: u8 = 3;

/// Longest a blocking call yields the core, looking for its reply, before
/// it parks.
const CLIENT_SPIN: Duration = Duration::from_micros(200);

/// Most passes with work a client makes in one turn before it leaves the
/// rest to the storage thread.
const COMBINE_PASSES: u32 = 4;

/// What the token guards.
pub(super) struct Owned {
    /// Taken by the storage thread when it stops (to save it).
    pub(super) cache: Option<Segcache>,
    /// The holder's copy of the registry of channels to serve.
    pub(super) channels: Vec<Arc<Channel>>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) storage_jobs: AtomicU64,
    client_jobs: AtomicU64,
    client_turns: AtomicU64,
    pub(super) storage_turns: AtomicU64,
}

pub(super) struct Shared {
    pub(super) channels: Mutex<Vec<Arc<Channel>>>,
    pub(super) channels_changed: AtomicBool,
    /// Swapped to true by clients after pushing; swapped to false by the
    /// token's holder before each pass over the queues.
    pub(super) pending: AtomicBool,
    /// Who may touch `owned`: `FREE`, `STORAGE`, `CLIENT` or `GONE`.
    pub(super) token: AtomicU8,
    /// The storage thread waits for the token: a releasing client unparks
    /// it (and leaves pending work to it).
    pub(super) storage_waits: AtomicBool,
    /// The cache; only the token's holder touches it (through [`Turn`]).
    pub(super) owned: UnsafeCell<Owned>,
    pub(super) counters: Counters,
    /// Submissions between their shutdown check and their push.
    pub(super) submitting: AtomicUsize,
    pub(super) shutdown: AtomicBool,
    pub(super) stopped: AtomicBool,
    /// Live `StorageHandle`s and `Client`s; the last one out shuts down.
    pub(super) users: AtomicUsize,
    /// Idle channels for the blocking calls of `StorageHandle`.
    pub(super) pool: Mutex<Vec<Arc<Channel>>>,
    pub(super) capacity: usize,
    /// [`StorageConfig::combining`].
    pub(super) combining: bool,
    pub(super) storage: Mutex<Option<Thread>>,
    /// What the cache's build found in its datapool.
    pub(super) restore_outcome: RestoreOutcome,
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
pub(super) struct Turn<'a> {
    shared: &'a Shared,
    holder: u8,
    /// The thread was already unwinding when it took the token (a `Drop`
    /// running a storage call): dropping is then an ordinary release.
    unwinding_before: bool,
}

impl<'a> Turn<'a> {
    /// Takes the token if it is free.
    #[inline]
    pub(super) fn try_take(shared: &'a Shared, holder: u8) -> Option<Self> {
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

    /// Adds `n` to one of the token's counters: only the token's holder
    /// writes them (so a load and a store, no locked add), any thread may
    /// read them.
    #[inline]
    pub(super) fn count(&self, counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed) + n, Relaxed);
    }

    #[inline]
    pub(super) fn owned(&mut self) -> &mut Owned {
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
    pub(super) fn drain(&mut self, own: Option<&Channel>) -> usize {
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

    /// The cache itself (for a request run outside the queues).
    #[inline]
    pub(super) fn cache(&mut self) -> &mut Segcache {
        self.owned()
            .cache
            .as_mut()
            .expect("the cache stays until the token is retired")
    }

    /// Keeps the token forever (the storage thread, stopping): nobody may
    /// touch the cache after this.
    pub(super) fn retire(self) {
        self.shared.token.store(GONE, SeqCst);
        std::mem::forget(self);
    }
}

impl Turn<'_> {
    /// The holder unwinds from a panic it hit holding the token: the
    /// cache may be half-way through a request, so nobody runs on it
    /// again. The storage thread, woken, finds the token retired, stops
    /// and wakes every waiting client (they fail with `Closed`); no client
    /// callback runs here, mid-unwind.
    #[cold]
    #[inline(never)]
    fn retire_unwinding(&self) {
        self.shared.token.store(GONE, SeqCst);
        self.shared.shutdown.store(true, SeqCst);
        self.shared.stopped.store(true, SeqCst);
        self.shared.unpark_storage();
    }
}

impl Drop for Turn<'_> {
    #[inline]
    fn drop(&mut self) {
        if thread::panicking() && !self.unwinding_before {
            return self.retire_unwinding();
        }
        // `SeqCst`, then the loads after it (module doc): no fence.
        self.shared.token.store(FREE, SeqCst);
        if self.holder == CLIENT && self.shared.storage_waits.load(SeqCst) {
            self.shared.unpark_storage();
        }
    }
}

impl Shared {
    pub(super) fn counters(&self) -> StorageCounters {
        let c = &self.counters;
        StorageCounters {
            storage_jobs: c.storage_jobs.load(Relaxed),
            client_jobs: c.client_jobs.load(Relaxed),
            client_turns: c.client_turns.load(Relaxed),
            storage_turns: c.storage_turns.load(Relaxed),
        }
    }

    pub(super) fn register(&self, notify: Option<Notify>) -> Arc<Channel> {
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

    pub(super) fn request_shutdown(&self) {
        self.shutdown.store(true, SeqCst);
        self.pending.swap(true, SeqCst);
        self.unpark_storage();
    }

    /// Marks the service stopped and wakes every waiting client (a notify
    /// callback that panics does not keep the others from being woken).
    pub(super) fn stop(&self) {
        self.shutdown.store(true, SeqCst);
        self.stopped.store(true, SeqCst);
        for channel in self.channels.lock().iter() {
            channel.waiting.store(true, SeqCst);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| channel.wake()));
        }
    }

    /// Pushes a job unless shut down, then runs it (and what others queued)
    /// if the token is free. The caller guarantees room.
    pub(super) fn push(&self, channel: &Channel, request: Job) -> Result<(), Job> {
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
            self.combine(Some(channel));
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
    #[cold]
    #[inline(never)]
    fn combine(&self, own: Option<&Channel>) {
        // Our `pending` swap comes before our look at the token (both
        // `SeqCst`: see the module doc).
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
            turn.count(&self.counters.client_turns, 1);
            loop {
                self.pending.swap(false, SeqCst);
                let served = turn.drain(own);
                if served == 0 {
                    break;
                }
                turn.count(&self.counters.client_jobs, served as u64);
                passes += 1;
                if passes >= COMBINE_PASSES {
                    // A queue may still hold work nobody flagged (more
                    // than `BATCH` in it): flag it for whoever is next.
                    self.pending.swap(true, SeqCst);
                    break;
                }
            }
            drop(turn);
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

    /// A request's fast way (combining only): if the token is free and
    /// the storage thread does not wait for it, runs `run` (a request, or
    /// a read that lends its value) on the cache right here,
    /// holding the token, with no request queue and no wake-up. Requests
    /// pushed before (found waiting) run first, and, like
    /// [`combine`](Self::combine), those pushed while it ran are served
    /// before it returns. `None`: the token is taken (or combining is off,
    /// or `own`'s queue still holds requests after that first pass), so
    /// the caller hands the request over on a queue as before. After
    /// shutdown, [`Error::Closed`] and nothing runs.
    ///
    /// `own` is the caller's channel, if it has one: its queued requests
    /// are run before this one (they came first), and it is not woken. A
    /// caller without one must have nothing in flight.
    #[inline(always)]
    pub(super) fn run_here<R>(
        &self,
        own: Option<&Channel>,
        run: impl FnOnce(&mut Segcache) -> R,
    ) -> Option<Result<R, Error>> {
        if !self.combining || self.storage_waits.load(SeqCst) {
            return None;
        }
        if self.shutdown.load(SeqCst) {
            return Some(Err(Error::Closed));
        }
        // A retired token (stopped, or a holder panicked) is not FREE
        // either: the queue path then refuses the request.
        let mut turn = Turn::try_take(self, CLIENT)?;
        let mut served = 1;
        if self.pending.load(SeqCst) {
            // Requests already pushed, whose pushers found the token
            // taken (the token is free only once a holder found every
            // queue empty, or left `pending` set), run first.
            served += self.drain_pending(&mut turn, own);
        }
        let response = if own.is_some_and(|own| !own.requests.is_empty()) {
            // More than a pass's worth of our own: ours waits its turn.
            served -= 1;
            None
        } else {
            Some(run(turn.cache()))
        };
        turn.count(&self.counters.client_turns, 1);
        turn.count(&self.counters.client_jobs, served as u64);
        drop(turn);
        // After our release (module doc): a request pushed while we held
        // the token, whose pusher found it taken, is ours to run.
        if self.pending.load(SeqCst) {
            self.combine(own);
        }
        response.map(Ok)
    }

    /// [`run_here`](Self::run_here)'s rare first step, out of its way:
    /// serves what was pushed while the token was taken; returns how
    /// many requests it ran.
    #[cold]
    #[inline(never)]
    fn drain_pending(&self, turn: &mut Turn<'_>, own: Option<&Channel>) -> usize {
        self.pending.swap(false, SeqCst);
        turn.drain(own)
    }

    /// Waits for the next reply on a channel with a request in flight:
    /// spins, then yields the core for up to [`CLIENT_SPIN`], then parks
    /// until the request's executor unparks it.
    pub(super) fn wait_reply(&self, channel: &Channel) -> Result<Done, Error> {
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

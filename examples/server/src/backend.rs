//! Where a worker's storage requests run, and how their responses come
//! back: on the shared storage thread (several workers), inline on a
//! cache the worker owns (one worker: as Pelikan's server runs with one
//! worker thread, no hand-off, no thread to wake, nothing to wait for),
//! or inline on a sharded cache every worker shares (several workers with
//! `--shared-cache`: as memcached's threads share its table, each request
//! locks its key's shard for as long as it runs).
//!
//! # The storage thread
//! The requests of one event-loop round go into one reusable
//! [`segcache::Batch`] (keys and values copied into its arena, read
//! replies copied into buffers it keeps: no allocation in steady state)
//! and cross to the storage thread as **one** message when the worker
//! collects the round (`Backend::start`). When the storage thread sleeps
//! (it only wakes for expiry and shutdown), the worker takes the cache's
//! token and runs its round itself, with any round another worker queued
//! meanwhile (delegation with combining, see `segcache::storage`): no
//! wake-up, no hand-off, the answer is there when `start` returns. When
//! the storage thread or another worker holds the token, the round is
//! left to it, and the worker looks for the answer for a few microseconds
//! (the holder is running; see `Backend::wait`), then sleeps in an epoll
//! of the backend's own ([`StorageWait`]) that the holder wakes when the
//! batch is answered (only a worker that said it sleeps is woken, so an
//! answer the worker finds by itself costs no eventfd write and no wasted
//! poll); the
//! worker's socket events stay queued in the worker's poll meanwhile, so
//! they cannot wake it before the batch is back.
//!
//! # Inline
//! Each request runs as it is submitted; its response waits in order with
//! the others of the round. The worker also does the storage thread's
//! chores: [`Segcache::expire`] at least once a second, `stats` for the
//! admin port ([`StatsPort`]), and the datapool save at shutdown.
//!
//! # Shared
//! As inline, on a [`ShardedCache`]: each request locks its key's shard
//! (plain gets render under that lock), so workers never wait for one
//! another except on the same shard. Worker 0 runs the expiry; the admin
//! port reads stats from the cache itself; the server saves its datapool
//! (one file per shard) once every worker has stopped.
//!
//! This module never interprets a request or renders a reply (that is
//! [`crate::executor`]'s), and never touches sockets.

use mio::{Events, Poll, Token, Waker};
use segcache::storage::Client;
use segcache::{Item, Request, Response, RestoreOutcome, Segcache, ShardedCache, StorageHandle};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often an inline cache runs [`Segcache::expire`].
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
/// Longest sleep of a worker waiting for the storage thread between
/// checks (only matters if a wake-up were lost).
const WAIT_BOUND: Duration = Duration::from_millis(100);
/// Longest a worker looks for its answer before it sleeps (see
/// [`Backend::wait`]).
const SPIN: Duration = Duration::from_micros(25);
/// Spins in a row that ended asleep before a worker stops spinning...
const SPIN_MISSES: u32 = 2;
/// ...but for one wait in this many.
const SPIN_PROBE: u32 = 64;
/// How long the admin port waits for an inline worker's stats.
const STATS_WAIT: Duration = Duration::from_secs(1);

/// Most bytes a storage-thread batch keeps for reuse (its arena and read
/// reply buffers).
const RETAIN_MAX: usize = 256 << 10;

/// A worker's way to the cache: build one with [`Backend::thread`] or
/// [`Backend::inline`].
pub struct Backend(Way);

enum Way {
    /// The shared storage thread, one batch per round.
    Thread {
        client: Client,
        batch: segcache::Batch,
        /// The last run was answered (false: storage has stopped).
        answered: bool,
        /// Where the worker sleeps until a batch is answered.
        wait: Box<StorageWait>,
        /// What the batch kept (`retained_bytes`) when last looked at,
        /// and the key, value and reply bytes it was given since: see
        /// [`Retained`].
        retained: Retained,
    },
    /// The worker's own cache.
    Inline(Box<Inline>),
    /// A sharded cache every worker shares.
    Shared(Box<Shared>),
}

/// A worker's view of the sharded cache all workers share.
struct Shared {
    cache: Arc<ShardedCache>,
    /// Responses of the round so far, in submission order.
    replies: Vec<Response>,
    /// This worker runs the cache's expiry (one worker does).
    expires: bool,
    next_expire: Instant,
}

/// A cache a single worker owns.
struct Inline {
    cache: OwnedCache,
    /// Responses of the round so far, in submission order.
    replies: Vec<Response>,
    next_expire: Instant,
    port: Arc<StatsPort>,
}

impl Backend {
    /// Requests go to the storage thread through a client of `handle`
    /// that wakes `wait` when a batch is answered.
    pub fn thread(handle: &StorageHandle, wait: StorageWait) -> Self {
        let waker = Arc::clone(&wait.waker);
        let asleep = Arc::clone(&wait.asleep);
        let client = handle.client_with_notify(move || {
            // The answer is queued: wake the worker only if it sleeps (or
            // is about to). One that is still awake finds the answer
            // itself, and an eventfd write it did not need would cost a
            // syscall here and a wasted poll in its next wait.
            fence(Ordering::SeqCst);
            if asleep.load(Ordering::SeqCst) {
                let _ = waker.wake();
            }
        });
        Backend(Way::Thread {
            client,
            batch: segcache::Batch::new(),
            answered: false,
            wait: Box::new(wait),
            retained: Retained::default(),
        })
    }

    /// Requests run on `cache`, owned by the calling worker; `port` is how
    /// the admin port asks for its stats.
    pub fn inline(cache: OwnedCache, port: Arc<StatsPort>) -> Self {
        Backend(Way::Inline(Box::new(Inline {
            cache,
            replies: Vec::new(),
            next_expire: Instant::now() + EXPIRE_EVERY,
            port,
        })))
    }

    /// Requests run on `cache`, shared with the other workers (each
    /// request locks the key's shard only); with `expires`, this worker
    /// also runs the cache's expiry once a second.
    pub fn shared(cache: Arc<ShardedCache>, expires: bool) -> Self {
        Backend(Way::Shared(Box::new(Shared {
            cache,
            replies: Vec::new(),
            expires,
            next_expire: Instant::now() + EXPIRE_EVERY,
        })))
    }

    /// Queues (thread) or runs (inline) one request; its response is the
    /// next one [`replies`](Self::replies) yields after the earlier ones.
    pub(crate) fn submit(&mut self, request: &Request<&[u8]>) {
        match &mut self.0 {
            Way::Thread {
                batch, retained, ..
            } => {
                retained.since += request_bytes(request);
                batch.push(request);
            }
            Way::Inline(inline) => inline.replies.push(inline.cache.get_mut().execute(request)),
            Way::Shared(shared) => shared.replies.push(shared.cache.execute(request)),
        }
    }

    /// A plain `get` (counts a hit or a miss, as `Request::Get` with
    /// default options does) whose item `f` reads in place, without a
    /// copy or a response: only inline, else `None` and `f` is not called.
    pub(crate) fn get_inline<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<Item<'_>>) -> R,
    ) -> Option<R> {
        match &mut self.0 {
            Way::Inline(inline) => Some(f(inline.cache.get_mut().get(key))),
            Way::Shared(shared) => Some(shared.cache.read_with(key, f)),
            Way::Thread { .. } => None,
        }
    }

    /// Sends what was queued (thread: one message). True when its answer
    /// is still to come: call [`try_finish`](Self::try_finish) whenever
    /// the worker's waker fires until it says done. False when the
    /// responses are ready (inline: they already are).
    pub(crate) fn start(&mut self) -> bool {
        let Way::Thread {
            client,
            batch,
            answered,
            ..
        } = &mut self.0
        else {
            return false;
        };
        if batch.is_empty() {
            *answered = true;
            return false;
        }
        match client.submit_batch(batch) {
            Ok(true) => true,
            // Unreachable: a worker has no other request or batch out.
            // Run it blocking rather than lose it.
            Ok(false) => {
                *answered = client.run(batch).is_ok();
                false
            }
            Err(_) => {
                *answered = false;
                false
            }
        }
    }

    /// Waits until the batch sent by [`start`](Self::start) is back; its
    /// responses are then in [`replies`](Self::replies). Says how: at
    /// the first look (the worker ran its round itself), by a later look
    /// without sleeping, or after sleeping.
    ///
    /// A round is left to someone else only when the cache's token is
    /// taken: by the other worker's turn (a few microseconds of requests)
    /// or by the awake storage thread, both running right now. So the
    /// worker first looks for its answer for up to [`SPIN`] without
    /// sleeping: found there, it costs no eventfd write on the holder's
    /// side and no sleep and wake-up (two context switches) on ours. The
    /// spin is only tried while it pays: after [`SPIN_MISSES`] spins in a
    /// row that ended asleep anyway (a holder descheduled, both on one
    /// core), only one wait in [`SPIN_PROBE`] spins until one finds its
    /// answer again.
    pub(crate) fn wait(&mut self) -> Waited {
        let Way::Thread {
            client,
            batch,
            answered,
            wait,
            ..
        } = &mut self.0
        else {
            return Waited::Ready;
        };
        wait.waits = wait.waits.wrapping_add(1);
        let spin = wait.misses < SPIN_MISSES || wait.waits % SPIN_PROBE == 0;
        let mut spin_until = None;
        let mut announced = false;
        // The first look finds a round this worker ran itself (it found the
        // token free) or one answered already.
        let mut how = Waited::Ready;
        let done = loop {
            match client.try_complete(batch) {
                Ok(true) => break true,
                Err(_) => break false,
                Ok(false) if how == Waited::Ready => {
                    // Left to another holder: spin (if it has been paying).
                    how = Waited::Spun;
                    spin_until = spin.then(|| Instant::now() + SPIN);
                }
                Ok(false) if !announced && spin_until.is_some_and(|t| Instant::now() < t) => {
                    for _ in 0..64 {
                        std::hint::spin_loop();
                    }
                }
                // Say "asleep", then look once more before sleeping: an
                // answer queued before the storage thread could see the
                // flag is found by this look (both sides fence between
                // their store and their load).
                Ok(false) if !announced => {
                    wait.asleep.store(true, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    announced = true;
                }
                Ok(false) => {
                    how = Waited::Slept;
                    wait.sleep();
                }
            }
        };
        wait.asleep.store(false, Ordering::SeqCst);
        *answered = done;
        match how {
            Waited::Slept if spin => wait.misses = wait.misses.saturating_add(1),
            Waited::Spun => wait.misses = 0,
            _ => {}
        }
        how
    }

    /// The responses of the round, in submission order (after
    /// [`run`](Self::run)); fewer than were submitted if storage stopped.
    pub(crate) fn replies(&self) -> &[Response] {
        match &self.0 {
            Way::Thread {
                batch, answered, ..
            } => {
                if *answered {
                    batch.responses()
                } else {
                    &[]
                }
            }
            Way::Inline(inline) => &inline.replies,
            Way::Shared(shared) => &shared.replies,
        }
    }

    /// Starts the next round (buffers are kept).
    pub(crate) fn clear(&mut self) {
        match &mut self.0 {
            Way::Thread {
                batch, retained, ..
            } => {
                // A round of large keys and values would stay in the
                // batch's arena and reply buffers (kept for reuse) out of
                // the memory budget's sight: start over with empty buffers.
                retained.since += batch
                    .responses()
                    .iter()
                    .map(|r| match r {
                        Response::Get(Ok(Some(found))) => {
                            found.item.key().len() + found.item.value().len()
                        }
                        _ => 0,
                    })
                    .sum::<usize>();
                let over = retained.may_exceed() && {
                    let now = batch.retained_bytes();
                    retained.looked(if now > RETAIN_MAX { 0 } else { now });
                    now > RETAIN_MAX
                };
                if over {
                    *batch = segcache::Batch::new();
                } else {
                    batch.clear();
                }
            }
            Way::Inline(inline) => inline.replies.clear(),
            Way::Shared(shared) => shared.replies.clear(),
        }
    }

    /// When the worker must be back for [`chores`](Self::chores) at the
    /// latest.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match &self.0 {
            Way::Thread { .. } => None,
            Way::Shared(shared) => shared.expires.then_some(shared.next_expire),
            Way::Inline(inline) => Some(inline.next_expire),
        }
    }

    /// The storage thread's periodic work, for an inline cache: expiry
    /// when due, and stats the admin port asked for. Cheap when there is
    /// nothing to do (a clock comparison and an atomic load).
    pub(crate) fn chores(&mut self, now: Instant) {
        let inline = match &mut self.0 {
            Way::Inline(inline) => inline,
            Way::Shared(shared) => {
                if shared.expires && now >= shared.next_expire {
                    shared.cache.expire();
                    shared.next_expire = now + EXPIRE_EVERY;
                }
                return;
            }
            Way::Thread { .. } => return,
        };
        if now >= inline.next_expire {
            inline.cache.get_mut().expire();
            inline.next_expire = now + EXPIRE_EVERY;
        }
        if inline.port.wanted.load(Ordering::Acquire) {
            inline.port.answer(inline.cache.get_mut().stats());
        }
    }

    /// The end of the worker: an inline cache with a datapool is saved for
    /// a warm restart (the storage thread does this for its own).
    pub(crate) fn finish(self) -> Result<(), String> {
        match self.0 {
            Way::Thread { .. } | Way::Shared { .. } => Ok(()),
            Way::Inline(mut inline) => {
                inline.port.close();
                inline.cache.save()
            }
        }
    }
}

/// When a storage-thread batch's kept buffers must be measured.
///
/// [`segcache::Batch::retained_bytes`] walks every reply buffer the batch
/// keeps (as many as its largest round had requests), which at low rates
/// cost more than the round's own requests when done every round. What it
/// measures can only grow by what the batch was given: its arena's
/// capacity at most doubles or grows to what was pushed, and a reply
/// buffer's key and value are a reply's. So after a look that found
/// `kept` bytes, it stays at or under `2 * kept + since` (`since`: the
/// key, value and reply bytes given since), and the batch is measured
/// only once that bound passes [`RETAIN_MAX`]: the same rounds are
/// started over as when it was measured every round.
#[derive(Default)]
struct Retained {
    kept: usize,
    since: usize,
}

impl Retained {
    fn may_exceed(&self) -> bool {
        2 * self.kept + self.since > RETAIN_MAX
    }

    fn looked(&mut self, kept: usize) {
        self.kept = kept;
        self.since = 0;
    }
}

/// Key and value bytes a request copies into a batch's arena.
fn request_bytes(request: &Request<&[u8]>) -> usize {
    match request {
        Request::Get { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => key.len(),
        Request::Store(store) => store.key.len() + store.value.len(),
        Request::Flush { .. }
        | Request::Expire
        | Request::Clear
        | Request::Stats
        | Request::Len => 0,
        // A kind this function does not know: have the batch measured.
        _ => RETAIN_MAX + 1,
    }
}

/// How [`Backend::wait`] got its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Nothing was out (inline, shared, an empty round), or the answer
    /// was there at the first look (the worker ran its round itself).
    Ready,
    /// Found by a later look, without sleeping (while spinning, or by
    /// the look after saying "asleep").
    Spun,
    /// After sleeping until the holder woke the worker.
    Slept,
}

/// An epoll a worker sleeps in while the storage thread runs its batch,
/// woken by the storage thread alone.
pub struct StorageWait {
    poll: Poll,
    events: Events,
    waker: Arc<Waker>,
    /// The worker waits (or is about to) for an answer: only then does
    /// the storage thread's notify write to the waker.
    asleep: Arc<AtomicBool>,
    /// Spins in a row that ended asleep anyway.
    misses: u32,
    /// Waits so far (wrapping), to probe every `SPIN_PROBE`th.
    waits: u32,
}

impl StorageWait {
    /// A new epoll and its waker.
    pub fn new() -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), Token(0))?);
        Ok(StorageWait {
            poll,
            events: Events::with_capacity(4),
            waker,
            asleep: Arc::new(AtomicBool::new(false)),
            misses: 0,
            waits: 0,
        })
    }

    /// Sleeps until woken (or briefly after a poll error). The timeout
    /// only bounds a lost wake-up: the storage thread wakes it when a
    /// batch is answered and when it stops.
    fn sleep(&mut self) {
        if self.poll.poll(&mut self.events, Some(WAIT_BOUND)).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A cache one worker will own. Saved to its datapool (if it has one) by
/// the worker when it stops, or when dropped before that (a start that failed
/// after the cache was built): as the storage thread saves its cache
/// whenever it ends, except after a panic (the cache may be half-changed).
pub struct OwnedCache(Option<Segcache>);

impl OwnedCache {
    /// Wraps a built cache.
    pub fn new(cache: Segcache) -> Self {
        OwnedCache(Some(cache))
    }

    /// What the cache found in its datapool.
    pub fn restore_outcome(&self) -> &RestoreOutcome {
        self.get().restore_outcome()
    }

    fn get(&self) -> &Segcache {
        self.0.as_ref().expect("present until saved")
    }

    fn get_mut(&mut self) -> &mut Segcache {
        self.0.as_mut().expect("present until saved")
    }

    /// Saves a cache with a datapool (once); the cache is gone after.
    fn save(&mut self) -> Result<(), String> {
        match self.0.take() {
            Some(cache) if cache.has_datapool() => cache
                .save()
                .map_err(|e| format!("saving the datapool: {e}")),
            _ => Ok(()),
        }
    }
}

impl Drop for OwnedCache {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(e) = self.save() {
            eprintln!("segcache-server: {e}");
        }
    }
}

/// How the admin thread gets stats from an inline worker's cache: it
/// raises a flag and wakes the worker, which answers at the end of its
/// current round.
pub struct StatsPort {
    wanted: AtomicBool,
    state: Mutex<PortState>,
    ready: Condvar,
    waker: Arc<Waker>,
}

#[derive(Default)]
struct PortState {
    answer: Option<segcache::Stats>,
    closed: bool,
}

impl StatsPort {
    /// A port to the worker woken by `waker`.
    pub fn new(waker: Arc<Waker>) -> Self {
        StatsPort {
            wanted: AtomicBool::new(false),
            state: Mutex::new(PortState::default()),
            ready: Condvar::new(),
            waker,
        }
    }

    /// Asks the worker for its cache's stats; `None` if it does not answer
    /// within a second or has stopped.
    fn ask(&self) -> Option<segcache::Stats> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return None;
        }
        state.answer = None;
        self.wanted.store(true, Ordering::Release);
        let _ = self.waker.wake();
        let deadline = Instant::now() + STATS_WAIT;
        while state.answer.is_none() && !state.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .ready
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        self.wanted.store(false, Ordering::Release);
        state.answer.take()
    }

    fn answer(&self, stats: segcache::Stats) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.wanted.store(false, Ordering::Release);
        state.answer = Some(stats);
        self.ready.notify_all();
    }

    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        self.ready.notify_all();
    }
}

/// Where the admin port gets the cache's stats.
pub enum StatsSource {
    /// The storage thread.
    Thread(StorageHandle),
    /// The worker that owns the cache.
    Inline(Arc<StatsPort>),
    /// The sharded cache the workers share (its `stats` locks one shard
    /// at a time).
    Shared(Arc<ShardedCache>),
}

impl StatsSource {
    /// The cache's stats, `None` if storage does not answer.
    pub fn stats(&self) -> Option<segcache::Stats> {
        match self {
            StatsSource::Thread(handle) => match handle.call(Request::Stats) {
                Ok(Response::Stats(s)) => Some(*s),
                _ => None,
            },
            StatsSource::Inline(port) => port.ask(),
            StatsSource::Shared(cache) => Some(cache.stats()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segcache::ops::{GetOpts, Store, StoreMode};
    use segcache::StorageConfig;

    impl Backend {
        /// What the storage-thread batch keeps for reuse.
        fn retained_now(&self) -> usize {
            match &self.0 {
                Way::Thread { batch, .. } => batch.retained_bytes(),
                _ => 0,
            }
        }
    }

    fn borrowed(r: &Request) -> Request<&[u8]> {
        match r {
            Request::Store(s) => Request::Store(Store::new(
                StoreMode::Set,
                s.key.as_slice(),
                s.value.as_slice(),
            )),
            Request::Get { key, opts } => Request::Get {
                key: key.as_slice(),
                opts: *opts,
            },
            _ => unreachable!("the test sends sets and gets"),
        }
    }

    /// One round: the requests, sent, answered, rendered (here: dropped).
    fn round(backend: &mut Backend, requests: &[Request<&[u8]>]) -> usize {
        for r in requests {
            backend.submit(r);
        }
        if backend.start() {
            backend.wait();
        }
        let answered = backend.replies().len();
        backend.clear();
        answered
    }

    /// Whatever its rounds look like (large values read back in one round,
    /// one at a time over many rounds, small rounds in between), a
    /// worker's batch never keeps more than `RETAIN_MAX` past a round's
    /// end, though it is no longer measured every round. Fails if the
    /// bound that skips the measuring undercounts what a round adds.
    #[test]
    fn a_batch_never_keeps_more_than_retain_max_between_rounds() {
        let (handle, storage) = Segcache::builder()
            .heap_size(64 << 20)
            .segment_size(1 << 20)
            .spawn_storage(StorageConfig::default())
            .unwrap();
        let mut backend = Backend::thread(&handle, StorageWait::new().unwrap());
        let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("key-{i}").into_bytes()).collect();
        let value = vec![b'v'; 24 << 10];
        let small = vec![b's'; 16];
        let sets: Vec<Request> = keys
            .iter()
            .map(|k| Request::Store(Store::new(StoreMode::Set, k.clone(), value.clone())))
            .collect();
        let gets: Vec<Request> = keys
            .iter()
            .map(|k| Request::Get {
                key: k.clone(),
                opts: GetOpts::default(),
            })
            .collect();
        let tiny = Request::Store(Store::new(StoreMode::Set, b"tiny".to_vec(), small.clone()));
        let mut worst = 0;
        let mut check = |backend: &Backend| {
            let kept = backend.retained_now();
            worst = worst.max(kept);
            assert!(kept <= RETAIN_MAX, "a batch kept {kept} bytes past a round");
        };
        // Every value in the cache, a few per round.
        for chunk in sets.chunks(4) {
            let reqs: Vec<_> = chunk.iter().map(borrowed).collect();
            assert_eq!(round(&mut backend, &reqs), reqs.len());
            check(&backend);
        }
        // All of them read back in one round, then small rounds.
        let all: Vec<_> = gets.iter().map(borrowed).collect();
        assert_eq!(round(&mut backend, &all), all.len());
        check(&backend);
        for _ in 0..50 {
            round(&mut backend, &[borrowed(&tiny)]);
            check(&backend);
        }
        // Rounds of 1 to 16 reads (24 to 384 KiB of replies), each
        // followed by a small round: the kept reply buffers grow a few at
        // a time across rounds (a bound four times as loose fails here).
        for width in 1..=16 {
            for chunk in gets.chunks(width) {
                let reqs: Vec<_> = chunk.iter().map(borrowed).collect();
                round(&mut backend, &reqs);
                check(&backend);
                round(&mut backend, &[borrowed(&tiny)]);
                check(&backend);
            }
        }
        // The rounds did fill the batch close to its bound (the test saw
        // large batches, not only small ones).
        assert!(worst > RETAIN_MAX / 4, "largest kept: {worst}");
        drop(backend);
        handle.shutdown();
        storage.join().unwrap();
    }
}

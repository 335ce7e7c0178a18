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
//! * A single request (a [`StorageHandle`] method, [`Client::call`],
//!   [`Client::submit`]) that finds the token free does not even push: it
//!   runs at once, holding the token, after whatever was already waiting
//!   (its own client's queued requests included, so it never overtakes
//!   them), and then serves what others pushed meanwhile; a pipelined
//!   one's reply joins its client's reply queue behind the earlier ones.
//!   Only if the token is taken does it queue the request as above (a
//!   blocking call first tries again for a little while another client
//!   holds it: such a turn is short).
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
//! true; try the token*, a holder that gives the token up does *store
//! `FREE`; load `pending`*, and a holder starting a pass does *swap
//! `pending` to false; drain*. `SeqCst` operations fall in one total order
//! that keeps each thread's program order, so no fence is needed between
//! a store and the load after it (on x86-64 the `SeqCst` store is itself
//! a locked exchange): if the pusher's swap comes first, the releaser's
//! load sees `pending` set (or a later holder cleared it, and that holder
//! drains the request) and the releaser takes the token back or, if
//! someone else already has, leaves it to them; if the releaser's store
//! comes first, the pusher's try sees `FREE` (or a newer holder, who
//! cleared `pending` after our swap and drains our request, or will see
//! `pending` when it releases). A holder's swap that reads a pusher's
//! `true` synchronizes with that push (the swaps are read-modify-writes,
//! so every pusher's store heads a release sequence the later swaps
//! continue), so the drain that follows sees the request. The storage
//! thread waiting for the token to do its duties says so
//! (`storage_waits`, then try again); a releasing client loads that flag
//! after its release and unparks it. The token's counters are written
//! only by its holder (a load and a store, no locked add). The cell's accesses are
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
//!
//! # The files
//! * this one: the settings, what travels on the queues, the counters;
//! * `token.rs`: the queues, the token and its holder's turn (the only
//!   way to the cache), and the drain every holder runs;
//! * `storage_thread.rs`: spawning the storage thread and its loop (serve, poll,
//!   park, expire, shut down);
//! * `client.rs`: [`Client`] (pipelined and batched submission) and
//!   [`StorageHandle`] (blocking calls, one per operation).

mod client;
mod storage_thread;
#[cfg(test)]
mod tests;
mod token;

pub use client::{Client, StorageHandle};
pub use storage_thread::StorageThread;
use token::*;

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

//! A worker thread: an epoll (mio) event loop over its share of the client
//! connections (connection I/O only), reaching the cache through its
//! [`Backend`] (the storage thread, or a cache of its own when it is the
//! only worker). What a command means and how its reply reads is the
//! executor's ([`crate::executor`]).
//!
//! # One loop iteration
//! 1. Wait for events (or not at all when some connection still has work).
//! 2. For every readable connection, read what the socket has (a short
//!    read ends its turn: the socket is empty), parse every complete
//!    command (a text line, or a binary packet on a connection whose
//!    first byte was the binary magic) and hand it to the executor, which
//!    submits its core request and notes how to render the reply. Commands
//!    answered without storage (`version`, parse errors...) get a
//!    pre-rendered entry, so every connection's replies stay in order.
//! 3. Collect the storage responses in submission order and let the
//!    executor render each connection's replies into its write buffer: one
//!    batch (one message to the storage thread), not a request/response
//!    ping-pong per command. While someone else runs it (the storage
//!    thread, or the other worker's turn) the worker looks for the answer
//!    briefly, then sleeps in the backend's own poll until woken (socket
//!    events wait in the worker's poll meanwhile).
//! 4. Write what each socket takes; the rest waits for a writable event.
//! 5. The backend's chores (an inline cache's expiry and admin stats).
//!
//! Never interprets a command or a response itself.
//!
//! # What a client can never do
//! * Make the worker buffer without bound: the parser caps lines and
//!   values, oversized values are swallowed as they arrive, and every
//!   buffer is charged to the worker's [`Budget`] (`--max-conn-output`
//!   per connection, a share of `--max-buffered` in all): a connection
//!   whose replies pile up unread is not read from until they drain, a
//!   multiget is answered a slice at a time, and past the cap a request is
//!   refused or the connection holding most is closed.
//! * Affect another connection: every failure (a parse error, a reset, a
//!   half-sent value) is answered or closed on that connection only.

use crate::backend::{Backend, Waited};
use crate::budget::{self, Budget, Held};
use crate::executor::{render, Batch, Pipe, Settings, Then};
use crate::metrics::{Metrics, Outcome, WorkerStats};
use crate::protocol::binary::{parse_binary, BinError, REQUEST_MAGIC};
use crate::protocol::{self, parse, ParseError};
use crate::stream::Stream;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An emptied buffer that grew past 1 MiB for a burst (a large multi-get,
/// a slow reader) shrinks back to 64 KiB, so idle workers and connections
/// do not keep a burst's memory.
fn give_back_burst(buf: &mut Vec<u8>) {
    debug_assert!(buf.is_empty());
    if buf.capacity() > (1 << 20) {
        buf.shrink_to(64 << 10);
    }
}

/// Token of the worker's waker (new connections, shutdown).
pub const WAKER: Token = Token(usize::MAX);
/// Bytes read from a socket at a time.
const CHUNK: usize = 16 * 1024;
/// Reads per connection per event before giving the others a turn.
const READS_PER_TURN: usize = 16;
/// Storage requests in one batch before its replies are collected.
const BATCH_MAX: usize = 512;
/// How long a shutdown waits for replies to be written.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// What every worker shares.
pub struct Ctx {
    pub metrics: Arc<Metrics>,
    pub shutdown: AtomicBool,
    /// Every thread's waker (the listener's first), set once they exist:
    /// what [`Ctx::stop`] wakes.
    pub wakers: std::sync::OnceLock<Vec<Arc<Waker>>>,
    /// What `stats settings` reports, the largest value accepted, and
    /// whether `flush_all` is allowed.
    pub settings: Settings,
    /// Memory and idle limits of client connections.
    pub limits: budget::Limits,
}

impl Ctx {
    /// Starts a graceful shutdown (SIGTERM, or a client's `shutdown`):
    /// every thread sees the flag when its waker wakes it.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for w in self.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
    }
}

struct Conn {
    stream: Stream,
    /// `rbuf[rstart..rend]` is received, unparsed input.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// `wbuf[wpos..]` is output not yet written.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Input bytes still to drop (the rest of an oversized value).
    swallow: usize,
    /// No more requests: close once the output is written.
    closing: bool,
    /// The socket failed: close now.
    dead: bool,
    /// Reading stopped while output piles up.
    paused: bool,
    /// Paused for budget other connections hold: resume once every reply
    /// is written.
    starved: bool,
    /// Already in the worker's dirty list.
    dirty: bool,
    /// Buffer bytes charged to the worker's budget.
    held: Held,
    /// Its part in the batch's budget (a multiget too large for it is
    /// answered a slice at a time).
    share: budget::Share,
    /// When the client last sent something.
    last_read: Instant,
    /// Speaks the binary protocol (its first byte was the binary magic);
    /// unknown until it sends something.
    binary: Option<bool>,
}

impl Conn {
    fn pending_out(&self) -> usize {
        self.wbuf.len() - self.wpos + self.stream.pending()
    }

    /// Buffer bytes the connection holds (TLS output waiting in rustls
    /// included).
    fn buffered(&self) -> usize {
        self.rbuf.capacity() + self.wbuf.capacity() + self.stream.pending()
    }

    /// Charges [`Conn::buffered`] to the worker's budget.
    fn charge(&mut self, budget: &mut Budget) {
        let bytes = self.buffered();
        budget.sync(&mut self.held, bytes);
    }

    /// Writes what the socket takes.
    fn flush(&mut self, stats: &WorkerStats) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    stats.add(Outcome::BytesWritten, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            give_back_burst(&mut self.wbuf);
            // TLS: the ciphertext of what was written.
            if self.stream.pending() > 0 {
                match self.stream.flush() {
                    Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// One worker thread's state.
pub struct Worker {
    poll: Poll,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    incoming: Receiver<Stream>,
    backend: Backend,
    stats: Arc<WorkerStats>,
    ctx: Arc<Ctx>,
    batch: Batch,
    dirty: Vec<usize>,
    again: Vec<usize>,
    /// An empty list traded with `dirty` and `again` as they are walked.
    spare: Vec<usize>,
    now_unix: u64,
    read_at: Instant,
    budget: Budget,
    last_sweep: Instant,
}

impl Worker {
    pub fn new(
        poll: Poll,
        incoming: Receiver<Stream>,
        backend: Backend,
        stats: Arc<WorkerStats>,
        ctx: Arc<Ctx>,
    ) -> Self {
        Worker {
            poll,
            conns: Vec::new(),
            free: Vec::new(),
            incoming,
            backend,
            stats,
            ctx: Arc::clone(&ctx),
            batch: Batch::default(),
            dirty: Vec::new(),
            again: Vec::new(),
            spare: Vec::new(),
            now_unix: crate::metrics::unix_now(),
            read_at: Instant::now(),
            budget: ctx.limits.budget(),
            last_sweep: Instant::now(),
        }
    }

    /// Creates the poll and the waker the listener uses to hand over
    /// connections and to signal shutdown.
    pub fn poll_and_waker() -> io::Result<(Poll, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((poll, waker))
    }

    /// Serves connections until shutdown, then answers what was read and
    /// writes it out (for at most a few seconds) before returning. Returns
    /// why saving an inline cache's datapool failed, if it did.
    pub fn run(mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(1024);
        loop {
            let mut timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else if self.ctx.limits.idle_timeout.is_some() {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Some(due) = self.backend.deadline() {
                let left = due.saturating_duration_since(Instant::now());
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    eprintln!("segcache-server: worker poll failed: {e}");
                    break;
                }
            }
            self.read_at = Instant::now();
            self.now_unix = crate::metrics::unix_now();
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    self.accept_new();
                    continue;
                }
                let t = token.0;
                if event.is_writable() {
                    self.on_writable(t);
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    // Edge-triggered: a read shorter than the room offered
                    // emptied the socket, and more data raises a new event.
                    // Read on to the end when the peer closed or erred.
                    let drain = event.is_read_closed() || event.is_error();
                    self.on_readable(t, !drain);
                }
            }
            // Swapped with a spare list, so neither list is reallocated.
            let mut again = std::mem::replace(&mut self.again, std::mem::take(&mut self.spare));
            for t in again.drain(..) {
                self.on_readable(t, false);
            }
            self.spare = again;
            self.finish_round();
            self.backend.chores(self.read_at);
            self.sweep_idle();
            if self.ctx.shutdown.load(Ordering::SeqCst) {
                break;
            }
        }
        self.drain();
        self.backend.finish()
    }

    /// Graceful end: read what clients already sent, answer it, write the
    /// answers, then close everything.
    fn drain(&mut self) {
        while let Ok(stream) = self.incoming.try_recv() {
            drop(stream);
            self.ctx
                .metrics
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
        }
        for t in 0..self.conns.len() {
            self.on_readable(t, false);
            if let Some(c) = self.conns[t].as_mut() {
                c.closing = true;
                mark(&mut self.dirty, c, t);
            }
        }
        self.finish_round();
        let deadline = Instant::now() + DRAIN_DEADLINE;
        let mut events = Events::with_capacity(1024);
        while self.conns.iter().any(Option::is_some) && Instant::now() < deadline {
            let _ = self.poll.poll(&mut events, Some(Duration::from_millis(50)));
            let ready: Vec<usize> = events
                .iter()
                .filter(|e| e.token() != WAKER && e.is_writable())
                .map(|e| e.token().0)
                .collect();
            for t in ready {
                self.on_writable(t);
            }
            self.finish_round();
        }
        for t in 0..self.conns.len() {
            self.close(t);
        }
    }

    fn accept_new(&mut self) {
        while let Ok(mut stream) = self.incoming.try_recv() {
            let t = match self.free.pop() {
                Some(t) => t,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(t),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                eprintln!("segcache-server: cannot register a connection: {e}");
                self.free.push(t);
                self.ctx
                    .metrics
                    .curr_connections
                    .fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            self.conns[t] = Some(Conn {
                stream,
                rbuf: Vec::new(),
                rstart: 0,
                rend: 0,
                wbuf: Vec::new(),
                wpos: 0,
                swallow: 0,
                closing: false,
                dead: false,
                paused: false,
                starved: false,
                dirty: false,
                held: Held::default(),
                share: budget::Share::default(),
                binary: None,
                last_read: Instant::now(),
            });
            // Data may have arrived before registration.
            self.again.push(t);
        }
    }

    fn on_writable(&mut self, t: usize) {
        let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
            return;
        };
        if conn.flush(&self.stats).is_err() {
            conn.dead = true;
        }
        conn.charge(&mut self.budget);
        mark(&mut self.dirty, conn, t);
        if resumes(&self.budget, conn) {
            self.again.push(t);
        }
    }

    /// Reads and answers what connection `t` sent; with `short_ends`, a
    /// read that did not fill the room offered ends the turn (it emptied
    /// the socket: saves the read that would only say "would block").
    fn on_readable(&mut self, t: usize, short_ends: bool) {
        // Requests already buffered first (after a pause).
        self.process_input(t);
        let max_buf = self.ctx.settings.max_value + protocol::MAX_MULTIGET_LINE_LEN + 4096;
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
                return;
            };
            if conn.closing || conn.dead || conn.paused {
                return;
            }
            if conn.rend == conn.rbuf.len() {
                if conn.rstart > 0 {
                    conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                    conn.rend -= conn.rstart;
                    conn.rstart = 0;
                }
                if conn.rend == conn.rbuf.len() {
                    let len = conn.rbuf.len();
                    if len >= max_buf {
                        // The parser bounds every request below this.
                        conn.dead = true;
                        mark(&mut self.dirty, conn, t);
                        return;
                    }
                    let grow = len.max(CHUNK).min(max_buf - len);
                    conn.charge(&mut self.budget);
                    if !self.budget.may_grow(&conn.held, grow) {
                        if self.batch.submitted > 0 {
                            // Settle the replies in flight, then look again.
                            self.collect();
                            continue;
                        }
                        // The request needs more buffer than is free.
                        protocol::write_server_error(
                            &mut conn.wbuf,
                            "out of memory reading request",
                        );
                        self.stats.add(Outcome::OutOfMemory, 1);
                        conn.closing = true;
                        mark(&mut self.dirty, conn, t);
                        return;
                    }
                    conn.rbuf.resize(len + grow, 0);
                    conn.rbuf.shrink_to_fit();
                    conn.charge(&mut self.budget);
                }
            }
            match conn.stream.read(&mut conn.rbuf[conn.rend..]) {
                Ok(0) => {
                    // The client is done sending: answer what it sent.
                    self.process_input(t);
                    if let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) {
                        conn.closing = true;
                        mark(&mut self.dirty, conn, t);
                    }
                    return;
                }
                Ok(n) => {
                    let short = conn.rend + n < conn.rbuf.len();
                    conn.rend += n;
                    conn.last_read = self.read_at;
                    self.stats.add(Outcome::BytesRead, n as u64);
                    self.process_input(t);
                    if short && short_ends {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    conn.dead = true;
                    mark(&mut self.dirty, conn, t);
                    return;
                }
            }
        }
        // Fairness: come back to this connection after the others.
        self.again.push(t);
    }

    /// Parses and dispatches every complete request in the connection's
    /// buffer.
    fn process_input(&mut self, t: usize) {
        let limit = self.ctx.settings.value_limit();
        loop {
            if self.batch.submitted >= BATCH_MAX {
                self.collect();
            }
            let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
                return;
            };
            if conn.closing || conn.dead {
                conn.rstart = conn.rend;
                break;
            }
            if self.budget.output_full(conn.pending_out()) {
                conn.paused = true;
                break;
            }
            if conn.swallow > 0 {
                let n = conn.swallow.min(conn.rend - conn.rstart);
                conn.rstart += n;
                conn.swallow -= n;
                if conn.swallow > 0 {
                    break;
                }
            }
            if conn.rstart == conn.rend {
                break;
            }
            let mut pipe = Pipe {
                backend: &mut self.backend,
                batch: &mut self.batch,
                stats: &self.stats,
                now_unix: self.now_unix,
                read_at: self.read_at,
                settings: &self.ctx.settings,
            };
            let avail = &conn.rbuf[conn.rstart..conn.rend];
            // As memcached: the first byte a client sends picks the
            // protocol for the connection's life.
            if *conn.binary.get_or_insert(avail[0] == REQUEST_MAGIC) {
                // One reply per request, a value at most: a read is
                // admitted as one key of a get, a store's value reserved.
                let (used, close) = match parse_binary(avail, limit) {
                    Ok((req, used)) => {
                        let pending = conn.wbuf.len() - conn.wpos;
                        if !self.budget.admit_binary(&req, &mut conn.share, pending) {
                            if !self.make_room(t, used) {
                                break;
                            }
                            continue;
                        }
                        (used, pipe.dispatch_binary(t, &req) != Then::Continue)
                    }
                    Err(BinError::Incomplete) => break,
                    Err(e) => pipe
                        .binary_refused(t, &e, avail)
                        .unwrap_or((avail.len(), true)),
                };
                let have = conn.rend - conn.rstart;
                if close {
                    conn.closing = true;
                    conn.rstart = conn.rend;
                    mark(&mut self.dirty, conn, t);
                    break;
                } else if used > have {
                    conn.swallow = used - have;
                    conn.rstart = conn.rend;
                } else {
                    conn.rstart += used;
                }
                continue;
            }
            let mut no_room = None;
            let parsed = match conn.share.resume(avail) {
                Some(sliced) => Ok(sliced),
                None => parse(avail, limit),
            };
            match parsed {
                Ok((req, used)) => {
                    let pending = conn.wbuf.len() - conn.wpos;
                    match self
                        .budget
                        .admit((req, used, avail), &mut conn.share, pending)
                    {
                        budget::Admit::Whole(req) => {
                            let then = pipe.dispatch(t, req);
                            conn.rstart += used;
                            if then != Then::Continue {
                                conn.closing = true;
                                mark(&mut self.dirty, conn, t);
                            }
                            if then == Then::Shutdown {
                                eprintln!("segcache-server: shutdown requested by a client");
                                self.ctx.stop();
                            }
                        }
                        budget::Admit::Part(req) => {
                            pipe.dispatch(t, req);
                            pipe.strip_end(t);
                        }
                        budget::Admit::NoRoom => no_room = Some(used),
                    }
                }
                Err(ParseError::Incomplete) => break,
                Err(e) => {
                    pipe.parse_error(t, &e, avail);
                    if e.closes_connection() {
                        conn.closing = true;
                        conn.rstart = conn.rend;
                        mark(&mut self.dirty, conn, t);
                        break;
                    }
                    let used = e.consumed().unwrap_or(avail.len());
                    let have = conn.rend - conn.rstart;
                    if used > have {
                        conn.swallow = used - have;
                        conn.rstart = conn.rend;
                    } else {
                        conn.rstart += used;
                    }
                }
            }
            if let Some(used) = no_room {
                if !self.make_room(t, used) {
                    break;
                }
            }
        }
        if let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) {
            if conn.rstart == conn.rend {
                conn.rstart = 0;
                conn.rend = 0;
                if conn.rbuf.len() > 4 * CHUNK {
                    conn.rbuf = Vec::new();
                    self.budget.sync(&mut conn.held, conn.wbuf.capacity());
                }
            }
        }
    }

    /// A request of connection `t` (`used` bytes of its input) does not fit
    /// the budget. Settles the batch in flight, or waits for the client to
    /// read its own replies, or closes the connection holding most (idle
    /// ones first) to make room, or else refuses the request. Returns
    /// whether to try the request again now.
    fn make_room(&mut self, t: usize, used: usize) -> bool {
        if !self.batch.actions.is_empty() {
            self.collect();
            return true;
        }
        let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
            return false;
        };
        let capacity = conn.buffered();
        if capacity < conn.held.bytes() {
            // Its buffers shrank since it was last charged.
            self.budget.sync(&mut conn.held, capacity);
            return true;
        }
        if conn.pending_out() > 0 {
            conn.paused = true;
            conn.starved = true;
            return false;
        }
        let victim = self
            .conns
            .iter()
            .enumerate()
            .filter(|&(v, c)| v != t && c.as_ref().is_some_and(|c| c.held.bytes() > budget::BASE))
            .max_by_key(|(_, c)| c.as_ref().map(|c| (c.paused, c.held.bytes())))
            .map(|(v, _)| v);
        if let Some(v) = victim {
            self.stats.add(Outcome::ShedConnections, 1);
            self.close(v);
            return true;
        }
        let conn = self.conns[t].as_mut().expect("checked above");
        protocol::write_server_error(&mut conn.wbuf, "out of memory");
        self.stats.add(Outcome::OutOfMemory, 1);
        conn.rstart += used;
        conn.share.reset();
        mark(&mut self.dirty, conn, t);
        true
    }

    /// Closes connections silent for longer than `--idle-timeout`.
    fn sweep_idle(&mut self) {
        let Some(limit) = self.ctx.limits.idle_timeout else {
            return;
        };
        if self.read_at.duration_since(self.last_sweep) < Duration::from_millis(500) {
            return;
        }
        self.last_sweep = self.read_at;
        for t in 0..self.conns.len() {
            let idle = self.conns[t]
                .as_ref()
                .is_some_and(|c| self.read_at.duration_since(c.last_read) >= limit);
            if idle {
                self.stats.add(Outcome::IdleKicks, 1);
                self.close(t);
            }
        }
        self.budget.trim();
    }

    /// Collects the storage replies of the batch and renders every reply.
    fn collect(&mut self) {
        let metrics = Arc::clone(&self.ctx.metrics);
        if self.backend.start() {
            match self.backend.wait() {
                Waited::Spun => self.stats.add(Outcome::StorageWaitSpun, 1),
                Waited::Slept => self.stats.add(Outcome::StorageWaitSlept, 1),
                Waited::Ready => {}
            }
        }
        let batch = &mut self.batch;
        let mut replies = self.backend.replies().iter();
        for action in batch.actions.drain(..) {
            match self.conns.get_mut(action.conn).and_then(Option::as_mut) {
                Some(conn) => {
                    render(
                        action.kind,
                        &batch.arena,
                        &mut replies,
                        &mut conn.wbuf,
                        &self.stats,
                        &metrics,
                    );
                    mark(&mut self.dirty, conn, action.conn);
                }
                None => {
                    // Unreachable (connections close after collecting), but
                    // the storage replies must still be consumed in order.
                    let mut sink = Vec::new();
                    render(
                        action.kind,
                        &batch.arena,
                        &mut replies,
                        &mut sink,
                        &self.stats,
                        &metrics,
                    );
                }
            }
        }
        self.backend.clear();
        batch.arena.clear();
        give_back_burst(&mut batch.arena);
        // The replies are in the write buffers now: count them there.
        self.budget.settle();
        for &t in &self.dirty {
            if let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) {
                conn.share.reserved = 0;
                conn.charge(&mut self.budget);
            }
        }
        if let Some(started) = batch.started.take() {
            let nanos = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            self.stats.record_latency(nanos, batch.requests);
        }
        batch.requests = 0;
        batch.submitted = 0;
    }

    /// End of an event-loop round: answer, write, close.
    fn finish_round(&mut self) {
        self.collect();
        let mut dirty = std::mem::replace(&mut self.dirty, std::mem::take(&mut self.spare));
        for t in dirty.drain(..) {
            let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
                continue;
            };
            conn.dirty = false;
            if !conn.dead && conn.flush(&self.stats).is_err() {
                conn.dead = true;
            }
            conn.charge(&mut self.budget);
            if resumes(&self.budget, conn) {
                self.again.push(t);
            }
            if conn.dead || (conn.closing && conn.pending_out() == 0) {
                self.close(t);
            }
        }
        self.spare = dirty;
        self.budget.trim();
        self.stats.set_buffered(self.budget.used());
    }

    fn close(&mut self, t: usize) {
        if let Some(mut conn) = self.conns.get_mut(t).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.budget.release(&mut conn.held);
            self.free.push(t);
            // The buffers' release is published before the connection
            // count drops (Release; `stats` reads the count with Acquire):
            // whoever sees the connection gone sees its buffers gone too,
            // also when this worker has no further round soon.
            self.stats.set_buffered(self.budget.used());
            self.ctx
                .metrics
                .curr_connections
                .fetch_sub(1, Ordering::Release);
        }
    }
}

/// Whether a paused connection may be read again: its replies drained
/// (all of them, when it waited for budget others hold).
fn resumes(budget: &Budget, conn: &mut Conn) -> bool {
    let pending = conn.pending_out();
    let ready = if conn.starved {
        pending == 0
    } else {
        budget.output_drained(pending)
    };
    if conn.paused && ready {
        conn.paused = false;
        conn.starved = false;
        return true;
    }
    false
}

fn mark(dirty: &mut Vec<usize>, conn: &mut Conn, t: usize) {
    if !conn.dirty {
        conn.dirty = true;
        dirty.push(t);
    }
}

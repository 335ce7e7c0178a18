//! A worker thread: an epoll (mio) event loop over its share of the client
//! connections (connection I/O only), talking to the storage thread through
//! one pipelining [`segcache::storage::Client`]. What a command means and
//! how its reply reads is the executor's ([`crate::executor`]).
//!
//! # One loop iteration
//! 1. Wait for events (or not at all when some connection still has work).
//! 2. For every readable connection, read what the socket has, parse every
//!    complete command and hand it to the executor, which submits its core
//!    request (pipelined) and notes how to render the reply. Commands
//!    answered without storage (`version`, parse errors...) get a
//!    pre-rendered entry, so every connection's replies stay in order.
//! 3. Collect the storage responses in submission order and let the
//!    executor render each connection's replies into its write buffer: one
//!    batch, not a request/response ping-pong per command.
//! 4. Write what each socket takes; the rest waits for a writable event.
//!
//! Never interprets a command or a response itself.
//!
//! # What a client can never do
//! * Make the worker buffer without bound: the parser caps lines and
//!   values, oversized values are swallowed as they arrive, and a
//!   connection whose replies pile up unread is not read from until its
//!   write buffer drains.
//! * Affect another connection: every failure (a parse error, a reset, a
//!   half-sent value) is answered or closed on that connection only.

use crate::executor::{render, Batch, Pipe, Settings};
use crate::metrics::{Metrics, Outcome, WorkerStats};
use crate::protocol::{self, parse, ParseError};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use segcache::storage::Client;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Token of the worker's waker (new connections, shutdown).
pub const WAKER: Token = Token(usize::MAX);
/// Bytes read from a socket at a time.
const CHUNK: usize = 16 * 1024;
/// Stop reading a connection while this much output waits for it.
const WBUF_HIGH: usize = 4 << 20;
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
    /// What `stats settings` reports, the largest value accepted, and
    /// whether `flush_all` is allowed.
    pub settings: Settings,
}

struct Conn {
    stream: TcpStream,
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
    /// Already in the worker's dirty list.
    dirty: bool,
}

impl Conn {
    fn pending_out(&self) -> usize {
        self.wbuf.len() - self.wpos
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
            if self.wbuf.capacity() > (1 << 20) {
                self.wbuf.shrink_to(64 << 10);
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
    incoming: Receiver<TcpStream>,
    client: Client,
    stats: Arc<WorkerStats>,
    ctx: Arc<Ctx>,
    batch: Batch,
    dirty: Vec<usize>,
    again: Vec<usize>,
    now_unix: u64,
    read_at: Instant,
}

impl Worker {
    pub fn new(
        poll: Poll,
        incoming: Receiver<TcpStream>,
        client: Client,
        stats: Arc<WorkerStats>,
        ctx: Arc<Ctx>,
    ) -> Self {
        Worker {
            poll,
            conns: Vec::new(),
            free: Vec::new(),
            incoming,
            client,
            stats,
            ctx,
            batch: Batch::default(),
            dirty: Vec::new(),
            again: Vec::new(),
            now_unix: crate::metrics::unix_now(),
            read_at: Instant::now(),
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
    /// writes it out (for at most a few seconds) before returning.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if self.again.is_empty() {
                None
            } else {
                Some(Duration::ZERO)
            };
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
                    self.on_readable(t);
                }
            }
            for t in std::mem::take(&mut self.again) {
                self.on_readable(t);
            }
            self.finish_round();
            if self.ctx.shutdown.load(Ordering::SeqCst) {
                break;
            }
        }
        self.drain();
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
            self.on_readable(t);
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
                dirty: false,
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
        mark(&mut self.dirty, conn, t);
        if conn.paused && conn.pending_out() < WBUF_HIGH / 2 {
            conn.paused = false;
            self.again.push(t);
        }
    }

    fn on_readable(&mut self, t: usize) {
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
                    conn.rbuf.resize(len + grow, 0);
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
                    conn.rend += n;
                    self.stats.add(Outcome::BytesRead, n as u64);
                    self.process_input(t);
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
        let max_value = self.ctx.settings.max_value;
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
            if conn.pending_out() > WBUF_HIGH {
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
                client: &mut self.client,
                batch: &mut self.batch,
                stats: &self.stats,
                now_unix: self.now_unix,
                read_at: self.read_at,
                settings: self.ctx.settings,
            };
            let avail = &conn.rbuf[conn.rstart..conn.rend];
            match parse(avail, max_value) {
                Ok((req, used)) => {
                    let quit = pipe.dispatch(t, req);
                    conn.rstart += used;
                    if quit {
                        conn.closing = true;
                        mark(&mut self.dirty, conn, t);
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
        }
        if let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) {
            if conn.rstart == conn.rend {
                conn.rstart = 0;
                conn.rend = 0;
                if conn.rbuf.len() > 4 * CHUNK {
                    conn.rbuf = Vec::new();
                }
            }
        }
    }

    /// Collects the storage replies of the batch and renders every reply.
    fn collect(&mut self) {
        let metrics = Arc::clone(&self.ctx.metrics);
        let batch = &mut self.batch;
        for action in batch.actions.drain(..) {
            match self.conns.get_mut(action.conn).and_then(Option::as_mut) {
                Some(conn) => {
                    render(
                        action.kind,
                        &batch.arena,
                        &mut self.client,
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
                        &mut self.client,
                        &mut sink,
                        &self.stats,
                        &metrics,
                    );
                }
            }
        }
        batch.arena.clear();
        if batch.arena.capacity() > (4 << 20) {
            batch.arena.shrink_to(64 << 10);
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
        for t in std::mem::take(&mut self.dirty) {
            let Some(conn) = self.conns.get_mut(t).and_then(Option::as_mut) else {
                continue;
            };
            conn.dirty = false;
            if !conn.dead && conn.flush(&self.stats).is_err() {
                conn.dead = true;
            }
            if conn.paused && conn.pending_out() < WBUF_HIGH / 2 {
                conn.paused = false;
                self.again.push(t);
            }
            if conn.dead || (conn.closing && conn.pending_out() == 0) {
                self.close(t);
            }
        }
    }

    fn close(&mut self, t: usize) {
        if let Some(mut conn) = self.conns.get_mut(t).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.free.push(t);
            self.ctx
                .metrics
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn mark(dirty: &mut Vec<usize>, conn: &mut Conn, t: usize) {
    if !conn.dirty {
        conn.dirty = true;
        dirty.push(t);
    }
}

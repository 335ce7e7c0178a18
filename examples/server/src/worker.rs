//! A worker thread: an epoll (mio) event loop over its share of the client
//! connections, talking to the storage thread through one pipelining
//! [`segcache::Client`].
//!
//! # One loop iteration
//! 1. Wait for events (or not at all when some connection still has work).
//! 2. For every readable connection, read what the socket has, parse every
//!    complete request, and turn each into zero or more storage requests
//!    (submitted at once, pipelined) plus a `Kind` entry that says how
//!    to render its reply. Requests answered without storage (`version`,
//!    parse errors...) get a pre-rendered entry, so every connection's
//!    replies stay in request order.
//! 3. Collect the storage replies in submission order and render each
//!    connection's replies into its write buffer: one batch, not a
//!    request/response ping-pong per request.
//! 4. Write what each socket takes; the rest waits for a writable event.
//!
//! # What a client can never do
//! * Make the worker buffer without bound: the parser caps lines and
//!   values, oversized values are swallowed as they arrive, and a
//!   connection whose replies pile up unread is not read from until its
//!   write buffer drains.
//! * Affect another connection: every failure (a parse error, a reset, a
//!   half-sent value) is answered or closed on that connection only.

use crate::metrics::{Cmd, Metrics, Outcome, WorkerStats};
use crate::protocol::{
    self, msg, parse, write_client_error, write_meta_data, write_meta_end, write_meta_flag,
    write_meta_flag_num, write_meta_status, write_server_error, write_value, MetaFlags, MetaStatus,
    ParseError, Reply, Request, StoreCommand, Ttl,
};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use segcache::{Client, Error as StoreError, Request as SReq, Response as SResp};
use std::io::{self, Read, Write};
use std::ops::Range;
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
    /// Largest value accepted from clients.
    pub max_value: usize,
    /// What `stats settings` reports, and whether `flush_all` is allowed.
    pub settings: Settings,
}

/// The configuration a client can see (`stats settings`) or that changes
/// how commands are answered.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub heap_size: usize,
    pub max_connections: usize,
    pub port: u16,
    pub workers: usize,
    /// `flush_all` is allowed (memcached's `-F` turns it off).
    pub flush_enabled: bool,
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

/// How to render one request's reply from its storage replies.
enum Kind {
    /// Pre-rendered bytes in the batch arena.
    Local(Range<usize>),
    /// One `VALUE` line of a get/gets/gat/gats (nothing on a miss).
    Value {
        key: Range<usize>,
        cas: bool,
        skip_before: u8,
        skip_after: u8,
    },
    Store {
        cmd: StoreCommand,
        noreply: bool,
        skip_after: u8,
    },
    Delete {
        noreply: bool,
    },
    Arith {
        incr: bool,
        noreply: bool,
    },
    Touch {
        noreply: bool,
        skip_after: u8,
    },
    /// `flush_all`: `OK`.
    Done {
        noreply: bool,
    },
    Stats,
    /// A storage reply nobody waits for.
    Discard,
    MetaGet {
        key: Range<usize>,
        flags: Range<usize>,
        skip_before: u8,
        skip_after: u8,
    },
    MetaSet {
        key: Range<usize>,
        flags: Range<usize>,
        skip_after: u8,
    },
    MetaDelete {
        key: Range<usize>,
        flags: Range<usize>,
    },
    MetaArith {
        key: Range<usize>,
        flags: Range<usize>,
    },
    /// `me`: the item's metadata.
    MetaDebug {
        key: Range<usize>,
    },
}

struct Action {
    conn: usize,
    kind: Kind,
}

/// Requests parsed but not yet answered.
#[derive(Default)]
struct Batch {
    actions: Vec<Action>,
    /// Keys, meta flags and pre-rendered replies of the actions.
    arena: Vec<u8>,
    /// When the first request of the batch was read.
    started: Option<Instant>,
    /// Client requests in the batch (for the latency histogram).
    requests: u64,
    /// Storage requests submitted.
    submitted: usize,
}

/// The storage client and the batch, borrowed apart from the connections.
struct Pipe<'a> {
    client: &'a mut Client,
    batch: &'a mut Batch,
    stats: &'a WorkerStats,
    now_unix: u64,
    read_at: Instant,
    settings: Settings,
    max_value: usize,
}

/// The ttl of an item from a memcache exptime.
enum Life {
    Keep(Option<Duration>),
    /// Already expired: store (for the reply), then delete.
    Expired,
}

fn life(exptime: i64, now_unix: u64) -> Life {
    match protocol::ttl_from_exptime(exptime, now_unix) {
        Ttl::Never => Life::Keep(None),
        Ttl::Expired => Life::Expired,
        // Longer than segcache's longest ttl: expire early, as a cache may.
        Ttl::Secs(s) => Life::Keep(Some(Duration::from_secs(u64::from(
            s.min(segcache::MAX_TTL),
        )))),
    }
}

impl Pipe<'_> {
    fn push(&mut self, conn: usize, kind: Kind) {
        self.batch.actions.push(Action { conn, kind });
    }

    fn bytes(&mut self, data: &[u8]) -> Range<usize> {
        let start = self.batch.arena.len();
        self.batch.arena.extend_from_slice(data);
        start..self.batch.arena.len()
    }

    /// Queues a reply written by `f` (nothing if it writes nothing).
    fn local(&mut self, conn: usize, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.batch.arena.len();
        f(&mut self.batch.arena);
        let end = self.batch.arena.len();
        if end == start {
            return;
        }
        if let Some(Action {
            conn: c,
            kind: Kind::Local(r),
        }) = self.batch.actions.last_mut()
        {
            if *c == conn && r.end == start {
                r.end = end;
                return;
            }
        }
        self.push(conn, Kind::Local(start..end));
    }

    /// Submits storage requests; on failure (storage stopped) queues a
    /// server error instead and returns false.
    fn submit(&mut self, conn: usize, reqs: impl IntoIterator<Item = SReq>) -> bool {
        for req in reqs {
            if self.client.submit(req).is_err() {
                self.local(conn, |o| write_server_error(o, "storage unavailable"));
                return false;
            }
            self.batch.submitted += 1;
        }
        true
    }

    fn ttl_pair(
        &mut self,
        conn: usize,
        key: &[u8],
        first: impl FnOnce(Option<Duration>) -> SReq,
        exptime: i64,
    ) -> Option<u8> {
        match life(exptime, self.now_unix) {
            Life::Keep(ttl) => self.submit(conn, [first(ttl)]).then_some(0),
            Life::Expired => self
                .submit(conn, [first(None), SReq::Delete { key: key.to_vec() }])
                .then_some(1),
        }
    }

    /// Turns one parsed request into storage requests and actions. Returns
    /// true for `quit`.
    fn dispatch(&mut self, conn: usize, req: Request<'_>) -> bool {
        if self.batch.started.is_none() {
            self.batch.started = Some(self.read_at);
        }
        self.batch.requests += 1;
        let stats = self.stats;
        match req {
            Request::Get { keys, cas } => {
                stats.cmd(if cas { Cmd::Gets } else { Cmd::Get });
                for key in keys {
                    if self.submit(conn, [SReq::Get { key: key.to_vec() }]) {
                        let key = self.bytes(key);
                        self.push(
                            conn,
                            Kind::Value {
                                key,
                                cas,
                                skip_before: 0,
                                skip_after: 0,
                            },
                        );
                    }
                }
                self.local(conn, protocol::write_end);
            }
            Request::Gat { exptime, keys, cas } => {
                stats.cmd(if cas { Cmd::Gats } else { Cmd::Gat });
                for key in keys {
                    let k = key.to_vec();
                    let (reqs, before, after) = match life(exptime, self.now_unix) {
                        Life::Keep(ttl) => (
                            vec![
                                SReq::Touch {
                                    key: k.clone(),
                                    ttl,
                                },
                                SReq::Get { key: k },
                            ],
                            1,
                            0,
                        ),
                        Life::Expired => (
                            vec![SReq::Get { key: k.clone() }, SReq::Delete { key: k }],
                            0,
                            1,
                        ),
                    };
                    if self.submit(conn, reqs) {
                        let key = self.bytes(key);
                        self.push(
                            conn,
                            Kind::Value {
                                key,
                                cas,
                                skip_before: before,
                                skip_after: after,
                            },
                        );
                    }
                }
                self.local(conn, protocol::write_end);
            }
            Request::Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply,
            } => {
                stats.cmd(match command {
                    StoreCommand::Set => Cmd::Set,
                    StoreCommand::Add => Cmd::Add,
                    StoreCommand::Replace => Cmd::Replace,
                    StoreCommand::Append => Cmd::Append,
                    StoreCommand::Prepend => Cmd::Prepend,
                    StoreCommand::Cas => Cmd::Cas,
                });
                self.store(conn, command, key, value, flags, exptime, cas, noreply);
            }
            Request::Delete { key, noreply } => {
                stats.cmd(Cmd::Delete);
                if self.submit(conn, [SReq::Delete { key: key.to_vec() }]) {
                    self.push(conn, Kind::Delete { noreply });
                }
            }
            Request::Incr {
                key,
                delta,
                noreply,
            } => {
                stats.cmd(Cmd::Incr);
                if self.submit(
                    conn,
                    [SReq::Incr {
                        key: key.to_vec(),
                        delta,
                    }],
                ) {
                    self.push(
                        conn,
                        Kind::Arith {
                            incr: true,
                            noreply,
                        },
                    );
                }
            }
            Request::Decr {
                key,
                delta,
                noreply,
            } => {
                stats.cmd(Cmd::Decr);
                if self.submit(
                    conn,
                    [SReq::Decr {
                        key: key.to_vec(),
                        delta,
                    }],
                ) {
                    self.push(
                        conn,
                        Kind::Arith {
                            incr: false,
                            noreply,
                        },
                    );
                }
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                stats.cmd(Cmd::Touch);
                let k = key.to_vec();
                if let Some(skip_after) =
                    self.ttl_pair(conn, key, |ttl| SReq::Touch { key: k, ttl }, exptime)
                {
                    self.push(
                        conn,
                        Kind::Touch {
                            noreply,
                            skip_after,
                        },
                    );
                }
            }
            Request::FlushAll { noreply, .. } if !self.settings.flush_enabled => {
                stats.cmd(Cmd::FlushAll);
                if !noreply {
                    self.local(conn, |o| write_client_error(o, msg::FLUSH_NOT_ALLOWED));
                }
            }
            Request::FlushAll { delay, noreply } => {
                stats.cmd(Cmd::FlushAll);
                let req = if delay <= 0 {
                    SReq::Flush
                } else {
                    match protocol::ttl_from_exptime(delay, self.now_unix) {
                        Ttl::Secs(s) => SReq::FlushAfter {
                            delay: Duration::from_secs(u64::from(s)),
                        },
                        _ => SReq::Flush,
                    }
                };
                if self.submit(conn, [req]) {
                    self.push(conn, Kind::Done { noreply });
                }
            }
            Request::Version => {
                stats.cmd(Cmd::Version);
                self.local(conn, |o| {
                    protocol::write_version(o, env!("CARGO_PKG_VERSION"))
                });
            }
            Request::Verbosity { noreply, .. } => {
                stats.cmd(Cmd::Verbosity);
                if !noreply {
                    self.local(conn, |o| Reply::Ok.write(o));
                }
            }
            Request::Stats { args } => {
                stats.cmd(Cmd::Stats);
                if args.is_empty() {
                    if self.submit(conn, [SReq::Stats]) {
                        self.push(conn, Kind::Stats);
                    }
                } else {
                    let settings = self.settings;
                    let max_value = self.max_value;
                    self.local(conn, |o| stats_subcommand(o, args, settings, max_value));
                }
            }
            Request::CacheMemlimit { megabytes, noreply } => {
                stats.cmd(Cmd::Invalid);
                if !noreply {
                    self.local(conn, |o| {
                        o.extend_from_slice(match megabytes {
                            0..=7 => {
                                &b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"[..]
                            }
                            1_000_000_001.. => {
                                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
                            }
                            // The heap is sized at start; a valid limit is
                            // acknowledged as memcached does, not applied.
                            _ => b"OK\r\n",
                        })
                    });
                }
            }
            Request::MetaDebug { key } => {
                stats.cmd(Cmd::Mg);
                if self.submit(
                    conn,
                    [SReq::Get {
                        key: key.bytes().to_vec(),
                    }],
                ) {
                    let key = self.bytes(key.bytes());
                    self.push(conn, Kind::MetaDebug { key });
                }
            }
            Request::Quit => {
                stats.cmd(Cmd::Quit);
                return true;
            }
            Request::MetaNoop => {
                stats.cmd(Cmd::Mn);
                self.local(conn, |o| o.extend_from_slice(b"MN\r\n"));
            }
            Request::MetaGet { key, flags } => {
                let key = key.bytes();
                stats.cmd(Cmd::Mg);
                if !self.meta_flags_ok(conn, &flags, b"NRhlI") {
                    return false;
                }
                let k = key.to_vec();
                let (reqs, before, after) = match flags.ttl.map(|t| life(t, self.now_unix)) {
                    None => (vec![SReq::Get { key: k }], 0, 0),
                    Some(Life::Keep(ttl)) => (
                        vec![
                            SReq::Touch {
                                key: k.clone(),
                                ttl,
                            },
                            SReq::Get { key: k },
                        ],
                        1,
                        0,
                    ),
                    Some(Life::Expired) => (
                        vec![SReq::Get { key: k.clone() }, SReq::Delete { key: k }],
                        0,
                        1,
                    ),
                };
                if self.submit(conn, reqs) {
                    let key = self.bytes(key);
                    let fl = self.bytes(flags.tokens().remainder());
                    self.push(
                        conn,
                        Kind::MetaGet {
                            key,
                            flags: fl,
                            skip_before: before,
                            skip_after: after,
                        },
                    );
                }
            }
            Request::MetaSet { key, value, flags } => {
                let key = key.bytes();
                stats.cmd(Cmd::Ms);
                if !self.meta_flags_ok(conn, &flags, b"INc") {
                    return false;
                }
                let mode = flags.set_mode();
                let command = match (mode, flags.compare_cas) {
                    (StoreCommand::Set, Some(_)) => StoreCommand::Cas,
                    (m, None) => m,
                    (_, Some(_)) => {
                        self.local(conn, |o| write_client_error(o, msg::INVALID_FLAG));
                        return false;
                    }
                };
                let k = key.to_vec();
                let v = value.to_vec();
                let client_flags = flags.client_flags.unwrap_or(0);
                let cas = flags.compare_cas.unwrap_or(0);
                let make =
                    |ttl: Option<Duration>| store_request(command, k, v, client_flags, ttl, cas);
                if let Some(skip_after) = self.ttl_pair(conn, key, make, flags.ttl.unwrap_or(0)) {
                    let key = self.bytes(key);
                    let fl = self.bytes(flags.tokens().remainder());
                    self.push(
                        conn,
                        Kind::MetaSet {
                            key,
                            flags: fl,
                            skip_after,
                        },
                    );
                }
            }
            Request::MetaDelete { key, flags } => {
                let key = key.bytes();
                stats.cmd(Cmd::Md);
                if !self.meta_flags_ok(conn, &flags, b"CIT") {
                    return false;
                }
                if self.submit(conn, [SReq::Delete { key: key.to_vec() }]) {
                    let key = self.bytes(key);
                    let fl = self.bytes(flags.tokens().remainder());
                    self.push(conn, Kind::MetaDelete { key, flags: fl });
                }
            }
            Request::MetaArithmetic { key, flags } => {
                let key = key.bytes();
                stats.cmd(Cmd::Ma);
                if !self.meta_flags_ok(conn, &flags, b"CJNTct") {
                    return false;
                }
                let delta = flags.delta.unwrap_or(1);
                let k = key.to_vec();
                let req = if flags.incr() {
                    SReq::Incr { key: k, delta }
                } else {
                    SReq::Decr { key: k, delta }
                };
                if self.submit(conn, [req]) {
                    let key = self.bytes(key);
                    let fl = self.bytes(flags.tokens().remainder());
                    self.push(conn, Kind::MetaArith { key, flags: fl });
                }
            }
        }
        false
    }

    /// Refuses meta flags this server does not implement, rather than
    /// ignoring what the client asked for.
    fn meta_flags_ok(&mut self, conn: usize, flags: &MetaFlags<'_>, unsupported: &[u8]) -> bool {
        if unsupported.iter().any(|&f| flags.has(f)) {
            self.stats.add(Outcome::ClientErrors, 1);
            self.local(conn, |o| write_client_error(o, msg::INVALID_FLAG));
            false
        } else {
            true
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        conn: usize,
        command: StoreCommand,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        cas: u64,
        noreply: bool,
    ) {
        let (k, v) = (key.to_vec(), value.to_vec());
        let make = |ttl: Option<Duration>| store_request(command, k, v, flags, ttl, cas);
        // append/prepend keep the item's ttl: their exptime is ignored.
        let exptime = match command {
            StoreCommand::Append | StoreCommand::Prepend => 0,
            _ => exptime,
        };
        if let Some(skip_after) = self.ttl_pair(conn, key, make, exptime) {
            self.push(
                conn,
                Kind::Store {
                    cmd: command,
                    noreply,
                    skip_after,
                },
            );
        }
    }
}

fn store_request(
    command: StoreCommand,
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    ttl: Option<Duration>,
    cas: u64,
) -> SReq {
    match command {
        StoreCommand::Set => SReq::Set {
            key,
            value,
            flags,
            ttl,
        },
        StoreCommand::Add => SReq::Add {
            key,
            value,
            flags,
            ttl,
        },
        StoreCommand::Replace => SReq::Replace {
            key,
            value,
            flags,
            ttl,
        },
        StoreCommand::Append => SReq::Append { key, data: value },
        StoreCommand::Prepend => SReq::Prepend { key, data: value },
        StoreCommand::Cas => SReq::Cas {
            key,
            value,
            flags,
            ttl,
            cas,
        },
    }
}

/// Answers `stats <sub-command>` as memcached does for the ones that make
/// sense here; segcache has no slab classes, so `items`, `slabs` and
/// `cachedump` list none.
fn stats_subcommand(
    out: &mut Vec<u8>,
    mut args: protocol::Tokens<'_>,
    s: Settings,
    max_value: usize,
) {
    match args.next().unwrap_or_default() {
        b"settings" => {
            let lines: [(&str, String); 12] = [
                ("maxbytes", s.heap_size.to_string()),
                ("maxconns", s.max_connections.to_string()),
                ("tcpport", s.port.to_string()),
                ("udpport", "0".into()),
                ("evictions", "on".into()),
                ("num_threads", s.workers.to_string()),
                ("cas_enabled", "yes".into()),
                ("item_size_max", max_value.to_string()),
                (
                    "flush_enabled",
                    if s.flush_enabled { "yes" } else { "no" }.into(),
                ),
                ("binding_protocol", "ascii".into()),
                ("meta_response_old", "no".into()),
                ("slab_reassign", "no".into()),
            ];
            for (name, value) in lines {
                protocol::write_stat(out, name, value);
            }
            protocol::write_end(out);
        }
        b"items" | b"slabs" | b"sizes" | b"conns" | b"cachedump" => protocol::write_end(out),
        b"detail" => {
            write_client_error(out, "usage: stats detail on|off|dump");
        }
        _ => Reply::Error.write(out),
    }
}

/// Appends memcached's reply for a failed storage operation.
fn write_store_error(out: &mut Vec<u8>, e: &StoreError, stats: &WorkerStats) {
    match e {
        StoreError::NotStored => Reply::NotStored.write(out),
        StoreError::Exists => Reply::Exists.write(out),
        StoreError::NotFound => Reply::NotFound.write(out),
        StoreError::ValueTooLarge { .. } => {
            stats.add(Outcome::TooLarge, 1);
            write_server_error(out, msg::TOO_LARGE)
        }
        StoreError::OutOfMemory | StoreError::HashTableFull => {
            stats.add(Outcome::OutOfMemory, 1);
            write_server_error(out, "out of memory storing object")
        }
        StoreError::NotNumeric => write_client_error(out, msg::NON_NUMERIC),
        StoreError::EmptyKey | StoreError::KeyTooLong { .. } => {
            write_client_error(out, msg::BAD_FORMAT)
        }
        StoreError::TtlOutOfRange { .. } => write_client_error(out, msg::INVALID_EXPTIME),
        StoreError::Closed => write_server_error(out, "storage unavailable"),
        other => write_server_error(out, &other.to_string()),
    }
}

/// Echoes the meta return flags that need no item (`O`, `k`) and, with an
/// item, `f c t s`.
fn meta_ret_flags(
    out: &mut Vec<u8>,
    flags: &MetaFlags<'_>,
    key: &[u8],
    item: Option<&segcache::OwnedItem>,
) {
    for tok in flags.tokens() {
        let (f, arg) = (tok[0], &tok[1..]);
        match (f, item) {
            (b'O', _) => write_meta_flag(out, b'O', arg),
            (b'k', _) if flags.base64 => {
                out.extend_from_slice(b" k");
                protocol::base64_encode(out, key);
                out.extend_from_slice(b" b");
            }
            (b'k', _) => write_meta_flag(out, b'k', key),
            (b'f', Some(it)) => write_meta_flag_num(out, b'f', i64::from(it.flags)),
            (b'c', Some(it)) => write_meta_flag_num(out, b'c', it.cas as i64),
            (b's', Some(it)) => write_meta_flag_num(out, b's', it.value.len() as i64),
            (b't', Some(it)) => {
                write_meta_flag_num(out, b't', it.ttl.map_or(-1, |d| d.as_secs().max(1) as i64))
            }
            _ => {}
        }
    }
}

/// Fetches the next storage reply (`None` if storage failed).
fn next(client: &mut Client) -> Option<SResp> {
    client.recv().ok().flatten()
}

fn skip(client: &mut Client, n: u8) {
    for _ in 0..n {
        let _ = next(client);
    }
}

/// Renders one action's reply into `out`.
fn render(
    kind: Kind,
    arena: &[u8],
    client: &mut Client,
    out: &mut Vec<u8>,
    stats: &WorkerStats,
    metrics: &Metrics,
) {
    let failed = |out: &mut Vec<u8>| write_server_error(out, "storage unavailable");
    match kind {
        Kind::Local(r) => out.extend_from_slice(&arena[r]),
        Kind::Discard => skip(client, 1),
        Kind::Value {
            key,
            cas,
            skip_before,
            skip_after,
        } => {
            skip(client, skip_before);
            let reply = next(client);
            skip(client, skip_after);
            match reply {
                Some(SResp::Item(Some(it))) => {
                    stats.add(Outcome::GetHits, 1);
                    write_value(out, &arena[key], it.flags, &it.value, cas.then_some(it.cas));
                }
                Some(SResp::Item(None)) => stats.add(Outcome::GetMisses, 1),
                _ => failed(out),
            }
        }
        Kind::Store {
            cmd,
            noreply,
            skip_after,
        } => {
            let reply = next(client);
            skip(client, skip_after);
            let mut line = Vec::new();
            match reply {
                Some(SResp::Stored(Ok(()))) => {
                    stats.add(Outcome::Stored, 1);
                    if cmd == StoreCommand::Cas {
                        stats.add(Outcome::CasHits, 1);
                    }
                    Reply::Stored.write(&mut line);
                }
                Some(SResp::Stored(Err(e))) => {
                    if cmd == StoreCommand::Cas {
                        match e {
                            StoreError::Exists => stats.add(Outcome::CasBadval, 1),
                            StoreError::NotFound => stats.add(Outcome::CasMisses, 1),
                            _ => {}
                        }
                    }
                    write_store_error(&mut line, &e, stats);
                }
                _ => failed(&mut line),
            }
            if !noreply {
                out.extend_from_slice(&line);
            }
        }
        Kind::Delete { noreply } => {
            let reply = match next(client) {
                Some(SResp::Deleted(true)) => {
                    stats.add(Outcome::DeleteHits, 1);
                    Reply::Deleted.as_bytes()
                }
                Some(SResp::Deleted(false)) => {
                    stats.add(Outcome::DeleteMisses, 1);
                    Reply::NotFound.as_bytes()
                }
                _ => b"SERVER_ERROR storage unavailable\r\n",
            };
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Kind::Arith { incr, noreply } => {
            let (hit, miss) = if incr {
                (Outcome::IncrHits, Outcome::IncrMisses)
            } else {
                (Outcome::DecrHits, Outcome::DecrMisses)
            };
            let mut line = Vec::new();
            match next(client) {
                Some(SResp::Number(Ok(n))) => {
                    stats.add(hit, 1);
                    protocol::write_number(&mut line, n);
                }
                Some(SResp::Number(Err(e))) => {
                    if e == StoreError::NotFound {
                        stats.add(miss, 1);
                    }
                    write_store_error(&mut line, &e, stats);
                }
                _ => failed(&mut line),
            }
            if !noreply {
                out.extend_from_slice(&line);
            }
        }
        Kind::Touch {
            noreply,
            skip_after,
        } => {
            let reply = next(client);
            skip(client, skip_after);
            let mut line = Vec::new();
            match reply {
                Some(SResp::Stored(Ok(()))) => {
                    stats.add(Outcome::TouchHits, 1);
                    Reply::Touched.write(&mut line);
                }
                Some(SResp::Stored(Err(StoreError::NotFound))) => {
                    stats.add(Outcome::TouchMisses, 1);
                    Reply::NotFound.write(&mut line);
                }
                Some(SResp::Stored(Err(e))) => write_store_error(&mut line, &e, stats),
                _ => failed(&mut line),
            }
            if !noreply {
                out.extend_from_slice(&line);
            }
        }
        Kind::Done { noreply } => {
            let ok = matches!(next(client), Some(SResp::Done));
            if !noreply {
                if ok {
                    Reply::Ok.write(out);
                } else {
                    failed(out);
                }
            }
        }
        Kind::Stats => match next(client) {
            Some(SResp::Stats(st)) => {
                for (name, value) in metrics.stat_lines(Some(&st)) {
                    protocol::write_stat(out, name, value);
                }
                protocol::write_end(out);
            }
            _ => failed(out),
        },
        Kind::MetaGet {
            key,
            flags,
            skip_before,
            skip_after,
        } => {
            skip(client, skip_before);
            let reply = next(client);
            skip(client, skip_after);
            let flags =
                MetaFlags::parse(&arena[flags], msg::BAD_FORMAT).unwrap_or(MetaFlags::EMPTY);
            let key = &arena[key];
            match reply {
                Some(SResp::Item(Some(it))) => {
                    stats.add(Outcome::GetHits, 1);
                    let with_value = flags.has(b'v');
                    write_meta_status(
                        out,
                        if with_value {
                            MetaStatus::Value(it.value.len())
                        } else {
                            MetaStatus::Header
                        },
                    );
                    meta_ret_flags(out, &flags, key, Some(&it));
                    write_meta_end(out);
                    if with_value {
                        write_meta_data(out, &it.value);
                    }
                }
                Some(SResp::Item(None)) => {
                    stats.add(Outcome::GetMisses, 1);
                    if !flags.has(b'q') {
                        write_meta_status(out, MetaStatus::Miss);
                        meta_ret_flags(out, &flags, key, None);
                        write_meta_end(out);
                    }
                }
                _ => failed(out),
            }
        }
        Kind::MetaSet {
            key,
            flags,
            skip_after,
        } => {
            let reply = next(client);
            skip(client, skip_after);
            let flags =
                MetaFlags::parse(&arena[flags], msg::BAD_FORMAT).unwrap_or(MetaFlags::EMPTY);
            let status = match reply {
                Some(SResp::Stored(Ok(()))) => {
                    stats.add(Outcome::Stored, 1);
                    if flags.has(b'q') {
                        return;
                    }
                    MetaStatus::Header
                }
                Some(SResp::Stored(Err(StoreError::NotStored))) => MetaStatus::NotStored,
                Some(SResp::Stored(Err(StoreError::Exists))) => MetaStatus::Exists,
                Some(SResp::Stored(Err(StoreError::NotFound))) => MetaStatus::NotFound,
                Some(SResp::Stored(Err(e))) => return write_store_error(out, &e, stats),
                _ => return failed(out),
            };
            write_meta_status(out, status);
            meta_ret_flags(out, &flags, &arena[key], None);
            write_meta_end(out);
        }
        Kind::MetaDelete { key, flags } => {
            let flags =
                MetaFlags::parse(&arena[flags], msg::BAD_FORMAT).unwrap_or(MetaFlags::EMPTY);
            let status = match next(client) {
                Some(SResp::Deleted(true)) => {
                    stats.add(Outcome::DeleteHits, 1);
                    MetaStatus::Header
                }
                Some(SResp::Deleted(false)) => {
                    stats.add(Outcome::DeleteMisses, 1);
                    MetaStatus::NotFound
                }
                _ => return failed(out),
            };
            // `q` hides only success (memcached shows NF).
            if !(flags.has(b'q') && status == MetaStatus::Header) {
                write_meta_status(out, status);
                meta_ret_flags(out, &flags, &arena[key], None);
                write_meta_end(out);
            }
        }
        Kind::MetaDebug { key } => match next(client) {
            Some(SResp::Item(Some(it))) => {
                use std::io::Write as _;
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(&arena[key.clone()]);
                let exp = it.ttl.map_or(-1, |d| d.as_secs() as i64);
                let _ = write!(
                    out,
                    " exp={exp} la=0 cas={} fetch=no cls=1 size={}\r\n",
                    it.cas,
                    arena[key.clone()].len() + it.value.len()
                );
            }
            Some(SResp::Item(None)) => out.extend_from_slice(b"EN\r\n"),
            _ => failed(out),
        },
        Kind::MetaArith { key, flags } => {
            let flags =
                MetaFlags::parse(&arena[flags], msg::BAD_FORMAT).unwrap_or(MetaFlags::EMPTY);
            let (hit, miss) = if flags.incr() {
                (Outcome::IncrHits, Outcome::IncrMisses)
            } else {
                (Outcome::DecrHits, Outcome::DecrMisses)
            };
            match next(client) {
                Some(SResp::Number(Ok(n))) => {
                    stats.add(hit, 1);
                    let mut digits = Vec::with_capacity(20);
                    protocol::push_u64(&mut digits, n);
                    let with_value = flags.has(b'v');
                    // `q` hides every success, with or without the value.
                    if flags.has(b'q') {
                        return;
                    }
                    write_meta_status(
                        out,
                        if with_value {
                            MetaStatus::Value(digits.len())
                        } else {
                            MetaStatus::Header
                        },
                    );
                    meta_ret_flags(out, &flags, &arena[key], None);
                    write_meta_end(out);
                    if with_value {
                        write_meta_data(out, &digits);
                    }
                }
                Some(SResp::Number(Err(StoreError::NotFound))) => {
                    stats.add(miss, 1);
                    write_meta_status(out, MetaStatus::NotFound);
                    meta_ret_flags(out, &flags, &arena[key], None);
                    write_meta_end(out);
                }
                Some(SResp::Number(Err(e))) => write_store_error(out, &e, stats),
                _ => failed(out),
            }
        }
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
        let max_buf = self.ctx.max_value + protocol::MAX_MULTIGET_LINE_LEN + 4096;
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
        let max_value = self.ctx.max_value;
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
                max_value,
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
                    pipe.stats.cmd(Cmd::Invalid);
                    if pipe.batch.started.is_none() {
                        pipe.batch.started = Some(pipe.read_at);
                    }
                    pipe.batch.requests += 1;
                    match e {
                        ParseError::TooLarge { .. } => pipe.stats.add(Outcome::TooLarge, 1),
                        _ => pipe.stats.add(Outcome::ClientErrors, 1),
                    }
                    pipe.local(t, |o| e.write_reply(o));
                    if let Some(key) = e.too_large_key(avail) {
                        // As memcached: a failed overwrite leaves no stale value.
                        if pipe.submit(t, [SReq::Delete { key: key.to_vec() }]) {
                            pipe.push(t, Kind::Discard);
                        }
                    }
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

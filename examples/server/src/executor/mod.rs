//! The seam between the memcache protocol and the core: every parsed
//! [`Command`] becomes core [`Request`]s (one per key of a multi-get, one
//! for every other command), each run as **one atomic step** by the storage
//! thread, and every core [`Response`] is rendered as memcached 1.6.18
//! renders it.
//!
//! # What this module owns
//! * Memcache semantics that are not the core's: exptime rules
//!   ([`protocol::exptime_ttl`]), which mode and options a command maps to
//!   (`ms` with `C` on a set or replace is a compare-and-swap, `ma N`
//!   vivifies with `J`...), which replies `noreply` and `q` hide, and meta
//!   flags answered in request order.
//! * The batch: commands of a worker's event-loop round are submitted to
//!   its [`Backend`] (one message to the storage thread, or run inline);
//!   `Kind` records how to render each reply when `render` (`render.rs`)
//!   collects the responses in submission order. Inline, a plain `get`
//!   renders the item where it lies instead.
//!
//! # What it must never do
//! * Compose a command out of several storage requests that change data:
//!   the only extra requests are read-only peeks (`bump: false`) that
//!   report a meta `t` flag the core's response does not carry (see
//!   `Kind::MetaArith` and `Kind::MetaGet`); they never decide what is
//!   stored.
//! * Touch sockets: the worker owns I/O and hands this module bytes.

mod binary;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
mod render;

pub(crate) use render::render;

use crate::backend::Backend;
use crate::metrics::{Cmd, CmdCounts, Metrics, Outcome, WorkerStats};
use crate::protocol::{
    self, exptime_ttl, msg, write_client_error, write_meta_data, write_meta_end, write_meta_flag,
    write_meta_flag_num, write_meta_status, write_server_error, write_value, Command, MetaFlags,
    MetaKey, MetaStatus, ParseError, Reply, Tokens,
};
use segcache::ops::{ArithOpts, DeleteOpts, Found, GetOpts};
use segcache::{Error as StoreError, Request, Response, Store, StoreMode, Ttl};
use std::ops::Range;
use std::time::{Duration, Instant};

/// The configuration a client can see (`stats settings`) or that changes
/// how commands are answered.
#[derive(Debug, Clone)]
pub struct Settings {
    pub heap_size: usize,
    pub max_connections: usize,
    pub port: u16,
    pub workers: usize,
    /// Largest value accepted from clients.
    pub max_value: usize,
    /// The cache's segment size: an item (header, flags, key, value) must
    /// fit one.
    pub segment_size: usize,
    /// Segments a key dump walks (`lru_crawler metadump`).
    pub walk_segments: u32,
    /// `flush_all` is allowed (memcached's `-F` turns it off).
    pub flush_enabled: bool,
    /// `shutdown` stops the server (memcached's `-A`).
    pub shutdown_enabled: bool,
    /// The Unix domain socket listened on too, and its file's mode
    /// (`--unix-socket`, `--unix-mask`).
    pub unix_socket: Option<(String, u32)>,
    /// TLS on the TCP port (`--tls-cert`): `refresh_certs` reloads it.
    pub tls: Option<std::sync::Arc<crate::tls::Certs>>,
}

impl Settings {
    /// How large a value the parser takes.
    pub fn value_limit(&self) -> protocol::ValueLimit {
        protocol::ValueLimit {
            max_value: self.max_value,
            segment_size: self.segment_size,
        }
    }
}

/// What the worker does after a command (`Pipe::dispatch` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Read the connection's next command.
    Continue,
    /// Close the connection once its replies are written (`quit`).
    Close,
    /// Close it and stop the server gracefully (`shutdown`, when enabled).
    Shutdown,
}

/// How to render one command's reply from its storage responses. Every
/// variant but `Local` consumes a fixed number of responses, in order.
pub(crate) enum Kind {
    /// Pre-rendered bytes in the batch arena (no response).
    Local(Range<usize>),
    /// One key of get/gets/gat/gats: a `VALUE` block on a hit.
    Value {
        key: Range<usize>,
        cas: bool,
    },
    /// set/add/replace/append/prepend/cas.
    Store {
        cas: bool,
        noreply: bool,
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
    },
    /// `flush_all`: `OK`.
    Done {
        noreply: bool,
    },
    /// `stats`, or with `reset` `stats reset` (which needs the core's
    /// counters too, to count from); in binary packets with this opaque
    /// when `binary`.
    Stats {
        reset: bool,
        binary: Option<u32>,
        /// The worker's command counts when it dispatched the `stats`
        /// (little-endian words in the arena): commands it dispatched
        /// after are left out of the reply.
        counted: Range<usize>,
    },
    /// One segment of `lru_crawler metadump`: a line per item.
    Walk,
    /// `lru_crawler crawl`: `OK` once the expired segments are freed.
    Crawl,
    /// A response nobody waits for (the unlink after an oversized set).
    Discard,
    /// `mg`; with `peek`, a read-only `Get` went first so that a `t` flag
    /// before `T` reports the TTL as it was before the touch.
    MetaGet {
        key: Range<usize>,
        flags: Range<usize>,
        peek: bool,
        /// `T` and `N` as TTLs, for `t` on an item this request created.
        touch: Option<Ttl>,
        vivify: Option<Ttl>,
    },
    MetaSet {
        key: Range<usize>,
        flags: Range<usize>,
    },
    MetaDelete {
        key: Range<usize>,
        flags: Range<usize>,
    },
    /// `ma`; with `peek_after`, a read-only `Get` follows to report `t`
    /// (the core's arithmetic response carries no TTL); with
    /// `peek_before`, one goes first to tell whether `N` created the item
    /// (memcached shows a vivified result even with `q`).
    MetaArith {
        key: Range<usize>,
        flags: Range<usize>,
        peek_before: bool,
        peek_after: bool,
        /// `T` and `N` as TTLs, for `t` on an item this request created.
        touch: Option<Ttl>,
        vivify: Option<Ttl>,
    },
    /// `me`: the item's metadata (a read-only `Get`).
    MetaDebug {
        key: Range<usize>,
    },
    /// A binary-protocol request: its response packet.
    Binary(binary::BinReply),
}

pub(crate) struct Action {
    pub conn: usize,
    pub kind: Kind,
}

/// Commands parsed but not yet answered.
#[derive(Default)]
pub(crate) struct Batch {
    pub actions: Vec<Action>,
    /// Keys, meta flags and pre-rendered replies of the actions.
    pub arena: Vec<u8>,
    /// When the first command of the batch was read.
    pub started: Option<Instant>,
    /// Client commands in the batch (for the latency histogram).
    pub requests: u64,
    /// Storage requests submitted.
    pub submitted: usize,
}

/// The storage client and the batch, borrowed apart from the connections.
pub(crate) struct Pipe<'a> {
    pub backend: &'a mut Backend,
    pub batch: &'a mut Batch,
    pub stats: &'a WorkerStats,
    pub now_unix: u64,
    pub read_at: Instant,
    pub settings: &'a Settings,
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

    /// Drops the `END` line just queued for `conn`: its get goes on with
    /// the next slice of its keys (see [`crate::budget`]).
    pub fn strip_end(&mut self, conn: usize) {
        const END: &[u8] = b"END\r\n";
        if let Some(Action {
            conn: c,
            kind: Kind::Local(r),
        }) = self.batch.actions.last_mut()
        {
            if *c == conn && self.batch.arena[r.clone()].ends_with(END) {
                r.end -= END.len();
                if r.start == r.end {
                    self.batch.actions.pop();
                }
            }
        }
    }

    /// Queues a reply written by `f` (nothing if it writes nothing).
    fn local(&mut self, conn: usize, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.batch.arena.len();
        f(&mut self.batch.arena);
        self.local_since(conn, start);
    }

    /// Queues what was written to the arena from `start` on as a reply.
    fn local_since(&mut self, conn: usize, start: usize) {
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

    /// Submits one storage request; the kind pushed next (or a later
    /// one) consumes its response. Should storage stop, the round's
    /// responses are missing and every reply says so.
    fn submit(&mut self, req: Request<&[u8]>) {
        self.backend.submit(&req);
        self.batch.submitted += 1;
    }

    fn count_request(&mut self) {
        if self.batch.started.is_none() {
            self.batch.started = Some(self.read_at);
        }
        self.batch.requests += 1;
    }

    fn ttl(&self, exptime: i64) -> Ttl {
        exptime_ttl(exptime, self.now_unix)
    }

    /// Answers a parse error: the error reply, and for an oversized `set`
    /// or `ms` the unlink of the old value memcached does.
    pub fn parse_error(&mut self, conn: usize, e: &ParseError, buf: &[u8]) {
        self.stats.cmd(Cmd::Invalid);
        self.count_request();
        match e {
            ParseError::TooLarge { .. } => self.stats.add(Outcome::TooLarge, 1),
            _ => self.stats.add(Outcome::ClientErrors, 1),
        }
        self.local(conn, |o| e.write_reply(o));
        if let Some(key) = e.too_large_key(buf) {
            self.unlink(conn, &key);
        }
    }

    /// Unlinks `key`'s item, as memcached does after refusing an oversized
    /// `set` or `ms`, so that no stale value outlives the failed overwrite.
    fn unlink(&mut self, conn: usize, key: &[u8]) {
        let req = Request::Delete {
            key,
            opts: DeleteOpts::default(),
        };
        self.submit(req);
        self.push(conn, Kind::Discard);
    }

    /// Turns one parsed command into storage requests and actions, and
    /// says what becomes of the connection.
    pub fn dispatch(&mut self, conn: usize, cmd: Command<'_>) -> Then {
        self.count_request();
        let stats = self.stats;
        match cmd {
            Command::Get { keys, cas } => {
                stats.cmd(if cas { Cmd::Gets } else { Cmd::Get });
                self.retrieve(conn, keys, cas, None);
            }
            Command::Gat { exptime, keys, cas } => {
                stats.cmd(if cas { Cmd::Gats } else { Cmd::Gat });
                let ttl = self.ttl(exptime);
                self.retrieve(conn, keys, cas, Some(ttl));
            }
            Command::KeyTooLong { exptime, keys } => {
                stats.cmd(Cmd::Invalid);
                stats.add(Outcome::ClientErrors, 1);
                // As memcached: the keys before the long one are read (and
                // touched by gat), their values dropped from the reply.
                let touch = exptime.map(|e| self.ttl(e));
                for key in keys {
                    let req = Request::Get {
                        key,
                        opts: GetOpts {
                            touch,
                            ..GetOpts::default()
                        },
                    };
                    self.submit(req);
                    self.push(conn, Kind::Discard);
                }
                self.local(conn, |o| write_client_error(o, msg::BAD_FORMAT));
            }
            Command::Store {
                mode,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply,
            } => {
                stats.cmd(store_cmd(mode, cas.is_some()));
                let store = Store {
                    flags,
                    ttl: self.ttl(exptime),
                    cas,
                    ..Store::new(mode, key, value)
                };
                self.submit(Request::Store(store));
                let cas = cas.is_some();
                self.push(conn, Kind::Store { cas, noreply });
            }
            Command::Delete { key, noreply } => {
                stats.cmd(Cmd::Delete);
                let req = Request::Delete {
                    key,
                    opts: DeleteOpts::default(),
                };
                self.submit(req);
                self.push(conn, Kind::Delete { noreply });
            }
            Command::Incr {
                key,
                delta,
                noreply,
            } => {
                stats.cmd(Cmd::Incr);
                self.arith(conn, key, true, delta, noreply);
            }
            Command::Decr {
                key,
                delta,
                noreply,
            } => {
                stats.cmd(Cmd::Decr);
                self.arith(conn, key, false, delta, noreply);
            }
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                stats.cmd(Cmd::Touch);
                let req = Request::Touch {
                    key,
                    ttl: self.ttl(exptime),
                };
                self.submit(req);
                self.push(conn, Kind::Touch { noreply });
            }
            Command::FlushAll { noreply, .. } if !self.settings.flush_enabled => {
                stats.cmd(Cmd::FlushAll);
                if !noreply {
                    self.local(conn, |o| write_client_error(o, msg::FLUSH_NOT_ALLOWED));
                }
            }
            Command::FlushAll { delay, noreply } => {
                stats.cmd(Cmd::FlushAll);
                // memcached: a delay of 0 or less is now; otherwise it
                // follows the exptime rules (relative or absolute).
                let delay = if delay <= 0 {
                    Duration::ZERO
                } else {
                    self.ttl(delay).duration().unwrap_or(Duration::ZERO)
                };
                self.submit(Request::Flush { delay });
                self.push(conn, Kind::Done { noreply });
            }
            Command::Version => {
                stats.cmd(Cmd::Version);
                self.local(conn, |o| {
                    protocol::write_version(o, env!("CARGO_PKG_VERSION"))
                });
            }
            Command::Verbosity { noreply, .. } => {
                stats.cmd(Cmd::Verbosity);
                if !noreply {
                    self.local(conn, |o| Reply::Ok.write(o));
                }
            }
            Command::Stats { args } => {
                stats.cmd(Cmd::Stats);
                let reset = args.clone().next() == Some(&b"reset"[..]);
                if args.is_empty() || reset {
                    self.core_stats(conn, reset, None);
                } else {
                    let settings = self.settings;
                    self.local(conn, |o| stats_subcommand(o, args, settings));
                }
            }
            Command::Metadump { from, to } => {
                // The budget sliced it: each slice walks its segments, the
                // last ends with `END`.
                if from == 0 {
                    stats.cmd(Cmd::LruCrawler);
                }
                // As parsed, `to` is "to the end": walk only segments that
                // exist, sliced or not.
                let to = to.min(self.settings.walk_segments);
                for segment in from..to {
                    self.submit(Request::Walk { segment });
                    self.push(conn, Kind::Walk);
                }
                if to >= self.settings.walk_segments {
                    self.local(conn, protocol::write_end);
                }
            }
            Command::Crawl => {
                stats.cmd(Cmd::LruCrawler);
                self.submit(Request::Expire);
                self.push(conn, Kind::Crawl);
            }
            Command::RefreshCerts { noreply } => {
                stats.cmd(Cmd::Invalid);
                // Files are read here, on the worker, as memcached does:
                // an operator's command, milliseconds at most.
                match &self.settings.tls {
                    // As memcached built without TLS: an unknown command.
                    None => self.local(conn, |o| Reply::Error.write(o)),
                    Some(certs) => {
                        let outcome = certs.refresh();
                        if !noreply {
                            self.local(conn, |o| match outcome {
                                Ok(()) => Reply::Ok.write(o),
                                Err(reason) => write_server_error(
                                    o,
                                    &format!("cannot refresh certificates: {reason}"),
                                ),
                            });
                        }
                    }
                }
            }
            Command::CacheMemlimit { megabytes, noreply } => {
                stats.cmd(Cmd::Invalid);
                if !noreply {
                    self.local(conn, |o| o.extend_from_slice(memlimit_reply(megabytes)));
                }
            }
            Command::Quit => {
                stats.cmd(Cmd::Quit);
                return Then::Close;
            }
            Command::Shutdown { known } => {
                if !self.settings.shutdown_enabled {
                    stats.cmd(Cmd::Invalid);
                    self.local(conn, |o| {
                        o.extend_from_slice(b"ERROR: shutdown not enabled\r\n")
                    });
                } else if !known {
                    stats.cmd(Cmd::Invalid);
                    self.local(conn, |o| write_client_error(o, "invalid shutdown mode"));
                } else {
                    stats.cmd(Cmd::Shutdown);
                    return Then::Shutdown;
                }
            }
            Command::MetaNoop => {
                stats.cmd(Cmd::Mn);
                self.local(conn, |o| o.extend_from_slice(b"MN\r\n"));
            }
            Command::MetaDebug { key } => {
                stats.cmd(Cmd::Mg);
                // `me` prints the token.
                let req = Request::Get {
                    key: key.bytes(),
                    opts: GetOpts {
                        token: true,
                        ..PEEK
                    },
                };
                self.submit(req);
                let key = self.bytes(key.bytes());
                self.push(conn, Kind::MetaDebug { key });
            }
            Command::MetaGet { key, flags } => {
                stats.cmd(Cmd::Mg);
                self.meta_get(conn, key, flags);
            }
            Command::MetaSet { key, value, flags } => {
                stats.cmd(Cmd::Ms);
                self.meta_set(conn, key, value, flags);
            }
            Command::MetaDelete { key, flags } => {
                stats.cmd(Cmd::Md);
                let opts = DeleteOpts {
                    cas: flags.compare_cas,
                    invalidate: flags.has(b'I'),
                    // memcached applies `T` only when invalidating.
                    ttl: flags.ttl.filter(|_| flags.has(b'I')).map(|t| self.ttl(t)),
                };
                let req = Request::Delete {
                    key: key.bytes(),
                    opts,
                };
                self.submit(req);
                let (key, flags) = self.meta_ranges(&key, &flags);
                self.push(conn, Kind::MetaDelete { key, flags });
            }
            Command::MetaArithmetic { key, flags } => {
                stats.cmd(Cmd::Ma);
                self.meta_arith(conn, key, flags);
            }
        }
        Then::Continue
    }

    /// One read per key (a multi-get is one atomic step per key, as in
    /// memcached), then `END`.
    fn retrieve(&mut self, conn: usize, keys: Tokens<'_>, cas: bool, touch: Option<Ttl>) {
        for key in keys {
            if touch.is_none() {
                // Inline, a plain read renders the item where it lies: no
                // response, no copy of the value but the reply's.
                let start = self.batch.arena.len();
                let (arena, stats) = (&mut self.batch.arena, self.stats);
                let rendered = self.backend.get_inline(key, |item| match item {
                    Some(it) => {
                        stats.add(Outcome::GetHits, 1);
                        write_value(arena, key, it.flags(), it.value(), cas.then_some(it.cas()));
                    }
                    None => stats.add(Outcome::GetMisses, 1),
                });
                if rendered.is_some() {
                    self.local_since(conn, start);
                    continue;
                }
            }
            let req = Request::Get {
                key,
                opts: GetOpts {
                    touch,
                    token: cas,
                    ..GetOpts::default()
                },
            };
            self.submit(req);
            let key = self.bytes(key);
            self.push(conn, Kind::Value { key, cas });
        }
        self.local(conn, protocol::write_end);
    }

    /// `stats` or `stats reset`: the core's counters and the worker's
    /// command counts now (commands it dispatches later are left out).
    fn core_stats(&mut self, conn: usize, reset: bool, binary: Option<u32>) {
        self.submit(Request::Stats);
        let start = self.batch.arena.len();
        for n in self.stats.cmd_counts() {
            self.batch.arena.extend_from_slice(&n.to_le_bytes());
        }
        let counted = start..self.batch.arena.len();
        self.push(
            conn,
            Kind::Stats {
                reset,
                binary,
                counted,
            },
        );
    }

    fn arith(&mut self, conn: usize, key: &[u8], incr: bool, delta: u64, noreply: bool) {
        let req = Request::Arith {
            key,
            opts: ArithOpts::new(incr, delta),
        };
        self.submit(req);
        self.push(conn, Kind::Arith { incr, noreply });
    }

    /// The key (decoded) and flag tokens of a meta command, kept in the
    /// arena for rendering.
    fn meta_ranges(
        &mut self,
        key: &MetaKey<'_>,
        flags: &MetaFlags<'_>,
    ) -> (Range<usize>, Range<usize>) {
        let key = self.bytes(key.bytes());
        let flags = self.bytes(flags.tokens().remainder());
        (key, flags)
    }

    fn meta_get(&mut self, conn: usize, key: MetaKey<'_>, flags: MetaFlags<'_>) {
        let touch = flags.ttl.map(|t| self.ttl(t));
        let vivify = flags.vivify.map(|t| self.ttl(t));
        let opts = GetOpts {
            touch,
            // memcached applies `T` and `N` in request order to an item it
            // created: the later one decides its TTL.
            vivify: vivify.map(|v| last_of_t_and_n(&flags, touch, v)),
            // memcached wins a recache token when the item's deadline is
            // before `R`'s (an exptime): i.e. less than that much is left.
            recache: flags
                .recache
                .and_then(|r| self.ttl(r).duration())
                .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
                .filter(|&s| s > 0),
            win_tokens: true,
            recache_after_touch: first_of(&flags, b'T', b'R'),
            bump: !flags.has(b'u'),
            token: flags.has(b'c'),
        };
        // A `t` before `T` reports the TTL the item had before the touch.
        let peek = flags.ttl.is_some() && t_before_touch(&flags);
        if peek {
            self.submit(self::peek(key.bytes()));
        }
        self.submit(Request::Get {
            key: key.bytes(),
            opts,
        });
        let (key, flags) = self.meta_ranges(&key, &flags);
        self.push(
            conn,
            Kind::MetaGet {
                key,
                flags,
                peek,
                touch,
                vivify,
            },
        );
    }

    fn meta_set(&mut self, conn: usize, key: MetaKey<'_>, value: &[u8], flags: MetaFlags<'_>) {
        let mode = flags.set_mode();
        let cas = flags.compare_cas;
        // memcached: a set or replace with a token is a compare-and-swap
        // (which needs no present item to say NF), and only then may `I`
        // store a stale value; add ignores the token.
        let compare = cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace);
        // An add ignores the token; append and prepend ignore a token of 0.
        let cas = match mode {
            StoreMode::Add => None,
            StoreMode::Append | StoreMode::Prepend => cas.filter(|&c| c != 0),
            _ => cas,
        };
        let store = Store {
            flags: flags.client_flags.unwrap_or(0),
            ttl: flags.ttl.map_or(Ttl::Never, |t| self.ttl(t)),
            cas,
            // memcached stores a stale value only for a token older than
            // the item's, which 0 never is.
            invalidate: compare && flags.has(b'I') && cas != Some(0),
            // The token is rendered only with the `c` flag.
            token: flags.has(b'c'),
            ..Store::new(
                if compare { StoreMode::Set } else { mode },
                key.bytes(),
                value,
            )
        };
        self.submit(Request::Store(store));
        let (key, flags) = self.meta_ranges(&key, &flags);
        self.push(conn, Kind::MetaSet { key, flags });
    }

    fn meta_arith(&mut self, conn: usize, key: MetaKey<'_>, flags: MetaFlags<'_>) {
        let touch = flags.ttl.map(|t| self.ttl(t));
        let vivify = flags.vivify.map(|t| self.ttl(t));
        let opts = ArithOpts {
            incr: flags.incr(),
            delta: flags.delta.unwrap_or(1),
            // memcached: a token of 0 compares nothing for ma.
            cas: flags.compare_cas.filter(|&c| c != 0),
            vivify: vivify.map(|v| {
                let ttl = last_of_t_and_n(&flags, touch, v);
                (flags.initial.unwrap_or(0), ttl)
            }),
            ttl: touch,
            // The token is rendered only with the `c` flag.
            token: flags.has(b'c'),
        };
        let peek_after = flags.has(b't');
        // Whether the item existed, and its TTL before `T`: for `q` with
        // `N`, and for a `t` that memcached prints before `T` or `N` apply.
        let peek_before = (flags.has(b'q') && flags.vivify.is_some())
            || (peek_after && (flags.ttl.is_some() || flags.vivify.is_some()));
        if peek_before {
            self.submit(self::peek(key.bytes()));
        }
        self.submit(Request::Arith {
            key: key.bytes(),
            opts,
        });
        if peek_after {
            self.submit(self::peek(key.bytes()));
        }
        let (key, flags) = self.meta_ranges(&key, &flags);
        self.push(
            conn,
            Kind::MetaArith {
                key,
                flags,
                peek_before,
                peek_after,
                touch,
                vivify,
            },
        );
    }
}

/// The options of a read that changes nothing and counts nothing.
const PEEK: GetOpts = GetOpts {
    touch: None,
    vivify: None,
    recache: None,
    win_tokens: false,
    recache_after_touch: false,
    bump: false,
    token: false,
};

/// A read that changes nothing and counts nothing.
fn peek(key: &[u8]) -> Request<&[u8]> {
    Request::Get { key, opts: PEEK }
}

/// The TTL memcached leaves on an item a meta command created: `T` and `N`
/// apply in request order, so the later one wins.
fn last_of_t_and_n(flags: &MetaFlags<'_>, touch: Option<Ttl>, vivify: Ttl) -> Ttl {
    let mut ttl = vivify;
    let mut seen_n = false;
    for tok in flags.tokens() {
        match (tok[0], touch) {
            (b'N', _) => seen_n = true,
            (b'T', Some(t)) if seen_n => ttl = t,
            _ => {}
        }
    }
    ttl
}

/// Whether a `t` flag comes before the `T` flag.
/// True if flag `a` comes before flag `b` in the request (memcached
/// applies meta flags in request order).
fn first_of(flags: &MetaFlags<'_>, a: u8, b: u8) -> bool {
    for tok in flags.tokens() {
        if tok[0] == a {
            return true;
        }
        if tok[0] == b {
            return false;
        }
    }
    false
}

fn t_before_touch(flags: &MetaFlags<'_>) -> bool {
    for tok in flags.tokens() {
        match tok[0] {
            b't' => return true,
            b'T' => return false,
            _ => {}
        }
    }
    false
}

/// `cache_memlimit`'s reply, worded as memcached's. The heap is sized at
/// start, so a valid limit is acknowledged and not applied.
fn memlimit_reply(megabytes: u32) -> &'static [u8] {
    match megabytes {
        0..=7 => b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
        1_000_000_001.. => b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
        _ => b"OK\r\n",
    }
}

/// Answers `stats <sub-command>` as memcached does for the ones that make
/// sense here (`reset` is not one of them: it is a storage request);
/// segcache has no slab classes, so `items`, `slabs`, `sizes` and
/// `cachedump` list none, and connections are not listed.
/// The command a store counts as in `stats` (`cmd_set`...; any store
/// with a token is a `cas`).
fn store_cmd(mode: StoreMode, cas: bool) -> Cmd {
    match (mode, cas) {
        (_, true) => Cmd::Cas,
        (StoreMode::Set, false) => Cmd::Set,
        (StoreMode::Add, false) => Cmd::Add,
        (StoreMode::Replace, false) => Cmd::Replace,
        (StoreMode::Append, false) => Cmd::Append,
        (StoreMode::Prepend, false) => Cmd::Prepend,
    }
}

fn stats_subcommand(out: &mut Vec<u8>, mut args: Tokens<'_>, s: &Settings) {
    match args.next().unwrap_or_default() {
        b"settings" => {
            let (domain_socket, umask) = match &s.unix_socket {
                Some((path, mode)) => (path.clone(), *mode),
                None => ("NULL".into(), 0o700),
            };
            let lines: [(&str, String); 15] = [
                ("maxbytes", s.heap_size.to_string()),
                ("maxconns", s.max_connections.to_string()),
                ("tcpport", s.port.to_string()),
                ("udpport", "0".into()),
                ("domain_socket", domain_socket),
                ("umask", format!("{umask:o}")),
                ("evictions", "on".into()),
                (
                    "shutdown_command",
                    if s.shutdown_enabled { "yes" } else { "no" }.into(),
                ),
                ("num_threads", s.workers.to_string()),
                ("cas_enabled", "yes".into()),
                ("item_size_max", s.max_value.to_string()),
                (
                    "flush_enabled",
                    if s.flush_enabled { "yes" } else { "no" }.into(),
                ),
                ("binding_protocol", "auto-negotiate".into()),
                ("meta_response_old", "no".into()),
                ("slab_reassign", "no".into()),
            ];
            for (name, value) in lines {
                protocol::write_stat(out, name, value);
            }
            protocol::write_end(out);
        }
        b"items" | b"slabs" | b"sizes" | b"conns" | b"cachedump" => protocol::write_end(out),
        b"detail" => write_client_error(out, "usage: stats detail on|off|dump"),
        _ => Reply::Error.write(out),
    }
}

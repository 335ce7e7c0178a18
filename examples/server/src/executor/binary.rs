//! Binary-protocol requests as core requests, and their responses as
//! memcached 1.6.18's response packets: the same storage operations as
//! the text commands (one atomic step each), answered in the binary
//! protocol's statuses (see `crate::protocol::binary` for the framing).
//!
//! Must never: read sockets or parse bytes (the worker and the protocol
//! module do), or compose one request out of several that change data.

use super::render::{next, Replies};
use super::*;
use crate::protocol::binary::{
    base_opcode, op, status, write_bin_error, write_bin_response, write_bin_value, BinError,
    BinRequest,
};
use crate::protocol::Tokens;

/// What rendering a binary request's response needs: its opcode as sent
/// (quiet or not), its opaque, and its key in the arena (for `GETK`,
/// `GATK`).
pub(crate) struct BinReply {
    opcode: u8,
    opaque: u32,
    key: Range<usize>,
}

impl BinReply {
    fn base(&self) -> u8 {
        base_opcode(self.opcode)
    }

    fn quiet(&self) -> bool {
        self.base() != self.opcode
    }
}

/// The exptime of a store's, touch's or incr's extras at `at`: unsigned,
/// otherwise memcached's rules (relative up to 30 days, else absolute).
fn exptime(req: &BinRequest<'_>, at: usize) -> i64 {
    i64::from(req.extra_u32(at))
}

impl Pipe<'_> {
    /// Turns one binary request into storage requests and actions.
    pub fn dispatch_binary(&mut self, conn: usize, req: &BinRequest<'_>) -> Then {
        self.count_request();
        let stats = self.stats;
        let cas = (req.cas != 0).then_some(req.cas);
        let (opcode, opaque) = (req.opcode, req.opaque);
        match req.base() {
            op::GET | op::GETK | op::TOUCH | op::GAT | op::GATK => {
                let touch = match req.base() {
                    op::GET | op::GETK => {
                        stats.cmd(Cmd::Get);
                        None
                    }
                    base => {
                        stats.cmd(if base == op::TOUCH {
                            Cmd::Touch
                        } else {
                            Cmd::Gat
                        });
                        Some(self.ttl(exptime(req, 0)))
                    }
                };
                // Every binary read's answer carries the item's token.
                let opts = GetOpts {
                    touch,
                    token: true,
                    ..GetOpts::default()
                };
                self.submit_binary(conn, req, Request::Get { key: req.key, opts });
            }
            base @ (op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND) => {
                let mode = match base {
                    op::SET => StoreMode::Set,
                    op::ADD => StoreMode::Add,
                    op::REPLACE => StoreMode::Replace,
                    op::APPEND => StoreMode::Append,
                    _ => StoreMode::Prepend,
                };
                stats.cmd(store_cmd(mode, cas.is_some()));
                // memcached: a CAS token turns set, add and replace into a
                // compare-and-swap (append and prepend compare too).
                let mode = match (mode, cas) {
                    (StoreMode::Add | StoreMode::Replace, Some(_)) => StoreMode::Set,
                    (mode, _) => mode,
                };
                let store = Store {
                    flags: req.extra_u32(0),
                    ttl: self.ttl(exptime(req, 4)),
                    cas,
                    // Every binary store reply carries the new token.
                    token: true,
                    ..Store::new(mode, req.key, req.value)
                };
                self.submit_binary(conn, req, Request::Store(store));
            }
            op::DELETE => {
                stats.cmd(Cmd::Delete);
                let opts = DeleteOpts {
                    cas,
                    ..DeleteOpts::default()
                };
                self.submit_binary(conn, req, Request::Delete { key: req.key, opts });
            }
            base @ (op::INCREMENT | op::DECREMENT) => {
                let incr = base == op::INCREMENT;
                stats.cmd(if incr { Cmd::Incr } else { Cmd::Decr });
                let (delta, initial, exp) = (req.extra_u64(0), req.extra_u64(8), req.extra_u32(16));
                // An expiration of all ones: no item is created on a miss.
                let vivify = (exp != u32::MAX).then(|| (initial, self.ttl(i64::from(exp))));
                let opts = ArithOpts {
                    cas,
                    vivify,
                    // Every binary arithmetic reply carries the new token.
                    token: true,
                    ..ArithOpts::new(incr, delta)
                };
                self.submit_binary(conn, req, Request::Arith { key: req.key, opts });
            }
            op::FLUSH if !self.settings.flush_enabled => {
                stats.cmd(Cmd::FlushAll);
                self.local(conn, |o| {
                    write_bin_error(o, opcode, opaque, status::AUTH_ERROR)
                });
            }
            op::FLUSH => {
                stats.cmd(Cmd::FlushAll);
                let delay = match exptime(req, 0) {
                    0 => Duration::ZERO,
                    e => self.ttl(e).duration().unwrap_or(Duration::ZERO),
                };
                self.submit_binary(conn, req, Request::Flush { delay });
            }
            op::NOOP => self.local(conn, |o| {
                write_bin_response(o, opcode, status::OK, opaque, 0, b"", b"")
            }),
            op::VERSION => {
                stats.cmd(Cmd::Version);
                let version = env!("CARGO_PKG_VERSION").as_bytes();
                self.local(conn, |o| {
                    write_bin_response(o, opcode, status::OK, opaque, 0, b"", version)
                });
            }
            op::QUIT => {
                if !req.quiet() {
                    self.local(conn, |o| {
                        write_bin_response(o, opcode, status::OK, opaque, 0, b"", b"")
                    });
                }
                return Then::Close;
            }
            op::STAT => {
                stats.cmd(Cmd::Stats);
                match req.key {
                    b"" | b"reset" => self.core_stats(conn, req.key == b"reset", Some(opaque)),
                    sub => {
                        let mut text = Vec::new();
                        stats_subcommand(&mut text, Tokens::new(sub), self.settings);
                        self.local(conn, |o| {
                            if text.ends_with(b"END\r\n") {
                                protocol::binary::write_bin_stats(o, opaque, &text);
                            } else {
                                write_bin_error(o, opcode, opaque, status::KEY_ENOENT);
                            }
                        });
                    }
                }
            }
            // The parser answers every other opcode itself.
            _ => {
                self.local(conn, |o| {
                    write_bin_error(o, opcode, opaque, status::UNKNOWN_COMMAND)
                });
            }
        }
        Then::Continue
    }

    /// Submits `request`, the one storage request of `req`, and queues
    /// its response packet.
    fn submit_binary(&mut self, conn: usize, req: &BinRequest<'_>, request: Request<&[u8]>) {
        self.submit(request);
        let key = self.bytes(req.key);
        let reply = BinReply {
            opcode: req.opcode,
            opaque: req.opaque,
            key,
        };
        self.push(conn, Kind::Binary(reply));
    }

    /// Answers a packet the parser refused, and for an oversized `SET`
    /// unlinks the key's old item, as memcached does; `buf` is what was
    /// parsed. Returns how many bytes to drop (some may not have arrived)
    /// and whether to close the connection; `None` for an error that is
    /// not a refusal (`Incomplete`: read more; `Close`: close now).
    pub fn binary_refused(
        &mut self,
        conn: usize,
        e: &BinError,
        buf: &[u8],
    ) -> Option<(usize, bool)> {
        let BinError::Refused {
            opcode,
            opaque,
            status,
            swallow,
            close,
            unlink,
        } = *e
        else {
            return None;
        };
        self.stats.cmd(Cmd::Invalid);
        self.count_request();
        let outcome = if status == status::E2BIG {
            Outcome::TooLarge
        } else {
            Outcome::ClientErrors
        };
        self.stats.add(outcome, 1);
        self.local(conn, |o| write_bin_error(o, opcode, opaque, status));
        if let Some((at, len)) = unlink {
            self.unlink(conn, &buf[at..at + len]);
        }
        Some((swallow, close))
    }
}

/// Renders a binary request's response packet, consuming its response.
pub(super) fn render_binary(
    reply: BinReply,
    arena: &[u8],
    replies: &mut Replies<'_>,
    out: &mut Vec<u8>,
    stats: &WorkerStats,
) {
    let (opcode, opaque) = (reply.opcode, reply.opaque);
    let error = |out: &mut Vec<u8>, status| write_bin_error(out, opcode, opaque, status);
    let ok = |out: &mut Vec<u8>, cas: u64, value: &[u8]| {
        if !reply.quiet() {
            write_bin_response(out, opcode, status::OK, opaque, cas, b"", value);
        }
    };
    let Some(response) = next(replies) else {
        return error(out, status::ENOMEM);
    };
    let base = reply.base();
    match response {
        Response::Get(Ok(Some(found))) => {
            let touch = matches!(base, op::TOUCH | op::GAT | op::GATK);
            stats.add(
                if touch {
                    Outcome::TouchHits
                } else {
                    Outcome::GetHits
                },
                1,
            );
            let it = &found.item;
            let key = if matches!(base, op::GETK | op::GATK) {
                &arena[reply.key]
            } else {
                &[]
            };
            let value = if base == op::TOUCH {
                &[][..]
            } else {
                it.value()
            };
            write_bin_value(out, opcode, opaque, it.cas(), it.flags(), key, value);
        }
        Response::Get(Ok(None)) => {
            let touch = matches!(base, op::TOUCH | op::GAT | op::GATK);
            stats.add(
                if touch {
                    Outcome::TouchMisses
                } else {
                    Outcome::GetMisses
                },
                1,
            );
            if !reply.quiet() {
                if matches!(base, op::GETK | op::GATK) {
                    let key = &arena[reply.key];
                    write_bin_response(out, opcode, status::KEY_ENOENT, opaque, 0, key, b"");
                } else {
                    error(out, status::KEY_ENOENT);
                }
            }
        }
        Response::Stored(Ok(cas)) => {
            stats.add(Outcome::Stored, 1);
            ok(out, *cas, b"");
        }
        Response::Stored(Err(e)) => error(
            out,
            match (e, base) {
                (StoreError::Exists, _) => status::KEY_EEXISTS,
                (StoreError::NotFound, _) => status::KEY_ENOENT,
                (_, op::ADD) => status::KEY_EEXISTS,
                (_, op::REPLACE) => status::KEY_ENOENT,
                _ => status::NOT_STORED,
            },
        ),
        Response::Deleted(Ok(())) => {
            stats.add(Outcome::DeleteHits, 1);
            ok(out, 0, b"");
        }
        Response::Number(Ok((n, cas))) => {
            let hit = if base == op::INCREMENT {
                Outcome::IncrHits
            } else {
                Outcome::DecrHits
            };
            stats.add(hit, 1);
            ok(out, *cas, &n.to_be_bytes());
        }
        Response::Deleted(Err(e)) | Response::Number(Err(e)) | Response::Get(Err(e)) => {
            let miss = match base {
                op::DELETE => Outcome::DeleteMisses,
                op::INCREMENT => Outcome::IncrMisses,
                _ => Outcome::DecrMisses,
            };
            error(
                out,
                match e {
                    StoreError::NotFound => {
                        stats.add(miss, 1);
                        status::KEY_ENOENT
                    }
                    StoreError::Exists => status::KEY_EEXISTS,
                    StoreError::NotNumeric => status::DELTA_BADVAL,
                    StoreError::NotStored => status::NOT_STORED,
                    StoreError::TtlOutOfRange { .. } => status::EINVAL,
                    _ => status::ENOMEM,
                },
            )
        }
        Response::Done => ok(out, 0, b""),
        _ => error(out, status::ENOMEM),
    }
}

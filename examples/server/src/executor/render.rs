//! Rendering: each command's storage responses, collected in submission
//! order, become the bytes memcached 1.6.18 sends for them (classic
//! replies, `VALUE` blocks, meta status lines and their flags in request
//! order), appended to the connection's output.
//!
//! Must never: decide what is stored or send a storage request (that is
//! `mod.rs`'s dispatch), or touch sockets.

use super::*;

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

/// ` k<key>`, in base64 followed by ` b` when the command sent it so.
fn write_meta_key(out: &mut Vec<u8>, flags: &MetaFlags<'_>, key: &[u8]) {
    if flags.base64 {
        out.extend_from_slice(b" k");
        protocol::base64_encode(out, key);
        out.extend_from_slice(b" b");
    } else {
        write_meta_flag(out, b'k', key);
    }
}

/// ` t<seconds left>`, `-1` for never; an item just expired by the request
/// reports 0 (memcached prints an unsigned underflow there).
fn write_meta_ttl(out: &mut Vec<u8>, ttl: Ttl) {
    let t = match ttl {
        Ttl::Never => -1,
        Ttl::Expired => 0,
        Ttl::After(d) => d.as_secs().max(1) as i64,
    };
    write_meta_flag_num(out, b't', t);
}

/// The meta flags every reply echoes, in request order: `O` and `k`.
fn write_echo_flags(out: &mut Vec<u8>, flags: &MetaFlags<'_>, key: &[u8]) {
    for tok in flags.tokens() {
        match tok[0] {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b'k' => write_meta_key(out, flags, key),
            _ => {}
        }
    }
}

/// The round's storage responses, in submission order.
pub(crate) type Replies<'r> = std::slice::Iter<'r, Response>;

/// Renders a reply with `render` (which also counts its outcome), then
/// drops the rendered bytes if the command asked for `noreply`.
fn unless_noreply(out: &mut Vec<u8>, noreply: bool, render: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    render(out);
    if noreply {
        out.truncate(start);
    }
}

/// The reply to a command whose result is "done" or "no such key"
/// (delete, touch): `done` and the hit outcome, `NOT_FOUND` and the miss
/// outcome, or the store error.
fn write_done_or_not_found(
    out: &mut Vec<u8>,
    result: &Result<(), StoreError>,
    (hit, miss): (Outcome, Outcome),
    done: Reply,
    stats: &WorkerStats,
) {
    match result {
        Ok(()) => {
            stats.add(hit, 1);
            done.write(out);
        }
        Err(StoreError::NotFound) => {
            stats.add(miss, 1);
            Reply::NotFound.write(out);
        }
        Err(e) => write_store_error(out, e, stats),
    }
}

/// The next storage response (`None` if storage failed).
pub(super) fn next<'r>(replies: &mut Replies<'r>) -> Option<&'r Response> {
    replies.next()
}

/// The TTL of a peek's item (`Never` if it vanished).
fn peeked_ttl(replies: &mut Replies<'_>) -> Option<Ttl> {
    match next(replies) {
        Some(Response::Get(Ok(Some(found)))) => Some(found.item.ttl()),
        _ => None,
    }
}

/// Renders one action's reply into `out`, consuming its responses.
pub(crate) fn render(
    kind: Kind,
    arena: &[u8],
    replies: &mut Replies<'_>,
    out: &mut Vec<u8>,
    stats: &WorkerStats,
    metrics: &Metrics,
) {
    let failed = |out: &mut Vec<u8>| write_server_error(out, "storage unavailable");
    let reparse =
        |r: Range<usize>| MetaFlags::parse(&arena[r], msg::BAD_FORMAT).unwrap_or(MetaFlags::EMPTY);
    match kind {
        Kind::Local(r) => out.extend_from_slice(&arena[r]),
        Kind::Discard => {
            let _ = next(replies);
        }
        Kind::Value { key, cas } => match next(replies) {
            Some(Response::Get(Ok(Some(found)))) => {
                stats.add(Outcome::GetHits, 1);
                let it = &found.item;
                write_value(
                    out,
                    &arena[key],
                    it.flags(),
                    it.value(),
                    cas.then_some(it.cas()),
                );
            }
            Some(Response::Get(Ok(None))) => stats.add(Outcome::GetMisses, 1),
            Some(Response::Get(Err(e))) => write_store_error(out, e, stats),
            _ => failed(out),
        },
        Kind::Store { cas, noreply } => unless_noreply(out, noreply, |out| match next(replies) {
            Some(Response::Stored(Ok(_))) => {
                stats.add(Outcome::Stored, 1);
                if cas {
                    stats.add(Outcome::CasHits, 1);
                }
                Reply::Stored.write(out);
            }
            Some(Response::Stored(Err(e))) => {
                if cas {
                    match e {
                        StoreError::Exists => stats.add(Outcome::CasBadval, 1),
                        StoreError::NotFound => stats.add(Outcome::CasMisses, 1),
                        _ => {}
                    }
                }
                write_store_error(out, e, stats);
            }
            _ => failed(out),
        }),
        Kind::Delete { noreply } => unless_noreply(out, noreply, |out| match next(replies) {
            Some(Response::Deleted(r)) => {
                let outcomes = (Outcome::DeleteHits, Outcome::DeleteMisses);
                write_done_or_not_found(out, r, outcomes, Reply::Deleted, stats)
            }
            _ => failed(out),
        }),
        Kind::Arith { incr, noreply } => {
            let (hit, miss) = if incr {
                (Outcome::IncrHits, Outcome::IncrMisses)
            } else {
                (Outcome::DecrHits, Outcome::DecrMisses)
            };
            unless_noreply(out, noreply, |out| match next(replies) {
                Some(Response::Number(Ok((n, _)))) => {
                    stats.add(hit, 1);
                    protocol::write_number(out, *n);
                }
                Some(Response::Number(Err(e))) => {
                    if *e == StoreError::NotFound {
                        stats.add(miss, 1);
                    }
                    write_store_error(out, e, stats);
                }
                _ => failed(out),
            })
        }
        Kind::Touch { noreply } => unless_noreply(out, noreply, |out| match next(replies) {
            Some(Response::Touched(r)) => {
                let outcomes = (Outcome::TouchHits, Outcome::TouchMisses);
                write_done_or_not_found(out, r, outcomes, Reply::Touched, stats)
            }
            _ => failed(out),
        }),
        Kind::Done { noreply } => {
            let ok = matches!(next(replies), Some(Response::Done));
            if !noreply {
                if ok {
                    Reply::Ok.write(out);
                } else {
                    failed(out);
                }
            }
        }
        Kind::Crawl => match next(replies) {
            Some(Response::Expired(_)) => Reply::Ok.write(out),
            _ => failed(out),
        },
        Kind::Walk => match next(replies) {
            Some(Response::Walked(walked)) => write_metadump(out, &walked.items),
            _ => failed(out),
        },
        Kind::Stats {
            reset,
            binary: Some(opaque),
            counted,
        } => {
            // The text reply, then as packets.
            let mut text = Vec::new();
            let kind = Kind::Stats {
                reset,
                binary: None,
                counted,
            };
            render(kind, arena, replies, &mut text, stats, metrics);
            if reset {
                text.clear();
            }
            protocol::binary::write_bin_stats(out, opaque, &text);
        }
        Kind::Binary(reply) => super::binary::render_binary(reply, arena, replies, out, stats),
        Kind::Stats { reset, counted, .. } => match next(replies) {
            Some(Response::Stats(st)) => {
                let mut at = arena[counted].chunks_exact(8);
                let now = stats.cmd_counts();
                let later: CmdCounts = std::array::from_fn(|i| {
                    let then = at.next().map_or(0, |w| {
                        u64::from_le_bytes(w.try_into().expect("8-byte chunk"))
                    });
                    now[i].saturating_sub(then)
                });
                if reset {
                    metrics.reset(Some(st), &later);
                    out.extend_from_slice(b"RESET\r\n");
                } else {
                    for (name, value) in metrics.stat_lines(Some(st), &later) {
                        protocol::write_stat(out, name, value);
                    }
                    protocol::write_end(out);
                }
            }
            _ => failed(out),
        },
        Kind::MetaGet {
            key,
            flags,
            peek,
            touch,
            vivify,
        } => {
            let before = if peek { peeked_ttl(replies) } else { None };
            let flags = reparse(flags);
            let key = &arena[key];
            match next(replies) {
                Some(Response::Get(Ok(Some(found)))) => {
                    if flags.has(b'u') {
                        // a peek counts nothing
                    } else {
                        stats.add(Outcome::GetHits, 1);
                    }
                    render_meta_hit(out, &flags, key, found, before, touch, vivify);
                }
                Some(Response::Get(Ok(None))) => {
                    if !flags.has(b'u') {
                        stats.add(Outcome::GetMisses, 1);
                    }
                    // `q` hides a miss.
                    if !flags.has(b'q') {
                        write_meta_status(out, MetaStatus::Miss);
                        write_echo_flags(out, &flags, key);
                        write_meta_end(out);
                    }
                }
                Some(Response::Get(Err(e))) => write_store_error(out, e, stats),
                _ => failed(out),
            }
        }
        Kind::MetaSet { key, flags } => {
            let flags = reparse(flags);
            let (status, cas) = match next(replies) {
                Some(Response::Stored(Ok(cas))) => {
                    stats.add(Outcome::Stored, 1);
                    (MetaStatus::Header, *cas)
                }
                Some(Response::Stored(Err(StoreError::NotStored))) => (MetaStatus::NotStored, 0),
                Some(Response::Stored(Err(StoreError::Exists))) => (MetaStatus::Exists, 0),
                Some(Response::Stored(Err(StoreError::NotFound))) => (MetaStatus::NotFound, 0),
                Some(Response::Stored(Err(e))) => return write_store_error(out, e, stats),
                _ => return failed(out),
            };
            // `q` hides success only.
            if status == MetaStatus::Header && flags.has(b'q') {
                return;
            }
            write_meta_status(out, status);
            for tok in flags.tokens() {
                match tok[0] {
                    b'O' => {
                        out.push(b' ');
                        out.extend_from_slice(tok);
                    }
                    b'k' => write_meta_key(out, &flags, &arena[key.clone()]),
                    b'c' => write_meta_flag_num(out, b'c', cas as i64),
                    _ => {}
                }
            }
            write_meta_end(out);
        }
        Kind::MetaDelete { key, flags } => {
            let flags = reparse(flags);
            let status = match next(replies) {
                Some(Response::Deleted(Ok(()))) => {
                    stats.add(Outcome::DeleteHits, 1);
                    MetaStatus::Header
                }
                Some(Response::Deleted(Err(StoreError::NotFound))) => {
                    stats.add(Outcome::DeleteMisses, 1);
                    MetaStatus::NotFound
                }
                Some(Response::Deleted(Err(StoreError::Exists))) => MetaStatus::Exists,
                Some(Response::Deleted(Err(e))) => return write_store_error(out, e, stats),
                _ => return failed(out),
            };
            // `q` hides success only (memcached shows NF and EX).
            if !(flags.has(b'q') && status == MetaStatus::Header) {
                write_meta_status(out, status);
                write_echo_flags(out, &flags, &arena[key]);
                write_meta_end(out);
            }
        }
        Kind::MetaArith {
            key,
            flags,
            peek_before,
            peek_after,
            touch,
            vivify,
        } => {
            let flags = reparse(flags);
            let before = if peek_before {
                Some(peeked_ttl(replies))
            } else {
                None
            };
            let existed = before.is_none_or(|b| b.is_some());
            let reply = next(replies);
            let after = if peek_after {
                peeked_ttl(replies)
            } else {
                None
            };
            let (hit, miss) = if flags.incr() {
                (Outcome::IncrHits, Outcome::IncrMisses)
            } else {
                (Outcome::DecrHits, Outcome::DecrMisses)
            };
            let key = &arena[key];
            let status = match reply {
                Some(&Response::Number(Ok((n, cas)))) => {
                    stats.add(hit, 1);
                    // `q` hides every success, with or without the value,
                    // except a vivified one (as memcached).
                    if flags.has(b'q') && existed {
                        return;
                    }
                    let mut digits = Vec::with_capacity(20);
                    protocol::push_u64(&mut digits, n);
                    let with_value = flags.has(b'v');
                    write_meta_status(
                        out,
                        if with_value {
                            MetaStatus::Value(digits.len())
                        } else {
                            MetaStatus::Header
                        },
                    );
                    // memcached walks the flags in order: `t` shows the TTL
                    // as `T` and (on a created item) `N` left it so far.
                    let after = after.unwrap_or(Ttl::Expired);
                    let mut ttl = match before {
                        Some(Some(ttl)) => ttl,
                        Some(None) => Ttl::Never,
                        None => after,
                    };
                    for tok in flags.tokens() {
                        match tok[0] {
                            b'T' if !existed => ttl = touch.unwrap_or(ttl),
                            b'T' => ttl = after,
                            b'N' if !existed => ttl = vivify.unwrap_or(ttl),
                            b'c' => write_meta_flag_num(out, b'c', cas as i64),
                            b't' => write_meta_ttl(out, ttl),
                            b'O' => {
                                out.push(b' ');
                                out.extend_from_slice(tok);
                            }
                            b'k' => write_meta_key(out, &flags, key),
                            _ => {}
                        }
                    }
                    write_meta_end(out);
                    if with_value {
                        write_meta_data(out, &digits);
                    }
                    return;
                }
                Some(Response::Number(Err(StoreError::NotFound))) => {
                    stats.add(miss, 1);
                    MetaStatus::NotFound
                }
                Some(Response::Number(Err(StoreError::Exists))) => MetaStatus::Exists,
                Some(Response::Number(Err(e))) => return write_store_error(out, e, stats),
                _ => return failed(out),
            };
            write_meta_status(out, status);
            write_echo_flags(out, &flags, key);
            write_meta_end(out);
        }
        Kind::MetaDebug { key } => match next(replies) {
            Some(Response::Get(Ok(Some(found)))) => {
                use std::io::Write as _;
                let it = &found.item;
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(&arena[key]);
                // memcached prints `current_time - exptime`: minus the time
                // left (-1 for never).
                let exp = match it.ttl() {
                    Ttl::Never => -1,
                    Ttl::Expired => 0,
                    Ttl::After(d) => -(d.as_secs() as i64),
                };
                let fetch = if found.hit_before { "yes" } else { "no" };
                // la: the core does not expose the last access time.
                let _ = write!(
                    out,
                    " exp={exp} la=0 cas={} fetch={fetch} cls=1 size={}\r\n",
                    it.cas(),
                    it.key().len() + it.value().len()
                );
            }
            Some(Response::Get(Ok(None))) => out.extend_from_slice(b"EN\r\n"),
            Some(Response::Get(Err(e))) => write_store_error(out, e, stats),
            _ => failed(out),
        },
    }
}

/// `lru_crawler metadump`'s line for each item, as memcached writes them:
/// the key URI-encoded, the absolute deadline (`-1`: never). `la` (last
/// access) is 0: the core keeps no access times. `size` is the item's
/// bytes in its segment.
fn write_metadump(out: &mut Vec<u8>, items: &[segcache::ops::Listed]) {
    use std::io::Write as _;
    let now = crate::metrics::unix_now();
    for it in items {
        out.extend_from_slice(b"key=");
        for &b in &it.key {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b);
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
        let exp = match it.ttl {
            Ttl::Never => -1,
            Ttl::Expired => now as i64,
            Ttl::After(d) => (now + d.as_secs()) as i64,
        };
        let fetch = if it.fetched { "yes" } else { "no" };
        let _ = writeln!(
            out,
            " exp={exp} la=0 cas={} fetch={fetch} cls=1 size={}",
            it.cas, it.size
        );
    }
}

/// `VA`/`HD` and the flags of an `mg` hit, in request order as memcached
/// writes them, then `Z`, `X`, `W`; then the value for `v`. `before` is the
/// TTL before this request's touch (for a `t` that precedes `T`); `touch`
/// and `vivify` are `T` and `N`, which memcached applies in order to an
/// item it just created (so `t` before them shows -1).
fn render_meta_hit(
    out: &mut Vec<u8>,
    flags: &MetaFlags<'_>,
    key: &[u8],
    found: &Found,
    before: Option<Ttl>,
    touch: Option<Ttl>,
    vivify: Option<Ttl>,
) {
    let it = &found.item;
    let with_value = flags.has(b'v');
    write_meta_status(
        out,
        if with_value {
            MetaStatus::Value(it.value().len())
        } else {
            MetaStatus::Header
        },
    );
    let mut ttl = if found.vivified {
        Ttl::Never
    } else {
        before.unwrap_or(it.ttl())
    };
    for tok in flags.tokens() {
        match tok[0] {
            b'T' if found.vivified => ttl = touch.unwrap_or(ttl),
            b'T' => ttl = it.ttl(),
            b'N' if found.vivified => ttl = vivify.unwrap_or(ttl),
            b's' => write_meta_flag_num(out, b's', it.value().len() as i64),
            b't' => write_meta_ttl(out, ttl),
            b'c' => write_meta_flag_num(out, b'c', it.cas() as i64),
            b'f' => write_meta_flag_num(out, b'f', i64::from(it.flags())),
            // The core does not report the last access time.
            b'l' => write_meta_flag_num(out, b'l', 0),
            b'h' => write_meta_flag_num(out, b'h', i64::from(found.hit_before)),
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            // memcached creates a vivified item without the base64 mark.
            b'k' if found.vivified => write_meta_flag(out, b'k', key),
            b'k' => write_meta_key(out, flags, key),
            _ => {}
        }
    }
    if found.won_before {
        out.extend_from_slice(b" Z");
    }
    if found.stale {
        out.extend_from_slice(b" X");
    }
    if found.win {
        out.extend_from_slice(b" W");
    }
    write_meta_end(out);
    if with_value {
        write_meta_data(out, it.value());
    }
}

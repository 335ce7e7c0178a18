//! Replays a Twitter-like request stream ([`crate::twitter::Workload`]) to
//! a memcache server over TCP, as a look-aside client would, and counts
//! the server's hits: the hit ratio of a running server (segcache-server,
//! memcached, Pelikan's server) at the memory it was started with.
//!
//! Owns the client side of the memcache text protocol for `get`, `set`,
//! `delete` and `stats` (requests written in pipelined windows, replies
//! read back in order) and the counts. Never decides anything about the
//! server it talks to: every server gets the same bytes in the same order.
//!
//! Model, the simulator's (`sim::replay_workload`) on the wire:
//! * a read is a `get`; a miss is followed by a `set` of the key's value
//!   length and TTL (the fill), sent at the head of the next window, so
//!   up to one window of requests later than the simulator's;
//! * a write is a `set`, a delete a `delete`;
//! * keys are the id in 16 hex digits, padded with `k` to the stream's key
//!   length (the simulator's keys are binary, which the text protocol
//!   does not carry), values `value_len` bytes of `v`;
//! * time is the wall clock of the server: the stream's TTLs are sent as
//!   they are, and a replay that runs faster than the cluster's real rate
//!   expires less than the simulator at real rate does.

use crate::twitter::{Action, Request, Workload};
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a reply may take before the replay gives up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What a replay saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireStats {
    /// Requests of the stream (fills not counted).
    pub requests: u64,
    /// `get`s sent.
    pub reads: u64,
    /// `get`s answered with no value.
    pub misses: u64,
    /// `set`s (writes and fills) answered with anything but `STORED`.
    pub refused: u64,
    /// The server's `curr_items` at the end, if its `stats` has one.
    pub items: Option<u64>,
    /// Wall time of the replay.
    pub wall: Duration,
}

impl WireStats {
    /// Misses over reads.
    pub fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.reads.max(1) as f64
    }
}

/// The key of `id` on the wire: 16 hex digits, padded with `k` to
/// `key_len` (at most 250, memcached's limit).
pub fn wire_key(id: u64, key_len: u32, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{id:016x}");
    let want = (key_len as usize).clamp(16, 250);
    out.resize(out.len() + want - 16, b'k');
}

/// What each request of a window was, to read its reply.
#[derive(Debug, Clone, Copy)]
enum Sent {
    /// A `get`; on a miss the fill below follows.
    Read(Request),
    /// A `set` (write or fill).
    Store,
    /// A `delete`.
    Delete,
}

fn push_set(buf: &mut Vec<u8>, r: &Request) {
    buf.extend_from_slice(b"set ");
    wire_key(r.key_id, r.key_len, buf);
    let _ = write!(buf, " 0 {} {}\r\n", r.ttl_secs, r.value_len);
    buf.resize(buf.len() + r.value_len as usize, b'v');
    buf.extend_from_slice(b"\r\n");
}

fn push_request(buf: &mut Vec<u8>, r: &Request) -> Sent {
    match r.op.action() {
        Action::Read => {
            buf.extend_from_slice(b"get ");
            wire_key(r.key_id, r.key_len, buf);
            buf.extend_from_slice(b"\r\n");
            Sent::Read(*r)
        }
        Action::Write => {
            push_set(buf, r);
            Sent::Store
        }
        Action::Delete => {
            buf.extend_from_slice(b"delete ");
            wire_key(r.key_id, r.key_len, buf);
            buf.extend_from_slice(b"\r\n");
            Sent::Delete
        }
    }
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// One reply line, without its `\r\n`.
fn read_line<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> io::Result<()> {
    line.clear();
    if r.read_until(b'\n', line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad(format!(
            "reply line without CRLF: {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    line.truncate(line.len() - 2);
    Ok(())
}

/// Reads the reply to a `get`: `Ok(true)` for a value, `Ok(false)` for
/// none; an error for anything else.
pub fn read_get_reply<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> io::Result<bool> {
    read_line(r, line)?;
    if line == b"END" {
        return Ok(false);
    }
    // VALUE <key> <flags> <bytes>
    let text = String::from_utf8_lossy(line).into_owned();
    let mut words = text.split(' ');
    let len = match (words.next(), words.nth(2), words.next()) {
        (Some("VALUE"), Some(n), None) => n.parse::<usize>().ok(),
        _ => None,
    }
    .ok_or_else(|| bad(format!("unexpected reply to get: {text:?}")))?;
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data)?;
    if !data.ends_with(b"\r\n") {
        return Err(bad("value not followed by CRLF".into()));
    }
    read_line(r, line)?;
    if line != b"END" {
        return Err(bad(format!(
            "a get's value not followed by END: {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    Ok(true)
}

/// Replays `workload` to the server at `addr` on one connection, `window`
/// requests per write.
pub fn replay(addr: &str, workload: Workload, window: usize) -> io::Result<WireStats> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(1 << 16, stream);
    let mut stats = WireStats::default();
    let mut requests = workload;
    let mut fills: Vec<Request> = Vec::new();
    let mut sent: Vec<Sent> = Vec::with_capacity(window * 2);
    let mut buf = Vec::new();
    let mut line = Vec::new();
    let start = Instant::now();
    loop {
        buf.clear();
        sent.clear();
        for f in fills.drain(..) {
            push_set(&mut buf, &f);
            sent.push(Sent::Store);
        }
        for r in requests.by_ref().take(window.max(1)) {
            stats.requests += 1;
            sent.push(push_request(&mut buf, &r));
        }
        if sent.is_empty() {
            break;
        }
        writer.write_all(&buf)?;
        for s in &sent {
            match s {
                Sent::Read(r) => {
                    stats.reads += 1;
                    if !read_get_reply(&mut reader, &mut line)? {
                        stats.misses += 1;
                        fills.push(*r);
                    }
                }
                Sent::Store => {
                    read_line(&mut reader, &mut line)?;
                    if line != b"STORED" {
                        stats.refused += 1;
                    }
                }
                Sent::Delete => {
                    read_line(&mut reader, &mut line)?;
                    if line != b"DELETED" && line != b"NOT_FOUND" {
                        return Err(bad(format!(
                            "unexpected reply to delete: {:?}",
                            String::from_utf8_lossy(&line)
                        )));
                    }
                }
            }
        }
    }
    stats.wall = start.elapsed();
    // Not every server answers `stats` on its data port (Pelikan's closes
    // the connection): asked on a connection of its own, and left out if
    // it fails.
    stats.items = curr_items(addr).ok().flatten();
    Ok(stats)
}

/// The server's `curr_items`, if its `stats` has one.
pub fn curr_items(addr: &str) -> io::Result<Option<u64>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.write_all(b"stats\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let mut items = None;
    loop {
        read_line(&mut reader, &mut line)?;
        if line == b"END" {
            return Ok(items);
        }
        if let Some(n) = line.strip_prefix(b"STAT curr_items ") {
            items = std::str::from_utf8(n).ok().and_then(|s| s.parse().ok());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn keys_are_hex_padded_to_the_stream_length() {
        let mut k = Vec::new();
        wire_key(0xab, 20, &mut k);
        assert_eq!(k, b"00000000000000abkkkk");
        k.clear();
        wire_key(u64::MAX, 8, &mut k);
        assert_eq!(k, b"ffffffffffffffff", "never shorter than the id");
        k.clear();
        wire_key(1, 400, &mut k);
        assert_eq!(k.len(), 250, "never longer than memcached takes");
    }

    #[test]
    fn get_replies_are_read_whole() {
        let mut line = Vec::new();
        let mut r = Cursor::new(b"VALUE k 0 3\r\nabc\r\nEND\r\nEND\r\n".to_vec());
        assert!(read_get_reply(&mut r, &mut line).unwrap());
        assert!(!read_get_reply(&mut r, &mut line).unwrap());
        assert_eq!(r.position() as usize, r.get_ref().len());
        // A value whose bytes contain "END\r\n" is still read by length.
        let mut r = Cursor::new(b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n".to_vec());
        assert!(read_get_reply(&mut r, &mut line).unwrap());
        for reply in [
            &b"SERVER_ERROR out of memory\r\n"[..],
            b"VALUE k 0 3\r\nabcd\r\nEND\r\n",
            b"VALUE k 0 3\r\nabc\r\n",
            b"END\n",
        ] {
            let mut r = Cursor::new(reply.to_vec());
            assert!(
                read_get_reply(&mut r, &mut line).is_err(),
                "{:?}",
                String::from_utf8_lossy(reply)
            );
        }
    }
}

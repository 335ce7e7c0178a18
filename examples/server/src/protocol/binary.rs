//! The memcache binary protocol, as memcached 1.6.18 speaks it: the
//! packet framing, each opcode's shape rules, and the response packets.
//! (memcached deprecates this protocol since 1.6.0; clients built on
//! libmemcached, such as pylibmc with `binary=True`, still use it.)
//!
//! A request is a 24-byte header (magic `0x80`, opcode, key length,
//! extras length, data type, vbucket, total body length, opaque, CAS; all
//! big-endian), then extras, key and value. [`parse_binary`] reads one
//! from the front of a connection's buffer into a [`BinRequest`] that
//! borrows from it, or says why not ([`BinError`]) with memcached's answer
//! and what becomes of the bytes and the connection. The `write_*`
//! functions append response packets. What each opcode *does* is the
//! executor's (`crate::executor`).
//!
//! Must never: panic on any input, buffer more than one packet's bytes
//! (an oversized value is refused from its header, before it arrives), or
//! know the cache.

use super::ValueLimit;
use super::MAX_KEY_LEN;

/// A request's first byte; a connection whose first byte is this speaks
/// the binary protocol.
pub const REQUEST_MAGIC: u8 = 0x80;
const RESPONSE_MAGIC: u8 = 0x81;
/// Header bytes before the body.
pub const HEADER_LEN: usize = 24;

/// Opcodes this server answers (memcached's names).
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response statuses (memcached's names), with the text memcached sends
/// in an error's body ([`status_text`]).
pub mod status {
    pub const OK: u16 = 0x0000;
    pub const KEY_ENOENT: u16 = 0x0001;
    pub const KEY_EEXISTS: u16 = 0x0002;
    pub const E2BIG: u16 = 0x0003;
    pub const EINVAL: u16 = 0x0004;
    pub const NOT_STORED: u16 = 0x0005;
    pub const DELTA_BADVAL: u16 = 0x0006;
    pub const AUTH_ERROR: u16 = 0x0020;
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    pub const ENOMEM: u16 = 0x0082;
}

/// The body memcached sends with an error status.
pub fn status_text(status: u16) -> &'static [u8] {
    match status {
        status::KEY_ENOENT => b"Not found",
        status::KEY_EEXISTS => b"Data exists for key.",
        status::E2BIG => b"Too large.",
        status::EINVAL => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::DELTA_BADVAL => b"Non-numeric server-side value for incr or decr",
        status::AUTH_ERROR => b"Auth failure.",
        status::ENOMEM => b"Out of memory",
        _ => b"Unknown command",
    }
}

/// One request packet; the slices borrow from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinRequest<'a> {
    /// As sent (a quiet opcode stays quiet: see [`BinRequest::quiet`]).
    pub opcode: u8,
    /// Echoed in every response to this request.
    pub opaque: u32,
    /// Compare-and-swap token (0: none).
    pub cas: u64,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// An opcode without its quiet variant (`GETQ` is `GET`...).
pub fn base_opcode(opcode: u8) -> u8 {
    match opcode {
        op::GETQ => op::GET,
        op::GETKQ => op::GETK,
        op::SETQ => op::SET,
        op::ADDQ => op::ADD,
        op::REPLACEQ => op::REPLACE,
        op::DELETEQ => op::DELETE,
        op::INCREMENTQ => op::INCREMENT,
        op::DECREMENTQ => op::DECREMENT,
        op::QUITQ => op::QUIT,
        op::FLUSHQ => op::FLUSH,
        op::APPENDQ => op::APPEND,
        op::PREPENDQ => op::PREPEND,
        op::GATQ => op::GAT,
        op::GATKQ => op::GATK,
        other => other,
    }
}

impl BinRequest<'_> {
    /// The opcode without its quiet variant (see [`base_opcode`]).
    pub fn base(&self) -> u8 {
        base_opcode(self.opcode)
    }

    /// A quiet opcode: success is not answered (but a read's hit is, and
    /// errors are, as in memcached).
    pub fn quiet(&self) -> bool {
        self.base() != self.opcode
    }

    /// The big-endian `u32` of the extras at `at`, or 0.
    pub fn extra_u32(&self, at: usize) -> u32 {
        self.extras
            .get(at..at + 4)
            .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    /// The big-endian `u64` of the extras at `at`, or 0.
    pub fn extra_u64(&self, at: usize) -> u64 {
        self.extras
            .get(at..at + 8)
            .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Why [`parse_binary`] returned no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinError {
    /// Not a whole packet yet: read more and parse again from the start.
    Incomplete,
    /// Not a request packet (wrong magic): close without a reply.
    Close,
    /// Answer `status` (its text as the body) to `opcode`/`opaque`; then
    /// drop `swallow` bytes from the packet's start (some may not have
    /// arrived yet), and close the connection if `close`.
    Refused {
        opcode: u8,
        opaque: u32,
        status: u16,
        swallow: usize,
        close: bool,
        /// An oversized `SET` unlinks the key's old item (at this offset
        /// and length in the buffer), as memcached does.
        unlink: Option<(usize, usize)>,
    },
}

/// Parses one request packet from the front of `buf`; on success, also
/// the bytes it took. A store whose value is over `limit` is refused from
/// its header, extras and key, before the value arrives.
pub fn parse_binary(buf: &[u8], limit: ValueLimit) -> Result<(BinRequest<'_>, usize), BinError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Err(BinError::Incomplete);
    };
    if header[0] != REQUEST_MAGIC {
        return Err(BinError::Close);
    }
    let opcode = header[1];
    let key_len = u16::from_be_bytes([header[2], header[3]]) as usize;
    let ext_len = header[4] as usize;
    let body_len = u32::from_be_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
    let opaque = u32::from_be_bytes(header[12..16].try_into().expect("4 bytes"));
    let cas = u64::from_be_bytes(header[16..24].try_into().expect("8 bytes"));
    let refuse = |status, swallow, close| BinError::Refused {
        opcode,
        opaque,
        status,
        swallow,
        close,
        unlink: None,
    };
    // memcached waits for the extras and the key before it decides.
    let head_len = HEADER_LEN + ext_len + key_len;
    if buf.len() < head_len {
        return Err(BinError::Incomplete);
    }
    if key_len + ext_len > body_len {
        return Err(refuse(status::UNKNOWN_COMMAND, head_len, true));
    }
    if key_len > MAX_KEY_LEN {
        return Err(refuse(status::EINVAL, head_len, true));
    }
    let value_len = body_len - key_len - ext_len;
    let req = BinRequest {
        opcode,
        opaque,
        cas,
        extras: &buf[HEADER_LEN..HEADER_LEN + ext_len],
        key: &buf[HEADER_LEN + ext_len..head_len],
        value: &[],
    };
    let (k, e, b) = (key_len, ext_len, body_len);
    let shape_ok = match req.base() {
        op::VERSION | op::NOOP | op::QUIT => k == 0 && e == 0 && b == 0,
        op::FLUSH => k == 0 && b == e && (e == 0 || e == 4),
        op::SET | op::ADD | op::REPLACE => e == 8 && k != 0,
        op::GET | op::GETK | op::DELETE => k > 0 && e == 0 && b == k,
        op::INCREMENT | op::DECREMENT => k > 0 && e == 20 && b == k + e,
        op::APPEND | op::PREPEND => k > 0 && e == 0,
        op::STAT => e == 0,
        op::TOUCH | op::GAT | op::GATK => e == 4 && k != 0,
        // Unknown opcodes (SASL, which is off here, and VERBOSITY, which
        // memcached 1.6.18 does not answer either): `Unknown command`, and
        // the packet is dropped. (memcached drops `body length` bytes
        // after the key, which eats into the next packet when the unknown
        // one had extras or a key.)
        _ => return Err(refuse(status::UNKNOWN_COMMAND, HEADER_LEN + b, false)),
    };
    if !shape_ok {
        return Err(refuse(status::EINVAL, head_len, true));
    }
    let total = HEADER_LEN + body_len;
    if matches!(
        req.base(),
        op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND
    ) {
        let flags = if e == 8 { req.extra_u32(0) } else { 0 };
        if value_len > limit.for_key(key_len, flags) {
            return Err(BinError::Refused {
                opcode,
                opaque,
                status: status::E2BIG,
                swallow: total,
                close: false,
                unlink: (req.base() == op::SET).then_some((HEADER_LEN + ext_len, key_len)),
            });
        }
    }
    let Some(value) = buf.get(head_len..total) else {
        return Err(BinError::Incomplete);
    };
    Ok((BinRequest { value, ..req }, total))
}

/// Appends a response header for `opcode` and `opaque`.
#[allow(clippy::too_many_arguments)]
pub fn write_bin_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    ext_len: u8,
    key_len: usize,
    body_len: usize,
) {
    out.push(RESPONSE_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key_len as u16).to_be_bytes());
    out.push(ext_len);
    out.push(0);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
}

/// Appends a response with no extras: status, CAS, key and value.
pub fn write_bin_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    key: &[u8],
    value: &[u8],
) {
    write_bin_header(
        out,
        opcode,
        status,
        opaque,
        cas,
        0,
        key.len(),
        key.len() + value.len(),
    );
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends an error response: `status` with memcached's text as the body.
pub fn write_bin_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: u16) {
    write_bin_response(out, opcode, status, opaque, 0, b"", status_text(status));
}

/// Appends a read's hit: the client flags as extras, the key when asked,
/// and the value (none for `TOUCH`).
#[allow(clippy::too_many_arguments)]
pub fn write_bin_value(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: &[u8],
    value: &[u8],
) {
    write_bin_header(
        out,
        opcode,
        status::OK,
        opaque,
        cas,
        4,
        key.len(),
        4 + key.len() + value.len(),
    );
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends the response packets of a text `stats` reply (`STAT name
/// value` lines; `END` and anything else ends them): one packet per stat,
/// then the empty one that ends a binary stats reply.
pub fn write_bin_stats(out: &mut Vec<u8>, opaque: u32, text: &[u8]) {
    for line in text.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let (name, value) = match rest.iter().position(|&c| c == b' ') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &b""[..]),
        };
        write_bin_response(out, op::STAT, status::OK, opaque, 0, name, value);
    }
    write_bin_response(out, op::STAT, status::OK, opaque, 0, b"", b"");
}

/// Appends a request packet (for clients and tests).
pub fn encode_bin_request(out: &mut Vec<u8>, req: &BinRequest<'_>) {
    out.push(REQUEST_MAGIC);
    out.push(req.opcode);
    out.extend_from_slice(&(req.key.len() as u16).to_be_bytes());
    out.push(req.extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    let body = req.extras.len() + req.key.len() + req.value.len();
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&req.opaque.to_be_bytes());
    out.extend_from_slice(&req.cas.to_be_bytes());
    out.extend_from_slice(req.extras);
    out.extend_from_slice(req.key);
    out.extend_from_slice(req.value);
}

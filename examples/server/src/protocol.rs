//! The memcache ASCII protocol: an incremental request parser and a response
//! encoder, independent of networking and of storage.
//!
//! # What this module owns
//!
//! * [`parse`]: turns the bytes at the front of a connection's read buffer
//!   into one [`Request`] plus the number of bytes it used, or says why it
//!   cannot ([`ParseError`]): more bytes are needed, the line is too long, or
//!   the request is malformed, in which case the error knows memcached 1.6's
//!   exact reply and how many bytes the caller must drop (for an oversized
//!   value, how many bytes to *swallow*, which may not have arrived yet).
//! * The encoders: `write_*` functions and [`Reply`] append memcached's
//!   replies to a `Vec<u8>`; [`Request::encode`] writes a request (for
//!   clients and tests).
//! * [`ttl_from_exptime`]: memcached's exptime rules (0 never expires,
//!   negative is already expired, more than 30 days is an absolute unix time).
//!
//! Classic commands: `get gets gat gats set add replace append prepend cas
//! delete incr decr touch flush_all version verbosity stats quit`. Meta
//! commands: `mg ms md ma mn`, with their flags parsed into [`MetaFlags`]; the
//! caller decides what each flag means for its store.
//!
//! # What it must never do
//!
//! * Never panic, whatever the input: every index is checked, every number is
//!   parsed with overflow checks.
//! * Never allocate per request on the hot path: requests borrow keys and
//!   values from the caller's buffer, multi-key lists are lazy iterators over
//!   that buffer ([`Tokens`]), and the only allocation is the growth of the
//!   caller's response `Vec`.
//! * Never scan or ask the caller to keep more than a bounded line: a line
//!   longer than [`MAX_LINE_LEN`] (or [`MAX_MULTIGET_LINE_LEN`] for the get
//!   family) without a newline is [`ParseError::LineTooLong`], so a 10 MB
//!   garbage line is never buffered. A value larger than the caller's
//!   `max_value` is [`ParseError::TooLarge`] as soon as its command line is
//!   complete, before any of the value needs to be buffered.
//! * Know nothing of sockets, clocks or the cache: the caller passes the
//!   current time to [`ttl_from_exptime`] and carries out requests itself.
//!
//! # Using it
//!
//! ```
//! use segcache_server::protocol::{parse, ParseError, Request};
//!
//! let buf = b"set k 0 0 2\r\nhi\r\nget k\r\n";
//! let (req, used) = parse(buf, 1024).unwrap();
//! assert!(matches!(req, Request::Store { key: b"k", value: b"hi", .. }));
//! let (req, _) = parse(&buf[used..], 1024).unwrap();
//! assert!(matches!(req, Request::Get { cas: false, .. }));
//! assert_eq!(parse(b"get k", 1024), Err(ParseError::Incomplete));
//! ```
//!
//! On an error other than `Incomplete`, write [`ParseError::write_reply`],
//! then drop [`ParseError::consumed`] bytes (for `TooLarge`, the part of
//! `swallow` not yet received must be dropped as it arrives), or close the
//! connection if [`ParseError::closes_connection`].

use std::fmt;

/// Longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;
/// Longest command line (bytes before the `\n`) outside the get family, as
/// memcached's 2048-byte limit.
pub const MAX_LINE_LEN: usize = 2048;
/// Longest `get`/`gets`/`gat`/`gats` line. Memcached lets multigets grow
/// without bound; this parser caps them so memory stays bounded.
pub const MAX_MULTIGET_LINE_LEN: usize = 1 << 20;
/// Largest `<bytes>` field memcached parses (`INT_MAX - 2`); larger is a
/// malformed command line rather than a too-large value.
pub const MAX_DATA_LEN: u64 = i32::MAX as u64 - 2;
/// Exptimes above this many seconds (30 days) are absolute unix times.
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;
/// Longest opaque (`O`) token accepted on a meta command.
pub const MAX_OPAQUE_LEN: usize = 32;
/// Most tokens accepted on one meta command line, counted as memcached
/// does (command, key, every flag, and one for the end of the line).
pub const MAX_META_TOKENS: usize = 20;

/// Client error messages (without the `CLIENT_ERROR ` prefix), as memcached
/// words them.
pub mod msg {
    pub const BAD_FORMAT: &str = "bad command line format";
    pub const BAD_DATA_CHUNK: &str = "bad data chunk";
    pub const DELETE_USAGE: &str = "bad command line format.  Usage: delete <key> [noreply]";
    pub const INVALID_DELTA: &str = "invalid numeric delta argument";
    pub const INVALID_EXPTIME: &str = "invalid exptime argument";
    pub const NON_NUMERIC: &str = "cannot increment or decrement non-numeric value";
    pub const LINE_TOO_LONG: &str = "line too long";
    pub const INVALID_FLAG: &str = "invalid flag";
    pub const DUPLICATE_FLAG: &str = "duplicate flag";
    pub const BAD_TOKEN: &str = "bad token in command line format";
    pub const OPAQUE_TOO_LONG: &str = "opaque token too long";
    pub const TOO_MANY_FLAGS: &str = "options flags are too long";
    pub const INVALID_MODE: &str = "invalid mode for ms M token";
    pub const INVALID_OR_DUPLICATE_FLAG: &str = "invalid or duplicate flag";
    pub const TOO_MANY_FLAGS_NO_ARE: &str = "options flags too long";
    pub const M_TOKEN_LENGTH: &str = "incorrect length for M token";
    pub const INVALID_INITIAL: &str = "invalid numeric initial value";
    pub const INVALID_DELTA_VALUE: &str = "invalid numeric delta value";
    pub const DECODING_KEY: &str = "error decoding key";
    pub const FLUSH_NOT_ALLOWED: &str = "flush_all not allowed";
    pub const INVALID_MA_MODE: &str = "invalid mode for ma M token";
    /// Server error message for [`super::ParseError::TooLarge`].
    pub const TOO_LARGE: &str = "object too large for cache";
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// The storage commands that carry a data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreCommand {
    /// The command's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            StoreCommand::Set => "set",
            StoreCommand::Add => "add",
            StoreCommand::Replace => "replace",
            StoreCommand::Append => "append",
            StoreCommand::Prepend => "prepend",
            StoreCommand::Cas => "cas",
        }
    }
}

/// A parsed request. Keys and values borrow from the parsed buffer (a
/// base64 meta key is decoded into its own buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get <key>*` (`cas: false`) or `gets <key>*` (`cas: true`). At least
    /// one key; every key is at most [`MAX_KEY_LEN`] bytes.
    Get { keys: Tokens<'a>, cas: bool },
    /// `gat <exptime> <key>*` or `gats ...`. Memcached accepts zero keys here
    /// (the reply is just `END`).
    Gat {
        exptime: i64,
        keys: Tokens<'a>,
        cas: bool,
    },
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes>
    /// [noreply]` or `cas <key> <flags> <exptime> <bytes> <cas unique>
    /// [noreply]`, with its data block. `cas` is 0 except for `Cas`.
    Store {
        command: StoreCommand,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        value: &'a [u8],
        cas: u64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]`.
    Delete { key: &'a [u8], noreply: bool },
    /// `incr <key> <delta> [noreply]`.
    Incr {
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `decr <key> <delta> [noreply]`.
    Decr {
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`; `delay <= 0` means now, otherwise it
    /// follows the exptime rules.
    FlushAll { delay: i64, noreply: bool },
    /// `version`.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity { level: u32, noreply: bool },
    /// `stats [args]`: the arguments are left to the caller (memcached
    /// answers `ERROR` for a sub-command it does not know).
    Stats { args: Tokens<'a> },
    /// `quit`: close the connection without a reply.
    Quit,
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `mg <key> <flags>*`.
    MetaGet {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ms <key> <datalen> <flags>*` and its data block.
    MetaSet {
        key: MetaKey<'a>,
        value: &'a [u8],
        flags: MetaFlags<'a>,
    },
    /// `md <key> <flags>*`.
    MetaDelete {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ma <key> <flags>*`.
    MetaArithmetic {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `me <key> [b]`: an item's metadata.
    MetaDebug { key: MetaKey<'a> },
    /// `mn`: reply `MN`.
    MetaNoop,
}

/// Space-separated tokens borrowed from a command line (keys of a multi-get,
/// arguments of `stats`, flags of a meta command). Iterating never
/// allocates. Equality compares the token sequences, not the spacing.
#[derive(Clone, Copy)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// Tokens of `raw`, split on spaces (runs of spaces count as one).
    pub fn new(raw: &'a [u8]) -> Self {
        Tokens { rest: raw }
    }

    /// Whether there are no tokens left.
    pub fn is_empty(&self) -> bool {
        self.rest.iter().all(|&b| b == b' ')
    }

    /// The unparsed text, starting at the next token (or empty).
    pub fn remainder(&self) -> &'a [u8] {
        let start = self
            .rest
            .iter()
            .position(|&b| b != b' ')
            .unwrap_or(self.rest.len());
        &self.rest[start..]
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let (tok, after) = rest.split_at(end);
        self.rest = after;
        Some(tok)
    }
}

impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        (*self).eq(*other)
    }
}

impl Eq for Tokens<'_> {}

impl fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries((*self).map(|t| t.escape_ascii().to_string()))
            .finish()
    }
}

/// The flags of a meta command, checked as memcached 1.6 checks them. Every
/// token is kept (see [`tokens`]) because memcached answers flags in
/// request order (`O`, `k`, `t` before or after a `T`...); the arguments
/// are parsed here, so a malformed number is a parse error, not the
/// caller's problem.
///
/// [`tokens`]: MetaFlags::tokens
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    tokens: Tokens<'a>,
    /// Flag bytes seen (bit per byte value below 128).
    present: u128,
    /// `T<exptime>`: new exptime, same rules as classic exptime.
    pub ttl: Option<i64>,
    /// `N<exptime>`: vivify on miss with this exptime.
    pub vivify: Option<i64>,
    /// `R<exptime>`: recache (win) if the remaining ttl is below this.
    pub recache: Option<i64>,
    /// `F<flags>`: client flags to store.
    pub client_flags: Option<u32>,
    /// `C<cas>`: compare-and-swap against this cas value.
    pub compare_cas: Option<u64>,
    /// `D<delta>`: delta for `ma` (default 1).
    pub delta: Option<u64>,
    /// `J<initial>`: initial value for `ma` autovivification (default 0).
    pub initial: Option<u64>,
    /// `M<mode>`: mode byte, validated per command (`ms`: E A P R S, `ma`:
    /// I + D -).
    pub mode: Option<u8>,
    /// `b`: the key was sent in base64; [`MetaKey`] holds it decoded.
    pub base64: bool,
}

/// A meta command's key: as sent, or decoded from base64 (`b` flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaKey<'a> {
    Plain(&'a [u8]),
    Decoded(Vec<u8>),
}

impl MetaKey<'_> {
    /// The key's bytes (decoded).
    pub fn bytes(&self) -> &[u8] {
        match self {
            MetaKey::Plain(k) => k,
            MetaKey::Decoded(k) => k,
        }
    }
}

fn flag_bit(flag: u8) -> Option<u128> {
    (flag < 127).then(|| 1u128 << flag)
}

impl<'a> MetaFlags<'a> {
    /// No flags.
    pub const EMPTY: MetaFlags<'static> = MetaFlags {
        tokens: Tokens { rest: b"" },
        present: 0,
        ttl: None,
        vivify: None,
        recache: None,
        client_flags: None,
        compare_cas: None,
        delta: None,
        initial: None,
        mode: None,
        base64: false,
    };

    /// Parses space-separated flag tokens as memcached's flag pre-parser:
    /// a repeated flag (or a byte above 126) or an unknown letter stops at
    /// once; a malformed argument is remembered and the last such message
    /// wins (a bad `F` keeps the message it found, `default_error`). The
    /// error is a client error message (see [`msg`]). Opaque length and
    /// modes are checked by the caller, per command.
    pub fn parse(raw: &'a [u8], default_error: &'static str) -> Result<Self, &'static str> {
        let mut f = MetaFlags {
            tokens: Tokens::new(raw),
            ..MetaFlags::EMPTY
        };
        let mut error: Option<&'static str> = None;
        let mut error_msg = default_error;
        for tok in Tokens::new(raw) {
            let (flag, arg) = (tok[0], &tok[1..]);
            let bit = flag_bit(flag).ok_or(msg::DUPLICATE_FLAG)?;
            if f.present & bit != 0 {
                return Err(msg::DUPLICATE_FLAG);
            }
            f.present |= bit;
            let mut fail = |m: Option<&'static str>| {
                if let Some(m) = m {
                    error_msg = m;
                }
                error = Some(error_msg);
            };
            match flag {
                b'b' => f.base64 = true,
                b'N' | b'T' | b'R' => match strtol(arg) {
                    Some(v) => {
                        let slot = match flag {
                            b'N' => &mut f.vivify,
                            b'T' => &mut f.ttl,
                            _ => &mut f.recache,
                        };
                        *slot = Some(v);
                    }
                    None => fail(Some(msg::BAD_TOKEN)),
                },
                b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h'
                | b'u' | b'q' | b'I' => {}
                b'F' => match strtoul(arg) {
                    Some(v) => f.client_flags = Some(v),
                    None => fail(None),
                },
                b'C' => match strtoull(arg) {
                    Some(v) => f.compare_cas = Some(v),
                    None => fail(Some(msg::BAD_TOKEN)),
                },
                b'M' => match arg {
                    [m] => f.mode = Some(*m),
                    _ => fail(Some(msg::M_TOKEN_LENGTH)),
                },
                b'J' => match strtoull(arg) {
                    Some(v) => f.initial = Some(v),
                    None => fail(Some(msg::INVALID_INITIAL)),
                },
                b'D' => match strtoull(arg) {
                    Some(v) => f.delta = Some(v),
                    None => fail(Some(msg::INVALID_DELTA_VALUE)),
                },
                _ => return Err(msg::INVALID_FLAG),
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(f),
        }
    }

    /// Whether the flag letter was given (e.g. `b'v'`, `b'q'`).
    pub fn has(&self, flag: u8) -> bool {
        flag_bit(flag).is_some_and(|bit| self.present & bit != 0)
    }

    /// The flag tokens as given, in order (for echoing `O` and `k`).
    pub fn tokens(&self) -> Tokens<'a> {
        self.tokens
    }

    /// The first opaque (`O`) token longer than [`MAX_OPAQUE_LEN`].
    fn opaque_too_long(&self) -> bool {
        self.tokens
            .filter(|t| t[0] == b'O')
            .any(|t| t.len() > MAX_OPAQUE_LEN)
    }

    /// What an `ms` stores: `M` mode E=add, A=append, P=prepend, R=replace,
    /// S or none=set (upper case only, as memcached). A `C` flag makes a set
    /// or replace a compare-and-swap.
    pub fn set_mode(&self) -> StoreCommand {
        match self.mode {
            Some(b'E') => StoreCommand::Add,
            Some(b'A') => StoreCommand::Append,
            Some(b'P') => StoreCommand::Prepend,
            Some(b'R') => StoreCommand::Replace,
            _ => StoreCommand::Set,
        }
    }

    /// Whether an `ma` increments (mode I or +, the default) rather than
    /// decrements (D or -).
    pub fn incr(&self) -> bool {
        !matches!(self.mode, Some(b'D' | b'-'))
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why [`parse`] returned no request. Every variant but `Incomplete` and
/// `LineTooLong` says how many bytes the request occupied, so the caller
/// can drop them and go on with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer holds only part of a request: read more and parse again
    /// from the same start.
    Incomplete,
    /// No newline within the line limit. Memcached gives up on such a
    /// connection: reply `CLIENT_ERROR line too long` and close it.
    LineTooLong,
    /// An HTTP request line: close the connection without a reply, as
    /// memcached does.
    Close,
    /// Unknown command or wrong number of arguments: reply `ERROR`.
    UnknownCommand { consumed: usize },
    /// Malformed request: reply `CLIENT_ERROR <msg>` unless `noreply`
    /// (memcached keeps quiet on errors of noreply commands too). For a
    /// storage command whose line is malformed, only the line is consumed,
    /// as memcached does: the data block is then read as a command.
    ClientError {
        msg: &'static str,
        consumed: usize,
        noreply: bool,
    },
    /// The value is larger than `max_value`: reply `SERVER_ERROR object too
    /// large for cache` unless `noreply`, and discard `swallow` bytes from
    /// the start of the buffer (command line, value and its `\r\n`), some of
    /// which may not have arrived yet. Memcached also unlinks the key's old
    /// value after an oversized `set` (see [`ParseError::too_large_key`]),
    /// so stale data does not survive a failed overwrite.
    TooLarge {
        swallow: usize,
        noreply: bool,
        /// Whether memcached unlinks the key (`set`, and `ms` in any mode).
        unlink: bool,
        key_at: usize,
        key_len: usize,
    },
}

impl ParseError {
    /// Bytes the failed request occupied, to drop before parsing again.
    /// `None` for `Incomplete` (keep the bytes, read more) and
    /// `LineTooLong` (close the connection). For `TooLarge` this is
    /// `swallow`, which may exceed the buffer.
    pub fn consumed(&self) -> Option<usize> {
        match *self {
            ParseError::Incomplete | ParseError::LineTooLong | ParseError::Close => None,
            ParseError::UnknownCommand { consumed } => Some(consumed),
            ParseError::ClientError { consumed, .. } => Some(consumed),
            ParseError::TooLarge { swallow, .. } => Some(swallow),
        }
    }

    /// Whether the caller should close the connection after the reply.
    pub fn closes_connection(&self) -> bool {
        matches!(self, ParseError::LineTooLong | ParseError::Close)
    }

    /// Appends memcached's reply for this error (nothing for `Incomplete`
    /// or when the command said `noreply`).
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        match *self {
            ParseError::Incomplete | ParseError::Close => {}
            ParseError::LineTooLong => write_client_error(out, msg::LINE_TOO_LONG),
            ParseError::UnknownCommand { .. } => Reply::Error.write(out),
            ParseError::ClientError { msg, noreply, .. } => {
                if !noreply {
                    write_client_error(out, msg)
                }
            }
            ParseError::TooLarge { noreply, .. } => {
                if !noreply {
                    write_server_error(out, msg::TOO_LARGE)
                }
            }
        }
    }

    /// For an oversized `set` or `ms`, the key whose old value should be
    /// unlinked; `buf` is the buffer that was parsed. (None for a base64
    /// `ms` key, whose decoded form is not in `buf`.)
    pub fn too_large_key<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        match *self {
            ParseError::TooLarge {
                unlink: true,
                key_at,
                key_len,
                ..
            } => buf.get(key_at..key_at.checked_add(key_len)?),
            _ => None,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Incomplete => f.write_str("incomplete request"),
            ParseError::LineTooLong => f.write_str("line too long"),
            ParseError::Close => f.write_str("HTTP request"),
            ParseError::UnknownCommand { .. } => f.write_str("unknown command"),
            ParseError::ClientError { msg, .. } => write!(f, "client error: {msg}"),
            ParseError::TooLarge { swallow, .. } => {
                write!(f, "object too large ({swallow} bytes to swallow)")
            }
        }
    }
}

impl std::error::Error for ParseError {}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// C's `isspace` in the "C" locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The number at the front of a token as C's `strto*` functions read it
/// (leading white space, an optional sign, decimal digits), accepted as
/// memcached's `safe_strto*` accept it: at least one digit, followed by the
/// end of the token or white space. Returns the sign and the magnitude
/// (`None` on overflow of 64 bits, C's `ERANGE`).
fn c_number(t: &[u8]) -> Option<(bool, Option<u64>)> {
    let start = t.iter().position(|&b| !c_space(b)).unwrap_or(t.len());
    let mut rest = &t[start..];
    let neg = match rest.first() {
        Some(b'-') => {
            rest = &rest[1..];
            true
        }
        Some(b'+') => {
            rest = &rest[1..];
            false
        }
        _ => false,
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !rest.get(digits).is_none_or(|&b| c_space(b)) {
        return None;
    }
    let mut v: Option<u64> = Some(0);
    for &b in &rest[..digits] {
        v = v
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(b - b'0')));
    }
    Some((neg, v))
}

/// memcached's `safe_strtoull`: `strtoull`, refusing a value that went
/// negative through a `-` sign (`-0` is 0).
pub fn strtoull(t: &[u8]) -> Option<u64> {
    let (neg, mag) = c_number(t)?;
    let v = if neg { mag?.wrapping_neg() } else { mag? };
    if (v as i64) < 0 && t.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtoul` into a 32-bit field: `strtoull`'s rules, then
/// truncated to 32 bits as memcached stores it (`4294967297` is 1).
pub fn strtoul(t: &[u8]) -> Option<u32> {
    strtoull(t).map(|v| v as u32)
}

/// memcached's `safe_strtol` into a 32-bit field: `strtol` (64-bit range),
/// then truncated to 32 bits as memcached stores it.
pub fn strtol(t: &[u8]) -> Option<i64> {
    let (neg, mag) = c_number(t)?;
    let mag = mag?;
    let v: i64 = if neg {
        if mag > 1 << 63 {
            return None;
        }
        (mag as i64).wrapping_neg()
    } else {
        i64::try_from(mag).ok()?
    };
    Some(i64::from(v as i32))
}

/// Whether the line in `buf` starts with a get-family command (which may be
/// longer than [`MAX_LINE_LEN`]). Like memcached, at most 100 leading spaces.
fn is_multiget(buf: &[u8]) -> bool {
    let start = buf.iter().take(101).position(|&b| b != b' ');
    let Some(start) = start else { return false };
    let rest = &buf[start..];
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|p| rest.starts_with(p))
}

/// Finds the command line at the front of `buf`: returns the line without
/// its `\n` (and `\r` before it) and the bytes it occupies with the `\n`.
fn read_line(buf: &[u8]) -> Result<(&[u8], usize), ParseError> {
    let limit = if buf.len() > MAX_LINE_LEN && is_multiget(buf) {
        MAX_MULTIGET_LINE_LEN
    } else {
        MAX_LINE_LEN
    };
    let window = &buf[..buf.len().min(limit + 1)];
    match window.iter().position(|&b| b == b'\n') {
        Some(nl) => {
            let line = &buf[..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            Ok((line, nl + 1))
        }
        None if buf.len() > limit => Err(ParseError::LineTooLong),
        None => Err(ParseError::Incomplete),
    }
}

/// Most arguments a fixed-arity classic command takes (cas: 6).
const MAX_ARGS: usize = 6;

/// Up to [`MAX_ARGS`] arguments and the total count (which may be larger).
struct Args<'a> {
    v: [&'a [u8]; MAX_ARGS],
    n: usize,
}

impl<'a> Args<'a> {
    fn collect(tokens: Tokens<'a>) -> Self {
        let mut v: [&'a [u8]; MAX_ARGS] = [b""; MAX_ARGS];
        let mut n = 0;
        for t in tokens {
            if let Some(slot) = v.get_mut(n) {
                *slot = t;
            }
            n += 1;
        }
        Args { v, n }
    }

    /// memcached's `set_noreply_maybe`: the last token is `noreply`.
    fn noreply(&self) -> bool {
        self.n > 0 && self.v.get(self.n - 1) == Some(&&b"noreply"[..])
    }
}

/// Parses one request from the front of `buf`.
///
/// On success returns the request and how many bytes of `buf` it used
/// (command line, and for storage commands the data block and its `\r\n`).
/// `max_value` is the largest data block accepted; larger ones are
/// [`ParseError::TooLarge`]. Command lines may end in `\r\n` or `\n`; data
/// blocks must end in `\r\n`.
pub fn parse(buf: &[u8], max_value: usize) -> Result<(Request<'_>, usize), ParseError> {
    let (line, line_len) = read_line(buf)?;
    let unknown = ParseError::UnknownCommand { consumed: line_len };
    let mut tokens = Tokens::new(line);
    let cmd = match tokens.next() {
        Some(cmd) if cmd.len() >= 2 => cmd,
        _ => return Err(unknown),
    };
    let client_error = |msg: &'static str, noreply: bool| ParseError::ClientError {
        msg,
        consumed: line_len,
        noreply,
    };

    let req = match cmd {
        b"get" | b"gets" | b"bget" => {
            if tokens.is_empty() {
                return Err(unknown);
            }
            check_keys(tokens).map_err(|m| client_error(m, false))?;
            Request::Get {
                keys: tokens,
                cas: cmd == b"gets",
            }
        }
        b"gat" | b"gats" => {
            let exptime = tokens.next().ok_or(unknown)?;
            let exptime = strtol(exptime).ok_or(client_error(msg::INVALID_EXPTIME, false))?;
            check_keys(tokens).map_err(|m| client_error(m, false))?;
            Request::Gat {
                exptime,
                keys: tokens,
                cas: cmd == b"gats",
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let command = match cmd {
                b"set" => StoreCommand::Set,
                b"add" => StoreCommand::Add,
                b"replace" => StoreCommand::Replace,
                b"append" => StoreCommand::Append,
                b"prepend" => StoreCommand::Prepend,
                _ => StoreCommand::Cas,
            };
            let cas_args = usize::from(command == StoreCommand::Cas);
            let a = Args::collect(tokens);
            if a.n != 4 + cas_args && a.n != 5 + cas_args {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let key = a.v[0];
            if key.len() > MAX_KEY_LEN {
                return Err(client_error(msg::BAD_FORMAT, noreply));
            }
            let bad = client_error(msg::BAD_FORMAT, noreply);
            let flags = strtoul(a.v[1]).ok_or(bad)?;
            let exptime = strtol(a.v[2]).ok_or(bad)?;
            let bytes = strtol(a.v[3])
                .and_then(|b| u64::try_from(b).ok())
                .filter(|&b| b <= MAX_DATA_LEN)
                .ok_or(bad)?;
            let cas = if cas_args == 1 {
                strtoull(a.v[4]).ok_or(bad)?
            } else {
                0
            };
            let key_at = key.as_ptr() as usize - buf.as_ptr() as usize;
            let unlink = command == StoreCommand::Set;
            let value = read_data(
                buf, line_len, bytes, max_value, noreply, unlink, key_at, key,
            )?;
            let req = Request::Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply,
            };
            return Ok((req, line_len + value.len() + 2));
        }
        b"delete" => {
            let a = Args::collect(tokens);
            if !(1..=3).contains(&a.n) {
                return Err(unknown);
            }
            let noreply = a.noreply();
            if a.n > 1 {
                let hold_is_zero = a.v[1] == b"0";
                let valid = (a.n == 2 && (hold_is_zero || noreply))
                    || (a.n == 3 && hold_is_zero && noreply);
                if !valid {
                    return Err(client_error(msg::DELETE_USAGE, noreply));
                }
            }
            let key = a.v[0];
            if key.len() > MAX_KEY_LEN {
                return Err(client_error(msg::BAD_FORMAT, noreply));
            }
            Request::Delete { key, noreply }
        }
        b"incr" | b"decr" => {
            let a = Args::collect(tokens);
            if a.n != 2 && a.n != 3 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let key = a.v[0];
            if key.len() > MAX_KEY_LEN {
                return Err(client_error(msg::BAD_FORMAT, noreply));
            }
            let delta = strtoull(a.v[1]).ok_or(client_error(msg::INVALID_DELTA, noreply))?;
            if cmd == b"incr" {
                Request::Incr {
                    key,
                    delta,
                    noreply,
                }
            } else {
                Request::Decr {
                    key,
                    delta,
                    noreply,
                }
            }
        }
        b"touch" => {
            let a = Args::collect(tokens);
            if a.n != 2 && a.n != 3 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let key = a.v[0];
            if key.len() > MAX_KEY_LEN {
                return Err(client_error(msg::BAD_FORMAT, noreply));
            }
            let exptime = strtol(a.v[1]).ok_or(client_error(msg::INVALID_EXPTIME, noreply))?;
            Request::Touch {
                key,
                exptime,
                noreply,
            }
        }
        b"flush_all" => {
            let a = Args::collect(tokens);
            if a.n > 2 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            // As memcached: a delay is parsed unless the only argument is
            // `noreply`; a second argument other than `noreply` is ignored.
            let delay = if a.n != usize::from(noreply) {
                strtol(a.v[0]).ok_or(client_error(msg::INVALID_EXPTIME, noreply))?
            } else {
                0
            };
            Request::FlushAll { delay, noreply }
        }
        b"verbosity" => {
            let a = Args::collect(tokens);
            if a.n != 1 && a.n != 2 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let level = strtoul(a.v[0]).ok_or(client_error(msg::BAD_FORMAT, noreply))?;
            Request::Verbosity { level, noreply }
        }
        b"cache_memlimit" => {
            let a = Args::collect(tokens);
            if a.n != 1 && a.n != 2 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let megabytes = strtoul(a.v[0]).ok_or(unknown)?;
            Request::CacheMemlimit { megabytes, noreply }
        }
        // As memcached: arguments after `version` and `quit` are ignored.
        b"version" => Request::Version,
        b"quit" => Request::Quit,
        b"stats" => Request::Stats { args: tokens },
        b"mn" => Request::MetaNoop,
        b"me" => return parse_meta_debug(tokens, line_len),
        b"mg" | b"md" | b"ma" | b"ms" => return parse_meta(buf, cmd, tokens, line_len, max_value),
        _ => {
            // memcached closes a connection that speaks HTTP to it: a line
            // it does not know whose last token starts with `HTTP/`.
            let family = matches!(cmd[0], b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't')
                || (cmd[0] == b'm' && cmd.len() == 2);
            if !family && tokens.last().is_some_and(|t| t.starts_with(b"HTTP/")) {
                return Err(ParseError::Close);
            }
            return Err(unknown);
        }
    };
    Ok((req, line_len))
}

fn check_keys(keys: Tokens<'_>) -> Result<(), &'static str> {
    for key in keys {
        if key.len() > MAX_KEY_LEN {
            return Err(msg::BAD_FORMAT);
        }
    }
    Ok(())
}

/// Reads the `bytes`-long data block after a `line_len`-byte command line.
#[allow(clippy::too_many_arguments)]
fn read_data<'a>(
    buf: &'a [u8],
    line_len: usize,
    bytes: u64,
    max_value: usize,
    noreply: bool,
    unlink: bool,
    key_at: usize,
    key: &[u8],
) -> Result<&'a [u8], ParseError> {
    let too_large = |swallow| ParseError::TooLarge {
        swallow,
        noreply,
        unlink,
        key_at,
        key_len: key.len(),
    };
    // `bytes <= MAX_DATA_LEN < usize::MAX / 2` on 64-bit targets; on 32-bit
    // ones an unrepresentable size is simply too large.
    let Ok(bytes) = usize::try_from(bytes) else {
        return Err(too_large(usize::MAX));
    };
    let total = line_len.saturating_add(bytes).saturating_add(2);
    if bytes > max_value {
        return Err(too_large(total));
    }
    if buf.len() < total {
        return Err(ParseError::Incomplete);
    }
    if &buf[line_len + bytes..total] != b"\r\n" {
        return Err(ParseError::ClientError {
            msg: msg::BAD_DATA_CHUNK,
            consumed: total,
            noreply,
        });
    }
    Ok(&buf[line_len..line_len + bytes])
}

/// Decodes standard base64 (with `=` padding), as meta commands' `b` flag
/// sends keys. `None` if malformed or empty.
pub fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if text.is_empty() || text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let quads = text.len() / 4;
    for (i, q) in text.chunks(4).enumerate() {
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    (!out.is_empty()).then_some(out)
}

/// Appends `data` in standard base64 with padding (meta `k` of a `b` key).
pub fn base64_encode(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// `me <key> [b]`: memcached's debug dump of one item.
fn parse_meta_debug(
    mut tokens: Tokens<'_>,
    line_len: usize,
) -> Result<(Request<'_>, usize), ParseError> {
    let bad = ParseError::ClientError {
        msg: msg::BAD_FORMAT,
        consumed: line_len,
        noreply: false,
    };
    let key = tokens
        .next()
        .filter(|k| k.len() <= MAX_KEY_LEN)
        .ok_or(bad)?;
    let key = if tokens.next() == Some(b"b") {
        MetaKey::Decoded(base64_decode(key).ok_or(bad)?)
    } else {
        MetaKey::Plain(key)
    };
    Ok((Request::MetaDebug { key }, line_len))
}

fn parse_meta<'a>(
    buf: &'a [u8],
    cmd: &[u8],
    mut tokens: Tokens<'a>,
    line_len: usize,
    max_value: usize,
) -> Result<(Request<'a>, usize), ParseError> {
    // Meta commands always report errors, even with the `q` flag.
    let client_error = |msg: &'static str| ParseError::ClientError {
        msg,
        consumed: line_len,
        noreply: false,
    };
    // Tokens as memcached counts them: command, key, flags, end of line.
    let ntokens = 2 + tokens.count();
    let key = tokens
        .next()
        .ok_or(ParseError::UnknownCommand { consumed: line_len })?;
    if key.len() > MAX_KEY_LEN {
        return Err(client_error(msg::BAD_FORMAT));
    }
    let decode = |flags: &MetaFlags<'_>| -> Result<MetaKey<'a>, &'static str> {
        if flags.base64 {
            base64_decode(key)
                .map(MetaKey::Decoded)
                .ok_or(msg::DECODING_KEY)
        } else {
            Ok(MetaKey::Plain(key))
        }
    };
    if cmd == b"ms" {
        if ntokens == 3 {
            return Err(client_error(msg::BAD_FORMAT));
        }
        if ntokens > MAX_META_TOKENS {
            return Err(client_error(msg::TOO_MANY_FLAGS_NO_ARE));
        }
        // A bad length is reported as memcached does, without swallowing.
        let bytes = tokens
            .next()
            .and_then(strtol)
            .and_then(|b| u64::try_from(b).ok())
            .filter(|&b| b <= MAX_DATA_LEN)
            .ok_or(client_error(msg::BAD_FORMAT))?;
        // From here on memcached knows the length: a rejected command
        // swallows its data block.
        let swallow = |msg: &'static str| ParseError::ClientError {
            msg,
            consumed: line_len.saturating_add(bytes as usize).saturating_add(2),
            noreply: false,
        };
        let flags = MetaFlags::parse(tokens.remainder(), msg::BAD_FORMAT).map_err(swallow)?;
        let key = decode(&flags).map_err(swallow)?;
        if flags.opaque_too_long() {
            return Err(swallow(msg::OPAQUE_TOO_LONG));
        }
        if !matches!(flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
            return Err(swallow(msg::INVALID_MODE));
        }
        let key_at = key_at(buf, &key);
        let value = read_data(
            buf,
            line_len,
            bytes,
            max_value,
            false,
            true,
            key_at,
            key.bytes(),
        )?;
        let used = line_len + value.len() + 2;
        return Ok((Request::MetaSet { key, value, flags }, used));
    }
    if ntokens > MAX_META_TOKENS {
        return Err(client_error(if cmd == b"mg" {
            msg::TOO_MANY_FLAGS
        } else {
            msg::TOO_MANY_FLAGS_NO_ARE
        }));
    }
    let flags = if cmd == b"mg" {
        MetaFlags::parse(tokens.remainder(), msg::BAD_FORMAT).map_err(client_error)?
    } else {
        MetaFlags::parse(tokens.remainder(), msg::BAD_FORMAT)
            .map_err(|_| client_error(msg::INVALID_OR_DUPLICATE_FLAG))?
    };
    let key = decode(&flags).map_err(|m| {
        client_error(if cmd == b"mg" {
            m
        } else {
            msg::INVALID_OR_DUPLICATE_FLAG
        })
    })?;
    if flags.opaque_too_long() {
        return Err(client_error(msg::OPAQUE_TOO_LONG));
    }
    let req = match cmd {
        b"mg" => Request::MetaGet { key, flags },
        b"md" => Request::MetaDelete { key, flags },
        _ => {
            if !matches!(flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) {
                return Err(client_error(msg::INVALID_MA_MODE));
            }
            Request::MetaArithmetic { key, flags }
        }
    };
    Ok((req, line_len))
}

/// Where a plain key starts in `buf` (for unlinking after an oversized
/// value); a decoded key has no position and is carried in the error.
fn key_at(buf: &[u8], key: &MetaKey<'_>) -> usize {
    match key {
        MetaKey::Plain(k) => k.as_ptr() as usize - buf.as_ptr() as usize,
        MetaKey::Decoded(_) => usize::MAX,
    }
}

// ---------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------

/// An item's time to live, from memcached's exptime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ttl {
    /// Never expires (exptime 0).
    Never,
    /// Already expired (negative exptime, or an absolute time not after now).
    Expired,
    /// Expires after this many seconds (at least 1).
    Secs(u32),
}

/// Memcached's exptime rules: 0 never expires, negative is expired at once,
/// up to 30 days ([`MAX_RELATIVE_EXPTIME`]) is relative, anything larger is
/// an absolute unix time, compared with `now_unix`. Ttls beyond `u32::MAX`
/// seconds are clamped.
pub fn ttl_from_exptime(exptime: i64, now_unix: u64) -> Ttl {
    match exptime {
        0 => Ttl::Never,
        e if e < 0 => Ttl::Expired,
        e if e <= MAX_RELATIVE_EXPTIME => Ttl::Secs(e as u32),
        e => {
            let at = e as u64;
            if at <= now_unix {
                Ttl::Expired
            } else {
                Ttl::Secs(u32::try_from(at - now_unix).unwrap_or(u32::MAX))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// The fixed one-line replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    End,
    Error,
    Reset,
}

impl Reply {
    /// The reply line including `\r\n`.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Reply::Stored => b"STORED\r\n",
            Reply::NotStored => b"NOT_STORED\r\n",
            Reply::Exists => b"EXISTS\r\n",
            Reply::NotFound => b"NOT_FOUND\r\n",
            Reply::Deleted => b"DELETED\r\n",
            Reply::Touched => b"TOUCHED\r\n",
            Reply::Ok => b"OK\r\n",
            Reply::End => b"END\r\n",
            Reply::Error => b"ERROR\r\n",
            Reply::Reset => b"RESET\r\n",
        }
    }

    /// Appends the reply line.
    pub fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

/// Appends the decimal form of `v` without going through `fmt`.
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends the decimal form of `v`.
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Appends `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n` (`cas` for
/// `gets`/`gats`). Follow the last one with [`write_end`].
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + data.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, u64::from(flags));
    out.push(b' ');
    push_u64(out, data.len() as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        push_u64(out, cas);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `END\r\n`.
pub fn write_end(out: &mut Vec<u8>) {
    Reply::End.write(out);
}

/// Appends the `incr`/`decr` reply: the new value.
pub fn write_number(out: &mut Vec<u8>, v: u64) {
    push_u64(out, v);
    out.extend_from_slice(b"\r\n");
}

/// Appends `CLIENT_ERROR <msg>\r\n`.
pub fn write_client_error(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"CLIENT_ERROR ");
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `SERVER_ERROR <msg>\r\n`.
pub fn write_server_error(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `VERSION <v>\r\n`.
pub fn write_version(out: &mut Vec<u8>, version: &str) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <value>\r\n`. End the list with [`write_end`].
pub fn write_stat(out: &mut Vec<u8>, name: &str, value: impl fmt::Display) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// Status codes of meta replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// `VA <size>`: a value follows; write it with [`write_meta_data`].
    Value(usize),
    /// `HD`: success, no value.
    Header,
    /// `EN`: miss (mg).
    Miss,
    /// `NF`: not found.
    NotFound,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: cas mismatch.
    Exists,
    /// `MN`: end of a noop.
    Noop,
}

/// Starts a meta reply line: `VA <size>`, `HD`, `EN`, `NF`, `NS`, `EX` or
/// `MN`. Add flags with [`write_meta_flag`] / [`write_meta_flag_num`], then
/// [`write_meta_end`].
pub fn write_meta_status(out: &mut Vec<u8>, status: MetaStatus) {
    let code: &[u8] = match status {
        MetaStatus::Value(_) => b"VA",
        MetaStatus::Header => b"HD",
        MetaStatus::Miss => b"EN",
        MetaStatus::NotFound => b"NF",
        MetaStatus::NotStored => b"NS",
        MetaStatus::Exists => b"EX",
        MetaStatus::Noop => b"MN",
    };
    out.extend_from_slice(code);
    if let MetaStatus::Value(len) = status {
        out.push(b' ');
        push_u64(out, len as u64);
    }
}

/// Appends ` <flag><value>` (e.g. `k` and the key, `O` and the opaque).
pub fn write_meta_flag(out: &mut Vec<u8>, flag: u8, value: &[u8]) {
    out.push(b' ');
    out.push(flag);
    out.extend_from_slice(value);
}

/// Appends ` <flag><number>` (e.g. `f0`, `t-1`, `c42`).
pub fn write_meta_flag_num(out: &mut Vec<u8>, flag: u8, value: i64) {
    out.push(b' ');
    out.push(flag);
    push_i64(out, value);
}

/// Ends a meta reply line.
pub fn write_meta_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// Appends a `VA` reply's data block and its `\r\n`.
pub fn write_meta_data(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

// ---------------------------------------------------------------------------
// Request encoding
// ---------------------------------------------------------------------------

fn push_tokens(out: &mut Vec<u8>, tokens: Tokens<'_>) {
    for t in tokens {
        out.push(b' ');
        out.extend_from_slice(t);
    }
}

/// A meta key as sent: a decoded key is encoded again (its `b` flag is
/// among the flags).
fn push_meta_key(out: &mut Vec<u8>, key: &MetaKey<'_>) {
    match key {
        MetaKey::Plain(k) => out.extend_from_slice(k),
        MetaKey::Decoded(k) => base64_encode(out, k),
    }
}

fn push_noreply(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

impl Request<'_> {
    /// Appends the request in canonical wire form (single spaces, `\r\n`),
    /// which [`parse`] reads back as an equal request. `delete`'s legacy
    /// `0` is not written.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Request::Get { keys, cas } => {
                out.extend_from_slice(if cas { b"gets" } else { b"get" });
                push_tokens(out, keys);
            }
            Request::Gat { exptime, keys, cas } => {
                out.extend_from_slice(if cas { b"gats " } else { b"gat " });
                push_i64(out, exptime);
                push_tokens(out, keys);
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
                out.extend_from_slice(command.name().as_bytes());
                out.push(b' ');
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, u64::from(flags));
                out.push(b' ');
                push_i64(out, exptime);
                out.push(b' ');
                push_u64(out, value.len() as u64);
                if command == StoreCommand::Cas {
                    out.push(b' ');
                    push_u64(out, cas);
                }
                push_noreply(out, noreply);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Request::Delete { key, noreply } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                push_noreply(out, noreply);
            }
            Request::Incr {
                key,
                delta,
                noreply,
            }
            | Request::Decr {
                key,
                delta,
                noreply,
            } => {
                let name: &[u8] = if matches!(self, Request::Incr { .. }) {
                    b"incr "
                } else {
                    b"decr "
                };
                out.extend_from_slice(name);
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, delta);
                push_noreply(out, noreply);
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                out.extend_from_slice(b"touch ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_i64(out, exptime);
                push_noreply(out, noreply);
            }
            Request::FlushAll { delay, noreply } => {
                out.extend_from_slice(b"flush_all");
                if delay != 0 {
                    out.push(b' ');
                    push_i64(out, delay);
                }
                push_noreply(out, noreply);
            }
            Request::Version => out.extend_from_slice(b"version"),
            Request::Verbosity { level, noreply } => {
                out.extend_from_slice(b"verbosity ");
                push_u64(out, u64::from(level));
                push_noreply(out, noreply);
            }
            Request::Stats { args } => {
                out.extend_from_slice(b"stats");
                push_tokens(out, args);
            }
            Request::Quit => out.extend_from_slice(b"quit"),
            Request::CacheMemlimit { megabytes, noreply } => {
                out.extend_from_slice(b"cache_memlimit ");
                push_u64(out, u64::from(megabytes));
                push_noreply(out, noreply);
            }
            Request::MetaDebug { ref key } => {
                out.extend_from_slice(b"me ");
                push_meta_key(out, key);
            }
            Request::MetaGet { ref key, ref flags }
            | Request::MetaDelete { ref key, ref flags }
            | Request::MetaArithmetic { ref key, ref flags } => {
                let name: &[u8] = match self {
                    Request::MetaGet { .. } => b"mg ",
                    Request::MetaDelete { .. } => b"md ",
                    _ => b"ma ",
                };
                out.extend_from_slice(name);
                push_meta_key(out, key);
                push_tokens(out, flags.tokens());
            }
            Request::MetaSet {
                ref key,
                value,
                ref flags,
            } => {
                out.extend_from_slice(b"ms ");
                push_meta_key(out, key);
                out.push(b' ');
                push_u64(out, value.len() as u64);
                push_tokens(out, flags.tokens());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Request::MetaNoop => out.extend_from_slice(b"mn"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests;

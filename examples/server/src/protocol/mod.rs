//! The memcache ASCII protocol as memcached 1.6.18 speaks it: an incremental
//! command parser (`parse.rs`) and the reply encoders
//! (`compose.rs`), independent of networking and of storage.
//! What each command *does* is the executor's (`crate::executor`).
//!
//! # What this module owns
//!
//! * [`parse()`]: turns the bytes at the front of a connection's read buffer
//!   into one [`Command`] plus the number of bytes it used, or says why it
//!   cannot ([`ParseError`]): more bytes are needed, the line is too long, or
//!   the request is malformed, in which case the error knows memcached 1.6's
//!   exact reply and how many bytes the caller must drop (for an oversized
//!   value, how many bytes to *swallow*, which may not have arrived yet).
//! * The encoders: `write_*` functions and [`Reply`] append memcached's
//!   replies to a `Vec<u8>`; [`Command::encode`] writes a command (for
//!   clients and tests).
//! * [`exptime_ttl`]: memcached's exptime rules (0 never expires, negative
//!   is already expired, more than 30 days is an absolute unix time) as the
//!   core's [`Ttl`].
//!
//! [`binary`] speaks the binary protocol (a connection whose first byte is
//! its magic `0x80` speaks it from then on, as in memcached).
//!
//! Classic commands: `get gets bget gat gats set add replace append prepend
//! cas delete incr decr touch flush_all version verbosity stats
//! cache_memlimit lru_crawler shutdown refresh_certs quit` (of `lru_crawler`, `metadump`
//! and `crawl`). Meta commands: `mg ms md ma mn me`, with their
//! flags parsed into [`MetaFlags`] (keys in base64 with `b` decoded into
//! [`MetaKey`]); the executor decides what each flag means.
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
//!   [`ValueLimit`] is [`ParseError::TooLarge`] as soon as its command line
//!   is complete, before any of the value needs to be buffered.
//! * Know nothing of sockets, clocks or the cache: the caller passes the
//!   current time to [`exptime_ttl`] and carries out commands itself.
//!
//! # Using it
//!
//! ```
//! use segcache_server::protocol::{parse, Command, ParseError};
//!
//! let buf = b"set k 0 0 2\r\nhi\r\nget k\r\n";
//! let (cmd, used) = parse(buf, 1024).unwrap();
//! assert!(matches!(cmd, Command::Store { key: b"k", value: b"hi", .. }));
//! let (cmd, _) = parse(&buf[used..], 1024).unwrap();
//! assert!(matches!(cmd, Command::Get { cas: false, .. }));
//! assert_eq!(parse(b"get k", 1024), Err(ParseError::Incomplete));
//! ```
//!
//! On an error other than `Incomplete`, write [`ParseError::write_reply`],
//! then drop [`ParseError::consumed`] bytes (for `TooLarge`, the part of
//! `swallow` not yet received must be dropped as it arrives), or close the
//! connection if [`ParseError::closes_connection`].

use segcache::{StoreMode, Ttl};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

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

/// A parsed command. Keys and values borrow from the parsed buffer (a
/// base64 meta key is decoded into its own buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
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
    /// A get-family line with a key longer than [`MAX_KEY_LEN`]: memcached
    /// still reads the keys before it (and with `gat`'s `exptime` touches
    /// them), then answers only `CLIENT_ERROR bad command line format`.
    KeyTooLong {
        exptime: Option<i64>,
        keys: Tokens<'a>,
    },
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes>
    /// [noreply]` or `cas <key> <flags> <exptime> <bytes> <cas unique>
    /// [noreply]` (mode `Set` with `cas: Some`), with its data block.
    Store {
        mode: StoreMode,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        value: &'a [u8],
        cas: Option<u64>,
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
    /// `shutdown [graceful]`: stop the server, if it lets clients;
    /// `known` is false for any other arguments (memcached refuses them
    /// only when shutdown is enabled).
    Shutdown { known: bool },
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `refresh_certs [noreply]`: load the TLS certificate and key again
    /// (memcached's, in its TLS builds).
    RefreshCerts { noreply: bool },
    /// `lru_crawler metadump all|hash|<class ids with 1>`: one line per
    /// live item of the segments `from..to` of the cache's walk
    /// ([`segcache::Request::Walk`]), then `END` after the last. The parser
    /// gives `0..u32::MAX` (everything: segcache has one class, 1); the
    /// worker's budget cuts it into slices of segments.
    Metadump { from: u32, to: u32 },
    /// `lru_crawler crawl all|<class ids with 1>`: reclaim expired items
    /// now (segcache's segments expire whole, on their own, every second;
    /// this frees the ones due at once).
    Crawl,
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
    pub fn set_mode(&self) -> StoreMode {
        match self.mode {
            Some(b'E') => StoreMode::Add,
            Some(b'A') => StoreMode::Append,
            Some(b'P') => StoreMode::Prepend,
            Some(b'R') => StoreMode::Replace,
            _ => StoreMode::Set,
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
    /// `lru_crawler` naming slab classes segcache does not have (it has
    /// one, class 1): reply `BADCLASS invalid class id`, as memcached does
    /// for a class it does not have.
    BadClass { consumed: usize },
    /// Malformed request: reply `CLIENT_ERROR <msg>` unless `noreply`
    /// (memcached keeps quiet on errors of noreply commands too). For a
    /// storage command whose line is malformed, only the line is consumed,
    /// as memcached does: the data block is then read as a command.
    ClientError {
        msg: &'static str,
        consumed: usize,
        noreply: bool,
    },
    /// The value is larger than the [`ValueLimit`]: reply `SERVER_ERROR object too
    /// large for cache` unless `noreply`, and discard `swallow` bytes from
    /// the start of the buffer (command line, value and its `\r\n`), some of
    /// which may not have arrived yet. Memcached also unlinks the key's old
    /// value after an oversized `set` (see [`ParseError::too_large_key`]),
    /// so stale data does not survive a failed overwrite.
    TooLarge {
        swallow: usize,
        noreply: bool,
        /// The key memcached unlinks (`set`, and `ms` in any mode).
        unlink: Option<Unlink>,
    },
}

/// How large a store's data block may be: at most `max_value` bytes, and
/// small enough that the item (its header, the client flags, the key and
/// the value) fits one segment of `segment_size` bytes
/// ([`segcache::max_value_len`]); a larger one is [`ParseError::TooLarge`],
/// so it is refused (and, for `set` and `ms`, the old item unlinked) the
/// same way whichever bound it passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueLimit {
    pub max_value: usize,
    pub segment_size: usize,
}

impl ValueLimit {
    /// The largest value under a `key_len`-byte key with client `flags`.
    #[inline]
    pub fn for_key(self, key_len: usize, flags: u32) -> usize {
        self.max_value
            .min(segcache::max_value_len(self.segment_size, key_len, flags))
    }
}

/// `max_value` alone, for segments large enough not to bind.
impl From<usize> for ValueLimit {
    fn from(max_value: usize) -> Self {
        ValueLimit {
            max_value,
            segment_size: usize::MAX,
        }
    }
}

/// Where the key of an oversized store lies in the parsed buffer, as sent:
/// base64 when `base64` (an `ms ... b`), to be decoded before the unlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlink {
    pub key_at: usize,
    pub key_len: usize,
    pub base64: bool,
}

impl ParseError {
    /// Bytes the failed request occupied, to drop before parsing again.
    /// `None` for `Incomplete` (keep the bytes, read more) and
    /// `LineTooLong` (close the connection). For `TooLarge` this is
    /// `swallow`, which may exceed the buffer.
    pub fn consumed(&self) -> Option<usize> {
        match *self {
            ParseError::Incomplete | ParseError::LineTooLong | ParseError::Close => None,
            ParseError::UnknownCommand { consumed } | ParseError::BadClass { consumed } => {
                Some(consumed)
            }
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
            ParseError::BadClass { .. } => out.extend_from_slice(b"BADCLASS invalid class id\r\n"),
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
    /// unlinked; `buf` is the buffer that was parsed. A base64 key comes
    /// decoded (`None` if it does not decode: no key was named).
    pub fn too_large_key<'b>(&self, buf: &'b [u8]) -> Option<Cow<'b, [u8]>> {
        let ParseError::TooLarge {
            unlink: Some(at), ..
        } = *self
        else {
            return None;
        };
        let key = buf.get(at.key_at..at.key_at.checked_add(at.key_len)?)?;
        if at.base64 {
            base64_decode(key).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(key))
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
            ParseError::BadClass { .. } => f.write_str("invalid class id"),
            ParseError::ClientError { msg, .. } => write!(f, "client error: {msg}"),
            ParseError::TooLarge { swallow, .. } => {
                write!(f, "object too large ({swallow} bytes to swallow)")
            }
        }
    }
}

impl std::error::Error for ParseError {}

// ---------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------

/// memcached's exptime rules as the core's [`Ttl`]: 0 never expires,
/// negative is expired at once, up to 30 days ([`MAX_RELATIVE_EXPTIME`]) is
/// relative, anything larger is an absolute unix time compared with
/// `now_unix` (not after it: expired). A TTL beyond the core's
/// [`segcache::MAX_TTL`] is clamped to it (the item may go early, as a
/// cache's may).
pub fn exptime_ttl(exptime: i64, now_unix: u64) -> Ttl {
    let secs = match exptime {
        0 => return Ttl::Never,
        e if e < 0 => return Ttl::Expired,
        e if e <= MAX_RELATIVE_EXPTIME => e as u64,
        e => match (e as u64).checked_sub(now_unix) {
            Some(left) if left > 0 => left,
            _ => return Ttl::Expired,
        },
    };
    Ttl::After(Duration::from_secs(secs.min(u64::from(segcache::MAX_TTL))))
}

pub mod binary;
mod compose;
mod parse;

pub use compose::*;
pub use parse::{base64_decode, base64_encode, parse, strtol, strtoul, strtoull};

#[cfg(test)]
mod tests;

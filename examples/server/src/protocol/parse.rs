//! Parsing: turns the bytes at the front of a connection's read buffer into
//! one [`Command`] and the number of bytes it used, or a [`ParseError`]
//! that knows memcached 1.6.18's reply and how many bytes to drop.
//!
//! Numbers are read as memcached reads them (`safe_strtoull`,
//! `safe_strtoul`, `safe_strtol`: leading white space, a sign, 32-bit
//! fields truncated), meta flags as its flag pre-parser checks them, and a
//! rejected `ms` whose length is known swallows its data block.
//!
//! Never panics and never allocates on the hot path (a base64 meta key is
//! the one exception); never scans more than a bounded line.

use super::*;

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
/// `limit` bounds a store's data block (see [`ValueLimit`]; a plain
/// `usize` is a `max_value` alone); larger ones are
/// [`ParseError::TooLarge`]. Command lines may end in `\r\n` or `\n`; data
/// blocks must end in `\r\n`.
pub fn parse(buf: &[u8], limit: impl Into<ValueLimit>) -> Result<(Command<'_>, usize), ParseError> {
    let limit = limit.into();
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
            match keys_before_too_long(line, tokens) {
                Some(keys) => Command::KeyTooLong {
                    exptime: None,
                    keys,
                },
                None => Command::Get {
                    keys: tokens,
                    cas: cmd == b"gets",
                },
            }
        }
        b"gat" | b"gats" => {
            let exptime = tokens.next().ok_or(unknown)?;
            let exptime = strtol(exptime).ok_or(client_error(msg::INVALID_EXPTIME, false))?;
            match keys_before_too_long(line, tokens) {
                Some(keys) => Command::KeyTooLong {
                    exptime: Some(exptime),
                    keys,
                },
                None => Command::Gat {
                    exptime,
                    keys: tokens,
                    cas: cmd == b"gats",
                },
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let mode = match cmd {
                b"add" => StoreMode::Add,
                b"replace" => StoreMode::Replace,
                b"append" => StoreMode::Append,
                b"prepend" => StoreMode::Prepend,
                _ => StoreMode::Set,
            };
            let cas_args = usize::from(cmd == b"cas");
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
                Some(strtoull(a.v[4]).ok_or(bad)?)
            } else {
                None
            };
            // memcached unlinks the old value after an oversized `set` only.
            let unlink = (cmd == b"set").then(|| Unlink {
                key_at: key.as_ptr() as usize - buf.as_ptr() as usize,
                key_len: key.len(),
                base64: false,
            });
            let max = limit.for_key(key.len(), flags);
            let value = read_data(buf, line_len, bytes, max, noreply, unlink)?;
            let req = Command::Store {
                mode,
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
            Command::Delete { key, noreply }
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
                Command::Incr {
                    key,
                    delta,
                    noreply,
                }
            } else {
                Command::Decr {
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
            Command::Touch {
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
            Command::FlushAll { delay, noreply }
        }
        b"verbosity" => {
            let a = Args::collect(tokens);
            if a.n != 1 && a.n != 2 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let level = strtoul(a.v[0]).ok_or(client_error(msg::BAD_FORMAT, noreply))?;
            Command::Verbosity { level, noreply }
        }
        b"cache_memlimit" => {
            let a = Args::collect(tokens);
            if a.n != 1 && a.n != 2 {
                return Err(unknown);
            }
            let noreply = a.noreply();
            let megabytes = strtoul(a.v[0]).ok_or(unknown)?;
            Command::CacheMemlimit { megabytes, noreply }
        }
        b"refresh_certs" => {
            let a = Args::collect(tokens);
            if a.n > 1 || (a.n == 1 && !a.noreply()) {
                return Err(unknown);
            }
            Command::RefreshCerts {
                noreply: a.noreply(),
            }
        }
        b"lru_crawler" => {
            let a = Args::collect(tokens);
            if a.n != 2 || !matches!(a.v[0], b"metadump" | b"crawl") {
                return Err(unknown);
            }
            // Every item is in class 1: the command must name it.
            let class_one = match a.v[1] {
                b"all" => true,
                b"hash" => a.v[0] == b"metadump",
                ids => ids.split(|&b| b == b',').any(|c| strtoul(c) == Some(1)),
            };
            if !class_one {
                return Err(ParseError::BadClass { consumed: line_len });
            }
            if a.v[0] == b"crawl" {
                Command::Crawl
            } else {
                Command::Metadump {
                    from: 0,
                    to: u32::MAX,
                }
            }
        }
        // memcached 1.6.18 ignores arguments here, but memccapable (which
        // tells servers apart by their version number) requires ERROR from
        // a server that is not a recent memcached: so do older memcacheds.
        b"version" if tokens.is_empty() => Command::Version,
        b"quit" if tokens.is_empty() => Command::Quit,
        b"shutdown" => {
            let a = Args::collect(tokens);
            Command::Shutdown {
                known: a.n == 0 || (a.n == 1 && a.v[0] == b"graceful"),
            }
        }
        b"stats" => Command::Stats { args: tokens },
        b"mn" => Command::MetaNoop,
        b"me" => return parse_meta_debug(tokens, line_len),
        b"mg" | b"md" | b"ma" | b"ms" => return parse_meta(buf, cmd, tokens, line_len, limit),
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

/// If a key of a get-family line is too long: the keys before it (of
/// `line`), which memcached still reads (and `gat` touches).
fn keys_before_too_long<'a>(line: &'a [u8], keys: Tokens<'a>) -> Option<Tokens<'a>> {
    let bad = keys.into_iter().find(|k| k.len() > MAX_KEY_LEN)?;
    let start = keys.remainder().as_ptr() as usize - line.as_ptr() as usize;
    let end = bad.as_ptr() as usize - line.as_ptr() as usize;
    Some(Tokens::new(&line[start..end]))
}

/// Reads the `bytes`-long data block after a `line_len`-byte command line
/// (`unlink`: the key to unlink if the value is too large).
fn read_data(
    buf: &[u8],
    line_len: usize,
    bytes: u64,
    max_value: usize,
    noreply: bool,
    unlink: Option<Unlink>,
) -> Result<&[u8], ParseError> {
    let too_large = |swallow| ParseError::TooLarge {
        swallow,
        noreply,
        unlink,
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
    if text.is_empty() || !text.len().is_multiple_of(4) {
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
) -> Result<(Command<'_>, usize), ParseError> {
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
    Ok((Command::MetaDebug { key }, line_len))
}

fn parse_meta<'a>(
    buf: &'a [u8],
    cmd: &[u8],
    mut tokens: Tokens<'a>,
    line_len: usize,
    limit: ValueLimit,
) -> Result<(Command<'a>, usize), ParseError> {
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
        let token = key;
        let key = decode(&flags).map_err(swallow)?;
        if flags.opaque_too_long() {
            return Err(swallow(msg::OPAQUE_TOO_LONG));
        }
        if !matches!(flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
            return Err(swallow(msg::INVALID_MODE));
        }
        // The key as sent (base64 or not) is what an unlink decodes.
        let key_at = token.as_ptr() as usize - buf.as_ptr() as usize;
        let unlink = Some(Unlink {
            key_at,
            key_len: token.len(),
            base64: flags.base64,
        });
        let max = limit.for_key(key.bytes().len(), flags.client_flags.unwrap_or(0));
        let value = read_data(buf, line_len, bytes, max, false, unlink)?;
        let used = line_len + value.len() + 2;
        return Ok((Command::MetaSet { key, value, flags }, used));
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
        b"mg" => Command::MetaGet { key, flags },
        b"md" => Command::MetaDelete { key, flags },
        _ => {
            if !matches!(flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) {
                return Err(client_error(msg::INVALID_MA_MODE));
            }
            Command::MetaArithmetic { key, flags }
        }
    };
    Ok((req, line_len))
}

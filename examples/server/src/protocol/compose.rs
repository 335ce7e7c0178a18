//! Composing: memcached's replies appended to a `Vec<u8>` (the `write_*`
//! functions, [`Reply`], [`MetaStatus`]), and requests in canonical wire
//! form ([`Command::encode`], for clients and tests).
//!
//! Knows nothing of the cache: the executor decides which reply a command
//! gets; this module only spells it.

use super::*;
use std::fmt;

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
    #[inline]
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
    #[inline]
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

impl Command<'_> {
    /// Appends the request in canonical wire form (single spaces, `\r\n`),
    /// which [`parse`] reads back as an equal request. `delete`'s legacy
    /// `0` is not written.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Command::Get { keys, cas } => {
                out.extend_from_slice(if cas { b"gets" } else { b"get" });
                push_tokens(out, keys);
            }
            Command::Gat { exptime, keys, cas } => {
                out.extend_from_slice(if cas { b"gats " } else { b"gat " });
                push_i64(out, exptime);
                push_tokens(out, keys);
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
                let name = if cas.is_some() { "cas" } else { mode.name() };
                out.extend_from_slice(name.as_bytes());
                out.push(b' ');
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, u64::from(flags));
                out.push(b' ');
                push_i64(out, exptime);
                out.push(b' ');
                push_u64(out, value.len() as u64);
                if let Some(cas) = cas {
                    out.push(b' ');
                    push_u64(out, cas);
                }
                push_noreply(out, noreply);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Command::KeyTooLong { exptime, keys } => {
                match exptime {
                    Some(e) => {
                        out.extend_from_slice(b"gat ");
                        push_i64(out, e);
                    }
                    None => out.extend_from_slice(b"get"),
                }
                push_tokens(out, keys);
                out.push(b' ');
                out.extend_from_slice(&[b'k'; MAX_KEY_LEN + 1]);
            }
            Command::Delete { key, noreply } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                push_noreply(out, noreply);
            }
            Command::Incr {
                key,
                delta,
                noreply,
            }
            | Command::Decr {
                key,
                delta,
                noreply,
            } => {
                let name: &[u8] = if matches!(self, Command::Incr { .. }) {
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
            Command::Touch {
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
            Command::FlushAll { delay, noreply } => {
                out.extend_from_slice(b"flush_all");
                if delay != 0 {
                    out.push(b' ');
                    push_i64(out, delay);
                }
                push_noreply(out, noreply);
            }
            Command::Version => out.extend_from_slice(b"version"),
            Command::Verbosity { level, noreply } => {
                out.extend_from_slice(b"verbosity ");
                push_u64(out, u64::from(level));
                push_noreply(out, noreply);
            }
            Command::Stats { args } => {
                out.extend_from_slice(b"stats");
                push_tokens(out, args);
            }
            Command::Quit => out.extend_from_slice(b"quit"),
            Command::Shutdown { known } => {
                out.extend_from_slice(if known { b"shutdown" } else { b"shutdown now" })
            }
            Command::RefreshCerts { noreply } => {
                out.extend_from_slice(b"refresh_certs");
                push_noreply(out, noreply);
            }
            Command::CacheMemlimit { megabytes, noreply } => {
                out.extend_from_slice(b"cache_memlimit ");
                push_u64(out, u64::from(megabytes));
                push_noreply(out, noreply);
            }
            Command::MetaDebug { ref key } => {
                out.extend_from_slice(b"me ");
                push_meta_key(out, key);
                // `me` has no flags to carry `b`: it follows the key.
                if let MetaKey::Decoded(_) = key {
                    out.extend_from_slice(b" b");
                }
            }
            Command::MetaGet { ref key, ref flags }
            | Command::MetaDelete { ref key, ref flags }
            | Command::MetaArithmetic { ref key, ref flags } => {
                let name: &[u8] = match self {
                    Command::MetaGet { .. } => b"mg ",
                    Command::MetaDelete { .. } => b"md ",
                    _ => b"ma ",
                };
                out.extend_from_slice(name);
                push_meta_key(out, key);
                push_tokens(out, flags.tokens());
            }
            Command::MetaSet {
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
            Command::MetaNoop => out.extend_from_slice(b"mn"),
            Command::Crawl => out.extend_from_slice(b"lru_crawler crawl all"),
            Command::Metadump { .. } => out.extend_from_slice(b"lru_crawler metadump all"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

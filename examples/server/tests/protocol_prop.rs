//! Property tests for the memcache protocol parser: encoded requests parse
//! back to themselves (whole, pipelined, and arriving in arbitrary chunks),
//! and arbitrary input never panics, always makes progress, and gives the
//! same answer whatever more bytes follow.

use proptest::prelude::*;
use segcache::StoreMode;
use segcache_server::protocol::{msg, parse, Command, MetaFlags, MetaKey, ParseError, Tokens};

const MAX_VALUE: usize = 4096;

/// An owned request, from which a borrowed [`Command`] is built.
#[derive(Debug, Clone)]
enum Model {
    Get(Vec<Vec<u8>>, bool),
    Gat(i64, Vec<Vec<u8>>, bool),
    Store {
        mode: StoreMode,
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        value: Vec<u8>,
        cas: Option<u64>,
        noreply: bool,
    },
    Delete(Vec<u8>, bool),
    Incr(Vec<u8>, u64, bool),
    Decr(Vec<u8>, u64, bool),
    Touch(Vec<u8>, i64, bool),
    FlushAll(i64, bool),
    Version,
    Verbosity(u32, bool),
    Stats(Vec<u8>),
    Quit,
    MetaGet(Vec<u8>, Vec<u8>),
    MetaSet(Vec<u8>, Vec<u8>, Vec<u8>),
    MetaDelete(Vec<u8>, Vec<u8>),
    MetaArith(Vec<u8>, Vec<u8>),
    MetaNoop,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(0x21u8..=0x7e, 1..16),
        1 => prop::collection::vec(0x21u8..=0x7e, 240..=250),
    ]
    // "noreply" as the last token means noreply, in memcached as here
    .prop_filter("not noreply", |k| k != b"noreply")
}

/// Exptimes as memcached reads them: 32-bit.
fn exptime() -> impl Strategy<Value = i64> {
    any::<i32>().prop_map(i64::from)
}

fn keys(min: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(key(), min..8)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(prop::sample::select(b"\r\n x".to_vec()), 0..16),
        prop::collection::vec(any::<u8>(), MAX_VALUE..=MAX_VALUE),
    ]
}

/// Space-joined meta flag tokens with distinct letters.
fn meta_flags(modes: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    let token = (
        prop::sample::select(b"vftcksqhlOTNRFCDJIMuPL".to_vec()),
        exptime(),
        any::<u64>(),
        any::<u32>(),
        "[a-zA-Z0-9]{0,31}",
        prop::sample::select(modes.to_vec()),
    )
        .prop_map(|(letter, i, u, f, opaque, mode)| {
            let mut t = vec![letter];
            match letter {
                b'T' | b'N' | b'R' => t.extend_from_slice(i.to_string().as_bytes()),
                b'C' | b'D' | b'J' => t.extend_from_slice(u.to_string().as_bytes()),
                b'F' => t.extend_from_slice(f.to_string().as_bytes()),
                b'O' => t.extend_from_slice(opaque.as_bytes()),
                b'M' => t.push(mode),
                _ => {}
            }
            t
        });
    prop::collection::vec(token, 0..10).prop_map(|tokens| {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for t in tokens {
            if seen.contains(&t[0]) {
                continue;
            }
            seen.push(t[0]);
            if !out.is_empty() {
                out.push(b' ');
            }
            out.extend_from_slice(&t);
        }
        out
    })
}

/// A store mode and whether it is a `cas`.
fn store_command() -> impl Strategy<Value = (StoreMode, bool)> {
    prop::sample::select(vec![
        (StoreMode::Set, false),
        (StoreMode::Add, false),
        (StoreMode::Replace, false),
        (StoreMode::Append, false),
        (StoreMode::Prepend, false),
        (StoreMode::Set, true),
    ])
}

fn model() -> impl Strategy<Value = Model> {
    prop_oneof![
        (keys(1), any::<bool>()).prop_map(|(k, c)| Model::Get(k, c)),
        (exptime(), keys(0), any::<bool>()).prop_map(|(e, k, c)| Model::Gat(e, k, c)),
        (
            store_command(),
            key(),
            any::<u32>(),
            exptime(),
            value(),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(
                |((mode, is_cas), key, flags, exptime, value, cas, noreply)| {
                    Model::Store {
                        mode,
                        key,
                        flags,
                        exptime,
                        value,
                        cas: is_cas.then_some(cas),
                        noreply,
                    }
                }
            ),
        (key(), any::<bool>()).prop_map(|(k, n)| Model::Delete(k, n)),
        (key(), any::<u64>(), any::<bool>()).prop_map(|(k, d, n)| Model::Incr(k, d, n)),
        (key(), any::<u64>(), any::<bool>()).prop_map(|(k, d, n)| Model::Decr(k, d, n)),
        (key(), exptime(), any::<bool>()).prop_map(|(k, e, n)| Model::Touch(k, e, n)),
        (exptime(), any::<bool>()).prop_map(|(d, n)| Model::FlushAll(d, n)),
        Just(Model::Version),
        (any::<u32>(), any::<bool>()).prop_map(|(l, n)| Model::Verbosity(l, n)),
        "( [a-z0-9_]{1,10}){0,3}".prop_map(|s| Model::Stats(s.into_bytes())),
        Just(Model::Quit),
        (key(), meta_flags(b"ESAPR")).prop_map(|(k, f)| Model::MetaGet(k, f)),
        (key(), value(), meta_flags(b"ESAPR")).prop_map(|(k, v, f)| Model::MetaSet(k, v, f)),
        (key(), meta_flags(b"I")).prop_map(|(k, f)| Model::MetaDelete(k, f)),
        (key(), meta_flags(b"I+D-")).prop_map(|(k, f)| Model::MetaArith(k, f)),
        Just(Model::MetaNoop),
    ]
}

fn flags(raw: &[u8]) -> MetaFlags<'_> {
    MetaFlags::parse(raw, msg::BAD_FORMAT).expect("generated meta flags are valid")
}

fn join(keys: &[Vec<u8>]) -> Vec<u8> {
    keys.join(&b' ')
}

/// Builds the request (borrowing `scratch` for joined key lists).
fn request<'a>(m: &'a Model, scratch: &'a [u8]) -> Command<'a> {
    match m {
        Model::Get(_, cas) => Command::Get {
            keys: Tokens::new(scratch),
            cas: *cas,
        },
        Model::Gat(e, _, cas) => Command::Gat {
            exptime: *e,
            keys: Tokens::new(scratch),
            cas: *cas,
        },
        Model::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            cas,
            noreply,
        } => Command::Store {
            mode: *mode,
            key,
            flags: *flags,
            exptime: *exptime,
            value,
            cas: *cas,
            noreply: *noreply,
        },
        Model::Delete(key, noreply) => Command::Delete {
            key,
            noreply: *noreply,
        },
        Model::Incr(key, delta, noreply) => Command::Incr {
            key,
            delta: *delta,
            noreply: *noreply,
        },
        Model::Decr(key, delta, noreply) => Command::Decr {
            key,
            delta: *delta,
            noreply: *noreply,
        },
        Model::Touch(key, exptime, noreply) => Command::Touch {
            key,
            exptime: *exptime,
            noreply: *noreply,
        },
        Model::FlushAll(delay, noreply) => Command::FlushAll {
            delay: *delay,
            noreply: *noreply,
        },
        Model::Version => Command::Version,
        Model::Verbosity(level, noreply) => Command::Verbosity {
            level: *level,
            noreply: *noreply,
        },
        Model::Stats(args) => Command::Stats {
            args: Tokens::new(args),
        },
        Model::Quit => Command::Quit,
        Model::MetaGet(key, f) => Command::MetaGet {
            key: MetaKey::Plain(key),
            flags: flags(f),
        },
        Model::MetaSet(key, value, f) => Command::MetaSet {
            key: MetaKey::Plain(key),
            value,
            flags: flags(f),
        },
        Model::MetaDelete(key, f) => Command::MetaDelete {
            key: MetaKey::Plain(key),
            flags: flags(f),
        },
        Model::MetaArith(key, f) => Command::MetaArithmetic {
            key: MetaKey::Plain(key),
            flags: flags(f),
        },
        Model::MetaNoop => Command::MetaNoop,
    }
}

fn scratch(m: &Model) -> Vec<u8> {
    match m {
        Model::Get(k, _) | Model::Gat(_, k, _) => join(k),
        _ => Vec::new(),
    }
}

/// Parses `buf` as a stream, checking the framing invariants, and returns
/// what came out (requests as their canonical encoding, errors as is).
fn drain(buf: &[u8], max_value: usize) -> Vec<Result<Vec<u8>, ParseError>> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        match parse(&buf[pos..], max_value) {
            Ok((req, used)) => {
                assert!(used > 0 && used <= buf.len() - pos);
                let mut enc = Vec::new();
                req.encode(&mut enc);
                out.push(Ok(enc));
                pos += used;
            }
            Err(ParseError::Incomplete) | Err(ParseError::LineTooLong) => break,
            Err(e) => {
                let used = e
                    .consumed()
                    .expect("errors other than Incomplete/LineTooLong consume");
                assert!(used > 0);
                if !matches!(e, ParseError::TooLarge { .. }) {
                    assert!(used <= buf.len() - pos, "{e:?}");
                }
                out.push(Err(e));
                pos = pos.saturating_add(used);
            }
        }
    }
    out
}

fn garbage() -> impl Strategy<Value = Vec<u8>> {
    let fragment = prop::sample::select(vec![
        &b"get"[..],
        b"gets",
        b"gat",
        b"set",
        b"cas",
        b"append",
        b"delete",
        b"incr",
        b"touch",
        b"flush_all",
        b"verbosity",
        b"stats",
        b"mg",
        b"ms",
        b"ma",
        b"md",
        b"mn",
        b" ",
        b"  ",
        b"\r\n",
        b"\n",
        b"\r",
        b"0",
        b"1",
        b"5",
        b"-1",
        b"4294967296",
        b"99999999999999999999",
        b"noreply",
        b"k",
        b"T1",
        b"MX",
        b"v",
        b"hello",
        b"\0",
        b"\xff",
    ]);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        prop::collection::vec(fragment, 0..64).prop_map(|f| f.concat()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn encoded_requests_round_trip(m in model()) {
        let scratch = scratch(&m);
        let req = request(&m, &scratch);
        let mut buf = Vec::new();
        req.encode(&mut buf);
        let (parsed, used) = parse(&buf, MAX_VALUE).unwrap();
        prop_assert_eq!(parsed, req);
        prop_assert_eq!(used, buf.len());
        // every strict prefix needs more bytes
        for i in [0, 1, buf.len() / 2, buf.len() - 1] {
            prop_assert_eq!(parse(&buf[..i], MAX_VALUE), Err(ParseError::Incomplete));
        }
    }

    #[test]
    fn pipelined_requests_round_trip_in_any_chunking(
        ms in prop::collection::vec(model(), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let scratches: Vec<Vec<u8>> = ms.iter().map(scratch).collect();
        let reqs: Vec<Command<'_>> =
            ms.iter().zip(&scratches).map(|(m, s)| request(m, s)).collect();
        let mut buf = Vec::new();
        for r in &reqs {
            r.encode(&mut buf);
        }
        // bytes arrive in chunks ending at `cuts`; parse whenever some arrive
        let mut ends: Vec<usize> = cuts.iter().map(|c| c.index(buf.len() + 1)).collect();
        ends.push(buf.len());
        ends.sort_unstable();
        let mut pos = 0;
        let mut got = Vec::new();
        for end in ends {
            loop {
                match parse(&buf[pos..end], MAX_VALUE) {
                    Ok((req, used)) => {
                        got.push(req);
                        pos += used;
                    }
                    Err(ParseError::Incomplete) => break,
                    Err(e) => prop_assert!(false, "unexpected {:?}", e),
                }
            }
        }
        prop_assert_eq!(pos, buf.len());
        prop_assert_eq!(got, reqs);
    }

    #[test]
    fn garbage_never_panics_and_makes_progress(
        buf in garbage(),
        max_value in prop_oneof![Just(0usize), 0usize..16, Just(1usize << 20)],
    ) {
        drain(&buf, max_value);
    }

    #[test]
    fn answers_do_not_depend_on_later_bytes(
        buf in garbage(),
        cut in any::<prop::sample::Index>(),
        max_value in prop_oneof![0usize..16, Just(1usize << 20)],
    ) {
        // Whatever a prefix decides (anything but Incomplete), the whole
        // buffer decides the same: no answer is given too early.
        let prefix = &buf[..cut.index(buf.len() + 1)];
        let early = parse(prefix, max_value);
        if early != Err(ParseError::Incomplete) {
            prop_assert_eq!(early, parse(&buf, max_value));
        }
    }

    #[test]
    fn valid_request_after_error_is_still_parsed(bad in garbage(), m in model()) {
        // After any error that consumed bytes, the stream resynchronises
        // at the next line once the bad bytes are dropped.
        let scratch = scratch(&m);
        let req = request(&m, &scratch);
        let mut line = bad.clone();
        line.retain(|&b| b != b'\n');
        line.truncate(1000);
        line.extend_from_slice(b"\r\n");
        if let Err(e @ (ParseError::UnknownCommand { .. } | ParseError::ClientError { .. })) =
            parse(&line, MAX_VALUE)
        {
            let used = e.consumed().unwrap();
            if used == line.len() {
                let mut buf = line.clone();
                req.encode(&mut buf);
                let (parsed, _) = parse(&buf[used..], MAX_VALUE).unwrap();
                prop_assert_eq!(parsed, req);
            }
        }
    }
}

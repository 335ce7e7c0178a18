use super::*;

const MAX: usize = 1 << 20;

/// Parses a buffer holding exactly one request.
fn one(buf: &[u8]) -> Command<'_> {
    let (req, used) =
        parse(buf, MAX).unwrap_or_else(|e| panic!("{:?}: {e:?}", buf.escape_ascii().to_string()));
    assert_eq!(
        used,
        buf.len(),
        "consumed for {:?}",
        buf.escape_ascii().to_string()
    );
    req
}

fn err(buf: &[u8]) -> ParseError {
    match parse(buf, MAX) {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e) => e,
    }
}

fn reply_of(e: ParseError) -> Vec<u8> {
    let mut out = Vec::new();
    e.write_reply(&mut out);
    out
}

fn keys(t: Tokens<'_>) -> Vec<&[u8]> {
    t.collect()
}

/// Every strict prefix is `Incomplete`; the whole buffer parses and uses
/// all of it.
fn assert_incremental(buf: &[u8]) {
    for i in 0..buf.len() {
        assert_eq!(
            parse(&buf[..i], MAX),
            Err(ParseError::Incomplete),
            "prefix {i} of {:?}",
            buf.escape_ascii().to_string()
        );
    }
    one(buf);
}

fn client_error(msg: &'static str, consumed: usize, noreply: bool) -> ParseError {
    ParseError::ClientError {
        msg,
        consumed,
        noreply,
    }
}

// --- retrieval ---------------------------------------------------------

#[test]
fn get_single_and_multi() {
    match one(b"get foo\r\n") {
        Command::Get { keys: k, cas } => {
            assert!(!cas);
            assert_eq!(keys(k), vec![&b"foo"[..]]);
        }
        r => panic!("{r:?}"),
    }
    match one(b"gets a bb  ccc\r\n") {
        Command::Get { keys: k, cas } => {
            assert!(cas);
            assert_eq!(keys(k), vec![&b"a"[..], b"bb", b"ccc"]);
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn get_accepts_bare_newline_and_extra_spaces() {
    match one(b"  get   k1 k2  \n") {
        Command::Get { keys: k, .. } => assert_eq!(keys(k), vec![&b"k1"[..], b"k2"]),
        r => panic!("{r:?}"),
    }
}

#[test]
fn get_without_key_is_error() {
    assert_eq!(err(b"get\r\n"), ParseError::UnknownCommand { consumed: 5 });
    assert_eq!(
        err(b"gets   \r\n"),
        ParseError::UnknownCommand { consumed: 9 }
    );
    assert_eq!(reply_of(err(b"get\r\n")), b"ERROR\r\n");
}

#[test]
fn get_many_keys() {
    let mut buf = b"get".to_vec();
    for i in 0..100 {
        buf.extend_from_slice(format!(" key{i}").as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    match one(&buf) {
        Command::Get { keys: k, .. } => {
            assert_eq!(k.count(), 100);
            assert_eq!(k.clone().nth(42), Some(&b"key42"[..]));
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn gat_and_gats() {
    match one(b"gat 100 a b\r\n") {
        Command::Gat {
            exptime,
            keys: k,
            cas,
        } => {
            assert_eq!(exptime, 100);
            assert!(!cas);
            assert_eq!(keys(k), vec![&b"a"[..], b"b"]);
        }
        r => panic!("{r:?}"),
    }
    match one(b"gats -1 a\r\n") {
        Command::Gat { exptime, cas, .. } => {
            assert_eq!(exptime, -1);
            assert!(cas);
        }
        r => panic!("{r:?}"),
    }
    // memcached accepts a gat without keys (reply: END)
    match one(b"gat 5\r\n") {
        Command::Gat { keys: k, .. } => assert!(k.is_empty()),
        r => panic!("{r:?}"),
    }
    assert_eq!(err(b"gat\r\n"), ParseError::UnknownCommand { consumed: 5 });
    assert_eq!(
        err(b"gat x a\r\n"),
        client_error(msg::INVALID_EXPTIME, 9, false)
    );
}

#[test]
fn key_length_limit() {
    let ok = "k".repeat(MAX_KEY_LEN);
    let long = "k".repeat(MAX_KEY_LEN + 1);
    // The get family reads the keys before a long one, then errs.
    for (line, exptime, before) in [
        (format!("get {long}\r\n"), None, vec![]),
        (format!("gets x {long} y\r\n"), None, vec![&b"x"[..]]),
        (
            format!("gat 1 a b {long}\r\n"),
            Some(1),
            vec![&b"a"[..], b"b"],
        ),
    ] {
        match one(line.as_bytes()) {
            Command::KeyTooLong {
                exptime: e,
                keys: k,
            } => {
                assert_eq!(e, exptime);
                assert_eq!(keys(k), before);
            }
            c => panic!("{c:?}"),
        }
    }
    for (cmd, tail) in [
        ("delete", ""),
        ("incr", " 1"),
        ("decr", " 1"),
        ("touch", " 1"),
        ("mg", " v"),
        ("md", ""),
        ("ma", ""),
    ] {
        let good = format!("{cmd} {ok}{tail}\r\n");
        one(good.as_bytes());
        let bad = format!("{cmd} {long}{tail}\r\n");
        assert_eq!(
            err(bad.as_bytes()),
            client_error(msg::BAD_FORMAT, bad.len(), false),
            "{cmd}"
        );
        assert_eq!(
            reply_of(err(bad.as_bytes())),
            b"CLIENT_ERROR bad command line format\r\n"
        );
    }
    let good = format!("set {ok} 0 0 1\r\nx\r\n");
    one(good.as_bytes());
    let bad_line = format!("set {long} 0 0 1\r\n");
    let bad = format!("{bad_line}x\r\n");
    // Like memcached, only the line is consumed; the data is read as a
    // command next.
    assert_eq!(
        err(bad.as_bytes()),
        client_error(msg::BAD_FORMAT, bad_line.len(), false)
    );
    let good = format!("ms {ok} 1\r\nx\r\n");
    one(good.as_bytes());
    let bad = format!("ms {long} 1\r\nx\r\n");
    assert!(matches!(
        err(bad.as_bytes()),
        ParseError::ClientError {
            msg: msg::BAD_FORMAT,
            ..
        }
    ));
}

// --- storage -----------------------------------------------------------

#[test]
fn set_family() {
    for (name, mode) in [
        ("set", StoreMode::Set),
        ("add", StoreMode::Add),
        ("replace", StoreMode::Replace),
        ("append", StoreMode::Append),
        ("prepend", StoreMode::Prepend),
    ] {
        let buf = format!("{name} key 42 3600 5\r\nhello\r\n");
        assert_eq!(
            one(buf.as_bytes()),
            Command::Store {
                mode,
                key: b"key",
                flags: 42,
                exptime: 3600,
                value: b"hello",
                cas: None,
                noreply: false,
            }
        );
        let buf = format!("{name} key 0 0 0 noreply\r\n\r\n");
        assert_eq!(
            one(buf.as_bytes()),
            Command::Store {
                mode,
                key: b"key",
                flags: 0,
                exptime: 0,
                value: b"",
                cas: None,
                noreply: true,
            }
        );
    }
}

#[test]
fn cas_command() {
    assert_eq!(
        one(b"cas k 1 2 3 99\r\nabc\r\n"),
        Command::Store {
            mode: StoreMode::Set,
            key: b"k",
            flags: 1,
            exptime: 2,
            value: b"abc",
            cas: Some(99),
            noreply: false,
        }
    );
    assert!(matches!(
        one(b"cas k 1 2 3 18446744073709551615 noreply\r\nabc\r\n"),
        Command::Store {
            cas: Some(u64::MAX),
            noreply: true,
            ..
        }
    ));
    // cas without the unique is a wrong argument count
    assert_eq!(
        err(b"cas k 1 2 3\r\nabc\r\n"),
        ParseError::UnknownCommand { consumed: 13 }
    );
    assert_eq!(
        err(b"cas k 1 2 3 x\r\nabc\r\n"),
        client_error(msg::BAD_FORMAT, 15, false)
    );
}

#[test]
fn set_extremes() {
    assert!(matches!(
        one(b"set k 4294967295 -1 1\r\nx\r\n"),
        Command::Store {
            flags: u32::MAX,
            exptime: -1,
            ..
        }
    ));
    // As memcached (strtoul into 32 bits): flags beyond u32 wrap, a
    // negative number is refused, `+` and leading zeros are fine.
    for (line, flags) in [
        (&b"set k 4294967296 0 1\r\nx\r\n"[..], 0),
        (b"set k 4294967297 0 1\r\nx\r\n", 1),
        (b"set k +7 0 1\r\nx\r\n", 7),
        (b"set k 007 0 1\r\nx\r\n", 7),
        (b"set k -0 0 1\r\nx\r\n", 0),
    ] {
        match one(line) {
            Command::Store { flags: f, .. } => assert_eq!(f, flags),
            r => panic!("{r:?}"),
        }
    }
    for line in [
        &b"set k -1 0 1\r\n"[..],
        b"set k 1x 0 1\r\n",
        b"set k 0 0 -1\r\n",
        b"set k 0 0 +\r\n",
        b"set k 18446744073709551616 0 1\r\n",
    ] {
        assert_eq!(err(line), client_error(msg::BAD_FORMAT, line.len(), false));
    }
    // exptime is a 32-bit field too
    assert!(matches!(
        one(b"set k 0 4294967296 1\r\nx\r\n"),
        Command::Store { exptime: 0, .. }
    ));
}

#[test]
fn numbers_as_strtoull() {
    // issue 11: delta `+1`, leading zeros, 20 digits
    for (t, v) in [
        (&b"1"[..], Some(1)),
        (b"+1", Some(1)),
        (b"01", Some(1)),
        (b"000000000000000000005", Some(5)),
        (b"18446744073709551615", Some(u64::MAX)),
        (b"18446744073709551616", None),
        (b"-0", Some(0)),
        (b"-1", None),
        (b"1x", None),
        (b"+", None),
        (b"", None),
        (b"\t5", Some(5)),
        (b"5\t", Some(5)),
    ] {
        assert_eq!(strtoull(t), v, "{:?}", t.escape_ascii().to_string());
    }
    assert_eq!(strtol(b"-2147483649"), Some(i64::from(i32::MAX)));
    assert_eq!(strtol(b"9223372036854775808"), None);
    match one(b"incr k +1\r\n") {
        Command::Incr { delta, .. } => assert_eq!(delta, 1),
        r => panic!("{r:?}"),
    }
}

#[test]
fn binary_value_with_crlf() {
    let value = b"\r\nEND\r\n\0\xff get x\r\n";
    let mut buf = format!("set bin 7 0 {}\r\n", value.len()).into_bytes();
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
    match one(&buf) {
        Command::Store { value: v, .. } => assert_eq!(v, value),
        r => panic!("{r:?}"),
    }
    assert_incremental(&buf);
}

#[test]
fn set_wrong_arg_count_is_error() {
    for line in [
        &b"set k 0 0\r\n"[..],
        b"set\r\n",
        b"set k 0 0 1 noreply extra\r\n",
        b"add k\r\n",
        b"append k 0\r\n",
    ] {
        assert_eq!(
            err(line),
            ParseError::UnknownCommand {
                consumed: line.len()
            },
            "{:?}",
            line.escape_ascii().to_string()
        );
    }
}

#[test]
fn set_malformed_numbers() {
    for line in [
        &b"set k x 0 1\r\n"[..],
        b"set k 0 x 1\r\n",
        b"set k 0 0 x\r\n",
        b"set k -1 0 1\r\n",
        b"set k 0 0 -1\r\n",
        b"set k 0 0 1x\r\n",
        b"set k 0 0 2147483646\r\n",
        b"set k 0 99999999999999999999 1\r\n",
        b"set k 0 0 99999999999999999999999\r\n",
    ] {
        let e = err(line);
        assert_eq!(
            e,
            client_error(msg::BAD_FORMAT, line.len(), false),
            "{:?}",
            line.escape_ascii().to_string()
        );
        assert_eq!(reply_of(e), b"CLIENT_ERROR bad command line format\r\n");
    }
    // the largest length memcached parses is fine (then too large)
    assert!(matches!(
        err(b"set k 0 0 2147483645\r\n"),
        ParseError::TooLarge { .. }
    ));
}

#[test]
fn set_malformed_noreply_is_silent() {
    let e = err(b"set k x 0 1 noreply\r\n");
    assert_eq!(e, client_error(msg::BAD_FORMAT, 21, true));
    assert!(reply_of(e).is_empty());
}

#[test]
fn set_extra_token_not_noreply_is_ignored() {
    // memcached's set_noreply_maybe only looks for a trailing "noreply"
    assert!(matches!(
        one(b"set k 0 0 1 whatever\r\nx\r\n"),
        Command::Store { noreply: false, .. }
    ));
}

#[test]
fn bad_data_chunk() {
    let buf = b"set k 0 0 3\r\nabcde\r\n";
    let e = err(buf);
    // the block is read as `bytes` + 2 and dropped, as memcached does
    assert_eq!(e, client_error(msg::BAD_DATA_CHUNK, 13 + 5, false));
    assert_eq!(reply_of(e), b"CLIENT_ERROR bad data chunk\r\n");
    // what follows the block is parsed next
    // (here the leftover `\r\n` is an empty command line, as in memcached)
    assert_eq!(err(&buf[18..]), ParseError::UnknownCommand { consumed: 2 });
    let e = err(b"set k 0 0 3 noreply\r\nabc\n\n");
    assert_eq!(e, client_error(msg::BAD_DATA_CHUNK, 26, true));
    assert!(reply_of(e).is_empty());
    // a bare \n at the end of the data is not enough
    assert!(matches!(
        err(b"set k 0 0 1\r\nx\nget k\r\n"),
        ParseError::ClientError {
            msg: msg::BAD_DATA_CHUNK,
            ..
        }
    ));
}

#[test]
fn too_large_value() {
    let line = b"set big 0 0 100\r\n";
    // nothing of the value has arrived yet: still TooLarge at once
    let e = parse(line, 10).unwrap_err();
    assert_eq!(
        e,
        ParseError::TooLarge {
            swallow: line.len() + 102,
            noreply: false,
            unlink: Some(Unlink {
                key_at: 4,
                key_len: 3,
                base64: false
            }),
        }
    );
    assert_eq!(e.consumed(), Some(line.len() + 102));
    assert_eq!(e.too_large_key(line).as_deref(), Some(&b"big"[..]));
    assert_eq!(reply_of(e), b"SERVER_ERROR object too large for cache\r\n");
    // exactly max_value is fine
    let mut buf = b"set k 0 0 10\r\n".to_vec();
    buf.extend_from_slice(&[b'x'; 10]);
    buf.extend_from_slice(b"\r\n");
    assert!(parse(&buf, 10).is_ok());
    assert!(matches!(
        parse(&buf, 9),
        Err(ParseError::TooLarge { swallow, .. }) if swallow == buf.len()
    ));
    // noreply: silent, still swallowed; not a set: no key to unlink
    let buf = b"append k 0 0 11 noreply\r\n";
    let e = parse(buf, 10).unwrap_err();
    assert!(matches!(
        e,
        ParseError::TooLarge {
            noreply: true,
            swallow: 38,
            ..
        }
    ));
    assert!(reply_of(e).is_empty());
    assert_eq!(e.too_large_key(buf), None);
}

#[test]
fn too_large_then_next_request_after_swallow() {
    let mut stream = b"set big 0 0 20\r\n".to_vec();
    stream.extend_from_slice(&[b'z'; 20]);
    stream.extend_from_slice(b"\r\nget k\r\n");
    let swallow = match parse(&stream[..20], 10) {
        Err(ParseError::TooLarge { swallow, .. }) => swallow,
        r => panic!("{r:?}"),
    };
    assert_eq!(swallow, 16 + 22);
    assert!(matches!(
        parse(&stream[swallow..], 10),
        Ok((Command::Get { .. }, 7))
    ));
}

// --- other classic commands --------------------------------------------

#[test]
fn delete_forms() {
    assert_eq!(
        one(b"delete k\r\n"),
        Command::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        one(b"delete k noreply\r\n"),
        Command::Delete {
            key: b"k",
            noreply: true
        }
    );
    assert_eq!(
        one(b"delete k 0\r\n"),
        Command::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        one(b"delete k 0 noreply\r\n"),
        Command::Delete {
            key: b"k",
            noreply: true
        }
    );
    let e = err(b"delete k 5\r\n");
    assert_eq!(e, client_error(msg::DELETE_USAGE, 12, false));
    assert_eq!(
        reply_of(e),
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
    );
    assert_eq!(
        err(b"delete k 5 noreply\r\n"),
        client_error(msg::DELETE_USAGE, 20, true)
    );
    assert_eq!(
        err(b"delete\r\n"),
        ParseError::UnknownCommand { consumed: 8 }
    );
    assert_eq!(
        err(b"delete k 0 noreply x\r\n"),
        ParseError::UnknownCommand { consumed: 22 }
    );
}

#[test]
fn incr_decr() {
    assert_eq!(
        one(b"incr n 5\r\n"),
        Command::Incr {
            key: b"n",
            delta: 5,
            noreply: false
        }
    );
    assert_eq!(
        one(b"decr n 18446744073709551615 noreply\r\n"),
        Command::Decr {
            key: b"n",
            delta: u64::MAX,
            noreply: true
        }
    );
    for line in [
        &b"incr n -1\r\n"[..],
        b"incr n x\r\n",
        b"decr n 18446744073709551616\r\n",
    ] {
        let e = err(line);
        assert_eq!(e, client_error(msg::INVALID_DELTA, line.len(), false));
        assert_eq!(
            reply_of(e),
            b"CLIENT_ERROR invalid numeric delta argument\r\n"
        );
    }
    assert_eq!(
        err(b"incr n\r\n"),
        ParseError::UnknownCommand { consumed: 8 }
    );
}

#[test]
fn touch() {
    assert_eq!(
        one(b"touch k 10\r\n"),
        Command::Touch {
            key: b"k",
            exptime: 10,
            noreply: false
        }
    );
    assert_eq!(
        one(b"touch k -1 noreply\r\n"),
        Command::Touch {
            key: b"k",
            exptime: -1,
            noreply: true
        }
    );
    assert_eq!(
        err(b"touch k x\r\n"),
        client_error(msg::INVALID_EXPTIME, 11, false)
    );
    assert_eq!(
        err(b"touch k\r\n"),
        ParseError::UnknownCommand { consumed: 9 }
    );
}

#[test]
fn flush_all() {
    assert_eq!(
        one(b"flush_all\r\n"),
        Command::FlushAll {
            delay: 0,
            noreply: false
        }
    );
    assert_eq!(
        one(b"flush_all 10\r\n"),
        Command::FlushAll {
            delay: 10,
            noreply: false
        }
    );
    assert_eq!(
        one(b"flush_all noreply\r\n"),
        Command::FlushAll {
            delay: 0,
            noreply: true
        }
    );
    assert_eq!(
        one(b"flush_all 10 noreply\r\n"),
        Command::FlushAll {
            delay: 10,
            noreply: true
        }
    );
    assert_eq!(
        err(b"flush_all x\r\n"),
        client_error(msg::INVALID_EXPTIME, 13, false)
    );
    assert_eq!(
        err(b"flush_all 1 2 3\r\n"),
        ParseError::UnknownCommand { consumed: 17 }
    );
}

#[test]
fn version_verbosity_quit_stats() {
    assert_eq!(one(b"version\r\n"), Command::Version);
    assert_eq!(one(b"quit\r\n"), Command::Quit);
    assert_eq!(
        one(b"verbosity 1\r\n"),
        Command::Verbosity {
            level: 1,
            noreply: false
        }
    );
    assert_eq!(
        one(b"verbosity 2 noreply\r\n"),
        Command::Verbosity {
            level: 2,
            noreply: true
        }
    );
    assert_eq!(
        err(b"verbosity\r\n"),
        ParseError::UnknownCommand { consumed: 11 }
    );
    assert_eq!(
        err(b"verbosity x\r\n"),
        client_error(msg::BAD_FORMAT, 13, false)
    );
    match one(b"stats\r\n") {
        Command::Stats { args } => assert!(args.is_empty()),
        r => panic!("{r:?}"),
    }
    match one(b"stats slabs  detail\r\n") {
        Command::Stats { args } => assert_eq!(keys(args), vec![&b"slabs"[..], b"detail"]),
        r => panic!("{r:?}"),
    }
}

#[test]
fn unknown_commands() {
    for line in [
        &b"\r\n"[..],
        b"   \r\n",
        b"g\r\n",
        b"bogus\r\n",
        b"GET k\r\n",
        b"getx k\r\n",
        b"mx k\r\n",
        b"mg\r\n",
        b"gat\r\n",
        b"\x00\x01\r\n",
        // HTTP/ closes only lines memcached does not route to a command
        b"set k HTTP/1.0\r\n",
    ] {
        let e = err(line);
        assert_eq!(
            e,
            ParseError::UnknownCommand {
                consumed: line.len()
            }
        );
        assert_eq!(reply_of(e), b"ERROR\r\n");
    }
}

#[test]
fn http_request_line_closes() {
    for line in [
        &b"GET / HTTP/1.0\r\n"[..],
        b"POST /x HTTP/1.1\r\n",
        b"HEAD HTTP/2\r\n",
    ] {
        let e = err(line);
        assert_eq!(e, ParseError::Close);
        assert!(e.closes_connection());
        assert_eq!(reply_of(e), b"");
    }
}

#[test]
fn base64_keys() {
    assert_eq!(base64_decode(b"Zm9v"), Some(b"foo".to_vec()));
    assert_eq!(base64_decode(b"Zm8="), Some(b"fo".to_vec()));
    assert_eq!(base64_decode(b"Zg=="), Some(b"f".to_vec()));
    for bad in [&b""[..], b"Zm9", b"Zm9v!", b"Z===", b"Zg==Zm9v"] {
        assert_eq!(base64_decode(bad), None);
    }
    let mut out = Vec::new();
    base64_encode(&mut out, b"\x00\xffk3");
    assert_eq!(base64_decode(&out), Some(b"\x00\xffk3".to_vec()));
    match one(b"mg Zm9v b v\r\n") {
        Command::MetaGet { key, flags } => {
            assert_eq!(key.bytes(), b"foo");
            assert!(flags.base64);
        }
        r => panic!("{r:?}"),
    }
    match one(b"me Zm9v b\r\n") {
        Command::MetaDebug { key } => assert_eq!(key.bytes(), b"foo"),
        r => panic!("{r:?}"),
    }
    // Encoded again, a decoded key keeps its `b` (found by fuzz/protocol).
    for line in [&b"me Zm9v b\r\n"[..], b"mg Zm9v b v\r\n", b"ma Zm9v b\r\n"] {
        let cmd = one(line);
        let mut again = Vec::new();
        cmd.encode(&mut again);
        assert_eq!(again, line);
    }
}

// --- framing -------------------------------------------------------------

#[test]
fn every_split_is_incomplete_until_complete() {
    for buf in [
        &b"get a b c\r\n"[..],
        b"gets a\n",
        b"gat 10 a\r\n",
        b"set k 1 2 5\r\nhello\r\n",
        b"set k 1 2 0\r\n\r\n",
        b"cas k 1 2 5 7 noreply\r\nhe\r\no\r\n",
        b"append k 0 0 1\r\n\n\r\n",
        b"delete k 0 noreply\r\n",
        b"incr k 1\r\n",
        b"decr k 1 noreply\r\n",
        b"touch k 1\r\n",
        b"flush_all 0\r\n",
        b"version\r\n",
        b"verbosity 1\r\n",
        b"stats items\r\n",
        b"quit\r\n",
        b"mg k v f t\r\n",
        b"ms k 3 T10 F5\r\nabc\r\n",
        b"md k q\r\n",
        b"ma k N0 J10 D2 MD\r\n",
        b"mn\r\n",
    ] {
        assert_incremental(buf);
    }
}

#[test]
fn errors_are_incomplete_until_decidable() {
    // An error is reported only once its line (or data block) is complete.
    for buf in [
        &b"bogus cmd\r\n"[..],
        b"set k x 0 1\r\n",
        b"set k 0 0 1\r\nxyz",
    ] {
        for i in 0..buf.len() {
            assert_eq!(parse(&buf[..i], MAX), Err(ParseError::Incomplete));
        }
        assert!(!matches!(
            parse(buf, MAX),
            Err(ParseError::Incomplete) | Ok(_)
        ));
    }
}

#[test]
fn pipelined_requests() {
    let stream: &[u8] = b"set a 0 0 1\r\n1\r\nget a b\r\ndelete a noreply\r\nbogus\r\n\
incr n 2\r\nset k 0 0 2 noreply\r\n\r\n\r\nmn\r\nversion\r\nget partial";
    let mut pos = 0;
    let mut seen = Vec::new();
    loop {
        match parse(&stream[pos..], MAX) {
            Ok((req, used)) => {
                seen.push(format!("{req:?}"));
                pos += used;
            }
            Err(ParseError::Incomplete) => break,
            Err(e) => {
                seen.push(format!("{e:?}"));
                pos += e.consumed().unwrap();
            }
        }
    }
    assert_eq!(&stream[pos..], b"get partial");
    assert_eq!(seen.len(), 8, "{seen:#?}");
    assert!(seen[0].starts_with("Store"));
    assert!(seen[3].starts_with("UnknownCommand"));
    assert!(seen[5].contains("value: [13, 10]"), "{}", seen[5]);
    assert_eq!(seen[6], "MetaNoop");
    assert_eq!(seen[7], "Version");
}

#[test]
fn line_too_long() {
    // no newline within the limit: error without waiting for the rest
    let garbage = vec![b'x'; MAX_LINE_LEN + 1];
    assert_eq!(err(&garbage), ParseError::LineTooLong);
    assert!(ParseError::LineTooLong.closes_connection());
    assert_eq!(ParseError::LineTooLong.consumed(), None);
    assert_eq!(
        reply_of(ParseError::LineTooLong),
        b"CLIENT_ERROR line too long\r\n"
    );
    // exactly at the limit: still waiting
    assert_eq!(err(&garbage[..MAX_LINE_LEN]), ParseError::Incomplete);
    // a complete but too long line is the same error
    let mut line = vec![b'x'; MAX_LINE_LEN + 1];
    line.extend_from_slice(b"\r\n");
    assert_eq!(err(&line), ParseError::LineTooLong);
    // a 10 MB line is rejected without scanning it all
    let huge = vec![b'a'; 10 << 20];
    assert_eq!(err(&huge), ParseError::LineTooLong);
    // a line of exactly the limit (including \r) is fine
    let mut ok = b"stats ".to_vec();
    ok.resize(MAX_LINE_LEN - 1, b'a');
    ok.extend_from_slice(b"\r\n");
    assert!(matches!(one(&ok), Command::Stats { .. }));
}

#[test]
fn long_multiget_is_allowed() {
    let mut line = b"get".to_vec();
    let key = "k".repeat(200);
    while line.len() < 3 * MAX_LINE_LEN {
        line.push(b' ');
        line.extend_from_slice(key.as_bytes());
    }
    assert_eq!(err(&line), ParseError::Incomplete);
    line.extend_from_slice(b"\r\n");
    match one(&line) {
        Command::Get { keys, .. } => assert!(keys.count() > 30),
        r => panic!("{r:?}"),
    }
    // but not unbounded
    let mut huge = b"gets ".to_vec();
    huge.resize(MAX_MULTIGET_LINE_LEN + 1, b'k');
    assert_eq!(err(&huge), ParseError::LineTooLong);
}

// --- meta ----------------------------------------------------------------

#[test]
fn meta_get() {
    match one(b"mg foo v f t c k s O123 q\r\n") {
        Command::MetaGet { key, flags } => {
            assert_eq!(key, MetaKey::Plain(b"foo"));
            for f in *b"vftcksOq" {
                assert!(flags.has(f), "{}", f as char);
            }
            assert!(!flags.has(b'T'));
            assert_eq!(flags.tokens().nth(6), Some(&b"O123"[..]));
            assert_eq!(flags.tokens().count(), 8);
        }
        r => panic!("{r:?}"),
    }
    match one(b"mg foo\r\n") {
        Command::MetaGet { flags, .. } => assert_eq!(flags, MetaFlags::EMPTY),
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        one(b"mg foo T30 v\r\n"),
        Command::MetaGet {
            flags: MetaFlags { ttl: Some(30), .. },
            ..
        }
    ));
}

#[test]
fn meta_set() {
    match one(b"ms k 5 T-1 F7 C99 I MA\r\nhello\r\n") {
        Command::MetaSet { key, value, flags } => {
            assert_eq!(key, MetaKey::Plain(b"k"));
            assert_eq!(value, b"hello");
            assert_eq!(flags.ttl, Some(-1));
            assert_eq!(flags.client_flags, Some(7));
            assert_eq!(flags.compare_cas, Some(99));
            assert!(flags.has(b'I'));
            assert_eq!(flags.set_mode(), StoreMode::Append);
        }
        r => panic!("{r:?}"),
    }
    match one(b"ms k 0\r\n\r\n") {
        Command::MetaSet { value, flags, .. } => {
            assert!(value.is_empty());
            assert_eq!(flags.set_mode(), StoreMode::Set);
        }
        r => panic!("{r:?}"),
    }
    // A bad or missing length: the line only (memcached cannot know the
    // block's size).
    assert_eq!(err(b"ms k x\r\n"), client_error(msg::BAD_FORMAT, 8, false));
    assert_eq!(err(b"ms k\r\n"), client_error(msg::BAD_FORMAT, 6, false));
    assert_eq!(err(b"ms k -1\r\n"), client_error(msg::BAD_FORMAT, 9, false));
    // A rejected ms with a known length swallows its data block, even
    // before it has arrived (issue 11: `ms k 7 T\r\nversion\r\n`).
    assert_eq!(
        err(b"ms k 1 MX\r\nx\r\n"),
        client_error(msg::INVALID_MODE, 14, false)
    );
    assert_eq!(
        err(b"ms k 7 T\r\n"),
        client_error(msg::BAD_TOKEN, 10 + 9, false)
    );
    assert_eq!(
        err(b"ms k 1 T1 T2\r\nx\r\n"),
        client_error(msg::DUPLICATE_FLAG, 17, false)
    );
    assert_eq!(
        err(b"ms k 1 Z\r\nx\r\n"),
        client_error(msg::INVALID_FLAG, 13, false)
    );
    assert_eq!(
        err(b"ms k 1 Ms\r\nx\r\n"),
        client_error(msg::INVALID_MODE, 14, false)
    );
    assert_eq!(
        err(b"ms k 1\r\nxy\r\n"),
        client_error(msg::BAD_DATA_CHUNK, 11, false)
    );
    // too large: always reported (meta ignores q for errors), swallowed
    let e = parse(b"ms big 100 q\r\n", 10).unwrap_err();
    assert_eq!(
        e,
        ParseError::TooLarge {
            swallow: 14 + 102,
            noreply: false,
            unlink: Some(Unlink {
                key_at: 3,
                key_len: 3,
                base64: false
            }),
        }
    );
    assert_eq!(
        e.too_large_key(b"ms big 100 q\r\n").as_deref(),
        Some(&b"big"[..])
    );
    // a base64 key is unlinked decoded ("Ymln" is "big"); one that does
    // not decode names no key
    let line = b"ms Ymln 100 b\r\n";
    let e = parse(line, 10).unwrap_err();
    assert_eq!(e.too_large_key(line).as_deref(), Some(&b"big"[..]));
    let line = b"ms Ym!n 100 b\r\n";
    assert!(parse(line, 10).is_err_and(|e| e.too_large_key(line).is_none()));
}

#[test]
fn meta_delete_arith_noop() {
    match one(b"md k q O1 C5\r\n") {
        Command::MetaDelete { key, flags } => {
            assert_eq!(key, MetaKey::Plain(b"k"));
            assert!(flags.has(b'q'));
            assert_eq!(flags.compare_cas, Some(5));
        }
        r => panic!("{r:?}"),
    }
    match one(b"ma k N60 J13 D7 MD v\r\n") {
        Command::MetaArithmetic { flags, .. } => {
            assert_eq!(flags.vivify, Some(60));
            assert_eq!(flags.initial, Some(13));
            assert_eq!(flags.delta, Some(7));
            assert!(!flags.incr());
        }
        r => panic!("{r:?}"),
    }
    match one(b"ma k\r\n") {
        Command::MetaArithmetic { flags, .. } => {
            assert!(flags.incr());
            assert_eq!(flags.delta, None);
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(
        err(b"ma k MX\r\n"),
        client_error(msg::INVALID_MA_MODE, 9, false)
    );
    assert_eq!(one(b"mn\r\n"), Command::MetaNoop);
}

#[test]
fn meta_flag_errors() {
    for (line, m) in [
        (&b"mg k 1\r\n"[..], msg::INVALID_FLAG),
        (b"mg k v v\r\n", msg::DUPLICATE_FLAG),
        (b"mg k Tx\r\n", msg::BAD_TOKEN),
        (b"mg k T\r\n", msg::BAD_TOKEN),
        (b"mg k E5\r\n", msg::INVALID_FLAG),
        // a bad F keeps the message found so far
        (b"ms k 1 F-1\r\nx\r\n", msg::BAD_FORMAT),
        (b"ms k 1 Tx F-1\r\nx\r\n", msg::BAD_TOKEN),
        (b"ms k 1 MDD\r\nx\r\n", msg::M_TOKEN_LENGTH),
        // md and ma word every flag error alike
        (b"ma k D-1\r\n", msg::INVALID_OR_DUPLICATE_FLAG),
        (b"ma k MDD\r\n", msg::INVALID_OR_DUPLICATE_FLAG),
        (b"md k X\r\n", msg::INVALID_OR_DUPLICATE_FLAG),
        (
            b"md k Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            msg::OPAQUE_TOO_LONG,
        ),
        (
            b"mg k a b c d e f g h i j k l m n o p q r s t u v w x y\r\n",
            msg::TOO_MANY_FLAGS,
        ),
        (
            b"md k a b c d e f g h i j k l m n o p q r s t u v w x y\r\n",
            msg::TOO_MANY_FLAGS_NO_ARE,
        ),
        (b"mg k b\r\n", msg::DECODING_KEY),
        (b"me\r\n", msg::BAD_FORMAT),
    ] {
        match err(line) {
            ParseError::ClientError {
                msg,
                noreply: false,
                ..
            } => assert_eq!(msg, m, "{:?}", line.escape_ascii().to_string()),
            e => panic!("{e:?}"),
        }
    }
}

// --- ttl -------------------------------------------------------------------

#[test]
fn ttl_rules() {
    let now = 1_700_000_000;
    assert_eq!(exptime_ttl(0, now), Ttl::Never);
    assert_eq!(exptime_ttl(-1, now), Ttl::Expired);
    assert_eq!(exptime_ttl(i64::MIN, now), Ttl::Expired);
    assert_eq!(exptime_ttl(1, now), Ttl::secs(1));
    assert_eq!(exptime_ttl(MAX_RELATIVE_EXPTIME, now), Ttl::secs(2_592_000));
    // above 30 days: absolute
    assert_eq!(exptime_ttl(MAX_RELATIVE_EXPTIME + 1, now), Ttl::Expired);
    assert_eq!(exptime_ttl(now as i64, now), Ttl::Expired);
    assert_eq!(exptime_ttl(now as i64 + 100, now), Ttl::secs(100));
    assert_eq!(
        exptime_ttl(i64::MAX, now),
        Ttl::After(Duration::from_secs(u64::from(segcache::MAX_TTL))),
        "clamped to the core's longest TTL"
    );
}

// --- responses -------------------------------------------------------------

#[test]
fn response_encoding() {
    let mut out = Vec::new();
    write_value(&mut out, b"k", 5, b"a\r\nb", None);
    write_value(&mut out, b"k2", 0, b"", Some(77));
    write_end(&mut out);
    assert_eq!(
        out,
        b"VALUE k 5 4\r\na\r\nb\r\nVALUE k2 0 0 77\r\n\r\nEND\r\n"
    );

    let mut out = Vec::new();
    for r in [
        Reply::Stored,
        Reply::NotStored,
        Reply::Exists,
        Reply::NotFound,
        Reply::Deleted,
        Reply::Touched,
        Reply::Ok,
        Reply::End,
        Reply::Error,
        Reply::Reset,
    ] {
        r.write(&mut out);
    }
    assert_eq!(
        out,
        b"STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\nEND\r\nERROR\r\nRESET\r\n"
    );

    let mut out = Vec::new();
    write_number(&mut out, 0);
    write_number(&mut out, u64::MAX);
    write_client_error(&mut out, msg::NON_NUMERIC);
    write_server_error(&mut out, "out of memory");
    write_version(&mut out, "1.6.0");
    write_stat(&mut out, "curr_items", 12);
    write_stat(&mut out, "version", "x");
    assert_eq!(
        out,
        b"0\r\n18446744073709551615\r\n\
CLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
SERVER_ERROR out of memory\r\nVERSION 1.6.0\r\nSTAT curr_items 12\r\nSTAT version x\r\n"
    );
}

#[test]
fn meta_response_encoding() {
    let mut out = Vec::new();
    write_meta_status(&mut out, MetaStatus::Value(3));
    write_meta_flag_num(&mut out, b'f', 5);
    write_meta_flag_num(&mut out, b't', -1);
    write_meta_flag(&mut out, b'k', b"key");
    write_meta_flag(&mut out, b'O', b"op");
    write_meta_end(&mut out);
    write_meta_data(&mut out, b"abc");
    for s in [
        MetaStatus::Header,
        MetaStatus::Miss,
        MetaStatus::NotFound,
        MetaStatus::NotStored,
        MetaStatus::Exists,
        MetaStatus::Noop,
    ] {
        write_meta_status(&mut out, s);
        write_meta_end(&mut out);
    }
    assert_eq!(
        out,
        b"VA 3 f5 t-1 kkey Oop\r\nabc\r\nHD\r\nEN\r\nNF\r\nNS\r\nEX\r\nMN\r\n"
    );
}

#[test]
fn push_numbers() {
    let mut out = Vec::new();
    push_i64(&mut out, i64::MIN);
    out.push(b' ');
    push_i64(&mut out, 0);
    out.push(b' ');
    push_u64(&mut out, 1234567890);
    assert_eq!(out, b"-9223372036854775808 0 1234567890");
}

#[test]
fn request_encoding_round_trips() {
    for buf in [
        &b"get a b\r\n"[..],
        b"gets a\r\n",
        b"gat -5 a\r\n",
        b"gats 5\r\n",
        b"set k 1 2 3 noreply\r\nabc\r\n",
        b"cas k 1 2 3 4\r\nabc\r\n",
        b"delete k noreply\r\n",
        b"incr k 1\r\n",
        b"decr k 1 noreply\r\n",
        b"touch k 1\r\n",
        b"flush_all\r\n",
        b"flush_all 5 noreply\r\n",
        b"version\r\n",
        b"verbosity 1 noreply\r\n",
        b"stats a b\r\n",
        b"quit\r\n",
        b"mg k v T5\r\n",
        b"ms k 2 F1\r\nab\r\n",
        b"md k q\r\n",
        b"ma k MD\r\n",
        b"mn\r\n",
    ] {
        let req = one(buf);
        let mut out = Vec::new();
        req.encode(&mut out);
        assert_eq!(out, buf, "{req:?}");
    }
}

#[test]
fn display_and_consumed() {
    assert_eq!(ParseError::Incomplete.consumed(), None);
    assert!(!ParseError::Incomplete.closes_connection());
    assert!(reply_of(ParseError::Incomplete).is_empty());
    assert_eq!(
        ParseError::UnknownCommand { consumed: 3 }.to_string(),
        "unknown command"
    );
    assert_eq!(
        format!("{:?}", Tokens::new(b" a\rb  c")),
        r#"["a\\rb", "c"]"#
    );
    assert_eq!(Tokens::new(b"  x y").remainder(), b"x y");
}

#[test]
fn too_large_for_every_storage_command() {
    // As memcached: an oversized classic `set` unlinks the old value, the
    // other classic stores do not, and `ms` does in every mode.
    for (line, unlink) in [
        (&b"add k 0 0 11\r\n"[..], false),
        (b"replace k 0 0 11\r\n", false),
        (b"prepend k 0 0 11\r\n", false),
        (b"cas k 0 0 11 5\r\n", false),
        (b"ms k 11 MA\r\n", true),
    ] {
        let e = parse(line, 10).unwrap_err();
        assert_eq!(
            e,
            ParseError::TooLarge {
                swallow: line.len() + 13,
                noreply: false,
                unlink: unlink.then(|| Unlink {
                    key_at: line.iter().position(|&b| b == b' ').unwrap() + 1,
                    key_len: 1,
                    base64: false,
                }),
            }
        );
        assert_eq!(e.too_large_key(line).is_some(), unlink);
    }
    // max_value 0 still allows empty values
    assert!(parse(b"set k 0 0 0\r\n\r\n", 0).is_ok());
}

#[test]
fn tokens_are_lazy_and_copyable() {
    let t = Tokens::new(b" a  b c ");
    assert_eq!(t.count(), 3);
    // counting consumed a copy; the original still yields every token
    assert_eq!(keys(t), vec![&b"a"[..], b"b", b"c"]);
    assert_eq!(t, Tokens::new(b"a b c"));
    assert_ne!(t, Tokens::new(b"a b"));
    assert!(Tokens::new(b"   ").is_empty());
}

#[test]
fn crawler_and_shutdown_lines() {
    let all = Command::Metadump {
        from: 0,
        to: u32::MAX,
    };
    for line in [
        &b"lru_crawler metadump all\r\n"[..],
        b"lru_crawler metadump hash\r\n",
        b"lru_crawler metadump 1\r\n",
        b"lru_crawler metadump 3,1\r\n",
        b"lru_crawler  metadump   all\n",
    ] {
        assert!(matches!(one(line), c if c == all), "{line:?}");
    }
    assert!(matches!(one(b"lru_crawler crawl all\r\n"), Command::Crawl));
    assert!(matches!(one(b"lru_crawler crawl 2,1\r\n"), Command::Crawl));
    for (line, bad_class) in [
        (&b"lru_crawler metadump 2\r\n"[..], true),
        (b"lru_crawler metadump x\r\n", true),
        (b"lru_crawler crawl hash\r\n", true),
        (b"lru_crawler metadump\r\n", false),
        (b"lru_crawler metadump all more\r\n", false),
        (b"lru_crawler enable\r\n", false),
        (b"lru_crawler\r\n", false),
    ] {
        let e = parse(line, MAX).unwrap_err();
        assert_eq!(
            matches!(e, ParseError::BadClass { .. }),
            bad_class,
            "{line:?}: {e:?}"
        );
        assert_eq!(e.consumed(), Some(line.len()), "{line:?}");
    }
    let mut out = Vec::new();
    parse(b"lru_crawler metadump 9\r\n", MAX)
        .unwrap_err()
        .write_reply(&mut out);
    assert_eq!(out, b"BADCLASS invalid class id\r\n");
    for (line, known) in [
        (&b"shutdown\r\n"[..], true),
        (b"shutdown graceful\r\n", true),
        (b"shutdown  graceful \r\n", true),
        (b"shutdown now\r\n", false),
        (b"shutdown graceful now\r\n", false),
    ] {
        assert!(
            matches!(one(line), Command::Shutdown { known: k } if k == known),
            "{line:?}"
        );
    }
}

#[test]
fn the_value_limit_counts_the_key_and_flags_a_segment_holds() {
    // 64-byte segments: a 3-byte header (values under 256 bytes), 4 bytes of flags when not 0, the key.
    let limit = ValueLimit {
        max_value: 1 << 20,
        segment_size: 64,
    };
    let store = |line: &str, len: usize| {
        let mut buf = format!("{line} {len}\r\n").into_bytes();
        buf.resize(buf.len() + len, b'v');
        buf.extend_from_slice(b"\r\n");
        buf
    };
    assert!(parse(&store("set k 0 0", 60), limit).is_ok());
    let buf = store("set k 0 0", 61);
    let e = parse(&buf, limit).unwrap_err();
    assert!(matches!(e, ParseError::TooLarge { swallow, .. } if swallow == buf.len()));
    assert_eq!(e.too_large_key(&buf).as_deref(), Some(&b"k"[..]));
    assert!(parse(&store("set k 1 0", 56), limit).is_ok());
    assert!(parse(&store("set k 1 0", 57), limit).is_err());
    // `ms`: the decoded key ("Ymln" is "big") and `F` flags count.
    let ms = |flags: &str, len: usize| {
        let mut buf = format!("ms Ymln {len} b{flags}\r\n").into_bytes();
        buf.resize(buf.len() + len, b'v');
        buf.extend_from_slice(b"\r\n");
        buf
    };
    assert!(parse(&ms("", 58), limit).is_ok());
    let buf = ms(" F7", 55);
    let e = parse(&buf, limit).unwrap_err();
    assert_eq!(e.too_large_key(&buf).as_deref(), Some(&b"big"[..]));
    assert!(parse(&ms(" F7", 54), limit).is_ok());
    // A plain `max_value` binds alone.
    assert!(parse(&store("set k 0 0", 59), 59).is_ok());
}

#[test]
fn refresh_certs_takes_only_noreply() {
    assert_eq!(
        one(b"refresh_certs\r\n"),
        Command::RefreshCerts { noreply: false }
    );
    assert_eq!(
        one(b"refresh_certs noreply\r\n"),
        Command::RefreshCerts { noreply: true }
    );
    for bad in [
        &b"refresh_certs now\r\n"[..],
        b"refresh_certs noreply x\r\n",
    ] {
        assert!(
            matches!(err(bad), ParseError::UnknownCommand { .. }),
            "{bad:?}"
        );
    }
    let mut again = Vec::new();
    one(b"refresh_certs noreply\r\n").encode(&mut again);
    assert_eq!(again, b"refresh_certs noreply\r\n");
}

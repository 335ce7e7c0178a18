//! The server's memcache parser on arbitrary bytes, consumed as a worker
//! consumes its read buffer. Besides never panicking, each step must:
//! use between 1 and all of the bytes it was given; give the same command
//! (or error) from exactly the bytes it used, whatever follows them; say
//! `Incomplete` for the same bytes less the last; and a parsed command,
//! encoded again, must parse back to itself. The same bytes are then read
//! as binary-protocol packets, with the same rules (a refused packet drops
//! at least its header).
#![no_main]

use segcache_server::protocol::binary::{encode_bin_request, parse_binary, BinError, HEADER_LEN};
use segcache_server::protocol::{parse, ParseError, ValueLimit};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [a, b, stream @ ..] = data else { return };
    // Value limits from tiny to memcached's default, segments from ones
    // too small for any item to 1 MiB.
    let limit = ValueLimit {
        max_value: 1 + *a as usize * 4111,
        segment_size: 16 + *b as usize * 4111,
    };
    let mut pos = 0;
    for _ in 0..10_000 {
        let Some(rest) = stream.get(pos..).filter(|r| !r.is_empty()) else {
            break;
        };
        match parse(rest, limit) {
            Ok((cmd, used)) => {
                assert!(
                    used > 0 && used <= rest.len(),
                    "used {used} of {}",
                    rest.len()
                );
                assert_eq!(parse(&rest[..used], limit), Ok((cmd.clone(), used)));
                assert_eq!(
                    parse(&rest[..used - 1], limit),
                    Err(ParseError::Incomplete),
                    "a command's bytes less the last"
                );
                let mut again = Vec::new();
                cmd.encode(&mut again);
                assert_eq!(
                    parse(&again, limit),
                    Ok((cmd, again.len())),
                    "re-encoded {again:?}"
                );
                pos += used;
            }
            Err(ParseError::Incomplete | ParseError::LineTooLong | ParseError::Close) => break,
            Err(e) => {
                let mut reply = Vec::new();
                e.write_reply(&mut reply);
                let _ = e.too_large_key(rest);
                let used = e.consumed().expect("every other error says what it used");
                assert!(used > 0, "{e:?} used nothing");
                if used <= rest.len() && !matches!(e, ParseError::TooLarge { .. }) {
                    assert_eq!(
                        parse(&rest[..used], limit),
                        Err(e),
                        "the error from its own bytes"
                    );
                }
                pos += used;
            }
        }
    }
    let mut pos = 0;
    for _ in 0..10_000 {
        let Some(rest) = stream.get(pos..).filter(|r| !r.is_empty()) else {
            break;
        };
        match parse_binary(rest, limit) {
            Ok((req, used)) => {
                assert!(used >= HEADER_LEN && used <= rest.len());
                assert_eq!(parse_binary(&rest[..used], limit), Ok((req, used)));
                assert_eq!(
                    parse_binary(&rest[..used - 1], limit),
                    Err(BinError::Incomplete)
                );
                let mut again = Vec::new();
                encode_bin_request(&mut again, &req);
                assert_eq!(
                    parse_binary(&again, limit),
                    Ok((req, used)),
                    "re-encoded {again:?}"
                );
                pos += used;
            }
            Err(BinError::Incomplete | BinError::Close) => break,
            Err(BinError::Refused {
                swallow,
                close,
                unlink,
                ..
            }) => {
                assert!(swallow >= HEADER_LEN, "{swallow}");
                if let Some((at, len)) = unlink {
                    assert!(at + len <= rest.len(), "the unlinked key was read");
                }
                if close {
                    break;
                }
                pos += swallow;
            }
        }
    }
});

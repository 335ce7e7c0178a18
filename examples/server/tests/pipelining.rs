//! Pipelined bursts, half-closed clients and concurrent clients, on every
//! server shape (one worker owning the cache, workers with the storage
//! thread, workers sharing a sharded cache): what the worker's read and
//! write path (one `recv` per readable socket, replies of a round in one
//! `send`) and the storage hand-off (a round left to another holder of
//! the token, waited for by spinning or sleeping) must keep: every
//! complete request answered, in order, with its own answer.

mod common;

use common::{stat, Conn, Server};
use std::io::Write;
use std::net::Shutdown;

/// The three shapes, with a heap large enough that nothing is evicted.
const SHAPES: [&[&str]; 3] = [
    &["--workers", "1", "--heap-size", "64MiB"],
    &["--workers", "2", "--heap-size", "64MiB"],
    &["--workers", "2", "--shared-cache", "--heap-size", "64MiB"],
];

/// `n` pipelined set/get pairs with values of 1 to 3,000 bytes (so that
/// requests straddle every read-buffer boundary), a miss and a `version`
/// now and then; and the replies memcached gives, in order.
fn burst(tag: &str, n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        let len = 1 + (i * 7919) % 3000;
        let value: Vec<u8> = (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect();
        let key = format!("{tag}-{i}");
        req.extend_from_slice(format!("set {key} {i} 0 {len}\r\n").as_bytes());
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        want.extend_from_slice(b"STORED\r\n");
        req.extend_from_slice(format!("get {key}\r\n").as_bytes());
        want.extend_from_slice(format!("VALUE {key} {i} {len}\r\n").as_bytes());
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\nEND\r\n");
        if i % 17 == 0 {
            req.extend_from_slice(format!("get {tag}-missing-{i}\r\nversion\r\n").as_bytes());
            want.extend_from_slice(b"END\r\nVERSION 0.1.0\r\n");
        }
    }
    (req, want)
}

/// Sends `req` from a second thread while reading `want.len()` bytes, so
/// that neither side waits for the other to drain its socket.
fn exchange(c: &mut Conn, req: Vec<u8>, want_len: usize) -> Vec<u8> {
    let mut writer = c.stream.try_clone().expect("clone the socket");
    let sender = std::thread::spawn(move || writer.write_all(&req));
    let got = c.read_n(want_len);
    sender.join().unwrap().expect("send the burst");
    got
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

#[test]
fn a_burst_many_read_buffers_long_is_answered_in_order() {
    for shape in SHAPES {
        let server = Server::start(shape);
        let mut c = server.connect();
        // About 3.2 MB of requests: some 200 reads of 16 KiB.
        let (req, want) = burst("b", 2000);
        assert!(req.len() > 100 * 16 * 1024);
        let got = exchange(&mut c, req, want.len());
        assert!(
            got == want,
            "{shape:?}: {} of {} bytes, first difference at byte {}",
            got.len(),
            want.len(),
            first_difference(&got, &want)
        );
        // The connection is still in step afterwards.
        c.expect(b"get b-0\r\n", b"VALUE b-0 0 1\r\na\r\nEND\r\n");
    }
}

#[test]
fn a_client_that_stops_sending_mid_request_gets_the_complete_ones_answered() {
    for shape in SHAPES {
        let server = Server::start(shape);
        let mut c = server.connect();
        // Two complete requests, then half a set: its data never comes.
        c.send(b"set whole 0 0 5\r\nhello\r\nget whole\r\nset torn 0 0 10\r\nabc");
        c.stream.shutdown(Shutdown::Write).unwrap();
        let got = c.read_until_end(b"never");
        assert_eq!(
            String::from_utf8_lossy(&got),
            "STORED\r\nVALUE whole 0 5\r\nhello\r\nEND\r\n",
            "{shape:?}: the complete requests are answered"
        );
        assert!(c.closed(), "{shape:?}: then the connection closes");
        let mut d = server.connect();
        d.expect(
            b"get torn whole\r\n",
            b"VALUE whole 0 5\r\nhello\r\nEND\r\n",
        );
        // A client that vanishes with a burst half-read by the server.
        let mut e = server.connect();
        let (req, _) = burst("gone", 300);
        e.send(&req[..req.len() / 2]);
        drop(e);
        d.expect(b"version\r\n", b"VERSION 0.1.0\r\n");
    }
}

/// Clients spread over both workers send pipelined rounds at the same
/// time, so that one worker's round often finds the cache's token held by
/// the other worker's turn (or the storage thread) and is left to it:
/// every client still gets its own answers, in order. The server's
/// counters of such rounds (found while spinning, or after sleeping) can
/// only count rounds someone ran.
#[test]
fn concurrent_clients_on_both_workers_get_their_own_answers() {
    for shape in SHAPES {
        let server = Server::start(shape);
        let addr = server.addr;
        let clients: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut c = Conn::new(addr);
                    for round in 0..40 {
                        let (req, want) = burst(&format!("c{t}r{round}"), 1 + (t + round) % 6);
                        let got = exchange(&mut c, req, want.len());
                        if got != want {
                            return Err(format!(
                                "client {t} round {round}: first difference at byte {}",
                                first_difference(&got, &want)
                            ));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for client in clients {
            client
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        }
        let mut c = server.connect();
        let mut count = |name: &str| -> u64 {
            stat(&mut c, name)
                .unwrap_or_else(|| panic!("{shape:?}: no stat {name}"))
                .parse()
                .unwrap()
        };
        let spun = count("storage_waits_spun");
        let slept = count("storage_waits_slept");
        if shape.contains(&"--shared-cache") || shape.contains(&"1") {
            assert_eq!(
                (spun, slept),
                (0, 0),
                "{shape:?}: no storage thread, no hand-off"
            );
        } else {
            let jobs = count("storage_thread_jobs") + count("storage_worker_jobs");
            assert!(
                spun + slept <= jobs,
                "{shape:?}: {spun} spun + {slept} slept rounds, but only {jobs} jobs ran"
            );
        }
    }
}

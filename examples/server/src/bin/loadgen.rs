//! `loadgen`: an open-loop memcache load generator for benchmarks, in the
//! ASCII protocol or memcached's binary one (`--binary`), over TCP, TLS
//! (`--tls-ca`) or a Unix domain socket (`--unix`).
//!
//! Requests are scheduled at a fixed target rate regardless of how fast
//! replies come back (open loop), spread round-robin over many
//! connections, and each latency is measured from the request's
//! *scheduled* send time to the end of its reply, so a stalled server is
//! charged for the queueing it causes (no coordinated omission).
//! Workload: keys of 4-32 bytes, values of 64 or 256 bytes, 80:20 get:set,
//! uniform over the key space, which is filled before measuring.
//!
//! Prints one line: `rate=.. achieved=.. p50_us=.. p99_us=.. p999_us=..
//! max_us=.. errors=.. timeouts=.. requests=.. cpu_us=.. request_bytes=..
//! fill_refused=..`: `requests` completed in the measured window,
//! `request_bytes` the mean size of a request sent (so that bytes a server
//! received count its requests), `fill_refused` the fill's sets that were
//! not `STORED`, and `cpu_us` the load generator's
//! own user+system CPU from the first request to the end (on loopback the
//! kernel work of a segment is charged to whichever process transmits it,
//! so a server's CPU per request is only comparable with the client's
//! beside it).

use clap::Parser;
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::ServerName;
use segcache_server::stream::Stream;
use segcache_server::tls::{self, TlsStream};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Open-loop memcache load generator (80:20 get:set, HdrHistogram latencies)")]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The server's TCP port (or `--unix`).
    #[arg(long, required_unless_present = "unix")]
    port: Option<u16>,
    /// Connect to this Unix domain socket instead of host:port.
    #[arg(long, value_name = "PATH")]
    unix: Option<std::path::PathBuf>,
    /// Speak TLS to host:port, trusting the PEM certificate(s) in this
    /// file (the server's own, if it is self-signed); the server's name
    /// is `--host`.
    #[arg(long, value_name = "PATH", conflicts_with = "unix")]
    tls_ca: Option<std::path::PathBuf>,
    /// Target requests per second.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Seconds of unmeasured load before it.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 50_000)]
    keys: u64,
    /// Fraction of gets.
    #[arg(long, default_value_t = 0.8)]
    get_ratio: f64,
    /// Skip filling the key space first.
    #[arg(long)]
    no_fill: bool,
    /// Send the measured requests in memcached's binary protocol (GET and
    /// SET packets) instead of text; the fill stays text.
    #[arg(long)]
    binary: bool,
}

fn key(i: u64) -> Vec<u8> {
    // 4..=32 bytes, deterministic per key.
    let len = 4 + (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59) as usize % 29;
    let mut k = format!("k{i:x}").into_bytes();
    k.resize(len.max(k.len()), b'.');
    k
}

fn value_len(i: u64) -> usize {
    if i.is_multiple_of(2) {
        64
    } else {
        256
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

struct Conn {
    stream: Stream,
    out: Vec<u8>,
    out_pos: usize,
    inbuf: Vec<u8>,
    /// Scheduled send times of requests awaiting replies.
    pending: VecDeque<Instant>,
}

/// Appends a text `get` of `key`, or a `set` of `value` under it.
fn push_text(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    out.extend_from_slice(if value.is_some() { b"set " } else { b"get " });
    out.extend_from_slice(key);
    match value {
        None => out.extend_from_slice(b"\r\n"),
        Some(value) => {
            out.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// The binary protocol's request and response magic, and its GET and SET
/// opcodes.
const BIN_REQUEST: u8 = 0x80;
const BIN_RESPONSE: u8 = 0x81;
const BIN_GET: u8 = 0x00;
const BIN_SET: u8 = 0x01;
/// A binary packet's header length.
const BIN_HEADER: usize = 24;
/// A binary response's status "key not found" (a get's miss).
const BIN_NOT_FOUND: u16 = 0x0001;

/// Appends a binary request packet: `extras`, then `key`, then `value`.
fn push_binary(out: &mut Vec<u8>, opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) {
    let body = (extras.len() + key.len() + value.len()) as u32;
    out.extend_from_slice(&[BIN_REQUEST, opcode]);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[extras.len() as u8, 0, 0, 0]); // data type, vbucket
    out.extend_from_slice(&body.to_be_bytes());
    out.extend_from_slice(&[0; 12]); // opaque, CAS
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Length of the first complete binary response in `buf`, and whether it
/// was an error (any status but success, or "not found" for a get);
/// `None` if incomplete.
fn binary_reply_len(buf: &[u8]) -> Option<(usize, bool)> {
    let header = buf.get(..BIN_HEADER)?;
    let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if buf.len() < BIN_HEADER + body {
        return None;
    }
    let status = u16::from_be_bytes([header[6], header[7]]);
    let ok = status == 0 || (header[1] == BIN_GET && status == BIN_NOT_FOUND);
    Some((BIN_HEADER + body, header[0] != BIN_RESPONSE || !ok))
}

/// Length of the first complete text reply in `buf`, and whether it was
/// an error; `None` if incomplete.
fn reply_len(buf: &[u8]) -> Option<(usize, bool)> {
    let nl = buf.iter().position(|&b| b == b'\n')? + 1;
    let line = &buf[..nl];
    if line.starts_with(b"VALUE ") {
        let text = std::str::from_utf8(line).ok()?;
        let bytes: usize = text.split_whitespace().nth(3)?.parse().ok()?;
        let end = nl + bytes + 2;
        let rest = buf.get(end..)?;
        if rest.len() < 5 {
            return None;
        }
        return Some((end + 5, !rest.starts_with(b"END\r\n")));
    }
    let ok = line == b"END\r\n" || line == b"STORED\r\n";
    Some((nl, !ok))
}

/// User+system CPU time this process has used, in microseconds.
fn cpu_us() -> u64 {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is
    // zero-initialised plain data.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// TLS to the server: the client config and the server's name.
type Tls = (std::sync::Arc<rustls::ClientConfig>, ServerName<'static>);

/// Where the server listens.
enum Target {
    Tcp(SocketAddr, Option<Tls>),
    Unix(std::path::PathBuf),
}

fn connect(target: &Target) -> io::Result<Stream> {
    Ok(match target {
        Target::Tcp(addr, tls) => {
            let s = std::net::TcpStream::connect_timeout(addr, Duration::from_secs(5))?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            let s = mio::net::TcpStream::from_std(s);
            match tls {
                None => Stream::Tcp(s),
                Some((config, name)) => {
                    Stream::Tls(Box::new(TlsStream::client(s, config, name.clone())?))
                }
            }
        }
        Target::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_nonblocking(true)?;
            Stream::Unix(mio::net::UnixStream::from_std(s))
        }
    })
}

/// A blocking connection for the fill.
fn connect_blocking(target: &Target) -> io::Result<Box<dyn ReadWrite>> {
    Ok(match target {
        Target::Tcp(addr, tls) => {
            let s = std::net::TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            match tls {
                None => Box::new(s),
                Some((config, name)) => {
                    let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                        .map_err(io::Error::other)?;
                    Box::new(rustls::StreamOwned::new(conn, s))
                }
            }
        }
        Target::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            Box::new(s)
        }
    })
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Writes every key once, 1,000 text sets per round trip, and reads the
/// one reply line each set gets. Returns how many were not `STORED` (a
/// refused value, a full heap), so a fill the server turned down is
/// reported instead of being taken for a full key space.
fn fill(target: &Target, keys: u64) -> io::Result<u64> {
    let mut s = connect_blocking(target)?;
    let value = vec![b'v'; 256];
    let mut refused = 0;
    let mut inbuf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut i = 0;
    while i < keys {
        let end = (i + 1000).min(keys);
        let mut req = Vec::new();
        for k in i..end {
            push_text(&mut req, &key(k), Some(&value[..value_len(k)]));
        }
        s.write_all(&req)?;
        let mut replies = end - i;
        while replies > 0 {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during the fill",
                ));
            }
            inbuf.extend_from_slice(&chunk[..n]);
            let mut used = 0;
            while replies > 0 {
                let Some((len, err)) = reply_len(&inbuf[used..]) else {
                    break;
                };
                refused += u64::from(err);
                used += len;
                replies -= 1;
            }
            inbuf.drain(..used);
        }
        i = end;
    }
    Ok(refused)
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let target = match &args.unix {
        Some(path) => Target::Unix(path.clone()),
        None => Target::Tcp(
            (args.host.as_str(), args.port.unwrap_or_default())
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::other("no address"))?,
            match &args.tls_ca {
                None => None,
                Some(ca) => {
                    let config = tls::client_config(ca).map_err(io::Error::other)?;
                    let name = ServerName::try_from(args.host.clone())
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    Some((config, name))
                }
            },
        ),
    };
    let fill_refused = if args.no_fill {
        0
    } else {
        fill(&target, args.keys)?
    };
    let mut poll = Poll::new()?;
    let mut conns = Vec::with_capacity(args.connections);
    for i in 0..args.connections {
        let mut stream = connect(&target)?;
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)?;
        conns.push(Conn {
            stream,
            out: Vec::new(),
            out_pos: 0,
            inbuf: Vec::with_capacity(4096),
            pending: VecDeque::new(),
        });
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(1) as f64);
    let cpu_start = cpu_us();
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let stop_at = measure_from + Duration::from_secs_f64(args.duration);
    let drain_until = stop_at + Duration::from_secs(2);
    let mut next_send = start;
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let value = vec![b'x'; 256];
    let (mut sent_measured, mut done_measured, mut errors) = (0u64, 0u64, 0u64);
    let mut rr = 0usize;
    let (mut all_sent, mut all_bytes) = (0u64, 0u64);
    let mut events = Events::with_capacity(1024);
    let parse_reply = if args.binary {
        binary_reply_len
    } else {
        reply_len
    };
    loop {
        let now = Instant::now();
        // Schedule everything due (open loop).
        while next_send <= now && next_send < stop_at {
            let nconns = conns.len();
            let c = &mut conns[rr % nconns];
            rr += 1;
            let queued = c.out.len();
            let k = rng.next() % args.keys;
            let is_get = (rng.next() % 10_000) as f64 / 10_000.0 < args.get_ratio;
            let (k, v) = (key(k), &value[..value_len(k)]);
            match (args.binary, is_get) {
                (false, true) => push_text(&mut c.out, &k, None),
                (false, false) => push_text(&mut c.out, &k, Some(v)),
                (true, true) => push_binary(&mut c.out, BIN_GET, &[], &k, &[]),
                // Extras: flags and expiry, both 0.
                (true, false) => push_binary(&mut c.out, BIN_SET, &[0; 8], &k, v),
            }
            all_sent += 1;
            all_bytes += (c.out.len() - queued) as u64;
            c.pending.push_back(next_send);
            if next_send >= measure_from {
                sent_measured += 1;
            }
            next_send += interval;
        }
        for c in conns.iter_mut() {
            while c.out_pos < c.out.len() {
                match c.stream.write(&c.out[c.out_pos..]) {
                    Ok(n) => c.out_pos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            if c.out_pos == c.out.len() {
                c.out.clear();
                c.out_pos = 0;
            }
            // TLS output the socket did not take yet.
            if c.stream.pending() > 0 {
                match c.stream.flush() {
                    Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                    _ => {}
                }
            }
        }
        let in_flight: usize = conns.iter().map(|c| c.pending.len()).sum();
        let now = Instant::now();
        if now >= stop_at && (in_flight == 0 || now >= drain_until) {
            break;
        }
        let timeout = if next_send < stop_at {
            next_send.saturating_duration_since(now)
        } else {
            Duration::from_millis(10)
        };
        poll.poll(&mut events, Some(timeout))?;
        for ev in events.iter() {
            let c = &mut conns[ev.token().0];
            let mut chunk = [0u8; 65536];
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => return Err(io::Error::other("server closed a connection")),
                    Ok(n) => c.inbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            let done_at = Instant::now();
            let mut used = 0;
            while let Some((len, err)) = parse_reply(&c.inbuf[used..]) {
                used += len;
                let Some(sched) = c.pending.pop_front() else {
                    errors += 1;
                    continue;
                };
                errors += u64::from(err);
                if sched >= measure_from && sched < stop_at {
                    done_measured += 1;
                    let ns = done_at.duration_since(sched).as_nanos() as u64;
                    hist.saturating_record(ns.max(1_000));
                }
            }
            c.inbuf.drain(..used);
        }
    }
    let secs = args.duration;
    let q = |p: f64| hist.value_at_quantile(p) / 1000;
    println!(
        "rate={} achieved={:.0} p50_us={} p99_us={} p999_us={} max_us={} errors={} timeouts={} \
         requests={} cpu_us={} request_bytes={:.3} fill_refused={}",
        args.rate,
        done_measured as f64 / secs,
        q(0.5),
        q(0.99),
        q(0.999),
        hist.max() / 1000,
        errors,
        sent_measured.saturating_sub(done_measured),
        done_measured,
        cpu_us() - cpu_start,
        all_bytes as f64 / all_sent.max(1) as f64,
        fill_refused
    );
    Ok(())
}

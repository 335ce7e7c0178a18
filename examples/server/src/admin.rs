//! The admin port: plain-text `stats` / `stats reset` / `version` / `quit`, and HTTP
//! `GET /metrics` (Prometheus text) or `HEAD`, served by one thread with a
//! mio event loop.
//!
//! An admin connection costs a socket and a few kilobytes, never a thread,
//! so idle clients cannot lock the port out: past [`MAX_ADMIN_CONNS`] the
//! connection idle longest is closed to make room, and any connection idle
//! for [`ADMIN_IDLE`] is closed. Lines are capped at [`MAX_LINE`] bytes;
//! a longer one closes the connection. This module must never block on a
//! client: it reads and writes only what the sockets take.

use crate::backend::StatsSource;
use crate::worker::Ctx;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most admin connections open at once; a new one past it replaces the
/// connection idle longest.
pub const MAX_ADMIN_CONNS: usize = 1024;
/// An admin connection silent this long is closed.
pub const ADMIN_IDLE: Duration = Duration::from_secs(10);
/// Longest request or header line.
pub const MAX_LINE: usize = 8192;
/// Commands served on one connection before it is closed.
const MAX_COMMANDS: usize = 10_000;
/// Unwritten output past which a connection is closed.
const MAX_OUTPUT: usize = 1 << 20;
/// HTTP header lines read before answering anyway.
const MAX_HEADERS: usize = 100;

/// The admin port answers each line before reading the next, so no
/// command of its own is counted ahead of its `stats`.
const NONE_LATER: crate::metrics::CmdCounts = [0; crate::metrics::Cmd::ALL.len()];

const LISTENER: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX);

/// Creates the admin loop's poll and the waker that stops it.
pub fn poll_and_waker() -> io::Result<(Poll, Arc<Waker>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    Ok((poll, waker))
}

struct AdminConn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// In an HTTP request: its method was HEAD, and its path.
    http: Option<(bool, String)>,
    headers: usize,
    commands: usize,
    /// Close once the output is written.
    closing: bool,
    /// The client sent its last byte.
    eof: bool,
    last_active: Instant,
}

impl AdminConn {
    /// Handles every complete line in the input.
    fn process(&mut self, stats: &StatsSource, ctx: &Ctx) {
        while !self.closing {
            if self.output.len() - self.written > MAX_OUTPUT {
                // Asks without reading the answers: not worth buffering.
                self.closing = true;
                self.output.clear();
                self.written = 0;
                return;
            }
            let Some(end) = self.input.iter().position(|&b| b == b'\n') else {
                if self.input.len() > MAX_LINE || self.eof {
                    self.closing = true;
                }
                return;
            };
            let line: Vec<u8> = self.input.drain(..=end).collect();
            if line.len() > MAX_LINE {
                self.closing = true;
                return;
            }
            let text = String::from_utf8_lossy(&line).trim().to_string();
            if let Some((head_only, path)) = self.http.take() {
                self.headers += 1;
                if text.is_empty() || self.headers > MAX_HEADERS {
                    self.http_reply(head_only, &path, stats, ctx);
                    self.closing = true;
                } else {
                    self.http = Some((head_only, path));
                }
                continue;
            }
            self.commands += 1;
            if self.commands > MAX_COMMANDS {
                self.closing = true;
                return;
            }
            let mut words = text.split_whitespace();
            match words.next() {
                Some(method @ ("GET" | "HEAD")) => {
                    let path = words.next().unwrap_or("/").to_string();
                    // HTTP/0.9-style request without a version: no headers.
                    if words.next().is_none() {
                        self.http_reply(method == "HEAD", &path, stats, ctx);
                        self.closing = true;
                    } else {
                        self.http = Some((method == "HEAD", path));
                    }
                }
                Some("stats") if words.next() == Some("reset") => {
                    ctx.metrics.reset(stats.stats().as_ref(), &NONE_LATER);
                    self.output.extend_from_slice(b"RESET\r\n");
                }
                Some("stats") => {
                    for (name, value) in ctx.metrics.stat_lines(stats.stats().as_ref(), &NONE_LATER)
                    {
                        crate::protocol::write_stat(&mut self.output, name, value);
                    }
                    self.output.extend_from_slice(b"END\r\n");
                }
                Some("version") => self.output.extend_from_slice(
                    format!("VERSION {}\r\n", env!("CARGO_PKG_VERSION")).as_bytes(),
                ),
                Some("quit") => self.closing = true,
                None => {}
                Some(_) => self.output.extend_from_slice(b"ERROR\r\n"),
            }
        }
    }

    fn http_reply(&mut self, head_only: bool, path: &str, stats: &StatsSource, ctx: &Ctx) {
        let (status, body) = match path {
            "/metrics" => ("200 OK", ctx.metrics.prometheus(stats.stats().as_ref())),
            "/" => ("200 OK", "segcache-server admin: GET /metrics\n".into()),
            _ => ("404 Not Found", "not found\n".into()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        self.output.extend_from_slice(head.as_bytes());
        if !head_only {
            self.output.extend_from_slice(body.as_bytes());
        }
    }

    /// Reads what the socket has, a line's worth at most; `None` on a read
    /// error, else whether there may be more to read. At the end of the
    /// input the connection closes once it has answered.
    fn read(&mut self) -> Option<bool> {
        let mut chunk = [0u8; 4096];
        while self.input.len() <= MAX_LINE {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.eof = true;
                    return Some(false);
                }
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(true)
    }

    /// Writes what the socket takes; false on a write error.
    fn flush(&mut self) -> bool {
        while self.written < self.output.len() {
            match self.stream.write(&self.output[self.written..]) {
                Ok(0) => return false,
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.output.clear();
        self.written = 0;
        true
    }

    fn done(&self) -> bool {
        self.closing && self.written >= self.output.len()
    }
}

/// Serves the admin port until `ctx.shutdown` is set (and the waker woken).
pub fn run(mut poll: Poll, mut listener: TcpListener, stats: StatsSource, ctx: Arc<Ctx>) {
    if let Err(e) = poll
        .registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
    {
        eprintln!("segcache-server: admin port unavailable: {e}");
        return;
    }
    let mut conns: Vec<Option<AdminConn>> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut last_sweep = Instant::now();
    while !ctx.shutdown.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_secs(1))) {
            if e.kind() != io::ErrorKind::Interrupted {
                eprintln!("segcache-server: admin poll failed: {e}");
                return;
            }
        }
        let now = Instant::now();
        for event in events.iter() {
            match event.token() {
                WAKE => {}
                LISTENER => accept(&poll, &listener, &mut conns, now),
                Token(t) => {
                    let Some(conn) = conns.get_mut(t).and_then(Option::as_mut) else {
                        continue;
                    };
                    let mut alive = true;
                    if event.is_readable() || event.is_read_closed() {
                        conn.last_active = now;
                        while !conn.closing {
                            match conn.read() {
                                None => alive = false,
                                Some(more) => {
                                    conn.process(&stats, &ctx);
                                    if more {
                                        continue;
                                    }
                                }
                            }
                            break;
                        }
                    }
                    alive = alive && conn.flush();
                    if !alive || conn.done() {
                        close(&poll, &mut conns, t);
                    }
                }
            }
        }
        if now.duration_since(last_sweep) >= Duration::from_secs(1) {
            last_sweep = now;
            for t in 0..conns.len() {
                if conns[t]
                    .as_ref()
                    .is_some_and(|c| now.duration_since(c.last_active) >= ADMIN_IDLE)
                {
                    close(&poll, &mut conns, t);
                }
            }
        }
    }
}

fn accept(poll: &Poll, listener: &TcpListener, conns: &mut Vec<Option<AdminConn>>, now: Instant) {
    loop {
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // WouldBlock, or EMFILE and friends: try again on the next event.
            Err(_) => return,
        };
        let open = conns.iter().filter(|c| c.is_some()).count();
        if open >= MAX_ADMIN_CONNS {
            let idlest = conns
                .iter()
                .enumerate()
                .filter_map(|(t, c)| c.as_ref().map(|c| (c.last_active, t)))
                .min();
            if let Some((_, t)) = idlest {
                close(poll, conns, t);
            }
        }
        let t = match conns.iter().position(Option::is_none) {
            Some(t) => t,
            None => {
                conns.push(None);
                conns.len() - 1
            }
        };
        if poll
            .registry()
            .register(
                &mut stream,
                Token(t),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            continue;
        }
        conns[t] = Some(AdminConn {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            http: None,
            headers: 0,
            commands: 0,
            closing: false,
            eof: false,
            last_active: now,
        });
    }
}

fn close(poll: &Poll, conns: &mut [Option<AdminConn>], t: usize) {
    if let Some(mut conn) = conns.get_mut(t).and_then(Option::take) {
        let _ = poll.registry().deregister(&mut conn.stream);
    }
}

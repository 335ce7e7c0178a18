//! Start-up, the listener, the admin port and shutdown.
//!
//! Threads: the caller's thread runs the listener (accepts, enforces
//! `max_connections`, hands connections round-robin to the workers over a
//! channel plus a mio `Waker`); N [`Worker`]s; one segcache storage thread;
//! an admin thread (plain-text `stats`/`version`/`quit`, and HTTP
//! `GET /metrics` in Prometheus text format); a signal thread that turns
//! SIGTERM/SIGINT into a shutdown: stop accepting, let workers answer what
//! they already read and write it out, stop storage, return.

use crate::config::Config;
use crate::metrics::Metrics;
use crate::worker::{Ctx, Worker};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use segcache::{Segcache, StorageConfig, StorageHandle};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);
/// Reply to a connection past `max_connections`.
pub const TOO_MANY: &[u8] = b"SERVER_ERROR too many open connections\r\n";
/// Most admin connections served at once.
const MAX_ADMIN_CONNS: usize = 16;

/// Why the server could not start.
#[derive(Debug)]
pub enum StartError {
    /// A configuration value is unusable (exit code 2).
    Config(crate::config::ConfigError),
    /// Binding, spawning... failed (exit code 1).
    Io(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => e.fmt(f),
            StartError::Io(e) => f.write_str(e),
        }
    }
}

/// A started server: call [`Server::run`] to serve until shutdown.
pub struct Server {
    listener: TcpListener,
    poll: Poll,
    wakers: Vec<Arc<Waker>>,
    senders: Vec<Sender<mio::net::TcpStream>>,
    workers: Vec<JoinHandle<()>>,
    admin: Option<JoinHandle<()>>,
    storage: Option<segcache::storage::StorageThread>,
    handle: StorageHandle,
    ctx: Arc<Ctx>,
    pub listen_addr: SocketAddr,
    pub admin_addr: SocketAddr,
}

fn io_err(what: &str) -> impl FnOnce(io::Error) -> StartError + '_ {
    move |e| StartError::Io(format!("{what}: {e}"))
}

/// Pins the current thread, logging where the OS refuses.
fn pin_current(who: &str, core: usize) {
    let known = core_affinity::get_core_ids().is_some_and(|ids| ids.iter().any(|c| c.id == core));
    if known && core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("segcache-server: {who} pinned to core {core}");
    } else {
        eprintln!("segcache-server: could not pin {who} to core {core} (refused or no such core); running unpinned");
    }
}

impl Server {
    /// Builds the cache, binds both ports and starts every thread.
    pub fn start(config: &Config) -> Result<Server, StartError> {
        let max_value = config.max_value.min(config.segment_size);
        let pin = config.pin.clone();
        let core_for = |i: usize| pin.as_ref().map(|cores| cores[i % cores.len()]);
        if let Some(cores) = &pin {
            if cores.len() < config.workers + 1 {
                eprintln!(
                    "segcache-server: --pin lists {} core(s) for {} worker(s) + 1 storage thread; cores are reused",
                    cores.len(),
                    config.workers
                );
            }
        }
        let mut builder = Segcache::builder()
            .heap_size(config.heap_size)
            .segment_size(config.segment_size)
            .eviction(config.eviction);
        if let Some(p) = config.hash_power {
            builder = builder.hash_power(p);
        }
        if let Some(path) = &config.datapool {
            builder = builder.datapool(path).restore(true);
        }
        let (handle, storage) = builder
            .spawn_storage(StorageConfig {
                queue_capacity: 4096,
                expire_interval: Duration::from_secs(1),
                pin_core: core_for(config.workers),
                name: "segcache-storage".into(),
            })
            .map_err(|e| match e {
                segcache::Error::InvalidConfig { field, reason } => {
                    StartError::Config(crate::config::ConfigError {
                        key: Config::seg_key(field),
                        reason,
                    })
                }
                segcache::Error::Persistence(reason) => {
                    StartError::Config(crate::config::ConfigError {
                        key: "seg.datapool (--datapool)".into(),
                        reason,
                    })
                }
                other => StartError::Io(format!("cannot start storage: {other}")),
            })?;

        if let Some(path) = &config.datapool {
            match handle.restore_outcome() {
                segcache::RestoreOutcome::Restored { items } => eprintln!(
                    "segcache-server: datapool {}: restored {items} items",
                    path.display()
                ),
                segcache::RestoreOutcome::Fresh { reason } => eprintln!(
                    "segcache-server: datapool {}: starting empty: {reason}",
                    path.display()
                ),
                segcache::RestoreOutcome::NotRequested => {}
            }
        }
        let mut listener = TcpListener::bind(config.listen)
            .map_err(io_err(&format!("cannot listen on {}", config.listen)))?;
        let listen_addr = listener.local_addr().map_err(io_err("local_addr"))?;
        let admin_listener = std::net::TcpListener::bind(config.admin).map_err(io_err(
            &format!("cannot listen on {} (admin)", config.admin),
        ))?;
        let admin_addr = admin_listener.local_addr().map_err(io_err("local_addr"))?;

        let metrics = Arc::new(Metrics::new(
            config.workers,
            config.max_connections,
            config.heap_size,
            max_value,
        ));
        let ctx = Arc::new(Ctx {
            metrics: Arc::clone(&metrics),
            shutdown: Default::default(),
            settings: crate::executor::Settings {
                heap_size: config.heap_size,
                max_connections: config.max_connections,
                port: listen_addr.port(),
                workers: config.workers,
                max_value,
                flush_enabled: !config.disable_flush_all,
            },
        });

        let poll = Poll::new().map_err(io_err("poll"))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_err("register listener"))?;
        let listener_waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(io_err("waker"))?);

        let mut wakers = vec![Arc::clone(&listener_waker)];
        let mut senders = Vec::new();
        let mut workers = Vec::new();
        for i in 0..config.workers {
            let (wpoll, waker) = Worker::poll_and_waker().map_err(io_err("worker poll"))?;
            let (tx, rx) = mpsc::channel();
            let client = handle.client();
            let stats = Arc::clone(&metrics.workers[i]);
            let wctx = Arc::clone(&ctx);
            let core = core_for(i);
            let join = thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    if let Some(core) = core {
                        pin_current(&format!("worker {i}"), core);
                    }
                    Worker::new(wpoll, rx, client, stats, wctx).run();
                })
                .map_err(io_err("spawn worker"))?;
            wakers.push(waker);
            senders.push(tx);
            workers.push(join);
        }

        let admin_waker_ctx = Arc::clone(&ctx);
        let admin_handle = handle.clone();
        admin_listener
            .set_nonblocking(true)
            .map_err(io_err("admin nonblocking"))?;
        let admin = thread::Builder::new()
            .name("admin".into())
            .spawn(move || admin_loop(admin_listener, admin_handle, admin_waker_ctx))
            .map_err(io_err("spawn admin"))?;

        Ok(Server {
            listener,
            poll,
            wakers,
            senders,
            workers,
            admin: Some(admin),
            storage: Some(storage),
            handle,
            ctx,
            listen_addr,
            admin_addr,
        })
    }

    /// A function that starts a graceful shutdown (for signal handlers).
    pub fn shutdown_trigger(&self) -> impl Fn() + Send + Sync + 'static {
        let ctx = Arc::clone(&self.ctx);
        let wakers = self.wakers.clone();
        move || {
            ctx.shutdown.store(true, Ordering::SeqCst);
            for w in &wakers {
                let _ = w.wake();
            }
        }
    }

    /// Accepts connections until shutdown, then stops everything.
    pub fn run(mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(256);
        let mut next = 0usize;
        let metrics = Arc::clone(&self.ctx.metrics);
        'serve: loop {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("segcache-server: listener poll failed: {e}");
                break;
            }
            if self.ctx.shutdown.load(Ordering::SeqCst) {
                break;
            }
            if !events.iter().any(|e| e.token() == LISTENER) {
                continue;
            }
            loop {
                let (mut stream, _) = match self.listener.accept() {
                    Ok(s) => s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        eprintln!("segcache-server: accept failed: {e}");
                        thread::sleep(Duration::from_millis(10));
                        break;
                    }
                };
                let open = metrics.curr_connections.load(Ordering::Relaxed);
                if open >= metrics.max_connections {
                    metrics.refused_connections.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.write(TOO_MANY);
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                metrics.curr_connections.fetch_add(1, Ordering::Relaxed);
                metrics.total_connections.fetch_add(1, Ordering::Relaxed);
                let w = next % self.senders.len();
                next = next.wrapping_add(1);
                if self.senders[w].send(stream).is_err() {
                    metrics.curr_connections.fetch_sub(1, Ordering::Relaxed);
                    break 'serve;
                }
                let _ = self.wakers[w + 1].wake();
                if self.ctx.shutdown.load(Ordering::SeqCst) {
                    break 'serve;
                }
            }
        }
        // Stop accepting, then let workers finish what they read.
        let _ = self.poll.registry().deregister(&mut self.listener);
        (self.shutdown_trigger())();
        drop(self.listener);
        drop(self.senders);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(a) = self.admin.take() {
            let _ = a.join();
        }
        self.handle.shutdown();
        match self.storage.take().map(|s| s.join()) {
            Some(Err(e)) => Err(format!("storage thread failed: {e}")),
            _ => Ok(()),
        }
    }
}

fn admin_loop(listener: std::net::TcpListener, handle: StorageHandle, ctx: Arc<Ctx>) {
    let active = Arc::new(AtomicUsize::new(0));
    while !ctx.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if active.load(Ordering::SeqCst) >= MAX_ADMIN_CONNS {
                    drop(stream);
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (handle, ctx, done) = (handle.clone(), Arc::clone(&ctx), Arc::clone(&active));
                let spawned = thread::Builder::new()
                    .name("admin-conn".into())
                    .spawn(move || {
                        let _ = admin_conn(stream, &handle, &ctx);
                        done.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn storage_stats(handle: &StorageHandle) -> Option<segcache::Stats> {
    match handle.call(segcache::Request::Stats) {
        Ok(segcache::Response::Stats(s)) => Some(*s),
        _ => None,
    }
}

/// Reads one line of at most 8 KiB.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<usize> {
    line.clear();
    reader.take(8192).read_until(b'\n', line)
}

fn admin_conn(stream: std::net::TcpStream, handle: &StorageHandle, ctx: &Ctx) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    for _ in 0..10_000 {
        if read_line(&mut reader, &mut line)? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line).trim().to_string();
        let mut words = text.split_whitespace();
        match words.next() {
            Some(method @ ("GET" | "HEAD")) => {
                let head_only = method == "HEAD";
                let path = words.next().unwrap_or("/").to_string();
                // Skip the headers.
                for _ in 0..100 {
                    if read_line(&mut reader, &mut line)? == 0 || line == b"\r\n" || line == b"\n" {
                        break;
                    }
                }
                let (status, body) = match path.as_str() {
                    "/metrics" => (
                        "200 OK",
                        ctx.metrics.prometheus(storage_stats(handle).as_ref()),
                    ),
                    "/" => ("200 OK", "segcache-server admin: GET /metrics\n".into()),
                    _ => ("404 Not Found", "not found\n".into()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                out.write_all(head.as_bytes())?;
                if !head_only {
                    out.write_all(body.as_bytes())?;
                }
                return Ok(());
            }
            Some("stats") => {
                let mut reply = Vec::new();
                for (name, value) in ctx.metrics.stat_lines(storage_stats(handle).as_ref()) {
                    crate::protocol::write_stat(&mut reply, name, value);
                }
                reply.extend_from_slice(b"END\r\n");
                out.write_all(&reply)?;
            }
            Some("version") => {
                out.write_all(format!("VERSION {}\r\n", env!("CARGO_PKG_VERSION")).as_bytes())?
            }
            Some("quit") => return Ok(()),
            None => {}
            Some(_) => out.write_all(b"ERROR\r\n")?,
        }
    }
    Ok(())
}

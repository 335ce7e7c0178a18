//! Start-up, the listeners, the admin port and shutdown.
//!
//! Threads: the caller's thread runs the listeners (TCP, and the Unix
//! domain socket of `--unix-socket`: accepts, enforces `max_connections`
//! over both, hands connections round-robin to the workers over a channel
//! plus a mio `Waker`); N [`Worker`]s; with more than one worker,
//! one segcache storage thread (a single worker owns the cache itself;
//! with `--shared-cache` the workers share a sharded cache instead);
//! an admin thread (plain-text `stats`/`version`/`quit`, and HTTP
//! `GET /metrics` in Prometheus text format); a signal thread that turns
//! SIGTERM/SIGINT (or a client's `shutdown`, when enabled) into a
//! shutdown: stop accepting, let workers answer what they already read and
//! write it out, stop storage, remove the Unix socket file, return.

use crate::admin;
use crate::backend::{Backend, OwnedCache, StatsPort, StatsSource, StorageWait};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::stream::Stream;
use crate::tls::{Certs, TlsStream};
use crate::worker::{Ctx, Worker};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use segcache::{
    Request, Response, RestoreOutcome, Segcache, ShardedCache, StorageConfig, StorageHandle,
};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);
const UNIX_LISTENER: Token = Token(2);
/// Reply to a connection past `max_connections`.
pub const TOO_MANY: &[u8] = b"SERVER_ERROR too many open connections\r\n";

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
    /// TLS on `listener`'s connections (`--tls-cert`).
    tls: Option<Arc<Certs>>,
    poll: Poll,
    wakers: Vec<Arc<Waker>>,
    senders: Vec<Sender<Stream>>,
    /// The Unix domain socket listener (`--unix-socket`) and its path,
    /// removed at shutdown.
    unix: Option<(mio::net::UnixListener, PathBuf)>,
    workers: Vec<JoinHandle<Result<(), String>>>,
    admin: Option<JoinHandle<()>>,
    /// The storage thread (absent when the one worker owns the cache).
    storage: Option<segcache::storage::StorageThread>,
    handle: Option<StorageHandle>,
    /// The sharded cache the workers share (`--shared-cache`).
    shared_cache: Option<Arc<ShardedCache>>,
    /// Save the shared cache's datapool at the end.
    save_shared: bool,
    ctx: Arc<Ctx>,
    pub listen_addr: SocketAddr,
    pub admin_addr: SocketAddr,
}

fn io_err(what: &str) -> impl FnOnce(io::Error) -> StartError + '_ {
    move |e| StartError::Io(format!("{what}: {e}"))
}

/// A non-blocking listening socket on `addr` with room for `backlog`
/// connections waiting to be accepted (the kernel caps it at
/// `net.core.somaxconn`). Std and mio listen with 128, which drops SYNs,
/// and stalls clients for a second, whenever connects arrive in bursts.
pub fn listen(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind(addr)?;
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor belongs to `listener`, which outlives the
    // call. listen() on a socket already listening only sets its backlog
    // (Linux and the BSDs), and touches no memory of ours.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A non-blocking Unix domain socket listener at `path` with room for
/// `backlog` waiting connections, its file given `mode`. A socket file
/// already there (left by a run that did not stop cleanly) is replaced;
/// any other file is an error, never removed.
pub fn listen_unix(path: &Path, backlog: u32, mode: u32) -> io::Result<mio::net::UnixListener> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = mio::net::UnixListener::bind(path)?;
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // SAFETY: as in `listen`: the descriptor belongs to `listener`, which
    // outlives the call, and listen() only sets the backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        return Err(io::Error::last_os_error());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
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

/// One outcome for the shards' restores: restored if every shard was
/// (items summed), else fresh with the first reason given.
fn shards_restored(outcomes: &[RestoreOutcome]) -> RestoreOutcome {
    let mut items = 0;
    for outcome in outcomes {
        match outcome {
            RestoreOutcome::Restored { items: n } => items += n,
            other => return other.clone(),
        }
    }
    if outcomes.is_empty() {
        RestoreOutcome::NotRequested
    } else {
        RestoreOutcome::Restored { items }
    }
}

impl Server {
    /// Builds the cache, binds both ports and starts every thread.
    pub fn start(config: &Config) -> Result<Server, StartError> {
        crate::budget::return_freed_memory();
        let max_value = config.largest_value();
        let pin = config.pin.clone();
        let core_for = |i: usize| pin.as_ref().map(|cores| cores[i % cores.len()]);
        // One worker owns the cache itself (no storage thread to hand
        // requests to and wake, as Pelikan's server with one worker);
        // several share a storage thread.
        let inline = config.workers == 1;
        let storage_thread = !inline && !config.shared_cache;
        if let Some(cores) = &pin {
            let threads = config.workers + usize::from(storage_thread);
            if cores.len() < threads {
                eprintln!(
                    "segcache-server: --pin lists {} core(s) for {} worker(s){}; cores are reused",
                    cores.len(),
                    config.workers,
                    if storage_thread {
                        " + 1 storage thread"
                    } else {
                        ""
                    }
                );
            }
        }
        let mut builder = Segcache::builder()
            .heap_size(config.heap_size)
            .segment_size(config.segment_size)
            .eviction(config.eviction)
            .prefault(config.prefault)
            // Without --prefault, a background thread keeps the heap's
            // pages resident ahead of the writes: a first write into a
            // fresh 2 MiB huge page would otherwise stall every request
            // behind it while the kernel zeroes it.
            .populate_ahead(true);
        if let Some(p) = config.hash_power {
            builder = builder.hash_power(p);
        }
        if let Some(path) = &config.datapool {
            builder = builder.datapool(path).restore(true);
        }
        let storage_err = |e| match e {
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
        };
        // Several workers with --shared-cache share a sharded cache.
        let mut shared_cache = None;
        // How many segments a key dump walks (`lru_crawler metadump`): what
        // a walk of an index past the last says.
        let past_the_last = Request::<&[u8]>::Walk { segment: u32::MAX };
        let segments = |r: Response| match r {
            Response::Walked(w) => w.segments,
            _ => 0,
        };
        let walk_segments;
        let (mut own_cache, handle, storage) = if !inline && !storage_thread {
            let cache = builder.build_sharded(config.shards).map_err(storage_err)?;
            walk_segments = segments(cache.execute(&past_the_last));
            shared_cache = Some(Arc::new(cache));
            (None, None, None)
        } else if inline {
            let mut cache = builder.build().map_err(storage_err)?;
            walk_segments = segments(cache.execute(&past_the_last));
            (Some(OwnedCache::new(cache)), None, None)
        } else {
            let (handle, storage) = builder
                .spawn_storage(StorageConfig {
                    queue_capacity: 4096,
                    expire_interval: Duration::from_secs(1),
                    pin_core: core_for(config.workers),
                    name: "segcache-storage".into(),
                    ..StorageConfig::default()
                })
                .map_err(storage_err)?;
            walk_segments = handle
                .call(Request::Walk { segment: u32::MAX })
                .map_or(0, segments);
            (None, Some(handle), Some(storage))
        };
        let restored = match (&own_cache, &handle) {
            _ if shared_cache.is_some() => {
                let outcomes = shared_cache.as_ref().map(|c| c.restore_outcomes());
                shards_restored(&outcomes.unwrap_or_default())
            }
            (Some(cache), _) => cache.restore_outcome().clone(),
            (None, Some(handle)) => handle.restore_outcome().clone(),
            (None, None) => RestoreOutcome::NotRequested,
        };

        if let Some(path) = &config.datapool {
            match &restored {
                RestoreOutcome::Restored { items } => eprintln!(
                    "segcache-server: datapool {}: restored {items} items",
                    path.display()
                ),
                RestoreOutcome::Fresh { reason } => eprintln!(
                    "segcache-server: datapool {}: starting empty: {reason}",
                    path.display()
                ),
                RestoreOutcome::NotRequested => {}
            }
        }
        // TLS first: a bad certificate or key stops start-up before
        // anything listens.
        let tls = match &config.tls {
            None => None,
            Some((cert, key)) => Some(Certs::new(cert, key).map(Arc::new).map_err(|reason| {
                StartError::Config(crate::config::ConfigError {
                    key: "server.tls_cert, server.tls_key (--tls-cert, --tls-key)".into(),
                    reason,
                })
            })?),
        };
        let mut listener = listen(config.listen, config.backlog)
            .map(TcpListener::from_std)
            .map_err(io_err(&format!("cannot listen on {}", config.listen)))?;
        let listen_addr = listener.local_addr().map_err(io_err("local_addr"))?;
        let admin_listener = listen(config.admin, config.backlog)
            .map(TcpListener::from_std)
            .map_err(io_err(&format!(
                "cannot listen on {} (admin)",
                config.admin
            )))?;
        let admin_addr = admin_listener.local_addr().map_err(io_err("local_addr"))?;

        let metrics = Arc::new(Metrics::new(
            config.workers,
            config.max_connections,
            config.heap_size,
            max_value,
        ));
        if let Some(handle) = &handle {
            let _ = metrics.storage.set(handle.clone());
        }
        let limits = crate::budget::Limits {
            worker_buffered: config.max_buffered / config.workers,
            max_value,
            // A restored cache may hold values of any size.
            largest: Arc::new(std::sync::atomic::AtomicUsize::new(
                if matches!(restored, RestoreOutcome::Restored { .. }) {
                    max_value
                } else {
                    0
                },
            )),
            conn_output: config.max_conn_output,
            idle_timeout: config.idle_timeout,
            walk: (walk_segments, config.segment_size),
        };
        if limits.worker_buffered < 4 * (max_value + crate::budget::VALUE_LINE) {
            return Err(StartError::Config(crate::config::ConfigError {
                key: "server.max_buffered (--max-buffered)".into(),
                reason: format!(
                    "{} bytes leave each of {} worker(s) less than 4 values of up to {} bytes (raise it, or lower --max-value)",
                    config.max_buffered, config.workers, max_value
                ),
            }));
        }
        let ctx = Arc::new(Ctx {
            metrics: Arc::clone(&metrics),
            shutdown: Default::default(),
            wakers: Default::default(),
            limits,
            settings: crate::executor::Settings {
                heap_size: config.heap_size,
                max_connections: config.max_connections,
                port: listen_addr.port(),
                workers: config.workers,
                max_value,
                segment_size: config.segment_size,
                walk_segments,
                flush_enabled: !config.disable_flush_all,
                shutdown_enabled: config.enable_shutdown,
                unix_socket: config
                    .unix_socket
                    .as_ref()
                    .map(|(path, mode)| (path.display().to_string(), *mode)),
                tls: tls.clone(),
            },
        });

        let poll = Poll::new().map_err(io_err("poll"))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_err("register listener"))?;
        let unix = match &config.unix_socket {
            None => None,
            Some((path, mode)) => {
                let mut unix = listen_unix(path, config.backlog, *mode).map_err(|e| {
                    StartError::Config(crate::config::ConfigError {
                        key: "server.unix_socket (--unix-socket)".into(),
                        reason: format!("cannot listen on {}: {e}", path.display()),
                    })
                })?;
                poll.registry()
                    .register(&mut unix, UNIX_LISTENER, Interest::READABLE)
                    .map_err(io_err("register unix listener"))?;
                Some((unix, path.clone()))
            }
        };
        let listener_waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(io_err("waker"))?);

        let mut wakers = vec![Arc::clone(&listener_waker)];
        let mut senders = Vec::new();
        let mut workers = Vec::new();
        let mut stats_source = match &shared_cache {
            Some(cache) => Some(StatsSource::Shared(Arc::clone(cache))),
            None => handle.clone().map(StatsSource::Thread),
        };
        for i in 0..config.workers {
            let (wpoll, waker) = Worker::poll_and_waker().map_err(io_err("worker poll"))?;
            let (tx, rx) = mpsc::channel();
            let backend = match (own_cache.take(), &handle) {
                _ if shared_cache.is_some() => {
                    let cache = shared_cache.as_ref().map(Arc::clone);
                    Backend::shared(cache.expect("checked"), i == 0)
                }
                (Some(cache), _) => {
                    let port = Arc::new(StatsPort::new(Arc::clone(&waker)));
                    stats_source = Some(StatsSource::Inline(Arc::clone(&port)));
                    Backend::inline(cache, port)
                }
                (None, Some(handle)) => {
                    let wait = StorageWait::new().map_err(io_err("storage wait poll"))?;
                    Backend::thread(handle, wait)
                }
                (None, None) => unreachable!("one worker owns the cache, or a storage thread does"),
            };
            let stats = Arc::clone(&metrics.workers[i]);
            let wctx = Arc::clone(&ctx);
            let core = core_for(i);
            let join = thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    if let Some(core) = core {
                        pin_current(&format!("worker {i}"), core);
                    }
                    Worker::new(wpoll, rx, backend, stats, wctx).run()
                })
                .map_err(io_err("spawn worker"))?;
            wakers.push(waker);
            senders.push(tx);
            workers.push(join);
        }
        let stats_source = stats_source.expect("at least one worker");

        let (admin_poll, admin_waker) = admin::poll_and_waker().map_err(io_err("admin poll"))?;
        let admin_ctx = Arc::clone(&ctx);
        let admin = thread::Builder::new()
            .name("admin".into())
            .spawn(move || admin::run(admin_poll, admin_listener, stats_source, admin_ctx))
            .map_err(io_err("spawn admin"))?;
        wakers.push(admin_waker);
        let _ = ctx.wakers.set(wakers.clone());

        Ok(Server {
            listener,
            tls,
            poll,
            wakers,
            senders,
            unix,
            workers,
            admin: Some(admin),
            storage,
            handle,
            save_shared: shared_cache.is_some() && config.datapool.is_some(),
            shared_cache,
            ctx,
            listen_addr,
            admin_addr,
        })
    }

    /// A function that starts a graceful shutdown (for signal handlers).
    pub fn shutdown_trigger(&self) -> impl Fn() + Send + Sync + 'static {
        let ctx = Arc::clone(&self.ctx);
        move || ctx.stop()
    }

    /// Accepts every connection waiting on one listener (`accept` takes
    /// the next, `wrap` makes it a [`Stream`]) and hands each to a worker
    /// in turn, or refuses it past `--max-connections`. False when the
    /// server is stopping.
    fn accept_all<C: Write>(
        &mut self,
        next: &mut usize,
        accept: impl Fn(&Self) -> io::Result<C>,
        wrap: impl Fn(&Self, C) -> io::Result<Stream>,
    ) -> bool {
        let metrics = Arc::clone(&self.ctx.metrics);
        loop {
            let mut conn = match accept(self) {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("segcache-server: accept failed: {e}");
                    thread::sleep(Duration::from_millis(10));
                    return true;
                }
            };
            let open = metrics.curr_connections.load(Ordering::Relaxed);
            if open >= metrics.max_connections {
                metrics.refused_connections.fetch_add(1, Ordering::Relaxed);
                let _ = conn.write(TOO_MANY);
                if let Ok(stream) = wrap(self, conn) {
                    let _ = stream.shutdown_write();
                }
                continue;
            }
            let stream = match wrap(self, conn) {
                Ok(stream) => stream,
                Err(e) => {
                    eprintln!("segcache-server: cannot start a connection: {e}");
                    continue;
                }
            };
            match &stream {
                Stream::Tcp(tcp) => {
                    let _ = tcp.set_nodelay(true);
                }
                Stream::Tls(tls) => {
                    let _ = tls.socket().set_nodelay(true);
                }
                Stream::Unix(_) => {}
            }
            metrics.curr_connections.fetch_add(1, Ordering::Relaxed);
            metrics.total_connections.fetch_add(1, Ordering::Relaxed);
            let w = *next % self.senders.len();
            *next = next.wrapping_add(1);
            if self.senders[w].send(stream).is_err() {
                metrics.curr_connections.fetch_sub(1, Ordering::Relaxed);
                return false;
            }
            let _ = self.wakers[w + 1].wake();
            if self.ctx.shutdown.load(Ordering::SeqCst) {
                return false;
            }
        }
    }

    /// Accepts connections until shutdown, then stops everything.
    pub fn run(mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(256);
        let mut next = 0usize;
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
            let (tcp, unix) = events.iter().fold((false, false), |(t, u), e| {
                (t || e.token() == LISTENER, u || e.token() == UNIX_LISTENER)
            });
            if tcp
                && !self.accept_all(
                    &mut next,
                    |s| s.listener.accept().map(|(c, _)| c),
                    |s, c| match &s.tls {
                        Some(certs) => Ok(Stream::Tls(Box::new(TlsStream::server(
                            c,
                            &certs.current(),
                        )?))),
                        None => Ok(Stream::Tcp(c)),
                    },
                )
            {
                break 'serve;
            }
            if unix {
                let accepted = self.accept_all(
                    &mut next,
                    |s| match &s.unix {
                        Some((listener, _)) => listener.accept().map(|(c, _)| c),
                        None => Err(io::ErrorKind::WouldBlock.into()),
                    },
                    |_, c| Ok(Stream::Unix(c)),
                );
                if !accepted {
                    break 'serve;
                }
            }
        }
        // Stop accepting, then let workers finish what they read.
        let _ = self.poll.registry().deregister(&mut self.listener);
        if let Some((mut listener, path)) = self.unix.take() {
            let _ = self.poll.registry().deregister(&mut listener);
            drop(listener);
            let _ = std::fs::remove_file(path);
        }
        (self.shutdown_trigger())();
        drop(self.listener);
        drop(self.senders);
        let mut failure = None;
        let mut panicked = false;
        for w in self.workers.drain(..) {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(e),
                Err(_) => {
                    panicked = true;
                    failure = Some("a worker thread panicked".to_string());
                }
            }
        }
        if let Some(a) = self.admin.take() {
            let _ = a.join();
        }
        // Every worker and the admin thread are gone: the shared cache is
        // ours alone. Not saved after a panic (it may be half-changed).
        if let Some(cache) = self.shared_cache.take() {
            if self.save_shared && !panicked {
                match Arc::try_unwrap(cache) {
                    Ok(cache) => {
                        if let Err(e) = cache.save() {
                            failure = Some(format!("saving the datapool: {e}"));
                        }
                    }
                    Err(_) => failure = Some("the shared cache is still in use".to_string()),
                }
            }
        }
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
        }
        if let Some(Err(e)) = self.storage.take().map(|s| s.join()) {
            failure = Some(format!("storage thread failed: {e}"));
        }
        failure.map_or(Ok(()), Err)
    }
}

//! Server counters: per-worker atomics (summed when read), connection
//! gauges, a request latency histogram per worker, and the two renderings
//! of them: memcached's `STAT` lines and Prometheus text.
//!
//! Workers only ever touch their own [`WorkerStats`] (relaxed atomics, and
//! a histogram lock that is contended only while the admin port reads it),
//! so counting costs no shared cache-line traffic on the request path.
//!
//! `stats reset` never zeroes a counter: it records the counters' values
//! as a baseline that the `STAT` lines subtract, so the Prometheus
//! text stays monotonic (as Prometheus requires) while `stats` counts
//! from the reset, as memcached's does.

use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The commands counted separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Get,
    Gets,
    Gat,
    Gats,
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Delete,
    Incr,
    Decr,
    Touch,
    FlushAll,
    Version,
    Verbosity,
    Stats,
    Quit,
    Mg,
    Ms,
    Md,
    Ma,
    Mn,
    /// `lru_crawler metadump` and `crawl`.
    LruCrawler,
    /// `shutdown`, when enabled.
    Shutdown,
    /// Unknown or malformed requests.
    Invalid,
}

impl Cmd {
    pub const ALL: [Cmd; 27] = [
        Cmd::Get,
        Cmd::Gets,
        Cmd::Gat,
        Cmd::Gats,
        Cmd::Set,
        Cmd::Add,
        Cmd::Replace,
        Cmd::Append,
        Cmd::Prepend,
        Cmd::Cas,
        Cmd::Delete,
        Cmd::Incr,
        Cmd::Decr,
        Cmd::Touch,
        Cmd::FlushAll,
        Cmd::Version,
        Cmd::Verbosity,
        Cmd::Stats,
        Cmd::Quit,
        Cmd::Mg,
        Cmd::Ms,
        Cmd::Md,
        Cmd::Ma,
        Cmd::Mn,
        Cmd::LruCrawler,
        Cmd::Shutdown,
        Cmd::Invalid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cmd::Get => "get",
            Cmd::Gets => "gets",
            Cmd::Gat => "gat",
            Cmd::Gats => "gats",
            Cmd::Set => "set",
            Cmd::Add => "add",
            Cmd::Replace => "replace",
            Cmd::Append => "append",
            Cmd::Prepend => "prepend",
            Cmd::Cas => "cas",
            Cmd::Delete => "delete",
            Cmd::Incr => "incr",
            Cmd::Decr => "decr",
            Cmd::Touch => "touch",
            Cmd::FlushAll => "flush_all",
            Cmd::Version => "version",
            Cmd::Verbosity => "verbosity",
            Cmd::Stats => "stats",
            Cmd::Quit => "quit",
            Cmd::Mg => "mg",
            Cmd::Ms => "ms",
            Cmd::Md => "md",
            Cmd::Ma => "ma",
            Cmd::Mn => "mn",
            Cmd::LruCrawler => "lru_crawler",
            Cmd::Shutdown => "shutdown",
            Cmd::Invalid => "invalid",
        }
    }
}

/// Outcome counters, as memcached names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    GetHits,
    GetMisses,
    DeleteHits,
    DeleteMisses,
    IncrHits,
    IncrMisses,
    DecrHits,
    DecrMisses,
    CasHits,
    CasMisses,
    CasBadval,
    TouchHits,
    TouchMisses,
    /// Successful stores (memcached's `total_items`).
    Stored,
    /// Values refused as larger than `max_value` or a segment.
    TooLarge,
    /// Stores refused for lack of memory.
    OutOfMemory,
    ClientErrors,
    BytesRead,
    BytesWritten,
    /// Connections closed by `--idle-timeout` (memcached's `idle_kicks`).
    IdleKicks,
    /// Connections closed to free buffer memory for others.
    ShedConnections,
    /// Rounds left to another holder of the storage token whose answer a
    /// worker found while spinning (no sleep, no wake-up).
    StorageWaitSpun,
    /// Rounds left to another holder whose answer a worker slept for.
    StorageWaitSlept,
}

impl Outcome {
    pub const ALL: [Outcome; 23] = [
        Outcome::GetHits,
        Outcome::GetMisses,
        Outcome::DeleteHits,
        Outcome::DeleteMisses,
        Outcome::IncrHits,
        Outcome::IncrMisses,
        Outcome::DecrHits,
        Outcome::DecrMisses,
        Outcome::CasHits,
        Outcome::CasMisses,
        Outcome::CasBadval,
        Outcome::TouchHits,
        Outcome::TouchMisses,
        Outcome::Stored,
        Outcome::TooLarge,
        Outcome::OutOfMemory,
        Outcome::ClientErrors,
        Outcome::BytesRead,
        Outcome::BytesWritten,
        Outcome::IdleKicks,
        Outcome::ShedConnections,
        Outcome::StorageWaitSpun,
        Outcome::StorageWaitSlept,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::GetHits => "get_hits",
            Outcome::GetMisses => "get_misses",
            Outcome::DeleteHits => "delete_hits",
            Outcome::DeleteMisses => "delete_misses",
            Outcome::IncrHits => "incr_hits",
            Outcome::IncrMisses => "incr_misses",
            Outcome::DecrHits => "decr_hits",
            Outcome::DecrMisses => "decr_misses",
            Outcome::CasHits => "cas_hits",
            Outcome::CasMisses => "cas_misses",
            Outcome::CasBadval => "cas_badval",
            Outcome::TouchHits => "touch_hits",
            Outcome::TouchMisses => "touch_misses",
            Outcome::Stored => "total_items",
            Outcome::TooLarge => "too_large",
            Outcome::OutOfMemory => "out_of_memory",
            Outcome::ClientErrors => "client_errors",
            Outcome::BytesRead => "bytes_read",
            Outcome::BytesWritten => "bytes_written",
            Outcome::IdleKicks => "idle_kicks",
            Outcome::ShedConnections => "shed_connections",
            Outcome::StorageWaitSpun => "storage_waits_spun",
            Outcome::StorageWaitSlept => "storage_waits_slept",
        }
    }
}

/// A count per [`Cmd`], in [`Cmd::ALL`]'s order.
pub type CmdCounts = [u64; Cmd::ALL.len()];

fn new_histogram() -> Histogram<u64> {
    // 1 us .. 60 s in nanoseconds, 2 significant digits: a few KiB.
    Histogram::new_with_bounds(1_000, 60_000_000_000, 2).expect("valid histogram bounds")
}

/// One worker's counters.
pub struct WorkerStats {
    cmds: [AtomicU64; Cmd::ALL.len()],
    outcomes: [AtomicU64; Outcome::ALL.len()],
    /// Request-to-reply latency (from the read that completed a request to
    /// its reply being queued for writing), nanoseconds.
    latency: Mutex<Histogram<u64>>,
    /// Bytes of client buffers the worker holds (gauge).
    buffered: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats {
            cmds: std::array::from_fn(|_| AtomicU64::new(0)),
            outcomes: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: Mutex::new(new_histogram()),
            buffered: AtomicU64::new(0),
        }
    }
}

impl WorkerStats {
    #[inline]
    pub fn cmd(&self, cmd: Cmd) {
        self.cmds[cmd as usize].fetch_add(1, Relaxed);
    }

    #[inline]
    pub fn add(&self, outcome: Outcome, n: u64) {
        self.outcomes[outcome as usize].fetch_add(n, Relaxed);
    }

    /// This worker's command counts now.
    pub fn cmd_counts(&self) -> CmdCounts {
        std::array::from_fn(|i| self.cmds[i].load(Relaxed))
    }

    /// Sets the bytes of client buffers the worker holds.
    #[inline]
    pub fn set_buffered(&self, bytes: usize) {
        self.buffered.store(bytes as u64, Relaxed);
    }

    /// Records `count` requests that each took `nanos`.
    pub fn record_latency(&self, nanos: u64, count: u64) {
        if count == 0 {
            return;
        }
        if let Ok(mut h) = self.latency.lock() {
            // Values beyond the bounds are clamped, never an error.
            h.saturating_record_n(nanos.max(1_000), count);
        }
    }
}

/// Everything the server counts, shared by workers, listener and admin.
pub struct Metrics {
    pub started: Instant,
    pub started_unix: u64,
    pub workers: Vec<Arc<WorkerStats>>,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub refused_connections: AtomicU64,
    pub max_connections: u64,
    pub limit_maxbytes: u64,
    pub max_value: u64,
    /// The storage thread, when there is one: its counters of who ran the
    /// requests (the storage thread, or workers combining while it slept).
    pub storage: std::sync::OnceLock<segcache::StorageHandle>,
    /// The counters' values at the last `stats reset`.
    baseline: Mutex<Baseline>,
}

/// The counters' values at the last `stats reset` (zero before any): what
/// `stats` subtracts. Gauges (items, bytes, open connections, buffers)
/// and the process's figures (uptime, CPU time) are not reset, as in
/// memcached.
#[derive(Default)]
struct Baseline {
    cmds: CmdCounts,
    outcomes: [u64; Outcome::ALL.len()],
    /// `None` before the first reset.
    latency: Option<Histogram<u64>>,
    total_connections: u64,
    refused_connections: u64,
    /// The core's counters (taken from the storage reply the reset waited
    /// for): evictions, expirations, evicted and expired segments, merges.
    core: [u64; 5],
    storage: segcache::StorageCounters,
}

/// The core's counters a reset zeroes, in [`Baseline::core`]'s order.
fn core_counters(st: &segcache::Stats) -> [u64; 5] {
    [
        st.evictions,
        st.expirations,
        st.evicted_segments,
        st.expired_segments,
        st.merges,
    ]
}

/// A sum of every worker's counters at one moment.
pub struct Snapshot {
    pub cmds: CmdCounts,
    pub outcomes: [u64; Outcome::ALL.len()],
    pub latency: Histogram<u64>,
}

impl Snapshot {
    pub fn cmd(&self, cmd: Cmd) -> u64 {
        self.cmds[cmd as usize]
    }

    pub fn get(&self, outcome: Outcome) -> u64 {
        self.outcomes[outcome as usize]
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Metrics {
    pub fn new(workers: usize, max_connections: usize, heap: usize, max_value: usize) -> Self {
        Metrics {
            started: Instant::now(),
            started_unix: unix_now(),
            workers: (0..workers).map(|_| Arc::default()).collect(),
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            max_connections: max_connections as u64,
            limit_maxbytes: heap as u64,
            max_value: max_value as u64,
            storage: std::sync::OnceLock::new(),
            baseline: Mutex::default(),
        }
    }

    /// `stats reset`: from now on `stats` counts from the counters' present
    /// values (`storage`: the core's stats, read for this reset; `later`:
    /// see [`snapshot_before`](Self::snapshot_before)).
    pub fn reset(&self, storage: Option<&segcache::Stats>, later: &CmdCounts) {
        let s = self.snapshot_before(later);
        let base = Baseline {
            cmds: s.cmds,
            outcomes: s.outcomes,
            latency: Some(s.latency),
            total_connections: self.total_connections.load(Relaxed),
            refused_connections: self.refused_connections.load(Relaxed),
            core: storage.map(core_counters).unwrap_or_default(),
            storage: self.storage.get().map(|h| h.counters()).unwrap_or_default(),
        };
        if let Ok(mut b) = self.baseline.lock() {
            *b = base;
        }
    }

    /// Bytes of client buffers all workers hold.
    pub fn buffered_bytes(&self) -> u64 {
        self.workers.iter().map(|w| w.buffered.load(Relaxed)).sum()
    }

    /// The counters as they were when a `stats` command was dispatched:
    /// `later` counts the commands its worker dispatched after it (the rest
    /// of its pipelined batch, whose outcomes are not counted yet: a worker
    /// counts a command when it dispatches it and its outcome when it
    /// renders the reply, in order).
    pub fn snapshot_before(&self, later: &CmdCounts) -> Snapshot {
        let mut s = self.snapshot();
        for (v, l) in s.cmds.iter_mut().zip(later) {
            *v = v.saturating_sub(*l);
        }
        s
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            cmds: [0; Cmd::ALL.len()],
            outcomes: [0; Outcome::ALL.len()],
            latency: new_histogram(),
        };
        for w in &self.workers {
            for (sum, c) in s.cmds.iter_mut().zip(&w.cmds) {
                *sum += c.load(Relaxed);
            }
            for (sum, c) in s.outcomes.iter_mut().zip(&w.outcomes) {
                *sum += c.load(Relaxed);
            }
            if let Ok(h) = w.latency.lock() {
                let _ = s.latency.add(&*h);
            }
        }
        s
    }

    /// memcached's `stats` reply fields, in its order where they exist,
    /// then segcache's own; `later`: see
    /// [`snapshot_before`](Self::snapshot_before).
    pub fn stat_lines(
        &self,
        storage: Option<&segcache::Stats>,
        later: &CmdCounts,
    ) -> Vec<(&'static str, String)> {
        let mut s = self.snapshot_before(later);
        // Counters since the last `stats reset` (a poisoned lock: since start).
        let guard = self.baseline.lock().ok();
        let base = guard.as_deref();
        if let Some(b) = base {
            for (v, b) in s.cmds.iter_mut().zip(&b.cmds) {
                *v = v.saturating_sub(*b);
            }
            for (v, b) in s.outcomes.iter_mut().zip(&b.outcomes) {
                *v = v.saturating_sub(*b);
            }
            if let Some(h) = &b.latency {
                // Counts only grow, so the earlier histogram is contained in
                // this one; should that fail, the percentiles stay since start.
                let since = s.latency.clone();
                if s.latency.subtract(h).is_err() {
                    s.latency = since;
                }
            }
        }
        let since = |now: u64, field: fn(&Baseline) -> u64| {
            now.saturating_sub(base.map(field).unwrap_or(0))
        };
        let now = unix_now();
        let mut v: Vec<(&'static str, String)> = Vec::with_capacity(64);
        let (user, system) = rusage();
        v.push(("pid", std::process::id().to_string()));
        v.push(("uptime", self.started.elapsed().as_secs().to_string()));
        v.push(("time", now.to_string()));
        v.push(("version", env!("CARGO_PKG_VERSION").to_string()));
        v.push(("pointer_size", (usize::BITS).to_string()));
        v.push(("rusage_user", format!("{user:.6}")));
        v.push(("rusage_system", format!("{system:.6}")));
        v.push(("max_connections", self.max_connections.to_string()));
        v.push((
            "curr_connections",
            // Acquire: a closed connection's buffers (`buffered_bytes`,
            // read below) are released before its count drops.
            self.curr_connections.load(Acquire).to_string(),
        ));
        v.push((
            "total_connections",
            since(self.total_connections.load(Relaxed), |b| {
                b.total_connections
            })
            .to_string(),
        ));
        v.push((
            "rejected_connections",
            since(self.refused_connections.load(Relaxed), |b| {
                b.refused_connections
            })
            .to_string(),
        ));
        let get_family = s.cmd(Cmd::Get) + s.cmd(Cmd::Gets) + s.cmd(Cmd::Mg);
        let gat_family = s.cmd(Cmd::Gat) + s.cmd(Cmd::Gats);
        let sets = [
            Cmd::Set,
            Cmd::Add,
            Cmd::Replace,
            Cmd::Append,
            Cmd::Prepend,
            Cmd::Cas,
            Cmd::Ms,
        ]
        .iter()
        .map(|&c| s.cmd(c))
        .sum::<u64>();
        v.push(("cmd_get", get_family.to_string()));
        v.push(("cmd_set", sets.to_string()));
        v.push(("cmd_flush", s.cmd(Cmd::FlushAll).to_string()));
        v.push(("cmd_touch", (s.cmd(Cmd::Touch) + gat_family).to_string()));
        let meta = [Cmd::Mg, Cmd::Ms, Cmd::Md, Cmd::Ma, Cmd::Mn]
            .iter()
            .map(|&c| s.cmd(c))
            .sum::<u64>();
        v.push(("cmd_meta", meta.to_string()));
        for o in Outcome::ALL {
            if o != Outcome::Stored {
                v.push((o.name(), s.get(o).to_string()));
            }
        }
        v.push(("buffered_bytes", self.buffered_bytes().to_string()));
        v.push(("limit_maxbytes", self.limit_maxbytes.to_string()));
        v.push(("item_size_max", self.max_value.to_string()));
        v.push(("threads", self.workers.len().to_string()));
        if let Some(st) = storage {
            v.push(("curr_items", st.items.to_string()));
            v.push(("total_items", s.get(Outcome::Stored).to_string()));
            v.push(("bytes", st.live_bytes.to_string()));
            let core = core_counters(st);
            let base = base.map(|b| b.core).unwrap_or_default();
            let [evictions, expirations, evicted_segments, expired_segments, merges] =
                std::array::from_fn(|i| core[i].saturating_sub(base[i]));
            v.push(("evictions", evictions.to_string()));
            v.push(("expirations", expirations.to_string()));
            v.push(("evicted_segments", evicted_segments.to_string()));
            v.push(("expired_segments", expired_segments.to_string()));
            v.push(("merges", merges.to_string()));
            v.push(("segments_used", st.segments_used.to_string()));
            v.push(("segments_free", st.segments_free.to_string()));
            v.push(("hash_table_bytes", st.hash_table_bytes.to_string()));
            v.push(("total_bytes", st.total_bytes.to_string()));
        }
        if let Some(handle) = self.storage.get() {
            let c = handle.counters();
            let b = base.map(|b| b.storage).unwrap_or_default();
            let jobs = [
                ("storage_thread_jobs", c.storage_jobs, b.storage_jobs),
                ("storage_worker_jobs", c.client_jobs, b.client_jobs),
                ("storage_worker_turns", c.client_turns, b.client_turns),
                ("storage_thread_turns", c.storage_turns, b.storage_turns),
            ];
            for (name, now, then) in jobs {
                v.push((name, now.saturating_sub(then).to_string()));
            }
        }
        for (q, name) in [
            (0.5, "latency_p50_us"),
            (0.99, "latency_p99_us"),
            (0.999, "latency_p999_us"),
        ] {
            v.push((name, (s.latency.value_at_quantile(q) / 1000).to_string()));
        }
        v
    }

    /// Prometheus text exposition (format 0.0.4).
    pub fn prometheus(&self, storage: Option<&segcache::Stats>) -> String {
        let s = self.snapshot();
        let mut out = String::with_capacity(8192);
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP segcache_{name} {help}");
            let _ = writeln!(out, "# TYPE segcache_{name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "segcache_{name}{labels} {value}");
            }
        };
        let cmds: Vec<(String, u64)> = Cmd::ALL
            .iter()
            .map(|c| (format!("{{command=\"{}\"}}", c.name()), s.cmd(*c)))
            .collect();
        metric(
            "commands_total",
            "counter",
            "Requests received, by command.",
            &cmds,
        );
        for o in Outcome::ALL {
            metric(
                &format!("{}_total", o.name()),
                "counter",
                &format!("The {} counter of `stats`.", o.name()),
                &[(String::new(), s.get(o))],
            );
        }
        metric(
            "connections_current",
            "gauge",
            "Open client connections.",
            &[(String::new(), self.curr_connections.load(Relaxed))],
        );
        metric(
            "connections_total",
            "counter",
            "Client connections accepted.",
            &[(String::new(), self.total_connections.load(Relaxed))],
        );
        metric(
            "connections_refused_total",
            "counter",
            "Client connections refused past max_connections.",
            &[(String::new(), self.refused_connections.load(Relaxed))],
        );
        metric(
            "buffered_bytes",
            "gauge",
            "Bytes of client request and reply buffers (bounded by --max-buffered).",
            &[(String::new(), self.buffered_bytes())],
        );
        metric(
            "uptime_seconds",
            "gauge",
            "Seconds since start.",
            &[(String::new(), self.started.elapsed().as_secs())],
        );
        if let Some(st) = storage {
            let gauges: [(&str, &str, u64); 8] = [
                ("items", "Items held.", st.items),
                ("live_bytes", "Bytes of live items.", st.live_bytes),
                ("segments_used", "Segments in use.", st.segments_used),
                ("segments_free", "Free segments.", st.segments_free),
                ("heap_bytes", "Bytes of segment storage.", st.heap_bytes),
                (
                    "hash_table_bytes",
                    "Bytes of hash table.",
                    st.hash_table_bytes,
                ),
                (
                    "memory_bytes",
                    "All memory the cache allocated.",
                    st.total_bytes,
                ),
                (
                    "limit_maxbytes",
                    "Configured heap size.",
                    self.limit_maxbytes,
                ),
            ];
            for (name, help, v) in gauges {
                metric(name, "gauge", help, &[(String::new(), v)]);
            }
            let counters: [(&str, &str, u64); 7] = [
                ("hits_total", "Storage hits.", st.hits),
                ("misses_total", "Storage misses.", st.misses),
                ("evictions_total", "Items evicted.", st.evictions),
                (
                    "evicted_segments_total",
                    "Segments evicted.",
                    st.evicted_segments,
                ),
                ("expirations_total", "Items expired.", st.expirations),
                (
                    "expired_segments_total",
                    "Segments expired.",
                    st.expired_segments,
                ),
                ("merges_total", "Merge-eviction passes.", st.merges),
            ];
            for (name, help, v) in counters {
                metric(name, "counter", help, &[(String::new(), v)]);
            }
        }
        let h = &s.latency;
        let _ = writeln!(
            out,
            "# HELP segcache_request_latency_seconds Request-to-reply latency inside the server."
        );
        let _ = writeln!(out, "# TYPE segcache_request_latency_seconds summary");
        for q in [0.5, 0.9, 0.99, 0.999] {
            let _ = writeln!(
                out,
                "segcache_request_latency_seconds{{quantile=\"{q}\"}} {:.9}",
                h.value_at_quantile(q) as f64 / 1e9
            );
        }
        let _ = writeln!(
            out,
            "segcache_request_latency_seconds_sum {:.9}",
            h.mean() * h.len() as f64 / 1e9
        );
        let _ = writeln!(out, "segcache_request_latency_seconds_count {}", h.len());
        out
    }
}

/// User and system CPU seconds of this process.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

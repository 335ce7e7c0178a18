//! Server configuration: a Pelikan-style TOML file overridden by command
//! line flags.
//!
//! File sections (every key optional, unknown keys are errors):
//!
//! ```toml
//! [server]
//! host = "127.0.0.1"
//! port = 12321
//! max_connections = 1024
//! max_value = "1MiB"
//! backlog = 1024          # connections waiting to be accepted
//! idle_timeout = 0        # seconds; 0: idle clients are never closed
//! max_conn_output = "4MiB" # replies waiting for one client
//! max_buffered = "64MiB"  # all clients' buffers together
//! disable_flush_all = false   # true: refuse flush_all, as memcached -F
//! enable_shutdown = false     # true: `shutdown` stops the server, as memcached -A
//! unix_socket = "/run/segcache.sock"  # also listen here, as memcached -s
//! unix_mask = "700"           # the socket file's permissions (octal), as memcached -a
//! tls_cert = "/etc/segcache/cert.pem"  # TLS on the TCP port: PEM chain, as memcached's ssl_chain_cert
//! tls_key = "/etc/segcache/key.pem"    # and its PEM private key, as memcached's ssl_key
//!
//! [worker]
//! threads = 2
//! pin = "0-2"          # optional: one core per worker, then the storage thread
//!                      # (threads = 1: the worker owns the cache, no storage thread)
//! shared_cache = false # true: several workers share a sharded cache (no
//!                      # storage thread; each shard has its share of the heap)
//!
//! [seg]
//! heap_size = "64MiB"
//! segment_size = "1MiB"
//! hash_power = 16
//! eviction = "merge"
//!
//! [admin]
//! host = "127.0.0.1"
//! port = 9999
//! ```
//!
//! Every bad value, from the file or a flag, is a [`ConfigError`] naming
//! the key (`seg.heap_size`) and, when it came from a flag, the flag.
//! `main` turns it into exit code 2.

use clap::Parser;
use serde::Deserialize;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// What each signal does, as `--help` prints it.
pub const SIGNALS: &str = "\
SIGNALS:
  SIGTERM, SIGINT  Graceful shutdown: stop accepting, answer the requests already
                   read, write the replies (a client that does not read them
                   gets 5 s, then its reply is cut), save the datapool if one is
                   set, exit 0 (1 if the save fails, saying why).
  SIGHUP, SIGUSR1, SIGUSR2
                   Logged and ignored: the log is stderr, so log rotation has
                   nothing to reopen; the cache and every connection stay.
  SIGPIPE          Ignored (a closed client is noticed on write).
  SIGKILL, SIGQUIT Immediate exit with no save: a datapool restarts empty.";

/// Command line of `segcache-server`.
#[derive(Parser, Debug, Default)]
#[command(
    name = "segcache-server",
    version,
    about = "Memcache-protocol server (ASCII and meta commands) backed by segcache",
    after_help = SIGNALS
)]
pub struct Cli {
    /// TOML config file (`[server]`, `[worker]`, `[seg]`, `[admin]` sections).
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on; 0 picks a free one [default: 12321].
    #[arg(long)]
    pub port: Option<u16>,
    /// Also listen on this Unix domain socket, as memcached's `-s` (a
    /// socket file left there by an earlier run is replaced; the file is
    /// removed at shutdown). Clients on the same host skip TCP.
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Permissions of the Unix socket file, in octal, as memcached's `-a`
    /// [default: 700: only the server's user may connect].
    #[arg(long, value_name = "OCTAL")]
    pub unix_mask: Option<String>,
    /// Speak TLS on the TCP port with this PEM certificate chain (and
    /// `--tls-key`), as memcached's `--enable-ssl` with `ssl_chain_cert`.
    /// The Unix socket and the admin port stay plaintext.
    #[arg(long, value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`'s certificate, as memcached's
    /// `ssl_key`.
    #[arg(long, value_name = "PATH")]
    pub tls_key: Option<PathBuf>,
    /// Worker (network) threads [default: 2]. One worker owns the cache
    /// itself; several share a storage thread that owns it.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Bytes of item storage, e.g. 64MiB or 1GiB [default: 64MiB].
    #[arg(long, value_parser = parse_size_arg)]
    pub heap_size: Option<u64>,
    /// Segment size, e.g. 1MiB [default: the core's default for the heap
    /// (256 or more segments, at most 1MiB: 256KiB for 64MiB); with
    /// --max-value, the smallest power of two that holds it, if larger,
    /// at most 1MiB].
    #[arg(long, value_parser = parse_size_arg)]
    pub segment_size: Option<u64>,
    /// Hash table size as a power of two (buckets of 7 items).
    #[arg(long)]
    pub hash_power: Option<u8>,
    /// Eviction policy: merge, none, random, random_fifo, fifo, cte, util.
    #[arg(long)]
    pub eviction: Option<String>,
    /// Admin address (plain-text `stats`, HTTP `GET /metrics`) [default: 127.0.0.1].
    #[arg(long)]
    pub admin_host: Option<String>,
    /// Admin port; 0 picks a free one [default: 9999].
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Pin threads to cores, e.g. `0-3` or `0,2,4`: worker i gets the i-th
    /// core of the list, the storage thread (several workers) the next one.
    #[arg(long, value_name = "CORES")]
    pub pin: Option<String>,
    /// Keep the heap in this file and restart warm: restore on start (when
    /// the last shutdown was graceful), save on SIGTERM/SIGINT.
    #[arg(long)]
    pub datapool: Option<std::path::PathBuf>,
    /// Most open client connections; past it a new connection is refused.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Largest value accepted, e.g. 1MiB (never more than fits a segment)
    /// [default: 1MiB, or what fits a segment if less: 256KiB for the
    /// default 64MiB heap]. Setting it also sizes the segments to hold it.
    #[arg(long, value_parser = parse_size_arg)]
    pub max_value: Option<u64>,
    /// Connections the kernel queues before they are accepted (capped by
    /// net.core.somaxconn) [default: 1024].
    #[arg(long)]
    pub backlog: Option<u32>,
    /// Close a client connection silent for this many seconds, as
    /// memcached's idle_timeout; 0 never does [default: 0].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Replies waiting for one client, e.g. 4MiB: past it the client is not
    /// read until it takes them [default: 4MiB].
    #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
    pub max_conn_output: Option<u64>,
    /// Bytes buffered for all clients together (requests, replies, replies
    /// in flight), e.g. 64MiB: past it clients are not read, and a request
    /// that needs more buffer is refused with SERVER_ERROR out of memory
    /// [default: 64MiB, or 4 largest values per worker if more].
    #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
    pub max_buffered: Option<u64>,
    /// Refuse `flush_all` (`CLIENT_ERROR flush_all not allowed`), as
    /// memcached's `-F`.
    #[arg(long)]
    pub disable_flush_all: bool,
    /// Let clients stop the server with `shutdown` (or `shutdown
    /// graceful`), as memcached's `-A`: the same graceful stop as SIGTERM.
    /// Without it `shutdown` is answered `ERROR: shutdown not enabled`.
    #[arg(long)]
    pub enable_shutdown: bool,
    /// Make the whole heap resident at start, as memcached's `-L`: the
    /// first fill pays no page faults, and a heap the machine cannot give
    /// fails the start instead of slowing writes later. Without it an
    /// idle-priority thread makes the pages resident 8MiB ahead of the
    /// writes.
    #[arg(long)]
    pub prefault: bool,
    /// Several workers share one sharded cache, each shard behind its own
    /// lock (as memcached's threads share its table), instead of handing
    /// every round to a storage thread: no hand-off and no wake-up per
    /// round. Each shard holds its share of the heap and evicts on its
    /// own, so each keeps 256 segments (one shard below 512 MiB, as the
    /// bindings' default; up to four per worker); a datapool is one file
    /// per shard. No effect with one worker.
    #[arg(long)]
    pub shared_cache: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    server: ServerSection,
    #[serde(default)]
    worker: WorkerSection,
    #[serde(default)]
    seg: SegSection,
    #[serde(default)]
    admin: AdminSection,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    host: Option<String>,
    port: Option<i64>,
    max_connections: Option<i64>,
    max_value: Option<Size>,
    backlog: Option<i64>,
    idle_timeout: Option<i64>,
    max_conn_output: Option<Size>,
    max_buffered: Option<Size>,
    disable_flush_all: Option<bool>,
    enable_shutdown: Option<bool>,
    unix_socket: Option<String>,
    unix_mask: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct WorkerSection {
    threads: Option<i64>,
    pin: Option<String>,
    shared_cache: Option<bool>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct SegSection {
    datapool: Option<String>,
    heap_size: Option<Size>,
    segment_size: Option<Size>,
    hash_power: Option<i64>,
    eviction: Option<String>,
    prefault: Option<bool>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct AdminSection {
    host: Option<String>,
    port: Option<i64>,
}

/// A size in the file: a number of bytes or a string such as `"64MiB"`.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Size {
    Bytes(i64),
    Text(String),
}

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key, as in the file (`server.port`), with the flag if it came
    /// from one (`server.port (--port)`).
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Unix domain socket to listen on too, and its file's permissions
    /// (`--unix-socket`/`--unix-mask`, `server.unix_socket`/`unix_mask`).
    pub unix_socket: Option<(PathBuf, u32)>,
    /// TLS on the TCP port: the certificate chain and key files
    /// (`--tls-cert`/`--tls-key`, `server.tls_cert`/`tls_key`).
    pub tls: Option<(PathBuf, PathBuf)>,
    pub admin: SocketAddr,
    pub workers: usize,
    pub max_connections: usize,
    /// Largest value the parser accepts (capped later by the segment).
    pub max_value: usize,
    pub heap_size: usize,
    pub segment_size: usize,
    pub hash_power: Option<u8>,
    pub eviction: segcache::Eviction,
    /// Cores for worker 0..n, then the storage thread.
    pub pin: Option<Vec<usize>>,
    /// Heap file for warm restarts (`--datapool`, `seg.datapool`).
    pub datapool: Option<std::path::PathBuf>,
    /// Make the heap resident at start (`--prefault`, `seg.prefault`).
    pub prefault: bool,
    /// Listen backlog of both ports.
    pub backlog: u32,
    /// Close client connections silent this long (`None`: never).
    pub idle_timeout: Option<std::time::Duration>,
    /// Most reply bytes waiting for one client before it stops being read.
    pub max_conn_output: usize,
    /// Most bytes buffered for all clients together.
    pub max_buffered: usize,
    /// `flush_all` is refused (`--disable-flush-all`,
    /// `server.disable_flush_all`).
    pub disable_flush_all: bool,
    /// `shutdown` stops the server (`--enable-shutdown`,
    /// `server.enable_shutdown`).
    pub enable_shutdown: bool,
    /// Several workers share a sharded cache instead of a storage thread
    /// (`--shared-cache`, `worker.shared_cache`).
    pub shared_cache: bool,
    /// The shared cache's shards: `segcache::default_shards` with at most
    /// four per worker, as the bindings pick theirs (256 segments of the
    /// heap's default size per shard, so one below 512 MiB; 8 of an
    /// explicit `segment_size`). Shards evict on their own: fewer
    /// segments per shard keep fewer hits.
    pub shards: usize,
}

/// Parses `123`, `64k`, `64KiB`, `64MB`, `1GiB` (binary multiples; `B`
/// and `iB` optional, case-insensitive).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("{text:?} is not a size (e.g. 4096, 64MiB, 1GiB)"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text)
}

/// Parses a core list: `0-3`, `0,2,4`, `0-1,4`.
pub fn parse_cores(text: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let bad = || format!("{text:?} is not a core list (e.g. 0-3 or 0,2,4)");
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            if a > b || b - a > 4096 {
                return Err(bad());
            }
            cores.extend(a..=b);
        } else {
            cores.push(part.parse().map_err(|_| bad())?);
        }
    }
    if cores.is_empty() {
        return Err(format!("{text:?} names no core"));
    }
    Ok(cores)
}

/// The segment size when none is configured: the core's default for the
/// heap (`segcache::default_segment_size`: 256 or more segments, for hits;
/// 1 MiB from a 256 MiB heap up), or, when a `max_value` is configured,
/// the smallest power of two that holds it if that is larger, at most
/// 1 MiB (memcached's largest item). Segments sized for memcached's
/// default 1 MiB values at every heap would cost hits below 256 MiB
/// (examples/server/BENCH.md, "Hit ratio at equal memory"), so only an
/// explicit `max_value` buys them.
fn default_segment_size(heap_size: u64, max_value: Option<u64>) -> u64 {
    let heap = usize::try_from(heap_size).unwrap_or(usize::MAX);
    let by_heap = segcache::default_segment_size(heap) as u64;
    let by_value = max_value.map_or(0, u64::next_power_of_two);
    by_value.max(by_heap).min(1 << 20)
}

fn size_value(key: &str, v: Size) -> Result<u64, ConfigError> {
    match v {
        Size::Bytes(n) => u64::try_from(n).map_err(|_| err(key, format!("{n} is negative"))),
        Size::Text(t) => parse_size(&t).map_err(|r| err(key, r)),
    }
}

fn int_in(key: &str, v: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(err(key, format!("{v} is out of range ({lo} to {hi})")))
    }
}

fn resolve(key: &str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| err(key, format!("cannot resolve {host:?}: {e}")))?
        .next()
        .ok_or_else(|| err(key, format!("{host:?} resolves to no address")))
}

/// The key name with the flag that overrode it, for messages.
fn flagged(key: &str, flag: &str, from_flag: bool) -> String {
    if from_flag {
        format!("{key} ({flag})")
    } else {
        key.to_string()
    }
}

impl Config {
    /// The largest value the server takes: `max_value`, or less when a
    /// segment is smaller (an item must fit one).
    pub fn largest_value(&self) -> usize {
        self.max_value.min(self.segment_size)
    }

    /// Reads the file named on the command line (if any) and applies the
    /// flags over it.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| err("config", format!("cannot read {}: {e}", path.display())))?;
                Self::parse_file(&text)?
            }
            None => FileConfig::default(),
        };
        Self::merge(file, cli)
    }

    fn parse_file(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            // toml's message shows the offending line; name the key too
            // when toml knows it.
            let msg = e.message().to_string();
            let key = e
                .span()
                .and_then(|s| text.get(..s.start))
                .and_then(|before| before.lines().last())
                .and_then(|line| line.split('=').next())
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('['))
                .unwrap_or_else(|| "file".to_string());
            err(&key, format!("{msg}\n{e}"))
        })
    }

    /// Parses a config file's text and applies `cli` over it (for tests).
    pub fn from_toml(text: &str, cli: &Cli) -> Result<Config, ConfigError> {
        Self::merge(Self::parse_file(text)?, cli)
    }

    fn merge(file: FileConfig, cli: &Cli) -> Result<Config, ConfigError> {
        // [server]
        let host = cli
            .host
            .clone()
            .or(file.server.host)
            .unwrap_or_else(|| "127.0.0.1".into());
        let port = match (cli.port, file.server.port) {
            (Some(p), _) => p,
            (None, Some(p)) => int_in("server.port", p, 0, 65535)? as u16,
            (None, None) => 12321,
        };
        let listen = resolve(
            &flagged("server.host", "--host", cli.host.is_some()),
            &host,
            port,
        )?;
        let max_conn_key = flagged(
            "server.max_connections",
            "--max-connections",
            cli.max_connections.is_some(),
        );
        let max_connections = match (cli.max_connections, file.server.max_connections) {
            (Some(n), _) => n as i64,
            (None, Some(n)) => n,
            (None, None) => 1024,
        };
        let max_connections = int_in(&max_conn_key, max_connections, 1, 1 << 20)? as usize;
        let max_value_key = flagged("server.max_value", "--max-value", cli.max_value.is_some());
        let max_value_given = cli.max_value.is_some() || file.server.max_value.is_some();
        let max_value = match (cli.max_value, file.server.max_value) {
            (Some(n), _) => n,
            (None, Some(v)) => size_value(&max_value_key, v)?,
            (None, None) => 1 << 20,
        };
        if max_value == 0 || max_value > crate::protocol::MAX_DATA_LEN {
            return Err(err(
                &max_value_key,
                format!(
                    "{max_value} is out of range (1 to {})",
                    crate::protocol::MAX_DATA_LEN
                ),
            ));
        }

        let backlog_key = flagged("server.backlog", "--backlog", cli.backlog.is_some());
        let backlog = match (cli.backlog, file.server.backlog) {
            (Some(n), _) => i64::from(n),
            (None, Some(n)) => n,
            (None, None) => 1024,
        };
        let backlog = int_in(&backlog_key, backlog, 1, 65535)? as u32;
        let idle_key = flagged(
            "server.idle_timeout",
            "--idle-timeout",
            cli.idle_timeout.is_some(),
        );
        let idle_timeout = match (cli.idle_timeout, file.server.idle_timeout) {
            (Some(n), _) => i64::try_from(n).unwrap_or(i64::MAX),
            (None, Some(n)) => n,
            (None, None) => 0,
        };
        let idle_timeout = int_in(&idle_key, idle_timeout, 0, 1 << 31)? as u64;
        let idle_timeout = (idle_timeout > 0).then(|| std::time::Duration::from_secs(idle_timeout));
        let out_key = flagged(
            "server.max_conn_output",
            "--max-conn-output",
            cli.max_conn_output.is_some(),
        );
        let max_conn_output = match (cli.max_conn_output, file.server.max_conn_output) {
            (Some(n), _) => n,
            (None, Some(v)) => size_value(&out_key, v)?,
            (None, None) => 4 << 20,
        };
        let buffered_key = flagged(
            "server.max_buffered",
            "--max-buffered",
            cli.max_buffered.is_some(),
        );
        let max_buffered = match (cli.max_buffered, file.server.max_buffered) {
            (Some(n), _) => Some(n),
            (None, Some(v)) => Some(size_value(&buffered_key, v)?),
            (None, None) => None,
        };
        if !(64 << 10..=1 << 40).contains(&max_conn_output) {
            return Err(err(
                &out_key,
                format!("{max_conn_output} is out of range (64KiB to 1TiB)"),
            ));
        }

        // [worker]
        let threads_key = flagged("worker.threads", "--workers", cli.workers.is_some());
        let workers = match (cli.workers, file.worker.threads) {
            (Some(n), _) => n as i64,
            (None, Some(n)) => n,
            (None, None) => 2,
        };
        let workers = int_in(&threads_key, workers, 1, 256)? as usize;
        let pin_key = flagged("worker.pin", "--pin", cli.pin.is_some());
        let pin = match cli.pin.clone().or(file.worker.pin) {
            Some(text) => Some(parse_cores(&text).map_err(|r| err(&pin_key, r))?),
            None => None,
        };

        // [seg]
        let heap_key = flagged("seg.heap_size", "--heap-size", cli.heap_size.is_some());
        let heap_size = match (cli.heap_size, file.seg.heap_size) {
            (Some(n), _) => n,
            (None, Some(v)) => size_value(&heap_key, v)?,
            (None, None) => 64 << 20,
        };
        let seg_key = flagged(
            "seg.segment_size",
            "--segment-size",
            cli.segment_size.is_some(),
        );
        let segment_size_given = cli.segment_size.is_some() || file.seg.segment_size.is_some();
        let segment_size = match (cli.segment_size, file.seg.segment_size) {
            (Some(n), _) => n,
            (None, Some(v)) => size_value(&seg_key, v)?,
            (None, None) => default_segment_size(heap_size, max_value_given.then_some(max_value)),
        };
        let hp_key = flagged("seg.hash_power", "--hash-power", cli.hash_power.is_some());
        let hash_power = match (cli.hash_power, file.seg.hash_power) {
            (Some(p), _) => Some(p),
            (None, Some(p)) => Some(int_in(&hp_key, p, 0, 255)? as u8),
            (None, None) => None,
        };
        let ev_key = flagged("seg.eviction", "--eviction", cli.eviction.is_some());
        let eviction = match cli.eviction.clone().or(file.seg.eviction) {
            Some(name) => name.parse::<segcache::Eviction>().map_err(|e| match e {
                segcache::Error::InvalidConfig { reason, .. } => err(&ev_key, reason),
                other => err(&ev_key, other.to_string()),
            })?,
            None => segcache::Eviction::Merge,
        };
        // Default: 64 MiB, or room for 4 of the largest values per worker.
        let max_buffered =
            max_buffered.unwrap_or_else(|| (64 << 20).max(workers as u64 * 4 * (max_value + 320)));
        if !(1 << 20..=1 << 40).contains(&max_buffered) {
            return Err(err(
                &buffered_key,
                format!("{max_buffered} is out of range (1MiB to 1TiB)"),
            ));
        }
        let heap_size = usize::try_from(heap_size)
            .map_err(|_| err(&heap_key, format!("{heap_size} is too large")))?;
        let segment_size = usize::try_from(segment_size)
            .map_err(|_| err(&seg_key, format!("{segment_size} is too large")))?;

        // [admin]
        let admin_host = cli
            .admin_host
            .clone()
            .or(file.admin.host)
            .unwrap_or_else(|| "127.0.0.1".into());
        let admin_port = match (cli.admin_port, file.admin.port) {
            (Some(p), _) => p,
            (None, Some(p)) => int_in("admin.port", p, 0, 65535)? as u16,
            (None, None) => 9999,
        };
        let admin = resolve(
            &flagged("admin.host", "--admin-host", cli.admin_host.is_some()),
            &admin_host,
            admin_port,
        )?;

        let unix_mask_key = flagged("server.unix_mask", "--unix-mask", cli.unix_mask.is_some());
        let unix_mask = match cli
            .unix_mask
            .as_deref()
            .or(file.server.unix_mask.as_deref())
        {
            None => 0o700,
            Some(text) => u32::from_str_radix(text, 8)
                .ok()
                .filter(|&m| m <= 0o777)
                .ok_or_else(|| {
                    err(
                        &unix_mask_key,
                        format!("{text:?} is not octal permissions (000 to 777)"),
                    )
                })?,
        };
        let unix_socket = match (&cli.unix_socket, &file.server.unix_socket) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(path)) => Some(PathBuf::from(path)),
            (None, None) => None,
        };
        if let Some(path) = &unix_socket {
            let key = flagged(
                "server.unix_socket",
                "--unix-socket",
                cli.unix_socket.is_some(),
            );
            // sun_path holds 108 bytes with its terminating NUL on Linux.
            if path.as_os_str().is_empty() || path.as_os_str().len() > 107 {
                return Err(err(
                    &key,
                    format!("{path:?} is empty or longer than 107 bytes"),
                ));
            }
        }
        let unix_socket = unix_socket.map(|p| (p, unix_mask));
        let tls_cert = cli
            .tls_cert
            .clone()
            .or(file.server.tls_cert.map(PathBuf::from));
        let tls_key = cli
            .tls_key
            .clone()
            .or(file.server.tls_key.map(PathBuf::from));
        let tls = match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                let key = flagged("server.tls_key", "--tls-key", true);
                return Err(err(&key, "is needed with a TLS certificate"));
            }
            (None, Some(_)) => {
                let key = flagged("server.tls_cert", "--tls-cert", true);
                return Err(err(&key, "is needed with a TLS key"));
            }
        };
        Ok(Config {
            unix_socket,
            tls,
            listen,
            admin,
            workers,
            max_connections,
            max_value: max_value as usize,
            heap_size,
            segment_size,
            hash_power,
            eviction,
            pin,
            datapool: cli
                .datapool
                .clone()
                .or_else(|| file.seg.datapool.map(Into::into)),
            prefault: cli.prefault || file.seg.prefault.unwrap_or(false),
            backlog,
            idle_timeout,
            max_conn_output: max_conn_output as usize,
            max_buffered: max_buffered as usize,
            disable_flush_all: cli.disable_flush_all
                || file.server.disable_flush_all.unwrap_or(false),
            enable_shutdown: cli.enable_shutdown || file.server.enable_shutdown.unwrap_or(false),
            shared_cache: cli.shared_cache || file.worker.shared_cache.unwrap_or(false),
            shards: segcache::default_shards(
                heap_size,
                segment_size_given.then_some(segment_size),
                workers.saturating_mul(4),
            ),
        })
    }

    /// The config key (with its flag) for a segcache builder field.
    pub fn seg_key(field: &str) -> String {
        match field {
            "heap_size" => "seg.heap_size (--heap-size)".into(),
            "segment_size" => "seg.segment_size (--segment-size)".into(),
            "hash_power" => "seg.hash_power (--hash-power)".into(),
            "eviction" => "seg.eviction (--eviction)".into(),
            "prefault" => "seg.prefault (--prefault)".into(),
            other => format!("seg.{other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("16k"), Ok(16 << 10));
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999999999999TiB").is_err());
    }

    #[test]
    fn cores() {
        assert_eq!(parse_cores("0-3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(parse_cores("0,2,4"), Ok(vec![0, 2, 4]));
        assert_eq!(parse_cores("0-1,4"), Ok(vec![0, 1, 4]));
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
        assert!(parse_cores("").is_err());
    }

    #[test]
    fn segment_size_follows_max_value_and_heap() {
        let seg = |max_value, heap_size, segment_size| {
            let cli = Cli {
                max_value,
                heap_size,
                segment_size,
                ..Cli::default()
            };
            Config::from_toml("", &cli).unwrap().segment_size
        };
        // Defaults: the core's default for the heap (256 segments), not
        // the 1 MiB a default 1 MiB value would need.
        assert_eq!(seg(None, None, None), 256 << 10);
        assert_eq!(seg(None, Some(16 << 20), None), 64 << 10);
        assert_eq!(seg(None, Some(1 << 30), None), 1 << 20);
        // A max_value given is held: 1 MiB values get 1 MiB segments.
        assert_eq!(seg(Some(1 << 20), None, None), 1 << 20);
        assert_eq!(seg(Some(300 << 10), Some(16 << 20), None), 512 << 10);
        // Smaller values: the core's default for the heap.
        assert_eq!(seg(Some(64 << 10), None, None), 256 << 10);
        assert_eq!(seg(Some(64 << 10), Some(4 << 30), None), 1 << 20);
        // Values above 1 MiB are capped by the segment, as before.
        assert_eq!(seg(Some(2 << 20), None, None), 1 << 20);
        // A size given is kept.
        assert_eq!(seg(Some(64 << 10), None, Some(128 << 10)), 128 << 10);
    }

    #[test]
    fn shared_cache_shards_keep_enough_segments_each() {
        let shards = |workers, heap_size, segment_size| {
            let cli = Cli {
                workers: Some(workers),
                heap_size,
                segment_size,
                ..Cli::default()
            };
            Config::from_toml("", &cli).unwrap().shards
        };
        // Below 512 MiB one shard: split, the heap would keep fewer hits.
        assert_eq!(shards(2, None, None), 1);
        assert_eq!(shards(8, Some(256 << 20), None), 1);
        // 1 GiB: four shards of 256 segments of 1 MiB.
        assert_eq!(shards(2, Some(1 << 30), None), 4);
        // Never more than four per worker.
        assert_eq!(shards(1, Some(16 << 30), None), 4);
        assert_eq!(shards(4, Some(16 << 30), None), 16);
        // An explicit segment size: shards of at least 8 of them.
        assert_eq!(shards(2, Some(16 << 20), Some(256 << 10)), 8);
        assert_eq!(shards(2, Some(4 << 20), Some(256 << 10)), 2);
    }

    #[test]
    fn file_and_flags() {
        let text = r#"
            [server]
            port = 1234
            max_connections = 10
            [worker]
            threads = 3
            [seg]
            heap_size = "16MiB"
            segment_size = 65536
            eviction = "fifo"
            [admin]
            port = 0
        "#;
        let c = Config::from_toml(text, &Cli::default()).unwrap();
        assert!(!c.prefault);
        assert_eq!(c.listen.port(), 1234);
        assert_eq!((c.workers, c.max_connections), (3, 10));
        assert_eq!((c.heap_size, c.segment_size), (16 << 20, 65536));
        assert_eq!(c.eviction, segcache::Eviction::Fifo);
        let cli = Cli {
            port: Some(99),
            workers: Some(1),
            ..Cli::default()
        };
        let c = Config::from_toml(text, &cli).unwrap();
        assert_eq!((c.listen.port(), c.workers), (99, 1));
        let flagged = Cli {
            prefault: true,
            ..Cli::default()
        };
        assert!(Config::from_toml(text, &flagged).unwrap().prefault);
        let filed = Config::from_toml("[seg]\nprefault = true\n", &Cli::default()).unwrap();
        assert!(filed.prefault);
        let e = Config::from_toml("[seg]\nprefault = \"yes\"\n", &Cli::default()).unwrap_err();
        assert!(e.to_string().contains("prefault"), "{e}");
        assert!(!c.shared_cache, "the storage thread by default");
        let c = Config::from_toml("[worker]\nshared_cache = true\n", &Cli::default()).unwrap();
        assert!(c.shared_cache);
        let cli = Cli {
            shared_cache: true,
            ..Cli::default()
        };
        assert!(Config::from_toml("", &cli).unwrap().shared_cache);
        // The Unix socket: from the file, its mask in octal, the flag first.
        assert_eq!(
            Config::from_toml("", &Cli::default()).unwrap().unix_socket,
            None
        );
        let text = "[server]\nunix_socket = \"/tmp/a.sock\"\nunix_mask = \"750\"\n";
        let c = Config::from_toml(text, &Cli::default()).unwrap();
        assert_eq!(c.unix_socket, Some(("/tmp/a.sock".into(), 0o750)));
        let cli = Cli {
            unix_socket: Some("/tmp/b.sock".into()),
            ..Cli::default()
        };
        let c = Config::from_toml(text, &cli).unwrap();
        assert_eq!(c.unix_socket, Some(("/tmp/b.sock".into(), 0o750)));
        let e = Config::from_toml("[server]\nunix_mask = \"rw\"\n", &Cli::default()).unwrap_err();
        assert!(e.to_string().contains("server.unix_mask"), "{e}");
    }

    #[test]
    fn tls_files_come_in_pairs_from_the_file_or_the_flags() {
        let text = "[server]\ntls_cert = \"/a/cert.pem\"\ntls_key = \"/a/key.pem\"\n";
        let c = Config::from_toml(text, &Cli::default()).unwrap();
        assert_eq!(c.tls, Some(("/a/cert.pem".into(), "/a/key.pem".into())));
        let cli = Cli {
            tls_cert: Some("/b/cert.pem".into()),
            ..Cli::default()
        };
        let c = Config::from_toml(text, &cli).unwrap();
        assert_eq!(c.tls, Some(("/b/cert.pem".into(), "/a/key.pem".into())));
        let e = Config::from_toml("", &cli).unwrap_err();
        assert!(e.to_string().contains("--tls-key"), "{e}");
        let e = Config::from_toml("[server]\ntls_key = \"/k\"\n", &Cli::default()).unwrap_err();
        assert!(e.to_string().contains("--tls-cert"), "{e}");
        assert_eq!(Config::from_toml("", &Cli::default()).unwrap().tls, None);
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::from_toml("[server]\nport = 70000\n", &Cli::default()).unwrap_err();
        assert_eq!(e.key, "server.port");
        let e = Config::from_toml("[seg]\nheap_size = \"lots\"\n", &Cli::default()).unwrap_err();
        assert_eq!(e.key, "seg.heap_size");
        let e = Config::from_toml("[seg]\nbogus = 1\n", &Cli::default()).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = Config::from_toml("[worker]\nthreads = \"two\"\n", &Cli::default()).unwrap_err();
        assert_eq!(e.key, "threads", "{e}");
        let cli = Cli {
            eviction: Some("lru".into()),
            ..Cli::default()
        };
        let e = Config::from_toml("", &cli).unwrap_err();
        assert_eq!(e.key, "seg.eviction (--eviction)");
    }
}

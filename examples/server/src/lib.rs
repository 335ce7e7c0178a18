//! Example memcache-protocol server for segcache (issue 7).
//!
//! * [`protocol`]: the memcache ASCII + meta parser and reply encoders, and
//!   the binary protocol's packets.
//! * [`executor`]: each parsed command as core requests (one atomic step
//!   each on the storage thread), and each response as memcached's reply.
//! * [`backend`]: where storage requests run: the storage thread, or
//!   inline on the one worker's own cache.
//! * [`config`]: TOML file + command line flags.
//! * [`server`]: listener, start-up and graceful shutdown.
//! * [`admin`]: the admin port's event loop (`stats`, `GET /metrics`).
//! * [`worker`]: the per-thread mio event loop: connection I/O, handing
//!   parsed commands to the executor in batches.
//! * [`budget`]: the bound on the memory client buffers take.
//! * [`metrics`]: counters, latency histogram, `stats` and Prometheus text.
//! * [`stream`]: a client's socket, TCP, TLS or Unix domain.
//! * [`tls`]: TLS on the TCP port (`--tls-cert`, `--tls-key`).

pub mod admin;
pub mod backend;
pub mod budget;
pub mod config;
pub mod executor;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod stream;
pub mod tls;
pub mod worker;

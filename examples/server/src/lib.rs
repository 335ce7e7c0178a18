//! Example memcache-protocol server for segcache (issue 7).
//!
//! * [`protocol`]: the memcache ASCII + meta parser and reply encoders.
//! * [`executor`]: each parsed command as core requests (one atomic step
//!   each on the storage thread), and each response as memcached's reply.
//! * [`config`]: TOML file + command line flags.
//! * [`server`]: listener, admin port, start-up and graceful shutdown.
//! * [`worker`]: the per-thread mio event loop: connection I/O, handing
//!   parsed commands to the executor in batches.
//! * [`metrics`]: counters, latency histogram, `stats` and Prometheus text.

pub mod config;
pub mod executor;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod worker;

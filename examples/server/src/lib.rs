//! Example memcache-protocol server for segcache (issue 7).
//!
//! * [`protocol`]: the memcache ASCII + meta parser and reply encoders.
//! * [`config`]: TOML file + command line flags.
//! * [`server`]: listener, admin port, start-up and graceful shutdown.
//! * [`worker`]: the per-thread mio event loop, batching requests to the
//!   segcache storage thread.
//! * [`metrics`]: counters, latency histogram, `stats` and Prometheus text.

pub mod config;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod worker;

//! Example memcache-protocol server for segcache (issue 7).
//!
//! * [`protocol`]: the memcache ASCII + meta parser and reply encoders.
//! * [`config`]: TOML file + command line flags.
//! * [`server`]: listener, start-up and graceful shutdown.
//! * [`admin`]: the admin port's event loop (`stats`, `GET /metrics`).
//! * [`worker`]: the per-thread mio event loop, batching requests to the
//!   segcache storage thread.
//! * [`budget`]: the bound on the memory client buffers take.
//! * [`metrics`]: counters, latency histogram, `stats` and Prometheus text.

pub mod admin;
pub mod budget;
pub mod config;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod worker;

//! The CLI's runners: one per subcommand, each running its measurement
//! through the library's modules and printing the result as markdown
//! tables. Owns the printing only; what is measured, and how, lives in the
//! library (`segcache_bench::*`).
//!
//! * `hit`: miss ratio at equal real memory (`trace`, `twitter`,
//!   `server-replay`);
//! * `speed`: operation throughput (`throughput`, `concurrent`,
//!   `opcount`);
//! * `memory`: bytes per item (`memory`, `full-heap`).

pub mod hit;
pub mod memory;
pub mod speed;

use segcache_bench::{demo, twitter};

/// Bytes in a MiB, for the tables.
pub const MIB: f64 = (1u64 << 20) as f64;

/// `demo`: the report of one replay on the default cache.
pub fn run_demo(cluster: u32, cfg: &demo::DemoConfig) -> Result<(), String> {
    let stats = twitter::load_cluster(cluster).map_err(|e| e.to_string())?;
    let report = demo::run(stats, cfg)?;
    println!("{report}");
    Ok(())
}

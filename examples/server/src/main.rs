//! `segcache-server [CONFIG.toml] [flags]`: a memcache-protocol server over
//! segcache. See the crate docs and `--help`.
//!
//! Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 2 for a bad
//! configuration value (file or flag), 1 for any other start-up failure.
//! The first line on stdout gives the bound addresses:
//! `listening on HOST:PORT admin HOST:PORT`.

use clap::Parser;
use segcache_server::config::{Cli, Config};
use segcache_server::server::{Server, StartError};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::from(2);
        }
    };
    let server = match Server::start(&config) {
        Ok(s) => s,
        Err(StartError::Config(e)) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::from(1);
        }
    };
    let trigger = server.shutdown_trigger();
    match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ]) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    eprintln!("segcache-server: shutting down");
                    trigger();
                }
            });
        }
        Err(e) => {
            eprintln!("segcache-server: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "listening on {} admin {}",
            server.listen_addr, server.admin_addr
        );
        let _ = out.flush();
    }
    eprintln!(
        "segcache-server: {} worker(s), heap {} bytes, segments {} bytes, eviction {}, max {} connections",
        config.workers,
        config.heap_size,
        config.segment_size,
        config.eviction.name(),
        config.max_connections
    );
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            ExitCode::from(1)
        }
    }
}

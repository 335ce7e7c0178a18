//! `segcache-server [CONFIG.toml] [flags]`: a memcache-protocol server over
//! segcache. See the crate docs and `--help`.
//!
//! Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 2 for a bad
//! configuration value (file or flag), 1 for any other start-up failure.
//! The first line on stdout gives the bound addresses:
//! `listening on HOST:PORT admin HOST:PORT`.
//!
//! Signals: SIGTERM and SIGINT shut down gracefully (and save the
//! datapool); SIGHUP, SIGUSR1 and SIGUSR2 are logged and ignored (the log
//! is stderr: nothing to reopen), never costing the cache. See
//! [`segcache_server::config::SIGNALS`].

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
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2]) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                for signal in signals.forever() {
                    match signal {
                        SIGTERM | SIGINT => {
                            eprintln!("segcache-server: shutting down");
                            trigger();
                            return;
                        }
                        // Log rotation and the like must not cost the cache:
                        // the log is stderr, so there is nothing to reopen.
                        other => eprintln!(
                            "segcache-server: signal {other} ignored (see --help: SIGNALS)"
                        ),
                    }
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
        "segcache-server: {} worker(s), heap {} bytes, segments {} bytes (values up to {} bytes), eviction {}, max {} connections",
        config.workers,
        config.heap_size,
        config.segment_size,
        config.largest_value(),
        config.eviction.name(),
        config.max_connections
    );
    if let Some((path, mode)) = &config.unix_socket {
        eprintln!(
            "segcache-server: also listening on unix socket {} (mode {mode:o})",
            path.display()
        );
    }
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            ExitCode::from(1)
        }
    }
}

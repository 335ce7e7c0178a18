//! A real memcached (the reference implementation) started by a test on a
//! free loopback port, killed on drop. Tests that need it skip, with a
//! message, when the `memcached` binary is not installed
//! (`examples/server/test.sh` installs it).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running memcached process.
pub struct Memcached {
    child: Child,
    pub addr: SocketAddr,
}

impl Memcached {
    /// Starts `memcached` on 127.0.0.1 with `extra` arguments (e.g. `-m`,
    /// `-I`), or returns `None` (after printing why) when it is not
    /// installed.
    pub fn start(extra: &[&str]) -> Option<Memcached> {
        if Command::new("memcached")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!(
                "SKIPPED: memcached is not installed (apt-get install memcached; \
                 examples/server/test.sh installs it)"
            );
            return None;
        }
        // A port free now; a race with another process is unlikely and
        // shows as a start failure below.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let port_s = port.to_string();
        let mut args = vec!["-l", "127.0.0.1", "-p", &port_s, "-U", "0", "-t", "2"];
        // memcached refuses to run as root without -u.
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            args.extend(["-u", "root"]);
        }
        args.extend_from_slice(extra);
        let child = Command::new("memcached")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn memcached");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut mc = Memcached { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline || !matches!(mc.child.try_wait(), Ok(None)) {
                panic!("memcached did not start on {addr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = &mut mc;
        Some(mc)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

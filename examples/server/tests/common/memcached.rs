//! A real memcached (the reference implementation) started by a test on a
//! free loopback port, killed on drop. Tests that need it skip, with a
//! message, when the `memcached` binary is not installed
//! (`examples/server/test.sh` installs it).

use std::io::{Read, Write};
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
        // A port free now may be taken before memcached binds it (a
        // server under test binding port 0 gets ephemeral ports too):
        // memcached then exits, and a probe would reach the other process.
        // So a start counts only when the listener on the port reports
        // this child's pid; otherwise it is retried on another port.
        for _ in 0..5 {
            if let Some(mc) = Self::start_on_free_port(extra) {
                return Some(mc);
            }
        }
        panic!("memcached did not start on five free ports");
    }

    fn start_on_free_port(extra: &[&str]) -> Option<Memcached> {
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
        // Dropped (killed) on every early return.
        let mut mc = Memcached { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        let want = format!("STAT pid {}\r\n", mc.child.id());
        loop {
            if !matches!(mc.child.try_wait(), Ok(None)) {
                return None;
            }
            if let Some(stats) = stats_of(addr) {
                return stats.contains(&want).then_some(mc);
            }
            if Instant::now() > deadline {
                panic!("memcached did not start on {addr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The `stats` reply of whatever listens on `addr`, or `None` if nothing
/// answers it whole within a second.
fn stats_of(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"stats\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(reply).ok()
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

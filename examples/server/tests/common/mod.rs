//! Shared helpers of the server's integration tests: start the real
//! `segcache-server` binary on ephemeral loopback ports (killed on drop),
//! and a raw-socket client with timeouts on every read and write.
#![allow(dead_code)]

pub mod memcached;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_segcache-server");
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A fresh scratch directory for one test (`name` plus this process's
/// id, under the system's temporary directory), and the datapool path
/// inside it as a `--datapool` argument. The test removes the directory.
pub fn scratch_pool(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("pool").to_str().unwrap().to_string();
    (dir, pool)
}

/// A running server process.
pub struct Server {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
}

impl Server {
    /// Starts the server with `--port 0 --admin-port 0` and `extra` flags.
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["--port", "0", "--admin-port", "0"];
        args.extend_from_slice(extra);
        Self::start_args(&args)
    }

    pub fn start_args(args: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn segcache-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(TIMEOUT) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("server printed no listening line");
            }
        };
        // "listening on 127.0.0.1:P admin 127.0.0.1:Q"
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"listening"), "first line: {line:?}");
        let addr = words[2].parse().expect("listen addr");
        let admin = words[4].parse().expect("admin addr");
        Server {
            child: Some(child),
            addr,
            admin,
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::new(self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().unwrap().try_wait(), Ok(None))
    }

    /// Sends a signal and waits (bounded) for the exit code.
    pub fn signal_and_wait(&mut self, sig: &str) -> Option<i32> {
        let pid = self.pid().to_string();
        Command::new("kill")
            .args(["-s", sig, &pid])
            .status()
            .expect("kill");
        self.wait_exit()
    }

    /// Waits (bounded) for the server to exit on its own; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A raw client connection.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, data: &[u8]) {
        self.stream.write_all(data).expect("send");
    }

    /// Reads until the received bytes end with `end` (or the timeout).
    pub fn read_until_end(&mut self, end: &[u8]) -> Vec<u8> {
        self.read_until(|buf| buf.ends_with(end))
    }

    /// Reads until `done` says the received bytes are complete (or the
    /// timeout).
    pub fn read_until(&mut self, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let deadline = Instant::now() + TIMEOUT;
        let mut chunk = [0u8; 65536];
        while !done(&self.buf) && Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => break,
            }
        }
        std::mem::take(&mut self.buf)
    }

    /// Reads exactly `n` bytes (or what came before the timeout).
    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + TIMEOUT;
        let mut chunk = [0u8; 65536];
        while self.buf.len() < n && Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(_) => break,
            }
        }
        let rest = self.buf.split_off(n.min(self.buf.len()));
        std::mem::replace(&mut self.buf, rest)
    }

    /// Sends `req` and reads a reply of exactly `expected.len()` bytes.
    pub fn roundtrip(&mut self, req: &[u8], expected_len: usize) -> Vec<u8> {
        self.send(req);
        self.read_n(expected_len)
    }

    /// Sends `req`, expects exactly `expected` back.
    pub fn expect(&mut self, req: &[u8], expected: &[u8]) {
        let got = self.roundtrip(req, expected.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "reply to {:?}",
            String::from_utf8_lossy(req)
        );
    }

    /// Whether the server closed the connection (EOF within the timeout).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1024];
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            match self.stream.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
        false
    }
}

/// Fetches `STAT name value` from the data port's `stats`.
/// Runs the server with `--port 0 --admin-port 0` and `args` to its exit
/// (for settings that must stop start-up): its exit code and stderr.
#[allow(dead_code)]
pub fn start_fails(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args([&["--port", "0", "--admin-port", "0"], args].concat())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

pub fn stat(conn: &mut Conn, name: &str) -> Option<String> {
    conn.send(b"stats\r\n");
    let reply = String::from_utf8(conn.read_until_end(b"END\r\n")).unwrap();
    reply.lines().find_map(|l| {
        let mut w = l.split(' ');
        (w.next() == Some("STAT") && w.next() == Some(name)).then(|| w.next().unwrap().to_string())
    })
}

/// The stat `name` once it reads `want`, or its last value after five
/// seconds: for counts the server updates only when it sees an event
/// (a closed connection is counted gone when its worker reads the EOF).
pub fn stat_settles(conn: &mut Conn, name: &str, want: &str) -> Option<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = stat(conn, name);
        if got.as_deref() == Some(want) || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A `/proc/PID/status` field in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing"))
}

pub fn rss(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:") * 1024
}

pub fn peak(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

/// A client socket with a small receive buffer, so that a server writing
/// to it stalls early.
pub fn stubborn(addr: std::net::SocketAddr) -> std::net::TcpStream {
    use std::os::fd::AsRawFd;
    let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    let size: libc::c_int = 4096;
    // SAFETY: a valid socket and a c_int option value of the given size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

//! An idle server uses (almost) no CPU: after a burst of requests, with
//! its clients still connected but silent, every shape (the inline worker,
//! workers with the storage thread, workers sharing a cache) must sleep,
//! not poll. A resource check, not a timing assertion: the bound is a
//! tenth of one core over the window, where one thread left spinning or
//! polling in a loop would use the whole core (ten times the bound).
//! And a sleeping storage thread stays asleep for requests: the workers
//! run their rounds themselves (its `stats` counters say who ran them).
#![cfg(target_os = "linux")]

mod common;
use common::Server;
use std::time::Duration;

/// Quiet time measured.
const WINDOW: Duration = Duration::from_secs(3);

/// User+system CPU of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // Fields after the parenthesised command name (which may hold spaces).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, so 12 and
    // 13 here (state is field 3).
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(hz > 0, "no clock tick rate");
    hz as u64
}

fn idle_cpu_after_a_burst(args: &[&str]) {
    let server = Server::start(args);
    let mut conns: Vec<_> = (0..4).map(|_| server.connect()).collect();
    for round in 0..200 {
        for (i, conn) in conns.iter_mut().enumerate() {
            let key = format!("idle-{i}-{round}");
            conn.expect(
                format!("set {key} 0 0 5\r\nvalue\r\n").as_bytes(),
                b"STORED\r\n",
            );
            conn.expect(
                format!("get {key}\r\n").as_bytes(),
                format!("VALUE {key} 0 5\r\nvalue\r\nEND\r\n").as_bytes(),
            );
        }
    }
    // Past any short wait the last burst could have started.
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(server.pid());
    std::thread::sleep(WINDOW);
    let used = cpu_ticks(server.pid()) - before;
    let bound = WINDOW.as_secs() * ticks_per_second() / 10;
    assert!(
        used <= bound,
        "{args:?}: an idle server used {used} ticks of CPU in {WINDOW:?} (bound {bound})"
    );
    // Still serving after the quiet time.
    conns[0].expect(
        b"get idle-0-199\r\n",
        b"VALUE idle-0-199 0 5\r\nvalue\r\nEND\r\n",
    );
}

#[test]
fn one_worker_sleeps_when_idle() {
    idle_cpu_after_a_burst(&["--workers", "1", "--heap-size", "64MiB"]);
}

#[test]
fn storage_thread_and_workers_sleep_when_idle() {
    idle_cpu_after_a_burst(&["--workers", "2", "--heap-size", "64MiB"]);
}

#[test]
fn workers_sharing_a_cache_sleep_when_idle() {
    idle_cpu_after_a_burst(&["--workers", "2", "--shared-cache", "--heap-size", "64MiB"]);
}

/// With several workers and the storage thread, requests that come while
/// the storage thread sleeps are run by the workers themselves (they take
/// the cache's token) instead of waking it: the server's `stats` counts
/// who ran them. The pauses only give the storage thread the chance to
/// park; the assertion is on the counters.
#[test]
fn workers_run_their_rounds_while_the_storage_thread_sleeps() {
    let server = Server::start(&["--workers", "2", "--heap-size", "64MiB"]);
    let mut conn = server.connect();
    conn.expect(b"set quiet 0 0 1\r\nq\r\n", b"STORED\r\n");
    let count = |conn: &mut common::Conn, name: &str| -> u64 {
        common::stat(conn, name).unwrap().parse().unwrap()
    };
    let before = count(&mut conn, "storage_worker_jobs");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(5));
        conn.expect(b"get quiet\r\n", b"VALUE quiet 0 1\r\nq\r\nEND\r\n");
    }
    let after = count(&mut conn, "storage_worker_jobs");
    assert!(
        after > before,
        "no round was run by a worker: {before} -> {after}"
    );
    // Every job is counted by one side or the other.
    let total = count(&mut conn, "storage_worker_jobs") + count(&mut conn, "storage_thread_jobs");
    assert!(total >= 22, "{total} jobs counted for at least 22 rounds");
}

//! The benchmark load generator (`src/bin/loadgen.rs`) against a real
//! memcached and against segcache-server, in the text and the binary
//! protocol: every request it schedules is answered and none is counted
//! an error, so its requests are ones memcached understands; and refused
//! sets are counted as errors in both protocols and in the fill, so a
//! clean run means something. The scripts' CPU-per-request tables rest on these counts.
//! The memcached half is skipped, with a message, when memcached is not
//! installed.

mod common;

use common::memcached::Memcached;
use common::Server;
use std::net::SocketAddr;
use std::process::Command;

/// One short run of the load generator at `addr`: its summary line's
/// fields (`requests`, `errors`, `timeouts`...) as numbers.
fn run(addr: SocketAddr, extra: &[&str]) -> std::collections::HashMap<String, f64> {
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--port", &addr.port().to_string()])
        .args(["--rate", "2000", "--duration", "0.5", "--warmup", "0.1"])
        .args(["--connections", "4", "--keys", "2000"])
        .args(extra)
        .output()
        .expect("run loadgen");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "loadgen {extra:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(f64::NAN)))
        .collect()
}

/// Every set of the fill is stored, and every request of the measured
/// half second (2,000 per second) is answered, none an error.
fn assert_clean(fields: &std::collections::HashMap<String, f64>, what: &str) {
    assert_eq!(fields["fill_refused"], 0.0, "{what}: {fields:?}");
    assert_eq!(fields["requests"], 1000.0, "{what}: {fields:?}");
    assert_eq!(fields["errors"], 0.0, "{what}: {fields:?}");
    assert_eq!(fields["timeouts"], 0.0, "{what}: {fields:?}");
}

#[test]
fn text_and_binary_requests_are_all_answered_by_memcached_and_by_us() {
    let server = Server::start(&["--workers", "1"]);
    for protocol in [&[][..], &["--binary"][..]] {
        assert_clean(
            &run(server.addr, protocol),
            &format!("segcache-server {protocol:?}"),
        );
    }
    let Some(mc) = Memcached::start(&["-m", "64"]) else {
        return;
    };
    for protocol in [&[][..], &["--binary"][..]] {
        assert_clean(&run(mc.addr, protocol), &format!("memcached {protocol:?}"));
    }
}

#[test]
fn refused_sets_count_as_errors_in_both_protocols() {
    // Values of 64 and 256 bytes against a 128-byte limit: every 256-byte
    // set is refused, the fill's too (the odd keys: 1,000 of 2,000; so
    // some gets miss: not errors).
    let server = Server::start(&["--workers", "1", "--max-value", "128"]);
    for protocol in [&[][..], &["--binary"][..]] {
        let fields = run(server.addr, protocol);
        assert_eq!(fields["fill_refused"], 1000.0, "{protocol:?}: {fields:?}");
        assert_eq!(fields["requests"], 1000.0, "{protocol:?}: {fields:?}");
        // 20% sets, half of them 256 bytes: about 100 of 1,000.
        assert!(
            (40.0..=200.0).contains(&fields["errors"]),
            "{protocol:?}: {fields:?}"
        );
    }
}

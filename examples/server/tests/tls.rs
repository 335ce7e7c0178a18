//! TLS on the TCP port (`--tls-cert`, `--tls-key`), against the real
//! server binary with a rustls client that verifies a certificate made
//! for the run: text and binary requests, pipelined, with replies far
//! larger than what rustls buffers for a connection; clients that do not
//! speak TLS, or stop mid-handshake, hurt nobody; the Unix socket stays
//! plaintext; bad certificate settings stop start-up, naming them.

mod common;

use common::Server;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A self-signed certificate for 127.0.0.1, written to a scratch folder.
struct Cert {
    dir: PathBuf,
    der: CertificateDer<'static>,
}

impl Cert {
    fn new(name: &str) -> Cert {
        let dir = std::env::temp_dir().join(format!("segcache-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), made.key_pair.serialize_pem()).unwrap();
        Cert {
            dir,
            der: made.cert.der().clone(),
        }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    fn start(&self, extra: &[&str]) -> Server {
        let (cert, key) = (self.path("cert.pem"), self.path("key.pem"));
        Server::start(&[&["--tls-cert", &cert, "--tls-key", &key], extra].concat())
    }

    /// A client that trusts only this certificate.
    fn connect(&self, addr: SocketAddr) -> StreamOwned<ClientConnection, TcpStream> {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = ClientConnection::new(Arc::new(config), name).unwrap();
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        StreamOwned::new(conn, sock)
    }
}

impl Drop for Cert {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Reads until `done` says the replies are all there.
fn read_until(s: &mut impl Read, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0; 1 << 16];
    while !done(&got) {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Pipelined stores and reads over TLS in every server shape, their
/// replies many times rustls's per-connection buffer (`SEND_LIMIT`,
/// 256 KiB): every reply arrives whole and in order.
#[test]
fn pipelined_text_and_binary_requests_over_tls_in_every_shape() {
    let cert = Cert::new("pipeline");
    for shape in [
        &["--workers", "1"][..],
        &["--workers", "2"],
        &["--workers", "2", "--shared-cache"],
    ] {
        let server =
            cert.start(&[shape, &["--max-value", "1MiB", "--heap-size", "64MiB"]].concat());
        let mut c = cert.connect(server.addr);
        let value = |i: usize| -> Vec<u8> {
            let len = if i.is_multiple_of(10) {
                200_000 + i
            } else {
                i * 7
            };
            (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect()
        };
        let mut req = Vec::new();
        for i in 0..200 {
            let v = value(i);
            req.extend_from_slice(format!("set k{i} {i} 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
        }
        for i in 0..200 {
            req.extend_from_slice(format!("get k{i}\r\n").as_bytes());
        }
        req.extend_from_slice(b"mn\r\n");
        c.write_all(&req).unwrap();
        c.flush().unwrap();
        let got = read_until(&mut c, |g| g.ends_with(b"MN\r\n"));
        let mut want = b"STORED\r\n".repeat(200);
        for i in 0..200 {
            let v = value(i);
            want.extend_from_slice(format!("VALUE k{i} {i} {}\r\n", v.len()).as_bytes());
            want.extend_from_slice(&v);
            want.extend_from_slice(b"\r\nEND\r\n");
        }
        want.extend_from_slice(b"MN\r\n");
        assert!(got.len() > 3 << 20, "the replies were large: {}", got.len());
        assert!(
            got == want,
            "{shape:?}: replies differ ({} bytes, want {})",
            got.len(),
            want.len()
        );

        // A binary client over TLS reads what the text client stored.
        let mut b = cert.connect(server.addr);
        let mut getk = vec![0x80, 0x0c, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 9];
        getk.extend_from_slice(&[0; 8]);
        getk.extend_from_slice(b"k3");
        b.write_all(&getk).unwrap();
        let resp = read_until(&mut b, |g| g.len() >= 24 + 4 + 2 + 21);
        assert_eq!((resp[0], resp[1], &resp[6..8]), (0x81, 0x0c, &[0u8, 0][..]));
        assert_eq!(&resp[28..30], b"k3");
        assert_eq!(&resp[30..], &value(3)[..]);
    }
}

/// Clients that do not speak TLS, or stop mid-handshake, are closed or
/// left waiting on their own: the server stays up and a TLS client is
/// served throughout.
#[test]
fn clients_that_do_not_speak_tls_hurt_nobody() {
    let cert = Cert::new("abuse");
    let mut server = cert.start(&[]);
    let mut good = cert.connect(server.addr);
    good.write_all(b"set a 0 0 1\r\nx\r\n").unwrap();
    assert_eq!(
        read_until(&mut good, |g| g.ends_with(b"\r\n")),
        b"STORED\r\n"
    );
    // Plaintext: answered with a TLS alert, then closed.
    let mut plain = TcpStream::connect(server.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain.write_all(b"get a\r\n").unwrap();
    let mut reply = Vec::new();
    plain.read_to_end(&mut reply).unwrap();
    assert!(!reply.windows(5).any(|w| w == b"VALUE"), "{reply:?}");
    assert_eq!(reply.first(), Some(&0x15), "a TLS alert record: {reply:?}");
    // Half a ClientHello, then silence; another cut off by a close.
    let hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    let mut stalled = TcpStream::connect(server.addr).unwrap();
    stalled.write_all(&hello).unwrap();
    let mut cut = TcpStream::connect(server.addr).unwrap();
    cut.write_all(&hello).unwrap();
    drop(cut);
    // Garbage records.
    let mut junk = TcpStream::connect(server.addr).unwrap();
    junk.write_all(&[0x17; 4096]).unwrap();
    drop(junk);
    good.write_all(b"get a\r\n").unwrap();
    assert_eq!(
        read_until(&mut good, |g| g.ends_with(b"END\r\n")),
        b"VALUE a 0 1\r\nx\r\nEND\r\n"
    );
    assert!(server.alive());
    drop(stalled);
}

/// With TLS on the TCP port, the Unix socket stays plaintext (as
/// memcached's TLS covers TCP listeners only); both reach the same cache.
#[test]
fn the_unix_socket_stays_plaintext() {
    let cert = Cert::new("unix");
    let sock = cert.path("s.sock");
    let server = cert.start(&["--unix-socket", &sock]);
    let mut tls = cert.connect(server.addr);
    tls.write_all(b"set u 0 0 2\r\nok\r\n").unwrap();
    assert_eq!(
        read_until(&mut tls, |g| g.ends_with(b"\r\n")),
        b"STORED\r\n"
    );
    let mut unix = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    unix.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    unix.write_all(b"get u\r\n").unwrap();
    assert_eq!(
        read_until(&mut unix, |g| g.ends_with(b"END\r\n")),
        b"VALUE u 0 2\r\nok\r\nEND\r\n"
    );
}

/// A certificate without a key (or the other way round), a missing file
/// and a file that holds no certificate stop start-up with exit code 2,
/// naming the settings.
#[test]
fn bad_tls_settings_stop_startup() {
    let cert = Cert::new("bad");
    std::fs::write(cert.dir.join("junk.pem"), b"not a certificate\n").unwrap();
    let run = common::start_fails;
    let (c, k, junk) = (
        cert.path("cert.pem"),
        cert.path("key.pem"),
        cert.path("junk.pem"),
    );
    let missing = cert.path("missing.pem");
    for (args, names) in [
        (vec!["--tls-cert", &c], "--tls-key"),
        (vec!["--tls-key", &k], "--tls-cert"),
        (vec!["--tls-cert", &missing, "--tls-key", &k], "--tls-cert"),
        (vec!["--tls-cert", &junk, "--tls-key", &k], "--tls-cert"),
        (vec!["--tls-cert", &c, "--tls-key", &junk], "--tls-key"),
        (vec!["--tls-cert", &k, "--tls-key", &c], "--tls-cert"),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
    }
}

/// `refresh_certs` (memcached's, in its TLS builds) loads the files
/// again: new connections get the new certificate, open ones keep theirs;
/// files that do not load leave the served certificate as it was
/// (`SERVER_ERROR`, naming why); without TLS it is an unknown command.
#[test]
fn refresh_certs_rotates_the_certificate_for_new_connections() {
    let first = Cert::new("rotate-a");
    let second = Cert::new("rotate-b");
    let server = first.start(&[]);
    let mut open = first.connect(server.addr);
    open.write_all(b"set r 0 0 1\r\n1\r\n").unwrap();
    assert_eq!(
        read_until(&mut open, |g| g.ends_with(b"\r\n")),
        b"STORED\r\n"
    );
    // A certificate the files do not hold is refused by a verifying client.
    let refused = |cert: &Cert| {
        let mut c = cert.connect(server.addr);
        c.write_all(b"version\r\n").and_then(|_| c.flush()).is_err()
            || c.read(&mut [0; 64]).is_err()
    };
    assert!(refused(&second), "the second certificate is not served yet");
    // Rotate the files: a new pair replaces the first one.
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(second.dir.join(f), first.dir.join(f)).unwrap();
    }
    open.write_all(b"refresh_certs\r\n").unwrap();
    assert_eq!(read_until(&mut open, |g| g.ends_with(b"\r\n")), b"OK\r\n");
    let mut fresh = second.connect(server.addr);
    fresh.write_all(b"get r\r\n").unwrap();
    assert_eq!(
        read_until(&mut fresh, |g| g.ends_with(b"END\r\n")),
        b"VALUE r 0 1\r\n1\r\nEND\r\n"
    );
    assert!(refused(&first), "the first certificate is no longer served");
    // The connection opened before the refresh goes on.
    open.write_all(b"get r\r\n").unwrap();
    assert_eq!(
        read_until(&mut open, |g| g.ends_with(b"END\r\n")),
        b"VALUE r 0 1\r\n1\r\nEND\r\n"
    );
    // Broken files: refused, the second certificate still served.
    std::fs::write(first.dir.join("key.pem"), b"garbage\n").unwrap();
    open.write_all(b"refresh_certs\r\nrefresh_certs noreply\r\nmn\r\n")
        .unwrap();
    let reply = read_until(&mut open, |g| g.ends_with(b"MN\r\n"));
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.starts_with("SERVER_ERROR cannot refresh certificates: ")
            && text.ends_with("\r\nMN\r\n"),
        "{text}"
    );
    assert!(text.contains("key.pem"), "{text}");
    let mut again = second.connect(server.addr);
    again.write_all(b"mn\r\n").unwrap();
    assert_eq!(read_until(&mut again, |g| g.ends_with(b"\r\n")), b"MN\r\n");
    // Without TLS, memcached built without it answers ERROR.
    let plain = Server::start(&[]);
    let mut c = plain.connect();
    c.expect(b"refresh_certs\r\n", b"ERROR\r\n");
}

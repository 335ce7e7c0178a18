//! TLS on the TCP port (`--tls-cert`/`--tls-key`, as memcached's
//! `--enable-ssl` with `ssl_chain_cert` and `ssl_key`): the certificate
//! chain and key ([`Certs`], loaded at start and again by
//! `refresh_certs`), and [`TlsStream`], a non-blocking TCP socket that
//! reads and writes plaintext through rustls.
//!
//! Owns the TLS state of a connection and nothing else: no buffering
//! beyond rustls's own (its sendable data is capped at [`SEND_LIMIT`],
//! and what it holds is reported by [`TlsStream::pending`], so the
//! worker charges it to its budget), no protocol. Must never block, and
//! must never leave bytes where an edge-triggered poll will not come back
//! for them: a read returns fewer bytes than asked only once the socket
//! said "would block", and output the socket did not take is reported by
//! [`TlsStream::pending`] until a later write or flush sends it.

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Plaintext rustls takes for one connection, not yet sent as
/// ciphertext, before a write says "would block" (rustls's default).
pub const SEND_LIMIT: usize = 64 << 10;

/// Loads the PEM certificate chain and private key into a server config
/// (TLS 1.2 and 1.3, no client certificates). The error says which file
/// and why.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("cannot read certificates from {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map(Arc::new)
        .map_err(|e| format!("the certificate and key do not make a TLS server: {e}"))
}

/// The certificate chain and key files and the server config made of
/// them: what new connections get. `refresh_certs` loads the files again
/// ([`Certs::refresh`]); connections already open keep the config they
/// started with.
pub struct Certs {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
}

impl Certs {
    /// Loads the files (see [`load`]).
    pub fn new(cert: &Path, key: &Path) -> Result<Certs, String> {
        let config = load(cert, key)?;
        Ok(Certs {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(config),
        })
    }

    /// The config for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Loads the files again; on success new connections get the new
    /// certificate, on failure nothing changes and the error says why.
    pub fn refresh(&self) -> Result<(), String> {
        let config = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }
}

impl fmt::Debug for Certs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certs")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A client config that trusts only the PEM certificates in `ca` (for
/// `loadgen --tls-ca`, against a server with a self-signed certificate).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)
        .map_err(|e| format!("cannot read certificates from {}: {e}", ca.display()))?
    {
        let cert = cert.map_err(|e| format!("a certificate in {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("a certificate in {}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
        .map_err(|e| e.to_string())
}

/// A TLS connection over a non-blocking TCP socket: the server's side of
/// a client connection, or a client's (the load generator's).
#[derive(Debug)]
pub struct TlsStream {
    tls: Connection,
    sock: TcpStream,
    /// Plaintext bytes written and not yet sent, estimated: counted in
    /// as rustls takes them, out as ciphertext leaves (a little more than
    /// the plaintext it carries), zero once nothing waits.
    unsent: usize,
}

impl TlsStream {
    /// Starts the server side of a handshake on `sock`.
    pub fn server(sock: TcpStream, config: &Arc<ServerConfig>) -> io::Result<TlsStream> {
        let tls = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        Ok(Self::over(sock, tls.into()))
    }

    /// Starts a client's handshake with `name` on `sock` (for `loadgen`).
    pub fn client(
        sock: TcpStream,
        config: &Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<TlsStream> {
        let tls = ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
        Ok(Self::over(sock, tls.into()))
    }

    fn over(sock: TcpStream, mut tls: Connection) -> TlsStream {
        tls.set_buffer_limit(Some(SEND_LIMIT));
        TlsStream {
            tls,
            sock,
            unsent: 0,
        }
    }

    /// The TCP socket (to register with a poll, set options, shut down).
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Mutable access to the socket, for registering with a poll.
    pub fn socket_mut(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    /// About how many bytes of output wait in rustls for the socket
    /// (at least 1 while any does, 0 when none).
    pub fn pending(&self) -> usize {
        if self.tls.wants_write() {
            self.unsent.max(1)
        } else {
            0
        }
    }

    /// Sends what ciphertext the socket takes; "would block" if some is
    /// left.
    fn send(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            let sent = self.tls.write_tls(&mut self.sock)?;
            self.unsent = self.unsent.saturating_sub(sent);
        }
        self.unsent = 0;
        Ok(())
    }

    /// Reads ciphertext from the socket and decrypts it; `Ok(None)` at
    /// the end of the stream, else whether the socket gave less than was
    /// asked (it is empty now: no need to ask again until the next
    /// readable event). Handshake replies go out at once.
    fn receive(&mut self) -> io::Result<Option<bool>> {
        let mut probe = Probe {
            sock: &mut self.sock,
            short: false,
        };
        if self.tls.read_tls(&mut probe)? == 0 {
            return Ok(None);
        }
        let drained = probe.short;
        let state = self.tls.process_new_packets();
        // A failed handshake or record: its alert goes out before the
        // error closes the connection.
        let sent = self.send();
        state.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match sent {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(Some(drained)),
        }
    }
}

/// The socket as rustls reads it, noting whether a read came back short.
struct Probe<'a> {
    sock: &'a mut TcpStream,
    short: bool,
}

impl Read for Probe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

impl Read for TlsStream {
    /// Fills `buf` with plaintext until it is full, the socket is empty
    /// (it would block, or gave less than asked: then "would block" only
    /// if nothing was read), or the stream ends.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        let mut drained = false;
        while n < buf.len() {
            match self.tls.reader().read(&mut buf[n..]) {
                // The client's close_notify: the end.
                Ok(0) => return Ok(n),
                Ok(got) => {
                    n += got;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(n),
                Err(e) => return Err(e),
            }
            if drained {
                // The socket was emptied by the last read: a plain socket's
                // short read, without the read that would say so.
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            match self.receive() {
                Ok(Some(short)) => drained = short,
                Ok(None) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

impl Write for TlsStream {
    /// Takes as much plaintext as rustls has room for and sends what the
    /// socket takes; "would block" when it can take none.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.send() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => other?,
        }
        let n = self.tls.writer().write(buf)?;
        self.unsent += n;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.send() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

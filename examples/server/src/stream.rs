//! A client's socket as the workers see it: TCP, TCP with TLS
//! (`--tls-cert`), or a Unix domain socket (`--unix-socket`, memcached's
//! `-s`), behind one type that reads, writes and registers with a poll
//! the same way.
//!
//! Owns the socket and nothing else: no buffering (but rustls's, see
//! [`crate::tls`]), no protocol. Must never block: every kind is
//! non-blocking, as mio hands them out.

use crate::tls::TlsStream;
use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use std::io::{self, Read, Write};
use std::net::Shutdown;

/// A client connection's socket.
#[derive(Debug)]
pub enum Stream {
    /// A TCP connection (`--port`).
    Tcp(TcpStream),
    /// A TCP connection speaking TLS (`--tls-cert`, `--tls-key`).
    Tls(Box<TlsStream>),
    /// A Unix domain socket connection (`--unix-socket`).
    Unix(UnixStream),
}

impl Stream {
    /// Closes the writing half: the client reads what was written, then
    /// end of file.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Tls(s) => s.socket().shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        }
    }

    /// About how many bytes of output wait below the caller's buffer
    /// (TLS output the socket did not take yet; none for the other
    /// kinds); [`Write::flush`] sends them.
    #[inline]
    pub fn pending(&self) -> usize {
        match self {
            Stream::Tls(s) => s.pending(),
            _ => 0,
        }
    }
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interests),
            Stream::Tls(s) => s.socket_mut().register(registry, token, interests),
            Stream::Unix(s) => s.register(registry, token, interests),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interests),
            Stream::Tls(s) => s.socket_mut().reregister(registry, token, interests),
            Stream::Unix(s) => s.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Tls(s) => s.socket_mut().deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        }
    }
}

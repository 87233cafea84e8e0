//! [`Tracked`]: an established connection's byte stream, registered in
//! [`crate::connections::Connections`] for as long as it lives and closable from there (real
//! builds only).
//!
//! Why a wrapper around the stream rather than, say, aborting the connection's task: the task
//! belongs to hyper (tonic's server spawns one per accepted connection, a channel one per dialed
//! connection) and neither hands out a handle to it. The stream is the one thing both sides
//! own. Once told to close, its next read or write fails with `ConnectionAborted`; the task
//! polling it is woken at once (an HTTP/2 connection always has a read pending), so hyper
//! ends the connection and drops the stream, which closes the socket and removes the entry.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::connections::Registration;

/// A stream `S` (a TLS stream over TCP) that fails once its registration is told to close.
pub struct Tracked<S> {
    io: S,
    registration: Registration,
}

impl<S> Tracked<S> {
    pub(crate) fn new(io: S, registration: Registration) -> Self {
        Self { io, registration }
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// `Err` once the connection was told to close (and registers the task to be woken when it
    /// is).
    fn check(&self, cx: &Context<'_>) -> io::Result<()> {
        match self.registration.signal().poll_closed(cx.waker()) {
            None => Ok(()),
            Some(reason) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, reason.to_string())),
        }
    }
}

impl<S> std::fmt::Debug for Tracked<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked").finish_non_exhaustive()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Not refused: shutting down is how a closing connection ends.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// tonic's server reads the connection's details (the peer's certificates, for
/// `Request::peer_certs`) from the stream inside, exactly as without the wrapper.
impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Tracked<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::connections::{Connections, Side};

    #[tokio::test]
    async fn a_closed_stream_fails_its_pending_read_and_leaves_the_registry() {
        let connections = Connections::new(1);
        let (near, mut far) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(near, connections.register(Side::Accepted, None, Arc::new(vec![])));
        far.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tracked.read_exact(&mut buf).await.unwrap();

        // A read waiting for bytes that never come ends as soon as the sweep closes it.
        let reader = rill_rt::spawn(async move {
            let mut buf = [0u8; 1];
            let read = tracked.read(&mut buf).await;
            (read.map_err(|e| e.kind()), tracked)
        });
        let refuse = |_: Side, _: &[rustls::pki_types::CertificateDer<'static>]| {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Expired))
        };
        // The reader may not have polled yet: the close is seen whenever it does.
        assert_eq!(connections.close_unverified(refuse).closed, 1);
        let (read, tracked) = rill_rt::timeout(std::time::Duration::from_secs(10), reader).await.unwrap().unwrap();
        assert_eq!(read.unwrap_err(), io::ErrorKind::ConnectionAborted);
        assert_eq!(connections.live().len(), 1, "registered until the stream is dropped");
        drop(tracked);
        assert!(connections.live().is_empty());
    }
}

//! A client listener's accept loop, with the node's bound on open connections.
//!
//! Each accepted connection holds a permit until it closes; with every permit taken the loop
//! stops accepting, so further clients wait in the kernel's listen backlog (and time out there)
//! instead of costing the node a task, buffers and file descriptors each. Real builds only: the
//! simulation's network has its own listener.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Pause after a failed accept (out of file descriptors, say) before the next, so the loop does
/// not spin while the condition lasts.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// An accepted client connection, counted against the node's bound until dropped.
pub struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

/// The connections `listener` accepts, each holding one of `permits` until it closes: at most as
/// many open at once as there are permits, which every client listener of the node shares.
pub fn accept(listener: TcpListener, permits: Arc<Semaphore>) -> impl Stream<Item = io::Result<Counted>> {
    futures::stream::unfold((listener, permits), |(listener, permits)| async move {
        // A closed semaphore never happens (it is never closed); end the stream if it did.
        let permit = permits.clone().acquire_owned().await.ok()?;
        let accepted = match listener.accept().await {
            Ok((stream, _)) => {
                // Small requests and answers go out at once (tonic's default for its own loop).
                let _ = stream.set_nodelay(true);
                Ok(Counted { stream, _permit: permit })
            }
            Err(e) => {
                rill_rt::sleep(ACCEPT_ERROR_BACKOFF).await;
                Err(e)
            }
        };
        Some((accepted, (listener, permits)))
    })
}

impl Counted {
    /// The client's address, when the socket still knows it.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.stream.peer_addr().ok()
    }
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_connection_beyond_the_bound_waits_until_one_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = Box::pin(accept(listener, Arc::new(Semaphore::new(1))));
        let _first_client = TcpStream::connect(addr).await.unwrap();
        let first = accepted.next().await.unwrap().unwrap();
        // The second client's TCP handshake completes in the kernel's backlog, but the loop
        // does not take it while the first connection is open.
        let _second_client = TcpStream::connect(addr).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(200), accepted.next()).await;
        assert!(waiting.is_err(), "a second connection was accepted beyond the bound");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(10), accepted.next()).await;
        assert!(matches!(second, Ok(Some(Ok(_)))), "the second connection is accepted once the first closed");
    }
}

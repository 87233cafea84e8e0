//! The Kafka listener's accept loop and its connections.
//!
//! A connection answers its requests one at a time, in the order they arrive: the next frame is
//! read only once the previous answer is written, as Kafka's brokers do (a connection is muted
//! while its request is processed). Clients pipeline — an idempotent producer keeps up to five
//! requests in flight on one connection — and their requests wait, unread, in the socket; the
//! answers come back in request order by construction. A request's bytes stay taken from the
//! node's budget until its answer is written.
//!
//! Connections count against the node's connection bound (`[limits] max-connections`), shared
//! with the gRPC listener. When the node stops, the loop stops accepting and each connection
//! closes once its current request is answered.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::dispatch::{self, Peer};
use super::frame::{self, Close};
use crate::api::connections::{self, Counted};
use crate::api::inflight::Budget;
use crate::api::ClientLimits;
use crate::config::KafkaListener;
use crate::error::{Error, Result};
use crate::service::{Principal, Service};

/// Serves Kafka clients on `settings.listen` over `service`, within the node's `limits`, until
/// `shutdown` completes.
pub async fn serve(
    service: Service,
    limits: ClientLimits,
    settings: KafkaListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = settings.listen;
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::Serve(format!("Kafka listener {addr}: {e}")))?;
    tracing::info!(%addr, advertised = %settings.advertise, "serving Kafka clients");
    serve_on(listener, service, limits, settings.max_request_bytes, shutdown).await;
    Ok(())
}

/// Serves Kafka clients on `listener` (bound already) until `shutdown` completes.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    service: Service,
    limits: ClientLimits,
    max_request_bytes: u32,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop, stopped) = rill_rt::sync::watch::channel(false);
    let mut accepted = Box::pin(connections::accept(listener, limits.connections.clone()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            next = accepted.next() => match next {
                Some(Ok(conn)) => {
                    let budget = limits.budget.clone();
                    rill_rt::spawn(connection(conn, service.clone(), budget, max_request_bytes, stopped.clone()));
                }
                Some(Err(e)) => tracing::debug!(error = %e, "accepting a Kafka connection failed"),
                None => break,
            },
        }
    }
    let _ = stop.send(true);
}

/// One client connection: frames read, answered and written back in turn, until the client
/// closes it, sends a frame this listener cannot answer, or the node stops.
async fn connection(
    mut conn: Counted,
    service: Service,
    budget: Arc<Budget>,
    max_request_bytes: u32,
    mut stopped: rill_rt::sync::watch::Receiver<bool>,
) {
    let peer_addr = conn.peer_addr();
    let peer =
        Peer { principal: Principal::Anonymous, host: peer_addr.map(|a| a.ip().to_string()).unwrap_or_default() };
    let closed = loop {
        let frame = tokio::select! {
            frame = frame::read_frame(&mut conn, max_request_bytes, &budget) => frame,
            _ = stopped.wait_for(|stopped| *stopped) => break None,
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(close) => break Some(close),
        };
        match dispatch::answer(&service, &peer, frame.bytes.clone()).await {
            Ok(Some(answer)) => {
                if let Err(e) = conn.write_all(&answer).await {
                    break Some(Close::Write(e));
                }
            }
            Ok(None) => {}
            Err(close) => break Some(close),
        }
        // The request's bytes go back to the budget once it is answered.
        drop(frame);
    };
    match closed {
        None | Some(Close::Eof) => {}
        Some(close @ (Close::Io(_) | Close::Write(_))) => {
            tracing::debug!(peer = ?peer_addr, reason = %close, "Kafka connection closed");
        }
        Some(close) => tracing::info!(peer = ?peer_addr, reason = %close, "closing a Kafka connection"),
    }
}

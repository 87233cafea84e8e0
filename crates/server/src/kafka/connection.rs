//! The Kafka listener's accept loop and its connections.
//!
//! Answers go back in the order the requests came, and every request but `Produce` is served
//! alone, as Kafka's brokers serve every request (a connection is muted while its request is
//! processed): it starts once everything before it is answered, and the next frame is read once
//! its answer is written. Produce requests are pipelined instead: a producer keeps several in
//! flight on one connection (an idempotent one up to five), and served one at a time each would
//! wait out its predecessor's whole replication. Consecutive produce requests — up to
//! [`MAX_PIPELINED_PRODUCES`] — are served concurrently, each with a turn from the connection's
//! [`SubmitOrder`], so their batches still reach each partition's log in the order the requests
//! came (`rill_broker::submit_order`); their answers are written in that order too. A request's
//! bytes stay taken from the node's budget until its answer is written.
//!
//! Connections count against the node's connection bound (`[limits] max-connections`), shared
//! with the gRPC listener. When the node stops, the loop stops accepting and each connection
//! closes once its current request is answered.

use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use kafka_protocol::messages::ApiKey;
use rill_broker::SubmitOrder;
use tokio::io::AsyncWriteExt;

use super::dispatch::{self, Peer};
use super::frame::{self, Close};
use crate::api::connections::{self, Counted};
use crate::api::inflight::Budget;
use crate::api::ClientLimits;
use crate::config::KafkaListener;
use crate::error::{Error, Result};
use crate::service::{Principal, Service};

/// Most produce requests one connection has in flight: past it the next frame waits, unread,
/// for the oldest answer. More than the five an idempotent producer sends; each request's bytes
/// count against the node's budget besides.
pub const MAX_PIPELINED_PRODUCES: usize = 16;

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

/// One client connection: frames read, answered and written back in order, until the client
/// closes it, sends a frame this listener cannot answer, or the node stops (then the requests
/// read already are answered first).
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
    let (service, peer) = (&service, &peer);
    let mut order = SubmitOrder::default();
    // Produce requests in flight, answered in the order they came.
    let mut producing = FuturesOrdered::new();
    let closed = loop {
        let frame = tokio::select! {
            biased;
            Some(answer) = producing.next(), if !producing.is_empty() => {
                match write_answer(&mut conn, answer).await {
                    Ok(()) => continue,
                    Err(close) => break Some(close),
                }
            }
            frame = frame::read_frame(&mut conn, max_request_bytes, &budget), if producing.len() < MAX_PIPELINED_PRODUCES => frame,
            // The guard `wait_for` answers with is dropped inside: it cannot be held across
            // the other arms' writes.
            () = async { let _ = stopped.wait_for(|stopped| *stopped).await; } => break None,
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(close) => break Some(close),
        };
        if frame::peek_api(&frame.bytes).is_ok_and(|(api, _)| api == ApiKey::Produce as i16) {
            let turn = order.next_turn();
            producing.push_back(async move {
                let answer = dispatch::answer(service, peer, frame.bytes.clone(), Some(turn)).await;
                // The request's bytes go back to the budget once it is answered.
                drop(frame);
                answer
            });
            continue;
        }
        // Any other request waits for the produce requests before it, and is served alone.
        if let Some(close) = drain(&mut conn, &mut producing).await {
            break Some(close);
        }
        let answer = dispatch::answer(service, peer, frame.bytes.clone(), None).await;
        drop(frame);
        if let Err(close) = write_answer(&mut conn, answer).await {
            break Some(close);
        }
    };
    // A connection closing for a reason of its own (or the node stopping) answers what it read.
    let closed = match closed {
        None | Some(Close::Eof) => drain(&mut conn, &mut producing).await.or(closed),
        other => other,
    };
    match closed {
        None | Some(Close::Eof) => {}
        Some(close @ (Close::Io(_) | Close::Write(_))) => {
            tracing::debug!(peer = ?peer_addr, reason = %close, "Kafka connection closed");
        }
        Some(close) => tracing::info!(peer = ?peer_addr, reason = %close, "closing a Kafka connection"),
    }
}

/// Writes one request's answer, if it gets one; the close it calls for otherwise.
async fn write_answer(conn: &mut Counted, answer: Result<Option<BytesMut>, Close>) -> Result<(), Close> {
    match answer? {
        Some(frame) => conn.write_all(&frame).await.map_err(Close::Write),
        None => Ok(()),
    }
}

/// Answers every produce request in flight, in order; the close one of them called for.
async fn drain<F>(conn: &mut Counted, producing: &mut FuturesOrdered<F>) -> Option<Close>
where
    F: Future<Output = Result<Option<BytesMut>, Close>>,
{
    while let Some(answer) = producing.next().await {
        if let Err(close) = write_answer(conn, answer).await {
            return Some(close);
        }
    }
    None
}

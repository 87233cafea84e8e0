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
use std::pin::Pin;
use std::sync::Arc;

use bytes::BytesMut;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use kafka_protocol::messages::ApiKey;
use rill_broker::SubmitOrder;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};

use super::dispatch::{self, Peer};
use super::frame::{self, Close, Frame};
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
///
/// The connection is split in two: answers are written while the next frame is being read, and
/// the read in progress is kept across the loop's turns — a frame read halfway cannot be read
/// again, so a read is never dropped for an answer that became ready meanwhile.
async fn connection(
    conn: Counted,
    service: Service,
    budget: Arc<Budget>,
    max_request_bytes: u32,
    mut stopped: rill_rt::sync::watch::Receiver<bool>,
) {
    let peer_addr = conn.peer_addr();
    let peer =
        Peer { principal: Principal::Anonymous, host: peer_addr.map(|a| a.ip().to_string()).unwrap_or_default() };
    let (service, peer) = (&service, &peer);
    let (reader, mut writer) = tokio::io::split(conn);
    let mut order = SubmitOrder::default();
    // Produce requests in flight, answered in the order they came.
    let mut producing = FuturesOrdered::new();
    // The frame being read, or the reader between reads.
    let mut reading: Option<Reading> = Some(Box::pin(read_next(reader, max_request_bytes, budget.clone())));
    let mut idle: Option<ReadHalf<Counted>> = None;
    let closed = loop {
        if reading.is_none() && producing.len() < MAX_PIPELINED_PRODUCES {
            if let Some(reader) = idle.take() {
                reading = Some(Box::pin(read_next(reader, max_request_bytes, budget.clone())));
            }
        }
        let event = tokio::select! {
            biased;
            Some(answer) = producing.next(), if !producing.is_empty() => Event::Answered(answer),
            (reader, frame) = next_frame(&mut reading), if reading.is_some() => {
                idle = Some(reader);
                Event::Read(frame)
            }
            // The guard `wait_for` answers with is dropped inside: it cannot be held across
            // the other arms' writes.
            () = async { let _ = stopped.wait_for(|stopped| *stopped).await; } => Event::Stopped,
        };
        let frame = match event {
            Event::Answered(answer) => match write_answer(&mut writer, answer).await {
                Ok(()) => continue,
                Err(close) => break Some(close),
            },
            Event::Stopped => break None,
            Event::Read(Err(close)) => break Some(close),
            Event::Read(Ok(frame)) => {
                reading = None;
                frame
            }
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
        if let Some(close) = drain(&mut writer, &mut producing).await {
            break Some(close);
        }
        let answer = dispatch::answer(service, peer, frame.bytes.clone(), None).await;
        drop(frame);
        if let Err(close) = write_answer(&mut writer, answer).await {
            break Some(close);
        }
    };
    // A connection closing for a reason of its own (or the node stopping) answers what it read.
    let closed = match closed {
        None | Some(Close::Eof) => drain(&mut writer, &mut producing).await.or(closed),
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

/// What a connection's loop woke up for.
enum Event {
    /// A produce request in flight was answered (the oldest: answers go in order).
    Answered(Result<Option<BytesMut>, Close>),
    /// A frame was read, or reading failed.
    Read(Result<Frame, Close>),
    /// The node is stopping.
    Stopped,
}

/// A frame being read, owning the reader until it is done.
type Reading = Pin<Box<dyn Future<Output = (ReadHalf<Counted>, Result<Frame, Close>)> + Send>>;

/// Reads the next frame from `reader`, handing the reader back with it.
async fn read_next(
    mut reader: ReadHalf<Counted>,
    max_request_bytes: u32,
    budget: Arc<Budget>,
) -> (ReadHalf<Counted>, Result<Frame, Close>) {
    let frame = frame::read_frame(&mut reader, max_request_bytes, &budget).await;
    (reader, frame)
}

/// Polls the read in progress; pending when there is none (its branch is disabled then).
async fn next_frame(reading: &mut Option<Reading>) -> (ReadHalf<Counted>, Result<Frame, Close>) {
    match reading.as_mut() {
        Some(read) => read.await,
        None => std::future::pending().await,
    }
}

/// Writes one request's answer, if it gets one; the close it calls for otherwise.
async fn write_answer(conn: &mut WriteHalf<Counted>, answer: Result<Option<BytesMut>, Close>) -> Result<(), Close> {
    match answer? {
        Some(frame) => conn.write_all(&frame).await.map_err(Close::Write),
        None => Ok(()),
    }
}

/// Answers every produce request in flight, in order; the close one of them called for.
async fn drain<F>(conn: &mut WriteHalf<Counted>, producing: &mut FuturesOrdered<F>) -> Option<Close>
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

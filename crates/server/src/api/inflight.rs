//! One node-wide budget for the bytes of client requests received but not yet answered
//! (`[limits] max-request-bytes-in-flight`; Kafka's `queued.max.request.bytes`).
//!
//! Per-connection limits alone leave the product open: connections × streams × the largest
//! message is far more memory than a node has, and tonic allocates a message's full length as
//! soon as it reads its gRPC prefix. So on the client listener every request body goes through
//! [`Inflight`], which reads the 5-byte prefix (compressed flag, u32 big-endian length) and takes
//! that many bytes from the [`Budget`] *before* the decoder sees the prefix or reads further:
//!
//! ```text
//!   HTTP/2 stream ──► Gated body: prefix? ──► budget has len bytes? ──► decoder ──► handler
//!                                 │                  │ no: wait (the stream is not read, so
//!                                 │                  │     HTTP/2 flow control stops the sender)
//!                                 └ bytes released when the handler has answered or the request
//!                                   is dropped (client reset, connection closed)
//! ```
//!
//! * A request that has its bytes never waits for more: every public RPC is unary, so a request
//!   has one message and a second is refused. (A client-streaming RPC would need per-message
//!   accounting here.) Waiting requests queue in order, and only the first of them collects
//!   bytes as they are given back, so requests cannot deadlock each other on the budget: whoever
//!   holds bytes is either the first in the queue or waits only for its own client.
//! * A message longer than the node ever accepts is refused before it takes anything, so a
//!   forged prefix cannot make everyone queue behind it; one larger than the whole budget (a
//!   budget below the largest message, as tests use) takes the whole budget, so it cannot wait
//!   forever.
//! * Waiting requests are not an error: the client sees a slower answer, or its own deadline.
//!
//! HTTP/2 adds one condition. Data a stream has received but nobody has read still counts
//! against its *connection's* flow-control window (the `h2` crate releases both windows only
//! when a body is read). A stream waiting for the budget can have up to a stream window unread;
//! if the waiting streams of one connection could fill its connection window, the stream that
//! holds the budget on that same connection could not receive the rest of its message and would
//! never release it. [`Http2Windows::for_streams`] sizes the connection window to the stream
//! windows of every stream a connection may open, so that cannot happen.
//!
//! Real builds only: the simulation's gRPC transport has no HTTP bodies.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::Service;
use tonic::Status;

use crate::config::MAX_CONCURRENT_STREAMS_CEILING;

/// Length of a gRPC message's prefix: a compressed flag and a u32 big-endian length.
const PREFIX_BYTES: usize = 5;

/// Stream window on the client listener: hyper's default, 1 MiB. It is what a stream waiting for
/// the budget may hold unread, so it multiplies with every open stream. A 64 KiB window (HTTP/2's
/// own default) cost 5-8% of acks=all throughput, every round of an A/B run
/// (docs/benchmarks.md, "The request bytes budget"): a 1 MiB batch then needs 16 round trips.
pub const CLIENT_STREAM_WINDOW_BYTES: u32 = 1 << 20;

/// A message holding its bytes must arrive within this much time, plus [`MIN_RECEIVE_RATE`]'s
/// worth for its length, or its request fails: otherwise a client declaring large messages and
/// sending them slowly could hold the whole budget, and every other client would wait.
pub const RECEIVE_GRACE: Duration = Duration::from_secs(10);
/// The slowest a message holding its bytes may arrive, in bytes per second (1 MiB/s: a 64 MiB
/// message has 74 s).
pub const MIN_RECEIVE_RATE: u64 = 1 << 20;

/// Largest flow-control window HTTP/2 allows (2^31 - 1).
const MAX_HTTP2_WINDOW_BYTES: u32 = (1 << 31) - 1;

// Every stream's window fits in one connection's.
const _: () =
    assert!(MAX_CONCURRENT_STREAMS_CEILING as u64 * CLIENT_STREAM_WINDOW_BYTES as u64 <= MAX_HTTP2_WINDOW_BYTES as u64);

/// The client listener's HTTP/2 flow-control windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Windows {
    /// Initial window of each stream.
    pub stream: u32,
    /// Initial window of each connection.
    pub connection: u32,
}

impl Http2Windows {
    /// Windows under which the streams of one connection that wait for the budget can never use
    /// up the window the stream holding it needs: the connection's window covers every stream's
    /// window. (The configuration refuses more streams than fit in HTTP/2's largest window,
    /// [`MAX_CONCURRENT_STREAMS_CEILING`].)
    pub fn for_streams(max_concurrent_streams: u32) -> Self {
        let streams = max_concurrent_streams.clamp(1, MAX_CONCURRENT_STREAMS_CEILING);
        Self { stream: CLIENT_STREAM_WINDOW_BYTES, connection: CLIENT_STREAM_WINDOW_BYTES * streams }
    }
}

/// The node-wide budget, in bytes, shared by every connection of the client listener.
#[derive(Debug)]
pub struct Budget {
    permits: Arc<Semaphore>,
    total_bytes: usize,
    max_message_bytes: usize,
    waiting: AtomicUsize,
    receive_grace: Duration,
    min_receive_rate: u64,
}

impl Budget {
    /// A budget of `total_bytes` for requests whose messages are at most `max_message_bytes`.
    pub fn new(total_bytes: u64, max_message_bytes: usize) -> Arc<Self> {
        let total_bytes = usize::try_from(total_bytes).unwrap_or(usize::MAX).clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
            max_message_bytes,
            waiting: AtomicUsize::new(0),
            receive_grace: RECEIVE_GRACE,
            min_receive_rate: MIN_RECEIVE_RATE,
        })
    }

    /// This budget with another receive deadline (tests).
    #[cfg(test)]
    fn with_receive_deadline(total_bytes: u64, max_message_bytes: usize, grace: Duration, rate: u64) -> Arc<Self> {
        let mut budget = Self::new(total_bytes, max_message_bytes);
        if let Some(b) = Arc::get_mut(&mut budget) {
            b.receive_grace = grace;
            b.min_receive_rate = rate.max(1);
        }
        budget
    }

    /// Waits until a message of `len` bytes may be read, for a listener that frames its own
    /// requests (the Kafka listener): the bytes are held until the permit is dropped, which
    /// the listener does once the request is answered. `None` only if the budget was closed,
    /// which never happens.
    pub async fn take(self: &Arc<Self>, len: u32) -> Option<OwnedSemaphorePermit> {
        self.grant(self.cost(len)).await.ok()
    }

    /// How long a message of `len` bytes may take to arrive once it holds its bytes.
    pub fn receive_deadline(&self, len: u32) -> Duration {
        self.receive_grace + Duration::from_secs(u64::from(len) / self.min_receive_rate)
    }

    /// Bytes held by requests now (with what the first waiting request has collected so far).
    pub fn in_use(&self) -> usize {
        self.total_bytes - self.permits.available_permits().min(self.total_bytes)
    }

    /// Requests waiting for bytes now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The layer that makes a service's requests take their bytes from this budget.
    pub fn layer(self: &Arc<Self>) -> InflightLayer {
        InflightLayer { budget: self.clone() }
    }

    /// What a message of `len` bytes takes: all of it, or the whole budget if it is larger.
    fn cost(&self, len: u32) -> u32 {
        let cost = usize::try_from(len).unwrap_or(usize::MAX).min(self.total_bytes);
        u32::try_from(cost).unwrap_or(u32::MAX)
    }

    /// Waits for `bytes`, counted in [`Budget::waiting`] until granted or dropped.
    fn grant(self: &Arc<Self>, bytes: u32) -> Grant {
        let budget = self.clone();
        Box::pin(async move {
            budget.waiting.fetch_add(1, Ordering::Relaxed);
            let _counted = Waiting(&budget.waiting);
            budget.permits.clone().acquire_many_owned(bytes).await
        })
    }
}

type Grant = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// Takes one off the waiting count when a grant completes or is dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `tower` layer for the client listener's server ([`Budget::layer`]).
#[derive(Debug, Clone)]
pub struct InflightLayer {
    budget: Arc<Budget>,
}

impl<S> tower_layer::Layer<S> for InflightLayer {
    type Service = Inflight<S>;

    fn layer(&self, inner: S) -> Inflight<S> {
        Inflight { inner, budget: self.budget.clone() }
    }
}

/// A service whose request bodies take their message's bytes from the budget before they are
/// read, and give them back when the inner service has answered.
#[derive(Debug, Clone)]
pub struct Inflight<S> {
    inner: S,
    budget: Arc<Budget>,
}

impl<S> Service<http::Request<Body>> for Inflight<S>
where
    S: Service<http::Request<Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let held = Arc::new(Held::default());
        let request = request.map(|body| {
            Body::new(Gated {
                inner: body,
                budget: self.budget.clone(),
                held: held.clone(),
                scan: Scan::start(),
                withheld: None,
                deadline: None,
                message_len: 0,
            })
        });
        let answered = self.inner.call(request);
        Box::pin(async move {
            // Dropped when the answer is ready or the request is dropped, whichever comes first.
            let _release = Release(held);
            answered.await
        })
    }
}

/// The bytes a request holds. The request's body takes them, but the body is dropped once its
/// message is decoded, while the message lives on in the handler; so they are kept here, with
/// the request, until it is answered.
#[derive(Debug, Default)]
struct Held(Mutex<HeldState>);

#[derive(Debug, Default)]
struct HeldState {
    permit: Option<OwnedSemaphorePermit>,
    answered: bool,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HeldState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `permit` until the request is answered (and gives it back at once if it already
    /// was: nothing reads a request body after the answer, but nothing may be held after it).
    fn hold(&self, permit: OwnedSemaphorePermit) {
        let mut state = self.lock();
        if !state.answered {
            state.permit = Some(permit);
        }
    }
}

/// Gives a request's bytes back when dropped.
struct Release(Arc<Held>);

impl Drop for Release {
    fn drop(&mut self) {
        let permit = {
            let mut state = self.0.lock();
            state.answered = true;
            state.permit.take()
        };
        drop(permit);
    }
}

/// Where a request body is in its one message.
#[derive(Debug, Clone, Copy)]
enum Scan {
    /// Reading the prefix: `have` of its bytes seen so far.
    Prefix { seen: [u8; PREFIX_BYTES], have: usize },
    /// Inside the message, `remaining` bytes to go.
    Message { remaining: usize },
    /// The message has been read; only the end of the body may follow.
    Done,
}

impl Scan {
    fn start() -> Self {
        Scan::Prefix { seen: [0; PREFIX_BYTES], have: 0 }
    }

    /// Follows `data` through the body. Returns the message's length if its prefix completes
    /// in `data`.
    fn feed(&mut self, mut data: &[u8], max_message_bytes: usize) -> Result<Option<u32>, Status> {
        let mut completed = None;
        while !data.is_empty() {
            match self {
                Scan::Prefix { seen, have } => {
                    let n = (PREFIX_BYTES - *have).min(data.len());
                    seen[*have..*have + n].copy_from_slice(&data[..n]);
                    *have += n;
                    data = &data[n..];
                    if *have == PREFIX_BYTES {
                        let len = u32::from_be_bytes([seen[1], seen[2], seen[3], seen[4]]);
                        let remaining = usize::try_from(len).unwrap_or(usize::MAX);
                        if remaining > max_message_bytes {
                            return Err(Status::out_of_range(format!(
                                "a request message of {len} bytes is larger than the node accepts ({max_message_bytes} bytes)"
                            )));
                        }
                        *self = if remaining == 0 { Scan::Done } else { Scan::Message { remaining } };
                        completed = Some(len);
                    }
                }
                Scan::Message { remaining } => {
                    let n = (*remaining).min(data.len());
                    *remaining -= n;
                    data = &data[n..];
                    if *remaining == 0 {
                        *self = Scan::Done;
                    }
                }
                Scan::Done => {
                    return Err(Status::invalid_argument("a request carries one message: the public RPCs are unary"))
                }
            }
        }
        Ok(completed)
    }
}

/// A request body that withholds the frame completing a message's prefix until the budget has
/// granted the message's bytes, and is not read further meanwhile.
struct Gated {
    inner: Body,
    budget: Arc<Budget>,
    held: Arc<Held>,
    scan: Scan,
    /// The withheld frame and the grant it waits for.
    withheld: Option<Withheld>,
    /// While a message that holds its bytes is being received: when it must have arrived.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The length of the message being received.
    message_len: u32,
}

struct Withheld {
    frame: Frame<Bytes>,
    grant: Grant,
}

impl Gated {
    /// Starts the receive deadline of the message that now holds its bytes (if it is still
    /// arriving).
    fn start_deadline(&mut self) {
        if matches!(self.scan, Scan::Message { .. }) {
            let after = self.budget.receive_deadline(self.message_len);
            self.deadline = Some(Box::pin(tokio::time::sleep(after)));
        }
    }

    /// `Some(error)` once the message holding its bytes has missed its receive deadline.
    fn missed_deadline(&mut self, cx: &mut Context<'_>) -> Option<Status> {
        if !matches!(self.scan, Scan::Message { .. }) {
            self.deadline = None;
            return None;
        }
        let deadline = self.deadline.as_mut()?;
        deadline.as_mut().poll(cx).is_ready().then(|| {
            self.deadline = None;
            Status::deadline_exceeded(format!(
                "the {}-byte request message did not arrive within {:?} of being admitted (it holds request memory \
                 other clients wait for)",
                self.message_len,
                self.budget.receive_deadline(self.message_len)
            ))
        })
    }

    fn poll_withheld(
        &mut self,
        mut withheld: Withheld,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match withheld.grant.as_mut().poll(cx) {
            Poll::Pending => {
                self.withheld = Some(withheld);
                Poll::Pending
            }
            Poll::Ready(Ok(permit)) => {
                self.held.hold(permit);
                self.start_deadline();
                Poll::Ready(Some(Ok(withheld.frame)))
            }
            // The semaphore is never closed.
            Poll::Ready(Err(_)) => Poll::Ready(Some(Err(Status::unavailable("the request bytes budget is closed")))),
        }
    }
}

impl HttpBody for Gated {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(withheld) = this.withheld.take() {
            return this.poll_withheld(withheld, cx);
        }
        if let Some(late) = this.missed_deadline(cx) {
            return Poll::Ready(Some(Err(late)));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            ended => return Poll::Ready(ended),
        };
        let len = match frame.data_ref().map(|data| this.scan.feed(data, this.budget.max_message_bytes)) {
            None | Some(Ok(None)) => return Poll::Ready(Some(Ok(frame))),
            Some(Err(refused)) => return Poll::Ready(Some(Err(refused))),
            Some(Ok(Some(len))) => len,
        };
        this.message_len = len;
        let bytes = this.budget.cost(len);
        if bytes == 0 {
            return Poll::Ready(Some(Ok(frame)));
        }
        match this.budget.permits.clone().try_acquire_many_owned(bytes) {
            Ok(permit) => {
                this.held.hold(permit);
                this.start_deadline();
                Poll::Ready(Some(Ok(frame)))
            }
            Err(_) => {
                tracing::debug!(
                    bytes,
                    in_use = this.budget.in_use(),
                    waiting = this.budget.waiting(),
                    "request waits for the in-flight request bytes budget"
                );
                let grant = this.budget.grant(bytes);
                this.poll_withheld(Withheld { frame, grant }, cx)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.withheld.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use rill_proto::records::records_client::RecordsClient;
    use rill_proto::records::records_server::{Records, RecordsServer};
    use rill_proto::records::{
        FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse, ListOffsetsRequest,
        ListOffsetsResponse, PartitionProduce, ProduceRequest, ProduceResponse, TopicProduce,
    };
    use rill_proto::MAX_GRPC_MESSAGE_BYTES;
    use tokio::sync::mpsc;
    use tonic::transport::Channel;
    use tower_layer::Layer;

    use super::*;
    use crate::config::ClientLimits;

    /// Every wait on observable state gives up after this.
    const TIMEOUT: Duration = Duration::from_secs(10);
    /// The budget of these tests, far below the node's smallest, so a few requests fill it.
    const BUDGET_BYTES: u64 = 1 << 20;
    /// Concurrent streams per connection in these tests.
    const STREAMS: u32 = 16;

    /// A Records service whose Produce reports that it started (with the request's partition)
    /// and then waits for a permit of `hold` before it answers.
    #[derive(Clone)]
    struct Holding {
        started: mpsc::UnboundedSender<u32>,
        hold: Arc<Semaphore>,
    }

    #[tonic::async_trait]
    impl Records for Holding {
        async fn produce(
            &self,
            request: tonic::Request<ProduceRequest>,
        ) -> Result<tonic::Response<ProduceResponse>, Status> {
            let partition = request.get_ref().topics.first().and_then(|t| t.partitions.first()).map(|p| p.partition);
            let _ = self.started.send(partition.unwrap_or(u32::MAX));
            let _ = self.hold.acquire().await.map(|p| p.forget());
            Ok(tonic::Response::new(ProduceResponse::default()))
        }
        async fn fetch(&self, _: tonic::Request<FetchRequest>) -> Result<tonic::Response<FetchResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn list_offsets(
            &self,
            _: tonic::Request<ListOffsetsRequest>,
        ) -> Result<tonic::Response<ListOffsetsResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn init_producer_id(
            &self,
            _: tonic::Request<InitProducerIdRequest>,
        ) -> Result<tonic::Response<InitProducerIdResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
    }

    struct Harness {
        budget: Arc<Budget>,
        started: mpsc::UnboundedReceiver<u32>,
        hold: Arc<Semaphore>,
        /// One client connection, shared by every request.
        client: RecordsClient<Channel>,
    }

    /// Serves [`Holding`] the way the client listener serves the public services (its HTTP/2
    /// settings and layer, `super::super::public_server`), with a budget of [`BUDGET_BYTES`].
    async fn must_serve() -> Harness {
        let budget = Budget::new(BUDGET_BYTES, MAX_GRPC_MESSAGE_BYTES);
        let (started_tx, started) = mpsc::unbounded_channel();
        let hold = Arc::new(Semaphore::new(0));
        let service = Holding { started: started_tx, hold: hold.clone() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let limits = ClientLimits { max_concurrent_streams: STREAMS, ..ClientLimits::default() };
        let server = super::super::public_server(&limits, &budget)
            .add_service(RecordsServer::new(service).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES))
            .serve_with_incoming(super::super::connections::accept(listener, Arc::new(Semaphore::new(16))));
        tokio::spawn(server);
        let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        Harness { budget, started, hold, client: RecordsClient::new(channel) }
    }

    /// A Produce of one batch of `batch_bytes` to `partition`.
    fn produce(partition: u32, batch_bytes: usize) -> ProduceRequest {
        let batch = Bytes::from(vec![0; batch_bytes]);
        let partitions = vec![PartitionProduce { partition, batch }];
        ProduceRequest {
            topics: vec![TopicProduce { topic: "t".into(), partitions, ..Default::default() }],
            ..Default::default()
        }
    }

    impl Harness {
        fn send(&self, partition: u32, batch_bytes: usize) -> tokio::task::JoinHandle<Result<(), Status>> {
            let mut client = self.client.clone();
            tokio::spawn(async move { client.produce(produce(partition, batch_bytes)).await.map(|_| ()) })
        }

        /// The next handler to start.
        async fn must_start(&mut self) -> u32 {
            tokio::time::timeout(TIMEOUT, self.started.recv()).await.expect("a handler starts").expect("open")
        }

        fn must_not_have_started(&mut self) {
            assert!(self.started.try_recv().is_err(), "a handler started while its bytes were not granted");
        }
    }

    /// Waits until `ready` holds, for at most [`TIMEOUT`].
    async fn must_see(what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while !ready() {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn must_answer(request: tokio::task::JoinHandle<Result<(), Status>>) {
        let answered = tokio::time::timeout(TIMEOUT, request).await.expect("answered in time").expect("not panicked");
        answered.expect("answered OK");
    }

    #[tokio::test]
    async fn requests_beyond_the_budget_wait_and_all_complete_on_one_connection() {
        let mut h = must_serve().await;
        tracing::info!("--- twelve requests of 300 KiB on one connection: three fit in 1 MiB");
        let requests: Vec<_> = (0..12).map(|p| h.send(p, 300 << 10)).collect();
        let mut started = Vec::new();
        for _ in 0..3 {
            started.push(h.must_start().await);
        }
        let budget = h.budget.clone();
        must_see("the other nine wait for bytes", || budget.waiting() == 9).await;
        h.must_not_have_started();
        assert!(budget.in_use() >= 3 * (300 << 10) && budget.in_use() <= BUDGET_BYTES as usize);

        tracing::info!("--- handlers answer one at a time: each answer lets a waiting request in");
        // Every request granted after this reads the rest of its message while up to eight others
        // sit unread on the same connection: the windows must leave it room.
        for _ in 0..12 {
            h.hold.add_permits(1);
            if started.len() < 12 {
                started.push(h.must_start().await);
            }
        }
        for request in requests {
            must_answer(request).await;
        }
        started.sort_unstable();
        assert_eq!(started, (0..12).collect::<Vec<_>>());
        must_see("every byte is given back", || budget.in_use() == 0 && budget.waiting() == 0).await;
    }

    #[tokio::test]
    async fn a_waiting_request_starts_only_when_the_holder_answers() {
        let mut h = must_serve().await;
        tracing::info!("--- A takes 700 KiB of the 1 MiB and its handler holds them");
        let a = h.send(1, 700 << 10);
        assert_eq!(h.must_start().await, 1);
        let held = h.budget.in_use();
        assert!(held >= 700 << 10, "{held}");

        tracing::info!("--- B needs 700 KiB too: it waits, and its handler does not start");
        let b = h.send(2, 700 << 10);
        let budget = h.budget.clone();
        must_see("B waits for bytes", || budget.waiting() == 1).await;
        h.must_not_have_started();
        assert_eq!(budget.in_use(), BUDGET_BYTES as usize, "B, first in the queue, collects what is left");

        tracing::info!("--- A answers: B gets the bytes and starts");
        h.hold.add_permits(1);
        must_answer(a).await;
        assert_eq!(h.must_start().await, 2);
        assert_eq!(budget.waiting(), 0);
        h.hold.add_permits(1);
        must_answer(b).await;
        must_see("every byte is given back", || budget.in_use() == 0).await;
    }

    #[tokio::test]
    async fn a_cancelled_request_gives_its_bytes_back() {
        let mut h = must_serve().await;
        tracing::info!("--- A holds 700 KiB in its handler, B and C wait");
        let a = h.send(1, 700 << 10);
        assert_eq!(h.must_start().await, 1);
        let b = h.send(2, 700 << 10);
        let budget = h.budget.clone();
        must_see("B waits", || budget.waiting() == 1).await;
        let c = h.send(3, 700 << 10);
        must_see("B and C wait", || budget.waiting() == 2).await;

        tracing::info!("--- B's client gives up while it waits first in the queue, holding what was left");
        b.abort();
        must_see("only C waits", || budget.waiting() == 1).await;
        h.must_not_have_started();

        tracing::info!("--- A's client gives up while its handler runs: C gets A's bytes");
        a.abort();
        assert_eq!(h.must_start().await, 3, "C starts although A's handler never answered");
        assert_eq!(budget.waiting(), 0);
        h.hold.add_permits(1);
        must_answer(c).await;
        must_see("every byte is given back", || budget.in_use() == 0).await;
        h.must_not_have_started();
    }

    /// A request body fed frame by frame.
    struct Feed(mpsc::UnboundedReceiver<Bytes>);

    impl HttpBody for Feed {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            self.0.poll_recv(cx).map(|data| data.map(|d| Ok(Frame::data(d))))
        }
    }

    /// The client listener's layer over [`Holding`], called in-process with a body fed by the
    /// returned sender.
    fn must_call(
        budget: &Arc<Budget>,
    ) -> (mpsc::UnboundedSender<Bytes>, tokio::task::JoinHandle<http::Response<Body>>, mpsc::UnboundedReceiver<u32>)
    {
        let (started_tx, started) = mpsc::unbounded_channel();
        let service = Holding { started: started_tx, hold: Arc::new(Semaphore::new(0)) };
        let mut svc =
            budget.layer().layer(RecordsServer::new(service).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES));
        let (feed, rx) = mpsc::unbounded_channel();
        let request = http::Request::builder()
            .method("POST")
            .uri("/rill.records.Records/Produce")
            .header("content-type", "application/grpc")
            .body(Body::new(Feed(rx)))
            .unwrap();
        let call = tokio::spawn(async move { svc.call(request).await.unwrap() });
        (feed, call, started)
    }

    /// A gRPC message prefix: uncompressed, `len` bytes.
    fn prefix(len: u32) -> Vec<u8> {
        let mut p = vec![0];
        p.extend_from_slice(&len.to_be_bytes());
        p
    }

    fn grpc_status(response: &http::Response<Body>) -> Option<&str> {
        response.headers().get("grpc-status").and_then(|s| s.to_str().ok())
    }

    #[tokio::test]
    async fn a_body_cut_off_mid_message_gives_its_bytes_back() {
        let budget = Budget::new(BUDGET_BYTES, MAX_GRPC_MESSAGE_BYTES);
        tracing::info!("--- a prefix split over two frames declares 600 KiB; 1 KiB of it arrives");
        let (feed, first, mut started) = must_call(&budget);
        let p = prefix(600 << 10);
        feed.send(Bytes::copy_from_slice(&p[..2])).unwrap();
        feed.send([&p[2..], &[0; 1024][..]].concat().into()).unwrap();
        must_see("the message holds its 600 KiB", || budget.in_use() == 600 << 10).await;

        tracing::info!("--- a second request declaring 600 KiB waits; a third's body is dropped while it waits");
        let (feed2, second, _) = must_call(&budget);
        feed2.send(prefix(600 << 10).into()).unwrap();
        must_see("the second waits", || budget.waiting() == 1).await;
        let (feed3, third, _) = must_call(&budget);
        feed3.send(prefix(600 << 10).into()).unwrap();
        must_see("the third waits", || budget.waiting() == 2).await;
        third.abort();
        let _ = third.await;
        must_see("the third left the queue", || budget.waiting() == 1).await;

        tracing::info!("--- the first request is dropped mid-message: the second gets the bytes");
        first.abort();
        let _ = first.await;
        must_see("the second holds the bytes", || budget.waiting() == 0 && budget.in_use() == 600 << 10).await;
        assert!(started.try_recv().is_err(), "no handler ran: no message was complete");
        drop(feed2);
        let second = tokio::time::timeout(TIMEOUT, second).await.unwrap().unwrap();
        assert_eq!(grpc_status(&second), Some("13"), "an incomplete message is INTERNAL (tonic's unexpected EOF)");
        assert_eq!(budget.in_use(), 0, "a failed request gives its bytes back when answered");
        drop((feed, feed3));
    }

    #[tokio::test]
    async fn a_message_that_arrives_too_slowly_fails_and_gives_its_bytes_back() {
        // 300 KiB at no less than 1 MiB/s after 200 ms of grace: 200 ms in all.
        let budget =
            Budget::with_receive_deadline(BUDGET_BYTES, MAX_GRPC_MESSAGE_BYTES, Duration::from_millis(200), 1 << 20);
        tracing::info!("--- a request declares 300 KiB, sends 1 KiB of it, then nothing");
        let (feed, call, mut started) = must_call(&budget);
        feed.send([&prefix(300 << 10)[..], &[0; 1024][..]].concat().into()).unwrap();
        must_see("the message holds its bytes", || budget.in_use() == 300 << 10).await;
        let failed = tokio::time::timeout(TIMEOUT, call).await.unwrap().unwrap();
        assert_eq!(grpc_status(&failed), Some("4"), "DEADLINE_EXCEEDED");
        assert!(started.try_recv().is_err(), "no handler ran");
        assert_eq!(budget.in_use(), 0, "the bytes came back");

        tracing::info!("--- one that keeps arriving in time reaches its handler, and is not cut off later");
        let (feed, call, mut started) = must_call(&budget);
        let message = ProduceRequest {
            topics: vec![TopicProduce {
                topic: "t".into(),
                partitions: vec![PartitionProduce { partition: 3, batch: vec![0u8; 100 << 10].into() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&message);
        feed.send(prefix(bytes.len() as u32).into()).unwrap();
        for chunk in bytes.chunks(16 << 10) {
            feed.send(Bytes::copy_from_slice(chunk)).unwrap();
        }
        // The end of the body: a unary request is decoded once its stream ends.
        drop(feed);
        let partition = tokio::time::timeout(TIMEOUT, started.recv()).await.unwrap();
        assert_eq!(partition, Some(3), "the handler got the whole message");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!call.is_finished(), "past the deadline, the admitted request still runs");
        assert_eq!(budget.in_use(), bytes.len(), "and holds its bytes until it answers");
        call.abort();
    }

    #[tokio::test]
    async fn oversized_and_second_messages_are_refused_without_taking_bytes() {
        let budget = Budget::new(BUDGET_BYTES, MAX_GRPC_MESSAGE_BYTES);
        tracing::info!("--- a prefix beyond the largest message is refused before it takes anything");
        let (feed, call, _) = must_call(&budget);
        feed.send(prefix(MAX_GRPC_MESSAGE_BYTES as u32 + 1).into()).unwrap();
        let refused = tokio::time::timeout(TIMEOUT, call).await.unwrap().unwrap();
        assert_eq!(grpc_status(&refused), Some("11"), "OUT_OF_RANGE");
        assert_eq!((budget.in_use(), budget.waiting()), (0, 0));

        tracing::info!("--- a message larger than the whole budget (but allowed) takes the whole budget");
        let (feed, call, _) = must_call(&budget);
        feed.send(prefix(4 << 20).into()).unwrap();
        must_see("it holds the whole budget", || budget.in_use() == BUDGET_BYTES as usize).await;
        call.abort();
        let _ = call.await;
        assert_eq!(budget.in_use(), 0);

        tracing::info!("--- a unary request with a second message is refused");
        let (feed, call, mut started) = must_call(&budget);
        // Two empty ProduceRequests.
        feed.send([prefix(0), prefix(0)].concat().into()).unwrap();
        let refused = tokio::time::timeout(TIMEOUT, call).await.unwrap().unwrap();
        assert_eq!(grpc_status(&refused), Some("3"), "INVALID_ARGUMENT");
        assert!(started.try_recv().is_err(), "the handler never ran");
        assert_eq!((budget.in_use(), budget.waiting()), (0, 0));
        drop(feed);
    }

    #[test]
    fn connection_windows_cover_every_stream() {
        let w = Http2Windows::for_streams(1000);
        assert_eq!((w.stream, w.connection), (CLIENT_STREAM_WINDOW_BYTES, 1000 * CLIENT_STREAM_WINDOW_BYTES));
        for streams in [1, 16, MAX_CONCURRENT_STREAMS_CEILING] {
            let w = Http2Windows::for_streams(streams);
            assert!(u64::from(w.connection) >= u64::from(w.stream) * u64::from(streams), "{streams}: {w:?}");
            assert!(w.connection <= MAX_HTTP2_WINDOW_BYTES && w.stream > 0, "{streams}: {w:?}");
        }
    }
}

//! [`Producer`]: batching, lingering, compressing, partitioning — and idempotent by default.
//!
//! ```text
//!  send(topic, record) ──► partitioner (murmur2 for keys, sticky for unkeyed)
//!        │ waits for buffer memory                      │
//!        ▼                                              ▼
//!  per-partition accumulator ──(batch.size reached, or linger elapsed, or flush)──► sender task
//!        ▲                                                                              │
//!        └─── up to 5 batches in flight per partition (1 without idempotence) ◄── produce
//! ```
//!
//! **Idempotence** (on by default, with `acks=all`): the producer gets a producer id from the
//! cluster and numbers the records of every partition 0, 1, 2, … Each batch carries its producer
//! id, epoch and first sequence number, and keeps them on every retry, so the partition stores it
//! once however often it is sent: a retry after a timeout or a leader change is answered with
//! the original offsets. That makes every error whose outcome is unknown safe to retry, and the
//! producer retries them until the delivery timeout.
//!
//! **Order**: batches of a partition enter the log in send order. When a batch fails with a
//! retriable error, the partition stops sending new batches, waits for the ones in flight, and
//! resends the failed ones one by one in sequence order before pipelining again.
//!
//! Every record gets a [`DeliveryFuture`] resolving to where it landed, or to the error.
//! Without idempotence (or with acks other than all) only errors proving the batch was not
//! appended are retried; an unknown outcome is reported, never retried.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rill_proto::common::ErrorCode;
use rill_records::Compression;
use rill_rt::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use rill_rt::Instant;

use crate::client::build_batch;
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::record::{Acks, Record, RecordMetadata};
use crate::Client;

/// Batches in flight per partition with idempotence (Kafka's limit for idempotent producers:
/// the partition remembers this many batches per producer).
const MAX_IN_FLIGHT_IDEMPOTENT: usize = 5;
/// Pause before resending a batch that failed with a retriable error.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Producer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Acknowledgement level.
    pub acks: Acks,
    /// Deduplicate retries with a producer id and sequence numbers (applies with `acks=all`).
    pub idempotence: bool,
    /// A batch is sent once it holds this many bytes (`batch.size`).
    pub batch_size: usize,
    /// A batch that is not full is sent this long after its first record (`linger.ms`).
    pub linger: Duration,
    /// Compression codec for batches.
    pub compression: Compression,
    /// How long the server may take to acknowledge one batch.
    pub request_timeout: Duration,
    /// How long a record may take from `send` to acknowledgement, retries included.
    pub delivery_timeout: Duration,
    /// Bytes of records buffered before `send` waits (`buffer.memory`).
    pub buffer_memory: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            idempotence: true,
            batch_size: 64 * 1024,
            linger: Duration::from_millis(5),
            compression: Compression::None,
            request_timeout: Duration::from_secs(30),
            delivery_timeout: Duration::from_secs(120),
            buffer_memory: 32 << 20,
        }
    }
}

/// Resolves to where a record landed, or why it did not.
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(Error::Transport("the producer stopped before delivering".into()))))
    }
}

struct Pending {
    record: Record,
    tx: oneshot::Sender<Result<RecordMetadata>>,
    deadline: Instant,
    _memory: OwnedSemaphorePermit,
}

/// A batch taken off an accumulator. Its identity (producer id, epoch, first sequence) is fixed
/// at first send and kept across retries, unless the producer id is replaced.
struct Batch {
    records: Vec<Pending>,
    /// Position in this partition's send order (stable across producer id resets).
    order: u64,
    identity: Option<(i64, i16, i32)>,
    /// Last sent while an earlier batch of its partition was in flight: a refusal as out of
    /// order may only mean it overtook that batch (the partition's leader verifies a
    /// transaction's first batch with its coordinator before appending it, and answers the
    /// batches behind it meanwhile), even when that batch has landed by the time the answer
    /// comes back.
    sent_behind: bool,
    /// An attempt under `identity` ended without an answer that says whether it was stored
    /// (a timeout, a lost connection, a leader change after the append): it is resent under
    /// that identity until the partition's answer settles it, never under a newer producer id,
    /// which would store it a second time if the first attempt had landed.
    maybe_stored: bool,
}

#[derive(Default)]
struct Accumulator {
    records: Vec<Pending>,
    bytes: usize,
    first_at: Option<Instant>,
    /// The records buffered here leave without waiting out their linger (set by
    /// `send_buffered_now`, cleared once none is left).
    send_now: bool,
    in_flight: usize,
    /// The producer id the batches in flight carry: batches under a new id wait until those are
    /// done, so a partition never has two ids racing (order).
    in_flight_pid: Option<i64>,
    /// Next sequence number under the current producer id.
    next_seq: i32,
    /// Next send-order number.
    next_order: u64,
    /// Failed batches waiting to be resent, by send order.
    retry: BTreeMap<u64, Batch>,
}

#[derive(Default)]
struct State {
    partitions: HashMap<(String, u32), Accumulator>,
    sticky: HashMap<String, u32>,
    /// Producer id and epoch (idempotence), once obtained.
    identity: Option<(i64, i16)>,
    flushing: bool,
    closed: bool,
    /// A transactional producer: the first error of the current transaction (it must abort).
    txn_error: Option<Error>,
    /// A transactional producer: batches were sent in the current transaction.
    txn_sent: bool,
}

struct Inner {
    client: Client,
    config: ProducerConfig,
    idempotent: bool,
    /// A transactional producer's id: its producer id comes from `init_transactions`, never
    /// from the sender task, and a failed batch makes the transaction abortable instead of
    /// replacing the producer id (see [`crate::transactional`]).
    transactional_id: Option<String>,
    state: Mutex<State>,
    memory: Arc<Semaphore>,
    /// Wakes the sender task (new data, a batch finished, flush, close).
    wake: Notify,
    /// Wakes `flush` callers when a batch finishes.
    progress: Notify,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A batching, idempotent producer. Cheap to clone; clones share buffers.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl Producer {
    /// A producer over `client`; spawns its sender task.
    pub fn new(client: Client, config: ProducerConfig) -> Self {
        Self::with_transactional_id(client, config, None)
    }

    /// A producer whose batches belong to transactions of `transactional_id` (idempotent,
    /// `acks=all`); driven by [`crate::TransactionalProducer`].
    pub(crate) fn with_transactional_id(
        client: Client,
        config: ProducerConfig,
        transactional_id: Option<String>,
    ) -> Self {
        let config = match transactional_id {
            Some(_) => ProducerConfig { acks: Acks::All, idempotence: true, ..config },
            None => config,
        };
        let permits = config.buffer_memory.clamp(1, Semaphore::MAX_PERMITS);
        let inner = Arc::new(Inner {
            client,
            config,
            transactional_id,
            idempotent: config.idempotence && config.acks == Acks::All,
            state: Mutex::new(State::default()),
            memory: Arc::new(Semaphore::new(permits)),
            wake: Notify::new(),
            progress: Notify::new(),
        });
        rill_rt::spawn(sender(inner.clone()));
        Self { inner }
    }

    /// True when retries are deduplicated (idempotence on and acks=all).
    pub fn is_idempotent(&self) -> bool {
        self.inner.idempotent
    }

    /// The producer id in use (idempotence), once one was obtained.
    pub fn producer_id(&self) -> Option<i64> {
        self.inner.lock().identity.map(|(id, _)| id)
    }

    /// Queues `record` for `topic`, choosing the partition: Kafka's murmur2 partitioner for keyed
    /// records, the sticky partitioner (fill one batch, then move) for unkeyed ones. Waits only
    /// when the buffer is full.
    pub async fn send(&self, topic: &str, record: Record) -> Result<DeliveryFuture> {
        let count = self.inner.client.partition_count(topic).await?;
        let partition = match &record.key {
            Some(k) => partition_for_key(k, count),
            None => {
                let mut st = self.inner.lock();
                *st.sticky.entry(topic.to_string()).or_insert_with(|| rill_rt::rng().gen_range(0..count.max(1)))
            }
        };
        self.send_to(topic, partition, record).await
    }

    /// Queues `record` for `topic`/`partition`.
    pub async fn send_to(&self, topic: &str, partition: u32, record: Record) -> Result<DeliveryFuture> {
        let count = self.inner.client.partition_count(topic).await?;
        if partition >= count {
            return Err(Error::InvalidArgument(format!(
                "partition {partition} does not exist: topic {topic:?} has {count} partition(s)"
            )));
        }
        let size = record.size_bytes().clamp(1, self.inner.config.buffer_memory.max(1));
        let permit = self
            .inner
            .memory
            .clone()
            .acquire_many_owned(u32::try_from(size).unwrap_or(u32::MAX))
            .await
            .map_err(|_| Error::InvalidArgument("the producer is closed".into()))?;
        let (tx, rx) = oneshot::channel();
        let deadline = rill_rt::now() + self.inner.config.delivery_timeout;
        let replan = {
            let mut st = self.inner.lock();
            if st.closed {
                return Err(Error::InvalidArgument("the producer is closed".into()));
            }
            let acc = st.partitions.entry((topic.to_string(), partition)).or_default();
            acc.first_at.get_or_insert_with(rill_rt::now);
            acc.bytes += size;
            acc.records.push(Pending { record, tx, deadline, _memory: permit });
            // The sender needs waking only when this record changes its plan: a partition's
            // first queued record starts a linger deadline, and a full batch goes at once. For
            // any other record it already waits for this partition's deadline, or for a batch
            // in flight to finish (which wakes it).
            acc.records.len() == 1 || acc.bytes >= self.inner.config.batch_size
        };
        if replan {
            self.inner.wake.notify_one();
        }
        Ok(DeliveryFuture { rx })
    }

    /// Ends the linger of every record buffered now, without waiting: they leave as soon as
    /// their partitions may send (in as many batches as `batch_size` makes of them). Records
    /// queued after the call linger as usual, unless they join a batch of those.
    pub(crate) fn send_buffered_now(&self) {
        let mut st = self.inner.lock();
        let mut any = false;
        for acc in st.partitions.values_mut().filter(|acc| !acc.records.is_empty()) {
            acc.send_now = true;
            any = true;
        }
        drop(st);
        if any {
            self.inner.wake.notify_one();
        }
    }

    /// Sends everything buffered now and waits until every record queued before the call is
    /// acknowledged or failed.
    pub async fn flush(&self) {
        loop {
            let progressed = self.inner.progress.notified();
            {
                let mut st = self.inner.lock();
                if st.partitions.values().all(idle) {
                    st.flushing = false;
                    return;
                }
                st.flushing = true;
            }
            self.inner.wake.notify_one();
            progressed.await;
        }
    }

    /// A transactional producer's new producer id and epoch (from `InitProducerId` or `EndTxn`):
    /// sequences restart at 0 and the transaction's error, if any, is cleared.
    pub(crate) fn start_epoch(&self, identity: (i64, i16)) {
        let mut st = self.inner.lock();
        st.identity = Some(identity);
        st.txn_error = None;
        st.txn_sent = false;
        for acc in st.partitions.values_mut() {
            acc.next_seq = 0;
        }
    }

    /// The producer id and epoch in use.
    pub(crate) fn identity(&self) -> Option<(i64, i16)> {
        self.inner.lock().identity
    }

    /// The current transaction's first error, and whether it sent any batch.
    pub(crate) fn transaction_outcome(&self) -> (Option<Error>, bool) {
        let st = self.inner.lock();
        (st.txn_error.clone(), st.txn_sent)
    }

    /// Flushes, then stops the sender task. Later sends fail.
    pub async fn close(self) {
        self.flush().await;
        self.inner.lock().closed = true;
        self.inner.memory.close();
        self.inner.wake.notify_one();
    }
}

fn idle(acc: &Accumulator) -> bool {
    acc.records.is_empty() && acc.in_flight == 0 && acc.retry.is_empty()
}

/// The sender task: dispatches ready batches within the in-flight limit of each partition.
async fn sender(inner: Arc<Inner>) {
    loop {
        if inner.idempotent
            && inner.transactional_id.is_none()
            && inner.lock().identity.is_none()
            && inner.lock().partitions.values().any(|a| !idle(a))
        {
            match inner.client.init_producer_id().await {
                Ok(identity) => {
                    let mut st = inner.lock();
                    st.identity = Some(identity);
                    for acc in st.partitions.values_mut() {
                        acc.next_seq = 0;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot get a producer id yet; retrying");
                    fail_expired(&inner, &e);
                    rill_rt::sleep(RETRY_BACKOFF).await;
                    continue;
                }
            }
        }
        let woken = inner.wake.notified();
        let next_wake = {
            let mut st = inner.lock();
            if st.closed && st.partitions.values().all(idle) {
                return;
            }
            let now = rill_rt::now();
            let flushing = st.flushing || st.closed;
            let identity = st.identity;
            let max_in_flight = if inner.idempotent { MAX_IN_FLIGHT_IDEMPOTENT } else { 1 };
            let mut next: Option<Instant> = None;
            let mut dispatch = Vec::new();
            for ((topic, partition), acc) in st.partitions.iter_mut() {
                if inner.idempotent && identity.is_none() {
                    break;
                }
                let current_pid = identity.map(|(p, _)| p);
                if inner.idempotent && acc.in_flight > 0 && acc.in_flight_pid != current_pid {
                    continue;
                }
                if !acc.retry.is_empty() {
                    // Recovering: resend failed batches one at a time, in order, once nothing
                    // else of this partition is in flight.
                    if acc.in_flight == 0 {
                        if let Some((_, mut b)) = acc.retry.pop_first() {
                            assign_identity(&mut b, acc, identity, inner.idempotent);
                            b.sent_behind = false;
                            acc.in_flight += 1;
                            acc.in_flight_pid = b.identity.map(|(p, _, _)| p).or(current_pid);
                            dispatch.push((topic.clone(), *partition, b));
                        }
                    }
                    continue;
                }
                while acc.in_flight < max_in_flight && !acc.records.is_empty() {
                    let due = acc.first_at.map_or(now, |t| t + inner.config.linger);
                    if !(flushing || acc.send_now || acc.bytes >= inner.config.batch_size || due <= now) {
                        next = Some(next.map_or(due, |n: Instant| n.min(due)));
                        break;
                    }
                    let mut b = take_batch(acc, inner.config.batch_size);
                    assign_identity(&mut b, acc, identity, inner.idempotent);
                    b.sent_behind = acc.in_flight > 0;
                    acc.in_flight += 1;
                    acc.in_flight_pid = current_pid;
                    dispatch.push((topic.clone(), *partition, b));
                }
            }
            for (topic, partition, _) in &dispatch {
                // Sticky partitioner: once a batch of the sticky partition leaves, move on.
                if st.sticky.get(topic) == Some(partition) {
                    st.sticky.remove(topic);
                }
            }
            if !dispatch.is_empty() {
                st.txn_sent = true;
            }
            for (topic, partition, b) in dispatch {
                rill_rt::spawn(send_batch(inner.clone(), topic, partition, b));
            }
            next
        };
        match next_wake {
            Some(at) => {
                let _ = rill_rt::timeout_at(at, woken).await;
            }
            None => woken.await,
        }
    }
}

/// Gives `b` its producer id, epoch and sequence numbers (once per producer id).
fn assign_identity(b: &mut Batch, acc: &mut Accumulator, identity: Option<(i64, i16)>, idempotent: bool) {
    if !idempotent {
        return;
    }
    let Some((pid, epoch)) = identity else { return };
    if b.identity.is_some_and(|(p, e, _)| (p == pid && e == epoch) || b.maybe_stored) {
        return;
    }
    let count = b.records.len() as i64;
    b.identity = Some((pid, epoch, acc.next_seq));
    acc.next_seq = ((i64::from(acc.next_seq) + count) % (i64::from(i32::MAX) + 1)) as i32;
}

/// Takes up to `batch_size` bytes (at least one record) off `acc`.
fn take_batch(acc: &mut Accumulator, batch_size: usize) -> Batch {
    let mut bytes = 0;
    let mut n = 0;
    for p in &acc.records {
        let size = p.record.size_bytes();
        if n > 0 && bytes + size > batch_size {
            break;
        }
        bytes += size;
        n += 1;
    }
    let records: Vec<Pending> = acc.records.drain(..n).collect();
    acc.bytes = acc.bytes.saturating_sub(bytes);
    acc.first_at = if acc.records.is_empty() { None } else { Some(rill_rt::now()) };
    acc.send_now &= !acc.records.is_empty();
    let order = acc.next_order;
    acc.next_order += 1;
    Batch { records, order, identity: None, sent_behind: false, maybe_stored: false }
}

/// Resolves, with `e`, every queued record whose delivery deadline passed.
fn fail_expired(inner: &Inner, e: &Error) {
    let now = rill_rt::now();
    let mut st = inner.lock();
    for acc in st.partitions.values_mut() {
        let (expired, kept): (Vec<Pending>, Vec<Pending>) = acc.records.drain(..).partition(|p| p.deadline <= now);
        acc.records = kept;
        if acc.records.is_empty() {
            // The next record starts its own linger.
            acc.first_at = None;
            acc.send_now = false;
        }
        for p in expired {
            acc.bytes = acc.bytes.saturating_sub(p.record.size_bytes());
            let _ = p.tx.send(Err(e.clone()));
        }
    }
}

enum Outcome {
    Delivered(Option<u64>),
    Retry,
    /// Refused as out of order: fine if an earlier batch is still on its way, otherwise a gap.
    OutOfOrder,
    /// The producer id is unknown or the sequence broke: get a new id, then resend.
    NewProducerId,
    Failed(Error),
}

async fn send_batch(inner: Arc<Inner>, topic: String, partition: u32, mut b: Batch) {
    let deadline = b.records.iter().map(|p| p.deadline).min().unwrap_or_else(rill_rt::now);
    let records: Vec<Record> = b.records.iter().map(|p| p.record.clone()).collect();
    let transactional = inner.transactional_id.is_some();
    let outcome = match build_batch(records, inner.config.compression, b.identity, transactional) {
        Err(e) => Outcome::Failed(e),
        Ok(wire) => attempt(&inner, &topic, partition, wire, b.identity.is_some(), deadline).await,
    };
    let mut st = inner.lock();
    let batch_pid = b.identity.map(|(p, _, _)| p);
    match outcome {
        Outcome::Delivered(base) => {
            for (i, p) in b.records.into_iter().enumerate() {
                let _ = p.tx.send(Ok(RecordMetadata { partition, offset: base.map(|o| o + i as u64) }));
            }
        }
        Outcome::Failed(e) => {
            for p in b.records {
                let _ = p.tx.send(Err(e.clone()));
            }
            if inner.transactional_id.is_some() {
                // The transaction lost a batch: it can only abort (its producer id stays).
                st.txn_error.get_or_insert(e);
            } else if inner.idempotent && b.identity.is_some() && reset_identity_if_current(&mut st, batch_pid) {
                // Its sequence numbers are spent without a stored batch: later batches under
                // this producer id would be refused as out of order, so a new one was started.
                tracing::debug!(topic, partition, error = %e, "a batch failed: a new producer id for what follows");
            }
        }
        Outcome::Retry | Outcome::NewProducerId | Outcome::OutOfOrder => {
            // Out of order is expected while an earlier batch of this partition is still in
            // flight or queued for resending (resend after it), and for a batch that was sent
            // behind one (it may have overtaken it: resend it alone once). Otherwise it means a
            // gap the partition will never fill, so start a new producer id.
            let earlier_pending = st
                .partitions
                .get(&(topic.clone(), partition))
                .is_some_and(|acc| acc.in_flight > 1 || acc.retry.keys().any(|o| *o < b.order));
            let gap = matches!(outcome, Outcome::NewProducerId)
                || (matches!(outcome, Outcome::OutOfOrder) && !earlier_pending && !b.sent_behind);
            if gap && inner.transactional_id.is_some() {
                // A transactional producer keeps its id: the transaction aborts instead.
                let e = Error::Server {
                    code: ErrorCode::OutOfOrderSequenceNumber,
                    message: format!(
                        "{topic}/{partition}: the partition lost this producer's sequence; abort the transaction"
                    ),
                };
                for p in b.records.drain(..) {
                    let _ = p.tx.send(Err(e.clone()));
                }
                st.txn_error.get_or_insert(e);
            } else if gap {
                // A gap proves this batch unstored under its identity: it may take a new one.
                // Only a gap under the current producer id starts another.
                if reset_identity_if_current(&mut st, batch_pid) {
                    tracing::debug!(
                        topic,
                        partition,
                        order = b.order,
                        "a sequence gap: a new producer id, then resend"
                    );
                }
                b.identity = None;
                b.maybe_stored = false;
            } else if matches!(outcome, Outcome::Retry) {
                b.maybe_stored = true;
            }
            if let Some(acc) = st.partitions.get_mut(&(topic.clone(), partition)) {
                if !b.records.is_empty() {
                    acc.retry.insert(b.order, b);
                }
            }
        }
    }
    if let Some(acc) = st.partitions.get_mut(&(topic, partition)) {
        acc.in_flight = acc.in_flight.saturating_sub(1);
        if acc.in_flight == 0 {
            acc.in_flight_pid = None;
        }
    }
    drop(st);
    inner.wake.notify_one();
    inner.progress.notify_waiters();
}

/// Drops the producer id (the next batch asks for a new one, every partition's sequence
/// restarting at 0) when a batch stamped `batch_pid` failed under the *current* id. A batch of
/// an older id says nothing about the current one, and resetting on it would start yet another
/// id while batches that may have landed still wait under theirs. Returns whether it reset.
fn reset_identity_if_current(st: &mut State, batch_pid: Option<i64>) -> bool {
    if batch_pid != st.identity.map(|(p, _)| p) {
        return false;
    }
    st.identity = None;
    for acc in st.partitions.values_mut() {
        acc.next_seq = 0;
    }
    true
}

/// Sends one batch; classifies the result. Idempotent batches are retried here for a while on
/// retriable errors before the partition falls back to ordered recovery.
async fn attempt(
    inner: &Inner,
    topic: &str,
    partition: u32,
    wire: Bytes,
    idempotent: bool,
    deadline: Instant,
) -> Outcome {
    let (acks, timeout) = (inner.config.acks, inner.config.request_timeout);
    let txn = inner.transactional_id.as_deref();
    let result = inner.client.produce_batch_until(deadline, topic, partition, wire, acks, timeout, txn).await;
    match result {
        Ok(ack) => Outcome::Delivered(ack.base_offset),
        Err(e) if e.code() == Some(ErrorCode::DuplicateSequenceNumber) => Outcome::Delivered(None),
        Err(e) if !idempotent => Outcome::Failed(e),
        Err(e) if rill_rt::now() >= deadline => Outcome::Failed(e),
        Err(e) if e.code() == Some(ErrorCode::UnknownProducerId) => Outcome::NewProducerId,
        Err(e) if e.code() == Some(ErrorCode::OutOfOrderSequenceNumber) => {
            tracing::debug!(topic, partition, error = %e, "out of order");
            rill_rt::sleep(RETRY_BACKOFF).await;
            Outcome::OutOfOrder
        }
        Err(e) if e.is_retriable_idempotent() => {
            tracing::debug!(topic, partition, error = %e, "retrying an idempotent batch");
            rill_rt::sleep(RETRY_BACKOFF).await;
            Outcome::Retry
        }
        Err(e) => Outcome::Failed(e),
    }
}

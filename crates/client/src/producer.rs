//! [`Producer`]: batching, lingering, compressing, partitioning producer.
//!
//! ```text
//!  send(topic, record) ──► partitioner (murmur2 for keys, sticky for unkeyed)
//!        │ waits for buffer memory                      │
//!        ▼                                              ▼
//!  per-partition accumulator ──(batch.size reached, or linger elapsed, or flush)──► sender task
//!        ▲                                                                              │
//!        └────────── one batch in flight per partition (keeps order) ◄── produce, retries
//! ```
//!
//! Every record gets a [`DeliveryFuture`] that resolves to where it landed, or to the error.
//! Retries happen only for errors that prove the batch was not appended, until the delivery
//! timeout; an unknown outcome (timeout, lost connection) is reported, never retried, so a
//! record is never written twice. (Producer ids and sequence numbers — idempotence — will allow
//! retrying those safely too.)

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::Rng;
use rill_proto::common::Compression;
use rill_rt::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use rill_rt::Instant;

use crate::client::build_batch;
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::record::{Acks, Record, RecordMetadata};
use crate::Client;

/// Producer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Acknowledgement level.
    pub acks: Acks,
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

#[derive(Default)]
struct Accumulator {
    records: Vec<Pending>,
    bytes: usize,
    first_at: Option<Instant>,
    in_flight: bool,
}

#[derive(Default)]
struct State {
    partitions: HashMap<(String, u32), Accumulator>,
    sticky: HashMap<String, u32>,
    flushing: bool,
    closed: bool,
}

struct Inner {
    client: Client,
    config: ProducerConfig,
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

/// A batching producer. Cheap to clone; clones share buffers.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl Producer {
    /// A producer over `client`; spawns its sender task.
    pub fn new(client: Client, config: ProducerConfig) -> Self {
        let permits = config.buffer_memory.clamp(1, Semaphore::MAX_PERMITS);
        let inner = Arc::new(Inner {
            client,
            config,
            state: Mutex::new(State::default()),
            memory: Arc::new(Semaphore::new(permits)),
            wake: Notify::new(),
            progress: Notify::new(),
        });
        rill_rt::spawn(sender(inner.clone()));
        Self { inner }
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
        let full = {
            let mut st = self.inner.lock();
            if st.closed {
                return Err(Error::InvalidArgument("the producer is closed".into()));
            }
            let acc = st.partitions.entry((topic.to_string(), partition)).or_default();
            acc.first_at.get_or_insert_with(rill_rt::now);
            acc.bytes += size;
            acc.records.push(Pending { record, tx, deadline, _memory: permit });
            acc.bytes >= self.inner.config.batch_size
        };
        // Wake the sender: a full batch goes now; otherwise it re-plans its linger deadline.
        let _ = full;
        self.inner.wake.notify_one();
        Ok(DeliveryFuture { rx })
    }

    /// Sends everything buffered now and waits until every record queued before the call is
    /// acknowledged or failed.
    pub async fn flush(&self) {
        loop {
            let progressed = self.inner.progress.notified();
            {
                let mut st = self.inner.lock();
                if st.partitions.values().all(|a| a.records.is_empty() && !a.in_flight) {
                    st.flushing = false;
                    return;
                }
                st.flushing = true;
            }
            self.inner.wake.notify_one();
            progressed.await;
        }
    }

    /// Flushes, then stops the sender task. Later sends fail.
    pub async fn close(self) {
        self.flush().await;
        self.inner.lock().closed = true;
        self.inner.memory.close();
        self.inner.wake.notify_one();
    }
}

/// The sender task: dispatches ready batches, one in flight per partition.
async fn sender(inner: Arc<Inner>) {
    loop {
        let woken = inner.wake.notified();
        let next_wake = {
            let mut st = inner.lock();
            if st.closed && st.partitions.values().all(|a| a.records.is_empty() && !a.in_flight) {
                return;
            }
            let now = rill_rt::now();
            let flushing = st.flushing || st.closed;
            let mut next: Option<Instant> = None;
            let mut dispatch = Vec::new();
            for ((topic, partition), acc) in st.partitions.iter_mut() {
                if acc.in_flight || acc.records.is_empty() {
                    continue;
                }
                let due = acc.first_at.map_or(now, |t| t + inner.config.linger);
                if flushing || acc.bytes >= inner.config.batch_size || due <= now {
                    dispatch.push((topic.clone(), *partition, take_batch(acc, inner.config.batch_size)));
                } else {
                    next = Some(next.map_or(due, |n: Instant| n.min(due)));
                }
            }
            for (topic, partition, _) in &dispatch {
                // Sticky partitioner: once a batch of the sticky partition leaves, move on.
                if st.sticky.get(topic) == Some(partition) {
                    st.sticky.remove(topic);
                }
            }
            for (topic, partition, batch) in dispatch {
                rill_rt::spawn(send_batch(inner.clone(), topic, partition, batch));
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

/// Takes up to `batch_size` bytes (at least one record) off `acc` and marks it in flight.
fn take_batch(acc: &mut Accumulator, batch_size: usize) -> Vec<Pending> {
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
    let batch: Vec<Pending> = acc.records.drain(..n).collect();
    acc.bytes = acc.bytes.saturating_sub(bytes);
    acc.first_at = if acc.records.is_empty() { None } else { Some(rill_rt::now()) };
    acc.in_flight = true;
    batch
}

async fn send_batch(inner: Arc<Inner>, topic: String, partition: u32, batch: Vec<Pending>) {
    let deadline = batch.iter().map(|p| p.deadline).min().unwrap_or_else(rill_rt::now);
    let records: Vec<Record> = batch.iter().map(|p| p.record.clone()).collect();
    let result = match build_batch(records, inner.config.compression) {
        Ok(b) => {
            inner
                .client
                .produce_batch_until(deadline, &topic, partition, b, inner.config.acks, inner.config.request_timeout)
                .await
        }
        Err(e) => Err(e),
    };
    for (i, p) in batch.into_iter().enumerate() {
        let outcome = match &result {
            Ok(ack) => Ok(RecordMetadata { partition, offset: ack.base_offset.map(|b| b + i as u64) }),
            Err(e) => Err(e.clone()),
        };
        let _ = p.tx.send(outcome);
    }
    if let Some(acc) = inner.lock().partitions.get_mut(&(topic, partition)) {
        acc.in_flight = false;
    }
    inner.wake.notify_one();
    inner.progress.notify_waiters();
}

//! [`Client`]: connections, metadata, and per-partition requests routed to leaders.
//!
//! Requests for a partition go to its leader, found through a metadata cache. When a node
//! answers `NOT_LEADER_OR_FOLLOWER`, the client follows the leader hint (or refreshes the
//! metadata) and retries with exponential backoff and jitter — but only for errors that prove the
//! request had no effect, so a retry can never write a batch twice, and only within the
//! configured retry budget. A transport failure during a produce has an unknown outcome and is
//! returned to the caller as such.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rill_proto::admin::admin_client::AdminClient;
use rill_proto::admin::MetadataRequest;
use rill_proto::common::{ErrorCode, LeaderHint};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    self as pb, FetchPartition, FetchRequest, FetchTopic, ListOffsetsRequest, ListOffsetsTopic, PartitionProduce,
    ProduceRequest, TopicProduce,
};
use rill_records::{BatchBuilder, Compression, Header, MAX_DECOMPRESSED_BATCH_BYTES};
use tonic::transport::{Channel, Endpoint};

use crate::error::{self, Error, Result};
use crate::record::{Acks, FetchedPartition, IsolationLevel, OffsetSpec, ProduceAck, ReceivedRecord, Record};

/// Largest gRPC message the client accepts.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// First retry backoff; doubles up to [`MAX_BACKOFF`], with jitter.
const BASE_BACKOFF: Duration = Duration::from_millis(50);
/// Largest retry backoff.
const MAX_BACKOFF: Duration = Duration::from_millis(1000);
/// How long an address that failed at the transport level is not sent requests: a killed
/// leader stays in other nodes' metadata for a moment (until its silence shows), and without
/// this pause a producer would burn its sends on it, each with an unknown outcome.
const UNREACHABLE_PAUSE: Duration = Duration::from_millis(500);

/// Client tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// How long to wait for a TCP connection.
    pub connect_timeout: Duration,
    /// Extra time a request may take beyond its server-side timeout before the client gives up
    /// on the connection (the outcome is then unknown).
    pub request_slack: Duration,
    /// How long a request keeps being retried after errors that prove it had no effect
    /// (no leader yet, leader moved, ISR too small).
    pub retry_budget: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_slack: Duration::from_secs(5),
            retry_budget: Duration::from_secs(30),
        }
    }
}

#[derive(Default)]
struct Metadata {
    nodes: HashMap<u64, String>,
    /// topic → partition leaders (`None` = unknown).
    leaders: HashMap<String, Vec<Option<u64>>>,
    /// topic → its id, as last reported.
    topic_ids: HashMap<String, Bytes>,
    /// (coordinator kind, key) → the coordinator's address, as last found.
    coordinators: HashMap<(crate::coordinator::Coordinator, String), String>,
    /// Address → until when it is not sent requests (see [`UNREACHABLE_PAUSE`]).
    unreachable: HashMap<String, rill_rt::Instant>,
}

impl Metadata {
    fn is_unreachable(&self, addr: &str) -> bool {
        self.unreachable.get(addr).is_some_and(|until| rill_rt::now() < *until)
    }
}

/// A connection to a Rill cluster. Cheap to clone; clones share connections and metadata.
#[derive(Clone)]
pub struct Client {
    bootstrap: Arc<Vec<String>>,
    options: ClientOptions,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    metadata: Arc<Mutex<Metadata>>,
}

/// Whether a routed call answered with `e` is tried again (after following the leader hint or
/// refreshing metadata): a refusal before anything was appended always; a node whose storage
/// failed (`STORAGE_ERROR`: it stopped leading) only for reads, which have no effect to repeat.
fn retriable(e: &Error, resend: Resend) -> bool {
    e.is_retriable_without_effect()
        || (resend == Resend::AlsoAfterTransportErrors && e.code() == Some(ErrorCode::StorageError))
}

pub(crate) fn backoff(attempt: u32) -> Duration {
    backoff_up_to(attempt, MAX_BACKOFF)
}

/// The pause before retry `attempt`: doubling from [`BASE_BACKOFF`] up to `cap`, times a random
/// 0.5–1 so that clients refused together do not retry together.
pub(crate) fn backoff_up_to(attempt: u32, cap: Duration) -> Duration {
    let exp = BASE_BACKOFF.saturating_mul(1 << attempt.min(10)).min(cap);
    let jitter: f64 = rill_rt::rng().gen_range(0.5..1.0);
    exp.mul_f64(jitter)
}

/// When a per-partition request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// Only after an answer proving it had no effect (a write: after a transport error its
    /// outcome is unknown, and the caller decides).
    OnlyWithoutEffect,
    /// Also after a transport error (a read).
    AlsoAfterTransportErrors,
}

/// A per-partition answer: the fields every produce, fetch and list-offsets result carries.
pub(crate) trait PartitionAnswer {
    fn partition(&self) -> u32;
    fn failure(&self) -> Option<(Error, Option<LeaderHint>)>;
}

macro_rules! partition_answer {
    ($($t:ty),*) => {$(
        impl PartitionAnswer for $t {
            fn partition(&self) -> u32 {
                self.partition
            }
            fn failure(&self) -> Option<(Error, Option<LeaderHint>)> {
                (self.error_code != ErrorCode::None as i32)
                    .then(|| (error::server(self.error_code, self.error_message.clone()), self.leader.clone()))
            }
        }
    )*};
}
partition_answer!(
    pb::PartitionProduceResult,
    pb::FetchPartitionResult,
    pb::ListOffsetsPartitionResult,
    rill_proto::admin::DeleteRecordsPartitionResult
);

/// Finds `partition`'s answer in a response; `Ok(Err(..))` carries a server error and hint.
fn answer_for<P: PartitionAnswer>(
    all: impl IntoIterator<Item = P>,
    partition: u32,
) -> Result<std::result::Result<P, (Error, Option<LeaderHint>)>> {
    let p = all
        .into_iter()
        .find(|p| p.partition() == partition)
        .ok_or_else(|| Error::Transport("the answer lacks the partition".into()))?;
    Ok(match p.failure() {
        Some(f) => Err(f),
        None => Ok(p),
    })
}

impl Client {
    /// Connects to the cluster through any of `bootstrap` (`host:port`), loading metadata.
    pub async fn connect(bootstrap: &[String]) -> Result<Self> {
        Self::connect_with(bootstrap, ClientOptions::default()).await
    }

    /// [`Client::connect`] with options.
    pub async fn connect_with(bootstrap: &[String], options: ClientOptions) -> Result<Self> {
        let bootstrap: Vec<String> = bootstrap.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if bootstrap.is_empty() {
            return Err(Error::InvalidArgument("no bootstrap address given (host:port)".into()));
        }
        let client = Self {
            bootstrap: Arc::new(bootstrap),
            options,
            channels: Default::default(),
            metadata: Default::default(),
        };
        client.refresh_metadata(&[]).await?;
        Ok(client)
    }

    /// The options in force.
    pub fn options(&self) -> ClientOptions {
        self.options
    }

    pub(crate) fn channel(&self, addr: &str) -> Result<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::InvalidArgument(format!("bad address {addr:?}: {e}")))?
            .connect_timeout(self.options.connect_timeout)
            .tcp_nodelay(true);
        let c = endpoint.connect_lazy();
        channels.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    pub(crate) fn admin_stub(&self, addr: &str) -> Result<AdminClient<Channel>> {
        Ok(AdminClient::new(self.channel(addr)?).max_decoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// The `Groups` stub of `addr`, taking messages up to the largest a node sends (a classic
    /// group leader's JoinGroup answer carries every member's metadata).
    pub(crate) fn groups_stub(&self, addr: &str) -> Result<rill_proto::groups::groups_client::GroupsClient<Channel>> {
        Ok(rill_proto::groups::groups_client::GroupsClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// The `Share` stub of `addr`.
    pub(crate) fn share_stub(&self, addr: &str) -> Result<rill_proto::share::share_client::ShareClient<Channel>> {
        Ok(rill_proto::share::share_client::ShareClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    pub(crate) fn records_stub(&self, addr: &str) -> Result<RecordsClient<Channel>> {
        Ok(RecordsClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Every address worth trying for an admin request: known nodes first, then bootstrap.
    fn admin_addrs(&self) -> Vec<String> {
        let md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let mut addrs: Vec<String> = md.nodes.values().cloned().collect();
        addrs.sort();
        for b in self.bootstrap.iter() {
            if !addrs.contains(b) {
                addrs.push(b.clone());
            }
        }
        // Addresses that just failed last (stable: otherwise in order).
        addrs.sort_by_key(|a| md.is_unreachable(a));
        addrs
    }

    /// Runs an admin call against the first node that answers.
    pub(crate) async fn on_any_node<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(AdminClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.on_any_node_via(Self::admin_stub, call).await
    }

    /// Runs a call of the service `stub` makes against the first node that answers.
    pub(crate) async fn on_any_node_via<S, T, F, Fut>(&self, stub: fn(&Self, &str) -> Result<S>, call: F) -> Result<T>
    where
        F: Fn(S) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = Error::Transport("no node reachable".into());
        let wait = self.options.request_slack * 3;
        for addr in self.admin_addrs() {
            let client = stub(self, &addr)?;
            match rill_rt::timeout(wait, call(client)).await {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(s)) => {
                    if s.code() == tonic::Code::Unavailable {
                        self.mark_unreachable(&addr);
                    }
                    last = Error::Transport(format!("{addr}: {}: {}", s.code(), s.message()));
                }
                Err(_) => {
                    self.mark_unreachable(&addr);
                    last = Error::Transport(format!("{addr}: no answer within {wait:?}"));
                }
            }
        }
        Err(last)
    }

    /// Runs a call of the service `stub` makes against every node of the cluster (as the
    /// metadata, refreshed first, names them) at once: each node's address with its answer or
    /// why it gave none. For state that lives where each partition's leader is.
    pub(crate) async fn on_every_node_via<S, T, F, Fut>(
        &self,
        stub: fn(&Self, &str) -> Result<S>,
        call: F,
    ) -> Result<Vec<(String, Result<T>)>>
    where
        F: Fn(S) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.refresh_metadata(&[]).await?;
        let mut addrs: Vec<String> =
            self.metadata.lock().unwrap_or_else(|p| p.into_inner()).nodes.values().cloned().collect();
        addrs.sort();
        let wait = self.options.request_slack * 3;
        let asks = addrs.into_iter().map(|addr| {
            let answer = stub(self, &addr).map(&call);
            async move {
                let answer = match answer {
                    Err(e) => Err(e),
                    Ok(pending) => match rill_rt::timeout(wait, pending).await {
                        Ok(Ok(r)) => Ok(r.into_inner()),
                        Ok(Err(s)) => Err(Error::Transport(format!("{addr}: {}: {}", s.code(), s.message()))),
                        Err(_) => Err(Error::Transport(format!("{addr}: no answer within {wait:?}"))),
                    },
                };
                (addr, answer)
            }
        });
        Ok(futures::future::join_all(asks).await)
    }

    /// Reloads partition leaders and node addresses (for `topics`, or every topic when empty).
    pub async fn refresh_metadata(&self, topics: &[String]) -> Result<()> {
        let req = MetadataRequest { topics: topics.to_vec() };
        let md = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.metadata(req).await }
            })
            .await?;
        let mut cache = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        for n in md.nodes {
            cache.nodes.insert(n.node_id, n.address);
        }
        for t in md.topics {
            if t.error_code == ErrorCode::None as i32 {
                cache.leaders.insert(t.name.clone(), t.partitions.iter().map(|p| p.leader).collect());
                cache.topic_ids.insert(t.name, t.topic_id);
            } else {
                cache.leaders.remove(&t.name);
                cache.topic_ids.remove(&t.name);
            }
        }
        Ok(())
    }

    /// The id of `topic` as the metadata reports it now (refreshed once if unknown). A consumer
    /// pins it, so it is told when the topic is deleted and re-created instead of reading the
    /// new topic as the old one.
    pub async fn topic_id(&self, topic: &str) -> Result<Bytes> {
        self.about_topic(topic, |md| md.topic_ids.get(topic).cloned()).await
    }

    /// The number of partitions of `topic` (from metadata; refreshes once if unknown).
    pub async fn partition_count(&self, topic: &str) -> Result<u32> {
        self.about_topic(topic, |md| md.leaders.get(topic).map(|l| l.len() as u32)).await
    }

    /// The coordinator of `key` last found, if any.
    pub(crate) fn cached_coordinator(&self, kind: crate::coordinator::Coordinator, key: &str) -> Option<String> {
        self.metadata.lock().unwrap_or_else(|p| p.into_inner()).coordinators.get(&(kind, key.to_string())).cloned()
    }

    /// Remembers (or, with `None`, forgets) the coordinator of `key`.
    pub(crate) fn remember_coordinator(&self, kind: crate::coordinator::Coordinator, key: &str, addr: Option<String>) {
        let mut md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        match addr {
            Some(a) => md.coordinators.insert((kind, key.to_string()), a),
            None => md.coordinators.remove(&(kind, key.to_string())),
        };
    }

    /// What `read` finds about `topic` in the metadata cache, refreshing it once if nothing.
    async fn about_topic<T>(&self, topic: &str, read: impl Fn(&Metadata) -> Option<T>) -> Result<T> {
        let cached = |c: &Self| read(&c.metadata.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(v) = cached(self) {
            return Ok(v);
        }
        self.refresh_metadata(&[topic.to_string()]).await?;
        cached(self).ok_or_else(|| Error::Server {
            code: ErrorCode::UnknownTopicOrPartition,
            message: format!("unknown topic {topic:?}"),
        })
    }

    fn cached_partitions(&self, topic: &str) -> Option<u32> {
        self.metadata.lock().unwrap_or_else(|p| p.into_inner()).leaders.get(topic).map(|l| l.len() as u32)
    }

    /// The address of the partition's leader, unless unknown or just found unreachable.
    pub(crate) fn leader_addr(&self, topic: &str, partition: u32) -> Option<String> {
        let md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let leader = (*md.leaders.get(topic)?.get(partition as usize)?)?;
        md.nodes.get(&leader).filter(|a| !md.is_unreachable(a)).cloned()
    }

    /// Records that a request to `addr` failed at the transport level.
    pub(crate) fn mark_unreachable(&self, addr: &str) {
        let mut md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let now = rill_rt::now();
        md.unreachable.retain(|_, until| *until > now);
        md.unreachable.insert(addr.to_string(), now + UNREACHABLE_PAUSE);
    }

    pub(crate) fn forget_leader(&self, topic: &str, partition: u32) {
        let mut md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = md.leaders.get_mut(topic).and_then(|l| l.get_mut(partition as usize)) {
            *slot = None;
        }
    }

    pub(crate) fn learn_leader(&self, topic: &str, partition: u32, hint: Option<&LeaderHint>) -> bool {
        let Some(h) = hint.filter(|h| !h.address.is_empty()) else {
            return false;
        };
        let mut md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        md.nodes.insert(h.node_id, h.address.clone());
        if let Some(slot) = md.leaders.get_mut(topic).and_then(|l| l.get_mut(partition as usize)) {
            *slot = Some(h.node_id);
            return true;
        }
        false
    }

    /// Runs a per-partition *read* against the partition's leader, following leader changes,
    /// until the retry budget is spent. A read has no effect, so it is also sent again after a
    /// transport error (the leader's node may be gone: the next attempt asks who leads now).
    async fn read_from_leader<T, F, Fut>(&self, topic: &str, partition: u32, call: F) -> Result<T>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<std::result::Result<T, (Error, Option<LeaderHint>)>>>,
    {
        let deadline = rill_rt::now() + self.options.retry_budget;
        self.with_leader_until(deadline, topic, partition, Resend::AlsoAfterTransportErrors, call).await
    }

    /// Runs a per-partition request against the partition's leader, following leader changes,
    /// resending it as `resend` allows until `deadline`.
    async fn with_leader_until<T, F, Fut>(
        &self,
        deadline: rill_rt::Instant,
        topic: &str,
        partition: u32,
        resend: Resend,
        call: F,
    ) -> Result<T>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<std::result::Result<T, (Error, Option<LeaderHint>)>>>,
    {
        let mut attempt = 0;
        loop {
            let addr = match self.leader_addr(topic, partition) {
                Some(a) => a,
                None => {
                    self.refresh_metadata(&[topic.to_string()]).await?;
                    match (self.leader_addr(topic, partition), self.cached_partitions(topic)) {
                        (Some(a), _) => a,
                        (None, None) => {
                            return Err(Error::Server {
                                code: ErrorCode::UnknownTopicOrPartition,
                                message: format!("unknown topic {topic:?}"),
                            })
                        }
                        (None, Some(n)) if partition >= n => {
                            return Err(Error::Server {
                                code: ErrorCode::UnknownTopicOrPartition,
                                message: format!(
                                    "partition {partition} does not exist: topic {topic:?} has {n} partition(s)"
                                ),
                            })
                        }
                        (None, Some(_)) => {
                            attempt += 1;
                            if rill_rt::now() >= deadline {
                                return Err(Error::Server {
                                    code: ErrorCode::LeaderNotAvailable,
                                    message: format!(
                                        "no leader for {topic}/{partition}; are a majority of its replicas up?"
                                    ),
                                });
                            }
                            rill_rt::sleep(backoff(attempt)).await;
                            continue;
                        }
                    }
                }
            };
            let answer = match call(addr.clone()).await {
                Ok(a) => a,
                Err(e) => {
                    // The node may be gone: look the leader up again next time, and leave the
                    // node alone for a moment (its leadership may still be reported).
                    self.forget_leader(topic, partition);
                    self.mark_unreachable(&addr);
                    if resend == Resend::AlsoAfterTransportErrors && rill_rt::now() < deadline {
                        attempt += 1;
                        tracing::debug!(topic, partition, attempt, error = %e, "resending a read");
                        rill_rt::sleep(backoff(attempt)).await;
                        continue;
                    }
                    return Err(e);
                }
            };
            match answer {
                Ok(v) => return Ok(v),
                Err((e, hint)) if retriable(&e, resend) && rill_rt::now() < deadline => {
                    attempt += 1;
                    tracing::debug!(topic, partition, attempt, error = %e, "retrying");
                    if !self.learn_leader(topic, partition, hint.as_ref()) {
                        rill_rt::sleep(backoff(attempt)).await;
                        let _ = self.refresh_metadata(&[topic.to_string()]).await;
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    // ------------------------------------------------------------------ data ----------------

    /// A fresh producer id and epoch for an idempotent producer. Any node hands them out; ids
    /// are reserved through the cluster metadata and never reused.
    pub async fn init_producer_id(&self) -> Result<(i64, i16)> {
        let mut last = Error::Transport("no node reachable".into());
        for addr in self.admin_addrs() {
            let mut stub = self.records_stub(&addr)?;
            let req =
                pb::InitProducerIdRequest { transactional_id: String::new(), transaction_timeout_ms: 0, current: None };
            match rill_rt::timeout(self.options.request_slack * 3, stub.init_producer_id(req)).await {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    if r.error_code != ErrorCode::None as i32 {
                        return Err(error::server(r.error_code, r.error_message));
                    }
                    let epoch = i16::try_from(r.producer_epoch).map_err(|_| {
                        Error::Transport(format!("the server sent producer epoch {}, beyond 16 bits", r.producer_epoch))
                    })?;
                    return Ok((r.producer_id, epoch));
                }
                Ok(Err(s)) => last = error::status(s),
                Err(_) => last = Error::Transport(format!("{addr}: no answer")),
            }
        }
        Err(last)
    }

    /// Produces `records` as one batch to `topic`/`partition` and waits for `acks`.
    pub async fn produce(&self, topic: &str, partition: u32, records: Vec<Record>, acks: Acks) -> Result<ProduceAck> {
        self.produce_with(topic, partition, records, acks, Compression::None, Duration::from_secs(30)).await
    }

    /// [`Client::produce`] with a compression codec and a server-side timeout.
    pub async fn produce_with(
        &self,
        topic: &str,
        partition: u32,
        records: Vec<Record>,
        acks: Acks,
        compression: Compression,
        timeout: Duration,
    ) -> Result<ProduceAck> {
        let batch = build_batch(records, compression, None, false)?;
        self.produce_batch(topic, partition, batch, acks, timeout).await
    }

    /// Produces an already built batch (one record batch in Kafka's format).
    pub async fn produce_batch(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Acks,
        timeout: Duration,
    ) -> Result<ProduceAck> {
        let deadline = rill_rt::now() + self.options.retry_budget;
        self.produce_batch_until(deadline, topic, partition, batch, acks, timeout, None).await
    }

    /// Produces a batch, retrying errors that prove it was not appended until `deadline`.
    /// `transactional_id`: the batch is a transactional producer's (transactions v2: the first
    /// batch adds its partition to the transaction).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn produce_batch_until(
        &self,
        deadline: rill_rt::Instant,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Acks,
        timeout: Duration,
        transactional_id: Option<&str>,
    ) -> Result<ProduceAck> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let wait = timeout + self.options.request_slack;
        self.with_leader_until(deadline, topic, partition, Resend::OnlyWithoutEffect, |addr| {
            let req = ProduceRequest {
                acks: acks.wire(),
                timeout_ms,
                topics: vec![TopicProduce {
                    topic: topic.to_string(),
                    partitions: vec![PartitionProduce { partition, batch: batch.clone() }],
                    topic_id: Bytes::new(),
                }],
                transactional_id: transactional_id.unwrap_or_default().to_string(),
                transaction_version: if transactional_id.is_some() { TRANSACTION_VERSION } else { 0 },
            };
            async move {
                let mut client = self.records_stub(&addr)?;
                let resp = match rill_rt::timeout(wait, client.produce(req)).await {
                    Err(_) => {
                        return Err(Error::Transport(format!(
                            "no answer from {addr} within {wait:?}; the outcome is unknown"
                        )))
                    }
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                Ok(answer_for(resp.topics.into_iter().flat_map(|t| t.partitions), partition)?
                    .map(|p| ProduceAck { base_offset: u64::try_from(p.base_offset).ok() }))
            }
        })
        .await
    }

    /// Fetches committed records of `topic`/`partition` from `offset` (`read_committed`),
    /// waiting up to `max_wait` when none are available yet.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: Option<u64>,
        max_wait: Duration,
    ) -> Result<FetchedPartition> {
        self.fetch_with(topic, partition, offset.unwrap_or(0), max_wait, 0).await
    }

    /// [`Client::fetch`] with a per-partition byte budget (0 = the server default, 1 MiB).
    pub async fn fetch_with(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        max_bytes: u32,
    ) -> Result<FetchedPartition> {
        let isolation = IsolationLevel::ReadCommitted;
        self.fetch_pinned(topic, Bytes::new(), partition, offset, max_wait, max_bytes, isolation).await
    }

    /// [`Client::fetch_with`] of the topic whose id is `topic_id` (from [`Client::topic_id`]):
    /// once `topic` was deleted, and perhaps re-created, the answer is `UNKNOWN_TOPIC_ID`. An
    /// empty id fetches by name. Reads at `isolation`.
    #[allow(clippy::too_many_arguments)]
    pub async fn fetch_pinned(
        &self,
        topic: &str,
        topic_id: Bytes,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        max_bytes: u32,
        isolation: IsolationLevel,
    ) -> Result<FetchedPartition> {
        let max_wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        let wait = max_wait + self.options.request_slack;
        self.read_from_leader(topic, partition, |addr| {
            let req = FetchRequest {
                max_wait_ms,
                max_bytes: 0,
                topics: vec![FetchTopic {
                    topic: topic.to_string(),
                    partitions: vec![FetchPartition { partition, fetch_offset: offset as i64, max_bytes }],
                    topic_id: topic_id.clone(),
                }],
                isolation_level: isolation.to_wire() as i32,
            };
            async move {
                let mut client = self.records_stub(&addr)?;
                let resp = match rill_rt::timeout(wait, client.fetch(req)).await {
                    Err(_) => return Err(Error::Transport(format!("no answer from {addr} within {wait:?}"))),
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                match answer_for(resp.topics.into_iter().flat_map(|t| t.partitions), partition)? {
                    Err(f) => Ok(Err(f)),
                    Ok(p) => decode_fetch(&p, offset).map(Ok),
                }
            }
        })
        .await
    }

    /// An offset of `topic`/`partition` (earliest, latest, or by time) as `read_uncommitted`
    /// sees it: latest is the high watermark.
    pub async fn list_offset(&self, topic: &str, partition: u32, spec: OffsetSpec) -> Result<u64> {
        self.list_offset_at(topic, partition, spec, IsolationLevel::ReadUncommitted).await
    }

    /// An offset of `topic`/`partition` as a reader at `isolation` sees it: with
    /// `read_committed`, latest (and a time past the last stable offset) is the last stable
    /// offset.
    pub async fn list_offset_at(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<u64> {
        let (spec, timestamp_ms) = match spec {
            OffsetSpec::Earliest => (pb::OffsetSpec::Earliest, 0),
            OffsetSpec::Latest => (pb::OffsetSpec::Latest, 0),
            OffsetSpec::Timestamp(t) => (pb::OffsetSpec::Timestamp, t),
        };
        let wait = self.options.request_slack;
        self.read_from_leader(topic, partition, |addr| {
            let req = ListOffsetsRequest {
                spec: spec as i32,
                timestamp_ms,
                topics: vec![ListOffsetsTopic { topic: topic.to_string(), partitions: vec![partition] }],
                isolation_level: isolation.to_wire() as i32,
            };
            async move {
                let mut client = self.records_stub(&addr)?;
                let resp = match rill_rt::timeout(wait, client.list_offsets(req)).await {
                    Err(_) => return Err(Error::Transport(format!("no answer from {addr} within {wait:?}"))),
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                Ok(answer_for(resp.topics.into_iter().flat_map(|t| t.partitions), partition)?
                    .map(|p| p.offset.max(0) as u64))
            }
        })
        .await
    }
}

impl Client {
    /// Deletes the records of `topic`/`partition` below `before` ([`DELETE_BELOW_HIGH_WATERMARK`]:
    /// every committed record), on the partition's leader. Returns the log start offset
    /// afterwards (the low watermark). Deleting is idempotent, so it is resent after transport
    /// errors; an offset above the high watermark is `OFFSET_OUT_OF_RANGE`.
    pub async fn delete_records(&self, topic: &str, partition: u32, before: i64) -> Result<u64> {
        if before < DELETE_BELOW_HIGH_WATERMARK {
            return Err(Error::InvalidArgument(format!("offset {before} is negative (-1 means the high watermark)")));
        }
        let topic_id = self.topic_id(topic).await?;
        let wait = self.options.request_slack + DELETE_RECORDS_TIMEOUT;
        self.read_from_leader(topic, partition, |addr| {
            let req = rill_proto::admin::DeleteRecordsRequest {
                topics: vec![rill_proto::admin::DeleteRecordsTopic {
                    topic: topic.to_string(),
                    topic_id: topic_id.clone(),
                    partitions: vec![rill_proto::admin::DeleteRecordsPartition { partition, offset: before }],
                }],
                timeout_ms: DELETE_RECORDS_TIMEOUT.as_millis() as u32,
            };
            async move {
                let mut client = self.admin_stub(&addr)?;
                let resp = match rill_rt::timeout(wait, client.delete_records(req)).await {
                    Err(_) => return Err(Error::Transport(format!("no answer from {addr} within {wait:?}"))),
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                Ok(answer_for(resp.topics.into_iter().flat_map(|t| t.partitions), partition)?
                    .map(|p| p.low_watermark.max(0) as u64))
            }
        })
        .await
    }
}

/// The transaction protocol Rill's client speaks: v2 (partitions added by their first batch,
/// the epoch bumped at every commit and abort).
pub const TRANSACTION_VERSION: u32 = 2;

/// [`Client::delete_records`]' offset meaning "below the high watermark" (Kafka's -1).
pub const DELETE_BELOW_HIGH_WATERMARK: i64 = -1;
/// How long the leader may take to commit a deletion.
const DELETE_RECORDS_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds one record batch in Kafka's format from `records`, compressed with `compression`
/// (for callers that send raw batches; `identity` stamps a producer id, epoch and base
/// sequence as an idempotent producer does).
pub fn build_batch_for(
    records: Vec<Record>,
    compression: Compression,
    identity: Option<(i64, i16, i32)>,
) -> Result<Bytes> {
    build_batch(records, compression, identity, false)
}

/// Builds a batch, stamping records without a time with "now"; `transactional` flags it as a
/// transactional producer's.
pub(crate) fn build_batch(
    records: Vec<Record>,
    compression: Compression,
    identity: Option<(i64, i16, i32)>,
    transactional: bool,
) -> Result<Bytes> {
    let now = rill_rt::wall_clock_ms();
    let mut b = BatchBuilder::new(compression).transactional(transactional);
    if let Some((pid, epoch, seq)) = identity {
        b = b.producer(pid, epoch, seq);
    }
    for r in records {
        b.push(rill_records::Record {
            offset_delta: 0,
            timestamp_ms: if r.timestamp_ms == 0 { now } else { r.timestamp_ms },
            key: r.key,
            value: r.value,
            headers: r.headers.into_iter().map(|(key, value)| Header { key: Bytes::from(key), value }).collect(),
        })
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    }
    b.build().map_err(|e| Error::InvalidArgument(e.to_string()))
}

/// Checks and decodes a fetched partition's batches; keeps records at or after `offset` and
/// skips control batches (transaction markers), moving past them all the same, and past what
/// the server left out (its `next_offset`).
fn decode_fetch(p: &pb::FetchPartitionResult, offset: u64) -> Result<FetchedPartition> {
    let mut out = FetchedPartition {
        records: Vec::new(),
        high_watermark: p.high_watermark.max(0) as u64,
        last_stable_offset: p.last_stable_offset.max(0) as u64,
        log_start_offset: p.log_start_offset.max(0) as u64,
        next_offset: offset.max(p.next_offset.max(0) as u64),
    };
    for b in &p.batches {
        let (end, records) = decode_batch(b)?;
        out.next_offset = out.next_offset.max(end);
        out.records.extend(records.into_iter().filter(|r| r.offset >= offset));
    }
    Ok(out)
}

/// The records of a fetched batch (none for a control batch: markers take offsets but are not
/// delivered), and the offset after the batch.
pub(crate) fn decode_batch(b: &rill_proto::common::RecordBatch) -> Result<(u64, Vec<ReceivedRecord>)> {
    let corrupt = |message: String| Error::Server { code: ErrorCode::CorruptMessage, message };
    let base = u64::try_from(b.base_offset).map_err(|_| corrupt(format!("batch base offset {}", b.base_offset)))?;
    let batch = rill_records::decode(&b.data, MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(|e| corrupt(format!("batch at offset {base}: {e}")))?;
    let end = base + u64::try_from(batch.info.last_offset_delta).unwrap_or(0) + 1;
    if batch.info.is_control() {
        return Ok((end, Vec::new()));
    }
    let records = batch
        .records
        .into_iter()
        .map(|r| ReceivedRecord {
            offset: base + u64::try_from(r.offset_delta).unwrap_or(0),
            timestamp_ms: r.timestamp_ms,
            append_time_ms: b.append_time_ms,
            key: r.key,
            value: r.value,
            headers: r.headers.into_iter().map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value)).collect(),
        })
        .collect();
    Ok((end, records))
}

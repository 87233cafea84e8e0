//! [`Client`]: one handle for admin, produce and fetch.
//!
//! Requests for a partition go to its leader, found through a metadata cache. When a node
//! answers `NOT_LEADER_OR_FOLLOWER`, the client follows the leader hint (or refreshes the
//! metadata) and retries — but only for errors that prove the request had no effect, so a retry
//! can never write a batch twice. A transport failure during a produce has an unknown outcome and
//! is returned to the caller as such.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rill_proto::admin::admin_client::AdminClient;
use rill_proto::admin::{
    CreateTopicRequest, DescribeClusterRequest, DescribeClusterResponse, DescribeTopicRequest, ListTopicsRequest,
    MetadataRequest, TopicConfigEntry, TopicDescription, TopicSummary,
};
use rill_proto::batch;
use rill_proto::common::{Compression, ErrorCode, Header, RecordBatch};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    self as pb, FetchPartition, FetchRequest, FetchTopic, ListOffsetsRequest, ListOffsetsTopic, PartitionProduce,
    ProduceRequest, TopicProduce,
};
use tonic::transport::{Channel, Endpoint};

use crate::error::{self, Error, Result};

/// How long to wait for a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Per-request deadline on top of the server-side timeout (covers a dead connection).
const REQUEST_SLACK: Duration = Duration::from_secs(5);
/// Attempts for requests that are safe to retry.
const MAX_ATTEMPTS: u32 = 12;
/// First retry backoff; doubles up to [`MAX_BACKOFF`], with jitter.
const BASE_BACKOFF: Duration = Duration::from_millis(50);
/// Largest retry backoff.
const MAX_BACKOFF: Duration = Duration::from_millis(1000);
/// Largest gRPC message the client accepts.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Acknowledgement level for produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Committed by a Raft majority and present on every in-sync replica (default).
    All,
    /// Synced in the leader's log.
    Leader,
    /// Not waited for.
    None,
}

impl Acks {
    fn wire(self) -> i32 {
        match self {
            Acks::All => pb::Acks::All as i32,
            Acks::Leader => pb::Acks::Leader as i32,
            Acks::None => pb::Acks::None as i32,
        }
    }
}

/// Which offset [`Client::list_offset`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first stored offset.
    Earliest,
    /// The high watermark: where the next committed record will go.
    Latest,
}

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Optional key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Bytes,
    /// Headers.
    pub headers: Vec<(String, Bytes)>,
    /// Create time in ms since the epoch; 0 means "now".
    pub timestamp_ms: i64,
}

impl Record {
    /// An unkeyed record.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self { value: value.into(), ..Default::default() }
    }

    /// A keyed record.
    pub fn keyed(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self { key: Some(key.into()), value: value.into(), ..Default::default() }
    }
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRecord {
    /// Its offset.
    pub offset: u64,
    /// Create time.
    pub timestamp_ms: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Bytes,
    /// Headers.
    pub headers: Vec<(String, Bytes)>,
}

/// A successful produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the first record (`None` with [`Acks::None`]).
    pub base_offset: Option<u64>,
}

/// What a fetch returned for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchedPartition {
    /// Records at or after the requested offset, in order.
    pub records: Vec<ReceivedRecord>,
    /// The partition's high watermark.
    pub high_watermark: u64,
    /// The offset to fetch next.
    pub next_offset: u64,
}

#[derive(Default)]
struct Metadata {
    nodes: HashMap<u64, String>,
    /// topic → partition leaders (`None` = unknown).
    leaders: HashMap<String, Vec<Option<u64>>>,
}

/// A connection to a Rill cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    bootstrap: Arc<Vec<String>>,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    metadata: Arc<Mutex<Metadata>>,
}

fn backoff(attempt: u32) -> Duration {
    let exp = BASE_BACKOFF.saturating_mul(1 << attempt.min(10)).min(MAX_BACKOFF);
    let jitter: f64 = rill_rt::rng().gen_range(0.5..1.0);
    exp.mul_f64(jitter)
}

impl Client {
    /// Connects to the cluster through any of `bootstrap` (`host:port`), loading metadata.
    pub async fn connect(bootstrap: &[String]) -> Result<Self> {
        let bootstrap: Vec<String> = bootstrap.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if bootstrap.is_empty() {
            return Err(Error::InvalidArgument("no bootstrap address given (host:port)".into()));
        }
        let client =
            Self { bootstrap: Arc::new(bootstrap), channels: Default::default(), metadata: Default::default() };
        client.refresh_metadata(&[]).await?;
        Ok(client)
    }

    fn channel(&self, addr: &str) -> Result<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::InvalidArgument(format!("bad address {addr:?}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let c = endpoint.connect_lazy();
        channels.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    fn admin(&self, addr: &str) -> Result<AdminClient<Channel>> {
        Ok(AdminClient::new(self.channel(addr)?).max_decoding_message_size(MAX_MESSAGE_BYTES))
    }

    fn records(&self, addr: &str) -> Result<RecordsClient<Channel>> {
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
        addrs
    }

    /// Runs an admin call against the first node that answers.
    async fn on_any_node<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(AdminClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = Error::Transport("no node reachable".into());
        for addr in self.admin_addrs() {
            let client = self.admin(&addr)?;
            match rill_rt::timeout(REQUEST_SLACK * 3, call(client)).await {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(s)) => last = Error::Transport(format!("{addr}: {}: {}", s.code(), s.message())),
                Err(_) => last = Error::Transport(format!("{addr}: no answer")),
            }
        }
        Err(last)
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
                cache.leaders.insert(t.name, t.partitions.iter().map(|p| p.leader).collect());
            } else {
                cache.leaders.remove(&t.name);
            }
        }
        Ok(())
    }

    /// The number of partitions of `topic` (from metadata; refreshes once if unknown).
    pub async fn partition_count(&self, topic: &str) -> Result<u32> {
        if let Some(n) = self.cached_partitions(topic) {
            return Ok(n);
        }
        self.refresh_metadata(&[topic.to_string()]).await?;
        self.cached_partitions(topic).ok_or_else(|| Error::Server {
            code: ErrorCode::UnknownTopicOrPartition,
            message: format!("unknown topic {topic:?}"),
        })
    }

    fn cached_partitions(&self, topic: &str) -> Option<u32> {
        self.metadata.lock().unwrap_or_else(|p| p.into_inner()).leaders.get(topic).map(|l| l.len() as u32)
    }

    fn leader_addr(&self, topic: &str, partition: u32) -> Option<String> {
        let md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let leader = (*md.leaders.get(topic)?.get(partition as usize)?)?;
        md.nodes.get(&leader).cloned()
    }

    fn forget_leader(&self, topic: &str, partition: u32) {
        let mut md = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = md.leaders.get_mut(topic).and_then(|l| l.get_mut(partition as usize)) {
            *slot = None;
        }
    }

    fn learn_leader(&self, topic: &str, partition: u32, hint: Option<&rill_proto::common::LeaderHint>) -> bool {
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

    /// Runs a per-partition request against the partition's leader, following leader changes.
    /// `call` returns `Ok(Ok(v))` on success, `Ok(Err((error, hint)))` for a server error.
    async fn with_leader<T, F, Fut>(&self, topic: &str, partition: u32, call: F) -> Result<T>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<
            Output = Result<std::result::Result<T, (Error, Option<rill_proto::common::LeaderHint>)>>,
        >,
    {
        let mut attempt = 0;
        loop {
            let addr = match self.leader_addr(topic, partition) {
                Some(a) => a,
                None => {
                    self.refresh_metadata(&[topic.to_string()]).await?;
                    match self.leader_addr(topic, partition) {
                        Some(a) => a,
                        None if self.cached_partitions(topic).is_none() => {
                            return Err(Error::Server {
                                code: ErrorCode::UnknownTopicOrPartition,
                                message: format!("unknown topic {topic:?}"),
                            })
                        }
                        None if self.cached_partitions(topic).is_some_and(|n| partition >= n) => {
                            return Err(Error::Server {
                                code: ErrorCode::UnknownTopicOrPartition,
                                message: format!("partition {partition} does not exist in topic {topic:?}"),
                            })
                        }
                        None => {
                            attempt += 1;
                            if attempt >= MAX_ATTEMPTS {
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
            let answer = match call(addr).await {
                Ok(a) => a,
                Err(e) => {
                    // The node may be gone: look the leader up again next time.
                    self.forget_leader(topic, partition);
                    return Err(e);
                }
            };
            match answer {
                Ok(v) => return Ok(v),
                Err((e, hint)) if e.is_retriable_without_effect() && attempt + 1 < MAX_ATTEMPTS => {
                    attempt += 1;
                    if !self.learn_leader(topic, partition, hint.as_ref()) {
                        rill_rt::sleep(backoff(attempt)).await;
                        let _ = self.refresh_metadata(&[topic.to_string()]).await;
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    // ------------------------------------------------------------------ admin ---------------

    /// Creates a topic.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        configs: &[(String, String)],
    ) -> Result<TopicDescription> {
        let req = CreateTopicRequest {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs: configs.iter().map(|(k, v)| TopicConfigEntry { key: k.clone(), value: v.clone() }).collect(),
        };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.create_topic(req).await }
            })
            .await?;
        if resp.error_code != ErrorCode::None as i32 {
            return Err(error::server(resp.error_code, resp.error_message));
        }
        let _ = self.refresh_metadata(&[name.to_string()]).await;
        resp.topic.ok_or_else(|| Error::Transport("server sent no topic description".into()))
    }

    /// Describes a topic: per partition leader, replicas, ISR and offsets.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let req = DescribeTopicRequest { name: name.to_string() };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.describe_topic(req).await }
            })
            .await?;
        if resp.error_code != ErrorCode::None as i32 {
            return Err(error::server(resp.error_code, resp.error_message));
        }
        resp.topic.ok_or_else(|| Error::Transport("server sent no topic description".into()))
    }

    /// Lists topics.
    pub async fn list_topics(&self) -> Result<Vec<TopicSummary>> {
        Ok(self.on_any_node(|mut c| async move { c.list_topics(ListTopicsRequest {}).await }).await?.topics)
    }

    /// Describes the cluster's nodes and their liveness.
    pub async fn describe_cluster(&self) -> Result<DescribeClusterResponse> {
        self.on_any_node(|mut c| async move { c.describe_cluster(DescribeClusterRequest {}).await }).await
    }

    // ------------------------------------------------------------------ data ----------------

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
        let now = rill_rt::wall_clock_ms();
        let wire: Vec<rill_proto::common::Record> = records
            .into_iter()
            .map(|r| rill_proto::common::Record {
                timestamp_ms: if r.timestamp_ms == 0 { now } else { r.timestamp_ms },
                key: r.key,
                value: r.value,
                headers: r.headers.into_iter().map(|(key, value)| Header { key, value }).collect(),
            })
            .collect();
        let batch = batch::build(wire, compression).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.produce_batch(topic, partition, batch, acks, timeout).await
    }

    /// Produces an already built batch.
    pub async fn produce_batch(
        &self,
        topic: &str,
        partition: u32,
        batch: RecordBatch,
        acks: Acks,
        timeout: Duration,
    ) -> Result<ProduceAck> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        self.with_leader(topic, partition, |addr| {
            let req = ProduceRequest {
                acks: acks.wire(),
                timeout_ms,
                topics: vec![TopicProduce {
                    topic: topic.to_string(),
                    partitions: vec![PartitionProduce { partition, batch: Some(batch.clone()) }],
                }],
            };
            async move {
                let mut client = self.records(&addr)?;
                let resp = match rill_rt::timeout(timeout + REQUEST_SLACK, client.produce(req)).await {
                    Err(_) => {
                        return Err(Error::Transport(format!(
                            "no answer from {addr} within {:?}; the outcome is unknown",
                            timeout + REQUEST_SLACK
                        )))
                    }
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                let p = resp
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition == partition)
                    .ok_or_else(|| Error::Transport("produce answer lacks the partition".into()))?;
                if p.error_code != ErrorCode::None as i32 {
                    return Ok(Err((error::server(p.error_code, p.error_message), p.leader)));
                }
                Ok(Ok(ProduceAck { base_offset: u64::try_from(p.base_offset).ok() }))
            }
        })
        .await
    }

    /// Fetches committed records of `topic`/`partition` from `offset`, waiting up to `max_wait`
    /// when none are available yet.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: Option<u64>,
        max_wait: Duration,
    ) -> Result<FetchedPartition> {
        let offset = offset.unwrap_or(0);
        let max_wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        self.with_leader(topic, partition, |addr| {
            let req = FetchRequest {
                max_wait_ms,
                max_bytes: 0,
                topics: vec![FetchTopic {
                    topic: topic.to_string(),
                    partitions: vec![FetchPartition { partition, fetch_offset: offset as i64, max_bytes: 0 }],
                }],
            };
            async move {
                let mut client = self.records(&addr)?;
                let resp = match rill_rt::timeout(max_wait + REQUEST_SLACK, client.fetch(req)).await {
                    Err(_) => return Err(Error::Transport(format!("no answer from {addr}"))),
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                let p = resp
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition == partition)
                    .ok_or_else(|| Error::Transport("fetch answer lacks the partition".into()))?;
                if p.error_code != ErrorCode::None as i32 {
                    return Ok(Err((error::server(p.error_code, p.error_message), p.leader)));
                }
                let mut out = FetchedPartition {
                    records: Vec::new(),
                    high_watermark: p.high_watermark.max(0) as u64,
                    next_offset: offset,
                };
                for b in &p.batches {
                    let records = batch::decode(b)
                        .map_err(|e| Error::Server { code: ErrorCode::CorruptMessage, message: e.to_string() })?;
                    for (i, r) in records.into_iter().enumerate() {
                        let o = b.base_offset as u64 + i as u64;
                        if o < offset || o >= out.high_watermark {
                            continue;
                        }
                        out.records.push(ReceivedRecord {
                            offset: o,
                            timestamp_ms: r.timestamp_ms,
                            key: r.key,
                            value: r.value,
                            headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                        });
                        out.next_offset = o + 1;
                    }
                }
                Ok(Ok(out))
            }
        })
        .await
    }

    /// The earliest or latest offset of `topic`/`partition`.
    pub async fn list_offset(&self, topic: &str, partition: u32, spec: OffsetSpec) -> Result<u64> {
        let spec = match spec {
            OffsetSpec::Earliest => pb::OffsetSpec::Earliest,
            OffsetSpec::Latest => pb::OffsetSpec::Latest,
        } as i32;
        self.with_leader(topic, partition, |addr| {
            let req = ListOffsetsRequest {
                spec,
                topics: vec![ListOffsetsTopic { topic: topic.to_string(), partitions: vec![partition] }],
            };
            async move {
                let mut client = self.records(&addr)?;
                let resp = match rill_rt::timeout(REQUEST_SLACK, client.list_offsets(req)).await {
                    Err(_) => return Err(Error::Transport(format!("no answer from {addr}"))),
                    Ok(r) => r.map_err(error::status)?.into_inner(),
                };
                let p = resp
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition == partition)
                    .ok_or_else(|| Error::Transport("answer lacks the partition".into()))?;
                if p.error_code != ErrorCode::None as i32 {
                    return Ok(Err((error::server(p.error_code, p.error_message), p.leader)));
                }
                Ok(Ok(p.offset.max(0) as u64))
            }
        })
        .await
    }
}

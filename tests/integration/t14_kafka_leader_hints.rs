//! KIP-951 on a 3-node cluster, over the Kafka protocol as a client sends it: a `Produce` (from
//! version 10) or a `Fetch` (from version 16, naming the topic by its id) sent to a node that
//! does not lead the partition is refused `NOT_LEADER_OR_FOLLOWER` and names the leader, its
//! epoch and its Kafka address — the ones `Metadata` reports — so a client goes straight to the
//! new leader after a leadership change.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{init_logs, TestCluster};

/// Sends `body` as `api` at `version` to `address` on a new connection and decodes the answer.
async fn call<Q: Encodable, A: Decodable>(address: &str, api: ApiKey, version: i16, body: &Q) -> Result<A> {
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("leader-hints-test")))
        .encode(&mut frame, api.request_header_version(version))?;
    body.encode(&mut frame, version)?;
    let mut stream = TcpStream::connect(address).await.with_context(|| format!("connecting to {address}"))?;
    let mut sized = BytesMut::with_capacity(frame.len() + 4);
    sized.put_u32(u32::try_from(frame.len())?);
    sized.extend_from_slice(&frame);
    stream.write_all(&sized).await?;
    let length = stream.read_u32().await.context("the answer's length")?;
    let mut answer = vec![0; usize::try_from(length)?];
    stream.read_exact(&mut answer).await.context("the answer")?;
    let mut answer = Bytes::from(answer);
    let header = ResponseHeader::decode(&mut answer, api.response_header_version(version))?;
    if header.correlation_id != 7 {
        bail!("answer to correlation id {}", header.correlation_id);
    }
    let decoded = A::decode(&mut answer, version)?;
    if answer.has_remaining() {
        bail!("{api:?} v{version}: {} bytes after the answer", answer.remaining());
    }
    Ok(decoded)
}

/// What `address` says of `topic`/0 and the cluster.
#[derive(PartialEq)]
struct Leadership {
    /// The partition's leader and its epoch.
    leader: (i32, i32),
    /// Each broker's (id, host, port).
    brokers: Vec<(i32, String, i32)>,
    /// The topic's id.
    topic_id: uuid::Uuid,
}

/// The leader of `topic`/0, its epoch, each broker's (id, host, port) and the topic's id, as
/// `address` says.
async fn leadership(address: &str, topic: &str) -> Result<Leadership> {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]));
    let answer: MetadataResponse = call(address, ApiKey::Metadata, 12, &request).await?;
    let topic = answer.topics.first().context("no topic")?;
    let partition = topic.partitions.first().context("no partition 0")?;
    let brokers = answer.brokers.iter().map(|b| (b.node_id.0, b.host.to_string(), b.port)).collect();
    Ok(Leadership { leader: (partition.leader_id.0, partition.leader_epoch), brokers, topic_id: topic.topic_id })
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// A one-record batch.
fn batch() -> Bytes {
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    let record = rill_records::Record { value: Some(Bytes::from_static(b"hint")), ..Default::default() };
    builder.push(record).expect("one record fits");
    builder.build().expect("a one-record batch encodes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_or_fetch_to_a_follower_names_the_leader_its_epoch_and_its_address() -> Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "khints", 1, 3, &[]).await?;
    let kafka = cluster.local().kafka_bootstrap();
    let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(name("khints"))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch()))]),
    ]);
    // Leadership may still move (to the preferred replica) after creation: ask until the leader
    // is the same before and after the refused produce.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let before = leadership(&kafka[0], "khints").await?;
        let (leader, epoch) = before.leader;
        let brokers = &before.brokers;
        let Some((_, host, port)) = brokers.iter().find(|(id, _, _)| *id != leader && leader >= 0) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let follower = format!("{host}:{port}");
        let hinted: ProduceResponse = call(&follower, ApiKey::Produce, 11, &produce).await?;
        let plain: ProduceResponse = call(&follower, ApiKey::Produce, 9, &produce).await?;
        let fetch = FetchRequest::default().with_max_bytes(1 << 20).with_session_epoch(-1).with_topics(vec![
            FetchTopic::default().with_topic_id(before.topic_id).with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(epoch)
                .with_partition_max_bytes(1 << 20)]),
        ]);
        let fetch_hinted: FetchResponse = call(&follower, ApiKey::Fetch, 16, &fetch).await?;
        let fetch_plain: FetchResponse = call(&follower, ApiKey::Fetch, 15, &fetch).await?;
        if leadership(&kafka[0], "khints").await? != before {
            if tokio::time::Instant::now() > deadline {
                bail!("the leader kept moving");
            }
            continue;
        }
        let answer = &hinted.responses[0].partition_responses[0];
        assert_eq!(answer.error_code, 6, "NOT_LEADER_OR_FOLLOWER from a follower");
        assert_eq!((answer.current_leader.leader_id.0, answer.current_leader.leader_epoch), (leader, epoch));
        let endpoints: Vec<(i32, String, i32)> =
            hinted.node_endpoints.iter().map(|e| (e.node_id.0, e.host.to_string(), e.port)).collect();
        let leader_broker = brokers.iter().find(|(id, _, _)| *id == leader).cloned().context("the leader's broker")?;
        assert_eq!(endpoints, vec![leader_broker.clone()], "the leader's Kafka address, as Metadata gives it");
        assert_eq!(plain.responses[0].partition_responses[0].error_code, 6, "v9: refused the same way, without hints");

        let answer = &fetch_hinted.responses[0];
        assert_eq!(answer.topic_id, before.topic_id, "the topic named back by its id");
        let answer = &answer.partitions[0];
        assert_eq!(answer.error_code, 6, "Fetch v16: NOT_LEADER_OR_FOLLOWER from a follower");
        assert_eq!((answer.current_leader.leader_id.0, answer.current_leader.leader_epoch), (leader, epoch));
        let endpoints: Vec<(i32, String, i32)> =
            fetch_hinted.node_endpoints.iter().map(|e| (e.node_id.0, e.host.to_string(), e.port)).collect();
        assert_eq!(endpoints, vec![leader_broker], "Fetch v16: the leader's Kafka address");
        let answer = &fetch_plain.responses[0].partitions[0];
        assert_eq!((answer.error_code, answer.current_leader.leader_id.0), (6, -1), "Fetch v15: no hint");
        return Ok(());
    }
}

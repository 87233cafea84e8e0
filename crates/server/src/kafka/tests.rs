//! The Kafka listener on a running one-node cluster (in memory), spoken to over TCP as a Kafka
//! client does: every advertised (API, version) round-trips, answers come back in request
//! order, and hostile frames close their connection with bounded memory while the node serves
//! on. (Real builds: the simulation has no Kafka listener.)
#![cfg(not(madsim))]

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse,
    InitProducerIdRequest, InitProducerIdResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListTransactionsRequest, ListTransactionsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse, ProducerId,
    RequestHeader, ResponseHeader, SyncGroupRequest, SyncGroupResponse, TopicName, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::versions::{self, SUPPORTED};
use crate::api::ClientLimits;
use crate::config::KafkaListener;
use crate::service::tests::{must_create, must_reach, one_node_with};

/// How long an answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// The listener's frame limit in these tests.
const MAX_REQUEST_BYTES: u32 = 1 << 20;

/// A one-node cluster with a Kafka listener on a free port; its address.
async fn node_with_kafka() -> (std::sync::Arc<crate::Node>, crate::service::Service, std::net::SocketAddr) {
    node_with_kafka_auto_creating(false).await
}

/// [`node_with_kafka`], with `[kafka] auto-create-topics` set to `auto_create_topics` (and,
/// when set, `default-partitions` 2).
async fn node_with_kafka_auto_creating(
    auto_create_topics: bool,
) -> (std::sync::Arc<crate::Node>, crate::service::Service, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (node, _coordinators, service) = one_node_with(|config| {
        config.kafka = Some(KafkaListener {
            listen: addr,
            advertise: addr.to_string(),
            max_request_bytes: MAX_REQUEST_BYTES,
            auto_create_topics,
            // Auto-created topics get two partitions, to tell the setting from the default.
            default_partitions: if auto_create_topics { 2 } else { 1 },
        });
    })
    .await;
    let limits = ClientLimits::new(&node.config().client_limits);
    tokio::spawn(super::connection::serve_on(
        listener,
        service.clone(),
        limits,
        MAX_REQUEST_BYTES,
        std::future::pending(),
    ));
    (node, service, addr)
}

/// A request frame: `api` at `version` with correlation id `correlation_id`, an unknown tagged
/// field in its header where the header is flexible (the listener must skip it).
fn request<M: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &M) -> BytesMut {
    let header_version = api.request_header_version(version);
    let mut header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("rill-tests")));
    if header_version >= 2 {
        header.unknown_tagged_fields.insert(7_000, Bytes::from_static(b"future"));
    }
    let mut payload = BytesMut::new();
    header.encode(&mut payload, header_version).unwrap();
    body.encode(&mut payload, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(payload.len() as i32);
    frame.extend_from_slice(&payload);
    frame
}

/// Reads one answer frame; `None` when the listener closed the connection instead.
async fn read_answer(stream: &mut TcpStream) -> Option<Bytes> {
    let read = async {
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await.ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
        stream.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    };
    tokio::time::timeout(ANSWER_WITHIN, read).await.expect("an answer or a close in time")
}

/// Decodes an answer to `api` at `version`: its correlation id and body.
fn decode<M: Decodable>(api: ApiKey, version: i16, mut answer: Bytes) -> (i32, M) {
    let header = ResponseHeader::decode(&mut answer, api.response_header_version(version)).unwrap();
    let body = M::decode(&mut answer, version).unwrap();
    assert!(!answer.has_remaining(), "{api:?} v{version}: {} bytes left over", answer.remaining());
    (header.correlation_id, body)
}

/// Sends `api` at `version` and decodes the answer.
async fn call<Q: Encodable, A: Decodable>(stream: &mut TcpStream, api: ApiKey, version: i16, body: &Q) -> A {
    stream.write_all(&request(api, version, 42, body)).await.unwrap();
    let answer = read_answer(stream).await.unwrap_or_else(|| panic!("{api:?} v{version} closed the connection"));
    let (correlation_id, decoded) = decode(api, version, answer);
    assert_eq!(correlation_id, 42);
    decoded
}

/// An `ApiVersions` request naming its software as Kafka requires from v3.
fn api_versions_request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("rill-tests"))
        .with_client_software_version(StrBytes::from_static_str("1.0"))
}

/// True once the listener has closed `stream` (after what was sent to it).
async fn closed(stream: &mut TcpStream) -> bool {
    read_answer(stream).await.is_none()
}

#[tokio::test]
async fn every_advertised_version_round_trips() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 2).await;
    must_reach("the cluster's id", || async { !node.meta().cluster_id.is_empty() }).await;
    let cluster_id = node.meta().cluster_id.clone();
    let mut stream = TcpStream::connect(addr).await.unwrap();

    let api_versions = versions::supported(ApiKey::ApiVersions).unwrap();
    for version in api_versions.min..=api_versions.max {
        let answer: ApiVersionsResponse =
            call(&mut stream, ApiKey::ApiVersions, version, &api_versions_request()).await;
        assert_eq!(answer.error_code, 0, "v{version}");
        let advertised: Vec<(i16, i16, i16)> =
            answer.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
        let expected: Vec<(i16, i16, i16)> = SUPPORTED.iter().map(|s| (s.api as i16, s.min, s.max)).collect();
        assert_eq!(advertised, expected, "v{version}");
        // Features from v3; a supported range starting at 0 only from v4 (KAFKA-17492).
        let supported: Vec<(String, i16, i16)> =
            answer.supported_features.iter().map(|f| (f.name.to_string(), f.min_version, f.max_version)).collect();
        let finalized: Vec<(String, i16, i16)> = answer
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
            .collect();
        let features = |supported: bool| {
            let level = |name: &str, min: i16, max: i16| (name.to_string(), if supported { min } else { max }, max);
            vec![level("group.version", 0, 1), level("transaction.version", 0, 2)]
        };
        match version {
            0..=2 => assert!(supported.is_empty() && finalized.is_empty(), "v{version}"),
            3 => assert_eq!((supported, finalized), (vec![], features(false)), "v{version}"),
            _ => assert_eq!((supported, finalized), (features(true), features(false)), "v{version}"),
        }
        if version >= 3 {
            assert!(answer.finalized_features_epoch >= 0, "v{version}: a known epoch");
        }
    }

    let metadata = versions::supported(ApiKey::Metadata).unwrap();
    for version in metadata.min..=metadata.max {
        let topics =
            vec![MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("orders"))))];
        let answer: MetadataResponse =
            call(&mut stream, ApiKey::Metadata, version, &MetadataRequest::default().with_topics(Some(topics))).await;
        let brokers: Vec<(i32, String, i32)> =
            answer.brokers.iter().map(|b| (b.node_id.0, b.host.to_string(), b.port)).collect();
        assert_eq!(brokers, vec![(1, "127.0.0.1".to_string(), i32::from(addr.port()))], "v{version}");
        if version >= 2 {
            assert_eq!(answer.cluster_id.as_deref(), Some(cluster_id.as_str()), "v{version}");
        }
        if version >= 1 {
            assert_eq!(answer.controller_id.0, 1, "v{version}");
        }
        let [topic] = &answer.topics[..] else { panic!("v{version}: {:?}", answer.topics) };
        assert_eq!((topic.error_code, topic.name.as_ref().map(|n| n.0.to_string())), (0, Some("orders".into())));
        let meta = node.meta();
        let stored = &meta.topics["orders"];
        if version >= 10 {
            assert_eq!(topic.topic_id.as_bytes(), &stored.topic_id, "v{version}");
        }
        assert_eq!(topic.partitions.len(), 2);
        for p in &topic.partitions {
            assert_eq!((p.error_code, p.leader_id.0), (0, 1), "v{version} {p:?}");
            let isr: Vec<i32> = p.isr_nodes.iter().map(|n| n.0).collect();
            assert_eq!(isr, vec![1], "v{version}");
            if version >= 7 {
                let group = stored.partitions[p.partition_index as usize].group;
                let term = node.leadership_of(group).map(|(_, term)| term).unwrap();
                assert_eq!(i64::from(p.leader_epoch), term as i64, "v{version}: the leader epoch is the Raft term");
            }
        }
    }
}

#[tokio::test]
async fn metadata_without_names_lists_every_topic_and_an_empty_list_none() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "a", 1).await;
    must_create(&node, &service, "b", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let names = |answer: &MetadataResponse| {
        let mut names: Vec<String> =
            answer.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())).collect();
        names.sort();
        names
    };
    // v0: an empty list means every topic; v1+: null does, and an empty list means none.
    let v0: MetadataResponse =
        call(&mut stream, ApiKey::Metadata, 0, &MetadataRequest::default().with_topics(Some(vec![]))).await;
    assert_eq!(names(&v0), vec!["a", "b"]);
    let all: MetadataResponse =
        call(&mut stream, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None)).await;
    assert_eq!(names(&all), vec!["a", "b"]);
    let none: MetadataResponse =
        call(&mut stream, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(Some(vec![]))).await;
    assert!(none.topics.is_empty());
    let unknown = vec![MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("nope"))))];
    let answer: MetadataResponse =
        call(&mut stream, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(Some(unknown))).await;
    assert_eq!(answer.topics[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (_node, _service, addr) = node_with_kafka().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut burst = BytesMut::new();
    for correlation_id in 1..=20 {
        if correlation_id % 2 == 0 {
            burst.extend_from_slice(&request(ApiKey::ApiVersions, 3, correlation_id, &api_versions_request()));
        } else {
            burst.extend_from_slice(&request(ApiKey::Metadata, 12, correlation_id, &MetadataRequest::default()));
        }
    }
    stream.write_all(&burst).await.unwrap();
    for correlation_id in 1..=20 {
        let answer = read_answer(&mut stream).await.unwrap();
        let seen = if correlation_id % 2 == 0 {
            decode::<ApiVersionsResponse>(ApiKey::ApiVersions, 3, answer).0
        } else {
            decode::<MetadataResponse>(ApiKey::Metadata, 12, answer).0
        };
        assert_eq!(seen, correlation_id);
    }
}

/// Produce requests on one connection are served concurrently, and still appended in the order
/// they came: a large compressed batch, checked on a blocking thread, is not overtaken by the
/// small uncompressed one sent after it. A request of another API waits for those before it.
#[tokio::test]
async fn pipelined_produce_requests_are_appended_in_the_order_they_came() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let large = |i: usize| {
        let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::Gzip);
        for r in 0..500 {
            let value = format!("{i}:{r}:{}", "x".repeat(200));
            builder.push(rill_records::Record { value: Some(Bytes::from(value)), ..Default::default() }).unwrap();
        }
        builder.build().unwrap()
    };
    // (correlation id, records): a large batch, then a one-record one, four times over; a
    // Metadata request in the middle.
    let mut sent: Vec<(i32, i64)> = Vec::new();
    let mut burst = BytesMut::new();
    for i in 0..8 {
        let (records, count) = if i % 2 == 0 { (large(i), 500) } else { (batch(&[&format!("{i}")]), 1) };
        let id = i32::try_from(i).unwrap() + 1;
        burst.extend_from_slice(&request(ApiKey::Produce, 9, id, &produce_request("orders", -1, records)));
        sent.push((id, count));
        if i == 3 {
            burst.extend_from_slice(&request(ApiKey::Metadata, 12, 100, &MetadataRequest::default()));
        }
    }
    stream.write_all(&burst).await.unwrap();
    let mut next_offset = 0;
    for (i, (id, count)) in sent.into_iter().enumerate() {
        let (correlation_id, answer): (i32, ProduceResponse) =
            decode(ApiKey::Produce, 9, read_answer(&mut stream).await.unwrap());
        let p = &answer.responses[0].partition_responses[0];
        assert_eq!((correlation_id, p.error_code), (id, 0));
        assert_eq!(p.base_offset, next_offset, "request {id} appended after every request before it");
        next_offset += count;
        if i == 3 {
            let (correlation_id, _): (i32, MetadataResponse) =
                decode(ApiKey::Metadata, 12, read_answer(&mut stream).await.unwrap());
            assert_eq!(correlation_id, 100, "answered after the produce requests before it");
        }
    }
}

/// A frame half read when an earlier produce request's answer is ready keeps being read: the
/// answer is written meanwhile, and the frame's rest, arriving after it, completes the frame.
#[tokio::test]
async fn a_frame_read_halfway_survives_an_answer_written_meanwhile() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let first = request(ApiKey::Produce, 9, 1, &produce_request("orders", -1, batch(&["first"])));
    let values: Vec<String> = (0..200).map(|i| format!("second-{i}-{}", "y".repeat(100))).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let second = request(ApiKey::Produce, 9, 2, &produce_request("orders", -1, batch(&values)));
    let (head, rest) = second.split_at(second.len() / 2);
    stream.write_all(&first).await.unwrap();
    stream.write_all(head).await.unwrap();
    // The first answer comes while the second frame is half read.
    let (id, answer): (i32, ProduceResponse) = decode(ApiKey::Produce, 9, read_answer(&mut stream).await.unwrap());
    assert_eq!((id, answer.responses[0].partition_responses[0].error_code), (1, 0));
    stream.write_all(rest).await.unwrap();
    let (id, answer): (i32, ProduceResponse) = decode(ApiKey::Produce, 9, read_answer(&mut stream).await.unwrap());
    let p = &answer.responses[0].partition_responses[0];
    assert_eq!((id, p.error_code, p.base_offset), (2, 0, 1), "the second frame, read whole");
}

#[tokio::test]
async fn an_api_versions_request_newer_than_the_listener_is_answered_at_v0() {
    let (_node, _service, addr) = node_with_kafka().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // KIP-511: a future version's body cannot be decoded, so its header is read and the answer
    // comes at v0 with UNSUPPORTED_VERSION and the supported ranges.
    let mut frame = request(ApiKey::ApiVersions, 3, 9, &api_versions_request());
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    stream.write_all(&frame).await.unwrap();
    let (correlation_id, answer): (i32, ApiVersionsResponse) =
        decode(ApiKey::ApiVersions, 0, read_answer(&mut stream).await.unwrap());
    assert_eq!((correlation_id, answer.error_code), (9, versions::UNSUPPORTED_VERSION));
    assert!(answer.api_keys.iter().any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version == 4));
    // A client software name Kafka would refuse.
    let bad = api_versions_request().with_client_software_name(StrBytes::from_static_str("-bad-"));
    let answer: ApiVersionsResponse = call(&mut stream, ApiKey::ApiVersions, 3, &bad).await;
    assert_eq!(answer.error_code, versions::INVALID_REQUEST);
}

/// A raw frame: `payload` after its length.
fn raw(payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

#[tokio::test]
async fn hostile_frames_close_their_connection_and_the_node_serves_on() {
    let (_node, _service, addr) = node_with_kafka().await;
    // Metadata v1 declaring 2^31 - 1 topics in 16 bytes; v9 (compact) declaring 2^32 - 2.
    let mut huge_array = vec![0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff];
    huge_array.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    let mut huge_compact = vec![0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0];
    huge_compact.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let mut unknown_api = vec![0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    unknown_api.extend_from_slice(&[0; 8]);
    let unsupported_version = request(ApiKey::Metadata, 13, 1, &MetadataRequest::default());
    let mut unsupported_version = unsupported_version.to_vec();
    unsupported_version[6..8].copy_from_slice(&14i16.to_be_bytes());
    let not_advertised =
        request(ApiKey::ElectLeaders, 0, 1, &kafka_protocol::messages::ElectLeadersRequest::default()).to_vec();
    let mut produce_v2 = request(ApiKey::Produce, 3, 1, &ProduceRequest::default()).to_vec();
    produce_v2[6..8].copy_from_slice(&2i16.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a 2^31-element array", raw(&huge_array)),
        ("a 2^32-element compact array", raw(&huge_compact)),
        ("a frame over the limit", (MAX_REQUEST_BYTES as i32 + 1).to_be_bytes().to_vec()),
        ("a negative frame length", (-5i32).to_be_bytes().to_vec()),
        ("a frame shorter than a header", raw(&[0, 18, 0])),
        ("an unknown API key", raw(&unknown_api)),
        ("a version not advertised", unsupported_version),
        ("an API not advertised", not_advertised),
        ("Produce v2, advertised but refused", produce_v2),
        ("a truncated body", raw(&[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 2, 0, 5, b'a'])),
    ];
    for (what, frame) in cases {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&frame).await.unwrap();
        assert!(closed(&mut stream).await, "{what}: the connection closes");
        // The node still answers a well-formed request on a new connection.
        let mut fresh = TcpStream::connect(addr).await.unwrap();
        let answer: ApiVersionsResponse = call(&mut fresh, ApiKey::ApiVersions, 3, &api_versions_request()).await;
        assert_eq!(answer.error_code, 0, "after {what}");
    }
}

#[test]
fn the_patched_decoders_refuse_counts_the_frame_cannot_hold() {
    // Produce v3 declaring 2^31 - 1 topics in 22 bytes: the unpatched crate reserves ~160 GiB
    // for them and the process aborts.
    let mut body = Bytes::from_static(&[0xff, 0xff, 0, 1, 0, 0, 0x75, 0x30, 0x7f, 0xff, 0xff, 0xff]);
    assert!(ProduceRequest::decode(&mut body, 3).is_err());
    // Metadata v9's compact array declaring 2^32 - 2 topics.
    let mut body = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
    assert!(MetadataRequest::decode(&mut body, 9).is_err());
}

/// One record batch holding `values`, as a producer without an id sends it.
fn batch(values: &[&str]) -> Bytes {
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    for v in values {
        let record = rill_records::Record { value: Some(Bytes::copy_from_slice(v.as_bytes())), ..Default::default() };
        builder.push(record).unwrap();
    }
    builder.build().unwrap()
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A produce of `records` to partition 0 of `topic`.
fn produce_request(topic: &str, acks: i16, records: Bytes) -> ProduceRequest {
    let partition = PartitionProduceData::default().with_index(0).with_records(Some(records));
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![partition])])
}

/// A fetch of partition 0 of `topic` from `offset`.
fn fetch_request(topic: &str, offset: i64, isolation_level: i8) -> FetchRequest {
    let partition =
        FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20);
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![partition])])
}

/// [`fetch_request`] as a client sends it at `version`: from v13 the topic is named by its id.
fn fetch_request_at(version: i16, node: &crate::Node, topic: &str, offset: i64) -> FetchRequest {
    let mut request = fetch_request(topic, offset, 0);
    if version >= 13 {
        request.topics[0].topic = Default::default();
        request.topics[0].topic_id = topic_id(node, topic);
    }
    request
}

/// `topic`'s id as Kafka's clients carry it.
fn topic_id(node: &crate::Node, topic: &str) -> uuid::Uuid {
    uuid::Uuid::from_bytes(node.meta().topics[topic].topic_id)
}

/// The batches of a fetched record set: each one's (base offset, leader epoch, record count),
/// every CRC checked.
fn batches_of(mut set: Bytes) -> Vec<(i64, i32, i32)> {
    let mut out = Vec::new();
    while set.has_remaining() {
        // batchLength (after baseOffset) counts what follows it.
        let length = i32::from_be_bytes(set[8..12].try_into().unwrap()) as usize + 12;
        let one = set.split_to(length);
        let info = rill_records::BatchInfo::parse(&one).unwrap();
        rill_records::validate(&one, 1 << 20).expect("the batch's CRC holds after its offset and epoch were written");
        out.push((info.base_offset, info.partition_leader_epoch, info.record_count));
    }
    out
}

#[tokio::test]
async fn produced_records_are_fetched_with_their_offsets_and_leader_epochs_at_every_version() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let group = node.meta().topics["orders"].partitions[0].group;
    let term = node.leadership_of(group).map(|(_, term)| term).unwrap() as i32;
    let mut stream = TcpStream::connect(addr).await.unwrap();

    // Every Produce version answered: each batch lands after the last.
    let mut expected = Vec::new();
    let mut next = 0i64;
    for version in versions::PRODUCE_MIN_ANSWERED..=versions::supported(ApiKey::Produce).unwrap().max {
        let answer: ProduceResponse =
            call(&mut stream, ApiKey::Produce, version, &produce_request("orders", -1, batch(&["a", "b"]))).await;
        let p = &answer.responses[0].partition_responses[0];
        assert_eq!((p.index, p.error_code, p.base_offset), (0, 0, next), "v{version}: {p:?}");
        assert_eq!(p.log_append_time_ms, -1, "v{version}: CreateTime");
        if version >= 5 {
            assert_eq!(p.log_start_offset, 0, "v{version}");
        }
        expected.push((next, term, 2));
        next += 2;
    }

    // acks=0 gets no answer: the next answer on the connection is the next request's.
    let unanswered = request(ApiKey::Produce, 9, 500, &produce_request("orders", 0, batch(&["quiet"])));
    stream.write_all(&unanswered).await.unwrap();
    let after = request(ApiKey::ApiVersions, 3, 501, &api_versions_request());
    stream.write_all(&after).await.unwrap();
    let (correlation_id, _): (i32, ApiVersionsResponse) =
        decode(ApiKey::ApiVersions, 3, read_answer(&mut stream).await.unwrap());
    assert_eq!(correlation_id, 501, "no bytes for acks=0");
    expected.push((next, term, 1));
    next += 1;

    // Every Fetch version reads them back, offsets and epochs written in.
    let fetch = versions::supported(ApiKey::Fetch).unwrap();
    for version in fetch.min..=fetch.max {
        let mut seen = Vec::new();
        let mut offset = 0;
        while offset < next {
            let answer: FetchResponse =
                call(&mut stream, ApiKey::Fetch, version, &fetch_request_at(version, &node, "orders", offset)).await;
            let topic = &answer.responses[0];
            if version >= 13 {
                assert_eq!((topic.topic_id, topic.topic.0.as_str()), (topic_id(&node, "orders"), ""), "v{version}");
            } else {
                assert_eq!(topic.topic.0.as_str(), "orders", "v{version}");
            }
            let p = &topic.partitions[0];
            assert_eq!((p.error_code, p.high_watermark), (0, next), "v{version}");
            if version >= 5 {
                assert_eq!(p.log_start_offset, 0, "v{version}");
            }
            let batches = batches_of(p.records.clone().unwrap());
            assert!(!batches.is_empty(), "v{version}: at {offset}");
            offset = batches.last().map(|(base, _, count)| base + i64::from(*count)).unwrap();
            seen.extend(batches);
        }
        assert_eq!(seen, expected, "v{version}");
    }

    // A leader epoch older than the leader's is fenced; a newer one unknown (v9+ carry it).
    for (epoch, code) in [(term - 1, 74), (term + 1, 75), (term, 0)] {
        let mut request = fetch_request("orders", 0, 1);
        request.topics[0].partitions[0].current_leader_epoch = epoch;
        let answer: FetchResponse = call(&mut stream, ApiKey::Fetch, 12, &request).await;
        assert_eq!(answer.responses[0].partitions[0].error_code, code, "epoch {epoch} against term {term}");
    }
    // From v16 a stale epoch gets a hint: the leader (this node) and its epoch, with its address.
    let mut request = fetch_request_at(16, &node, "orders", 0);
    request.topics[0].partitions[0].current_leader_epoch = term - 1;
    let answer: FetchResponse = call(&mut stream, ApiKey::Fetch, 16, &request).await;
    let p = &answer.responses[0].partitions[0];
    assert_eq!((p.error_code, p.current_leader.leader_id.0, p.current_leader.leader_epoch), (74, 1, term));
    let endpoint = &answer.node_endpoints[..];
    assert_eq!(endpoint.len(), 1, "{endpoint:?}");
    assert_eq!((endpoint[0].node_id.0, endpoint[0].port), (1, i32::from(addr.port())));
    // An id no topic has: UNKNOWN_TOPIC_ID, named back by that id.
    let mut request = fetch_request_at(13, &node, "orders", 0);
    request.topics[0].topic_id = uuid::Uuid::from_u128(7);
    let answer: FetchResponse = call(&mut stream, ApiKey::Fetch, 13, &request).await;
    assert_eq!(answer.responses[0].topic_id, uuid::Uuid::from_u128(7));
    assert_eq!(answer.responses[0].partitions[0].error_code, 100);
    // A session this listener never made.
    let answer: FetchResponse =
        call(&mut stream, ApiKey::Fetch, 12, &fetch_request("orders", 0, 0).with_session_id(77).with_session_epoch(3))
            .await;
    assert_eq!((answer.error_code, answer.responses[0].partitions[0].error_code), (70, 70));
    // Past the end: OFFSET_OUT_OF_RANGE.
    let answer: FetchResponse = call(&mut stream, ApiKey::Fetch, 12, &fetch_request("orders", next + 5, 0)).await;
    assert_eq!(answer.responses[0].partitions[0].error_code, 1);

    // Every ListOffsets version: the start and the end; a timestamp search is refused for now.
    let list = versions::supported(ApiKey::ListOffsets).unwrap();
    for version in list.min..=list.max {
        let mut got = Vec::new();
        // One request each: a partition named twice in one request is refused.
        for timestamp in [-2i64, -1, 1_000] {
            let partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp);
            let topics = vec![ListOffsetsTopic::default().with_name(name("orders")).with_partitions(vec![partition])];
            let answer: ListOffsetsResponse =
                call(&mut stream, ApiKey::ListOffsets, version, &ListOffsetsRequest::default().with_topics(topics))
                    .await;
            got.push((answer.topics[0].partitions[0].error_code, answer.topics[0].partitions[0].offset));
        }
        // The records' timestamps are 0: none at or after 1000 (searches: offsets_are_found_by_record_timestamp…).
        assert_eq!(got, vec![(0, 0), (0, next), (0, -1)], "v{version}");
    }
}

#[tokio::test]
async fn an_idempotent_producer_gets_an_id_and_its_retried_batch_is_written_once() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let range = versions::supported(ApiKey::InitProducerId).unwrap();
    let mut ids = Vec::new();
    for version in range.min..=range.max {
        let answer: InitProducerIdResponse = call(
            &mut stream,
            ApiKey::InitProducerId,
            version,
            &InitProducerIdRequest::default()
                .with_transaction_timeout_ms(-1)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await;
        assert_eq!((answer.error_code, answer.producer_epoch), (0, 0), "v{version}");
        assert!(answer.producer_id.0 >= 0 && !ids.contains(&answer.producer_id.0), "v{version}: a fresh id");
        ids.push(answer.producer_id.0);
    }
    let id = ids[0];
    let stamped = |values: &[&str], sequence: i32| {
        let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None).producer(id, 0, sequence);
        for v in values {
            builder
                .push(rill_records::Record { value: Some(Bytes::copy_from_slice(v.as_bytes())), ..Default::default() })
                .unwrap();
        }
        builder.build().unwrap()
    };
    let first: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("orders", -1, stamped(&["x", "y"], 0))).await;
    let retried: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("orders", -1, stamped(&["x", "y"], 0))).await;
    let (first, retried) = (&first.responses[0].partition_responses[0], &retried.responses[0].partition_responses[0]);
    assert_eq!((first.error_code, first.base_offset), (0, 0));
    assert_eq!(
        (retried.error_code, retried.base_offset),
        (0, 0),
        "the retry is answered with the first write's offset"
    );
    let gap: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("orders", -1, stamped(&["z"], 5))).await;
    assert_eq!(gap.responses[0].partition_responses[0].error_code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    let answer: FetchResponse = call(&mut stream, ApiKey::Fetch, 12, &fetch_request("orders", 0, 0)).await;
    assert_eq!(answer.responses[0].partitions[0].high_watermark, 2, "written once");
    // An id the cluster never issued is refused.
    let forged = rill_records::BatchBuilder::new(rill_records::Compression::None).producer(1 << 40, 0, 0);
    let mut forged = forged;
    forged.push(rill_records::Record { value: Some(Bytes::from_static(b"f")), ..Default::default() }).unwrap();
    let answer: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("orders", -1, forged.build().unwrap())).await;
    assert_ne!(answer.responses[0].partition_responses[0].error_code, 0);
}

#[test]
fn a_record_set_carries_the_stored_offset_and_term_with_its_crc_intact() {
    let stored = |base_offset, leader_epoch, values: &[&str]| rill_broker::StoredBatch {
        base_offset,
        data: batch(values),
        append_time_ms: 0,
        leader_epoch,
    };
    let set = super::records::record_set(&[stored(7, 3, &["a", "b"]), stored(9, 4, &["c"])]);
    assert_eq!(batches_of(set), vec![(7, 3, 2), (9, 4, 1)]);
}

fn group(id: &str) -> GroupId {
    GroupId(StrBytes::from_string(id.to_string()))
}

/// A JoinGroup of `group_id` by `member_id` ("" for a new member) with one protocol.
fn join_request(group_id: &str, member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group(group_id))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(Bytes::from_static(b"subscription"))])
}

/// An OffsetCommit of `offset` for partition 0 of `topic`.
fn commit_request(group_id: &str, member_id: &str, generation: i32, topic: &str, offset: i64) -> OffsetCommitRequest {
    let partition = OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(offset)
        .with_committed_metadata(Some(StrBytes::from_static_str("note")));
    OffsetCommitRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name(topic)).with_partitions(vec![partition])])
}

#[tokio::test]
async fn a_classic_member_joins_syncs_heartbeats_commits_and_leaves() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();

    // The coordinator, at this listener's address, at every version (v4: many keys).
    let range = versions::supported(ApiKey::FindCoordinator).unwrap();
    for version in range.min..=range.max {
        let request = if version >= 4 {
            let keys = vec![StrBytes::from_static_str("billing"), StrBytes::from_static_str("other")];
            FindCoordinatorRequest::default().with_coordinator_keys(keys)
        } else {
            FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("billing"))
        };
        let answer = must_reach_answer(&mut stream, version, request).await;
        if version >= 4 {
            assert_eq!(answer.coordinators.len(), 2);
            for c in &answer.coordinators {
                assert_eq!((c.error_code, c.node_id.0, c.port), (0, 1, i32::from(addr.port())), "v{version}");
            }
        } else {
            assert_eq!(
                (answer.error_code, answer.node_id.0, answer.port),
                (0, 1, i32::from(addr.port())),
                "v{version}"
            );
            assert_eq!(answer.host.as_str(), "127.0.0.1");
        }
    }

    // KIP-394 (v4+): a new member is first given its id, then joins with it.
    let first: JoinGroupResponse = call(&mut stream, ApiKey::JoinGroup, 9, &join_request("billing", "")).await;
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    assert!(!member.is_empty());
    let joined: JoinGroupResponse = call(&mut stream, ApiKey::JoinGroup, 9, &join_request("billing", &member)).await;
    assert_eq!(
        (joined.error_code, joined.member_id.as_str(), joined.leader.as_str()),
        (0, member.as_str(), member.as_str())
    );
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1, "the leader gets every member");
    assert_eq!(&joined.members[0].metadata[..], b"subscription");
    let generation = joined.generation_id;
    assert!(generation >= 1);

    let sync = SyncGroupRequest::default()
        .with_group_id(group("billing"))
        .with_generation_id(generation)
        .with_member_id(StrBytes::from_string(member.clone()))
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(StrBytes::from_static_str("range")))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_assignment(Bytes::from_static(b"orders-0"))]);
    let synced: SyncGroupResponse = call(&mut stream, ApiKey::SyncGroup, 5, &sync).await;
    assert_eq!((synced.error_code, &synced.assignment[..]), (0, &b"orders-0"[..]));

    // Listed and described at every version, the member's subscription and assignment included.
    let range = versions::supported(ApiKey::ListGroups).unwrap();
    for version in range.min..=range.max {
        let mut request = ListGroupsRequest::default();
        if version >= 4 {
            request.states_filter = vec![StrBytes::from_static_str("stable")];
        }
        if version >= 5 {
            request.types_filter = vec![StrBytes::from_static_str("classic")];
        }
        let answer: ListGroupsResponse = call(&mut stream, ApiKey::ListGroups, version, &request).await;
        let listed: Vec<(String, String)> =
            answer.groups.iter().map(|g| (g.group_id.0.to_string(), g.protocol_type.to_string())).collect();
        assert_eq!(listed, vec![("billing".to_string(), "consumer".to_string())], "v{version}");
        if version >= 4 {
            assert_eq!(answer.groups[0].group_state.as_str(), "Stable");
        }
    }
    let range = versions::supported(ApiKey::DescribeGroups).unwrap();
    for version in range.min..=range.max {
        let request = DescribeGroupsRequest::default().with_groups(vec![group("billing"), group("nobody")]);
        let answer: DescribeGroupsResponse = call(&mut stream, ApiKey::DescribeGroups, version, &request).await;
        let billing = &answer.groups[0];
        assert_eq!((billing.error_code, billing.group_state.as_str()), (0, "Stable"), "v{version}");
        assert_eq!((billing.protocol_type.as_str(), billing.protocol_data.as_str()), ("consumer", "range"));
        let m = &billing.members[0];
        assert_eq!((m.member_id.as_str(), m.client_id.as_str()), (member.as_str(), "rill-tests"));
        assert_eq!((&m.member_metadata[..], &m.member_assignment[..]), (&b"subscription"[..], &b"orders-0"[..]));
        let nobody = &answer.groups[1];
        let expected = if version >= 6 { (69, "") } else { (0, "Dead") };
        assert_eq!((nobody.error_code, nobody.group_state.as_str()), expected, "v{version}: an unknown group");
    }

    let beat = |generation: i32| {
        HeartbeatRequest::default()
            .with_group_id(group("billing"))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member.clone()))
    };
    let range = versions::supported(ApiKey::Heartbeat).unwrap();
    for version in range.min..=range.max {
        let answer: HeartbeatResponse = call(&mut stream, ApiKey::Heartbeat, version, &beat(generation)).await;
        assert_eq!(answer.error_code, 0, "v{version}");
    }
    let stale: HeartbeatResponse = call(&mut stream, ApiKey::Heartbeat, 4, &beat(generation + 7)).await;
    assert_eq!(stale.error_code, 22, "ILLEGAL_GENERATION");

    // Commits under the generation, at every version; a wrong generation is refused.
    let range = versions::supported(ApiKey::OffsetCommit).unwrap();
    for version in range.min..=range.max {
        let offset = i64::from(version) * 10;
        let mut request = commit_request("billing", &member, generation, "orders", offset);
        if version >= 6 {
            // KIP-320's committed leader epoch, kept with the offset.
            request.topics[0].partitions[0].committed_leader_epoch = i32::from(version);
        }
        let answer: OffsetCommitResponse = call(&mut stream, ApiKey::OffsetCommit, version, &request).await;
        assert_eq!(answer.topics[0].partitions[0].error_code, 0, "v{version}");
    }
    let last = i64::from(range.max) * 10;
    let stale: OffsetCommitResponse =
        call(&mut stream, ApiKey::OffsetCommit, 8, &commit_request("billing", &member, generation + 1, "orders", 1))
            .await;
    assert_eq!(stale.topics[0].partitions[0].error_code, 22, "ILLEGAL_GENERATION");

    // Read back at every version: one group (v1–7; null = every partition from v2), many (v8+).
    let range = versions::supported(ApiKey::OffsetFetch).unwrap();
    for version in range.min..=range.max {
        let (offset, metadata, epoch, code) = if version >= 8 {
            let topics = Some(vec![OffsetFetchRequestTopics::default()
                .with_name(name("orders"))
                .with_partition_indexes(vec![0])]);
            let groups = vec![
                OffsetFetchRequestGroup::default().with_group_id(group("billing")).with_topics(topics),
                OffsetFetchRequestGroup::default().with_group_id(group("billing")).with_topics(None),
            ];
            let answer: OffsetFetchResponse =
                call(&mut stream, ApiKey::OffsetFetch, version, &OffsetFetchRequest::default().with_groups(groups))
                    .await;
            assert_eq!(answer.groups.len(), 2);
            let p = &answer.groups[1].topics[0].partitions[0];
            assert_eq!((p.committed_offset, p.error_code), (last, 0), "v{version}: every partition");
            let p = &answer.groups[0].topics[0].partitions[0];
            (
                p.committed_offset,
                p.metadata.as_deref().unwrap_or_default().to_string(),
                p.committed_leader_epoch,
                p.error_code,
            )
        } else {
            let topics =
                vec![OffsetFetchRequestTopic::default().with_name(name("orders")).with_partition_indexes(vec![0])];
            let request = OffsetFetchRequest::default().with_group_id(group("billing")).with_topics(Some(topics));
            let answer: OffsetFetchResponse = call(&mut stream, ApiKey::OffsetFetch, version, &request).await;
            let p = &answer.topics[0].partitions[0];
            (
                p.committed_offset,
                p.metadata.as_deref().unwrap_or_default().to_string(),
                p.committed_leader_epoch,
                p.error_code,
            )
        };
        // The last commit (v9) gave epoch 9; answers carry it from v5.
        let expected_epoch = if version >= 5 { 9 } else { -1 };
        assert_eq!((offset, metadata.as_str(), epoch, code), (last, "note", expected_epoch, 0), "v{version}");
    }

    // A group id refused as a whole is answered at every version (v1 on each partition).
    let range = versions::supported(ApiKey::OffsetFetch).unwrap();
    for version in range.min..=range.max {
        let request = if version >= 8 {
            OffsetFetchRequest::default()
                .with_groups(vec![OffsetFetchRequestGroup::default().with_group_id(group("")).with_topics(None)])
        } else {
            let topics =
                vec![OffsetFetchRequestTopic::default().with_name(name("orders")).with_partition_indexes(vec![0])];
            OffsetFetchRequest::default().with_group_id(group("")).with_topics(Some(topics))
        };
        let answer: OffsetFetchResponse = call(&mut stream, ApiKey::OffsetFetch, version, &request).await;
        let code = match version {
            8.. => answer.groups[0].error_code,
            2.. => answer.error_code,
            _ => answer.topics[0].partitions[0].error_code,
        };
        assert_eq!(code, 24, "v{version}: INVALID_GROUP_ID");
    }

    // Leaving (v3+: by member), then the member is unknown.
    let leave = LeaveGroupRequest::default()
        .with_group_id(group("billing"))
        .with_members(vec![MemberIdentity::default().with_member_id(StrBytes::from_string(member.clone()))]);
    let left: LeaveGroupResponse = call(&mut stream, ApiKey::LeaveGroup, 5, &leave).await;
    assert_eq!((left.error_code, left.members.len(), left.members[0].error_code), (0, 1, 0));
    let gone: HeartbeatResponse = call(&mut stream, ApiKey::Heartbeat, 4, &beat(generation)).await;
    assert_eq!(gone.error_code, 25, "UNKNOWN_MEMBER_ID");

    // Before KIP-394 (v0–3) a new member joins at once; LeaveGroup v0 names it at the top.
    let legacy: JoinGroupResponse = call(&mut stream, ApiKey::JoinGroup, 3, &join_request("legacy", "")).await;
    assert_eq!(legacy.error_code, 0);
    assert!(!legacy.member_id.is_empty());
    let leave = LeaveGroupRequest::default().with_group_id(group("legacy")).with_member_id(legacy.member_id.clone());
    let left: LeaveGroupResponse = call(&mut stream, ApiKey::LeaveGroup, 0, &leave).await;
    assert_eq!(left.error_code, 0);
}

/// FindCoordinator at `version`, asked again while the coordinator is still being elected.
async fn must_reach_answer(
    stream: &mut TcpStream,
    version: i16,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    call_until(stream, ApiKey::FindCoordinator, version, &request, |answer: &FindCoordinatorResponse| {
        answer.coordinators.iter().map(|c| c.error_code).chain([answer.error_code]).all(|c| c == 0)
    })
    .await
}

#[tokio::test]
async fn topics_are_created_grown_and_deleted_and_the_cluster_described_at_every_version() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{
        CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
        DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse,
    };
    let (node, _service, addr) = node_with_kafka().await;
    must_reach("the cluster's id", || async { !node.meta().cluster_id.is_empty() }).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();

    for version in 0..=1 {
        let answer: DescribeClusterResponse =
            call(&mut stream, ApiKey::DescribeCluster, version, &DescribeClusterRequest::default()).await;
        assert_eq!((answer.error_code, answer.controller_id.0), (0, 1), "v{version}");
        assert_eq!(answer.cluster_id.as_str(), node.meta().cluster_id.as_str());
        let brokers: Vec<(i32, i32)> = answer.brokers.iter().map(|b| (b.broker_id.0, b.port)).collect();
        assert_eq!(brokers, vec![(1, i32::from(addr.port()))], "v{version}");
    }

    let creatable = |name: &str| {
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
    };
    let create = |topics: Vec<CreatableTopic>, validate_only: bool| {
        CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(10_000).with_validate_only(validate_only)
    };
    let range = versions::supported(ApiKey::CreateTopics).unwrap();
    for version in range.min..=range.max {
        let topic = format!("admin-{version}");
        // Checked only: nothing is created.
        let checked: CreateTopicsResponse =
            call(&mut stream, ApiKey::CreateTopics, version, &create(vec![creatable(&topic)], true)).await;
        assert_eq!(checked.topics[0].error_code, 0, "v{version}");
        assert!(!node.meta().topics.contains_key(&topic), "v{version}: validate_only created nothing");
        let bad_config = creatable(&format!("{topic}-bad")).with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("no.such.setting"))
            .with_value(Some(StrBytes::from_static_str("1")))]);
        // As Kafka Streams creates its repartition topics.
        let setting = |key: &'static str, value: &'static str| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str(key))
                .with_value(Some(StrBytes::from_static_str(value)))
        };
        let streams = creatable(&format!("{topic}-streams")).with_configs(vec![
            setting("segment.bytes", "52428800"),
            setting("message.timestamp.type", "CreateTime"),
            setting("retention.ms", "-1"),
        ]);
        let log_append_time = creatable(&format!("{topic}-append"))
            .with_configs(vec![setting("message.timestamp.type", "LogAppendTime")]);
        let placed = creatable(&format!("{topic}-placed"))
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])]);
        let answer: CreateTopicsResponse = call(
            &mut stream,
            ApiKey::CreateTopics,
            version,
            &create(vec![creatable(&topic), bad_config, placed, creatable(""), streams, log_append_time], false),
        )
        .await;
        let codes: Vec<i16> = answer.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(codes[..3], [0, 40, 42], "v{version}: created, INVALID_CONFIG, INVALID_REQUEST: {answer:?}");
        assert_ne!(codes[3], 0, "v{version}: an empty name is refused");
        assert_eq!(codes[4..], [0, 40], "v{version}: settings Rill takes without storing; a value it cannot honour");
        let streams_config = &node.meta().topics[&format!("{topic}-streams")].config;
        assert_eq!(streams_config.retention_ms, -1, "v{version}: the stored setting beside them");
        let created = &answer.topics[0];
        if version >= 5 {
            assert_eq!((created.num_partitions, created.replication_factor), (1, 1), "v{version}: the defaults");
        }
        if version >= 7 {
            assert_eq!(created.topic_id.as_bytes(), &node.meta().topics[&topic].topic_id);
        }
        let again: CreateTopicsResponse =
            call(&mut stream, ApiKey::CreateTopics, version, &create(vec![creatable(&topic)], false)).await;
        assert_eq!(again.topics[0].error_code, 36, "v{version}: TOPIC_ALREADY_EXISTS");
    }

    let range = versions::supported(ApiKey::CreatePartitions).unwrap();
    for version in range.min..=range.max {
        let total = 2 + i32::from(version);
        let grow = |validate_only: bool| {
            CreatePartitionsRequest::default()
                .with_topics(vec![CreatePartitionsTopic::default().with_name(name("admin-2")).with_count(total)])
                .with_timeout_ms(10_000)
                .with_validate_only(validate_only)
        };
        let checked: CreatePartitionsResponse = call(&mut stream, ApiKey::CreatePartitions, version, &grow(true)).await;
        assert_eq!(checked.results[0].error_code, 0, "v{version}");
        assert_eq!(node.meta().topics["admin-2"].partitions.len() as i32, total - 1, "v{version}: only checked");
        let grown: CreatePartitionsResponse = call(&mut stream, ApiKey::CreatePartitions, version, &grow(false)).await;
        assert_eq!(grown.results[0].error_code, 0, "v{version}");
        assert_eq!(node.meta().topics["admin-2"].partitions.len() as i32, total, "v{version}");
    }

    // Settings: set, reset, checked only, refused; described with their sources at every version.
    {
        use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
        use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        use kafka_protocol::messages::{
            DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
            IncrementalAlterConfigsResponse,
        };
        let alter = |op: i8, key: &str, value: Option<&str>, validate_only: bool| {
            let config = AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_config_operation(op)
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())));
            IncrementalAlterConfigsRequest::default()
                .with_resources(vec![AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("admin-2"))
                    .with_configs(vec![config])])
                .with_validate_only(validate_only)
        };
        let retention = || node.meta().topics["admin-2"].config.retention_ms;
        let before = retention();
        for version in 0..=1 {
            let code = |answer: IncrementalAlterConfigsResponse| answer.responses[0].error_code;
            let checked = call(
                &mut stream,
                ApiKey::IncrementalAlterConfigs,
                version,
                &alter(0, "retention.ms", Some("3600000"), true),
            )
            .await;
            assert_eq!((code(checked), retention()), (0, before), "v{version}: only checked");
            let set = call(
                &mut stream,
                ApiKey::IncrementalAlterConfigs,
                version,
                &alter(0, "retention.ms", Some("3600000"), false),
            )
            .await;
            assert_eq!((code(set), retention()), (0, 3_600_000), "v{version}: set");
            let unknown = call(
                &mut stream,
                ApiKey::IncrementalAlterConfigs,
                version,
                &alter(0, "no.such.setting", Some("1"), false),
            )
            .await;
            assert_eq!(code(unknown), 40, "v{version}: INVALID_CONFIG");
            // cleanup.policy is a list: items appended and subtracted; other settings are not.
            let policy = || node.meta().topics["admin-2"].config.cleanup_policy.as_str();
            for (op, item, expected, then) in [
                (2, "compact", 0, "compact,delete"),
                (2, "compact", 0, "compact,delete"),
                (3, "delete", 0, "compact"),
                (3, "compact", 40, "compact"),
                (2, "delete", 0, "compact,delete"),
                (3, "compact", 0, "delete"),
                (2, "shred", 40, "delete"),
            ] {
                let answer = call(
                    &mut stream,
                    ApiKey::IncrementalAlterConfigs,
                    version,
                    &alter(op, "cleanup.policy", Some(item), false),
                )
                .await;
                assert_eq!((code(answer), policy()), (expected, then), "v{version}: op {op} {item}");
            }
            let append = call(
                &mut stream,
                ApiKey::IncrementalAlterConfigs,
                version,
                &alter(2, "retention.ms", Some("1000"), false),
            )
            .await;
            assert_eq!(code(append), 40, "v{version}: APPEND to a setting that is not a list");
            let reset =
                call(&mut stream, ApiKey::IncrementalAlterConfigs, version, &alter(1, "retention.ms", None, false))
                    .await;
            assert_eq!((code(reset), retention()), (0, before), "v{version}: reset to the default");
        }
        // The legacy AlterConfigs replaces a topic's settings: those not named return to their
        // defaults.
        let replace = |resource_type: i8, configs: &[(&str, &str)], validate_only: bool| {
            use kafka_protocol::messages::alter_configs_request as legacy;
            let configs = configs
                .iter()
                .map(|(k, v)| {
                    legacy::AlterableConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect();
            kafka_protocol::messages::AlterConfigsRequest::default()
                .with_resources(vec![legacy::AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_static_str("admin-2"))
                    .with_configs(configs)])
                .with_validate_only(validate_only)
        };
        let max_bytes = || node.meta().topics["admin-2"].config.max_message_bytes;
        let default_max_bytes = max_bytes();
        for version in 0..=2 {
            let code = |answer: kafka_protocol::messages::AlterConfigsResponse| answer.responses[0].error_code;
            let both = [("retention.ms", "3600000"), ("max.message.bytes", "4096")];
            let checked = call(&mut stream, ApiKey::AlterConfigs, version, &replace(2, &both, true)).await;
            assert_eq!(
                (code(checked), retention(), max_bytes()),
                (0, before, default_max_bytes),
                "v{version}: checked"
            );
            let set = call(&mut stream, ApiKey::AlterConfigs, version, &replace(2, &both, false)).await;
            assert_eq!((code(set), retention(), max_bytes()), (0, 3_600_000, 4096), "v{version}: both set");
            let one = call(&mut stream, ApiKey::AlterConfigs, version, &replace(2, &both[1..], false)).await;
            assert_eq!((code(one), retention(), max_bytes()), (0, before, 4096), "v{version}: retention.ms reset");
            let broker = call(&mut stream, ApiKey::AlterConfigs, version, &replace(4, &both, false)).await;
            assert_eq!(code(broker), 42, "v{version}: only topics have settings");
            let none = call(&mut stream, ApiKey::AlterConfigs, version, &replace(2, &[], false)).await;
            assert_eq!((code(none), max_bytes()), (0, default_max_bytes), "v{version}: everything reset");
        }
        let set: IncrementalAlterConfigsResponse =
            call(&mut stream, ApiKey::IncrementalAlterConfigs, 1, &alter(0, "retention.ms", Some("3600000"), false))
                .await;
        assert_eq!(set.responses[0].error_code, 0);
        for version in 1..=4 {
            let describe = |resource_type: i8, keys: Option<Vec<&'static str>>| {
                DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_static_str("admin-2"))
                    .with_configuration_keys(keys.map(|k| k.into_iter().map(StrBytes::from_static_str).collect()))])
            };
            let answer: DescribeConfigsResponse =
                call(&mut stream, ApiKey::DescribeConfigs, version, &describe(2, None)).await;
            let configs = &answer.results[0].configs;
            let find = |key: &str| configs.iter().find(|c| c.name.as_str() == key).unwrap();
            let set = find("retention.ms");
            assert_eq!(
                (set.value.as_deref(), set.config_source),
                (Some("3600000"), 1),
                "v{version}: set for the topic"
            );
            assert_eq!(find("cleanup.policy").config_source, 5, "v{version}: a default");
            let one: DescribeConfigsResponse =
                call(&mut stream, ApiKey::DescribeConfigs, version, &describe(2, Some(vec!["max.message.bytes"])))
                    .await;
            assert_eq!(one.results[0].configs.len(), 1, "v{version}: only the key asked for");
            let broker: DescribeConfigsResponse =
                call(&mut stream, ApiKey::DescribeConfigs, version, &describe(4, None)).await;
            assert_eq!(broker.results[0].error_code, 42, "v{version}: node settings are not a Kafka resource");
        }
    }

    let range = versions::supported(ApiKey::DeleteTopics).unwrap();
    for version in range.min..=range.max {
        let topic = format!("admin-{}", version + 1);
        let request = if version >= 6 {
            let id = uuid::Uuid::from_bytes(node.meta().topics[&topic].topic_id);
            DeleteTopicsRequest::default().with_topics(vec![
                DeleteTopicState::default().with_topic_id(id),
                DeleteTopicState::default().with_name(Some(name("no-such-topic"))),
            ])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![name(&topic), name("no-such-topic")])
        };
        let answer: DeleteTopicsResponse =
            call(&mut stream, ApiKey::DeleteTopics, version, &request.with_timeout_ms(10_000)).await;
        let codes: Vec<i16> = answer.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![0, 3], "v{version}");
        assert_eq!(answer.responses[0].name.as_ref().map(|n| n.0.to_string()), Some(topic.clone()));
        assert!(!node.meta().topics.contains_key(&topic), "v{version}: deleted");
    }
}

/// Sends `api` at `version` until `done` holds of its answer (a coordinator still being
/// created or loaded answers with a retriable code first), or the time is up; the last answer.
async fn call_until<Q: Encodable, A: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &Q,
    done: impl Fn(&A) -> bool,
) -> A {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let answer: A = call(stream, api, version, body).await;
        if done(&answer) || tokio::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

/// A transactional batch of `values` from producer `id` at `epoch`.
fn transactional_batch(id: i64, epoch: i16, sequence: i32, values: &[&str]) -> Bytes {
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None)
        .producer(id, epoch, sequence)
        .transactional(true);
    for v in values {
        builder
            .push(rill_records::Record { value: Some(Bytes::copy_from_slice(v.as_bytes())), ..Default::default() })
            .unwrap();
    }
    builder.build().unwrap()
}

/// A `read_committed` fetch of `topic`/0, once its last stable offset has reached its high
/// watermark (every marker written).
async fn fetch_settled(stream: &mut TcpStream, topic: &str) -> FetchResponse {
    call_until(stream, ApiKey::Fetch, 12, &fetch_request(topic, 0, 1), |a: &FetchResponse| {
        let p = &a.responses[0].partitions[0];
        p.last_stable_offset == p.high_watermark
    })
    .await
}

/// `group`'s committed offset of orders/0 and its leader epoch, once no transactional commit
/// is pending there (`OffsetFetch` v7 with `require_stable`).
async fn stable_commit(stream: &mut TcpStream, group_id: &str) -> (i64, i32) {
    let request =
        OffsetFetchRequest::default().with_group_id(group(group_id)).with_require_stable(true).with_topics(Some(vec![
            OffsetFetchRequestTopic::default().with_name(name("orders")).with_partition_indexes(vec![0]),
        ]));
    let answer: OffsetFetchResponse =
        call_until(stream, ApiKey::OffsetFetch, 7, &request, |a: &OffsetFetchResponse| {
            a.topics[0].partitions[0].error_code == 0
        })
        .await;
    let p = &answer.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{group_id}: a stable offset in time");
    (p.committed_offset, p.committed_leader_epoch)
}

/// The last `EndTxn` version of transactions v1 (v5 is v2).
const LAST_V1_END_TXN: i16 = 4;

#[tokio::test]
async fn transactions_commit_and_abort_through_every_version() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let end = versions::supported(ApiKey::EndTxn).unwrap();
    // Transactions v1 (partitions and groups added explicitly); v5, which is v2, has its own test.
    let v1 = end.min..=LAST_V1_END_TXN;
    let clamp = |api: ApiKey, version: i16| version.min(versions::supported(api).unwrap().max);
    let mut producers = Vec::new();
    let mut sequence = 0;
    for version in v1.clone() {
        let id = format!("tx-{version}");
        let commit = version % 2 == 0;
        // The transaction coordinator, at this listener's address.
        let found = must_reach_answer(
            &mut stream,
            3,
            FindCoordinatorRequest::default().with_key_type(1).with_key(StrBytes::from_string(id.clone())),
        )
        .await;
        assert_eq!((found.error_code, found.node_id.0), (0, 1), "v{version}");
        let init: InitProducerIdResponse = call_until(
            &mut stream,
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(txn_id(&id)))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            |a: &InitProducerIdResponse| a.error_code == 0,
        )
        .await;
        assert_eq!(init.error_code, 0, "v{version}");
        let (pid, epoch) = (init.producer_id, init.producer_epoch);
        producers.push((pid.0, commit));

        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id(&id))
            .with_v3_and_below_producer_id(pid)
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name("orders"))
                .with_partitions(vec![0])]);
        let added: AddPartitionsToTxnResponse =
            call(&mut stream, ApiKey::AddPartitionsToTxn, clamp(ApiKey::AddPartitionsToTxn, version), &add).await;
        let codes: Vec<(String, i32, i16)> = added
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition.iter().map(|p| (t.name.0.to_string(), p.partition_index, p.partition_error_code))
            })
            .collect();
        assert_eq!(codes, vec![("orders".to_string(), 0, 0)], "v{version}");

        let mut produce =
            produce_request("orders", -1, transactional_batch(pid.0, epoch, 0, &[&format!("v{version}")]));
        produce.transactional_id = Some(txn_id(&id));
        let produced: ProduceResponse = call(&mut stream, ApiKey::Produce, 9, &produce).await;
        assert_eq!(produced.responses[0].partition_responses[0].error_code, 0, "v{version}");
        sequence += 1;

        let offsets = AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn_id(&id))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_group_id(group("eos"));
        let added: AddOffsetsToTxnResponse = call(&mut stream, ApiKey::AddOffsetsToTxn, version, &offsets).await;
        assert_eq!(added.error_code, 0, "v{version}");
        let commit_offsets = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id(&id))
            .with_group_id(group("eos"))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("orders")).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(i64::from(version) + 100)
                    // Carried from v2 (KIP-320), kept with the offset.
                    .with_committed_leader_epoch(3),
            ])]);
        let committed: TxnOffsetCommitResponse =
            call(&mut stream, ApiKey::TxnOffsetCommit, clamp(ApiKey::TxnOffsetCommit, version), &commit_offsets).await;
        assert_eq!(committed.topics[0].partitions[0].error_code, 0, "v{version}");

        let ended: EndTxnResponse = call(
            &mut stream,
            ApiKey::EndTxn,
            version,
            &EndTxnRequest::default()
                .with_transactional_id(txn_id(&id))
                .with_producer_id(pid)
                .with_producer_epoch(epoch)
                .with_committed(commit),
        )
        .await;
        assert_eq!(ended.error_code, 0, "v{version}");
    }
    assert_eq!(sequence, i32::from(LAST_V1_END_TXN - end.min + 1));

    // A new producer of tx-0 (InitProducerId with its id and epoch: the epoch is bumped) fences
    // the old epoch, at every version.
    let (old_pid, old_epoch) = (ProducerId(producers[0].0), 0);
    let init: InitProducerIdResponse = call(
        &mut stream,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id("tx-0")))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(old_pid)
            .with_producer_epoch(old_epoch),
    )
    .await;
    assert_eq!((init.error_code, init.producer_id, init.producer_epoch), (0, old_pid, old_epoch + 1));
    for version in end.min..=end.max {
        let stale: EndTxnResponse = call(
            &mut stream,
            ApiKey::EndTxn,
            version,
            &EndTxnRequest::default()
                .with_transactional_id(txn_id("tx-0"))
                .with_producer_id(old_pid)
                .with_producer_epoch(old_epoch)
                .with_committed(true),
        )
        .await;
        assert!([47, 90].contains(&stale.error_code), "v{version}: a stale epoch is fenced, not {}", stale.error_code);
    }

    // A partition of a topic that does not exist: every partition of the request is refused.
    let unknown = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id("tx-0"))
        .with_v3_and_below_producer_id(ProducerId(producers[0].0))
        .with_v3_and_below_producer_epoch(0)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default().with_name(name("orders")).with_partitions(vec![0]),
            AddPartitionsToTxnTopic::default().with_name(name("nowhere")).with_partitions(vec![0, 1]),
        ]);
    let refused: AddPartitionsToTxnResponse = call(&mut stream, ApiKey::AddPartitionsToTxn, 3, &unknown).await;
    let codes: Vec<i16> = refused
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
        .collect();
    assert_eq!(codes.len(), 3);
    assert!(codes.iter().all(|&c| c == codes[0] && c != 0), "{codes:?}");

    // Once the markers are written, read_committed reaches the end, and the aborted
    // transactions are listed for the client to drop.
    let fetched = fetch_settled(&mut stream, "orders").await;
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 2 * i64::from(LAST_V1_END_TXN - end.min + 1), "a record and a marker per transaction");
    assert_eq!(p.last_stable_offset, p.high_watermark);
    let mut aborted: Vec<i64> = p.aborted_transactions.iter().flatten().map(|a| a.producer_id.0).collect();
    aborted.sort();
    let mut expected: Vec<i64> = producers.iter().filter(|(_, commit)| !commit).map(|(pid, _)| *pid).collect();
    expected.sort();
    assert_eq!(aborted, expected, "the aborted producers, and only they");

    // The last committed transaction's offset is the group's.
    let last_commit = v1.clone().rev().find(|v| v % 2 == 0).unwrap();
    let (offset, leader_epoch) = stable_commit(&mut stream, "eos").await;
    assert_eq!(offset, i64::from(last_commit) + 100);
    assert_eq!(leader_epoch, 3, "the committed leader epoch, kept");

    // Described and listed, at every version.
    let ids: Vec<TransactionalId> = v1.clone().map(|v| txn_id(&format!("tx-{v}"))).chain([txn_id("never")]).collect();
    let described: DescribeTransactionsResponse = call_until(
        &mut stream,
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(ids),
        |a: &DescribeTransactionsResponse| {
            a.transaction_states.iter().all(|s| !s.transaction_state.starts_with("Prepare"))
        },
    )
    .await;
    let states: Vec<(String, i16, String)> = described
        .transaction_states
        .iter()
        .map(|s| (s.transactional_id.0.to_string(), s.error_code, s.transaction_state.to_string()))
        .collect();
    let mut expected: Vec<(String, i16, String)> = v1
        .clone()
        .map(|v| {
            let state = match v {
                0 => "Empty", // its producer was re-initialized
                _ if v % 2 == 0 => "CompleteCommit",
                _ => "CompleteAbort",
            };
            (format!("tx-{v}"), 0, state.to_string())
        })
        .collect();
    expected.push(("never".to_string(), 105, String::new()));
    assert_eq!(states, expected, "TRANSACTIONAL_ID_NOT_FOUND for an id never used");
    assert!(described.transaction_states.iter().all(|s| s.transaction_start_time_ms == -1), "none is open");

    let list = versions::supported(ApiKey::ListTransactions).unwrap();
    for version in list.min..=list.max {
        let all: ListTransactionsResponse =
            call(&mut stream, ApiKey::ListTransactions, version, &ListTransactionsRequest::default()).await;
        let mut listed: Vec<String> = all.transaction_states.iter().map(|t| t.transactional_id.0.to_string()).collect();
        listed.sort();
        assert_eq!(listed, v1.clone().map(|v| format!("tx-{v}")).collect::<Vec<_>>(), "v{version}");
        let filtered: ListTransactionsResponse = call(
            &mut stream,
            ApiKey::ListTransactions,
            version,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![StrBytes::from_static_str("CompleteAbort"), StrBytes::from_static_str("Dead")])
                .with_producer_id_filters(vec![ProducerId(producers[1].0)]),
        )
        .await;
        let listed: Vec<String> =
            filtered.transaction_states.iter().map(|t| t.transactional_id.0.to_string()).collect();
        assert_eq!(listed, vec![format!("tx-{}", end.min + 1)], "v{version}: by state and producer");
        assert_eq!(filtered.unknown_state_filters, vec![StrBytes::from_static_str("Dead")], "v{version}");
    }
}

/// Transactions v2 as the Java client from 4.0 speaks them once `ApiVersions` finalizes
/// `transaction.version` 2: `Produce` v12 adds the partition with its first batch,
/// `TxnOffsetCommit` v5 the group with its first commit, and `EndTxn` v5 bumps the epoch at
/// every end and answers the pair to go on with.
#[tokio::test]
async fn transactions_v2_add_partitions_and_groups_implicitly_and_bump_the_epoch_at_every_end() {
    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let features: ApiVersionsResponse = call(&mut stream, ApiKey::ApiVersions, 4, &api_versions_request()).await;
    let finalized: Vec<(String, i16)> =
        features.finalized_features.iter().map(|f| (f.name.to_string(), f.max_version_level)).collect();
    assert!(finalized.contains(&("transaction.version".to_string(), 2)), "{finalized:?}");

    let found = must_reach_answer(
        &mut stream,
        3,
        FindCoordinatorRequest::default().with_key_type(1).with_key(StrBytes::from_static_str("tx-v2")),
    )
    .await;
    assert_eq!(found.error_code, 0);
    let init: InitProducerIdResponse = call_until(
        &mut stream,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id("tx-v2")))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
        |a: &InitProducerIdResponse| a.error_code == 0,
    )
    .await;
    assert_eq!((init.error_code, init.producer_epoch), (0, 0));
    let pid = init.producer_id;
    let produce = |epoch: i16, value: &str| {
        let mut request = produce_request("orders", -1, transactional_batch(pid.0, epoch, 0, &[value]));
        request.transactional_id = Some(txn_id("tx-v2"));
        request
    };
    let end = |epoch: i16, commit: bool| {
        EndTxnRequest::default()
            .with_transactional_id(txn_id("tx-v2"))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_committed(commit)
    };
    let produce_code = |a: &ProduceResponse| a.responses[0].partition_responses[0].error_code;

    // The first transaction: a batch and the group's offsets, neither added beforehand.
    let produced: ProduceResponse = call(&mut stream, ApiKey::Produce, 12, &produce(0, "committed")).await;
    assert_eq!(produce_code(&produced), 0, "Produce v12 adds the partition");
    let commit_offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id("tx-v2"))
        .with_group_id(group("eos-v2"))
        .with_producer_id(pid)
        .with_producer_epoch(0)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("orders")).with_partitions(vec![
            TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(7),
        ])]);
    let committed: TxnOffsetCommitResponse = call(&mut stream, ApiKey::TxnOffsetCommit, 5, &commit_offsets).await;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0, "TxnOffsetCommit v5 adds the group");
    let ended: EndTxnResponse = call(&mut stream, ApiKey::EndTxn, 5, &end(0, true)).await;
    assert_eq!((ended.error_code, ended.producer_id, ended.producer_epoch), (0, pid, 1), "the next epoch");
    // Its retry (the answer lost) learns the same pair once the markers are written.
    let retried: EndTxnResponse =
        call_until(&mut stream, ApiKey::EndTxn, 5, &end(0, true), |a: &EndTxnResponse| a.error_code == 0).await;
    assert_eq!((retried.error_code, retried.producer_id, retried.producer_epoch), (0, pid, 1));

    // The second, aborted, under the bumped epoch with sequences from 0 again; the old epoch
    // can no longer reach it.
    let produced: ProduceResponse =
        call_until(&mut stream, ApiKey::Produce, 12, &produce(1, "aborted"), |a| produce_code(a) == 0).await;
    assert_eq!(produce_code(&produced), 0);
    let late: ProduceResponse = call(&mut stream, ApiKey::Produce, 12, &produce(0, "late")).await;
    assert!(
        [47, 90].contains(&produce_code(&late)),
        "a batch under the old epoch is fenced, not {}",
        produce_code(&late)
    );
    let ended: EndTxnResponse = call(&mut stream, ApiKey::EndTxn, 5, &end(1, false)).await;
    assert_eq!((ended.error_code, ended.producer_id, ended.producer_epoch), (0, pid, 2));
    let stale: EndTxnResponse = call(&mut stream, ApiKey::EndTxn, 5, &end(0, true)).await;
    assert!([47, 90].contains(&stale.error_code), "a stale end is fenced, not {}", stale.error_code);
    assert_eq!((stale.producer_id, stale.producer_epoch), (ProducerId(-1), -1), "a refusal names no pair");

    // read_committed: the committed record, the aborted one listed for the client to drop.
    let fetched = fetch_settled(&mut stream, "orders").await;
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 4, "two records and two markers");
    let aborted: Vec<(i64, i64)> =
        p.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    assert_eq!(aborted, vec![(pid.0, 2)], "the second transaction, and only it");
    assert_eq!(stable_commit(&mut stream, "eos-v2").await.0, 7, "the group's offset, committed with it");
}

#[tokio::test]
async fn records_groups_and_offsets_are_deleted_at_every_version() {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
    use kafka_protocol::messages::{
        DeleteGroupsRequest, DeleteGroupsResponse, DeleteRecordsRequest, DeleteRecordsResponse, OffsetDeleteRequest,
        OffsetDeleteResponse,
    };

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let produced: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("orders", -1, batch(&values))).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);

    // A group's committed offset of orders/0 (OffsetFetch v7).
    let fetch_offset = |id: &str| {
        OffsetFetchRequest::default().with_group_id(group(id)).with_topics(Some(vec![
            OffsetFetchRequestTopic::default().with_name(name("orders")).with_partition_indexes(vec![0]),
        ]))
    };
    let delete = |partitions: Vec<(i32, i64)>| {
        let partitions = partitions
            .into_iter()
            .map(|(p, offset)| DeleteRecordsPartition::default().with_partition_index(p).with_offset(offset))
            .collect();
        DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![DeleteRecordsTopic::default().with_name(name("orders")).with_partitions(partitions)])
    };
    let range = versions::supported(ApiKey::DeleteRecords).unwrap();
    for version in range.min..=range.max {
        let before = 2 * i64::from(version + 1);
        let answer: DeleteRecordsResponse =
            call(&mut stream, ApiKey::DeleteRecords, version, &delete(vec![(0, before), (7, 1)])).await;
        let got: Vec<(i32, i64, i16)> =
            answer.topics[0].partitions.iter().map(|p| (p.partition_index, p.low_watermark, p.error_code)).collect();
        assert_eq!(got, vec![(0, before, 0), (7, -1, 3)], "v{version}: the new log start; an unknown partition");
    }
    let past_the_end: DeleteRecordsResponse = call(&mut stream, ApiKey::DeleteRecords, 2, &delete(vec![(0, 99)])).await;
    assert_eq!(past_the_end.topics[0].partitions[0].error_code, 1, "OFFSET_OUT_OF_RANGE");
    let everything: DeleteRecordsResponse = call(&mut stream, ApiKey::DeleteRecords, 2, &delete(vec![(0, -1)])).await;
    let p = &everything.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 10), "-1: everything below the high watermark");
    let fetched: FetchResponse = call(&mut stream, ApiKey::Fetch, 12, &fetch_request("orders", 0, 0)).await;
    assert_eq!(fetched.responses[0].partitions[0].error_code, 1, "a fetch below the new log start");

    // Groups with committed offsets (no members), deleted at every version.
    let range = versions::supported(ApiKey::DeleteGroups).unwrap();
    for version in range.min..=range.max {
        let id = format!("gone-{version}");
        let committed: OffsetCommitResponse = call_until(
            &mut stream,
            ApiKey::OffsetCommit,
            9,
            &commit_request(&id, "", -1, "orders", 5),
            |a: &OffsetCommitResponse| a.topics[0].partitions[0].error_code == 0,
        )
        .await;
        assert_eq!(committed.topics[0].partitions[0].error_code, 0);
        let answer: DeleteGroupsResponse = call(
            &mut stream,
            ApiKey::DeleteGroups,
            version,
            &DeleteGroupsRequest::default().with_groups_names(vec![group(&id), group("never-existed")]),
        )
        .await;
        let got: Vec<(String, i16)> = answer.results.iter().map(|r| (r.group_id.0.to_string(), r.error_code)).collect();
        assert_eq!(got, vec![(id.clone(), 0), ("never-existed".to_string(), 69)], "v{version}: GROUP_ID_NOT_FOUND");
        let fetched: OffsetFetchResponse = call(&mut stream, ApiKey::OffsetFetch, 7, &fetch_offset(&id)).await;
        assert_eq!(fetched.topics[0].partitions[0].committed_offset, -1, "v{version}: its offsets went with it");
    }

    // The one committed offset deleted; the group, left with nothing, is gone.
    let delete_trim_offset = OffsetDeleteRequest::default().with_group_id(group("trim")).with_topics(vec![
        OffsetDeleteRequestTopic::default()
            .with_name(name("orders"))
            .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
    ]);
    let committed: OffsetCommitResponse =
        call(&mut stream, ApiKey::OffsetCommit, 9, &commit_request("trim", "", -1, "orders", 7)).await;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    let answer: OffsetDeleteResponse = call(&mut stream, ApiKey::OffsetDelete, 0, &delete_trim_offset).await;
    assert_eq!((answer.error_code, answer.topics[0].partitions[0].error_code), (0, 0));
    let fetched: OffsetFetchResponse = call(&mut stream, ApiKey::OffsetFetch, 7, &fetch_offset("trim")).await;
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, -1);
    let gone: OffsetDeleteResponse = call(&mut stream, ApiKey::OffsetDelete, 0, &delete_trim_offset).await;
    assert_eq!(gone.error_code, 69, "GROUP_ID_NOT_FOUND: {gone:?}");
}

/// Starts a transaction of transactional id `id` (a new producer) on partition 0 of `topic`:
/// its producer id and epoch.
async fn begin_transaction(stream: &mut TcpStream, id: &str, topic: &str) -> (ProducerId, i16) {
    let find = FindCoordinatorRequest::default().with_key_type(1).with_key(StrBytes::from_string(id.to_string()));
    assert_eq!(must_reach_answer(stream, 3, find).await.error_code, 0);
    let init: InitProducerIdResponse = call_until(
        stream,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id(id)))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
        |a: &InitProducerIdResponse| a.error_code == 0,
    )
    .await;
    let (pid, epoch) = (init.producer_id, init.producer_epoch);
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(pid)
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![0])]);
    let added: AddPartitionsToTxnResponse = call(stream, ApiKey::AddPartitionsToTxn, 3, &add).await;
    assert_eq!(added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, 0);
    (pid, epoch)
}

/// A deletion reaching into an open transaction deletes nothing until the transaction is
/// decided (the log start never passes the last stable offset): refused when its time runs out,
/// done in full once the commit's markers are written — never answered with less deleted.
#[tokio::test]
async fn a_deletion_into_an_open_transaction_waits_for_its_decision() {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "ledger", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (pid, epoch) = begin_transaction(&mut stream, "tx-del", "ledger").await;
    let mut produce = produce_request("ledger", -1, transactional_batch(pid.0, epoch, 0, &["a", "b", "c"]));
    produce.transactional_id = Some(txn_id("tx-del"));
    let produced: ProduceResponse = call(&mut stream, ApiKey::Produce, 9, &produce).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);

    let delete_below_2 = |timeout_ms: i32| {
        DeleteRecordsRequest::default().with_timeout_ms(timeout_ms).with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("ledger"))
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(2)])])
    };
    let refused: DeleteRecordsResponse = call(&mut stream, ApiKey::DeleteRecords, 2, &delete_below_2(300)).await;
    let p = &refused.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (7, -1), "REQUEST_TIMED_OUT while the transaction is open");
    let earliest: ListOffsetsResponse = call(
        &mut stream,
        ApiKey::ListOffsets,
        6,
        &ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("ledger"))
            .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-2)])]),
    )
    .await;
    assert_eq!(earliest.topics[0].partitions[0].offset, 0, "nothing was deleted");

    // A deletion waiting (on a second connection) while the transaction commits completes in full.
    let waiting = tokio::spawn(async move {
        let mut other = TcpStream::connect(addr).await.unwrap();
        let answer: DeleteRecordsResponse = call(&mut other, ApiKey::DeleteRecords, 2, &delete_below_2(30_000)).await;
        answer
    });
    let ended: EndTxnResponse = call(
        &mut stream,
        ApiKey::EndTxn,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(txn_id("tx-del"))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_committed(true),
    )
    .await;
    assert_eq!(ended.error_code, 0);
    let deleted = waiting.await.unwrap();
    let p = &deleted.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 2), "deleted below 2 once the transaction was decided");
}

/// `ListOffsets` by the records' own timestamps, which producers set in any order: the first
/// record at or after a time, the first with the largest timestamp (-3), the log start (-2, -4);
/// inside compressed batches, above the log start, and within what the isolation level reads.
#[tokio::test]
async fn offsets_are_found_by_record_timestamp_at_every_version() {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "clock", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let timed = |compression, stamps: &[i64]| {
        let mut builder = rill_records::BatchBuilder::new(compression);
        for &timestamp_ms in stamps {
            let record =
                rill_records::Record { timestamp_ms, value: Some(Bytes::from_static(b"v")), ..Default::default() };
            builder.push(record).unwrap();
        }
        builder.build().unwrap()
    };
    // Offsets 0-2, 3-4, 5-6 (gzip).
    for batch in [
        timed(rill_records::Compression::None, &[1_000, 5_000, 2_000]),
        timed(rill_records::Compression::None, &[3_000, 5_000]),
        timed(rill_records::Compression::Gzip, &[4_000, 4_500]),
    ] {
        let produced: ProduceResponse =
            call(&mut stream, ApiKey::Produce, 9, &produce_request("clock", -1, batch)).await;
        assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    }
    // (offset, timestamp) answered for `timestamp` at `version` and `isolation_level`.
    async fn ask(stream: &mut TcpStream, version: i16, timestamp: i64, isolation_level: i8) -> (i64, i64) {
        let request = ListOffsetsRequest::default().with_isolation_level(isolation_level).with_topics(vec![
            ListOffsetsTopic::default().with_name(name("clock")).with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)]),
        ]);
        let answer: ListOffsetsResponse = call(stream, ApiKey::ListOffsets, version, &request).await;
        let p = &answer.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "v{version} at {timestamp}");
        (p.offset, p.timestamp)
    }
    let range = versions::supported(ApiKey::ListOffsets).unwrap();
    assert_eq!(range.max, 8);
    for version in range.min..=range.max {
        let mut found = Vec::new();
        for timestamp in [0, 1_500, 4_501, 5_001, -3, -2, -4, -1] {
            found.push(ask(&mut stream, version, timestamp, 0).await);
        }
        assert_eq!(
            found,
            vec![(0, 1_000), (1, 5_000), (1, 5_000), (-1, -1), (1, 5_000), (0, -1), (0, -1), (7, -1)],
            "v{version}: the first record at or after each time (none after 5000); the largest; start; end"
        );
    }
    assert_eq!(ask(&mut stream, 8, 4_200, 0).await, (1, 5_000));
    // From v4, each answer carries the leader epoch of the record listed (of the leader, for
    // the end), or -1 when there is none.
    let group = node.meta().topics["clock"].partitions[0].group;
    let term = node.leadership_of(group).map(|(_, term)| term).unwrap() as i32;
    for version in 4..=range.max {
        let mut epochs = Vec::new();
        for timestamp in [0, -3, -2, -1, 5_001] {
            let request = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("clock"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
            let answer: ListOffsetsResponse = call(&mut stream, ApiKey::ListOffsets, version, &request).await;
            epochs.push(answer.topics[0].partitions[0].leader_epoch);
        }
        assert_eq!(epochs, vec![term, term, term, term, -1], "v{version}");
    }

    // Records below the log start are never answered, in the batch it falls in or elsewhere.
    let delete =
        DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("clock"))
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(2)])]);
    let deleted: DeleteRecordsResponse = call(&mut stream, ApiKey::DeleteRecords, 2, &delete).await;
    assert_eq!(deleted.topics[0].partitions[0].low_watermark, 2);
    assert_eq!(ask(&mut stream, 8, 0, 0).await, (2, 2_000));
    assert_eq!(ask(&mut stream, 8, 4_200, 0).await, (4, 5_000));
    assert_eq!(ask(&mut stream, 8, -3, 0).await, (4, 5_000), "the largest timestamp above the log start");
    // The batch the log start falls in keeps a record whose timestamp is below its header's
    // largest (a deleted record's) and above every other batch's.
    must_create(&node, &service, "clock2", 1).await;
    for batch in
        [timed(rill_records::Compression::None, &[9_000, 8_000]), timed(rill_records::Compression::None, &[5_000])]
    {
        let produced: ProduceResponse =
            call(&mut stream, ApiKey::Produce, 9, &produce_request("clock2", -1, batch)).await;
        assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    }
    let delete_below_1 =
        DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("clock2"))
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(1)])]);
    let deleted: DeleteRecordsResponse = call(&mut stream, ApiKey::DeleteRecords, 2, &delete_below_1).await;
    assert_eq!(deleted.topics[0].partitions[0].low_watermark, 1);
    let largest = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
        .with_name(name("clock2"))
        .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-3)])]);
    let answer: ListOffsetsResponse = call(&mut stream, ApiKey::ListOffsets, 8, &largest).await;
    let p = &answer.topics[0].partitions[0];
    assert_eq!((p.offset, p.timestamp), (1, 8_000), "the largest kept, not the deleted one's batch header");

    // An open transaction's record is found only by read_uncommitted.
    let (pid, epoch) = begin_transaction(&mut stream, "tx-clock", "clock").await;
    let mut batch =
        rill_records::BatchBuilder::new(rill_records::Compression::None).producer(pid.0, epoch, 0).transactional(true);
    batch.push(rill_records::Record { timestamp_ms: 9_000, ..Default::default() }).unwrap();
    let mut produce = produce_request("clock", -1, batch.build().unwrap());
    produce.transactional_id = Some(txn_id("tx-clock"));
    let produced: ProduceResponse = call(&mut stream, ApiKey::Produce, 9, &produce).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(ask(&mut stream, 8, 8_000, 0).await, (7, 9_000), "read_uncommitted");
    assert_eq!(ask(&mut stream, 8, 8_000, 1).await, (-1, -1), "read_committed: beyond the last stable offset");
    assert_eq!(ask(&mut stream, 8, -3, 1).await, (-1, -1), "read_committed: the largest is not yet readable");
    assert_eq!(ask(&mut stream, 8, -3, 0).await, (7, 9_000));
}

/// `OffsetForLeaderEpoch`: the leader's own epoch ends at the high watermark; an epoch newer
/// than the leader's, or none, is undefined (-1, -1); a stale current epoch is fenced; an epoch
/// older than every epoch holding records answers the first offset kept.
#[tokio::test]
async fn leader_epochs_end_where_the_log_says_at_every_version() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
    use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "epochs", 1).await;
    let group = node.meta().topics["epochs"].partitions[0].group;
    let term = node.leadership_of(group).map(|(_, term)| term).unwrap() as i32;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let produced: ProduceResponse =
        call(&mut stream, ApiKey::Produce, 9, &produce_request("epochs", -1, batch(&["a", "b", "c"]))).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let ask = |partition: i32, current_leader_epoch: i32, leader_epoch: i32| {
        OffsetForLeaderPartition::default()
            .with_partition(partition)
            .with_current_leader_epoch(current_leader_epoch)
            .with_leader_epoch(leader_epoch)
    };
    let range = versions::supported(ApiKey::OffsetForLeaderEpoch).unwrap();
    for version in range.min..=range.max {
        let mut got = Vec::new();
        // One request each: a partition may be named once a request.
        for partitions in [
            vec![ask(0, term, term), ask(4, -1, term)],
            vec![ask(0, -1, term + 1)],
            vec![ask(0, -1, -1)],
            vec![ask(0, -1, 0)],
            vec![ask(0, term - 1, term)],
            vec![ask(0, term + 1, term)],
        ] {
            let request = OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                OffsetForLeaderTopic::default().with_topic(name("epochs")).with_partitions(partitions),
            ]);
            let answer: OffsetForLeaderEpochResponse =
                call(&mut stream, ApiKey::OffsetForLeaderEpoch, version, &request).await;
            got.extend(
                answer.topics[0].partitions.iter().map(|p| (p.partition, p.error_code, p.leader_epoch, p.end_offset)),
            );
        }
        assert_eq!(
            got,
            vec![
                (0, 0, term, 3),
                (4, 3, -1, -1),
                (0, 0, -1, -1),
                (0, 0, -1, -1),
                (0, 0, 0, 0),
                (0, 74, -1, -1),
                (0, 75, -1, -1),
            ],
            "v{version}: the leader's epoch (no such partition beside it); newer; none; older than any; FENCED and UNKNOWN_LEADER_EPOCH"
        );
    }
}

#[tokio::test]
async fn a_kip848_member_joins_heartbeats_and_leaves_at_every_version() {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as Owned;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    };

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "orders", 2).await;
    let orders_id = uuid::Uuid::from_bytes(node.meta().topics["orders"].topic_id);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let range = versions::supported(ApiKey::ConsumerGroupHeartbeat).unwrap();
    for version in range.min..=range.max {
        let member = format!("member-{version}");
        let heartbeat = |epoch: i32| {
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(group(&format!("k848-{version}")))
                .with_member_id(StrBytes::from_string(member.clone()))
                .with_member_epoch(epoch)
                .with_rebalance_timeout_ms(-1)
        };
        // A join names everything: the member id the client chose, its subscription, what it owns.
        let join = heartbeat(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![name("orders")]))
            .with_topic_partitions(Some(Vec::new()));
        let joined: ConsumerGroupHeartbeatResponse = call_until(
            &mut stream,
            ApiKey::ConsumerGroupHeartbeat,
            version,
            &join,
            |a: &ConsumerGroupHeartbeatResponse| a.error_code == 0,
        )
        .await;
        assert_eq!(joined.error_code, 0, "v{version}: {joined:?}");
        assert_eq!(joined.member_id.as_deref(), Some(member.as_str()), "v{version}: the client's member id kept");
        assert!(joined.member_epoch >= 1 && joined.heartbeat_interval_ms > 0, "v{version}: {joined:?}");
        let assigned: Vec<(uuid::Uuid, Vec<i32>)> = joined
            .assignment
            .iter()
            .flat_map(|a| a.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())))
            .collect();
        assert_eq!(assigned, vec![(orders_id, vec![0, 1])], "v{version}: the assignment by topic id");

        // It reports owning them: nothing changes.
        let owned = vec![Owned::default().with_topic_id(orders_id).with_partitions(vec![0, 1])];
        let beat: ConsumerGroupHeartbeatResponse = call(
            &mut stream,
            ApiKey::ConsumerGroupHeartbeat,
            version,
            &heartbeat(joined.member_epoch).with_topic_partitions(Some(owned)),
        )
        .await;
        assert_eq!((beat.error_code, beat.member_epoch), (0, joined.member_epoch), "v{version}: {beat:?}");
        let fenced: ConsumerGroupHeartbeatResponse =
            call(&mut stream, ApiKey::ConsumerGroupHeartbeat, version, &heartbeat(joined.member_epoch + 5)).await;
        assert_eq!(fenced.error_code, 110, "v{version}: FENCED_MEMBER_EPOCH for an epoch it never had");
        // Described at the same version of ConsumerGroupDescribe.
        let described: ConsumerGroupDescribeResponse = call(
            &mut stream,
            ApiKey::ConsumerGroupDescribe,
            version,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![group(&format!("k848-{version}")), group("never-was")]),
        )
        .await;
        let [g, unknown] = &described.groups[..] else { panic!("v{version}: {described:?}") };
        assert_eq!(
            (g.error_code, g.group_state.as_str(), g.assignor_name.as_str()),
            (0, "stable", "uniform"),
            "v{version}"
        );
        let [m] = &g.members[..] else { panic!("v{version}: {g:?}") };
        assert_eq!((m.member_id.as_str(), m.member_epoch), (member.as_str(), joined.member_epoch), "v{version}");
        assert_eq!(m.subscribed_topic_names, vec![name("orders")], "v{version}");
        let assigned: Vec<(uuid::Uuid, String, Vec<i32>)> = m
            .assignment
            .topic_partitions
            .iter()
            .map(|t| (t.topic_id, t.topic_name.0.to_string(), t.partitions.clone()))
            .collect();
        assert_eq!(assigned, vec![(orders_id, "orders".to_string(), vec![0, 1])], "v{version}: {m:?}");
        assert_eq!(m.target_assignment, m.assignment, "v{version}: reconciled");
        assert_eq!(m.member_type, if version >= 1 { 1 } else { -1 }, "v{version}");
        assert_eq!(unknown.error_code, 69, "v{version}: GROUP_ID_NOT_FOUND");
        let left: ConsumerGroupHeartbeatResponse =
            call(&mut stream, ApiKey::ConsumerGroupHeartbeat, version, &heartbeat(-1)).await;
        assert_eq!((left.error_code, left.member_epoch), (0, -1), "v{version}: left");
    }
    // v1: a member subscribing by pattern gets every topic whose whole name it matches, and a
    // topic created later that matches at a following heartbeat; describe shows the pattern.
    must_create(&node, &service, "ord", 1).await;
    let by_regex = |epoch: i32| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group("k848-regex"))
            .with_member_id(StrBytes::from_static_str("member-regex"))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(Vec::new()))
            .with_subscribed_topic_regex(Some(StrBytes::from_static_str("ord.+")))
            .with_topic_partitions(Some(Vec::new()))
    };
    let assigned = |a: &ConsumerGroupHeartbeatResponse| -> Vec<(uuid::Uuid, Vec<i32>)> {
        a.assignment
            .iter()
            .flat_map(|a| a.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())))
            .collect()
    };
    let joined: ConsumerGroupHeartbeatResponse = call_until(
        &mut stream,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &by_regex(0),
        |a: &ConsumerGroupHeartbeatResponse| a.error_code == 0,
    )
    .await;
    assert_eq!(assigned(&joined), vec![(orders_id, vec![0, 1])], "orders, not ord: {joined:?}");
    must_create(&node, &service, "orders-eu", 1).await;
    let eu_id = uuid::Uuid::from_bytes(node.meta().topics["orders-eu"].topic_id);
    let owned = vec![Owned::default().with_topic_id(orders_id).with_partitions(vec![0, 1])];
    let beat: ConsumerGroupHeartbeatResponse = call(
        &mut stream,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &by_regex(joined.member_epoch).with_topic_partitions(Some(owned)),
    )
    .await;
    let mut got = assigned(&beat);
    got.sort();
    let mut want = vec![(orders_id, vec![0, 1]), (eu_id, vec![0])];
    want.sort();
    assert_eq!((beat.error_code, got), (0, want), "{beat:?}");
    assert!(beat.member_epoch > joined.member_epoch, "a new epoch for the new topic");
    let described: ConsumerGroupDescribeResponse = call(
        &mut stream,
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group("k848-regex")]),
    )
    .await;
    let member = &described.groups[0].members[0];
    assert_eq!(member.subscribed_topic_regex.as_deref(), Some("ord.+"));
    // A pattern that does not compile: INVALID_REGULAR_EXPRESSION, with the reason.
    let bad = by_regex(0)
        .with_member_id(StrBytes::from_static_str("member-bad-regex"))
        .with_subscribed_topic_regex(Some(StrBytes::from_static_str("ord(")));
    let refused: ConsumerGroupHeartbeatResponse = call(&mut stream, ApiKey::ConsumerGroupHeartbeat, 1, &bad).await;
    assert_eq!(refused.error_code, 128, "{refused:?}");
    assert!(refused.error_message.as_deref().is_some_and(|m| m.contains("ord(")), "{refused:?}");

    // A KIP-848 member learns its assignment's topics by id (Metadata v10+).
    let by_id = |id: uuid::Uuid| MetadataRequestTopic::default().with_topic_id(id);
    let unknown = uuid::Uuid::from_bytes([7; 16]);
    let answer: MetadataResponse = call(
        &mut stream,
        ApiKey::Metadata,
        12,
        // An empty name, as some clients send beside an id, and a null one, as librdkafka does.
        &MetadataRequest::default().with_topics(Some(vec![by_id(orders_id), by_id(unknown).with_name(None)])),
    )
    .await;
    let topics: Vec<(Option<String>, uuid::Uuid, i16, usize)> = answer
        .topics
        .iter()
        .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id, t.error_code, t.partitions.len()))
        .collect();
    assert_eq!(topics, vec![(Some("orders".into()), orders_id, 0, 2), (None, unknown, 100, 0)]);
}

#[tokio::test]
async fn metadata_creates_unknown_topics_only_when_the_node_and_the_request_allow_it() {
    let named = |names: &[&str]| {
        let topics = names.iter().map(|n| MetadataRequestTopic::default().with_name(Some(name(n)))).collect();
        MetadataRequest::default().with_topics(Some(topics))
    };
    let codes = |answer: &MetadataResponse| -> Vec<(String, i16, usize)> {
        answer
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(), t.error_code, t.partitions.len()))
            .collect()
    };

    // The default: off, whatever the request says.
    let (_node, _service, addr) = node_with_kafka().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let answer: MetadataResponse = call(&mut stream, ApiKey::Metadata, 12, &named(&["fresh"])).await;
    assert_eq!(codes(&answer), vec![("fresh".to_string(), 3, 0)], "UNKNOWN_TOPIC_OR_PARTITION");

    let (node, _service, addr) = node_with_kafka_auto_creating(true).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // Not allowed by the request (v4+): not created.
    let answer: MetadataResponse =
        call(&mut stream, ApiKey::Metadata, 12, &named(&["kept-out"]).with_allow_auto_topic_creation(false)).await;
    assert_eq!(codes(&answer), vec![("kept-out".to_string(), 3, 0)]);
    // Allowed (and always before v4): created with the defaults (`default-partitions` 2 here),
    // its leaders elected soon after.
    for (version, topic) in [(12, "fresh"), (3, "fresh-v3")] {
        let answer: MetadataResponse =
            call_until(&mut stream, ApiKey::Metadata, version, &named(&[topic]), |a: &MetadataResponse| {
                a.topics.iter().all(|t| t.error_code == 0 && t.partitions.iter().all(|p| p.error_code == 0))
            })
            .await;
        assert_eq!(codes(&answer), vec![(topic.to_string(), 0, 2)], "v{version}");
        assert!(node.meta().topics.contains_key(topic), "v{version}");
    }
    // A name that cannot be a topic is not created: INVALID_TOPIC_EXCEPTION, which clients do
    // not wait out.
    let answer: MetadataResponse = call(&mut stream, ApiKey::Metadata, 12, &named(&["no spaces"])).await;
    assert_eq!(codes(&answer), vec![("no spaces".to_string(), 17, 0)]);
    assert!(!node.meta().topics.contains_key("no spaces"));
}

#[tokio::test]
async fn a_batch_refused_for_some_of_its_records_names_them_from_v8() {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

    let (node, service, addr) = node_with_kafka().await;
    must_create(&node, &service, "prices", 1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let compact = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("prices"))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_static_str("cleanup.policy"))
            .with_value(Some(StrBytes::from_static_str("compact")))])]);
    let altered: IncrementalAlterConfigsResponse =
        call(&mut stream, ApiKey::IncrementalAlterConfigs, 1, &compact).await;
    assert_eq!(altered.responses[0].error_code, 0);
    let group = node.meta().topics["prices"].partitions[0].group;
    must_reach("the partition compacted", || async {
        node.partition_by_group(group).is_some_and(|p| p.config().compacted())
    })
    .await;

    // Records 1 and 3 of four have no key: the batch is refused whole, naming them.
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    for key in [Some("a"), None, Some("b"), None] {
        let record = rill_records::Record {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::from_static(b"v")),
            ..Default::default()
        };
        builder.push(record).unwrap();
    }
    let records = builder.build().unwrap();
    for version in versions::PRODUCE_MIN_ANSWERED..=versions::supported(ApiKey::Produce).unwrap().max {
        let answer: ProduceResponse =
            call(&mut stream, ApiKey::Produce, version, &produce_request("prices", -1, records.clone())).await;
        let p = &answer.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 87, "v{version}: INVALID_RECORD");
        let named: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        let expected: &[i32] = if version >= 8 { &[1, 3] } else { &[] };
        assert_eq!(named, expected, "v{version}: {p:?}");
        assert!(
            p.record_errors.iter().all(|e| e.batch_index_error_message.as_deref().is_some_and(|m| m.contains("key"))),
            "v{version}: {p:?}"
        );
    }
    let fetched: FetchResponse = call(&mut stream, ApiKey::Fetch, 12, &fetch_request("prices", 0, 0)).await;
    assert_eq!(fetched.responses[0].partitions[0].high_watermark, 0, "nothing of the batch was stored");
}

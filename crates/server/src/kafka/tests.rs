//! The Kafka listener on a running one-node cluster (in memory), spoken to over TCP as a Kafka
//! client does: every advertised (API, version) round-trips, answers come back in request
//! order, and hostile frames close their connection with bounded memory while the node serves
//! on. (Real builds: the simulation has no Kafka listener.)
#![cfg(not(madsim))]

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse, ProduceRequest, RequestHeader,
    ResponseHeader, TopicName,
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (node, _coordinators, service) = one_node_with(|config| {
        config.kafka =
            Some(KafkaListener { listen: addr, advertise: addr.to_string(), max_request_bytes: MAX_REQUEST_BYTES });
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
    let produce = request(ApiKey::Produce, 9, 1, &ProduceRequest::default()).to_vec();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a 2^31-element array", raw(&huge_array)),
        ("a 2^32-element compact array", raw(&huge_compact)),
        ("a frame over the limit", (MAX_REQUEST_BYTES as i32 + 1).to_be_bytes().to_vec()),
        ("a negative frame length", (-5i32).to_be_bytes().to_vec()),
        ("a frame shorter than a header", raw(&[0, 18, 0])),
        ("an unknown API key", raw(&unknown_api)),
        ("a version not advertised", unsupported_version),
        ("an API not advertised", produce),
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

//! Bad input gets a clear per-partition error and never damages what is stored.

use bytes::Bytes;
use rill_client::client::build_batch_for;
use rill_client::{Acks, Compression, ErrorCode, Record};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    FetchPartition, FetchRequest, FetchTopic, PartitionProduce, PartitionProduceResult, ProduceRequest, TopicProduce,
};

use crate::harness::{init_logs, read_all, text, TestCluster};

fn batch_of(values: &[&str]) -> Bytes {
    build_batch_for(values.iter().map(|v| Record::new(v.to_string())).collect(), Compression::None, None)
        .expect("build")
}

/// `batch` with `bytes` written at `at`, its length field and CRC-32C made consistent again (as
/// a careful liar would).
fn rewritten(batch: &Bytes, at: usize, bytes: &[u8]) -> Bytes {
    let mut v = batch.to_vec();
    if at + bytes.len() > v.len() {
        v.resize(at + bytes.len(), 0);
    }
    v[at..at + bytes.len()].copy_from_slice(bytes);
    let len = (v.len() - 12) as i32;
    v[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    v.into()
}

/// Offsets of fields in Kafka's batch header.
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const RECORD_COUNT: usize = 57;
const RECORDS: usize = 61;

async fn raw_produce(
    addr: &str,
    topic: &str,
    partition: u32,
    acks: i32,
    batch: Bytes,
) -> anyhow::Result<PartitionProduceResult> {
    let mut c = RecordsClient::connect(format!("http://{addr}")).await?;
    let req = ProduceRequest {
        acks,
        timeout_ms: 10_000,
        topics: vec![TopicProduce {
            topic: topic.into(),
            partitions: vec![PartitionProduce { partition, batch }],
            topic_id: Bytes::new(),
        }],
        ..Default::default()
    };
    let resp = c.produce(req).await?.into_inner();
    Ok(resp.topics[0].partitions[0].clone())
}

fn code(r: &PartitionProduceResult) -> ErrorCode {
    ErrorCode::try_from(r.error_code).expect("known code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_data_is_intact() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster.create_topic(&client, "guarded", 2, 3, &[("max.message.bytes", "1000")]).await?;
    client.produce("guarded", 0, vec![Record::new("good-1"), Record::new("good-2")], Acks::All).await?;
    let leader = d.partitions[0].leader.expect("leader");
    let addr = cluster.addr(leader);

    tracing::info!("--- oversized batch");
    let big = "x".repeat(2000);
    let r = raw_produce(&addr, "guarded", 0, 0, batch_of(&[&big])).await?;
    assert_eq!(code(&r), ErrorCode::MessageTooLarge, "{}", r.error_message);
    assert!(r.error_message.contains("max.message.bytes=1000"), "{}", r.error_message);

    tracing::info!("--- unknown topic, partition out of range");
    let r = raw_produce(&addr, "nope", 0, 0, batch_of(&["v"])).await?;
    assert_eq!(code(&r), ErrorCode::UnknownTopicOrPartition);
    assert!(r.error_message.contains("unknown topic"), "{}", r.error_message);
    let r = raw_produce(&addr, "guarded", 7, 0, batch_of(&["v"])).await?;
    assert_eq!(code(&r), ErrorCode::UnknownTopicOrPartition);
    assert!(r.error_message.contains("has 2 partition(s)"), "{}", r.error_message);

    tracing::info!("--- malformed fields");
    let r = raw_produce(&addr, "guarded", 0, 0, Bytes::new()).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRequest, "{}", r.error_message);
    let r = raw_produce(&addr, "guarded", 0, 99, batch_of(&["v"])).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRequiredAcks, "{}", r.error_message);

    tracing::info!("--- damaged and lying batches");
    let good = batch_of(&["one"]);
    let mut flipped = good.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let r = raw_produce(&addr, "guarded", 0, 0, flipped.into()).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "{}", r.error_message);
    assert!(r.error_message.contains("checksum"), "{}", r.error_message);
    let r = raw_produce(&addr, "guarded", 0, 0, rewritten(&good, RECORD_COUNT, &5i32.to_be_bytes())).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "lying count: {}", r.error_message);
    let garbage = rewritten(&good.slice(..RECORDS), RECORDS, &[0xff, 0xff, 0xff]);
    let r = raw_produce(&addr, "guarded", 0, 0, garbage).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "garbage records: {}", r.error_message);
    let r = raw_produce(&addr, "guarded", 0, 0, rewritten(&good, ATTRIBUTES, &7i16.to_be_bytes())).await?;
    assert_eq!(code(&r), ErrorCode::UnsupportedCompressionType, "{}", r.error_message);
    let mut twice = good.to_vec();
    twice.extend_from_slice(&good);
    let r = raw_produce(&addr, "guarded", 0, 0, twice.into()).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "two batches in one: {}", r.error_message);
    let two = batch_of(&["a", "b"]);
    let r = raw_produce(&addr, "guarded", 0, 0, rewritten(&two, LAST_OFFSET_DELTA, &5i32.to_be_bytes())).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRecord, "offsets not dense: {}", r.error_message);

    tracing::info!("--- what only the cluster may write, and producer fields out of range");
    let control = rewritten(&good, ATTRIBUTES, &0x30i16.to_be_bytes());
    let r = raw_produce(&addr, "guarded", 0, 0, control).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRecord, "control batch: {}", r.error_message);
    let transactional = rewritten(&good, ATTRIBUTES, &0x10i16.to_be_bytes());
    let r = raw_produce(&addr, "guarded", 0, 0, transactional).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRequest, "transactional batch: {}", r.error_message);
    assert!(r.error_message.contains("transactional_id"), "{}", r.error_message);
    let (pid, _) = client.init_producer_id().await?;
    let negative_seq = build_batch_for(vec![Record::new("n")], Compression::None, Some((pid, 0, -5)))?;
    let r = raw_produce(&addr, "guarded", 0, 0, negative_seq).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRecord, "negative sequence: {}", r.error_message);

    tracing::info!("--- fetch out of range");
    let mut c = RecordsClient::connect(format!("http://{addr}")).await?;
    for offset in [-5, 1_000_000] {
        let resp = c
            .fetch(FetchRequest {
                max_wait_ms: 0,
                max_bytes: 0,
                topics: vec![FetchTopic {
                    topic: "guarded".into(),
                    partitions: vec![FetchPartition { partition: 0, fetch_offset: offset, max_bytes: 0 }],
                    topic_id: Bytes::new(),
                }],
                isolation_level: 0,
            })
            .await?
            .into_inner();
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.error_code, ErrorCode::OffsetOutOfRange as i32, "offset {offset}: {}", p.error_message);
    }

    tracing::info!("--- an unknown isolation level is refused, naming the levels");
    let status = c
        .fetch(FetchRequest {
            topics: vec![FetchTopic {
                topic: "guarded".into(),
                partitions: vec![FetchPartition { partition: 0, fetch_offset: 0, max_bytes: 0 }],
                topic_id: Bytes::new(),
            }],
            isolation_level: 7,
            ..Default::default()
        })
        .await
        .expect_err("an unknown isolation level");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", status.message());
    assert!(status.message().contains("READ_COMMITTED"), "{}", status.message());

    tracing::info!("--- bad topic creations");
    for (name, p, rf, want) in [
        ("bad name", 1, 1, ErrorCode::InvalidTopic),
        ("guarded", 1, 1, ErrorCode::TopicAlreadyExists),
        ("zero", 0, 1, ErrorCode::InvalidPartitions),
        ("wide", 1, 4, ErrorCode::InvalidReplicationFactor),
    ] {
        let err = client.create_topic(name, p, rf, &[]).await.expect_err("must fail");
        assert_eq!(err.code(), Some(want), "{name}: {err}");
    }
    let err =
        client.create_topic("cfg", 1, 3, &[("min.insync.replicas".into(), "9".into())]).await.expect_err("must fail");
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig), "{err}");

    tracing::info!("--- nothing stored was damaged, and the partition still takes writes");
    let ack = client.produce("guarded", 0, vec![Record::new("good-3")], Acks::All).await?;
    assert_eq!(ack.base_offset, Some(2));
    let values: Vec<String> = read_all(&client, "guarded", 0).await?.iter().map(|r| text(&r.value)).collect();
    assert_eq!(values, vec!["good-1", "good-2", "good-3"]);
    Ok(())
}

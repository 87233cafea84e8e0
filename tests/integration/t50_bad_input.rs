//! Bad input gets a clear per-partition error and never damages what is stored.

use bytes::Bytes;
use rill_client::{Acks, ErrorCode, Record};
use rill_proto::batch;
use rill_proto::common::{Compression, RecordBatch};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    FetchPartition, FetchRequest, FetchTopic, PartitionProduce, PartitionProduceResult, ProduceRequest, TopicProduce,
};

use crate::harness::{init_logs, read_all, TestCluster};

fn batch_of(values: &[&str]) -> RecordBatch {
    let records = values
        .iter()
        .map(|v| rill_proto::common::Record {
            timestamp_ms: 1,
            key: None,
            value: Bytes::copy_from_slice(v.as_bytes()),
            headers: vec![],
        })
        .collect();
    batch::build(records, Compression::None).expect("build")
}

async fn raw_produce(
    addr: &str,
    topic: &str,
    partition: u32,
    acks: i32,
    batch: Option<RecordBatch>,
) -> anyhow::Result<PartitionProduceResult> {
    let mut c = RecordsClient::connect(format!("http://{addr}")).await?;
    let req = ProduceRequest {
        acks,
        timeout_ms: 10_000,
        topics: vec![TopicProduce { topic: topic.into(), partitions: vec![PartitionProduce { partition, batch }] }],
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
    let r = raw_produce(&addr, "guarded", 0, 0, Some(batch_of(&[&big]))).await?;
    assert_eq!(code(&r), ErrorCode::MessageTooLarge, "{}", r.error_message);
    assert!(r.error_message.contains("max.message.bytes=1000"), "{}", r.error_message);

    tracing::info!("--- unknown topic, partition out of range");
    let r = raw_produce(&addr, "nope", 0, 0, Some(batch_of(&["v"]))).await?;
    assert_eq!(code(&r), ErrorCode::UnknownTopicOrPartition);
    assert!(r.error_message.contains("unknown topic"), "{}", r.error_message);
    let r = raw_produce(&addr, "guarded", 7, 0, Some(batch_of(&["v"]))).await?;
    assert_eq!(code(&r), ErrorCode::UnknownTopicOrPartition);
    assert!(r.error_message.contains("has 2 partition(s)"), "{}", r.error_message);

    tracing::info!("--- malformed fields");
    let r = raw_produce(&addr, "guarded", 0, 0, None).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRequest, "{}", r.error_message);
    let r = raw_produce(&addr, "guarded", 0, 99, Some(batch_of(&["v"]))).await?;
    assert_eq!(code(&r), ErrorCode::InvalidRequiredAcks, "{}", r.error_message);
    let mut corrupt = batch_of(&["tampered"]);
    corrupt.crc32c ^= 1;
    let r = raw_produce(&addr, "guarded", 0, 0, Some(corrupt)).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "{}", r.error_message);
    let mut lying = batch_of(&["one"]);
    lying.record_count = 5;
    lying.crc32c = batch::checksum(&lying);
    let r = raw_produce(&addr, "guarded", 0, 0, Some(lying)).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "{}", r.error_message);
    let mut garbage = batch_of(&["x"]);
    garbage.records = Bytes::from_static(&[0xff, 0xff, 0xff]);
    garbage.crc32c = batch::checksum(&garbage);
    let r = raw_produce(&addr, "guarded", 0, 0, Some(garbage)).await?;
    assert_eq!(code(&r), ErrorCode::CorruptMessage, "{}", r.error_message);
    let mut codec = batch_of(&["x"]);
    codec.compression = 42;
    codec.crc32c = batch::checksum(&codec);
    let r = raw_produce(&addr, "guarded", 0, 0, Some(codec)).await?;
    assert_eq!(code(&r), ErrorCode::UnsupportedCompressionType, "{}", r.error_message);

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
                }],
            })
            .await?
            .into_inner();
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.error_code, ErrorCode::OffsetOutOfRange as i32, "offset {offset}: {}", p.error_message);
    }

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
    let values: Vec<Bytes> = read_all(&client, "guarded", 0).await?.into_iter().map(|r| r.value).collect();
    assert_eq!(values, vec![Bytes::from("good-1"), Bytes::from("good-2"), Bytes::from("good-3")]);
    Ok(())
}

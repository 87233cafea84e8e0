//! Requests built to hurt a node: a compression bomb, requests that repeat one entry to amplify
//! the answer, more entries than a request may name, a producer id nobody issued. Each is refused
//! with its code, costs the node little memory, and leaves the stored records as they were.

use bytes::Bytes;
use rill_client::client::build_batch_for;
use rill_client::{Acks, Compression, ErrorCode, Record};
use rill_proto::admin::admin_client::AdminClient;
use rill_proto::admin::MetadataRequest;
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    FetchPartition, FetchRequest, FetchTopic, IsolationLevel, ListOffsetsRequest, ListOffsetsTopic, OffsetSpec,
    PartitionProduce, PartitionProduceResult, ProduceRequest, TopicProduce,
};

use crate::harness::{init_logs, read_all, text, TestCluster};

/// Offsets of fields in Kafka's batch header.
const LAST_OFFSET_DELTA: usize = 23;
const RECORD_COUNT: usize = 57;
const RECORDS: usize = 61;

/// Appends `v` as a zigzag varint (Kafka's record fields).
fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A batch of `count` empty records (null key, null value: the smallest a record can be),
/// LZ4-compressed as Kafka frames them; length and CRC-32C consistent, offsets dense — every
/// record valid, so only a bound on the decompressed size can stop it.
fn lz4_bomb(count: i32) -> anyhow::Result<Bytes> {
    let mut plain = Vec::new();
    for i in 0..count {
        let mut body = vec![0u8]; // attributes
        put_varint(&mut body, 0); // timestamp delta
        put_varint(&mut body, i64::from(i)); // offset delta
        put_varint(&mut body, -1); // null key
        put_varint(&mut body, -1); // null value
        put_varint(&mut body, 0); // no headers
        put_varint(&mut plain, body.len() as i64);
        plain.extend_from_slice(&body);
    }
    let template = build_batch_for(vec![Record::new("x")], Compression::Lz4, None)?;
    let mut v = template[..RECORDS].to_vec();
    v.extend_from_slice(&Compression::Lz4.compress(&plain)?);
    v[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(count - 1).to_be_bytes());
    v[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    let len = (v.len() - 12) as i32;
    v[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(v.into())
}

/// Peak resident memory of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}

async fn produce_raw(addr: &str, topic: &str, partition: u32, batch: Bytes) -> anyhow::Result<PartitionProduceResult> {
    let mut c = RecordsClient::connect(format!("http://{addr}")).await?.max_decoding_message_size(64 << 20);
    let req = ProduceRequest {
        acks: 0, // ALL
        timeout_ms: 10_000,
        topics: vec![TopicProduce {
            topic: topic.into(),
            partitions: vec![PartitionProduce { partition, batch }],
            topic_id: Bytes::new(),
        }],
        ..Default::default()
    };
    Ok(c.produce(req).await?.into_inner().topics[0].partitions[0].clone())
}

fn code(raw: i32) -> ErrorCode {
    ErrorCode::try_from(raw).expect("a known code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_cheaply() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster.create_topic(&client, "target", 2, 3, &[]).await?;
    client.produce("target", 0, vec![Record::new("kept-1"), Record::new("kept-2")], Acks::All).await?;
    let leader = d.partitions[0].leader.expect("leader");
    let addr = cluster.addr(leader);
    let pid = cluster.local().pid(leader).expect("the leader runs");

    tracing::info!("--- an LZ4 bomb: 200,000 valid empty records, about 1.8 MiB inflated, under 1 MiB as sent");
    let bomb = lz4_bomb(200_000)?;
    assert!(bomb.len() < 1 << 20, "the bomb must pass the size check as sent ({} bytes)", bomb.len());
    let peak_before = peak_rss(pid)?;
    let r = produce_raw(&addr, "target", 0, bomb).await?;
    assert_eq!(code(r.error_code), ErrorCode::MessageTooLarge, "{}", r.error_message);
    let grew = peak_rss(pid)?.saturating_sub(peak_before);
    assert!(grew < 32 << 20, "the bomb raised the leader's peak memory by {} MiB", grew >> 20);

    tracing::info!("--- Metadata naming one topic 5,000 times is answered once; 200,000 times, refused");
    let mut admin = AdminClient::connect(format!("http://{addr}")).await?;
    let resp = admin.metadata(MetadataRequest { topics: vec!["target".to_string(); 5_000] }).await?.into_inner();
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].partitions.len(), 2);
    let status =
        admin.metadata(MetadataRequest { topics: vec!["target".to_string(); 200_000] }).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", status.message());

    tracing::info!("--- repeated partitions in Fetch and ListOffsets: the repeat is refused");
    let mut records = RecordsClient::connect(format!("http://{addr}")).await?;
    let fetch = |copies: usize| FetchRequest {
        max_wait_ms: 0,
        max_bytes: 0,
        topics: vec![FetchTopic {
            topic: "target".into(),
            partitions: vec![FetchPartition { partition: 0, fetch_offset: 0, max_bytes: 0 }; copies],
            topic_id: Bytes::new(),
        }],
        isolation_level: IsolationLevel::ReadUncommitted as i32,
    };
    let resp = records.fetch(fetch(3)).await?.into_inner();
    let parts = &resp.topics[0].partitions;
    assert_eq!(code(parts[0].error_code), ErrorCode::None, "{}", parts[0].error_message);
    assert_eq!(parts[0].batches.len(), 1);
    for p in &parts[1..] {
        assert_eq!(code(p.error_code), ErrorCode::InvalidRequest, "{}", p.error_message);
        assert!(p.batches.is_empty() && p.error_message.contains("appears twice"), "{}", p.error_message);
    }
    let list = |copies: usize| ListOffsetsRequest {
        spec: OffsetSpec::Latest as i32,
        topics: vec![ListOffsetsTopic { topic: "target".into(), partitions: vec![0; copies] }],
        timestamp_ms: 0,
        isolation_level: IsolationLevel::ReadCommitted as i32,
    };
    let resp = records.list_offsets(list(2)).await?.into_inner();
    let parts = &resp.topics[0].partitions;
    assert_eq!((code(parts[0].error_code), parts[0].offset), (ErrorCode::None, 2));
    assert_eq!(code(parts[1].error_code), ErrorCode::InvalidRequest, "{}", parts[1].error_message);

    tracing::info!("--- more entries than one request may name: refused whole");
    let status = records.list_offsets(list(100_001)).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", status.message());
    assert!(status.message().contains("at most 100000"), "{}", status.message());
    let status = records.fetch(fetch(100_001)).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", status.message());

    tracing::info!("--- a producer id the cluster never issued");
    let made_up = build_batch_for(vec![Record::new("forged")], Compression::None, Some((1 << 40, 0, 0)))?;
    let r = produce_raw(&addr, "target", 0, made_up).await?;
    assert_eq!(code(r.error_code), ErrorCode::UnknownProducerId, "{}", r.error_message);
    let (issued, epoch) = client.init_producer_id().await?;
    let real = build_batch_for(vec![Record::new("kept-3")], Compression::None, Some((issued, epoch, 0)))?;
    let r = produce_raw(&addr, "target", 0, real).await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "an issued id is accepted: {}", r.error_message);

    tracing::info!("--- the stored records are as written, every node is up");
    let stored: Vec<String> = read_all(&client, "target", 0).await?.iter().map(|r| text(&r.value)).collect();
    assert_eq!(stored, ["kept-1", "kept-2", "kept-3"]);
    for id in 1..=3 {
        assert!(cluster.local().is_running(id), "node {id} stopped:\n{}", cluster.log_tail(id));
    }
    Ok(())
}

//! A data directory written by an earlier build (`tests/fixtures/data-dir-v1`, see
//! `tests/fixtures/content.rs`) opens with today's code, and everything in it reads back: every
//! topic with its id, kind and config, every record with its key, value, headers and create
//! time, the idempotent producer's state (a retry of its last batch is recognised), both
//! coordinators' state (committed offsets, one group's from a snapshot behind a purged log; a
//! transactional id's epoch), and a deleted topic stays deleted. The copy it opens is then
//! written to, as a cluster upgraded in place would be.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rill_client::client::build_batch_for;
use rill_client::{Acks, Compression, ErrorCode, ReceivedRecord, Record, TopicPartition};

use crate::harness::{init_logs, read_all, TestCluster};

#[path = "../fixtures/content.rs"]
mod content;
use content::*;

const TIMEOUT: Duration = Duration::from_secs(10);

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

/// What a record read back must equal: what was produced, at the next offset.
fn assert_records(got: &[ReceivedRecord], want: &[Record], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: record count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let seen = (&g.key, &g.value, &g.headers, g.timestamp_ms);
        assert_eq!(seen, (&w.key, &w.value, &w.headers, w.timestamp_ms), "{what}: record {i}");
        assert_eq!(g.offset, i as u64, "{what}: offsets stay dense");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_the_first_versioned_formats_opens_and_reads_back() -> anyhow::Result<()> {
    init_logs();
    let dir = fixture(V1_DIR);
    let expected: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(EXPECTED_FILE))?)?;
    let cluster = TestCluster::start_with(1, &[], Some(&dir)).await?;
    let client = cluster.client().await?;

    tracing::info!("--- topics: names, ids, kinds, partition counts, configs");
    let mut topics: BTreeMap<String, (String, u32, bool)> = BTreeMap::new();
    for t in client.list_topics_with(true).await? {
        topics.insert(t.name, (hex(&t.topic_id), t.partitions, t.internal));
    }
    let id = |name: &str| expected["topic_ids"][name].as_str().unwrap_or_default().to_string();
    let want: BTreeMap<String, (String, u32, bool)> = [
        (OFFSETS_TOPIC, INTERNAL_PARTITIONS, true),
        (TRANSACTIONS_TOPIC, INTERNAL_PARTITIONS, true),
        (BULK, 1, false),
        (GROWN, 2, false),
        (ORDERS, ORDERS_PARTITIONS, false),
    ]
    .into_iter()
    .map(|(name, partitions, internal)| (name.to_string(), (id(name), partitions, internal)))
    .collect();
    assert_eq!(topics, want, "every topic, with the id it was created with; {GONE} stays deleted");
    let orders = cluster.wait_for_leaders(&client, ORDERS).await?;
    for (key, value) in ORDERS_CONFIGS {
        let got = orders.configs.iter().find(|c| c.key == *key).map(|c| c.value.as_str());
        assert_eq!(got, Some(*value), "config {key}");
    }
    let offsets = client.describe_topic(OFFSETS_TOPIC).await?;
    assert_eq!(offsets.kind, "consumer-offsets");
    let err = client.describe_topic(GONE).await.expect_err("deleted");
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition), "{err}");

    tracing::info!("--- every record");
    let plain: Vec<Record> = plain_batches().into_iter().flat_map(|(_, records)| records).collect();
    assert_records(&read_all(&client, ORDERS, 0).await?, &plain, "orders/0 (every codec)");
    let idempotent: Vec<Record> = idempotent_batches().into_iter().flatten().collect();
    assert_records(&read_all(&client, ORDERS, 1).await?, &idempotent, "orders/1 (idempotent)");
    assert_records(&read_all(&client, ORDERS, 2).await?, &[], "orders/2");
    for p in 0..2 {
        cluster.wait_for_leaders(&client, GROWN).await?;
        assert_records(&read_all(&client, GROWN, p).await?, &[grown_record(p)], "grown");
    }
    cluster.wait_for_leaders(&client, BULK).await?;
    let bulk: Vec<Record> = (0..BULK_RECORDS).map(bulk_record).collect();
    assert_records(&read_all(&client, BULK, 0).await?, &bulk, "bulk (past a state machine snapshot)");

    tracing::info!("--- the idempotent producer's state: its last batch, resent, is recognised");
    let producer_id = expected["idempotent_producer"]["producer_id"].as_i64().unwrap_or(-1);
    let epoch = expected["idempotent_producer"]["epoch"].as_i64().unwrap_or(-1) as i16;
    let next_sequence = expected["idempotent_producer"]["next_sequence"].as_i64().unwrap_or(-1) as i32;
    let batches = idempotent_batches();
    let last = batches.last().cloned().unwrap_or_default();
    let last_sequence = next_sequence - last.len() as i32;
    let resent = build_batch_for(last.clone(), Compression::None, Some((producer_id, epoch, last_sequence)))?;
    let ack = client.produce_batch(ORDERS, 1, resent, Acks::All, TIMEOUT).await?;
    assert_eq!(ack.base_offset, Some((idempotent.len() - last.len()) as u64), "answered with its original offset");
    let more = vec![Record::new("after reopening")];
    let next = build_batch_for(more.clone(), Compression::None, Some((producer_id, epoch, next_sequence)))?;
    let ack = client.produce_batch(ORDERS, 1, next, Acks::All, TIMEOUT).await?;
    assert_eq!(ack.base_offset, Some(idempotent.len() as u64), "the next sequence is appended, once");
    let skipped = build_batch_for(more, Compression::None, Some((producer_id, epoch, next_sequence + 5)))?;
    let err = client.produce_batch(ORDERS, 1, skipped, Acks::All, TIMEOUT).await.expect_err("a gap");
    assert_eq!(err.code(), Some(ErrorCode::OutOfOrderSequenceNumber), "{err}");

    tracing::info!("--- the coordinators' state");
    let billing = billing_offsets();
    let tps: Vec<TopicPartition> = billing.iter().map(|(t, p, _, _)| TopicPartition::new(*t, *p)).collect();
    let got = client.committed_offsets(BILLING_GROUP, &tps).await?;
    for (t, p, offset, metadata) in billing {
        let c = got.get(&TopicPartition::new(t, p)).cloned().flatten();
        assert_eq!(c.map(|c| (c.offset, c.metadata)), Some((offset, metadata.to_string())), "{t}/{p}");
    }
    let (t, p, last_offset) = busy_commit(BUSY_COMMITS - 1);
    let got = client.committed_offsets(BUSY_GROUP, &[TopicPartition::new(t, p)]).await?;
    let busy = got.get(&TopicPartition::new(t, p)).cloned().flatten().map(|c| c.offset);
    assert_eq!(busy, Some(last_offset), "the busy group's last commit (its partition's state is in a snapshot)");
    let txn_producer_id = expected["transactional_producer"]["producer_id"].as_i64().unwrap_or(-1);
    let txn_epoch = expected["transactional_producer"]["epoch"].as_i64().unwrap_or(-1) as i16;
    let again = client.init_transactional_producer(TRANSACTIONAL_ID, 0).await?;
    assert_eq!(again, (txn_producer_id, txn_epoch + 1), "the transactional id keeps its producer id, one epoch up");

    tracing::info!("--- the reopened directory takes writes");
    client.produce(ORDERS, 2, vec![Record::new("new")], Acks::All).await?;
    assert_eq!(read_all(&client, ORDERS, 2).await?.len(), 1);
    client.commit_offsets(BILLING_GROUP, &[(TopicPartition::new(ORDERS, 2), 1, String::new())]).await?;
    Ok(())
}

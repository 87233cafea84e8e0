//! Writes a fixture data directory: `cargo build --bins && cargo run -p rill-tests --example
//! write_fixture [-- NAME]` starts one real `rill-server`, writes what `tests/fixtures/content.rs`
//! defines, stops the node gracefully and copies its data directory to `tests/fixtures/NAME/`
//! (default: the current version's name), with `expected.json` beside it.
//!
//! A fixture is written once, when a format version is introduced, and never rewritten: the
//! `t05_fixture` test opens it with today's code, which is the whole point. A new format
//! version gets a new directory; the old ones keep opening (or are migrated, tested).

#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fixtures/content.rs"]
mod content;
#[path = "../integration/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use rill_client::client::build_batch_for;
use rill_client::{Acks, Client, Compression, TopicPartition};
use serde_json::json;

use content::*;
use harness::{copy_dir, TestCluster};

const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let name = std::env::args().nth(1).unwrap_or_else(|| V1_DIR.to_string());
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(&name);
    if out.exists() {
        bail!("{} exists: a fixture is never rewritten (a new format version gets a new directory)", out.display());
    }
    let partitions = INTERNAL_PARTITIONS.to_string();
    let env = [
        ("RILL_CONSUMER_OFFSETS_PARTITIONS", partitions.as_str()),
        ("RILL_TRANSACTION_STATE_PARTITIONS", partitions.as_str()),
        // openraft's own lines say when snapshots are built and logs purged.
        ("RILL_LOG_LEVEL", "info,openraft=info"),
    ];
    let mut cluster = TestCluster::start_with(1, &env, None).await?;
    let client = cluster.client().await?;
    let expected = write(&cluster, &client).await.with_context(|| cluster.log_tails())?;

    let stopped = cluster.local().stop_all(Duration::from_secs(30));
    if stopped.iter().any(|(_, status)| !status.is_some_and(|s| s.success())) {
        bail!("the node did not stop cleanly: {stopped:?}\n{}", cluster.log_tails());
    }
    let log = cluster.log_text(1);
    println!("snapshot lines in the node's log:");
    for line in log.lines().filter(|l| l.contains("snapshot") || l.contains("purge")).take(20) {
        println!("  {line}");
    }
    let data = cluster.local().data_dir(1).context("node 1's data directory")?.to_path_buf();
    copy_dir(&data, &out.join("node-1"))?;
    remove_info_logs(&out.join("node-1"))?;
    std::fs::write(out.join(EXPECTED_FILE), serde_json::to_string_pretty(&expected)? + "\n")?;
    println!("wrote {}", out.display());
    Ok(())
}

async fn write(cluster: &TestCluster, client: &Client) -> anyhow::Result<serde_json::Value> {
    let configs: Vec<(String, String)> = ORDERS_CONFIGS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    client.create_topic(ORDERS, ORDERS_PARTITIONS, 1, &configs).await?;
    cluster.wait_for_leaders(client, ORDERS).await?;
    for (codec, records) in plain_batches() {
        client.produce_with(ORDERS, 0, records, Acks::All, codec, TIMEOUT).await?;
    }
    let (producer_id, epoch) = client.init_producer_id().await?;
    let mut sequence = 0;
    for records in idempotent_batches() {
        let n = records.len() as i32;
        let batch = build_batch_for(records, Compression::None, Some((producer_id, epoch, sequence)))?;
        client.produce_batch(ORDERS, 1, batch, Acks::All, TIMEOUT).await?;
        sequence += n;
    }

    client.create_topic(GROWN, 1, 1, &[]).await?;
    cluster.wait_for_leaders(client, GROWN).await?;
    client.produce(GROWN, 0, vec![grown_record(0)], Acks::All).await?;
    client.create_partitions(GROWN, 2).await?;
    cluster.wait_for_leaders(client, GROWN).await?;
    client.produce(GROWN, 1, vec![grown_record(1)], Acks::All).await?;

    client.create_topic(GONE, 1, 1, &[]).await?;
    cluster.wait_for_leaders(client, GONE).await?;
    client.produce(GONE, 0, vec![grown_record(0)], Acks::All).await?;
    client.delete_topic(GONE).await?;

    client.create_topic(BULK, 1, 1, &[]).await?;
    cluster.wait_for_leaders(client, BULK).await?;
    for i in 0..BULK_RECORDS {
        client.produce(BULK, 0, vec![bulk_record(i)], Acks::Leader).await?;
    }

    let billing: Vec<(TopicPartition, u64, String)> =
        billing_offsets().into_iter().map(|(t, p, o, m)| (TopicPartition::new(t, p), o, m.to_string())).collect();
    client.commit_offsets(BILLING_GROUP, &billing).await?;
    for i in 0..BUSY_COMMITS {
        let (t, p, o) = busy_commit(i);
        client.commit_offsets(BUSY_GROUP, &[(TopicPartition::new(t, p), o, String::new())]).await?;
    }
    client.init_transactional_producer(TRANSACTIONAL_ID, 0).await?;
    let (txn_producer_id, txn_epoch) = client.init_transactional_producer(TRANSACTIONAL_ID, 0).await?;

    let mut topic_ids = BTreeMap::new();
    for t in client.list_topics_with(true).await? {
        topic_ids.insert(t.name, hex(&t.topic_id));
    }
    Ok(json!({
        "topic_ids": topic_ids,
        "idempotent_producer": {"producer_id": producer_id, "epoch": epoch, "next_sequence": sequence},
        "transactional_producer": {"producer_id": txn_producer_id, "epoch": txn_epoch},
    }))
}

/// RocksDB's informational logs (`LOG`, `LOG.old.*`) are not data.
fn remove_info_logs(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            remove_info_logs(&entry.path())?;
        } else if name == "LOG" || name.starts_with("LOG.old") {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

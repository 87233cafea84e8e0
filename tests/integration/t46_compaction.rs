//! Compacted topics (`cleanup.policy=compact`): every replica keeps the newest record per key at
//! its offset, tombstoned keys go after `delete.retention.ms`, keyless records are refused, and
//! the superseded values' disk space is given back.

use std::collections::BTreeMap;
use std::time::Duration;

use rill_client::{Acks, Client, ErrorCode, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster};
use crate::t45_retention::dir_bytes;
use crate::t70_cli::rill;

/// How long compaction may take to reach the high watermark: the leader proposes a cleaning
/// point at most every 30 s, a replica then snapshots and compacts below it, and tombstones go
/// at the next point after `delete.retention.ms`.
const COMPACTION_TIMEOUT: Duration = Duration::from_secs(150);

const KEYS: u32 = 10;

/// The (offset, key, value) of every record of partition 0 of `topic`.
async fn records(client: &Client, topic: &str) -> anyhow::Result<Vec<(u64, String, String)>> {
    Ok(read_all(client, topic, 0).await?.into_iter().map(|r| (r.offset, text(&r.key), text(&r.value))).collect())
}

/// What a fully compacted log holds: the newest record of each key, at its offset, minus the
/// keys whose newest record is a tombstone.
fn newest_per_key(written: &[(u64, String, String)]) -> Vec<(u64, String, String)> {
    let mut newest: BTreeMap<&str, &(u64, String, String)> = BTreeMap::new();
    for r in written {
        newest.insert(r.1.as_str(), r);
    }
    let mut out: Vec<_> = newest.into_values().filter(|r| r.2 != "<null>").cloned().collect();
    out.sort();
    out
}

/// Writes `rounds` values for each of [`KEYS`] keys (one batch per round), then tombstones for
/// the first two keys. Returns every record written, with its offset.
async fn write_rounds(
    client: &Client,
    topic: &str,
    rounds: u32,
    value_len: usize,
) -> anyhow::Result<Vec<(u64, String, String)>> {
    let mut written = Vec::new();
    let pad = "x".repeat(value_len);
    for round in 0..rounds {
        let batch: Vec<Record> =
            (0..KEYS).map(|k| Record::keyed(format!("k{k}"), format!("k{k}-r{round}-{pad}"))).collect();
        let base = base_offset(client.produce(topic, 0, batch.clone(), Acks::All).await?)?;
        for (i, r) in batch.iter().enumerate() {
            written.push((base + i as u64, text(&r.key), text(&r.value)));
        }
    }
    let tombstones = vec![Record::tombstone("k0"), Record::tombstone("k1")];
    let base = base_offset(client.produce(topic, 0, tombstones, Acks::All).await?)?;
    written.push((base, "k0".into(), "<null>".into()));
    written.push((base + 1, "k1".into(), "<null>".into()));
    Ok(written)
}

fn base_offset(m: rill_client::ProduceAck) -> anyhow::Result<u64> {
    m.base_offset.ok_or_else(|| anyhow::anyhow!("an acks=all produce is answered with its offset"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_keeps_the_newest_value_per_key_on_every_replica() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let config = [("cleanup.policy", "compact"), ("delete.retention.ms", "1s")];
    cluster.create_topic(&client, "prices", 1, 3, &config).await?;

    // Keyless records are refused, whole batch, with a readable reason naming the first.
    let keyless =
        client.produce("prices", 0, vec![Record::keyed("k", "v"), Record::new("no key")], Acks::All).await.unwrap_err();
    assert_eq!(keyless.code(), Some(ErrorCode::InvalidRecord), "{keyless}");
    let reason = keyless.to_string();
    assert!(reason.contains("without a key") && reason.contains("at index 1"), "{keyless}");
    let out = rill(&cluster, &["topic", "describe", "prices", "--output", "json"], None)?;
    let d: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(d["configs"]["cleanup.policy"], "compact", "{d}");

    let written = write_rounds(&client, "prices", 20, 10).await?;
    let high_watermark = written.last().map_or(0, |r| r.0 + 1);
    let expected = newest_per_key(&written);
    assert_eq!(expected.len(), 8, "k0 and k1 are deleted");
    let compacted = wait_for(COMPACTION_TIMEOUT, "the leader to serve only the newest value per key", || async {
        let got = records(&client, "prices").await.ok()?;
        (got == expected).then_some(got)
    })
    .await?;
    // Offsets never shift: each newest value is where its produce put it.
    assert_eq!(compacted.first().map(|r| r.0), Some(19 * u64::from(KEYS) + 2), "{compacted:?}");
    let out = rill(&cluster, &["topic", "describe", "prices", "--output", "json"], None)?;
    let d: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(d["partitions"][0]["cleaned_to_offset"], high_watermark, "describe shows the cleaning point: {d}");

    // Every replica compacted on its own: whichever node leads next serves the same.
    let leader = cluster.wait_for_leaders(&client, "prices").await?.partitions[0].leader.unwrap_or(0);
    cluster.kill(leader)?;
    let fresh = cluster.client().await?;
    wait_for(COMPACTION_TIMEOUT, "a new leader serving the compacted log", || async {
        let d = fresh.describe_topic("prices").await.ok()?;
        d.partitions[0].leader.filter(|l| *l != leader)?;
        (records(&fresh, "prices").await.ok()? == expected).then_some(())
    })
    .await?;
    // New records continue the numbering.
    let next = fresh.produce("prices", 0, vec![Record::keyed("k5", "later")], Acks::All).await?;
    assert_eq!(base_offset(next)?, high_watermark);
    cluster.start_node(leader)?;

    // The CLI reads across the gaps.
    let out =
        rill(&cluster, &["consume", "prices", "--offset", "0", "--max-messages", "9", "--timeout-ms", "10000"], None)?;
    assert!(out.status.success(), "consume: {}", String::from_utf8_lossy(&out.stderr));
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(lines, 9, "8 compacted keys and the new record");
    Ok(())
}

/// Compaction gives the disk back: 60 rounds of 50 KB values for ten keys (30 MB) shrink every
/// node's data directory to a stated bound of the live data, once replicas compacted and the
/// value log collected the segments of superseded values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_gives_the_superseded_values_disk_back() -> anyhow::Result<()> {
    init_logs();
    let mib = 1u64 << 20;
    let mut cluster = TestCluster::start_with(3, &[("RILL_STORAGE_SEGMENT_BYTES", "1MiB")], None).await?;
    let client = cluster.client().await?;
    cluster
        .create_topic(&client, "state", 1, 3, &[("cleanup.policy", "compact"), ("delete.retention.ms", "1s")])
        .await?;
    let written = write_rounds(&client, "state", 60, 50_000).await?;
    let expected = newest_per_key(&written);
    wait_for(COMPACTION_TIMEOUT, "only the newest value per key", || async {
        (records(&client, "state").await.ok()? == expected).then_some(())
    })
    .await?;
    // Live: ten 50 KB values (eight after the tombstones go) and the metadata. The value log
    // keeps at most twice the live bytes in closed segments, plus the unflushed and the active
    // segment; RocksDB's files and the node's small state are counted in the last 4 MiB.
    let live = 10 * 50_000 + mib;
    let bound = 2 * live + 3 * mib + 4 * mib;
    let dirs: Vec<_> =
        (1..=3u64).filter_map(|id| cluster.local().data_dir(id).map(|d| (id, d.to_path_buf()))).collect();
    let sizes = wait_for(COMPACTION_TIMEOUT, "every node's disk usage within the bound", || async {
        let sizes: Vec<(u64, u64)> = dirs.iter().map(|(id, d)| (*id, dir_bytes(d))).collect();
        sizes.iter().all(|(_, b)| *b <= bound).then_some(sizes)
    })
    .await?;
    println!("data directories after 30 MB of superseded values: {sizes:?} bytes (bound {bound})");
    assert_eq!(records(&client, "state").await?, expected, "compaction kept what it must");
    Ok(())
}

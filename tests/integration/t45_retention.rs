//! Deleting records: `DeleteRecords` (`rill topic trim`) and retention by time and by size move
//! a partition's log start offset on every replica; fetches below it are refused, and consumers
//! behind it skip ahead as `auto_offset_reset` says, with the CLI warning about the skip.

use std::time::Duration;

use rill_client::{
    Acks, Client, Consumer, ConsumerConfig, ErrorCode, OffsetReset, OffsetResetEvent, OffsetSpec, Record,
    TopicPartition,
};

use crate::harness::{init_logs, read_all, text, wait_for, wait_for_ok, TestCluster, READY_TIMEOUT};
use crate::t70_cli::rill;

/// How long a partition may take to purge its log once its log start moved: the next
/// housekeeping round (every 5 s) snapshots and purges.
const PURGE_TIMEOUT: Duration = Duration::from_secs(60);

async fn produce_numbered(client: &Client, topic: &str, batches: u32, per_batch: u32) -> anyhow::Result<()> {
    for b in 0..batches {
        let records = (0..per_batch).map(|i| Record::new(format!("v{}", b * per_batch + i))).collect();
        client.produce(topic, 0, records, Acks::All).await?;
    }
    Ok(())
}

async fn earliest(client: &Client, topic: &str) -> anyhow::Result<u64> {
    Ok(client.list_offset(topic, 0, OffsetSpec::Earliest).await?)
}

/// Polls until `consumer` returns records (or fails), within the ready timeout.
async fn poll_some(consumer: &mut Consumer) -> anyhow::Result<Vec<rill_client::ConsumerRecord>> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if !records.is_empty() {
            return Ok(records);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the consumer returned nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_on_every_replica() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "trim", 1, 3, &[]).await?;
    produce_numbered(&client, "trim", 10, 10).await?;

    assert_eq!(client.delete_records("trim", 0, 35).await?, 35, "the low watermark is answered");
    assert_eq!(earliest(&client, "trim").await?, 35);
    let below = client.fetch("trim", 0, Some(34), Duration::ZERO).await.unwrap_err();
    assert_eq!(below.code(), Some(ErrorCode::OffsetOutOfRange), "{below}");
    let at = client.fetch("trim", 0, Some(35), Duration::ZERO).await?;
    assert_eq!(at.records.first().map(|r| (r.offset, text(&r.value))), Some((35, "v35".to_string())));
    assert_eq!((at.log_start_offset, at.high_watermark), (35, 100));
    assert_eq!(client.delete_records("trim", 0, 20).await?, 35, "the log start never moves back");
    let beyond = client.delete_records("trim", 0, 101).await.unwrap_err();
    assert_eq!(beyond.code(), Some(ErrorCode::OffsetOutOfRange), "{beyond}");
    assert!(client.delete_records("trim", 0, -2).await.is_err(), "a negative offset other than -1 is refused");

    // The CLI: a readable answer, and a readable refusal.
    let out = rill(&cluster, &["topic", "trim", "trim", "--partition", "0", "--before", "60"], None)?;
    assert!(out.status.success(), "trim: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("the log start offset is now 60"));
    let out = rill(&cluster, &["topic", "trim", "trim", "--partition", "0", "--before", "500"], None)?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rill(&cluster, &["topic", "describe", "trim", "--output", "json"], None)?;
    let d: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(d["partitions"][0]["log_start_offset"], 60, "{d}");
    assert!(d["partitions"][0]["retained_bytes"].as_u64().is_some_and(|b| b > 0), "{d}");

    // A consumer behind the log start skips ahead, and says so.
    let tp = TopicPartition::new("trim", 0);
    let mut consumer = Consumer::new(client.clone(), ConsumerConfig::default());
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, 3)?;
    let records = poll_some(&mut consumer).await?;
    assert_eq!(records[0].offset, 60);
    assert_eq!(consumer.take_resets(), vec![OffsetResetEvent { tp: tp.clone(), from: 3, to: 60 }]);
    let mut strict = Consumer::new(
        client.clone(),
        ConsumerConfig { auto_offset_reset: OffsetReset::None, ..ConsumerConfig::default() },
    );
    strict.assign([tp.clone()]);
    strict.seek(&tp, 10)?;
    let refused = poll_some(&mut strict).await.unwrap_err();
    let refused = refused.downcast_ref::<rill_client::Error>().and_then(rill_client::Error::code);
    assert_eq!(refused, Some(ErrorCode::OffsetOutOfRange));
    let mut latest = Consumer::new(
        client.clone(),
        ConsumerConfig { auto_offset_reset: OffsetReset::Latest, ..ConsumerConfig::default() },
    );
    latest.assign([tp.clone()]);
    latest.seek(&tp, 10)?;
    assert!(latest.poll(Duration::from_millis(300)).await?.is_empty(), "latest skips every stored record");
    assert_eq!(latest.take_resets(), vec![OffsetResetEvent { tp: tp.clone(), from: 10, to: 100 }]);

    let out =
        rill(&cluster, &["consume", "trim", "--offset", "5", "--max-messages", "40", "--timeout-ms", "10000"], None)?;
    assert!(out.status.success(), "consume: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines.first().map(String::as_str), Some("v60"));
    assert_eq!(lines.len(), 40);
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(warning.contains("skipped 55 offset(s), continuing at 60"), "{warning}");

    // Every replica applied it: whichever node leads next, through failovers and a full restart.
    for round in 0..2 {
        let leader = cluster.wait_for_leaders(&client, "trim").await?.partitions[0].leader.unwrap_or(0);
        cluster.kill(leader)?;
        let fresh = cluster.client().await?;
        wait_for(READY_TIMEOUT, "a new leader", || async {
            let d = fresh.describe_topic("trim").await.ok()?;
            d.partitions[0].leader.filter(|l| *l != leader)
        })
        .await?;
        assert_eq!(
            wait_for_ok(READY_TIMEOUT, "the log start", || earliest(&fresh, "trim")).await?,
            60,
            "round {round}"
        );
        cluster.start_node(leader)?;
    }
    for id in 1..=3 {
        cluster.kill(id)?;
    }
    for id in 1..=3 {
        cluster.start_node(id)?;
    }
    let fresh = cluster.client().await?;
    cluster.wait_for_leaders(&fresh, "trim").await?;
    assert_eq!(wait_for_ok(READY_TIMEOUT, "the log start", || earliest(&fresh, "trim")).await?, 60);
    let below = fresh.fetch("trim", 0, Some(59), Duration::ZERO).await.unwrap_err();
    assert_eq!(below.code(), Some(ErrorCode::OffsetOutOfRange), "{below}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_by_time_and_by_size() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;

    // By time: 1.5 s after the last append, nothing is left (and nothing new arrives).
    cluster.create_topic(&client, "aged", 1, 3, &[("retention.ms", "1500")]).await?;
    produce_numbered(&client, "aged", 5, 2).await?;
    wait_for(READY_TIMEOUT, "retention.ms to delete every record", || async {
        (earliest(&client, "aged").await.ok()? == 10).then_some(())
    })
    .await?;
    let d = client.describe_topic("aged").await?;
    assert_eq!((d.partitions[0].log_start_offset, d.partitions[0].high_watermark), (10, 10));
    assert_eq!(d.partitions[0].retained_bytes, 0);
    assert!(read_all(&client, "aged", 0).await.is_err(), "offset 0 is gone");

    // By size: 4 MB written under a 1 MiB limit; at least 1 MiB stays, whole units go.
    let mib = 1u64 << 20;
    cluster.create_topic(&client, "sized", 1, 3, &[("retention.bytes", "1MiB")]).await?;
    for b in 0..40u32 {
        let records = (0..10).map(|i| Record::new(format!("{b}-{i}-{}", "x".repeat(10_000)))).collect();
        client.produce("sized", 0, records, Acks::All).await?;
    }
    let start = wait_for(READY_TIMEOUT, "retention.bytes to delete the oldest units", || async {
        let s = earliest(&client, "sized").await.ok()?;
        (s > 0).then_some(s)
    })
    .await?;
    let p = client.describe_topic("sized").await?.partitions[0].clone();
    assert!(p.retained_bytes >= mib && p.retained_bytes <= 3 * mib, "{p:?}");
    assert!(start < 400 && start % 10 == 0, "whole entries are deleted, the newest kept: {start}");
    let mut offset = start;
    while offset < 400 {
        let f = client.fetch("sized", 0, Some(offset), Duration::ZERO).await?;
        anyhow::ensure!(!f.records.is_empty(), "nothing at {offset}");
        assert_eq!(f.records[0].offset, offset);
        offset = f.next_offset;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_down_during_retention_comes_back_with_the_same_log() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let mib = 1u64 << 20;
    // A dead follower holds acks=all writes until it leaves the ISR: let that be quick.
    let configs = [("retention.bytes", "1MiB"), ("replica.lag.time.max.ms", "2000")];
    cluster.create_topic(&client, "kept", 1, 3, &configs).await?;
    cluster.create_topic(&client, "idle", 1, 3, &[]).await?;
    client.produce("idle", 0, vec![Record::new("quiet")], Acks::All).await?;
    let d = cluster.wait_for_leaders(&client, "kept").await?;
    let leader = d.partitions[0].leader.unwrap_or(0);
    let follower = d.partitions[0].replicas.iter().copied().find(|r| *r != leader).unwrap_or(0);
    cluster.kill(follower)?;

    // 3x the retention while the follower is down: the leader moves the log start past it.
    let value = |b: u32, i: u32| format!("{b}-{i}-{}", "k".repeat(10_000));
    for b in 0..30u32 {
        client.produce("kept", 0, (0..10).map(|i| Record::new(value(b, i))).collect(), Acks::All).await?;
    }
    let start = wait_for(READY_TIMEOUT, "retention to move the log start", || async {
        let s = earliest(&client, "kept").await.ok()?;
        (s > 0).then_some(s)
    })
    .await?;
    let before = read_all_from(&client, "kept", start).await?;
    assert_eq!(before.len() as u64, 300 - start, "every record from the log start on");
    // The leader purges its log below the log start: the follower's log now ends below what
    // the leader stores, so it can only catch up by a snapshot carrying the retained records.
    let stored_from = wait_for(PURGE_TIMEOUT, "the leader to purge its log below the log start", || async {
        let p = client.describe_topic("kept").await.ok()?.partitions[0].clone();
        (p.stored_from_offset > 0).then_some(p.stored_from_offset)
    })
    .await?;
    assert!(stored_from as u64 <= start, "nothing at or above the log start is purged: {stored_from} > {start}");

    // The follower comes back, catches up (by a snapshot that carries the records from the log
    // start on), and leads: the same log start, high watermark and records, and the numbering
    // goes on.
    cluster.start_node(follower)?;
    wait_for(READY_TIMEOUT, "the follower back in the ISR", || async {
        let d = client.describe_topic("kept").await.ok()?;
        d.partitions[0].isr.contains(&follower).then_some(())
    })
    .await?;
    cluster.kill(leader)?;
    let fresh = cluster.client().await?;
    wait_for(READY_TIMEOUT, "a new leader", || async {
        let d = fresh.describe_topic("kept").await.ok()?;
        d.partitions[0].leader.filter(|l| *l != leader)
    })
    .await?;
    let now = wait_for_ok(READY_TIMEOUT, "the log start", || earliest(&fresh, "kept")).await?;
    assert!(now >= start, "the log start never moves back: {now} < {start}");
    let after = read_all_from(&fresh, "kept", now).await?;
    let expected: Vec<_> = before.iter().filter(|(o, _)| *o >= now).cloned().collect();
    assert_eq!(after, expected, "the same records at the same offsets");
    let ack = fresh.produce("kept", 0, vec![Record::new("next")], Acks::All).await?;
    assert_eq!(ack.base_offset, Some(300), "new appends continue the numbering");
    let p = fresh.describe_topic("kept").await?.partitions[0].clone();
    assert!(p.retained_bytes >= mib && p.retained_bytes <= 3 * mib, "{p:?}");
    assert_eq!(read_all(&fresh, "idle", 0).await?.len(), 1, "the idle topic keeps its record");
    Ok(())
}

/// Bytes of the files under `dir` (apparent sizes, as `du --apparent-size` counts them).
pub(crate) fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Retention gives the disk back: 20x `retention.bytes` written to one topic beside an idle
/// topic whose only record sits in the first value log segments leaves every node's data
/// directory within a stated bound of the retention — the log is purged below the log start
/// and the value log collects the segments the idle topic shares with the deleted records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_gives_the_disk_back_whatever_an_idle_topic_keeps() -> anyhow::Result<()> {
    init_logs();
    let mib = 1u64 << 20;
    let segment = mib;
    let mut cluster = TestCluster::start_with(3, &[("RILL_STORAGE_SEGMENT_BYTES", "1MiB")], None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "idle", 1, 3, &[]).await?;
    client.produce("idle", 0, vec![Record::new("quiet")], Acks::All).await?;
    let retention = 2 * mib;
    cluster.create_topic(&client, "flat", 1, 3, &[("retention.bytes", "2MiB")]).await?;
    let value = |b: u32, i: u32| format!("{b}-{i}-{}", "f".repeat(10_000));
    // 40 MiB, 100 KB batches.
    for b in 0..400u32 {
        client.produce("flat", 0, (0..10).map(|i| Record::new(value(b, i))).collect(), Acks::All).await?;
    }
    // Live data: what retention keeps (at least retention.bytes, less than one more 1 MiB unit
    // above it, plus the entry holding the log start), the idle record and the metadata.
    // The value log keeps at most twice the live bytes in closed segments, plus the segments
    // not yet flushed (with 1 MiB segments, one) and the active one; RocksDB's index files
    // (under 1 MiB here) and the node's small state are counted in the last 4 MiB. (Measured:
    // 14 MiB per node once the logs are purged, 3.8 MiB after the value log's next collection.)
    let live = retention + 2 * mib;
    let bound = 2 * live + 3 * segment + 4 * mib;
    let dirs: Vec<_> =
        (1..=3u64).filter_map(|id| cluster.local().data_dir(id).map(|d| (id, d.to_path_buf()))).collect();
    let sizes =
        wait_for(PURGE_TIMEOUT + Duration::from_secs(30), "every node's disk usage within the bound", || async {
            let sizes: Vec<(u64, u64)> = dirs.iter().map(|(id, d)| (*id, dir_bytes(d))).collect();
            sizes.iter().all(|(_, b)| *b <= bound).then_some(sizes)
        })
        .await?;
    println!("data directories after 40 MiB under a 2 MiB retention: {sizes:?} bytes (bound {bound})");
    let p = client.describe_topic("flat").await?.partitions[0].clone();
    assert!(p.retained_bytes >= retention && p.retained_bytes <= retention + 2 * mib, "{p:?}");
    assert!(p.stored_from_offset > 0 && p.stored_from_offset <= p.log_start_offset, "{p:?}");
    let kept = read_all_from(&client, "flat", p.log_start_offset as u64).await?;
    assert_eq!(kept.len() as i64, 4000 - p.log_start_offset, "every record from the log start on is served");
    assert_eq!(read_all(&client, "idle", 0).await?.len(), 1, "the idle topic keeps its record");
    Ok(())
}

/// Every (offset, value) of partition 0 of `topic` from `start` to the high watermark.
async fn read_all_from(client: &Client, topic: &str, start: u64) -> anyhow::Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    let mut offset = start;
    loop {
        let f = client.fetch(topic, 0, Some(offset), Duration::ZERO).await?;
        if f.records.is_empty() {
            anyhow::ensure!(offset >= f.high_watermark, "nothing at {offset} below {}", f.high_watermark);
            return Ok(out);
        }
        offset = f.next_offset;
        out.extend(f.records.iter().map(|r| (r.offset, text(&r.value))));
    }
}

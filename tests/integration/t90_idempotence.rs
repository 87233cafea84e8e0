//! Idempotent producers: a retried batch is stored once and answered with its original offsets,
//! across leader kills and full-cluster restarts; gaps and stale epochs are refused.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_client::client::build_batch_for;
use rill_client::{Acks, Client, Compression, ErrorCode, Producer, ProducerConfig, Record};

use crate::harness::{init_logs, read_all, text, wait_for, wait_for_ok, TestCluster, READY_TIMEOUT};

fn idempotent_batch(values: &[&str], pid: i64, epoch: i16, seq: i32) -> Bytes {
    let records = values.iter().map(|v| Record::new(v.to_string())).collect();
    build_batch_for(records, Compression::None, Some((pid, epoch, seq))).expect("build")
}

async fn send(client: &Client, b: &Bytes) -> Result<Option<u64>, rill_client::Error> {
    client.produce_batch("idem", 0, b.clone(), Acks::All, Duration::from_secs(10)).await.map(|a| a.base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_stored_once_and_gaps_are_refused() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "idem", 1, 3, &[]).await?;
    let (pid, epoch) = client.init_producer_id().await?;
    let (other, _) = client.init_producer_id().await?;
    assert!(pid > 0 && other > pid, "producer ids are unique: {pid} then {other}");

    tracing::info!("--- the same batch twice: one copy, the original offsets");
    let b0 = idempotent_batch(&["a", "b"], pid, epoch, 0);
    assert_eq!(send(&client, &b0).await?, Some(0));
    assert_eq!(send(&client, &b0).await?, Some(0), "a retry is answered with the original offset");
    let b1 = idempotent_batch(&["c"], pid, epoch, 2);
    assert_eq!(send(&client, &b1).await?, Some(2));
    assert_eq!(send(&client, &b0).await?, Some(0), "an older retry too");

    tracing::info!("--- gaps, unknown producers and stale epochs are refused, nothing appended");
    let gap = idempotent_batch(&["gap"], pid, epoch, 7);
    assert_eq!(send(&client, &gap).await.expect_err("gap").code(), Some(ErrorCode::OutOfOrderSequenceNumber));
    let unknown = idempotent_batch(&["who"], other, 0, 3);
    assert_eq!(send(&client, &unknown).await.expect_err("unknown").code(), Some(ErrorCode::UnknownProducerId));
    let newer = idempotent_batch(&["new epoch"], pid, epoch + 1, 0);
    assert_eq!(send(&client, &newer).await?, Some(3));
    let stale = idempotent_batch(&["zombie"], pid, epoch, 3);
    assert_eq!(send(&client, &stale).await.expect_err("stale").code(), Some(ErrorCode::InvalidProducerEpoch));
    let acks_one = client
        .produce_batch("idem", 0, idempotent_batch(&["x"], pid, epoch + 1, 1), Acks::Leader, Duration::from_secs(5))
        .await;
    assert_eq!(acks_one.expect_err("needs acks=all").code(), Some(ErrorCode::InvalidRequest));
    let values: Vec<String> = read_all(&client, "idem", 0).await?.iter().map(|r| text(&r.value)).collect();
    assert_eq!(values, vec!["a", "b", "c", "new epoch"]);

    tracing::info!("--- a new producer's second batch sent ahead of its first waits for it");
    let (third, third_epoch) = client.init_producer_id().await?;
    let second = idempotent_batch(&["second"], third, third_epoch, 1);
    let first = idempotent_batch(&["first"], third, third_epoch, 0);
    // Polled in this order: the second batch's request leaves first.
    let (second_at, first_at) = tokio::join!(send(&client, &second), send(&client, &first));
    assert_eq!((first_at?, second_at?), (Some(4), Some(5)), "both stored, in sequence order");

    tracing::info!("--- SIGKILL every node; after restart a retry is still recognized");
    for id in 1..=3 {
        cluster.kill(id)?;
    }
    for id in 1..=3 {
        cluster.start_node(id)?;
    }
    let fresh = cluster.client().await?;
    cluster.wait_for_leaders(&fresh, "idem").await?;
    let again = wait_for_ok(READY_TIMEOUT, "the retry to be answered", || send(&fresh, &newer))
        .await
        .map_err(|e| e.context(cluster.log_tails()))?;
    assert_eq!(again, Some(3), "deduplication state survives a full restart");
    assert_eq!(read_all(&fresh, "idem", 0).await?.len(), 6);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_retries_through_leader_kills_without_duplicates() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "idem", 2, 3, &[]).await?;
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            request_timeout: Duration::from_secs(3),
            linger: Duration::from_millis(2),
            batch_size: 512,
            ..Default::default()
        },
    );
    assert!(producer.is_idempotent());
    let producer = Arc::new(producer);
    let sending = {
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut deliveries = Vec::new();
            for i in 0..3000 {
                let d = producer.send_to("idem", i % 2, Record::new(format!("m{i}"))).await?;
                deliveries.push((i, d));
                if i % 20 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            anyhow::Ok(deliveries)
        })
    };
    tracing::info!("--- kill the leaders of both partitions while sending, one after the other");
    for p in 0..2u32 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let d = cluster.wait_for_leaders(&client, "idem").await?;
        let leader = d.partitions[p as usize].leader.expect("leader");
        cluster.kill(leader)?;
        tokio::time::sleep(Duration::from_millis(800)).await;
        cluster.start_node(leader)?;
    }
    let deliveries = sending.await??;
    producer.flush().await;
    let mut acked: HashMap<String, (u32, u64)> = HashMap::new();
    for (i, d) in deliveries {
        let md = d.await?;
        acked.insert(format!("m{i}"), (md.partition, md.offset.expect("offset")));
    }
    assert_eq!(acked.len(), 3000, "every record is delivered (retried until acknowledged)");
    let fresh = cluster.client().await?;
    for p in 0..2u32 {
        let records = wait_for(READY_TIMEOUT, "all records readable", || async {
            let r = read_all(&fresh, "idem", p).await.ok()?;
            (r.len() >= 1500).then_some(r)
        })
        .await?;
        assert_eq!(records.len(), 1500, "partition {p}: exactly one copy of each record, no duplicates");
        let mut last_i = None;
        for r in &records {
            let v = text(&r.value);
            assert_eq!(acked.get(&v), Some(&(p, r.offset)), "{v} is where its acknowledgement said");
            let i: usize = v[1..].parse()?;
            assert!(last_i.is_none_or(|l| l < i), "partition {p}: send order kept ({v} after m{last_i:?})");
            last_i = Some(i);
        }
    }
    Ok(())
}

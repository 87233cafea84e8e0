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

/// A partition remembers at most `max-producers-per-partition` producers. Ids are handed to
/// anyone, so a full table must not lock new producers out: a new producer makes the leader
/// forget the producers idle for `producer-evictable-after` — never one active more recently,
/// whose retries it must still recognise — and the forgetting is replicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_producer_table_forgets_idle_producers_to_admit_a_new_one() -> anyhow::Result<()> {
    init_logs();
    const IDLE: Duration = Duration::from_secs(10);
    let env = [("RILL_MAX_PRODUCERS_PER_PARTITION", "3"), ("RILL_PRODUCER_EVICTABLE_AFTER", "10s")];
    let mut cluster = TestCluster::start_with(3, &env, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "idem", 1, 3, &[]).await?;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(client.init_producer_id().await?);
    }
    let [(a, ae), (b, be), (c, ce), (d, de), (e, ee)] = ids[..] else { unreachable!("five ids") };

    tracing::info!("--- three producers fill the table; a fourth is refused while all three are active");
    // Taken before the three appends: each append happened after it.
    let filled_from = std::time::Instant::now();
    assert_eq!(send(&client, &idempotent_batch(&["a0"], a, ae, 0)).await?, Some(0));
    assert_eq!(send(&client, &idempotent_batch(&["b0"], b, be, 0)).await?, Some(1));
    assert_eq!(send(&client, &idempotent_batch(&["c0"], c, ce, 0)).await?, Some(2));
    let d0 = idempotent_batch(&["d0"], d, de, 0);
    let refused = send(&client, &d0).await.expect_err("the table is full");
    assert!(filled_from.elapsed() < IDLE, "the premise: the three were active within {IDLE:?}");
    assert_eq!(refused.code(), Some(ErrorCode::TooManyProducers), "{refused}");

    tracing::info!("--- producer a stays active; the new producer gets in once b and c were idle long enough");
    let mut a_seq = 1;
    let deadline = std::time::Instant::now() + IDLE * 4;
    let (d_at, a_batch, a_offset) = loop {
        let a_batch = idempotent_batch(&[&format!("a{a_seq}")], a, ae, a_seq);
        let a_offset = send(&client, &a_batch).await?;
        a_seq += 1;
        match send(&client, &d0).await {
            Ok(at) => break (at, a_batch, a_offset),
            Err(err) if err.code() == Some(ErrorCode::TooManyProducers) => {}
            Err(err) => return Err(err.into()),
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "the new producer was never admitted");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        filled_from.elapsed() >= IDLE,
        "admitted after {:?}: b and c were forgotten before they were idle for {IDLE:?}",
        filled_from.elapsed()
    );
    let d_at = d_at.expect("an offset");

    tracing::info!("--- a's retry is still recognised, b is forgotten, d now counts");
    assert_eq!(send(&client, &a_batch).await?, a_offset, "the active producer's retry is deduplicated");
    assert_eq!(send(&client, &d0).await?, Some(d_at), "the admitted producer's retry too");
    let b1 = idempotent_batch(&["b1"], b, be, 1);
    assert_eq!(send(&client, &b1).await.expect_err("b is forgotten").code(), Some(ErrorCode::UnknownProducerId));
    // Room for one more (a and d remembered): a producer taking a new id, as the client does.
    assert!(send(&client, &idempotent_batch(&["e0"], e, ee, 0)).await?.is_some());

    tracing::info!("--- every replica forgot the same producers: the same answers from a new leader");
    let leader = cluster.wait_for_leaders(&client, "idem").await?.partitions[0].leader.expect("a leader");
    cluster.kill(leader)?;
    let fresh = cluster.client().await?;
    let again = wait_for_ok(READY_TIMEOUT, "a's retry on the new leader", || send(&fresh, &a_batch))
        .await
        .map_err(|e| e.context(cluster.log_tails()))?;
    assert_eq!(again, a_offset);
    assert_eq!(send(&fresh, &b1).await.expect_err("b is forgotten").code(), Some(ErrorCode::UnknownProducerId));
    let values: Vec<String> = read_all(&fresh, "idem", 0).await?.iter().map(|r| text(&r.value)).collect();
    let mut expected = vec!["a0".to_string(), "b0".into(), "c0".into()];
    expected.extend((1..a_seq).map(|i| format!("a{i}")));
    expected.insert(usize::try_from(d_at)?, "d0".into());
    expected.push("e0".into());
    assert_eq!(values, expected, "each record once, in the order acknowledged");
    Ok(())
}

//! The exactly-once invoicer (`examples/rust`, `rill-invoicer`) as a real process on three real
//! nodes: SIGKILLed at random points and restarted, it invoices every order exactly once as a
//! `read_committed` reader sees the invoices, and its group ends up having consumed every order.
//! The kill points come from a seeded generator: the seed is printed first, and
//! `RILL_TEST_SEED=<seed>` replays the same points.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rill_client::{
    Client, Consumer, ConsumerConfig, IsolationLevel, OffsetSpec, Producer, ProducerConfig, Record, TopicPartition,
};

use crate::harness::{bin, init_logs, wait_for, TestCluster};

const ORDERS: usize = 600;
const PARTITIONS: u32 = 3;
/// Short sessions, so a killed instance's partitions pass to its successor quickly.
const GROUP_ENV: &[(&str, &str)] = &[("RILL_GROUP_SESSION_TIMEOUT", "2s"), ("RILL_GROUP_HEARTBEAT_INTERVAL", "300ms")];
/// How long one invoicer may take to make the progress a kill waits for, or to finish.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(90);

fn invoicer(cluster: &TestCluster, max_per_transaction: usize, exit_when_idle: Option<&str>) -> anyhow::Result<Child> {
    let mut cmd = Command::new(bin("rill-invoicer"));
    cmd.args(["--bootstrap", &cluster.bootstrap_arg(), "--orders", "orders", "--invoices", "invoices"])
        .args(["--group", "invoicer", "--transactional-id", "invoicer-1", "--transaction-timeout", "10s"])
        .args(["--max-per-transaction", &max_per_transaction.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(idle) = exit_when_idle {
        cmd.args(["--exit-when-idle", idle]);
    }
    Ok(cmd.spawn()?)
}

/// Everything written to `invoices`, committed or not (markers included): the log end offsets.
async fn invoices_written(client: &Client) -> anyhow::Result<u64> {
    let mut total = 0;
    for p in 0..PARTITIONS {
        total += client.list_offset_at("invoices", p, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await?;
    }
    Ok(total)
}

/// How many orders the group has committed as consumed.
async fn orders_consumed(client: &Client) -> anyhow::Result<u64> {
    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new("orders", p)).collect();
    let offsets = client.committed_offsets("invoicer", &partitions).await?;
    Ok(offsets.values().map(|c| c.as_ref().map_or(0, |c| c.offset)).sum())
}

/// True when some partition of `invoices` holds records of a transaction still open (its last
/// stable offset is below its high watermark).
async fn open_transaction(client: &Client) -> anyhow::Result<bool> {
    for p in 0..PARTITIONS {
        let hw = client.list_offset_at("invoices", p, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await?;
        let lso = client.list_offset_at("invoices", p, OffsetSpec::Latest, IsolationLevel::ReadCommitted).await?;
        if lso < hw {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The invoices' values as a reader at `isolation` sees them, every partition read to its end.
async fn read_invoices(client: &Client, isolation: IsolationLevel) -> anyhow::Result<Vec<String>> {
    let mut consumer = Consumer::new(
        client.clone(),
        ConsumerConfig { isolation_level: isolation, start: OffsetSpec::Earliest, ..ConsumerConfig::default() },
    );
    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new("invoices", p)).collect();
    let mut ends = BTreeMap::new();
    for tp in &partitions {
        ends.insert(tp.clone(), client.list_offset_at(&tp.topic, tp.partition, OffsetSpec::Latest, isolation).await?);
    }
    consumer.assign(partitions.clone());
    let mut values = Vec::new();
    let deadline = tokio::time::Instant::now() + PROGRESS_TIMEOUT;
    while partitions.iter().any(|tp| consumer.position(tp).is_none_or(|p| p < ends[tp])) {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the invoices were not read to their end in time");
        for r in consumer.poll(Duration::from_millis(500)).await? {
            values.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    consumer.close();
    Ok(values)
}

#[tokio::test]
async fn the_invoicer_killed_at_random_points_invoices_every_order_exactly_once() -> anyhow::Result<()> {
    init_logs();
    let seed: u64 = match std::env::var("RILL_TEST_SEED") {
        Ok(s) => s.parse()?,
        Err(_) => rand::random(),
    };
    println!("RILL_TEST_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", PARTITIONS, 3, &[]).await?;
    cluster.create_topic(&client, "invoices", PARTITIONS, 3, &[]).await?;
    cluster.wait_for_leaders(&client, "__transaction_state").await?;
    cluster.wait_for_leaders(&client, "__consumer_offsets").await?;
    let orders = Producer::new(client.clone(), ProducerConfig::default());
    let mut sent = Vec::new();
    for i in 0..ORDERS {
        let order = format!("order-{i}");
        sent.push(orders.send("orders", Record::keyed(order.clone(), order)).await?);
    }
    for delivery in sent {
        delivery.await?;
    }
    orders.close().await;

    let mut killed_open = 0;
    for round in 0..4 {
        let batch = rng.gen_range(1..=40);
        let ahead = rng.gen_range(1..=80);
        let target = invoices_written(&client).await? + ahead;
        tracing::info!(round, batch, target, "--- an invoicer runs until {ahead} more invoice offsets are written");
        let mut child = invoicer(&cluster, batch, None)?;
        // Until it has written that much, or has no order left to invoice.
        let reached = wait_for(PROGRESS_TIMEOUT, "the invoicer to make progress", || async {
            let written = invoices_written(&client).await.ok()? >= target;
            (written || orders_consumed(&client).await.ok()? == ORDERS as u64).then_some(())
        })
        .await;
        // Then, preferably, while one of its transactions has records written and is still open.
        if reached.is_ok() {
            let inside = wait_for(Duration::from_secs(5), "an open transaction", || async {
                open_transaction(&client).await.ok()?.then_some(())
            })
            .await;
            tracing::info!(round, inside_a_transaction = inside.is_ok(), "--- SIGKILL");
        }
        child.kill()?;
        child.wait()?;
        reached?;
        if open_transaction(&client).await? {
            killed_open += 1;
        }
    }
    tracing::info!(killed_open, "kills that left a transaction open");

    tracing::info!("--- the last invoicer runs until no order is left");
    let last = std::sync::Mutex::new(invoicer(&cluster, rng.gen_range(1..=40), Some("4s"))?);
    let status = wait_for(PROGRESS_TIMEOUT, "the last invoicer to finish", || async {
        last.lock().ok()?.try_wait().ok().flatten()
    })
    .await;
    let mut last = last.into_inner().map_err(|_| anyhow::anyhow!("poisoned"))?;
    if status.is_err() {
        let _ = last.kill();
    }
    let status = status?;
    let mut out = String::new();
    if let Some(mut stdout) = last.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut out)?;
    }
    assert!(status.success(), "the last invoicer failed: {status:?} {out}");

    let committed = read_invoices(&client, IsolationLevel::ReadCommitted).await?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for v in &committed {
        *counts.entry(v.clone()).or_default() += 1;
    }
    let missing: Vec<usize> = (0..ORDERS).filter(|i| !counts.contains_key(&format!("invoice:order-{i}"))).collect();
    let twice: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(missing.is_empty(), "orders never invoiced: {missing:?} (seed {seed})");
    assert!(twice.is_empty(), "orders invoiced more than once: {twice:?} (seed {seed})");
    assert_eq!(committed.len(), ORDERS, "nothing else (seed {seed})");
    let everything = read_invoices(&client, IsolationLevel::ReadUncommitted).await?;
    tracing::info!(committed = committed.len(), written = everything.len(), "invoices");
    assert!(everything.len() >= ORDERS);

    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new("orders", p)).collect();
    let offsets = client.stable_committed_offsets("invoicer", &partitions).await?;
    let consumed: u64 = offsets.values().map(|c| c.as_ref().map_or(0, |c| c.offset)).sum();
    assert_eq!(consumed, ORDERS as u64, "the group consumed every order: {offsets:?}");
    Ok(())
}

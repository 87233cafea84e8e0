//! `transactions`: what transactions cost a producer, on a real 3-node cluster (mutual TLS,
//! RF 3, `min.insync.replicas` 2), every figure from the same run.
//!
//! * **Throughput**: one producer sending 1 KiB records as fast as its in-flight window allows
//!   for a fixed time, round-robin over 16 partitions (each keeping 64 MiB, `retention.bytes`):
//!   the plain idempotent `Producer`, then a `TransactionalProducer` committing every 100 ms
//!   and every 10, 100 and 1,000 records, then the idempotent producer again. Each mode runs
//!   `rounds` times, interleaved. A shared machine drifts within a round, so each mode's rate
//!   is divided by the mean of its round's two idempotent runs, and the median of those
//!   per-round ratios is what to quote.
//! * **Commit latency**: transactions of one record to each of 1, 4 and 16 partitions; the
//!   records are acknowledged first, then `commit_transaction` (the `EndTxn` round trip: the
//!   coordinator's Prepare write; markers follow asynchronously) is timed. p50 / p99 / max.
//! * **Consume-transform-produce** (`ctp`): a job committing a transaction per poll against
//!   the same job sending and then committing its offsets synchronously, with the CPU each
//!   costs per record (the nodes' and the bench's own): on a machine the job keeps busy, what
//!   bounds the ratio. Then the same job a record at a time, each iteration timed (the
//!   experiment of Redpanda's post on its transactions).

mod ctp;

pub use ctp::{CtpRow, RecordAtATimeRow};

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use rill_client::{Client, DeliveryFuture, Producer, ProducerConfig, Record, TransactionalProducer};
use serde::Serialize;

use crate::stats::Latencies;
use crate::systems::rill::{start_with, wait_for_leaders};
use crate::systems::Env;

/// Partitions of the throughput topic.
const PARTITIONS: u32 = 16;
/// Record size.
const RECORD_BYTES: usize = 1024;
/// Most deliveries outstanding at once (the producer's pipelining window).
const WINDOW: usize = 20_000;
/// `retention.bytes` of each partition of the topics written flat out (the throughput modes'
/// and consume-transform-produce's output): 16 partitions on 3 replicas keep about 3 GB.
const RETAINED_BYTES: u64 = 64 << 20;
/// Transactions per commit-latency sample set.
const LATENCY_TRANSACTIONS: usize = 300;

/// How the producer commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The plain idempotent producer.
    Idempotent,
    /// A transaction every this many records.
    Every(usize),
    /// A transaction every this long.
    Interval(Duration),
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Idempotent => "idempotent".into(),
            Mode::Every(n) => format!("txn every {n} records"),
            Mode::Interval(d) => format!("txn every {} ms", d.as_millis()),
        }
    }
}

/// One mode's throughput.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// The mode.
    pub mode: String,
    /// Acknowledged (committed) records per second, per round.
    pub msgs_per_sec: Vec<f64>,
    /// Their median.
    pub median_msgs_per_sec: f64,
    /// Per round, the rate over the mean of that round's opening and closing idempotent runs.
    pub ratios: Vec<f64>,
    /// The median of `ratios`.
    pub ratio_to_idempotent: f64,
    /// Transactions committed per second (median round).
    pub commits_per_sec: f64,
    /// Transactions that failed and were aborted, over every round (their records not counted).
    pub aborted: u64,
}

/// Commit latency for transactions touching `partitions` partitions.
#[derive(Debug, Clone, Serialize)]
pub struct CommitLatencyRow {
    /// Partitions each transaction wrote.
    pub partitions: u32,
    /// Transactions timed.
    pub transactions: usize,
    /// `commit_transaction`, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub max_ms: f64,
}

/// The scenario's result.
#[derive(Debug, Clone, Serialize)]
pub struct TransactionsResult {
    /// Seconds each mode ran per round.
    pub seconds_per_round: f64,
    /// Rounds per mode.
    pub rounds: u32,
    /// Record size, bytes.
    pub record_bytes: usize,
    /// Throughput per mode.
    pub throughput: Vec<ThroughputRow>,
    /// Commit latency per transaction width.
    pub commit_latency: Vec<CommitLatencyRow>,
    /// Consume-transform-produce per way of committing.
    pub consume_transform_produce: Vec<CtpRow>,
    /// Consume-transform-produce a record at a time, per way of committing.
    pub record_at_a_time: Vec<RecordAtATimeRow>,
}

/// Runs the scenario: `round` per mode and round, `rounds` rounds.
pub async fn transactions(env: &Env, round: Duration, rounds: u32) -> anyhow::Result<TransactionsResult> {
    let deployment = start_with(env, "rill-transactions", 3, true, &[]).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let kept = [("min.insync.replicas".to_string(), "2".to_string())];
    // The topics written flat out keep what a deployment would, not everything: without a
    // limit the scenario wrote about 45 GB. `txn-bench` reaches its limit within the first
    // producer run, so every producer mode runs with retention working behind it; `ctp-out`,
    // written more slowly, from the consume-transform-produce loops' second round.
    let bounded = [kept[0].clone(), ("retention.bytes".to_string(), RETAINED_BYTES.to_string())];
    let topics = [
        ("txn-bench", PARTITIONS, &bounded[..]),
        ("txn-latency", 16, &kept[..]),
        (ctp::INPUT, ctp::PARTITIONS, &kept[..]),
        (ctp::OUTPUT, ctp::PARTITIONS, &bounded[..]),
    ];
    for (topic, partitions, configs) in topics {
        client.create_topic(topic, partitions, 3, configs).await.with_context(|| format!("cannot create {topic}"))?;
        wait_for_leaders(&client, topic).await?;
    }
    wait_for_leaders(&client, "__transaction_state").await?;

    // The 100 ms mode, the one with a target, runs next to an idempotent run.
    let modes = [
        Mode::Idempotent,
        Mode::Interval(Duration::from_millis(100)),
        Mode::Every(10),
        Mode::Every(100),
        Mode::Every(1000),
    ];
    let mut rates: Vec<Vec<(f64, f64)>> = vec![Vec::new(); modes.len()];
    let mut baselines = Vec::new();
    let mut aborted = vec![0u64; modes.len()];
    for r in 0..rounds.max(1) {
        for (i, mode) in modes.iter().enumerate() {
            eprintln!("transactions: round {} of {}, {}…", r + 1, rounds.max(1), mode.name());
            let (msgs, commits, aborts) = throughput(&client, *mode, round, r).await?;
            rates[i].push((msgs, commits));
            aborted[i] += aborts;
        }
        eprintln!("transactions: round {} of {}, idempotent again…", r + 1, rounds.max(1));
        let (closing, _, _) = throughput(&client, Mode::Idempotent, round, r).await?;
        baselines.push(((rates[0][r as usize].0 + closing) / 2.0).max(1e-9));
    }
    let throughput = modes
        .iter()
        .zip(&rates)
        .zip(&aborted)
        .map(|((mode, r), aborted)| {
            let (msgs, commits) = median(r);
            let ratios: Vec<f64> = r.iter().zip(&baselines).map(|(x, base)| x.0 / base).collect();
            let mut sorted = ratios.clone();
            sorted.sort_by(f64::total_cmp);
            ThroughputRow {
                mode: mode.name(),
                msgs_per_sec: r.iter().map(|x| x.0).collect(),
                median_msgs_per_sec: msgs,
                ratio_to_idempotent: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
                ratios,
                commits_per_sec: commits,
                aborted: *aborted,
            }
        })
        .collect();

    let mut commit_latency = Vec::new();
    for partitions in [1u32, 4, 16] {
        eprintln!("transactions: commit latency, {partitions} partition(s) per transaction…");
        commit_latency.push(commit_latency_of(&client, partitions).await?);
    }
    eprintln!("transactions: filling {} for consume-transform-produce…", ctp::INPUT);
    ctp::fill_input(&client, RECORD_BYTES).await?;
    let cpu_seconds =
        || deployment.cpu_seconds().iter().map(|(_, s)| s).sum::<f64>() + crate::process::own_cpu_seconds();
    let consume_transform_produce = ctp::consume_transform_produce(&client, round, rounds, &cpu_seconds).await?;
    let record_at_a_time = ctp::record_at_a_time(&client, rounds).await?;
    let result = TransactionsResult {
        seconds_per_round: round.as_secs_f64(),
        rounds: rounds.max(1),
        record_bytes: RECORD_BYTES,
        throughput,
        commit_latency,
        consume_transform_produce,
        record_at_a_time,
    };
    crate::scenarios::finish(deployment, "transactions", &result);
    Ok(result)
}

/// The round with the median rate, of (rate, commits per second) per round ((0, 0) for none).
fn median(rounds: &[(f64, f64)]) -> (f64, f64) {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted.get(sorted.len() / 2).copied().unwrap_or((0.0, 0.0))
}

/// Sends for `round` in `mode`: (acknowledged or committed records per second, commits per
/// second, transactions that failed and were aborted). A transaction that fails is aborted and
/// its records are not counted, as an application would abort and redo it.
async fn throughput(client: &Client, mode: Mode, round: Duration, r: u32) -> anyhow::Result<(f64, f64, u64)> {
    let config = ProducerConfig { linger: Duration::from_millis(1), ..ProducerConfig::default() };
    let payload = Bytes::from(vec![b't'; RECORD_BYTES]);
    let mut pending: std::collections::VecDeque<DeliveryFuture> = std::collections::VecDeque::new();
    let start = Instant::now();
    let (mut sent, mut commits, mut aborts) = (0u64, 0u64, 0u64);
    match mode {
        Mode::Idempotent => {
            let producer = Producer::new(client.clone(), config);
            while start.elapsed() < round {
                if pending.len() >= WINDOW {
                    if let Some(d) = pending.pop_front() {
                        d.await.context("an idempotent send failed")?;
                    }
                }
                let partition = (sent % u64::from(PARTITIONS)) as u32;
                pending.push_back(producer.send_to("txn-bench", partition, Record::new(payload.clone())).await?);
                sent += 1;
            }
            for d in pending.drain(..) {
                d.await.context("an idempotent send failed")?;
            }
            producer.close().await;
        }
        Mode::Every(_) | Mode::Interval(_) => {
            let id = format!("bench-{}-{r}", mode.name().replace(' ', "-"));
            let producer = TransactionalProducer::new(client.clone(), config, &id, Duration::from_secs(60));
            producer.init_transactions().await?;
            while start.elapsed() < round {
                producer.begin_transaction()?;
                let began = Instant::now();
                let mut in_txn = 0usize;
                loop {
                    let partition = ((sent + in_txn as u64) % u64::from(PARTITIONS)) as u32;
                    // Deliveries are checked by the commit: it commits nothing if a send failed.
                    producer.send_to("txn-bench", partition, Record::new(payload.clone())).await?;
                    in_txn += 1;
                    let full = match mode {
                        Mode::Every(n) => in_txn >= n,
                        Mode::Interval(d) => began.elapsed() >= d,
                        Mode::Idempotent => true,
                    };
                    if full {
                        break;
                    }
                }
                match producer.commit_transaction().await {
                    Ok(()) => {
                        commits += 1;
                        sent += in_txn as u64;
                    }
                    Err(e) if e.transaction_kind() == rill_client::TransactionErrorKind::Abortable => {
                        eprintln!("transactions: {}: a transaction failed and is aborted: {e}", mode.name());
                        producer.abort_transaction().await?;
                        aborts += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            producer.close().await;
        }
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Ok((sent as f64 / seconds, commits as f64 / seconds, aborts))
}

/// Times `commit_transaction` of transactions writing one record to each of `partitions`
/// partitions (the records acknowledged before the clock starts).
async fn commit_latency_of(client: &Client, partitions: u32) -> anyhow::Result<CommitLatencyRow> {
    let config = ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() };
    let id = format!("bench-latency-{partitions}");
    let producer = TransactionalProducer::new(client.clone(), config, &id, Duration::from_secs(60));
    producer.init_transactions().await?;
    let mut latencies = Latencies::default();
    let payload = Bytes::from(vec![b'l'; 100]);
    for _ in 0..LATENCY_TRANSACTIONS {
        producer.begin_transaction()?;
        let mut deliveries = Vec::new();
        for p in 0..partitions {
            deliveries.push(producer.send_to("txn-latency", p, Record::new(payload.clone())).await?);
        }
        for d in deliveries {
            d.await.context("a transactional send failed")?;
        }
        let t = Instant::now();
        producer.commit_transaction().await?;
        latencies.record_us(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    producer.close().await;
    Ok(CommitLatencyRow {
        partitions,
        transactions: LATENCY_TRANSACTIONS,
        p50_ms: latencies.quantile_ms(0.5),
        p99_ms: latencies.quantile_ms(0.99),
        max_ms: latencies.max_ms(),
    })
}

/// The result as text.
pub fn summary(r: &TransactionsResult) -> String {
    let mut out = format!(
        "transactions: {} B records over {PARTITIONS} partitions, {:.0} s per mode and round, {} round(s), medians\n",
        r.record_bytes, r.seconds_per_round, r.rounds
    );
    for t in &r.throughput {
        let rounds: Vec<String> = t.ratios.iter().map(|x| format!("{x:.2}")).collect();
        out.push_str(&format!(
            "  {:<24} {:>9.0} msg/s  ({:.2} of idempotent, rounds {}; {:.1} commits/s; {} aborted)\n",
            t.mode,
            t.median_msgs_per_sec,
            t.ratio_to_idempotent,
            rounds.join(" / "),
            t.commits_per_sec,
            t.aborted
        ));
    }
    for c in &r.commit_latency {
        out.push_str(&format!(
            "  commit latency, {:>2} partition(s): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} transactions)\n",
            c.partitions, c.p50_ms, c.p99_ms, c.max_ms, c.transactions
        ));
    }
    for c in &r.consume_transform_produce {
        out.push_str(&format!(
            "  consume-transform-produce, {:<26} {:>8.0} msg/s  ({:.2} of send + commit; {:.1} commits/s; {} aborted; p50 {:.1} ms writing, {:.1} ms committing; {:.0} CPU-ms per 1,000 records, {:.2} cores busy)\n",
            c.mode,
            c.median_msgs_per_sec,
            c.ratio_to_send_then_commit,
            c.commits_per_sec,
            c.aborted,
            c.p50_write_ms,
            c.p50_commit_ms,
            c.cpu_ms_per_1000_records,
            c.cores_busy
        ));
    }
    for c in &r.record_at_a_time {
        out.push_str(&format!(
            "  a record at a time, {:<26} p50 {:.2} ms ({:.1}× send + commit), p99 {:.2} ms ({} records)\n",
            c.mode, c.p50_ms, c.p50_ratio_to_send_then_commit, c.p99_ms, c.iterations
        ));
    }
    out
}

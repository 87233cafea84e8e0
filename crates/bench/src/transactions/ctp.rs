//! Consume-transform-produce: one job reads an input topic as a consumer group, writes one
//! output record per input record, and commits what it has read — with a transaction per poll
//! (the output and the offsets as one unit, exactly-once) or with sends acknowledged and then a
//! synchronous offset commit per poll (at-least-once). Both read the same pre-filled input under
//! their own group, in the same run; the ratio is what to quote.
//!
//! [`record_at_a_time`] repeats the experiment Redpanda's post on its transactions reports
//! (<https://redpanda.com/blog/fast-transactions>): the same job processing one record per
//! iteration, timed per iteration — the comparison that post quotes for Redpanda (4.6× the
//! median latency of send + `commitSync`) and Kafka (more).

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use rill_client::{
    Client, Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec, Producer, ProducerConfig, Record,
    TransactionErrorKind, TransactionalProducer,
};
use serde::Serialize;

use crate::stats::Latencies;

/// The input topic (pre-filled) and the output topic.
pub(super) const INPUT: &str = "ctp-in";
pub(super) const OUTPUT: &str = "ctp-out";
/// Partitions of each.
pub(super) const PARTITIONS: u32 = 16;
/// Records in the input: more than either mode reads in a 10 s round (the synchronous loop
/// reads about 45,000 a second here).
const INPUT_RECORDS: u64 = 600_000;
/// Records a poll returns at most (Kafka's `max.poll.records` default): one commit each.
const MAX_POLL_RECORDS: usize = 500;

/// How the job commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Sends acknowledged, then `Consumer::commit`, per poll.
    SendThenCommit,
    /// A transaction per poll: sends, `send_offsets_to_transaction`, `commit_transaction`.
    Transaction,
}

/// Both modes, the synchronous one first: the ratios' base.
const MODES: [Mode; 2] = [Mode::SendThenCommit, Mode::Transaction];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::SendThenCommit => "send + synchronous commit",
            Mode::Transaction => "transaction per poll",
        }
    }
}

/// One mode's rate.
#[derive(Debug, Clone, Serialize)]
pub struct CtpRow {
    /// The mode.
    pub mode: String,
    /// Input records processed (output acknowledged and offsets committed) per second, per round.
    pub msgs_per_sec: Vec<f64>,
    /// Their median.
    pub median_msgs_per_sec: f64,
    /// The median over the send + synchronous commit median.
    pub ratio_to_send_then_commit: f64,
    /// Commits (offset commits or transactions) per second, median round.
    pub commits_per_sec: f64,
    /// Transactions that failed and were aborted and redone, over every round.
    pub aborted: u64,
    /// Where a poll's time goes, median over every round: the writing — every output flushed
    /// and acknowledged (send + synchronous commit), or the outputs queued and
    /// `send_offsets_to_transaction` answered (transaction per poll)…
    pub p50_write_ms: f64,
    /// …then the commit — `Consumer::commit`, or `commit_transaction` (the outputs still queued
    /// sent and acknowledged, then `EndTxn`).
    pub p50_commit_ms: f64,
    /// CPU the three nodes and the bench itself (the job's client) used per 1,000 input records,
    /// ms, median round: what the mode costs in work. On a machine whose cores the job keeps
    /// busy, the modes' rates stand in about the inverse ratio.
    pub cpu_ms_per_1000_records: f64,
    /// That CPU over the round's wall time (cores kept busy), median round.
    pub cores_busy: f64,
}

/// One mode's latency processing a record at a time.
#[derive(Debug, Clone, Serialize)]
pub struct RecordAtATimeRow {
    /// The mode.
    pub mode: String,
    /// Iterations timed (a record each).
    pub iterations: u64,
    /// From the record polled to its output acknowledged and its offset committed (send +
    /// synchronous commit) or its transaction committed, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// The median over the send + synchronous commit median.
    pub p50_ratio_to_send_then_commit: f64,
}

/// Iterations per mode and round of [`record_at_a_time`].
const RECORD_AT_A_TIME_ITERATIONS: u64 = 1_000;

/// A poll's two parts (see [`CtpRow::p50_write_ms`]).
#[derive(Default)]
struct Split {
    write: Latencies,
    commit: Latencies,
}

impl Split {
    fn record(&mut self, started: Instant, written: Instant) {
        self.write.record_us(micros(written.duration_since(started)));
        self.commit.record_us(micros(written.elapsed()));
    }
}

/// `d` in whole microseconds (saturating).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Fills the input topic with `INPUT_RECORDS` records of `record_bytes`.
pub(super) async fn fill_input(client: &Client, record_bytes: usize) -> anyhow::Result<()> {
    let producer =
        Producer::new(client.clone(), ProducerConfig { linger: Duration::from_millis(1), ..Default::default() });
    let payload = Bytes::from(vec![b'i'; record_bytes]);
    let mut pending = std::collections::VecDeque::new();
    for i in 0..INPUT_RECORDS {
        if pending.len() >= super::WINDOW {
            if let Some(d) = pending.pop_front() {
                let d: rill_client::DeliveryFuture = d;
                d.await.context("filling the input")?;
            }
        }
        let partition = (i % u64::from(PARTITIONS)) as u32;
        pending.push_back(producer.send_to(INPUT, partition, Record::new(payload.clone())).await?);
    }
    for d in pending {
        d.await.context("filling the input")?;
    }
    producer.close().await;
    Ok(())
}

/// One mode's round: input records and commits per second, CPU (cluster and bench) per
/// second.
#[derive(Debug, Clone, Copy)]
struct Round {
    msgs_per_sec: f64,
    commits_per_sec: f64,
    cpu_per_sec: f64,
}

/// Runs both modes `rounds` times, interleaved, each for `round` (or until it has read the
/// whole input). `cpu_seconds` reads the CPU seconds the cluster's processes and the bench have
/// used so far.
pub(super) async fn consume_transform_produce(
    client: &Client,
    round: Duration,
    rounds: u32,
    cpu_seconds: &dyn Fn() -> f64,
) -> anyhow::Result<Vec<CtpRow>> {
    let modes = MODES;
    let mut rates: Vec<Vec<Round>> = vec![Vec::new(); modes.len()];
    let mut aborted = [0u64; 2];
    let mut splits = [Split::default(), Split::default()];
    for (r, i) in interleaved(rounds) {
        let mode = &modes[i];
        eprintln!("transactions: round {} of {}, consume-transform-produce, {}…", r + 1, rounds.max(1), mode.name());
        let (measured, aborts) = run(client, *mode, round, r, &mut splits[i], cpu_seconds).await?;
        rates[i].push(measured);
        aborted[i] += aborts;
    }
    let base = median_round(&rates[0]).msgs_per_sec.max(1e-9);
    Ok(modes
        .iter()
        .zip(&rates)
        .zip(aborted)
        .zip(&splits)
        .map(|(((mode, r), aborted), split)| {
            let m = median_round(r);
            CtpRow {
                mode: mode.name().to_string(),
                msgs_per_sec: r.iter().map(|x| x.msgs_per_sec).collect(),
                median_msgs_per_sec: m.msgs_per_sec,
                ratio_to_send_then_commit: m.msgs_per_sec / base,
                commits_per_sec: m.commits_per_sec,
                aborted,
                p50_write_ms: split.write.quantile_ms(0.5),
                p50_commit_ms: split.commit.quantile_ms(0.5),
                cpu_ms_per_1000_records: m.cpu_per_sec / m.msgs_per_sec.max(1e-9) * 1e6,
                cores_busy: m.cpu_per_sec,
            }
        })
        .collect())
}

/// Processes the input a record at a time in both modes, `rounds` times interleaved, and
/// times each iteration: the experiment of Redpanda's post (module docs).
pub(super) async fn record_at_a_time(client: &Client, rounds: u32) -> anyhow::Result<Vec<RecordAtATimeRow>> {
    let modes = MODES;
    let mut latencies = [Latencies::default(), Latencies::default()];
    for (r, i) in interleaved(rounds) {
        eprintln!("transactions: round {} of {}, a record at a time, {}…", r + 1, rounds.max(1), modes[i].name());
        one_at_a_time(client, modes[i], r, &mut latencies[i]).await?;
    }
    let base = latencies[0].quantile_ms(0.5).max(1e-9);
    Ok(modes
        .iter()
        .zip(&latencies)
        .map(|(mode, l)| RecordAtATimeRow {
            mode: mode.name().to_string(),
            iterations: l.count(),
            p50_ms: l.quantile_ms(0.5),
            p99_ms: l.quantile_ms(0.99),
            p50_ratio_to_send_then_commit: l.quantile_ms(0.5) / base,
        })
        .collect())
}

/// One mode's round of [`record_at_a_time`]: `RECORD_AT_A_TIME_ITERATIONS` records, each
/// polled alone, transformed, written and committed before the next poll.
async fn one_at_a_time(client: &Client, mode: Mode, r: u32, latencies: &mut Latencies) -> anyhow::Result<()> {
    let mut job = Job::start(client, mode, &format!("one-{r}"), 1).await?;
    let give_up = Instant::now() + Duration::from_secs(120);
    let mut done = 0u64;
    while done < RECORD_AT_A_TIME_ITERATIONS {
        anyhow::ensure!(Instant::now() < give_up, "{}: a record at a time took over two minutes", mode.name());
        let records = job.consumer.poll(Duration::from_millis(100)).await?;
        if records.is_empty() {
            continue;
        }
        let started = Instant::now();
        if job.process(&records).await?.is_some() {
            latencies.record_us(micros(started.elapsed()));
            done += records.len() as u64;
        }
    }
    job.close().await
}

/// A consume-transform-produce job: a subscribed consumer of [`INPUT`] under its own group,
/// and the producer of its mode, with the client's default settings (linger 5 ms), as an
/// application gets them: a poll's outputs go out as one batch per partition. Neither mode
/// waits its linger out: the synchronous one flushes before waiting for its acknowledgements
/// (Kafka's at-least-once loop: `flush`, then `commitSync`), a transaction's offsets send what
/// it buffered and `commit_transaction` flushes.
struct Job {
    consumer: Consumer,
    producer: JobProducer,
}

enum JobProducer {
    Plain(Producer),
    Transactional(TransactionalProducer),
}

impl Job {
    /// Joins group `ctp-{txn|sync}-{name}` (transactional id `bench-ctp-{name}`), reading
    /// from the earliest input, at most `max_poll_records` a poll.
    async fn start(client: &Client, mode: Mode, name: &str, max_poll_records: usize) -> anyhow::Result<Job> {
        let tag = if mode == Mode::Transaction { "txn" } else { "sync" };
        let config = ConsumerConfig {
            group_id: Some(format!("ctp-{tag}-{name}")),
            start: OffsetSpec::Earliest,
            max_poll_records,
            ..ConsumerConfig::default()
        };
        let mut consumer = Consumer::new(client.clone(), config);
        consumer.subscribe(&[INPUT])?;
        let producer = match mode {
            Mode::SendThenCommit => JobProducer::Plain(Producer::new(client.clone(), ProducerConfig::default())),
            Mode::Transaction => {
                let id = format!("bench-ctp-{name}");
                let p =
                    TransactionalProducer::new(client.clone(), ProducerConfig::default(), &id, Duration::from_secs(60));
                p.init_transactions().await?;
                JobProducer::Transactional(p)
            }
        };
        Ok(Job { consumer, producer })
    }

    /// Writes one output per input record and commits the input's offsets: `Some(written)`,
    /// when the outputs were acknowledged (send + synchronous commit) or the offsets answered
    /// (transaction) — the commit took the rest — or `None` when a transaction failed, was
    /// aborted, and its input is to be read again.
    async fn process(&mut self, records: &[ConsumerRecord]) -> anyhow::Result<Option<Instant>> {
        match &self.producer {
            JobProducer::Plain(producer) => {
                let mut deliveries = Vec::with_capacity(records.len());
                for input in records {
                    deliveries.push(producer.send(OUTPUT, transform(input)).await?);
                }
                producer.flush().await;
                for d in deliveries {
                    d.await.context("an output send failed")?;
                }
                let written = Instant::now();
                self.consumer.commit().await.context("the offset commit failed")?;
                Ok(Some(written))
            }
            JobProducer::Transactional(producer) => match transact(producer, &self.consumer, records).await {
                Ok(written) => Ok(Some(written)),
                Err(e) if e.transaction_kind() != TransactionErrorKind::Fatal => {
                    eprintln!("transactions: consume-transform-produce: a transaction failed and is redone: {e}");
                    producer.abort_transaction().await?;
                    self.consumer.seek_to_committed().await?;
                    Ok(None)
                }
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Leaves the group and closes the producer.
    async fn close(self) -> anyhow::Result<()> {
        self.consumer.shutdown().await?;
        match self.producer {
            JobProducer::Plain(p) => p.close().await,
            JobProducer::Transactional(p) => p.close().await,
        }
        Ok(())
    }
}

/// (round, mode index) for `rounds` rounds (at least one) of the two modes, alternating which
/// goes first, so neither always reads an input the other just warmed.
fn interleaved(rounds: u32) -> impl Iterator<Item = (u32, usize)> {
    (0..rounds.max(1)).flat_map(|r| if r % 2 == 0 { [(r, 0), (r, 1)] } else { [(r, 1), (r, 0)] })
}

/// The round with the median rate (all zero for none).
fn median_round(rounds: &[Round]) -> Round {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec));
    sorted.get(sorted.len() / 2).copied().unwrap_or(Round { msgs_per_sec: 0.0, commits_per_sec: 0.0, cpu_per_sec: 0.0 })
}

/// The output record of `input`, keyed by where it came from (so outputs spread over the
/// output's partitions).
fn transform(input: &ConsumerRecord) -> Record {
    let mut value = b"out:".to_vec();
    value.extend_from_slice(input.value.as_deref().unwrap_or_default());
    Record::keyed(format!("{}-{}", input.partition, input.offset), value)
}

/// One mode for one round: its rates, and the transactions aborted. The clock (and the CPU
/// count) starts at the first records polled, so joining the group is not counted.
async fn run(
    client: &Client,
    mode: Mode,
    round: Duration,
    r: u32,
    split: &mut Split,
    cpu_seconds: &dyn Fn() -> f64,
) -> anyhow::Result<(Round, u64)> {
    let mut job = Job::start(client, mode, &r.to_string(), MAX_POLL_RECORDS).await?;
    let give_up = Instant::now() + round + Duration::from_secs(60);
    let mut start: Option<(Instant, f64)> = None;
    let (mut processed, mut commits, mut aborts) = (0u64, 0u64, 0u64);
    while start.is_none_or(|(s, _)| s.elapsed() < round) && processed < INPUT_RECORDS {
        anyhow::ensure!(Instant::now() < give_up, "{}: no records to read within a minute", mode.name());
        let records = job.consumer.poll(Duration::from_millis(100)).await?;
        if records.is_empty() {
            continue;
        }
        start.get_or_insert_with(|| (Instant::now(), cpu_seconds()));
        let started = Instant::now();
        match job.process(&records).await? {
            Some(written) => split.record(started, written),
            None => {
                aborts += 1;
                continue;
            }
        }
        processed += records.len() as u64;
        commits += 1;
    }
    let seconds = start.map_or(0.0, |(s, _)| s.elapsed().as_secs_f64()).max(1e-9);
    let cpu = start.map_or(0.0, |(_, before)| cpu_seconds() - before);
    job.close().await?;
    let measured = Round {
        msgs_per_sec: processed as f64 / seconds,
        commits_per_sec: commits as f64 / seconds,
        cpu_per_sec: cpu / seconds,
    };
    Ok((measured, aborts))
}

/// One poll's records as one transaction, its offsets included; when the offsets were
/// answered (the commit took the rest).
async fn transact(
    producer: &TransactionalProducer,
    consumer: &Consumer,
    records: &[ConsumerRecord],
) -> rill_client::Result<Instant> {
    producer.begin_transaction()?;
    for input in records {
        producer.send(OUTPUT, transform(input)).await?;
    }
    producer.send_offsets_to_transaction(&consumer.positions_to_commit(), &consumer.group_metadata()?).await?;
    let written = Instant::now();
    producer.commit_transaction().await?;
    Ok(written)
}

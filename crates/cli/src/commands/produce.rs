//! `rill produce TOPIC`: one record per input line; with `--transactional-id`, the lines go in
//! transactions of `--transaction-size` records, each committed (or aborted with `--abort`).

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use rill_client::{Acks, Compression, DeliveryFuture, Producer, ProducerConfig, Record, TransactionalProducer};
use serde_json::json;

use super::{connect, Output};

/// Deliveries awaited at most this far behind the input (bounds memory on huge inputs).
const MAX_OUTSTANDING: usize = 20_000;
/// Inputs at least this large get a progress line on a terminal.
const PROGRESS_EVERY: u64 = 10_000;

/// `rill produce` arguments.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    /// Topic name.
    topic: String,
    /// Acknowledgement level: all (committed and on every in-sync replica), 1 (synced on the
    /// leader) or 0 (not waited for).
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    acks: Acks,
    /// Send every record to this partition (default: by key with Kafka's partitioner; unkeyed
    /// records fill one batch per partition, then move on).
    #[arg(long)]
    partition: Option<u32>,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Add a header `key=value` to every record (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE")]
    headers: Vec<String>,
    /// Batch compression: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    compression: Compression,
    /// Send an empty value as null: with a key, a tombstone (as kcat's -Z).
    #[arg(long)]
    empty_as_null: bool,
    /// How long a batch waits for more records before it is sent.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Read records from this file instead of stdin.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Produce in transactions under this transactional id (acks=all, idempotent): a new
    /// instance fences older ones with the same id and aborts what they left open.
    #[arg(long, value_name = "ID")]
    transactional_id: Option<String>,
    /// Records per transaction (with --transactional-id); the last may be smaller.
    #[arg(long, default_value_t = 1_000, requires = "transactional_id", value_parser = clap::value_parser!(u64).range(1..))]
    transaction_size: u64,
    /// Abort every transaction instead of committing it (with --transactional-id): the records
    /// are written, and read_committed consumers never see them.
    #[arg(long, requires = "transactional_id")]
    abort: bool,
    /// How long a transaction may stay open before the coordinator aborts it.
    #[arg(long, default_value_t = 60_000, requires = "transactional_id")]
    transaction_timeout_ms: u64,
    /// Summary format.
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

fn parse_acks(s: &str) -> Result<Acks, String> {
    match s {
        "all" | "-1" => Ok(Acks::All),
        "1" | "leader" => Ok(Acks::Leader),
        "0" | "none" => Ok(Acks::None),
        other => Err(format!("acks must be all, 1 or 0, not {other:?}")),
    }
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    Compression::parse(s).ok_or_else(|| format!("compression must be none, gzip, snappy, lz4 or zstd, not {s:?}"))
}

fn parse_headers(raw: &[String]) -> anyhow::Result<Vec<(String, Option<Bytes>)>> {
    raw.iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), Some(Bytes::from(v.to_string())))),
            _ => bail!("--header {h:?} must look like key=value"),
        })
        .collect()
}

struct Tally {
    acked: u64,
    failed: u64,
    first_error: Option<rill_client::Error>,
}

impl Tally {
    async fn settle(&mut self, d: DeliveryFuture) {
        match d.await {
            Ok(_) => self.acked += 1,
            Err(e) => {
                self.failed += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// One input line as a record.
fn record_of(
    args: &ProduceArgs,
    i: usize,
    line: String,
    headers: &[(String, Option<Bytes>)],
) -> anyhow::Result<Record> {
    let mut record = match &args.key_separator {
        Some(sep) => match line.split_once(sep.as_str()) {
            Some((k, v)) => Record::keyed(Bytes::from(k.to_string()), Bytes::from(v.to_string())),
            None => bail!("line {} has no key separator {sep:?}: {line:?}", i + 1),
        },
        None => Record::new(Bytes::from(line)),
    };
    if args.empty_as_null && record.value.as_ref().is_some_and(Bytes::is_empty) {
        record.value = None;
    }
    record.headers = headers.to_vec();
    Ok(record)
}

/// `rill produce --transactional-id`: lines in transactions of `--transaction-size` records.
/// A transaction whose send failed is aborted and the command fails, saying how many
/// transactions were committed before it.
async fn run_transactional(
    args: &ProduceArgs,
    input: Box<dyn BufRead>,
    headers: &[(String, Option<Bytes>)],
    producer: TransactionalProducer,
) -> anyhow::Result<()> {
    let id = args.transactional_id.clone().unwrap_or_default();
    producer.init_transactions().await.with_context(|| format!("cannot initialise transactional id {id:?}"))?;
    let (mut done, mut records, mut in_txn) = (0u64, 0u64, 0u64);
    let mut deliveries: Vec<DeliveryFuture> = Vec::new();
    let lines = input.lines().enumerate();
    for (i, line) in lines {
        let line = line.context("cannot read the input")?;
        if in_txn == 0 {
            producer.begin_transaction()?;
        }
        let record = record_of(args, i, line, headers)?;
        let delivery = match args.partition {
            Some(p) => producer.send_to(&args.topic, p, record).await?,
            None => producer.send(&args.topic, record).await?,
        };
        deliveries.push(delivery);
        in_txn += 1;
        if in_txn == args.transaction_size {
            finish(&producer, std::mem::take(&mut deliveries), args.abort)
                .await
                .with_context(|| format!("transaction {} failed after {done} ended", done + 1))?;
            done += 1;
            records += in_txn;
            in_txn = 0;
        }
    }
    if in_txn > 0 {
        finish(&producer, deliveries, args.abort)
            .await
            .with_context(|| format!("transaction {} failed after {done} ended", done + 1))?;
        done += 1;
        records += in_txn;
    }
    producer.close().await;
    let verb = if args.abort { "aborted" } else { "committed" };
    match args.output {
        Output::Json => println!(
            "{}",
            json!({"topic": args.topic, "transactional_id": id, "transactions": done, "records": records, "outcome": verb})
        ),
        Output::Table => println!("{records} record(s) in {done} transaction(s) {verb} to {}", args.topic),
    }
    Ok(())
}

/// Ends the current transaction (commits it, or aborts it when `abort`) and waits for its
/// deliveries; a transaction that cannot commit is aborted and its error returned.
async fn finish(
    producer: &TransactionalProducer,
    deliveries: Vec<DeliveryFuture>,
    abort: bool,
) -> Result<(), rill_client::Error> {
    let ended = if abort { producer.abort_transaction().await } else { producer.commit_transaction().await };
    let mut first_error = None;
    for d in deliveries {
        if let Err(e) = d.await {
            first_error.get_or_insert(e);
        }
    }
    match (ended, first_error) {
        (Ok(()), None) => Ok(()),
        (Err(e), _) | (Ok(()), Some(e)) => {
            if !abort {
                let _ = producer.abort_transaction().await;
            }
            Err(e)
        }
    }
}

/// Runs `rill produce`.
pub async fn run(bootstrap: &[String], args: ProduceArgs) -> anyhow::Result<()> {
    let headers = parse_headers(&args.headers)?;
    let client = connect(bootstrap).await?;
    let partitions =
        client.partition_count(&args.topic).await.with_context(|| format!("cannot produce to {:?}", args.topic))?;
    if let Some(p) = args.partition {
        if p >= partitions {
            bail!(
                "partition {p} does not exist: topic {:?} has {partitions} partition(s), numbered 0 to {}",
                args.topic,
                partitions - 1
            );
        }
    }
    let input: Box<dyn BufRead> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )),
        None => Box::new(std::io::BufReader::new(std::io::stdin())),
    };
    let config = ProducerConfig {
        acks: args.acks,
        linger: Duration::from_millis(args.linger_ms),
        compression: args.compression,
        ..ProducerConfig::default()
    };
    if let Some(id) = args.transactional_id.clone() {
        if args.acks != Acks::All {
            bail!("--transactional-id needs --acks all: transactions are idempotent");
        }
        let timeout = Duration::from_millis(args.transaction_timeout_ms);
        let producer = TransactionalProducer::new(client, config, &id, timeout);
        return run_transactional(&args, input, &headers, producer).await;
    }
    let producer = Producer::new(client, config);
    let show_progress = std::io::stderr().is_terminal();
    let mut outstanding: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut tally = Tally { acked: 0, failed: 0, first_error: None };
    let mut sent = 0u64;
    for (i, line) in input.lines().enumerate() {
        let line = line.context("cannot read the input")?;
        let record = record_of(&args, i, line, &headers)?;
        let delivery = match args.partition {
            Some(p) => producer.send_to(&args.topic, p, record).await?,
            None => producer.send(&args.topic, record).await?,
        };
        outstanding.push_back(delivery);
        sent += 1;
        if outstanding.len() > MAX_OUTSTANDING {
            if let Some(d) = outstanding.pop_front() {
                tally.settle(d).await;
            }
        }
        if show_progress && sent.is_multiple_of(PROGRESS_EVERY) {
            eprint!("\rsent {sent}, acknowledged {}", tally.acked);
        }
    }
    producer.flush().await;
    for d in outstanding {
        tally.settle(d).await;
    }
    producer.close().await;
    if show_progress && sent >= PROGRESS_EVERY {
        eprintln!();
    }
    match args.output {
        Output::Json => println!(
            "{}",
            json!({"topic": args.topic, "sent": sent, "acknowledged": tally.acked, "failed": tally.failed})
        ),
        Output::Table => match args.acks {
            Acks::None => println!("sent {sent} record(s) to {} (acks=0: not acknowledged)", args.topic),
            _ => println!("{} of {sent} record(s) acknowledged by {}", tally.acked, args.topic),
        },
    }
    if let Some(e) = tally.first_error {
        bail!("{} record(s) not acknowledged; first error: {e}", tally.failed);
    }
    Ok(())
}

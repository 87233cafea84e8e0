//! `rill produce TOPIC`: one record per stdin line.

use std::collections::BTreeMap;
use std::io::BufRead;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::future::join_all;
use rill_client::partitioner::partition_for_key;
use rill_client::{Acks, Client, Record};

use super::connect;

/// Records per produce round (each round sends one batch per partition, all partitions at once).
const LINES_PER_ROUND: usize = 1000;

/// `rill produce` arguments.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    /// Topic name.
    topic: String,
    /// Acknowledgement level: all (committed and on every in-sync replica), 1 (synced on the
    /// leader) or 0 (not waited for).
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    acks: Acks,
    /// Send every record to this partition (default: by key, or spread when unkeyed).
    #[arg(long)]
    partition: Option<u32>,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
}

fn parse_acks(s: &str) -> Result<Acks, String> {
    match s {
        "all" | "-1" => Ok(Acks::All),
        "1" | "leader" => Ok(Acks::Leader),
        "0" | "none" => Ok(Acks::None),
        other => Err(format!("acks must be all, 1 or 0, not {other:?}")),
    }
}

struct Failure {
    records: usize,
    error: rill_client::Error,
}

/// Runs `rill produce`.
pub async fn run(bootstrap: &[String], args: ProduceArgs) -> anyhow::Result<()> {
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
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let (mut sent, mut acked, mut line_no) = (0usize, 0usize, 0usize);
    let mut failures: Vec<Failure> = Vec::new();
    let mut next_unkeyed = 0u32;
    loop {
        let mut round: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
        let mut n = 0;
        for line in lines.by_ref() {
            let line = line.context("cannot read stdin")?;
            line_no += 1;
            let record = match &args.key_separator {
                Some(sep) => match line.split_once(sep.as_str()) {
                    Some((k, v)) => Record::keyed(Bytes::from(k.to_string()), Bytes::from(v.to_string())),
                    None => bail!("line {line_no} has no key separator {sep:?}: {line:?}"),
                },
                None => Record::new(Bytes::from(line)),
            };
            let p = match (args.partition, &record.key) {
                (Some(p), _) => p,
                (None, Some(k)) => partition_for_key(k, partitions),
                // Unkeyed: fill one partition per round, then move on (sticky).
                (None, None) => next_unkeyed,
            };
            round.entry(p).or_default().push(record);
            n += 1;
            if n == LINES_PER_ROUND {
                break;
            }
        }
        if n == 0 {
            break;
        }
        next_unkeyed = (next_unkeyed + 1) % partitions;
        sent += n;
        let sends = round.into_iter().map(|(p, records)| {
            let client: &Client = &client;
            let topic = args.topic.as_str();
            async move {
                let count = records.len();
                (count, client.produce(topic, p, records, args.acks).await)
            }
        });
        for (count, result) in join_all(sends).await {
            match result {
                Ok(_) => acked += count,
                Err(error) => failures.push(Failure { records: count, error }),
            }
        }
    }
    match args.acks {
        Acks::None => println!("sent {sent} record(s) to {} (acks=0: not acknowledged)", args.topic),
        _ => println!("{acked} of {sent} record(s) acknowledged by {}", args.topic),
    }
    if let Some(first) = failures.first() {
        let failed: usize = failures.iter().map(|f| f.records).sum();
        bail!("{failed} record(s) not acknowledged; first error: {}", first.error);
    }
    Ok(())
}

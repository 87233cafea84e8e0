//! Share groups: `rill consume TOPIC --share-group G` (take records one by one alongside other
//! members, acknowledging each), `rill share config G` (the group's settings), `rill share
//! describe G` (where it stands on each partition, who holds what) and `rill share list`.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use rill_client::share::{
    AckKind, AcknowledgementMode, ShareConsumer, ShareConsumerConfig, ShareGroupDescription, ShareRecord,
};
use rill_client::OffsetSpec;
use serde_json::json;

use super::topic::parse_config;
use super::{connect, Output};
use crate::format::{Fields, Format};

/// Longest single poll; short so the idle timeout is honoured promptly.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// `rill share` subcommands.
#[derive(Debug, Subcommand)]
pub enum ShareCommand {
    /// Show a share group's settings, or change them (--config, --reset-config).
    Config {
        /// The share group.
        group: String,
        /// Set a setting `key=value` (repeatable): share.record.lock.duration.ms,
        /// share.delivery.count.limit, share.auto.offset.reset, share.isolation.level,
        /// share.partition.max.record.locks, share.member.max.record.locks,
        /// share.retry.backoff.ms, share.retry.backoff.max.ms,
        /// errors.deadletterqueue.topic.name (docs/queues.md).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Return a setting to its default (repeatable).
        #[arg(long = "reset-config", value_name = "KEY")]
        resets: Vec<String>,
        /// `json` prints the settings as JSON.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Where a share group stands on each partition it has read: its start offset, records in
    /// flight by state, the age of the oldest record not done, dead letters waiting and in the
    /// dead-letter topic; and the acquired records with who holds them, how long, and how long
    /// their locks have left (Redis' XPENDING).
    Describe {
        /// The share group.
        group: String,
        /// The most acquired records to list per partition (at most 1000).
        #[arg(long, default_value_t = 20)]
        records: u32,
        /// `json` prints one JSON object.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// The share groups of the cluster, with how many partitions each has read.
    List {
        /// `json` prints a JSON array.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
}

/// Runs `rill share`.
pub async fn run(bootstrap: &[String], command: ShareCommand) -> anyhow::Result<()> {
    match command {
        ShareCommand::Config { group, configs, resets, output } => {
            let client = connect(bootstrap).await?;
            let set = configs.iter().map(|c| parse_config(c)).collect::<anyhow::Result<Vec<_>>>()?;
            let settings = if set.is_empty() && resets.is_empty() {
                client.describe_share_group_config(&group).await
            } else {
                client.alter_share_group_config(&group, &set, &resets).await
            }
            .with_context(|| format!("share group {group:?}"))?;
            match output {
                Output::Json => {
                    let all: Vec<_> = settings
                        .iter()
                        .map(|s| json!({"key": s.key, "value": s.value, "default": s.default}))
                        .collect();
                    println!("{}", serde_json::Value::Array(all));
                }
                Output::Table => {
                    let width = settings.iter().map(|s| s.key.len()).max().unwrap_or(0);
                    for s in settings {
                        let origin = if s.default { "  (default)" } else { "" };
                        println!("{:width$}  {}{origin}", s.key, s.value);
                    }
                }
            }
            Ok(())
        }
        ShareCommand::Describe { group, records, output } => {
            let client = connect(bootstrap).await?;
            let d = client
                .describe_share_group(&group, records)
                .await
                .with_context(|| format!("cannot describe share group {group:?}"))?;
            let depths = dead_letter_depths(&client, &d).await;
            match output {
                Output::Json => println!("{}", describe_json(&group, &d, &depths)),
                Output::Table => print_description(&group, &d, &depths),
            }
            for why in &d.unanswered {
                eprintln!("warning: a node did not answer, its partitions are missing: {why}");
            }
            Ok(())
        }
        ShareCommand::List { output } => {
            let client = connect(bootstrap).await?;
            let (groups, unanswered) = client.list_share_groups().await.context("cannot list share groups")?;
            match output {
                Output::Json => {
                    let all: Vec<_> = groups.iter().map(|(g, n)| json!({"group": g, "partitions": n})).collect();
                    println!("{}", serde_json::Value::Array(all));
                }
                Output::Table => {
                    let width = groups.iter().map(|(g, _)| g.len()).max().unwrap_or(5).max(5);
                    println!("{:width$}  PARTITIONS", "GROUP");
                    for (g, n) in &groups {
                        println!("{g:width$}  {n}");
                    }
                }
            }
            for why in &unanswered {
                eprintln!("warning: a node did not answer, groups only it knows of are missing: {why}");
            }
            Ok(())
        }
    }
}

/// Records in each dead-letter partition a description names (its high watermark less its
/// first stored offset); a partition that cannot be read is left out.
async fn dead_letter_depths(
    client: &rill_client::Client,
    d: &ShareGroupDescription,
) -> std::collections::BTreeMap<(String, u32), u64> {
    let mut out = std::collections::BTreeMap::new();
    let targets: std::collections::BTreeSet<(String, u32)> =
        d.partitions.iter().filter_map(|p| p.dead_letters_to.clone()).collect();
    for (topic, partition) in targets {
        let earliest = client.list_offset(&topic, partition, OffsetSpec::Earliest).await;
        let latest = client.list_offset(&topic, partition, OffsetSpec::Latest).await;
        if let (Ok(e), Ok(l)) = (earliest, latest) {
            out.insert((topic, partition), l.saturating_sub(e));
        }
    }
    out
}

fn describe_json(
    group: &str,
    d: &ShareGroupDescription,
    depths: &std::collections::BTreeMap<(String, u32), u64>,
) -> serde_json::Value {
    let partitions: Vec<_> = d
        .partitions
        .iter()
        .map(|p| {
            let held: Vec<_> = p
                .held
                .iter()
                .map(|h| {
                    json!({
                        "offset": h.offset,
                        "member_id": h.member_id,
                        "delivery_count": h.delivery_count,
                        "held_ms": (p.now_ms - h.acquired_ms).max(0),
                        "lock_left_ms": (h.lock_until_ms - p.now_ms).max(0),
                    })
                })
                .collect();
            let dead_letters = p
                .dead_letters_to
                .as_ref()
                .map(|(t, n)| json!({"topic": t, "partition": n, "depth": depths.get(&(t.clone(), *n))}));
            json!({
                "topic": p.topic,
                "partition": p.partition,
                "start_offset": p.start_offset,
                "end_offset": p.end_offset,
                "high_watermark": p.high_watermark,
                "acquired": p.acquired,
                "available": p.available,
                "delayed": p.delayed,
                "dead_letter_waiting": p.dead_letter_waiting,
                "oldest_pending_age_ms": p.oldest_pending_age_ms,
                "dead_letters": dead_letters,
                "held": held,
            })
        })
        .collect();
    json!({"group": group, "partitions": partitions, "unanswered": d.unanswered})
}

fn print_description(group: &str, d: &ShareGroupDescription, depths: &std::collections::BTreeMap<(String, u32), u64>) {
    if d.partitions.is_empty() {
        println!("share group {group} has read no partition");
        return;
    }
    let seconds = |ms: i64| format!("{:.1}s", ms as f64 / 1000.0);
    println!(
        "{:<20} {:>9} {:>10} {:>10} {:>10} {:>8} {:>9} {:>7} {:>11} {:>14}  DEAD-LETTERS",
        "TOPIC", "PARTITION", "START", "END", "HW", "ACQUIRED", "AVAILABLE", "DELAYED", "DLQ-WAITING", "OLDEST-PENDING"
    );
    for p in &d.partitions {
        let dead_letters = p.dead_letters_to.as_ref().map_or("-".to_string(), |(t, n)| {
            let depth = depths.get(&(t.clone(), *n)).map_or("?".to_string(), |d| d.to_string());
            format!("{t}/{n} ({depth} records)")
        });
        println!(
            "{:<20} {:>9} {:>10} {:>10} {:>10} {:>8} {:>9} {:>7} {:>11} {:>14}  {dead_letters}",
            p.topic,
            p.partition,
            p.start_offset,
            p.end_offset,
            p.high_watermark,
            p.acquired,
            p.available,
            p.delayed,
            p.dead_letter_waiting,
            p.oldest_pending_age_ms.map_or("-".to_string(), seconds),
        );
    }
    let held: Vec<_> = d.partitions.iter().flat_map(|p| p.held.iter().map(move |h| (p, h))).collect();
    if held.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<20} {:>9} {:>10} {:<36} {:>10} {:>8} {:>9}",
        "TOPIC", "PARTITION", "OFFSET", "MEMBER", "DELIVERIES", "HELD", "LOCK-LEFT"
    );
    for (p, h) in held {
        println!(
            "{:<20} {:>9} {:>10} {:<36} {:>10} {:>8} {:>9}",
            p.topic,
            p.partition,
            h.offset,
            h.member_id,
            h.delivery_count,
            seconds((p.now_ms - h.acquired_ms).max(0)),
            seconds((h.lock_until_ms - p.now_ms).max(0)),
        );
    }
}

/// What `rill consume --share-group` does with each record: the seeds' experiments from the
/// command line.
#[derive(Debug, Clone, Default)]
pub struct Processing {
    /// Work time per record before it is acknowledged.
    pub process: Duration,
    /// Records whose value contains this are rejected (archived at once).
    pub reject: Option<String>,
    /// Records whose value contains this fail: released, to come back (after `fail_delay`).
    pub fail: Option<String>,
    /// The delay a failed record waits before it can be delivered again.
    pub fail_delay: Duration,
    /// Records acquired per partition per fetch at most (the prefetch; 0: the server's).
    pub prefetch: u32,
    /// The member id (random when empty).
    pub member_id: String,
}

/// Consumes `topic` as a member of share group `group`: prints each record with its delivery
/// count, works on it for `processing.process`, then accepts, rejects or releases it. Stops
/// after `max_messages`, or after `idle_limit` without a record; Ctrl-C releases what it holds
/// and leaves.
#[allow(clippy::too_many_arguments)]
pub async fn consume(
    bootstrap: &[String],
    topic: &str,
    group: &str,
    processing: Processing,
    format: &Format,
    output: Output,
    max_messages: Option<u64>,
    idle_limit: Option<Duration>,
) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    client.partition_count(topic).await.with_context(|| format!("cannot consume {topic:?}"))?;
    let config = ShareConsumerConfig {
        member_id: processing.member_id.clone(),
        max_records: processing.prefetch,
        acknowledgement_mode: AcknowledgementMode::Explicit,
        ..ShareConsumerConfig::new(group)
    };
    let mut consumer = ShareConsumer::new(client, config);
    consumer.subscribe([topic]);
    eprintln!("member {} of share group {group}", consumer.member_id());
    let mut printed = 0u64;
    let mut last_record = tokio::time::Instant::now();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let wait = idle_limit.map_or(POLL_WAIT, |l| l.min(POLL_WAIT));
        let records = tokio::select! {
            polled = consumer.poll(wait) => polled.with_context(|| format!("cannot read {topic}"))?,
            _ = &mut interrupted => break,
        };
        let mut done = false;
        for record in records {
            print_record(&record, format, output)?;
            if !processing.process.is_zero() {
                tokio::time::sleep(processing.process).await;
            }
            let value = String::from_utf8_lossy(record.record.value.as_deref().unwrap_or_default()).into_owned();
            let kind = if processing.reject.as_deref().is_some_and(|p| value.contains(p)) {
                AckKind::Reject {
                    reason: format!("rejected by rill consume: the value contains {:?}", processing.reject),
                }
            } else if processing.fail.as_deref().is_some_and(|p| value.contains(p)) {
                AckKind::Release { delay: processing.fail_delay }
            } else {
                AckKind::Accept
            };
            consumer.acknowledge(&record, kind)?;
            printed += 1;
            last_record = tokio::time::Instant::now();
            if max_messages.is_some_and(|m| printed >= m) {
                done = true;
                break;
            }
        }
        for refused in consumer.take_refused() {
            eprintln!(
                "warning: {}/{} offset {}: acknowledgement refused: {}",
                refused.topic, refused.partition, refused.offset, refused.error
            );
        }
        if done || idle_limit.is_some_and(|l| last_record.elapsed() >= l) {
            break;
        }
    }
    // Records left unprocessed go back at once rather than after their locks.
    for refused in consumer.close().await.context("cannot leave the share group cleanly")? {
        eprintln!(
            "warning: {}/{} offset {}: acknowledgement refused: {}",
            refused.topic, refused.partition, refused.offset, refused.error
        );
    }
    Ok(())
}

fn print_record(record: &ShareRecord, format: &Format, output: Output) -> anyhow::Result<()> {
    let r = &record.record;
    let text = |b: &Option<bytes::Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let line = match output {
        Output::Json => json!({
            "topic": record.topic,
            "partition": record.partition,
            "offset": r.offset,
            "delivery_count": record.delivery_count,
            "timestamp_ms": r.timestamp_ms,
            "key": text(&r.key),
            "value": text(&r.value),
        })
        .to_string(),
        Output::Table => format.render(&Fields {
            topic: &record.topic,
            partition: record.partition,
            offset: r.offset,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            timestamp_ms: r.timestamp_ms,
            delivery_count: Some(record.delivery_count),
        }),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{line}").context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")
}

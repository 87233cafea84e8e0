//! `rill consume TOPIC`: print records.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use rill_client::{Consumer, ConsumerConfig, IsolationLevel, OffsetReset, OffsetSpec, TopicPartition};
use serde_json::json;

use super::{connect, Output};
use crate::format::{Fields, Format};

/// Longest single poll; short so the idle timeout is honoured promptly.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// `rill consume` arguments.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// Topic name.
    topic: String,
    /// Read only this partition (default: all).
    #[arg(long)]
    partition: Option<u32>,
    /// Start at the earliest offset (default: only new records).
    #[arg(long, conflicts_with_all = ["offset", "from_timestamp"])]
    from_beginning: bool,
    /// Start at this offset (in the chosen partition, or in every partition).
    #[arg(long, conflicts_with = "from_timestamp")]
    offset: Option<u64>,
    /// Start at the first record appended at or after this time: milliseconds since the epoch,
    /// or a duration ago such as 10m or 2h.
    #[arg(long, value_parser = parse_time)]
    from_timestamp: Option<i64>,
    /// Exit after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Exit when no new record arrives for this long.
    #[arg(long, conflicts_with = "follow")]
    timeout_ms: Option<u64>,
    /// Keep waiting for new records until interrupted (the default without --timeout-ms).
    #[arg(long)]
    follow: bool,
    /// Consume as a member of this consumer group: the group's coordinator assigns the
    /// partitions (shared with the group's other members), each starts where the group
    /// committed (else at the end, or the beginning with --from-beginning), and what is printed
    /// is committed after it is printed. Ctrl-C commits and leaves the group. With --partition,
    /// reads that partition without membership and commits under the group.
    #[arg(long)]
    group: Option<String>,
    /// A static member's instance id (with --group): restarting within the session timeout
    /// keeps its partitions.
    #[arg(long, requires = "group")]
    instance_id: Option<String>,
    /// The group's assignor: `uniform` (default) or `range` (with --group).
    #[arg(long, requires = "group")]
    assignor: Option<String>,
    /// When a position is out of range (its records were deleted by retention or `rill topic
    /// trim`): continue at the `earliest` kept record or at the `latest` end, with a warning
    /// saying how many offsets were skipped, or stop with an error (`none`).
    #[arg(long, value_enum, default_value_t = Reset::Earliest)]
    auto_offset_reset: Reset,
    /// `read_committed` (default): only records of committed transactions, once committed;
    /// `read_uncommitted`: everything below the high watermark, open and aborted transactions
    /// included.
    #[arg(long, value_enum, default_value_t = Isolation::ReadCommitted)]
    isolation_level: Isolation,
    /// Consume as a member of this share group (a queue; docs/queues.md): records are taken one
    /// by one alongside the group's other members, from every partition, each acknowledged
    /// after it is printed (and processed: --process-ms) — accepted, or rejected (--reject) or
    /// released to come back (--fail). Ctrl-C releases what this member holds and leaves.
    #[arg(long, conflicts_with_all = ["group", "partition", "offset", "from_beginning", "from_timestamp"])]
    share_group: Option<String>,
    /// With --share-group: work this long on each record before acknowledging it.
    #[arg(long, requires = "share_group", default_value_t = 0)]
    process_ms: u64,
    /// With --share-group: reject records whose value contains this text (archived at once).
    #[arg(long, requires = "share_group", value_name = "TEXT")]
    reject: Option<String>,
    /// With --share-group: fail records whose value contains this text — release them, to come
    /// back (each failure is an attempt: after the group's delivery limit the record is
    /// archived).
    #[arg(long, requires = "share_group", value_name = "TEXT")]
    fail: Option<String>,
    /// With --fail: how long a failed record waits before it can be delivered again.
    #[arg(long, requires = "fail", default_value_t = 0)]
    fail_delay_ms: u64,
    /// With --share-group: records taken per partition per fetch at most (the prefetch).
    #[arg(long, requires = "share_group", default_value_t = 0)]
    prefetch: u32,
    /// With --share-group: this member's id (random by default).
    #[arg(long, requires = "share_group")]
    member_id: Option<String>,
    /// Output format: %t topic, %p partition, %o offset, %k key, %v value, %T timestamp, %d
    /// delivery count (share groups).
    #[arg(long, default_value = "%v")]
    format: String,
    /// `json` prints one JSON object per record instead of --format.
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// `--isolation-level` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[clap(rename_all = "snake_case")]
enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

/// `--auto-offset-reset` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Reset {
    Earliest,
    Latest,
    None,
}

/// A time: milliseconds since the epoch, or a duration ago such as `10m`.
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let ago = humantime::parse_duration(s)
        .map_err(|_| format!("{s:?} is neither milliseconds since the epoch nor a duration like 10m"))?;
    let now = std::time::SystemTime::UNIX_EPOCH.elapsed().map_err(|e| e.to_string())?;
    Ok(now.saturating_sub(ago).as_millis() as i64)
}

/// A nullable field as text for JSON output (`null` when null).
fn text(field: &Option<bytes::Bytes>) -> Option<String> {
    field.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Runs `rill consume`.
pub async fn run(bootstrap: &[String], args: ConsumeArgs) -> anyhow::Result<()> {
    let format = Format::parse(&args.format).map_err(anyhow::Error::msg)?;
    if let Some(group) = &args.share_group {
        let processing = super::share::Processing {
            process: Duration::from_millis(args.process_ms),
            reject: args.reject.clone(),
            fail: args.fail.clone(),
            fail_delay: Duration::from_millis(args.fail_delay_ms),
            prefetch: args.prefetch,
            member_id: args.member_id.clone().unwrap_or_default(),
        };
        let idle_limit = if args.follow { None } else { args.timeout_ms.map(Duration::from_millis) };
        return super::share::consume(
            bootstrap,
            &args.topic,
            group,
            processing,
            &format,
            args.output,
            args.max_messages,
            idle_limit,
        )
        .await;
    }
    let client = connect(bootstrap).await?;
    let count =
        client.partition_count(&args.topic).await.with_context(|| format!("cannot consume {:?}", args.topic))?;
    let partitions: Vec<u32> = match args.partition {
        Some(p) if p >= count => bail!("partition {p} does not exist: topic {:?} has {count} partition(s)", args.topic),
        Some(p) => vec![p],
        None => (0..count).collect(),
    };
    let auto_offset_reset = match args.auto_offset_reset {
        Reset::Earliest => OffsetReset::Earliest,
        Reset::Latest => OffsetReset::Latest,
        Reset::None => OffsetReset::None,
    };
    let subscribe = args.group.is_some() && args.partition.is_none();
    if subscribe && (args.offset.is_some() || args.from_timestamp.is_some()) {
        bail!("--offset and --from-timestamp need --partition with --group: a group member starts where the group committed");
    }
    let config = ConsumerConfig {
        group_id: args.group.clone(),
        start: if args.from_beginning { OffsetSpec::Earliest } else { OffsetSpec::Latest },
        auto_offset_reset,
        group_instance_id: args.instance_id.clone(),
        server_assignor: args.assignor.clone(),
        client_id: "rill-cli".to_string(),
        isolation_level: match args.isolation_level {
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
            Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
        },
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(client, config);
    let tps: Vec<TopicPartition> = if subscribe {
        consumer.set_rebalance_listener(Report);
        consumer.subscribe(&[&args.topic])?;
        Vec::new()
    } else {
        partitions.iter().map(|p| TopicPartition::new(&args.topic, *p)).collect()
    };
    if !subscribe {
        consumer.assign(tps.clone());
    }
    for tp in &tps {
        let position = match (args.offset, args.from_beginning, args.from_timestamp) {
            (Some(o), _, _) => {
                consumer.seek(tp, o)?;
                continue;
            }
            (None, true, _) => consumer.seek_to(tp, OffsetSpec::Earliest).await,
            (None, false, Some(t)) => consumer.seek_to(tp, OffsetSpec::Timestamp(t)).await,
            // A group starts where it committed (the consumer looks it up), else at the end.
            (None, false, None) if args.group.is_some() => continue,
            (None, false, None) => consumer.seek_to(tp, OffsetSpec::Latest).await,
        };
        position.with_context(|| format!("cannot find the start of {}/{}", tp.topic, tp.partition))?;
    }
    let idle_limit = if args.follow { None } else { args.timeout_ms.map(Duration::from_millis) };
    let mut printed = 0u64;
    let mut last_record = tokio::time::Instant::now();
    let stdout = std::io::stdout();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let wait = idle_limit.map_or(POLL_WAIT, |l| l.min(POLL_WAIT));
        let records = tokio::select! {
            polled = consumer.poll(wait) => polled.with_context(|| format!("cannot read {}", args.topic))?,
            _ = &mut interrupted => {
                // Everything printed is committed already; leave so the partitions move at once.
                return consumer.shutdown().await.context("cannot leave the group cleanly");
            }
        };
        for r in consumer.take_resets() {
            eprintln!(
                "warning: {}/{}: offset {} is out of range (deleted by retention or a trim?); skipped {} offset(s), continuing at {}",
                r.tp.topic,
                r.tp.partition,
                r.from,
                r.skipped(),
                r.to
            );
        }
        let mut printed_up_to: BTreeMap<TopicPartition, u64> = BTreeMap::new();
        let mut out = stdout.lock();
        let mut done = false;
        for rec in records {
            printed_up_to.insert(TopicPartition::new(&rec.topic, rec.partition), rec.offset + 1);
            let line = match args.output {
                Output::Json => json!({
                    "topic": rec.topic,
                    "partition": rec.partition,
                    "offset": rec.offset,
                    "timestamp_ms": rec.timestamp_ms,
                    "key": text(&rec.key),
                    "value": text(&rec.value),
                    "headers": rec.headers.iter().map(|(k, v)| (k.clone(), json!(text(v)))).collect::<serde_json::Map<_, _>>(),
                })
                .to_string(),
                Output::Table => format.render(&Fields {
                    topic: &rec.topic,
                    partition: rec.partition,
                    offset: rec.offset,
                    key: rec.key.as_deref(),
                    value: rec.value.as_deref(),
                    timestamp_ms: rec.timestamp_ms,
                    delivery_count: None,
                }),
            };
            writeln!(out, "{line}").context("cannot write to stdout")?;
            printed += 1;
            last_record = tokio::time::Instant::now();
            if args.max_messages.is_some_and(|m| printed >= m) {
                done = true;
                break;
            }
        }
        out.flush().ok();
        drop(out);
        if args.group.is_some() && !printed_up_to.is_empty() {
            // After the records are written, exactly what was written: a crash before this
            // prints them again, never skips them.
            match consumer.commit_offsets(printed_up_to).await {
                Ok(()) => {}
                // A member whose partition moved on (or whose membership was lost) keeps
                // consuming what it owns now; the records come again to the partition's owner.
                Err(e) if subscribe => eprintln!("warning: commit refused: {e}"),
                Err(e) => return Err(e).context("cannot commit the group's offsets"),
            }
        }
        if done || idle_limit.is_some_and(|l| last_record.elapsed() >= l) {
            return consumer.shutdown().await.context("cannot leave the group cleanly");
        }
    }
}

/// Tells the user on stderr which partitions this member takes and gives up, so a rebalance
/// is visible next to the records.
struct Report;

impl Report {
    fn list(partitions: &[TopicPartition]) -> String {
        partitions.iter().map(|tp| format!("{}/{}", tp.topic, tp.partition)).collect::<Vec<_>>().join(", ")
    }
}

impl rill_client::RebalanceListener for Report {
    fn on_assigned(&mut self, partitions: &[TopicPartition]) {
        eprintln!("assigned: {}", Self::list(partitions));
    }

    fn on_revoked(&mut self, partitions: &[TopicPartition]) {
        eprintln!("revoked: {}", Self::list(partitions));
    }

    fn on_lost(&mut self, partitions: &[TopicPartition]) {
        eprintln!(
            "warning: lost: {} (this member was fenced or missed its session); their unprinted records are dropped and \
             their next owner starts at the last commit",
            Self::list(partitions)
        );
    }
}

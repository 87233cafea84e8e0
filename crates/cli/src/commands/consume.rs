//! `rill consume TOPIC`: print records.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::future::join_all;
use rill_client::OffsetSpec;

use super::connect;
use crate::format::{Fields, Format};

/// Longest single long-poll; shorter than any sensible --timeout-ms so exit is prompt.
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
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Start at this offset (with --partition, or in every partition).
    #[arg(long)]
    offset: Option<u64>,
    /// Exit after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Exit when no new record arrives for this long (default: wait forever).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Output format: %t topic, %p partition, %o offset, %k key, %v value, %T timestamp.
    #[arg(long, default_value = "%v")]
    format: String,
}

/// Runs `rill consume`.
pub async fn run(bootstrap: &[String], args: ConsumeArgs) -> anyhow::Result<()> {
    let format = Format::parse(&args.format).map_err(anyhow::Error::msg)?;
    let client = connect(bootstrap).await?;
    let count =
        client.partition_count(&args.topic).await.with_context(|| format!("cannot consume {:?}", args.topic))?;
    let partitions: Vec<u32> = match args.partition {
        Some(p) if p >= count => bail!("partition {p} does not exist: topic {:?} has {count} partition(s)", args.topic),
        Some(p) => vec![p],
        None => (0..count).collect(),
    };
    let mut positions = Vec::new();
    for p in &partitions {
        let start = match (args.offset, args.from_beginning) {
            (Some(o), _) => o,
            (None, true) => client.list_offset(&args.topic, *p, OffsetSpec::Earliest).await?,
            (None, false) => client.list_offset(&args.topic, *p, OffsetSpec::Latest).await?,
        };
        positions.push(start);
    }
    let idle_limit = args.timeout_ms.map(Duration::from_millis);
    let mut printed = 0u64;
    let mut last_record = tokio::time::Instant::now();
    let stdout = std::io::stdout();
    loop {
        let wait = idle_limit.map_or(POLL_WAIT, |l| l.min(POLL_WAIT));
        let fetches = partitions.iter().zip(&positions).map(|(p, o)| {
            let client = &client;
            let topic = args.topic.as_str();
            async move { client.fetch(topic, *p, Some(*o), wait).await }
        });
        let results = join_all(fetches).await;
        let mut out = stdout.lock();
        for (i, r) in results.into_iter().enumerate() {
            let fetched = r.with_context(|| format!("cannot fetch {}/{}", args.topic, partitions[i]))?;
            positions[i] = fetched.next_offset.max(positions[i]);
            for rec in fetched.records {
                let line = format.render(&Fields {
                    topic: &args.topic,
                    partition: partitions[i],
                    offset: rec.offset,
                    key: rec.key.as_deref(),
                    value: &rec.value,
                    timestamp_ms: rec.timestamp_ms,
                });
                writeln!(out, "{line}").context("cannot write to stdout")?;
                printed += 1;
                last_record = tokio::time::Instant::now();
                if args.max_messages.is_some_and(|m| printed >= m) {
                    return Ok(());
                }
            }
        }
        out.flush().ok();
        if idle_limit.is_some_and(|l| last_record.elapsed() >= l) {
            return Ok(());
        }
    }
}

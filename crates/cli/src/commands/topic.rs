//! `rill topic …`

use anyhow::{bail, Context};
use clap::Subcommand;
use comfy_table::Table;
use rill_client::TopicDescription;
use serde_json::json;

use super::{connect, Output};

/// Topic commands.
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Replicas per partition.
        #[arg(long, default_value_t = 3)]
        replication_factor: u32,
        /// Topic setting `key=value` (repeatable): min.insync.replicas, max.message.bytes,
        /// replica.lag.time.max.ms, producer.id.expiration.ms, retention.ms, retention.bytes.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Show partitions: leader, replicas, in-sync replicas and offsets.
    Describe {
        /// Topic name.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Change settings or grow the partition count.
    Alter {
        /// Topic name.
        name: String,
        /// Set a topic setting `key=value` (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Return a setting to its default (repeatable).
        #[arg(long = "reset-config", value_name = "KEY")]
        resets: Vec<String>,
        /// Grow the topic to this many partitions (it never shrinks; keys map to partitions
        /// by murmur2(key) % count, so keyed records move to other partitions from then on).
        #[arg(long)]
        partitions: Option<u32>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Delete a partition's records below an offset (Kafka's DeleteRecords): its log start
    /// offset moves there, and consumers behind it skip ahead (auto offset reset).
    Trim {
        /// Topic name.
        name: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// Delete records below this offset; `hw` deletes every committed record.
        #[arg(long, value_parser = parse_before)]
        before: i64,
    },
    /// Delete a topic and its data; the name can be reused.
    Delete {
        /// Topic name.
        name: String,
    },
    /// List topics.
    List {
        /// Also list the internal topics (`__consumer_offsets`, `__transaction_state`).
        #[arg(long)]
        internal: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
}

/// A `key=value` setting.
pub(crate) fn parse_config(entry: &str) -> anyhow::Result<(String, String)> {
    match entry.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => bail!("--config {entry:?} must look like key=value, e.g. retention.ms=60000"),
    }
}

fn parse_before(s: &str) -> Result<i64, String> {
    if s.eq_ignore_ascii_case("hw") {
        return Ok(rill_client::DELETE_BELOW_HIGH_WATERMARK);
    }
    s.parse::<u64>()
        .ok()
        .and_then(|o| i64::try_from(o).ok())
        .ok_or_else(|| format!("{s:?} is not an offset (a non-negative integer) nor `hw`"))
}

/// Bytes for people: `512 B`, `3.2 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The JSON shape of a topic description.
pub fn description_json(d: &TopicDescription) -> serde_json::Value {
    json!({
        "name": d.name,
        "topic_id": rill_client::topic_id_string(&d.topic_id),
        "kind": d.kind,
        "internal": d.internal,
        "partitions": d.partitions.iter().map(|p| json!({
            "partition": p.partition,
            "leader": p.leader,
            "replicas": p.replicas,
            "isr": p.isr,
            "log_start_offset": p.log_start_offset,
            "high_watermark": p.high_watermark,
            "log_end_offset": p.log_end_offset,
            "quiescent": p.quiescent,
            "retained_bytes": p.retained_bytes,
            "stored_from_offset": p.stored_from_offset,
            "cleaned_to_offset": p.cleaned_to_offset,
        })).collect::<Vec<_>>(),
        "configs": d.configs.iter().map(|c| (c.key.clone(), json!(c.value))).collect::<serde_json::Map<_, _>>(),
    })
}

fn print_description(d: &TopicDescription) {
    let mut t = Table::new();
    t.set_header(vec![
        "PARTITION",
        "LEADER",
        "REPLICAS",
        "ISR",
        "LOG START",
        "HIGH WATERMARK",
        "LOG END",
        "RETAINED",
        "CLEANED TO",
        "PROBLEM",
    ]);
    let compacted = d.configs.iter().any(|c| c.key == "cleanup.policy" && c.value.contains("compact"));
    for p in &d.partitions {
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let num = |n: i64| {
            if n < 0 {
                "-".to_string()
            } else {
                n.to_string()
            }
        };
        t.add_row(vec![
            p.partition.to_string(),
            p.leader.map_or("none".to_string(), |l| l.to_string()),
            list(&p.replicas),
            list(&p.isr),
            num(p.log_start_offset),
            num(p.high_watermark),
            num(p.log_end_offset),
            if p.leader.is_some() && !d.internal { human_bytes(p.retained_bytes) } else { "-".to_string() },
            if compacted { num(p.cleaned_to_offset) } else { "-".to_string() },
            p.error_message.clone(),
        ]);
    }
    let internal = if d.internal {
        format!(" (internal: {} state; its partitions have no offsets)", d.kind)
    } else {
        String::new()
    };
    println!("topic {} id {}{internal}", d.name, rill_client::topic_id_string(&d.topic_id));
    println!("{t}");
    let configs: Vec<String> = d.configs.iter().map(|c| format!("{}={}", c.key, c.value)).collect();
    println!("config: {}", configs.join(" "));
}

/// Runs a topic command.
pub async fn run(bootstrap: &[String], cmd: TopicCommand) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    match cmd {
        TopicCommand::Create { name, partitions, replication_factor, configs } => {
            let configs = configs.iter().map(|c| parse_config(c)).collect::<anyhow::Result<Vec<_>>>()?;
            let d = client
                .create_topic(&name, partitions, replication_factor, &configs)
                .await
                .with_context(|| format!("cannot create topic {name:?}"))?;
            println!(
                "created topic {} with {} partition(s), replication factor {replication_factor}",
                d.name,
                d.partitions.len()
            );
        }
        TopicCommand::Describe { name, output } => {
            let d = client.describe_topic(&name).await.with_context(|| format!("cannot describe topic {name:?}"))?;
            match output {
                Output::Json => println!("{}", description_json(&d)),
                Output::Table => print_description(&d),
            }
        }
        TopicCommand::Alter { name, configs, resets, partitions, output } => {
            if configs.is_empty() && resets.is_empty() && partitions.is_none() {
                bail!("nothing to change: give --config key=value, --reset-config key or --partitions N");
            }
            let set = configs.iter().map(|c| parse_config(c)).collect::<anyhow::Result<Vec<_>>>()?;
            let mut description = None;
            if !set.is_empty() || !resets.is_empty() {
                description = Some(
                    client
                        .alter_topic_config(&name, &set, &resets)
                        .await
                        .with_context(|| format!("cannot alter topic {name:?}"))?,
                );
            }
            if let Some(total) = partitions {
                description = Some(
                    client
                        .create_partitions(&name, total)
                        .await
                        .with_context(|| format!("cannot add partitions to {name:?}"))?,
                );
            }
            if let Some(d) = description {
                match output {
                    Output::Json => println!("{}", description_json(&d)),
                    Output::Table => {
                        println!("altered topic {name}");
                        print_description(&d);
                    }
                }
            }
        }
        TopicCommand::Trim { name, partition, before } => {
            let start = client
                .delete_records(&name, partition, before)
                .await
                .with_context(|| format!("cannot trim {name}/{partition}"))?;
            println!("trimmed {name}/{partition}: the log start offset is now {start}");
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await.with_context(|| format!("cannot delete topic {name:?}"))?;
            println!("deleted topic {name}");
        }
        TopicCommand::List { internal, output } => {
            let topics = client.list_topics_with(internal).await.context("cannot list topics")?;
            match output {
                Output::Json => {
                    let v: Vec<_> = topics
                        .iter()
                        .map(|t| json!({"name": t.name, "topic_id": rill_client::topic_id_string(&t.topic_id), "partitions": t.partitions, "replication_factor": t.replication_factor, "internal": t.internal}))
                        .collect();
                    println!("{}", serde_json::Value::Array(v));
                }
                Output::Table => {
                    let mut t = Table::new();
                    t.set_header(vec!["TOPIC", "PARTITIONS", "REPLICATION FACTOR", "TOPIC ID"]);
                    for topic in topics {
                        let name =
                            if topic.internal { format!("{} (internal)", topic.name) } else { topic.name.clone() };
                        t.add_row(vec![
                            name,
                            topic.partitions.to_string(),
                            topic.replication_factor.to_string(),
                            rill_client::topic_id_string(&topic.topic_id),
                        ]);
                    }
                    println!("{t}");
                }
            }
        }
    }
    Ok(())
}

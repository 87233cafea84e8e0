//! The idempotent consumer: effects outside Rill, applied once per message although Rill
//! delivers at least once.
//!
//! Rill's transactions make consume-transform-produce exactly-once for state that lives in Rill
//! (see the invoicer). An effect elsewhere — a row in a database, an email, a payment — cannot
//! join a Rill transaction. Delivery is then at least once: a consumer that crashes after the
//! effect but before committing its offset gets the record again, and a producer may have sent
//! one message twice. The remedy is on the effect's side: record the message's id in a
//! `processed` table **in the same database transaction as the effect**, and skip a message
//! whose id is already there. Both happen, or neither does.
//!
//! ```text
//!  poll ─► for each record: BEGIN; INSERT processed(id) (conflict: duplicate, skip);
//!                           effect (INSERT INTO payments …); COMMIT
//!       ─► commit the offsets (after the effects: a crash in between redelivers, and the
//!          processed table absorbs it)
//! ```
//!
//! A message's id is its key (a producer that retries a message sends the same key); records
//! without a key are identified by topic, partition and offset.
//!
//! ```sh
//! rill-idempotent-consumer --bootstrap 127.0.0.1:7001 --topic payments --db payments.sqlite
//! rill-idempotent-consumer --db payments.sqlite --report     # effects per message id, as JSON
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rill_client::{Client, Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec};
use rusqlite::{params, Connection, OptionalExtension};

#[derive(Parser, Debug)]
#[command(
    name = "rill-idempotent-consumer",
    about = "Applies each message's effect to a SQLite database exactly once."
)]
struct Args {
    /// Nodes to start from (comma-separated host:port).
    #[arg(long, env = "RILL_BOOTSTRAP", value_delimiter = ',', default_value = "127.0.0.1:7001")]
    bootstrap: Vec<String>,
    /// The topic to consume.
    #[arg(long, default_value = "payments")]
    topic: String,
    /// The consumer group.
    #[arg(long, default_value = "payments-ledger")]
    group: String,
    /// The SQLite database the effects go to (created when missing).
    #[arg(long)]
    db: PathBuf,
    /// Exit (0) once no message came for this long; runs until stopped otherwise.
    #[arg(long, value_parser = humantime::parse_duration)]
    exit_when_idle: Option<Duration>,
    /// For demonstrations and tests: after applying this many messages, exit at once (status 3)
    /// without committing their offsets, as a crash between the effect and the commit would.
    #[arg(long)]
    crash_after: Option<u64>,
    /// Print how many times each message id's effect was applied (JSON) and exit.
    #[arg(long)]
    report: bool,
}

/// Opens `path`, creating the tables when missing.
fn open(path: &PathBuf) -> anyhow::Result<Connection> {
    let db = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS processed (message_id TEXT PRIMARY KEY, topic TEXT, partition INTEGER, offset INTEGER);
         CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL, body BLOB);",
    )?;
    Ok(db)
}

/// The message's id: its key, else where it is stored.
fn message_id(r: &ConsumerRecord) -> String {
    match &r.key {
        Some(k) => String::from_utf8_lossy(k).into_owned(),
        None => format!("{}/{}/{}", r.topic, r.partition, r.offset),
    }
}

/// Applies `r`'s effect unless its id was processed already; true when applied. The id and
/// the effect are written in one database transaction.
fn apply_once(db: &mut Connection, r: &ConsumerRecord) -> rusqlite::Result<bool> {
    let id = message_id(r);
    let tx = db.transaction()?;
    let seen: Option<String> = tx
        .query_row("SELECT message_id FROM processed WHERE message_id = ?1", params![id], |row| row.get(0))
        .optional()?;
    if seen.is_some() {
        return Ok(false);
    }
    tx.execute(
        "INSERT INTO processed (message_id, topic, partition, offset) VALUES (?1, ?2, ?3, ?4)",
        params![id, r.topic, r.partition, i64::try_from(r.offset).unwrap_or(i64::MAX)],
    )?;
    // The effect: here a ledger row; in a real service, whatever the message asks for.
    tx.execute(
        "INSERT INTO payments (message_id, body) VALUES (?1, ?2)",
        params![id, r.value.as_deref().unwrap_or_default()],
    )?;
    tx.commit()?;
    Ok(true)
}

/// Effects per message id, as JSON.
fn report(db: &Connection) -> anyhow::Result<String> {
    let mut stmt = db.prepare("SELECT message_id, COUNT(*) FROM payments GROUP BY message_id ORDER BY message_id")?;
    let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
    let mut out = serde_json::Map::new();
    for row in rows {
        let (id, n) = row?;
        out.insert(id, n.into());
    }
    Ok(serde_json::Value::Object(out).to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();
    let args = Args::parse();
    let mut db = open(&args.db)?;
    if args.report {
        println!("{}", report(&db)?);
        return Ok(());
    }
    let client = Client::connect(&args.bootstrap).await.context("connecting to the cluster")?;
    let config =
        ConsumerConfig { group_id: Some(args.group.clone()), start: OffsetSpec::Earliest, ..ConsumerConfig::default() };
    let mut consumer = Consumer::new(client, config);
    consumer.subscribe(&[args.topic.as_str()])?;

    let (mut applied, mut skipped) = (0u64, 0u64);
    let mut idle_since = tokio::time::Instant::now();
    loop {
        let records = tokio::select! {
            polled = consumer.poll(Duration::from_millis(200)) => match polled {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(error = %e, "poll failed; polling again");
                    continue;
                }
            },
            _ = tokio::signal::ctrl_c() => break,
        };
        if consumer.assignment().is_empty() {
            // Not idle while waiting for partitions.
            idle_since = tokio::time::Instant::now();
        }
        if records.is_empty() {
            if args.exit_when_idle.is_some_and(|idle| idle_since.elapsed() >= idle) {
                break;
            }
            continue;
        }
        idle_since = tokio::time::Instant::now();
        for r in &records {
            if apply_once(&mut db, r).context("applying a message")? {
                applied += 1;
            } else {
                skipped += 1;
            }
            if args.crash_after.is_some_and(|n| applied >= n) {
                println!(
                    "crashing: applied {applied} message(s), skipped {skipped} duplicate(s); offsets not committed"
                );
                std::process::exit(3);
            }
        }
        // After the effects: a crash before this line redelivers them, and they are skipped.
        if let Err(e) = consumer.commit().await {
            tracing::warn!(error = %e, "offset commit failed; the messages will come again and be skipped");
        }
    }
    println!("applied {applied} message(s), skipped {skipped} duplicate(s)");
    consumer.shutdown().await?;
    Ok(())
}

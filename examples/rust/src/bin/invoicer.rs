//! The exactly-once invoicer: reads orders, writes one invoice per order, and commits the orders
//! it consumed in the same transaction as the invoices it produced (consume-transform-produce,
//! KIP-447). Killed at any point and restarted, it invoices every order exactly once as a
//! `read_committed` reader sees the invoices:
//!
//! * a transaction's invoices and the orders' offsets commit together or not at all;
//! * a restarted instance (same transactional id) fences its predecessor and aborts what it left
//!   open, so nothing the killed process wrote after its last commit ever becomes visible;
//! * the consumer starts from the group's last *stable* committed offsets (it waits while a
//!   transaction's commit is still pending), so it redoes exactly what was not committed.
//!
//! ```sh
//! rill-invoicer --bootstrap 127.0.0.1:9092 --orders orders --invoices invoices \
//!     --group invoicer --transactional-id invoicer-1
//! ```
//!
//! Effects outside Rill (an email, a payment) are not covered by the transaction: see the
//! idempotent-consumer example for those.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rill_client::{
    Client, Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec, ProducerConfig, Record, TransactionErrorKind,
    TransactionalProducer,
};

#[derive(Parser, Debug)]
#[command(
    name = "rill-invoicer",
    about = "Invoices every order exactly once (a transactional consume-transform-produce job)."
)]
struct Args {
    /// Nodes to start from (comma-separated host:port).
    #[arg(long, env = "RILL_BOOTSTRAP", value_delimiter = ',', default_value = "127.0.0.1:9092")]
    bootstrap: Vec<String>,
    /// The topic of orders.
    #[arg(long, default_value = "orders")]
    orders: String,
    /// The topic invoices go to.
    #[arg(long, default_value = "invoices")]
    invoices: String,
    /// The consumer group (its committed offsets say which orders are invoiced).
    #[arg(long, default_value = "invoicer")]
    group: String,
    /// The transactional id: the same on every restart, so a new instance fences the old one.
    #[arg(long, default_value = "invoicer-1")]
    transactional_id: String,
    /// Most orders per transaction.
    #[arg(long, default_value_t = 50)]
    max_per_transaction: usize,
    /// The coordinator aborts a transaction open longer than this.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    transaction_timeout: Duration,
    /// Exit (0) once no order came for this long; runs until stopped otherwise.
    #[arg(long, value_parser = humantime::parse_duration)]
    exit_when_idle: Option<Duration>,
}

/// The invoice for one order.
fn invoice(order: &ConsumerRecord) -> Record {
    let value = order.value.clone().unwrap_or_default();
    let key = order.key.clone().unwrap_or_else(|| format!("{}-{}", order.partition, order.offset).into());
    let mut body = b"invoice:".to_vec();
    body.extend_from_slice(&value);
    Record::keyed(key, body)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();
    let args = Args::parse();
    anyhow::ensure!(args.max_per_transaction > 0, "--max-per-transaction must be at least 1");
    let client = Client::connect(&args.bootstrap).await.context("connecting to the cluster")?;

    // Each invoice leaves as soon as it is made (no linger): the transaction's records are
    // written while it runs, and its commit makes them visible together.
    let producer = TransactionalProducer::new(
        client.clone(),
        ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() },
        &args.transactional_id,
        args.transaction_timeout,
    );
    // Fences an earlier instance and aborts what it left open, before anything is read.
    producer.init_transactions().await.context("initialising the transactional producer")?;

    let config = ConsumerConfig {
        group_id: Some(args.group.clone()),
        start: OffsetSpec::Earliest,
        max_poll_records: args.max_per_transaction,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(client.clone(), config);
    consumer.subscribe(&[args.orders.as_str()])?;

    let (mut invoiced, mut transactions) = (0usize, 0usize);
    let mut idle_since = tokio::time::Instant::now();
    loop {
        let polled = tokio::select! {
            polled = consumer.poll(Duration::from_millis(200)) => polled,
            _ = tokio::signal::ctrl_c() => break,
        };
        let orders = match polled {
            Ok(orders) => orders,
            // A coordinator or leader moving, a transaction's commit still pending: poll again.
            Err(e) if e.transaction_kind() == TransactionErrorKind::Retriable => {
                tracing::warn!(error = %e, "poll failed; polling again");
                continue;
            }
            Err(e) => return Err(e).context("reading orders"),
        };
        if consumer.assignment().is_empty() {
            // Not idle while waiting for partitions (joining the group, a predecessor's session
            // running out).
            idle_since = tokio::time::Instant::now();
        }
        if orders.is_empty() {
            if args.exit_when_idle.is_some_and(|idle| idle_since.elapsed() >= idle) {
                break;
            }
            continue;
        }
        idle_since = tokio::time::Instant::now();
        match invoice_all(&producer, &consumer, &args.invoices, &orders).await {
            Ok(()) => {
                invoiced += orders.len();
                transactions += 1;
            }
            Err(e) if e.transaction_kind() == TransactionErrorKind::Fatal => {
                return Err(e).context("the producer cannot go on (fenced by a newer instance?)");
            }
            Err(e) => {
                tracing::warn!(error = %e, "transaction failed; aborting it and reading its orders again");
                if let Err(abort) = producer.abort_transaction().await {
                    if abort.transaction_kind() == TransactionErrorKind::Fatal {
                        return Err(abort).context("aborting");
                    }
                }
                consumer.seek_to_committed().await.context("rewinding to the last committed transaction")?;
            }
        }
    }
    println!("invoiced {invoiced} order(s) in {transactions} transaction(s)");
    consumer.shutdown().await?;
    producer.close().await;
    Ok(())
}

/// One transaction: an invoice per order, and the orders' offsets, committed together.
async fn invoice_all(
    producer: &TransactionalProducer,
    consumer: &Consumer,
    invoices: &str,
    orders: &[ConsumerRecord],
) -> rill_client::Result<()> {
    producer.begin_transaction()?;
    for order in orders {
        // Delivery is checked by the commit: it commits nothing if a send failed.
        producer.send(invoices, invoice(order)).await?;
    }
    producer.send_offsets_to_transaction(&consumer.positions_to_commit(), &consumer.group_metadata()?).await?;
    producer.commit_transaction().await
}

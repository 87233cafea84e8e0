//! 10,000 records with acks=all while a partition leader is SIGKILLed and later restarted: every
//! acknowledged record is read back exactly once, in order per partition.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rill_client::{Acks, Client, Record};
use tokio::sync::Mutex;

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

const TOPIC: &str = "kill";
const PARTITIONS: u32 = 3;
const TOTAL: usize = 10_000;
const BATCH: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged at this base offset.
    Acked(u64),
    /// Certainly not written.
    Failed,
    /// May or may not have been written.
    Unknown,
}

/// Sends `TOTAL / PARTITIONS` records to `partition` in batches, one batch at a time. Every
/// value is unique (`p{partition}-b{batch}-r{i}`), so a value identifies its send.
/// Every send: partition, batch number, values, outcome.
type SendLog = Arc<Mutex<Vec<(u32, usize, Vec<String>, Outcome)>>>;

async fn producer(client: Client, partition: u32, log: SendLog) {
    let batches = TOTAL / BATCH / PARTITIONS as usize + 1;
    for b in 0..batches {
        let values: Vec<String> = (0..BATCH).map(|i| format!("p{partition}-b{b}-r{i}")).collect();
        let records = values.iter().map(|v| Record::new(v.clone())).collect();
        let outcome = match client.produce(TOPIC, partition, records, Acks::All).await {
            Ok(ack) => Outcome::Acked(ack.base_offset.expect("acks=all gives an offset")),
            Err(e) if e.is_retriable_without_effect() => Outcome::Failed,
            Err(e) if e.code().is_some_and(|c| c == rill_client::ErrorCode::MessageTooLarge) => Outcome::Failed,
            Err(e) => {
                tracing::info!(partition, batch = b, error = %e, "send with unknown outcome");
                Outcome::Unknown
            }
        };
        log.lock().await.push((partition, b, values, outcome));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_records_survive_leader_sigkill_exactly_once_in_order() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    let victim = d.partitions[0].leader.expect("leader");

    tracing::info!("--- produce on every partition");
    let log = Arc::new(Mutex::new(Vec::new()));
    let producers: Vec<_> = (0..PARTITIONS).map(|p| tokio::spawn(producer(client.clone(), p, log.clone()))).collect();

    wait_for(READY_TIMEOUT, "a third of the records acknowledged", || async {
        let n = log.lock().await.iter().filter(|e| matches!(e.3, Outcome::Acked(_))).count();
        (n * BATCH >= TOTAL / 3).then_some(())
    })
    .await?;
    tracing::info!(victim, "--- SIGKILL the leader of partition 0");
    cluster.kill(victim)?;

    wait_for(READY_TIMEOUT, "two thirds of the records sent", || async {
        let n = log.lock().await.len();
        (n * BATCH >= 2 * TOTAL / 3).then_some(())
    })
    .await?;
    tracing::info!(victim, "--- restart it");
    cluster.start_node(victim)?;

    for p in producers {
        p.await?;
    }

    tracing::info!("--- every acknowledged record is read back exactly once, in order");
    let log = log.lock().await.clone();
    let acked: usize = log.iter().filter(|e| matches!(e.3, Outcome::Acked(_))).count() * BATCH;
    assert!(acked >= TOTAL * 9 / 10, "only {acked} of {TOTAL} records acknowledged");
    let fresh = cluster.client().await?;
    for p in 0..PARTITIONS {
        let records = read_all(&fresh, TOPIC, p).await?;
        let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
        for r in &records {
            seen.entry(text(&r.value)).or_default().push(r.offset);
        }
        let mut order: BTreeMap<u64, usize> = BTreeMap::new();
        for (part, b, values, outcome) in log.iter().filter(|e| e.0 == p) {
            for (i, v) in values.iter().enumerate() {
                let at = seen.get(v).cloned().unwrap_or_default();
                match outcome {
                    Outcome::Acked(base) => {
                        assert_eq!(
                            at,
                            vec![base + i as u64],
                            "acked {v} (partition {part}) must be read once at its offset"
                        );
                        order.insert(base + i as u64, *b);
                    }
                    Outcome::Failed => assert!(at.is_empty(), "refused {v} was stored at {at:?}"),
                    Outcome::Unknown => assert!(at.len() <= 1, "{v} stored twice at {at:?}"),
                }
            }
        }
        // Batches were sent one after another: offsets must follow send order.
        let sends: Vec<usize> = order.values().copied().collect();
        assert!(sends.windows(2).all(|w| w[0] <= w[1]), "partition {p}: acknowledged batches out of send order");
        tracing::info!(partition = p, records = records.len(), "partition verified");
    }
    Ok(())
}

//! Transactions under faults: the generated `transactions` scenario.
//!
//! ```text
//!  3 transactional producers (own client hosts): begin ─► 1-4 sends to random partitions ─►
//!      commit (70%) or abort; an instance may crash mid-transaction and a new one with the
//!      same transactional id takes over (fencing it, aborting what it left open); one
//!      idle past its id's 1 s expiration (before 10% of transactions) may find the id
//!      removed, and a new instance takes over under a new producer id
//!  a read_committed reader from the start              sampler: every replica's LSO and HW
//!  node faults from the seed (every kind, delayed requests among them)
//!  heal ─► producers finish ─► every partition's LSO reaches its HW ─► final read_committed
//!  read ─► checkers
//! ```
//!
//! Checkers: [`txn_visibility`] (aborted read, lost committed write, torn transaction,
//! duplicates in a read_committed read, LSO above HW). Caught mutations: `lso-off-by-one`
//! (the reader sees an open transaction's first record; when that transaction aborts, an
//! aborted read), `no-epoch-bump` (a v2 producer's next transaction reuses the epoch, and
//! its batches are taken for retries of the previous one's: a committed write is lost) and
//! `expire-open-transactions` (an id is removed with its transaction open, which then never
//! ends: `lso-stuck`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rill_client::{
    ConsumerConfig, IsolationLevel, OffsetSpec, ProducerConfig, Record, TopicPartition, TransactionErrorKind,
    TransactionalProducer,
};

use crate::checkers::txn_visibility::{self, OffsetSample, TxnLog, TxnOutcome};
use crate::checkers::Violation;
use crate::cluster::{connect, SimCluster};
use crate::faults;
use crate::group_run::{CRASH, LEAVE, RUN};
use crate::run::{Report, LIVENESS_BOUND};
use crate::scenarios::ALL_FAULTS;

/// The topic the transactions write.
const TOPIC: &str = "ledger";
/// Its partitions.
const PARTITIONS: u32 = 3;
/// Transactional producers (one transactional id each).
const PRODUCERS: usize = 3;
/// The fault phase (ten times longer with `RILL_SIM_LONG`).
const FAULT_PHASE: Duration = Duration::from_secs(30);
/// The producers' transaction timeout: an instance that crashed mid-transaction is aborted
/// after this at the latest.
const TXN_TIMEOUT: Duration = Duration::from_secs(4);

/// How long an idle transactional id lives (checked every half of it; shorter than the file and
/// flags allow): runs remove ids between transactions and while producers are cut off, so a
/// producer's next transaction may find its id gone and a new instance start under a new producer
/// id, with the old instance's batches possibly still in flight.
const ID_EXPIRATION: Duration = Duration::from_secs(1);

/// What the producers logged and the reader returned.
#[derive(Debug, Default)]
struct Log {
    txns: Vec<TxnLog>,
    live: Vec<String>,
}

type Shared = Arc<Mutex<Log>>;

/// One transactional producer: instances of transactional id `tx-{id}` one after the other,
/// each running transactions until `ctl` says crash (the instance is dropped mid-transaction
/// and a new one starts) or leave (the producer ends after its current transaction).
async fn producer(bootstrap: Vec<String>, id: usize, ctl: Arc<AtomicU8>, log: Shared) -> u64 {
    let client = connect(bootstrap).await;
    let config = ProducerConfig {
        linger: Duration::from_millis(rill_rt::rng().gen_range(0..5)),
        request_timeout: Duration::from_secs(5),
        delivery_timeout: Duration::from_secs(15),
        ..ProducerConfig::default()
    };
    let transactional_id = format!("tx-{id}");
    let mut n = 0u64;
    let mut committed = 0u64;
    'instances: loop {
        if ctl.load(Ordering::SeqCst) == LEAVE {
            return committed;
        }
        // A crash is over once a new instance starts (a leave stays).
        let _ = ctl.compare_exchange(CRASH, RUN, Ordering::SeqCst, Ordering::SeqCst);
        let p = TransactionalProducer::new(client.clone(), config, &transactional_id, TXN_TIMEOUT);
        if p.init_transactions().await.is_err() {
            rill_rt::sleep(Duration::from_millis(200)).await;
            continue;
        }
        loop {
            if ctl.load(Ordering::SeqCst) == LEAVE {
                p.close().await;
                return committed;
            }
            if rill_rt::rng().gen_bool(0.1) {
                // Idle past the id's expiration now and then: the id is removed, and this
                // instance's next transaction is refused as a retired producer's.
                let idle = ID_EXPIRATION + Duration::from_millis(rill_rt::rng().gen_range(0..1500));
                rill_rt::sleep(idle).await;
            }
            if p.begin_transaction().is_err() {
                continue 'instances;
            }
            let mut values = Vec::new();
            let mut deliveries = Vec::new();
            let sends = rill_rt::rng().gen_range(1..=4);
            for j in 0..sends {
                if ctl.load(Ordering::SeqCst) == CRASH {
                    // Gone mid-transaction, without a word: the transaction must abort.
                    log.lock().unwrap().txns.push(TxnLog { producer: id, n, values, outcome: TxnOutcome::Aborted });
                    n += 1;
                    continue 'instances;
                }
                let value = format!("p{id}-t{n}-r{j}");
                let partition = rill_rt::rng().gen_range(0..PARTITIONS);
                match p.send_to(TOPIC, partition, Record::new(value.clone())).await {
                    Ok(d) => {
                        values.push(value);
                        deliveries.push(d);
                    }
                    Err(_) => break,
                }
                rill_rt::sleep(Duration::from_millis(rill_rt::rng().gen_range(0..30))).await;
            }
            for d in deliveries {
                let _ = d.await;
            }
            let commit = rill_rt::rng().gen_bool(0.7);
            let ended = if commit { p.commit_transaction().await } else { p.abort_transaction().await };
            let outcome = match (&ended, commit) {
                (Ok(()), true) => TxnOutcome::Committed,
                // Never asked to commit: an abort, or a commit refused before EndTxn was sent
                // (a send failed), can only end aborted.
                (_, false) | (Err(rill_client::Error::TransactionAbortable(_)), true) => TxnOutcome::Aborted,
                // Whether a failed EndTxn(commit) took effect is unknown: all or nothing.
                (Err(_), true) => TxnOutcome::Unknown,
            };
            log.lock().unwrap().txns.push(TxnLog { producer: id, n, values, outcome });
            n += 1;
            committed += u64::from(outcome == TxnOutcome::Committed);
            match ended {
                Ok(()) => {}
                Err(e) if e.transaction_kind() == TransactionErrorKind::Fatal => continue 'instances,
                Err(_) => {
                    // Abortable or retriable: abort it (the outcome stays unknown), or start over.
                    if p.abort_transaction().await.is_err() {
                        continue 'instances;
                    }
                }
            }
        }
    }
}

/// A read_committed reader of every partition from the start, logging every value returned.
async fn reader(bootstrap: Vec<String>, ctl: Arc<AtomicU8>, log: Shared) {
    let mut consumer = committed_reader(connect(bootstrap).await, TOPIC, PARTITIONS);
    while ctl.load(Ordering::SeqCst) == RUN {
        if let Ok(records) = consumer.poll(Duration::from_millis(100)).await {
            let mut l = log.lock().unwrap();
            l.live.extend(
                records.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()),
            );
        }
    }
    consumer.close();
}

/// A record's value as the producers wrote it.
pub(crate) fn value_of(r: &rill_client::ConsumerRecord) -> String {
    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
}

/// A read_committed consumer of every partition of `topic` (`partitions` of them) from the start.
pub(crate) fn committed_reader(client: rill_client::Client, topic: &str, partitions: u32) -> rill_client::Consumer {
    let config = ConsumerConfig {
        isolation_level: IsolationLevel::ReadCommitted,
        start: OffsetSpec::Earliest,
        ..ConsumerConfig::default()
    };
    let mut consumer = rill_client::Consumer::new(client, config);
    consumer.assign((0..partitions).map(|p| TopicPartition::new(topic, p)));
    consumer
}

/// Every replica's (last stable offset, high watermark) of the topic's partitions.
fn sample(cluster: &SimCluster) -> OffsetSample {
    let mut out = OffsetSample::new();
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        for p in node.partitions().into_iter().filter(|p| p.topic() == TOPIC) {
            out.insert((id, p.partition()), (p.last_stable_offset(), p.high_watermark()));
        }
    }
    out
}

/// Reads every partition of `topic` read_committed from the start to its end once each
/// partition's last stable offset has reached its high watermark (every transaction decided).
/// `Err` with what was missing when that does not happen within [`LIVENESS_BOUND`].
pub(crate) async fn final_read(
    cluster: &SimCluster,
    topic: &'static str,
    partitions: u32,
) -> Result<Vec<String>, String> {
    let client = cluster.client().await;
    cluster
        .on_client(async move {
            let deadline = rill_rt::now() + LIVENESS_BOUND;
            let mut ends = BTreeMap::new();
            for p in 0..partitions {
                loop {
                    let committed = client.list_offset_at(topic, p, OffsetSpec::Latest, IsolationLevel::ReadCommitted);
                    let all = client.list_offset_at(topic, p, OffsetSpec::Latest, IsolationLevel::ReadUncommitted);
                    match (committed.await, all.await) {
                        (Ok(lso), Ok(hw)) if lso == hw => {
                            ends.insert(p, hw);
                            break;
                        }
                        (lso, hw) if rill_rt::now() >= deadline => {
                            return Err(format!(
                                "partition {p}: the last stable offset did not reach the high watermark within {LIVENESS_BOUND:?} ({lso:?} vs {hw:?}): a transaction was left open"
                            ));
                        }
                        _ => rill_rt::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
            let mut consumer = committed_reader(client, topic, partitions);
            let mut values = Vec::new();
            loop {
                if let Ok(records) = consumer.poll(Duration::from_millis(200)).await {
                    values.extend(records.iter().map(value_of));
                }
                let done = (0..partitions).all(|p| {
                    consumer.position(&TopicPartition::new(topic, p)).unwrap_or(0) >= ends.get(&p).copied().unwrap_or(0)
                });
                if done {
                    return Ok(values);
                }
                if rill_rt::now() >= deadline {
                    return Err(format!("the final read did not reach the ends {ends:?} within {LIVENESS_BOUND:?}"));
                }
            }
        })
        .await
}

/// The generated `transactions` scenario (see the module docs).
pub async fn run_generated() -> Report {
    let (trace, phase, cluster) =
        crate::run::start_generated("transactions", FAULT_PHASE, PRODUCERS as u32 + 2, Some(ID_EXPIRATION), None);
    cluster.create_topic_and_wait(TOPIC, PARTITIONS, rill_meta::TRANSACTION_STATE_TOPIC).await;

    let log: Shared = Arc::default();
    let reading = Arc::new(AtomicU8::new(RUN));
    let reader = cluster.client_host(PRODUCERS + 1).spawn(reader(cluster.bootstrap(), reading.clone(), log.clone()));
    let controls: Vec<Arc<AtomicU8>> = (0..PRODUCERS).map(|_| Arc::new(AtomicU8::new(RUN))).collect();
    let producers: Vec<_> = controls
        .iter()
        .enumerate()
        .map(|(i, ctl)| cluster.client_host(i + 1).spawn(producer(cluster.bootstrap(), i, ctl.clone(), log.clone())))
        .collect();
    let sampling = Arc::new(AtomicU8::new(RUN));
    let sampler = {
        let (cluster, sampling) = (cluster.clone(), sampling.clone());
        madsim::task::spawn(async move {
            let mut found = Vec::new();
            while sampling.load(Ordering::SeqCst) == RUN {
                found.extend(txn_visibility::lso_above_hw(&sample(&cluster)));
                rill_rt::sleep(Duration::from_millis(50)).await;
            }
            found
        })
    };
    let faults = {
        let (cluster, trace) = (cluster.clone(), trace.clone());
        madsim::task::spawn(async move { faults::inject(&cluster, ALL_FAULTS, phase, &trace).await })
    };

    // Producer instances crash mid-transaction now and then.
    let crashes = crate::run::crash_now_and_then(&controls, phase, &trace, "producer").await;
    let fault_counts = faults.await.expect("the fault injector");
    trace.record(format!("faults over at {:?}: {crashes} producer crashes", elapsed()));

    // Heal: the producers finish their transaction and stop; every transaction must be decided.
    for c in &controls {
        c.store(LEAVE, Ordering::SeqCst);
    }
    let mut committed = 0u64;
    for p in producers {
        committed += p.await.expect("a producer");
    }
    reading.store(LEAVE, Ordering::SeqCst);
    reader.await.expect("the reader");
    let mut violations = Vec::new();
    let final_values = match final_read(&cluster, TOPIC, PARTITIONS).await {
        Ok(v) => v,
        Err(detail) => {
            violations.push(Violation { checker: "lso-stuck", detail });
            Vec::new()
        }
    };
    sampling.store(LEAVE, Ordering::SeqCst);
    violations.extend(sampler.await.expect("the sampler"));
    let log = log.lock().unwrap();
    if violations.iter().all(|v| v.checker != "lso-stuck") {
        violations.extend(txn_visibility::check(&log.txns, &log.live, &final_values));
    }
    let outcomes = |o: TxnOutcome| log.txns.iter().filter(|t| t.outcome == o).count();
    trace.record(format!(
        "{} transactions: {} committed, {} aborted, {} unknown; {} read live, {} in the final read",
        log.txns.len(),
        outcomes(TxnOutcome::Committed),
        outcomes(TxnOutcome::Aborted),
        outcomes(TxnOutcome::Unknown),
        log.live.len(),
        final_values.len()
    ));
    Report::of_generated(
        &trace,
        log.txns.len(),
        usize::try_from(committed).unwrap_or(usize::MAX),
        fault_counts,
        violations,
    )
}

fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

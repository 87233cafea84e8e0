//! Exactly-once consume-transform-produce under faults: the generated `exactly_once` scenario.
//!
//! ```text
//!  a producer fills `input` (acks=all, idempotent) during the faults
//!  2 processors (own client hosts, transactional ids ctp-0 and ctp-1, one consumer group):
//!      poll ─► begin ─► one output per input record ─► send_offsets_to_transaction ─►
//!      commit (85%) or abort ─► after an abort or a failure: back to the stable committed offsets
//!      an instance may crash mid-transaction; a new one takes over (fencing, abort of what it left)
//!  node faults from the seed (every kind, delayed requests among them)
//!  heal ─► processors run until the group has consumed the whole input ─► every transaction
//!  decided ─► final reads of input and output ─► checker
//! ```
//!
//! Checker: [`exactly_once`] (each input record has exactly one output in the final
//! `read_committed` read of the output, and nothing else is there). Caught mutation:
//! `txn-offsets-on-abort` (an aborted transaction's offsets count: its input is skipped).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rill_client::{
    Client, Consumer, ConsumerConfig, OffsetSpec, Producer, ProducerConfig, Record, TopicPartition,
    TransactionErrorKind, TransactionalProducer,
};

use crate::checkers::exactly_once;
use crate::checkers::Violation;
use crate::cluster::connect;
use crate::faults;
use crate::group_run::{CRASH, LEAVE, RUN};
use crate::run::{Report, LIVENESS_BOUND};
use crate::scenarios::ALL_FAULTS;
use crate::txn_run::{final_read, value_of};

/// The topic processors read.
const INPUT: &str = "input";
/// The topic they write.
const OUTPUT: &str = "output";
/// Partitions of each.
const PARTITIONS: u32 = 3;
/// The processors' consumer group.
const GROUP: &str = "ctp";
/// Processors (one transactional id each, all in [`GROUP`]).
const PROCESSORS: usize = 2;
/// The fault phase (ten times longer with `RILL_SIM_LONG`).
const FAULT_PHASE: Duration = Duration::from_secs(30);
/// The processors' transaction timeout.
const TXN_TIMEOUT: Duration = Duration::from_secs(4);
/// The longest the processors may take to work off the input after the heal, if they keep
/// making progress (see [`wait_consumed`]).
const CATCH_UP_BOUND: Duration = Duration::from_secs(600);

/// What a processor did, for the trace.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    committed: u64,
    aborted: u64,
    instances: u64,
}

/// One processor: instances of transactional id `ctp-{id}` one after the other, each consuming
/// [`INPUT`] in [`GROUP`] and producing [`OUTPUT`] in transactions, until `ctl` says crash (the
/// instance is dropped mid-transaction) or leave.
async fn processor(bootstrap: Vec<String>, id: usize, ctl: Arc<AtomicU8>) -> Tally {
    let client = connect(bootstrap).await;
    let config = ProducerConfig {
        linger: Duration::from_millis(rill_rt::rng().gen_range(0..5)),
        request_timeout: Duration::from_secs(5),
        delivery_timeout: Duration::from_secs(15),
        ..ProducerConfig::default()
    };
    let transactional_id = format!("ctp-{id}");
    let mut tally = Tally::default();
    loop {
        if ctl.load(Ordering::SeqCst) == LEAVE {
            return tally;
        }
        let _ = ctl.compare_exchange(CRASH, RUN, Ordering::SeqCst, Ordering::SeqCst);
        tally.instances += 1;
        let producer = TransactionalProducer::new(client.clone(), config, &transactional_id, TXN_TIMEOUT);
        if producer.init_transactions().await.is_err() {
            rill_rt::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let consumer_config = ConsumerConfig {
            group_id: Some(GROUP.into()),
            start: OffsetSpec::Earliest,
            max_poll_records: rill_rt::rng().gen_range(10..=50),
            rebalance_timeout: Duration::from_secs(10),
            ..ConsumerConfig::default()
        };
        let mut consumer = Consumer::new(client.clone(), consumer_config);
        if consumer.subscribe(&[INPUT]).is_err() {
            continue;
        }
        instance(&producer, &mut consumer, &ctl, &mut tally).await;
        match ctl.load(Ordering::SeqCst) {
            LEAVE => {
                let _ = consumer.shutdown().await;
                producer.close().await;
                return tally;
            }
            // A crash: gone without a word, mid-transaction perhaps.
            _ => consumer.close(),
        }
    }
}

/// Runs transactions until `ctl` leaves [`RUN`] or the producer is fenced.
async fn instance(producer: &TransactionalProducer, consumer: &mut Consumer, ctl: &AtomicU8, tally: &mut Tally) {
    while ctl.load(Ordering::SeqCst) == RUN {
        let records = match consumer.poll(Duration::from_millis(100)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(error = %e, "processor: poll failed");
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        if producer.begin_transaction().is_err() {
            return;
        }
        let mut failed = false;
        for r in &records {
            if ctl.load(Ordering::SeqCst) == CRASH {
                return;
            }
            let out = Record::new(exactly_once::output_of(&value_of(r)));
            if producer.send_to(OUTPUT, r.partition, out).await.is_err() {
                failed = true;
                break;
            }
            rill_rt::sleep(Duration::from_millis(rill_rt::rng().gen_range(0..3))).await;
        }
        if ctl.load(Ordering::SeqCst) == CRASH {
            return;
        }
        let commit = !failed && rill_rt::rng().gen_bool(0.85);
        let ended = if commit {
            match consumer.group_metadata() {
                Ok(group) => {
                    match producer.send_offsets_to_transaction(&consumer.positions_to_commit(), &group).await {
                        Ok(()) => producer.commit_transaction().await,
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        } else {
            Err(rill_client::Error::InvalidArgument("aborted on purpose".into()))
        };
        match ended {
            Ok(()) => {
                tracing::info!(positions = ?consumer.positions_to_commit(), "processor: committed");
                tally.committed += 1
            }
            Err(e) if e.transaction_kind() == TransactionErrorKind::Fatal && commit => {
                tracing::info!(error = %e, "processor: fatal; a new instance takes over");
                return;
            }
            Err(e) => {
                tracing::info!(error = %e, "processor: aborting");
                // Abort, and read the aborted input again from the group's committed offsets.
                match producer.abort_transaction().await {
                    Err(e) => {
                        tracing::info!(error = %e, "processor: the abort failed; a new instance takes over");
                        return;
                    }
                    Ok(()) => tally.aborted += 1,
                }
                if let Err(e) = consumer.seek_to_committed().await {
                    tracing::info!(error = %e, "processor: rewind failed; a new instance takes over");
                    return;
                }
            }
        }
    }
}

/// Fills [`INPUT`] (one record per partition every 100 ms) until `ctl` leaves [`RUN`].
async fn input_producer(bootstrap: Vec<String>, ctl: Arc<AtomicU8>) -> u64 {
    let client = connect(bootstrap).await;
    let producer = Producer::new(client, ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() });
    let mut n = 0u64;
    while ctl.load(Ordering::SeqCst) == RUN {
        for p in 0..PARTITIONS {
            // Unacknowledged records may be stored or not: the final read of the input decides.
            let _ = producer.send_to(INPUT, p, Record::new(format!("in-{n}-{p}"))).await;
        }
        n += 1;
        rill_rt::sleep(Duration::from_millis(100)).await;
    }
    producer.close().await;
    n
}

/// Waits until the group's stable committed offsets reach the end of every input partition.
/// Liveness is progress: it fails when the committed offsets stop moving for
/// [`LIVENESS_BOUND`] (a stall), or when the whole backlog is not consumed within
/// [`CATCH_UP_BOUND`]. A fixed bound on the whole catch-up would fail a long run for its
/// backlog alone: processor crashes every few seconds keep the group rebalancing through the
/// fault phase, so the input piles up and is worked off after the heal at the processors' pace.
async fn wait_consumed(client: Client) -> Result<(), String> {
    let started = rill_rt::now();
    let mut stall_deadline = started + LIVENESS_BOUND;
    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new(INPUT, p)).collect();
    let mut last = String::new();
    let mut best: Option<u64> = None;
    loop {
        let now = rill_rt::now();
        if now >= stall_deadline {
            return Err(format!("the group's committed offsets did not move for {LIVENESS_BOUND:?}: {last}"));
        }
        if now >= started + CATCH_UP_BOUND {
            return Err(format!("the group did not consume the whole input within {CATCH_UP_BOUND:?}: {last}"));
        }
        let mut done = true;
        let mut total = 0u64;
        for tp in &partitions {
            let end = client.list_offset(&tp.topic, tp.partition, OffsetSpec::Latest).await;
            let committed = client.stable_committed_offsets(GROUP, std::slice::from_ref(tp)).await;
            match (end, committed) {
                (Ok(end), Ok(c)) => {
                    let at = c.get(tp).cloned().flatten().map_or(0, |c| c.offset);
                    total += at;
                    if at < end {
                        done = false;
                        last = format!("{}/{} committed at {at}, ends at {end}", tp.topic, tp.partition);
                    }
                }
                (end, c) => {
                    done = false;
                    last = format!("{tp:?}: {end:?} {c:?}");
                }
            }
        }
        if done {
            return Ok(());
        }
        if best.is_none_or(|b| total > b) {
            best = Some(total);
            stall_deadline = rill_rt::now() + LIVENESS_BOUND;
        }
        rill_rt::sleep(Duration::from_millis(200)).await;
    }
}

/// The generated `exactly_once` scenario (see the module docs).
pub async fn run_generated() -> Report {
    let (trace, phase, cluster) =
        crate::run::start_generated("exactly_once", FAULT_PHASE, PROCESSORS as u32 + 2, None, None);
    cluster.create_topic_and_wait(OUTPUT, PARTITIONS, rill_meta::TRANSACTION_STATE_TOPIC).await;
    cluster.create_topic_and_wait(INPUT, PARTITIONS, rill_meta::CONSUMER_OFFSETS_TOPIC).await;

    let feeding = Arc::new(AtomicU8::new(RUN));
    let feeder = cluster.client_host(PROCESSORS + 1).spawn(input_producer(cluster.bootstrap(), feeding.clone()));
    let controls: Vec<Arc<AtomicU8>> = (0..PROCESSORS).map(|_| Arc::new(AtomicU8::new(RUN))).collect();
    let processors: Vec<_> = controls
        .iter()
        .enumerate()
        .map(|(i, ctl)| cluster.client_host(i + 1).spawn(processor(cluster.bootstrap(), i, ctl.clone())))
        .collect();
    let faults = {
        let (cluster, trace) = (cluster.clone(), trace.clone());
        madsim::task::spawn(async move { faults::inject(&cluster, ALL_FAULTS, phase, &trace).await })
    };

    // Processor instances crash mid-transaction now and then.
    let crashes = crate::run::crash_now_and_then(&controls, phase, &trace, "processor").await;
    let fault_counts = faults.await.expect("the fault injector");
    feeding.store(LEAVE, Ordering::SeqCst);
    let fed = feeder.await.expect("the input producer");
    trace.record(format!("faults over at {:?}: {crashes} processor crashes, {fed} input rounds", elapsed()));

    // Heal: the processors consume the rest, then stop.
    let mut violations = Vec::new();
    let client = cluster.client().await;
    let healed = rill_rt::now();
    match cluster.on_client(wait_consumed(client)).await {
        Ok(()) => trace.record(format!("input consumed {:?} after the heal", rill_rt::now() - healed)),
        Err(detail) => violations.push(Violation { checker: "exactly-once-stuck", detail }),
    }
    for c in &controls {
        c.store(LEAVE, Ordering::SeqCst);
    }
    let mut tally = Tally::default();
    for p in processors {
        let t = p.await.expect("a processor");
        tally.committed += t.committed;
        tally.aborted += t.aborted;
        tally.instances += t.instances;
    }
    let outputs = final_read(&cluster, OUTPUT, PARTITIONS).await;
    let inputs = final_read(&cluster, INPUT, PARTITIONS).await;
    match (&inputs, &outputs) {
        (Ok(inputs), Ok(outputs)) if violations.is_empty() => {
            violations.extend(exactly_once::check(inputs, outputs));
        }
        _ => {
            for detail in [inputs.as_ref().err(), outputs.as_ref().err()].into_iter().flatten() {
                violations.push(Violation { checker: "lso-stuck", detail: detail.clone() });
            }
        }
    }
    trace.record(format!(
        "{} transactions committed, {} aborted, {} processor instances; {} inputs, {} outputs",
        tally.committed,
        tally.aborted,
        tally.instances,
        inputs.as_ref().map_or(0, Vec::len),
        outputs.as_ref().map_or(0, Vec::len)
    ));
    Report::of_generated(
        &trace,
        usize::try_from(tally.committed + tally.aborted).unwrap_or(usize::MAX),
        usize::try_from(tally.committed).unwrap_or(usize::MAX),
        fault_counts,
        violations,
    )
}

fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

//! Share groups under faults: the `share_groups` scenario.
//!
//! ```text
//!  producer (1 record per partition every 500 ms, acks=all)
//!  workers on their own client hosts, one share group: poll ─► per record, from the seed:
//!      accept · release (a delay) · reject · renew then accept · stall past the lock then accept
//!      · ignore (its lock runs out) — each acknowledgement sent alone and its answer kept
//!  schedule from the seed: workers start, crash mid-batch, pause past their locks
//!  node faults from the seed (faults::inject)
//!  heal ─► producer stops ─► every record must be done (accepted, or archived and copied to
//!          the group's dead-letter topic) ─► checkers
//! ```
//!
//! Checkers: [`share_delivery`] (client-visible: counts go up and stay within the limit, nothing
//! done is acquired again, no delayed record comes early, no lock ends early, no late
//! acknowledgement applies; the dead-letter topic holds exactly the records given up, each once)
//! and, once healed, every record below each partition's high watermark done in its leader's
//! state, no copy still waiting (nothing lost, nothing stuck).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rill_client::share::{AckKind, AcknowledgementMode, ShareConsumer, ShareConsumerConfig};
use rill_server::node::Hosted;

use crate::checkers::share_delivery::{self, AckOutcome, AckWhat, Acked, DeadLetterCopy, Delivered};
use crate::checkers::Violation;
use crate::cluster::{connect, SimCluster};
use crate::faults;
use crate::group_run::{member_schedule, producer_every, Schedule, CRASH, LEAVE, MEMBER_HOSTS, RUN};
use crate::run::{Report, LIVENESS_BOUND};
use crate::scenarios::ALL_FAULTS;

/// The share group every worker joins.
pub const GROUP: &str = "workers";
/// The topic.
const TOPIC: &str = "queue";
/// The group's dead-letter topic (two partitions: the six partitions' copies share them).
const DEAD_LETTERS: &str = "queue.dlq";
/// The lock duration.
const LOCK_MS: i64 = 1_500;
/// The delivery limit.
const LIMIT: u16 = 4;
/// The fault phase (ten times longer with `RILL_SIM_LONG`).
const FAULT_PHASE: Duration = Duration::from_secs(30);

/// What the workers were handed and how their acknowledgements were answered.
#[derive(Debug, Default)]
pub struct Log {
    /// Every delivery, in the order polls returned them.
    pub delivered: Vec<Delivered>,
    /// Every acknowledgement, with its answer.
    pub acked: Vec<Acked>,
}

/// The workers' shared [`Log`].
pub type Shared = Arc<Mutex<Log>>;

fn now_ms() -> i64 {
    rill_rt::wall_clock_ms()
}

/// One worker: polls, and for each record does what the seed draws, sending each
/// acknowledgement alone (`commit`) so its answer is known. `ctl` crashes it (mid-batch) or
/// makes it leave.
async fn worker(bootstrap: Vec<String>, id: usize, ctl: Arc<AtomicU8>, log: Shared) {
    let client = connect(bootstrap).await;
    let config = ShareConsumerConfig {
        member_id: format!("w{id}"),
        max_records: 3,
        acknowledgement_mode: AcknowledgementMode::Explicit,
        ..ShareConsumerConfig::new(GROUP)
    };
    let mut consumer = ShareConsumer::new(client, config);
    consumer.subscribe([TOPIC]);
    let mut rng = rill_rt::rng();
    // Deliveries this worker has not let go of (no accept, release or reject sent).
    let mut open: Vec<usize> = Vec::new();
    loop {
        match ctl.load(Ordering::SeqCst) {
            CRASH => return,
            LEAVE => {
                // Leaving releases what it holds: logged as releases whose outcome is not known
                // one by one.
                let sent_ms = now_ms();
                let _ = consumer.close().await;
                let returned_ms = now_ms();
                let mut l = log.lock().unwrap();
                for delivery in open {
                    let what = AckWhat::Release { delay_ms: 0 };
                    l.acked.push(Acked { delivery, what, sent_ms, returned_ms, outcome: AckOutcome::Unknown });
                }
                return;
            }
            _ => {}
        }
        let Ok(records) = consumer.poll(Duration::from_millis(100)).await else { continue };
        let first = {
            let mut l = log.lock().unwrap();
            let first = l.delivered.len();
            l.delivered.extend(records.iter().map(|r| Delivered {
                member: id,
                partition: r.partition,
                offset: r.record.offset,
                count: r.delivery_count,
                acquired_ms: r.lock_until_ms - LOCK_MS,
                lock_until_ms: r.lock_until_ms,
            }));
            first
        };
        open.extend(first..first + records.len());
        for (n, record) in records.iter().enumerate() {
            if ctl.load(Ordering::SeqCst) == CRASH {
                return;
            }
            let delivery = first + n;
            let steps: Vec<(Duration, AckWhat)> = match rng.gen_range(0..100) {
                0..=59 => vec![(Duration::from_millis(rng.gen_range(1..30)), AckWhat::Accept)],
                60..=71 => vec![(Duration::from_millis(5), AckWhat::Release { delay_ms: rng.gen_range(0..800) })],
                72..=76 => vec![(Duration::from_millis(5), AckWhat::Reject)],
                77..=81 => {
                    // Work past the first deadline, renewing two thirds of the way.
                    let renew_at = Duration::from_millis(LOCK_MS as u64 * 2 / 3);
                    vec![(renew_at, AckWhat::Renew), (renew_at, AckWhat::Accept)]
                }
                82..=85 => {
                    // Stall just past the lock: the accept must be refused.
                    vec![(Duration::from_millis(LOCK_MS as u64 + rng.gen_range(1..60)), AckWhat::Accept)]
                }
                _ => Vec::new(),
            };
            for (work, what) in steps {
                rill_rt::sleep(work).await;
                if ctl.load(Ordering::SeqCst) == CRASH {
                    return;
                }
                let kind = match what {
                    AckWhat::Accept => AckKind::Accept,
                    AckWhat::Release { delay_ms } => AckKind::Release { delay: Duration::from_millis(delay_ms) },
                    AckWhat::Reject => AckKind::Reject { reason: "chaos".into() },
                    AckWhat::Renew => AckKind::Renew,
                };
                if consumer.acknowledge(record, kind).is_err() {
                    break;
                }
                let sent_ms = now_ms();
                let outcome = match consumer.commit().await {
                    Ok(refused)
                        if refused
                            .iter()
                            .any(|r| r.partition == record.partition && r.offset == record.record.offset) =>
                    {
                        AckOutcome::Refused
                    }
                    Ok(_) if !consumer.has_pending() => AckOutcome::Applied,
                    _ => AckOutcome::Unknown,
                };
                let returned_ms = now_ms();
                log.lock().unwrap().acked.push(Acked { delivery, what, sent_ms, returned_ms, outcome });
                if what != AckWhat::Renew {
                    open.retain(|d| *d != delivery);
                }
            }
        }
    }
}

/// Each partition's share state of [`GROUP`] on its leader that has applied its log: (start
/// offset, records in flight, high watermark).
fn leader_states(cluster: &SimCluster) -> BTreeMap<u32, (u64, usize, u64)> {
    let mut out = BTreeMap::new();
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        for hosted in node.replicas() {
            let Hosted::Records(p) = hosted else { continue };
            if p.topic() != TOPIC || p.leading_term().is_none() {
                continue;
            }
            // Records waiting for their dead-letter copy count until copied.
            let (start, in_flight) = p
                .share_state(GROUP)
                .map_or((0, 0), |s| (s.start_offset(), s.in_flight().len() + s.dead_letters().0.len()));
            out.insert(p.partition(), (start, in_flight, p.high_watermark()));
        }
    }
    out
}

/// Every copy in the dead-letter topic, read from each partition's leader once every partition
/// has one (after healing), by the evidence headers it carries.
async fn dead_letter_copies(cluster: &SimCluster) -> Vec<DeadLetterCopy> {
    use rill_broker::share::dead_letters::headers;
    let deadline = rill_rt::now() + LIVENESS_BOUND;
    loop {
        let mut copies = Vec::new();
        let (mut led, mut torn) = (0, false);
        for id in cluster.ids() {
            let Some(node) = cluster.node(id) else { continue };
            for hosted in node.replicas() {
                let Hosted::Records(p) = hosted else { continue };
                if p.topic() != DEAD_LETTERS || p.leading_term().is_none() {
                    continue;
                }
                led += 1;
                let mut offset = 0u64;
                while offset < p.high_watermark() {
                    let Ok(fetched) = p.fetch(offset as i64, 1 << 20, rill_broker::Isolation::ReadUncommitted) else {
                        // It stopped leading meanwhile: read everything again.
                        torn = true;
                        break;
                    };
                    offset = fetched.next_offset.max(offset + 1);
                    for b in &fetched.batches {
                        for r in rill_records::decode(&b.data, usize::MAX).expect("a stored batch").records {
                            let h = |key: &str| -> String {
                                r.headers
                                    .iter()
                                    .find(|x| x.key == key.as_bytes())
                                    .and_then(|x| x.value.as_ref())
                                    .map(|v| String::from_utf8_lossy(v).into_owned())
                                    .unwrap_or_default()
                            };
                            copies.push(DeadLetterCopy {
                                partition: h(headers::PARTITION).parse().unwrap_or(u32::MAX),
                                offset: h(headers::OFFSET).parse().unwrap_or(u64::MAX),
                                rejected: h(headers::CAUSE) == "rejected",
                                count: h(headers::DELIVERY_COUNT).parse().unwrap_or(0),
                            });
                        }
                    }
                }
            }
        }
        if (led == 2 && !torn) || rill_rt::now() >= deadline {
            return copies;
        }
        rill_rt::sleep(Duration::from_millis(200)).await;
    }
}

/// The generated `share_groups` scenario: one to five workers of one share group on six
/// partitions while the seed makes them start, crash mid-batch and pause (some past their locks)
/// and the seed's node faults (every kind) run alongside; each record is accepted, released with
/// a delay, rejected, renewed then accepted, accepted too late, or left to its lock. Then
/// everything heals, the producer stops and every record must be done.
pub async fn run_generated() -> Report {
    let (trace, phase, cluster) =
        crate::run::start_generated("share_groups", FAULT_PHASE, MEMBER_HOSTS as u32 + 2, None, None);
    cluster.create_topic_and_wait(TOPIC, crate::group_run::PARTITIONS, rill_meta::CONSUMER_OFFSETS_TOPIC).await;
    cluster.create_topic_and_wait(DEAD_LETTERS, 2, rill_meta::CONSUMER_OFFSETS_TOPIC).await;
    let admin = cluster.client().await;
    let settings = [
        ("share.auto.offset.reset", "earliest".to_string()),
        ("share.record.lock.duration.ms", LOCK_MS.to_string()),
        ("share.delivery.count.limit", LIMIT.to_string()),
        ("share.retry.backoff.ms", "100".to_string()),
        ("share.retry.backoff.max.ms", "400".to_string()),
        (rill_meta::group_config::DEAD_LETTER_TOPIC_KEY, DEAD_LETTERS.to_string()),
    ];
    let settings: Vec<(String, String)> = settings.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    cluster
        .on_client(async move {
            while admin.alter_share_group_config(GROUP, &settings, &[]).await.is_err() {
                rill_rt::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
    // Every node applies the settings before any worker fetches: a leader that had not would
    // lock records for the default 30 s.
    while cluster
        .ids()
        .iter()
        .any(|id| cluster.node(*id).is_some_and(|n| n.meta().share_group_config(GROUP).lock_ms != LOCK_MS as u64))
    {
        rill_rt::sleep(Duration::from_millis(50)).await;
    }

    let producing = Arc::new(AtomicU8::new(RUN));
    // A round of one record per partition every 500 ms: the workers keep up, slow records and all.
    let producer = producer_every(&cluster, MEMBER_HOSTS + 1, TOPIC, producing.clone(), Duration::from_millis(500));
    let log: Shared = Arc::default();
    let faults = {
        let (cluster, trace) = (cluster.clone(), trace.clone());
        madsim::task::spawn(async move { faults::inject(&cluster, ALL_FAULTS, phase, &trace).await })
    };
    // Pauses past the lock: the worker's records go to the others meanwhile.
    let past_lock = Duration::from_millis(LOCK_MS as u64);
    let schedule = member_schedule(&cluster, &trace, phase, past_lock, |host, id, ctl| {
        cluster.client_host(host).spawn(worker(cluster.bootstrap(), id, ctl, log.clone()));
    })
    .await;
    let Schedule { running, crashes, leaves, pauses } = schedule;
    let fault_counts = faults.await.expect("the fault injector");
    trace.record(format!("faults over: {crashes} worker crashes, {leaves} leaves, {pauses} pauses"));

    producing.store(LEAVE, Ordering::SeqCst);
    let acked = producer.await.expect("the producer");
    let mut violations: Vec<Violation> = Vec::new();
    let deadline = rill_rt::now() + LIVENESS_BOUND;
    loop {
        let states = leader_states(&cluster);
        let done = states.len() == crate::group_run::PARTITIONS as usize
            && states.values().all(|(start, in_flight, hw)| start == hw && *in_flight == 0);
        if done {
            trace.record(format!("every record done: {states:?}"));
            break;
        }
        if rill_rt::now() >= deadline {
            violations.push(Violation {
                checker: "share-not-done",
                detail: format!(
                    "{LIVENESS_BOUND:?} after healing, not every record is done (partition: start offset, records \
                     in flight, high watermark): {states:?}"
                ),
            });
            break;
        }
        rill_rt::sleep(Duration::from_millis(200)).await;
    }
    for r in &running {
        r.ctl.store(LEAVE, Ordering::SeqCst);
    }
    let copies = dead_letter_copies(&cluster).await;
    trace.record(format!("{} dead-letter copies", copies.len()));
    let log = log.lock().unwrap();
    violations.extend(share_delivery::check(&log.delivered, &log.acked, LIMIT, LOCK_MS));
    if violations.iter().all(|v| v.checker != "share-not-done") {
        violations.extend(share_delivery::dead_letters(&log.delivered, &log.acked, LIMIT, &copies));
    }
    trace.record(format!("{} deliveries, {} acknowledgements", log.delivered.len(), log.acked.len()));
    let delivered = log.delivered.len();
    drop(log);
    Report::of_generated(&trace, delivered, usize::try_from(acked).unwrap_or(usize::MAX), fault_counts, violations)
}

//! Workload processes: producers, assign-mode consumers and a trimmer (`DeleteRecords`),
//! recording every operation.
//!
//! Records are identified by unique ids (`v<process>-<n>`): the value itself, or — keyed
//! workloads, for compacted topics — an [`ID_HEADER`] header, so a tombstone (null value) is
//! identified too. Keyed producers draw keys from a few per partition so keys repeat often
//! (compaction then has superseded records to remove), and send a tombstone now and then.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rill_client::Compression;
use rill_client::{Acks, Client, ErrorCode, OffsetSpec, ReceivedRecord, Record};
use rill_rt::Instant;

use crate::history::{OpKind, Outcome, Recorder};
use crate::oracle::AckOracle;

/// What the workload processes share.
#[derive(Clone)]
pub struct Workload {
    /// Topic.
    pub topic: String,
    /// Partition count.
    pub partitions: u32,
    /// Producer acknowledgement level.
    pub acks: Acks,
    /// Synced copies an acknowledgement promises (majority for acks=all, 1 for acks=1).
    pub required_copies: usize,
    /// Server-side produce timeout.
    pub produce_timeout: Duration,
    /// When processes stop starting new operations.
    pub deadline: Instant,
    /// How long after `deadline` an idempotent producer keeps retrying its last batch.
    pub retry_grace: Duration,
    /// The history.
    pub recorder: Recorder,
    /// Synced-copy oracle.
    pub oracle: AckOracle,
    /// Idempotent producers take new producer ids often and give batches up after a delivery
    /// timeout (`None`: one producer id for as long as it works; a batch is retried until
    /// `deadline` + `retry_grace`).
    pub churn: Option<crate::scenarios::ProducerChurn>,
    /// Per partition, every producer id with an acknowledged batch there: more than a table
    /// holds shows the partition forgot producers to admit new ones.
    pub acked_producers: std::sync::Arc<std::sync::Mutex<BTreeMap<u32, std::collections::BTreeSet<i64>>>>,
    /// Keyed records from this many keys per partition, some of them tombstones (0: keyless
    /// records whose value is their id).
    pub keys_per_partition: u32,
}

/// The header that carries a keyed record's unique id.
pub const ID_HEADER: &str = "id";

/// One in this many keyed records is a tombstone.
const TOMBSTONE_EVERY: u32 = 8;

/// A received record's unique id: its [`ID_HEADER`] header, else its value.
pub fn record_id(r: &ReceivedRecord) -> String {
    let id = r.headers.iter().find(|(k, _)| k == ID_HEADER).map(|(_, v)| v.as_deref());
    String::from_utf8_lossy(id.unwrap_or(r.value.as_deref()).unwrap_or_default()).into_owned()
}

/// The next record a producer sends to `partition` with id `id`, and its send operation:
/// keyless with the id as value, or keyed (from a few keys per partition), now and then a
/// tombstone, with the id in a header.
fn next_record(w: &Workload, partition: u32, id: String) -> (Record, OpKind) {
    if w.keys_per_partition == 0 {
        let op = OpKind::Send { partition, value: id.clone(), key: None, tombstone: false };
        return (Record::new(id), op);
    }
    let key = format!("k{partition}-{}", rill_rt::rng().gen_range(0..w.keys_per_partition));
    let tombstone = rill_rt::rng().gen_range(0..TOMBSTONE_EVERY) == 0;
    let mut record = if tombstone { Record::tombstone(key.clone()) } else { Record::keyed(key.clone(), id.clone()) };
    record.headers.push((ID_HEADER.to_string(), Some(id.clone().into())));
    (record, OpKind::Send { partition, value: id, key: Some(key), tombstone })
}

/// Classifies a failed send: `fail` only when the error proves nothing was appended.
fn send_failure(e: &rill_client::Error) -> Outcome {
    if e.is_retriable_without_effect() {
        return Outcome::Fail(e.to_string());
    }
    match e.code() {
        Some(
            ErrorCode::MessageTooLarge
            | ErrorCode::CorruptMessage
            | ErrorCode::InvalidRequest
            | ErrorCode::UnknownTopicOrPartition,
        ) => Outcome::Fail(e.to_string()),
        _ => Outcome::Info(e.to_string()),
    }
}

/// Sends unique values, one at a time, to random partitions until the deadline.
pub async fn producer(process: u32, client: Client, w: Workload) {
    let mut n = 0u64;
    while rill_rt::now() < w.deadline {
        let partition = rill_rt::rng().gen_range(0..w.partitions);
        let value = format!("v{process}-{n}");
        n += 1;
        let (record, op) = next_record(&w, partition, value.clone());
        let id = w.recorder.invoke(process, op);
        let result =
            client.produce_with(&w.topic, partition, vec![record], w.acks, Compression::None, w.produce_timeout).await;
        let outcome = match result {
            Ok(ack) => match ack.base_offset {
                Some(offset) => {
                    if w.acks == Acks::All {
                        w.oracle.on_ack(partition, offset, &value, w.required_copies);
                    }
                    Outcome::SendOk { offset }
                }
                None => Outcome::Info("acknowledged without an offset".into()),
            },
            Err(e) => send_failure(&e),
        };
        w.recorder.complete(id, outcome);
        rill_rt::sleep(think_time(w.deadline)).await;
    }
}

/// Producers fall silent together for [`QUIET_MS`] out of every [`QUIET_EVERY_MS`] (counted
/// back from the deadline, so every producer agrees), long enough for partitions to quiesce
/// (the simulated cluster's `quiesce-after` is 500 ms): faults then hit quiescent groups, and the
/// next writes must wake them.
const QUIET_EVERY_MS: u64 = 4_000;
const QUIET_MS: u64 = 1_500;

/// The pause before a producer's next send: 0-30 ms, stretched to the end of a quiet window.
fn think_time(deadline: Instant) -> Duration {
    let pause = Duration::from_millis(rill_rt::rng().gen_range(0..30));
    let left = deadline.saturating_duration_since(rill_rt::now() + pause).as_millis() as u64;
    let phase = left % QUIET_EVERY_MS;
    if phase < QUIET_MS {
        pause + Duration::from_millis(phase + 1)
    } else {
        pause
    }
}

/// An idempotent producer: numbers its records per partition and retries every batch whose
/// outcome is unknown with the same producer id and sequence numbers until it is acknowledged —
/// the partition must store it once.
///
/// With [`Workload::churn`], it also takes a new producer id every `new_id_every` batches, and
/// gives a batch up `delivery_timeout` after first sending it (a real producer's
/// `delivery.timeout.ms`), recording its outcome as unknown and going on under a new id.
pub async fn idempotent_producer(process: u32, client: Client, w: Workload) {
    let give_up = w.deadline + w.retry_grace;
    let mut identity: Option<(i64, i16)> = None;
    let mut seqs: BTreeMap<u32, i32> = BTreeMap::new();
    let mut n = 0u64;
    let mut under_this_id = 0u32;
    while rill_rt::now() < w.deadline {
        if w.churn.is_some_and(|c| under_this_id >= c.new_id_every) {
            identity = None;
        }
        let (pid, epoch) = match identity {
            Some(i) => i,
            None => match client.init_producer_id().await {
                Ok(i) => {
                    identity = Some(i);
                    seqs.clear();
                    under_this_id = 0;
                    i
                }
                Err(_) => {
                    rill_rt::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let partition = rill_rt::rng().gen_range(0..w.partitions);
        let seq = seqs.get(&partition).copied().unwrap_or(0);
        let value = format!("v{process}-{n}");
        n += 1;
        let id =
            w.recorder.invoke(process, OpKind::Send { partition, value: value.clone(), key: None, tombstone: false });
        let wire = match rill_client::client::build_batch_for(
            vec![Record::new(value.clone())],
            Compression::None,
            Some((pid, epoch, seq)),
        ) {
            Ok(b) => b,
            Err(e) => {
                w.recorder.complete(id, Outcome::Fail(e.to_string()));
                continue;
            }
        };
        under_this_id += 1;
        let batch_give_up = w.churn.map_or(give_up, |c| give_up.min(rill_rt::now() + c.delivery_timeout));
        let outcome = loop {
            let attempt = client.produce_batch(&w.topic, partition, wire.clone(), w.acks, w.produce_timeout);
            let answer = if w.churn.is_some() {
                match rill_rt::timeout_at(batch_give_up, attempt).await {
                    Ok(answer) => answer,
                    Err(_) => break Outcome::Info("delivery timeout: given up".into()),
                }
            } else {
                attempt.await
            };
            match answer {
                Ok(ack) => {
                    seqs.insert(partition, seq + 1);
                    match ack.base_offset {
                        Some(offset) => {
                            w.oracle.on_ack(partition, offset, &value, w.required_copies);
                            let mut acked = w.acked_producers.lock().unwrap_or_else(|p| p.into_inner());
                            acked.entry(partition).or_default().insert(pid);
                            break Outcome::SendOk { offset };
                        }
                        None => break Outcome::Info("acknowledged without an offset".into()),
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::DuplicateSequenceNumber) => {
                    seqs.insert(partition, seq + 1);
                    break Outcome::Info(e.to_string());
                }
                Err(e) if e.is_retriable_idempotent() && rill_rt::now() < batch_give_up => {
                    rill_rt::sleep(Duration::from_millis(50)).await;
                }
                Err(e) if e.is_retriable_idempotent() => break Outcome::Info(e.to_string()),
                Err(e) => {
                    // Refused (a gap, an unknown producer): this batch was not stored. The
                    // sequence is broken; continue under a new producer id.
                    identity = None;
                    break Outcome::Fail(e.to_string());
                }
            }
        };
        let broken = matches!(outcome, Outcome::Info(_));
        w.recorder.complete(id, outcome);
        if broken {
            if w.churn.is_some() {
                // Unknown whether stored: this id's next sequence cannot be chosen safely, but a
                // new id's can (what a real producer does after a delivery timeout).
                identity = None;
                continue;
            }
            // Unknown whether stored: the next sequence cannot be chosen safely. Stop.
            return;
        }
        rill_rt::sleep(think_time(w.deadline)).await;
    }
}

/// Deletes records every few hundred milliseconds until the deadline: below a random offset
/// between the partition's last known log start and just past its newest acknowledged record,
/// so trims land both below and above where consumers are.
pub async fn trimmer(process: u32, client: Client, w: Workload) {
    let mut starts: BTreeMap<u32, u64> = BTreeMap::new();
    while rill_rt::now() < w.deadline {
        rill_rt::sleep(Duration::from_millis(rill_rt::rng().gen_range(200..800))).await;
        let partition = rill_rt::rng().gen_range(0..w.partitions);
        let newest = w.recorder.snapshot().acked_sends().filter(|s| s.1 == partition).map(|s| s.3 + 1).max();
        let from = starts.get(&partition).copied().unwrap_or(0);
        let Some(newest) = newest.filter(|n| *n > from) else { continue };
        let before = rill_rt::rng().gen_range(from..=newest);
        let id = w.recorder.invoke(process, OpKind::Trim { partition, before });
        let outcome = match client.delete_records(&w.topic, partition, before as i64).await {
            Ok(log_start) => {
                starts.insert(partition, log_start);
                Outcome::TrimOk { log_start }
            }
            Err(e) => Outcome::Info(e.to_string()),
        };
        w.recorder.complete(id, outcome);
    }
}

/// Reads every partition from offset 0 in order, one poll at a time, until the deadline. A
/// position whose records were deleted continues at the log start offset.
pub async fn consumer(process: u32, client: Client, w: Workload) {
    let mut positions: BTreeMap<u32, u64> = (0..w.partitions).map(|p| (p, 0)).collect();
    let mut p = 0;
    while rill_rt::now() < w.deadline {
        p = (p + 1) % w.partitions;
        let offset = positions[&p];
        let id = w.recorder.invoke(process, OpKind::Poll { partition: p, offset });
        match client.fetch(&w.topic, p, Some(offset), Duration::from_millis(200)).await {
            Ok(f) => {
                let records: Vec<(u64, String)> = f.records.iter().map(|r| (r.offset, record_id(r))).collect();
                // Past every batch returned: on a compacted topic, past records compaction
                // removed too (batches it emptied still take their offsets).
                let next = records.last().map(|(last, _)| last + 1).into_iter().chain([f.next_offset, offset]).max();
                positions.insert(p, next.unwrap_or(offset));
                w.recorder.complete(id, Outcome::PollOk { records });
            }
            Err(e) => {
                let out_of_range = e.code() == Some(ErrorCode::OffsetOutOfRange);
                w.recorder.complete(id, Outcome::Info(e.to_string()));
                if out_of_range {
                    if let Ok(start) = client.list_offset(&w.topic, p, OffsetSpec::Earliest).await {
                        positions.insert(p, start.max(offset));
                    }
                }
                rill_rt::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// After healing: reads each partition from its log start offset until at least `must_reach[p]`
/// (the end of the acknowledged data) and the high watermark, retrying errors, within `bound`.
/// Records the reads and where they began.
pub async fn final_reads(
    client: Client,
    w: Workload,
    must_reach: BTreeMap<u32, u64>,
    bound: Duration,
) -> Result<(), String> {
    let deadline = rill_rt::now() + bound;
    for p in 0..w.partitions {
        let target = must_reach.get(&p).copied().unwrap_or(0);
        'attempt: loop {
            if rill_rt::now() > deadline {
                return Err(format!(
                    "partition {p}: acknowledged data up to offset {target} not readable within {bound:?}"
                ));
            }
            let Ok(start) = client.list_offset(&w.topic, p, OffsetSpec::Earliest).await else {
                rill_rt::sleep(Duration::from_millis(200)).await;
                continue 'attempt;
            };
            let mut records = Vec::new();
            let mut offset = start;
            loop {
                match client.fetch(&w.topic, p, Some(offset), Duration::ZERO).await {
                    Err(_) => {
                        rill_rt::sleep(Duration::from_millis(200)).await;
                        continue 'attempt;
                    }
                    // A range compaction emptied: go on past it.
                    Ok(f) if f.records.is_empty() && f.next_offset > offset => offset = f.next_offset,
                    Ok(f) if f.records.is_empty() => {
                        if offset >= target && offset >= f.high_watermark {
                            w.recorder.final_read(p, start, records);
                            break 'attempt;
                        }
                        rill_rt::sleep(Duration::from_millis(200)).await;
                        continue 'attempt;
                    }
                    Ok(f) => {
                        offset = f.next_offset;
                        records.extend(f.records.iter().map(|r| (r.offset, record_id(r))));
                    }
                }
            }
        }
    }
    Ok(())
}

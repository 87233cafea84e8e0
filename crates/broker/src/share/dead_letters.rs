//! The leader's dead-letter writer: copies the records a share group archived (rejected, or out
//! of attempts) to the group's dead-letter topic, then marks them done — exactly once in the
//! dead-letter topic, never lost, across crashes and failovers (docs/queues.md, "Dead letters").
//!
//! ```text
//!  archive (a share entry) ─► waiting, numbered ─► copy appended (idempotent) ─► DeadLettered entry ─► done
//!                              in archive order      seq = its number            (compare-and-set)
//! ```
//!
//! How the two writes — the copy in the dead-letter partition and the "done" in this partition's
//! share state — act as one step:
//! * Each waiting record has a sequence number fixed by the replicated state (its place in the
//!   archive order), and the writer is an idempotent producer whose id and epoch are in the
//!   replicated state too ([`DeadLetterWriter`]). Whichever leader copies a record — again,
//!   after a crash between the copy and its "done" — sends it under the same producer id and
//!   sequence number, and the dead-letter partition stores it once (a copy already stored is
//!   answered as stored).
//! * A record is done only by a [`ShareCommand::DeadLettered`] entry naming the writer and the
//!   first sequence number, applied only while both still hold: a repeated or stale entry does
//!   nothing, so no record is done without its copy stored.
//! * Copies are sent one at a time, in order, each waited for: the dead-letter partition never
//!   sees a sequence number before the one below it is stored.
//!
//! A copy keeps the record's key, value and headers and adds the evidence (`rill.dlq.*`
//! headers: where it came from, the group, delivery count, why, first and last delivery). A
//! record the log no longer has (retention passed it while it waited), or one larger than the
//! dead-letter topic takes, is copied without its value, with a header saying why. A new writer
//! (a fresh producer id, its records numbered from 0) replaces the old one only when the old one
//! can no longer write: its topic is gone, or the dead-letter partition forgot its producer
//! (idle past `producer.id.expiration.ms`). The one case that can copy a record twice: a copy
//! stored, then its "done" entry lost with the leader, then the producer forgotten before any
//! leader tried again — a day of unavailability at the default expiration.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use rill_records::{BatchBuilder, Compression, Header, Record, MAX_DECOMPRESSED_BATCH_BYTES};

use super::{ArchiveReason, DeadLetter, DeadLetterWriter, ShareCommand, ShareSettings};
use crate::error::{PartitionError, Result};
use crate::fetch::Isolation;
use crate::partition::Partition;

/// A future a [`DeadLetterSink`] answers with.
pub type SinkFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Why a copy could not be appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The dead-letter partition does not know the writer's producer (it expired): the copy
    /// was not stored, and a new writer is needed.
    UnknownProducer,
    /// The copy is larger than the dead-letter topic takes.
    TooLarge(String),
    /// The dead-letter topic or partition no longer exists.
    Gone(String),
    /// Anything else (no leader yet, a timeout, the outcome unknown): try again.
    Retry(String),
}

/// Where a node's record partitions write dead-letter copies: the node routes each to the
/// dead-letter partition's leader and issues producer ids.
pub trait DeadLetterSink: Send + Sync + std::fmt::Debug {
    /// How many partitions `topic` has, if it exists as a client topic.
    fn partition_count(&self, topic: &str) -> Option<u32>;
    /// A producer id no other producer has.
    fn producer_id(&self) -> SinkFuture<std::result::Result<i64, String>>;
    /// Appends `batch` (one idempotent record) to `topic`/`partition` with `acks=all`: `Ok` once
    /// it is stored — now, or before (the same producer and sequence number).
    fn append(&self, topic: String, partition: u32, batch: Bytes) -> SinkFuture<std::result::Result<(), AppendError>>;
}

/// The most copies one round appends before their "done" entry is proposed.
const COPIES_PER_ROUND: usize = 64;
/// The first pause after a round that could not write; doubled up to [`MAX_PAUSE`].
const MIN_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between attempts while the dead-letter topic cannot be written.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Header keys of the evidence a copy carries.
pub mod headers {
    /// The topic the record was read from.
    pub const TOPIC: &str = "rill.dlq.topic";
    /// Its partition.
    pub const PARTITION: &str = "rill.dlq.partition";
    /// Its offset.
    pub const OFFSET: &str = "rill.dlq.offset";
    /// Its timestamp (ms since the epoch).
    pub const TIMESTAMP: &str = "rill.dlq.timestamp";
    /// The share group.
    pub const GROUP: &str = "rill.dlq.group";
    /// How often it was delivered.
    pub const DELIVERY_COUNT: &str = "rill.dlq.delivery.count";
    /// `rejected` or `delivery-limit`.
    pub const CAUSE: &str = "rill.dlq.cause";
    /// The reason a member gave when it rejected the record.
    pub const REASON: &str = "rill.dlq.reason";
    /// When it was first delivered (ms since the epoch).
    pub const FIRST_DELIVERY: &str = "rill.dlq.first.delivery.ms";
    /// When it was last delivered.
    pub const LAST_DELIVERY: &str = "rill.dlq.last.delivery.ms";
    /// Present when the copy has no value although the record had one: why.
    pub const VALUE_DROPPED: &str = "rill.dlq.value.dropped";
}

/// The writer's task state on a partition.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterTask {
    /// A writer task runs.
    running: std::sync::atomic::AtomicBool,
    /// Wakes it: records were archived.
    wake: rill_rt::sync::Notify,
}

/// One group's work for a round, read under the lock.
struct Round {
    group: String,
    settings: ShareSettings,
    writer: Option<DeadLetterWriter>,
    first_sequence: i32,
    letters: Vec<DeadLetter>,
}

impl Partition {
    /// Starts the dead-letter writer if this replica leads, has a sink and a record waits for
    /// its copy; wakes it when it runs.
    pub fn ensure_dead_letter_writer(self: &Arc<Self>) {
        if self.dead_letter_sink.is_none() || self.leader_term().is_none() || !self.any_dead_letter() {
            return;
        }
        if self.dead_letter_task.running.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            rill_rt::spawn(dead_letter_writer(Arc::downgrade(self)));
        } else {
            self.dead_letter_task.wake.notify_one();
        }
    }

    fn any_dead_letter(&self) -> bool {
        self.shares.lock().unwrap_or_else(|p| p.into_inner()).values().any(|s| !s.dead_letters().0.is_empty())
    }

    /// Copies what waits in each group (up to [`COPIES_PER_ROUND`] each) and proposes their
    /// "done"; `Ok(false)` when nothing waits; why not when no group could make progress. One
    /// group whose dead-letter topic cannot take copies does not hold up the others.
    async fn write_dead_letters_once(&self, sink: &Arc<dyn DeadLetterSink>) -> std::result::Result<bool, String> {
        self.replica.proposing_term().map_err(|e| e.to_string())?;
        let rounds: Vec<Round> = {
            let shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
            shares
                .iter()
                .filter(|(_, s)| !s.dead_letters().0.is_empty())
                .map(|(group, s)| {
                    let (waiting, first_sequence) = s.dead_letters();
                    Round {
                        group: group.clone(),
                        settings: s.settings().clone(),
                        writer: s.dead_letter_writer().cloned(),
                        first_sequence,
                        letters: waiting.iter().take(COPIES_PER_ROUND).cloned().collect(),
                    }
                })
                .collect()
        };
        if rounds.is_empty() {
            return Ok(false);
        }
        let (mut progress, mut failures) = (false, Vec::new());
        for round in rounds {
            match self.write_group_round(sink, round).await {
                Ok(()) => progress = true,
                Err(e) => failures.push(e),
            }
        }
        if progress {
            Ok(true)
        } else {
            Err(failures.join("; "))
        }
    }

    /// One group's round: pins a writer if it needs one, else copies its waiting records in
    /// order and proposes their "done"; `Ok` when something moved.
    async fn write_group_round(&self, sink: &Arc<dyn DeadLetterSink>, round: Round) -> std::result::Result<(), String> {
        let writer = match &round.writer {
            Some(w) if sink.partition_count(&w.topic).is_some_and(|n| w.partition < n) => w.clone(),
            _ => return self.replace_writer(sink, &round).await,
        };
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::DeadLetteredBeforeCopy) {
            // Deliberate bug (simulation only): done first, copies after, their failures ignored.
            let count = round.letters.len() as u32;
            let command = ShareCommand::DeadLettered {
                producer_id: writer.producer_id,
                first_sequence: round.first_sequence,
                count,
            };
            self.propose_share(&round.group, &round.settings, 0, command).await.map_err(|e| e.to_string())?;
            for (i, letter) in round.letters.iter().enumerate() {
                let sequence = crate::producers::seq_add(round.first_sequence, i as u32);
                let _ = self.append_copy(sink, &round.group, &writer, sequence, letter).await;
            }
            return Ok(());
        }
        let mut copied = 0u32;
        let mut failure = None;
        for letter in &round.letters {
            let sequence = crate::producers::seq_add(round.first_sequence, copied);
            match self.append_copy(sink, &round.group, &writer, sequence, letter).await {
                Ok(()) => copied += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if copied > 0 {
            let command = ShareCommand::DeadLettered {
                producer_id: writer.producer_id,
                first_sequence: round.first_sequence,
                count: copied,
            };
            self.propose_share(&round.group, &round.settings, 0, command).await.map_err(|e| e.to_string())?;
        }
        match failure {
            None => Ok(()),
            Some(AppendError::UnknownProducer | AppendError::Gone(_)) => {
                let round = Round { writer: Some(writer), ..round };
                self.replace_writer(sink, &round).await
            }
            Some(AppendError::TooLarge(e) | AppendError::Retry(e)) if copied == 0 => {
                Err(format!("share group {}: copies to {}: {e}", round.group, writer.topic))
            }
            Some(_) => Ok(()),
        }
    }

    /// Appends the copy of `letter`: with its value, or — when the log no longer has the record
    /// or the copy is too large — without it, under the same sequence number.
    async fn append_copy(
        &self,
        sink: &Arc<dyn DeadLetterSink>,
        group: &str,
        writer: &DeadLetterWriter,
        sequence: i32,
        letter: &DeadLetter,
    ) -> std::result::Result<(), AppendError> {
        let original = self.original_record(letter.offset).map_err(|e| AppendError::Retry(e.to_string()))?;
        let (record, dropped) = match original {
            Some(r) => (r, None),
            None => (Record::default(), Some("the log no longer has the record")),
        };
        let batch = copy_batch(&self.topic, self.partition, group, writer, sequence, letter, record.clone(), dropped)?;
        match sink.append(writer.topic.clone(), writer.partition, batch).await {
            Err(AppendError::TooLarge(why)) if record.value.is_some() => {
                let bare = Record { value: None, ..record };
                let dropped = format!("larger than {} takes: {why}", writer.topic);
                let batch =
                    copy_batch(&self.topic, self.partition, group, writer, sequence, letter, bare, Some(&dropped))?;
                sink.append(writer.topic.clone(), writer.partition, batch).await
            }
            other => other,
        }
    }

    /// The record at `offset` as stored, if the log still has it.
    fn original_record(&self, offset: u64) -> Result<Option<Record>> {
        if offset < self.log_start_offset() {
            return Ok(None);
        }
        let fetched = match self.fetch(offset as i64, 1, Isolation::ReadUncommitted) {
            Ok(f) => f,
            Err(PartitionError::OffsetOutOfRange { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        for batch in fetched.batches {
            let decoded = rill_records::decode(&batch.data, MAX_DECOMPRESSED_BATCH_BYTES)
                .map_err(|e| PartitionError::Storage(format!("stored batch at offset {}: {e}", batch.base_offset)))?;
            let found = decoded
                .records
                .into_iter()
                .find(|r| batch.base_offset + u64::try_from(r.offset_delta).unwrap_or(u64::MAX) == offset);
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Pins a new writer for `round`'s group: a fresh producer id, the group's dead-letter
    /// topic (or the old writer's, when the group no longer names one) and the partition of it
    /// this partition's copies go to.
    async fn replace_writer(&self, sink: &Arc<dyn DeadLetterSink>, round: &Round) -> std::result::Result<(), String> {
        let topic = round
            .settings
            .dead_letter_topic
            .clone()
            .or_else(|| round.writer.as_ref().map(|w| w.topic.clone()))
            .unwrap_or_default();
        let Some(count) = sink.partition_count(&topic).filter(|n| *n > 0) else {
            return Err(format!("share group {}: dead-letter topic {topic:?} does not exist", round.group));
        };
        let producer_id = sink
            .producer_id()
            .await
            .map_err(|e| format!("share group {}: no producer id for dead-letter copies: {e}", round.group))?;
        let writer = DeadLetterWriter { producer_id, producer_epoch: 0, partition: self.partition % count, topic };
        tracing::info!(
            group = self.group,
            share_group = round.group,
            producer_id,
            topic = writer.topic,
            partition = writer.partition,
            "dead-letter writer pinned"
        );
        let command =
            ShareCommand::PinDeadLetterWriter { writer, replaces: round.writer.as_ref().map(|w| w.producer_id) };
        self.propose_share(&round.group, &round.settings, 0, command).await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The batch holding the copy of `letter`: `record`'s key, value and headers, the evidence
/// headers after them, written by `writer` under `sequence`.
#[allow(clippy::too_many_arguments)]
fn copy_batch(
    topic: &str,
    partition: u32,
    group: &str,
    writer: &DeadLetterWriter,
    sequence: i32,
    letter: &DeadLetter,
    record: Record,
    value_dropped: Option<&str>,
) -> std::result::Result<Bytes, AppendError> {
    let header =
        |key: &str, value: String| Header { key: Bytes::copy_from_slice(key.as_bytes()), value: Some(value.into()) };
    let mut out_headers = record.headers;
    out_headers.push(header(headers::TOPIC, topic.to_string()));
    out_headers.push(header(headers::PARTITION, partition.to_string()));
    out_headers.push(header(headers::OFFSET, letter.offset.to_string()));
    out_headers.push(header(headers::TIMESTAMP, record.timestamp_ms.to_string()));
    out_headers.push(header(headers::GROUP, group.to_string()));
    out_headers.push(header(headers::DELIVERY_COUNT, letter.delivery_count.to_string()));
    match &letter.reason {
        ArchiveReason::Rejected(why) => {
            out_headers.push(header(headers::CAUSE, "rejected".into()));
            out_headers.push(header(headers::REASON, why.clone()));
        }
        ArchiveReason::DeliveryLimit => out_headers.push(header(headers::CAUSE, "delivery-limit".into())),
    }
    out_headers.push(header(headers::FIRST_DELIVERY, letter.first_delivery_ms.to_string()));
    out_headers.push(header(headers::LAST_DELIVERY, letter.last_delivery_ms.to_string()));
    if let Some(why) = value_dropped {
        out_headers.push(header(headers::VALUE_DROPPED, why.to_string()));
    }
    // The copy's own time is when it is written: the dead-letter topic's retention counts from
    // there, not from the original's (kept in a header).
    let copy = Record {
        offset_delta: 0,
        timestamp_ms: rill_rt::wall_clock_ms(),
        key: record.key,
        value: record.value,
        headers: out_headers,
    };
    let mut builder =
        BatchBuilder::new(Compression::None).producer(writer.producer_id, writer.producer_epoch, sequence);
    builder.push(copy).map_err(|e| AppendError::Retry(e.to_string()))?;
    builder.build().map_err(|e| AppendError::Retry(e.to_string()))
}

/// While its partition's replica leads and a record waits for its copy: copies, round after
/// round; pauses (doubling, up to [`MAX_PAUSE`]) while the dead-letter topic cannot be written.
/// Exits when the replica stops leading, the partition is dropped, or nothing waits — clearing
/// its flag first and looking again, so a record archived meanwhile is not missed.
async fn dead_letter_writer(partition: Weak<Partition>) {
    let mut pause = MIN_PAUSE;
    let mut last_failure = String::new();
    loop {
        let Some(p) = partition.upgrade() else { return };
        let Some(sink) = p.dead_letter_sink.clone() else { return };
        let outcome = if p.leader_term().is_some() { p.write_dead_letters_once(&sink).await } else { Ok(false) };
        match outcome {
            Ok(true) => {
                pause = MIN_PAUSE;
                last_failure.clear();
            }
            Ok(false) => {
                p.dead_letter_task.running.store(false, Ordering::SeqCst);
                let again = p.leader_term().is_some() && p.any_dead_letter();
                if again
                    && p.dead_letter_task
                        .running
                        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    continue;
                }
                return;
            }
            Err(e) => {
                // Said once as a warning (records wait, counted against the in-flight cap), then
                // quietly while it stays the same.
                if e != last_failure {
                    tracing::warn!(group = p.group, error = %e, "dead-letter copies cannot be written yet");
                    last_failure = e;
                } else {
                    tracing::debug!(group = p.group, error = %last_failure, "dead-letter copies still cannot be written");
                }
                tokio::select! {
                    _ = rill_rt::sleep(pause) => {}
                    _ = p.dead_letter_task.wake.notified() => {}
                    _ = p.leadership_lost() => {}
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

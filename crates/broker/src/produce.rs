//! The produce path of a [`Partition`]: checks, proposal, and waiting for the acknowledgement
//! level (DESIGN §1).
//!
//! ```text
//!  produce ─► leader? size? CRC? ─► acks=all: ISR ≥ min.insync.replicas? ─┬─ plain batch ─────► propose
//!                                                                          └─ idempotent batch ► gate ─► propose
//!  propose (merged with concurrent batches into one entry: `propose`) ─► acks=0: answer now
//!                            ─► acks=1: answer when synced in the leader's log
//!                            ─► acks=all: answer when committed and every ISR member has it
//! ```

use std::time::Duration;

use bytes::Bytes;
use rill_records::{BatchInfo, Compression, MAX_DECOMPRESSED_BATCH_BYTES, NO_PRODUCER_ID};
use rill_rt::mutation::Mutation;
use rill_rt::sync::watch;
use rill_rt::Instant;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::handover::InFlight;
use crate::idempotence::{BatchId, Committed, Decision, Gate, MarkerOutcome, PendingMarker};
use crate::partition::{Acks, Partition, ProduceOutcome};
use crate::producers::MarkerRefusal;
use crate::propose::{Landed, Lateness, Share};
use crate::submit_order::SubmitTurn;
use crate::verifying::Turn;

/// How long an idempotent batch that arrived ahead of its predecessor waits for it.
const REORDER_WAIT: Duration = Duration::from_millis(200);
/// How many times a transactional batch's partition asks the coordinator when markers of its
/// producer keep landing meanwhile (see [`Partition::produce_transactional`]).
pub const VERIFY_ATTEMPTS: usize = 3;

/// A marker the transaction coordinator says this partition is still owed by a producer's
/// previous transaction (v2), to write before the first batch of its next one here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwedMarker {
    /// The marker, naming the transaction it ends.
    pub marker: rill_records::ControlMarker,
    /// The producer epoch it carries.
    pub producer_epoch: i16,
}

/// What a transactional batch's verification established, checked again under the gate
/// (`Partition::guard_transactional`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkerGuard {
    /// The producer's last marker here when the verification began: its offset and the
    /// transaction it named.
    before: (i64, u64),
    /// The transaction the verification found the partition in, by name (0: not named).
    transaction: u64,
    /// The decided transaction's marker the coordinator said this partition is still owed,
    /// written just ahead of the batch.
    owed: Option<OwedMarker>,
}

/// What a transactional batch's partition learns from the transaction coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The ongoing transaction the partition is in, by name (the coordinator's
    /// `txn_start_version`; markers name their transaction by it); 0 when the coordinator could
    /// not name it.
    pub transaction: u64,
    /// The marker the partition is still owed by the producer's previous transaction (v2).
    pub owed: Option<OwedMarker>,
}

/// How often one batch may make its leader evict idle producers: more than once only when
/// other new producers took the room meanwhile.
const MAX_EVICTIONS_PER_BATCH: usize = 3;

/// How often the leader checks for idle producers to expire (at most).
pub const EXPIRY_CHECK_EVERY: Duration = Duration::from_secs(60);

/// Whether a batch was refused only because it arrived ahead of the batch before it: a gap in
/// sequence numbers, or a new producer's second batch before its first. Such a batch waits
/// briefly for its predecessor instead of being refused. (Still refused after the wait, the gap
/// is real, or the producer's state is gone, and the producer is told so.)
fn overtook_its_predecessor(e: &PartitionError) -> bool {
    match e {
        PartitionError::OutOfOrderSequence { expected, got, .. } => got > expected,
        PartitionError::UnknownProducerId { .. } => true,
        _ => false,
    }
}

pub(crate) fn elapsed_ms(since: Instant) -> u64 {
    rill_rt::now().saturating_duration_since(since).as_millis() as u64
}

/// Waits for the batch's turn to be queued (see [`crate::submit_order`]), until `deadline`;
/// at once without one.
async fn await_turn(turn: &mut Option<SubmitTurn>, deadline: Instant, started: Instant) -> Result<()> {
    let Some(turn) = turn.as_mut() else { return Ok(()) };
    rill_rt::timeout_at(deadline, turn.wait()).await.map_err(|_| PartitionError::Timeout {
        waited_ms: elapsed_ms(started),
        what: "the batches of the connection's previous request to be queued",
    })
}

impl Partition {
    /// The cheap check of a produced batch, before leadership is looked at: its size as sent.
    fn check_size(batch: &Bytes, max_message_bytes: u32) -> Result<()> {
        if batch.len() > max_message_bytes as usize {
            return Err(PartitionError::MessageTooLarge { size: batch.len(), max: max_message_bytes });
        }
        Ok(())
    }

    /// Checks a produced batch once, on the leader, before anything else looks at its records:
    /// its structure and checksum (`rill_records::validate`) and what a producer may send.
    /// Decompressed, a batch may hold at most `max.message.bytes` (the bound is enforced while
    /// decompressing, never taken from the batch), so what a batch costs to check, store and
    /// decode later is bounded by the topic's setting rather than by its compression ratio.
    /// [`Self::check_batch`], on a blocking thread when the batch is compressed: decompressing
    /// up to `max.message.bytes` is CPU work a request must not do on an async worker, where it
    /// would hold up every other request that worker serves. Uncompressed batches parse in
    /// place, in time linear in their (already received) size.
    /// On a compacted topic every record must have a key (compaction keeps the newest record
    /// per key; a keyless one could never be superseded), which needs the records decoded.
    /// `transactional`: the batch comes with its transactional id (see
    /// [`Partition::produce_transactional`]); otherwise a transactional batch is refused.
    async fn check_batch_off_workers(
        batch: &Bytes,
        max_message_bytes: u32,
        compacted: bool,
        transactional: bool,
    ) -> Result<BatchInfo> {
        let compressed = BatchInfo::parse(batch).is_ok_and(|h| h.compression().is_ok_and(|c| c != Compression::None));
        if !compressed {
            return Self::check_batch(batch, max_message_bytes, compacted, transactional);
        }
        let batch = batch.clone();
        rill_rt::blocking(move || Self::check_batch(&batch, max_message_bytes, compacted, transactional)).await
    }

    fn check_batch(batch: &Bytes, max_message_bytes: u32, compacted: bool, transactional: bool) -> Result<BatchInfo> {
        let bound = (max_message_bytes as usize).min(MAX_DECOMPRESSED_BATCH_BYTES);
        let info = rill_records::validate(batch, bound).map_err(PartitionError::InvalidBatch)?;
        if info.is_control() {
            return Err(PartitionError::InvalidRecord(
                "control batches (transaction markers) are written by the transaction coordinator, not by producers"
                    .into(),
            ));
        }
        if info.is_transactional() != transactional {
            return Err(if transactional {
                PartitionError::InvalidRequest(
                    "a request with a transactional id carries transactional batches only".into(),
                )
            } else {
                PartitionError::InvalidRequest(format!(
                    "producer {}: a transactional batch needs the request's transactional_id",
                    info.producer_id
                ))
            });
        }
        if info.producer_id < NO_PRODUCER_ID {
            return Err(PartitionError::InvalidRequest(format!("producer id {} is negative", info.producer_id)));
        }
        if info.has_producer() && (info.producer_epoch < 0 || info.base_sequence < 0) {
            return Err(PartitionError::InvalidRecord(format!(
                "producer {}: an idempotent batch needs an epoch and a base sequence of at least 0, got {} and {}",
                info.producer_id, info.producer_epoch, info.base_sequence
            )));
        }
        if compacted {
            let bound = (max_message_bytes as usize).min(MAX_DECOMPRESSED_BATCH_BYTES);
            let decoded = rill_records::decode(batch, bound).map_err(PartitionError::InvalidBatch)?;
            // Every keyless record is named, so a client can fail those and retry the others
            // (KIP-467); the positions are bounded by the decoded batch.
            let keyless: Vec<u32> =
                (0u32..).zip(&decoded.records).filter(|(_, r)| r.key.is_none()).map(|(index, _)| index).collect();
            if !keyless.is_empty() {
                return Err(PartitionError::InvalidRecords {
                    reason: "records without a key: a compacted topic (cleanup.policy=compact) keeps the newest record per key and refuses keyless ones".into(),
                    records: keyless,
                });
            }
        }
        Ok(info)
    }

    /// The term this node leads the partition in, for a produce; or why it must not take one
    /// (it does not lead, or leadership is moving). Checked first: a node that does not lead
    /// the partition never decompresses its batches.
    fn producing_term(&self) -> Result<u64> {
        let Some(term) = self.leader_term() else {
            return Err(self.not_leader());
        };
        if let Some(to) = self.moving_to() {
            return Err(PartitionError::LeaderMoving { to });
        }
        Ok(term)
    }

    /// Appends `batch` (one record batch in Kafka's format) with acknowledgement level `acks`,
    /// waiting at most `timeout`. With a `turn`, the batch is queued for the log only after
    /// the batches of the request before it on its connection ([`crate::submit_order`]).
    pub async fn produce(
        &self,
        batch: Bytes,
        acks: Acks,
        timeout: Duration,
        mut turn: Option<SubmitTurn>,
    ) -> Result<ProduceOutcome> {
        let started = rill_rt::now();
        let deadline = started + timeout;
        let config = self.config();
        Self::check_size(&batch, config.max_message_bytes)?;
        let _in_flight = InFlight::enter(self);
        let term = self.producing_term()?;
        let info = Self::check_batch_off_workers(&batch, config.max_message_bytes, config.compacted(), false).await?;
        let idempotent = info.has_producer();
        if idempotent && acks != Acks::All {
            return Err(PartitionError::InvalidRequest("idempotent batches (producer id set) need acks=all".into()));
        }
        if acks == Acks::All {
            self.check_isr(term, config.min_insync_replicas)?;
        }
        let append_time_ms = rill_rt::wall_clock_ms();
        // validate() checked the count against the records present: at least 1, within i32.
        let count = u32::try_from(info.record_count).unwrap_or(0);
        if idempotent {
            let (base, landed) =
                self.produce_idempotent(batch, &info, append_time_ms, term, deadline, started, None, turn).await?;
            if let Some((index, entry_term)) = landed {
                self.wait_for_isr(index, entry_term, config.min_insync_replicas, deadline, started).await?;
            }
            return Ok(ProduceOutcome {
                base_offset: Some(base),
                append_time_ms,
                log_start_offset: self.log_start_offset(),
            });
        }
        // An acks=0 request is answered once its batch is queued: nobody gives up on it later,
        // so it is written whenever its turn comes.
        let lateness = if acks == Acks::None { Lateness::Keep } else { Lateness::Drop };
        await_turn(&mut turn, deadline, started).await?;
        let mut share = self.proposer.submit(batch, count, append_time_ms, deadline, lateness, None).await?;
        drop(turn);
        match acks {
            Acks::None => {
                Ok(ProduceOutcome { base_offset: None, append_time_ms, log_start_offset: self.log_start_offset() })
            }
            Acks::Leader => {
                let base = durable_within(&mut share, deadline, started).await?;
                rill_rt::probe::emit(rill_rt::probe::Probe::LeaderAck {
                    node: self.node_id,
                    group: self.group,
                    offset: base,
                    count,
                });
                Ok(ProduceOutcome {
                    base_offset: Some(base),
                    append_time_ms,
                    log_start_offset: self.log_start_offset(),
                })
            }
            Acks::All => {
                let landed = committed_within(&mut share, deadline, started).await?;
                self.wait_for_isr(landed.index, landed.term, config.min_insync_replicas, deadline, started).await?;
                Ok(ProduceOutcome {
                    base_offset: Some(landed.base),
                    append_time_ms,
                    log_start_offset: self.log_start_offset(),
                })
            }
        }
    }

    /// Appends a transactional batch (KIP-890 part 1): idempotent, `acks=all`, and — when the
    /// producer has no transaction open here at this epoch — only after `verify` confirmed with
    /// the transaction's coordinator that this partition is in the producer's ongoing
    /// transaction (v1), or added it (v2). The verification holds only if no marker of the
    /// producer came between it and the append; otherwise the batch is refused
    /// `CONCURRENT_TRANSACTIONS` (retry) instead of opening a transaction the coordinator
    /// already closed (a "hanging" transaction).
    ///
    /// A marker that lands while the coordinator is answering is usually the producer's
    /// *previous* transaction's: the partition then asks again, up to [`VERIFY_ATTEMPTS`]
    /// times, so that the answer it acts on is known to come after that marker. A marker of the
    /// verified transaction itself makes the next answer a refusal.
    ///
    /// Transactions v2 begin the next transaction while the previous one's markers are still
    /// being written. When this partition is in both, the answer carries the previous one's
    /// marker ([`OwedMarker`]) and it is written here just ahead of the batch, so the batch
    /// never joins the previous transaction: both are proposed under one hold of the gate and
    /// of the proposer ([`crate::propose::Hold`]), so they share a Raft entry and the first
    /// append of a transaction costs one replicated write, not the marker's and then the
    /// batch's. The coordinator's own copy, arriving later, decides nothing (it names a
    /// transaction already decided here). Otherwise a batch of a newer epoch than the
    /// producer's transaction still open here is refused `CONCURRENT_TRANSACTIONS`.
    ///
    /// With a `turn`, the batch is queued for the log only after the batches of the request
    /// before it on its connection ([`crate::submit_order`]).
    pub async fn produce_transactional<V, F>(
        &self,
        batch: Bytes,
        timeout: Duration,
        mut verify: F,
        turn: Option<SubmitTurn>,
    ) -> Result<ProduceOutcome>
    where
        F: FnMut() -> V,
        V: std::future::Future<Output = Result<Verified>>,
    {
        let started = rill_rt::now();
        let deadline = started + timeout;
        let config = self.config();
        Self::check_size(&batch, config.max_message_bytes)?;
        let _in_flight = InFlight::enter(self);
        let term = self.producing_term()?;
        let info = Self::check_batch_off_workers(&batch, config.max_message_bytes, config.compacted(), true).await?;
        if !info.has_producer() {
            return Err(PartitionError::InvalidRecord("a transactional batch needs a producer id".into()));
        }
        self.check_isr(term, config.min_insync_replicas)?;
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        let (pid, epoch) = (info.producer_id, info.producer_epoch);
        let (guard, attempts) = loop {
            if let Some(guard) = self.continues_open_transaction(pid, epoch) {
                break (guard, 0);
            }
            // The batches of this producer epoch that arrive while one asks take its answer
            // (`crate::verifying`).
            match self.verifying.join(term, pid, epoch, deadline).await {
                Turn::Answered(Some(shared)) => break (shared, 0),
                Turn::Answered(None) if rill_rt::now() >= deadline => {
                    return Err(PartitionError::Timeout {
                        waited_ms: elapsed_ms(started),
                        what: "the transaction coordinator to verify the partition",
                    })
                }
                // The asker failed: ask again (this batch, or one that got in first).
                Turn::Answered(None) => continue,
                Turn::Ask(asking) => {
                    let asked = self.verify_transactional(pid, epoch, &mut verify, deadline, started).await?;
                    asking.answer(asked.0);
                    break asked;
                }
            }
        };
        let owed_marker = guard.owed.is_some();
        let guard = Some(guard);
        let verified = rill_rt::now();
        let append_time_ms = rill_rt::wall_clock_ms();
        let (base, landed) =
            self.produce_idempotent(batch, &info, append_time_ms, term, deadline, started, guard, turn).await?;
        if let Some((index, entry_term)) = landed {
            self.wait_for_isr(index, entry_term, config.min_insync_replicas, deadline, started).await?;
        }
        // Where a transaction's time goes (docs/benchmarks.md, "Transactions").
        tracing::debug!(
            topic = self.replica.topic(),
            partition = self.replica.partition(),
            producer_id = pid,
            verify_ms = (verified - started).as_secs_f64() * 1e3,
            verify_attempts = attempts,
            owed_marker = owed_marker,
            append_ms = verified.elapsed().as_secs_f64() * 1e3,
            "transactional batch stored"
        );
        Ok(ProduceOutcome { base_offset: Some(base), append_time_ms, log_start_offset: self.log_start_offset() })
    }

    /// Asks the transaction coordinator, through `verify`, whether this partition is in the
    /// ongoing transaction of producer `pid` at `epoch` (unless that transaction is open here
    /// already), again while markers of the producer keep landing meanwhile (up to
    /// [`VERIFY_ATTEMPTS`] times): what the batch's gate check then holds it to, and how many
    /// times it asked.
    async fn verify_transactional<V, F>(
        &self,
        pid: i64,
        epoch: i16,
        verify: &mut F,
        deadline: Instant,
        started: Instant,
    ) -> Result<(MarkerGuard, usize)>
    where
        F: FnMut() -> V,
        V: std::future::Future<Output = Result<Verified>>,
    {
        let last_marker = || self.last_marker_and_name(pid);
        let mut attempts = 0;
        let guard = loop {
            if let Some(guard) = self.continues_open_transaction(pid, epoch) {
                break guard;
            }
            let before = last_marker();
            let verified = rill_rt::timeout_at(deadline, verify()).await.map_err(|_| PartitionError::Timeout {
                waited_ms: elapsed_ms(started),
                what: "the transaction coordinator to verify the partition",
            })??;
            attempts += 1;
            let transaction = verified.transaction;
            if let Some(owed) = verified.owed.filter(|_| !rill_rt::mutation::active(Mutation::BatchBeforeMarker)) {
                // Written just ahead of the batch, under the gate (see `guard_transactional`);
                // here only whether this partition takes it at all.
                match self.marker_check(pid, owed.producer_epoch, &owed.marker) {
                    Ok(()) | Err(MarkerRefusal::Repeated { .. }) => {
                        break MarkerGuard { before, transaction, owed: Some(owed) }
                    }
                    // A newer coordinator wrote here meanwhile: ask it.
                    Err(MarkerRefusal::CoordinatorFenced { .. }) if attempts < VERIFY_ATTEMPTS => continue,
                    Err(MarkerRefusal::CoordinatorFenced { current }) => {
                        return Err(PartitionError::CoordinatorFenced { current, got: owed.marker.coordinator_epoch })
                    }
                    Err(MarkerRefusal::StaleEpoch { current }) => {
                        return Err(PartitionError::InvalidProducerEpoch {
                            producer_id: pid,
                            current,
                            got: owed.producer_epoch,
                        })
                    }
                }
            }
            // A named answer is checked under the gate against the markers' names; an unnamed
            // one holds only if no marker of the producer landed while it was asked for.
            if transaction > 0 || last_marker().0 == before.0 || attempts >= VERIFY_ATTEMPTS {
                break MarkerGuard { before, transaction, owed: None };
            }
        };
        Ok((guard, attempts))
    }

    /// The guard of a batch of producer `pid` at `epoch` whose transaction is open here already
    /// (no verification needed), `None` otherwise. Every transactional batch is let through
    /// only if no marker of its producer arrived since its guard was taken: one that continues
    /// an open transaction as much as one that begins it, since a marker may close that
    /// transaction meanwhile. (A copy of a marker already applied here decides nothing and does
    /// not count.)
    fn continues_open_transaction(&self, pid: i64, epoch: i16) -> Option<MarkerGuard> {
        let before = self.last_marker_and_name(pid);
        let open_here = self.transactions.lock().unwrap_or_else(|p| p.into_inner()).open(pid).map(|t| t.epoch);
        (open_here == Some(epoch)).then_some(MarkerGuard { before, transaction: 0, owed: None })
    }

    /// How `marker`, for producer `pid` at `epoch`, relates to what is applied here
    /// ([`crate::producers::ProducerStates::check_marker`]).
    fn marker_check(
        &self,
        pid: i64,
        epoch: i16,
        marker: &rill_records::ControlMarker,
    ) -> std::result::Result<(), MarkerRefusal> {
        let producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        producers.check_marker(pid, epoch, marker.coordinator_epoch, marker.transaction)
    }

    /// The offset of the last marker applied for producer `pid` (-1 when none) and the
    /// transaction it named (0: none named): what a transactional batch's guard compares. (A
    /// producer whose first batch lands meanwhile gains an entry without a marker: that is no
    /// marker.)
    fn last_marker_and_name(&self, pid: i64) -> (i64, u64) {
        let producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        producers.get(pid).map_or((-1, 0), |e| (e.last_marker_offset, e.last_marker_transaction))
    }

    /// Idempotent batches: deduplicate retries, refuse gaps, then propose. Returns the base
    /// offset and, when this call's proposal committed it, the log index and term (for the ISR
    /// wait); a batch found stored already has none. `marker_guard`: what a transactional
    /// batch's verification established, checked again under the gate
    /// ([`Self::guard_transactional`]). `turn`: its place after the connection's previous
    /// request, waited for before the gate is taken and given up once the batch is decided.
    #[allow(clippy::too_many_arguments)]
    async fn produce_idempotent(
        &self,
        batch: Bytes,
        info: &BatchInfo,
        append_time_ms: i64,
        term: u64,
        deadline: Instant,
        started: Instant,
        marker_guard: Option<MarkerGuard>,
        mut turn: Option<SubmitTurn>,
    ) -> Result<(u64, Option<(u64, u64)>)> {
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        // Waited for before the gate: the previous request's batches need it to be queued.
        await_turn(&mut turn, deadline, started).await?;
        let count = u32::try_from(info.record_count).unwrap_or(0);
        let (pid, epoch, first_seq) = (info.producer_id, info.producer_epoch, info.base_sequence);
        // Requests of one producer may overtake each other on the way here; a batch that arrives
        // just ahead of its predecessor waits briefly for it instead of being refused.
        let reorder_deadline = rill_rt::now() + REORDER_WAIT;
        let mut evictions = 0;
        // The owed marker (if any) is proposed once, however often the batch re-enters the gate.
        let mut owed_written = false;
        let mut result = loop {
            let registered = self.gate_changed.notified();
            let mut gate = self.gate.lock().await;
            // The gate's in-flight batches are this term's: a batch decided under a term that
            // ended while this request waited (for the gate, a predecessor or an eviction) would
            // be proposed in the next term unseen by its gate, and a retry there stored twice.
            if self.leader_term() != Some(term) {
                return Err(self.not_leader());
            }
            gate.enter_term(term);
            // An owed marker proposed here and this batch go to Raft as one entry, also when
            // the partition is idle (one sync and one round of replication, not two in a row):
            // the proposer is held from the marker to the batch.
            let together = match marker_guard {
                Some(guard) => {
                    self.guard_transactional(&mut gate, term, pid, epoch, guard, &mut owed_written, deadline).await?
                }
                None => None,
            };
            let decision = {
                let applied = self.producers.lock().unwrap_or_else(|p| p.into_inner());
                let id = BatchId { pid, epoch, first_seq, count };
                let max = self.producer_limits.max_per_partition;
                gate.decide(&applied, id, max, rill_rt::mutation::active(Mutation::NoDedupe))
            };
            let decision = match decision {
                Err(e) if overtook_its_predecessor(&e) && rill_rt::now() < reorder_deadline.min(deadline) => {
                    drop((gate, together));
                    let _ = rill_rt::timeout_at(reorder_deadline.min(deadline), registered).await;
                    continue;
                }
                Err(PartitionError::TooManyProducers { max }) => {
                    drop((gate, together));
                    // Without the gate or a hold: the eviction is a log entry of its own, and
                    // other producers' batches go on meanwhile.
                    if evictions == MAX_EVICTIONS_PER_BATCH {
                        return Err(PartitionError::TooManyProducers { max });
                    }
                    let evicted =
                        rill_rt::timeout_at(deadline, self.evict_idle_producers()).await.map_err(|_| {
                            PartitionError::Timeout {
                                waited_ms: elapsed_ms(started),
                                what: "idle producers to be evicted",
                            }
                        })??;
                    if !evicted {
                        return Err(PartitionError::TooManyProducers { max });
                    }
                    evictions += 1;
                    continue;
                }
                other => other?,
            };
            break match decision {
                Decision::Stored { base_offset } => return Ok((base_offset, None)),
                Decision::Wait(rx) => rx,
                Decision::Append => {
                    // Submitted while holding the gate: batches enter the log in decision order.
                    let mut share = self
                        .proposer
                        .submit(batch, count, append_time_ms, deadline, Lateness::Keep, Some(term))
                        .await?;
                    let (tx, rx) = watch::channel(None);
                    gate.register(pid, epoch, first_seq, count, rx.clone());
                    self.gate_changed.notify_waiters();
                    let gate_handle = self.gate.clone();
                    // The outcome resolves the in-flight entry whether or not this caller is
                    // still waiting: a retry must never race a first attempt still in Raft.
                    rill_rt::spawn(async move {
                        let outcome: Committed = match share.committed(None).await {
                            Some(Ok(landed)) => Ok((landed.base, landed.index, landed.term)),
                            Some(Err(e)) => Err(e),
                            None => Err(PartitionError::ShuttingDown),
                        };
                        tx.send_replace(Some(outcome));
                        gate_handle.lock().await.resolve(term, pid, first_seq);
                    });
                    rx
                }
            };
        };
        // Queued (or found in flight already): the connection's next request may go.
        drop(turn);
        loop {
            if let Some(outcome) = result.borrow_and_update().clone() {
                return outcome.map(|(base, index, t)| (base, Some((index, t))));
            }
            match rill_rt::timeout_at(deadline, result.changed()).await {
                Err(_) => {
                    return Err(PartitionError::Timeout { waited_ms: elapsed_ms(started), what: "the batch to commit" })
                }
                Ok(Err(_)) => return Err(PartitionError::ShuttingDown),
                Ok(Ok(())) => {}
            }
        }
    }

    /// Appends a control batch carrying `marker` for producer `producer_id` at `epoch` (the
    /// transaction coordinator's commit and abort markers; clients cannot produce these). Like
    /// any batch it takes an offset; answered as `acks=all`. Returns the marker's offset.
    /// A marker of an older coordinator epoch than the producer's last one here is refused
    /// (`TRANSACTION_COORDINATOR_FENCED`), as is one for an older producer epoch; a marker of a
    /// transaction already decided here (the transaction it names) is answered with the
    /// producer's last marker offset, nothing written, unless it comes from a newer coordinator
    /// epoch (then it is written to fence the older coordinator, and decides nothing). One that
    /// races past this check (two copies in flight at once) decides nothing when applied.
    pub async fn append_control(
        &self,
        marker: rill_records::ControlMarker,
        producer_id: i64,
        epoch: i16,
        timeout: Duration,
    ) -> Result<u64> {
        let started = rill_rt::now();
        let deadline = started + timeout;
        let Some(term) = self.leader_term() else {
            return Err(self.not_leader());
        };
        let config = self.config();
        self.check_isr(term, config.min_insync_replicas)?;
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        match self.marker_check(producer_id, epoch, &marker) {
            Ok(()) => {}
            Err(MarkerRefusal::Repeated { last_marker_offset, coordinator_epoch })
                if marker.coordinator_epoch <= coordinator_epoch =>
            {
                // Already decided here: the coordinator lost the first answer, or this copy is
                // late. It is there; nothing is written.
                return Ok(u64::try_from(last_marker_offset).unwrap_or(0));
            }
            // A newer coordinator's copy: written so that it fences the older one's, and
            // decides nothing when applied.
            Err(MarkerRefusal::Repeated { .. }) => {}
            Err(MarkerRefusal::CoordinatorFenced { current }) => {
                return Err(PartitionError::CoordinatorFenced { current, got: marker.coordinator_epoch })
            }
            Err(MarkerRefusal::StaleEpoch { current }) => {
                return Err(PartitionError::InvalidProducerEpoch { producer_id, current, got: epoch })
            }
        }
        let _in_flight = InFlight::enter(self);
        let gated = rill_rt::now();
        let mut outcome = {
            let mut gate = self.gate.lock().await;
            gate.enter_term(term);
            // A copy of it proposed already (the owed marker a batch of the producer's next
            // transaction wrote ahead of itself) decides as this one would: its outcome is this
            // one's, nothing is written twice.
            match gate.marker_copy(producer_id, epoch, &marker) {
                Some(outcome) => outcome,
                None => self.submit_marker(&mut gate, term, marker, producer_id, epoch, deadline).await?,
            }
        };
        let landed = loop {
            if let Some(landed) = outcome.borrow_and_update().clone() {
                break landed;
            }
            match rill_rt::timeout_at(deadline, outcome.changed()).await {
                Err(_) => {
                    return Err(PartitionError::Timeout {
                        waited_ms: elapsed_ms(started),
                        what: "the transaction marker to commit",
                    })
                }
                Ok(Err(_)) => return Err(PartitionError::ShuttingDown),
                Ok(Ok(())) => {}
            }
        };
        let landed = match landed {
            Some(Ok(l)) => l,
            Some(Err(e)) => return Err(e),
            None => return Err(PartitionError::ShuttingDown),
        };
        let committed = rill_rt::now();
        self.wait_for_isr(landed.index, landed.term, config.min_insync_replicas, deadline, started).await?;
        tracing::debug!(
            group = self.group,
            producer_id,
            checks_ms = (gated - started).as_secs_f64() * 1e3,
            commit_ms = (committed - gated).as_secs_f64() * 1e3,
            isr_ms = committed.elapsed().as_secs_f64() * 1e3,
            "transaction marker stored"
        );
        Ok(landed.base)
    }

    /// Under the gate, for a transactional batch its coordinator just verified: refuses it
    /// (`CONCURRENT_TRANSACTIONS`, retry) when a marker of its producer was applied here or
    /// proposed since the verification began — that marker may have closed the transaction the
    /// verification found — unless it names a transaction before the verified one (the answer
    /// names it: `guard.transaction`), such as the decided transaction the verification said
    /// this partition is owed (`guard.owed`: the coordinator's copy of it); and proposes that owed
    /// marker, once, right ahead of the batch. Marker and batch are proposed under one hold of
    /// the gate, so nothing comes between them in the log, and of the proposer (the returned
    /// [`crate::propose::Hold`], which the caller keeps until the batch is submitted), so they
    /// share one Raft entry: the batch commits only if the marker before it does, and the
    /// marker closes the producer's decided transaction here before the batch opens the next
    /// one. Without an owed
    /// marker, a transaction of an older epoch still open here refuses the batch (it would join
    /// that transaction).
    #[allow(clippy::too_many_arguments)]
    async fn guard_transactional(
        &self,
        gate: &mut Gate,
        term: u64,
        pid: i64,
        epoch: i16,
        guard: MarkerGuard,
        owed_written: &mut bool,
        deadline: Instant,
    ) -> Result<Option<crate::propose::Hold>> {
        let retry = |why: &str| PartitionError::ConcurrentTransactions(format!("producer {pid}: {why}; retry"));
        let owed_transaction = guard.owed.map(|o| o.marker.transaction);
        // Markers naming a transaction before the verified one cannot close it. (Every marker
        // Rill's coordinator writes names its transaction, and a producer's last marker name
        // here only grows: a later copy of an earlier marker decides nothing and is not noted.)
        let decided = match guard.transaction {
            0 => owed_transaction.unwrap_or(guard.before.1),
            verified => verified - 1,
        };
        let now = self.last_marker_and_name(pid);
        let earlier = guard.transaction > 0 && now.1 != 0 && now.1 < guard.transaction;
        let unchanged = now.0 == guard.before.0 || owed_transaction == Some(now.1) || earlier;
        if gate.marker_pending_after(pid, decided) || !unchanged {
            return Err(retry("a transaction marker arrived while the partition was being verified"));
        }
        if let Some(owed) = guard.owed {
            // Proposed already, by this batch or another of its transaction (they share one
            // verification): one copy ahead of them is enough.
            if *owed_written || gate.marker_pending(pid, owed.marker.transaction) {
                return Ok(None);
            }
            match self.marker_check(pid, owed.producer_epoch, &owed.marker) {
                Ok(()) => {
                    // The outcome needs no waiter: the batch behind it commits only if it does.
                    let together = self.proposer.hold();
                    self.submit_marker(gate, term, owed.marker, pid, owed.producer_epoch, deadline).await?;
                    *owed_written = true;
                    return Ok(Some(together));
                }
                // Decided here already: the open-transaction check below applies as without one.
                Err(MarkerRefusal::Repeated { .. }) => {}
                Err(MarkerRefusal::CoordinatorFenced { .. } | MarkerRefusal::StaleEpoch { .. }) => {
                    return Err(retry("a newer coordinator or producer epoch wrote here since the verification"))
                }
            }
        }
        // The producer's previous transaction still open here (its marker not yet written):
        // this batch would join it.
        let open = self.transactions.lock().unwrap_or_else(|p| p.into_inner()).open(pid).map(|t| t.epoch);
        let older = open.filter(|e| *e < epoch);
        if let Some(open) = older.filter(|_| !rill_rt::mutation::active(Mutation::BatchBeforeMarker)) {
            return Err(retry(&format!(
                "its transaction of epoch {open} is still open here, its marker not yet written"
            )));
        }
        Ok(None)
    }

    /// Proposes the control batch of `marker` for `producer_id` at `epoch`, under the gate the
    /// caller holds in `term`, and announces the marker there until its outcome is known —
    /// whether or not anyone still waits for it (a caller that gave up must not leave it
    /// announced for the rest of the term). A transactional batch verified before this marker
    /// is thereby either ahead of it in the log or refused. Returns the outcome to come.
    async fn submit_marker(
        &self,
        gate: &mut Gate,
        term: u64,
        marker: rill_records::ControlMarker,
        producer_id: i64,
        epoch: i16,
        deadline: Instant,
    ) -> Result<MarkerOutcome> {
        let append_time_ms = rill_rt::wall_clock_ms();
        let batch = marker.batch(producer_id, epoch, append_time_ms).map_err(PartitionError::InvalidBatch)?;
        let mut share = self.proposer.submit(batch, 1, append_time_ms, deadline, Lateness::Keep, Some(term)).await?;
        let (tx, outcome) = watch::channel(None);
        gate.marker_started(producer_id, PendingMarker { marker, epoch, outcome: outcome.clone() });
        let gate = self.gate.clone();
        let mine = outcome.clone();
        rill_rt::spawn(async move {
            let landed = share.committed(None).await;
            gate.lock().await.marker_done(term, producer_id, &mine);
            tx.send_replace(Some(landed));
        });
        Ok(outcome)
    }

    /// Proposes forgetting producers idle since before `older_than_ms` (leader only).
    pub async fn expire_producers(&self, older_than_ms: i64) -> Result<()> {
        self.propose_bookkeeping(command::encode_expire_producers(older_than_ms)).await.map(|_| ())
    }

    /// Makes room in a full producer table (leader only): proposes forgetting every producer
    /// idle for [`ProducerLimits::evictable_after`] or longer that has no transaction open here,
    /// and returns once that is applied. False, proposing nothing, when there is no such
    /// producer. Replicated like `producer.id.expiration.ms`'s expiry, so every replica — and so
    /// every future leader — forgets the same producers at the same point of the log.
    ///
    /// [`ProducerLimits::evictable_after`]: crate::producers::ProducerLimits
    async fn evict_idle_producers(&self) -> Result<bool> {
        let idle_for = if rill_rt::mutation::active(Mutation::EvictActiveProducers) {
            0
        } else {
            i64::try_from(self.producer_limits.evictable_after.as_millis()).unwrap_or(i64::MAX)
        };
        let older_than = rill_rt::wall_clock_ms().saturating_sub(idle_for);
        let any = {
            let producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
            let txns = self.transactions.lock().unwrap_or_else(|p| p.into_inner());
            producers.any_expirable(older_than, |pid| txns.open(pid).is_some())
        };
        if !any {
            return Ok(false);
        }
        let before = self.producers.lock().unwrap_or_else(|p| p.into_inner()).len();
        self.expire_producers(older_than).await?;
        let after = self.producers.lock().unwrap_or_else(|p| p.into_inner()).len();
        tracing::info!(
            group = self.group,
            forgotten = before.saturating_sub(after),
            idle_for_ms = idle_for,
            "producer table full: forgot idle producers to make room"
        );
        Ok(true)
    }
}

/// Waits for a submitted batch to be synced in the leader's log, at most until `deadline`.
async fn durable_within(share: &mut Share, deadline: Instant, started: Instant) -> Result<u64> {
    share.durable(Some(deadline)).await.unwrap_or_else(|| {
        Err(PartitionError::Timeout { waited_ms: elapsed_ms(started), what: "the leader to sync the batch" })
    })
}

/// Waits for a submitted batch to commit, at most until `deadline`.
async fn committed_within(share: &mut Share, deadline: Instant, started: Instant) -> Result<Landed> {
    share
        .committed(Some(deadline))
        .await
        .unwrap_or_else(|| Err(PartitionError::Timeout { waited_ms: elapsed_ms(started), what: "the batch to commit" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_batch_ahead_of_its_predecessor_waits_for_it() {
        let ahead = PartitionError::OutOfOrderSequence { producer_id: 1, expected: 5, got: 9 };
        let behind = PartitionError::OutOfOrderSequence { producer_id: 1, expected: 5, got: 2 };
        assert!(overtook_its_predecessor(&ahead));
        assert!(!overtook_its_predecessor(&behind), "a batch behind the expected sequence never fills in");
        assert!(overtook_its_predecessor(&PartitionError::UnknownProducerId { producer_id: 1 }));
        assert!(!overtook_its_predecessor(&PartitionError::DuplicateSequence { producer_id: 1, first_seq: 0 }));
    }
}

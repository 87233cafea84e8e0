//! [`Partition`]: one record partition replica on this node — its parts, status and housekeeping
//! (its produce path is in `produce`, its read path in `fetch`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rill_meta::TopicConfig;
use rill_raft::multi::StartedGroup;
use rill_raft::state_machine::SmStore;
use rill_raft::NodeId;
use rill_rt::sync::watch;

use crate::cleaning::Cleaning;
use crate::compaction::{CompactionBudget, Progress};
use crate::epochs::LeaderEpochs;
use crate::error::{PartitionError, Result};
use crate::idempotence::Gate;
use crate::index::SparseIndex;
use crate::machine::{PartitionStateMachine, SharedState};
use crate::producers::{ProducerLimits, ProducerStates};
use crate::propose::Proposer;
use crate::replica::{Place, Replica};
use crate::transactions::Transactions;

/// Producer acknowledgement level (DESIGN §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Committed by Raft and present on every ISR member.
    All,
    /// Synced in the leader's log.
    Leader,
    /// Accepted by the leader for appending.
    None,
}

/// A successful produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceOutcome {
    /// Offset of the batch's first record; `None` with `acks=none`.
    pub base_offset: Option<u64>,
    /// The leader's append time.
    pub append_time_ms: i64,
    /// The partition's first stored offset when the answer was made (Kafka's produce answer
    /// carries it, so a producer learns of deleted records).
    pub log_start_offset: u64,
}

/// Live state of this replica, for describe and routing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaState {
    /// This node leads the partition.
    pub is_leader: bool,
    /// The leader as this replica knows it.
    pub leader: Option<NodeId>,
    /// Current term.
    pub term: u64,
    /// In-sync replicas (known only on the leader).
    pub isr: Vec<NodeId>,
    /// First stored offset.
    pub log_start_offset: u64,
    /// High watermark (committed and applied).
    pub high_watermark: u64,
    /// Offset after the last stored record, committed or not.
    pub log_end_offset: u64,
    /// The partition's Raft group is quiescent here (idle: no heartbeats).
    pub quiescent: bool,
}

/// One record partition replica hosted on this node: a [`Replica`] with a log of record
/// batches (its offsets, high watermark, time index, idempotent producers).
pub struct Partition {
    pub(crate) replica: Replica,
    pub(crate) sm: SmStore<PartitionStateMachine>,
    pub(crate) index: Arc<Mutex<SparseIndex>>,
    /// Where each leader epoch's records begin.
    pub(crate) epochs: Arc<Mutex<LeaderEpochs>>,
    /// Bytes of entries the newest snapshot covers.
    pub(crate) snapshotted_bytes: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) producers: Arc<Mutex<ProducerStates>>,
    /// The applied cleaning point (compacted topics).
    pub(crate) cleaning: Arc<Mutex<Cleaning>>,
    /// Open transactions and the aborted index.
    pub(crate) transactions: Arc<Mutex<Transactions>>,
    /// The last stable offset as applied.
    pub(crate) lso: watch::Receiver<u64>,
    pub(crate) gate: Arc<rill_rt::sync::Mutex<Gate>>,
    /// Signalled whenever a batch enters the gate (for batches waiting on a predecessor).
    pub(crate) gate_changed: rill_rt::sync::Notify,
    /// Merges concurrent batches into entries and hands them to Raft.
    pub(crate) proposer: Arc<Proposer>,
    /// How many producers this partition remembers (checked by the leader's produce path).
    pub(crate) producer_limits: ProducerLimits,
    /// Transactional batches' verifications under way, one per producer epoch.
    pub(crate) verifying: crate::verifying::Verifying<crate::produce::MarkerGuard>,
    /// Each share group's reading of the partition, as applied here.
    pub(crate) shares: Arc<Mutex<crate::share::stored::ShareGroups>>,
    /// Counts applied changes of `shares`.
    pub(crate) share_changes: watch::Receiver<u64>,
    /// Held while the leader plans and proposes an acquisition (one at a time).
    pub(crate) share_acquiring: rill_rt::sync::Mutex<()>,
    /// The leader's lock timer (see `crate::share::leader`).
    pub(crate) share_timer: crate::share::leader::ShareTimer,
    /// Where dead-letter copies go (`None`: nowhere yet, they wait).
    pub(crate) dead_letter_sink: Option<Arc<dyn crate::share::dead_letters::DeadLetterSink>>,
    /// The leader's dead-letter writer (see `crate::share::dead_letters`).
    pub(crate) dead_letter_task: crate::share::dead_letters::DeadLetterTask,
}

impl std::ops::Deref for Partition {
    type Target = Replica;

    fn deref(&self) -> &Replica {
        &self.replica
    }
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Partition({}/{}, group {})", self.topic, self.partition, self.group)
    }
}

impl Partition {
    /// Wraps a started Raft group as a record partition replica and starts its ISR tracker.
    /// `shared` must be the state the group's [`PartitionStateMachine`] was made from.
    pub fn new(
        topic: String,
        partition: u32,
        node_id: NodeId,
        started: StartedGroup<PartitionStateMachine>,
        shared: SharedState,
        config: TopicConfig,
        settings: PartitionSettings,
    ) -> Arc<Self> {
        let StartedGroup { raft, log, sm, quiescence, .. } = started;
        // The state machine may have been restored from a snapshot before anything was applied.
        let applied = sm.applied().position;
        shared.hw.send_replace(applied);
        let lso = shared.transactions.lock().unwrap_or_else(|p| p.into_inner()).last_stable_offset(applied);
        shared.lso.send_replace(lso);
        shared.index.lock().unwrap_or_else(|p| p.into_inner()).raise_end(applied);
        let proposer = Proposer::new(node_id, raft.clone(), log.clone(), quiescence.clone());
        let place = Place { topic, partition, node_id };
        let replica = Replica::new(place, raft, log, quiescence, shared.hw.subscribe(), config);
        let partition = Arc::new(Self {
            replica,
            sm,
            index: shared.index,
            epochs: shared.epochs,
            snapshotted_bytes: shared.snapshotted_bytes,
            producers: shared.producers,
            cleaning: shared.cleaning,
            transactions: shared.transactions,
            lso: shared.lso.subscribe(),
            gate: Arc::default(),
            gate_changed: rill_rt::sync::Notify::new(),
            proposer,
            producer_limits: settings.producers,
            verifying: Default::default(),
            shares: shared.shares,
            share_changes: shared.share_changes.subscribe(),
            share_acquiring: rill_rt::sync::Mutex::new(()),
            share_timer: Default::default(),
            dead_letter_sink: settings.dead_letters.clone(),
            dead_letter_task: Default::default(),
        });
        rill_rt::spawn(housekeeping(Arc::downgrade(&partition), settings.purge_every, settings.compaction));
        partition
    }

    /// The log start offset as this replica has applied it: records below it are deleted and
    /// never served. (The Raft log may still hold them until it is purged.)
    pub fn log_start_offset(&self) -> u64 {
        let logical = self.index.lock().unwrap_or_else(|p| p.into_inner()).log_start();
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::ServeBelowLogStart) {
            // Deliberate bug (simulation only): deleted records stay readable.
            return self.log.start_position();
        }
        logical.max(self.log.start_position())
    }

    /// Purges this replica's log below the entry holding its newest snapshot's log start offset:
    /// Raft forgets those entries (a follower that needs them gets the snapshot, which carries
    /// the records from the log start on) and the log deletes them.
    pub async fn purge_below_log_start(&self) -> Result<()> {
        let Some((last, Some(from))) = self.sm.snapshot_point() else { return Ok(()) };
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let holding = self.log.index_of_position(from).map_err(storage)?;
        let mut floor = holding.map_or(last + 1, |i| i.min(last + 1));
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::PurgeAheadOfLogStart) {
            // Deliberate bug (simulation only): purge at the snapshot, retained records too.
            floor = last + 1;
        }
        self.log.retain_from(floor).map_err(storage)?;
        let Some(upto) = floor.checked_sub(1) else { return Ok(()) };
        if self.log.last_purged_index().is_none_or(|p| p < upto) {
            self.raft.trigger().purge_log(upto).await.map_err(|e| PartitionError::Storage(e.to_string()))?;
        }
        Ok(())
    }

    /// The log start offset as the state machine holds it, whatever the log stores (oracles).
    pub fn applied_log_start(&self) -> u64 {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).log_start()
    }

    /// Snapshots this replica installed from a leader since it started (tests and oracles).
    pub fn installed_snapshots(&self) -> usize {
        self.log.installed_snapshots()
    }

    /// Bytes of entries applied since the newest snapshot of this replica.
    pub fn bytes_since_snapshot(&self) -> u64 {
        let appended = self.index.lock().unwrap_or_else(|p| p.into_inner()).appended;
        appended.saturating_sub(self.snapshotted_bytes.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// About how many bytes of entries this replica holds at or above its log start offset.
    pub fn retained_bytes(&self) -> u64 {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).retained_bytes()
    }

    /// Live state of this replica, with the log start offset it has applied.
    pub fn state(&self) -> ReplicaState {
        ReplicaState { log_start_offset: self.log_start_offset(), ..self.replica.state() }
    }

    /// The state machine store (tests and oracles).
    pub fn state_machine(&self) -> &SmStore<PartitionStateMachine> {
        &self.sm
    }

    /// Bytes of batches waiting to enter the log on this replica (tests and oracles; see
    /// [`crate::propose::MAX_QUEUED_BYTES`]).
    pub fn queued_bytes(&self) -> usize {
        self.proposer.queued_bytes()
    }

    /// Raw bytes of every stored entry body, by log index (replica comparison).
    pub fn entry_bodies(&self) -> rill_raft::Result<Vec<(u64, u64, Bytes)>> {
        Ok(self.log.read_positioned(0, u64::MAX, usize::MAX)?.into_iter().map(|e| (e.index, e.base, e.body)).collect())
    }
}

/// What a node gives each of its record partitions.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    /// How often, at most, a replica snapshots only because its log start offset or cleaning
    /// point moved, and a leader proposes a new cleaning point ([`PURGE_SNAPSHOT_EVERY`]).
    pub purge_every: Duration,
    /// The node's compaction budget, shared by its partitions.
    pub compaction: Arc<CompactionBudget>,
    /// How many producers a partition remembers, and when a full table may forget one.
    pub producers: ProducerLimits,
    /// Where share groups' dead-letter copies go (the node routes them); `None` where nothing
    /// routes them (tests of one partition): archived records then wait for their copies.
    pub dead_letters: Option<Arc<dyn crate::share::dead_letters::DeadLetterSink>>,
}

/// How often a leader checks its partition's retention (and every replica its snapshot).
pub const RETENTION_CHECK_EVERY: Duration = Duration::from_secs(5);

/// A replica snapshots its state machine once this many bytes of entries were applied since its
/// last snapshot (besides every 10,000 entries): a restart re-applies the log after the newest
/// snapshot, so this bounds the bytes a restart reads per partition. (A record partition's
/// snapshot is small — the index and producer state — and its log is not purged behind it.)
pub const SNAPSHOT_EVERY_BYTES: u64 = 64 << 20;

/// How often, at most, a replica snapshots only because its log start offset moved (so that
/// its log can be purged up to it: the purge point is the newest snapshot's log start), unless
/// its node says otherwise.
pub const PURGE_SNAPSHOT_EVERY: Duration = Duration::from_secs(30);

/// On every replica: snapshots after [`SNAPSHOT_EVERY_BYTES`] of entries, or when the log start
/// offset or (compacted topics) the cleaning point moved past what the newest snapshot covers
/// (at most every `purge_every`); purges the log below the entry holding the newest snapshot's
/// log start offset; compacts below the cleaning point and the snapshot
/// ([`crate::compaction`]). While this replica leads: proposes forgetting producers idle longer
/// than `producer.id.expiration.ms`, moving the log start offset past what `retention.ms` and
/// `retention.bytes` no longer keep, and (compacted topics, at most every `purge_every`) a new
/// cleaning point — so every replica forgets, deletes and compacts at the same point of the
/// log. Retention is checked every [`RETENTION_CHECK_EVERY`] (sooner for a shorter
/// `retention.ms`), idle producers about every minute.
async fn housekeeping(partition: std::sync::Weak<Partition>, purge_every: Duration, compaction: Arc<CompactionBudget>) {
    let mut next_expiry = rill_rt::now();
    let mut next_purge_snapshot = rill_rt::now();
    let mut next_retention = rill_rt::now();
    let mut next_cleaning = rill_rt::now();
    let mut progress = Progress::default();
    let mut purged_for = None;
    loop {
        let Some(p) = partition.upgrade() else { return };
        let config = p.config();
        let snapshot_start = p.sm.snapshot_point().and_then(|(_, from)| from);
        let start_moved = snapshot_start.unwrap_or(0) < p.applied_log_start();
        let cleaning_moved = config.compacted() && p.sm.snapshot_position().unwrap_or(0) < p.cleaning_point().0;
        let purge_due = (start_moved || cleaning_moved) && rill_rt::now() >= next_purge_snapshot;
        if p.bytes_since_snapshot() >= SNAPSHOT_EVERY_BYTES || purge_due {
            if purge_due {
                next_purge_snapshot = rill_rt::now() + purge_every;
            }
            if let Err(e) = p.raft.trigger().snapshot().await {
                tracing::debug!(group = p.group, error = %e, "could not start a snapshot");
            }
        }
        // A purge depends only on the newest snapshot: once done for one, it is not redone.
        let point = p.sm.snapshot_point();
        if point.is_some() && point != purged_for {
            match p.purge_below_log_start().await {
                Ok(()) => purged_for = point,
                Err(e) => tracing::debug!(group = p.group, error = %e, "could not purge the log"),
            }
        }
        if config.compacted() {
            if let Err(e) = p.compact_once(&compaction, &mut progress).await {
                tracing::warn!(group = p.group, error = %e, "could not compact the log");
            }
        }
        let check_every = config
            .retention()
            .map_or(RETENTION_CHECK_EVERY, |r| RETENTION_CHECK_EVERY.min((r / 2).max(Duration::from_millis(500))));
        if p.leader_term().is_some() {
            if rill_rt::now() >= next_retention {
                next_retention = rill_rt::now() + check_every;
                if let Err(e) = p.enforce_retention(&config).await {
                    tracing::debug!(group = p.group, error = %e, "could not enforce retention");
                }
            }
            if config.compacted() && rill_rt::now() >= next_cleaning {
                next_cleaning = rill_rt::now() + purge_every;
                if let Err(e) = p.schedule_compaction(&config, &progress).await {
                    tracing::debug!(group = p.group, error = %e, "could not move the cleaning point");
                }
            }
            // After a failover, locks taken under the previous leader end by this one's timer,
            // and records archived under it get their dead-letter copies from this one.
            p.ensure_share_timer(None);
            p.ensure_dead_letter_writer();
            if rill_rt::now() >= next_expiry {
                let expiration = config.producer_id_expiration_ms;
                let every = crate::produce::EXPIRY_CHECK_EVERY
                    .min(Duration::from_millis(expiration / 2).max(Duration::from_secs(1)));
                next_expiry = rill_rt::now() + every;
                let older_than = rill_rt::wall_clock_ms().saturating_sub(i64::try_from(expiration).unwrap_or(i64::MAX));
                let oldest = p.producers.lock().unwrap_or_else(|e| e.into_inner()).oldest_append_ms();
                if oldest.is_some_and(|o| o < older_than) {
                    if let Err(e) = p.expire_producers(older_than).await {
                        tracing::debug!(group = p.group, error = %e, "could not expire idle producers");
                    }
                }
            }
        }
        let raft = p.raft.clone();
        drop(p);
        if raft.metrics().borrow().running_state.is_err() {
            return;
        }
        // Purges follow the log start within `purge_every` when that is the shorter wait.
        rill_rt::sleep(check_every.min(purge_every)).await;
    }
}

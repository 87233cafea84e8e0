//! [`PartitionStateMachine`]: a partition's replicated state.
//!
//! Offsets come from Raft positions and the high watermark is the adapter's applied position.
//! This machine publishes the high watermark (waking long-polling fetches), answers the proposer
//! with the entry's base offset, and keeps a sparse **time index** ([`crate::index`]) so a
//! consumer can start from a point in time without scanning the whole log.
//! It also keeps producer state (idempotence, [`crate::producers`]) and transaction state (open
//! transactions, the last stable offset and the aborted index, [`crate::transactions`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use rill_proto::partition as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

use rill_records::{BatchInfo, ControlKind, ControlMarker, MAX_DECOMPRESSED_BATCH_BYTES};

use crate::cleaning::Cleaning;
use crate::command;
use crate::epochs::LeaderEpochs;
use crate::index::{IndexPoint, SparseIndex, UNKNOWN_RECORD_TIME};
use crate::producers::{MarkerRefusal, ProducerStates};
use crate::share::stored::{self as share_stored, ShareGroups};
use crate::share::{ShareCommand, SharePartition};
use crate::transactions::Transactions;

/// State a partition's state machine shares with the replica serving requests.
#[derive(Clone)]
pub struct SharedState {
    /// The high watermark, published on every apply.
    pub hw: Arc<watch::Sender<u64>>,
    /// The log start offset and the sparse index by time and size.
    pub index: Arc<Mutex<SparseIndex>>,
    /// Where each leader epoch's records begin (see [`crate::epochs`]).
    pub epochs: Arc<Mutex<LeaderEpochs>>,
    /// Idempotent producers' last batches.
    pub producers: Arc<Mutex<ProducerStates>>,
    /// The cleaning point of a compacted topic (see [`crate::cleaning`]).
    pub cleaning: Arc<Mutex<Cleaning>>,
    /// Open transactions and the aborted index (see [`crate::transactions`]).
    pub transactions: Arc<Mutex<Transactions>>,
    /// The last stable offset, published on every apply (wakes `read_committed` long polls).
    pub lso: Arc<watch::Sender<u64>>,
    /// Bytes of entries the newest snapshot covers (its index's `appended`): how much a restart
    /// re-applies is the index's `appended` minus this.
    pub snapshotted_bytes: Arc<AtomicU64>,
    /// Each share group's reading of the partition (see [`crate::share`]).
    pub shares: Arc<Mutex<ShareGroups>>,
    /// Counts changes of `shares` (share entries, trims, restored snapshots): wakes share
    /// fetches waiting for records to come back, and the leader's lock timer.
    pub share_changes: Arc<watch::Sender<u64>>,
}

impl SharedState {
    /// Fresh shared state (high watermark 0, empty index, no producers).
    pub fn new() -> Self {
        Self {
            hw: Arc::new(watch::channel(0).0),
            index: Arc::default(),
            epochs: Arc::default(),
            producers: Arc::default(),
            cleaning: Arc::default(),
            transactions: Arc::default(),
            lso: Arc::new(watch::channel(0).0),
            snapshotted_bytes: Arc::default(),
            shares: Arc::default(),
            share_changes: Arc::new(watch::channel(0).0),
        }
    }

    /// A state machine writing into this shared state.
    pub fn state_machine(&self) -> PartitionStateMachine {
        PartitionStateMachine { shared: self.clone() }
    }
}

impl Default for SharedState {
    fn default() -> Self {
        Self::new()
    }
}

/// A partition's state machine.
pub struct PartitionStateMachine {
    shared: SharedState,
}

impl PartitionStateMachine {
    /// Remembers what the batches of an append entry starting at offset `base` tell about
    /// producers and transactions: idempotent batches, transactional batches (opening a
    /// transaction here) and control markers (deciding one). Returns the largest record
    /// timestamp of the entry ([`UNKNOWN_RECORD_TIME`] if a batch could not be read).
    fn record_batches(&self, log_id: &LogId, base: u64, append_ms: i64, body: &Bytes) -> i64 {
        let batches = match command::decode_append(body.clone()) {
            Ok(b) => b,
            Err(e) => {
                // The leader validated the entry; every replica sees the same bytes and skips alike.
                tracing::error!(index = log_id.index, error = %e, "undecodable partition entry");
                return UNKNOWN_RECORD_TIME;
            }
        };
        let mut record_time = i64::MIN;
        let mut producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner());
        let mut txns = self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner());
        let mut offset = base;
        for bytes in batches {
            let b = match BatchInfo::parse_stored(&bytes) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(index = log_id.index, error = %e, "undecodable batch in a partition entry");
                    return UNKNOWN_RECORD_TIME;
                }
            };
            record_time = record_time.max(b.max_timestamp);
            // A batch occupies its span of offsets and sequence numbers whatever compaction
            // removed from it, so a replica applying a compacted entry remembers what the
            // leader remembered from the original.
            let span = b.span();
            if b.is_control() {
                match control_marker(&bytes) {
                    // A marker the leader's check let through while another won the race (two
                    // coordinators, a repeated marker of an older epoch, two copies of one
                    // transaction's marker) decides nothing; every replica ignores it alike.
                    Some(m) => match producers.check_marker(
                        b.producer_id,
                        b.producer_epoch,
                        m.coordinator_epoch,
                        m.transaction,
                    ) {
                        Ok(()) => {
                            let commit = match m.kind {
                                ControlKind::Commit => true,
                                ControlKind::Abort => false,
                                ControlKind::Other(_) => {
                                    offset += span;
                                    continue;
                                }
                            };
                            producers.apply_marker(
                                b.producer_id,
                                b.producer_epoch,
                                m.coordinator_epoch,
                                m.transaction,
                                offset,
                                append_ms,
                            );
                            txns.on_marker(b.producer_id, commit, offset);
                        }
                        Err(MarkerRefusal::Repeated { .. }) => {
                            producers.note_coordinator_epoch(b.producer_id, m.coordinator_epoch);
                            tracing::debug!(
                                index = log_id.index,
                                producer = b.producer_id,
                                transaction = m.transaction,
                                "a repeated marker of a transaction already decided here decides nothing"
                            );
                        }
                        Err(_) => tracing::warn!(
                            index = log_id.index,
                            producer = b.producer_id,
                            coordinator_epoch = m.coordinator_epoch,
                            "ignored a transaction marker of a deposed coordinator or an older producer epoch"
                        ),
                    },
                    None => tracing::error!(index = log_id.index, offset, "unreadable control batch"),
                }
            } else if b.has_producer() {
                // A marker may have bumped the producer's epoch after the leader let this batch
                // through (transactions v2, a timeout, a new instance): a transactional batch of
                // the older epoch then belongs to a transaction already decided, so it opens
                // nothing and is indexed as aborted — read_committed never returns it.
                let fenced = producers.get(b.producer_id).is_some_and(|e| e.epoch > b.producer_epoch);
                let count = u32::try_from(span).unwrap_or(u32::MAX);
                if b.is_transactional() && fenced {
                    txns.abort_fenced(b.producer_id, offset, span);
                } else {
                    producers.apply_batch(b.producer_id, b.producer_epoch, b.base_sequence, count, offset, append_ms);
                    if b.is_transactional() {
                        txns.on_batch(b.producer_id, b.producer_epoch, offset, span);
                    }
                }
            }
            offset += span;
        }
        record_time
    }

    /// Publishes the last stable offset for the high watermark `hw`.
    fn publish_lso(&self, hw: u64) {
        let lso = self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner()).last_stable_offset(hw);
        self.shared.lso.send_if_modified(|current| std::mem::replace(current, lso) != lso);
    }
}

/// The marker a stored control batch carries.
fn control_marker(batch: &Bytes) -> Option<ControlMarker> {
    let decoded = rill_records::decode(batch, MAX_DECOMPRESSED_BATCH_BYTES).ok()?;
    ControlMarker::parse(decoded.records.first()?).ok()
}

impl GroupStateMachine for PartitionStateMachine {
    fn apply(&mut self, log_id: &LogId, base: u64, payload: &Payload) -> Bytes {
        let end = base + u64::from(payload.units);
        let mut answer = base;
        if let Some(t) = command::append_time(&payload.body) {
            let bytes = payload.body.len() as u64;
            let record_time = self.record_batches(log_id, base, t, &payload.body);
            self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).observe(t, base, end, bytes, record_time);
            self.shared.epochs.lock().unwrap_or_else(|p| p.into_inner()).observe(log_id.leader_id.term, base);
        } else if let Some(older_than) = command::expire_producers(&payload.body) {
            let mut producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner());
            let txns = self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner());
            let gone = producers.expire(older_than, |pid| txns.open(pid).is_some());
            tracing::debug!(index = log_id.index, gone, "expired idle producers");
        } else if let Some(before) = command::trim(&payload.body) {
            // `base` is the high watermark here: nothing above it can be deleted, and nothing of
            // a transaction still open (the log start stays at or below the last stable offset).
            let mut txns = self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner());
            let bound = before.min(txns.last_stable_offset(base));
            answer = self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).trim(bound);
            txns.trim(answer);
            self.shared.epochs.lock().unwrap_or_else(|p| p.into_inner()).trim(answer);
            // Share groups follow the log: what it no longer has is gone for them too.
            let mut shares = self.shared.shares.lock().unwrap_or_else(|p| p.into_inner());
            for state in shares.values_mut() {
                state.apply(&ShareCommand::LogStart { log_start: answer }, &Default::default());
            }
            if !shares.is_empty() {
                self.shared.share_changes.send_modify(|n| *n += 1);
            }
            tracing::debug!(index = log_id.index, log_start = answer, "log start offset moved");
        } else if let Some(entry) = command::share(&payload.body) {
            // Answered with what it did rather than an offset; it takes none.
            let log_start = self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).log_start();
            let hw = *self.shared.hw.borrow();
            let mut shares = self.shared.shares.lock().unwrap_or_else(|p| p.into_inner());
            let answer = share_stored::apply_entry(&mut shares, entry, log_start, hw);
            self.shared.share_changes.send_modify(|n| *n += 1);
            return answer;
        } else if let Some(c) = command::compact(&payload.body) {
            // `base` is the high watermark here: nothing above it is compacted, nor anything of a
            // transaction still open.
            let bound = self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner()).last_stable_offset(base);
            answer = self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner()).apply(&c, bound);
            tracing::debug!(index = log_id.index, clean_to = answer, "cleaning point moved");
        }
        if payload.units > 0 {
            self.shared.hw.send_replace(end);
        }
        self.publish_lso(*self.shared.hw.borrow());
        // An append is answered with its base offset, a trim with the log start afterwards.
        Bytes::copy_from_slice(&answer.to_le_bytes())
    }

    /// The snapshot: the log start offset, the sparse index, the producer state and the
    /// cleaning point, as
    /// `PartitionSnapshot` (`proto/rill/partition.proto`).
    fn snapshot(&self) -> Result<Bytes, String> {
        let mut snap = {
            let ix = self.shared.index.lock().unwrap_or_else(|p| p.into_inner());
            pb::PartitionSnapshot {
                index_times: ix.points.iter().map(|p| p.time).collect(),
                index_offsets: ix.points.iter().map(|p| p.offset).collect(),
                index_max_time: ix.max_time,
                producers: Vec::new(),
                index_bytes: ix.points.iter().map(|p| p.bytes).collect(),
                index_record_times: ix.points.iter().map(|p| p.record_time).collect(),
                appended_bytes: ix.appended,
                index_end: ix.end,
                log_start_offset: ix.log_start,
                ..Default::default()
            }
        };
        snap.producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()).to_proto();
        (snap.epochs, snap.epoch_starts) =
            self.shared.epochs.lock().unwrap_or_else(|p| p.into_inner()).entries().iter().copied().unzip();
        (snap.open_transactions, snap.aborted_transactions) =
            self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner()).to_proto();
        {
            let c = self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner());
            snap.clean_to = c.clean_to;
            snap.tombstones_before = c.tombstones_before;
            snap.cleaning_offsets = c.history.iter().map(|p| p.offset).collect();
            snap.cleaning_times = c.history.iter().map(|p| p.time_ms).collect();
        }
        snap.share_groups = self
            .shared
            .shares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(group, state)| state.to_proto(group))
            .collect();
        self.shared.snapshotted_bytes.store(snap.appended_bytes, Ordering::Relaxed);
        Ok(snap.encode_to_vec().into())
    }

    /// A follower installing a snapshot needs the records from the log start offset on.
    fn retained_from(&self) -> Option<u64> {
        Some(self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).log_start())
    }

    /// The high watermark is the installed snapshot's end.
    fn installed(&mut self, position: u64) {
        self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).raise_end(position);
        self.shared.hw.send_replace(position);
        self.publish_lso(position);
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s = pb::PartitionSnapshot::decode(data).map_err(|e| format!("undecodable partition snapshot: {e}"))?;
        let n = s.index_times.len();
        // Snapshots from before sizes were counted have no `index_bytes`: those points count 0.
        if s.index_offsets.len() != n || !(s.index_bytes.is_empty() || s.index_bytes.len() == n) {
            return Err(format!(
                "partition snapshot has {n} index times, {} offsets and {} sizes",
                s.index_offsets.len(),
                s.index_bytes.len()
            ));
        }
        // Nor, before record timestamps were kept, `index_record_times`: those units are unknown.
        if !(s.index_record_times.is_empty() || s.index_record_times.len() == n) {
            return Err(format!(
                "partition snapshot has {n} index times and {} record times",
                s.index_record_times.len()
            ));
        }
        let bytes = s.index_bytes.iter().copied().chain(std::iter::repeat(0));
        let record_times = s.index_record_times.iter().copied().chain(std::iter::repeat(UNKNOWN_RECORD_TIME));
        let points: Vec<IndexPoint> = s
            .index_offsets
            .iter()
            .zip(&s.index_times)
            .zip(bytes)
            .zip(record_times)
            .map(|(((&offset, &time), bytes), record_time)| IndexPoint { offset, time, bytes, record_time })
            .collect();
        if points.windows(2).any(|w| w[1].offset < w[0].offset || w[1].time < w[0].time || w[1].bytes < w[0].bytes) {
            return Err("partition snapshot index is not sorted".into());
        }
        let end = s.index_end.max(points.last().map_or(0, |p| p.offset));
        let index = SparseIndex {
            points,
            max_time: s.index_max_time,
            appended: s.appended_bytes,
            end,
            log_start: s.log_start_offset,
        };
        let producers = ProducerStates::from_proto(s.producers)?;
        let cleaning = Cleaning::from_parts(s.clean_to, s.tombstones_before, &s.cleaning_offsets, &s.cleaning_times)?;
        let transactions = Transactions::from_proto(s.open_transactions, s.aborted_transactions)?;
        let shares = s
            .share_groups
            .iter()
            .map(|g| Ok((g.group.clone(), SharePartition::from_proto(g)?)))
            .collect::<Result<ShareGroups, String>>()?;
        // Older snapshots have no epochs: the history starts with the next epoch applied.
        if s.epochs.len() != s.epoch_starts.len() {
            return Err(format!(
                "partition snapshot has {} epochs and {} starts",
                s.epochs.len(),
                s.epoch_starts.len()
            ));
        }
        let epochs = LeaderEpochs::from_entries(s.epochs.into_iter().zip(s.epoch_starts).collect())
            .ok_or("partition snapshot's leader epochs are not increasing")?;
        *self.shared.epochs.lock().unwrap_or_else(|p| p.into_inner()) = epochs;
        *self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner()) = cleaning;
        self.shared.snapshotted_bytes.store(index.appended, Ordering::Relaxed);
        *self.shared.index.lock().unwrap_or_else(|p| p.into_inner()) = index;
        *self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()) = producers;
        *self.shared.transactions.lock().unwrap_or_else(|p| p.into_inner()) = transactions;
        *self.shared.shares.lock().unwrap_or_else(|p| p.into_inner()) = shares;
        self.shared.share_changes.send_modify(|n| *n += 1);
        Ok(())
    }
}

/// Decodes the base offset a [`PartitionStateMachine`] answered.
pub fn decode_base_offset(response: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(response.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_the_index_and_producers() {
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        shared.index.lock().unwrap().observe(7_000, 3, 5, 100, 6_000);
        shared.index.lock().unwrap().observe(9_000, 5, 8, 100, 9_500);
        shared.index.lock().unwrap().trim(4);
        shared.producers.lock().unwrap().apply_batch(5, 1, 0, 2, 3, 7_000);
        shared.epochs.lock().unwrap().observe(4, 3);
        shared.epochs.lock().unwrap().observe(6, 5);
        let snap = sm.snapshot().unwrap();
        assert_eq!(shared.snapshotted_bytes.load(Ordering::Relaxed), 200, "the snapshot covers both entries");
        let before = shared.index.lock().unwrap().clone();
        *shared.index.lock().unwrap() = SparseIndex::default();
        *shared.producers.lock().unwrap() = ProducerStates::default();
        let epochs = std::mem::take(&mut *shared.epochs.lock().unwrap());
        sm.restore(&snap).unwrap();
        assert_eq!(*shared.epochs.lock().unwrap(), epochs);
        assert_eq!(epochs.entries(), &[(4, 3), (6, 5)]);
        assert_eq!(*shared.index.lock().unwrap(), before);
        assert_eq!((before.log_start(), before.end(), before.len()), (4, 8, 2));
        assert_eq!(shared.producers.lock().unwrap().get(5).map(|e| e.epoch), Some(1));
        assert!(sm.restore(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn a_snapshot_from_before_sizes_were_counted_restores() {
        let old = pb::PartitionSnapshot {
            index_times: vec![1_000, 2_000],
            index_offsets: vec![0, 10],
            index_max_time: 2_000,
            ..Default::default()
        };
        let shared = SharedState::new();
        shared.state_machine().restore(&old.encode_to_vec()).unwrap();
        let ix = shared.index.lock().unwrap().clone();
        assert_eq!((ix.log_start(), ix.len(), ix.retained_bytes()), (0, 2, 0));
        assert_eq!(ix.scan_start(1_500), 0);
        let unsorted = pb::PartitionSnapshot { index_offsets: vec![10, 0], ..old.clone() };
        assert!(shared.state_machine().restore(&unsorted.encode_to_vec()).is_err());
        let short = pb::PartitionSnapshot { index_bytes: vec![1], ..old.clone() };
        assert!(shared.state_machine().restore(&short.encode_to_vec()).is_err());
        // Without record times, every unit is one a search by record timestamp must read.
        assert_eq!(ix.units_with_record_time(i64::MIN + 1), vec![(0, 10), (10, 10)]);
        let short = pb::PartitionSnapshot { index_record_times: vec![1], ..old };
        assert!(shared.state_machine().restore(&short.encode_to_vec()).is_err());
    }

    #[test]
    fn a_trim_moves_the_start_up_to_the_high_watermark_on_apply() {
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        let log_id = LogId::default();
        let mut batch = rill_records::BatchBuilder::new(rill_records::Compression::None);
        batch.push(rill_records::Record { value: Some(Bytes::from_static(b"v")), ..Default::default() }).unwrap();
        let append = command::encode_append(5, &[batch.build().unwrap()]);
        let payload = |units, body| Payload { units, body, proposal: 0 };
        assert_eq!(decode_base_offset(&sm.apply(&log_id, 0, &payload(3, append.clone()))), Some(0));
        assert_eq!(decode_base_offset(&sm.apply(&log_id, 3, &payload(0, command::encode_trim(2)))), Some(2));
        assert_eq!(decode_base_offset(&sm.apply(&log_id, 3, &payload(0, command::encode_trim(99)))), Some(3));
        assert_eq!(decode_base_offset(&sm.apply(&log_id, 3, &payload(0, command::encode_trim(1)))), Some(3));
        assert_eq!(shared.index.lock().unwrap().log_start(), 3);
        assert_eq!(*shared.hw.borrow(), 3);
    }

    #[test]
    fn share_entries_take_no_offsets_follow_trims_and_survive_a_snapshot() {
        use crate::share::stored::{decode_applied, encode_entry, ShareEntry};
        use crate::share::{Ack, ShareSettings};
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        let log_id = LogId::default();
        let mut batch = rill_records::BatchBuilder::new(rill_records::Compression::None);
        for _ in 0..4 {
            batch.push(rill_records::Record { value: Some(Bytes::from_static(b"v")), ..Default::default() }).unwrap();
        }
        let payload = |units, body| Payload { units, body, proposal: 0 };
        sm.apply(&log_id, 0, &payload(4, command::encode_append(5, &[batch.build().unwrap()])));
        let share = |command| {
            let entry =
                ShareEntry { group: "jobs".into(), settings: ShareSettings::default(), start_if_new: 0, command };
            payload(0, command::encode_share(&encode_entry(&entry).unwrap()))
        };
        let acquired = sm.apply(
            &log_id,
            4,
            &share(ShareCommand::Acquire {
                member: "m".into(),
                acks: vec![],
                skipped: vec![],
                offsets: vec![0, 1, 2],
                now_ms: 1,
            }),
        );
        assert_eq!(decode_applied(&acquired).unwrap().acquired, vec![(0, 1), (1, 1), (2, 1)]);
        assert_eq!(*shared.hw.borrow(), 4, "a share entry takes no offsets");
        let acks = vec![(0, Ack::Accept)];
        sm.apply(&log_id, 4, &share(ShareCommand::Acknowledge { member: "m".into(), acks, now_ms: 2 }));
        assert_eq!(shared.shares.lock().unwrap()["jobs"].start_offset(), 1);

        // Records the log deletes are gone for the group too.
        sm.apply(&log_id, 4, &payload(0, command::encode_trim(2)));
        let state = shared.shares.lock().unwrap()["jobs"].clone();
        assert_eq!((state.start_offset(), state.in_flight().keys().copied().collect::<Vec<_>>()), (2, vec![2]));

        let snap = sm.snapshot().unwrap();
        let restored = SharedState::new();
        restored.state_machine().restore(&snap).unwrap();
        assert_eq!(restored.shares.lock().unwrap()["jobs"], state);
        // A damaged share state refuses the snapshot.
        let mut damaged = pb::PartitionSnapshot::decode(&snap[..]).unwrap();
        damaged.share_groups[0].in_flight[0].delivery_count = 0;
        assert!(SharedState::new().state_machine().restore(&damaged.encode_to_vec()).is_err());
    }

    /// An append entry of one batch per `(producer, epoch, sequence, transactional)`, or of a
    /// marker when `marker` is set, as the leader would propose it.
    fn entry(batches: &[Bytes]) -> Payload {
        let units = batches.iter().map(|b| BatchInfo::parse_stored(b).unwrap().span() as u32).sum();
        Payload { units, body: command::encode_append(1_000, batches), proposal: 0 }
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32, records: usize) -> Bytes {
        let mut b = rill_records::BatchBuilder::new(rill_records::Compression::None)
            .producer(pid, epoch, seq)
            .transactional(true);
        for _ in 0..records {
            b.push(rill_records::Record { value: Some(Bytes::from_static(b"t")), ..Default::default() }).unwrap();
        }
        b.build().unwrap()
    }

    fn marker(pid: i64, epoch: i16, commit: bool, coordinator_epoch: i32) -> Bytes {
        named_marker(pid, epoch, commit, coordinator_epoch, 0)
    }

    /// A log of append entries applied one after another: `at` is the next offset.
    #[derive(Default)]
    struct Appends {
        at: u64,
    }

    impl Appends {
        /// Applies an append entry of `batches` at the next offset.
        fn apply(&mut self, sm: &mut PartitionStateMachine, batches: &[Bytes]) {
            let p = entry(batches);
            sm.apply(&LogId::default(), self.at, &p);
            self.at += u64::from(p.units);
        }
    }

    fn named_marker(pid: i64, epoch: i16, commit: bool, coordinator_epoch: i32, transaction: u64) -> Bytes {
        let kind = if commit { ControlKind::Commit } else { ControlKind::Abort };
        ControlMarker { kind, coordinator_epoch, transaction }.batch(pid, epoch, 1_000).unwrap()
    }

    /// Transactions v2: transaction 4 at epoch 0 commits with a marker at epoch 1, and the
    /// producer's next transaction (6) opens at epoch 1. A copy of transaction 4's marker applied
    /// then — the same producer epoch and coordinator epoch — decides nothing: transaction 6 stays
    /// open (the LSO does not move) and is aborted by its own marker.
    #[test]
    fn a_late_copy_of_a_marker_never_decides_the_producers_next_transaction() {
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        let mut log = Appends::default();
        log.apply(&mut sm, &[txn_batch(1, 0, 0, 2)]);
        log.apply(&mut sm, &[named_marker(1, 1, true, 3, 4)]);
        assert_eq!((*shared.hw.borrow(), *shared.lso.borrow()), (3, 3));
        log.apply(&mut sm, &[txn_batch(1, 1, 0, 1)]);
        assert_eq!(*shared.lso.borrow(), 3, "transaction 6 opens at 3");
        log.apply(&mut sm, &[named_marker(1, 1, true, 3, 4)]);
        assert_eq!(*shared.lso.borrow(), 3, "the copy of 4's commit did not commit transaction 6");
        assert_eq!(shared.transactions.lock().unwrap().open(1).map(|t| t.first_offset), Some(3));
        log.apply(&mut sm, &[named_marker(1, 2, false, 3, 6)]);
        assert_eq!((*shared.hw.borrow(), *shared.lso.borrow()), (6, 6));
        assert_eq!(shared.transactions.lock().unwrap().aborted_len(), 1, "transaction 6 aborted");
    }

    #[test]
    fn transactions_move_the_lso_fill_the_aborted_index_and_survive_a_snapshot() {
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        let log_id = LogId::default();
        let mut log = Appends::default();
        // 0-1: producer 1 (txn); 2-3: producer 2 (txn); 4: producer 1 aborts.
        log.apply(&mut sm, &[txn_batch(1, 0, 0, 2), txn_batch(2, 0, 0, 2)]);
        assert_eq!((*shared.hw.borrow(), *shared.lso.borrow()), (4, 0));
        log.apply(&mut sm, &[marker(1, 0, false, 3)]);
        assert_eq!(*shared.lso.borrow(), 2, "producer 2's transaction is the oldest open");
        // Producer 2 commits (5); a deposed coordinator's marker then decides nothing (6).
        log.apply(&mut sm, &[marker(2, 0, true, 3)]);
        log.apply(&mut sm, &[marker(2, 0, true, 2)]);
        assert_eq!(*shared.lso.borrow(), 7, "nothing is open: the LSO is the high watermark");
        log.apply(&mut sm, &[txn_batch(2, 0, 2, 1)]);
        assert_eq!(*shared.lso.borrow(), 7, "a new transaction of producer 2 opens at 7");
        log.apply(&mut sm, &[marker(2, 0, true, 2)]);
        assert_eq!(*shared.lso.borrow(), 7, "a stale coordinator's marker is ignored");
        assert!(shared.transactions.lock().unwrap().open(2).is_some());
        // Retention cannot pass the open transaction, and expiry keeps its producer.
        sm.apply(&log_id, log.at, &Payload { units: 0, body: command::encode_trim(100), proposal: 0 });
        assert_eq!(shared.index.lock().unwrap().log_start(), 7);
        sm.apply(&log_id, log.at, &Payload { units: 0, body: command::encode_expire_producers(i64::MAX), proposal: 0 });
        assert!(shared.producers.lock().unwrap().get(2).is_some() && shared.producers.lock().unwrap().get(1).is_none());
        let aborted = shared.transactions.lock().unwrap().aborted_len();
        assert_eq!(aborted, 0, "producer 1's aborted transaction ended below the new log start");

        let snap = sm.snapshot().unwrap();
        let restored = SharedState::new();
        let mut other = restored.state_machine();
        other.restore(&snap).unwrap();
        other.installed(log.at);
        assert_eq!(*restored.transactions.lock().unwrap(), *shared.transactions.lock().unwrap());
        assert_eq!(*restored.lso.borrow(), 7);
        assert_eq!(restored.producers.lock().unwrap().get(2).map(|e| e.coordinator_epoch), Some(3));
    }

    #[test]
    fn an_abort_marker_fills_the_aborted_index_in_order() {
        let shared = SharedState::new();
        let mut sm = shared.state_machine();
        let log_id = LogId::default();
        sm.apply(&log_id, 0, &entry(&[txn_batch(5, 0, 0, 3)]));
        sm.apply(&log_id, 3, &entry(&[marker(5, 0, false, 1)]));
        sm.apply(&log_id, 4, &entry(&[txn_batch(5, 0, 3, 1)]));
        sm.apply(&log_id, 5, &entry(&[marker(5, 0, false, 1)]));
        let t = shared.transactions.lock().unwrap().clone();
        let found: Vec<_> = t.aborted_overlapping(0, 6).iter().map(|a| (a.first_offset, a.last_offset)).collect();
        assert_eq!(found, vec![(0, 3), (4, 5)]);
        assert_eq!(*shared.lso.borrow(), 6);
    }
}

//! [`PartitionStateMachine`]: a partition's replicated state.
//!
//! Offsets come from Raft positions and the high watermark is the adapter's applied position.
//! This machine publishes the high watermark (waking long-polling fetches), answers the proposer
//! with the entry's base offset, and keeps a sparse **time index** ([`crate::index`]) so a
//! consumer can start from a point in time without scanning the whole log.
//! Producer state (idempotence) and transaction state will live here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use rill_proto::partition as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

use rill_records::BatchInfo;

use crate::cleaning::Cleaning;
use crate::command;
use crate::index::{IndexPoint, SparseIndex};
use crate::producers::ProducerStates;

/// State a partition's state machine shares with the replica serving requests.
#[derive(Clone)]
pub struct SharedState {
    /// The high watermark, published on every apply.
    pub hw: Arc<watch::Sender<u64>>,
    /// The log start offset and the sparse index by time and size.
    pub index: Arc<Mutex<SparseIndex>>,
    /// Idempotent producers' last batches.
    pub producers: Arc<Mutex<ProducerStates>>,
    /// The cleaning point of a compacted topic (see [`crate::cleaning`]).
    pub cleaning: Arc<Mutex<Cleaning>>,
    /// Bytes of entries the newest snapshot covers (its index's `appended`): how much a restart
    /// re-applies is the index's `appended` minus this.
    pub snapshotted_bytes: Arc<AtomicU64>,
}

impl SharedState {
    /// Fresh shared state (high watermark 0, empty index, no producers).
    pub fn new() -> Self {
        Self {
            hw: Arc::new(watch::channel(0).0),
            index: Arc::default(),
            producers: Arc::default(),
            cleaning: Arc::default(),
            snapshotted_bytes: Arc::default(),
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
    /// Remembers the idempotent batches of an append entry starting at offset `base`.
    fn record_producers(&self, log_id: &LogId, base: u64, append_ms: i64, body: &Bytes) {
        let batches = match command::decode_append(body.clone()) {
            Ok(b) => b,
            Err(e) => {
                // The leader validated the entry; every replica sees the same bytes and skips alike.
                tracing::error!(index = log_id.index, error = %e, "undecodable partition entry");
                return;
            }
        };
        let mut producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner());
        let mut offset = base;
        for bytes in batches {
            let b = match BatchInfo::parse_stored(&bytes) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(index = log_id.index, error = %e, "undecodable batch in a partition entry");
                    return;
                }
            };
            // A batch occupies its span of offsets and sequence numbers whatever compaction
            // removed from it, so a replica applying a compacted entry remembers what the
            // leader remembered from the original.
            let span = b.span();
            // Control batches (transaction markers) advance no producer's sequence.
            if b.has_producer() && !b.is_control() {
                let count = u32::try_from(span).unwrap_or(u32::MAX);
                producers.apply_batch(b.producer_id, b.producer_epoch, b.base_sequence, count, offset, append_ms);
            }
            offset += span;
        }
    }
}

impl GroupStateMachine for PartitionStateMachine {
    fn apply(&mut self, log_id: &LogId, base: u64, payload: &Payload) -> Bytes {
        let end = base + u64::from(payload.units);
        let mut answer = base;
        if let Some(t) = command::append_time(&payload.body) {
            let bytes = payload.body.len() as u64;
            self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).observe(t, base, end, bytes);
            self.record_producers(log_id, base, t, &payload.body);
        } else if let Some(older_than) = command::expire_producers(&payload.body) {
            let gone = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()).expire(older_than);
            tracing::debug!(index = log_id.index, gone, "expired idle producers");
        } else if let Some(before) = command::trim(&payload.body) {
            // `base` is the high watermark here: nothing above it can be deleted.
            answer = self.shared.index.lock().unwrap_or_else(|p| p.into_inner()).trim(before.min(base));
            tracing::debug!(index = log_id.index, log_start = answer, "log start offset moved");
        } else if let Some(c) = command::compact(&payload.body) {
            // `base` is the high watermark here: nothing above it is compacted.
            answer = self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner()).apply(&c, base);
            tracing::debug!(index = log_id.index, clean_to = answer, "cleaning point moved");
        }
        if payload.units > 0 {
            self.shared.hw.send_replace(end);
        }
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
                appended_bytes: ix.appended,
                index_end: ix.end,
                log_start_offset: ix.log_start,
                ..Default::default()
            }
        };
        snap.producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()).to_proto();
        {
            let c = self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner());
            snap.clean_to = c.clean_to;
            snap.tombstones_before = c.tombstones_before;
            snap.cleaning_offsets = c.history.iter().map(|p| p.offset).collect();
            snap.cleaning_times = c.history.iter().map(|p| p.time_ms).collect();
        }
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
        let bytes = s.index_bytes.iter().copied().chain(std::iter::repeat(0));
        let points: Vec<IndexPoint> = s
            .index_offsets
            .iter()
            .zip(&s.index_times)
            .zip(bytes)
            .map(|((&offset, &time), bytes)| IndexPoint { offset, time, bytes })
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
        *self.shared.cleaning.lock().unwrap_or_else(|p| p.into_inner()) = cleaning;
        self.shared.snapshotted_bytes.store(index.appended, Ordering::Relaxed);
        *self.shared.index.lock().unwrap_or_else(|p| p.into_inner()) = index;
        *self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()) = producers;
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
        shared.index.lock().unwrap().observe(7_000, 3, 5, 100);
        shared.index.lock().unwrap().observe(9_000, 5, 8, 100);
        shared.index.lock().unwrap().trim(4);
        shared.producers.lock().unwrap().apply_batch(5, 1, 0, 2, 3, 7_000);
        let snap = sm.snapshot().unwrap();
        assert_eq!(shared.snapshotted_bytes.load(Ordering::Relaxed), 200, "the snapshot covers both entries");
        let before = shared.index.lock().unwrap().clone();
        *shared.index.lock().unwrap() = SparseIndex::default();
        *shared.producers.lock().unwrap() = ProducerStates::default();
        sm.restore(&snap).unwrap();
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
        let short = pb::PartitionSnapshot { index_bytes: vec![1], ..old };
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
}

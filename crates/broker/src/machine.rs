//! [`PartitionStateMachine`]: a partition's replicated state.
//!
//! Offsets come from Raft positions and the high watermark is the adapter's applied position.
//! This machine publishes the high watermark (waking long-polling fetches), answers the proposer
//! with the entry's base offset, and keeps a sparse **time index** ([`crate::index`]) so a
//! consumer can start from a point in time without scanning the whole log.
//! Producer state (idempotence) and transaction state will live here.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use rill_proto::partition as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

use rill_records::BatchInfo;

use crate::command;
use crate::index::TimeIndex;
use crate::producers::ProducerStates;

/// State a partition's state machine shares with the replica serving requests.
#[derive(Clone)]
pub struct SharedState {
    /// The high watermark, published on every apply.
    pub hw: Arc<watch::Sender<u64>>,
    /// The time index.
    pub times: Arc<Mutex<TimeIndex>>,
    /// Idempotent producers' last batches.
    pub producers: Arc<Mutex<ProducerStates>>,
}

impl SharedState {
    /// Fresh shared state (high watermark 0, empty index, no producers).
    pub fn new() -> Self {
        Self { hw: Arc::new(watch::channel(0).0), times: Arc::default(), producers: Arc::default() }
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
            let count = u32::try_from(b.record_count).unwrap_or(0);
            // Control batches (transaction markers) advance no producer's sequence.
            if b.has_producer() && !b.is_control() {
                producers.apply_batch(b.producer_id, b.producer_epoch, b.base_sequence, count, offset, append_ms);
            }
            offset += u64::from(count);
        }
    }
}

impl GroupStateMachine for PartitionStateMachine {
    fn apply(&mut self, log_id: &LogId, base: u64, payload: &Payload) -> Bytes {
        if let Some(t) = command::append_time(&payload.body) {
            self.shared.times.lock().unwrap_or_else(|p| p.into_inner()).observe(t, base);
            self.record_producers(log_id, base, t, &payload.body);
        } else if let Some(older_than) = command::expire_producers(&payload.body) {
            let gone = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()).expire(older_than);
            tracing::debug!(index = log_id.index, gone, "expired idle producers");
        }
        if payload.units > 0 {
            self.shared.hw.send_replace(base + u64::from(payload.units));
        }
        Bytes::copy_from_slice(&base.to_le_bytes())
    }

    /// The snapshot: the time index and the producer state, as `PartitionSnapshot`
    /// (`proto/rill/partition.proto`).
    fn snapshot(&self) -> Result<Bytes, String> {
        let (index_times, index_offsets, index_max_time) = {
            let times = self.shared.times.lock().unwrap_or_else(|p| p.into_inner());
            (
                times.points.iter().map(|(t, _)| *t).collect(),
                times.points.iter().map(|(_, o)| *o).collect(),
                times.max_time,
            )
        };
        let producers = self.shared.producers.lock().unwrap_or_else(|p| p.into_inner()).to_proto();
        Ok(pb::PartitionSnapshot { index_times, index_offsets, index_max_time, producers }.encode_to_vec().into())
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s = pb::PartitionSnapshot::decode(data).map_err(|e| format!("undecodable partition snapshot: {e}"))?;
        if s.index_times.len() != s.index_offsets.len() {
            return Err(format!(
                "partition snapshot has {} index times but {} offsets",
                s.index_times.len(),
                s.index_offsets.len()
            ));
        }
        let points = s.index_times.into_iter().zip(s.index_offsets).collect();
        let producers = ProducerStates::from_proto(s.producers)?;
        *self.shared.times.lock().unwrap_or_else(|p| p.into_inner()) = TimeIndex { points, max_time: s.index_max_time };
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
        shared.times.lock().unwrap().observe(7_000, 3);
        shared.producers.lock().unwrap().apply_batch(5, 1, 0, 2, 3, 7_000);
        let snap = sm.snapshot().unwrap();
        *shared.times.lock().unwrap() = TimeIndex::default();
        *shared.producers.lock().unwrap() = ProducerStates::default();
        sm.restore(&snap).unwrap();
        assert_eq!(shared.times.lock().unwrap().points, vec![(7_000, 3)]);
        assert_eq!(shared.producers.lock().unwrap().get(5).map(|e| e.epoch), Some(1));
        assert!(sm.restore(&[0xff, 0xff]).is_err());
    }
}

//! [`PartitionStateMachine`]: a partition's replicated state.
//!
//! Offsets come from Raft positions and the high watermark is the adapter's applied position,
//! so all this machine does today is publish the high watermark (waking long-polling fetches)
//! and answer the proposer with the entry's base offset. Producer state (idempotence) and
//! transaction state will live here.

use std::sync::Arc;

use bytes::Bytes;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

const SNAPSHOT_VERSION: u8 = 1;

/// A partition's state machine.
pub struct PartitionStateMachine {
    hw: Arc<watch::Sender<u64>>,
}

impl PartitionStateMachine {
    /// A state machine publishing the high watermark on `hw`.
    pub fn new(hw: Arc<watch::Sender<u64>>) -> Self {
        Self { hw }
    }
}

impl GroupStateMachine for PartitionStateMachine {
    fn apply(&mut self, _log_id: &LogId, base: u64, payload: &Payload) -> Bytes {
        self.hw.send_replace(base + u64::from(payload.units));
        Bytes::copy_from_slice(&base.to_le_bytes())
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        Ok(Bytes::from_static(&[SNAPSHOT_VERSION]))
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        match data.first() {
            Some(&SNAPSHOT_VERSION) => Ok(()),
            other => Err(format!("unknown partition snapshot version {other:?}")),
        }
    }
}

/// Decodes the base offset a [`PartitionStateMachine`] answered.
pub fn decode_base_offset(response: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(response.get(..8)?.try_into().ok()?))
}

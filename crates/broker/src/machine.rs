//! [`PartitionStateMachine`]: a partition's replicated state.
//!
//! Offsets come from Raft positions and the high watermark is the adapter's applied position.
//! This machine publishes the high watermark (waking long-polling fetches), answers the proposer
//! with the entry's base offset, and keeps a sparse **time index** — one point per second of
//! append time — so a consumer can start from a point in time without scanning the whole log.
//! Producer state (idempotence) and transaction state will live here.

use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

use crate::command;

const SNAPSHOT_VERSION: u8 = 2;
/// One time-index point per this much append time.
pub const TIME_INDEX_INTERVAL_MS: i64 = 1000;

/// Sparse map from append time to offset: `(t, o)` means the entry starting at offset `o` is the
/// first whose append time reached `t` (times are the running maximum, so the list is sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    points: Vec<(i64, u64)>,
    max_time: i64,
}

impl TimeIndex {
    fn observe(&mut self, time: i64, base: u64) {
        if time <= self.max_time && !self.points.is_empty() {
            return;
        }
        if self.points.last().is_none_or(|(t, _)| time >= t + TIME_INDEX_INTERVAL_MS) {
            self.points.push((time, base));
        }
        self.max_time = self.max_time.max(time);
    }

    /// An offset at or before the first entry appended at or after `time`: where a scan for
    /// that entry may start.
    pub fn scan_start(&self, time: i64) -> u64 {
        let i = self.points.partition_point(|(t, _)| *t < time);
        match i {
            0 => 0,
            i => self.points[i - 1].1,
        }
    }

    /// Number of index points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// State a partition's state machine shares with the replica serving requests.
#[derive(Clone)]
pub struct SharedState {
    /// The high watermark, published on every apply.
    pub hw: Arc<watch::Sender<u64>>,
    /// The time index.
    pub times: Arc<Mutex<TimeIndex>>,
}

impl SharedState {
    /// Fresh shared state (high watermark 0, empty index).
    pub fn new() -> Self {
        Self { hw: Arc::new(watch::channel(0).0), times: Arc::default() }
    }

    /// A state machine writing into this shared state.
    pub fn state_machine(&self) -> PartitionStateMachine {
        PartitionStateMachine::new(self.hw.clone(), self.times.clone())
    }
}

impl Default for SharedState {
    fn default() -> Self {
        Self::new()
    }
}

/// A partition's state machine.
pub struct PartitionStateMachine {
    hw: Arc<watch::Sender<u64>>,
    times: Arc<Mutex<TimeIndex>>,
}

impl PartitionStateMachine {
    /// A state machine publishing the high watermark on `hw` and its time index in `times`.
    pub fn new(hw: Arc<watch::Sender<u64>>, times: Arc<Mutex<TimeIndex>>) -> Self {
        Self { hw, times }
    }
}

impl GroupStateMachine for PartitionStateMachine {
    fn apply(&mut self, _log_id: &LogId, base: u64, payload: &Payload) -> Bytes {
        if let Some(t) = command::append_time(&payload.body) {
            self.times.lock().unwrap_or_else(|p| p.into_inner()).observe(t, base);
        }
        self.hw.send_replace(base + u64::from(payload.units));
        Bytes::copy_from_slice(&base.to_le_bytes())
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        let times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = BytesMut::with_capacity(1 + 12 + times.points.len() * 16);
        out.put_u8(SNAPSHOT_VERSION);
        out.put_i64_le(times.max_time);
        out.put_u32_le(times.points.len() as u32);
        for (t, o) in &times.points {
            out.put_i64_le(*t);
            out.put_u64_le(*o);
        }
        Ok(out.freeze())
    }

    fn restore(&mut self, mut data: &[u8]) -> Result<(), String> {
        match data.first() {
            Some(&SNAPSHOT_VERSION) => {}
            other => return Err(format!("unknown partition snapshot version {other:?}")),
        }
        data.advance(1);
        if data.len() < 12 {
            return Err("partition snapshot truncated".into());
        }
        let max_time = data.get_i64_le();
        let n = data.get_u32_le() as usize;
        if data.len() < n * 16 {
            return Err("partition snapshot time index truncated".into());
        }
        let points = (0..n).map(|_| (data.get_i64_le(), data.get_u64_le())).collect();
        *self.times.lock().unwrap_or_else(|p| p.into_inner()) = TimeIndex { points, max_time };
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
    fn time_index_is_sparse_sorted_and_conservative() {
        let mut ix = TimeIndex::default();
        for (t, o) in [(1_000, 0), (1_500, 10), (2_100, 20), (1_900, 30), (5_000, 40)] {
            ix.observe(t, o);
        }
        assert_eq!(ix.points, vec![(1_000, 0), (2_100, 20), (5_000, 40)]);
        assert_eq!(ix.scan_start(500), 0);
        assert_eq!(ix.scan_start(1_800), 0, "the entry at 10 (t=1500) precedes; start at or before it");
        assert_eq!(ix.scan_start(2_100), 0);
        assert_eq!(ix.scan_start(2_101), 20);
        assert_eq!(ix.scan_start(9_999), 40);
    }

    #[test]
    fn snapshot_round_trips_the_index() {
        let (hw, _) = watch::channel(0);
        let times = Arc::new(Mutex::new(TimeIndex::default()));
        let mut sm = PartitionStateMachine::new(Arc::new(hw), times.clone());
        times.lock().unwrap().observe(7_000, 3);
        let snap = sm.snapshot().unwrap();
        *times.lock().unwrap() = TimeIndex::default();
        sm.restore(&snap).unwrap();
        assert_eq!(times.lock().unwrap().points, vec![(7_000, 3)]);
        assert!(sm.restore(&[1]).is_err());
    }
}

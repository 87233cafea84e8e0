//! The read path of a [`Partition`]: fetch, the long poll, and the offsets `ListOffsets` asks
//! for (by time, earliest, latest).

use bytes::Bytes;
use rill_records::BatchInfo;
use rill_rt::Instant;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::partition::Partition;

/// Log entries read per storage scan while serving a fetch.
const FETCH_SCAN_ENTRIES: usize = 32;

/// A stored record batch, as a fetch returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// Offset of its first record.
    pub base_offset: u64,
    /// The batch, exactly as produced (Kafka's format).
    pub data: Bytes,
    /// When the leader appended it.
    pub append_time_ms: i64,
}

/// A fetch answer.
#[derive(Debug, Clone, Default)]
pub struct FetchOutcome {
    /// Batches, the first possibly starting before the requested offset.
    pub batches: Vec<StoredBatch>,
    /// High watermark when the answer was built.
    pub high_watermark: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
}

impl Partition {
    /// The end of what fetches may serve: the high watermark.
    fn visible_end(&self) -> u64 {
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::ReadAboveHw) {
            // Deliberate bug (simulation only): treat the whole log as committed.
            return self.log.end_position().max(self.high_watermark());
        }
        self.high_watermark()
    }

    /// Reads committed batches from `offset`, up to about `max_bytes` (at least one batch when
    /// any is committed there). Does not wait: the long poll is the caller's (see
    /// [`Partition::wait_for_data`]).
    pub fn fetch(&self, offset: i64, max_bytes: usize) -> Result<FetchOutcome> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let start = self.log_start_offset();
        let end = self.log.end_position();
        let Ok(offset) = u64::try_from(offset) else {
            return Err(PartitionError::OffsetOutOfRange { offset, start, end });
        };
        if offset < start || offset > end.max(self.high_watermark()) {
            return Err(PartitionError::OffsetOutOfRange { offset: offset as i64, start, end });
        }
        let hw = self.visible_end();
        let mut out = FetchOutcome { batches: Vec::new(), high_watermark: hw, log_start_offset: start };
        if offset >= hw {
            return Ok(out);
        }
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let Some(mut index) = self.log.index_of_position(offset).map_err(storage)? else {
            return Ok(out);
        };
        let mut bytes = 0usize;
        'scan: loop {
            let entries = self.log.read_positioned(index, u64::MAX, FETCH_SCAN_ENTRIES).map_err(storage)?;
            if entries.is_empty() {
                break;
            }
            for e in &entries {
                index = e.index + 1;
                // Positions are assigned at append; only entries below the HW are committed.
                if e.base >= hw {
                    break 'scan;
                }
                let Some(append_time_ms) = command::append_time(&e.body) else { continue };
                let batches = command::decode_append(e.body.clone()).map_err(PartitionError::Storage)?;
                let mut base = e.base;
                for data in batches {
                    let info = BatchInfo::parse_stored(&data)
                        .map_err(|err| PartitionError::Storage(format!("stored batch at offset {base}: {err}")))?;
                    // A compacted batch keeps its span of offsets with fewer records (or none:
                    // the consumer still moves past it, so it never asks for the same offset again).
                    let count = info.span();
                    if base + count > offset {
                        bytes += data.len();
                        out.batches.push(StoredBatch { base_offset: base, data, append_time_ms });
                    }
                    base += count;
                }
                if bytes >= max_bytes && !out.batches.is_empty() {
                    break 'scan;
                }
            }
        }
        Ok(out)
    }

    /// Waits until the high watermark passes `offset` (data at `offset` is committed), or until
    /// `deadline`. Returns whether it did.
    pub async fn wait_for_data(&self, offset: u64, deadline: Instant) -> bool {
        let mut hw = self.hw.clone();
        loop {
            if *hw.borrow_and_update() > offset {
                return true;
            }
            match rill_rt::timeout_at(deadline, hw.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return *hw.borrow() > offset,
            }
        }
    }

    /// The first offset whose entry the leader appended at or after `time_ms` (ms since the
    /// epoch), or the high watermark when there is none. Starts from the sparse time index and
    /// scans at most about one index interval of entries.
    pub fn offset_for_time(&self, time_ms: i64) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let hw = self.high_watermark();
        let log_start = self.log_start_offset();
        let start = self.index.lock().unwrap_or_else(|p| p.into_inner()).scan_start(time_ms).max(log_start);
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let Some(mut index) = self.log.index_of_position(start).map_err(storage)? else { return Ok(hw) };
        loop {
            let entries = self.log.read_positioned(index, u64::MAX, FETCH_SCAN_ENTRIES).map_err(storage)?;
            if entries.is_empty() {
                return Ok(hw);
            }
            for e in entries {
                if e.base >= hw {
                    return Ok(hw);
                }
                if command::append_time(&e.body).is_some_and(|t| t >= time_ms) {
                    // The entry the log start falls in begins below it.
                    return Ok(e.base.max(log_start));
                }
                index = e.index + 1;
            }
        }
    }

    /// The first offset not deleted (by retention or `DeleteRecords`).
    pub fn earliest_offset(&self) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        Ok(self.log_start_offset())
    }

    /// The high watermark (the offset the next committed record will get).
    pub fn latest_offset(&self) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        Ok(self.high_watermark())
    }
}

//! The read path of a [`Partition`]: fetch, the long poll, and the offsets `ListOffsets` asks
//! for (by append time, by record timestamp, the largest timestamp, earliest, latest), at either
//! isolation level, and where a leader epoch ended (`OffsetForLeaderEpoch`).
//!
//! `read_uncommitted` reads up to the high watermark. `read_committed` reads up to the last
//! stable offset (see [`crate::transactions`]) and its answer carries the aborted transactions
//! that overlap it. Leaving the aborted batches out is [`FetchOutcome::leave_out_aborted`]'s job
//! and the caller's choice: Rill's gRPC API does it on the server, so that every client built
//! from `proto/` reads committed data without keeping an aborted-transaction index of its own
//! (where Kafka clients have had their bugs); Kafka's protocol hands the list to the client,
//! which filters. Either way a fetch reports `next_offset`, the offset after everything it
//! looked at, so a consumer moves past a range that held only aborted records and markers.

use bytes::Bytes;
use rill_records::{BatchInfo, MAX_DECOMPRESSED_BATCH_BYTES};
use rill_rt::Instant;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::partition::Partition;
use crate::transactions::{AbortedFilter, AbortedTransaction};

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
    /// The Raft term it was appended in: Kafka's partition leader epoch of the batch.
    pub leader_epoch: u64,
}

/// A record found by its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampedOffset {
    /// Its offset.
    pub offset: u64,
    /// Its timestamp (ms since the epoch, as its producer set it).
    pub timestamp_ms: i64,
}

/// The records of the stored batch `data` (its first offset `base`) at or above offset `from`,
/// with their timestamps, in offset order.
fn records_from(base: u64, data: &Bytes, from: u64) -> Result<Vec<TimestampedOffset>> {
    let decoded = rill_records::decode(data, MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(|err| PartitionError::Storage(format!("stored batch at offset {base}: {err}")))?;
    Ok(decoded
        .records
        .iter()
        .map(|r| TimestampedOffset { offset: base + r.offset_delta as u64, timestamp_ms: r.timestamp_ms })
        .filter(|r| r.offset >= from)
        .collect())
}

/// Which records a read may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Up to the last stable offset: only decided transactions (Rill's default).
    #[default]
    ReadCommitted,
    /// Up to the high watermark, open and aborted transactions included.
    ReadUncommitted,
}

/// A fetch answer.
#[derive(Debug, Clone, Default)]
pub struct FetchOutcome {
    /// Batches, the first possibly starting before the requested offset.
    pub batches: Vec<StoredBatch>,
    /// High watermark when the answer was built.
    pub high_watermark: u64,
    /// Last stable offset when the answer was built.
    pub last_stable_offset: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// The offset after the last batch the fetch looked at (the requested offset when it found
    /// none): where the consumer goes next, even when every batch was left out.
    pub next_offset: u64,
    /// `read_committed`: the aborted transactions overlapping the batches returned.
    pub aborted: Vec<AbortedTransaction>,
}

impl FetchOutcome {
    /// Leaves out what a `read_committed` reader must not see: batches of aborted transactions
    /// ([`Self::aborted`]) and control batches (markers). `next_offset` is unchanged, so the
    /// reader still moves past them.
    pub fn leave_out_aborted(&mut self) {
        let filter = AbortedFilter::new(&self.aborted);
        self.batches.retain(|b| match BatchInfo::parse_stored(&b.data) {
            Ok(info) if info.is_control() => false,
            Ok(info) if info.is_transactional() => !filter.is_aborted(info.producer_id, b.base_offset),
            // Stored batches were validated on the way in; one that cannot be read is passed on
            // for the reader to report, never dropped in silence.
            _ => true,
        });
        self.aborted.clear();
    }
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

    /// The end of what a read at `isolation` may see here (the high watermark, or the last
    /// stable offset for `read_committed`), whether or not this replica leads.
    pub fn readable_end(&self, isolation: Isolation) -> u64 {
        let hw = self.visible_end();
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::ReadAboveHw) {
            // Deliberate bug (simulation only): the whole log, whatever the isolation level.
            return hw;
        }
        match isolation {
            Isolation::ReadUncommitted => hw,
            Isolation::ReadCommitted => self.last_stable_offset().min(hw),
        }
    }

    /// The last stable offset as this replica has applied it.
    pub fn last_stable_offset(&self) -> u64 {
        *self.lso.borrow()
    }

    /// Reads committed batches from `offset`, up to about `max_bytes` (at least one batch when
    /// any is readable there) and below the end `isolation` allows. Does not wait: the long
    /// poll is the caller's (see [`Partition::wait_for_data`]).
    pub fn fetch(&self, offset: i64, max_bytes: usize, isolation: Isolation) -> Result<FetchOutcome> {
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
        let upper = self.readable_end(isolation);
        let mut out = FetchOutcome {
            high_watermark: hw,
            last_stable_offset: self.last_stable_offset().min(hw),
            log_start_offset: start,
            next_offset: offset,
            ..FetchOutcome::default()
        };
        if offset >= upper {
            return Ok(out);
        }
        // The aborted transactions are read before the log: a trim applied during the scan
        // may prune index entries whose batches the scan still returns.
        let aborted = match isolation {
            Isolation::ReadCommitted => {
                self.transactions.lock().unwrap_or_else(|p| p.into_inner()).aborted_overlapping(offset, upper)
            }
            Isolation::ReadUncommitted => Vec::new(),
        };
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
                if e.base >= upper {
                    break 'scan;
                }
                let Some(append_time_ms) = command::append_time(&e.body) else { continue };
                let batches = command::decode_append(e.body.clone()).map_err(PartitionError::Storage)?;
                let mut base = e.base;
                for data in batches {
                    // The last stable offset is a batch boundary: an entry may hold batches on
                    // both sides of it.
                    if base >= upper {
                        break 'scan;
                    }
                    let info = BatchInfo::parse_stored(&data)
                        .map_err(|err| PartitionError::Storage(format!("stored batch at offset {base}: {err}")))?;
                    // A compacted batch keeps its span of offsets with fewer records (or none:
                    // the consumer still moves past it, so it never asks for the same offset again).
                    let count = info.span();
                    if base + count > offset {
                        bytes += data.len();
                        out.batches.push(StoredBatch { base_offset: base, data, append_time_ms, leader_epoch: e.term });
                        out.next_offset = base + count;
                    }
                    base += count;
                }
                if bytes >= max_bytes && !out.batches.is_empty() {
                    break 'scan;
                }
            }
        }
        if let Some(first) = out.batches.first() {
            let (from, to) = (first.base_offset, out.next_offset);
            out.aborted = aborted.into_iter().filter(|a| a.last_offset >= from && a.first_offset < to).collect();
        }
        Ok(out)
    }

    /// Waits until what a read at `isolation` may see passes `offset` (the high watermark, or
    /// the last stable offset for `read_committed`), or until `deadline`. Returns whether it did.
    pub async fn wait_for_data(&self, offset: u64, deadline: Instant, isolation: Isolation) -> bool {
        let mut hw = match isolation {
            Isolation::ReadCommitted => self.lso.clone(),
            Isolation::ReadUncommitted => self.hw.clone(),
        };
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
    /// epoch), or the end `isolation` allows when there is none below it. Starts from the sparse
    /// time index and scans at most about one index interval of entries.
    pub fn offset_for_time(&self, time_ms: i64, isolation: Isolation) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let hw = match isolation {
            Isolation::ReadCommitted => self.last_stable_offset().min(self.high_watermark()),
            Isolation::ReadUncommitted => self.high_watermark(),
        };
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

    /// Kafka's `ListOffsets` by timestamp: the first record, in offset order, whose own
    /// timestamp (the producer's) is at or after `time_ms`, among those `isolation` may read;
    /// `None` when there is none. Control records (transaction markers) are not records a
    /// consumer reads and are never answered; records of aborted transactions are, as in Kafka.
    /// Reads only the index units whose largest record timestamp reaches `time_ms`, and in them
    /// only the batches whose `maxTimestamp` does.
    pub fn offset_for_record_time(&self, time_ms: i64, isolation: Isolation) -> Result<Option<TimestampedOffset>> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let end = self.readable_end(isolation);
        let log_start = self.log_start_offset();
        let units = self.index.lock().unwrap_or_else(|p| p.into_inner()).units_with_record_time(time_ms);
        for (from, to) in units {
            if from >= end {
                break;
            }
            let mut found = None;
            self.scan_batches(from.max(log_start), to.min(end), |base, info, data| {
                if info.max_timestamp < time_ms {
                    return Ok(false);
                }
                found = records_from(base, data, log_start)?.into_iter().find(|r| r.timestamp_ms >= time_ms);
                Ok(found.is_some())
            })?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Kafka's `ListOffsets` `MAX_TIMESTAMP` (-3): the first record with the largest timestamp
    /// of the partition's committed records; `None` when there are none, or when that record
    /// lies beyond what `isolation` may read (as Kafka answers). Control records are left out.
    pub fn offset_of_max_record_time(&self, isolation: Isolation) -> Result<Option<TimestampedOffset>> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let end = self.readable_end(isolation);
        let log_start = self.log_start_offset();
        let units = self.index.lock().unwrap_or_else(|p| p.into_inner()).units_by_record_time();
        let mut best: Option<TimestampedOffset> = None;
        for ((from, to), unit_max) in units {
            // Units come largest first: one below the best found cannot hold a larger record
            // (an equal one may hold an earlier record with the same timestamp).
            if best.is_some_and(|b| b.timestamp_ms > unit_max) {
                break;
            }
            self.scan_batches(from.max(log_start), to, |base, info, data| {
                let floor = best.map_or(i64::MIN, |b| b.timestamp_ms);
                if info.max_timestamp < floor || (info.max_timestamp == floor && best.is_some_and(|b| b.offset < base))
                {
                    return Ok(false);
                }
                // The first record with the batch's largest timestamp above the log start: the
                // header's maxTimestamp may belong to a record below it (or one compaction removed).
                let records = records_from(base, data, log_start)?;
                let largest = records.iter().map(|r| r.timestamp_ms).max();
                if let Some(found) = largest.and_then(|max| records.into_iter().find(|r| r.timestamp_ms == max)) {
                    let better = match best {
                        None => true,
                        Some(b) => {
                            (found.timestamp_ms, std::cmp::Reverse(found.offset))
                                > (b.timestamp_ms, std::cmp::Reverse(b.offset))
                        }
                    };
                    if better {
                        best = Some(found);
                    }
                }
                Ok(false)
            })?;
        }
        Ok(best.filter(|b| b.offset < end))
    }

    /// Calls `visit` with each stored batch holding offsets in `from..to` (its first offset, its
    /// header and its bytes), in log order, until `visit` answers true.
    fn scan_batches(
        &self,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &BatchInfo, &Bytes) -> Result<bool>,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let Some(mut index) = self.log.index_of_position(from).map_err(storage)? else { return Ok(()) };
        loop {
            let entries = self.log.read_positioned(index, u64::MAX, FETCH_SCAN_ENTRIES).map_err(storage)?;
            if entries.is_empty() {
                return Ok(());
            }
            for e in entries {
                index = e.index + 1;
                if e.base >= to {
                    return Ok(());
                }
                if command::append_time(&e.body).is_none() {
                    continue;
                }
                let mut base = e.base;
                for data in command::decode_append(e.body.clone()).map_err(PartitionError::Storage)? {
                    if base >= to {
                        return Ok(());
                    }
                    let info = BatchInfo::parse_stored(&data)
                        .map_err(|err| PartitionError::Storage(format!("stored batch at offset {base}: {err}")))?;
                    let span = info.span();
                    if base + span > from && !info.is_control() && visit(base, &info, &data)? {
                        return Ok(());
                    }
                    base += span;
                }
            }
        }
    }

    /// `OffsetForLeaderEpoch`: the largest epoch at or below `epoch` that holds records, and
    /// the offset where it ended (the high watermark for the leader's own epoch or the last one
    /// holding records); `None` for an epoch newer than the leader's (see
    /// [`crate::epochs::LeaderEpochs::end_of`]). Leader only.
    pub fn end_of_epoch(&self, epoch: u64) -> Result<Option<(u64, u64)>> {
        let Some(current) = self.leader_term() else { return Err(self.not_leader()) };
        let end = self.high_watermark();
        Ok(self.epochs.lock().unwrap_or_else(|p| p.into_inner()).end_of(epoch, current, end))
    }

    /// The leader epoch the record at `offset` was appended in, as far as the partition keeps
    /// its epochs ([`crate::epochs::LeaderEpochs::epoch_at`]).
    pub fn epoch_at(&self, offset: u64) -> Option<u64> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner()).epoch_at(offset)
    }

    /// The first offset not deleted (by retention or `DeleteRecords`).
    pub fn earliest_offset(&self) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        Ok(self.log_start_offset())
    }

    /// The end a read at `isolation` may see: the high watermark (the offset the next committed
    /// record will get), or the last stable offset for `read_committed`.
    pub fn latest_offset(&self, isolation: Isolation) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        Ok(self.readable_end(isolation))
    }
}

#[cfg(test)]
mod tests {
    use rill_records::{BatchBuilder, Compression, ControlKind, ControlMarker, Record};

    use super::*;

    fn stored(base_offset: u64, data: Bytes) -> StoredBatch {
        StoredBatch { base_offset, data, append_time_ms: 0, leader_epoch: 1 }
    }

    fn batch(producer: Option<(i64, bool)>) -> Bytes {
        let mut b = BatchBuilder::new(Compression::None);
        if let Some((pid, transactional)) = producer {
            b = b.producer(pid, 0, 0).transactional(transactional);
        }
        b.push(Record { value: Some(Bytes::from_static(b"v")), ..Record::default() }).unwrap();
        b.build().unwrap()
    }

    #[test]
    fn read_committed_leaves_out_aborted_batches_and_markers_but_not_the_rest() {
        let abort =
            ControlMarker { kind: ControlKind::Abort, coordinator_epoch: 1, transaction: 0 }.batch(1, 0, 0).unwrap();
        let commit =
            ControlMarker { kind: ControlKind::Commit, coordinator_epoch: 1, transaction: 0 }.batch(2, 0, 0).unwrap();
        let mut out = FetchOutcome {
            batches: vec![
                stored(0, batch(Some((1, true)))),  // aborted below
                stored(1, batch(Some((2, true)))),  // committed
                stored(2, batch(None)),             // plain
                stored(3, batch(Some((3, false)))), // idempotent, not transactional
                stored(4, abort),
                stored(5, commit),
                stored(6, batch(Some((1, true)))), // producer 1's next transaction: not aborted
            ],
            next_offset: 7,
            aborted: vec![AbortedTransaction { producer_id: 1, first_offset: 0, last_offset: 4 }],
            ..FetchOutcome::default()
        };
        out.leave_out_aborted();
        let kept: Vec<u64> = out.batches.iter().map(|b| b.base_offset).collect();
        assert_eq!(kept, vec![1, 2, 3, 6]);
        assert_eq!(out.next_offset, 7, "the reader still moves past what was left out");
        assert!(out.aborted.is_empty());
    }
}

//! Moving a [`Partition`]'s log start offset: `DeleteRecords` and retention.
//!
//! Both propose a trim entry (`command::encode_trim`) with the offset the leader chose; the state
//! machine moves the log start there when the entry is applied, clamped to the high watermark at
//! that point of the log, and never back. Records below the log start are never served again
//! (a fetch there is `OFFSET_OUT_OF_RANGE`). Retention chooses whole index units
//! ([`crate::index`]) from the leader's clock and the topic's `retention.ms` and
//! `retention.bytes`; the state machine reads no clock.

use rill_meta::TopicConfig;
use rill_raft::Payload;
use rill_rt::Instant;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::fetch::Isolation;
use crate::machine::decode_base_offset;
use crate::partition::Partition;

/// `DeleteRecords`' offset that means "the high watermark" (Kafka's -1).
pub const BEFORE_HIGH_WATERMARK: i64 = -1;

impl Partition {
    /// Deletes every record below `before` ([`BEFORE_HIGH_WATERMARK`]: below the high
    /// watermark) once the trim is committed. Returns the log start offset afterwards (Kafka's
    /// low watermark), which is never lower than before the call. Leader only.
    ///
    /// The log start never passes the last stable offset (the state machine clamps a trim
    /// there), so a deletion reaching into a transaction that is still open first waits, until
    /// `deadline`, for every transaction below `before` to be decided — typically the markers
    /// of a transaction its producer has just committed, which are written after the commit is
    /// answered. A deletion that cannot wait long enough is refused
    /// ([`PartitionError::OpenTransactionBelow`]) and deletes nothing: it is never answered
    /// with fewer records deleted than asked. A trim not committed by `deadline` is
    /// [`PartitionError::Timeout`] (it may still be applied).
    pub async fn delete_records(&self, before: i64, deadline: Instant) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let hw = self.high_watermark();
        let before = match before {
            BEFORE_HIGH_WATERMARK => hw,
            b => match u64::try_from(b) {
                Ok(b) if b <= hw => b,
                _ => {
                    return Err(PartitionError::OffsetOutOfRange { offset: b, start: self.log_start_offset(), end: hw })
                }
            },
        };
        if before <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        let waiting_since = rill_rt::now();
        if !self.wait_for_data(before - 1, deadline, Isolation::ReadCommitted).await {
            return Err(PartitionError::OpenTransactionBelow {
                before,
                stable: self.last_stable_offset(),
                waited_ms: waiting_since.elapsed().as_millis() as u64,
            });
        }
        match rill_rt::timeout_at(deadline, self.propose_trim(before)).await {
            Ok(answer) => answer,
            Err(_) => Err(PartitionError::Timeout {
                waited_ms: waiting_since.elapsed().as_millis() as u64,
                what: "the deletion to be committed",
            }),
        }
    }

    /// Moves the log start past what the topic's retention no longer keeps, if anything.
    /// Returns the new log start when it moved. Leader only.
    pub async fn enforce_retention(&self, config: &TopicConfig) -> Result<Option<u64>> {
        let cut_ms = (config.retention_ms >= 0).then(|| rill_rt::wall_clock_ms().saturating_sub(config.retention_ms));
        let target =
            self.index.lock().unwrap_or_else(|p| p.into_inner()).retention_target(cut_ms, config.retention_bytes());
        match target {
            None => Ok(None),
            Some(before) => {
                let start = self.propose_trim(before).await?;
                tracing::debug!(group = self.group, log_start = start, "retention moved the log start offset");
                Ok(Some(start))
            }
        }
    }

    async fn propose_trim(&self, before: u64) -> Result<u64> {
        self.propose_bookkeeping(command::encode_trim(before)).await
    }

    /// Proposes an entry that occupies no offsets (trim, compact, expire producers) and waits
    /// until it is applied. Returns the state machine's answer (the offset it reports). Leader
    /// only.
    pub(crate) async fn propose_bookkeeping(&self, body: bytes::Bytes) -> Result<u64> {
        if self.leader_term().is_none() {
            return Err(self.not_leader());
        }
        let payload = Payload { units: 0, body, proposal: 0 };
        self.quiescence.wake();
        let written = self.raft.client_write(payload).await.map_err(|e| match e {
            openraft::error::RaftError::APIError(e) => PartitionError::from_write(e, self.node_id),
            openraft::error::RaftError::Fatal(_) => PartitionError::ShuttingDown,
        })?;
        decode_base_offset(&written.data.0)
            .ok_or_else(|| PartitionError::Storage("a bookkeeping entry's answer is malformed".into()))
    }
}

//! [`StatePartition`]: a replica of an internal topic whose state machine *is* its data — a
//! coordinator's state (consumer groups' offsets, transactional ids). Its entries take no
//! offsets; its snapshot is its whole state, and its log is purged behind each snapshot. The
//! coordinator of an id is the leader of the state partition the id hashes to.
//!
//! ```text
//!  coordinator request ─► leader? caught up? ─► read the state     (queries)
//!                                          └──► propose a command ─► committed (majority synced) ─► answer
//! ```
//!
//! Everything a command changes is decided on the leader and carried in the command (a commit
//! time, a producer id): `apply` only records it, so every replica reaches the same state.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_meta::TopicConfig;
use rill_raft::multi::StartedGroup;
use rill_raft::state_machine::SmStore;
use rill_raft::{GroupStateMachine, NodeId, Payload};
use rill_rt::sync::watch;

use crate::error::{PartitionError, Result};
use crate::handover::InFlight;
use crate::replica::{Place, Replica};

/// Snapshot a state partition after this many entries: its log is purged behind the snapshot,
/// so this bounds the log a restart replays and a lagging follower can catch up from.
pub const STATE_SNAPSHOT_EVERY_ENTRIES: u64 = 1_000;
/// Entries kept before a state partition's snapshot when the log is purged: a follower this
/// little behind catches up from the log instead of a snapshot.
pub const STATE_LOG_KEPT_BEHIND_SNAPSHOT: u64 = 100;

/// A replica of a state partition with state machine `M`.
pub struct StatePartition<M> {
    replica: Replica,
    sm: SmStore<M>,
    /// Keeps the (always 0) high watermark channel open.
    _hw: watch::Sender<u64>,
}

impl<M> std::ops::Deref for StatePartition<M> {
    type Target = Replica;

    fn deref(&self) -> &Replica {
        &self.replica
    }
}

impl<M: GroupStateMachine> StatePartition<M> {
    /// Wraps a started Raft group running `M` as a state partition replica.
    pub fn new(
        topic: String,
        partition: u32,
        node_id: NodeId,
        started: StartedGroup<M>,
        config: TopicConfig,
    ) -> Arc<Self> {
        let StartedGroup { raft, log, sm, quiescence, .. } = started;
        let (hw_tx, hw) = watch::channel(0);
        let replica = Replica::new(Place { topic, partition, node_id }, raft, log, quiescence, hw, config);
        Arc::new(Self { replica, sm, _hw: hw_tx })
    }

    /// The replica (its Raft group, leadership, state for describe).
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Runs `read` with this replica's state as applied so far, leader or not (it may lag the
    /// leader): for tests and checkers comparing replicas.
    pub fn peek<R>(&self, read: impl FnOnce(&M) -> R) -> R {
        self.sm.with(|sm, _| read(sm))
    }

    /// Runs `read` with the state, on the leader once it has applied its whole log (an entry of
    /// its own term): `NotLeader` elsewhere, `CatchingUp` until then.
    pub fn read<R>(&self, read: impl FnOnce(&M) -> R) -> Result<R> {
        let Some(term) = self.leader_term() else { return Err(self.not_leader()) };
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        Ok(self.sm.with(|sm, _| read(sm)))
    }

    /// Like [`Self::read`], and linearizable: the leader first confirms with a quorum that it
    /// still leads and has applied everything committed before the call (Raft's read index),
    /// waiting at most `timeout`. What a client is told as-is (committed offsets) must be read
    /// this way: a deposed leader that has not heard of its successor yet — isolated, or paused
    /// — still believes it leads, and would answer from state its successor has moved past (a
    /// consumer told an offset older than one it committed processes records a second time).
    pub async fn read_linearizable<R>(&self, timeout: Duration, read: impl FnOnce(&M) -> R) -> Result<R> {
        let Some(term) = self.leader_term() else { return Err(self.not_leader()) };
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        // A quiescent group sends no heartbeats; the confirmation needs the followers' answers.
        self.quiescence.wake();
        let confirmed = rill_rt::timeout(timeout, self.raft.ensure_linearizable()).await.map_err(|_| {
            PartitionError::Timeout { waited_ms: timeout.as_millis() as u64, what: "a quorum to confirm the leader" }
        })?;
        confirmed.map_err(|e| PartitionError::from_leader_check(e, self.node_id, || self.not_leader()))?;
        Ok(self.sm.with(|sm, _| read(sm)))
    }

    /// Proposes `command` on the leader and waits up to `timeout` for it to be committed (synced
    /// on a majority) and applied; returns what the state machine answered. Refused with
    /// `CatchingUp` until the leader has applied its whole log, and while leadership moves.
    pub async fn propose(&self, command: Bytes, timeout: Duration) -> Result<Bytes> {
        self.replica.proposing_term()?;
        let _in_flight = InFlight::enter(&self.replica);
        self.quiescence.wake();
        let write = self.raft.client_write(Payload { units: 0, body: command, proposal: 0 });
        match rill_rt::timeout(timeout, write).await {
            Err(_) => {
                Err(PartitionError::Timeout { waited_ms: timeout.as_millis() as u64, what: "the command to commit" })
            }
            Ok(Ok(answer)) => Ok(answer.data.0),
            Ok(Err(openraft::error::RaftError::APIError(e))) => Err(PartitionError::from_write(e, self.node_id)),
            Ok(Err(openraft::error::RaftError::Fatal(_))) => Err(PartitionError::ShuttingDown),
        }
    }
}

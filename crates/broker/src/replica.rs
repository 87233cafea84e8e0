//! [`Replica`]: what every partition replica is, whatever its kind — its Raft group and place in
//! the topic, its view of the in-sync replicas, its topic settings, leadership moves
//! (`crate::handover`). A record partition ([`crate::Partition`]) and a state partition
//! ([`crate::StatePartition`]) are each a replica plus the state machine of their kind; both
//! dereference to their `Replica`, so the node balances, fails over and reports them alike.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::ServerState;
use rill_meta::TopicConfig;
use rill_raft::{GroupId, LogStore, NodeId, Quiescence, Raft};
use rill_rt::sync::watch;
use rill_rt::Instant;

use crate::error::{PartitionError, Result};
use crate::isr::{self, IsrView};
use crate::partition::ReplicaState;
use crate::produce::elapsed_ms;

/// One partition replica hosted on this node: the parts every kind shares.
pub struct Replica {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) group: GroupId,
    pub(crate) node_id: NodeId,
    pub(crate) raft: Raft,
    /// Woken by every write; see `rill_raft::quiesce`.
    pub(crate) quiescence: Arc<Quiescence>,
    pub(crate) log: LogStore,
    /// The high watermark (a state partition's stays 0: its entries take no offsets).
    pub(crate) hw: watch::Receiver<u64>,
    pub(crate) isr: watch::Receiver<IsrView>,
    pub(crate) config: Arc<RwLock<TopicConfig>>,
    /// Node id leadership is being handed to (0: none); new writes are refused meanwhile.
    pub(crate) moving_to: AtomicU64,
    /// Writes past the leader check and not yet answered.
    pub(crate) writes_in_flight: AtomicUsize,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replica({}/{}, group {})", self.topic, self.partition, self.group)
    }
}

/// Which partition a replica is, and on which node.
pub(crate) struct Place {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) node_id: NodeId,
}

impl Replica {
    /// A replica at `place` over a started Raft group; starts its ISR tracker.
    pub(crate) fn new(
        place: Place,
        raft: Raft,
        log: LogStore,
        quiescence: Arc<Quiescence>,
        hw: watch::Receiver<u64>,
        config: TopicConfig,
    ) -> Self {
        let Place { topic, partition, node_id } = place;
        let config = Arc::new(RwLock::new(config));
        let (isr_tx, isr_rx) = watch::channel(IsrView::default());
        let lag_config = config.clone();
        let lag = move || lag_config.read().map(|c| c.replica_lag_time_max()).unwrap_or(Duration::from_secs(30));
        rill_rt::spawn(isr::run(raft.clone(), node_id, log.group(), quiescence.clone(), lag, Arc::new(isr_tx)));
        Self {
            topic,
            partition,
            group: log.group(),
            node_id,
            raft,
            quiescence,
            log,
            hw,
            isr: isr_rx,
            config,
            moving_to: AtomicU64::new(0),
            writes_in_flight: AtomicUsize::new(0),
        }
    }

    /// Topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Partition number.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Raft group id.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The group's quiescence on this node (wake it before triggering an election).
    pub fn quiescence(&self) -> &Arc<Quiescence> {
        &self.quiescence
    }

    /// The log (for oracles and tests comparing replicas).
    pub fn log(&self) -> &LogStore {
        &self.log
    }

    /// The topic configuration in force.
    pub fn config(&self) -> TopicConfig {
        self.config.read().map(|c| c.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Replaces the topic configuration.
    pub fn set_config(&self, config: TopicConfig) {
        match self.config.write() {
            Ok(mut c) => *c = config,
            Err(p) => *p.into_inner() = config,
        }
    }

    /// High watermark: every offset below it is committed (0 for a state partition).
    pub fn high_watermark(&self) -> u64 {
        *self.hw.borrow()
    }

    pub(crate) fn not_leader(&self) -> PartitionError {
        let m = self.raft.metrics();
        let m = m.borrow();
        let leader = m.current_leader.filter(|l| *l != self.node_id);
        PartitionError::NotLeader { node: self.node_id, leader }
    }

    /// The term this replica leads in; `None` when it is not the leader. Kafka clients know it
    /// as the partition's leader epoch.
    pub fn leader_term(&self) -> Option<u64> {
        let m = self.raft.metrics();
        let m = m.borrow();
        (m.state == ServerState::Leader).then_some(m.current_term)
    }

    /// Resolves once this replica is no longer the leader it is now — at once when it is not
    /// the leader. What a request held on the leader (a long poll) waits on beside its own
    /// event, so a deposed leader answers it at once instead of at the end of the hold.
    pub async fn leadership_lost(&self) {
        let Some(term) = self.leader_term() else { return };
        self.leadership_lost_since(term).await;
    }

    /// Resolves once this replica is not the leader of term `term` — at once when it is not
    /// (any more, or yet). What an object made for one term of leadership waits on (a
    /// coordinator's shard), so a term that ended before the wait began is not mistaken for the
    /// next one.
    pub async fn leadership_lost_since(&self, term: u64) {
        // Server metrics change only with the state, vote and leader — not with every append.
        let mut metrics = self.raft.server_metrics();
        loop {
            {
                let m = metrics.borrow_and_update();
                if m.state != ServerState::Leader || m.vote.leader_id().term != term {
                    return;
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Live state of this replica.
    pub fn state(&self) -> ReplicaState {
        let (is_leader, leader, term) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader, m.current_leader, m.current_term)
        };
        let isr = if is_leader { self.isr.borrow().isr.iter().copied().collect() } else { Vec::new() };
        ReplicaState {
            is_leader,
            leader,
            term,
            isr,
            log_start_offset: self.log.start_position(),
            high_watermark: self.high_watermark(),
            log_end_offset: self.log.end_position(),
            quiescent: self.quiescence.is_quiescent(),
        }
    }

    /// Refuses acks=all before appending when the ISR is smaller than `min`.
    pub(crate) fn check_isr(&self, term: u64, min: u32) -> Result<()> {
        let view = self.isr.borrow().clone();
        // Until the tracker has seen this term, the ISR is this node alone.
        let isr: Vec<NodeId> =
            if view.leader_term == Some(term) { view.isr.into_iter().collect() } else { vec![self.node_id] };
        if isr.len() < min as usize {
            return Err(PartitionError::NotEnoughReplicas { isr, min });
        }
        Ok(())
    }

    /// acks=all, after commit: waits until every in-sync replica has log index `index`.
    pub(crate) async fn wait_for_isr(
        &self,
        index: u64,
        term: u64,
        min: u32,
        deadline: Instant,
        started: Instant,
    ) -> Result<()> {
        let mut isr = self.isr.clone();
        loop {
            let view = isr.borrow_and_update().clone();
            if view.leader_term != Some(term) {
                return Err(PartitionError::NotEnoughReplicasAfterAppend {
                    reason: "leadership changed before every in-sync replica confirmed it".into(),
                });
            }
            if view.all_have(index) {
                if view.isr.len() < min as usize {
                    return Err(PartitionError::NotEnoughReplicasAfterAppend {
                        reason: format!("the in-sync replicas {:?} shrank below min.insync.replicas={min}", view.isr),
                    });
                }
                return Ok(());
            }
            match rill_rt::timeout_at(deadline, isr.changed()).await {
                Err(_) => {
                    return Err(PartitionError::Timeout {
                        waited_ms: elapsed_ms(started),
                        what: "every in-sync replica to replicate the batch",
                    })
                }
                Ok(Err(_)) => return Err(PartitionError::ShuttingDown),
                Ok(Ok(())) => {}
            }
        }
    }

    /// The term this replica leads in, once it has applied an entry of that term (its whole log):
    /// `None` on a follower, and on a leader still catching up.
    pub fn leading_term(&self) -> Option<u64> {
        self.leader_term().filter(|term| self.caught_up(*term))
    }

    /// True when this leader has applied an entry of its own term, so everything before it in
    /// the log is applied and the producer state is complete.
    pub(crate) fn caught_up(&self, term: u64) -> bool {
        self.raft.metrics().borrow().last_applied.is_some_and(|l| l.leader_id.term == term)
    }

    /// The term this replica leads in, when it may propose a command decided from its applied
    /// state: it leads, has applied its whole log (`CatchingUp` before), and its leadership is
    /// not being handed over (`LeaderMoving`).
    pub(crate) fn proposing_term(&self) -> Result<u64> {
        let Some(term) = self.leader_term() else { return Err(self.not_leader()) };
        if !self.caught_up(term) {
            return Err(PartitionError::CatchingUp);
        }
        if let Some(to) = self.moving_to() {
            return Err(PartitionError::LeaderMoving { to });
        }
        Ok(term)
    }
}

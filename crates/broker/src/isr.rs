//! In-sync replica tracking, from Raft replication progress.
//!
//! A follower is *in sync* if, at some moment within the last `replica.lag.time.max.ms`, its
//! replicated log reached the leader's log end *as it was at that moment* (Kafka's definition:
//! a follower under steady load is never exactly at the moving end, but it is in sync if it
//! keeps reaching where the end was a moment ago). The leader keeps a short history of its log
//! end; a follower's matched index is credited with the latest time the leader's end was at or
//! below it.
//!
//! A follower must also be *alive*: it must have answered the leader (a heartbeat or an append)
//! within the same window — or, while the group is quiescent and sends neither, its node must
//! have answered a node-level ping (`rill_raft::quiesce`). Without that, a follower that was
//! caught up when it died would stay in sync forever on an idle partition.
//!
//! A new leader starts with an ISR of itself alone and adds followers as they prove they are
//! caught up (within one heartbeat when healthy). It never assumes a follower is in sync: a dead
//! follower must not hold up `acks=all` writes for `replica.lag.time.max.ms`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use openraft::metrics::RaftServerMetrics;
use openraft::{BasicNode, RaftMetrics, ServerState};
use rill_raft::{NodeId, Quiescence, Raft};
use rill_rt::sync::watch;
use rill_rt::Instant;

/// Log-end samples closer together than this are merged (bounds memory under heavy load; a
/// merged sample makes a follower look at most this much staler than it is).
const SAMPLE_GRANULARITY: Duration = Duration::from_millis(10);
/// Longest pause between ISR evaluations when nothing changes (ISR shrinks by time passing).
const MAX_TICK: Duration = Duration::from_millis(250);
/// Longest pause between ISR evaluations while the group is quiescent.
const QUIESCENT_TICK: Duration = Duration::from_secs(1);

/// The leader's current view of its followers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsrView {
    /// The term this node leads in; `None` when it is not the leader.
    pub leader_term: Option<u64>,
    /// In-sync replicas, the leader included.
    pub isr: BTreeSet<NodeId>,
    /// Highest log index known replicated on each voter.
    pub matched: BTreeMap<NodeId, u64>,
}

impl IsrView {
    /// True when every ISR member has log index `index`.
    pub fn all_have(&self, index: u64) -> bool {
        self.isr.iter().all(|n| self.matched.get(n).is_some_and(|m| *m >= index))
    }
}

/// Computes ISR views from successive Raft metrics. Pure apart from the clock passed in.
pub struct IsrTracker {
    me: NodeId,
    term: Option<u64>,
    samples: VecDeque<(Instant, u64)>,
    caught_up: BTreeMap<NodeId, Instant>,
}

impl IsrTracker {
    /// A tracker for node `me`.
    pub fn new(me: NodeId) -> Self {
        Self { me, term: None, samples: VecDeque::new(), caught_up: BTreeMap::new() }
    }

    /// Evaluates the ISR at `now` from the leader's state.
    ///
    /// * `leader_term`: `Some(term)` when this node leads, else `None`.
    /// * `leader_last`: the leader's last log index.
    /// * `voters`: the group's voters.
    /// * `matched`: replicated index per voter (the leader's own entry is its flushed index).
    /// * `contacts`: when each follower last answered the leader.
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate(
        &mut self,
        now: Instant,
        leader_term: Option<u64>,
        leader_last: u64,
        voters: &BTreeSet<NodeId>,
        matched: &BTreeMap<NodeId, u64>,
        contacts: &BTreeMap<NodeId, Instant>,
        lag_max: Duration,
    ) -> IsrView {
        let Some(term) = leader_term else {
            self.term = None;
            self.samples.clear();
            self.caught_up.clear();
            return IsrView::default();
        };
        if self.term != Some(term) {
            self.term = Some(term);
            self.samples.clear();
            self.caught_up.clear();
        }
        match self.samples.back_mut() {
            Some((t, idx)) if now.saturating_duration_since(*t) < SAMPLE_GRANULARITY => *idx = (*idx).max(leader_last),
            Some((_, idx)) if *idx == leader_last => {}
            _ => self.samples.push_back((now, leader_last)),
        }
        while self.samples.len() > 1
            && self.samples.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > lag_max)
        {
            self.samples.pop_front();
        }
        for follower in voters.iter().filter(|n| **n != self.me) {
            let Some(m) = matched.get(follower).copied() else {
                continue;
            };
            let credit = if m >= leader_last {
                Some(now)
            } else {
                self.samples.iter().rev().find(|(_, idx)| *idx <= m).map(|(t, _)| *t)
            };
            if let Some(t) = credit {
                let slot = self.caught_up.entry(*follower).or_insert(t);
                if t > *slot {
                    *slot = t;
                }
            }
        }
        self.caught_up.retain(|n, _| voters.contains(n));
        let recent = |t: &Instant| now.saturating_duration_since(*t) <= lag_max;
        let mut isr: BTreeSet<NodeId> = self
            .caught_up
            .iter()
            .filter(|(n, t)| recent(t) && contacts.get(n).is_some_and(recent))
            .map(|(n, _)| *n)
            .collect();
        isr.insert(self.me);
        IsrView { leader_term: Some(term), isr, matched: matched.clone() }
    }
}

/// What the tracker reads of followers' liveness; [`Quiescence`] in a running node.
pub(crate) trait FollowerContact: Send + Sync + 'static {
    /// When `node` last answered this group's leader.
    fn last_contact(&self, node: NodeId) -> Option<Instant>;
    /// True while the group is quiescent on this node.
    fn is_quiescent(&self) -> bool;
}

impl FollowerContact for Quiescence {
    fn last_contact(&self, node: NodeId) -> Option<Instant> {
        Quiescence::last_contact(self, node)
    }

    fn is_quiescent(&self) -> bool {
        Quiescence::is_quiescent(self)
    }
}

/// Runs a tracker for `raft` until the group stops, publishing views on `tx`.
/// `lag_max` is read on every evaluation so a topic config change takes effect at once.
pub async fn run(
    raft: Raft,
    me: NodeId,
    group: u64,
    quiescence: Arc<Quiescence>,
    lag_max: impl Fn() -> Duration + Send + 'static,
    tx: Arc<watch::Sender<IsrView>>,
) {
    track(raft.metrics(), raft.server_metrics(), me, group, quiescence, lag_max, tx).await
}

/// The tracker's loop over a group's two metrics streams.
///
/// The role is read from the server metrics — the stream a follower waits on — never from the
/// full metrics: openraft publishes the server metrics first, so a tracker woken between the two
/// would see "leader" there and "candidate" in the full metrics, go back to waiting for the next
/// role change, and leave a leader with an ISR of itself for its whole term (every `acks=all`
/// write refused with `NOT_ENOUGH_REPLICAS`).
async fn track(
    mut metrics: watch::Receiver<RaftMetrics<NodeId, BasicNode>>,
    // Server metrics change only with the role, leader or membership, unlike the full metrics,
    // which openraft republishes on every heartbeat: followers wait on these.
    mut server: watch::Receiver<RaftServerMetrics<NodeId, BasicNode>>,
    me: NodeId,
    group: u64,
    contact: Arc<impl FollowerContact>,
    lag_max: impl Fn() -> Duration + Send + 'static,
    tx: Arc<watch::Sender<IsrView>>,
) {
    let mut tracker = IsrTracker::new(me);
    loop {
        let leader_term = {
            let s = server.borrow_and_update();
            (s.state == ServerState::Leader).then_some(s.vote.leader_id().term)
        };
        let view = {
            let m = metrics.borrow_and_update();
            if m.running_state.is_err() {
                break;
            }
            let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
            // Until the full metrics of this term arrive, they say nothing of its followers.
            let replication = m.replication.as_ref().filter(|_| leader_term == Some(m.current_term));
            let matched: BTreeMap<NodeId, u64> = replication
                .map(|r| r.iter().filter_map(|(n, l)| l.map(|l| (*n, l.index))).collect())
                .unwrap_or_default();
            let contacts: BTreeMap<NodeId, Instant> =
                voters.iter().filter_map(|n| contact.last_contact(*n).map(|t| (*n, t))).collect();
            tracker.evaluate(
                rill_rt::now(),
                leader_term,
                m.last_log_index.unwrap_or(0),
                &voters,
                &matched,
                &contacts,
                lag_max(),
            )
        };
        let leading = view.leader_term.is_some();
        tx.send_if_modified(|old| {
            if *old != view {
                // Kafka logs its ISR shrinking and expanding: what an operator reads first when
                // acks=all writes are refused or slow.
                if old.leader_term.is_some() && old.leader_term == view.leader_term && old.isr != view.isr {
                    tracing::info!(group, term = view.leader_term, from = ?old.isr, to = ?view.isr, "in-sync replicas changed");
                } else if view.leader_term.is_some() && old.leader_term != view.leader_term {
                    tracing::debug!(group, term = view.leader_term, isr = ?view.isr, "leading: in-sync replicas");
                }
                *old = view;
                true
            } else {
                false
            }
        });
        if !leading {
            // Only a leader tracks its followers; wake when this replica's role changes.
            if server.changed().await.is_err() {
                break; // the group shut down
            }
            continue;
        }
        // A quiescent group's ISR changes only when a follower's node falls silent; a write
        // wakes the group, and with it this loop, at once.
        let tick =
            if contact.is_quiescent() { (lag_max() / 2).min(QUIESCENT_TICK) } else { lag_max().min(MAX_TICK) / 2 };
        // Wake on any Raft progress, or after a tick so followers age out of the ISR.
        if let Ok(Err(_)) = rill_rt::timeout(tick, metrics.changed()).await {
            break; // the group shut down
        }
    }
    tx.send_replace(IsrView::default());
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Membership, StoredMembership, Vote};

    use super::*;

    fn voters() -> BTreeSet<NodeId> {
        [1, 2, 3].into()
    }

    fn heard(now: Instant, from: &[NodeId]) -> BTreeMap<NodeId, Instant> {
        from.iter().map(|n| (*n, now)).collect()
    }

    #[tokio::test]
    async fn new_leader_starts_alone_and_adds_caught_up_followers() {
        let mut t = IsrTracker::new(1);
        let now = rill_rt::now();
        let lag = Duration::from_secs(10);
        let v = t.evaluate(now, Some(2), 10, &voters(), &BTreeMap::new(), &BTreeMap::new(), lag);
        assert_eq!(v.isr, [1].into());
        let v = t.evaluate(now, Some(2), 10, &voters(), &[(1, 10), (2, 10), (3, 4)].into(), &heard(now, &[2, 3]), lag);
        assert_eq!(v.isr, [1, 2].into());
        // 3 is outside the ISR, so it does not hold up acks=all.
        assert!(v.all_have(10));
        assert!(!v.all_have(11));
    }

    #[tokio::test]
    async fn follower_behind_the_moving_end_stays_in_sync_if_it_reaches_a_recent_end() {
        let mut t = IsrTracker::new(1);
        let t0 = rill_rt::now();
        let lag = Duration::from_secs(1);
        t.evaluate(t0, Some(1), 100, &voters(), &[(2, 100), (3, 100)].into(), &heard(t0, &[2, 3]), lag);
        // The leader keeps moving; follower 2 trails by a little, follower 3 stops.
        let mut now = t0;
        let mut end = 100;
        let mut view = IsrView::default();
        for _ in 0..40 {
            now += Duration::from_millis(50);
            end += 10;
            view =
                t.evaluate(now, Some(1), end, &voters(), &[(2, end - 10), (3, 100)].into(), &heard(now, &[2, 3]), lag);
        }
        assert_eq!(view.isr, [1, 2].into(), "3 has been behind for 2s > lag 1s");
    }

    #[tokio::test]
    async fn caught_up_follower_that_stops_answering_leaves_the_isr() {
        let mut t = IsrTracker::new(1);
        let t0 = rill_rt::now();
        let lag = Duration::from_secs(1);
        let v = t.evaluate(t0, Some(1), 7, &voters(), &[(2, 7), (3, 7)].into(), &heard(t0, &[2, 3]), lag);
        assert_eq!(v.isr, [1, 2, 3].into());
        // No new writes; 3 stops answering heartbeats while 2 keeps answering.
        let later = t0 + Duration::from_secs(2);
        let contacts: BTreeMap<NodeId, Instant> = [(2, later), (3, t0)].into();
        let v = t.evaluate(later, Some(1), 7, &voters(), &[(2, 7), (3, 7)].into(), &contacts, lag);
        assert_eq!(v.isr, [1, 2].into());
    }

    /// Every follower answered just now.
    struct AllHeard;

    impl FollowerContact for AllHeard {
        fn last_contact(&self, _node: NodeId) -> Option<Instant> {
            Some(rill_rt::now())
        }

        fn is_quiescent(&self) -> bool {
            false
        }
    }

    fn server_metrics(state: ServerState, term: u64) -> RaftServerMetrics<NodeId, BasicNode> {
        RaftServerMetrics {
            id: 1,
            vote: Vote::new_committed(term, 1),
            state,
            current_leader: (state == ServerState::Leader).then_some(1),
            membership_config: Arc::new(StoredMembership::new(
                Some(LogId::new(CommittedLeaderId::new(0, 0), 0)),
                Membership::new(vec![voters()], None),
            )),
        }
    }

    fn full_metrics(state: ServerState, term: u64, matched: &[(NodeId, u64)]) -> RaftMetrics<NodeId, BasicNode> {
        let server = server_metrics(state, term);
        let mut m = RaftMetrics::new_initial(1);
        m.state = state;
        m.current_term = term;
        m.vote = server.vote;
        m.current_leader = server.current_leader;
        m.membership_config = server.membership_config;
        m.last_log_index = matched.iter().map(|(_, i)| *i).max();
        m.replication = (state == ServerState::Leader).then(|| {
            matched.iter().map(|(n, i)| (*n, Some(LogId::new(CommittedLeaderId::new(term, 1), *i)))).collect()
        });
        m
    }

    async fn must_see_view(rx: &mut watch::Receiver<IsrView>, what: &str, ok: impl FnMut(&IsrView) -> bool) {
        let seen = matches!(rill_rt::timeout(Duration::from_secs(5), rx.wait_for(ok)).await, Ok(Ok(_)));
        assert!(seen, "no view with {what} within 5 s; last: {:?}", *rx.borrow());
    }

    #[tokio::test]
    async fn a_leader_is_tracked_from_its_role_even_before_its_full_metrics_arrive() {
        let (metrics_tx, metrics_rx) = watch::channel(full_metrics(ServerState::Follower, 1, &[]));
        let (server_tx, server_rx) = watch::channel(server_metrics(ServerState::Follower, 1));
        let (view_tx, mut view_rx) = watch::channel(IsrView::default());
        let lag = || Duration::from_secs(10);
        let task = rill_rt::spawn(track(metrics_rx, server_rx, 1, 7, Arc::new(AllHeard), lag, Arc::new(view_tx)));
        // openraft's order: the server metrics say "leader" before the full metrics do. A tracker
        // that waits for the next role change after reading the stale full metrics never leads.
        server_tx.send_replace(server_metrics(ServerState::Leader, 2));
        must_see_view(&mut view_rx, "term 2 led", |v| v.leader_term == Some(2) && v.isr == [1].into()).await;
        metrics_tx.send_replace(full_metrics(ServerState::Leader, 2, &[(1, 5), (2, 5), (3, 5)]));
        must_see_view(&mut view_rx, "both followers in sync", |v| v.isr == [1, 2, 3].into()).await;
        // Stepping down empties the view as soon as the server metrics say so.
        server_tx.send_replace(server_metrics(ServerState::Follower, 3));
        must_see_view(&mut view_rx, "no leader term", |v| v.leader_term.is_none()).await;
        drop(server_tx);
        drop(metrics_tx);
        let ended = rill_rt::timeout(Duration::from_secs(5), task).await;
        assert!(matches!(ended, Ok(Ok(()))), "the tracker ends with its group: {ended:?}");
    }

    #[tokio::test]
    async fn term_change_resets_and_non_leader_has_empty_view() {
        let mut t = IsrTracker::new(1);
        let now = rill_rt::now();
        let lag = Duration::from_secs(10);
        let v = t.evaluate(now, Some(1), 5, &voters(), &[(2, 5), (3, 5)].into(), &heard(now, &[2, 3]), lag);
        assert_eq!(v.isr, [1, 2, 3].into());
        assert_eq!(t.evaluate(now, None, 5, &voters(), &BTreeMap::new(), &BTreeMap::new(), lag), IsrView::default());
        let v = t.evaluate(now, Some(3), 6, &voters(), &BTreeMap::new(), &BTreeMap::new(), lag);
        assert_eq!(v.isr, [1].into());
    }
}

//! Group membership decided on a group's coordinator and proposed to its `__consumer_offsets`
//! partition, whose machine holds the groups' records: KIP-848 heartbeats (held as long polls),
//! removing members whose timers ran out, and storing a classic group's records. The decisions
//! themselves are `crate::groups`' (pure); this proposes them and decides again when a
//! compare-and-set on a group's version was lost.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;

use super::machine::{OffsetsMachine, APPLIED, REFUSED};
use crate::error::{CoordinatorError, Result};
use crate::groups::classic::Persist;
use crate::groups::heartbeat::{self, Decision, HeartbeatRequest, Timeouts, TopicLookup};
use crate::groups::{held, sessions, GroupTurns};

/// How often a change that lost its compare-and-set is decided again before giving up: each
/// loss means another request for the same group changed it first.
const CAS_ATTEMPTS: usize = 8;

/// On the group's coordinator: decides `req`, proposes what it changes and answers once that is
/// committed (synced on a majority). A heartbeat that changes nothing proposes nothing.
pub async fn consumer_heartbeat(
    partition: &StatePartition<OffsetsMachine>,
    req: &HeartbeatRequest,
    topics: TopicLookup<'_>,
    timeouts: Timeouts,
    timeout: Duration,
) -> Result<Decision> {
    for _ in 0..CAS_ATTEMPTS {
        let decision = decide(partition, req, topics, timeouts)?;
        let Some(change) = &decision.change else { return Ok(decision) };
        if propose(partition, change, timeout).await? {
            return Ok(decision);
        }
    }
    Err(contended(&req.group_id))
}

/// Decides `req` from the group as applied on this leader, proposing nothing.
fn decide(
    partition: &StatePartition<OffsetsMachine>,
    req: &HeartbeatRequest,
    topics: TopicLookup<'_>,
    timeouts: Timeouts,
) -> Result<Decision> {
    let now_ms = rill_rt::wall_clock_ms();
    partition.read(|m| {
        heartbeat::check_not_classic(m.classic_groups().get(&req.group_id), &req.group_id)?;
        heartbeat::heartbeat(m.groups().get(&req.group_id), req, topics, timeouts, now_ms, &mut new_member_id)
    })?
}

/// How a heartbeat may be held ([`consumer_heartbeat_held`]).
pub struct LongPoll<'a, T> {
    /// The turns of the groups this coordinator decides for.
    pub turns: &'a GroupTurns,
    /// The coordinator's held heartbeats, which the partition's changes wake (its machine's
    /// [`crate::offsets::ChangeHook`]).
    pub held: &'a held::HeldHeartbeats,
    /// The session timers: a held member's session restarts when it is held, as it was heard.
    pub sessions: &'a sessions::Sessions,
    /// Longest the heartbeat is held; zero answers at once.
    pub hold: Duration,
    /// The cluster metadata the topic lookup reads: a change of a topic the group subscribes to
    /// (new partitions, the topic created or deleted) decides again.
    pub topics: rill_rt::sync::watch::Receiver<T>,
}

/// [`consumer_heartbeat`] as a long poll: a heartbeat of a member in the group that changes
/// nothing is held up to `poll.hold` and decided again whenever a change concerns the member
/// ([`held`]) or a topic its group subscribes to changes, and answered as soon as that gives
/// the member something to do (a new epoch, partitions to revoke or to take — any change its
/// heartbeat makes). An owner thus hears at once that a joining member needs its partitions,
/// instead of at its next heartbeat. Held out, or when this replica stops leading, it is decided
/// once more, so a deposed coordinator answers not-the-coordinator at once.
///
/// The member's session restarts when its heartbeat is held (it was heard then), and again when
/// it is answered. A decision that writes takes its group's turn (`poll.turns`), so members woken
/// together write one after another instead of racing each other's compare-and-set; one that
/// only reads does not wait behind them.
pub async fn consumer_heartbeat_held<T>(
    partition: &StatePartition<OffsetsMachine>,
    req: &HeartbeatRequest,
    topics: TopicLookup<'_>,
    timeouts: Timeouts,
    timeout: Duration,
    poll: LongPoll<'_, T>,
) -> Result<Decision> {
    let LongPoll { turns, held, sessions, hold, topics: mut topics_changed } = poll;
    if hold.is_zero() || req.member_epoch <= 0 {
        return decide_in_turn(partition, turns, req, topics, timeouts, timeout).await;
    }
    let until = rill_rt::now() + hold;
    let changes = held.listen(&req.group_id, &req.member_id);
    let version = |m: &OffsetsMachine| m.groups().get(&req.group_id).map(|g| g.version);
    loop {
        // All taken before the decision reads the group and the topics: a change after that
        // read wakes this, or shows in the version.
        let changed = changes.notified();
        tokio::pin!(changed);
        topics_changed.borrow_and_update();
        let decided_at = partition.peek(version);
        let decision = decide_in_turn(partition, turns, req, topics, timeouts, timeout).await?;
        // Nothing for the member to do: nothing written, the same epoch, and no assignment
        // other than what it reported owning (an answer that repeats a revocation or a hand-over
        // the member has not acted on yet is news, even at an unchanged epoch).
        let quiet_assignment = decision.answer.assignment.as_ref().is_none_or(|a| req.owned.as_ref() == Some(a));
        let idle = decision.change.is_none() && decision.answer.member_epoch == req.member_epoch && quiet_assignment;
        if !idle || rill_rt::now() >= until {
            return Ok(decision);
        }
        sessions.heard(partition.replica().group(), &req.group_id, &req.member_id, decision.member.as_ref());
        // A change that concerns the member decides again. The end of the hold answers what
        // was decided when nothing changed since (the same group version and topics: the same
        // decision), else decides once more; so does this coordinator deposed (answering not
        // the coordinator).
        let woken = loop {
            tokio::select! {
                () = &mut changed => break true,
                seen = topics_changed.changed() => {
                    if seen.is_err() {
                        break false;
                    }
                    // Would the decision see the group's topics differently now?
                    let moved = partition.peek(|m| {
                        m.groups()
                            .get(&req.group_id)
                            .is_some_and(|g| heartbeat::subscribed_topics(g, topics) != g.subscribed_topics)
                    });
                    if moved {
                        break true;
                    }
                }
                () = partition.leadership_lost() => break false,
                () = rill_rt::sleep_until(until) => break false,
            }
        };
        if woken {
            continue;
        }
        // Leading still, with the group and its topics as decided from: the decision stands.
        // Every change of a group moves its version; a group deleted and created again starts
        // over at version 1, but only after this member was removed, which woke it. (A
        // metadata change not yet looked at — ready together with the end of the hold — decides
        // again.)
        let topics_unseen = topics_changed.has_changed().unwrap_or(true);
        if !topics_unseen && partition.read(version)? == decided_at {
            return Ok(decision);
        }
        return decide_in_turn(partition, turns, req, topics, timeouts, timeout).await;
    }
}

/// Decides `req` from the applied group; only a decision that writes waits for the group's turn
/// (and is then decided afresh in it).
async fn decide_in_turn(
    partition: &StatePartition<OffsetsMachine>,
    turns: &GroupTurns,
    req: &HeartbeatRequest,
    topics: TopicLookup<'_>,
    timeouts: Timeouts,
    timeout: Duration,
) -> Result<Decision> {
    let decision = decide(partition, req, topics, timeouts)?;
    if decision.change.is_none() {
        return Ok(decision);
    }
    let _turn = turns.take(&req.group_id).await;
    consumer_heartbeat(partition, req, topics, timeouts, timeout).await
}

/// On the group's coordinator: removes member `member_id` if it is still at `epoch` (its session
/// or rebalance timer expired). True when it was removed.
pub async fn fence_member(
    partition: &StatePartition<OffsetsMachine>,
    group_id: &str,
    member_id: &str,
    epoch: i32,
    timeout: Duration,
) -> Result<bool> {
    for _ in 0..CAS_ATTEMPTS {
        let now_ms = rill_rt::wall_clock_ms();
        let change =
            partition.read(|m| m.groups().get(group_id).and_then(|g| heartbeat::fence(g, member_id, epoch, now_ms)))?;
        let Some(change) = change else { return Ok(false) };
        if propose(partition, &change, timeout).await? {
            return Ok(true);
        }
    }
    Err(contended(group_id))
}

/// Proposes `change`; false when it lost its compare-and-set.
async fn propose(
    partition: &StatePartition<OffsetsMachine>,
    change: &pb::ConsumerGroupChange,
    timeout: Duration,
) -> Result<bool> {
    let command = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::GroupChange(change.clone())) };
    let answer: Bytes = partition.propose(command.encode_to_vec().into(), timeout).await?;
    Ok(answer.as_ref() == APPLIED)
}

fn contended(group_id: &str) -> CoordinatorError {
    CoordinatorError::NotAvailable(format!(
        "group {group_id:?} changed {CAS_ATTEMPTS} times in a row while this request was decided; retry"
    ))
}

/// A member id for a member that joins without one: 128 random bits, as Kafka's clients make
/// (KIP-1082), in hex.
fn new_member_id() -> String {
    format!("{:016x}{:016x}", rill_rt::random_u64(), rill_rt::random_u64())
}

/// On the group's coordinator: proposes `persist`'s record and returns once it is applied
/// (committed on a majority) — `Ok` — or why not: the group changed since it was decided (a lost
/// compare-and-set), its id is a KIP-848 group's with members, or the proposal failed. The
/// result goes to [`crate::groups::classic::ClassicEngine::persisted`] as is.
pub async fn persist_classic(
    partition: &StatePartition<OffsetsMachine>,
    persist: &Persist,
    timeout: Duration,
) -> Result<()> {
    let command =
        pb::OffsetsCommand { command: Some(pb::offsets_command::Command::ClassicGroup(persist.record.clone())) };
    let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
    classic_applied(&persist.group_id, &answer)
}

/// What the state machine's answer to a classic group record means.
pub(crate) fn classic_applied(group_id: &str, answer: &[u8]) -> Result<()> {
    match answer {
        a if a == APPLIED => Ok(()),
        a if a == REFUSED => Err(CoordinatorError::InconsistentGroupProtocol {
            group_id: group_id.to_string(),
            reason: "a consumer group of the KIP-848 protocol took the group id meanwhile".into(),
        }),
        _ => Err(CoordinatorError::NotAvailable(format!(
            "classic group {group_id:?} was changed by another write while this one was decided"
        ))),
    }
}

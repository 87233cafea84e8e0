//! A consumer's membership in a consumer group (KIP-848): a background task that heartbeats the
//! group's coordinator, and what it shares with the [`crate::Consumer`] that owns it.
//!
//! ```text
//!  task: join (epoch 0) ─► heartbeat every interval (sooner when the consumer has acted on an
//!        assignment), each held by the coordinator up to the interval until the member has
//!        something to do (a long poll) ─► answer: epoch, new assignment? ─► shared.assignment
//!  consumer.poll: lost? (fenced, or no successful heartbeat for the session timeout, on the
//!        consumer's own clock) ─► drop every partition and its buffered records, rejoin
//!                 new assignment? ─► revoke (commit, release) what it leaves out ─► take the rest
//!                                ─► shared.owned, and wake the task to report it
//! ```
//!
//! The task never changes what the consumer owns: only the consumer does, inside `poll`, so the
//! application sees revocations and new partitions between polls, never during one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_proto::common::ErrorCode;
use rill_proto::groups::{ConsumerGroupHeartbeatRequest, OwnedPartitions, SubscribedTopics, TopicPartitions};
use rill_rt::sync::Notify;
use rill_rt::{Instant, JoinHandle};

use crate::consumer::TopicPartition;
use crate::Client;

/// How a consumer joins a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// The group.
    pub group_id: String,
    /// The topics to consume by name.
    pub topics: Vec<String>,
    /// A regular expression: consume every topic whose whole name it matches, besides `topics`.
    pub topic_pattern: Option<String>,
    /// A static member's `group.instance.id`: a restart that leaves (closes) and rejoins within
    /// the session timeout keeps its partitions.
    pub instance_id: Option<String>,
    /// How long the consumer may take to revoke partitions (Kafka's `max.poll.interval.ms`).
    pub rebalance_timeout: Duration,
    /// "uniform" or "range"; `None` for the group's default.
    pub server_assignor: Option<String>,
    /// "cooperative" or "eager"; `None` for cooperative.
    pub rebalance_mode: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
}

/// What the task and the consumer share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The member id ("" until the first answer).
    pub member_id: String,
    /// The member epoch of the last answer (0: joining).
    pub epoch: i32,
    /// The newest assignment the coordinator sent that the consumer has not acted on yet.
    pub assignment: Option<BTreeSet<TopicPartition>>,
    /// What the consumer owns now: every heartbeat reports it — except while an assignment
    /// waits for the consumer to act on it (a report then could be older than what the consumer
    /// is about to own, and the coordinator would count partitions revoked that are not).
    pub owned: BTreeSet<TopicPartition>,
    /// The coordinator no longer counts this consumer as a member: it owns nothing. Set by the
    /// task; the consumer drops its partitions and clears it, then the task rejoins.
    pub fenced: bool,
    /// When a heartbeat last succeeded (the session runs from there).
    pub last_success: Instant,
    /// The session timeout the coordinator applies.
    pub session_timeout: Duration,
    /// Why the last heartbeat failed, for logs and errors.
    pub last_error: Option<String>,
    /// A refusal that retrying cannot fix (an invalid request, an unknown assignor, a full
    /// group): `poll` returns it.
    pub fatal: Option<crate::Error>,
    /// Bumped when the consumer declares the membership lost: an answer to a request made
    /// before that is dropped, so a late success cannot resurrect the old membership.
    pub generation: u64,
}

/// A consumer's membership: the task and its shared state.
pub(crate) struct Membership {
    pub config: MembershipConfig,
    pub shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    /// Notified by the task when the consumer has something to act on: a new assignment, a
    /// fencing, a fatal refusal (`poll` waits on it besides fetch results).
    changed: Arc<Notify>,
    task: JoinHandle<()>,
}

/// The session timeout assumed until the coordinator says (Kafka's default).
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);
/// The heartbeat interval assumed until the coordinator says.
const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// Wait after a failed heartbeat before the next.
const RETRY_AFTER: Duration = Duration::from_millis(200);

impl Membership {
    /// Starts heartbeating for `config` over `client`.
    pub fn start(client: Client, config: MembershipConfig) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            // The client makes its member id (KIP-1082): a join retried after a lost answer is
            // the same member, never a second one.
            member_id: format!("{:016x}{:016x}", rill_rt::random_u64(), rill_rt::random_u64()),
            epoch: 0,
            assignment: None,
            owned: BTreeSet::new(),
            fenced: false,
            last_success: rill_rt::now(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            last_error: None,
            fatal: None,
            generation: 0,
        }));
        let wake = Arc::new(Notify::new());
        let changed = Arc::new(Notify::new());
        let task = rill_rt::spawn(run(client, config.clone(), shared.clone(), wake.clone(), changed.clone()));
        Self { config, shared, wake, changed, task }
    }

    /// Notified when the consumer has something to act on (see the field). A notification that
    /// comes while nobody waits is kept for the next wait, so none is missed.
    pub fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// Locks the shared state (a panic elsewhere leaves plain data behind: keep using it).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// Asks the task to heartbeat now (the consumer acted on an assignment).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The member id and epoch commits are made under (`None` before the first join answer).
    pub fn member(&self) -> Option<(String, i32)> {
        let s = self.lock();
        (!s.member_id.is_empty() && s.epoch > 0 && !s.fenced).then(|| (s.member_id.clone(), s.epoch))
    }

    /// Stops heartbeating and leaves the group: -1, or -2 for a static member (its partitions
    /// wait for it for the session timeout). Best effort: a member that cannot reach the
    /// coordinator is removed when its session times out.
    pub async fn leave(self, client: &Client) {
        self.task.abort();
        let (member_id, epoch) = {
            let s = self.lock();
            (s.member_id.clone(), s.epoch)
        };
        // A member still joining (epoch 0) may have joined already: leaving is harmless if not.
        if member_id.is_empty() || (epoch == 0 && self.config.instance_id.is_some()) {
            return;
        }
        let leave_epoch = if self.config.instance_id.is_some() { -2 } else { -1 };
        let req = ConsumerGroupHeartbeatRequest {
            group_id: self.config.group_id.clone(),
            member_id,
            member_epoch: leave_epoch,
            instance_id: self.config.instance_id.clone(),
            ..Default::default()
        };
        if let Err(e) = client.consumer_group_heartbeat(req).await {
            tracing::warn!(group = %self.config.group_id, error = %e, "leaving the group failed; the session will time out");
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Refusals a retry cannot fix.
fn is_fatal(code: Option<ErrorCode>) -> bool {
    matches!(
        code,
        Some(
            ErrorCode::InvalidRequest
                | ErrorCode::InvalidGroupId
                | ErrorCode::UnsupportedAssignor
                | ErrorCode::InvalidRegularExpression
                | ErrorCode::GroupMaxSizeReached
        )
    )
}

/// The heartbeat loop.
async fn run(
    client: Client,
    config: MembershipConfig,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    changed: Arc<Notify>,
) {
    let mut interval = DEFAULT_HEARTBEAT_INTERVAL;
    // The previous heartbeat was dropped for a report: the report is answered at once.
    let mut report = false;
    loop {
        let req = {
            let mut s = lock(&shared);
            if s.fenced || s.fatal.is_some() {
                // Wait for the consumer to drop what it owned before rejoining.
                None
            } else {
                let session_left = s.session_timeout.saturating_sub(s.last_success.elapsed());
                Some((request(&config, &mut s), s.generation, rill_rt::now(), s.session_timeout, session_left))
            }
        };
        let Some((mut req, generation, sent_at, session_timeout, session_left)) = req else {
            rill_rt::sleep(RETRY_AFTER).await;
            continue;
        };
        // A long poll: held by the coordinator until this member has something to do, by the
        // wire's rule (`rill_proto::heartbeat_hold`), asking for at most half of what is left of
        // the session (so its answer comes before this consumer would declare the membership
        // lost).
        let hold = rill_proto::heartbeat_hold(session_left / 2, interval, session_timeout);
        let held = req.member_epoch > 0 && !std::mem::take(&mut report) && !hold.is_zero();
        req.wait_ms = held.then(|| u32::try_from(hold.as_millis()).unwrap_or(u32::MAX));
        let heartbeat = client.consumer_group_heartbeat(req);
        tokio::pin!(heartbeat);
        let answer = loop {
            tokio::select! {
                answer = &mut heartbeat => break Some(answer),
                () = wake.notified() => {
                    // The consumer acted on an assignment: its report goes now, in place of
                    // the heartbeat the coordinator may be holding, whose answer is dropped —
                    // a lost answer, which the coordinator allows for when the next heartbeat
                    // reports what the member owns. One that would not (a newer assignment
                    // waits) keeps waiting for the held one.
                    if lock(&shared).assignment.is_none() {
                        report = true;
                        break None;
                    }
                }
            }
        };
        let Some(answer) = answer else { continue };
        let mut act = false;
        let wait = {
            let mut s = lock(&shared);
            if s.generation != generation {
                // The consumer declared this membership lost meanwhile: rejoin instead.
                Duration::ZERO
            } else {
                match answer {
                    Ok(resp) => {
                        let epoch_before = s.epoch;
                        s.member_id = resp.member_id;
                        s.epoch = resp.member_epoch;
                        // The session runs from when the request left, as the coordinator's runs from
                        // when it was heard: this consumer declares it lost no later than the
                        // coordinator removes it.
                        s.last_success = sent_at;
                        s.last_error = None;
                        if resp.session_timeout_ms > 0 {
                            s.session_timeout = Duration::from_millis(u64::from(resp.session_timeout_ms));
                        }
                        if resp.heartbeat_interval_ms > 0 {
                            interval = Duration::from_millis(u64::from(resp.heartbeat_interval_ms));
                        }
                        if let Some(assignment) = resp.assignment {
                            let assignment = from_wire(&assignment);
                            // The newest answer decides; one equal to what the consumer owns asks nothing.
                            s.assignment = (assignment != s.owned).then_some(assignment);
                            act = s.assignment.is_some();
                        }
                        let news = act || s.epoch != epoch_before;
                        // One heartbeat is always held at the coordinator: an answer with news
                        // came early, and the next goes at once, as after a report not held; a
                        // quiet one was held (next at once too) or came at once from a
                        // coordinator that holds none (next after the rest of the hold, so
                        // heartbeats start at most every hold).
                        if news || !held {
                            Duration::ZERO
                        } else {
                            hold.saturating_sub(sent_at.elapsed())
                        }
                    }
                    Err(e) => {
                        s.last_error = Some(e.to_string());
                        if matches!(e.code(), Some(ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId)) {
                            tracing::warn!(group = %config.group_id, member = %s.member_id, error = %e, "fenced: every partition is lost; rejoining");
                            s.fenced = true;
                            s.epoch = 0;
                            s.assignment = None;
                            act = true;
                        } else if is_fatal(e.code()) {
                            tracing::error!(group = %config.group_id, error = %e, "the group refused this member");
                            s.fatal = Some(e);
                            act = true;
                        } else {
                            tracing::debug!(group = %config.group_id, error = %e, "heartbeat failed; retrying");
                        }
                        RETRY_AFTER
                    }
                }
            }
        };
        if act {
            changed.notify_one();
        }
        if !wait.is_zero() {
            let _ = rill_rt::timeout(wait, wake.notified()).await;
        }
    }
}

/// The next heartbeat: a full join at epoch 0; otherwise the epoch and what the consumer owns
/// (left out while an assignment waits for the consumer to act on it).
fn request(config: &MembershipConfig, s: &mut Shared) -> ConsumerGroupHeartbeatRequest {
    let joining = s.epoch == 0;
    let owned = if joining {
        Some(OwnedPartitions::default())
    } else if s.assignment.is_some() {
        None
    } else {
        Some(to_wire(&s.owned))
    };
    ConsumerGroupHeartbeatRequest {
        group_id: config.group_id.clone(),
        member_id: s.member_id.clone(),
        member_epoch: s.epoch,
        instance_id: config.instance_id.clone(),
        rack_id: None,
        rebalance_timeout_ms: joining.then(|| u32::try_from(config.rebalance_timeout.as_millis()).unwrap_or(u32::MAX)),
        subscribed_topics: joining.then(|| SubscribedTopics { topics: config.topics.clone() }),
        subscribed_topic_regex: if joining { config.topic_pattern.clone() } else { None },
        server_assignor: if joining { config.server_assignor.clone() } else { None },
        rebalance_mode: if joining { config.rebalance_mode.clone() } else { None },
        owned,
        client_id: config.client_id.clone(),
        wait_ms: None,
    }
}

/// Partitions as the wire carries them.
pub(crate) fn to_wire(set: &BTreeSet<TopicPartition>) -> OwnedPartitions {
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for tp in set {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    OwnedPartitions {
        topics: by_topic
            .into_iter()
            .map(|(topic, partitions)| TopicPartitions { topic: topic.to_string(), partitions })
            .collect(),
    }
}

fn from_wire(owned: &OwnedPartitions) -> BTreeSet<TopicPartition> {
    owned.topics.iter().flat_map(|t| t.partitions.iter().map(|p| TopicPartition::new(t.topic.clone(), *p))).collect()
}

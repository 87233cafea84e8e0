//! [`Consumer`]: reads assigned partitions in order, with fetches pipelined in the background.
//!
//! ```text
//!  assign / seek ──► per-partition position
//!  poll ──► returns buffered records (round-robin over partitions)
//!        └► keeps one fetch in flight per unpaused partition while its buffer has room
//! ```
//!
//! Two modes:
//! * **assign**: the application chooses the partitions ([`Consumer::assign`]). With a
//!   `group_id`, a partition without a position starts at the offset the group committed for it
//!   (else at `start`), and [`Consumer::commit`] records the positions under the group (Kafka's
//!   "simple" consumer group: no membership).
//! * **subscribe**: the consumer joins `group_id` as a member ([`Consumer::subscribe`], KIP-848)
//!   and the group's coordinator decides its partitions (`crate::membership` heartbeats in the
//!   background). Inside `poll`, partitions the coordinator takes away are revoked — the
//!   [`RebalanceListener`] hears of them, their positions are committed, their buffered records
//!   dropped — and new ones start at the group's committed offsets. A consumer fenced by the
//!   coordinator, or with no successful heartbeat for the session timeout by its own clock,
//!   declares every partition **lost**: nothing is committed and none of their buffered records
//!   is handed out afterwards. Commits carry the member id and epoch, so a member that lost a
//!   partition can no longer commit it.
//!
//! Records of a partition are returned in
//! offset order, each once, without gaps (offsets are dense), unless the application seeks or
//! the partition's records below the position were deleted (retention, `DeleteRecords`): then
//! [`ConsumerConfig::auto_offset_reset`] decides, and [`Consumer::take_resets`] reports what was
//! skipped.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use rill_rt::sync::mpsc;
use rill_rt::JoinHandle;

use crate::client::backoff;
use crate::commits::{Committer, PendingCommit};
use crate::coordinator::{CommittedOffset, StableCommit};
use crate::error::{Error, Result};
use crate::membership::{Membership, MembershipConfig};
use crate::record::{FetchedPartition, IsolationLevel, OffsetSpec};
use crate::Client;
use rill_proto::common::ErrorCode;

/// A consumer's group and membership, for offsets committed in a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// The group id.
    pub group_id: String,
    /// The member id and member epoch of a subscribed consumer (`None` in assign mode).
    pub member: Option<(String, i32)>,
}

/// A topic partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic.
    pub topic: String,
    /// Partition number.
    pub partition: u32,
}

impl TopicPartition {
    /// `topic`/`partition`.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

/// A record as the consumer returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Offset.
    pub offset: u64,
    /// Create time (ms since the epoch).
    pub timestamp_ms: i64,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl ConsumerRecord {
    fn size_bytes(&self) -> usize {
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len)
    }
}

/// What a partition's buffer holds: a record to return, or the position past offsets that
/// returned nothing (control batches: transaction markers).
enum Buffered {
    Record(ConsumerRecord),
    Skip { next: u64 },
}

/// What a partition whose position is out of range does (Kafka's `auto.offset.reset`): its
/// records there were deleted (retention, `DeleteRecords`), or it is past the log's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// Continue at the log start offset, skipping what was deleted.
    Earliest,
    /// Continue at the high watermark, skipping everything stored.
    Latest,
    /// `poll` returns the `OFFSET_OUT_OF_RANGE` error; the application seeks.
    None,
}

/// A partition moved by [`ConsumerConfig::auto_offset_reset`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetResetEvent {
    /// The partition.
    pub tp: TopicPartition,
    /// The position that was out of range.
    pub from: u64,
    /// Where it continues.
    pub to: u64,
}

impl OffsetResetEvent {
    /// Offsets skipped forward (0 when the position moved back).
    pub fn skipped(&self) -> u64 {
        self.to.saturating_sub(self.from)
    }
}

/// Consumer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// The group whose committed offsets a partition without a position starts at, and under
    /// which [`Consumer::commit`] commits.
    pub group_id: Option<String>,
    /// Where a partition without a position (nor a committed offset) starts.
    pub start: OffsetSpec,
    /// What a partition whose position is out of range does.
    pub auto_offset_reset: OffsetReset,
    /// Long-poll time of each background fetch.
    pub fetch_max_wait: Duration,
    /// Bytes one fetch may return per partition.
    pub partition_max_bytes: u32,
    /// Stop fetching a partition while this many bytes of it are buffered.
    pub max_buffered_bytes_per_partition: usize,
    /// Most records one `poll` returns.
    pub max_poll_records: usize,
    /// With `Some(interval)`, `poll` commits the positions at most this often — only what
    /// earlier polls returned, so only work the application has finished when it polls again.
    pub auto_commit_interval: Option<Duration>,
    /// A static member's `group.instance.id` (subscribe mode).
    pub group_instance_id: Option<String>,
    /// How long a subscribed consumer may take to revoke partitions between polls (Kafka's
    /// `max.poll.interval.ms`).
    pub rebalance_timeout: Duration,
    /// The server-side assignor to ask for ("uniform" or "range"; `None`: the group's default).
    pub server_assignor: Option<String>,
    /// The rebalance mode to ask for ("cooperative" or "eager"; `None`: cooperative).
    pub rebalance_mode: Option<String>,
    /// The client's `client.id`, shown by `rill group describe`.
    pub client_id: String,
    /// Which records to read: `read_committed` (the default) returns only decided
    /// transactions' records and never an aborted one; `read_uncommitted` reads up to the high
    /// watermark. It also decides what "latest" means when a position is reset.
    pub isolation_level: IsolationLevel,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            group_id: None,
            start: OffsetSpec::Earliest,
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(500),
            partition_max_bytes: 1 << 20,
            max_buffered_bytes_per_partition: 4 << 20,
            max_poll_records: 500,
            auto_commit_interval: None,
            group_instance_id: None,
            rebalance_timeout: Duration::from_secs(300),
            server_assignor: None,
            rebalance_mode: None,
            client_id: "rill-client".to_string(),
            isolation_level: IsolationLevel::ReadCommitted,
        }
    }
}

/// What a subscribed consumer tells the application about its partitions. Called inside
/// [`Consumer::poll`], between the records it returns.
pub trait RebalanceListener: Send + Sync {
    /// The consumer now owns `partitions`; they start at the group's committed offsets.
    fn on_assigned(&mut self, _partitions: &[TopicPartition]) {}
    /// The consumer gives `partitions` up; their positions are committed right after this
    /// returns (an application processing in the background finishes them here).
    fn on_revoked(&mut self, _partitions: &[TopicPartition]) {}
    /// The consumer lost `partitions` without revoking them (fenced, or its session ran out):
    /// nothing was committed, their buffered records are dropped, and another member may own
    /// them already.
    fn on_lost(&mut self, _partitions: &[TopicPartition]) {}
}

/// A listener that ignores every event.
struct NoListener;

impl RebalanceListener for NoListener {}

#[derive(Default)]
struct PartitionState {
    /// Next offset `poll` returns.
    position: Option<u64>,
    /// Next offset to fetch (past what is buffered).
    fetch_position: u64,
    buffer: VecDeque<Buffered>,
    buffered_bytes: usize,
    paused: bool,
    in_flight: Option<JoinHandle<()>>,
    /// Bumped on seek; fetch results of an older epoch are dropped.
    epoch: u64,
    /// A fetch at this offset was out of range: reset before fetching again.
    out_of_range: Option<u64>,
}

/// A background lookup of where partitions without a position start.
struct Lookup {
    /// Each partition looked up, with the fetch epoch it was given when the lookup began: an
    /// answer applies only to a partition still at that epoch (not sought, not revoked since).
    partitions: Vec<(TopicPartition, u64)>,
    task: JoinHandle<()>,
}

/// Where a looked-up partition starts, sent by its [`Lookup`] as soon as it is known.
struct Found {
    tp: TopicPartition,
    epoch: u64,
    offset: Result<u64>,
}

/// What ended a `poll`'s wait.
enum Woke {
    Fetched(std::result::Result<Option<Fetched>, rill_rt::Elapsed>),
    Membership,
    Found(Option<Found>),
}

struct Fetched {
    tp: TopicPartition,
    epoch: u64,
    result: Result<FetchedPartition>,
}

/// An assign-mode consumer.
pub struct Consumer {
    client: Client,
    config: ConsumerConfig,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Each topic's id when this consumer first read it: fetches name it, so a topic deleted and
    /// re-created under the same name is reported (`UNKNOWN_TOPIC_ID`), never read as the old one.
    topic_ids: BTreeMap<String, Bytes>,
    results_tx: mpsc::UnboundedSender<Fetched>,
    results_rx: mpsc::UnboundedReceiver<Fetched>,
    next_turn: usize,
    resets: Vec<OffsetResetEvent>,
    /// The last fetch epoch handed out: consumer-wide, so a partition revoked and assigned
    /// again never takes a result of a fetch made before.
    fetch_epochs: u64,
    /// Subscribe mode: the group membership.
    membership: Option<Membership>,
    listener: Box<dyn RebalanceListener>,
    last_auto_commit: rill_rt::Instant,
    /// Background commits, started by the first one.
    committer: Option<Committer>,
    /// Lookups of where newly assigned partitions start, and their answers.
    lookups: Vec<Lookup>,
    found_tx: mpsc::UnboundedSender<Found>,
    found_rx: mpsc::UnboundedReceiver<Found>,
}

impl Drop for Consumer {
    /// A lookup of where partitions start is of no use once the consumer is gone.
    fn drop(&mut self) {
        for l in self.lookups.drain(..) {
            l.task.abort();
        }
    }
}

impl Consumer {
    /// A consumer over `client` with nothing assigned.
    pub fn new(client: Client, config: ConsumerConfig) -> Self {
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let (found_tx, found_rx) = mpsc::unbounded_channel();
        Self {
            client,
            config,
            partitions: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            results_tx,
            results_rx,
            next_turn: 0,
            resets: Vec::new(),
            fetch_epochs: 0,
            membership: None,
            listener: Box::new(NoListener),
            last_auto_commit: rill_rt::now(),
            committer: None,
            lookups: Vec::new(),
            found_tx,
            found_rx,
        }
    }

    /// Joins the consumer's group (`group_id`) as a member consuming `topics`: the group's
    /// coordinator assigns the partitions, and `poll` follows its decisions. Replaces any
    /// assignment made with [`Consumer::assign`].
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        if topics.is_empty() {
            return Err(Error::InvalidArgument("subscribe needs at least one topic".into()));
        }
        self.join(topics.iter().map(|t| t.to_string()).collect(), None)
    }

    /// Joins the consumer's group as a member consuming every topic whose whole name `pattern`
    /// (a regular expression, RE2 syntax) matches: `orders-.*` takes `orders-eu` but not
    /// `old-orders`. The coordinator resolves the pattern, so a topic created later that
    /// matches is assigned too. A pattern the coordinator cannot compile fails the membership
    /// with `INVALID_REGULAR_EXPRESSION`.
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        if pattern.is_empty() {
            return Err(Error::InvalidArgument("subscribe_pattern needs a pattern".into()));
        }
        self.join(Vec::new(), Some(pattern.to_string()))
    }

    fn join(&mut self, topics: Vec<String>, topic_pattern: Option<String>) -> Result<()> {
        let Some(group_id) = self.config.group_id.clone() else {
            return Err(Error::InvalidArgument("subscribe needs a consumer with a group_id".into()));
        };
        if self.membership.is_some() {
            return Err(Error::InvalidArgument("the consumer is subscribed already".into()));
        }
        if self.config.rebalance_timeout.is_zero() || self.config.rebalance_timeout > Duration::from_secs(3600) {
            return Err(Error::InvalidArgument(format!(
                "rebalance_timeout {:?} is out of range (1 ms to 1 h)",
                self.config.rebalance_timeout
            )));
        }
        self.assign([]);
        let config = MembershipConfig {
            group_id,
            topics,
            topic_pattern,
            instance_id: self.config.group_instance_id.clone(),
            rebalance_timeout: self.config.rebalance_timeout,
            server_assignor: self.config.server_assignor.clone(),
            rebalance_mode: self.config.rebalance_mode.clone(),
            client_id: self.config.client_id.clone(),
        };
        self.membership = Some(Membership::start(self.client.clone(), config));
        Ok(())
    }

    /// Sets what hears of assigned, revoked and lost partitions (subscribe mode).
    pub fn set_rebalance_listener(&mut self, listener: impl RebalanceListener + 'static) {
        self.listener = Box::new(listener);
    }

    /// The member id and epoch of a subscribed consumer, once it has joined.
    pub fn member(&self) -> Option<(String, i32)> {
        self.membership.as_ref().and_then(Membership::member)
    }

    /// What a transactional producer needs to commit this consumer's offsets in its transaction
    /// ([`crate::TransactionalProducer::send_offsets_to_transaction`]): the group and, when
    /// subscribed, the member id and epoch — so a consumer fenced out of the group cannot
    /// commit. An error without a group id, or while a subscribed consumer is not a member.
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata> {
        let (group_id, member) = self.committer_identity()?;
        Ok(ConsumerGroupMetadata { group_id, member })
    }

    /// The position of every assigned partition that has one: what to commit after processing
    /// what `poll` returned.
    pub fn positions_to_commit(&self) -> Vec<(TopicPartition, u64)> {
        self.positions()
    }

    /// Subscribe mode: drops every partition if the membership is lost — fenced by the
    /// coordinator, or no successful heartbeat for the session timeout by this consumer's clock.
    fn check_lost(&mut self) {
        let Some(m) = &self.membership else { return };
        let lost = {
            let mut s = m.lock();
            let expired = !s.owned.is_empty() && s.last_success.elapsed() > s.session_timeout;
            if !(s.fenced || expired) {
                return;
            }
            tracing::warn!(
                member = %s.member_id,
                fenced = s.fenced,
                last_error = ?s.last_error,
                "group membership lost: dropping every partition"
            );
            s.fenced = false;
            s.epoch = 0;
            s.assignment = None;
            s.owned.clear();
            s.last_success = rill_rt::now();
            // An answer to a heartbeat already on its way belongs to the lost membership.
            s.generation += 1;
            self.partitions.keys().cloned().collect::<Vec<_>>()
        };
        m.wake();
        self.assign([]);
        if !lost.is_empty() {
            self.listener.on_lost(&lost);
        }
    }

    /// Subscribe mode: acts on the newest assignment — revokes (commits, then releases) what it
    /// leaves out and takes what it adds — and has the next heartbeat report it.
    async fn follow_assignment(&mut self) -> Result<()> {
        let Some(m) = &self.membership else { return Ok(()) };
        let (target, fatal) = {
            let s = m.lock();
            (s.assignment.clone(), s.fatal.clone())
        };
        if let Some(e) = fatal {
            return Err(e);
        }
        let Some(target) = target else { return Ok(()) };
        let current: BTreeSet<TopicPartition> = self.partitions.keys().cloned().collect();
        let revoked: Vec<TopicPartition> = current.difference(&target).cloned().collect();
        let added: Vec<TopicPartition> = target.difference(&current).cloned().collect();
        if !revoked.is_empty() {
            self.listener.on_revoked(&revoked);
            let positions: Vec<(TopicPartition, u64)> =
                revoked.iter().filter_map(|tp| self.position(tp).map(|p| (tp.clone(), p))).collect();
            if let Err(e) = self.commit_offsets(positions).await {
                tracing::warn!(error = %e, "committing revoked partitions failed; the next owner starts at the last commit");
            }
        }
        let keep: Vec<TopicPartition> = target.iter().cloned().collect();
        self.assign(keep);
        if !added.is_empty() {
            self.listener.on_assigned(&added);
        }
        if let Some(m) = &self.membership {
            let mut s = m.lock();
            // Only now may heartbeats report it: the consumer owns exactly this. A newer
            // assignment that arrived meanwhile stays for the next poll.
            if s.assignment.as_ref() == Some(&target) {
                s.assignment = None;
            }
            s.owned = target;
        }
        if let Some(m) = &self.membership {
            m.wake();
        }
        Ok(())
    }

    /// Commits the positions if `auto_commit_interval` has passed since the last commit.
    async fn auto_commit(&mut self) {
        let Some(every) = self.config.auto_commit_interval else { return };
        if self.last_auto_commit.elapsed() < every {
            return;
        }
        self.last_auto_commit = rill_rt::now();
        if let Err(e) = self.commit().await {
            tracing::warn!(error = %e, "auto-commit failed");
        }
    }

    /// Replaces the assignment. Partitions kept keep their positions.
    pub fn assign(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let wanted: Vec<TopicPartition> = partitions.into_iter().collect();
        let dropped: Vec<TopicPartition> = self.partitions.keys().filter(|tp| !wanted.contains(tp)).cloned().collect();
        for tp in dropped {
            if let Some(st) = self.partitions.remove(&tp) {
                if let Some(h) = st.in_flight {
                    h.abort();
                }
            }
        }
        for tp in wanted {
            self.partitions.entry(tp).or_default();
        }
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// The next offset `poll` returns for `tp`, once known.
    pub fn position(&self, tp: &TopicPartition) -> Option<u64> {
        self.partitions.get(tp).and_then(|s| s.position)
    }

    /// Moves `tp` to `offset`, dropping anything buffered.
    pub fn seek(&mut self, tp: &TopicPartition, offset: u64) -> Result<()> {
        self.fetch_epochs += 1;
        let epoch = self.fetch_epochs;
        let st = self
            .partitions
            .get_mut(tp)
            .ok_or_else(|| Error::InvalidArgument(format!("{}/{} is not assigned", tp.topic, tp.partition)))?;
        if let Some(h) = st.in_flight.take() {
            h.abort();
        }
        st.epoch = epoch;
        st.out_of_range = None;
        st.position = Some(offset);
        st.fetch_position = offset;
        st.buffer.clear();
        st.buffered_bytes = 0;
        Ok(())
    }

    /// Moves `tp` to the earliest or latest offset, or the first offset at or after a time.
    pub async fn seek_to(&mut self, tp: &TopicPartition, spec: OffsetSpec) -> Result<u64> {
        let offset = self.client.list_offset_at(&tp.topic, tp.partition, spec, self.config.isolation_level).await?;
        self.seek(tp, offset)?;
        Ok(offset)
    }

    /// Stops returning and fetching `tps` until resumed (what is buffered is kept).
    pub fn pause(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(st) = self.partitions.get_mut(tp) {
                st.paused = true;
            }
        }
    }

    /// Resumes paused partitions.
    pub fn resume(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(st) = self.partitions.get_mut(tp) {
                st.paused = false;
            }
        }
    }

    /// Returns available records (at most `max_poll_records`), waiting up to `timeout` for some.
    /// Errors that a retry can fix (a leader moving, a lost connection) are retried in the
    /// background; others (an offset out of range, a deleted topic) are returned.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        // What earlier polls returned has been processed once the application polls again.
        self.auto_commit().await;
        let deadline = rill_rt::now() + timeout;
        loop {
            self.check_lost();
            self.follow_assignment().await?;
            self.resolve_positions().await?;
            self.reset_out_of_range().await?;
            self.start_fetches();
            self.check_lost();
            let out = self.drain();
            if !out.is_empty() {
                return Ok(out);
            }
            let left = deadline.saturating_duration_since(rill_rt::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            // A new assignment (or a fencing) ends the wait too: a member given partitions
            // starts fetching them now, not when the poll times out.
            let changed = self.membership.as_ref().map(|m| m.changed());
            let membership_changed = async {
                match &changed {
                    Some(n) => n.notified().await,
                    None => std::future::pending::<()>().await,
                }
            };
            // Biased: the same branch wins a tie in every run (the simulation replays exactly).
            // Where a new partition starts ends it too: it can be fetched now.
            let woke = tokio::select! {
                biased;
                f = rill_rt::timeout(left, self.results_rx.recv()) => Woke::Fetched(f),
                () = membership_changed => Woke::Membership,
                found = self.found_rx.recv() => Woke::Found(found),
            };
            match woke {
                Woke::Fetched(Ok(Some(f))) => self.apply(f)?,
                Woke::Fetched(Ok(None) | Err(_)) => return Ok(Vec::new()),
                Woke::Membership => continue,
                Woke::Found(found) => {
                    if let Some(found) = found {
                        self.take_found(found)?;
                    }
                    continue;
                }
            }
            while let Ok(f) = self.results_rx.try_recv() {
                self.apply(f)?;
            }
        }
    }

    /// The partitions [`ConsumerConfig::auto_offset_reset`] moved since the last call, oldest
    /// first (for the application to report records it will never see).
    pub fn take_resets(&mut self) -> Vec<OffsetResetEvent> {
        std::mem::take(&mut self.resets)
    }

    /// Applies [`ConsumerConfig::auto_offset_reset`] to partitions whose fetch was out of range.
    async fn reset_out_of_range(&mut self) -> Result<()> {
        let pending: Vec<(TopicPartition, u64)> =
            self.partitions.iter().filter_map(|(tp, st)| st.out_of_range.map(|o| (tp.clone(), o))).collect();
        for (tp, from) in pending {
            let spec = match self.config.auto_offset_reset {
                OffsetReset::Earliest => OffsetSpec::Earliest,
                OffsetReset::Latest => OffsetSpec::Latest,
                OffsetReset::None => unreachable_reset(&tp, from)?,
            };
            let to = self.client.list_offset_at(&tp.topic, tp.partition, spec, self.config.isolation_level).await?;
            self.seek(&tp, to)?;
            tracing::warn!(topic = %tp.topic, partition = tp.partition, from, to, "offset out of range; position reset");
            self.resets.push(OffsetResetEvent { tp, from, to });
        }
        Ok(())
    }

    /// Waits for background commits already asked for; with auto-commit, commits the
    /// positions (everything earlier polls returned); leaves the
    /// group (subscribe mode: at once, so its partitions are reassigned; a static member's wait
    /// for it for the session timeout); stops background fetches. Without auto-commit the
    /// application commits what it finished before calling this.
    pub async fn shutdown(mut self) -> Result<()> {
        // Background commits asked for before go out first, while this is still a member.
        if let Some(c) = &self.committer {
            c.drain().await;
        }
        let auto_commit = self.config.group_id.is_some() && self.config.auto_commit_interval.is_some();
        let committed = if auto_commit { self.commit().await } else { Ok(()) };
        if let Some(m) = self.membership.take() {
            let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
            if !owned.is_empty() {
                self.listener.on_revoked(&owned);
            }
            m.leave(&self.client).await;
        }
        self.close();
        committed
    }

    /// Stops background fetches (and heartbeats, without leaving: the group notices when the
    /// session times out).
    pub fn close(mut self) {
        for st in self.partitions.values_mut() {
            if let Some(h) = st.in_flight.take() {
                h.abort();
            }
        }
        for l in self.lookups.drain(..) {
            l.task.abort();
        }
    }

    /// Gives partitions without a position the offsets background lookups found, and starts a
    /// lookup for those no lookup is on. In the background because at `read_committed` a
    /// lookup waits out a transaction's pending offset commit (KIP-447), which may take as long
    /// as the transaction: `poll` still returns by its timeout, and each partition is fetched as
    /// soon as its own start is known — one whose offsets are pending holds up no other.
    async fn resolve_positions(&mut self) -> Result<()> {
        let topics: Vec<String> = self.partitions.keys().map(|tp| tp.topic.clone()).collect();
        for topic in topics {
            if !self.topic_ids.contains_key(&topic) {
                let id = self.client.topic_id(&topic).await?;
                self.topic_ids.insert(topic, id);
            }
        }
        // Which lookups had finished before their answers are drained: a finished task has sent
        // everything it will, so dropping it below loses no answer.
        let finished: Vec<bool> = self.lookups.iter().map(|l| l.task.is_finished()).collect();
        while let Ok(found) = self.found_rx.try_recv() {
            self.take_found(found)?;
        }
        // Drop finished lookups; stop those no partition waits on any more (revoked, sought).
        let partitions = &self.partitions;
        let waits = |tp: &TopicPartition, epoch: u64| {
            partitions.get(tp).is_some_and(|st| st.position.is_none() && st.epoch == epoch)
        };
        let mut finished = finished.into_iter();
        self.lookups.retain(|l| {
            let done = finished.next().unwrap_or(false);
            let live = !done && l.partitions.iter().any(|(tp, e)| waits(tp, *e));
            if !live {
                l.task.abort();
            }
            live
        });
        let covered: BTreeSet<&TopicPartition> = self
            .lookups
            .iter()
            .flat_map(|l| l.partitions.iter().filter(|(tp, e)| waits(tp, *e)).map(|(tp, _)| tp))
            .collect();
        let wanted: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(tp, st)| st.position.is_none() && !covered.contains(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let mut looked_up = Vec::with_capacity(wanted.len());
        for tp in wanted {
            if let Some(st) = self.partitions.get_mut(&tp) {
                self.fetch_epochs += 1;
                st.epoch = self.fetch_epochs;
                looked_up.push((tp, st.epoch));
            }
        }
        let lookup = PositionLookup::new(&self.client, &self.config, false);
        let (partitions, tx) = (looked_up.clone(), self.found_tx.clone());
        let task = rill_rt::spawn(async move { lookup.send_positions(partitions, tx).await });
        self.lookups.push(Lookup { partitions: looked_up, task });
        Ok(())
    }

    /// Applies a lookup's answer for a partition still at the epoch it was looked up at. A
    /// failed lookup is returned once, and the partition is looked up afresh by the next call
    /// (a new epoch takes it out of the lookup still running for others).
    fn take_found(&mut self, found: Found) -> Result<()> {
        let Some(st) = self.partitions.get_mut(&found.tp) else { return Ok(()) };
        if st.position.is_some() || st.epoch != found.epoch {
            return Ok(());
        }
        match found.offset {
            Ok(offset) => self.seek(&found.tp, offset),
            Err(e) => {
                self.fetch_epochs += 1;
                st.epoch = self.fetch_epochs;
                Err(e)
            }
        }
    }

    /// Moves every assigned partition back to the group's committed offset, or to
    /// [`ConsumerConfig::start`] where the group committed none: where `poll` starts a partition
    /// it takes over. After an aborted transaction this reads again everything since the last
    /// committed transaction (what the aborted one had read, its offsets included, is undone).
    /// Buffered records are dropped.
    /// Always the *stable* committed offsets, whatever the isolation level: the previous
    /// transaction's offsets may still be pending, and the offsets before them would read its
    /// input again.
    pub async fn seek_to_committed(&mut self) -> Result<()> {
        let assigned = self.assignment();
        self.seek_to_committed_of(assigned, true).await
    }

    async fn seek_to_committed_of(&mut self, partitions: Vec<TopicPartition>, stable: bool) -> Result<()> {
        let found = PositionLookup::new(&self.client, &self.config, stable).positions(partitions).await?;
        for (tp, offset) in found {
            self.seek(&tp, offset)?;
        }
        Ok(())
    }

    /// Commits the position of every assigned partition that has one (the next offset `poll`
    /// returns) under the consumer's group. Call it after processing what `poll` returned.
    pub async fn commit(&self) -> Result<()> {
        self.commit_offsets(self.positions()).await
    }

    /// Commits `offsets` (per partition, the next offset to read) under the consumer's group:
    /// for an application that processed only part of what `poll` returned.
    /// A subscribed consumer commits as its member, at its epoch, and only partitions it owns.
    /// Background commits asked for before this one land first.
    pub async fn commit_offsets(&self, offsets: impl IntoIterator<Item = (TopicPartition, u64)>) -> Result<()> {
        let offsets: Vec<(TopicPartition, u64, String)> =
            offsets.into_iter().map(|(tp, o)| (tp, o, String::new())).collect();
        if self.config.group_id.is_some() && offsets.is_empty() {
            return Ok(());
        }
        let (group, member) = self.committer_identity()?;
        if let Some(c) = &self.committer {
            c.drain().await;
        }
        let member = member.as_ref().map(|(id, epoch)| (id.as_str(), *epoch));
        self.client.commit_offsets_as(&group, member, &offsets).await
    }

    /// Like [`Consumer::commit`], in the background: returns at once, with a [`PendingCommit`]
    /// to await for the outcome (or to drop). The positions, and the member epoch a subscribed
    /// consumer commits at, are taken now. A consumer's commits — background or not — land in
    /// the order they were made, so an earlier one never overwrites a later one.
    pub fn commit_async(&mut self) -> PendingCommit {
        let positions = self.positions();
        self.commit_offsets_async(positions)
    }

    /// Like [`Consumer::commit_offsets`], in the background (see [`Consumer::commit_async`]).
    pub fn commit_offsets_async(&mut self, offsets: impl IntoIterator<Item = (TopicPartition, u64)>) -> PendingCommit {
        let offsets: Vec<(TopicPartition, u64, String)> =
            offsets.into_iter().map(|(tp, o)| (tp, o, String::new())).collect();
        if self.config.group_id.is_some() && offsets.is_empty() {
            return PendingCommit::done();
        }
        let (group, member) = match self.committer_identity() {
            Ok(who) => who,
            Err(e) => return PendingCommit::failed(e),
        };
        let client = self.client.clone();
        self.committer.get_or_insert_with(|| Committer::start(client)).submit(group, member, offsets)
    }

    /// Every assigned partition's position (the next offset `poll` returns), where known.
    fn positions(&self) -> Vec<(TopicPartition, u64)> {
        let ahead = rill_rt::mutation::active(rill_rt::mutation::Mutation::CommitBeforeProcess);
        self.partitions
            .iter()
            .filter_map(|(tp, st)| st.position.map(|p| (tp.clone(), if ahead { st.fetch_position.max(p) } else { p })))
            .collect()
    }

    /// The group this consumer commits to, and the member (id, epoch) it commits as — `None`
    /// for an assign-mode consumer.
    fn committer_identity(&self) -> Result<(String, Option<(String, i32)>)> {
        let Some(group) = &self.config.group_id else {
            return Err(Error::InvalidArgument("commit needs a consumer with a group_id".into()));
        };
        match &self.membership {
            None => Ok((group.clone(), None)),
            Some(m) => match m.member() {
                Some(member) => Ok((group.clone(), Some(member))),
                None => Err(Error::InvalidArgument(
                    "not a member of the group (joining, or lost): nothing to commit".into(),
                )),
            },
        }
    }

    fn start_fetches(&mut self) {
        for (tp, st) in self.partitions.iter_mut() {
            // A partition without a position waits for its lookup (`resolve_positions`).
            if st.position.is_none()
                || st.paused
                || st.in_flight.is_some()
                || st.out_of_range.is_some()
                || st.buffered_bytes >= self.config.max_buffered_bytes_per_partition
            {
                continue;
            }
            let client = self.client.clone();
            let tx = self.results_tx.clone();
            let (tp, epoch, offset) = (tp.clone(), st.epoch, st.fetch_position);
            let (wait, max_bytes) = (self.config.fetch_max_wait, self.config.partition_max_bytes);
            let isolation = self.config.isolation_level;
            let topic_id = self.topic_ids.get(&tp.topic).cloned().unwrap_or_default();
            st.in_flight = Some(rill_rt::spawn(async move {
                let result =
                    client.fetch_pinned(&tp.topic, topic_id, tp.partition, offset, wait, max_bytes, isolation).await;
                let _ = tx.send(Fetched { tp, epoch, result });
            }));
        }
    }

    fn apply(&mut self, f: Fetched) -> Result<()> {
        let Some(st) = self.partitions.get_mut(&f.tp) else { return Ok(()) };
        if st.epoch != f.epoch {
            return Ok(());
        }
        st.in_flight = None;
        match f.result {
            Ok(fetched) => {
                for r in fetched.records {
                    if r.offset < st.fetch_position {
                        continue;
                    }
                    st.fetch_position = r.offset + 1;
                    let record = ConsumerRecord {
                        topic: f.tp.topic.clone(),
                        partition: f.tp.partition,
                        offset: r.offset,
                        timestamp_ms: r.timestamp_ms,
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                    };
                    st.buffered_bytes += record.size_bytes();
                    st.buffer.push_back(Buffered::Record(record));
                }
                // Offsets past the last record that returned nothing (control batches).
                if fetched.next_offset > st.fetch_position {
                    st.fetch_position = fetched.next_offset;
                    st.buffer.push_back(Buffered::Skip { next: fetched.next_offset });
                }
                Ok(())
            }
            Err(e)
                if e.code() == Some(ErrorCode::OffsetOutOfRange)
                    && self.config.auto_offset_reset != OffsetReset::None =>
            {
                // What was fetched before it is still returned; then the position is reset.
                st.out_of_range = Some(st.fetch_position);
                Ok(())
            }
            Err(e) if e.code().is_none() || e.is_retriable_without_effect() => {
                tracing::debug!(topic = %f.tp.topic, partition = f.tp.partition, error = %e, "fetch failed; retrying");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Takes buffered records from unpaused partitions, round-robin, up to `max_poll_records`.
    fn drain(&mut self) -> Vec<ConsumerRecord> {
        let mut out = Vec::new();
        let keys: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if keys.is_empty() {
            return out;
        }
        for i in 0..keys.len() {
            let tp = &keys[(self.next_turn + i) % keys.len()];
            let Some(st) = self.partitions.get_mut(tp) else { continue };
            if st.paused {
                continue;
            }
            while out.len() < self.config.max_poll_records {
                match st.buffer.pop_front() {
                    None => break,
                    Some(Buffered::Skip { next }) => st.position = Some(next),
                    Some(Buffered::Record(r)) => {
                        st.buffered_bytes = st.buffered_bytes.saturating_sub(r.size_bytes());
                        st.position = Some(r.offset + 1);
                        out.push(r);
                    }
                }
            }
        }
        self.next_turn = self.next_turn.wrapping_add(1);
        out
    }
}

/// Where partitions a consumer takes over start: the group's committed offset, else
/// [`ConsumerConfig::start`]. Owns what it needs, so it can run in a background task.
struct PositionLookup {
    client: Client,
    group: Option<String>,
    start: OffsetSpec,
    isolation: IsolationLevel,
    /// Wait out a transaction's pending commit of the offsets (KIP-447).
    stable: bool,
}

impl PositionLookup {
    /// A lookup for `config`'s consumer; `stable` asks for the stable committed offsets whatever
    /// the isolation level (a `read_committed` consumer always waits them out, rather than start
    /// from an offset about to move).
    fn new(client: &Client, config: &ConsumerConfig, stable: bool) -> Self {
        Self {
            client: client.clone(),
            group: config.group_id.clone(),
            start: config.start,
            isolation: config.isolation_level,
            stable: stable || config.isolation_level == IsolationLevel::ReadCommitted,
        }
    }

    async fn positions(&self, partitions: Vec<TopicPartition>) -> Result<Vec<(TopicPartition, u64)>> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let committed = match &self.group {
            Some(group) if self.stable => self.client.stable_committed_offsets(group, &partitions).await?,
            Some(group) => self.client.committed_offsets(group, &partitions).await?,
            None => Default::default(),
        };
        let mut out = Vec::with_capacity(partitions.len());
        for tp in partitions {
            let offset = self.start_of(&tp, committed.get(&tp).cloned().flatten()).await?;
            out.push((tp, offset));
        }
        Ok(out)
    }

    /// Where `tp` starts: at `committed`, else at [`ConsumerConfig::start`].
    async fn start_of(&self, tp: &TopicPartition, committed: Option<CommittedOffset>) -> Result<u64> {
        match committed {
            Some(c) => Ok(c.offset),
            None => self.client.list_offset_at(&tp.topic, tp.partition, self.start, self.isolation).await,
        }
    }

    /// Sends where each of `partitions` (with the epoch it was looked up at) starts as soon as
    /// it is known. A partition whose offsets a transaction holds pending is asked about again,
    /// with backoff, until the transaction ends (by its timeout at the latest); the others are
    /// answered at once. A failed offset fetch is sent once, for one partition, and ends the
    /// lookup.
    async fn send_positions(&self, partitions: Vec<(TopicPartition, u64)>, tx: mpsc::UnboundedSender<Found>) {
        let mut waiting = partitions;
        let mut attempt = 0;
        while !waiting.is_empty() {
            let tps: Vec<TopicPartition> = waiting.iter().map(|(tp, _)| tp.clone()).collect();
            let answers = match &self.group {
                Some(group) if self.stable => self.client.stable_committed_offsets_once(group, &tps).await,
                Some(group) => self
                    .client
                    .committed_offsets(group, &tps)
                    .await
                    .map(|c| c.into_iter().map(|(tp, c)| (tp, StableCommit::Settled(c))).collect()),
                None => Ok(BTreeMap::new()),
            };
            let answers = match answers {
                Ok(a) => a,
                Err(e) => {
                    // Reported once, for one partition; the task ends, and the consumer looks
                    // the others up again.
                    if let Some((tp, epoch)) = waiting.into_iter().next() {
                        let _ = tx.send(Found { tp, epoch, offset: Err(e) });
                    }
                    return;
                }
            };
            let mut pending = Vec::new();
            let mut settled = Vec::new();
            for (tp, epoch) in waiting {
                match answers.get(&tp) {
                    Some(StableCommit::Pending(_)) => pending.push((tp, epoch)),
                    Some(StableCommit::Settled(c)) => settled.push((tp, epoch, c.clone())),
                    None => settled.push((tp, epoch, None)),
                }
            }
            // Concurrently: one partition's slow offset lookup holds up no other's answer.
            futures::future::join_all(settled.into_iter().map(|(tp, epoch, committed)| {
                let tx = &tx;
                async move {
                    let offset = self.start_of(&tp, committed).await;
                    let _ = tx.send(Found { tp, epoch, offset });
                }
            }))
            .await;
            waiting = pending;
            if !waiting.is_empty() {
                attempt += 1;
                tracing::debug!(partitions = waiting.len(), "committed offsets still pending; asking again");
                rill_rt::sleep(backoff(attempt)).await;
            }
        }
    }
}

/// With [`OffsetReset::None`] no partition is marked out of range (the error is returned from
/// `poll` instead); this answers the impossible case without panicking.
fn unreachable_reset(tp: &TopicPartition, from: u64) -> Result<OffsetSpec> {
    Err(Error::Server {
        code: ErrorCode::OffsetOutOfRange,
        message: format!("{}/{}: offset {from} is out of range and auto_offset_reset is none", tp.topic, tp.partition),
    })
}

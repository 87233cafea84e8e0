//! Requests served by a coordinator: a consumer group's committed offsets, a transactional
//! producer's id and epoch. The coordinator of an id is found with `Admin.FindCoordinator`
//! (cached); `NOT_COORDINATOR` follows its hint, `COORDINATOR_LOAD_IN_PROGRESS` and
//! `COORDINATOR_NOT_AVAILABLE` are retried with backoff within the client's retry budget.

use std::collections::BTreeMap;
use std::time::Duration;

use rill_proto::admin::{CoordinatorKind, FindCoordinatorRequest};
use rill_proto::common::{ErrorCode, LeaderHint};
use rill_proto::groups::groups_client::GroupsClient;
use rill_proto::groups::{
    CommitOffsetsRequest, CommitOffsetsResponse, CommitPartition, CommitTopic, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, DeleteGroupRequest, DeleteGroupResponse, DeleteOffsetsRequest,
    DeleteOffsetsResponse, DescribeGroupRequest, DescribeGroupResponse, FetchOffsetsRequest, FetchOffsetsTopic,
    GroupHeartbeatRequest, GroupHeartbeatResponse, GroupListing, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, SyncGroupRequest, SyncGroupResponse,
    TxnCommitOffsetsRequest,
};
use rill_proto::records::InitProducerIdRequest;

use crate::client::backoff_up_to;
use crate::consumer::TopicPartition;
use crate::error::{self, Error, Result};
use crate::Client;
use tonic::transport::Channel;

/// Longest pause between attempts at a coordinator (the general retries pause up to 1 s). A
/// coordinator moves with its partition's leadership, about a second after its node dies;
/// asking again at least this often puts a member's next attempt within this of the new
/// coordinator serving — with the 1 s cap its next commit came a median 360 ms (up to 790 ms)
/// after (docs/benchmarks.md, "group-failover"). A lookup is cheap: any node answers it from
/// its metadata.
const COORDINATOR_MAX_BACKOFF: Duration = Duration::from_millis(250);

/// A partition's committed offset as a consumer that requires stable offsets is answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StableCommit {
    /// The committed offset (`None`: the group committed none).
    Settled(Option<CommittedOffset>),
    /// A transaction holds a commit of it pending (`UNSTABLE_OFFSET_COMMIT`; the server's
    /// message).
    Pending(String),
}

impl StableCommit {
    /// The committed offset, or `UNSTABLE_OFFSET_COMMIT` while it is pending.
    fn settled(self) -> Result<Option<CommittedOffset>> {
        match self {
            Self::Settled(c) => Ok(c),
            Self::Pending(message) => Err(Error::Server { code: ErrorCode::UnstableOffsetCommit, message }),
        }
    }
}

/// The internal topic holding consumer groups' offsets and membership.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The internal topic whose partitions' leaders coordinate transactional ids.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Which coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Coordinator {
    /// A consumer group's.
    Group,
    /// A transactional id's.
    Transaction,
}

impl Coordinator {
    fn wire(self) -> i32 {
        match self {
            Self::Group => CoordinatorKind::Group as i32,
            Self::Transaction => CoordinatorKind::Transaction as i32,
        }
    }
}

/// An offset a consumer group committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset to read.
    pub offset: u64,
    /// What was stored with it.
    pub metadata: String,
    /// When the coordinator recorded it (ms since the epoch).
    pub commit_time_ms: i64,
}

/// What one coordinator call returned: an answer, a whole-request error with the coordinator's
/// address when the node was not it.
pub(crate) type Answer<T> = std::result::Result<T, (Error, Option<LeaderHint>)>;

pub(crate) fn check(code: i32, message: String, hint: Option<LeaderHint>) -> Answer<()> {
    if code == ErrorCode::None as i32 {
        Ok(())
    } else {
        Err((error::server(code, message), hint))
    }
}

/// A `Groups` answer's whole-request status: its code, message and coordinator hint.
trait GroupsStatus {
    /// The answer's whole-request code, message and coordinator hint.
    fn status(&self) -> (i32, String, Option<LeaderHint>);
}

macro_rules! groups_status {
    ($($answer:ty),*) => {
        $(impl GroupsStatus for $answer {
            fn status(&self) -> (i32, String, Option<LeaderHint>) {
                (self.error_code, self.error_message.clone(), self.coordinator.clone())
            }
        })*
    };
}

groups_status!(
    ConsumerGroupHeartbeatResponse,
    DescribeGroupResponse,
    DeleteGroupResponse,
    DeleteOffsetsResponse,
    JoinGroupResponse,
    SyncGroupResponse,
    GroupHeartbeatResponse,
    LeaveGroupResponse
);

/// A commit's offsets by topic, as the wire carries them.
fn commit_topics(offsets: &[(TopicPartition, u64, String)]) -> Result<Vec<CommitTopic>> {
    let mut by_topic: BTreeMap<&str, Vec<CommitPartition>> = BTreeMap::new();
    for (tp, offset, metadata) in offsets {
        let offset =
            i64::try_from(*offset).map_err(|_| Error::InvalidArgument(format!("offset {offset} is too large")))?;
        by_topic.entry(&tp.topic).or_default().push(CommitPartition {
            partition: tp.partition,
            offset,
            metadata: metadata.clone(),
        });
    }
    Ok(by_topic.into_iter().map(|(topic, partitions)| CommitTopic { topic: topic.to_string(), partitions }).collect())
}

/// A commit's answer: the whole request's error, or the first partition's.
fn commit_answer(resp: CommitOffsetsResponse) -> Result<Answer<()>> {
    if let Err(f) = check(resp.error_code, resp.error_message, resp.coordinator) {
        return Ok(Err(f));
    }
    for t in resp.topics {
        for p in t.partitions {
            if let Err((e, _)) = check(p.error_code, p.error_message, None) {
                return Err(Error::Server {
                    code: e.code().unwrap_or(ErrorCode::UnknownServerError),
                    message: format!("{}/{}: {e}", t.topic, p.partition),
                });
            }
        }
    }
    Ok(Ok(()))
}

/// `partitions` by topic, as `FetchOffsets` and `DeleteOffsets` name them.
fn by_topic(partitions: &[TopicPartition]) -> Vec<FetchOffsetsTopic> {
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    by_topic.into_iter().map(|(topic, partitions)| FetchOffsetsTopic { topic: topic.to_string(), partitions }).collect()
}

/// Awaits one call to `addr` for at most `wait`; no answer and gRPC failures are transport errors.
pub(crate) async fn answer_within<T>(
    addr: &str,
    wait: std::time::Duration,
    call: impl std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    rill_rt::timeout(wait, call)
        .await
        .map_err(|_| Error::Transport(format!("no answer from {addr} within {wait:?}")))?
        .map_err(error::status)
        .map(tonic::Response::into_inner)
}

impl Client {
    /// The node coordinating `key` (a group id or a transactional id): `(node id, address)`.
    pub async fn find_coordinator(&self, kind: Coordinator, key: &str) -> Result<(u64, String)> {
        let req = FindCoordinatorRequest { kind: kind.wire(), key: key.to_string() };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.find_coordinator(req).await }
            })
            .await?;
        if resp.error_code != ErrorCode::None as i32 {
            return Err(error::server(resp.error_code, resp.error_message));
        }
        let c = resp.coordinator.ok_or_else(|| Error::Transport("the answer names no coordinator".into()))?;
        Ok((c.node_id, c.address))
    }

    /// Runs `call` at `key`'s coordinator, following `NOT_COORDINATOR` hints and retrying
    /// while the coordinator is loading or unavailable, within the retry budget.
    pub(crate) async fn at_coordinator<T, F, Fut>(&self, kind: Coordinator, key: &str, call: F) -> Result<T>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<Answer<T>>>,
    {
        let deadline = rill_rt::now() + self.options().retry_budget;
        let mut attempt = 0;
        let mut addr: Option<String> = self.cached_coordinator(kind, key);
        loop {
            let target = match addr.take() {
                Some(a) => Ok(a),
                None => self.find_coordinator(kind, key).await.map(|(_, a)| a),
            };
            let asked = target.as_ref().ok().cloned();
            let outcome = match target {
                Ok(a) => call(a).await,
                Err(e) => Ok(Err((e, None))),
            };
            let (e, hint) = match outcome {
                Ok(Ok(v)) => {
                    self.remember_coordinator(kind, key, asked);
                    return Ok(v);
                }
                Ok(Err(f)) => f,
                Err(e) => (e, None),
            };
            self.remember_coordinator(kind, key, if decided_by_the_coordinator(&e) { asked } else { None });
            if !coordinator_retriable(&e) || rill_rt::now() >= deadline {
                return Err(e);
            }
            attempt += 1;
            tracing::debug!(key, attempt, error = %e, "coordinator request retried");
            match hint.filter(|h| !h.address.is_empty()) {
                Some(h) => addr = Some(h.address),
                None => rill_rt::sleep(backoff_up_to(attempt, COORDINATOR_MAX_BACKOFF)).await,
            }
        }
    }

    /// Commits `offsets` for `group`: per partition, the next offset to read and free metadata
    /// (without group membership: Kafka's "simple" consumer group). Fails on the first partition
    /// the coordinator refused.
    pub async fn commit_offsets(&self, group: &str, offsets: &[(TopicPartition, u64, String)]) -> Result<()> {
        self.commit_offsets_as(group, None, offsets).await
    }

    /// Commits `offsets` for `group` as member `member` (id, member epoch) of a consumer group,
    /// or without membership (`None`). A member may commit only partitions it owns:
    /// `STALE_MEMBER_EPOCH` otherwise, `UNKNOWN_MEMBER_ID` / `FENCED_MEMBER_EPOCH` once it is no
    /// longer a member.
    pub async fn commit_offsets_as(
        &self,
        group: &str,
        member: Option<(&str, i32)>,
        offsets: &[(TopicPartition, u64, String)],
    ) -> Result<()> {
        let req = CommitOffsetsRequest {
            group_id: group.to_string(),
            member_id: member.map(|(id, _)| id.to_string()).unwrap_or_default(),
            generation_id: member.map_or(-1, |(_, epoch)| epoch),
            topics: commit_topics(offsets)?,
        };
        let wait = self.options().request_slack * 3;
        self.at_coordinator(Coordinator::Group, group, |addr| {
            let req = req.clone();
            async move {
                let mut stub = self.groups_stub(&addr)?;
                let resp = answer_within(&addr, wait, stub.commit_offsets(req)).await?;
                commit_answer(resp)
            }
        })
        .await
    }

    /// Commits `offsets` of group `group` inside the transaction of `transactional_id`'s
    /// `producer` (id, epoch), as member `member` (id, epoch) or without membership: pending
    /// until the transaction ends (Kafka's TxnOffsetCommit). Under transactions v2 (this
    /// client's) the group joins the transaction with this request; no
    /// [`Client::add_offsets_to_transaction`] is needed first.
    pub async fn txn_commit_offsets(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
        member: Option<(&str, i32)>,
        offsets: &[(TopicPartition, u64, String)],
    ) -> Result<()> {
        let req = TxnCommitOffsetsRequest {
            transactional_id: transactional_id.to_string(),
            group_id: group.to_string(),
            producer_id: producer.0,
            producer_epoch: i32::from(producer.1),
            member_id: member.map(|(id, _)| id.to_string()).unwrap_or_default(),
            generation_id: member.map_or(-1, |(_, epoch)| epoch),
            topics: commit_topics(offsets)?,
            transaction_version: crate::client::TRANSACTION_VERSION,
        };
        let wait = self.options().request_slack * 3;
        // Adding the group waits for the producer's previous transaction to complete; a long
        // completion is answered CONCURRENT_TRANSACTIONS, and retried.
        self.while_concurrent(|| {
            self.at_coordinator(Coordinator::Group, group, |addr| {
                let req = req.clone();
                async move {
                    let mut stub = self.groups_stub(&addr)?;
                    let resp = answer_within(&addr, wait, stub.txn_commit_offsets(req)).await?;
                    commit_answer(resp)
                }
            })
        })
        .await
    }

    /// One `ConsumerGroupHeartbeat` at the group's coordinator (following `NOT_COORDINATOR`,
    /// retrying while it loads, within the retry budget). Member errors (`FENCED_MEMBER_EPOCH`,
    /// `UNKNOWN_MEMBER_ID`, …) are returned for the caller to act on.
    pub async fn consumer_group_heartbeat(
        &self,
        req: ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse> {
        let group = req.group_id.clone();
        // A held heartbeat (`wait_ms`) is answered that much later.
        let wait = self.options().request_slack * 3 + Duration::from_millis(u64::from(req.wait_ms.unwrap_or(0)));
        self.at_group_coordinator_within(&group, req, wait, |mut stub, req| async move {
            stub.consumer_group_heartbeat(req).await
        })
        .await
    }

    /// One `JoinGroup` of a classic group at its coordinator (following `NOT_COORDINATOR`,
    /// retrying while it loads or is unavailable, within the retry budget); the answer comes
    /// when the join phase completes, so each attempt waits up to `wait` (the member's rebalance
    /// timeout and some). Member errors — `MEMBER_ID_REQUIRED` with the id to join with in
    /// `member_id`, `UNKNOWN_MEMBER_ID`, `INCONSISTENT_GROUP_PROTOCOL` — come back in the answer
    /// for the caller to act on.
    pub async fn join_group(&self, req: JoinGroupRequest, wait: Duration) -> Result<JoinGroupResponse> {
        let group = req.group_id.clone();
        self.at_groups(&group, req, wait, true, |mut stub, req| async move { stub.join_group(req).await }).await
    }

    /// One `SyncGroup` of a classic group at its coordinator (as [`Client::join_group`]): the
    /// member's assignment, answered once the generation's assignments are stored.
    pub async fn sync_group(&self, req: SyncGroupRequest, wait: Duration) -> Result<SyncGroupResponse> {
        let group = req.group_id.clone();
        self.at_groups(&group, req, wait, true, |mut stub, req| async move { stub.sync_group(req).await }).await
    }

    /// One heartbeat of a classic member at its group's coordinator (as
    /// [`Client::join_group`]): `REBALANCE_IN_PROGRESS`, `ILLEGAL_GENERATION` and
    /// `UNKNOWN_MEMBER_ID` come back in the answer.
    pub async fn group_heartbeat(&self, req: GroupHeartbeatRequest) -> Result<GroupHeartbeatResponse> {
        let group = req.group_id.clone();
        let wait = self.options().request_slack * 3;
        self.at_groups(&group, req, wait, true, |mut stub, req| async move { stub.group_heartbeat(req).await }).await
    }

    /// Removes members of a classic group (as [`Client::join_group`]).
    pub async fn leave_group(&self, req: LeaveGroupRequest) -> Result<LeaveGroupResponse> {
        let group = req.group_id.clone();
        let wait = self.options().request_slack * 3;
        self.at_groups(&group, req, wait, true, |mut stub, req| async move { stub.leave_group(req).await }).await
    }

    /// A group's state, members and committed offsets, from its coordinator
    /// (`GROUP_ID_NOT_FOUND` for a group with neither members nor offsets).
    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let req = DescribeGroupRequest { group_id: group.to_string() };
        self.at_group_coordinator(group, req, |mut stub, req| async move { stub.describe_group(req).await }).await
    }

    /// Deletes `group` — its committed offsets and membership record — if it has no members
    /// (`GROUP_NOT_EMPTY` otherwise).
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let req = DeleteGroupRequest { group_id: group.to_string() };
        self.at_group_coordinator(group, req, |mut stub, req| async move { stub.delete_group(req).await }).await?;
        Ok(())
    }

    /// Deletes `group`'s committed offsets of `partitions` (`GROUP_SUBSCRIBED_TO_TOPIC` while a
    /// member subscribes to one of their topics).
    pub async fn delete_offsets(&self, group: &str, partitions: &[TopicPartition]) -> Result<()> {
        let req = DeleteOffsetsRequest { group_id: group.to_string(), topics: by_topic(partitions) };
        self.at_group_coordinator(group, req, |mut stub, req| async move { stub.delete_offsets(req).await }).await?;
        Ok(())
    }

    /// Sends `req` with `call` to `group`'s coordinator (following `NOT_COORDINATOR`, retrying
    /// while it loads, within the retry budget); a whole-request error code is returned as the
    /// error.
    async fn at_group_coordinator<Req, Resp, F, Fut>(&self, group: &str, req: Req, call: F) -> Result<Resp>
    where
        Req: Clone,
        Resp: GroupsStatus,
        F: Fn(GroupsClient<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        self.at_group_coordinator_within(group, req, self.options().request_slack * 3, call).await
    }

    /// [`Client::at_group_coordinator`], each attempt answered within `wait`.
    async fn at_group_coordinator_within<Req, Resp, F, Fut>(
        &self,
        group: &str,
        req: Req,
        wait: Duration,
        call: F,
    ) -> Result<Resp>
    where
        Req: Clone,
        Resp: GroupsStatus,
        F: Fn(GroupsClient<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        self.at_groups(group, req, wait, false, call).await
    }

    /// Runs `call` at `group`'s coordinator (following `NOT_COORDINATOR`, retrying while it
    /// loads or is unavailable, within the retry budget), each attempt answered within `wait`.
    /// An answer with any other code is an error, or — with `member_errors_answered`, as the
    /// classic protocol's calls ask — the caller's answer (`MEMBER_ID_REQUIRED` carries the id to
    /// join with).
    async fn at_groups<Req, Resp, F, Fut>(
        &self,
        group: &str,
        req: Req,
        wait: Duration,
        member_errors_answered: bool,
        call: F,
    ) -> Result<Resp>
    where
        Req: Clone,
        Resp: GroupsStatus,
        F: Fn(GroupsClient<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let call = &call;
        self.at_coordinator(Coordinator::Group, group, |addr| {
            let req = req.clone();
            async move {
                let stub = self.groups_stub(&addr)?;
                let resp = answer_within(&addr, wait, call(stub, req)).await?;
                let (code, message, hint) = resp.status();
                Ok(match check(code, message, hint) {
                    Ok(()) => Ok(resp),
                    Err((e, hint)) if !member_errors_answered || coordinator_retriable(&e) => Err((e, hint)),
                    Err(_) => Ok(resp),
                })
            }
        })
        .await
    }

    /// Every group of the cluster, by id: each node lists the groups of the `__consumer_offsets`
    /// partitions it leads, so every partition's leader is asked.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        // Right after `__consumer_offsets` is created its partitions elect leaders one by one.
        self.while_code(ErrorCode::CoordinatorNotAvailable, || self.list_groups_once()).await
    }

    async fn list_groups_once(&self) -> Result<Vec<GroupListing>> {
        let offsets = self.describe_topic(CONSUMER_OFFSETS_TOPIC).await?;
        let leaders: std::collections::BTreeSet<u64> = offsets.partitions.iter().filter_map(|p| p.leader).collect();
        if offsets.partitions.iter().any(|p| p.leader.is_none()) {
            return Err(error::server(
                ErrorCode::CoordinatorNotAvailable as i32,
                format!("a partition of {CONSUMER_OFFSETS_TOPIC} has no leader right now; retry"),
            ));
        }
        let nodes = self.describe_cluster().await?.nodes;
        let wait = self.options().request_slack * 3;
        let mut groups: BTreeMap<String, GroupListing> = BTreeMap::new();
        for node in leaders {
            let addr = nodes
                .iter()
                .find(|n| n.node_id == node && !n.address.is_empty())
                .map(|n| n.address.clone())
                .ok_or_else(|| Error::Transport(format!("node {node} has no known address")))?;
            let mut stub = self.groups_stub(&addr)?;
            let resp = answer_within(&addr, wait, stub.list_groups(ListGroupsRequest {})).await?;
            if resp.error_code != ErrorCode::None as i32 {
                return Err(error::server(resp.error_code, resp.error_message));
            }
            for g in resp.groups {
                groups.insert(g.group_id.clone(), g);
            }
        }
        Ok(groups.into_values().collect())
    }

    /// The offsets `group` committed for `partitions` (`None` where it committed none). An
    /// offset a transaction has committed but not yet ended is not shown: the last one before.
    pub async fn committed_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        let answers = self.fetch_committed(group, partitions, false).await?;
        answers.into_iter().map(|(tp, c)| c.settled().map(|c| (tp, c))).collect()
    }

    /// [`Client::committed_offsets`] for a consumer taking `partitions` over at
    /// `read_committed`: while a transaction holds a commit of one of them pending, the answer
    /// would be an offset about to move, so it asks again (`UNSTABLE_OFFSET_COMMIT`, KIP-447)
    /// within the retry budget.
    pub async fn stable_committed_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        self.while_code(ErrorCode::UnstableOffsetCommit, || async {
            let answers = self.fetch_committed(group, partitions, true).await?;
            answers.into_iter().map(|(tp, c)| c.settled().map(|c| (tp, c))).collect()
        })
        .await
    }

    /// One ask for the stable committed offsets of `partitions`: a partition whose offsets a
    /// transaction holds pending is [`StableCommit::Pending`], the others are answered.
    pub(crate) async fn stable_committed_offsets_once(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, StableCommit>> {
        self.fetch_committed(group, partitions, true).await
    }

    async fn fetch_committed(
        &self,
        group: &str,
        partitions: &[TopicPartition],
        require_stable: bool,
    ) -> Result<BTreeMap<TopicPartition, StableCommit>> {
        let req = FetchOffsetsRequest { group_id: group.to_string(), topics: by_topic(partitions), require_stable };
        let wait = self.options().request_slack * 3;
        self.at_coordinator(Coordinator::Group, group, |addr| {
            let req = req.clone();
            async move {
                let mut stub = self.groups_stub(&addr)?;
                let resp = answer_within(&addr, wait, stub.fetch_offsets(req)).await?;
                if let Err(f) = check(resp.error_code, resp.error_message, resp.coordinator) {
                    return Ok(Err(f));
                }
                let mut out = BTreeMap::new();
                for t in resp.topics {
                    for p in t.partitions {
                        let tp = TopicPartition::new(t.topic.clone(), p.partition);
                        if p.error_code == ErrorCode::UnstableOffsetCommit as i32 {
                            out.insert(tp, StableCommit::Pending(p.error_message));
                            continue;
                        }
                        if p.error_code != ErrorCode::None as i32 {
                            return Err(crate::error::server(p.error_code, p.error_message));
                        }
                        let committed = u64::try_from(p.offset).ok().map(|offset| CommittedOffset {
                            offset,
                            metadata: p.metadata,
                            commit_time_ms: p.commit_time_ms,
                        });
                        out.insert(tp, StableCommit::Settled(committed));
                    }
                }
                Ok(Ok(out))
            }
        })
        .await
    }

    /// The producer id and epoch of transactional id `transactional_id`, from its coordinator:
    /// the same producer id as its previous instance, one epoch up — which fences that instance
    /// (its batches are refused `INVALID_PRODUCER_EPOCH`). `timeout_ms` is the transaction
    /// timeout to record (0: 60 s).
    pub async fn init_transactional_producer(&self, transactional_id: &str, timeout_ms: u32) -> Result<(i64, i16)> {
        let req = InitProducerIdRequest {
            transactional_id: transactional_id.to_string(),
            transaction_timeout_ms: timeout_ms,
            current: None,
        };
        let wait = self.options().request_slack * 3;
        self.at_coordinator(Coordinator::Transaction, transactional_id, |addr| {
            let req = req.clone();
            async move {
                let mut stub = self.records_stub(&addr)?;
                let r = answer_within(&addr, wait, stub.init_producer_id(req)).await?;
                if let Err(f) = check(r.error_code, r.error_message, r.coordinator) {
                    return Ok(Err(f));
                }
                let epoch = i16::try_from(r.producer_epoch)
                    .map_err(|_| Error::Transport(format!("producer epoch {} beyond 16 bits", r.producer_epoch)))?;
                Ok(Ok((r.producer_id, epoch)))
            }
        })
        .await
    }
}

/// Whether `e` is a refusal the coordinator itself decided (a pending offset commit, a busy
/// transaction, a fenced producer or member…): it says nothing about where the coordinator is,
/// so the cached address stays. Anything else — it moved, did not answer, timed out (a leader
/// cut off from its majority still answers reads but times out writes), failed — forgets it.
fn decided_by_the_coordinator(e: &Error) -> bool {
    matches!(e, Error::Server { .. })
        && matches!(
            e.code(),
            Some(
                ErrorCode::UnstableOffsetCommit
                    | ErrorCode::ConcurrentTransactions
                    | ErrorCode::CoordinatorLoadInProgress
                    | ErrorCode::ProducerFenced
                    | ErrorCode::InvalidProducerEpoch
                    | ErrorCode::InvalidProducerIdMapping
                    | ErrorCode::InvalidTxnState
                    | ErrorCode::UnknownMemberId
                    | ErrorCode::FencedMemberEpoch
                    | ErrorCode::StaleMemberEpoch
                    | ErrorCode::RebalanceInProgress
                    | ErrorCode::GroupIdNotFound
            )
        )
}

/// True for the errors a coordinator request is asked again after: the coordinator moved,
/// is loading, is not available, or could not be reached.
pub(crate) fn coordinator_retriable(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress | ErrorCode::CoordinatorNotAvailable)
    ) || matches!(e, Error::Transport(_))
}

//! Incoming Raft traffic: the `RaftTransport` gRPC service, dispatching by group id.
//!
//! Before a message reaches openraft, the node ids it names must be the caller's own
//! ([`rill_tls::Caller`]): an append's and a snapshot's leader, a vote's candidate, a batch's and
//! a quiescence request's `from_node`. A node with a valid certificate can therefore speak only
//! for itself — it cannot keep a dead leader "alive" or vote in another node's name. Snapshot
//! chunks are bounded first ([`crate::intake`]).

use std::sync::Arc;

use rill_proto::internal::raft_transport_server::RaftTransport;
use rill_proto::internal::{QuiesceRequest, QuiesceResponse, RaftBatch, RaftMessage};
use tonic::{Request, Response, Status};

use futures::stream::{FuturesUnordered, StreamExt};
use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest};
use openraft::Vote;
use rill_tls::{Caller, Impersonation};

use crate::codec::Wire;
use crate::intake::{Admitted, Chunk, SnapshotIntake};
use crate::multi::MultiRaft;
use crate::types::{GroupId, NodeId, Raft, TypeConfig};

/// Serves Raft RPCs for every group hosted by a [`MultiRaft`].
#[derive(Clone)]
pub struct RaftService {
    multi: Arc<MultiRaft>,
    /// The listener requires node certificates (false: the insecure setting, the simulation).
    secure: bool,
    intake: Arc<SnapshotIntake>,
}

impl RaftService {
    /// A service over `multi`; `secure` when the listener requires node certificates, so every
    /// request's node ids are checked against the caller's certificate.
    pub fn new(multi: Arc<MultiRaft>, secure: bool) -> Self {
        Self { multi, secure, intake: Arc::default() }
    }

    fn caller<T>(&self, request: &Request<T>) -> Caller {
        Caller::of(request, self.secure)
    }

    /// Remembers that the group's leader reached this replica (an append it accepted the vote
    /// of), which is what openraft's leader lease counts from.
    fn note_leader_contact(&self, group: GroupId, answer: &Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>) {
        if matches!(answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            self.multi.transport().record_leader_contact(group);
        }
    }

    /// Counts a snapshot chunk from the group's leader as hearing from it, as an append would.
    ///
    /// openraft 0.9 refreshes a follower's leader lease and election timer on appends and on a
    /// *finished* snapshot, not on the chunks before it. A transfer longer than the lease (a
    /// snapshot carrying hundreds of MB of retained records) would therefore see the follower
    /// stand for election mid-transfer, by openraft's timer or by Rill's faster failover check;
    /// the leader, seeing the higher term, steps down and starts the transfer over, so a large
    /// snapshot might never arrive. An append with no entries and no previous log id (always
    /// consistent with any log, it appends and commits nothing) carrying the chunk's vote is
    /// exactly "the leader was heard": openraft touches the vote's time, and the contact is
    /// recorded for the failover check.
    ///
    /// The contact is recorded before openraft answers: while a snapshot installs, openraft
    /// postpones its answers to appends until the installation ends, though it touches the
    /// vote's time as soon as it handles each one.
    async fn hear_leader_through_chunk(&self, group: GroupId, raft: &Raft, vote: Vote<NodeId>) {
        self.note_current_leader(group, raft, vote);
        let answer = raft.append_entries(heard_from(vote)).await;
        self.note_leader_contact(group, &answer);
    }

    /// Records contact with the leader of `group` when `vote` (a chunk's, checked against its
    /// sender) is at least the vote this replica holds, so a deposed leader is not counted.
    /// (The vote read is openraft's metrics copy, one pass of its loop behind: a stale leader's
    /// chunk that races this replica's vote for a newer candidate can count once, which delays
    /// this replica's own failover check by at most one lease.)
    fn note_current_leader(&self, group: GroupId, raft: &Raft, vote: Vote<NodeId>) {
        let current = raft.metrics().borrow().vote;
        if vote >= current {
            self.multi.transport().record_leader_contact(group);
        }
    }

    /// One append-entries, alone or from a heartbeat batch, sent by `caller`.
    async fn append(&self, caller: &Caller, msg: RaftMessage) -> Result<RaftMessage, Status> {
        let raft = self.group(msg.group_id)?;
        let req: AppendEntriesRequest<TypeConfig> = decode(&msg)?;
        check_sender(caller, &req.vote, "an append's leader")?;
        if let Some(q) = self.multi.quiescence(msg.group_id) {
            q.on_append(&req);
        }
        let answer = raft.append_entries(req).await;
        self.note_leader_contact(msg.group_id, &answer);
        reply(msg.group_id, &answer).map(Response::into_inner)
    }

    /// Wakes group `id` if it is quiescent here: a vote or a snapshot means something changes.
    fn wake(&self, id: GroupId) {
        if let Some(q) = self.multi.quiescence(id) {
            q.wake();
        }
    }

    fn group(&self, id: u64) -> Result<Raft, Status> {
        self.multi
            .group(id)
            .ok_or_else(|| Status::not_found(format!("group {id} is not hosted on node {}", self.multi.node_id())))
    }
}

/// An append with no entries and no previous log id: consistent with any log, it appends and
/// commits nothing, and tells openraft that the leader holding `vote` was heard.
fn heard_from(vote: Vote<NodeId>) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest { vote, prev_log_id: None, entries: Vec::new(), leader_commit: None }
}

/// `Ok` when `caller` may speak for the node `vote` names (none named: only an unverified
/// caller, as node id 0 is never a node).
fn check_sender(caller: &Caller, vote: &Vote<NodeId>, what: &str) -> Result<(), Status> {
    caller.check(vote.leader_id().voted_for().unwrap_or(0), what).map_err(refused)
}

/// The wire answer to a message naming a node other than its sender.
fn refused(e: Impersonation) -> Status {
    Status::permission_denied(e.to_string())
}

fn decode<T: Wire>(msg: &RaftMessage) -> Result<T, Status> {
    T::decode(msg.payload.clone()).map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))
}

fn reply<T: Wire>(group_id: u64, answer: &T) -> Result<Response<RaftMessage>, Status> {
    Ok(Response::new(RaftMessage { group_id, payload: answer.encode(), error: String::new() }))
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    async fn append_entries(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let caller = self.caller(&request);
        self.append(&caller, request.into_inner()).await.map(Response::new)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let caller = self.caller(&request);
        let msg = request.into_inner();
        let raft = self.group(msg.group_id)?;
        let req: VoteRequest<NodeId> = decode(&msg)?;
        check_sender(&caller, &req.vote, "a vote's candidate")?;
        if let Some(q) = self.multi.quiescence(msg.group_id) {
            if let Some(refused) = q.refuse_vote(&req, self.multi.leader_lease()) {
                return reply(msg.group_id, &Ok::<_, RaftError<NodeId>>(refused));
            }
            q.wake();
        }
        let (term, candidate_log) = (req.vote.leader_id().term, req.last_log_id);
        let answer = raft.vote(req).await;
        if let Ok(resp) = &answer {
            if !resp.vote_granted && resp.last_log_id > candidate_log {
                self.multi.note_refused_shorter_candidate(msg.group_id, term);
            }
        }
        reply(msg.group_id, &answer)
    }

    async fn heartbeats(&self, request: Request<RaftBatch>) -> Result<Response<RaftBatch>, Status> {
        let caller = self.caller(&request);
        let batch = request.into_inner();
        // A forged `from_node` would keep a dead node "alive" for every quiescent group.
        caller.check(batch.from_node, "a heartbeat batch's from_node").map_err(refused)?;
        // A node whose storage failed answers no ping: its peers must count it as down.
        if let Some(reason) = self.multi.storage_failure() {
            return Err(Status::unavailable(format!("node {}'s storage failed: {reason}", self.multi.node_id())));
        }
        let transport = self.multi.transport();
        // A ping is answered with this node's leadership report when the sender's is stale.
        let leadership = if batch.messages.is_empty() {
            transport.directory().report_for(batch.known_leadership_version)
        } else {
            None
        };
        // Any batch, an empty one (a ping) included, proves the sender's node alive.
        if batch.from_node != 0 {
            transport.liveness().heard(batch.from_node, batch.incarnation);
        }
        // Every group's heartbeat is handled concurrently: one busy group does not hold up the
        // others beyond the answer to this batch.
        let caller = &caller;
        let answers = batch.messages.into_iter().map(|msg| async move {
            let group_id = msg.group_id;
            self.append(caller, msg).await.unwrap_or_else(|s| RaftMessage {
                group_id,
                payload: Default::default(),
                error: s.message().to_string(),
            })
        });
        let messages = futures::future::join_all(answers).await;
        Ok(Response::new(RaftBatch {
            messages,
            from_node: transport.node_id(),
            incarnation: transport.liveness().incarnation(),
            known_leadership_version: 0,
            leadership,
        }))
    }

    async fn quiesce(&self, request: Request<QuiesceRequest>) -> Result<Response<QuiesceResponse>, Status> {
        let caller = self.caller(&request);
        let request = request.into_inner();
        caller.check(request.from_node, "a quiescence request's from_node").map_err(refused)?;
        let accepted = request
            .groups
            .iter()
            .filter(|ask| self.multi.quiescence(ask.group_id).is_some_and(|q| q.follow(request.from_node, ask)))
            .map(|ask| ask.group_id)
            .collect();
        Ok(Response::new(QuiesceResponse { accepted }))
    }

    async fn install_snapshot(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let caller = self.caller(&request);
        let msg = request.into_inner();
        let group = msg.group_id;
        let raft = self.group(group)?;
        let req: InstallSnapshotRequest<TypeConfig> = decode(&msg)?;
        check_sender(&caller, &req.vote, "a snapshot's leader")?;
        let chunk = Chunk {
            vote: &req.vote,
            snapshot_id: &req.meta.snapshot_id,
            offset: req.offset,
            len: req.data.len(),
            done: req.done,
        };
        let admitted = self.intake.admit(group, chunk).map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.wake(group);
        self.hear_leader_through_chunk(group, &raft, req.vote).await;
        if admitted == Admitted::Repeated {
            // Applied already; answer as openraft did (its vote), without applying it again.
            let vote = raft.metrics().borrow().vote;
            return reply(
                group,
                &Ok::<_, openraft::error::RaftError<NodeId, openraft::error::InstallSnapshotError>>(
                    openraft::raft::InstallSnapshotResponse { vote },
                ),
            );
        }
        let (done, vote) = (req.done, req.vote);
        // The last chunk's answer waits for the installation, which copies every carried
        // entry (seconds for hundreds of MB). The leader waits for that answer and sends the
        // follower nothing meanwhile, so the wait counts as hearing from it, every heartbeat
        // interval: the contact is recorded for the failover check, and an empty append
        // touches openraft's vote time (its election timer). openraft answers those appends
        // only once the installation ends, so each tick sends a new one rather than waiting
        // for the last; the unanswered ones are dropped with the loop. A leader that dies
        // during an installation is noticed when it ends.
        let install = raft.install_snapshot(req);
        tokio::pin!(install);
        let mut keep_alive = FuturesUnordered::new();
        let answer = loop {
            tokio::select! {
                biased;
                answer = &mut install => break answer,
                Some(heard) = keep_alive.next(), if !keep_alive.is_empty() => self.note_leader_contact(group, &heard),
                () = rill_rt::sleep(self.multi.heartbeat_interval()) => {
                    self.note_current_leader(group, &raft, vote);
                    keep_alive.push(raft.append_entries(heard_from(vote)));
                }
            }
        };
        if answer.is_err() {
            // openraft refused the chunk: the leader starts the transfer over.
            self.intake.forget(group);
        }
        if done {
            // openraft has installed the snapshot (and purged for it) or decided not to:
            // either way no purge is for it any more (see `rill_raft::log_store`).
            if let Some(log) = self.multi.log(group) {
                log.forget_expected_install();
            }
        }
        reply(group, &answer)
    }
}
